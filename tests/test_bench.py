"""``flashtile bench`` end to end on CPU: JSON content, the FLOP convention, WRONG providers are
never timed, unavailable ones are n/a, bad options fail cleanly, plots are written.

Every run here passes ``--device cpu`` (these tests must not depend on a GPU being present) and
tiny grids with short timing budgets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from flashtile.bench import cli as bench_cli
from flashtile.bench import providers, runner
from flashtile.bench.cases import BenchCase, GridSpec, attention_flops, build_cases
from flashtile.bench.providers import EagerProvider

FAST = ["--device", "cpu", "--warmup", "1", "--rep", "5"]
TINY = FAST + ["--seqlens", "64", "--headdims", "16", "--nheads", "2", "--batch", "1"]


@pytest.fixture(autouse=True)
def _one_thread():
    """Timing loops with 2 threads on a shared 2-core machine crawl (spinning OpenMP workers)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def bench(argv: list[str], out: Path) -> tuple[int, dict]:
    """Run the subcommand; returns the exit status and the JSON it wrote."""
    status = bench_cli.main(argv + ["--out", str(out)])
    written = sorted(out.glob("bench-*.json"))
    assert len(written) == 1, f"expected one JSON in {out}, found {written}"
    return status, json.loads(written[0].read_text())


def results_of(data: dict, provider: str) -> list[dict]:
    return [r for r in data["results"] if r["provider"] == provider]


# ----------------------------------------------------------------------------- injected providers

class _WrongForward(EagerProvider):
    """Eager attention with a 5% error in the output."""

    name = "wrong-fwd"
    description = "deliberately wrong output"
    calls = 0

    def build(self, case, device):
        inner = super().build(case, device)

        def run(q, k, v):
            type(self).calls += 1
            return inner(q, k, v) * 1.05
        return run


class _ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * 1.1


class _WrongBackward(EagerProvider):
    """Right output, gradients 10% too large."""

    name = "wrong-bwd"
    description = "deliberately wrong gradients"

    def build(self, case, device):
        inner = super().build(case, device)
        return lambda q, k, v: _ScaleGrad.apply(inner(q, k, v))


class _Raises(EagerProvider):
    name = "raises"
    description = "always raises"

    def build(self, case, device):
        def run(q, k, v):
            raise RuntimeError("boom")
        return run


@pytest.fixture
def injected(monkeypatch):
    """Register the broken providers and record which providers get timed."""
    for cls in (_WrongForward, _WrongBackward, _Raises):
        monkeypatch.setitem(providers.PROVIDERS, cls.name, cls())
    _WrongForward.calls = 0
    timed = []
    real = runner.make_timed_call

    def recording(provider, case, device):
        timed.append(provider.name)
        return real(provider, case, device)
    monkeypatch.setattr(runner, "make_timed_call", recording)
    return timed


# ----------------------------------------------------------------------------- tests

def test_flop_convention():
    # flash-attention's benchmark: 4*b*h*s*s*d forward, halved when causal, x2.5 bwd, x3.5 both.
    b, h, s, d = 2, 16, 1024, 128
    fwd = 4 * b * h * s * s * d
    assert attention_flops(b, h, s, s, d, d, False, "fwd") == fwd
    assert attention_flops(b, h, s, s, d, d, True, "fwd") == fwd / 2
    assert attention_flops(b, h, s, s, d, d, False, "bwd") == 2.5 * fwd
    assert attention_flops(b, h, s, s, d, d, True, "fwdbwd") == 3.5 * fwd / 2
    # QK^T counts d, PV counts dv.
    assert attention_flops(1, 1, 8, 8, 64, 32, False, "fwd") == 2 * 8 * 8 * (64 + 32)
    case = BenchCase(batch=b, seqlen=s, nheads=h, nheads_kv=h, headdim=d, causal=True,
                     dtype="bf16", mode="fwdbwd")
    assert case.flops == 3.5 * fwd / 2


