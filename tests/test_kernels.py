"""The Triton kernels against the float64 reference, forward and all three gradients.

Without a GPU they run under Triton's interpreter (fp32/fp16, small shapes: the interpreter
mis-computes bf16 dots); with one, the GPU matrix of issue 2 runs in bf16 and fp16.
Rule: err(kernel) <= 2 * err(plain torch in the same dtype) + floor, both against float64.
"""

from __future__ import annotations

import itertools
import os

import pytest
import torch
from utils import assert_within_budget, shape_id

import flashtile
from flashtile import attention_reference, flash_attn_func
from flashtile.interface import _flash_params

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
FLOOR = {torch.float32: 2e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}


@pytest.fixture(autouse=True)
def _triton_backend():
    flashtile.set_backend("triton")
    yield
    flashtile.set_backend(None)


def make_qkv(b, sq, sk, hq, hkv, d, dv, dtype, device=DEVICE, strided=False):
    """Fresh random inputs; ``strided`` gives (b, h, s, d)-allocated views (last dim contiguous)."""
    def one(s, h, dim):
        if strided:
            return torch.randn(b, h, s, dim, dtype=dtype, device=device).transpose(1, 2)
        return torch.randn(b, s, h, dim, dtype=dtype, device=device)
    return one(sq, hq, d), one(sk, hkv, d), one(sk, hkv, dv)


def check(b, sq, sk, hq, hkv, d, dv, dtype, *, causal=False, window=(-1, -1), softcap=0.0,
          alibi=None, strided=False, scale=None):
    """Run forward+backward through the public API and compare everything with the budget."""
    q, k, v = make_qkv(b, sq, sk, hq, hkv, d, dv, dtype, strided=strided)
    kwargs = dict(causal=causal, window_size=window, softcap=softcap, alibi_slopes=alibi,
                  softmax_scale=scale)
    params, _ = _flash_params(q, k, v, 0.0, scale, causal, window, softcap, alibi, False)
    q_in, k_in, v_in = (t.detach().clone().requires_grad_() for t in (q, k, v))
    snapshot = [t.detach().clone() for t in (q, k, v)]
    out, lse, _ = flash_attn_func(q_in, k_in, v_in, return_attn_probs=True, **kwargs)
    dout = torch.randn_like(out)
    out.backward(dout)
    for before, after in zip(snapshot, (q_in, k_in, v_in)):
        assert torch.equal(before, after.detach()), "inputs must never be modified"

    def reference(dt):
        qr, kr, vr = (t.detach().to(dt).requires_grad_() for t in (q, k, v))
        o, l = attention_reference(qr, kr, vr, params, dtype=dt)
        o.backward(dout.to(dt))
        return o, l, qr.grad, kr.grad, vr.grad

    ref = reference(torch.float64)
    same = reference(dtype)
    floor = FLOOR[dtype]
    for name, ours, r, s in zip(("out", "lse", "dq", "dk", "dv"),
                                (out, lse, q_in.grad, k_in.grad, v_in.grad), ref, same):
        assert ours.shape == r.shape and ours.dtype == (torch.float32 if name == "lse" else dtype)
        assert_within_budget(name, ours, r, s, floor * (4 if name in ("dq", "dk") else 1))


# ----------------------------------------------------------------------------------------------
# Interpreter / GPU: shapes. Odd lengths, sq != sk both ways, GQA and MQA, odd head dims, dv != d.
SHAPES = [
    (1, 33, 47, 2, 1, 24, 24),
    (2, 50, 37, 4, 2, 16, 16),
    (1, 64, 64, 2, 2, 40, 40),
    (1, 17, 70, 3, 3, 72, 72),
    (1, 1, 37, 2, 1, 16, 16),      # one query row (decoding)
    (1, 29, 29, 2, 2, 8, 32),      # V head dim differs
    (1, 20, 20, 1, 1, 1, 1),       # head dim 1
]
DTYPES = [torch.float32, torch.float16] if not GPU else [torch.float16, torch.bfloat16]


@pytest.fixture(params=["two-pass", "atomic"])
def dq_mode(request, monkeypatch):
    """The backward's two dQ strategies (flashtile.kernels.bwd), both checked below."""
    monkeypatch.setenv("FLASHTILE_BWD_DQ", request.param)
    return request.param


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: str(t).split(".")[-1])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: shape_id(*s))
def test_shapes(shape, causal, dtype, dq_mode):
    check(*shape, dtype, causal=causal)


