"""Where the time goes, for the feature targets that miss (GPU only).

Experiments (``--what``), each printing a table and adding to one JSON:

- ``sparse``: the same work (b16 h8 4k d64, bf16, fwd+bwd) through ``flash_attn_func`` (dense),
  ``flex_attention`` without a block mask, with a full block mask and with a 20% random one;
  the time of every kernel (torch profiler) so the block-sparse path's extra cost is located.
- ``decode``: CUDA-graph time (cold, clean L2) of ``flash_attn_with_kvcache`` for each split
  count at the issue's decoding points, against SDPA, and the config the autotuner chose.
- ``dropout``: forward and forward+backward with and without dropout (both dQ strategies),
  per kernel.
- ``decode_flush``: what the L2 flush between timed calls does to a ~50 us decode. do_bench
  flushes by *writing* 256 MB (``zero_()``), which leaves up to the L2's 60 MB dirty; the next
  timed call pays their write-back. Each decode point is timed after that flush, after a
  *read* flush (clean lines, evicted for free) and with no flush, next to SDPA and a plain
  read of the same K/V bytes (the ceiling any decode kernel has), with the kernel times.
- ``decode_layout``: flashtile and SDPA each on a ``bshd`` cache (flash-attn's layout) and a
  ``bhsd`` one (SDPA's), the same bytes, at the five decoding points.
- ``decode_sweep``: the split kernel pinned to each of a few configs, TMA on and off, over
  split counts, at the points in ``DIAG_POINTS``; SDPA in the same run.
- ``decode_once``: one decode step at (1, 32k) through flashtile (heuristic splits) and SDPA,
  for a profiler: ``ncu --clock-control none -k regex:"_decode_kernel|splitkv_kernel" -c 2
  --section SpeedOfLight --section Occupancy --section WarpStateStats python3
  scripts/diagnose.py --what decode_once``.
- ``breakdown``: the device time of every kernel of one forward+backward, flashtile against
  SDPA's cuDNN backend on the same inputs (bf16, 16k tokens, nheads = 2048 / d, d 64/128 x
  4k/16k x causal; ``DIAG_BREAKDOWN`` = "d:seqlen:causal ..." overrides), with each
  flashtile kernel's TFLOP/s (forward 4bhs^2d, halved when causal; dK/dV runs four such
  matmuls, 2x; dQ three, 1.5x): which kernel the gap to cuDNN sits in.
- ``varlen``: the feature bench's packed batch (16k tokens, lengths 256..4096, h16 d128)
  fwd+bwd against fixed-length batches of the same token count at the longest length
  (4 x 4096, the bench's comparison) and at the mean length, and against each sequence run as
  its own fixed-length call (the sum: what a perfect varlen kernel could at best reach).

    python3 scripts/diagnose.py [--what sparse,decode,dropout] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

import flashtile
from flashtile import masks
from flashtile.bench.timing import capture_graph, cold_clean_ms, flushed_median_ms

sys.path.insert(0, str(Path(__file__).parent))
import feature_bench as fb  # noqa: E402  (the bench's own sizes, lengths and FLOP counts)

# Issue 5's decoding points (batch, cache length), as the feature bench runs them
DECODE_POINTS = fb.Sizes().decode_cases

DEV = "cuda"
BF16 = torch.bfloat16


def kernel_times(fn, reps: int = 5) -> dict[str, float]:
    """Mean GPU microseconds per call of every kernel ``fn`` launches (torch profiler)."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    out: dict[str, float] = defaultdict(float)
    for ev in prof.key_averages():
        if ev.device_type == torch.autograd.DeviceType.CUDA and ev.device_time_total > 0:
            out[ev.key[:60]] += ev.device_time_total / reps
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def fwd_bwd(call, *tensors):
    grads = None

    def step():
        nonlocal grads
        out = call()
        if grads is None:
            grads = torch.randn_like(out)
        torch.autograd.grad(out, tensors, grads)
    return step


def bench(step) -> float:
    return float(do_bench(step, warmup=25, rep=100))