def test_grid_batch_from_tokens_and_rounding_notes():
    spec = GridSpec(seqlens=(512, 3000, 32768), headdims=(96,), causal=(False,),
                    dtypes=("bf16",), modes=("fwd",), gqa=8, tokens=16384)
    cases, notes = build_cases(spec)
    assert [c.batch for c in cases] == [32, 5, 1]
    # 2048/96 = 21 heads, rounded down to a multiple of the GQA ratio.
    assert {(c.nheads, c.nheads_kv) for c in cases} == {(16, 2)}
    assert any("rounded to 5" in n for n in notes) and any("21 rounded to 16" in n for n in notes)


def test_check_instance_is_small_and_keeps_the_config():
    case = BenchCase(batch=4, seqlen=4096, nheads=32, nheads_kv=4, headdim=64, causal=True,
                     dtype="bf16", mode="fwdbwd")
    small = case.check_instance()
    assert small.seqlen == 1024 and small.batch == 1 and small.scores <= 2 ** 24
    assert (small.headdim, small.causal, small.dtype, small.gqa) == (64, True, "bf16", 8)
    tiny = BenchCase(batch=2, seqlen=128, nheads=4, nheads_kv=4, headdim=64, causal=False,
                     dtype="fp32", mode="fwd")
    assert tiny.check_instance() == tiny


