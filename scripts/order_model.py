"""A model of the causal Gluon kernels' work-item orders (``fwd_hopper._work_tile``): the HBM
bytes an order costs through an LRU L2, and when its last item ends, in tile units.

Each item is query tile t of a (batch, head) pair (the forward; the dK/dV kernels' key items
are the same shape): it reads the pair's K/V tiles 0..t and streams its Q in and O out, and
takes t + 1 tile times. A persistent grid (``--programs`` fewer than the items) gives program
p the items p, p + P, ... in the kernel's order, odd rounds reversed (the snake); one program
per item (``--dynamic``) starts each item, in order, on the first free SM. GROUP as in the
kernel: 1 (chunks of 1), G > 1 (chunks of G tiles), -W (windows of W pairs). The L2 is a
plain LRU over 64 KB tiles: a model of reuse distance, not of the hardware's policy.

    python3 scripts/order_model.py --pairs 512 --tiles 4 --groups 1,8,-64,-66
    python3 scripts/order_model.py --pairs 256 --tiles 8 --groups 1,8,-33 --dynamic

Session 40 (docs/perf.md) made the windows' rule from it.
"""

from __future__ import annotations

import argparse
import heapq
from collections import OrderedDict


def work_tile(w: int, n_work: int, n_tiles: int, programs: int, group: int) -> tuple[int, int]:
    """(query tile, pair) of item ``w``: ``fwd_hopper._work_tile``'s causal forward order."""
    n_bh = n_work // n_tiles
    if (w // programs) % 2 == 1:                     # odd rounds reversed
        base = w - w % programs
        w = base + min(n_work - base, programs) - 1 - w % programs
    if group > 1:
        chunk = w // (n_bh * group)
        width = min(n_tiles - chunk * group, group)
        rest = w - chunk * n_bh * group
        tile, bh = chunk * group + rest % width, rest // width
    elif group < 0:
        per = -group * n_tiles
        window = w // per
        heads = min(n_bh + group * window, -group)
        rest = w - window * per
        tile, bh = rest // heads, rest % heads - group * window
    else:
        tile, bh = w // n_bh, w % n_bh
    return n_tiles - 1 - tile, bh


class L2:
    """An LRU cache counting the bytes it misses."""

    def __init__(self, capacity: int):
        self.capacity, self.size, self.missed = capacity, 0, 0
        self.lines: OrderedDict = OrderedDict()

    def touch(self, key, nbytes: int) -> None:
        if key in self.lines:
            self.lines.move_to_end(key)
            return
        self.missed += nbytes
        self.lines[key] = nbytes
        self.size += nbytes
        while self.size > self.capacity:
            self.size -= self.lines.popitem(last=False)[1]


def simulate(pairs: int, n_tiles: int, group: int, programs: int, dynamic: bool,
             l2_bytes: int, tile_bytes: int) -> tuple[float, float]:
    """(MB missed in the L2, span in tile times) of one order."""
    n_work = pairs * n_tiles
    cache = L2(l2_bytes)

    def run(w: int) -> int:
        tile, bh = work_tile(w, n_work, n_tiles, n_work if dynamic else programs, group)
        cache.touch(("q/o", bh, tile), tile_bytes)
        for j in range(tile + 1):
            cache.touch(("k/v", bh, j), tile_bytes)
        return tile + 1

    if dynamic:
        free = [0] * programs
        for w in range(n_work):
            start = heapq.heappop(free)
            heapq.heappush(free, start + run(w))
        return cache.missed / 2**20, max(free)
    events = [(0, p, 0) for p in range(min(programs, n_work))]
    span = 0
    while events:
        start, p, k = heapq.heappop(events)
        w = p + k * programs
        if w >= n_work:
            span = max(span, start)
            continue
        heapq.heappush(events, (start + run(w), p, k + 1))
    return cache.missed / 2**20, span


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=512,
                   help="(batch, head) pairs (512: d=128 at 16k tokens, 512 keys)")
    p.add_argument("--tiles", type=int, default=4, help="items per pair")
    p.add_argument("--groups", default="1,8,-64,-66", help="GROUP values, comma-separated")
    p.add_argument("--programs", type=int, default=132, help="persistent programs (SMs)")
    p.add_argument("--dynamic", action="store_true", help="one program per item instead")
    p.add_argument("--l2-mb", type=int, default=50)
    p.add_argument("--tile-kb", type=int, default=64, help="one K+V (and one Q+O) tile")
    args = p.parse_args()
    print(f"{args.pairs} pairs x {args.tiles} items, "
          f"{'one program per item on' if args.dynamic else 'a persistent grid of'} "
          f"{args.programs}, L2 {args.l2_mb} MB, tiles {args.tile_kb} KB")
    for group in (int(g) for g in args.groups.split(",")):
        missed, span = simulate(args.pairs, args.tiles, group, args.programs, args.dynamic,
                                args.l2_mb << 20, args.tile_kb << 10)
        print(f"  GROUP {group:5d}: HBM {missed:7.1f} MB, span {span:6.1f} tile times")


if __name__ == "__main__":
    main()
