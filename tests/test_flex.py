"""flex_attention (flashtile.flex) and the block-sparse torch path against the float64 reference.

Rule: ``err(flex, fp64 ref) <= 2 * err(reference in the input dtype, fp64 ref) + floor`` for
out, lse, dq, dk and dv (``tests/utils.py::assert_within_budget``). The reference sees the
*element* mask (the mask_mod itself, or the layout expanded to elements), never the block
lists, so the block machinery is checked independently.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from flashtile import flex as flex_module
from flashtile.autograd import attention
from flashtile import masks
from flashtile.flex import _pick_backend, flex_attention
from flashtile.masks import (BlockMask, and_masks, causal_mask, create_block_mask, dilated,
                             document_mask, layout_mask, or_masks, prefix_lm,
                             random_block_layout, sliding_window)
from flashtile.params import AttentionParams
from flashtile.reference import tiled
from flashtile.reference.dense import attention_reference
from flashtile.reference.philox import draw_seed_offset, dropout_keep

from utils import assert_within_budget, shape_id

FLOOR = {torch.float32: 2e-6, torch.float64: 1e-12}


# --------------------------------------------------------------------------------------------
# helpers


def _inputs(b, sq, sk, hq, hkv, d, dv=None, dtype=torch.float32):
    """Flex layout (b, h, s, d)."""
    dv = d if dv is None else dv
    return (torch.randn(b, hq, sq, d, dtype=dtype), torch.randn(b, hkv, sk, d, dtype=dtype),
            torch.randn(b, hkv, sk, dv, dtype=dtype))


def _reference(q, k, v, dout, dtype, scale=None, score_mod=None, mask_mod=None,
               block_mask=None, dropout_p=0.0, keep=None):
    """Reference out (b, h, s, dv), lse and grads with leaves cast to ``dtype``."""
    leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    params = AttentionParams(softmax_scale=scale or 1.0 / math.sqrt(q.shape[-1]),
                             bottom_right=False, score_mod=score_mod, mask_mod=mask_mod,
                             block_mask=block_mask, dropout_p=dropout_p)
    out, lse = attention_reference(*(t.transpose(1, 2) for t in leaves), params,
                                   dropout_keep=keep, dtype=dtype)
    out = out.transpose(1, 2)
    grads = torch.autograd.grad(out, leaves, dout.to(dtype))
    return (out.detach(), lse, *grads)


def _check(q, k, v, ref_kwargs, **flex_kwargs):
    """flex_attention forward + backward, all five results held to the budget."""
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    out, lse = flex_attention(q, k, v, return_lse=True, enable_gqa=q.shape[1] != k.shape[1],
                              **flex_kwargs)
    assert out.shape == (*q.shape[:3], v.shape[-1]) and out.dtype == q.dtype
    assert lse.shape == q.shape[:3] and lse.dtype == torch.float32
    dout = torch.randn_like(out)
    out.backward(dout)
    ours = (out, lse, q.grad, k.grad, v.grad)
    ref64 = _reference(q, k, v, dout, torch.float64, **ref_kwargs)
    same = _reference(q, k, v, dout, q.dtype, **ref_kwargs)
    for name, x, r, s in zip(("out", "lse", "dq", "dk", "dv"), ours, ref64, same):
        assert not torch.isnan(x).any(), name
        assert_within_budget(name, x, r, s, FLOOR[q.dtype])
    return ours


# --------------------------------------------------------------------------------------------
# every library mask, odd lengths and block sizes, B/H shared and explicit


def _docs(n, batch=None):
    shape = (n,) if batch is None else (batch, n)
    return torch.randint(0, 3, shape).cumsum(-1) // 2


MASKS = {   # name -> factory(b, hq, sq, sk) -> (mask_mod, B, H) passed to create_block_mask
    "causal": lambda b, h, sq, sk: (causal_mask, None, None),
    "sliding-7": lambda b, h, sq, sk: (sliding_window(7), None, None),
    "sliding-4-bidir": lambda b, h, sq, sk: (sliding_window(4, causal=False), None, None),
    "document": lambda b, h, sq, sk: (document_mask(_docs(max(sq, sk))), None, None),
    "document-causal-per-batch": lambda b, h, sq, sk: (
        and_masks(causal_mask, document_mask(_docs(max(sq, sk), b))), b, None),
    "prefix-lm": lambda b, h, sq, sk: (prefix_lm(10), None, None),
    "dilated-3-causal": lambda b, h, sq, sk: (and_masks(causal_mask, dilated(3)), None, None),
    "random-block": lambda b, h, sq, sk: (masks.random_block(0.5, sq, sk, (6, 10), H=h, seed=2,
                                                             device=torch.get_default_device()),
                                          None, h),
    "or-dilated-sliding": lambda b, h, sq, sk: (or_masks(dilated(5), sliding_window(2)), None,
                                                None),
    "per-head": lambda b, h, sq, sk: (lambda bb, hh, qq, kk: (qq - kk) % (hh + 2) != 1, b, h),
}

MASK_SHAPES = [  # (b, sq, sk, hq, hkv, d, dv, BLOCK_SIZE)
    (2, 37, 37, 4, 2, 16, 16, 8),
    (1, 45, 29, 4, 4, 24, 16, (16, 8)),
    (2, 20, 51, 2, 1, 16, 16, (4, 16)),
]


def _mask_shape_id(s):
    block = s[7] if isinstance(s[7], int) else f"{s[7][0]}x{s[7][1]}"
    return shape_id(*s[:7]) + f"-BS{block}"


@pytest.mark.parametrize("shape", MASK_SHAPES, ids=[_mask_shape_id(s) for s in MASK_SHAPES])
@pytest.mark.parametrize("name", list(MASKS))
def test_library_masks(name, shape):
    b, sq, sk, hq, hkv, d, dv, block = shape
    mask_mod, B, H = MASKS[name](b, hq, sq, sk)
    bm = create_block_mask(mask_mod, B, H, sq, sk, device="cpu", BLOCK_SIZE=block)
    q, k, v = _inputs(b, sq, sk, hq, hkv, d, dv)
    _check(q, k, v, dict(mask_mod=mask_mod), block_mask=bm)


# --------------------------------------------------------------------------------------------
# score_mods, alone and with a block mask


def _score_mods(hq, sq, sk):
    reach = max(sq, sk)
    return {
        "relpos-shared": masks.relative_position_bias(torch.randn(2 * reach - 1)),
        "relpos-per-head": masks.relative_position_bias(torch.randn(hq, 2 * 9 - 1)),  # saturates
        "alibi": masks.alibi(masks.alibi_slopes(hq)),
        "alibi-per-batch": masks.alibi(torch.rand(2, hq)),
        "softcap": masks.softcap(1.5),
        "per-head-scale": masks.per_head_scale(torch.rand(hq) + 0.5),
        "custom-nonlinear": lambda s, b, h, q, kv: s * (1 + 0.3 * torch.tanh(s)) + 0.1 * h,
    }


SCORE_MODS = list(_score_mods(4, 8, 8))


@pytest.mark.parametrize("with_mask", [False, True], ids=["no-mask", "sliding-11"])
@pytest.mark.parametrize("name", SCORE_MODS)
def test_score_mods(name, with_mask):
    b, sq, sk, hq, hkv, d = 2, 33, 27, 4, 2, 16
    score_mod = _score_mods(hq, sq, sk)[name]
    q, k, v = _inputs(b, sq, sk, hq, hkv, d)
    if with_mask:
        mask_mod = sliding_window(11)
        bm = create_block_mask(mask_mod, None, None, sq, sk, device="cpu", BLOCK_SIZE=(8, 4))
        _check(q, k, v, dict(score_mod=score_mod, mask_mod=mask_mod), score_mod=score_mod,
               block_mask=bm)
    else:
        _check(q, k, v, dict(score_mod=score_mod), score_mod=score_mod)


# --------------------------------------------------------------------------------------------
# random block layouts (all blocks full), several densities


@pytest.mark.parametrize("per_head", [False, True], ids=["shared", "per-head"])
@pytest.mark.parametrize("density", [0.2, 0.4, 0.6])
def test_random_layouts(density, per_head):
    b, sq, sk, hq, hkv, d, block = 2, 70, 61, 4, 2, 16, (8, 12)
    layout = random_block_layout(-(-sq // block[0]), -(-sk // block[1]), density,
                                 B=b if per_head else None, H=hq if per_head else None, seed=4)
    bm = BlockMask.from_layout(layout, sq, sk, BLOCK_SIZE=block)
    assert bm.density() == pytest.approx(density, abs=0.01)
    q, k, v = _inputs(b, sq, sk, hq, hkv, d)
    _check(q, k, v, dict(mask_mod=layout_mask(layout, block), scale=0.3), block_mask=bm,
           scale=0.3)


def test_reference_block_mask_equals_element_mask():
    """attention_reference(params.block_mask=...) (BlockMask.to_dense_mask) agrees with the
    element mask_mod, for a layout and for a mask_mod with partial blocks."""
    q, k, v = _inputs(2, 30, 26, 4, 2, 8)
    dout = torch.randn(2, 4, 30, 8)
    layout = random_block_layout(4, 3, 0.5, H=4, seed=1)
    for bm, mask_mod in ((BlockMask.from_layout(layout, 30, 26, BLOCK_SIZE=(8, 9)),
                          layout_mask(layout, (8, 9))),
                         (create_block_mask(sliding_window(5), None, None, 30, 26, device="cpu",
                                            BLOCK_SIZE=(8, 4)), sliding_window(5))):
        by_blocks = _reference(q, k, v, dout, torch.float64, block_mask=bm)
        by_elements = _reference(q, k, v, dout, torch.float64, mask_mod=mask_mod)
        for x, y in zip(by_blocks, by_elements):
            assert torch.equal(x, y)


def test_fp64_stays_exact():
    """float64 keeps float64 accuracy through the block-sparse torch path (the exact-lse
    backward); flex_attention itself takes the kernel dtypes, so this goes one layer down."""
    b, sq, sk, hq, hkv, d = 1, 29, 40, 4, 2, 8
    mask_mod = and_masks(causal_mask, sliding_window(13))
    bm = create_block_mask(mask_mod, None, None, sq, sk, device="cpu", BLOCK_SIZE=(8, 16))
    score_mod = masks.softcap(2.0)
    q, k, v = (t.requires_grad_() for t in _inputs(b, sq, sk, hq, hkv, d, dtype=torch.float64))
    params = AttentionParams(softmax_scale=1 / math.sqrt(d), bottom_right=False,
                             score_mod=score_mod, mask_mod=mask_mod, block_mask=bm)
    out, lse = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), params, "torch")
    out = out.transpose(1, 2)
    dout = torch.randn_like(out)
    out.backward(dout)
    ref = _reference(q, k, v, dout, torch.float64, mask_mod=mask_mod, score_mod=score_mod)
    for name, x, r in zip(("out", "lse", "dq", "dk", "dv"), (out, lse, q.grad, k.grad, v.grad),
                          ref):
        tol = 1e-6 if name == "lse" else 1e-12          # lse is float32 by contract
        assert_within_budget(name, x, r, r, tol)


# --------------------------------------------------------------------------------------------
# GQA, return_lse, dropout, rows that see no key


def test_gqa_needs_enable_gqa():
    q, k, v = _inputs(1, 16, 16, 4, 2, 8)
    with pytest.raises(ValueError, match="enable_gqa=True"):
        flex_attention(q, k, v)
    out = flex_attention(q, k, v, enable_gqa=True)
    ref = _reference(q, k, v, torch.zeros_like(q), torch.float64)[0]
    assert (out.double() - ref).abs().max() < 1e-5
    with pytest.raises(ValueError, match="multiple"):
        flex_attention(*_inputs(1, 16, 16, 4, 3, 8), enable_gqa=True)


def test_return_lse_and_output_layout():
    q, k, v = _inputs(2, 19, 23, 2, 2, 8, 12)
    out = flex_attention(q, k, v)
    assert isinstance(out, torch.Tensor) and out.shape == (2, 2, 19, 12)
    out2, lse = flex_attention(q, k, v, return_lse=True, scale=0.2)
    ref_out, ref_lse = _reference(q, k, v, torch.zeros_like(out), torch.float64, scale=0.2)[:2]
    assert (out2.double() - ref_out).abs().max() < 1e-5
    assert (lse.double() - ref_lse.double()).abs().max() < 1e-5


def test_dropout_matches_reference():
    b, sq, sk, hq, hkv, d, p = 2, 27, 33, 4, 2, 16, 0.3
    mask_mod = causal_mask
    bm = create_block_mask(mask_mod, None, None, sq, sk, device="cpu", BLOCK_SIZE=8)
    q, k, v = _inputs(b, sq, sk, hq, hkv, d)
    torch.manual_seed(123)
    seed, offset = draw_seed_offset()
    params = AttentionParams(softmax_scale=1.0, dropout_p=p, seed=seed, offset=offset)
    keep = dropout_keep(params, torch.arange(b)[:, None, None, None],
                        torch.arange(hq)[None, :, None, None], torch.arange(sq)[:, None],
                        torch.arange(sk)[None, :], hq, sq, sk)
    torch.manual_seed(123)      # flex_attention draws the same (seed, offset)
    _check(q, k, v, dict(mask_mod=mask_mod, dropout_p=p, keep=keep), block_mask=bm,
           dropout_p=p)
    a = flex_attention(q, k, v, block_mask=bm, dropout_p=p, enable_gqa=True)
    bb = flex_attention(q, k, v, block_mask=bm, dropout_p=p, enable_gqa=True)
    assert not torch.equal(a, bb)                                 # fresh mask per call


def test_rows_that_see_no_key():
    """Query block 1 lists no key block; the mask_mod also hides row 3 in head 1. Those rows:
    output exactly 0, lse -inf, zero dq; no NaN anywhere."""
    b, sq, sk, hq, d, block = 1, 24, 16, 2, 8, 8
    layout = torch.tensor([[1, 1], [0, 0], [0, 1]], dtype=torch.bool)

    def mask_mod(bb, h, q_idx, kv_idx):
        return layout_mask(layout, block)(bb, h, q_idx, kv_idx) & ((q_idx != 3) | (h == 0))
    bm = create_block_mask(mask_mod, None, hq, sq, sk, device="cpu", BLOCK_SIZE=block)
    assert int(bm.kv_num_blocks[0, :, 1].sum() + bm.full_kv_num_blocks[0, :, 1].sum()) == 0
    q, k, v = _inputs(b, sq, sk, hq, hq, d)
    out, lse, dq, _, _ = _check(q, k, v, dict(mask_mod=mask_mod), block_mask=bm)
    hidden = torch.zeros(b, hq, sq, dtype=torch.bool)
    hidden[:, :, 8:16] = True
    hidden[:, 1, 3] = True
    assert bool((out[hidden] == 0).all()) and bool((lse[hidden] == float("-inf")).all())
    assert bool((dq[hidden] == 0).all())
    assert bool(torch.isfinite(lse[~hidden]).all())


# --------------------------------------------------------------------------------------------
# the torch path visits only listed blocks, and full blocks skip the mask_mod


def test_work_scales_with_listed_blocks(monkeypatch):
    b, s, h, d, block = 1, 96, 2, 8, 16
    layout = random_block_layout(6, 6, 0.4, seed=9)
    bm = BlockMask.from_layout(layout, s, s, BLOCK_SIZE=block)
    gathered = []
    original = tiled._listed_positions

    def counting(*args):
        pos, inside = original(*args)
        gathered.append(pos.numel())
        return pos, inside
    monkeypatch.setattr(tiled, "_listed_positions", counting)
    q, k, v = (t.requires_grad_() for t in _inputs(b, s, s, h, h, d))
    flex_attention(q, k, v, block_mask=bm).sum().backward()
    listed = int(layout.sum())
    # forward and dQ pass gather the listed key blocks, the dK/dV pass the listed query blocks
    assert sum(gathered) == 3 * listed * block


def test_full_blocks_skip_mask_mod():
    b, s, h, d, block = 1, 64, 2, 8, 16
    evaluated = []

    def counting_causal(bb, hh, q_idx, kv_idx):
        result = q_idx >= kv_idx
        evaluated.append(torch.broadcast_shapes(q_idx.shape, kv_idx.shape).numel())
        return result
    bm = create_block_mask(counting_causal, None, None, s, s, device="cpu", BLOCK_SIZE=block)
    evaluated.clear()
    q, k, v = _inputs(b, s, s, h, h, d)
    flex_attention(q, k, v, block_mask=bm)
    # Only the 4 diagonal (partial) blocks are evaluated, once each, in the forward (plus the
    # 1-element probe of flex_attention's input check).
    assert sum(evaluated) == 4 * block * block + 1


# --------------------------------------------------------------------------------------------
# backend choice


def test_pick_backend_falls_back_to_torch_once(monkeypatch):
    monkeypatch.setattr(flex_module, "resolve", lambda device: "triton")
    monkeypatch.setattr(flex_module, "_warned_fallback", False)
    plain = AttentionParams(softmax_scale=1.0)
    assert _pick_backend(plain, torch.device("cpu")) == "triton"
    # Compilable mods and 16-multiple blocks run on the kernels ...
    assert _pick_backend(plain.with_(score_mod=masks.softcap(2.0)), torch.device("cpu")) == "triton"
    # ... blocks the kernel tiles would straddle fall back, with one warning saying why.
    bm = create_block_mask(causal_mask, None, None, 8, 8, device="cpu", BLOCK_SIZE=4)
    with pytest.warns(RuntimeWarning, match="multiple of 16"):
        assert _pick_backend(plain.with_(block_mask=bm), torch.device("cpu")) == "torch"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _pick_backend(plain.with_(block_mask=bm), torch.device("cpu")) == "torch"


# --------------------------------------------------------------------------------------------
# bad input


def _bad(case):
    q, k, v = _inputs(2, 16, 24, 4, 4, 8)
    bm = create_block_mask(causal_mask, None, None, 16, 24, device="cpu", BLOCK_SIZE=8)
    cases = {
        "mask-other-lengths": (ValueError, r"built for \(Q_LEN, KV_LEN\) = \(16, 16\)",
                               dict(block_mask=create_block_mask(causal_mask, None, None, 16, 16,
                                                                 device="cpu", BLOCK_SIZE=8))),
        "mask-other-batch": (ValueError, "batch size 3",
                             dict(block_mask=create_block_mask(causal_mask, 3, None, 16, 24,
                                                               device="cpu", BLOCK_SIZE=8))),
        "mask-other-heads": (ValueError, "has 2 heads",
                             dict(block_mask=create_block_mask(causal_mask, None, 2, 16, 24,
                                                               device="cpu", BLOCK_SIZE=8))),
        "mask-other-device": (ValueError, "lives on meta", dict(block_mask=bm.to("meta"))),
        "mask-not-blockmask": (TypeError, "must be a flashtile BlockMask",
                               dict(block_mask=bm.to_dense())),
        "mask-mod-returns-float": (TypeError, "bool tensor", dict(block_mask=BlockMask(
            bm.seq_lengths, *bm.as_tuple()[2:10], BLOCK_SIZE=8,
            mask_mod=lambda b, h, qi, ki: (qi - ki).float()))),
        "score-mod-returns-bool": (TypeError, "looks like a mask_mod",
                                   dict(score_mod=lambda s, b, h, qi, ki: qi >= ki)),
        "score-mod-not-callable": (TypeError, "score_mod must be a function",
                                   dict(score_mod=2.0)),
        "score-mod-one-argument": (TypeError, r"score_mod must take 5 arguments \(score, b, h",
                                   dict(score_mod=lambda s: s)),
        "score-mod-is-a-mask-mod": (TypeError, "looks like a mask_mod",
                                    dict(score_mod=lambda b, h, qi, ki: qi >= ki)),
        "score-mod-changes-shape": (ValueError, "elementwise",
                                    dict(score_mod=lambda s, b, h, qi, ki: s.expand(2, 2, 2, 2))),
        "scale-string": (TypeError, "scale", dict(scale="0.1")),
        "dropout-one": (ValueError, "dropout_p", dict(dropout_p=1.0)),
        "enable-gqa-int": (TypeError, "enable_gqa", dict(enable_gqa=1)),
        "return-lse-none": (TypeError, "return_lse", dict(return_lse=None)),
    }
    error, match, kwargs = cases[case]
    return q, k, v, error, match, kwargs


BAD = ["mask-other-lengths", "mask-other-batch", "mask-other-heads", "mask-other-device",
       "mask-not-blockmask", "mask-mod-returns-float", "score-mod-returns-bool",
       "score-mod-not-callable", "score-mod-one-argument", "score-mod-is-a-mask-mod",
       "score-mod-changes-shape", "scale-string", "dropout-one",
       "enable-gqa-int", "return-lse-none"]


@pytest.mark.parametrize("case", BAD)
def test_bad_input(case):
    q, k, v, error, match, kwargs = _bad(case)
    with pytest.raises(error, match=match):
        flex_attention(q, k, v, **kwargs)


def test_bad_tensors():
    q, k, v = _inputs(1, 8, 8, 2, 2, 8)
    with pytest.raises(ValueError, match="4 dimensions"):
        flex_attention(q[0], k, v)
    with pytest.raises(TypeError, match="torch.Tensor"):
        flex_attention(q.numpy(), k, v)
    with pytest.raises(TypeError, match="one dtype"):
        flex_attention(q, k.double(), v)
    with pytest.raises(ValueError, match="same seqlen"):
        flex_attention(q, k, v[:, :, :5])