FEATURES = {
    "window-5-3": dict(window=(5, 3)),
    "window-left-4": dict(window=(4, -1)),
    "window-right-2": dict(window=(-1, 2)),
    "causal-window-6": dict(causal=True, window=(6, -1)),
    "softcap-2": dict(softcap=2.0),
    "alibi-h": dict(alibi="h"),
    "alibi-bh": dict(alibi="bh"),
    "scale-0.3": dict(scale=0.3),
    "scale-negative": dict(scale=-0.2),        # (the row max is not the scaled max then)
    "causal-scale-0": dict(causal=True, scale=0.0),
    "strided": dict(strided=True),
    "all": dict(causal=True, window=(7, -1), softcap=3.0, alibi="bh", strided=True),
}


@pytest.mark.parametrize("feature", list(FEATURES), ids=list(FEATURES))
@pytest.mark.parametrize("shape", [(2, 45, 38, 4, 2, 16, 16), (1, 38, 45, 2, 1, 24, 24)],
                         ids=lambda s: shape_id(*s))
def test_features(shape, feature, dq_mode):
    opts = dict(FEATURES[feature])
    b, hq = shape[0], shape[3]
    if opts.get("alibi") == "h":
        opts["alibi"] = torch.rand(hq, device=DEVICE) * 0.5
    elif opts.get("alibi") == "bh":
        opts["alibi"] = torch.rand(b, hq, device=DEVICE) * 0.5
    check(*shape, DTYPES[0], **opts)


@pytest.mark.parametrize("sq,sk,window", [(40, 16, (-1, 0)), (30, 10, (3, 3)), (60, 30, (2, 0))])
def test_rows_without_keys(sq, sk, window):
    """Rows that see no key: output exactly 0, LSE -inf, zero gradients, no NaN anywhere."""
    dtype = DTYPES[0]
    q, k, v = (t.requires_grad_() for t in make_qkv(1, sq, sk, 2, 1, 16, 16, dtype))
    out, lse, _ = flash_attn_func(q, k, v, window_size=window, return_attn_probs=True)
    out.backward(torch.randn_like(out))
    params, _ = _flash_params(q, k, v, 0.0, None, False, window, 0.0, None, False)
    _, ref_lse = attention_reference(q.detach(), k.detach(), v.detach(), params)
    empty = torch.isinf(ref_lse)                                       # (b, h, sq)
    for t in (out, lse, q.grad, k.grad, v.grad):
        assert not torch.isnan(t).any()
    assert empty.any(), "the case must contain rows that see no key"
    assert torch.all(lse[empty] == float("-inf"))
    rows = empty.transpose(1, 2)                                       # (b, sq, h)
    assert torch.all(out[rows] == 0)
    assert torch.all(q.grad[rows] == 0)


def test_causal_bottom_right_alignment():
    """sq=2, sk=5: query 0 sees keys 0..3, query 1 sees all five (flash-attn >= 2.1)."""
    q, k, v = make_qkv(1, 2, 5, 1, 1, 16, 16, DTYPES[0])
    _, _, probs = flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    visible = probs[0, 0] > 0
    assert visible.tolist() == [[True, True, True, True, False], [True] * 5]


@pytest.fixture
def launched(monkeypatch):
    """The keyword arguments of every tile-level launch (``plans.launch``) the test makes, on
    the tile-level forward (the Gluon one off) with launch plans off (no plan recorded under
    other switches replays)."""
    from flashtile.kernels import plans
    monkeypatch.setenv("FLASHTILE_GLUON_FWD", "0")
    monkeypatch.setenv("FLASHTILE_LAUNCH_PLANS", "0")
    seen = []
    launch = plans.launch

    def spy(record, launcher, grid, args, kwargs):
        seen.append(kwargs)
        launch(record, launcher, grid, args, kwargs)
    monkeypatch.setattr(plans, "launch", spy)
    return seen


ONE_LOOP_CASES = {
    "causal-even-keys": ((1, 128, 128, 2, 1, 16, 16), dict(causal=True)),   # (EVEN_K)
    "causal-rows-without-keys": ((1, 40, 16, 2, 1, 16, 16), dict(causal=True)),
    "causal-sk-longer": ((2, 45, 70, 4, 2, 24, 24), dict(causal=True)),
    "causal-window-softcap": ((1, 60, 60, 2, 2, 16, 16), dict(causal=True, window=(9, -1),
                                                              softcap=2.0)),
    "right-window": ((1, 50, 50, 2, 1, 16, 16), dict(window=(-1, 3))),
}
if GPU:     # (the H200's short causal points, where one loop a program is meant to help)
    ONE_LOOP_CASES.update({
        "gpu-d64-causal-512": ((2, 512, 512, 4, 4, 64, 64), dict(causal=True)),
        "gpu-d128-causal-1000": ((1, 1000, 1000, 2, 2, 128, 128), dict(causal=True)),
    })


