"""What a run leaves behind: rich tables on the terminal, a JSON file with every measurement and
the run's metadata (device, versions, commit, date, FLOP convention)."""

from __future__ import annotations

import datetime as _dt
import json
import math
import platform
import statistics
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from .cases import FLOP_CONVENTION, BenchCase, GridSpec
from .check import FLOOR_GRAD_FACTOR, FLOORS
from .power import ENERGY_MIN_S, PERIOD_S
from .providers import CUDNN, GIB, PROVIDERS
from .runner import Measurement, RunOptions

CHECK_RULE = (f"err <= 2 * err(torch same dtype) + floor, floor = {FLOORS} "
              f"(x{FLOOR_GRAD_FACTOR['dq']:g} for dq, dk); err = max abs error against the float64 "
              "flashtile.attention_reference, on the output and (bwd modes) dq, dk, dv; large "
              "cases on a reduced instance (seqlen <= 1024)")
STATUS_STYLE = {"n/a": "dim", "WRONG": "bold red", "error": "red"}


# ----------------------------------------------------------------------------- metadata

def _git(*args: str) -> str | None:
    """Output of a git command run in the package's checkout, or ``None`` outside one."""
    package_dir = Path(__file__).resolve().parents[1]
    try:
        done = subprocess.run(["git", *args], cwd=package_dir, capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _versions() -> dict:
    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "cuda": torch.version.cuda, "cudnn": None, "triton": None, "flash_attn": None}
    if torch.backends.cudnn.is_available():
        versions["cudnn"] = torch.backends.cudnn.version()
    for name in ("triton", "flash_attn"):
        try:
            versions[name] = getattr(__import__(name), "__version__", "unknown")
        except Exception:  # not installed, or broken: recorded as None
            pass
    import flashtile
    versions["flashtile"] = flashtile.__version__
    versions["flashtile_backend"] = flashtile.get_backend()
    return versions


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return f"{props.name} ({props.multi_processor_count} SMs)"
    return f"CPU ({platform.processor() or platform.machine()}, threads={torch.get_num_threads()})"


def collect_metadata(options: RunOptions, spec: GridSpec, cli_options: dict,
                     notes: list[str]) -> dict:
    """Everything needed to interpret the numbers later."""
    commit = _git("rev-parse", "HEAD")
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    timing = ("median of triton.testing.do_bench" if options.device.type == "cuda"
              else "median of time.perf_counter over repeats")
    return {
        "device": device_name(options.device),
        "versions": _versions(),
        "git_commit": commit,
        "git_dirty": bool(dirty) if commit else None,
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "argv": sys.argv,
        "options": cli_options,
        "flop_convention": FLOP_CONVENTION,
        "timing": f"{timing}, warmup {options.warmup_ms:g} ms, rep {options.rep_ms:g} ms"
                  + ("; kernel_ms: summed device times of 5 calls (torch profiler), "
                     "kernel_split_rounds: each round's by kernel name"
                     if options.kernel_times and options.device.type == "cuda" else "")
                  + (f"; median of {options.rounds} rounds, the providers in turn at each "
                     f"point (reversed every other round); ms_rounds holds each round"
                     if options.rounds > 1 and not options.check_only else "")
                  + ("; sm_mhz / watts / power_capped: the SM clock (median), board power "
                     f"(mean: the energy counter over windows of {ENERGY_MIN_S:g} s or more, "
                     "else the sampled power) and share of samples held by a power or thermal "
                     f"limit while do_bench ran (NVML, every {PERIOD_S * 1e3:g} ms); "
                     "power_rounds: each round's"
                     if options.power is not None else ""),
        "rounds": options.rounds,
        "check_rule": CHECK_RULE,
        "providers": {name: PROVIDERS[name].description for name in options.providers},
        "grid": asdict(spec),
        "check_only": options.check_only,
        "notes": notes,
    }


# ----------------------------------------------------------------------------- JSON

def _finite(value):
    """JSON has no inf/nan: write them as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def unique_stem(out_dir: Path) -> Path:
    """``out_dir/bench-YYYYmmdd-HHMMSS`` (with a suffix if that exists already)."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    stem, n = out_dir / f"bench-{stamp}", 1
    while stem.with_suffix(".json").exists():
        stem, n = out_dir / f"bench-{stamp}-{n}", n + 1
    return stem


def write_json(path: Path, metadata: dict, measurements: list[Measurement],
               summary: list[dict]) -> Path:
    payload = {"meta": metadata, "summary": summary,
               "results": [m.as_dict() for m in measurements]}
    path.write_text(json.dumps(_finite(payload), indent=1, allow_nan=False) + "\n")
    return path


# ----------------------------------------------------------------------------- tables

