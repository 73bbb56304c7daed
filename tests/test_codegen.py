"""flashtile.codegen: score_mod / mask_mod Python functions compiled into Triton jit functions.

A tiny kernel takes the compiled functions as ``tl.constexpr`` arguments (as the attention
kernels do), evaluates them on one tile per (batch, head) and writes the result; the reference is
the Python function itself on broadcast torch index tensors (as the torch path calls it) and, for
gradients, torch.autograd on it. The tile is larger than the sequences, so padded rows/columns
run too (captured-tensor reads there must be masked). On the GPU when there is one, else under
the interpreter on CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from flashtile.codegen import (MAX_BUFFERS, UnsupportedModError, cache_info, compile_mask_mod,
                               compile_score_mod)
from utils import DEVICE

pytestmark = [
    pytest.mark.interpreter,
    # Padded tile positions hold score 0: log2(0) = -inf there is expected (and masked).
    pytest.mark.filterwarnings("ignore:divide by zero encountered in log2:RuntimeWarning"),
]

B, H, M, N = 2, 3, 13, 21          # batch, heads, query length, key length
BLOCK_M, BLOCK_N = 16, 32          # tiles larger than M, N: padded positions are evaluated


@pytest.fixture(autouse=True)
def _on_device():
    """Every tensor a test makes (scores, index tensors, the tables the mods capture) lives on
    DEVICE: the kernels need GPU tensors on a GPU; CPU tensors run only under the interpreter."""
    with torch.device(DEVICE):
        yield


# ---- test kernels -----------------------------------------------------------------------------

@triton.jit
def _score_kernel(S, OUT, GRAD, OUT2, GRAD2, seqlen_q, seqlen_k, stride_b, stride_h, stride_m,
                  FN: tl.constexpr, GRAD_FN: tl.constexpr, FWD_GRAD_FN: tl.constexpr, args,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TRANSPOSED: tl.constexpr):
    """Apply a compiled score_mod (and its derivatives) to one (BLOCK_M, BLOCK_N) score tile per
    program (b, h); TRANSPOSED evaluates the (BLOCK_N, BLOCK_M) tile of a dK/dV backward."""
    off_b = tl.program_id(0)
    off_h = tl.program_id(1)
    base = off_b * stride_b + off_h * stride_h
    if TRANSPOSED:
        offs_n = tl.arange(0, BLOCK_N)[:, None]
        offs_m = tl.arange(0, BLOCK_M)[None, :]
    else:
        offs_m = tl.arange(0, BLOCK_M)[:, None]
        offs_n = tl.arange(0, BLOCK_N)[None, :]
    ok = (offs_m < seqlen_q) & (offs_n < seqlen_k)
    ptrs = base + offs_m * stride_m + offs_n
    s = tl.load(S + ptrs, mask=ok, other=0.0)
    out = FN(s, off_b, off_h, offs_m, offs_n, args)
    grad = GRAD_FN(s, off_b, off_h, offs_m, offs_n, args)
    out2, grad2 = FWD_GRAD_FN(s, off_b, off_h, offs_m, offs_n, args)
    tl.store(OUT + ptrs, out, mask=ok)
    tl.store(GRAD + ptrs, grad, mask=ok)
    tl.store(OUT2 + ptrs, out2, mask=ok)
    tl.store(GRAD2 + ptrs, grad2, mask=ok)


@triton.jit
def _mask_kernel(OUT, seqlen_q, seqlen_k, stride_b, stride_h, stride_m, FN: tl.constexpr, args,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    off_b = tl.program_id(0)
    off_h = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)[:, None]
    offs_n = tl.arange(0, BLOCK_N)[None, :]
    ok = (offs_m < seqlen_q) & (offs_n < seqlen_k)
    keep = FN(off_b, off_h, offs_m, offs_n, args)
    tl.store(OUT + off_b * stride_b + off_h * stride_h + offs_m * stride_m + offs_n,
             keep.to(tl.int8), mask=ok)


def _indices():
    b = torch.arange(B)[:, None, None, None]             # (B, 1, 1, 1)
    h = torch.arange(H)[None, :, None, None]             # (1, H, 1, 1)
    q = torch.arange(M)[None, None, :, None]             # (1, 1, M, 1)
    kv = torch.arange(N)[None, None, None, :]            # (1, 1, 1, N)
    return b, h, q, kv


def run_score_mod(fn, score, transposed=False):
    """``(out, grad)`` of the compiled ``fn`` on ``score (B, H, M, N)``; also checks that
    fwd_grad_fn returns the same pair."""
    compiled = compile_score_mod(fn)
    outs = [torch.full_like(score, float("nan")) for _ in range(4)]
    _score_kernel[(B, H)](score, *outs, M, N, *score.stride()[:3], compiled.fn, compiled.grad_fn,
                          compiled.fwd_grad_fn, compiled.kernel_args(score.device),
                          BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, TRANSPOSED=transposed)
    out, grad, out2, grad2 = outs
    torch.testing.assert_close(out2, out, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(grad2, grad, rtol=0, atol=0, equal_nan=True)
    return out, grad


def reference_score_mod(fn, score):
    """The Python function on broadcast index tensors, and autograd's d out / d score."""
    s = score.clone().requires_grad_(True)
    out = fn(s, *_indices())
    out = torch.as_tensor(out)
    out = (out if out.is_floating_point() else out.float()).expand(score.shape)
    if out.requires_grad:
        (grad,) = torch.autograd.grad(out.sum(), s, allow_unused=True)
    else:
        grad = None
    return out.detach(), torch.zeros_like(score) if grad is None else grad


