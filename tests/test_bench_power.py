"""``flashtile bench --power``: the SM clock and power sampled while a point is timed.

The sampler and the NVML source run here on fakes (this machine has no GPU): the reading's
median clock, energy-counter power and limit share, the fallback to sampled power, the card
found by UUID; end to end on CPU the option is a note and no numbers. One GPU test reads a
real card.
"""

from __future__ import annotations

import json
import sys
import threading
import types
from pathlib import Path

import pytest
import torch

from flashtile.bench import cli as bench_cli
from flashtile.bench import power, runner
from flashtile.bench.cases import BenchCase
from flashtile.bench.power import LIMIT_REASONS, PowerReading, PowerSample, PowerSampler


class FakeSource:
    """Hands out ``samples`` in turn (the last one again when they run out) and an energy
    counter that grows by ``mj_per_read`` per read (None: the card has no counter)."""

    def __init__(self, samples, mj_per_read=None):
        self.samples, self.reads, self.mj_per_read = list(samples), 0, mj_per_read
        self.energy_reads = 0

    def sample(self):
        self.reads += 1
        return self.samples.pop(0) if len(self.samples) > 1 else self.samples[0]

    def energy_mj(self):
        if self.mj_per_read is None:
            return None
        self.energy_reads += 1
        return 1_000_000 + self.mj_per_read * self.energy_reads


def steps(*times):
    """A clock that returns ``times`` in turn."""
    it = iter(times)
    return lambda: next(it)


def test_reading_is_median_clock_energy_power_and_limited_share():
    """Clock: the median sample. Power: the energy counter's change over the window's time
    (not the sampled power, which NVML averages over its own period). Capped: the share of
    samples with a power or thermal reason; the idle bit alone does not count."""
    samples = [PowerSample(1980, 300.0, 0x1), PowerSample(1600, 690.0, 0x4),
               PowerSample(1650, 700.0, 0x4 | 0x1), PowerSample(1900, 500.0, 0x0)]
    source = FakeSource(samples, mj_per_read=1_400)           # 1.4 J over the window
    with PowerSampler(source, period_s=3600, clock=steps(10.0, 12.0)) as sampler:
        pass                                                    # (no poll within an hour)
    reading = sampler.reading
    assert reading.samples == 2 == source.reads                 # one at each end
    assert reading.sm_mhz == pytest.approx((1980 + 1600) / 2)
    assert reading.watts == pytest.approx(1.4 / 2.0)            # J / s
    assert reading.capped == pytest.approx(0.5)


def test_a_short_window_takes_the_sampled_power_not_the_counter():
    """Under :data:`power.ENERGY_MIN_S` the counter's steps dominate its change (session 47:
    185-1,085 W over ~150 ms at a 700 W cap), so the sampled power is averaged instead."""
    samples = [PowerSample(1980, 640.0, 0x4), PowerSample(1900, 660.0, 0x4)]
    source = FakeSource(samples, mj_per_read=150_000)          # 150 J: "1,000 W" over 0.15 s
    with PowerSampler(source, period_s=3600, clock=steps(10.0, 10.15)) as sampler:
        pass
    assert source.energy_reads == 2
    assert sampler.reading.watts == pytest.approx(650.0)
    source = FakeSource(samples, mj_per_read=700_000)          # 700 J over exactly the minimum
    with PowerSampler(source, period_s=3600,
                      clock=steps(10.0, 10.0 + power.ENERGY_MIN_S)) as sampler:
        pass
    assert sampler.reading.watts == pytest.approx(700.0 / power.ENERGY_MIN_S)


def test_reading_of_many_samples():
    samples = [PowerSample(mhz, 650.0, reasons) for mhz, reasons in
               ((1980, 0x0), (1425, 0x4), (1605, 0x4), (1650, 0x40), (1900, 0x1))]
    reading = power.reading_of(samples)
    assert reading == PowerReading(sm_mhz=1650, watts=650.0, capped=0.6, samples=5)
    assert power.reading_of(samples, watts=612.0).watts == 612.0


def test_without_an_energy_counter_the_sampled_power_is_averaged():
    source = FakeSource([PowerSample(1500, 600.0, 0x8), PowerSample(1700, 650.0, 0x0)])
    with PowerSampler(source, period_s=3600) as sampler:
        pass
    assert sampler.reading.watts == pytest.approx(625.0)
    assert sampler.reading.capped == pytest.approx(0.5)          # HW slowdown is a limit


def test_sampler_polls_while_the_timing_runs_and_stops_after():
    """The thread samples while the body runs, and is gone once the block is left (a stray
    poller would go on reading the card through the rest of the run)."""
    source = FakeSource([PowerSample(1980, 100.0, 0)])
    before = threading.active_count()
    with PowerSampler(source, period_s=0.001) as sampler:
        while source.reads < 6:
            threading.Event().wait(0.001)
    assert sampler.reading.samples == len(sampler.samples) >= 6
    assert threading.active_count() == before
    reads = source.reads
    threading.Event().wait(0.01)
    assert source.reads == reads


