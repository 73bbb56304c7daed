"""The chunked torch path (``flashtile.reference.tiled``) against the float64 reference.

Rule: ``err(tiled, fp64 ref) <= 2 * err(torch reference in the input dtype, fp64 ref) + floor``
for out, lse, dq, dk and dv (``tests/utils.py::assert_within_budget``).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flashtile.autograd import attention
from flashtile.params import AttentionParams
from flashtile.reference import tiled
from flashtile.reference.dense import attention_reference, visible_mask
from flashtile.reference.philox import dropout_keep

from utils import assert_within_budget, shape_id

# fp32 floor: where torch's fp32 gradient happens to be exact (one visible key: dS cancels to 0)
# the budget is the floor alone, and our differently-ordered sums leave ~1e-6 there.
FLOOR = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 1e-3, torch.bfloat16: 1e-2}


# --------------------------------------------------------------------------------------------
# helpers


def _inputs(b, sq, sk, hq, hkv, d, dv=None, dtype=torch.float32):
    dv = d if dv is None else dv
    q = torch.randn(b, sq, hq, d, dtype=dtype)
    k = torch.randn(b, sk, hkv, d, dtype=dtype)
    v = torch.randn(b, sk, hkv, dv, dtype=dtype)
    return q, k, v


def _full_dropout_keep(params, b, hq, sq, sk):
    """The whole ``(b, hq, sq, sk)`` keep-mask, for the materialising reference."""
    return dropout_keep(params, torch.arange(b)[:, None, None, None],
                        torch.arange(hq)[None, :, None, None], torch.arange(sq)[:, None],
                        torch.arange(sk)[None, :], hq, sq, sk)


def _reference(q, k, v, dout, params, keep, dtype):
    """Reference out, lse and gradients, with leaves cast to ``dtype``."""
    leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    out, lse = attention_reference(*leaves, params, dropout_keep=keep, dtype=dtype)
    grads = torch.autograd.grad(out, leaves, dout.to(dtype))
    return (out.detach(), lse, *grads)


def _check(q, k, v, params, chunk_size, floor=None):
    """Run forward + backward of the tiled path and hold all five results to the budget."""
    b, sq, hq, _ = q.shape
    sk = k.shape[1]
    floor = FLOOR[q.dtype] if floor is None else floor
    keep = _full_dropout_keep(params, b, hq, sq, sk) if params.dropout_p > 0 else None
    out, lse = tiled.forward(q, k, v, params, chunk_size)
    dout = torch.randn_like(out)
    grads = tiled.backward(dout, q, k, v, out, lse, params, chunk_size)
    ours = (out, lse, *grads)

    assert lse.dtype == torch.float32
    assert [x.dtype for x in (out, *grads)] == [q.dtype, q.dtype, k.dtype, v.dtype]
    assert out.shape == (b, sq, hq, v.shape[-1]) and lse.shape == (b, hq, sq)
    assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]

    ref64 = _reference(q, k, v, dout, params, keep, torch.float64)
    same = _reference(q, k, v, dout, params, keep, q.dtype)
    for name, x, r, s in zip(("out", "lse", "dq", "dk", "dv"), ours, ref64, same):
        assert_within_budget(name, x, r, s, floor)
    return ours


def _params(d, **features):
    return AttentionParams(softmax_scale=1.0 / math.sqrt(d), **features)


# --------------------------------------------------------------------------------------------
# shapes: GQA, sq != sk both ways, dv != d, chunk sizes that do not divide sk

SHAPES = [
    (1, 64, 64, 4, 4, 16, None),
    (2, 13, 29, 4, 2, 24, None),
    (3, 37, 11, 4, 1, 40, None),    # sq > sk: with causal, rows 0..25 see no key
    (1, 40, 33, 4, 4, 64, 24),      # dv != d
    (2, 1, 50, 4, 2, 16, 40),       # one query token (decode-like)
]


@pytest.mark.parametrize("chunk_size", [7, 16])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=[shape_id(*s) for s in SHAPES])
def test_shapes_fp32(shape, causal, chunk_size):
    b, sq, sk, hq, hkv, d, dv = shape
    q, k, v = _inputs(*shape)
    params = _params(d, causal=causal, window_right=0 if causal else -1)
    _check(q, k, v, params, chunk_size)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES[1:4], ids=[shape_id(*s) for s in SHAPES[1:4]])
def test_shapes_fp64(shape, causal):
    """float64 stays at float64 accuracy (the backward recovers an exact lse)."""
    q, k, v = _inputs(*shape, dtype=torch.float64)
    params = _params(shape[5], causal=causal, window_right=0 if causal else -1)
    _check(q, k, v, params, chunk_size=7)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_half_inputs(dtype):
    q, k, v = _inputs(2, 19, 23, 4, 2, 16, dtype=dtype)
    _check(q, k, v, _params(16, causal=True, window_right=0), chunk_size=8)


def test_strided_inputs():
    """Q/K/V as views into one packed tensor (last dim contiguous, nothing else)."""
    b, s, h, d = 2, 21, 4, 16
    qkv = torch.randn(b, s, 3, h, d)
    q, k, v = qkv.unbind(dim=2)
    assert not q.is_contiguous()
    _check(q, k, v, _params(d, causal=True, window_right=0), chunk_size=5)


# --------------------------------------------------------------------------------------------
# features, alone and combined


def _relpos_table(hq, sq, sk):
    return torch.randn(hq, sq + sk - 1)


def _score_mod_relpos(hq, sq, sk):
    table = _relpos_table(hq, sq, sk)          # captured tensor, read at (h, i - j)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + table[h, q_idx - kv_idx + sk - 1]
    return score_mod


def _score_mod_nonlinear(hq, sq, sk):
    table = _relpos_table(hq, sq, sk)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score * (1 + 0.3 * torch.tanh(score)) + 0.5 * table[h, q_idx - kv_idx + sk - 1]
    return score_mod


def _mask_mod(b, h, q_idx, kv_idx):
    return (q_idx * 7 + kv_idx * 3 + h + b) % 5 != 0


FEATURES = {
    "causal": lambda b, hq, sq, sk: dict(causal=True, window_right=0),
    "causal-topleft": lambda b, hq, sq, sk: dict(causal=True, window_right=0, bottom_right=False),
    "window-3-2": lambda b, hq, sq, sk: dict(window_left=3, window_right=2),
    "window-5-inf": lambda b, hq, sq, sk: dict(window_left=5),
    "window-inf-4": lambda b, hq, sq, sk: dict(window_right=4),
    "window-0-0": lambda b, hq, sq, sk: dict(window_left=0, window_right=0),
    "window-4-causal": lambda b, hq, sq, sk: dict(causal=True, window_left=4, window_right=0),
    "softcap": lambda b, hq, sq, sk: dict(softcap=1.5),
    "alibi-h": lambda b, hq, sq, sk: dict(alibi_slopes=torch.rand(hq)),
    "alibi-bh": lambda b, hq, sq, sk: dict(alibi_slopes=torch.rand(b, hq)),
    "score_mod-relpos": lambda b, hq, sq, sk: dict(score_mod=_score_mod_relpos(hq, sq, sk)),
    "score_mod-nonlinear": lambda b, hq, sq, sk: dict(score_mod=_score_mod_nonlinear(hq, sq, sk)),
    "mask_mod": lambda b, hq, sq, sk: dict(mask_mod=_mask_mod),
    "bias-bool-11qk": lambda b, hq, sq, sk: dict(attn_bias=torch.rand(1, 1, sq, sk) > 0.3),
    "bias-float-b11k": lambda b, hq, sq, sk: dict(attn_bias=torch.randn(b, 1, 1, sk)),
    "bias-float-hq1": lambda b, hq, sq, sk: dict(attn_bias=torch.randn(hq, sq, 1)),
    "bias-float-expanded": lambda b, hq, sq, sk: dict(
        attn_bias=torch.randn(1, hq, 1, sk).expand(b, hq, sq, sk)),
    "bias-float-full": lambda b, hq, sq, sk: dict(attn_bias=torch.randn(b, hq, sq, sk)),
    "dropout": lambda b, hq, sq, sk: dict(dropout_p=0.25, seed=7, offset=2**35 + 3),
    "dropout-causal-softcap": lambda b, hq, sq, sk: dict(
        dropout_p=0.4, seed=123, offset=11, causal=True, window_right=0, softcap=2.0),
    "window-softcap-alibi-scoremod": lambda b, hq, sq, sk: dict(
        window_left=6, window_right=3, softcap=1.0, alibi_slopes=torch.rand(hq),
        score_mod=_score_mod_nonlinear(hq, sq, sk)),
    "everything": lambda b, hq, sq, sk: dict(
        causal=True, window_left=9, window_right=0, softcap=2.5, alibi_slopes=torch.rand(b, hq),
        score_mod=_score_mod_relpos(hq, sq, sk), mask_mod=_mask_mod,
        attn_bias=torch.randn(b, 1, sq, sk), dropout_p=0.2, seed=99, offset=2**33),
}

FEATURE_SHAPES = [(2, 23, 37, 4, 2, 24, 16), (2, 37, 23, 4, 1, 16, 16)]


@pytest.mark.parametrize("shape", FEATURE_SHAPES, ids=[shape_id(*s) for s in FEATURE_SHAPES])
@pytest.mark.parametrize("feature", list(FEATURES))
def test_features(feature, shape):
    b, sq, sk, hq, hkv, d, dv = shape
    q, k, v = _inputs(*shape)
    params = _params(d, **FEATURES[feature](b, hq, sq, sk))
    _check(q, k, v, params, chunk_size=7)


@pytest.mark.parametrize("feature", ["everything", "score_mod-nonlinear", "bias-bool-11qk"])
def test_features_fp64(feature):
    shape = (2, 17, 26, 4, 2, 16, 8)
    b, sq, sk, hq, hkv, d, dv = shape
    q, k, v = _inputs(*shape, dtype=torch.float64)
    _check(q, k, v, _params(d, **FEATURES[feature](b, hq, sq, sk)), chunk_size=6)


def test_dropout_depends_on_seed_and_offset():
    q, k, v = _inputs(1, 16, 16, 2, 2, 16)
    base = _params(16, dropout_p=0.5, seed=1, offset=0)
    out, _ = tiled.forward(q, k, v, base, 5)
    assert torch.equal(out, tiled.forward(q, k, v, base, 5)[0])     # replayable
    assert not torch.equal(out, tiled.forward(q, k, v, base.with_(seed=2), 5)[0])
    assert not torch.equal(out, tiled.forward(q, k, v, base.with_(offset=1), 5)[0])


# --------------------------------------------------------------------------------------------
# rows that see no key


def test_rows_that_see_no_key():
    """Causal with sq > sk hides rows 0..5 everywhere; the mask_mod also hides row 9 in heads
    1..3. Those rows: out exactly 0, lse -inf, zero dq; no NaN anywhere."""
    b, sq, sk, hq, hkv, d = 2, 11, 5, 4, 2, 16
    q, k, v = _inputs(b, sq, sk, hq, hkv, d)

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx != 9) | (h == 0)

    params = _params(d, causal=True, window_right=0, mask_mod=mask_mod, dropout_p=0.1, seed=3)
    out, lse, dq, dk, dv = _check(q, k, v, params, chunk_size=2)
    dead = torch.zeros(b, hq, sq, dtype=torch.bool)
    dead[:, :, :6] = True
    dead[:, 1:, 9] = True
    dead_bshq = dead.transpose(1, 2)                                 # (b, sq, hq)
    assert (out[dead_bshq] == 0).all()
    assert (lse[dead] == float("-inf")).all() and torch.isfinite(lse[~dead]).all()
    assert (dq[dead_bshq] == 0).all()
    for t in (out, dq, dk, dv):
        assert torch.isfinite(t).all()


def test_everything_masked():
    q, k, v = _inputs(2, 9, 12, 2, 1, 16)
    params = _params(16, mask_mod=lambda b, h, i, j: (i < 0) & (j < 0), softcap=3.0)
    out, lse = tiled.forward(q, k, v, params, 4)
    assert (out == 0).all() and (lse == float("-inf")).all()
    grads = tiled.backward(torch.randn_like(out), q, k, v, out, lse, params, 4)
    assert all((g == 0).all() for g in grads)


# --------------------------------------------------------------------------------------------
# the chunk loop: which chunks, how much memory


def test_key_chunks_docstring_example():
    params = _params(16, window_left=1, window_right=0)
    assert tiled.key_chunks(params, 4, 10, 3) == [(3, 6), (6, 9), (9, 10)]


def test_key_chunks_are_exactly_the_live_chunks():
    """Brute force over small bands: a chunk is visited iff some (i, j) in it is visible."""
    grid = itertools.product([1, 4, 9], [1, 5, 12], [-1, 0, 2], [-1, 0, 3], [True, False],
                             [1, 3, 4])
    for sq, sk, left, right, bottom_right, chunk in grid:
        params = _params(16, window_left=left, window_right=right, bottom_right=bottom_right)
        vis = visible_mask(torch.arange(sq)[:, None], torch.arange(sk)[None, :], sq, sk, params)
        live = [(s, min(s + chunk, sk)) for s in range(0, sk, chunk)
                if vis[:, s:s + chunk].any()]
        assert tiled.key_chunks(params, sq, sk, chunk) == live, (sq, sk, left, right,
                                                                 bottom_right, chunk)


def _record_chunks(monkeypatch, bound):
    """Wrap ``_chunk_scores``: record each chunk and check the score tensors stay chunk-sized."""
    seen = []
    inner = tiled._chunk_scores

    def spy(raw, params, lay, start, end):
        assert raw.numel() <= bound
        scores, keep = inner(raw, params, lay, start, end)
        assert scores.numel() <= bound and keep.numel() <= bound
        seen.append((start, end))
        return scores, keep

    monkeypatch.setattr(tiled, "_chunk_scores", spy)
    return seen


def test_dead_chunks_are_skipped(monkeypatch):
    b, sq, sk, hq, chunk = 1, 8, 64, 2, 8
    q, k, v = _inputs(b, sq, sk, hq, hq, 16)
    params = _params(16, window_left=3, window_right=0)              # keys [53, 63]
    seen = _record_chunks(monkeypatch, b * hq * sq * chunk)
    out, lse = tiled.forward(q, k, v, params, chunk)
    assert seen == [(48, 56), (56, 64)]
    tiled.backward(torch.randn_like(out), q, k, v, out, lse, params, chunk)
    assert seen == [(48, 56), (56, 64)] * 2


def test_long_keys_memory_stays_chunked(monkeypatch):
    """sk = 16384: every score tensor is at most b * hq * sq * chunk_size elements (never
    sq x sk), and the result still matches the reference."""
    b, sq, sk, hq, hkv, d, chunk = 1, 16, 16384, 2, 1, 16, 128
    q, k, v = _inputs(b, sq, sk, hq, hkv, d)
    seen = _record_chunks(monkeypatch, b * hq * sq * chunk)
    _check(q, k, v, _params(d, causal=True, window_right=0, softcap=5.0), chunk)
    assert len(seen) == 2 * sk // chunk                              # forward + backward


# --------------------------------------------------------------------------------------------
# the seed check, integration, errors


@pytest.mark.parametrize("chunk_size", [8, 16, 7])
@pytest.mark.parametrize("n, d", [(64, 16), (128, 32), (100, 24)])
def test_plain_softmax_attention(n, d, chunk_size):
    """The first check of the online softmax: fp32 vs ``softmax(Q K^T / sqrt(d)) V`` < 5e-6."""
    q, k, v = (torch.randn(1, n, 1, d) for _ in range(3))
    out, _ = tiled.forward(q, k, v, _params(d), chunk_size)
    q64, k64, v64 = (t[0, :, 0].double() for t in (q, k, v))
    expected = torch.softmax(q64 @ k64.T / math.sqrt(d), dim=-1) @ v64
    assert (out[0, :, 0].double() - expected).abs().max().item() < 5e-6


class _TiledFunction(torch.autograd.Function):
    """tiled.forward/backward with a small chunk, for gradcheck."""

    @staticmethod
    def forward(ctx, q, k, v, params, chunk_size):
        out, lse = tiled.forward(q, k, v, params, chunk_size)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.params, ctx.chunk_size = params, chunk_size
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        grads = tiled.backward(dout, q, k, v, out, lse, ctx.params, ctx.chunk_size)
        return (*grads, None, None)


def test_gradcheck_float64():
    """Finite differences, independent of the reference: every feature with a gradient path."""
    b, sq, sk, hq, hkv, d = 1, 5, 7, 2, 1, 4
    q, k, v = (t.requires_grad_() for t in _inputs(b, sq, sk, hq, hkv, d, dtype=torch.float64))
    params = _params(d, window_left=4, softcap=1.0, alibi_slopes=torch.rand(hq),
                     score_mod=_score_mod_nonlinear(hq, sq, sk), mask_mod=_mask_mod,
                     attn_bias=torch.randn(1, hq, 1, sk, dtype=torch.float64),
                     dropout_p=0.3, seed=5)
    assert torch.autograd.gradcheck(lambda *t: _TiledFunction.apply(*t, params, 3), (q, k, v))


def test_autograd_function_default_chunk():
    """Through flashtile.autograd with the default chunk size (sk=300: three chunks)."""
    q, k, v = (t.requires_grad_() for t in _inputs(2, 20, 300, 4, 2, 16))
    params = _params(16, causal=True, window_right=0)
    out, lse = attention(q, k, v, params, "torch")
    dout = torch.randn_like(out)
    out.backward(dout)
    ref = _reference(q, k, v, dout, params, None, torch.float64)
    same = _reference(q, k, v, dout, params, None, torch.float32)
    for name, x, r, s in zip(("out", "lse", "dq", "dk", "dv"),
                             (out, lse, q.grad, k.grad, v.grad), ref, same):
        assert_within_budget(name, x.detach(), r, s, FLOOR[torch.float32])


def test_errors():
    q, k, v = _inputs(1, 4, 4, 2, 2, 8)
    with pytest.raises(NotImplementedError, match="block-sparse"):
        tiled.forward(q, k, v, _params(8, block_mask=object()))
    with pytest.raises(ValueError, match="chunk_size"):
        tiled.forward(q, k, v, _params(8), chunk_size=0)


# --------------------------------------------------------------------------------------------
# property test: random small shapes and flags


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(
    b=st.integers(1, 2), sq=st.integers(1, 20), sk=st.integers(1, 20),
    hkv=st.sampled_from([1, 2]), group=st.sampled_from([1, 2, 3]),
    d=st.sampled_from([8, 16, 24]), dv=st.sampled_from([8, 20]),
    chunk_size=st.integers(1, 24), causal=st.booleans(),
    left=st.integers(-1, 6), right=st.integers(-1, 6), bottom_right=st.booleans(),
    softcap=st.sampled_from([0.0, 2.0]), alibi=st.booleans(),
    dropout_p=st.sampled_from([0.0, 0.3]), seed=st.integers(0, 2**31 - 1),
)
def test_property_random_configs(b, sq, sk, hkv, group, d, dv, chunk_size, causal, left, right,
                                 bottom_right, softcap, alibi, dropout_p, seed):
    torch.manual_seed(seed)
    hq = hkv * group
    q, k, v = _inputs(b, sq, sk, hq, hkv, d, dv)
    if causal:
        right = 0 if right < 0 else min(right, 0)
    params = _params(d, causal=causal, window_left=left, window_right=right,
                     bottom_right=bottom_right, softcap=softcap,
                     alibi_slopes=torch.rand(hq) if alibi else None,
                     dropout_p=dropout_p, seed=seed, offset=seed * 977)
    _check(q, k, v, params, chunk_size)
