"""The developer tools that work without a GPU keep working: scripts/inspect_kernels.py compiles
the kernels for sm_90a with Triton's bundled ptxas, scripts/host_overhead.py times the host path
of a GPU call. Both drive Triton internals, so a refactor of the launchers can break them
silently; these runs catch that."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
triton = pytest.importorskip("triton")
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"


def _run(script: str, *args: str, ok=(0,)) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / script), *args], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode in ok, proc.stderr[-3000:]
    return proc.stdout


def _pytest_child(tmp_path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """A pytest run over the small tree in ``tmp_path``, its environment free of this run's
    own: under xdist PYTEST_XDIST_WORKER would make the child's conftest act as a worker (no
    times log), and this run's FLASHTILE_TEST_* (the GPU session's log and shard) would steer
    or fill the child's."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("PYTEST_XDIST", "FLASHTILE_TEST_"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *args, str(tmp_path)], capture_output=True, text=True,
                          env={**base, **env}, cwd=tmp_path, timeout=300)


@pytest.mark.skipif(not PTXAS.exists(), reason="triton's bundled ptxas is missing")
def test_inspect_kernels_compiles_for_hopper():
    out = _run("inspect_kernels.py", "--d", "64", "--seqlen", "256", "--fwd", "64,64,4,2",
               "--dkdv", "64,64,4,2", "--dq", "64,64,4,2")
    for kernel in ("fwd", "dkdv", "dq"):
        line = next(x for x in out.splitlines() if x.startswith(f"== {kernel}:"))
        assert re.search(r"Used \d+ registers", line), line
    # Hopper tensor-core instructions and pipelined loads in every kernel
    assert out.count("HGMMA 0,") == 0 and "async_copy 0," not in out


@pytest.mark.skipif(not PTXAS.exists(), reason="triton's bundled ptxas is missing")
@pytest.mark.parametrize("d,mask", [(128, "--causal"), (64, "--no-causal"), (64, "--causal")])
def test_gluon_kernels_keep_their_wgmma_asynchronous(monkeypatch, d, mask):
    """The Gluon kernels compiled for sm_90a (forward, dK/dV in two passes and in one, dQ)
    do not get their wgmmas serialised by ptxas (its C75xx warnings, at most one wait per 4
    HGMMA): the regression that cost the forward its overlap in sessions 9-10
    (kernels/fwd_hopper.py). None spills, except at d=128 causal the one-pass dK/dV kernel
    (8 B of item-level scalars, 88 B with two K/V buffers per consumer; kernels/bwd_hopper.py),
    held under 128 B here, the forward with S_1 issued before the first softmax (12 B, 3
    stores; measured 3-5.5% faster all the same, fwd_hopper.early_s1), held under 16 B, and
    d=64's one pass in the serial order at 128 queries per tile (264 B unmasked, 416 B causal,
    session 39: measured 2-9% faster than 64 queries without spills, bwd_hopper.serial), held
    under 288 B and 448 B.
    At d=64 1k keys make the grid persistent (two K/V buffers)."""
    # (the script exits 1 on any spill: the allowances are checked below)
    seqlen = "512" if d == 128 else "1024"
    # (the transposed one pass: at d=128 the rows kernel runs by default, compiled below)
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_ROWS", "0")
    out = _run("inspect_kernels.py", "--gluon", "--one-pass", "--d", str(d), "--seqlen", seqlen,
               *([mask] if mask == "--causal" else []), ok=(0, 1))
    lines = {x.split(":")[0][3:]: x for x in out.splitlines() if x.startswith("== gluon")}
    assert set(lines) == {"gluon fwd (ws)", "gluon dkdv", "gluon dkdv+dq (one pass)",
                          "gluon dq"}, out
    for name in lines:
        line = lines[name]
        spill = int(re.search(r"(\d+) bytes spill stores", line).group(1))
        allowed = ({"gluon dkdv+dq (one pass)": 128, "gluon fwd (ws)": 16} if d == 128
                   else {"gluon dkdv+dq (one pass)": 448 if mask == "--causal" else 288}
                   ).get(name, 0)
        assert spill <= allowed, line
        assert "C75" not in line, line
        sass, waits = out.split(line, 1)[1].splitlines()[1:4:2]
        assert "HGMMA 0," not in sass, sass
        n_waits, n_hgmma = (int(x) for x in re.findall(r"\d+", waits))
        assert n_waits * 4 <= n_hgmma, waits


@pytest.mark.skipif(not PTXAS.exists(), reason="triton's bundled ptxas is missing")
@pytest.mark.parametrize("mask", ["--causal", "--no-causal"])
@pytest.mark.parametrize("d,kernels", [
    (256, {"gluon fwd (ws)", "gluon dkdv256", "gluon dq256"}),
    (96, {"gluon fwd (ws)", "gluon dkdv", "gluon dq"})])
