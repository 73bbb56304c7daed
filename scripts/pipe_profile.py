"""One forward+backward step for Nsight Compute: which hardware pipe limits each kernel (GPU only).

Runs a few warm-up steps of one provider (``flashtile`` or ``sdpa-cudnn``) on the issue-7 grid's
shape (16k tokens, nheads = 2048 / d, bf16), then one step between
``torch.cuda.profiler.start()`` and ``stop()``, so that ``ncu --profile-from-start off``
profiles exactly one step's kernels. The question it answers (docs/perf.md, session 21): is a
kernel bound by the tensor pipe, by shared-memory bandwidth (wgmma reads its shared operands
there; P and dS round trips add to it), or by neither (latency, waits)?

    ncu --profile-from-start off --clock-control none --section SpeedOfLight \\
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \\
        --csv --page details python3 scripts/pipe_profile.py --provider flashtile --d 128 \\
        --seqlen 4096 [--causal] > flashtile.csv
"""

from __future__ import annotations

import argparse

import torch

from flashtile.bench.cases import BenchCase
from flashtile.bench.providers import default_providers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", default="flashtile", choices=["flashtile", "sdpa-cudnn"])
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--seqlen", type=int, default=4096)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--mode", default="fwdbwd", choices=["fwd", "fwdbwd"])
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()

    nheads = 2048 // args.d
    case = BenchCase(batch=16384 // args.seqlen, seqlen=args.seqlen, nheads=nheads,
                     nheads_kv=nheads, headdim=args.d, causal=args.causal, dtype="bf16",
                     mode=args.mode)
    provider = default_providers()[args.provider]
    device = torch.device("cuda")
    fn = provider.build(case, device)
    shape = ((case.batch, case.seqlen, nheads, args.d) if provider.layout == "bshd"
             else (case.batch, nheads, case.seqlen, args.d))
    q, k, v = (torch.randn(shape, device=device, dtype=torch.bfloat16,
                           requires_grad=case.needs_grad) for _ in range(3))
    dout = torch.randn(shape, device=device, dtype=torch.bfloat16)

    def step():
        with provider.context():
            out = fn(q, k, v)
            if case.needs_grad:
                # (the grads of the step alone: no accumulation into the last step's .grad)
                torch.autograd.grad(out, (q, k, v), dout)

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    step()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(f"profiled one {args.mode} step of {args.provider}: {case}")


if __name__ == "__main__":
    main()
