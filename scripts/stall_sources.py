"""Where in a kernel its warps wait: Nsight Compute's per-instruction stall samples, tabled.

``scripts/stall_table.py`` gives a kernel's stall reasons as averages over all its warps,
and those mislead in a warp-specialised kernel: the warps that only wait for the partitions
to finish (parked on a ``NOP`` after ``BAR.SYNC``, with their registers given back) are
sampled as long ``barrier`` stalls (24-25% of the Gluon forward's samples, session 28) though
they cost nothing. This script reads the SASS source page instead, where each sample is
charged to the instruction a warp was on::

    ncu --profile-from-start off --clock-control none --section SourceCounters \\
        --section WarpStateStats --import-source no -o fwd python3 scripts/pipe_profile.py \\
        --provider flashtile --mode fwd --d 128 --seqlen 512 --causal
    ncu --import fwd.ncu-rep --page source --print-source sass --csv > fwd-sass.csv

then ``python3 scripts/stall_sources.py fwd-sass.csv [--window 150] [--top 20]`` prints, per
file: the stall reasons' shares of the active samples (parked warps apart), the samples of
each window of ``--window`` consecutive instructions (with the most times any of them ran:
the tile loops stand out as the windows that ran most, item-level code as those that ran
once an item) and the ``--top`` instructions by samples with their leading reasons.
``gpu_session.sh stallsrc`` runs all three steps.
"""

from __future__ import annotations

import argparse
import csv
import io
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def _count(text: str) -> int:
    text = (text or "").replace(",", "").strip()
    return int(float(text)) if text else 0


def read(text: str) -> tuple[str, list[dict]]:
    """(kernel name, instructions) of one ``--page source --print-source sass --csv`` export:
    each instruction ``{"sass", "samples", "executed", "stalls": {reason: samples}}`` in
    address order. The first line names the kernel; the second is the header, whose
    ``stall_<reason>`` columns (not the "(Not Issued)" ones) are the samples by reason."""
    rows = list(csv.reader(io.StringIO(text)))
    start = next((i for i, row in enumerate(rows) if "Source" in row and SAMPLES in row), None)
    if start is None:
        raise ValueError(f"no SASS source page found (expected a header with 'Source' and "
                         f"'{SAMPLES}'; export with --page source --print-source sass --csv)")
    kernel = next((row[1] for row in rows[:start] if len(row) > 1 and row[0] == "Kernel Name"),
                  "?")
    header = rows[start]
    reasons = {i: key[len("stall_"):] for i, key in enumerate(header)
               if key.startswith("stall_") and "Not Issued" not in key}
    source, samples, executed = (header.index(k) for k in ("Source", SAMPLES, EXECUTED))
    instructions = []
    for row in rows[start + 1:]:
        if len(row) != len(header):
            continue
        instructions.append({"sass": row[source].strip(), "samples": _count(row[samples]),
                             "executed": _count(row[executed]),
                             "stalls": {r: _count(row[i]) for i, r in reasons.items()}})
    return kernel, instructions


def parked(instruction: dict) -> bool:
    """A warp that only waits for the partitions to end (its samples cost no issue slot):
    Triton parks the warp-specialised region's idle warps on a ``NOP`` after a ``BAR.SYNC``,
    so their samples are ``barrier`` stalls (a padding ``NOP`` that warps pass is not)."""
    stalls = instruction["stalls"]
    return (instruction["sass"].split(" ")[0] == "NOP"
            and 2 * stalls.get("barrier", 0) >= max(instruction["samples"], 1))


def _leading(stalls: dict, total: int, n: int) -> str:
    top = sorted(stalls.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{r} {100 * v / total:.1f}" for r, v in top if v) if total else ""


def report(kernel: str, instructions: list[dict], window: int, top: int) -> str:
    """The markdown report of one kernel (see the module's docstring)."""
    total = sum(i["samples"] for i in instructions)
    idle = sum(i["samples"] for i in instructions if parked(i))
    active = [i for i in instructions if not parked(i)]
    busy = total - idle or 1          # (shares of nothing: no active sample at all)
    reasons: dict[str, int] = {}
    for i in active:
        for r, v in i["stalls"].items():
            reasons[r] = reasons.get(r, 0) + v
    lines = [f"### {kernel}", "",
             f"{len(instructions)} instructions, {total} samples; parked warps {idle} "
             f"({100 * idle / max(total, 1):.1f}%), left out below.", "",
             f"Reasons (% of active samples): {_leading(reasons, busy, 8)}", "",
             "| instructions | % of active samples | most runs | leading reasons (%) |",
             "|---|---|---|---|"]
    for start in range(0, len(instructions), window):
        chunk = [i for i in instructions[start:start + window] if not parked(i)]
        n = sum(i["samples"] for i in chunk)
        if not n:
            continue
        stalls: dict[str, int] = {}
        for i in chunk:
            for r, v in i["stalls"].items():
                stalls[r] = stalls.get(r, 0) + v
        lines.append(f"| {start}-{start + window - 1} | {100 * n / busy:.1f} | "
                     f"{max(i['executed'] for i in chunk)} | {_leading(stalls, busy, 3)} |")
    lines += ["", "| # | instruction | % of active samples | runs | leading reasons (%) |",
              "|---|---|---|---|---|"]
    ranked = sorted(range(len(instructions)), key=lambda k: -instructions[k]["samples"])
    for k in [k for k in ranked if not parked(instructions[k])][:top]:
        i = instructions[k]
        sass = i["sass"][:60]
        if k and "TRYWAIT" in instructions[k - 1]["sass"]:   # an mbarrier wait's retry branch
            sass += f"` after `{instructions[k - 1]['sass'][:60]}"
        lines.append(f"| {k} | `{sass}` | {100 * i['samples'] / busy:.2f} | "
                     f"{i['executed']} | {_leading(i['stalls'], busy, 2)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="+", type=Path, help="ncu SASS source-page CSV exports")
    parser.add_argument("--window", type=int, default=150, help="instructions per window")
    parser.add_argument("--top", type=int, default=20, help="instructions listed by samples")
    args = parser.parse_args()
    failed = False
    for path in args.csv:           # (a file ncu left empty says so, the others still print)
        try:
            kernel, instructions = read(path.read_text())
        except ValueError as error:
            print(f"{path}: {error}")
            failed = True
            continue
        print(f"## {path.name}\n\n{report(kernel, instructions, args.window, args.top)}\n")
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
