"""Where the warps of each profiled kernel wait: a table from Nsight Compute's raw CSV.

Nsight Compute samples, per issued instruction, how many cycles the warps spent stalled and
why (``smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio``). For a kernel
that is neither at the tensor cores' nor at HBM's limit, the leading reason names what to
change: ``barrier``/``long_scoreboard`` (waiting on a named barrier or a global load),
``wait`` (a fixed-latency dependency), ``math_pipe_throttle`` (a pipe such as the MUFU is
full), ``mio_throttle``/``short_scoreboard`` (shared memory), ``sleeping`` (mbarrier try-wait
back-off), ``selected`` (the cycle it issued). Make the CSV with (one step of one provider,
``scripts/pipe_profile.py``)::

    ncu --profile-from-start off --clock-control none --section SpeedOfLight \\
        --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio \\
        --csv --page raw python3 scripts/pipe_profile.py --provider flashtile --mode fwd \\
        --d 64 --seqlen 4096 > flashtile.csv

then ``python3 scripts/stall_table.py flashtile.csv cudnn.csv [--top 8]``: per kernel of at
least ``--min-us`` µs, its time and its leading stall reasons (cycles per issued
instruction, the sum of all reasons last). ``gpu_session.sh stalls`` runs both steps.
In a warp-specialised kernel these averages include the warps parked until the region ends
(a quarter of the Gluon forward's samples, as ``barrier``): ``scripts/stall_sources.py``
sets them apart and says where in the SASS the others wait.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
from pathlib import Path

STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio")
TIME = "gpu__time_duration.sum"


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


UNIT_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}


def read(text: str) -> list[dict]:
    """The kernels of one ``ncu --csv --page raw`` output: ``[{"kernel", "us", "stalls":
    {reason: cycles per issued instruction}}]``. Lines before the CSV header (``==PROF==``
    messages, the profiled script's own prints) are skipped; the units row under the header
    gives the time column's unit."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no ncu raw CSV found (expected a header line starting with \"ID\"; "
                         "run ncu with --csv --page raw)")
    header, *rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    name_col = next((header.index(k) for k in ("Kernel Name", "Function Name") if k in header),
                    None)
    if name_col is None:
        raise ValueError("the ncu CSV has no 'Kernel Name' column")
    time_col = header.index(TIME) if TIME in header else None
    stall_cols = {i: m.group(1) for i, key in enumerate(header) if (m := STALL.fullmatch(key))}
    scale = 1e-3                                                  # ncu's default unit: ns
    if rows and not rows[0][0].strip() and time_col is not None:  # the units row
        scale = UNIT_US.get(rows[0][time_col].strip().lower(), scale)
    kernels = []
    for row in rows:
        if len(row) != len(header) or not row[0].strip().isdigit():
            continue                                              # units, or a stray print
        time = _number(row[time_col]) if time_col is not None else None
        stalls = {reason: value for i, reason in stall_cols.items()
                  if (value := _number(row[i])) is not None}
        kernels.append({"kernel": row[name_col], "us": None if time is None else time * scale,
                        "stalls": stalls})
    return kernels


def table(kernels: list[dict], label: str, top: int, min_us: float) -> list[str]:
    """Markdown rows, one per kernel of at least ``min_us`` µs (or of unknown time): its name
    without arguments, µs, its ``top`` stall reasons by cycles per issued instruction, and
    the sum over all reasons."""
    out = []
    for k in kernels:
        if k["us"] is not None and k["us"] < min_us:
            continue
        ranked = sorted(k["stalls"].items(), key=lambda kv: -kv[1])
        total = sum(k["stalls"].values())
        lead = ", ".join(f"{reason} {value:.2f}" for reason, value in ranked[:top])
        name = re.sub(r"\(.*", "", k["kernel"])[:60]
        us = "?" if k["us"] is None else f"{k['us']:.1f}"
        out.append(f"| {label} | {name} | {us} | {lead} | {total:.2f} |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csvs", nargs="+", type=Path, help="ncu --csv --page raw outputs")
    parser.add_argument("--top", type=int, default=6, help="stall reasons shown per kernel")
    parser.add_argument("--min-us", type=float, default=5.0,
                        help="leave out kernels shorter than this (µs)")
    args = parser.parse_args()
    print("| file | kernel | µs | leading stalls (cycles per issued instruction) | all |")
    print("|---|---|---|---|---|")
    for path in args.csvs:
        text = path.read_text(errors="replace")
        try:
            kernels = read(text)
        except ValueError as err:
            print(f"| {path.name} | ({err}) | | | |")
            continue
        for line in table(kernels, path.stem, args.top, args.min_us):
            print(line)


if __name__ == "__main__":
    main()
