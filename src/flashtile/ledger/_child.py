"""``python -m flashtile.ledger._child SPEC.json``: the process that ``flashtile ledger``
re-launches to time a step with forced block sizes or to profile it under Nsight Compute."""

import sys

from .measure import child_main

if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1]))