def _format_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / GIB:.2f} GiB" if n >= GIB / 10 else f"{n / 2 ** 20:.0f} MiB"


def format_tflops(value: float) -> str:
    """``612.3``, ``42.17``, ``0.0123``: three significant digits at least (CPU runs are slow)."""
    if value >= 100:
        return f"{value:.1f}"
    return f"{value:.2f}" if value >= 1 else f"{value:.3g}"


def _cell(m: Measurement, best: bool, memory: bool) -> str:
    if m.status == "ok":
        text = f"{format_tflops(m.tflops)}\n[dim]{m.ms:.3f} ms[/]"
        if m.kernel_ms is not None:
            text += f"\n[magenta]kernels {m.kernel_ms:.3f} ms[/]"
        if m.spread is not None:
            text += f"\n[dim]{len(m.ms_rounds)} rounds ±{50 * m.spread:.1f}%[/]"
        if m.power is not None:
            capped = f", capped {m.power.capped:.0%}" if m.power.capped else ""
            text += f"\n[yellow]{m.power.sm_mhz:.0f} MHz, {m.power.watts:.0f} W{capped}[/]"
        if memory and m.peak_memory is not None:
            text += f"\n[cyan]{_format_bytes(m.peak_memory)}[/]"
        return f"[bold green]{text}[/]" if best else text
    if m.status == "checked":
        ratio = m.check.worst_ratio if m.check else None
        return "ok" + (f"\n[dim]{ratio:.2f} of budget[/]" if ratio is not None else "")
    text = f"[{STATUS_STYLE.get(m.status, '')}]{m.status}[/]"
    if m.status == "WRONG" and m.check is not None and m.check.worst_ratio is not None:
        text += f"\n[dim]{m.check.worst_ratio:.3g}x budget[/]"
    return text


def _ratio(value: float | None, suffix: str = "") -> str:
    if value is None:
        return "-"
    style = "green" if value >= 1.0 else "red"
    number = f"{value:.2f}" if value >= 0.1 else f"{value:.2g}"
    return f"[{style}]{number}x[/]{suffix}"


def group_key(case: BenchCase) -> tuple:
    """Tables and plots are one per (mode, dtype, GQA ratio)."""
    return case.mode, case.dtype, case.gqa


def _group_title(key: tuple, device: str) -> str:
    mode, dtype, gqa = key
    gqa_text = f", hq/hkv = {gqa}" if gqa > 1 else ""
    return f"{mode} · {dtype}{gqa_text} · {device}"


def build_tables(measurements: list[Measurement], options: RunOptions, subject: str,
                 device: str) -> list:
    """One rich table per (mode, dtype, GQA): rows are (d, mask, seqlen), columns providers."""
    from rich.table import Table

    groups: dict[tuple, dict[BenchCase, dict[str, Measurement]]] = {}
    for m in measurements:
        groups.setdefault(group_key(m.case), {}).setdefault(m.case, {})[m.provider] = m
    show_ratios = not options.check_only and subject in options.providers
    show_cudnn = show_ratios and CUDNN in options.providers and subject != CUDNN
    unit = "check (err / budget)" if options.check_only else "TFLOP/s, ms"
    tables = []
    for key, rows in groups.items():
        table = Table(title=f"{_group_title(key, device)} — {unit}", show_lines=True)
        for header in ("d", "mask", "seqlen", "b x h"):
            table.add_column(header, justify="right")
        for name in options.providers:
            table.add_column(name, justify="right")
        if show_ratios:
            table.add_column(f"{subject}\n÷ best other", justify="right")
        if show_cudnn:
            table.add_column(f"{subject}\n÷ cuDNN", justify="right")
        for case, by_provider in rows.items():
            timed = [m for m in by_provider.values() if m.status == "ok"]
            fastest = max(timed, key=lambda m: m.tflops).provider if len(timed) > 1 else None
            heads = (f"{case.nheads}" if case.gqa == 1 else f"{case.nheads}/{case.nheads_kv}")
            cells = [str(case.headdim), "causal" if case.causal else "full", str(case.seqlen),
                     f"{case.batch} x {heads}"]
            cells += [_cell(by_provider[n], n == fastest, options.memory)
                      if n in by_provider else "" for n in options.providers]
            mine = by_provider.get(subject)
            if show_ratios:
                best = f"\n[dim]{mine.best_other}[/]" if mine and mine.best_other else ""
                cells.append(_ratio(mine.vs_best_other if mine else None, best))
            if show_cudnn:
                cells.append(_ratio(mine.vs_cudnn if mine else None))
            table.add_row(*cells)
        tables.append(table)
    return tables


