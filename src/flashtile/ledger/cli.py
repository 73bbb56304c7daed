"""``flashtile ledger``: argument parsing, tables, JSON and plots (the model lives in
:mod:`flashtile.ledger.model`, the measurements in :mod:`flashtile.ledger.measure`)."""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import platform
import re
import subprocess
import sys
from typing import Optional

from . import paper
from .measure import find_ncu, gpu_available, measure_workload, run_child, step_spec
from .model import (DTYPE_BYTES, PRESETS, Hardware, LedgerResult, TileConfig, Workload,
                    conventional_flops, estimate)

CPU_NOTE = ("Measurement needs a CUDA GPU and none is visible here "
            "(torch.cuda.is_available() is False): showing the model only. Run the same command "
            "with --measure (and --ncu for HBM bytes) on a GPU machine.")


# --------------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------------

def _size(text: str) -> int:
    """``"228K"``, ``"228KiB"``, ``"50M"``, ``"233472"`` -> bytes (K/M/G are powers of 1024)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a size like 233472, 228K or 50M, got {text!r}")
    scale = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}[m.group(2).upper()]
    return int(float(m.group(1)) * scale)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``flashtile ledger`` (see the module docstring of :mod:`flashtile.ledger`)."""
    shape = parser.add_argument_group("workload (each list option spans a grid)")
    shape.add_argument("--batch", "-b", type=int, default=64, help="batch size (default 64)")
    shape.add_argument("--heads", type=int, default=16, help="query heads (default 16)")
    shape.add_argument("--heads-kv", type=int, default=None, help="KV heads (GQA; default = heads)")
    shape.add_argument("--seqlen", type=int, nargs="+", default=[1024],
                       help="query sequence length(s) (default 1024)")
    shape.add_argument("--seqlen-k", type=int, default=None, help="key length (default = seqlen)")
    shape.add_argument("--headdim", type=int, nargs="+", default=[64],
                       help="QK head dim(s) (default 64)")
    shape.add_argument("--headdim-v", type=int, default=None, help="V head dim (default = headdim)")
    shape.add_argument("--tokens", type=int, default=None,
                       help="set batch = tokens // seqlen for every seqlen (e.g. 16384)")
    shape.add_argument("--hidden", type=int, default=None,
                       help="set heads = hidden // headdim for every headdim (e.g. 2048)")
    shape.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    shape.add_argument("--causal", action="store_true", help="causal mask (bottom-right)")
    shape.add_argument("--dropout", type=float, default=0.0, help="dropout probability")
    shape.add_argument("--density", type=float, default=1.0,
                       help="fraction of non-zero blocks (block-sparse model; default 1)")

    hw = parser.add_argument_group("hardware and kernel blocks")
    hw.add_argument("--hardware", default="present", choices=["present"] + sorted(PRESETS),
                    help="present: this GPU (H200 preset without one)")
    hw.add_argument("--sram", type=_size, default=None,
                    help="SRAM (shared memory) per SM, bytes or 228K (default: the hardware's)")
    hw.add_argument("--l2", type=_size, default=None, help="L2 size, bytes or 50M")
    hw.add_argument("--sms", type=int, default=None, help="number of SMs")
    hw.add_argument("--block-m", type=int, default=None, help="forward BLOCK_M (default 128)")
    hw.add_argument("--block-n", type=int, default=None, help="forward BLOCK_N (default 64)")
    hw.add_argument("--bwd-blocks", type=int, nargs=4, default=None,
                    metavar=("DKDV_N", "DKDV_M", "DQ_M", "DQ_N"),
                    help="backward blocks (default 128 64 128 64)")
    hw.add_argument("--blocks-from-sram", action="store_true",
                    help="the paper's rule: every block M / (4 d e) rows")
    hw.add_argument("--backward", choices=("two-pass", "atomic"), default="two-pass",
                    help="backward structure (flashtile: two-pass dK/dV + dQ; one pass with "
                         "atomic dQ under FLASHTILE_BWD_DQ=atomic)")

    run = parser.add_argument_group("what to do")
    run.add_argument("--measure", action="store_true",
                     help="time eager and flashtile fwd+bwd on this GPU, with peak memory")
    run.add_argument("--ncu", action="store_true",
                     help="also measure HBM bytes with Nsight Compute (implies --measure)")
    run.add_argument("--ncu-path", default=None, help="ncu binary (default: search)")
    run.add_argument("--paper", action="store_true",
                     help="reproduce Figure 2 of the FlashAttention paper and the essay table")
    run.add_argument("--out", default=None, help="folder for ledger.json (and PNG plots)")
    run.add_argument("--details", action="store_true",
                     help="also list the traffic of every eager op and tiled kernel")


