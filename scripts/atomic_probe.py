"""How fast can a fused backward sum dQ with fp32 atomics on this GPU? (issue 7)

The two-pass backward recomputes S and dP in its dQ pass: 3.5x the forward's matmul work
against a one-pass backward's 2.5x. A one-pass backward instead adds every (key tile, query
tile) pair's dQ partial, ``(rows, d)`` fp32, into a global accumulator, and so it is bound by
the rate at which the L2 takes those adds. This probe measures that rate with Triton's
relaxed ``tl.atomic_add`` of ``(rows, d)`` fp32 tiles (values ignored, as ``red``), against a
plain store of the same tiles:

- ``spread``: program p adds its tiles at rows that differ from every other program's at
  each step (a backward whose key-tile programs start at staggered query tiles);
- ``same``: every program adds to the same rows at each step (key-tile programs that all
  start at query tile 0 and walk in lockstep: contention on the same L2 lines);
- ``store``: plain stores of the spread pattern (the write bandwidth, for scale);
- ``tma-spread`` / ``tma-same``: the two patterns as TMA reductions (``desc.atomic_add``:
  ``cp.reduce.async.bulk.tensor`` of the whole tile from shared memory, summed in the L2),
  the path a fused backward takes when its dQ partials leave through shared memory
  (FlashAttention-3's dQ accumulation).

Output: GB/s of fp32 payload per mode, and the one-pass backward's time for the adds at
d=128, seqlen 16k, 16 heads (128 keys per program: 17.2 GB of adds) at that rate.

    python3 scripts/atomic_probe.py [--programs 264] [--steps 256] [--rows 64] [--d 128]
"""
from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl


@triton.jit
def _tile_value(ROWS: tl.constexpr, D: tl.constexpr):
    """The ``(ROWS, D)`` fp32 tile every step adds (its values checked by the tests)."""
    return (tl.arange(0, ROWS)[:, None] + tl.arange(0, D)[None, :]).to(tl.float32) * 1e-3


@triton.jit
def _tile_at(i, n_tiles, SAME: tl.constexpr):
    """Step i's tile: ``same``, every program at tile i; ``spread``, program p at tile
    p + i * programs."""
    if SAME:
        return i % n_tiles
    return (tl.program_id(0) + i * tl.num_programs(0)) % n_tiles


@triton.jit
def _add_tiles(DQ, n_rows, steps, MODE: tl.constexpr, ROWS: tl.constexpr, D: tl.constexpr):
    """``spread`` (MODE 0), ``same`` (1): relaxed atomic adds; ``store`` (2): the spread
    tiles stored."""
    offs_m = tl.arange(0, ROWS)
    offs_d = tl.arange(0, D)
    val = _tile_value(ROWS, D)
    for i in range(steps):
        tile = _tile_at(i, n_rows // ROWS, MODE == 1)
        ptrs = DQ + (tile * ROWS + offs_m)[:, None] * D + offs_d[None, :]
        if MODE == 2:
            tl.store(ptrs, val)
        else:
            tl.atomic_add(ptrs, val, sem="relaxed")


@triton.jit
def _reduce_tiles(desc, n_rows, steps, SAME: tl.constexpr, ROWS: tl.constexpr,
                  D: tl.constexpr):
    """The ``spread`` (``SAME`` false) or ``same`` pattern of :func:`_add_tiles` as TMA
    reductions into the tensor descriptor ``desc`` (``(n_rows, D)`` fp32, blocks
    ``(ROWS, D)``)."""
    val = _tile_value(ROWS, D)
    for i in range(steps):
        desc.atomic_add([_tile_at(i, n_rows // ROWS, SAME) * ROWS, 0], val)


def descriptor(dq: torch.Tensor, rows: int):
    """A host TMA descriptor of ``dq`` ``(n_rows, d)`` in blocks of ``(rows, d)``."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    return TensorDescriptor(dq, list(dq.shape), list(dq.stride()), [rows, dq.shape[1]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=264)
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--d", type=int, default=128)
    args = parser.parse_args()
    n_rows = 16384 * 16          # dQ of 16 heads x 16k rows, fp32: 128 MiB at d=128
    dq = torch.zeros(n_rows, args.d, device="cuda", dtype=torch.float32)
    payload = args.programs * args.steps * args.rows * args.d * 4
    adds_16k = (16384 // 128) * 16384 * 16 * args.d * 4       # one-pass backward's adds
    desc = descriptor(dq, args.rows)
    for name, mode in (("spread", 0), ("same", 1), ("store", 2), ("tma-spread", 3),
                       ("tma-same", 4)):
        def run(mode=mode):
            if mode < 3:
                _add_tiles[(args.programs,)](dq, n_rows, args.steps, MODE=mode,
                                             ROWS=args.rows, D=args.d, num_warps=4)
            else:
                _reduce_tiles[(args.programs,)](desc, n_rows, args.steps, SAME=mode == 4,
                                                ROWS=args.rows, D=args.d, num_warps=4)
        ms = triton.testing.do_bench(run, warmup=25, rep=100)
        rate = payload / ms / 1e6
        print(f"{name:10s}: {ms:8.3f} ms for {payload / 1e9:.2f} GB: {rate:7.0f} GB/s; "
              f"a one-pass backward's adds at 16k/d{args.d}/16 heads: "
              f"{adds_16k / rate / 1e6:6.2f} ms")


if __name__ == "__main__":
    main()
