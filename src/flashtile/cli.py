"""The ``flashtile`` command: ``flashtile bench`` and ``flashtile ledger``.

Each subcommand lives in its own module, which provides ``add_arguments(parser)`` and
``run(args) -> int``; this file only wires them together.
"""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    from .bench import cli as bench_cli
    from . import ledger as ledger_cli

    parser = argparse.ArgumentParser(prog="flashtile", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser("bench", help="check and time flashtile against other attention "
                                         "implementations", description=bench_cli.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    bench_cli.add_arguments(bench)
    bench.set_defaults(run=bench_cli.run)
    ledger = sub.add_parser("ledger", help="FLOPs, HBM traffic and memory of standard vs tiled "
                                           "attention", description=ledger_cli.__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    ledger_cli.add_arguments(ledger)
    ledger.set_defaults(run=ledger_cli.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
