"""Experiment (issue 5): a balanced decode schedule that keeps the KV heads in lockstep.

Session 8 measured a "lean" schedule (the cache's units dealt to one program per SM in equal
spans over (sequence, KV head) items): its kernel was 3-7% slower than the split grid's. The
suspect: in a ``(batch, slots, heads, d)`` cache one slot row holds all KV heads (8 x 256 B), and
the split grid reads the heads of a row together (their programs start and advance together),
while lean spans put different heads at different slots. Here the spans run over the
(sequence, unit) items of *each* head with the same boundaries for every head: ``P`` programs
per head, grid ``(P, heads)``. With 64-key tiles x 3 stages (~100 KB, two programs per SM) and
``P = 2 * SMs / heads`` (33 on the H200 with 8 KV heads) every SM holds two programs and no wave
is part-empty.

Contiguous caches, q_len 1, no window/softcap/ALiBi (issue 5's benchmark case); results
checked against flashtile's split path before timing. Graph replays after a clean flush,
plain loads on both sides (``FLASHTILE_DECODE_TMA=0``), SDPA (cuDNN) in the same run.

    python3 scripts/lockstep_probe.py [--points 1x32768,8x8192,...] [--configs 64/4/3,128/4/3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

os.environ["FLASHTILE_DECODE_TMA"] = "0"
import flashtile  # noqa: E402
from flashtile.bench.timing import capture_graph, cold_clean_ms  # noqa: E402
from flashtile.kernels.common import LN2_K, LOG2E  # noqa: E402
from flashtile.kernels.decode import _decode_tiles, sm_count  # noqa: E402


@triton.jit
def _span(p, programs, total):
    return p.to(tl.int64) * total // programs


@triton.jit
def _lockstep_kernel(Q, K, V, O, LSE, O_PART, LSE_PART, SEQLENS,
                     stride_qb, stride_qh, stride_kb, stride_ks, stride_kh,
                     stride_vb, stride_vs, stride_vh, stride_ob, stride_oh, stride_lb, stride_lh,
                     group, n_units, total, programs, qk_scale,
                     UNIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     HEAD_D: tl.constexpr):
    """Program (p, h): units [span(p), span(p + 1)) of head h's (sequence, unit) order."""
    p = tl.program_id(0)
    h = tl.program_id(1)
    nh = tl.num_programs(1)
    g0 = _span(p, programs, total)
    g1 = _span(p + 1, programs, total)
    first = (g0 // n_units).to(tl.int32)
    last = ((g1 - 1) // n_units).to(tl.int32)
    offs_g = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    row_ok = offs_g < group
    for b_ in range(first, last + 1):
        b = first + (b_ - first)                # (a loop variable is an int when interpreted)
        unit0 = b.to(tl.int64) * n_units
        lo = ((tl.maximum(g0, unit0) - unit0) * UNIT).to(tl.int32)
        hi = ((tl.minimum(g1, unit0 + n_units) - unit0) * UNIT).to(tl.int32)
        key_end = tl.load(SEQLENS + b)
        q = tl.load(Q + b.to(tl.int64) * stride_qb + (h * group + offs_g)[:, None] * stride_qh
                    + offs_d[None, :], mask=row_ok[:, None], other=0.0)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_D], tl.float32)
        k_head = b.to(tl.int64) * stride_kb + h.to(tl.int64) * stride_kh
        v_head = b.to(tl.int64) * stride_vb + h.to(tl.int64) * stride_vh
        full_hi = tl.minimum(hi, (key_end // BLOCK_N) * BLOCK_N)
        full_hi = tl.maximum(full_hi, lo)
        tail_hi = tl.minimum(hi, tl.cdiv(key_end, BLOCK_N) * BLOCK_N)
        offs_i = offs_g * 0
        acc, l_i, m_i = _decode_tiles(
            acc, l_i, m_i, q, K, V, k_head, v_head, K, lo, full_hi, K, V, 0, 0, 0,
            offs_i, offs_d, offs_d, HEAD_D, HEAD_D, 1, 0, key_end, key_end - 1, 0, 0, 0.0,
            qk_scale, 0.0, stride_kb, stride_ks, stride_vb, stride_vs,
            BLOCK_N, False, False, 1, True, True, False, False, False, False, False, "tf32")
        acc, l_i, m_i = _decode_tiles(
            acc, l_i, m_i, q, K, V, k_head, v_head, K, full_hi, tail_hi, K, V, 0, 0, 0,
            offs_i, offs_d, offs_d, HEAD_D, HEAD_D, 1, 0, key_end, key_end - 1, 0, 0, 0.0,
            qk_scale, 0.0, stride_kb, stride_ks, stride_vb, stride_vs,
            BLOCK_N, True, False, 1, True, True, False, False, False, False, False, "tf32")
        empty = l_i == 0.0
        out = acc / tl.where(empty, 1.0, l_i)[:, None]
        lse2 = tl.where(empty, float("-inf"), m_i + tl.math.log2(tl.where(empty, 1.0, l_i)))
        whole = (lo == 0) & (hi == n_units * UNIT)
        heads = (h * group + offs_g).to(tl.int64)
        tl.store(O + b.to(tl.int64) * stride_ob + heads[:, None] * stride_oh + offs_d[None, :],
                 out.to(O.dtype.element_ty), mask=row_ok[:, None] & whole)
        tl.store(LSE + b.to(tl.int64) * stride_lb + heads * stride_lh, lse2 * LN2_K,
                 mask=row_ok & whole)
        slot = ((p.to(tl.int64) * nh + h) * 2 + (b != first).to(tl.int64)) * BLOCK_M + offs_g
        tl.store(O_PART + slot[:, None] * HEAD_D + offs_d[None, :], out, mask=(~whole) & row_ok[:, None])
        tl.store(LSE_PART + slot, lse2, mask=(~whole) & row_ok)


@triton.jit
def _lockstep_combine(O_PART, LSE_PART, O, LSE, stride_ob, stride_oh, stride_lb, stride_lh,
                      group, n_units, total, programs,
                      BLOCK_M: tl.constexpr, HEAD_D: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    nh = tl.num_programs(1)
    unit0 = b.to(tl.int64) * n_units
    p_a = (((unit0 + 1) * programs - 1) // total).to(tl.int32)
    p_b = (((unit0 + n_units) * programs - 1) // total).to(tl.int32)
    cut = p_a != p_b
    a_first = _span(p_a, programs, total) == unit0
    offs_g = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    row_ok = offs_g < group
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_D], tl.float32)
    for p_ in range(p_a, tl.where(cut, p_b + 1, p_a)):
        p = p_a + (p_ - p_a)
        slot = tl.where((p == p_a) & ~a_first, 1, 0)
        row = ((p.to(tl.int64) * nh + h) * 2 + slot) * BLOCK_M + offs_g
        lse_s = tl.load(LSE_PART + row, mask=row_ok, other=float("-inf"))
        o_s = tl.load(O_PART + row[:, None] * HEAD_D + offs_d[None, :], mask=row_ok[:, None],
                      other=0.0)
        m_new = tl.maximum(m, lse_s)
        m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        w = tl.math.exp2(lse_s - m_shift)
        alpha = tl.math.exp2(m - m_shift)
        acc = acc * alpha[:, None] + w[:, None] * o_s
        l = l * alpha + w
        m = m_new
    empty = l == 0.0
    out = acc / tl.where(empty, 1.0, l)[:, None]
    lse = tl.where(empty, float("-inf"), (m + tl.math.log2(tl.where(empty, 1.0, l))) * LN2_K)
    heads = (h * group + offs_g).to(tl.int64)
    tl.store(O + b.to(tl.int64) * stride_ob + heads[:, None] * stride_oh + offs_d[None, :],
             out.to(O.dtype.element_ty), mask=row_ok[:, None] & cut)
    tl.store(LSE + b.to(tl.int64) * stride_lb + heads * stride_lh, lse, mask=row_ok & cut)


def lockstep(q, kc, vc, lens, programs, block_n, warps, stages, unit=128, combine=True):
    """q (b, 1, hq, d), caches (b, S, hkv, d): out (b, 1, hq, d), lse (b, hq, 1)."""
    b, _, hq, d = q.shape
    S, hkv = kc.shape[1], kc.shape[2]
    group = hq // hkv
    n_units = triton.cdiv(S, unit)
    total = b * n_units
    out = torch.empty_like(q)
    lse = torch.empty(b, hq, 1, device=q.device, dtype=torch.float32)
    o_part = torch.empty(programs * hkv * 2 * 16, d, device=q.device, dtype=torch.float32)
    l_part = torch.empty(programs * hkv * 2 * 16, device=q.device, dtype=torch.float32)

    def run():
        _lockstep_kernel[(programs, hkv)](
            q, kc, vc, out, lse, o_part, l_part, lens, q.stride(0), q.stride(2),
            kc.stride(0), kc.stride(1), kc.stride(2), vc.stride(0), vc.stride(1), vc.stride(2),
            out.stride(0), out.stride(2), lse.stride(0), lse.stride(1),
            group, n_units, total, programs, d ** -0.5 * LOG2E,
            UNIT=unit, BLOCK_M=16, BLOCK_N=block_n, HEAD_D=d, num_warps=warps,
            num_stages=stages)
        if not combine:
            return out, lse
        _lockstep_combine[(b, hkv)](
            o_part, l_part, out, lse, out.stride(0), out.stride(2), lse.stride(0), lse.stride(1),
            group, n_units, total, programs, BLOCK_M=16, HEAD_D=d, num_warps=4)
        return out, lse
    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="1x32768,8x8192,32x8192,64x4096,8x131072")
    ap.add_argument("--configs", default="64/4/3:2,128/4/3:1",
                    help="BLOCK_N/warps/stages:programs per SM")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = ap.parse_args()
    hq, hkv, d = 32, 8, 128
    res = {}
    for point in args.points.split(","):
        batch, n = (int(x) for x in point.split("x"))
        q = torch.randn(batch, 1, hq, d, device="cuda", dtype=torch.bfloat16)
        kc = torch.randn(batch, n, hkv, d, device="cuda", dtype=torch.bfloat16)
        vc = torch.randn_like(kc)
        lens = torch.full((batch,), n, dtype=torch.int32, device="cuda")
        nbytes = 2 * kc.numel() * 2
        qs, ks, vs = (t.transpose(1, 2).contiguous() for t in (q, kc, vc))
        want = flashtile.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens,
                                                 return_softmax_lse=True)
        variants = {
            "sdpa": capture_graph(lambda: F.scaled_dot_product_attention(
                qs, ks, vs, enable_gqa=True))[0].replay,
            "split": capture_graph(lambda: flashtile.flash_attn_with_kvcache(
                q, kc, vc, cache_seqlens=lens))[0].replay,
        }
        errors = {}
        for cfg in args.configs.split(","):
            shape, per_sm = cfg.split(":")
            bn, w, st = (int(x) for x in shape.split("/"))
            programs = int(per_sm) * sm_count(q.device) // hkv
            run = lockstep(q, kc, vc, lens, programs, bn, w, st)
            got = run()
            errors[cfg] = max((got[0] - want[0]).abs().max().item(),
                              (got[1] - want[1]).abs().max().item())
            variants[f"lockstep {shape} P{programs}"] = capture_graph(run)[0].replay
            variants[f"(its split kernel alone) {shape}"] = capture_graph(lockstep(
                q, kc, vc, lens, programs, bn, w, st, combine=False))[0].replay
        times = {k: [] for k in variants}
        for _ in range(args.repeats):
            for k, fn in variants.items():
                times[k].append(cold_clean_ms(fn) * 1e3)
        us = {k: sorted(t)[len(t) // 2] for k, t in times.items()}
        res[point] = {"us": us, "all_us": times, "max_err_vs_flashtile": errors}
        print(f"{point}: " + ", ".join(f"{k} {u:.1f} us ({nbytes / u / 1e3:,.0f} GB/s)"
                                       for k, u in us.items())
              + f"; err vs flashtile {errors}", flush=True)
        variants = None                         # (the graphs hold their memory pools)
        torch.cuda.empty_cache()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "lockstep.json").write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
