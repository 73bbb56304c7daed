"""Timing: what one timed call is for each mode, and how it is measured.

- ``fwd``: the forward alone, inputs without ``requires_grad`` (no autograd bookkeeping).
- ``bwd``: the backward alone: one forward builds the graph, each timed call runs
  ``out.backward(dout, retain_graph=True)``.
- ``fwdbwd``: forward then ``out.backward(dout)``, as in a training step.

Input gradients are reset to ``None`` before every call (``grad_to_none``) so the timing never
includes accumulating into an old ``.grad``.

On a GPU the time is the median of ``triton.testing.do_bench`` (which also flushes the L2 cache
between calls); on CPU the median of ``time.perf_counter`` over repeats.

:func:`kernel_times` (``flashtile bench --kernel-times``) is the GPU's share of a call alone: its
kernels' summed device times, without the host's launch path.

:func:`cold_clean_ms` is for memory-bound calls of a few tens of microseconds (decoding):
do_bench flushes the L2 by *writing* 256 MB, and the timed call then pays the write-back of the
up to 60 MB of dirty lines (H200) that flush leaves, ~15 us at 4 TB/s. Measured on the H200
(docs/perf.md, session 6): a plain read of 134 MB reaches 3,198 GB/s after that flush and
3,935 GB/s after a read flush.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from .cases import BenchCase
from .check import random_inputs
from .providers import Provider


@dataclass(frozen=True)
class TimedCall:
    """The function to time and the tensors whose ``.grad`` is reset before each call."""

    fn: Callable[[], object]
    grad_to_none: tuple[torch.Tensor, ...]


def make_timed_call(provider: Provider, case: BenchCase, device: torch.device) -> TimedCall:
    """Build the inputs (native layout) and the call for ``case.mode``; runs it once to prime
    (compilation, autotuning) and to build the graph the backward needs."""
    (q, k, v), dout = random_inputs(case, device, seed=1)
    leaves = tuple(provider.to_native(x).requires_grad_(case.needs_grad) for x in (q, k, v))
    dout = provider.to_native(dout)
    del q, k, v
    attention = provider.build(case, device)
    if case.mode == "fwd":
        attention(*leaves)
        return TimedCall(lambda: attention(*leaves), ())
    if case.mode == "bwd":
        out = attention(*leaves)
        out.backward(dout, retain_graph=True)
        _clear_grads(leaves)
        return TimedCall(lambda: out.backward(dout, retain_graph=True), leaves)
    if case.mode == "fwdbwd":
        attention(*leaves).backward(dout)
        _clear_grads(leaves)
        return TimedCall(lambda: attention(*leaves).backward(dout), leaves)
    raise ValueError(f"unknown mode {case.mode!r}")


def _clear_grads(tensors) -> None:
    for t in tensors:
        t.grad = None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(call: TimedCall, device: torch.device, warmup_ms: float, rep_ms: float) -> float:
    """Median time of one call in milliseconds."""
    if device.type == "cuda":
        import triton.testing
        return float(triton.testing.do_bench(call.fn, warmup=warmup_ms, rep=rep_ms,
                                             grad_to_none=list(call.grad_to_none) or None,
                                             return_mode="median"))
    return _cpu_median_ms(call, warmup_ms, rep_ms)


def capture_graph(fn: Callable[[], object], warmups: int = 1):
    """``(graph, result)``: ``fn`` run ``warmups`` times on a side stream (compilation,
    autotuning and allocator caches stay out of the capture), then captured in a CUDA graph.
    ``result`` is what the captured call returned: each ``graph.replay()`` rewrites it."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = fn()
    return graph, result


def flushed_median_ms(fn: Callable[[], object], flush: Callable[[], object], reps: int = 100,
                      warmup: int = 5) -> float:
    """Median milliseconds of ``fn`` on a CUDA device, each call timed between events right
    after ``flush()``."""
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for _ in range(warmup):
        flush()
        fn()
    for i in range(reps):
        flush()
        start[i].record()
        fn()
        end[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(start, end))


