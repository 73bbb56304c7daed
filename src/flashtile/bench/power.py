"""The card's SM clock and board power while a point is timed (``flashtile bench --power``).

Why: a card at its power limit lowers its SM clock, so a time can be set by the clock rather
than by the kernel. On the H200 (docs/perf.md, session 46) the clock sat at 1,980 MHz for short
sequences and fell as low as 1,545 MHz (bf16 grid) and 1,425 MHz (fp16) under the 700 W cap
at long ones, the cap flagged in a third of the grid's samples. Two providers timed one after
the other can then read apart because one ran on a cooler card, and a kernel that draws more
power for the same work pays for it in clock. The reading says which case you are in.

A :class:`PowerSampler` polls the card from a thread (every ``period_s``, and once at each
end) while the timing runs and gives a :class:`PowerReading`:

- ``sm_mhz``: the median SM clock of the samples;
- ``watts``: the mean board power: from the card's energy counter (NVML's total energy, mJ)
  over windows of at least :data:`ENERGY_MIN_S`, else the mean of the sampled power. The
  counter moves in steps: on an H100 (session 47) over do_bench's ~150 ms windows it read
  185-1,085 W at a 700 W cap (either one step or two), over ~1.2 s windows 607-766 W;
- ``capped``: the fraction of samples whose clock was held down by a power or thermal limit
  (:data:`LIMIT_REASONS`).

The readings come from NVML (``pynvml``, the ``nvidia-ml-py`` package); without it, or off
CUDA, :func:`open_source` says why and the bench reports nothing rather than a made-up number.
Each poll holds the GIL briefly, which a host-bound short call could feel: hence opt-in.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass
from typing import Callable, Protocol

import torch

# NVML's clock event ("throttle") reasons that mean a power or thermal limit holds the clock:
# SW power cap, HW slowdown, SW thermal, HW thermal, HW power brake. (GPU idle, 0x1, is not
# a limit; application clocks, 0x2, and sync boost, 0x10, are settings.)
LIMIT_REASONS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
PERIOD_S = 0.02
# The shortest window over which the energy counter's change is the power (see ``watts``).
ENERGY_MIN_S = 1.0


@dataclass(frozen=True)
class PowerSample:
    sm_mhz: float
    watts: float
    reasons: int


@dataclass(frozen=True)
class PowerReading:
    """What the card did over one timing window (see the module docstring)."""

    sm_mhz: float
    watts: float
    capped: float
    samples: int

    def as_dict(self) -> dict:
        return {"sm_mhz": self.sm_mhz, "watts": self.watts, "capped": self.capped,
                "samples": self.samples}


class PowerSource(Protocol):
    def sample(self) -> PowerSample: ...

    def energy_mj(self) -> int | None: ...


class PowerSampler:
    """``with PowerSampler(source) as s: ...`` then ``s.reading``: samples ``source`` every
    ``period_s`` (default :data:`PERIOD_S`) from a thread between entering and leaving (at
    least twice: at both ends). ``clock`` is the time source (seconds; injectable for tests).

    A failing read never reaches the timed code: the sampler stops reading, ``reading`` stays
    None and ``error`` says what failed (a reading from part of the window would pass for the
    whole of it)."""

    def __init__(self, source: PowerSource, period_s: float | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.source, self.clock = source, clock
        self.period_s = PERIOD_S if period_s is None else period_s
        self.samples: list[PowerSample] = []
        self.reading: PowerReading | None = None
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read(self, what: Callable[[], object]):
        """``what()``, or None with ``error`` set (and every later read skipped)."""
        if self.error is not None:
            return None
        try:
            return what()
        except Exception as exc:  # noqa: BLE001 - NVML errors, a card gone away
            self.error = f"{type(exc).__name__}: {exc}"
            return None

    def _sample(self) -> None:
        sample = self._read(self.source.sample)
        if sample is not None:
            self.samples.append(sample)

    def _poll(self) -> None:
        while not self._stop.wait(self.period_s) and self.error is None:
            self._sample()

    def __enter__(self) -> "PowerSampler":
        self._energy0, self._t0 = self._read(self.source.energy_mj), self.clock()
        self._sample()
        self._thread = threading.Thread(target=self._poll, name="flashtile-power", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        energy1, seconds = self._read(self.source.energy_mj), self.clock() - self._t0
        if self.error is not None:
            return
        watts = None
        if self._energy0 is not None and energy1 is not None and seconds >= ENERGY_MIN_S:
            watts = (energy1 - self._energy0) / 1e3 / seconds
        self.reading = reading_of(self.samples, watts)


def reading_of(samples: list[PowerSample], watts: float | None = None) -> PowerReading:
    """The :class:`PowerReading` of ``samples`` (at least one); ``watts`` from an energy
    counter where the window was long enough for it, else the mean of the sampled power."""
    if watts is None:
        watts = statistics.fmean(s.watts for s in samples)
    capped = sum(1 for s in samples if s.reasons & LIMIT_REASONS) / len(samples)
    return PowerReading(sm_mhz=statistics.median(s.sm_mhz for s in samples), watts=watts,
                        capped=capped, samples=len(samples))


class NvmlSource:
    """One CUDA device through NVML, found by its UUID (so ``CUDA_VISIBLE_DEVICES`` cannot
    point it at another card)."""

    def __init__(self, nvml, handle):
        self.nvml, self.handle = nvml, handle
        # Renamed in newer NVML ("throttle" -> "event"); either reads the same bits.
        self._reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        try:
            nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            self._has_energy = True
        except nvml.NVMLError:             # pre-Volta cards and some virtual GPUs
            self._has_energy = False

    def sample(self) -> PowerSample:
        nvml = self.nvml
        return PowerSample(sm_mhz=float(nvml.nvmlDeviceGetClockInfo(self.handle,
                                                                    nvml.NVML_CLOCK_SM)),
                           watts=nvml.nvmlDeviceGetPowerUsage(self.handle) / 1e3,
                           reasons=int(self._reasons(self.handle)))

    def energy_mj(self) -> int | None:
        if not self._has_energy:
            return None
        return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))


def open_source(device: torch.device) -> tuple[PowerSource | None, str | None]:
    """``(source, None)`` for a CUDA device NVML can read, else ``(None, why not)``."""
    if device.type != "cuda":
        return None, "--power reads the GPU's clock and power (NVML); nothing to report on CPU"
    try:
        import pynvml as nvml
    except ImportError:
        return None, ("--power needs NVML's Python binding: pip install nvidia-ml-py; "
                      "the clock and power are not reported")
    try:
        nvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(device).uuid)
        handle = nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-")
                                                else f"GPU-{uuid}")
        return NvmlSource(nvml, handle), None
    except Exception as exc:  # noqa: BLE001 - NVML absent, no permission, a MIG slice...
        return None, (f"--power: NVML cannot read this GPU ({type(exc).__name__}: {exc}); "
                      "the clock and power are not reported")


__all__ = ["ENERGY_MIN_S", "LIMIT_REASONS", "NvmlSource", "PowerReading", "PowerSample",
           "PowerSampler", "open_source", "reading_of"]