def test_a_failing_read_leaves_no_reading_and_the_timing_alone(monkeypatch):
    """NVML failing mid-window: no exception reaches the timed code, no reading from part of
    the window, the error kept; ``_time`` still reports the time."""
    class Flaky(FakeSource):
        def sample(self):
            if self.reads == 1:
                self.reads += 1
                raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
            return super().sample()

    with PowerSampler(Flaky([PowerSample(1980, 100.0, 0)]), period_s=0.001) as sampler:
        threading.Event().wait(0.02)
    assert sampler.reading is None and "GPU_IS_LOST" in sampler.error
    monkeypatch.setattr(runner, "median_ms", lambda *args: 1.5)
    options = runner.RunOptions(device=torch.device("cpu"), providers=("eager",),
                                power=Flaky([PowerSample(1980, 100.0, 0)]))
    m = runner._time(runner.PROVIDERS["eager"], CASE, options)
    assert m.status == "ok" and m.ms == 1.5 and m.power is None


def test_limit_reasons_are_power_and_thermal_only():
    assert LIMIT_REASONS & 0x4 and LIMIT_REASONS & 0x8 and LIMIT_REASONS & 0x80
    assert not LIMIT_REASONS & 0x1 and not LIMIT_REASONS & 0x2      # idle, app clocks


def _fake_nvml(energy: bool, uuids=("GPU-1234",), old_names=False):
    """A stand-in for ``pynvml`` with one card per UUID."""
    nvml = types.SimpleNamespace(NVML_CLOCK_SM=1, inits=0)

    class NVMLError(Exception):
        pass

    def init():
        nvml.inits += 1

    def by_uuid(uuid):
        if uuid not in uuids:
            raise NVMLError(f"no card {uuid}")
        return ("handle", uuid)

    def total_energy(handle):
        if not energy:
            raise NVMLError("Not Supported")
        return 5_000

    nvml.NVMLError = NVMLError
    nvml.nvmlInit = init
    nvml.nvmlDeviceGetHandleByUUID = by_uuid
    nvml.nvmlDeviceGetClockInfo = lambda h, which: 1755 if which == 1 else 0
    nvml.nvmlDeviceGetPowerUsage = lambda h: 612_500                  # mW
    nvml.nvmlDeviceGetTotalEnergyConsumption = total_energy
    reasons = lambda h: 0x4                                            # noqa: E731
    if old_names:
        nvml.nvmlDeviceGetCurrentClocksThrottleReasons = reasons
    else:
        nvml.nvmlDeviceGetCurrentClocksEventReasons = reasons
    return nvml


@pytest.mark.parametrize("energy", [True, False], ids=["energy-counter", "no-counter"])
@pytest.mark.parametrize("old_names", [False, True], ids=["event-reasons", "throttle-reasons"])
def test_nvml_source_reads_clock_power_reasons_and_energy(energy, old_names):
    source = power.NvmlSource(_fake_nvml(energy, old_names=old_names), ("handle", "GPU-1234"))
    assert source.sample() == PowerSample(sm_mhz=1755.0, watts=612.5, reasons=0x4)
    assert source.energy_mj() == (5_000 if energy else None)


def test_open_source_finds_the_card_by_uuid(monkeypatch):
    """The handle comes from the torch device's UUID (``GPU-`` added where torch leaves it
    out), so the sampled card is the timed one whatever CUDA_VISIBLE_DEVICES says."""
    nvml = _fake_nvml(True, uuids=("GPU-abcd",))
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: types.SimpleNamespace(uuid="abcd"))
    source, why = power.open_source(torch.device("cuda", 0))
    assert why is None and source.handle == ("handle", "GPU-abcd") and nvml.inits == 1
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: types.SimpleNamespace(uuid="ffff"))
    source, why = power.open_source(torch.device("cuda", 0))
    assert source is None and "NVML cannot read this GPU" in why and "GPU-ffff" in why


def test_open_source_says_why_not(monkeypatch):
    source, why = power.open_source(torch.device("cpu"))
    assert source is None and "nothing to report on CPU" in why
    monkeypatch.setitem(sys.modules, "pynvml", None)                    # import fails
    source, why = power.open_source(torch.device("cuda", 0))
    assert source is None and "pip install nvidia-ml-py" in why


CASE = BenchCase(batch=1, seqlen=64, nheads=2, nheads_kv=2, headdim=16, causal=False,
                 dtype="fp32", mode="fwd")


