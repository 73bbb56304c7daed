"""Run the grid: for every (case, provider) check first, then time; collect :class:`Measurement`s.

Nothing a provider does can stop the run: unsupported cases become ``n/a`` with the reason,
failures ``error``, wrong answers ``WRONG`` (and are not timed).

With ``rounds`` > 1 each point is timed that many times, the providers in turn and in the
reverse order every other round, and the median round is reported: the GPU's clock and the
host drift over a run by a few percent (docs/perf.md, session 38), so two providers timed once
each, one after the other, can read several percent apart for no reason of their own.
"""

from __future__ import annotations

import contextlib
import statistics
import warnings
from dataclasses import dataclass, replace

import torch

from .cases import BenchCase
from .check import Checker, CheckResult
from .power import PowerReading, PowerSampler, PowerSource
from .providers import CUDNN, GIB, PROVIDERS, Provider
from .timing import kernel_times, make_timed_call, median_ms, peak_extra_memory

# Leave room for the inputs and the allocator when judging whether S and P fit.
FREE_MEMORY_FRACTION = 0.9


@dataclass(frozen=True)
class RunOptions:
    device: torch.device
    providers: tuple[str, ...]
    warmup_ms: float = 25.0
    rep_ms: float = 100.0
    memory: bool = False
    check_only: bool = False
    kernel_times: bool = False
    rounds: int = 1
    # --power: the card to sample while each point is timed (:func:`.power.open_source`,
    # opened once by the command line), or None
    power: PowerSource | None = None


@dataclass(frozen=True)
class Measurement:
    """One provider at one grid point.

    ``status``: ``ok`` (checked and timed), ``checked`` (``--check-only``), ``WRONG``, ``n/a``
    or ``error``. The ratios compare TFLOP/s at the same point (> 1: this provider is faster).
    ``kernel_ms`` (``--kernel-times``): the GPU's time alone (:func:`.timing.kernel_times`), and
    ``vs_cudnn_kernels`` the same ratio as ``vs_cudnn`` from those times. ``ms`` and
    ``kernel_ms`` are the medians of the rounds' times, kept in ``ms_rounds`` and
    ``kernel_ms_rounds`` (one each with ``rounds`` = 1); ``kernel_split_rounds``: each round's
    kernel time by kernel name (:func:`.timing.kernel_times`). ``power`` (``--power``): the
    card's SM clock and power while the call was timed (:mod:`.power`), the median of the
    rounds' readings in ``power_rounds``.
    """

    provider: str
    case: BenchCase
    status: str
    reason: str | None = None
    ms: float | None = None
    peak_memory: int | None = None
    check: CheckResult | None = None
    best_other: str | None = None
    vs_best_other: float | None = None
    vs_cudnn: float | None = None
    configs: dict | None = None
    kernel_ms: float | None = None
    vs_cudnn_kernels: float | None = None
    ms_rounds: tuple[float, ...] | None = None
    kernel_ms_rounds: tuple[float, ...] | None = None
    kernel_split: dict[str, float] | None = None
    kernel_split_rounds: tuple[dict[str, float], ...] | None = None
    power: PowerReading | None = None
    power_rounds: tuple[PowerReading, ...] | None = None

    @property
    def spread(self) -> float | None:
        """(slowest - fastest round) / median, or None with fewer than two rounds."""
        if not self.ms_rounds or len(self.ms_rounds) < 2:
            return None
        return (max(self.ms_rounds) - min(self.ms_rounds)) / self.ms

    @property
    def tflops(self) -> float | None:
        if self.ms is None:
            return None
        return self.case.flops / (self.ms * 1e-3) / 1e12

    @property
    def kernel_tflops(self) -> float | None:
        if not self.kernel_ms:
            return None
        return self.case.flops / (self.kernel_ms * 1e-3) / 1e12

    def as_dict(self) -> dict:
        row = {"provider": self.provider, **self.case.as_dict(), "status": self.status,
               "reason": self.reason, "ms": self.ms, "tflops": self.tflops,
               "peak_memory_bytes": self.peak_memory, "best_other": self.best_other,
               "vs_best_other": self.vs_best_other, "vs_cudnn": self.vs_cudnn,
               "configs": self.configs, "kernel_ms": self.kernel_ms,
               "kernel_tflops": self.kernel_tflops, "vs_cudnn_kernels": self.vs_cudnn_kernels,
               "ms_rounds": self.ms_rounds, "kernel_ms_rounds": self.kernel_ms_rounds,
               "kernel_split_rounds": self.kernel_split_rounds,
               "sm_mhz": self.power.sm_mhz if self.power else None,
               "watts": self.power.watts if self.power else None,
               "power_capped": self.power.capped if self.power else None,
               "power_rounds": ([p.as_dict() for p in self.power_rounds]
                                if self.power_rounds else None)}
        row["check"] = self.check.as_dict() if self.check is not None else None
        return row