def test_quick_run_writes_json_and_plots(tmp_path):
    status, data = bench(["--quick", "--memory"] + FAST, tmp_path)
    assert status == 0
    meta = data["meta"]
    assert meta["options"]["preset"] == "quick"
    for key in ("device", "versions", "git_commit", "date", "flop_convention", "check_rule"):
        assert key in meta
    assert "4*b*h*sq*sk*d" in meta["flop_convention"]
    assert set(meta["providers"]) == {"flashtile", "eager", "sdpa-math"}
    rows = data["results"]
    # seqlen 128/256 x causal no/yes x fwd/fwdbwd, three providers.
    assert len(rows) == 2 * 2 * 2 * 3
    for row in rows:
        assert row["status"] == "ok", row
        case = BenchCase(batch=row["b"], seqlen=row["s"], nheads=row["h"], nheads_kv=row["hkv"],
                         headdim=row["d"], causal=row["causal"], dtype=row["dtype"],
                         mode=row["mode"])
        assert row["flops"] == case.flops
        assert row["tflops"] == pytest.approx(row["flops"] / (row["ms"] * 1e-3) / 1e12)
        check = row["check"]
        assert check["with_grads"] == (row["mode"] == "fwdbwd")
        assert set(check["errors"]) == ({"out", "dq", "dk", "dv"} if check["with_grads"]
                                        else {"out"})
        assert all(check["errors"][n] <= check["budgets"][n] for n in check["errors"])
        assert row["vs_best_other"] is not None and row["peak_memory_bytes"] is None
    # flashtile's ratio to the best other provider, summarised per mode (issue 7's gate).
    assert {(s["provider"], s["mode"]) for s in data["summary"]} == {("flashtile", "fwd"),
                                                                    ("flashtile", "fwdbwd")}
    assert all(s["vs_best_other"]["points"] == 4 for s in data["summary"])
    pngs = sorted(tmp_path.glob("*.png"))
    assert [p.name.split("-", 3)[-1] for p in pngs] == ["fwd-fp32.png", "fwdbwd-fp32.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


def test_wrong_provider_is_reported_and_not_timed(tmp_path, injected, capsys):
    argv = TINY + ["--causal", "yes", "--mode", "fwd,fwdbwd", "--no-plot",
                   "--providers", "eager,wrong-fwd,wrong-bwd,raises"]
    status, data = bench(argv, tmp_path)
    assert status == 0       # the subject (flashtile) is not in this run
    by = {(r["provider"], r["mode"]): r for r in data["results"]}
    for mode in ("fwd", "fwdbwd"):
        assert by[("eager", mode)]["status"] == "ok"
        assert by[("wrong-fwd", mode)]["status"] == "WRONG"
        assert by[("wrong-fwd", mode)]["ms"] is None
        assert "out err" in by[("wrong-fwd", mode)]["reason"]
        assert by[("raises", mode)]["status"] == "error"
        assert "boom" in by[("raises", mode)]["reason"]
    # Right output, wrong gradients: timed forward, WRONG forward+backward.
    assert by[("wrong-bwd", "fwd")]["status"] == "ok"
    assert by[("wrong-bwd", "fwdbwd")]["status"] == "WRONG"
    assert "dq err" in by[("wrong-bwd", "fwdbwd")]["reason"]
    assert set(injected) == {"eager", "wrong-bwd"}
    # Called only by the two checks (forward-only, then with gradients), never by timing.
    assert _WrongForward.calls == 2
    assert not list(tmp_path.glob("*.png"))
    out = capsys.readouterr().out
    assert "WRONG" in out and "wrong-fwd WRONG" in out


def test_wrong_subject_sets_exit_status(tmp_path, injected):
    argv = TINY + ["--causal", "no", "--mode", "fwd", "--no-plot",
                   "--providers", "eager,wrong-fwd", "--subject", "wrong-fwd"]
    status, _ = bench(argv, tmp_path)
    assert status == 1


def test_unavailable_providers_are_na(tmp_path):
    argv = TINY + ["--causal", "no", "--mode", "fwd", "--providers",
                   "eager,cudnn,sdpa_efficient,flex,fa2,fa4"]
    status, data = bench(argv, tmp_path)
    assert status == 0
    by = {r["provider"]: r for r in data["results"]}
    assert by["eager"]["status"] == "ok"
    for name in ("sdpa-cudnn", "sdpa-efficient", "flex", "fa2", "fa4"):
        assert by[name]["status"] == "n/a" and by[name]["reason"], by[name]
        assert by[name]["ms"] is None


def test_check_only_times_nothing(tmp_path, injected):
    argv = TINY + ["--check-only", "--gqa", "2", "--mode", "fwdbwd",
                   "--providers", "flashtile,eager,sdpa-math"]
    status, data = bench(argv, tmp_path)
    assert status == 0
    assert {r["status"] for r in data["results"]} == {"checked"}
    assert all(r["ms"] is None and r["gqa"] == 2 for r in data["results"])
    assert injected == [] and not list(tmp_path.glob("*.png"))


@pytest.mark.parametrize("argv, message", [
    (["--providers", "eager,nope"], "unknown provider"),
    (["--nheads", "6", "--gqa", "4"], "not a multiple of --gqa"),
    (["--subject", "nope"], "--subject"),
])
def test_bad_options_exit_2_with_a_message(tmp_path, capsys, argv, message):
    assert bench_cli.main(TINY[:2] + argv + ["--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("argv", [["--seqlens", "512,abc"], ["--dtype", "fp8"],
                                  ["--mode", "sideways"], ["--batch", "2", "--tokens", "8"],
                                  ["--rounds", "0"]])
def test_unparseable_options_are_argparse_errors(argv):
    with pytest.raises(SystemExit) as exc:
        bench_cli.main(argv)
    assert exc.value.code == 2


def test_lists_accept_commas_and_spaces():
    import argparse
    parser = argparse.ArgumentParser()
    bench_cli.add_arguments(parser)
    args = parser.parse_args(["--seqlens", "512", "1k,2K", "--headdims", "64,128", "--mode",
                              "fwd", "all", "--providers", "flashtile", "sdpa_cudnn,FLASH",
                              "--device", "cpu"])
    config = bench_cli.resolve_config(args)
    assert config.spec.seqlens == (512, 1024, 2048) and config.spec.headdims == (64, 128)
    assert config.spec.modes == ("fwd", "bwd", "fwdbwd")
    assert config.options.providers == ("flashtile", "sdpa-cudnn", "sdpa-flash")
    assert config.preset == "custom" and config.spec.batch is None


def test_top_level_cli_runs_bench(tmp_path):
    ledger = pytest.importorskip("flashtile.ledger", reason="flashtile.cli also wires the ledger")
    if not hasattr(ledger, "add_arguments"):
        pytest.skip("flashtile.ledger has no add_arguments yet (flashtile.cli wires it too)")
    from flashtile.cli import main
    assert main(["bench"] + TINY + ["--mode", "fwd", "--causal", "no", "--no-plot",
                                    "--providers", "eager", "--out", str(tmp_path)]) == 0
    assert len(list(tmp_path.glob("bench-*.json"))) == 1


def test_flashtile_rows_record_the_configs_its_kernels_ran():
    """A timed flashtile row carries the configs its forward, dK/dV and dQ kernels ran (to read
    an outlier point later); on the torch path there are none."""
    import flashtile
    from flashtile.kernels import bwd, fwd

    provider = providers.FlashtileProvider()
    case = BenchCase(batch=1, seqlen=32, nheads=2, nheads_kv=2, headdim=16, causal=True,
                     dtype="fp32", mode="fwdbwd")
    # The kernels run on the GPU when there is one, else interpreted on the CPU.
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    q, k, v = (torch.randn(1, 32, 2, 16, device=device, requires_grad=True) for _ in range(3))
    flashtile.set_backend("torch")
    try:
        assert provider.launched_configs(case, device) is None
    finally:
        flashtile.set_backend(None)
    flashtile.set_backend("triton")
    try:
        provider.build(case, device)(q, k, v).sum().backward()
        configs = provider.launched_configs(case, device)
    finally:
        flashtile.set_backend(None)
    want = {name: "{}x{}/{}w/{}s".format(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps,
                                          c.num_stages)
            for name, c in (("fwd", fwd._fwd.best_config), ("dkdv", bwd._dkdv.best_config),
                            ("dq", bwd._dq.best_config))}
    assert configs == want
    fwd_only = BenchCase(**{**case.__dict__, "mode": "fwd"})
    flashtile.set_backend("triton")
    try:
        assert list(provider.launched_configs(fwd_only, device)) == ["fwd"]
    finally:
        flashtile.set_backend(None)


def test_kernel_times_on_cpu_is_a_note_and_no_numbers(tmp_path):
    """``--kernel-times`` off CUDA: the run still works, says why there is nothing, and writes
    no kernel times (none made up)."""
    argv = TINY + ["--kernel-times", "--causal", "no", "--mode", "fwd", "--providers", "eager"]
    status, data = bench(argv, tmp_path)
    assert status == 0
    assert any("--kernel-times" in note for note in data["meta"]["notes"])
    row = data["results"][0]
    assert row["status"] == "ok" and row["ms"] is not None
    assert row["kernel_ms"] is None and row["kernel_tflops"] is None
    assert row["vs_cudnn_kernels"] is None


def test_rounds_alternate_the_providers_and_report_the_median(tmp_path, injected, monkeypatch):
    """``--rounds 3``: each right provider is timed three times at each point, the order
    reversed in the second round; the reported time is the median round (all three kept in
    the JSON); a WRONG provider is checked once and never timed."""
    readings = iter([3.0, 1.0, 5.0, 2.0, 9.0, 4.0])     # eager, sdpa-math; reversed; as round 0
    monkeypatch.setattr(runner, "median_ms", lambda *args: next(readings))
    argv = TINY + ["--causal", "no", "--mode", "fwd", "--no-plot", "--rounds", "3",
                   "--providers", "eager,sdpa-math,wrong-fwd"]
    status, data = bench(argv, tmp_path)
    assert status == 0
    assert injected == ["eager", "sdpa-math", "sdpa-math", "eager", "eager", "sdpa-math"]
    by = {r["provider"]: r for r in data["results"]}
    assert by["eager"]["ms_rounds"] == [3.0, 2.0, 9.0] and by["eager"]["ms"] == 3.0
    assert by["sdpa-math"]["ms_rounds"] == [1.0, 5.0, 4.0] and by["sdpa-math"]["ms"] == 4.0
    assert by["eager"]["vs_best_other"] == pytest.approx(4.0 / 3.0)
    assert by["wrong-fwd"]["status"] == "WRONG" and by["wrong-fwd"]["ms_rounds"] is None
    assert _WrongForward.calls == 1
    assert data["meta"]["rounds"] == 3 and "median of 3 rounds" in data["meta"]["timing"]


def test_one_round_keeps_its_single_reading(tmp_path):
    argv = TINY + ["--causal", "no", "--mode", "fwd", "--no-plot", "--providers", "eager"]
    status, data = bench(argv, tmp_path)
    (row,) = data["results"]
    assert status == 0 and row["ms_rounds"] == [row["ms"]] and data["meta"]["rounds"] == 1


def test_median_round_skips_failed_rounds_and_missing_kernel_times():
    case = BenchCase(batch=1, seqlen=64, nheads=2, nheads_kv=2, headdim=16, causal=False,
                     dtype="fp32", mode="fwd")
    first = runner.Measurement("eager", case, "ok", ms=2.0, kernel_ms=None)
    later = [runner.Measurement("eager", case, "error", reason="x"),
             runner.Measurement("eager", case, "ok", ms=4.0, kernel_ms=1.5,
                                kernel_split={"k1": 1.0, "k2": 0.5})]
    merged = runner.median_round(first, later)
    assert merged.ms == 3.0 and merged.ms_rounds == (2.0, 4.0)
    assert merged.kernel_ms == 1.5 and merged.kernel_ms_rounds == (1.5,)
    assert merged.kernel_split_rounds == ({"k1": 1.0, "k2": 0.5},)
    assert merged.as_dict()["kernel_split_rounds"] == ({"k1": 1.0, "k2": 0.5},)
    assert merged.spread == pytest.approx(2.0 / 3.0)
    wrong = runner.Measurement("eager", case, "WRONG", reason="out err")
    assert runner.median_round(wrong, []) is wrong


def test_kernel_time_ratio_and_summary():
    """With kernel times on both sides, the subject's ratio to cuDNN's kernels is cuDNN's
    kernel time over its own (> 1: its kernels are faster), next to the wall-time ratio, and
    the summary reports its geomean and minimum."""
    from flashtile.bench import report

    case = BenchCase(batch=1, seqlen=512, nheads=8, nheads_kv=8, headdim=64, causal=True,
                     dtype="bf16", mode="fwdbwd")
    other = BenchCase(batch=1, seqlen=1024, nheads=8, nheads_kv=8, headdim=64, causal=True,
                      dtype="bf16", mode="fwdbwd")
    rows = runner.add_ratios([
        runner.Measurement("flashtile", case, "ok", ms=0.80, kernel_ms=0.64),
        runner.Measurement("sdpa-cudnn", case, "ok", ms=0.65, kernel_ms=0.60),
        runner.Measurement("flashtile", other, "ok", ms=1.00, kernel_ms=0.90),
        runner.Measurement("sdpa-cudnn", other, "ok", ms=0.90, kernel_ms=None)])
    mine = rows[0]
    assert mine.vs_cudnn == pytest.approx(0.65 / 0.80)
    assert mine.vs_cudnn_kernels == pytest.approx(0.60 / 0.64)
    assert mine.kernel_tflops == pytest.approx(case.flops / 0.64e-3 / 1e12)
    assert rows[2].vs_cudnn_kernels is None           # (no kernel time on cuDNN's side)
    summary = report.subject_summary(rows, "flashtile")
    assert summary[0]["vs_cudnn_kernels"]["points"] == 1
    assert summary[0]["vs_cudnn_kernels"]["geomean"] == pytest.approx(0.60 / 0.64)
    assert summary[0]["vs_cudnn"]["points"] == 2
    assert any("kernels alone" in line for line in report.summary_lines(summary))


def test_call_gap_notes_name_points_whose_call_time_outruns_their_kernels():
    """A point whose call time is more than CALL_GAP times its kernels' sum gets a note per
    provider naming it and the factor; points within it, or without kernel times, none."""
    from flashtile.bench import report

    case = BenchCase(batch=16, seqlen=1024, nheads=16, nheads_kv=16, headdim=128, causal=True,
                     dtype="bf16", mode="fwdbwd")
    other = BenchCase(**{**case.__dict__, "seqlen": 4096, "batch": 4})
    rows = [runner.Measurement("flashtile", case, "ok", ms=1.553, kernel_ms=0.757),
            runner.Measurement("flashtile", other, "ok", ms=2.10, kernel_ms=2.00),
            runner.Measurement("sdpa-cudnn", case, "ok", ms=0.758, kernel_ms=0.751),
            runner.Measurement("eager", case, "ok", ms=9.0),
            runner.Measurement("sdpa-flash", case, "WRONG", reason="out err")]
    notes = report.call_gap_notes(rows)
    assert notes == [f"flashtile: call time over {report.CALL_GAP:g}x its kernels' sum at 1 "
                     f"point ({case.label()} 2.05x): the GPU idled between launches "
                     "(host-bound or a disturbed run); read those by kernels, or rerun"], notes
    assert report.call_gap_notes(rows[1:]) == []


def test_device_us_sums_gpu_events_only():
    """The kernel time of a profile counts events that ran on the GPU, nothing on the host;
    by name, largest first, long names cut (and added where the cut names meet)."""
    from types import SimpleNamespace

    from flashtile.bench.timing import KERNEL_NAME_CHARS, device_us_by_name

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    long = "cudnn_generated_sdpa_" + "x" * 200
    events = [SimpleNamespace(key="_fwd_kernel", device_type=cuda, device_time_total=30.5),
              SimpleNamespace(key=long + "a", device_type=cuda, device_time_total=100.0),
              SimpleNamespace(key=long + "b", device_type=cuda, device_time_total=20.0),
              SimpleNamespace(key="aten::empty", device_type=cpu, device_time_total=999.0),
              SimpleNamespace(key="Memset", device_type=cuda, device_time_total=0.0)]
    by_name = device_us_by_name(events)
    assert sum(by_name.values()) == pytest.approx(150.5)
    assert list(by_name) == [long[:KERNEL_NAME_CHARS], "_fwd_kernel"], by_name
    assert by_name[long[:KERNEL_NAME_CHARS]] == pytest.approx(120.0)


@pytest.mark.gpu
def test_kernel_times_on_gpu(tmp_path):
    """On a GPU every timed row has a kernel time, which excludes the host's launch path, so it
    cannot exceed the call's wall time by more than timing noise."""
    argv = ["--device", "cuda", "--seqlens", "512", "--headdims", "64", "--nheads", "4",
            "--batch", "2", "--causal", "yes", "--mode", "fwd", "fwdbwd", "--dtype", "fp16",
            "--providers", "flashtile,cudnn", "--kernel-times", "--no-plot"]
    status, data = bench(argv, tmp_path)
    assert status == 0
    for row in data["results"]:
        if row["status"] != "ok":
            continue
        assert 0 < row["kernel_ms"] <= 1.1 * row["ms"], row
        (split,) = row["kernel_split_rounds"]           # (one round: its kernels by name)
        assert split and sum(split.values()) == pytest.approx(row["kernel_ms"]), row
    timed = {(r["provider"], r["mode"]): r for r in data["results"] if r["status"] == "ok"}
    mine = [r for (name, mode), r in timed.items()
            if name == "flashtile" and ("sdpa-cudnn", mode) in timed]
    assert mine, "flashtile and cuDNN should both have been timed"
    assert all(r["vs_cudnn_kernels"] is not None for r in mine)