@pytest.mark.parametrize("one_loop", [True, False], ids=["one-loop", "two-loops"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: str(t).split(".")[-1])
@pytest.mark.parametrize("case", list(ONE_LOOP_CASES))
def test_one_loop_forward(case, dtype, one_loop, monkeypatch, launched):
    """The tile-level forward and dQ kernels with the full and the diagonal key tiles in one
    loop (``FLASHTILE_ONE_LOOP=1``, kernels.common.ONE_LOOP) or in two (``=0``: the default
    above d=64 and for keys that do not end on a 128-key tile),
    against float64 (outputs and gradients): one loop applies the band mask from the diagonal
    tiles on and skips the loads' bounds test where the keys end on a tile."""
    from flashtile.kernels import common
    monkeypatch.setattr(common, "ONE_LOOP", one_loop)
    monkeypatch.setenv("FLASHTILE_BWD_DQ", "two-pass")    # (dQ in the tile-level dQ kernel)
    shape, opts = ONE_LOOP_CASES[case]
    check(*shape, dtype, **opts)
    loops = [kw for kw in launched if "ONE_LOOP" in kw]
    assert len(loops) == 2                                  # (the forward and the dQ kernel)
    even_k = one_loop and shape[2] % 128 == 0
    assert all(kw["ONE_LOOP"] == one_loop and kw["EVEN_K"] == even_k for kw in loops)


def test_diagonal_settings(monkeypatch):
    """FLASHTILE_ONE_LOOP is read at import: a bad value is a clear error. By default
    (``auto``) one loop runs where it measured ahead, up to d=64 with dense keys that end on a
    128-key tile; only calls with a right edge take it (no diagonal tile otherwise), and
    EVEN_K is set only with one loop (two loops compile no second variant)."""
    from flashtile.kernels import common
    if os.environ.get("FLASHTILE_ONE_LOOP", "auto") in ("", "auto"):     # (the default)
        assert common.ONE_LOOP is None and common.ONE_LOOP_UPTO == 64
    monkeypatch.setenv("FLASHTILE_ONE_LOOP", "yes")
    with pytest.raises(ValueError, match="FLASHTILE_ONE_LOOP must be 0, 1 or 'auto'"):
        common.env_forced("FLASHTILE_ONE_LOOP")
    q, k, v = make_qkv(1, 8, 8, 2, 2, 16, 16, DTYPES[0])
    causal, _ = _flash_params(q, k, v, 0.0, None, True, (-1, -1), 0.0, None, False)
    full, _ = _flash_params(q, k, v, 0.0, None, False, (-1, -1), 0.0, None, False)
    cu = torch.tensor([0, 8], dtype=torch.int32)
    packed = causal.with_(cu_seqlens_q=cu, cu_seqlens_k=cu)
    off = dict(ONE_LOOP=False, EVEN_K=False)
    monkeypatch.setattr(common, "ONE_LOOP", None)                       # auto
    assert common.diagonal_args(causal, 256, 64) == dict(ONE_LOOP=True, EVEN_K=True)
    assert common.diagonal_args(causal, 256, 128) == off               # (above d=64)
    assert common.diagonal_args(causal, 200, 64) == off                # (uneven keys)
    assert common.diagonal_args(packed, 256, 64) == off                # (varlen)
    assert common.diagonal_args(full, 256, 64) == off                  # (no diagonal)
    monkeypatch.setattr(common, "ONE_LOOP", False)
    assert common.diagonal_args(causal, 256, 64) == off
    monkeypatch.setattr(common, "ONE_LOOP", True)
    assert common.diagonal_args(causal, 256, 128) == dict(ONE_LOOP=True, EVEN_K=True)
    assert common.diagonal_args(causal, 200, 128) == dict(ONE_LOOP=True, EVEN_K=False)
    assert common.diagonal_args(full, 256, 128) == off
    assert common.diagonal_args(packed, 256, 128) == dict(ONE_LOOP=True, EVEN_K=False)


def test_backward_is_deterministic():
    q, k, v = make_qkv(2, 40, 52, 4, 2, 24, 24, DTYPES[0])
    dout = torch.randn(2, 40, 4, 24, dtype=DTYPES[0], device=DEVICE)
    grads = []
    for _ in range(2):
        qi, ki, vi = (t.detach().clone().requires_grad_() for t in (q, k, v))
        flash_attn_func(qi, ki, vi, causal=True, deterministic=True).backward(dout)
        grads.append((qi.grad, ki.grad, vi.grad))
    for a, b in zip(*grads):
        assert torch.equal(a, b)


def test_atomic_backward_reproduces_dk_dv(monkeypatch):
    """With the one-pass backward only dQ goes through atomics: dK and dV stay bitwise equal."""
    monkeypatch.setenv("FLASHTILE_BWD_DQ", "atomic")
    q, k, v = make_qkv(2, 40, 52, 4, 2, 24, 24, DTYPES[0])
    dout = torch.randn(2, 40, 4, 24, dtype=DTYPES[0], device=DEVICE)
    grads = []
    for _ in range(2):
        qi, ki, vi = (t.detach().clone().requires_grad_() for t in (q, k, v))
        flash_attn_func(qi, ki, vi, causal=True).backward(dout)
        grads.append((ki.grad, vi.grad))
    for a, b in zip(*grads):
        assert torch.equal(a, b)


# ----------------------------------------------------------------------------------------------
# GPU matrix (issue 2): batch 1-8, sq != sk, hq/hkv in {8/8, 8/2, 8/1}, d in {32..256},
# causal and not, bf16 and fp16.
GPU_HEADDIMS = [32, 40, 64, 96, 128, 160, 256]
GPU_LENGTHS = [(1, 128, 384), (3, 511, 300), (8, 257, 1000), (2, 1000, 1023)]


def _gpu_cases():
    cases = []
    for i, (d, (hq, hkv), causal) in enumerate(itertools.product(
            GPU_HEADDIMS, [(8, 8), (8, 2), (8, 1)], [False, True])):
        b, sq, sk = GPU_LENGTHS[i % len(GPU_LENGTHS)]
        cases.append(pytest.param((b, sq, sk, hq, hkv, d, d), causal,
                                  id=shape_id(b, sq, sk, hq, hkv, d) + ("-causal" if causal else "")))
    return cases


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("shape,causal", _gpu_cases())
def test_gpu_matrix(shape, causal, dtype):
    check(*shape, dtype, causal=causal)


@pytest.mark.parametrize("flat", [False, True], ids=["rows", "flat"])
@pytest.mark.parametrize("shape", [(2, 37, 3, 16), (1, 64, 4, 32), (3, 5, 2, 16)],
                         ids=lambda s: "B{}-S{}-H{}-D{}".format(*s))
def test_preprocess_orders(shape, flat):
    """The backward's preprocess in both row orders (``FLAT``: rows in memory order, the
    variant ``scripts/preprocess_sweep.py`` times; default: queries of one head a program):
    ``D = rowsum(dO * O)`` in the LSE's ``(b, h, s)`` layout and every element of the
    NaN-poisoned fp32 dQ accumulator zeroed, with lengths that end mid-block and blocks that
    straddle heads and queries; and the rows kernel's count of claimed items
    (``ZERO_COUNT``, an int32 poisoned to -1) zeroed."""
    import triton
    from flashtile.kernels import bwd
    b, s, h, d = shape
    block = 16
    o = torch.randn(b, s, h, d, device=DEVICE, dtype=torch.float16)
    do = torch.randn_like(o)
    dsum = torch.full((b, h, s), float("nan"), device=DEVICE)
    dq_acc = torch.full((b, s, h, d), float("nan"), device=DEVICE)
    count = torch.full((1,), -1, device=DEVICE, dtype=torch.int32)
    grid = (b * triton.cdiv(s * h, block),) if flat else (b * h * triton.cdiv(s, block),)
    bwd._bwd_preprocess[grid](
        o, do, dsum, dsum, dq_acc, *o.stride()[:3], *do.stride()[:3], *dsum.stride()[:2],
        *dq_acc.stride()[:3], h, s, d, d, count, BLOCK_M=block, HEAD_DV=d, HEAD_D=d,
        IS_VARLEN=False, ZERO_DQ=True, FLAT=flat, ZERO_COUNT=True)
    want = (o.float() * do.float()).sum(-1).transpose(1, 2)
    torch.testing.assert_close(dsum, want, rtol=1e-3, atol=1e-3)
    assert bool((dq_acc == 0).all())
    assert count.item() == 0
