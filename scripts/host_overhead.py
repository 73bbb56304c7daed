"""Host (Python) time per flashtile call, measured on a machine without a GPU.

At small sizes a GPU step can be bound by the host: the time to validate, build kernel
arguments and launch. This tool runs the real public API with small CPU tensors while a
stand-in driver reports a Hopper target, kernels compile for sm_90a (never run: their launch is
a no-op) and the autotuners skip timing. What remains is exactly the host path of a GPU call
(validation, autograd, autotuner lookup, Triton's argument binding, torch allocations), timed
over many calls, with a cProfile breakdown of the top functions.

    python3 scripts/host_overhead.py [--what fwdbwd|fwd|decode|flex] [--cache N] [--tma] [--profile]

``flex``: ``flex_attention`` forward+backward with a 50% random block mask.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time

os.environ.pop("TRITON_INTERPRET", None)
os.environ.setdefault("FLASHTILE_AUTOTUNE", "0")

import torch                                                   # noqa: E402
import triton                                                  # noqa: E402
from triton.compiler import compiler as triton_compiler        # noqa: E402
from triton.runtime import autotuner, driver                   # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from inspect_kernels import HopperStandIn                      # noqa: E402


def _no_launch(self):
    """Loaded-kernel stand-in: the launch itself becomes a no-op."""
    self.module, self.function = object(), None
    self.n_regs = self.n_spills = 0
    self.n_max_threads = 1024
    self._run = lambda *args, **kwargs: None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--what", default="fwdbwd", choices=("fwd", "fwdbwd", "decode", "flex"))
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--cache", type=int, default=256,
                   help="decode: cache length (32768: the split path with its combine launch)")
    p.add_argument("--tma", action="store_true",
                   help="decode: take the TMA-descriptor path (CPU tensors never would)")
    p.add_argument("--gpu", action="store_true",
                   help="on a GPU machine: real launches; a host-bound call's wall time is its "
                        "host time (the GPU runs behind)")
    p.add_argument("--profile", action="store_true")
    args = p.parse_args()

    dev = "cuda" if args.gpu else "cpu"
    if not args.gpu:
        driver.set_active(HopperStandIn())
        triton_compiler.CompiledKernel._init_handles = _no_launch
        autotuner.Autotuner._bench = lambda self, *a, config, **k: [1.0, 1.0, 1.0]
    import flashtile
    from flashtile import flex, interface, kvcache
    interface.resolve = kvcache.resolve = flex.resolve = lambda device: "triton"   # GPU path

    if args.what == "decode":
        from flashtile.kernels import decode
        from flashtile.kvcache import flash_attn_with_kvcache
        if args.tma:
            decode.use_tma = lambda *tensors: True
        b, hq, hkv, d, cache = 1, 32, 8, 128, args.cache
        q = torch.randn(b, 1, hq, d, dtype=torch.bfloat16, device=dev)
        kc = torch.randn(b, cache, hkv, d, dtype=torch.bfloat16, device=dev)
        vc = torch.randn_like(kc)
        lens = torch.full((b,), cache - 8, dtype=torch.int32, device=dev)

        def step():
            flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, causal=True)
    elif args.what == "flex":
        from flashtile import masks
        q, k, v = (torch.randn(1, 16, 512, 128, dtype=torch.bfloat16, device=dev,
                               requires_grad=True) for _ in range(3))
        dout = torch.randn(1, 16, 512, 128, dtype=torch.bfloat16, device=dev)
        layout = masks.random_block_layout(4, 4, 0.5)[0, 0]
        bm = flashtile.create_block_mask(masks.layout_mask(layout, 128), None, None, 512, 512,
                                         device=dev)

        def step():
            # autograd.grad, not .backward: no gradient accumulation on the host
            torch.autograd.grad(flashtile.flex_attention(q, k, v, block_mask=bm), (q, k, v), dout)
    else:
        q, k, v = (torch.randn(1, 128, 16, 128, dtype=torch.bfloat16, device=dev,
                               requires_grad=True) for _ in range(3))
        dout = torch.randn(1, 128, 16, 128, dtype=torch.bfloat16, device=dev)

        def step():
            out = flashtile.flash_attn_func(q, k, v, causal=True)
            if args.what == "fwdbwd":
                # autograd.grad, not .backward: accumulating .grad on the host (bf16 CPU adds)
                # is not part of a GPU call's host time and swamped it (4.8 ms on the H200 host)
                torch.autograd.grad(out, (q, k, v), dout)

    for _ in range(3):                                          # compile, tune, warm caches
        step()
    if args.gpu:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.calls):
        step()
    per_call = (time.perf_counter() - start) / args.calls
    if args.gpu:
        torch.cuda.synchronize()
        gpu_call = (time.perf_counter() - start) / args.calls
        print(f"(GPU: {gpu_call * 1e6:.0f} us per call until the device finished)")
    print(f"{args.what}: {per_call * 1e6:.0f} us of host time per call "
          f"(triton {triton.__version__}, torch {torch.__version__})")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(50):
            step()
        prof.disable()
        pstats.Stats(prof).sort_stats(os.environ.get("PROFILE_SORT", "cumulative")).print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