def subject_summary(measurements: list[Measurement], subject: str) -> list[dict]:
    """Per (mode, dtype, GQA): the subject's worst and geometric-mean ratio to cuDNN and to the
    best other provider over the points where both were timed (issue 7's gate is min >= 1);
    with kernel times, also to cuDNN's kernels alone."""
    summary = []
    groups: dict[tuple, list[Measurement]] = {}
    for m in measurements:
        if m.provider == subject and m.status == "ok":
            groups.setdefault(group_key(m.case), []).append(m)
    for (mode, dtype, gqa), mine in groups.items():
        row = {"provider": subject, "mode": mode, "dtype": dtype, "gqa": gqa}
        for field_name, label in (("vs_cudnn", "vs_cudnn"), ("vs_best_other", "vs_best_other"),
                                  ("vs_cudnn_kernels", "vs_cudnn_kernels")):
            points = [m for m in mine if getattr(m, field_name) is not None]
            if not points:
                continue
            worst = min(points, key=lambda m: getattr(m, field_name))
            geomean = math.exp(sum(math.log(getattr(m, field_name)) for m in points)
                               / len(points))
            row[label] = {"min": getattr(worst, field_name), "min_at": worst.case.label(),
                          "geomean": geomean, "points": len(points)}
        summary.append(row)
    return summary


def summary_lines(summary: list[dict]) -> list[str]:
    lines = []
    for row in summary:
        gqa = "" if row["gqa"] == 1 else f" hq/hkv={row['gqa']}"
        for key, name in (("vs_cudnn", "cuDNN"), ("vs_best_other", "the best other"),
                          ("vs_cudnn_kernels", "cuDNN, kernels alone")):
            if key in row:
                r = row[key]
                lines.append(f"{row['provider']} {row['mode']} {row['dtype']}{gqa} vs {name}: "
                             f"geomean {r['geomean']:.2f}x, min {r['min']:.2f}x at {r['min_at']} "
                             f"({r['points']} points)")
    return lines


def power_lines(measurements: list[Measurement]) -> list[str]:
    """With ``--power``: per provider, the SM clock (median and lowest of its points' medians),
    the mean power and the share of points timed at a power or thermal limit (any sample
    held), so a provider that ran on a hotter card shows at a glance."""
    by_provider: dict[str, list] = {}
    for m in measurements:
        if m.power is not None:
            by_provider.setdefault(m.provider, []).append(m.power)
    lines = []
    for provider, readings in by_provider.items():
        clocks = [r.sm_mhz for r in readings]
        watts = statistics.fmean(r.watts for r in readings)
        capped = sum(1 for r in readings if r.capped > 0)
        lines.append(f"{provider} while timed: SM clock median {statistics.median(clocks):.0f} "
                     f"MHz (lowest {min(clocks):.0f}), {watts:.0f} W mean, {capped} of "
                     f"{len(readings)} points at a power or thermal limit")
    return lines


# A call time this many times its kernels' sum is no longer the kernels' speed (session 54: one
# point of a grid at 2.05x, 0.49x cuDNN by call and 0.99x by kernels, level when run again)
CALL_GAP = 1.25


def call_gap_notes(measurements: list[Measurement]) -> list[str]:
    """With ``--kernel-times``: per provider, the points whose call time (do_bench's median)
    is more than :data:`CALL_GAP` times the sum of their kernels' device times: the GPU stood
    idle between launches (the host's launch path, or another process disturbing the run),
    so those ratios by call are not the kernels' and the ones by kernels are steadier."""
    by_provider: dict[str, list[str]] = {}
    for m in measurements:
        if m.ms is not None and m.kernel_ms and m.ms > CALL_GAP * m.kernel_ms:
            by_provider.setdefault(m.provider, []).append(
                f"{m.case.label()} {m.ms / m.kernel_ms:.2f}x")
    return [f"{provider}: call time over {CALL_GAP:g}x its kernels' sum at {len(points)} "
            f"point{'s' * (len(points) > 1)} ({', '.join(points)}): the GPU idled between "
            "launches (host-bound or a disturbed run); read those by kernels, or rerun"
            for provider, points in by_provider.items()]


def status_notes(measurements: list[Measurement]) -> list[str]:
    """One line per (provider, status, reason) that is not a clean measurement."""
    counts: dict[tuple, list[BenchCase]] = {}
    for m in measurements:
        if m.status not in ("ok", "checked"):
            counts.setdefault((m.provider, m.status, m.reason), []).append(m.case)
    notes = []
    for (provider, status, reason), cases in counts.items():
        where = cases[0].label()
        if len(cases) > 1:
            where = f"{len(cases)} points, e.g. {where}"
        notes.append(f"{provider} {status} ({where}): {reason}")
    return notes