def test_time_samples_only_the_timing_and_rounds_take_medians(monkeypatch):
    """``_time`` with a source wraps :func:`median_ms` alone in the sampler (the check and the
    kernel profile are outside it); the median round takes each field's median and keeps the
    rounds' readings."""
    inside = []

    class Recording(FakeSource):
        def sample(self):
            inside.append(timing_now[0])
            return super().sample()

    timing_now, pollers = [False], []

    def fake_median(*args):
        pollers.append(any(t.name == "flashtile-power" for t in threading.enumerate()))
        timing_now[0] = True
        try:
            return 2.0
        finally:
            timing_now[0] = False

    monkeypatch.setattr(runner, "median_ms", fake_median)
    monkeypatch.setattr(power, "PERIOD_S", 3600.0)          # no poll: the two ends alone
    options = runner.RunOptions(device=torch.device("cpu"), providers=("eager",),
                                power=Recording([PowerSample(1800, 650.0, 0x4)]))
    m = runner._time(runner.PROVIDERS["eager"], CASE, options)
    assert m.status == "ok" and m.power == PowerReading(1800.0, 650.0, 1.0, 2)
    assert inside == [False, False]       # entered before, left after the timing: both ends
    assert pollers == [True]              # ... and polling while it ran

    r1, r2, r3 = (PowerReading(1900, 500, 0.0, 5), PowerReading(1500, 700, 1.0, 5),
                  PowerReading(1700, 650, 0.5, 4))
    first = runner.Measurement("eager", CASE, "ok", ms=1.0, power=r1)
    merged = runner.median_round(first, [runner.Measurement("eager", CASE, "ok", ms=2.0,
                                                            power=r2),
                                         runner.Measurement("eager", CASE, "ok", ms=3.0,
                                                            power=r3)])
    assert merged.power == PowerReading(1700, 650, 0.5, 14)
    assert merged.power_rounds == (r1, r2, r3)
    row = merged.as_dict()
    assert (row["sm_mhz"], row["watts"], row["power_capped"]) == (1700, 650, 0.5)
    assert row["power_rounds"][1] == {"sm_mhz": 1500, "watts": 700, "capped": 1.0, "samples": 5}
    plain = runner.median_round(runner.Measurement("eager", CASE, "ok", ms=1.0), [])
    assert plain.power is None and plain.as_dict()["sm_mhz"] is None


def test_table_cell_shows_the_clock_and_power():
    from flashtile.bench.report import _cell

    m = runner.Measurement("eager", CASE, "ok", ms=1.0, power=PowerReading(1650, 691, 0.8, 9))
    assert "1650 MHz, 691 W, capped 80%" in _cell(m, best=False, memory=False)
    cool = runner.Measurement("eager", CASE, "ok", ms=1.0, power=PowerReading(1980, 300, 0, 9))
    assert "1980 MHz, 300 W[" in _cell(cool, best=False, memory=False)


def test_power_lines_per_provider():
    """One line per provider with readings: the median and lowest of its points' clocks, the
    mean power, how many points had any sample at a limit; none without readings."""
    from flashtile.bench.report import power_lines

    def m(provider, mhz, watts, capped):
        return runner.Measurement(provider, CASE, "ok", ms=1.0,
                                  power=PowerReading(mhz, watts, capped, 5))
    lines = power_lines([m("flashtile", 1980, 300, 0.0), m("flashtile", 1545, 690, 0.6),
                         m("flashtile", 1700, 660, 0.2), m("sdpa-cudnn", 1900, 500, 0.0),
                         runner.Measurement("eager", CASE, "ok", ms=1.0)])
    assert lines == ["flashtile while timed: SM clock median 1700 MHz (lowest 1545), 550 W "
                     "mean, 2 of 3 points at a power or thermal limit",
                     "sdpa-cudnn while timed: SM clock median 1900 MHz (lowest 1900), 500 W "
                     "mean, 0 of 1 points at a power or thermal limit"]
    assert power_lines([runner.Measurement("eager", CASE, "ok", ms=1.0)]) == []


def test_power_on_cpu_is_a_note_and_no_numbers(tmp_path):
    argv = ["--device", "cpu", "--warmup", "1", "--rep", "5", "--seqlens", "64",
            "--headdims", "16", "--nheads", "2", "--batch", "1", "--causal", "no",
            "--mode", "fwd", "--providers", "eager", "--power", "--no-plot",
            "--out", str(tmp_path)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)            # (as tests/test_bench.py: 2 spinning threads crawl)
    try:
        assert bench_cli.main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    data = json.loads(next(Path(tmp_path).glob("bench-*.json")).read_text())
    assert any("--power" in note and "CPU" in note for note in data["meta"]["notes"])
    (row,) = data["results"]
    assert row["status"] == "ok" and row["ms"] is not None
    assert row["sm_mhz"] is None and row["watts"] is None and row["power_rounds"] is None


@pytest.mark.gpu
def test_power_on_gpu(tmp_path):
    """On a GPU with NVML every timed row has a clock within the card's range and a power
    above zero (the JSON says where NVML was missing instead)."""
    pytest.importorskip("pynvml")
    argv = ["--device", "cuda", "--seqlens", "1k", "--headdims", "64", "--nheads", "8",
            "--batch", "4", "--causal", "no", "--mode", "fwd", "--dtype", "fp16",
            "--providers", "flashtile,cudnn", "--power", "--rounds", "2", "--no-plot",
            "--out", str(tmp_path)]
    assert bench_cli.main(argv) == 0
    data = json.loads(next(Path(tmp_path).glob("bench-*.json")).read_text())
    for row in data["results"]:
        assert row["status"] == "ok", row
        assert 100 < row["sm_mhz"] < 5000 and row["watts"] > 0, row
        assert 0 <= row["power_capped"] <= 1 and len(row["power_rounds"]) == 2, row