def run_mask_mod(fn):
    compiled = compile_mask_mod(fn)
    out = torch.full((B, H, M, N), -1, dtype=torch.int8)
    _mask_kernel[(B, H)](out, M, N, *out.stride()[:3], compiled.fn,
                         compiled.kernel_args(out.device), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
    assert (out >= 0).all(), "the kernel left elements unwritten"
    return out.bool()


def reference_mask_mod(fn):
    return torch.as_tensor(fn(*_indices())).bool().expand(B, H, M, N)


def _scores():
    return torch.randn(B, H, M, N) * 3


# ---- the mod library (closures over captured tensors, as users write them) -------------------

def relative_position_bias():
    table = torch.randn(M + N - 1)

    def rel_bias(score, b, h, q_idx, kv_idx):
        return score + table[q_idx - kv_idx + N - 1]
    return rel_bias


def alibi():
    slopes = torch.exp2(-torch.arange(1, H + 1, dtype=torch.float32))

    def alibi_mod(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * torch.abs(q_idx - kv_idx)
    return alibi_mod


def softcap(cap=5.0):
    def softcap_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)
    return softcap_mod


def head_scale():
    scales = torch.rand(H) + 0.5

    def head_scale_mod(score, b, h, q_idx, kv_idx):
        return score * scales[h]
    return head_scale_mod


def head_relative_bias():
    bias = torch.randn(H, M + N - 1)

    def bias_2d(score, b, h, q_idx, kv_idx):
        return score + bias[h, q_idx - kv_idx + N - 1]
    return bias_2d


def full_bias_strided():
    bias = torch.randn(N, M, H, B).permute(3, 2, 1, 0)     # (B, H, M, N), no unit stride

    def full_bias(score, b, h, q_idx, kv_idx):
        return score + bias[b, h, q_idx, kv_idx]
    return full_bias


def causal_score():
    def causal(score, b, h, q_idx, kv_idx):
        return torch.where(q_idx >= kv_idx, score, float("-inf"))
    return causal


def negative_positions():
    table = torch.randn(N)

    def wrap(score, b, h, q_idx, kv_idx):           # kv - q < 0: torch wraps to the end
        return score + table[kv_idx - q_idx]
    return wrap


def mixed_dtypes():
    half = torch.randn(M).half()
    flags = torch.rand(N) > 0.5
    ids = torch.randint(-5, 5, (M,), dtype=torch.int64)
    temperature = torch.tensor(1.7)

    def mixed(score, b, h, q_idx, kv_idx):
        return score / temperature + half[q_idx] * flags[kv_idx].float() + ids[q_idx]
    return mixed


def int_selects():
    bias = torch.randn(3, N)

    def selects(score, b, h, q_idx, kv_idx):
        # ints select rows (negative ones wrap); literals made inside the function are inlined
        # (one element) or passed as a buffer (several)
        return (score + bias[0, q_idx] + bias[-1][kv_idx] + bias[1, kv_idx] * 0.5
                + torch.tensor(0.25) * torch.tensor([1.0, -2.0, 3.0])[h])
    return selects


def integer_arithmetic():
    def ints(score, b, h, q_idx, kv_idx):
        d = q_idx - kv_idx
        out = score + (d // 3) + (d % 4) * 0.5 + torch.div(d, 3, rounding_mode="trunc")
        out = out + torch.div(d, 4, rounding_mode="floor") + d / (kv_idx + 1)
        out = out + torch.fmod(d, 3) + (d * b - h).float() ** 2 / 100
        return out + (q_idx & 3) + (kv_idx | 1) - (d ^ 2) + torch.clamp(d, -2, 3)
    return ints


def transcendental():
    def trans(score, b, h, q_idx, kv_idx):
        x = score / 4
        pos = torch.abs(x) + 0.5
        out = torch.exp(x) + torch.log(pos) + torch.sqrt(pos) + torch.rsqrt(pos)
        out = out + torch.sigmoid(x) + torch.sin(x) * torch.cos(x) + torch.tanh(x)
        out = out + torch.exp2(x) + torch.log2(pos) + torch.erf(x) + torch.reciprocal(pos)
        out = out + torch.expm1(x) + torch.log1p(pos) + torch.relu(x) + (1 - x) * 0.5 + 3 / pos
        return out + x ** 2 - x ** 3 + pos ** 0.5 + pos ** 1.7 + pos ** -1 + x ** 5 + 2.0 ** x
    return trans


def comparisons_and_logic():
    def logic(score, b, h, q_idx, kv_idx):
        near = (torch.abs(q_idx - kv_idx) <= 3) | (q_idx == kv_idx + 5)
        keep = near & ~(kv_idx > 17) ^ (h == 1)
        x = torch.where(keep, score, score * 0.1)
        x = torch.minimum(x, torch.full_like(x, 4.0)) + torch.maximum(score, -x)
        x = x.masked_fill(score > 5, 0.0) + torch.clamp(score, min=-1.0) + score.clamp(max=2.0)
        return x + torch.logical_and(q_idx > 2, score < 0).float() + torch.isnan(score).float()
    return logic


def rounding_casts():
    def casts(score, b, h, q_idx, kv_idx):
        x = score * 2.5
        out = torch.floor(x) + torch.ceil(x) + torch.trunc(x) + torch.round(x) + torch.sign(x)
        out = out + x.half().float() + x.bfloat16().float() + x.long().float() + x.int()
        out = out + torch.floor(q_idx - kv_idx) + torch.round(h)      # no-ops on integers
        return out + (x > 0).float() + x.bool().float() + x.to(torch.float64).float()
    return casts


def in_place():
    scales = torch.rand(H) + 0.5

    def inplace(score, b, h, q_idx, kv_idx):
        s = score * 1.0
        s.mul_(scales[h])
        s += (q_idx - kv_idx) * 0.1
        s.clamp_(-4.0, 4.0)
        return s
    return inplace


SCORE_MODS = {
    "relative_bias": relative_position_bias, "alibi": alibi, "softcap": softcap,
    "head_scale": head_scale, "bias_2d": head_relative_bias, "full_bias_strided": full_bias_strided,
    "causal": causal_score, "negative_wrap": negative_positions, "mixed_dtypes": mixed_dtypes,
    "int_selects": int_selects, "integer_arithmetic": integer_arithmetic,
    "transcendental": transcendental, "logic": comparisons_and_logic, "rounding": rounding_casts,
    "in_place": in_place, "identity": lambda: None,
    "ignores_score": lambda: (lambda score, b, h, q_idx, kv_idx: (h + 1) * 0.5),  # scalar result
}


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def _sliding_window(window=4):
    def sliding(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx <= window)
    return sliding


def _document():
    doc = torch.sort(torch.randint(0, 4, (N,))).values    # doc ids of every position

    def document(b, h, q_idx, kv_idx):
        return doc[q_idx] == doc[kv_idx]
    return document


def _prefix_lm():
    prefix = torch.tensor([3, 7])                           # per batch

    def prefix_lm(b, h, q_idx, kv_idx):
        return (kv_idx < prefix[b]) | (q_idx >= kv_idx)
    return prefix_lm


def _dilated(step=2):
    def dilated(b, h, q_idx, kv_idx):
        return ((q_idx - kv_idx) % step == 0) & (q_idx >= kv_idx)
    return dilated


def _head_mask():
    visible = torch.tensor([True, False, True])

    def head_mask(b, h, q_idx, kv_idx):
        return visible[h] | (q_idx == kv_idx)
    return head_mask


MASK_MODS = {
    "causal": lambda: _causal, "sliding_window": _sliding_window, "document": _document,
    "prefix_lm": _prefix_lm, "dilated": _dilated, "head_mask": _head_mask,
    "logical_ops": lambda: lambda b, h, q, kv: torch.logical_or(
        torch.logical_and(q >= kv, torch.logical_not(kv == 3)), torch.logical_xor(q == 0, h > 0)),
    "full": lambda: None,
    "head_only": lambda: (lambda b, h, q_idx, kv_idx: h != 1),          # a scalar per program
    "rows_only": lambda: (lambda b, h, q_idx, kv_idx: q_idx < 5),       # (BLOCK_M, 1)
}


# ---- values and gradients ----------------------------------------------------------------------

@pytest.mark.parametrize("name", list(SCORE_MODS))
def test_score_mod_matches_torch(name):
    fn = SCORE_MODS[name]()
    score = _scores()
    out, grad = run_score_mod(fn, score)
    ref_fn = fn if fn is not None else (lambda s, b, h, q, kv: s)
    ref, ref_grad = reference_score_mod(ref_fn, score)
    torch.testing.assert_close(out, ref, rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(grad, ref_grad, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", ["relative_bias", "full_bias_strided", "logic"])
def test_score_mod_transposed_tile(name):
    """The dK/dV orientation: the tile is (BLOCK_N, BLOCK_M), q_idx (1, BLOCK_M), kv_idx
    (BLOCK_N, 1); the same generated code broadcasts either way."""
    fn = SCORE_MODS[name]()
    score = _scores()
    out, grad = run_score_mod(fn, score, transposed=True)
    ref, ref_grad = reference_score_mod(fn, score)
    torch.testing.assert_close(out, ref, rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(grad, ref_grad, rtol=2e-5, atol=2e-5)


def test_gradient_conventions_at_kinks_and_ties():
    """abs at 0, clamp at its bounds, min/max ties, relu at 0: torch's choices."""
    def kinks(score, b, h, q_idx, kv_idx):
        return (torch.abs(score) + torch.clamp(score, -0.5, 0.5) + torch.maximum(score, score * 1.0)
                + torch.minimum(score, torch.zeros_like(score)) + torch.relu(score)
                + torch.clamp_min(score, 0.5))
    score = _scores()
    score.view(-1)[::5] = 0.0
    score.view(-1)[1::7] = 0.5
    score.view(-1)[2::11] = -0.5
    out, grad = run_score_mod(kinks, score)
    ref, ref_grad = reference_score_mod(kinks, score)
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grad, ref_grad, rtol=0, atol=0)


def test_softcap_gradient_in_float64_reference():
    """The tanh used in the kernel is accurate near 0 and saturates cleanly."""
    fn = softcap(2.0)
    score = torch.cat([torch.linspace(-60, 60, B * H * M * N - 6),
                       torch.tensor([0.0, 1e-6, -1e-6, 0.1249, 0.1251, -0.2])]).reshape(B, H, M, N)
    out, grad = run_score_mod(fn, score)
    ref, ref_grad = reference_score_mod(fn, score.double())
    torch.testing.assert_close(out.double(), ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grad.double(), ref_grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(MASK_MODS))
def test_mask_mod_matches_torch(name):
    fn = MASK_MODS[name]()
    out = run_mask_mod(fn)
    ref = reference_mask_mod(fn if fn is not None else (lambda b, h, q, kv: torch.tensor(True)))
    assert torch.equal(out, ref), f"{(out != ref).sum()} of {out.numel()} mask elements differ"


def test_out_of_range_reads_are_masked():
    """Padded rows/columns index past a tensor sized by the sequence: read as 0, no fault."""
    doc = torch.arange(M)                                   # only M entries, kv_idx goes to 31

    def doc_bias(score, b, h, q_idx, kv_idx):
        return score + doc[kv_idx].float()
    score = _scores()
    out, _ = run_score_mod(doc_bias, score)
    kv = torch.arange(N)
    expected = score + torch.where(kv < M, kv, 0).float()   # torch would raise past M
    torch.testing.assert_close(out, expected)


def test_buffers_are_the_users_tensors_and_updates_are_seen():
    table = torch.zeros(M + N - 1)

    def rel_bias(score, b, h, q_idx, kv_idx):
        return score + table[q_idx - kv_idx + N - 1]
    compiled = compile_score_mod(rel_bias)
    assert compiled.n_buffers == 1 and compiled.buffers[0] is table
    table.copy_(torch.randn_like(table))                    # in-place update, no recompile
    score = _scores()
    out, _ = run_score_mod(rel_bias, score)
    ref, _ = reference_score_mod(rel_bias, score)
    torch.testing.assert_close(out, ref)


# ---- caching -------------------------------------------------------------------------------------

def test_same_function_hits_the_cache():
    fn = relative_position_bias()
    first = compile_score_mod(fn)
    before = cache_info()
    again = compile_score_mod(fn)
    after = cache_info()
    assert after["traces"] == before["traces"], "the second compile traced again"
    assert again.fn is first.fn and again.grad_fn is first.grad_fn
    assert again.buffers[0] is first.buffers[0]


def test_new_closure_over_new_tensors_reuses_the_code():
    """A fresh lambda per call over a new table of the same shape: no trace, new buffer."""
    first = compile_score_mod(relative_position_bias())
    before = cache_info()
    second_fn = relative_position_bias()
    second = compile_score_mod(second_fn)
    assert cache_info()["traces"] == before["traces"]
    assert second.fn is first.fn
    assert second.buffers[0] is second_fn.__closure__[0].cell_contents
    assert second.buffers[0] is not first.buffers[0]


def test_identical_code_from_different_functions_shares_jit_functions():
    def a(score, b, h, q_idx, kv_idx):
        return torch.where(q_idx >= kv_idx, score * 0.5, float("-inf"))

    def c(score, b, h, q_idx, kv_idx):
        keep = q_idx >= kv_idx
        return torch.where(keep, score * 0.5, float("-inf"))
    assert compile_score_mod(a).fn is compile_score_mod(c).fn


def test_captured_constants_change_the_code():
    soft5, soft10 = compile_score_mod(softcap(5.0)), compile_score_mod(softcap(10.0))
    assert soft5.key != soft10.key
    assert compile_score_mod(softcap(5.0)).fn is soft5.fn


def test_table_of_another_size_reuses_the_module():
    small, big = torch.randn(8), torch.randn(64)

    def make(table):
        return lambda score, b, h, q_idx, kv_idx: score + table[q_idx]
    first, second = compile_score_mod(make(small)), compile_score_mod(make(big))
    assert first.fn is second.fn and second.buffers[0] is big


def test_mods_over_objects_are_traced_each_time_but_correct():
    class Holder:
        pass
    holder = Holder()
    holder.table = torch.randn(N)

    def from_attr(score, b, h, q_idx, kv_idx):
        return score + holder.table[kv_idx]
    first = compile_score_mod(from_attr)
    holder.table = torch.randn(N)                            # rebinding must be picked up
    second = compile_score_mod(from_attr)
    assert second.buffers[0] is holder.table and second.fn is first.fn


def test_combinators_and_partials_are_cached():
    """and_masks-style closures over functions, and functools.partial, fingerprint through."""
    import functools

    def and_masks(*mods):
        def combined(b, h, q_idx, kv_idx):
            out = mods[0](b, h, q_idx, kv_idx)
            for mod in mods[1:]:
                out = out & mod(b, h, q_idx, kv_idx)
            return out
        return combined

    def window(b, h, q_idx, kv_idx, size):
        return q_idx - kv_idx <= size

    fn = and_masks(_causal, _document(), functools.partial(window, size=3))
    out = run_mask_mod(fn)
    assert torch.equal(out, reference_mask_mod(fn))
    before = cache_info()["traces"]
    fn2 = and_masks(_causal, _document(), functools.partial(window, size=3))
    assert compile_mask_mod(fn2).fn is compile_mask_mod(fn).fn
    assert cache_info()["traces"] == before
    fn3 = and_masks(_causal, _document(), functools.partial(window, size=5))
    assert compile_mask_mod(fn3).key != compile_mask_mod(fn).key


def test_kernel_args_layout():
    bias = torch.randn(5, 7)[:, ::2]                        # (5, 4), strides (7, 2)
    flags = torch.tensor([True, False])
    compiled = compile_score_mod(
        lambda score, b, h, q_idx, kv_idx: score + bias[h, q_idx] * flags[b].float())
    args = compiled.kernel_args()
    assert len(args) == 5 + 3
    assert args[0].data_ptr() == bias.data_ptr() and args[1:5] == (5, 7, 4, 2)
    assert args[5].dtype == torch.uint8 and args[6:] == (2, 1)


# ---- errors -----------------------------------------------------------------------------------

def test_unsupported_op_names_op_line_and_fallback():
    def uses_atan(score, b, h, q_idx, kv_idx):
        return torch.atan(score)
    with pytest.raises(NotImplementedError) as err:
        compile_score_mod(uses_atan)
    assert isinstance(err.value, UnsupportedModError)
    msg = str(err.value)
    assert "aten.atan" in msg and "uses_atan" in msg and "torch.atan(score)" in msg
    assert "torch path" in msg


def test_python_control_flow_on_values_is_rejected():
    def branchy(score, b, h, q_idx, kv_idx):
        if q_idx > kv_idx:
            return score
        return score * 0
    with pytest.raises(NotImplementedError, match="torch.where"):
        compile_score_mod(branchy)

    temperature = torch.tensor(2.0)

    def reads_item(score, b, h, q_idx, kv_idx):
        return score / temperature.item()
    with pytest.raises(NotImplementedError, match=r"\.item\(\)"):
        compile_score_mod(reads_item)


def test_chained_indexing_is_rejected_with_the_rewrite():
    bias = torch.randn(H, N)

    def chained(score, b, h, q_idx, kv_idx):
        return score + bias[h][kv_idx]
    with pytest.raises(NotImplementedError, match=r"bias\[h, q_idx - kv_idx\]"):
        compile_score_mod(chained)


@pytest.mark.parametrize("body, match", [
    ("score + table", "not indexed"),
    ("score + table[1:][q_idx]", "slice"),
    ("score + table.sum()", "reductions"),
    ("score ** score", "torch.exp"),
    ("score + table[q_idx > 2]", "boolean-mask"),
])
def test_unsupported_constructs(body, match):
    table = torch.randn(N)
    fn = eval(f"lambda score, b, h, q_idx, kv_idx: {body}", {"torch": torch, "table": table})
    with pytest.raises(NotImplementedError, match=match):
        compile_score_mod(fn)


def test_more_buffers_than_the_maximum():
    tensors = [torch.randn(N) for _ in range(MAX_BUFFERS + 1)]

    def many(score, b, h, q_idx, kv_idx):
        out = score
        for t in tensors:
            out = out + t[kv_idx]
        return out
    with pytest.raises(NotImplementedError, match=f"more than {MAX_BUFFERS} captured tensors"):
        compile_score_mod(many)
    del tensors[-1]
    assert compile_score_mod(many).n_buffers == MAX_BUFFERS


def test_not_a_function():
    with pytest.raises(TypeError, match="score_mod must be a function"):
        compile_score_mod("score + 1")


# ---- real compilation (no GPU needed) -----------------------------------------------------------

_COMPILE_SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    import torch, triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    import test_codegen as t
    from flashtile.codegen import compile_score_mod, compile_mask_mod

    def ty(x):
        if isinstance(x, torch.Tensor):
            return "*" + {{torch.float32: "fp32", torch.float16: "fp16", torch.float64: "fp64",
                          torch.int64: "i64", torch.uint8: "u8"}}[x.dtype]
        return "i32"

    target = GPUTarget("cuda", 90, 32)
    for name in {score_names!r}:
        c = compile_score_mod(t.SCORE_MODS[name]())
        args = tuple(ty(a) for a in c.kernel_args())
        sig = dict(S="*fp32", OUT="*fp32", GRAD="*fp32", OUT2="*fp32", GRAD2="*fp32",
                   seqlen_q="i32", seqlen_k="i32", stride_b="i32", stride_h="i32", stride_m="i32",
                   FN="constexpr", GRAD_FN="constexpr", FWD_GRAD_FN="constexpr", args=args,
                   BLOCK_M="constexpr", BLOCK_N="constexpr", TRANSPOSED="constexpr")
        src = ASTSource(t._score_kernel, sig, dict(FN=c.fn, GRAD_FN=c.grad_fn,
                        FWD_GRAD_FN=c.fwd_grad_fn, BLOCK_M=64, BLOCK_N=64, TRANSPOSED=False))
        assert triton.compile(src, target=target).asm["cubin"], name
    for name in {mask_names!r}:
        c = compile_mask_mod(t.MASK_MODS[name]())
        args = tuple(ty(a) for a in c.kernel_args())
        sig = dict(OUT="*i8", seqlen_q="i32", seqlen_k="i32", stride_b="i32", stride_h="i32",
                   stride_m="i32", FN="constexpr", args=args, BLOCK_M="constexpr",
                   BLOCK_N="constexpr")
        src = ASTSource(t._mask_kernel, sig, dict(FN=c.fn, BLOCK_M=64, BLOCK_N=64))
        assert triton.compile(src, target=target).asm["cubin"], name
    print("compiled")
""")


def test_generated_code_compiles_for_sm90(tmp_path):
    """The interpreter is lenient; compile the test kernels with the real NVIDIA backend (to a
    cubin, no GPU needed) for a representative set of mods."""
    nvidia_bin = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if not nvidia_bin.exists():
        pytest.skip("triton's bundled ptxas is missing")
    script = _COMPILE_SCRIPT.format(
        tests=str(Path(__file__).parent),
        score_names=["mixed_dtypes", "integer_arithmetic", "logic", "transcendental",
                     "rounding", "full_bias_strided", "int_selects", "negative_wrap", "in_place",
                     "identity"],
        mask_names=["document", "prefix_lm", "full"])
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["FLASHTILE_CACHE_DIR"] = str(tmp_path)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "compiled" in proc.stdout, proc.stderr[-4000:]
