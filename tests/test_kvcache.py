"""flash_attn_with_kvcache on both backends against a float64 reference.

For every case the test builds a cache filled with a random pattern, snapshots it, calls the
function, and checks three things:

1. the appended slots hold the new keys rotated by an independent rotary computation written
   below: bitwise equal to the float32 evaluation ``x0*cos - x1*sin`` / ``x1*cos + x0*sin``
   (each product rounded, as the kernels compute it, then rounded once to the cache dtype), and
   within 1 ulp of the cache dtype of the same rotation in float64, plus the float32 rounding of
   the two products (``eps32 * (|x0 cos| + |x1 sin|)``, visible only for float32 caches when the
   products nearly cancel); the new values and unrotated columns are bitwise copies;
2. every other byte of the cache (other sequences' rows/pages, spare pages, slots before and
   after the written range) equals the snapshot (canaries);
3. out and lse against ``attention_reference`` (float64) on each sequence's valid slots of the
   resulting cache, with the rule err(ours) <= 2 * err(plain torch in the same dtype) + floor.

Without a GPU the Triton path runs under the interpreter (fp32/fp16, small shapes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import pytest
import torch
from utils import BACKENDS, DEVICE, DTYPE, FLOOR, GPU, assert_within_budget, max_err

import flashtile
from flashtile import attention_reference
from flashtile.kvcache import flash_attn_with_kvcache
from flashtile.params import AttentionParams

# The `backend` fixture (tests/conftest.py) runs a test on the Triton path and on the torch path.


# ----------------------------------------------------------------------------------------------
# Cases and inputs

@dataclass
class Case:
    batch: int = 3
    seqlen_q: int = 1
    hq: int = 4
    hkv: int = 2
    d: int = 32
    dv: int | None = None
    capacity: int = 80                 # slots per sequence
    seqlen_new: int = 1                # 0: no append
    lens: list | int = field(default_factory=lambda: [5, 57, 30])   # cache_seqlens
    leftpad: list | None = None
    batch_idx: bool = False            # permuted rows of a larger cache
    page: int | None = None            # paged with this page size
    rotary: str | None = None          # "interleaved" | "half"
    rotary_dim: int | None = None      # default: d
    causal: bool = False
    window: tuple = (-1, -1)
    softcap: float = 0.0
    alibi: str | None = None           # "h" | "bh"
    num_splits: int = 1
    dtype: torch.dtype = torch.float32

    @property
    def head_dv(self) -> int:
        return self.dv or self.d


CASES = {
    "decode-mqa4": Case(hq=4, hkv=1),
    "decode-gqa2-split3": Case(num_splits=3),
    "decode-split0": Case(num_splits=0, capacity=600, lens=[300, 598, 1]),
    "sq3-causal-split3": Case(seqlen_q=3, seqlen_new=3, causal=True, num_splits=3,
                              lens=[5, 60, 0]),
    "sq4-new2-causal": Case(seqlen_q=4, seqlen_new=2, causal=True, lens=[1, 40, 20]),
    "window-sq3": Case(seqlen_q=3, seqlen_new=3, window=(9, 2), num_splits=3, lens=[4, 70, 33]),
    "causal-window": Case(seqlen_q=2, seqlen_new=2, causal=True, window=(6, -1)),
    "softcap": Case(softcap=2.0, num_splits=3),
    "alibi-h-causal": Case(alibi="h", causal=True, seqlen_q=2, seqlen_new=2),
    "alibi-bh-split3": Case(alibi="bh", num_splits=3),
    "leftpad-causal": Case(leftpad=[2, 17, 30], causal=True, seqlen_q=2, seqlen_new=2,
                           num_splits=3, rotary="half"),
    "batch-idx": Case(batch_idx=True, seqlen_new=2, num_splits=3),
    "paged16": Case(page=16, seqlen_new=2, num_splits=3, lens=[5, 62, 33]),
    "paged32-leftpad": Case(page=32, capacity=96, leftpad=[3, 40, 0], seqlen_new=1,
                            rotary="interleaved"),
    "rotary-interleaved-causal": Case(rotary="interleaved", causal=True, seqlen_q=3,
                                      seqlen_new=3, lens=[0, 50, 9]),
    "rotary-half-noncausal": Case(rotary="half", seqlen_q=2, seqlen_new=2),
    "rotary-partial": Case(rotary="half", rotary_dim=16, d=40, dv=24, seqlen_new=2),
    "no-append": Case(seqlen_new=0, num_splits=3),
    "no-append-int-len": Case(seqlen_new=0, lens=45),
    "headdim-40-fp16": Case(d=40, dv=24, dtype=torch.float16, seqlen_new=2, num_splits=3),
    "fp16-paged-rotary": Case(dtype=torch.float16, page=16, rotary="interleaved",
                              rotary_dim=16, causal=True, seqlen_q=2, seqlen_new=2,
                              num_splits=3),
    "empty-rows": Case(seqlen_q=4, seqlen_new=1, causal=True, lens=[0, 2, 40]),
    "empty-cache": Case(seqlen_new=0, lens=[0, 0, 7], causal=True, seqlen_q=2, num_splits=3),
    "all": Case(page=16, leftpad=[1, 20, 4], rotary="half", rotary_dim=16, causal=True,
                window=(20, -1), softcap=3.0, alibi="bh", seqlen_q=2, seqlen_new=2,
                num_splits=3, hq=4, hkv=1, dtype=torch.float16),
}


def ulp(x: torch.Tensor) -> torch.Tensor:
    """Spacing of the representable numbers of ``x.dtype`` at ``x`` (float64 tensor)."""
    info = torch.finfo(x.dtype)
    mag = x.double().abs().clamp_min(info.tiny)
    return torch.exp2(torch.floor(torch.log2(mag))) * info.eps


def rotary_tables(length: int, rotary_dim: int, dtype):
    """cos/sin of random angles (fresh random, never a regular pattern)."""
    angle = torch.rand(length, rotary_dim // 2, device=DEVICE, dtype=torch.float64) * 2 * math.pi
    return torch.cos(angle).to(dtype), torch.sin(angle).to(dtype)


def rotate_independent(x, cos, sin, positions, interleaved, compute, magnitude=False):
    """Rotary embedding written out column pair by column pair, in ``compute`` dtype.
    ``magnitude=True`` returns ``|x0 cos| + |x1 sin|`` per output column instead (the scale of
    the rounding error of the two products)."""
    rd = 2 * cos.shape[1]
    out = torch.zeros_like(x, dtype=compute) if magnitude else x.to(compute).clone()
    c = cos.to(compute)[positions]                                       # (b, s, rd/2)
    s = sin.to(compute)[positions]
    for f in range(rd // 2):
        i, j = (2 * f, 2 * f + 1) if interleaved else (f, f + rd // 2)
        x0, x1 = x[..., i].to(compute), x[..., j].to(compute)
        cf, sf = c[..., f, None], s[..., f, None]
        if magnitude:
            out[..., i] = (x0 * cf).abs() + (x1 * sf).abs()
            out[..., j] = (x1 * cf).abs() + (x0 * sf).abs()
        else:
            out[..., i] = x0 * cf - x1 * sf
            out[..., j] = x1 * cf + x0 * sf
    return out


@dataclass
class Inputs:
    q: torch.Tensor
    k_cache: torch.Tensor          # what the function gets (contiguous or paged)
    v_cache: torch.Tensor
    k: torch.Tensor | None
    v: torch.Tensor | None
    kwargs: dict                   # the remaining arguments of flash_attn_with_kvcache
    lens: torch.Tensor             # int64 (batch,)
    starts: torch.Tensor           # int64 (batch,)
    rows: torch.Tensor | None      # cache row of each sequence (contiguous)
    table: torch.Tensor | None     # block table (paged)


def make_inputs(case: Case, logical=None) -> Inputs:
    """Random inputs; ``logical`` ``(k, v)`` caches ``(batch, capacity, hkv, d)`` fix the cache
    content so that a paged and a contiguous layout of the same tokens can be compared."""
    dt, b = case.dtype, case.batch
    q = torch.randn(b, case.seqlen_q, case.hq, case.d, device=DEVICE, dtype=dt)
    k = v = None
    if case.seqlen_new:
        k = torch.randn(b, case.seqlen_new, case.hkv, case.d, device=DEVICE, dtype=dt)
        v = torch.randn(b, case.seqlen_new, case.hkv, case.head_dv, device=DEVICE, dtype=dt)
    if logical is None:
        logical = (torch.randn(b, case.capacity, case.hkv, case.d, device=DEVICE, dtype=dt),
                   torch.randn(b, case.capacity, case.hkv, case.head_dv, device=DEVICE, dtype=dt))
    lens_list = case.lens if isinstance(case.lens, list) else [case.lens] * b
    lens = torch.tensor(lens_list, device=DEVICE)
    starts = torch.tensor(case.leftpad or [0] * b, device=DEVICE)
    kwargs = dict(cache_seqlens=(case.lens if isinstance(case.lens, int)
                                 else lens.to(torch.int32)),
                  causal=case.causal, window_size=case.window, softcap=case.softcap,
                  num_splits=case.num_splits, return_softmax_lse=True)
    if case.leftpad is not None:
        kwargs["cache_leftpad"] = starts.to(torch.int32)
    rows = table = None
    if case.page:
        per_seq = case.capacity // case.page
        num_blocks = b * per_seq + 3                                     # 3 spare pages
        perm = torch.randperm(num_blocks, device=DEVICE)
        table = perm[:b * per_seq].view(b, per_seq)
        k_cache = torch.randn(num_blocks, case.page, case.hkv, case.d, device=DEVICE, dtype=dt)
        v_cache = torch.randn(num_blocks, case.page, case.hkv, case.head_dv, device=DEVICE,
                              dtype=dt)
        k_cache[table.flatten()] = logical[0].reshape(-1, case.page, case.hkv, case.d)
        v_cache[table.flatten()] = logical[1].reshape(-1, case.page, case.hkv, case.head_dv)
        kwargs["block_table"] = table.to(torch.int32)
    elif case.batch_idx:
        rows = torch.randperm(b + 2, device=DEVICE)[:b]                  # 2 unused rows
        k_cache = torch.randn(b + 2, case.capacity, case.hkv, case.d, device=DEVICE, dtype=dt)
        v_cache = torch.randn(b + 2, case.capacity, case.hkv, case.head_dv, device=DEVICE,
                              dtype=dt)
        k_cache[rows], v_cache[rows] = logical
        kwargs["cache_batch_idx"] = rows.to(torch.int32)
    else:
        rows = torch.arange(b, device=DEVICE)
        k_cache, v_cache = (t.clone() for t in logical)
    if case.rotary:
        rd = case.rotary_dim or case.d
        kwargs["rotary_cos"], kwargs["rotary_sin"] = rotary_tables(case.capacity, rd, dt)
        kwargs["rotary_interleaved"] = case.rotary == "interleaved"
    if case.alibi == "h":
        kwargs["alibi_slopes"] = torch.rand(case.hq, device=DEVICE) * 0.5
    elif case.alibi == "bh":
        kwargs["alibi_slopes"] = torch.rand(b, case.hq, device=DEVICE) * 0.5
    return Inputs(q, k_cache, v_cache, k, v, kwargs, lens, starts, rows, table)


def physical(inp: Inputs, case: Case, bi: int, slots: torch.Tensor):
    """Index pair addressing slots of sequence ``bi`` in the cache tensors."""
    if inp.table is not None:
        return inp.table[bi, slots // case.page], slots % case.page
    return inp.rows[bi].expand(slots.shape), slots


def run(inp: Inputs):
    return flash_attn_with_kvcache(inp.q, inp.k_cache, inp.v_cache, inp.k, inp.v, **inp.kwargs)


# ----------------------------------------------------------------------------------------------
# The checks

def check_append_and_canaries(case: Case, inp: Inputs, k_before, v_before):
    """Appended bytes (see module docstring) and untouched canaries everywhere else."""
    written = torch.zeros(inp.k_cache.shape[:2], dtype=torch.bool, device=DEVICE)
    if case.seqlen_new:
        new = torch.arange(case.seqlen_new, device=DEVICE)
        positions = inp.lens[:, None] + new                               # (b, new)
        k_exact = k_same = inp.k
        k_scale = torch.zeros_like(inp.k, dtype=torch.float64)
        if case.rotary:
            cos, sin = inp.kwargs["rotary_cos"], inp.kwargs["rotary_sin"]
            inter = case.rotary == "interleaved"
            k_exact = rotate_independent(inp.k, cos, sin, positions, inter, torch.float64)
            k_same = rotate_independent(inp.k, cos, sin, positions, inter,
                                        torch.float32).to(case.dtype)
            k_scale = rotate_independent(inp.k, cos, sin, positions, inter, torch.float64,
                                         magnitude=True)
        for bi in range(case.batch):
            idx = physical(inp, case, bi, positions[bi])
            written[idx] = True
            got_k, got_v = inp.k_cache[idx], inp.v_cache[idx]
            assert torch.equal(got_v, inp.v[bi]), "appended values must be bitwise copies"
            assert torch.equal(got_k, k_same[bi]), \
                "appended keys differ from the float32 rotary (products rounded separately)"
            # 1 ulp of the cache dtype, plus the float32 rounding of the two products (which
            # only shows for float32 caches when x0*cos and x1*sin nearly cancel).
            dist = (got_k.double() - k_exact[bi].double()).abs()
            bound = ulp(got_k) + torch.finfo(torch.float32).eps * k_scale[bi]
            assert torch.all(dist <= bound), \
                f"appended keys too far from the float64 rotary (max {dist.max():.3e})"
    for name, now, before in (("k_cache", inp.k_cache, k_before), ("v_cache", inp.v_cache,
                                                                    v_before)):
        assert torch.equal(now[~written], before[~written]), \
            f"{name}: a slot outside the appended range was modified"


def reference_params(case: Case, alibi):
    left, right = case.window
    if case.causal:
        right = 0 if right < 0 else min(right, 0)
    return AttentionParams(softmax_scale=1.0 / math.sqrt(case.d), window_left=left,
                           window_right=right, causal=case.causal, softcap=case.softcap,
                           alibi_slopes=alibi)


def check_attention(case: Case, inp: Inputs, out, lse):
    """out/lse per sequence against attention_reference on its valid slots of the cache."""
    assert out.shape == (case.batch, case.seqlen_q, case.hq, case.head_dv)
    assert out.dtype == case.dtype and lse.dtype == torch.float32
    assert lse.shape == (case.batch, case.hq, case.seqlen_q)
    q64, q_dt = inp.q.double(), inp.q
    if case.rotary:
        pos = inp.lens[:, None].expand(case.batch, case.seqlen_q)
        if case.causal or case.window != (-1, -1):
            pos = pos + torch.arange(case.seqlen_q, device=DEVICE)
        cos, sin = inp.kwargs["rotary_cos"], inp.kwargs["rotary_sin"]
        q64 = rotate_independent(inp.q, cos, sin, pos, case.rotary == "interleaved",
                                 torch.float64)
        q_dt = q64.to(case.dtype)
    slopes = inp.kwargs.get("alibi_slopes")
    ends = inp.lens + case.seqlen_new
    for bi in range(case.batch):
        slots = torch.arange(int(inp.starts[bi]), int(ends[bi]), device=DEVICE)
        idx = physical(inp, case, bi, slots)
        keys, values = inp.k_cache[idx][None], inp.v_cache[idx][None]
        alibi = slopes[bi:bi + 1] if slopes is not None and slopes.dim() == 2 else slopes
        params = reference_params(case, alibi)
        ref = attention_reference(q64[bi:bi + 1], keys.double(), values.double(), params)
        same = attention_reference(q_dt[bi:bi + 1], keys, values, params, dtype=case.dtype)
        for name, ours, r, s in zip(("out", "lse"), (out[bi:bi + 1], lse[bi:bi + 1]), ref, same):
            assert_within_budget(f"{name}[{bi}]", ours, r, s, FLOOR[case.dtype])
        empty = torch.isinf(ref[1])                                      # (1, hq, sq)
        if empty.any():                                                  # rows seeing no key
            assert torch.all(lse[bi:bi + 1][empty] == float("-inf"))
            assert torch.all(out[bi:bi + 1][empty.transpose(1, 2)] == 0)


def check_case(case: Case, inp: Inputs | None = None):
    inp = inp or make_inputs(case)
    inputs_before = [t.clone() for t in (inp.q, inp.k, inp.v, inp.kwargs.get("rotary_cos"))
                     if t is not None]
    k_before, v_before = inp.k_cache.clone(), inp.v_cache.clone()
    out, lse = run(inp)
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    for before, now in zip(inputs_before, (t for t in (inp.q, inp.k, inp.v,
                                                       inp.kwargs.get("rotary_cos"))
                                           if t is not None)):
        assert torch.equal(before, now), "only the cache may be modified"
    check_append_and_canaries(case, inp, k_before, v_before)
    check_attention(case, inp, out, lse)
    return inp, out, lse


# ----------------------------------------------------------------------------------------------
# Tests

@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_kvcache_matrix(backend, name):
    case = CASES[name]
    if GPU and case.dtype == torch.float32:
        case = replace(case, dtype=torch.float16)
    check_case(case)


@pytest.mark.parametrize("page", [16, 32])
def test_paged_equals_contiguous(backend, page):
    """The same tokens in a contiguous and a paged cache: identical outputs and appended bytes."""
    dt = DTYPE
    case = Case(capacity=96, lens=[5, 90, 47], leftpad=[2, 40, 0], seqlen_q=2, seqlen_new=2,
                rotary="half", causal=True, num_splits=3, dtype=dt)
    logical = (torch.randn(3, 96, 2, 32, device=DEVICE, dtype=dt),
               torch.randn(3, 96, 2, 32, device=DEVICE, dtype=dt))
    contiguous = make_inputs(case, logical)
    paged = make_inputs(replace(case, page=page), logical)
    for name in ("rotary_cos", "rotary_sin"):
        paged.kwargs[name] = contiguous.kwargs[name]
    paged.q, paged.k, paged.v = contiguous.q, contiguous.k, contiguous.v
    out_c, lse_c = run(contiguous)
    out_p, lse_p = run(paged)
    assert torch.equal(out_c, out_p) and torch.equal(lse_c, lse_p)
    gathered_k = paged.k_cache[paged.table.flatten()].reshape(3, 96, 2, 32)
    gathered_v = paged.v_cache[paged.table.flatten()].reshape(3, 96, 2, 32)
    assert torch.equal(gathered_k, contiguous.k_cache)
    assert torch.equal(gathered_v, contiguous.v_cache)


def test_backends_agree():
    """Torch and Triton paths append the same bytes and give the same outputs (to rounding)."""
    dt = DTYPE
    case = Case(page=16, rotary="interleaved", rotary_dim=16, causal=True, seqlen_q=2,
                seqlen_new=2, num_splits=3, dtype=dt)
    base = make_inputs(case)
    results = {}
    for name in BACKENDS:
        inp = replace(base, k_cache=base.k_cache.clone(), v_cache=base.v_cache.clone())
        flashtile.set_backend(name)
        try:
            results[name] = (*run(inp), inp.k_cache, inp.v_cache)
        finally:
            flashtile.set_backend(None)
    (o_t, l_t, k_t, v_t), (o_k, l_k, k_k, v_k) = results["torch"], results["triton"]
    assert torch.equal(k_t, k_k) and torch.equal(v_t, v_k)
    assert max_err(o_k, o_t) < 20 * FLOOR[dt] and max_err(l_k, l_t) < 20 * FLOOR[dt]


def test_split_counts_agree(backend, monkeypatch):
    """num_splits 1, 3, 0 and 20 (more splits than one merge step of 16) give the same answer
    (up to the merge's rounding)."""
    from flashtile.kernels import decode

    monkeypatch.setattr(decode, "COMBINE_MAX_BLOCK_S", 16)          # merge in steps of 16
    # 302 keys = 19 tiles of the interpreter's 16 keys: with 20 splits, splits 16-18 hold keys,
    # so the combine's second step of 16 splits has to discount the first. The last keys of
    # sequence 1 are made to score high so that they do raise the running max.
    case = Case(capacity=400, lens=[100, 300, 7], seqlen_q=2, seqlen_new=2, causal=True)
    base = make_inputs(case)
    q_dir = base.q[1].sum(dim=(0, 1))                                    # (d,)
    base.k_cache[1, 270:300] += 0.5 * q_dir / q_dir.norm()
    outs = []
    for splits in (1, 3, 0, 20):
        inp = replace(base, k_cache=base.k_cache.clone(), v_cache=base.v_cache.clone(),
                      kwargs={**base.kwargs, "num_splits": splits})
        outs.append(run(inp))
    for out, lse in outs[1:]:
        assert max_err(out, outs[0][0]) < 1e-5 and max_err(lse, outs[0][1]) < 1e-5


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged16"])
def test_strided_inputs(backend, paged):
    """Views with only the last dim contiguous: k_cache/v_cache interleaved in one KV buffer,
    q/k/v transposed views, cos/sin with different row strides."""
    dt = DTYPE
    case = Case(page=16 if paged else None, rotary="interleaved", rotary_dim=16, causal=True,
                seqlen_q=2, seqlen_new=2, num_splits=3, dtype=dt)
    inp = make_inputs(case)

    def transposed(x):                         # same values, (b, h, s, d) memory
        return x.transpose(1, 2).contiguous().transpose(1, 2)

    kv = torch.stack([inp.k_cache, inp.v_cache], dim=2)                 # (n, S, 2, hkv, d)
    inp.k_cache, inp.v_cache = kv[:, :, 0], kv[:, :, 1]
    inp.q, inp.k, inp.v = transposed(inp.q), transposed(inp.k), transposed(inp.v)
    wide = torch.cat([inp.kwargs["rotary_sin"], torch.rand_like(inp.kwargs["rotary_sin"])], 1)
    inp.kwargs["rotary_sin"] = wide[:, :8]
    assert inp.kwargs["rotary_sin"].stride(0) != inp.kwargs["rotary_cos"].stride(0)
    assert inp.q.stride(1) != inp.q.shape[2] * inp.q.shape[3]
    check_case(case, inp)


def test_value_checks_switch(monkeypatch):
    """set_value_checks(False) skips the checks that read tensor values (one sync per call)."""
    import flashtile.kvcache as kvcache

    calls = []
    monkeypatch.setattr(kvcache, "check_values", lambda *a: calls.append(1))
    inp = make_inputs(Case())
    run(inp)
    assert calls == [1]
    with kvcache.value_checks(False):
        run(make_inputs(Case()))
    assert calls == [1]
    monkeypatch.setenv("FLASHTILE_CHECK_VALUES", "0")
    run(make_inputs(Case()))
    assert calls == [1]


def _poison_outside(inp: Inputs, case: Case, value: float):
    """Fill every cache slot outside the sequences' valid ranges (after the append) with
    ``value``: what an uninitialised cache may hold there. Paged: also the spare pages."""
    ends = inp.lens + case.seqlen_new
    for cache in (inp.k_cache, inp.v_cache):
        if inp.table is not None:
            used = torch.zeros(cache.shape[0], dtype=torch.bool, device=DEVICE)
            used[inp.table.flatten()] = True
            cache[~used] = value
        else:
            keep = torch.zeros(cache.shape[:2], dtype=torch.bool, device=DEVICE)
            keep[inp.rows] = True                                        # other rows: all bad
            cache[~keep] = value
        for bi in range(case.batch):
            bad = torch.cat([torch.arange(0, int(inp.starts[bi]), device=DEVICE),
                             torch.arange(int(ends[bi]), case.capacity, device=DEVICE)])
            cache[physical(inp, case, bi, bad)] = value


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
@pytest.mark.parametrize("name", ["decode-gqa2-split3", "leftpad-causal", "batch-idx",
                                  "paged16", "window-sq3"])
def test_garbage_outside_the_sequence_never_leaks(backend, name, value):
    """Slots outside a sequence may hold anything (NaN, inf): the kernels read whole tiles
    (with TMA, K/V rows past the end of a sequence really are read), so they must mask scores
    and zero V rows there, never multiply 0 by garbage."""
    case = CASES[name]
    if GPU and case.dtype == torch.float32:
        case = replace(case, dtype=torch.float16)
    inp = make_inputs(case)
    _poison_outside(inp, case, value)
    out, lse = run(inp)
    assert torch.isfinite(out).all() and not torch.isnan(lse).any()
    check_attention(case, inp, out, lse)


@pytest.mark.parametrize("name", ["decode-gqa2-split3", "paged16", "batch-idx", "all"])
def test_tma_and_plain_loads_agree(monkeypatch, name):
    """The Triton path reads K/V tiles through TMA descriptors where the cache allows it (on a
    GPU: under graph capture, or always with ``FLASHTILE_DECODE_TMA=1``) and with plain loads
    otherwise (``=0`` forces them): the same values are loaded, so the results are bitwise
    equal."""
    from flashtile.kernels.decode import use_tma

    monkeypatch.setenv("FLASHTILE_DECODE_TMA", "1")

    case = CASES[name]
    if GPU and case.dtype == torch.float32:
        case = replace(case, dtype=torch.float16)
    inp = make_inputs(case)
    again = replace(inp, k_cache=inp.k_cache.clone(), v_cache=inp.v_cache.clone())
    assert use_tma(inp.q, inp.k_cache, inp.v_cache) == (not GPU or
                                                        torch.cuda.get_device_capability()[0] >= 9)
    flashtile.set_backend("triton")
    try:
        tma = run(inp)
        monkeypatch.setenv("FLASHTILE_DECODE_TMA", "0")
        assert not use_tma(inp.q, inp.k_cache, inp.v_cache)
        plain = run(again)
    finally:
        flashtile.set_backend(None)
    for a, b in zip(tma, plain):
        assert torch.equal(a, b)


def test_tma_only_for_layouts_it_can_address(monkeypatch):
    """TMA sees the cache as one (rows, row stride) matrix: batch rows back to back, unit stride
    along d, 16-byte aligned rows, power-of-two head dims; anything else takes plain loads."""
    from flashtile.kernels.decode import _descriptor_ok, use_tma

    monkeypatch.setenv("FLASHTILE_DECODE_TMA", "1")

    q = torch.randn(1, 1, 4, 64, device=DEVICE, dtype=torch.float16)
    cache = torch.randn(2, 96, 2, 64, device=DEVICE, dtype=torch.float16)
    assert _descriptor_ok(cache, 64)
    assert _descriptor_ok(torch.stack([cache, cache], 2)[:, :, 0], 64)   # K of a fused KV buffer
    assert _descriptor_ok(cache[1:], 64)                                  # later batch rows
    assert not _descriptor_ok(cache[:, :48], 64)                          # rows not back to back
    assert not _descriptor_ok(cache.transpose(1, 2).contiguous().transpose(1, 2), 64)
    assert _descriptor_ok(cache[..., :40], 40)                  # a column window of each head
    assert not _descriptor_ok(torch.randn(2, 96, 2, 36, device=DEVICE, dtype=torch.float16),
                              36)                                         # 72-byte head stride
    flat = torch.randn(cache.numel() + 8, device=DEVICE, dtype=torch.float16)
    assert not _descriptor_ok(flat[1:1 + cache.numel()].view(cache.shape), 64)  # base % 16 = 2
    odd = torch.randn(2, 96, 2, 96, device=DEVICE, dtype=torch.float16)
    if not GPU or torch.cuda.get_device_capability()[0] >= 9:
        assert use_tma(q, cache, cache)
    assert not use_tma(torch.randn(1, 1, 4, 96, device=DEVICE, dtype=torch.float16), odd, odd)


def test_decode_configs_that_fit(monkeypatch):
    """The config list's head, 128-key tiles x 3 stages (the measured best at d = 128), fits in
    shared memory in 16 bits and is the untuned default there; at d = 256 or in fp32 it does not
    fit and is dropped."""
    from flashtile.kernels.decode import _prune_decode_configs, decode_config

    configs = [decode_config(128, 4, 3), decode_config(64, 4, 3), decode_config(32, 4, 4)]

    def kept(d, dtype):
        k = torch.empty(1, 16, 1, d, dtype=dtype)
        return [(c.kwargs["BLOCK_N"], c.num_stages) for c in
                _prune_decode_configs(configs, {"K": k}, HEAD_D=d, HEAD_DV=d, BLOCK_M=16)]
    monkeypatch.setenv("FLASHTILE_AUTOTUNE", "1")
    assert kept(128, torch.bfloat16) == [(128, 3), (64, 3), (32, 4)]
    assert kept(256, torch.bfloat16) == [(64, 3), (32, 4)]
    assert kept(128, torch.float32) == [(64, 3), (32, 4)]
    monkeypatch.setenv("FLASHTILE_AUTOTUNE", "0")
    assert kept(128, torch.float16) == [(128, 3)]
    # The GPU's list has a config that fits for every dtype and head dim (fp32 at d = 256 too).
    from flashtile.kernels.decode import DECODE_SHAPES, SMEM_LIMIT, decode_smem
    for item in (2, 4):
        for d in (64, 128, 256):
            assert any(decode_smem(64, n, st, d, d, item) <= SMEM_LIMIT
                       for n, _, st in DECODE_SHAPES), (item, d)


def test_num_splits_heuristic():
    from flashtile.kernels.decode import MAX_SPLITS, num_splits_heuristic, resolve_num_splits

    assert num_splits_heuristic(programs=256, capacity=8192, sms=132) == 1   # GPU already full
    assert num_splits_heuristic(programs=100, capacity=8192, sms=132) == 1
    for programs in (8, 24, 64):                    # one program per SM, as many as fit
        splits = num_splits_heuristic(programs=programs, capacity=1 << 15, sms=132)
        assert programs * splits <= 132 < programs * (splits + 1), (programs, splits)
    assert num_splits_heuristic(programs=8, capacity=1 << 15, sms=132) == 16
    assert num_splits_heuristic(programs=8, capacity=1024, sms=132) == 4     # >= 256 keys each
    assert num_splits_heuristic(programs=1, capacity=1 << 20, sms=132) <= MAX_SPLITS
    cpu = torch.device("cpu")
    assert resolve_num_splits(5, 1, 1, 1, 32, cpu) == 2                      # one per 16 slots
    assert resolve_num_splits(1, 1, 1, 1, 1 << 16, cpu) == 1


# ----------------------------------------------------------------------------------------------
# Bad inputs: a clear error, raised before anything is written.

def _bad(mutate, exc, match):
    return (mutate, exc, match)


def _set(**changes):
    def mutate(inp: Inputs):
        for key, value in changes.items():
            if key in ("q", "k", "v", "k_cache", "v_cache"):
                setattr(inp, key, value(inp) if callable(value) else value)
            elif value is None:
                inp.kwargs.pop(key, None)
            else:
                inp.kwargs[key] = value(inp) if callable(value) else value
    return mutate


BAD = {
    "cache-too-small-int": _bad(_set(cache_seqlens=80), ValueError, "too small for the append"),
    "cache-too-small-tensor": _bad(
        _set(cache_seqlens=lambda i: torch.tensor([5, 80, 3], dtype=torch.int32, device=DEVICE)),
        ValueError, r"sequence 1: the cache is too small.*81 > capacity \(max_blocks"),
    "seqlens-negative": _bad(
        _set(cache_seqlens=lambda i: torch.tensor([5, -1, 3], dtype=torch.int32, device=DEVICE)),
        ValueError, "cache_seqlens must be >= 0"),
    "seqlens-int64": _bad(_set(cache_seqlens=lambda i: i.lens), TypeError,
                          "cache_seqlens must be int32"),
    "seqlens-shape": _bad(_set(cache_seqlens=lambda i: i.lens[:2].int()), ValueError,
                          r"cache_seqlens must have shape \(batch,\)"),
    "block-table-out-of-range": _bad(
        _set(block_table=lambda i: torch.where(i.table == i.table[1, 2], 10_000, i.table).int()),
        ValueError, r"block_table\[1, 2\] = 10000 is out of range.*pages"),
    "block-table-negative": _bad(
        _set(block_table=lambda i: torch.where(i.table == i.table[0, 0], -1, i.table).int()),
        ValueError, r"block_table\[0, 0\] = -1 is out of range"),
    "block-table-int64": _bad(_set(block_table=lambda i: i.table), TypeError,
                              "block_table must be int32"),
    "block-table-shape": _bad(_set(block_table=lambda i: i.table[:2].int()), ValueError,
                              "block_table must have shape"),
    "block-table-shared-append-page": _bad(
        _set(block_table=lambda i: torch.stack([i.table[0], i.table[0], i.table[2]]).int(),
             cache_seqlens=lambda i: torch.tensor([5, 5, 3], dtype=torch.int32, device=DEVICE)),
        ValueError, "two appended tokens to the same page row"),
    "batch-idx-with-block-table": _bad(
        _set(cache_batch_idx=lambda i: torch.arange(3, dtype=torch.int32, device=DEVICE)),
        ValueError, "cache_batch_idx cannot be combined with block_table"),
    "rotary-1d": _bad(_set(rotary_cos=lambda i: i.kwargs["rotary_cos"][:, 0]), ValueError,
                      "rotary_cos must have 2 dimensions"),
    "rotary-shapes-differ": _bad(_set(rotary_sin=lambda i: i.kwargs["rotary_sin"][:, :4]),
                                 ValueError, "same shape and dtype"),
    "rotary-dim-too-big": _bad(
        _set(rotary_cos=lambda i: torch.ones(80, 20, device=DEVICE),
             rotary_sin=lambda i: torch.zeros(80, 20, device=DEVICE)),
        ValueError, "rotary_dim = 40 > headdim = 32"),
    "rotary-too-short": _bad(
        _set(rotary_cos=lambda i: i.kwargs["rotary_cos"][:40],
             rotary_sin=lambda i: i.kwargs["rotary_sin"][:40]),
        ValueError, r"rotary_cos/rotary_sin have 40 rows but sequence 1 needs positions up to "
                    r"57 \(cache_seqlens \+ seqlen_new - 1\); use tables with at least "
                    r"max\(cache_seqlens\) \+ seqlen_new = 58 rows"),
    "rotary-wrong-dtype": _bad(
        _set(rotary_cos=lambda i: i.kwargs["rotary_cos"].double(),
             rotary_sin=lambda i: i.kwargs["rotary_sin"].double()),
        TypeError, "rotary_cos must have q's dtype"),
    "rotary-without-k": _bad(_set(k=None, v=None), ValueError, "rotary_cos/rotary_sin need k"),
    "only-cos": _bad(_set(rotary_sin=None), ValueError, "must be given together"),
    "k-without-v": _bad(_set(v=None), ValueError, "k and v must be given together"),
    "k-dtype": _bad(_set(k=lambda i: i.k.double()), TypeError, "must share one dtype"),
    "k-shape": _bad(_set(k=lambda i: i.k[:, :, :1]), ValueError, "k must have shape"),
    "nheads-not-multiple": _bad(_set(q=lambda i: i.q[:, :, :3]), ValueError,
                                r"query heads \(3\) must be a multiple"),
    "headdim-mismatch": _bad(_set(q=lambda i: i.q[..., :16]), ValueError, "same head dim"),
    "leftpad-past-seqlens": _bad(
        _set(cache_leftpad=lambda i: torch.tensor([0, 60, 0], dtype=torch.int32, device=DEVICE)),
        ValueError, r"cache_leftpad\[1\] = 60"),
    "num-splits-negative": _bad(_set(num_splits=-1), ValueError, "num_splits must be >= 0"),
    "window-type": _bad(_set(window_size=(1.5, 0)), TypeError, "window_size"),
}

BAD_CONTIGUOUS = {
    "batch-idx-out-of-range": _bad(
        _set(cache_batch_idx=lambda i: torch.tensor([0, 5, 1], dtype=torch.int32, device=DEVICE)),
        ValueError, r"cache_batch_idx\[1\] = 5 is out of range"),
    "batch-idx-repeated": _bad(
        _set(cache_batch_idx=lambda i: torch.tensor([0, 2, 0], dtype=torch.int32, device=DEVICE)),
        ValueError, "repeated row"),
    "cache-fewer-rows": _bad(_set(k_cache=lambda i: i.k_cache[:2], v_cache=lambda i: i.v_cache[:2]),
                             ValueError, "k_cache has 2 rows"),
    "page-size-not-16": _bad(
        _set(k_cache=lambda i: i.k_cache[:, :24], v_cache=lambda i: i.v_cache[:, :24],
             block_table=lambda i: torch.zeros(3, 2, dtype=torch.int32, device=DEVICE),
             cache_seqlens=0),
        ValueError, "multiple of 16"),
    "seqlens-none-with-append": _bad(_set(cache_seqlens=None), ValueError,
                                     "cache_seqlens is required"),
}


def _bad_inputs(name, paged):
    case = Case(page=16 if paged else None, rotary="half", seqlen_new=1, num_splits=3)
    inp = make_inputs(case)
    mutate, exc, match = (BAD if paged else BAD_CONTIGUOUS)[name]
    k_before, v_before = inp.k_cache.clone(), inp.v_cache.clone()
    cache = (inp.k_cache, inp.v_cache)
    mutate(inp)
    with pytest.raises(exc, match=match):
        run(inp)
    assert torch.equal(cache[0], k_before) and torch.equal(cache[1], v_before), \
        "the cache must be unchanged after a rejected call"


@pytest.mark.parametrize("name", list(BAD), ids=list(BAD))
def test_bad_inputs_paged(name):
    _bad_inputs(name, paged=True)


@pytest.mark.parametrize("name", list(BAD_CONTIGUOUS), ids=list(BAD_CONTIGUOUS))
def test_bad_inputs_contiguous(name):
    _bad_inputs(name, paged=False)


# ----------------------------------------------------------------------------------------------
# GPU: real decoding sizes.

GPU_CASES = {
    "b4-S4096-h32/8-d128-split0": Case(batch=4, hq=32, hkv=8, d=128, capacity=4096,
                                      lens=[4000, 1, 2047, 3000], num_splits=0),
    "b2-S8192-paged256-rotary": Case(batch=2, hq=32, hkv=8, d=128, capacity=8192, page=256,
                                     lens=[8000, 5000], rotary="half", causal=True, num_splits=0),
    "b3-S2048-paged16-leftpad": Case(batch=3, hq=16, hkv=2, d=64, capacity=2048, page=16,
                                     lens=[2000, 100, 1500], leftpad=[10, 0, 700], seqlen_q=4,
                                     seqlen_new=4, causal=True, rotary="interleaved"),
    "b2-S3000-d256-window": Case(batch=2, hq=8, hkv=8, d=256, capacity=3000, lens=[2900, 1000],
                                 window=(512, 0), softcap=30.0, alibi="h", num_splits=5),
    "b2-S2000-d96-dv80": Case(batch=2, hq=12, hkv=4, d=96, dv=80, capacity=2000,
                              lens=[1998, 17], num_splits=0),
}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", list(GPU_CASES), ids=list(GPU_CASES))
def test_gpu_decode(backend, name, dtype):
    check_case(replace(GPU_CASES[name], dtype=dtype))


@pytest.mark.gpu
def test_gpu_decode_bandwidth_helper():
    from flashtile.kvcache import decode_bandwidth

    res = decode_bandwidth(2, 4096, paged_block=256)
    assert res["gbps"]["flashtile"] > 0 and res["num_splits"] >= 1


@pytest.mark.gpu
def test_gpu_decode_graph_replay(monkeypatch):
    """Split decoding (split kernel + combine kernel) captured in a CUDA graph gives the eager
    answer bitwise, replay after replay, also after new cache lengths are written between
    replays (the split count is fixed at capture, the lengths are read by the kernels). On
    Hopper the capture reads K/V through TMA and the eager calls with plain loads."""
    from flashtile.bench.timing import capture_graph
    from flashtile.kernels import decode

    monkeypatch.delenv("FLASHTILE_DECODE_TMA", raising=False)
    seen, real = [], decode.use_tma

    def spy(*tensors):
        seen.append((torch.cuda.is_current_stream_capturing(), real(*tensors)))
        return seen[-1][1]
    monkeypatch.setattr(decode, "use_tma", spy)

    case = replace(GPU_CASES["b4-S4096-h32/8-d128-split0"], dtype=torch.bfloat16, seqlen_new=0,
                   num_splits=7)
    inp = make_inputs(case)
    kwargs = {k: v for k, v in inp.kwargs.items() if k != "return_softmax_lse"}

    def call():
        return flash_attn_with_kvcache(inp.q, inp.k_cache, inp.v_cache, **kwargs)

    graph, out = capture_graph(call)
    if torch.cuda.get_device_capability()[0] >= 9:
        assert (True, True) in seen and all(tma == capturing for capturing, tma in seen), seen
    for lens in ([4000, 1, 2047, 3000], [17, 4096, 300, 2500]):
        inp.kwargs["cache_seqlens"].copy_(torch.tensor(lens, dtype=torch.int32))
        expect = call()
        for _ in range(3):
            out.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, expect)