def test_gluon_kernels_at_d96_and_d256_compile_clean(d, kernels, mask):
    """d=256: the Gluon forward (64 keys x 2 slots, O through Q, kernels/fwd_hopper.py), the
    d=256 dK/dV kernel (the consumers split the head dim, kernels/bwd256_hopper.py) and the
    d=256 dQ kernel (likewise, kernels/dq256_hopper.py); d=96: the Gluon forward, dK/dV and dQ
    kernels, the head dim in two parts of 64 and 32 columns (the forward 14 waits for 132
    HGMMA offline: S in 4 + 2, P V in 8 + 8 per tile; dK/dV 8 for 112; dQ 8 for 112: S and dP
    in 4 + 2 each, dQ in 8 + 8), dK/dV without its one pass. At d=256 the d=64/96/128 dK/dV
    and dQ kernels have no config and are skipped. Each compiles for sm_90a with its wgmmas
    asynchronous, in the shared memory of one H200 SM, and with no spills except d=96's dK/dV
    kernel at 64 queries per tile (28 B unmasked, 76 B causal: item-level scalars outside the
    tile loop; measured 7-11% faster than 32 queries all the same, kernels/bwd_hopper.py),
    held under 128 B here, and d=96's forward with P in registers causal (4 B, a value loaded
    once per partition outside the loops; measured 1-7% faster than P through shared memory),
    held under 8 B."""
    # (the script exits 1 on any spill: d=96 dK/dV's allowance is checked below)
    out = _run("inspect_kernels.py", "--gluon", "--one-pass", "--d", str(d),
               *([mask] if mask == "--causal" else []), ok=(0, 1) if d == 96 else (0,))
    lines = {x.split(":")[0][3:]: x for x in out.splitlines() if x.startswith("== gluon")}
    assert set(lines) == kernels, out
    assert ("skipped dq_hopper" in out) == (d == 256), out
    assert ("skipped bwd_hopper" if d == 256 else "skipped the one-pass dkdv") in out, out
    for name, line in lines.items():
        spill = int(re.search(r"(\d+) bytes spill stores", line).group(1))
        allowed = {(96, "gluon dkdv"): 128, (96, "gluon fwd (ws)"): 8}.get((d, name), 0)
        assert spill <= allowed, line
        assert "C75" not in line, line
        assert int(re.search(r"shared (\d+) B", line).group(1)) <= 227 * 1024, line
        n_waits, n_hgmma = (int(x) for x in re.findall(r"\d+", out.split(line, 1)[1]
                                                       .split("wgmma waits:")[1]
                                                       .splitlines()[0]))
        assert n_waits * 4 <= n_hgmma, out


@pytest.mark.skipif(not PTXAS.exists(), reason="triton's bundled ptxas is missing")
def test_tile_loop_budgets(monkeypatch):
    """``--loops``: the Gluon forward at d=64 has one tile loop per consumer partition, two
    tiles a trip (``fwd_hopper._rs_tiles``), each tile's work as the shapes fix it: 12 HGMMA
    (S: 4 steps of 16 over d=64; P V: 8 over 128 keys) and 66 MUFU ex2 (the 64 scores a thread
    holds, and 2 row discounts), with the scale in the exponent (one FFMA per score: no more
    FMUL than O's discount, 32, and two); so 24, 132 and 68 a trip."""
    for variable in ("FLASHTILE_GLUON_FWD_CONFIG", "FLASHTILE_GLUON_FWD_P_REGS"):
        monkeypatch.delenv(variable, raising=False)
    out = _run("inspect_kernels.py", "--gluon", "--d", "64", "--seqlen", "1024", "--loops")
    fwd = out.split("== gluon fwd", 1)[1].split("== gluon", 1)[0]
    loops = [x for x in fwd.splitlines() if x.strip().startswith("loop ")]
    assert len(loops) == 2, fwd
    for loop in loops:
        count = dict(re.findall(r"([A-Z][A-Z0-9.]*) (\d+)", loop))
        assert (count["HGMMA"], count["MUFU.EX2"], count["FMUL"]) == ("24", "132", "68"), loop


@pytest.mark.skipif(not PTXAS.exists(), reason="triton's bundled ptxas is missing")
@pytest.mark.parametrize("d,mask,seqlen,skip,shared,hgmma,spill", [
    (128, "--causal", "1024", "auto", 197_024, 132, 0),
    (128, "--causal", "1024", "0", 197_024, 128, 0),
    (128, "--no-causal", "1024", "auto", 197_024, 128, 0),
    (128, "--no-causal", "4096", "auto", 229_808, 128, 0),
    (128, "--causal", "4096", "auto", 229_920, 128, 4),
    (64, "--causal", "1024", "auto", 115_104, 100, 0),
    (64, "--causal", "1024", "0", 115_104, 96, 0),
    (64, "--no-causal", "1024", "auto", 131_504, 96, 0)])
