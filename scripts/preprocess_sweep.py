"""Time the backward's preprocess kernel (``D = rowsum(dO * O)``, and the one pass's fp32 dQ
accumulator zeroed) in its variants, at issue 7's shapes: 16k tokens, nheads = 2048 / d.

The preprocess moves the same bytes at every sequence length of the grid (O and dO read, the
accumulator written: 268 MB at 16k tokens x 2048 columns in 16 bits), so the microseconds it
loses to SDPA-cuDNN's ``compute_dot_do_o`` count most at the short points (session 46's H200
grid: ours 79.6 µs, cuDNN's 68-70). Variants (each checked against torch first: D to 1e-3
relative, the accumulator all zeros after NaN poisoning):

- ``rows B/W``: a program takes B queries of one (batch, head), W warps (the backward's own: 64/4);
- ``flat B/W``: B consecutive (query, head) rows in memory order (one contiguous run);
- ``fill + rows B/W``: the accumulator zeroed by ``torch.zero_`` (a memset), then D alone.

Times: ``triton.testing.do_bench`` medians (an L2 flush before each call) and
``triton.testing.do_bench_cudagraph`` medians (CUDA-graph replays, no flush; session 47's
runs used a graph of 20 launches of this script's own, averaged). Usage (GPU)::

    PYTHONPATH=src python3 scripts/preprocess_sweep.py [--json out.json] \
        [--variants rows/64/4,flat/32/2,fill/64/4]

On the H100 (session 47) every order and block up to 64 rows ran at the card's bandwidth.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch
import triton

from flashtile.kernels import bwd


def launch(variant, o, do, dsum, dq_acc, zero: bool):
    """One preprocess launch as ``variant`` = (kind, block_m, warps)."""
    kind, block_m, warps = variant
    b, s, h, d = o.shape
    if kind == "fill":
        if zero:
            dq_acc.zero_()
        zero = False
        kind = "rows"
    flat = kind == "flat"
    grid = (b * triton.cdiv(s * h, block_m),) if flat else (b * h * triton.cdiv(s, block_m),)
    bwd._bwd_preprocess[grid](
        o, do, dsum, dsum, dq_acc, o.stride(0), o.stride(1), o.stride(2), do.stride(0),
        do.stride(1), do.stride(2), dsum.stride(0), dsum.stride(1), dq_acc.stride(0),
        dq_acc.stride(1), dq_acc.stride(2), h, s, d, d, dsum, BLOCK_M=block_m, HEAD_DV=d,
        HEAD_D=d, IS_VARLEN=False, ZERO_DQ=zero, FLAT=flat, num_warps=warps)


def check(variant, o, do, zero: bool) -> str | None:
    """None if the variant computes D and zeroes the accumulator, else what went wrong."""
    b, s, h, d = o.shape
    dsum = torch.full((b, h, s), float("nan"), device=o.device)
    dq_acc = torch.full((b, s, h, d), float("nan"), device=o.device)
    launch(variant, o, do, dsum, dq_acc, zero)
    torch.cuda.synchronize()
    want = (o.float() * do.float()).sum(-1).transpose(1, 2)
    if not torch.allclose(dsum, want, rtol=1e-3, atol=1e-3):
        return f"D off by {(dsum - want).abs().max().item():.3g}"
    if zero and not bool((dq_acc == 0).all()):
        return "accumulator not all zeros"
    return None


VARIANTS = [("rows", 64, 4), ("rows", 32, 4), ("rows", 128, 4), ("rows", 128, 8),
            ("flat", 64, 4), ("flat", 128, 4), ("flat", 128, 8), ("flat", 256, 8),
            ("flat", 32, 2), ("fill", 64, 4)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", default=None, help="write the rows here")
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--seqlen", type=int, default=1024)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--variants", default=None,
                   help="kind/block/warps,... (kind: rows, flat or fill), else the list above")
    args = p.parse_args()
    variants = VARIANTS
    if args.variants:
        variants = [(k, int(m), int(w)) for k, m, w in
                    (v.split("/") for v in args.variants.split(","))]
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    torch.manual_seed(0)
    rows = []
    print(f"{'d':>4} {'zero':>5} {'variant':>16} {'do_bench µs':>12} {'graph µs':>9} "
          f"{'GB/s (graph)':>12}  check")
    for d in (64, 128):
        h = 2048 // d
        b = args.tokens // args.seqlen
        o = torch.randn(b, args.seqlen, h, d, device="cuda", dtype=dtype)
        do = torch.randn_like(o)
        dsum = torch.empty(b, h, args.seqlen, device="cuda")
        dq_acc = torch.empty(b, args.seqlen, h, d, device="cuda")
        for zero in (True, False):
            moved = 2 * o.numel() * o.element_size() + dsum.numel() * 4
            moved += dq_acc.numel() * 4 if zero else 0
            for variant in variants:
                if variant[0] == "fill" and not zero:
                    continue
                name = f"{'fill + rows' if variant[0] == 'fill' else variant[0]} " \
                       f"{variant[1]}/{variant[2]}"
                why = check(variant, o, do, zero)
                row = dict(d=d, h=h, b=b, s=args.seqlen, zero=zero, variant=name, error=why)
                if why is None:
                    fn = lambda: launch(variant, o, do, dsum, dq_acc, zero)   # noqa: E731
                    row["do_bench_us"] = triton.testing.do_bench(fn, warmup=25, rep=100,
                                                                 return_mode="median") * 1000
                    row["graph_us"] = triton.testing.do_bench_cudagraph(
                        fn, rep=100, return_mode="median") * 1000
                    row["gbps"] = moved / row["graph_us"] / 1e3
                rows.append(row)
                print(f"{d:>4} {str(zero):>5} {name:>16} {row.get('do_bench_us', 0):>12.1f} "
                      f"{row.get('graph_us', 0):>9.1f} {row.get('gbps', 0):>12.0f}  "
                      f"{why or 'ok'}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r["error"] is None for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
