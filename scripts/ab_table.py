"""The table of an A/B run (``scripts/gpu_session.sh ab``): each point's time per variant and
round, and each variant's mean over main's.

    python3 scripts/ab_table.py OUT/ab [--wall | --kernel NAME | --split]

``OUT/ab`` holds one folder per run, ``<round>-<variant>`` (``main``, a branch tree's name or
``env-...``), each with the bench's JSON. Times are the kernels' profiler sums where the runs
recorded them (``--kernel-times``: the host cannot stretch them), else do_bench's; ``--wall``
always reads do_bench's; ``--kernel NAME`` the kernels whose names contain NAME alone (their
per-round split: a change to one kernel is not lost in the others' noise, and a side effect
on another shows up; session 53's preprocess did so); ``--split`` each variant's ratio to
main for every kernel of the split at once (``gpu_session.sh ab`` prints it after the sums).
The warm-up run (folder ``warm``) is left out.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path


def timed_rows(folder: Path) -> list[tuple[str, tuple, dict]]:
    """(variant, point, row) of each of flashtile's timed rows in the runs under ``folder``
    (the warm-up left out), each JSON read once."""
    out = []
    for path in sorted(folder.glob("*/bench-*.json")):
        match = re.fullmatch(r"(\d+)-(.+)", path.parent.name)
        if match is None:
            continue
        for row in json.loads(path.read_text())["results"]:
            if row.get("provider") != "flashtile" or row.get("ms") is None:
                continue
            point = (row["mode"], row["d"], "causal" if row["causal"] else "full", row["s"],
                     row["dtype"])
            out.append((match.group(2), point, row))
    return out


def load(rows: list, wall: bool, kernel: str | None = None) -> tuple[dict, str]:
    """{variant: {point: [µs per round, in round order]}} of :func:`timed_rows` and the kind
    of time read (``kernel``: the split's kernels whose names contain it, summed, each of the
    run's rounds a time)."""
    runs: dict = {}
    kind = "do_bench"
    for variant, point, row in rows:
        if kernel is not None:
            kind = f"kernels named *{kernel}*"
            for split in row.get("kernel_split_rounds") or ():
                times = [ms for name, ms in split.items() if kernel in name]
                if times:
                    runs.setdefault(variant, {}).setdefault(point, []).append(sum(times) * 1e3)
            continue
        kernel_sums = not wall and row.get("kernel_ms") is not None
        ms = row["kernel_ms"] if kernel_sums else row["ms"]
        kind = "kernel sums" if kernel_sums else kind
        runs.setdefault(variant, {}).setdefault(point, []).append(ms * 1e3)
    return runs, kind


def short(name: str) -> str:
    """A kernel's name without its return type, template and argument lists."""
    name = re.sub(r"^void ", "", name)
    return re.split(r"[<(]", name, maxsplit=1)[0].split("::")[-1][:32]


def _mean(times: list[float]) -> float:
    return sum(times) / len(times)


def print_split(rows: list) -> None:
    """Per variant, its mean over main's for every kernel of the split (mean µs of main in
    brackets), a row per point of any kernel; nothing where no run recorded a split."""
    # {kernel: {variant: {point: [µs per round]}}}, by short name (one kernel's instances for
    # each dtype are one column), in order of appearance
    tables: dict = {}
    for variant, point, row in rows:
        for split in row.get("kernel_split_rounds") or ():
            by_name: dict = {}
            for name, ms in split.items():
                key = short(name)
                by_name[key] = by_name.get(key, 0.0) + ms * 1e3
            for name, us in by_name.items():
                tables.setdefault(name, {}).setdefault(variant, {}).setdefault(point, []).append(us)
    names = list(tables)
    # (every point and variant of any kernel: a point that lacks the first kernel, say d=128's
    # rows kernel beside d=64's transposed one, keeps its row; session 54 lost them)
    variants = [v for v in dict.fromkeys(v for t in tables.values() for v in t) if v != "main"]
    points = list(dict.fromkeys(p for t in tables.values() for p in t.get("main", {})))
    for variant in variants:
        print(f"per kernel: {variant} / main (main's mean µs in brackets)")
        print("| point | " + " | ".join(names) + " |")
        print("|" + "---|" * (len(names) + 1))
        for point in points:
            cells = []
            for name in names:
                base = tables[name].get("main", {}).get(point)
                times = tables[name].get(variant, {}).get(point)
                cells.append(f"{_mean(times) / _mean(base):.3f} ({_mean(base):.1f})"
                             if base and times else "-")
            print("| {} d={} {} {} {} | ".format(*point) + " | ".join(cells) + " |")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", type=Path)
    how = p.add_mutually_exclusive_group()
    how.add_argument("--wall", action="store_true", help="do_bench's times even where kernel "
                                                         "sums were recorded")
    how.add_argument("--kernel", metavar="NAME",
                     help="only the kernels whose names contain NAME (from --kernel-times)")
    how.add_argument("--split", action="store_true",
                     help="each variant's ratio to main per kernel of the split")
    args = p.parse_args()
    rows = timed_rows(args.folder)
    if args.split:
        print_split(rows)
        return 0
    runs, kind = load(rows, args.wall, args.kernel)
    if "main" not in runs:
        print(f"no main runs under {args.folder}", file=sys.stderr)
        return 1
    others = [v for v in runs if v != "main"]
    print(f"flashtile, µs ({kind}) per round; mean of each variant over main's")
    header = ["point", "main", *others, *(f"{v} / main" for v in others)]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for point, base in runs["main"].items():
        name = "{} d={} {} {} {}".format(*point)
        cells = [" / ".join(f"{t:.1f}" for t in base)]
        ratios = []
        for variant in others:
            times = runs[variant].get(point, [])
            cells.append(" / ".join(f"{t:.1f}" for t in times) or "-")
            ratios.append(f"{_mean(times) / _mean(base):.3f}" if times else "-")
        print("| " + " | ".join([name, *cells, *ratios]) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
