"""Where a timed forward+backward leaves the GPU idle, and why.

At the short points of issue 7's grid the bench's call time (do_bench) is above the sum of the
call's kernel times (docs/perf.md, session 29: d=128 causal fwd+bwd 1k, 0.879 ms against
0.741 ms of kernels; cuDNN's call 0.706 against 0.701). This tool times the step the way
do_bench does (gradients reset, an L2 flush, events around the call) and reports, per point and
provider:

- the host's time per iteration against the device's (a host slower than the device leaves
  gaps);
- the operations that synchronise the host with the device (``torch.cuda.set_sync_debug_mode``);
- the device's idle gaps inside the call, from a profiler trace: each gap with the kernels
  around it and how late the host launched the kernel after it (a gap the host caused starts
  with a late launch).

    python3 scripts/idle_probe.py [--points "128:1024:1 64:512:1"] [--iters 30] [--out DIR]

A point is ``d:seqlen:causal`` at issue 7's sizes (batch x seqlen = 16k tokens, nheads = 2048/d,
bf16).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashtile


def make_step(provider: str, d: int, n: int, causal: bool):
    """The bench's fwdbwd call for one provider, and the leaves whose grads it resets."""
    b, h = max(1, 16384 // n), 2048 // d
    shape = (b, n, h, d) if provider == "flashtile" else (b, h, n, d)
    leaves = [torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
              for _ in range(3)]
    dout = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    if provider == "flashtile":
        def call():
            return flashtile.flash_attn_func(*leaves, causal=causal)
    else:
        def call():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(*leaves, is_causal=causal)

    def step():
        call().backward(dout)
    return step, leaves


def timed_loop(step, leaves, iters: int, flush: torch.Tensor):
    """do_bench's loop: ``(host µs per iteration, device µs between the events)`` lists."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    host = []
    torch.cuda.synchronize()
    for i in range(iters):
        t0 = time.perf_counter()
        for x in leaves:
            x.grad = None
        flush.zero_()
        starts[i].record()
        step()
        ends[i].record()
        host.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return host, [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]


def sync_warnings(step, leaves) -> list[str]:
    """The messages of every synchronising CUDA call one step makes."""
    for x in leaves:
        x.grad = None
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    # (torch's once-per-process notice that the debug mode is a prototype is no sync: session
    # 31's first point counted it as one)
    return sorted({str(w.message).splitlines()[0][:160] for w in caught
                   if "debug mode is a prototype" not in str(w.message)})


def gaps(step, leaves, flush: torch.Tensor, trace_path: Path, iters: int = 4) -> dict:
    """Device idle inside the calls of a profiled do_bench-style loop (the flush excluded)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        timed_loop(step, leaves, iters, flush)
    prof.export_chrome_trace(str(trace_path))
    return trace_gaps(json.load(open(trace_path))["traceEvents"])


def trace_gaps(events: list) -> dict:
    """:func:`gaps` from a Chrome trace's events (also for a saved trace)."""
    launch = {e["args"]["correlation"]: e["ts"] for e in events
              if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    kernels = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")),
                     key=lambda e: e["ts"])
    # iterations: the kernels between one flush (a fill of the 256 MB buffer) and the next
    calls, current = [], None
    for e in kernels:
        if e["dur"] > 30 and ("fill" in e["name"].lower() or e.get("cat") == "gpu_memset"):
            current = []
            calls.append(current)
        elif current is not None:
            current.append(e)
    rows = []
    for ks in calls[1:]:               # (the first call may wait for the profiler's start)
        if not ks:
            continue
        busy = sum(k["dur"] for k in ks)
        span = ks[-1]["ts"] + ks[-1]["dur"] - ks[0]["ts"]
        call_gaps = []
        for prev, k in zip(ks, ks[1:]):
            gap = k["ts"] - (prev["ts"] + prev["dur"])
            if gap > 3:
                # (a kernel launched after its predecessor ended waited for the host; Triton's
                # launches go through the driver API, which the trace does not record: None)
                at = launch.get(k["args"].get("correlation"))
                call_gaps.append({"gap_us": gap, "before": prev["name"][:50],
                                  "after": k["name"][:50],
                                  "launch_to_start_us": None if at is None else k["ts"] - at,
                                  "host_late": None if at is None
                                  else at > prev["ts"] + prev["dur"]})
        rows.append({"span_us": span, "busy_us": busy, "kernels": len(ks), "gaps": call_gaps})
    return {"calls": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="128:1024:1 128:512:1 64:512:1 64:1024:1 128:512:0")
    ap.add_argument("--providers", default="flashtile,cudnn")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    results = []
    for point in args.points.split():
        d, n, causal = (int(x) for x in point.split(":"))
        for provider in args.providers.split(","):
            step, leaves = make_step(provider, d, n, bool(causal))
            for _ in range(3):
                for x in leaves:
                    x.grad = None
                step()
            host, device = timed_loop(step, leaves, args.iters, flush)
            syncs = sync_warnings(step, leaves)
            g = gaps(step, leaves, flush, out / f"trace-{provider}-d{d}-{n}-{causal}.json")
            row = {"point": point, "provider": provider,
                   "host_us": statistics.median(host), "device_us": statistics.median(device),
                   "syncs": syncs, **g}
            results.append(row)
            calls = g["calls"]
            idle = statistics.median(c["span_us"] - c["busy_us"] for c in calls) if calls else 0
            busy = statistics.median(c["busy_us"] for c in calls) if calls else 0
            print(f"{point:12s} {provider:9s} host {row['host_us']:7.1f} us/iter  events "
                  f"{row['device_us']:7.1f} us  kernels {busy:7.1f} us  idle {idle:6.1f} us  "
                  f"syncs {len(syncs)}")
            for s in syncs:
                print(f"    sync: {s}")
            if calls:
                for gp in sorted(calls[-1]["gaps"], key=lambda x: -x["gap_us"])[:4]:
                    lag = gp["launch_to_start_us"]
                    how = ("launch not traced" if lag is None else
                           f"launch->start {lag:.1f} us, host late: {gp['host_late']}")
                    print(f"    gap {gp['gap_us']:6.1f} us  {gp['before']} -> {gp['after']}  "
                          f"({how})")
    json.dump(results, open(out / "idle_probe.json", "w"), indent=1)


if __name__ == "__main__":
    main()