def sparse(res: dict) -> None:
    b, h, n, d = 16, 8, 4096, 64
    q, k, v = (torch.randn(b, h, n, d, device=DEV, dtype=BF16, requires_grad=True)
               for _ in range(3))
    qs, ks, vs = (t.detach().transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
    nb = n // 128
    cases = {
        "dense flash_attn_func (b,s,h,d)": fwd_bwd(lambda: flashtile.flash_attn_func(qs, ks, vs),
                                                   qs, ks, vs),
        "flex, no block mask (b,h,s,d)": fwd_bwd(lambda: flashtile.flex_attention(q, k, v),
                                                 q, k, v),
    }
    for dens in (1.0, 0.2):
        lay = masks.random_block_layout(nb, nb, dens, seed=0, device=DEV)[0, 0]
        bm = flashtile.create_block_mask(masks.layout_mask(lay, 128), None, None, n, n,
                                         device=DEV)
        cases[f"flex, block mask density {dens}"] = fwd_bwd(
            lambda bm=bm: flashtile.flex_attention(q, k, v, block_mask=bm), q, k, v)
    for name, step in cases.items():
        ms = bench(step)
        per = kernel_times(step)
        res[name] = {"ms": ms, "kernels_us": per}
        print(f"{name:40s} {ms:7.3f} ms | " + ", ".join(f"{k_[:28]} {t:.0f}"
                                                       for k_, t in list(per.items())[:5]))


def decode_inputs(batch: int, n: int, hq: int = 32, hkv: int = 8, d: int = 128):
    """One decoding step's inputs, full caches of ``n`` slots: ``q, k_cache, v_cache, lens``,
    the K+V bytes, and SDPA's ``(b, h, s, d)`` contiguous copies ``(qs, ks, vs)``."""
    q = torch.randn(batch, 1, hq, d, device=DEV, dtype=BF16)
    kc = torch.randn(batch, n, hkv, d, device=DEV, dtype=BF16)
    vc = torch.randn_like(kc)
    lens = torch.full((batch,), n, dtype=torch.int32, device=DEV)
    nbytes = 2 * kc.numel() * kc.element_size()
    return q, kc, vc, lens, nbytes, tuple(t.transpose(1, 2).contiguous() for t in (q, kc, vc))


def decode(res: dict) -> None:
    from flashtile.kernels import decode as dec
    hq, hkv, d = 32, 8, 128
    for batch, n in DECODE_POINTS:
        q, kc, vc, lens, nbytes, (qs, ks, vs) = decode_inputs(batch, n, hq, hkv, d)

        def graph_ms(fn):
            return cold_clean_ms(captured(fn))

        sdpa = graph_ms(lambda: F.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True))
        auto = dec.resolve_num_splits(0, batch, hkv, hq // hkv, n, q.device)
        row = {"sdpa_ms": sdpa, "auto_splits": auto, "splits": {}}
        for s in sorted({1, 2, 4, 8, 12, 16, 24, 32, 48, 64, auto}):
            if s > 1 and batch * hkv * s > 16 * dec.sm_count(q.device):   # > 16 waves
                continue
            t = graph_ms(lambda s=s: flashtile.flash_attn_with_kvcache(
                q, kc, vc, cache_seqlens=lens, num_splits=s))
            row["splits"][s] = t
        best = min(row["splits"], key=row["splits"].get)
        gbps = {s: nbytes / t / 1e6 for s, t in row["splits"].items()}
        row["configs"] = {str(k_): str(c) for k_, c in dec._decode.cache.items()}
        res[f"b{batch} L{n}"] = row
        print(f"decode b{batch} L{n}: SDPA {nbytes / sdpa / 1e6:,.0f} GB/s; auto {auto} splits "
              f"{gbps[auto]:,.0f}; best {best} splits {gbps[best]:,.0f}; " +
              " ".join(f"{s}:{g:,.0f}" for s, g in gbps.items()))
        torch.cuda.empty_cache()


def decode_layout(res: dict) -> None:
    """Both providers on both cache layouts, same bytes: ``bshd`` (flash-attn's cache layout:
    the 8 heads of a slot side by side, so one (sequence, head) is a strip of 256-byte pieces
    2 KB apart) and ``bhsd`` (SDPA's: each (sequence, head) one contiguous run). flashtile
    takes a ``bhsd`` cache as a strided view; SDPA takes a ``bshd`` cache as a transposed view.
    Graph replays, clean flush, the split heuristic and the autotuner as users run them; then
    the kernel times at (1, 32k)."""
    hq, hkv, d = 32, 8, 128
    for batch, n in DECODE_POINTS:
        q = torch.randn(batch, 1, hq, d, device=DEV, dtype=BF16)
        qs = q.transpose(1, 2).contiguous()
        lens = torch.full((batch,), n, dtype=torch.int32, device=DEV)
        bshd = [torch.randn(batch, n, hkv, d, device=DEV, dtype=BF16) for _ in range(2)]
        bhsd = [torch.randn(batch, hkv, n, d, device=DEV, dtype=BF16) for _ in range(2)]
        nbytes = 2 * bshd[0].numel() * 2
        calls = {
            "flashtile bshd": lambda: flashtile.flash_attn_with_kvcache(
                q, *bshd, cache_seqlens=lens),
            "flashtile bhsd": lambda: flashtile.flash_attn_with_kvcache(
                q, *(t.transpose(1, 2) for t in bhsd), cache_seqlens=lens),
            "sdpa bshd": lambda: F.scaled_dot_product_attention(
                qs, *(t.transpose(1, 2) for t in bshd), enable_gqa=True),
            "sdpa bhsd": lambda: F.scaled_dot_product_attention(qs, *bhsd, enable_gqa=True),
        }
        row = {}
        for name, fn in calls.items():
            fn()
            row[name] = cold_clean_ms(captured(fn)) * 1e3
        if batch == 1:
            row["kernels_us"] = {name: kernel_times(fn) for name, fn in calls.items()}
        res[f"b{batch} L{n}"] = row
        print(f"decode_layout b{batch} L{n}, GB/s: " + "; ".join(
            f"{name} {nbytes / t / 1e3:,.0f}" for name, t in row.items() if name in calls))
        for name, per in row.get("kernels_us", {}).items():
            print(f"  {name}: " + ", ".join(f"{k_[:30]} {t:.1f}" for k_, t in per.items()))
        torch.cuda.empty_cache()


SWEEP_SPLITS = {(1, 32768): [16, 24, 29, 33, 44], (8, 8192): [2, 3, 4, 6, 8],
                (32, 8192): [1, 2], (64, 4096): [1, 2], (8, 131072): [2, 4, 8]}
SWEEP_MODES = os.environ.get("DIAG_MODES", "plain,tma").split(",")
SWEEP_CONFIGS = [tuple(int(x) for x in c.split("/")) for c in os.environ.get(
    "DIAG_CONFIGS", "64/4/3,64/4/4,64/4/2,128/4/2,128/4/3,64/8/3,32/4/4").split(",")]


def decode_sweep(res: dict) -> None:
    """The split kernel pinned to one config at a time (BLOCK_N / warps / stages, from
    ``DIAG_CONFIGS``), with plain loads and with TMA loads (``DIAG_MODES``), over split counts,
    at the decoding points in ``DIAG_POINTS`` (e.g. "1x32768"); graph replays after a clean
    flush, against SDPA in the same run. Then, at the best setting of each point, the combine
    merging 16 splits per step (the old rule) instead of all."""
    from flashtile.kernels import decode as dec
    hq, hkv, d = 32, 8, 128
    points = [tuple(int(x) for x in p.split("x")) for p in
              os.environ.get("DIAG_POINTS", "1x32768,8x8192,64x4096").split(",")]
    all_configs = dec._decode.configs

    def set_mode(mode):                  # plain loads or TMA
        os.environ["FLASHTILE_DECODE_TMA"] = "0" if mode == "plain" else "1"

    def pin(cfg):
        n, w, st = cfg
        dec._decode.configs = [dec.decode_config(n, w, st)]
        dec._decode_launch.reset()

    for batch, n in points:
        q, kc, vc, lens, nbytes, (qs, ks, vs) = decode_inputs(batch, n, hq, hkv, d)
        sdpa = cold_clean_ms(captured(
            lambda: F.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True)))
        auto = dec.resolve_num_splits(0, batch, hkv, hq // hkv, n, q.device)
        row = {"sdpa_us": sdpa * 1e3, "auto_splits": auto, "us": {}}

        def step(s):
            return lambda: flashtile.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens,
                                                             num_splits=s)
        for tma in SWEEP_MODES:
            set_mode(tma)
            for cfg in SWEEP_CONFIGS:
                pin(cfg)
                for s in sorted(set(SWEEP_SPLITS.get((batch, n), []) + [auto])):
                    try:
                        t = cold_clean_ms(captured(step(s))) * 1e3
                    except Exception as exc:             # e.g. out of shared memory
                        t = float("nan")
                        print(f"  {cfg} tma={tma} s={s}: {type(exc).__name__}")
                    row["us"][f"{tma} {cfg[0]}/{cfg[1]}/{cfg[2]} s{s}"] = t
        best = min((k_ for k_ in row["us"] if row["us"][k_] == row["us"][k_]),
                   key=row["us"].get)
        tma, cfg, s = best.split()
        set_mode(tma)
        pin(tuple(int(x) for x in cfg.split("/")))
        saved = dec.COMBINE_MAX_BLOCK_S
        dec.COMBINE_MAX_BLOCK_S = 16
        row["best_with_combine16_us"] = cold_clean_ms(captured(step(int(s[1:])))) * 1e3
        dec.COMBINE_MAX_BLOCK_S = saved
        row["best"] = best
        res[f"b{batch} L{n}"] = row
        print(f"decode_sweep b{batch} L{n}: SDPA {sdpa * 1e3:.1f} us ({nbytes / sdpa / 1e6:,.0f}"
              f" GB/s); best {best}: {row['us'][best]:.1f} us "
              f"({nbytes / row['us'][best] / 1e3:,.0f} GB/s; combine in steps of 16: "
              f"{row['best_with_combine16_us']:.1f}); auto splits {auto}")
        for tma in SWEEP_MODES:
            for cfg in SWEEP_CONFIGS:
                tag = f"{tma} {cfg[0]}/{cfg[1]}/{cfg[2]}"
                print(f"  {tag:16s} " + " ".join(f"s{k_.split()[-1][1:]}:{t:6.1f}"
                                                 for k_, t in row["us"].items()
                                                 if k_.startswith(tag + " ")))
        torch.cuda.empty_cache()
    os.environ.pop("FLASHTILE_DECODE_TMA", None)
    dec._decode.configs = all_configs
    dec._decode_launch.reset()


