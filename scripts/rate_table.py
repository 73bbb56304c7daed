"""Throughput per provider and shape across several bench runs: kernel TFLOP/s (``--kernel-times``,
else do_bench's) of every row of every ``bench-*.json`` under a folder, one column per run folder.

    python3 scripts/rate_table.py OUT/tail

Made for the wave-tail probe (session 36): the same point with ``--nheads`` 32 and 33, where 33
fills the persistent grid's last round exactly (4,224 work items = 32 x 132 SMs) and 32 leaves
it nearly empty (4,096 = 31 x 132 + 4). Equal rates say the last round costs nothing; 33 ahead
by ~3% says a program idles for most of the last round.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def rows(folder: Path) -> dict:
    """{(provider, mode, d, mask, s, b, h): {run folder: TFLOP/s}}."""
    table: dict = {}
    for path in sorted(folder.glob("**/bench-*.json")):
        for row in json.loads(path.read_text())["results"]:
            rate = row.get("kernel_tflops") or row.get("tflops")
            if rate is None:
                continue
            key = (row["provider"], row["mode"], row["d"], "causal" if row["causal"] else "full",
                   row["s"], row["b"], row["h"])
            table.setdefault(key, {})[path.parent.name] = rate
    return table


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", type=Path)
    args = p.parse_args()
    table = rows(args.folder)
    if not table:
        print(f"no bench rows under {args.folder}", file=sys.stderr)
        return 1
    print("| provider | mode | d | mask | s | b x h | TFLOP/s per run | mean |")
    print("|---|---|---|---|---|---|---|---|")
    for key in sorted(table, key=lambda k: (k[1], k[2], k[3], k[4], k[0], k[6])):
        provider, mode, d, mask, s, b, h = key
        runs = table[key]
        cells = " / ".join(f"{runs[r]:.1f}" for r in sorted(runs))
        mean = sum(runs.values()) / len(runs)
        print(f"| {provider} | {mode} | {d} | {mask} | {s} | {b} x {h} | {cells} | {mean:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