def _hardware(args) -> Hardware:
    hw = Hardware.present() if args.hardware == "present" else Hardware.preset(args.hardware)
    changes = {k: v for k, v in (("sram_bytes", args.sram), ("l2_bytes", args.l2),
                                 ("num_sms", args.sms)) if v}
    return hw.with_(**changes) if changes else hw


def _tiles(args, w: Optional[Workload], hw: Hardware) -> TileConfig:
    if args.blocks_from_sram and w is not None:
        return TileConfig.from_sram(hw.sram_bytes, w.headdim, w.headdim_v, w.dtype_bytes,
                                    backward=args.backward)
    tiles = TileConfig.from_env(TileConfig(backward=args.backward))
    if args.block_m:
        tiles = tiles.with_(fwd_block_m=args.block_m)
    if args.block_n:
        tiles = tiles.with_(fwd_block_n=args.block_n)
    if args.bwd_blocks:
        a, b, c, d = args.bwd_blocks
        tiles = tiles.with_(dkdv_block_n=a, dkdv_block_m=b, dq_block_m=c, dq_block_n=d)
    return tiles


def _explicit_tiles(args) -> bool:
    """True when the user fixed the block sizes (then measured launches do not replace them)."""
    return bool(args.block_m or args.block_n or args.bwd_blocks or args.blocks_from_sram)