def test_rows_dkdv_kernel_compiles_clean(monkeypatch, d, mask, seqlen, skip, shared, hgmma,
                                         spill):
    """The one pass compiles the queries-as-rows dK/dV + dQ kernel (kernels/bwdrows_hopper.py;
    d=128's default, d=64 with ``FLASHTILE_GLUON_BWD_ROWS=1``) in place of the transposed
    one, one program per item (causal; d=128 unmasked 1k: 128 items, fewer than the H200's
    SMs) and persistent (d=128 unmasked 4k, d=64 unmasked 1k: 256-512 items; with the dV
    staging tiles): no spills, no serialised wgmma (at most one wait per 4 HGMMA), its HGMMA
    count (d=128 per consumer and tile S 8, dP 8, dV 4, dK 4, dQ 2 x 4; d=64 S 4, dP 4, dV
    4, dK 4, dQ 2 x 2; doubled by the peeled last tile) and the shared memory it had
    offline, within one H200 SM's; causal at 4k (512 items, claimed by one program per SM:
    :func:`.bwdrows_hopper.dynamic`, the count and its two slots 112 B more than the fixed
    turn's 229,808) one 4-byte value spills, between the tile loops (an item's, as in the
    fixed turn's persistent causal build). Causal up to 1k keys the second consumer skips its
    masked tiles by default (``FLASHTILE_GLUON_BWD_SKIP_MASKED``: 4 HGMMA more, the skipped
    tile's dQ products; ``0``: none). (The forward compiled beside it spills 28 B at d=128
    unmasked: item-level values outside the tile loops, since its loop runs two tiles a trip,
    measured 1.1% faster all the same (kernels/fwd_hopper.py); and 16 B causal on its 128-key
    tiles, which it takes from 1k keys since session 37; held under 32 B here.)"""
    from flashtile.kernels import fwd_hopper
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_ROWS", "1")
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_SKIP_MASKED", skip)
    monkeypatch.delenv("FLASHTILE_GLUON_BWD_PERSISTENT", raising=False)
    fwd_spills = d == 128 and (mask == "--no-causal"
                               or int(seqlen) > fwd_hopper.NARROW_CAUSAL_UPTO)
    # (the script exits 1 on any spill: the forward's allowance is checked below)
    out = _run("inspect_kernels.py", "--gluon", "--one-pass", "--d", str(d), "--seqlen", seqlen,
               *([mask] if mask == "--causal" else []), ok=(0, 1) if fwd_spills else (0,))
    lines = {x.split(":")[0][3:]: x for x in out.splitlines() if x.startswith("== gluon")}
    assert set(lines) == {"gluon fwd (ws)", "gluon dkdv", "gluon dkdv rows", "gluon dq"}, out
    for name in ("gluon fwd (ws)", "gluon dkdv", "gluon dq"):
        spilled = int(re.search(r"(\d+) bytes spill stores", lines[name]).group(1))
        assert spilled <= (32 if fwd_spills and name == "gluon fwd (ws)" else 0), lines[name]
    line = lines["gluon dkdv rows"]
    assert f" {spill} bytes spill stores" in line and "C75" not in line, line
    assert int(re.search(r"shared (\d+) B", line).group(1)) == shared, line
    n_waits, n_hgmma = (int(x) for x in re.findall(r"\d+", out.split(line, 1)[1]
                                                   .split("wgmma waits:")[1].splitlines()[0]))
    assert n_waits * 4 <= n_hgmma and n_hgmma == hgmma, out


def test_host_overhead_times_the_host_path():
    out = _run("host_overhead.py", "--what", "fwd", "--calls", "5")
    assert re.search(r"fwd: \d+ us of host time per call", out), out


def test_host_overhead_times_the_host_pieces_on_the_cpu_stand_in():
    """scripts/host_overhead.py --pieces: the planned forward+backward's host path piece by
    piece on the sm_90 stand-in (kernels compiled, launches no-ops), a median per piece."""
    out = _run("host_overhead.py", "--pieces", "--calls", "2", "--rounds", "1", "--heads", "2")
    for piece in ("fwd+bwd (autograd.grad)", "bwd alone, key from the forward",
                  "plans.backward_key", "bwd plan.replay"):
        assert re.search(re.escape(piece) + r" +\d+\.\d us", out), out


