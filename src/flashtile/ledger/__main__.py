"""``python -m flashtile.ledger``: the same as ``flashtile ledger``."""

import argparse
import sys

from . import __doc__ as _doc
from . import add_arguments, run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="flashtile ledger", description=_doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return int(run(parser.parse_args(argv)) or 0)


if __name__ == "__main__":
    sys.exit(main())