def workloads_from_args(args) -> list[Workload]:
    """The grid ``seqlen x headdim`` with the other options applied."""
    out = []
    for n, d in itertools.product(args.seqlen, args.headdim):
        batch = max(1, args.tokens // n) if args.tokens else args.batch
        heads = max(1, args.hidden // d) if args.hidden else args.heads
        heads_kv = args.heads_kv if args.heads_kv else heads
        out.append(Workload(batch=batch, nheads=heads, seqlen_q=n, headdim=d,
                            seqlen_k=args.seqlen_k, headdim_v=args.headdim_v, nheads_kv=heads_kv,
                            dtype_bytes=DTYPE_BYTES[args.dtype], causal=args.causal,
                            dropout_p=args.dropout, density=args.density))
    return out


# --------------------------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------------------------

def escape(text: str) -> str:
    """Text that rich prints as is (error messages contain [brackets])."""
    from rich.markup import escape as _escape
    return _escape(str(text))


def _console():
    from rich.console import Console
    return Console(width=None if sys.stdout.isatty() else 190, soft_wrap=False)


def gb(x) -> str:
    """Bytes as GB (MB below 0.1 GB)."""
    if x is None:
        return "—"
    if x >= 10e9:
        return f"{x / 1e9:.1f} GB"
    if x >= 0.1e9:
        return f"{x / 1e9:.2f} GB"
    return f"{x / 1e6:.3g} MB"


def gflop(x) -> str:
    return "—" if x is None else f"{x / 1e9:,.1f}"


def ratio(a, b) -> str:
    if a is None or b is None or not b:
        return "—"
    return f"{a / b:.2f}x"


def _measured_cell(measured: Optional[float], model: Optional[float], fmt=gb) -> str:
    if measured is None:
        return "—"
    if not model:
        return fmt(measured)
    return f"{fmt(measured)} (model/meas {model / measured:.2f})"


def _ncu_step(ncu_report: Optional[dict], impl: str, label: str) -> dict:
    if not ncu_report:
        return {}
    for step in ncu_report.get("steps", []):
        if step.get("impl") == impl and step.get("label") == label:
            return step
    return {}


def detail_table(r: LedgerResult, measured: Optional[dict] = None,
                 ncu_report: Optional[dict] = None):
    """One workload, quantity by quantity: model, and measurement where there is one."""
    from rich.table import Table
    w = r.workload
    tl = r.tiles
    t = Table(title=f"ledger: {w.label}, fwd+bwd — {r.hardware.name}: "
                    f"{r.hardware.sram_bytes // 1024} KiB SRAM/SM, L2 {r.hardware.l2_bytes >> 20}"
                    f" MiB, {r.hardware.num_sms} SMs\ntiles (rows): fwd {tl.fwd_block_m} q x "
                    f"{tl.fwd_block_n} kv; bwd {tl.backward}: dK/dV {tl.dkdv_block_n} kv x "
                    f"{tl.dkdv_block_m} q, dQ {tl.dq_block_m} q x {tl.dq_block_n} kv",
              title_justify="left")
    t.add_column("quantity")
    t.add_column("standard (eager)", justify="right")
    t.add_column("flashtile (tiled)", justify="right")
    t.add_column("standard / tiled", justify="right")

    def row(name, a, b, fmt=gb):
        t.add_row(name, fmt(a) if a is not None else "—", fmt(b) if b is not None else "—",
                  ratio(a, b))
    row("matmul GFLOP, forward", r.standard_flops_fwd, r.tiled_flops_fwd, gflop)
    row("matmul GFLOP, backward (tiled recomputes QK^T)", r.standard_flops_bwd,
        r.tiled_flops_bwd, gflop)
    row("matmul GFLOP, total", r.standard_flops, r.tiled_flops, gflop)
    t.add_row("  convention (fwd 4bhNNd, x3.5)", "", gflop(conventional_flops(w)), "")
    row("softmax/scale/mask GFLOP, total",
        r.standard_softmax_flops_fwd + r.standard_softmax_flops_bwd,
        r.tiled_softmax_flops_fwd + r.tiled_softmax_flops_bwd, gflop)
    row("HBM bytes, forward (model)", r.standard_bytes_fwd, r.tiled_dram_bytes_fwd)
    row("HBM bytes, backward (model)", r.standard_bytes_bwd, r.tiled_dram_bytes_bwd)
    row("HBM bytes, total (model)", r.standard_bytes, r.tiled_dram_bytes)
    row("paper's count: every load, no cache", r.textbook_standard_fwd + r.textbook_standard_bwd,
        r.tiled_bytes)
    t.add_row("  tiled N^2 term (re-read tiles) / (b h N^2 d^2 e^2 / M)", "",
              f"{gb(r.tiled_stream_bytes)} = {r.theta_constant:.1f} x Θ", "")
    row("extra memory, forward (model)", r.standard_memory_fwd, r.tiled_memory_fwd)
    row("extra memory, peak fwd+bwd (model)", r.standard_memory_peak, r.tiled_memory_peak)
    rs, rt = r.roofline_ms("standard"), r.roofline_ms("tiled")
    if rs is not None:
        row("roofline lower bound, ms", rs, rt, lambda x: f"{x:.3f}")

    if measured:
        s, f = measured.get("standard", {}), measured.get("flashtile", {})

        def ms(entry):
            return f"{entry['ms']:.3f} ms" if entry.get("ms") is not None else \
                ("error" if entry.get("error") else "—")
        t.add_section()
        t.add_row("measured time (median do_bench)", ms(s), ms(f), ratio(s.get("ms"), f.get("ms")))
        conv = conventional_flops(w)
        t.add_row("  TFLOP/s (convention)",
                  f"{conv / s['ms'] / 1e9:.1f}" if s.get("ms") else "—",
                  f"{conv / f['ms'] / 1e9:.1f}" if f.get("ms") else "—", "")
        t.add_row("measured peak extra memory",
                  _measured_cell(s.get("peak_extra_bytes"), r.standard_memory_peak),
                  _measured_cell(f.get("peak_extra_bytes"), r.tiled_memory_peak),
                  ratio(s.get("peak_extra_bytes"), f.get("peak_extra_bytes")))
        if f.get("max_abs_diff_vs_standard") is not None:
            t.add_row("  max |flashtile - eager| (output)", "",
                      f"{f['max_abs_diff_vs_standard']:.3g}", "")
        for impl, entry in (("standard", s), ("flashtile", f)):
            if entry.get("error"):
                t.add_row(f"  {impl} error", escape(entry["error"][:140]), "", "")
    if ncu_report is not None:
        ns, nf = _ncu_step(ncu_report, "standard", w.label), _ncu_step(ncu_report, "flashtile",
                                                                        w.label)
        t.add_section()
        t.add_row("ncu DRAM bytes (one step)", _measured_cell(ns.get("dram"), r.standard_bytes),
                  _measured_cell(nf.get("dram"), r.tiled_dram_bytes),
                  ratio(ns.get("dram"), nf.get("dram")))
        t.add_row("ncu L2 bytes from SMs vs tile loads", gb(ns.get("l2")),
                  _measured_cell(nf.get("l2"), r.tiled_bytes), "")
        for impl, step in (("standard", ns), ("flashtile", nf)):
            if step.get("error"):
                t.add_row(f"  ncu {impl} error", escape(step["error"][:140]), "", "")
        if ncu_report.get("error"):
            t.add_row("  ncu", escape(ncu_report["error"][:300]), "", "")
    return t


def ops_table(r: LedgerResult):
    from rich.table import Table
    t = Table(title=f"traffic per op / kernel: {r.workload.label}", title_justify="left")
    for col in ("model", "op / kernel", "read", "write", "of which streamed tiles"):
        t.add_column(col, justify="right" if col in ("read", "write") or col.startswith("of")
                     else "left")
    groups = (("standard fwd", r.standard_fwd), ("standard bwd", r.standard_bwd),
              ("tiled fwd, tile loads", r.tiled_fwd), ("tiled bwd, tile loads", r.tiled_bwd),
              ("tiled fwd, DRAM", r.tiled_dram_fwd), ("tiled bwd, DRAM", r.tiled_dram_bwd))
    for title, items in groups:
        t.add_section()
        for item in items:
            t.add_row(title, item.name, gb(item.read), gb(item.write),
                      gb(item.stream) if item.stream else "")
    return t


def summary_table(results: list[LedgerResult], measured: list, ncu_report: Optional[dict]):
    """One row per workload: the N^2 d^2 / M scaling and, if measured, model vs measurement."""
    from rich.table import Table
    t = Table(title="ledger summary (fwd+bwd)", title_justify="left")
    cols = ["workload", "std HBM model", "tiled HBM model", "tile loads model", "re-read / Θ"]
    if ncu_report is not None:
        cols += ["std ncu DRAM (model/meas)", "tiled ncu DRAM (model/meas)",
                 "tiled ncu L2←SM (tile loads/meas)"]
    if any(measured):
        cols += ["std ms", "tiled ms", "speedup", "std mem", "tiled mem"]
    for c in cols:
        t.add_column(c, justify="left" if c == "workload" else "right",
                     no_wrap=c == "workload")

    def compact(meas, model):
        if meas is None:
            return "—"
        return gb(meas) + (f" ({model / meas:.2f})" if model and meas else "")
    for r, m in zip(results, measured):
        cells = [r.workload.label, gb(r.standard_bytes), gb(r.tiled_dram_bytes), gb(r.tiled_bytes),
                 f"{r.theta_constant:.1f}"]
        if ncu_report is not None:
            ns = _ncu_step(ncu_report, "standard", r.workload.label)
            nf = _ncu_step(ncu_report, "flashtile", r.workload.label)
            cells += [compact(ns.get("dram"), r.standard_bytes),
                      compact(nf.get("dram"), r.tiled_dram_bytes),
                      compact(nf.get("l2"), r.tiled_bytes)]
        if any(measured):
            s, f = (m or {}).get("standard", {}), (m or {}).get("flashtile", {})
            cells += [f"{s['ms']:.3f}" if s.get("ms") else "—",
                      f"{f['ms']:.3f}" if f.get("ms") else "—", ratio(s.get("ms"), f.get("ms")),
                      gb(s.get("peak_extra_bytes")), gb(f.get("peak_extra_bytes"))]
        t.add_row(*cells)
    return t


# --------------------------------------------------------------------------------------------
# Output files
# --------------------------------------------------------------------------------------------

def _meta(hw: Hardware) -> dict:
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": " ".join(["flashtile"] + sys.argv[1:]) if sys.argv else "",
            "hardware": hw.name, "python": platform.python_version()}
    try:
        import torch
        meta["torch"] = torch.__version__
        if torch.cuda.is_available():
            meta["device"] = torch.cuda.get_device_name()
    except Exception:  # pragma: no cover
        pass
    try:
        import triton
        meta["triton"] = triton.__version__
    except Exception:  # pragma: no cover
        pass
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        meta["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here,
                                        capture_output=True, text=True,
                                        timeout=10).stdout.strip() or None
    except Exception:  # pragma: no cover
        meta["commit"] = None
    return meta


def _write_json(out: str, name: str, payload: dict) -> str:
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, name)
    with open(path, "w") as f:
        json.dump(payload, f, indent=1, default=str)
    return path