@triton.jit
def _read_kernel(A, B, SUMS, n_a, n, BLOCK: tl.constexpr):
    """Read ``A`` then ``B`` (flat, ``n_a`` and ``n - n_a`` elements) once; one partial sum per
    program so nothing is optimised away."""
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    in_a = offs < n_a
    a = tl.load(A + offs, mask=in_a, other=0.0)
    b = tl.load(B + (offs - n_a), mask=(offs >= n_a) & (offs < n), other=0.0)
    tl.store(SUMS + pid, tl.sum(a.to(tl.float32) + b.to(tl.float32), 0))


def read_both(a: torch.Tensor, b: torch.Tensor):
    """A launcher that reads every byte of ``a`` and ``b`` once (the read-bandwidth ceiling)."""
    n_a, n = a.numel(), a.numel() + b.numel()
    block = 8192
    programs = triton.cdiv(n, block)
    sums = torch.empty(programs, device=a.device, dtype=torch.float32)
    return lambda: _read_kernel[(programs,)](a, b, sums, n_a, n, BLOCK=block, num_warps=8)


def captured(fn):
    """``fn`` captured in a CUDA graph; returns the replay."""
    return capture_graph(fn)[0].replay


def decode_flush(res: dict) -> None:
    hq, hkv, d = 32, 8, 128
    junk = torch.empty(512 << 20, dtype=torch.int8, device=DEV).random_()
    flushes = {
        "write 256MB (do_bench)": lambda: junk[:256 << 20].zero_(),
        "read 512MB": lambda: junk.sum(dtype=torch.int32),
        "none": lambda: None,
    }
    res["copy_gbps"] = _copy_gbps(flushes["read 512MB"])
    print(f"copy 2 GiB: {res['copy_gbps']:,.0f} GB/s (read + write)")
    for batch, n in DECODE_POINTS:
        res[f"b{batch} L{n}"] = _decode_flush_point(batch, n, hq, hkv, d, flushes)
        torch.cuda.empty_cache()