def release_cached_memory(device: torch.device) -> None:
    """Hand cached blocks back so the next provider starts clean (best effort: after a sticky
    CUDA error even this raises, and the run must still finish)."""
    if device.type == "cuda":
        try:
            torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001 - the failure itself is reported elsewhere
            pass


def _free_memory(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    free, _total = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


def _too_big(provider: Provider, case: BenchCase, device: torch.device) -> str | None:
    """A clear ``n/a`` for providers whose ``seqlen x seqlen`` matrices cannot fit."""
    need = provider.memory_estimate(case)
    free = _free_memory(device)
    if need and free is not None and need > FREE_MEMORY_FRACTION * free:
        return (f"needs ~{need / GIB:.0f} GiB for seqlen x seqlen intermediates, "
                f"{free / GIB:.0f} GiB free")
    return None


def _time(provider: Provider, case: BenchCase, options: RunOptions) -> Measurement:
    """Time one checked provider; failures become ``n/a``/``error``. With ``options.power``
    the card's clock and power are sampled while :func:`median_ms` runs (nothing else)."""
    device = options.device
    call = None
    sampler = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with provider.context():
                call = make_timed_call(provider, case, device)
                memory = peak_extra_memory(call, device) if options.memory else None
                with (PowerSampler(options.power) if options.power is not None
                      else contextlib.nullcontext()) as sampler:
                    ms = median_ms(call, device, options.warmup_ms, options.rep_ms)
                kernels = kernel_times(call, device) if options.kernel_times else None
            return Measurement(provider.name, case, "ok", ms=ms, peak_memory=memory,
                               configs=provider.launched_configs(case, device),
                               kernel_ms=kernels[0] if kernels else None,
                               kernel_split=kernels[1] if kernels else None,
                               power=sampler.reading if sampler else None)
        except Exception as exc:  # reported, never raised
            reason = provider.explain_failure(exc, [str(w.message) for w in caught])
            status = "n/a" if reason is not None else "error"
            reason = reason or f"{type(exc).__name__}: {str(exc).strip()[:300]}"
            return Measurement(provider.name, case, status, reason=reason)
        finally:
            del call
            release_cached_memory(device)


def measure(provider: Provider, case: BenchCase, checker: Checker,
            options: RunOptions) -> Measurement:
    """Check, then (unless ``--check-only`` or the check failed) time one provider at one case."""
    reason = provider.unavailable(case, options.device) or _too_big(provider, case,
                                                                     options.device)
    if reason is not None:
        return Measurement(provider.name, case, "n/a", reason=reason)
    check = checker.check(provider, case)
    if check.status != "ok":
        release_cached_memory(options.device)
        return Measurement(provider.name, case, check.status, reason=check.reason, check=check)
    if options.check_only:
        return Measurement(provider.name, case, "checked", check=check)
    return replace(_time(provider, case, options), check=check)


def add_ratios(measurements: list[Measurement]) -> list[Measurement]:
    """Fill ``best_other``, ``vs_best_other``, ``vs_cudnn`` and (with kernel times on both
    sides) ``vs_cudnn_kernels`` from the timed results."""
    by_case: dict[BenchCase, list[Measurement]] = {}
    for m in measurements:
        if m.status == "ok":
            by_case.setdefault(m.case, []).append(m)
    result = []
    for m in measurements:
        timed = by_case.get(m.case, []) if m.status == "ok" else []
        others = [o for o in timed if o.provider != m.provider]
        if others:
            best = max(others, key=lambda o: o.tflops)
            cudnn = next((o for o in others if o.provider == CUDNN), None)
            kernels = (cudnn.kernel_ms / m.kernel_ms
                       if cudnn and cudnn.kernel_ms and m.kernel_ms else None)
            m = replace(m, best_other=best.provider, vs_best_other=m.tflops / best.tflops,
                        vs_cudnn=m.tflops / cudnn.tflops if cudnn else None,
                        vs_cudnn_kernels=kernels)
        result.append(m)
    return result


def run_grid(cases: list[BenchCase], options: RunOptions, console=None) -> list[Measurement]:
    """All measurements of the grid (with ratios), showing a rich progress bar."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)

    checker = Checker(options.device)
    measurements = []
    columns = (TextColumn("[progress.description]{task.description}"), BarColumn(),
               MofNCompleteColumn(), TimeElapsedColumn())
    rounds = 1 if options.check_only else options.rounds
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("benchmark",
                                 total=len(cases) * len(options.providers) * rounds)
        first: dict[str, Measurement] = {}
        more: dict[str, list[Measurement]] = {}
        try:
            for case in cases:
                first, more = {}, {name: [] for name in options.providers}
                for turn in range(rounds):
                    # Round 0 checks each provider (and times the right ones); later rounds
                    # time again, every other one in the reverse order.
                    order = options.providers[::-1] if turn % 2 else options.providers
                    for name in order:
                        label = f" round {turn + 1}/{rounds}" if rounds > 1 else ""
                        progress.update(task, description=f"{case.label()} {name:<14}{label}")
                        if turn == 0:
                            first[name] = _measure_safely(PROVIDERS[name], case, checker,
                                                          options)
                        elif first[name].status == "ok":
                            more[name].append(_time_safely(PROVIDERS[name], case, options))
                        progress.advance(task)
                measurements += [median_round(first[name], more[name]) for name in first]
                first = {}
            progress.update(task, description="benchmark done")
        except KeyboardInterrupt:
            # Keep what was measured: the tables and the JSON still get written.
            measurements += [median_round(first[name], more[name]) for name in first]
            progress.update(task, description="interrupted: reporting what was measured")
    return add_ratios(measurements)


def median_round(first: Measurement, more: list[Measurement]) -> Measurement:
    """``first`` (round 0: checked, and timed if right) with ``ms``, ``kernel_ms`` and each
    field of ``power`` the medians over it and the later rounds that timed without failing."""
    if first.status != "ok":
        return first
    ms = (first.ms, *(m.ms for m in more if m.status == "ok"))
    timed = [first, *(m for m in more if m.status == "ok")]
    kernels = tuple(m.kernel_ms for m in timed if m.kernel_ms is not None)
    splits = tuple(m.kernel_split for m in timed if m.kernel_split is not None)
    readings = tuple(m.power for m in timed if m.power is not None)
    power = None
    if readings:
        power = PowerReading(sm_mhz=statistics.median(r.sm_mhz for r in readings),
                             watts=statistics.median(r.watts for r in readings),
                             capped=statistics.median(r.capped for r in readings),
                             samples=sum(r.samples for r in readings))
    return replace(first, ms=statistics.median(ms), ms_rounds=ms,
                   kernel_ms=statistics.median(kernels) if kernels else None,
                   kernel_ms_rounds=kernels or None, kernel_split_rounds=splits or None,
                   power=power, power_rounds=readings or None)


def _time_safely(provider: Provider, case: BenchCase, options: RunOptions) -> Measurement:
    """:func:`_time` for a later round, which reports what it did not anticipate as
    ``error`` (that round is then left out of the median)."""
    try:
        return _time(provider, case, options)
    except Exception as exc:  # noqa: BLE001
        release_cached_memory(options.device)
        return Measurement(provider.name, case, "error",
                           reason=f"{type(exc).__name__}: {str(exc).strip()[:300]}")


def _measure_safely(provider: Provider, case: BenchCase, checker: Checker,
                    options: RunOptions) -> Measurement:
    """:func:`measure`, with anything it did not anticipate (e.g. a CUDA error that poisons
    the context) reported as ``error`` instead of ending the run."""
    try:
        return measure(provider, case, checker, options)
    except Exception as exc:  # noqa: BLE001
        release_cached_memory(options.device)
        return Measurement(provider.name, case, "error",
                           reason=f"{type(exc).__name__}: {str(exc).strip()[:300]}")