def cold_clean_ms(fn: Callable[[], object], reps: int = 100, warmup: int = 5,
                  flush_bytes: int = 256 << 20) -> float:
    """:func:`flushed_median_ms` after the L2 was flushed by *reading* ``flush_bytes`` (the L2
    then holds only clean lines of the flush buffer, evicted for free): a cold cache with no
    write-back charged to ``fn``."""
    flush_buf = torch.ones(flush_bytes // 4, dtype=torch.int32, device="cuda")
    return flushed_median_ms(fn, flush_buf.sum, reps, warmup)


def _cpu_median_ms(call: TimedCall, warmup_ms: float, rep_ms: float,
                   min_reps: int = 3, max_reps: int = 1000) -> float:
    """Median of ``perf_counter`` over repeats: ``warmup_ms`` of warm-up (at least one call),
    then calls until ``rep_ms`` have passed (at least ``min_reps``)."""
    start = time.perf_counter()
    while True:
        _clear_grads(call.grad_to_none)
        call.fn()
        if (time.perf_counter() - start) * 1e3 >= warmup_ms:
            break
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_reps or (len(times) < max_reps
                                    and (time.perf_counter() - start) * 1e3 < rep_ms):
        _clear_grads(call.grad_to_none)
        t0 = time.perf_counter()
        call.fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def kernel_times(call: TimedCall, device: torch.device,
                 reps: int = 5) -> tuple[float, dict[str, float]] | None:
    """GPU time of one call in milliseconds and its parts from the same profile: ``(total ms,
    {kernel name: ms})``, the sum of its kernels', copies' and memsets' device times (torch
    profiler, mean of ``reps`` calls). The host's launch path and the gaps it leaves are not
    in it, so where a call is bound by the host (short sequences: the H200's host spends
    0.3-0.6 ms per flashtile forward+backward, docs/perf.md session 16) this reads the kernels
    apart from :func:`median_ms`; by name, a round that reads slow names the kernel that was
    (session 42: in a d=64 forward+backward's slow rounds at 16k every kernel moved, cuDNN's
    too). None off CUDA."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    _clear_grads(call.grad_to_none)
    call.fn()                                   # (warm: allocator, plans)
    _sync(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            _clear_grads(call.grad_to_none)
            call.fn()
        _sync(device)
    _clear_grads(call.grad_to_none)
    by_name = {name: us / reps / 1e3
               for name, us in device_us_by_name(prof.key_averages()).items()}
    return sum(by_name.values()), by_name


# Longer kernel names (cuDNN's generated ones run past 150 characters) are cut to this many
KERNEL_NAME_CHARS = 80


def device_us_by_name(averages) -> dict[str, float]:
    """Device microseconds of a profile's averaged events (``key_averages()``) that ran on
    the GPU, by event name (cut to :data:`KERNEL_NAME_CHARS`; events whose cut names meet
    are added together), largest first."""
    by_name: dict[str, float] = {}
    for ev in averages:
        if ev.device_type == torch.autograd.DeviceType.CUDA and ev.device_time_total > 0:
            name = ev.key[:KERNEL_NAME_CHARS]
            by_name[name] = by_name.get(name, 0.0) + ev.device_time_total
    return dict(sorted(by_name.items(), key=lambda item: -item[1]))


def peak_extra_memory(call: TimedCall, device: torch.device) -> int | None:
    """Bytes allocated at the peak of one call beyond what was allocated before it (CUDA only).

    Includes the call's outputs and gradients; excludes the inputs (and, for ``bwd``, the graph
    the forward kept)."""
    if device.type != "cuda":
        return None
    _clear_grads(call.grad_to_none)
    gc.collect()                    # no collection of earlier garbage inside the measured call
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    call.fn()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    _clear_grads(call.grad_to_none)
    return int(peak)