def _copy_gbps(flush) -> float:
    src = torch.empty(1 << 30, dtype=torch.bfloat16, device=DEV).normal_()
    dst = torch.empty_like(src)
    return 2 * src.numel() * 2 / flushed_median_ms(lambda: dst.copy_(src), flush, reps=20) / 1e6


def _decode_flush_point(batch, n, hq, hkv, d, flushes) -> dict:
    q, kc, vc, lens, nbytes, (qs, ks, vs) = decode_inputs(batch, n, hq, hkv, d)
    calls = {
        "flashtile": captured(lambda: flashtile.flash_attn_with_kvcache(
            q, kc, vc, cache_seqlens=lens)),
        "sdpa_gqa": captured(lambda: F.scaled_dot_product_attention(qs, ks, vs,
                                                                    enable_gqa=True)),
        "read K+V": captured(read_both(kc, vc)),
    }
    row = {}
    for fname, flush in flushes.items():
        for name, fn in calls.items():
            us = flushed_median_ms(fn, flush, reps=200) * 1e3
            row[f"{name} | {fname}"] = {"us": us, "gbps": nbytes / us / 1e3}
    row["kernels_us"] = kernel_times(calls["flashtile"], reps=20)
    print(f"decode b{batch} L{n} ({nbytes / 1e6:.0f} MB), GB/s: " + "; ".join(
        f"{k_} {v['gbps']:,.0f}" for k_, v in row.items() if k_ != "kernels_us"))
    print("   kernels (us): " + ", ".join(f"{k_[:30]} {t:.1f}"
                                          for k_, t in row["kernels_us"].items()))
    return row