def plot_scaling(results: list[LedgerResult], ncu_report: Optional[dict], path: str):
    """Traffic vs N per head dim (log-log): model tile loads and DRAM, ncu L2 and DRAM."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker  # noqa: F401
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    by_d: dict = {}
    for r in results:
        by_d.setdefault(r.workload.headdim, []).append(r)
    for d, rs in sorted(by_d.items()):
        rs = sorted(rs, key=lambda r: r.workload.seqlen_q)
        n = [r.workload.seqlen_q for r in rs]
        ax = axes[0]
        ax.plot(n, [r.tiled_stream_bytes / 1e9 for r in rs], "o-", label=f"d={d}: re-read tiles")
        ax.plot(n, [r.theta_term * rs[0].theta_constant / 1e9 for r in rs], ":", color="gray")
        if ncu_report:
            l2 = [_ncu_step(ncu_report, "flashtile", r.workload.label).get("l2") for r in rs]
            if any(v is not None for v in l2):
                ax.plot(n, [v / 1e9 if v else float("nan") for v in l2], "s",
                        label=f"d={d}: ncu L2←SM (all loads)")
        ax = axes[1]
        ax.plot(n, [r.standard_bytes / 1e9 for r in rs], "o-", label=f"d={d}: standard model")
        ax.plot(n, [r.tiled_dram_bytes / 1e9 for r in rs], "o--", label=f"d={d}: tiled model")
        if ncu_report:
            for impl, mark in (("standard", "^"), ("flashtile", "v")):
                vals = [_ncu_step(ncu_report, impl, r.workload.label).get("dram") for r in rs]
                if any(v is not None for v in vals):
                    ax.plot(n, [v / 1e9 if v else float("nan") for v in vals], mark,
                            label=f"d={d}: {impl} ncu")
    for ax, title in zip(axes, ("tiled N² term: re-read tiles (dotted: Θ(N²d²/M) fit)",
                                "HBM bytes: standard Θ(N²) vs tiled (DRAM)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("sequence length N")
        ax.set_ylabel("GB (fwd+bwd)")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------------------------
# Entry
# --------------------------------------------------------------------------------------------

def _resolve_ncu(args, console) -> Optional[str]:
    if not args.ncu:
        return None
    path = find_ncu(args.ncu_path)
    if path is None:
        console.print("[yellow]--ncu: no ncu binary found (searched PATH, $CUDA_HOME/bin, "
                      "/usr/local/cuda*/bin, /opt/nvidia/nsight-compute/*); pass --ncu-path or "
                      "set FLASHTILE_NCU. Continuing without HBM measurement.[/yellow]")
    else:
        console.print(f"ncu: {path}")
    return path


def run(args) -> int:
    """Run ``flashtile ledger`` with parsed ``args``; returns the exit status."""
    console = _console()
    if args.ncu:
        args.measure = True
    hw = _hardware(args)
    on_gpu = gpu_available()
    if not on_gpu:
        console.print(f"[bold yellow]note:[/bold yellow] {CPU_NOTE}")
    measure = args.measure and on_gpu
    ncu = _resolve_ncu(args, console) if measure else None
    if args.paper:
        return _run_paper(args, hw, measure, ncu, console)

    workloads = workloads_from_args(args)
    results = [estimate(w, hw, _tiles(args, w, hw)) for w in workloads]
    measured: list = [None] * len(results)
    ncu_report = None
    if measure:
        for i, w in enumerate(workloads):
            console.print(f"measuring {w.label} ...")
            measured[i] = measure_workload(w, args.dtype)
            launched = measured[i].get("flashtile", {}).get("tiles")
            if launched and not _explicit_tiles(args):   # model the blocks that really ran
                results[i] = estimate(w, hw, TileConfig(**launched))
        if ncu:
            console.print("profiling one fwd+bwd step per workload and implementation "
                          "under ncu ...")
            steps = [step_spec(impl, w, args.dtype) for w in workloads
                     for impl in ("standard", "flashtile")]
            ncu_report = run_child({"mode": "ncu", "steps": steps}, ncu=ncu,
                                   timeout=min(480, 120 + 20 * len(steps)))
    for r, m in zip(results, measured):
        console.print(detail_table(r, m, ncu_report))
        if args.details:
            console.print(ops_table(r))
    if len(results) > 1:
        console.print(summary_table(results, measured, ncu_report))
    if on_gpu and not args.measure:
        console.print("model only; add --measure (and --ncu) to measure on this GPU.")
    if args.out:
        payload = {"meta": _meta(hw), "workloads": [
            {"model": r.to_dict(), "measured": m,
             "ncu": {"standard": _ncu_step(ncu_report, "standard", r.workload.label),
                     "flashtile": _ncu_step(ncu_report, "flashtile", r.workload.label)}
             if ncu_report else None}
            for r, m in zip(results, measured)],
            "ncu_error": ncu_report.get("error") if ncu_report else None,
            "ncu_command": ncu_report.get("ncu_command") if ncu_report else None,
            "measured_on_gpu": measure}
        path = _write_json(args.out, "ledger.json", payload)
        console.print(f"wrote {path}")
        if len(results) > 1:
            png = plot_scaling(results, ncu_report, os.path.join(args.out, "scaling.png"))
            if png:
                console.print(f"wrote {png}")
    return 0


def _run_paper(args, hw: Hardware, measure: bool, ncu: Optional[str], console) -> int:
    from rich.table import Table
    dtype_bytes = DTYPE_BYTES[args.dtype]
    w = Workload(**paper.GPT2_MEDIUM, dtype_bytes=dtype_bytes)
    tiles = _tiles(args, w, hw)
    fig2 = paper.figure2(hw, tiles, args.dtype, measure=measure, ncu=ncu, log=console.print,
                         fixed_tiles=_explicit_tiles(args))
    left, middle, right = fig2["left"], fig2["middle"], fig2["right"]
    r = estimate(w, hw, TileConfig(**left["tiles"]))
    console.print(detail_table(r, left["measured"], left["ncu"]))

    t = Table(title="Figure 2, left: GPT-2 medium attention fwd+bwd (b64 h16 N1024 d64)",
              title_justify="left")
    for c in ("", "GFLOPs", "HBM R/W (GB)", "runtime (ms)"):
        t.add_column(c, justify="left" if not c else "right")
    meas = left["measured"] or {}
    ncu_steps = {s.get("impl"): s for s in (left["ncu"] or {}).get("steps", [])}
    for impl, flops, model_bytes in (("standard", r.standard_flops, r.standard_bytes),
                                     ("flashtile", r.tiled_flops, r.tiled_dram_bytes)):
        dram = ncu_steps.get(impl, {}).get("dram")
        ms = meas.get(impl, {}).get("ms")
        t.add_row(f"{impl} (this run{'' if measure else ', model'})", gflop(flops),
                  f"{dram / 1e9:.2f} (model {model_bytes / 1e9:.2f})" if dram
                  else f"model {model_bytes / 1e9:.2f}",
                  f"{ms:.2f}" if ms else ("—" if not meas.get(impl, {}).get("error")
                                          else "error"))
    for name, vals in paper.PAPER_A100.items():
        t.add_row(f"paper, A100: {name}", f"{vals['gflops']}", f"{vals['hbm_gb']}",
                  f"{vals['ms']}")
    for name, vals in paper.H200_ANCHORS.items():
        t.add_row(f"H200 anchor: {name}", "", f"{vals['hbm_gb']}", f"{vals['ms']}")
    console.print(t)
    console.print("  GFLOPs here: executed matmul FLOPs (2 per multiply-add); the paper's column "
                  "counts differently, only its standard/FlashAttention ratio (1.13) compares "
                  f"(ours {r.tiled_flops / r.standard_flops:.2f}: QK^T and dO V^T recomputed).")

    t = Table(title=f"Figure 2, middle: forward block size ({middle['workload']}, BLOCK_N "
                    f"{middle['block_n']})", title_justify="left")
    cols = ["BLOCK_M", "tile loads (model)", "DRAM (model)"]
    if middle["measured"]:
        cols += ["runtime ms", "ncu DRAM", "ncu L2←SM"]
    for c in cols:
        t.add_column(c, justify="right")
    for i, row in enumerate(middle["model"]):
        cells = [str(row["block_m"]), gb(row["tile_loads_fwd"]), gb(row["dram_fwd"])]
        if middle["measured"]:
            m = middle["measured"][i]
            honoured = middle["honoured"] == "honoured"
            cells += [f"{m['ms']:.3f}" if m.get("ms") and honoured else
                      ("error" if m.get("error") else "—"),
                      gb(m.get("ncu_dram")), gb(m.get("ncu_l2"))]
        t.add_row(*cells)
    console.print(t)
    if middle["measured"]:
        status = middle["honoured"]
        console.print("  FLASHTILE_FWD_BLOCK_M/N: " + escape(status)
                      + ("" if status == "honoured" else
                         " — runtime per block size not reported, model only."))
        for m in middle["measured"]:
            if m.get("error"):
                console.print(f"  BLOCK_M {m['block_m']}: " + escape(m["error"][:300]))
            if m.get("ncu_error"):
                console.print(f"  BLOCK_M {m['block_m']} ncu: " + escape(m["ncu_error"][:300]))
    else:
        console.print("  runtime per block size: needs a GPU (--measure); model only.")

    t = Table(title=f"Figure 2, right: block-sparse ({right['workload']})", title_justify="left")
    for c in ("non-zero blocks", "tile loads (model)", "DRAM (model)", "matmul GFLOP",
              "flashtile runtime", "FlexAttention anchor ms"):
        t.add_column(c, justify="right")
    measured = right.get("measured")
    by_density = ({round(r["density"], 2): r for r in measured}
                  if isinstance(measured, list) else {})
    for row in right["model"]:
        anchor = paper.FLEX_BLOCK_SPARSE_MS.get(round(row["density"], 2))
        got = by_density.get(round(row["density"], 2))
        cell = (f"{got['ms']:.3f} ms ({got['ms'] / measured[0]['ms']:.2f}x dense)" if got
                else "needs --measure on a GPU")
        t.add_row(f"{row['density']:.2f}", gb(row["tile_loads"]), gb(row["dram"]),
                  gflop(row["flops"]), cell, f"{anchor:.3f}" if anchor else "")
    console.print(t)
    if isinstance(measured, str):
        console.print("  block-sparse measurement " + escape(measured))

    essay = paper.essay_table()
    fig2["essay"] = essay
    if "pending" in essay:
        console.print("essay table: pending — " + escape(essay["pending"]))
    else:
        t = Table(title="the essay's check: chunked online softmax vs softmax(QK^T)V (fp32 inputs, "
                        "float64 reference)", title_justify="left")
        for c in ("N", "d", "block", "max |err| tiled", "max |err| LSE", "max |err| plain fp32"):
            t.add_column(c, justify="right")
        for row in essay["rows"]:
            t.add_row(str(row["N"]), str(row["d"]), str(row["block"]),
                      f"{row['max_err_tiled']:.2e}", f"{row['max_err_lse']:.2e}",
                      f"{row['max_err_plain_fp32']:.2e}")
        console.print(t)

    if args.out:
        fig2["meta"] = _meta(hw)
        fig2["measured_on_gpu"] = measure
        path = _write_json(args.out, "figure2.json", fig2)
        console.print(f"wrote {path}")
        png = paper.plot_figure2(fig2, os.path.join(args.out, "figure2.png"))
        console.print(f"wrote {png}" if png else "matplotlib missing: no plot")
    return 0