def test_host_pieces_times_every_piece(tmp_path):
    """scripts/host_pieces.py: every piece timed (median and each round), also as JSON."""
    path = tmp_path / "pieces.json"
    out = _run("host_pieces.py", "--calls", "2", "--rounds", "2", "--json", str(path))
    times = json.loads(path.read_text())
    assert "flashtile fwd+bwd" in times and "autograd.grad over a Python Function" in times
    for name, runs in times.items():
        assert len(runs) == 2 and all(t > 0 for t in runs), (name, runs)
        assert re.search(rf"{re.escape(name)} +[\d.]+ us +\([\d. ]+\)", out), out


def test_host_pieces_profiles_the_backward_on_both_threads():
    """scripts/host_pieces.py --profile-backward: the backward's functions with their time per
    call on the engine's thread and on the main thread."""
    out = _run("host_pieces.py", "--profile-backward", "2")
    assert "engine thread" in out and "main thread" in out, out
    rows = [x for x in out.splitlines()[1:] if x.startswith("  ")]
    assert any("backward" in x for x in rows), out
    for row in rows:
        assert re.search(r"[\d.]+ / +[\d.]+ +[\d.]+ / +[\d.]+$", row), row


@pytest.mark.skipif(not PTXAS.exists(), reason="triton's bundled ptxas is missing")
@pytest.mark.parametrize("part,lines", [("decode", 19), ("dense", 36), ("gluon", 15)])
def test_launch_plans_launch_what_the_full_path_launches(part, lines):
    """Launch plans (on by default) replay a decode call's, a dense forward's and backward's,
    and the Gluon kernels' recorded launches for later calls of the same signature. Compiled
    for sm_90a (never run), the replayed launches must equal the full path's: same kernel,
    grid and arguments (Gluon replays: light TMA descriptors, compared by address, shape and
    strides), over layouts, alignments and flags, and for calls that differ from a recorded
    one in a single argument (dropout included); one-pass dQ backwards too (the accumulator
    zeroed by the preprocess, a final copy); no tensor is kept alive. The Gluon part runs
    whole forward+backward calls with the CPU standing in for sm_90 (the Gluon launches are
    steps of the forward's and backward's plans), also with a switch changed between a
    forward and its backward (whose plan key starts from the forward's). (Three parts, so
    that they run in parallel.)"""
    out = _run("host_overhead.py", "--check-plans", part)
    found = [x for x in out.splitlines() if x.startswith(("plans", "gluon plans"))]
    assert len(found) == lines and not any(
        "DIFFERENT" in x or "NOT PLANNED" in x or "PLANNED," in x or x.endswith(": PLANNED")
        for x in found), out
    if part == "decode":
        assert "plans keep 0 of the call's tensors alive (planned)" in out, out


