"""CPU tests of scripts/feature_bench.py: the pure parts (FLOP counts, the mixed-length
generator, target evaluation, JSON output, argument parsing), the check-before-timing harness on
tiny shapes (torch path), and the clear exit without a GPU. The GPU measurements themselves are
made on the H200 (see the script's docstring)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "feature_bench.py"


def _load():
    spec = importlib.util.spec_from_file_location("feature_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["feature_bench"] = module          # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


fb = _load()


# ---- FLOPs ------------------------------------------------------------------------------------

def test_attn_flops_convention():
    assert fb.attn_flops(1, 1, 2, 2, 1, mode="fwd") == 16.0
    assert fb.attn_flops(1, 1, 2, 2, 1, causal=True, mode="fwd") == 8.0
    assert fb.attn_flops(1, 1, 2, 2, 1, mode="bwd") == 40.0
    assert fb.attn_flops(1, 1, 2, 2, 1) == 56.0                      # fwd+bwd = 3.5x fwd
    assert fb.attn_flops(2, 3, 5, 7, 11, mode="fwd") == 4 * 2 * 3 * 5 * 7 * 11
    with pytest.raises(ValueError, match="mode"):
        fb.attn_flops(1, 1, 1, 1, 1, mode="training")


def test_attn_flops_reproduces_an_anchor_rate():
    # anchors/h200-2026-11-29.json: sdpa_cudnn b4 h32 s4096 d64 fwd, 1.208192 ms -> 455.02 TF/s
    rate = fb.tflops(fb.attn_flops(4, 32, 4096, 4096, 64, mode="fwd"), 1.208191990852356)
    assert rate == pytest.approx(455.0235542450, rel=1e-9)
    assert fb.tflops(None, 1.0) is None and fb.tflops(1.0, None) is None


def test_varlen_flops_counts_only_real_work():
    assert fb.varlen_flops([4, 4, 4], 2, 8) == fb.attn_flops(3, 2, 4, 4, 8)
    assert fb.varlen_flops([3, 5], 2, 8, causal=True) == (
        fb.attn_flops(1, 2, 3, 3, 8, True) + fb.attn_flops(1, 2, 5, 5, 8, True))
    # padding 3 and 5 to 5 would count 50 score elements per head, the real work is 34
    assert fb.varlen_flops([3, 5], 1, 1, mode="fwd") == 4 * (9 + 25)


# ---- mixed lengths ----------------------------------------------------------------------------

@pytest.mark.parametrize("total,lo,hi", [(16384, 256, 4096), (4096, 128, 1024), (256, 16, 64),
                                         (4096, 256, 1024), (1000, 100, 200), (300, 256, 4096)])
def test_mixed_lengths_sum_and_bounds(total, lo, hi):
    for seed in range(50):
        lengths = fb.mixed_lengths(total, lo, hi, seed)
        assert sum(lengths) == total
        assert all(lo <= n <= hi for n in lengths), lengths


def test_mixed_lengths_is_reproducible_and_seeded():
    a = fb.mixed_lengths(16384, 256, 4096, seed=0)
    assert a == fb.mixed_lengths(16384, 256, 4096, seed=0)
    assert a != fb.mixed_lengths(16384, 256, 4096, seed=1)
    assert len(set(a)) > 1                                    # really mixed


def test_mixed_lengths_edge_cases():
    assert fb.mixed_lengths(10, 256, 4096) == [10]            # total < lo: one short sequence
    with pytest.raises(ValueError):
        fb.mixed_lengths(100, 50, 60)                         # hi < 2 lo cannot always split
    with pytest.raises(ValueError):
        fb.mixed_lengths(0, 1, 4)
    assert fb.cu_seqlens([3, 5, 2]) == [0, 3, 8, 10]
    assert fb.cu_seqlens([]) == [0]


# ---- ratios and targets -----------------------------------------------------------------------

def test_ratios_handle_missing_values():
    assert fb.speedup(10.0, 4.0) == 2.5
    assert fb.speedup(None, 4.0) is None and fb.speedup(10.0, None) is None
    assert fb.speedup(10.0, 0.0) is None
    assert fb.overhead(1.2, 1.0) == pytest.approx(0.2)
    assert fb.overhead(None, 1.0) is None and fb.overhead(1.0, 0) is None
    assert fb.ratio(1.0, 4.0) == 0.25 and fb.ratio(1.0, None) is None


@pytest.mark.parametrize("value,op,threshold,kind,status", [
    (2.0, ">=", 1.8, "target", "PASS"), (1.8, ">=", 1.8, "target", "PASS"),
    (1.7, ">=", 1.8, "target", "FAIL"), (0.2, "<=", 0.2, "target", "PASS"),
    (0.21, "<=", 0.2, "target", "FAIL"), (1.0, ">", 1.0, "target", "FAIL"),
    (0.5, ">=", 1.0, "goal", "MISS"), (1.5, ">=", 1.0, "goal", "PASS"),
    (None, ">=", 1.0, "target", "n/a"), (float("nan"), ">=", 1.0, "target", "n/a"),
    (3.0, "info", None, "target", "info"), (3.0, ">=", 1.0, "info", "info"),
])
def test_target_status(value, op, threshold, kind, status):
    assert fb.Target("t", value, op, threshold, kind=kind).status == status


def _ok(part, item, provider, ms=None, **kw):
    return fb.Measurement(part, item, provider, "ok", ms=ms, **kw)


def _recorder(tmp_path=None, sizes=None):
    z = sizes or fb.Sizes()
    return fb.Recorder(tmp_path, {"device": "fake"}, fb.make_targets(z)), z


def _targets(rec, part):
    return {t.name: t for t in rec.targets(part)}


def test_fusion_targets_from_fake_measurements():
    rec, z = _recorder()
    it = fb.fusion_items(z)
    rec.add(_ok("fusion", it["full"], "flashtile", 10.0))
    rec.add(_ok("fusion", it["causal"], "flashtile", 5.0))
    rec.add(_ok("fusion", it["dropout"], "flashtile", 11.5))
    rec.add(_ok("fusion", it["full16"], "flashtile", 40.0))
    rec.add(_ok("fusion", it["window"], "flashtile", 5.0))
    rec.add(_ok("fusion", it["sdpa2048"], "flashtile-sdpa", 2.0))
    rec.add(_ok("fusion", it["sdpa2048"], "torch-sdpa", 3.0))
    rec.add(fb.Measurement("fusion", it["relpos"], "flashtile-flex", "WRONG"))
    rec.add(_ok("fusion", it["relpos"], "torch-flex", 3.0))
    t = _targets(rec, "fusion")
    assert t["causal vs full, s8k: speedup"].value == 2.0
    assert t["causal vs full, s8k: speedup"].status == "PASS"
    assert t["window 256 vs full, s16k: speedup"].value == 8.0
    assert t["window 256 vs full, s16k: speedup"].status == "FAIL"
    assert t["dropout 0.1 overhead, s8k"].value == pytest.approx(0.15)
    assert t["dropout 0.1 overhead, s8k"].status == "PASS"
    assert t["sdpa float-mask s2k: flashtile speedup vs torch SDPA"].value == 1.5
    assert t["sdpa float-mask s4k: flashtile speedup vs torch SDPA"].status == "n/a"
    # a WRONG provider's time never feeds a ratio
    assert t["flex relpos s4k: flashtile speedup vs torch flex"].value is None


def test_sparse_decode_varlen_targets_from_fake_measurements():
    rec, z = _recorder()
    rec.add(_ok("sparse", "random 1.0", "flashtile", 10.0))
    rec.add(_ok("sparse", "random 0.2", "flashtile", 3.5))
    rec.add(_ok("sparse", "random 1.0", "flashtile-graph", 9.0))
    rec.add(_ok("sparse", "random 0.2", "flashtile-graph", 2.6))
    rec.add(_ok("sparse", "causal", "flashtile", 4.0))
    rec.add(_ok("sparse", "causal", "torch-flex", 5.0))
    rec.add(_ok("sparse", "create_block_mask causal s128k", "flashtile", 123.0))
    t = _targets(rec, "sparse")
    # the target is on device time (graph replays); plain calls are reported beside it
    assert t["flashtile-graph: time at density 0.2 / dense"].value == pytest.approx(2.6 / 9.0)
    assert t["flashtile-graph: time at density 0.2 / dense"].status == "PASS"
    assert t["flashtile-graph: time at density 0.2 / dense"].kind == "target"
    assert t["flashtile: time at density 0.2 / dense"].value == 0.35
    assert t["flashtile: time at density 0.2 / dense"].kind == "info"
    assert t["causal: flashtile speedup vs torch flex"].value == 1.25
    assert t["causal: flashtile speedup vs torch flex (graphs)"].value is None
    assert t["create_block_mask causal s128k (ms, median)"].value == 123.0

    rec.add(_ok("decode", fb.COPY_ITEM, "torch", 1.0, gbps=4000.0))
    contig = fb.decode_item(1, 32768, False, "eager")
    paged = fb.decode_item(1, 32768, True, "eager")
    rec.add(_ok("decode", contig, "flashtile", 0.040, gbps=3600.0))
    rec.add(_ok("decode", contig, "sdpa_gqa", 0.050, gbps=2700.0))
    rec.add(_ok("decode", contig, "sdpa_expanded", 0.045, gbps=3000.0))
    rec.add(_ok("decode", paged, "flashtile", 0.046, gbps=3100.0))
    t = _targets(rec, "decode")
    assert t["b1 L32k eager: flashtile / copy bandwidth"].value == 0.9
    assert t["b1 L32k eager: flashtile / copy bandwidth"].status == "PASS"
    assert t["b1 L32k eager: flashtile speedup vs best SDPA"].value == pytest.approx(0.045 / 0.040)
    assert t["b1 L32k eager: paged time overhead vs contiguous"].value == pytest.approx(0.15)
    assert t["b1 L32k eager: paged time overhead vs contiguous"].status == "FAIL"
    assert t["b8 L128k graph: flashtile / copy bandwidth"].status == "n/a"

    var, fixed = fb.varlen_items(z, causal=False)
    rec.add(_ok("varlen", var, "flashtile", 1.0, tflops=180.0))
    rec.add(_ok("varlen", fixed, "flashtile", 1.0, tflops=200.0))
    t = _targets(rec, "varlen")
    assert t[f"{var}: TFLOP/s vs fixed length"].value == 0.9
    assert t[f"{var}: TFLOP/s vs fixed length"].status == "PASS"


def test_a_failing_target_formula_does_not_lose_measurements(tmp_path):
    rec = fb.Recorder(tmp_path, {}, {"fusion": lambda r: 1 / 0})
    rec.add(_ok("fusion", "x", "flashtile", 1.0))
    data = json.loads((tmp_path / "feature-fusion.json").read_text())
    assert data["measurements"][0]["ms"] == 1.0
    assert "ZeroDivisionError" in data["targets"][0]["name"]


# ---- JSON and tables --------------------------------------------------------------------------

def test_json_written_after_every_measurement(tmp_path):
    rec, z = _recorder(tmp_path / "out")
    rec.start_part("fusion")
    path = tmp_path / "out" / "feature-fusion.json"
    assert json.loads(path.read_text())["measurements"] == []
    it = fb.fusion_items(z)
    rec.add(_ok("fusion", it["full"], "flashtile", 10.0, tflops=200.0,
                check={"ok": True, "errors": {"out": float("inf")}}, config={"w": (256, 0)}))
    rec.add(fb.Measurement("fusion", it["causal"], "flashtile", "error: RuntimeError: boom"))
    rec.note("fusion", "a note")
    text = path.read_text()
    data = json.loads(text)                          # strict JSON: no Infinity/NaN tokens
    assert "Infinity" not in text
    assert data["part"] == "fusion" and data["meta"] == {"device": "fake"}
    assert [m["status"] for m in data["measurements"]] == ["ok", "error: RuntimeError: boom"]
    assert data["measurements"][0]["check"]["errors"]["out"] == "inf"
    assert data["measurements"][0]["config"]["w"] == [256, 0]
    assert data["notes"] == ["a note"]
    status = {t["name"]: t["status"] for t in data["targets"]}
    assert status["causal vs full, s8k: speedup"] == "n/a"
    assert not list((tmp_path / "out").glob("*.tmp"))
    assert not (tmp_path / "out" / "feature-sparse.json").exists()


def test_tables_print(capsys):
    rec, z = _recorder()
    rec.add(_ok("varlen", "fixed full 4x4k", "flashtile", 1.234, tflops=200.0,
                check={"worst_ratio": 0.5}))
    fb.print_tables(rec, ["varlen"])
    out = capsys.readouterr().out
    assert "varlen" in out and "fixed full 4x4k" in out and "1.234" in out


# ---- arguments --------------------------------------------------------------------------------

def test_parse_parts():
    assert fb.parse_parts("all") == list(fb.PARTS)
    assert fb.parse_parts("varlen,fusion,fusion") == ["fusion", "varlen"]
    assert fb.parse_parts(" sparse , decode ") == ["sparse", "decode"]
    with pytest.raises(Exception, match="unknown part"):
        fb.parse_parts("fusion,speed")


def test_parse_args_defaults_and_options(monkeypatch):
    monkeypatch.setenv("OUT", "/tmp/some-out")
    args = fb.parse_args([])
    assert args.part == list(fb.PARTS) and args.out == Path("/tmp/some-out")
    assert args.budget_s == 540 and not args.quick and args.decode_modes == ["eager", "graph"]
    monkeypatch.delenv("OUT")
    assert fb.parse_args([]).out == Path("bench-out")
    args = fb.parse_args(["--part", "fusion,sparse", "--quick", "--out", "x/y", "--budget-s",
                          "100", "--only", "causal,window", "--decode-modes", "graph"])
    assert args.part == ["fusion", "sparse"] and args.quick and args.out == Path("x/y")
    assert args.budget_s == 100 and args.only == ["causal", "window"]
    assert args.decode_modes == ["graph"]


@pytest.mark.parametrize("argv", [["--part", "bogus"], ["--decode-modes", "lazy"],
                                  ["--budget-s", "0"], ["--part", ""]])
def test_parse_args_rejects(argv, capsys):
    with pytest.raises(SystemExit):
        fb.parse_args(argv)
    assert "error" in capsys.readouterr().err


def test_sizes_are_consistent():
    for z in (fb.sizes_for(), fb.sizes_for(quick=True), fb.sizes_for(cpu_smoke=True)):
        assert z.tokens % z.causal_seqlen == 0 and z.tokens % z.flex_seqlen == 0
        assert z.varlen_tokens % z.varlen_hi == 0 and z.varlen_hi >= 2 * z.varlen_lo
        assert z.page % 16 == 0 and z.decode_hq % z.decode_hkv == 0
        assert z.sparse_seqlen % z.block == 0 and z.big_mask_seqlen % z.block == 0
    full = fb.sizes_for()
    assert full.decode_cases == ((1, 32768), (8, 8192), (32, 8192), (64, 4096), (8, 131072))
    assert (full.heads * full.headdim, full.tokens, full.dtype) == (2048, 16384, "bf16")
    assert fb.kfmt(131072) == "128k" and fb.kfmt(1000) == "1000"


# ---- no GPU: a clear message ------------------------------------------------------------------

def test_without_cuda_exits_with_a_clear_message(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert fb.main(["--part", "fusion", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "CUDA" in err and "GPU" in err
    assert not list(tmp_path.iterdir())                  # nothing measured, nothing written


# ---- the harness on tiny CPU shapes (torch path) ----------------------------------------------

def _runner(tmp_path, budget=1000.0, only=None):
    args = fb.parse_args(["--cpu-smoke", "--out", str(tmp_path), "--budget-s", str(budget)]
                         + (["--only", only] if only else []))
    z = fb.sizes_for(cpu_smoke=True)
    rec = fb.Recorder(tmp_path, {}, fb.make_targets(z))
    return fb.Runner(args, z, rec, torch.device("cpu")), rec


def _problem(causal=False):
    from flashtile import AttentionParams
    q, k, v, dout = fb.qkv(2, 64, 2, 16, torch.float32, torch.device("cpu"), 0)

    def reference(b0, h0, rng_state):
        return AttentionParams(softmax_scale=0.25, causal=causal,
                               window_right=0 if causal else -1), None
    return fb.Problem(q, k, v, dout, reference, fb.attn_flops(2, 2, 64, 64, 16, causal))


def _sdpa(q, k, v, causal=False):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def test_harness_times_a_correct_provider_and_rejects_wrong_ones(tmp_path):
    runner, rec = _runner(tmp_path)
    ok = runner.attention("fusion", "t", fb.Provider("sdpa", _sdpa, "bhsd"), _problem())
    assert ok.status == "ok" and ok.ms > 0 and ok.tflops > 0
    assert set(ok.check["slices"]) == {"b0h0", "b1h1"} and ok.check["worst_ratio"] < 1

    wrong = runner.attention("fusion", "t", fb.Provider(
        "off-by-a-bit", lambda q, k, v: _sdpa(q, k, v) * 1.01, "bhsd"), _problem())
    assert wrong.status == "WRONG" and wrong.ms is None and "out err" in wrong.note

    # the wrong mask: causal reference, full attention -> WRONG (also the gradients)
    wrong_mask = runner.attention("fusion", "t", fb.Provider("sdpa", _sdpa, "bhsd"),
                                  _problem(causal=True))
    assert wrong_mask.status == "WRONG"
    assert {"out", "dq", "dk", "dv"} <= set(wrong_mask.check["slices"]["b0h0"]["errors"])

    def boom(q, k, v):
        raise RuntimeError("kernel exploded")
    err = runner.attention("fusion", "t", fb.Provider("boom", boom), _problem())
    assert err.status.startswith("error: RuntimeError: kernel exploded") and err.ms is None

    # flashtile itself, (b, s, h, d) layout, causal
    import flashtile
    ft = runner.attention("fusion", "c", fb.Provider(
        "flashtile", lambda q, k, v: flashtile.flash_attn_func(q, k, v, causal=True,
                                                               softmax_scale=0.25)),
        _problem(causal=True))
    assert ft.status == "ok", ft.status
    assert [m.status for m in rec.of("fusion")] == ["ok", "WRONG", "WRONG", "error: RuntimeError: "
                                                    "kernel exploded", "ok"]


def test_harness_skips_once_over_budget(tmp_path):
    runner, rec = _runner(tmp_path, budget=1e-9)
    m = runner.attention("fusion", "t", fb.Provider("sdpa", _sdpa, "bhsd"), _problem())
    assert m.status == "skipped" and "budget" in m.note


def test_decode_part_with_a_fake_bandwidth_probe(tmp_path, capsys):
    runner, rec = _runner(tmp_path)
    calls = []

    def fake_bandwidth(batch, cache_len, hq, hkv, d, dtype, paged_block=None, *,
                       cuda_graph=False, device="cuda", **kw):
        calls.append((batch, cache_len, paged_block, cuda_graph))
        ms = {"flashtile": 0.010 if paged_block is None else 0.0105, "sdpa_gqa": 0.02,
              "sdpa_expanded": None}
        nbytes = 2 * batch * cache_len * hkv * d * 4
        return {"ms": ms, "gbps": {k: v and nbytes / (v * 1e-3) / 1e9 for k, v in ms.items()},
                "errors": {"sdpa_expanded": "RuntimeError('no')"}, "num_splits": 3}

    fb.run_decode(runner, bandwidth=fake_bandwidth)
    (batch, n), = runner.z.decode_cases
    assert calls == [(batch, n, None, False), (batch, n, None, True),
                     (batch, n, runner.z.page, False), (batch, n, runner.z.page, True)]
    item = fb.decode_item(batch, n, False, "eager")
    assert rec.get("decode", item, "flashtile").status == "ok"
    assert rec.get("decode", item, "flashtile").check["ok"]          # checked on the torch path
    assert rec.get("decode", item, "sdpa_expanded").status.startswith("error")
    assert rec.get("decode", fb.decode_item(batch, n, True, "eager"), "sdpa_gqa") is None
    t = _targets(rec, "decode")
    tag = f"b{batch} L{fb.kfmt(n)} eager"
    assert t[f"{tag}: flashtile speedup vs best SDPA"].value == pytest.approx(2.0)
    assert t[f"{tag}: paged time overhead vs contiguous"].value == pytest.approx(0.05)
    assert json.loads((tmp_path / "feature-decode.json").read_text())["measurements"]
    fb.print_tables(rec, ["decode"], runner.z)
    out = capsys.readouterr().out
    assert f"{tag}" in out and "+5%" in out and "sdpa_expanded" in out      # pivot + not-ok list


def test_cpu_smoke_run_of_the_varlen_part(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FLASHTILE_AUTOTUNE", "0")
    assert fb.main(["--cpu-smoke", "--part", "varlen", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "feature-varlen.json").read_text())
    assert [m["status"] for m in data["measurements"]] == ["ok"] * 4
    assert all(m["check"]["ok"] for m in data["measurements"])
    assert len(data["targets"]) == 2 and all(math.isfinite(t["value"]) for t in data["targets"])
    assert "varlen" in capsys.readouterr().out


def test_cpu_smoke_dropout_flex_and_sparse_items(tmp_path, monkeypatch):
    """The dropout check replays the key the call drew; flashtile's flex and block masks check
    out; torch's flex has no CPU backward, so it is reported as an error, not a crash."""
    monkeypatch.setenv("FLASHTILE_AUTOTUNE", "0")
    argv = ["--cpu-smoke", "--part", "fusion,sparse", "--out", str(tmp_path),
            "--only", "dropout,relpos,document,random 0.2,create_block_mask"]
    assert fb.main(argv) == 0
    fusion = json.loads((tmp_path / "feature-fusion.json").read_text())["measurements"]
    status = {(m["item"], m["provider"]): m["status"] for m in fusion}
    assert status[("dropout0.1 s128", "flashtile")] == "ok"
    assert status[("flex relpos s128", "flashtile-flex")] == "ok"
    assert status[("flex relpos s128", "torch-flex")].startswith("error")
    sparse = json.loads((tmp_path / "feature-sparse.json").read_text())["measurements"]
    status = {(m["item"], m["provider"]): m["status"] for m in sparse}
    assert status[("create_block_mask causal s512", "flashtile")] == "ok"
    assert status[("random 0.2", "flashtile")] == "ok"
    assert status[("document", "flashtile")] == "ok"


def test_causal_layout_check_and_shifted_mods():
    import flashtile
    from flashtile.masks import causal_mask, sliding_window
    bm = flashtile.create_block_mask(causal_mask, None, None, 256, 256, device="cpu",
                                     BLOCK_SIZE=32)
    assert fb.causal_layout_ok(bm, 8)
    bm = flashtile.create_block_mask(sliding_window(64), None, None, 256, 256, device="cpu",
                                     BLOCK_SIZE=32)
    assert not fb.causal_layout_ok(bm, 8)

    def mod(score, b, h, q_idx, kv_idx):
        return score + 10 * b + h
    shifted = fb.shifted_score_mod(mod, 3, 5)
    zero = torch.zeros(())
    assert float(shifted(zero, zero, zero, zero, zero)) == 35.0
    mask = fb.shifted_mask_mod(lambda b, h, q, kv: (b == 2) & (h == 1), 2, 1)
    assert bool(mask(zero, zero, zero, zero))
    assert fb.shifted_score_mod(None, 1, 1) is None
    assert fb.check_slices(1, 1) == [(0, 0)] and fb.check_slices(4, 8) == [(0, 0), (3, 7)]
