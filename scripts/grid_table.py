"""Issue 7's grid as a markdown table for docs/perf.md, from a ``flashtile bench --rounds N
--kernel-times`` JSON: one row per (head dim, mask, mode), one column per seqlen, each cell
``call ratio (kernel ratio) [lowest-highest round]`` of the subject against a baseline
(default: flashtile against SDPA-cuDNN), then the count of points at >= 1.0x and the geomeans.

    python3 scripts/grid_table.py docs/results/<call>/bf16/bench-*.json [--base sdpa-cudnn]
    python3 scripts/grid_table.py --lines [--split] bench.json   # one line a point (A/B calls)

A round's ratio compares the two providers' calls of the same round (timed back to back).
``--lines`` prints each point's kernel times (µs; call times where the JSON has no kernel
times), their ratio, the subject's kernel configs and its float64 check, one line a point:
what an A/B call's log shows per variant; ``--split`` adds each round's kernel times by kernel
name (bench JSON from session 41 on); a ``--power`` JSON adds each provider's SM clock,
power and share of samples held by the power cap.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from statistics import geometric_mean


def _seqlen(s: int) -> str:
    return f"{s // 1024}k" if s % 1024 == 0 else str(s)


def dtypes(path: Path) -> list[str]:
    """The dtypes a bench JSON measured, in its order (a table each)."""
    return list(dict.fromkeys(r["dtype"] for r in json.loads(path.read_text())["results"]))


def table(path: Path, subject: str, base: str, dtype: str) -> list[str]:
    """The markdown lines for one dtype of one bench JSON."""
    rows = [r for r in json.loads(path.read_text())["results"] if r["dtype"] == dtype]
    by_key = {(r["provider"], r["d"], r["causal"], r["mode"], r["s"]): r for r in rows
              if r.get("status") == "ok"}
    seqlens = sorted({r["s"] for r in rows})
    groups = sorted({(r["d"], r["causal"], r["mode"]) for r in rows},
                    key=lambda g: (-g[0], g[2] != "fwd", g[1]))
    lines = ["| d | mask | mode | " + " | ".join(_seqlen(s) for s in seqlens) + " |",
             "|---" * (3 + len(seqlens)) + "|"]
    calls, kernels = {}, {}
    for d, causal, mode in groups:
        cells = []
        for s in seqlens:
            ours, theirs = (by_key.get((p, d, causal, mode, s)) for p in (subject, base))
            if ours is None or theirs is None:
                cells.append("—")
                continue
            call = theirs["ms"] / ours["ms"]
            cell = f"{call:.2f}×"
            if ours.get("kernel_ms") and theirs.get("kernel_ms"):
                kern = theirs["kernel_ms"] / ours["kernel_ms"]
                kernels.setdefault(mode, []).append(kern)
                cell += f" ({kern:.2f}×)"
            rounds = [t / o for o, t in zip(ours.get("ms_rounds") or [],
                                            theirs.get("ms_rounds") or [])]
            if len(rounds) > 1:
                cell += f" [{min(rounds):.2f}–{max(rounds):.2f}]"
            calls.setdefault(mode, []).append(call)
            cells.append(cell)
        mask = "causal" if causal else "full"
        lines.append(f"| {d} | {mask} | {mode} | " + " | ".join(cells) + " |")

    lines.append("")
    for mode in calls:
        at_par = sum(x >= 0.995 for x in calls[mode])
        kern = kernels.get(mode, [])
        lines.append(f"- {mode}: {at_par} of {len(calls[mode])} points at >= 1.00x as shown "
                     f"(0.995 and up) by call ({sum(x >= 0.995 for x in kern)} by kernels); "
                     f"geomean by call {geometric_mean(calls[mode]):.3f}"
                     + (f", by kernels {geometric_mean(kern):.3f}" if kern else ""))
    return lines


def _power(row: dict) -> str:
    """``1650 MHz 691 W capped 80%``: a ``--power`` row's clock, power and limited share."""
    return (f"{row['sm_mhz']:.0f} MHz {row['watts']:.0f} W capped "
            f"{100 * row['power_capped']:.0f}%")


def point_lines(path: Path, subject: str, base: str, split: bool = False) -> list[str]:
    """One line per point of ``subject`` in one bench JSON: kernel (or call) times of both
    providers, base over subject, configs and check; with ``split``, under it each round's
    kernel times by name (the JSON's ``kernel_split_rounds``), both providers."""
    rows = [r for r in json.loads(path.read_text())["results"] if r.get("status") == "ok"]
    key = lambda r: (r["d"], r["causal"], r["mode"], r["s"], r["dtype"])  # noqa: E731
    theirs = {key(r): r for r in rows if r["provider"] == base}
    lines = []
    for ours in (r for r in rows if r["provider"] == subject):
        other = theirs.get(key(ours))
        field = "kernel_ms" if ours.get("kernel_ms") and other and other.get("kernel_ms") \
            else "ms"
        mask = "causal" if ours["causal"] else "full"
        line = (f"d={ours['d']:<3} {mask:<6} {ours['mode']:<6} s={_seqlen(ours['s']):<4} "
                f"{ours['dtype']} {subject} {ours[field] * 1e3:8.1f} us")
        if other is not None:
            line += (f"  {base} {other[field] * 1e3:8.1f} us  ratio "
                     f"{other[field] / ours[field]:.3f}")
        check = (ours.get("check") or {}).get("status", "-")
        line += f"  ({field}) {ours.get('configs') or {}} check {check}"
        if ours.get("sm_mhz") is not None:          # (--power)
            line += f"  {subject} {_power(ours)}"
            if other is not None and other.get("sm_mhz") is not None:
                line += f", {base} {_power(other)}"
        lines.append(line)
        for row in (ours, other) if split else ():
            for i, parts in enumerate((row or {}).get("kernel_split_rounds") or []):
                lines.append(f"    {row['provider']} round {i + 1}: " + ", ".join(
                    f"{name} {ms * 1e3:.1f} us" for name, ms in parts.items()))
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("json", nargs="+", type=Path)
    p.add_argument("--subject", default="flashtile")
    p.add_argument("--base", default="sdpa-cudnn")
    p.add_argument("--lines", action="store_true",
                   help="one line a point (kernel times, ratio, configs, check), no table")
    p.add_argument("--split", action="store_true",
                   help="with --lines: each round's kernel times by kernel name under a point")
    args = p.parse_args()
    for path in args.json:
        if args.lines:
            print("\n".join(point_lines(path, args.subject, args.base, args.split)))
            continue
        for dtype in dtypes(path):
            print(f"{path}, {dtype}:\n")
            print("\n".join(table(path, args.subject, args.base, dtype)))
            print()


if __name__ == "__main__":
    main()