def _atomic_probe():
    import importlib.util
    spec = importlib.util.spec_from_file_location("atomic_probe",
                                                  ROOT / "scripts" / "atomic_probe.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    return probe


@pytest.mark.gpu        # (the interpreter has no TMA reductions)
def test_atomic_probe_tma_reductions_add_where_they_say():
    """The probe's TMA reductions (``tma-spread``/``tma-same``) add the same tiles to the
    same rows as ``spread``/``same``."""
    import torch
    probe = _atomic_probe()
    rows, d, programs, steps = 16, 16, 2, 3
    n_rows = rows * 8
    tile = (torch.arange(rows, device="cuda")[:, None]
            + torch.arange(d, device="cuda")[None, :]).float() * 1e-3
    for same, counts in ((False, {0: 1, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1}),
                         (True, {0: 2, 1: 2, 2: 2})):
        dq = torch.full((n_rows, d), 0.5, device="cuda")
        probe._reduce_tiles[(programs,)](probe.descriptor(dq, rows), n_rows, steps, SAME=same,
                                         ROWS=rows, D=d)
        for t in range(n_rows // rows):
            want = 0.5 + counts.get(t, 0) * tile
            assert torch.allclose(dq[t * rows:(t + 1) * rows], want), (same, t)


def test_atomic_probe_adds_where_it_says():
    """scripts/atomic_probe.py's kernel (interpreted without a GPU): ``spread`` adds program
    p's step i at tile p + i * programs, ``same`` every program's step i at tile i (so those
    tiles get one add per program), ``store`` writes the spread tiles once."""
    import torch
    from utils import DEVICE
    probe = _atomic_probe()
    rows, d, programs, steps = 16, 16, 2, 3
    n_rows = rows * 8
    tile = (torch.arange(rows, device=DEVICE)[:, None]
            + torch.arange(d, device=DEVICE)[None, :]).float() * 1e-3
    for mode, counts in ((0, {0: 1, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1}), (1, {0: 2, 1: 2, 2: 2}),
                         (2, {0: 1, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1})):
        dq = torch.full((n_rows, d), 0.5, device=DEVICE)
        probe._add_tiles[(programs,)](dq, n_rows, steps, MODE=mode, ROWS=rows, D=d)
        for t in range(n_rows // rows):
            base = 0.0 if (mode == 2 and t in counts) else 0.5
            want = base + counts.get(t, 0) * tile
            assert torch.allclose(dq[t * rows:(t + 1) * rows], want), (mode, t)


def test_ab_table_reads_kernel_sums_per_variant_and_round(tmp_path):
    """scripts/ab_table.py: each point's time per variant and round (kernel sums where
    recorded, do_bench's with --wall), and each variant's mean over main's."""
    def run(name, ms, kernel_ms):
        (tmp_path / name).mkdir()
        row = dict(provider="flashtile", mode="fwd", d=128, causal=True, s=512, dtype="bf16",
                   ms=ms, kernel_ms=kernel_ms)
        other = dict(row, provider="sdpa-cudnn", ms=9.0, kernel_ms=9.0)
        (tmp_path / name / "bench-1.json").write_text(json.dumps({"results": [row, other]}))
    run("warm", 5.0, 5.0)
    run("1-main", 0.200, 0.100)
    run("2-main", 0.300, 0.100)
    run("1-env-X=1", 0.250, 0.090)
    run("2-env-X=1", 0.250, 0.080)
    out = _run("ab_table.py", str(tmp_path))
    assert "(kernel sums)" in out
    assert "| fwd d=128 causal 512 bf16 | 100.0 / 100.0 | 90.0 / 80.0 | 0.850 |" in out, out
    wall = _run("ab_table.py", str(tmp_path), "--wall")
    assert "| fwd d=128 causal 512 bf16 | 200.0 / 300.0 | 250.0 / 250.0 | 1.000 |" in wall, wall


def test_ab_table_reads_one_kernel_per_round(tmp_path):
    """scripts/ab_table.py --kernel NAME: the kernels whose names contain NAME alone, from
    each run's per-round split (two rounds a run here), summed where several match; --split:
    each variant's ratio to main for every kernel of the split, one column each, a row for
    every point (also one whose split lacks the first column's kernel)."""
    def run(name, splits, other):
        (tmp_path / name).mkdir()
        row = dict(provider="flashtile", mode="fwdbwd", d=128, causal=True, s=2048,
                   dtype="fp16", ms=1.0, kernel_ms=1.0, kernel_split_rounds=splits)
        d64 = dict(row, d=64, kernel_split_rounds=[{"_dkdv_hopper_kernel": other}])
        (tmp_path / name / "bench-1.json").write_text(json.dumps({"results": [row, d64]}))
    run("1-main", [{"_bwd_preprocess": 0.096, "_dkdv_rows_kernel": 0.78},
                   {"_bwd_preprocess": 0.094, "_dkdv_rows_kernel": 0.79}], 0.5)
    run("1-env-X=1", [{"_bwd_preprocess": 0.160, "_dkdv_rows_kernel": 0.74, "x_rows_y": 0.01}],
        0.55)
    out = _run("ab_table.py", str(tmp_path), "--kernel", "preprocess")
    assert "(kernels named *preprocess*)" in out, out
    assert "| fwdbwd d=128 causal 2048 fp16 | 96.0 / 94.0 | 160.0 | 1.684 |" in out, out
    rows = _run("ab_table.py", str(tmp_path), "--kernel", "rows")
    assert "| 780.0 / 790.0 | 750.0 | 0.955 |" in rows, rows
    split = _run("ab_table.py", str(tmp_path), "--split")
    assert "per kernel: env-X=1 / main" in split, split
    assert ("| point | _bwd_preprocess | _dkdv_rows_kernel | x_rows_y | _dkdv_hopper_kernel |"
            in split), split
    # (each column one kernel: _dkdv_rows_kernel alone, where --kernel rows took x_rows_y
    # in too; x_rows_y has no main runs)
    assert ("| fwdbwd d=128 causal 2048 fp16 | 1.684 (95.0) | 0.943 (785.0) | - | - |"
            in split), split
    assert "| fwdbwd d=64 causal 2048 fp16 | - | - | - | 1.100 (500.0) |" in split, split


def test_rate_table_reads_kernel_rates_per_shape_and_run(tmp_path):
    """scripts/rate_table.py: one row per (provider, mode, shape), kernel TFLOP/s where recorded
    (do_bench's otherwise), each run folder a value, and their mean; head counts kept apart."""
    def run(name, heads, rate, kernel_rate):
        (tmp_path / name).mkdir(parents=True)
        row = dict(provider="flashtile", mode="fwd", d=64, causal=False, s=4096, b=4, h=heads,
                   tflops=rate, kernel_tflops=kernel_rate)
        (tmp_path / name / "bench-1.json").write_text(json.dumps({"results": [row]}))
    run("1-h32", 32, 400.0, 470.0)
    run("2-h32", 32, 400.0, 480.0)
    run("1-h33", 33, 410.0, None)
    out = _run("rate_table.py", str(tmp_path))
    assert "| flashtile | fwd | 64 | full | 4096 | 4 x 32 | 470.0 / 480.0 | 475.0 |" in out, out
    assert "| flashtile | fwd | 64 | full | 4096 | 4 x 33 | 410.0 | 410.0 |" in out, out
    assert _run("rate_table.py", str(tmp_path / "none"), ok=(1,)) == ""


def test_shards_cover_every_file_once_and_balance():
    """``FLASHTILE_TEST_SHARD``'s split (tests/conftest.py): every file in exactly one shard,
    whole; the shards' test counts within the largest file of each other."""
    from conftest import shard_files
    counts = {"a.py": 400, "b.py": 300, "c.py": 250, "d.py": 120, "e.py": 90, "f.py": 3}
    for n in (1, 2, 3):
        shards = shard_files(counts, n)
        assert len(shards) == n
        assert sorted(f for shard in shards for f in shard) == sorted(counts)
        totals = [sum(counts[f] for f in shard) for shard in shards]
        assert max(totals) - min(totals) <= max(counts.values()), totals
    assert shard_files(counts, 2) == shard_files(dict(reversed(counts.items())), 2)


def test_shard_variable_selects_and_refuses(tmp_path):
    """``FLASHTILE_TEST_SHARD=i/2`` runs collection over a small test tree: the two shards
    keep disjoint files that together are all; a malformed value is a usage error."""
    for name, n in (("test_x.py", 3), ("test_y.py", 2), ("test_z.py", 1)):
        (tmp_path / name).write_text("".join(f"def test_{k}():\n    pass\n" for k in range(n)))
    (tmp_path / "conftest.py").write_text(
        (Path(__file__).parent / "conftest.py").read_text())
    seen = []
    for spec in ("1/2", "2/2"):
        out = _pytest_child(tmp_path, "--collect-only", FLASHTILE_TEST_SHARD=spec)
        assert out.returncode == 0, out.stdout + out.stderr
        seen.append({line.split("::")[0] for line in out.stdout.splitlines() if "::" in line})
    assert seen[0] and seen[1] and not seen[0] & seen[1]
    assert seen[0] | seen[1] == {"test_x.py", "test_y.py", "test_z.py"}
    out = _pytest_child(tmp_path, "--collect-only", FLASHTILE_TEST_SHARD="3/2")
    assert out.returncode != 0 and "FLASHTILE_TEST_SHARD must be i/n" in out.stdout + out.stderr


def test_test_times_log_and_shards_balanced_by_it(tmp_path):
    """``FLASHTILE_TEST_TIMES=log`` appends every test phase's seconds as it ends (here a run
    of a small tree, one file slow); ``FLASHTILE_TEST_SHARD_TIMES=log`` then splits by those
    seconds: the slow file alone in one shard although it has the fewest tests, where counts
    would pair it with another. :func:`file_weights` fills a file missing from the log by its
    count times the mean seconds per test, and a missing log is a usage error."""
    from conftest import file_weights, read_test_times
    # (the slow file runs first: the first test's setup also imports flashtile, which under a
    # loaded machine took longer than the sleep and made a fast file look slow)
    files = {"test_a_slow.py": "import time\ndef test_0():\n    time.sleep(0.6)\n",
             "test_many.py": "".join(f"def test_{k}():\n    pass\n" for k in range(4)),
             "test_some.py": "".join(f"def test_{k}():\n    pass\n" for k in range(3))}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "conftest.py").write_text(
        (Path(__file__).parent / "conftest.py").read_text())
    log = tmp_path / "times.tsv"

    out = _pytest_child(tmp_path, FLASHTILE_TEST_TIMES=str(log))
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [line.split("\t") for line in log.read_text().splitlines()]
    assert len(lines) == 8 * 3 and all(len(f) == 4 for f in lines)   # (setup, call, teardown)
    seconds = read_test_times(str(log))
    assert seconds["test_a_slow.py"] >= 0.6 > seconds["test_many.py"] + seconds["test_some.py"]
    kept = []
    for spec in ("1/2", "2/2"):
        out = _pytest_child(tmp_path, "--collect-only", FLASHTILE_TEST_SHARD=spec,
                            FLASHTILE_TEST_SHARD_TIMES=str(log))
        assert out.returncode == 0, out.stdout + out.stderr
        kept.append({line.split("::")[0] for line in out.stdout.splitlines() if "::" in line})
    assert {"test_a_slow.py"} in kept and {"test_many.py", "test_some.py"} in kept
    weights = file_weights({"a.py": 10, "b.py": 4, "c.py": 2}, {"a.py": 5.0, "b.py": 1.0})
    assert weights == {"a.py": 5.0, "b.py": 1.0, "c.py": 2 * 6.0 / 14}
    assert file_weights({"a.py": 3}, None) == {"a.py": 3.0}
    out = _pytest_child(tmp_path, "--collect-only", FLASHTILE_TEST_SHARD="1/2",
                        FLASHTILE_TEST_SHARD_TIMES=str(tmp_path / "none.tsv"))
    assert out.returncode != 0 and "no such file" in out.stdout + out.stderr


def test_stall_table_reads_ncu_raw_csv(tmp_path):
    """scripts/stall_table.py on an ``ncu --csv --page raw`` output (header, units row, a
    stray print, two kernels): times from the units row (ms here), reasons ranked by cycles
    per issued instruction, the short kernel left out by ``--min-us``."""
    reason = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
    header = ["ID", "Process ID", "Kernel Name", "gpu__time_duration.sum",
              reason.format("barrier"), reason.format("long_scoreboard"),
              reason.format("math_pipe_throttle")]
    lines = ['==PROF== Connected to process 1', "profiled one fwd step",
             ",".join(f'"{h}"' for h in header),
             '"","","","msecond","ratio","ratio","ratio"',
             '"0","1","_fwd_hopper_kernel(int, int)","1.5","0.40","2.25","1,100.5"',
             '"1","1","tiny_kernel","0.001","9.0","0.0","0.0"']
    csv_path = tmp_path / "flashtile.csv"
    csv_path.write_text("\n".join(lines) + "\n")
    out = _run("stall_table.py", str(csv_path), "--top", "2", "--min-us", "5")
    rows = [x for x in out.splitlines() if x.startswith("| flashtile |")]
    assert rows == ["| flashtile | _fwd_hopper_kernel | 1500.0 | math_pipe_throttle 1100.50, "
                    "long_scoreboard 2.25 | 1103.15 |"], out
    bad = tmp_path / "bad.csv"
    bad.write_text("ncu: no kernels were profiled\n")
    assert "no ncu raw CSV found" in _run("stall_table.py", str(bad))


def test_stall_sources_reads_ncu_source_csv(tmp_path):
    """scripts/stall_sources.py on an ``ncu --page source --print-source sass --csv`` export
    (kernel line, header, five instructions): the parked warps' ``NOP`` samples set apart,
    reasons as shares of the active samples, windows of instructions, and the mbarrier wait's
    retry branch ranked first and named after its ``TRYWAIT``."""
    header = ["Address", "Source", "Warp Stall Sampling (All Samples)",
              "Warp Stall Sampling (Not-issued Samples)", "Instructions Executed",
              "stall_barrier", "stall_long_sb", "stall_wait", "stall_barrier (Not Issued)"]
    body = [["0x0", "  HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ", "10", "8", "2,048", "0",
             "0", "10", "0"],
            ["0x10", "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR15+0x38300], R88", "5", "5", "2048",
             "0", "0", "5", "0"],
            ["0x20", "@!P0  BRA 0x7fc2737b7390", "60", "60", "2048", "0", "60", "0", "0"],
            ["0x30", "NOP", "300", "300", "132", "300", "0", "0", "300"],
            ["0x40", "FMNMX R3, R24, R25, !PT", "25", "20", "2048", "5", "0", "20", "5"]]
    lines = ['"Kernel Name","_fwd_hopper_kernel",', ",".join(f'"{h}"' for h in header)]
    lines += [",".join(f'"{x}"' for x in row) for row in body]
    csv_path = tmp_path / "sass.csv"
    csv_path.write_text("\n".join(lines) + "\n")
    out = _run("stall_sources.py", str(csv_path), "--window", "3", "--top", "2")
    assert "parked warps 300 (75.0%)" in out, out
    assert "Reasons (% of active samples): long_sb 60.0, wait 35.0, barrier 5.0" in out, out
    assert "| 0-2 | 75.0 | 2048 | long_sb 60.0, wait 15.0 |" in out, out
    assert "| 3-5 | 25.0 | 2048 | wait 20.0, barrier 5.0 |" in out, out
    ranked = [x for x in out.splitlines() if x.startswith("| 2 |") or x.startswith("| 4 |")]
    assert ranked[0].startswith("| 2 | `@!P0  BRA 0x7fc2737b7390` after `SYNCS.PHASECHK"), out
    assert len(ranked) == 2 and "| 60.00 | 2048 |" in ranked[0], out
    bad = tmp_path / "bad.csv"
    bad.write_text("==ERROR== no kernels\n")
    assert "no SASS source page found" in _run("stall_sources.py", str(bad), ok=(1,))


def test_grid_table_from_bench_json(tmp_path):
    """scripts/grid_table.py: each cell the call ratio, the kernel ratio and the rounds' range
    of the subject against the baseline, rows by head dim, mask and mode, a table per dtype,
    then the count at 1.00x as shown and the geomeans; ``--lines``: one line a point (kernel times, ratio,
    configs, check)."""
    def row(provider, s, ms, kernel_ms, rounds):
        return dict(provider=provider, d=64, causal=True, mode="fwd", s=s, status="ok", ms=ms,
                    kernel_ms=kernel_ms, ms_rounds=rounds, dtype="bf16")
    results = [row("flashtile", 512, 0.20, 0.19, [0.21, 0.20, 0.19]),
               row("sdpa-cudnn", 512, 0.18, 0.19, [0.18, 0.18, 0.19]),
               row("flashtile", 1024, 0.25, 0.25, [0.25, 0.26]),
               row("sdpa-cudnn", 1024, 0.25, 0.24, [0.25, 0.26])]
    path = tmp_path / "bench-1.json"
    path.write_text(json.dumps({"meta": {}, "results": results}))
    out = _run("grid_table.py", str(path))
    assert "| 64 | causal | fwd | 0.90× (1.00×) [0.86–1.00] | 1.00× (0.96×) [1.00–1.00] |" in out
    assert "- fwd: 1 of 2 points at >= 1.00x as shown (0.995 and up) by call (1 by kernels); " \
           "geomean by call 0.949, by kernels 0.980" in out, out
    fp16 = [dict(r, dtype="fp16", ms=r["ms"] * (2 if r["provider"] == "flashtile" else 1))
            for r in results]                   # (a second dtype: a table of its own)
    path.write_text(json.dumps({"meta": {}, "results": results + fp16}))
    out = _run("grid_table.py", str(path))
    assert out.count("| d | mask | mode |") == 2 and ", fp16:" in out, out
    assert "| 64 | causal | fwd | 0.45× (1.00×) [0.86–1.00] | 0.50× (0.96×)" in out, out
    assert "| 64 | causal | fwd | 0.90× (1.00×) [0.86–1.00] |" in out, out
    results[0].update(configs={"fwd": "gluon 128x64/4s window 66"}, check={"status": "ok"})
    path.write_text(json.dumps({"meta": {}, "results": results}))
    lines = _run("grid_table.py", "--lines", str(path)).splitlines()
    assert lines[0] == ("d=64  causal fwd    s=512  bf16 flashtile    190.0 us  sdpa-cudnn    "
                        "190.0 us  ratio 1.000  (kernel_ms) {'fwd': 'gluon 128x64/4s window 66'} "
                        "check ok"), lines
    assert lines[1].startswith("d=64  causal fwd    s=1k   bf16 flashtile    250.0 us  "
                               "sdpa-cudnn    240.0 us  ratio 0.960"), lines
    results[0]["kernel_split_rounds"] = [{"_fwd": 0.15, "_pre": 0.04}, {"_fwd": 0.2}]
    path.write_text(json.dumps({"meta": {}, "results": results}))
    lines = _run("grid_table.py", "--lines", "--split", str(path)).splitlines()
    assert lines[1:3] == ["    flashtile round 1: _fwd 150.0 us, _pre 40.0 us",
                          "    flashtile round 2: _fwd 200.0 us"], lines
    results[0].update(sm_mhz=1650.0, watts=690.6, power_capped=0.8)          # (--power)
    results[1].update(sm_mhz=1980.0, watts=412.0, power_capped=0.0)
    path.write_text(json.dumps({"meta": {}, "results": results}))
    lines = _run("grid_table.py", "--lines", str(path)).splitlines()
    assert lines[0].endswith("check ok  flashtile 1650 MHz 691 W capped 80%, sdpa-cudnn "
                             "1980 MHz 412 W capped 0%"), lines
    assert "MHz" not in lines[1], lines


def test_order_model_reads_the_causal_orders():
    """scripts/order_model.py: at d=128 causal 512 (512 pairs x 4 items, 132 programs, 50 MB)
    chunks of 1 miss ~442 MB of the L2 and chunks of 8 the 256 MB of K/V, Q and O once, both
    with the optimal span under the snake; windows of 66 pairs (two rounds) read as chunks of
    8, windows of 64 unbalance the snake (session 40)."""
    out = _run("order_model.py", "--groups", "1,8,-64,-66")
    spans = dict(re.findall(r"GROUP +(-?\d+): HBM +[\d.]+ MB, span +([\d.]+)", out))
    missed = dict(re.findall(r"GROUP +(-?\d+): HBM +([\d.]+) MB", out))
    assert float(missed["1"]) > 400 and float(missed["8"]) == 256.0, out
    assert float(missed["-66"]) == 256.0 and spans["-66"] == spans["8"] == spans["1"], out
    assert float(spans["-64"]) > 1.4 * float(spans["8"]), out