def decode_once(res: dict) -> None:
    q, kc, vc, lens, _, (qs, ks, vs) = decode_inputs(1, 32768)
    out = flashtile.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens)
    ref = F.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True).transpose(1, 2)
    torch.cuda.synchronize()
    res["max_abs_diff_vs_sdpa"] = (out.float() - ref.float()).abs().max().item()
    print(f"decode_once: max |flashtile - SDPA| = {res['max_abs_diff_vs_sdpa']:.2e}")


def varlen(res: dict) -> None:
    h, d, total = 16, 128, 16384
    lengths = fb.mixed_lengths(total, 256, 4096, 0)
    mean = round(total / len(lengths))
    res["lengths"] = lengths
    print(f"varlen: {len(lengths)} sequences {lengths}, mean {mean}")
    for causal in (False, True):
        q, k, v = (torch.randn(total, h, d, device=DEV, dtype=BF16, requires_grad=True)
                   for _ in range(3))
        cu = torch.tensor(fb.cu_seqlens(lengths), dtype=torch.int32, device=DEV)
        packed = fwd_bwd(lambda: flashtile.flash_attn_varlen_func(
            q, k, v, cu, cu, max(lengths), max(lengths), causal=causal), q, k, v)
        flops = fb.varlen_flops(lengths, h, d, causal)
        row = {"packed": {"ms": bench(packed), "kernels_us": kernel_times(packed)}}
        row["packed"]["tflops"] = flops / row["packed"]["ms"] / 1e9
        for name, (b, n) in {"fixed 4x4096": (4, 4096),
                             f"fixed {total // mean}x{mean}": (total // mean, mean)}.items():
            qf, kf, vf = (torch.randn(b, n, h, d, device=DEV, dtype=BF16, requires_grad=True)
                          for _ in range(3))
            step = fwd_bwd(lambda: flashtile.flash_attn_func(qf, kf, vf, causal=causal),
                           qf, kf, vf)
            ms = bench(step)
            fl = fb.attn_flops(b, h, n, n, d, causal)
            row[name] = {"ms": ms, "tflops": fl / ms / 1e9, "kernels_us": kernel_times(step)}
        one_ms = 0.0
        for n in lengths:
            qf, kf, vf = (torch.randn(1, n, h, d, device=DEV, dtype=BF16, requires_grad=True)
                          for _ in range(3))
            one_ms += bench(fwd_bwd(lambda: flashtile.flash_attn_func(qf, kf, vf, causal=causal),
                                    qf, kf, vf))
        row["each sequence alone (sum)"] = {"ms": one_ms, "tflops": flops / one_ms / 1e9}
        res["causal" if causal else "full"] = row
        print(f"varlen {'causal' if causal else 'full'}: " + "; ".join(
            f"{k_} {v_['ms']:.3f} ms {v_['tflops']:.0f} TFLOP/s" for k_, v_ in row.items()))
        for k_, v_ in row.items():
            if "kernels_us" in v_:
                print(f"   {k_}: " + ", ".join(f"{n_[:26]} {t:.0f}"
                                              for n_, t in list(v_["kernels_us"].items())[:4]))


def breakdown(res: dict) -> None:
    points = os.environ.get("DIAG_BREAKDOWN", "128:4096:0 128:4096:1 128:16384:0 64:16384:0")
    for point in points.split():
        d, n, causal = (int(x) for x in point.split(":"))
        b, h = max(1, 16384 // n), 2048 // d
        q, k, v = (torch.randn(b, n, h, d, device=DEV, dtype=BF16, requires_grad=True)
                   for _ in range(3))
        qt, kt, vt = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
        fwd_flops = 4 * b * h * n * n * d / (2 if causal else 1)

        def sdpa():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=bool(causal))
        row = {}
        steps = [("flashtile", fwd_bwd(lambda: flashtile.flash_attn_func(
            q, k, v, causal=bool(causal)), q, k, v)), ("cudnn", fwd_bwd(sdpa, qt, kt, vt))]
        # (DIAG_BREAKDOWN_CUDNN=0: flashtile alone, e.g. once per setting of its switches)
        for name, step in steps[:1 if os.environ.get("DIAG_BREAKDOWN_CUDNN") == "0" else 2]:
            per = kernel_times(step)
            total = sum(per.values())
            # do_bench's time of the same step (as the bench takes it): above the kernels' sum
            # when launch gaps (the host) or the flush's write-back stretch the call
            wall = 1000 * bench(step)
            row[name] = {"total_us": total, "kernels_us": per, "do_bench_us": wall}
            print(f"breakdown d{d} s{n} {'causal' if causal else 'full'} {name}: "
                  f"{total:.0f} us of kernels (fwd+bwd {3.5 * fwd_flops / total / 1e6:.0f} "
                  f"TFLOP/s), do_bench {wall:.0f} us")
            for kernel, us in per.items():
                share = {"fwd": 1.0, "dkdv": 2.0, "dq": 1.5}
                kind = next((kk for kk in share if kk in kernel.lower()), None) \
                    if name == "flashtile" else None     # (cuDNN's names say otherwise)
                rate = f", {share[kind] * fwd_flops / us / 1e6:.0f} TFLOP/s" if kind else ""
                print(f"    {kernel[:56]:56s} {us:8.1f} us{rate}")
        res[point] = row


def dropout(res: dict) -> None:
    b, n, h, d = 2, 8192, 16, 128
    q, k, v = (torch.randn(b, n, h, d, device=DEV, dtype=BF16, requires_grad=True)
               for _ in range(3))
    # What the other libraries pay for dropout on this machine (SDPA's flash backend is
    # flash-attn 2: Philox 4x32-7, 8-bit uniforms); a backend that refuses dropout is skipped.
    qt, kt, vt = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
    refs = (("sdpa-flash", SDPBackend.FLASH_ATTENTION), ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION))
    for name, backend in refs if os.environ.get("DIAG_DROPOUT_SDPA", "1") == "1" else ():
        for p in (0.0, 0.1):
            def sdpa(p=p, backend=backend):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(qt, kt, vt, dropout_p=p)
            try:
                fb_ms = bench(fwd_bwd(sdpa, qt, kt, vt))
            except RuntimeError as exc:
                print(f"dropout {name} p={p}: not run ({str(exc).splitlines()[0][:80]})")
                continue
            res[f"{name} p={p}"] = {"fwdbwd_ms": fb_ms}
            print(f"dropout {name:10s} p={p}: fwd+bwd {fb_ms:.3f} ms")
    modes = os.environ.get("DIAG_DROPOUT_MODES", "two-pass,atomic").split(",")
    for mode in modes:
        os.environ["FLASHTILE_BWD_DQ"] = mode
        for p in (0.0, 0.1):
            fwd = lambda p=p: flashtile.flash_attn_func(q, k, v, dropout_p=p)  # noqa: E731
            with torch.no_grad():
                f_ms = bench(fwd)
            step = fwd_bwd(fwd, q, k, v)
            fb_ms = bench(step)
            per = kernel_times(step)
            res[f"{mode} p={p}"] = {"fwd_ms": f_ms, "fwdbwd_ms": fb_ms, "kernels_us": per}
            print(f"dropout {mode:8s} p={p}: fwd {f_ms:.3f} ms, fwd+bwd {fb_ms:.3f} ms | " +
                  ", ".join(f"{k_[:24]} {t:.0f}" for k_, t in list(per.items())[:4]))
    os.environ.pop("FLASHTILE_BWD_DQ")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", default="sparse,decode,dropout")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = ap.parse_args()
    res: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    for what in args.what.split(","):
        t0 = time.monotonic()
        res[what] = {}
        try:
            globals()[what](res[what])
        except Exception as exc:                    # keep the other experiments' results
            res[what]["error"] = f"{type(exc).__name__}: {exc}"
            print(f"{what}: {res[what]['error']}")
        print(f"--- {what}: {time.monotonic() - t0:.0f} s")
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "diagnose.json").write_text(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()
