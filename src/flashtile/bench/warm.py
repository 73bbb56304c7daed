"""Compile flashtile's kernels for a benchmark grid in parallel, before it is timed.

Autotuning compiles every candidate config of every kernel one after the other (several seconds
each); a benchmark grid over head dims x causal x forward/backward spends minutes on it. Here
process ``i`` of ``procs`` compiles config ``i`` of every kernel (``FLASHTILE_CONFIG_PICK=i``)
by running one small forward+backward per (head dim, causal, GQA ratio, dtype); the binaries
land in Triton's on-disk cache, so the timed run that follows mostly loads them.

The small call compiles exactly the binaries of the large ones: sequence lengths are not
specialised (``NO_SPECIALIZE``), and the strides keep their divisibility (the bench layout
``(batch, seqlen, nheads, headdim)`` with ``nheads * headdim`` a multiple of 16).

    python -m flashtile.bench.warm --headdims 64,128 --causal both --procs 6
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from .cases import DTYPES

WARM_SEQLEN = 1024


def candidate_count() -> int:
    """The longest candidate-config list of flashtile's autotuned kernels: with that many
    processes every config of every kernel is compiled once."""
    from ..kernels import bwd, fwd
    return max(len(t.configs) for t in (fwd._fwd, bwd._dkdv, bwd._dq))


def warm_compile_cache(headdims, causal, dtypes=("bf16",), gqa: int = 1, nheads=None,
                       procs: int | None = None) -> float:
    """Run the parallel compile and return its wall time in seconds. ``causal`` is a list of
    bools, ``dtypes`` names from :data:`flashtile.bench.cases.DTYPES`; ``procs`` defaults to
    :func:`candidate_count`. Failures of a worker are printed and otherwise ignored: the timed
    run then compiles what is missing itself."""
    procs = procs or candidate_count()
    start = time.time()
    cmd = [sys.executable, "-m", "flashtile.bench.warm",
           "--headdims", ",".join(map(str, headdims)),
           "--causal", ",".join("yes" if c else "no" for c in causal),
           "--dtypes", ",".join(dtypes), "--gqa", str(gqa), "--worker"]
    if nheads:
        cmd += ["--nheads", str(nheads)]

    def one(i: int):
        env = dict(os.environ, FLASHTILE_CONFIG_PICK=str(i))
        return i, subprocess.run(cmd, env=env, capture_output=True, text=True)

    with ThreadPoolExecutor(procs) as pool:
        for i, result in pool.map(one, range(procs)):
            if result.returncode:
                print(f"warm-up process {i} failed: {result.stderr.strip()[-400:]}",
                      file=sys.stderr)
    return time.time() - start


def _worker(headdims, causal, dtypes, gqa, nheads) -> None:
    import flashtile
    for name in dtypes:
        dtype = DTYPES[name]
        for d in headdims:
            hq = nheads or max(1, 2048 // d)
            hkv = max(1, hq // gqa)
            hq = hkv * gqa
            for is_causal in causal:
                q = torch.randn(1, WARM_SEQLEN, hq, d, device="cuda", dtype=dtype,
                                requires_grad=True)
                k, v = (torch.randn(1, WARM_SEQLEN, hkv, d, device="cuda", dtype=dtype,
                                    requires_grad=True) for _ in range(2))
                flashtile.flash_attn_func(q, k, v, causal=is_causal).sum().backward()
    torch.cuda.synchronize()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--headdims", default="64,128")
    p.add_argument("--causal", default="no,yes", help="comma list of no/yes, or both")
    p.add_argument("--dtypes", default="bf16")
    p.add_argument("--gqa", type=int, default=1)
    p.add_argument("--nheads", type=int, default=0)
    p.add_argument("--procs", type=int, default=0, help="default: one per candidate config")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    headdims = [int(x) for x in args.headdims.split(",") if x]
    causal = ([False, True] if args.causal == "both"
              else [c == "yes" for c in args.causal.split(",") if c])
    dtypes = [x for x in args.dtypes.split(",") if x]
    if not torch.cuda.is_available():
        print("flashtile.bench.warm: needs a CUDA GPU (nothing to compile for)", file=sys.stderr)
        return 2
    if args.worker:
        _worker(headdims, causal, dtypes, args.gqa, args.nheads or None)
        return 0
    procs = args.procs or candidate_count()
    seconds = warm_compile_cache(headdims, causal, dtypes, args.gqa, args.nheads or None, procs)
    print(f"compiled in {seconds:.0f} s with {procs} processes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
