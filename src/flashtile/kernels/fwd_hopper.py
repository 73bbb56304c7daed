"""Hopper forward in Gluon: FlashAttention-3's warp-specialised schedule with asynchronous wgmma.

Computes ``out`` ``(b, sq, hq, d)`` and ``lse`` float32 ``(b, hq, sq)`` (natural log) as the
tile-level forward (:mod:`.fwd`) does, so the backward is shared, but states the schedule that
:mod:`.fwd` leaves to Triton. It covers the dense hot path: sm_90, fp16/bf16, d = dv in {64, 96,
128, 256}, no dropout, bias, softcap, ALiBi, window or mods, lengths that are multiples of the
tile, causal only with ``seqlen_q == seqlen_k``, ``softmax_scale`` > 0, q/k/v whose (batch,
seqlen) and (heads, d) axes each fold into one (the usual contiguous ``(b, s, h, d)``).
``FLASHTILE_GLUON_FWD`` unset or ``auto`` runs the cases of :data:`AHEAD` (d=64 causal from
:data:`CAUSAL_AHEAD_FROM` keys on), ``1`` every covered call, ``0`` none; :func:`supports`
decides, other calls run :mod:`.fwd`.

Notation:

- work item: ``2 * BLOCK_M`` query rows of one (batch, head); by default a program per SM takes
  items ``program_id``, ``+ num_programs``, ... through one ring, so that an epilogue overlaps the
  next loads (:func:`programs`; ``FLASHTILE_GLUON_FWD_PERSISTENT=0``: a program per item);
- ``BLOCK_M`` (64 rows per consumer), ``BLOCK_N`` (keys per tile), ``NUM_STAGES``,
  ``CONSUMER_REGS``: :data:`_CONFIGS`; ``HEAD_D``, ``HEAD_D2``: the head dim's parts
  (:func:`head_parts`: 64 + 32 at d=96, else d + 0; ``*_desc2``, ``*_smem2``, ``acc2``: the
  second's); ``CAUSAL``; ``GROUP``: tiles per chunk of the causal order (:func:`causal_group`;
  below 0, chunks of 1 in windows of -GROUP heads: :func:`causal_window`);
- ``P_REGS`` (:func:`p_in_registers`): P in registers as P V's A operand, else in two shared P
  buffers per consumer (d=256: O's 128 registers leave no room); ``EARLY_S1`` (:func:`early_s1`):
  S_1 before an item's first softmax, P buffers only; ``NEXT_S0`` (:func:`next_s0`): S_0 before
  the previous item's epilogue (``HALF_DIAG``, :func:`half_diagonal`: the first consumer's
  diagonal tile over its first BLOCK_N / 2 keys, opt-in); ``O_IN_P``, ``O_IN_Q``
  (:func:`o_in_p`, :func:`o_in_q`): O leaves through the consumer's second P buffer or its Q
  tile (neither: O tiles of its own);
- the *loader* (one warp, 24 registers, :func:`_load_works`) streams K/V tiles by TMA into the
  *ring*; two *consumers* (a warpgroup each, ``HALF`` 0/1, :func:`_consume`) own BLOCK_M rows each
  and both read every slot; per slot ``k_ready``, ``v_ready`` (S may start before V lands) and
  ``k_empty``, ``v_empty`` (count 2: both consumers); ``q_bar`` per Q tile;
- ``m_i`` row max (log2 domain, scaled), ``l_i`` row sum, ``alpha`` discount, ``acc`` O (fp32).

Schedule (a consumer, per item), then the constraints that shape the code:

1. Wait for Q; issue S_0 and wait for it before O's zeros exist (:func:`_start`): an ordinary
   write to an accumulator while a wgmma is in flight makes ptxas serialise every wgmma (C7515).
2. Per tile j, P in registers (FA3's order, :func:`_rs_products`, :func:`_rs_softmax`): issue
   S_{j+1}, issue P_j V_j, wait for S_{j+1} alone and free K_{j+1}, softmax into P_{j+1} while
   P_j V_j computes, wait for P_j V_j, free V_j, discount O. With P buffers (d=256, or
   ``FLASHTILE_GLUON_FWD_P_REGS=0``): issue P_j V_j, wait for S_{j+1}, softmax into the other
   buffer, issue S_{j+2}, wait for P_j V_j alone and discount O while S_{j+2} computes.
3. O = acc / l leaves by TMA, not waited for (the next epilogue or the kernel's end waits), LSE =
   m + log l (:func:`_write_out`). The next item's Q loads once the last S has read this one.

- K and V are freed apart (:func:`_load_kv_ring`): with one "empty" barrier per slot two slots
  hung (S_{j+2} needs K_{j+2} in slot j, whose V_j the unfinished P_j V_j still reads).
- ``anchor``: the row sums are stored before the wait for P V only to hold the softmax above it;
  otherwise ptxas hoists the wait to just after the row max and nothing overlaps.
- P in registers in session 9's order made ptxas serialise every wgmma (C7512); FA3's does not.
- :func:`_consume_in_turn`'s tile loop runs two tiles a trip at whole head dims
  (:func:`_rs_tiles`): P_j and P_{j+1} alternate register sets, so half of the moves of P
  into the A operand's registers go (at d=64, where the issue slots ran at 88% of the tensor
  time).
- Where O leaves is set by shared memory (:data:`SHARED_BYTES`, one CTA an SM): d=128 at 128 keys x
  2 slots with P buffers takes 256 KB with O apart, 224 KB through P (free from an item's last
  P V to the next item's second softmax: :func:`_first_softmax` waits for the store); at d=256
  (two Q tiles alone 64 KB) 64 keys x 2 slots is the widest tile: 224 KB with O through Q,
  288 KB apart (a 64-key P buffer cannot hold O), and the next Q loads only once O has left.
- ``NEXT_S0`` (:func:`_consume_ahead`, two Q tiles per consumer): S_0 is issued and waited for
  in one turn (in flight across the back edge every wgmma was serialised, C7511/C7517); O is
  normalised in its own turn and stored under the next S_0 (ptxas waits for all wgmma in flight
  before a use of registers that a wgmma wrote in an earlier turn).
- Causal order (:func:`_work_tile`): heaviest first, odd rounds of a persistent grid reversed
  ("snake"), in chunks of GROUP tiles per head so that concurrent programs share K/V in L2. A
  consumer reads only the tiles its rows reach (:func:`_own_tiles`); a slot it skips is released
  after its load lands (:func:`_pass_slot`: an earlier arrival counts for the previous load).
- d=96: shapes are powers of two and padding to 128 costs a third more MACs, so two parts with
  tiles and TMA descriptors of their own over one folded view (the second from column
  ``h * 96 + 64``), S summed over both (chained wgmma), two O accumulators; one register P feeds
  both products (its layout does not depend on the output's width). Each wgmma is a commit group,
  so waits leave two in flight, not one. ``HEAD_D2`` = 0 compiles to the same PTX as before.
- The scale is one FFMA in each score's exponent, the row max taken before scaling
  (:func:`_softmax_tile`): hence ``softmax_scale`` > 0.

Measured (H200; "time": kernel time, else throughput against the alternative):

- P in shared memory, none serialised: d=128 -3% to +10%, d=64 unmasked ahead at 7 of 8 points,
  d=64 causal -3% to -23% (session 11);
- both products overlapped: +2% to +6% unmasked, -3% to +1% causal (session 12);
- persistent grid: +19% to +40% at 512, -1% to +5% at 8k/16k (session 12); causal against one
  program per item, time 0.83-0.98x at 2k-8k (d=64) and 512-8k (d=128), level at 16k
  (session 36); its last round, part empty (4,096 items = 31 x 132 + 4), costs ~1.4% of
  the forward, as much as cuDNN's (session 36: 33 heads against 32), so it is not split;
- snake order: without it the persistent causal forward lost 2-8% at 8k/16k (session 12);
- causal chunks of 8: +1% to +12% at d=128; of 1 up to :data:`SINGLE_UPTO` (sessions 13, 15);
  on the H100 at 512 keys chunks of 8 -23% (d=128) and -31% (d=256) time (session 40);
  chunks of 1 in windows (:func:`.common.causal_window`): d=128 causal 512 -31% (session 41),
  d=64 causal 2k -4% to -7% against chunks of 8, level at 4k (H100, session 42);
- d=64 causal here with the windows, against :mod:`.fwd` (H100, session 42): time 1.14-1.30x
  at 512, 1.02-1.08x at 1k (without windows 1.30x / 1.19x), so :data:`CAUSAL_AHEAD_FROM` stays;
- 128 keys x 2 slots at d=128: +8% to +21% unmasked, +1% to +7.5% causal; at d=64 the same
  change -4.5% to +1% (session 14);
- :data:`_NARROW` at d=128 causal: time 0.89-1.00x up to 1k, 1.05-1.09x at 2k-16k (session 18);
  0.96x at 512, 1.04x at 1k, 1.07x at 2k (session 37: now up to 512 keys only);
- ``EARLY_S1``: time -1% to -5.5%, +1% to +2% at d=128 unmasked (session 17); d=96/256 spill;
- d=256 here: time 0.61-0.77x of :mod:`.fwd`'s; d=96 in two parts: +18% to +50% (session 19);
- P in registers: time -2.8% to -9.2% at d=64/128 (session 21), -1% to -11% at d=96 (session 22);
- d=64 causal with P in registers: still 4-14% slower than :mod:`.fwd` (session 22);
- the scale in the exponent: time -1% to -6% at d=64/128 1k/4k, both masks (session 26); after
  it d=64 causal here is 0.94-0.98x :mod:`.fwd`'s time at 2k-16k, 1.03-1.09x at 512/1k;
- own tiles per consumer (causal): time -2% to -5% at d=128 512/1k and d=256 (session 24);
- ``NEXT_S0``: time -0.6% to -3.4% at d=128 causal, +0.3% to +1.7% unmasked (session 24);
- the in-turn loop two tiles a trip: time -1.0% / -2.5% / -2.6% at d=64 unmasked 1k / 4k /
  16k, -1.1% at d=128 unmasked 4k and 16k (session 26; at d=128 with 28 B of item-level
  spills outside the tile loops, which one tile a trip did not have);
- d=128 causal 512: neither tensor- nor HBM-bound; per-item latencies remain (Nsight, session 24);
- one in 8 or one in 4 of P's exponentials by a cubic on the FMA pipes (FA4's device): time
  -0.3% to +3% / +1% to +6% at d=64 (session 26; session 13, P in shared memory: -14% to +5%);
  removed, kept as ``docs/experiments/fwd-exp-emu-s25.patch`` (on 1990fba);
- causal, the tiles below the diagonal in a loop without the mask (-25% to -30% instructions
  a tile): time level, 0.95-1.01x (session 27): the issue slots do not bind; kept as
  ``docs/experiments/causal-split-s26.patch`` (on e19f886);
- three consumers at d=64 (192-row items, 64-key tiles): time -2% to +16%, slower at 4 of 6
  points (session 27); kept as ``docs/experiments/fwd-three-consumers-s25.patch`` (on 261084f);
  with FA3's 128-key tiles (4 slots): time 1.62-1.83x at 2k-16k, both masks (H200, session 55):
  Triton gives each warpgroup one register count and the loader's warp a warpgroup of its
  own, so the second and third consumer get 160 and spill 61 of 514 instructions a tile
  (``docs/experiments/fwd-three-consumers-s55.patch``, on 9b42472);
- row max and sum as trees (halved inside each thread first): time +2% to +8% at 10 of 16
  points (session 28); K one tile ahead of V in the loader: -3% to +3.5%, +3.5% at d=128
  causal 512 (session 28); FA3's ping-pong through named barriers (inline ``bar.sync`` /
  ``bar.arrive``, unmasked): level, geomean 0.994 (session 28); 64-key tiles at d=64 causal:
  level with the tile-level forward at 512, 2-10% slower at 1k/2k (session 28); kept as
  ``docs/experiments/fwd-{row-reduce-tree,k-ahead-of-v,pingpong}-s28.patch``;
- P's row sums by wgmma (P 1 against a tile of ones, N = 8; 618 -> 554 instructions a d=64
  causal tile offline), alone and with one in 8 exp2 on the FMA pipes: wrong on the in-turn
  and d=128 causal paths, +10% to +15% time at d=64 causal 2k/16k where right (session 43,
  H100); removed, kept as ``docs/experiments/fwd-rowsum-mma-s42.patch`` (on b9a4e0e);
- offline (``scripts/inspect_kernels.py --gluon``, the 128-key defaults and d=256): none
  serialised, no spills in the tile loops;
- ping-pong consumers (turns at the tensor cores): 2-30% slower, session 9 (dropped);
- one 8-warp ``pipelined`` partition issuing its own loads: 6-20% slower, session 10 (removed);
- a third 128-key slot (``FLASHTILE_GLUON_FWD_CONFIG=64,128,3,240``): time -2% to +5%, session 22
  (not taken); at d=96 -1.4% to +3.5%, and 64-key tiles x 4 or 6 slots +10% to +17% except
  causal 1k (session 29);
- setmaxnreg 168-248, 16- to 128-key tiles, issue orders, no O rescale: no cure for session 9's
  serialisation (offline).

Details, commands and raw data: docs/perf.md.
"""
from __future__ import annotations

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_init, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.runtime.jit import constexpr_function

from . import plans
from .common import (GLUON_SWITCHES, causal_window, env_forced, getenv, gluon_switch,
                     gluon_switch_on, is_sm90, sm_count)

LOG2E = 1.4426950408889634

# (head dim) -> (rows per consumer, keys per tile, ring slots, consumer registers)
# (measured, session 9: d=128 at 64 keys x 4 slots beat 128 keys x 2 slots by 9-14%, but every
# wgmma was serialised then; session 14, with K and V freed apart: 128 keys x 2 slots +8% to
# +21% unmasked and +1% to +7.5% causal at 1k/4k/16k; d=64 at 128 keys x 4 slots beat 64
# keys by 9-10%)
# (session 11 again: at d=64, 64 keys x 4 or 6 slots 15-25% slower, 128 x 3 slots 5-10%)
# d=256 (session 19; the 32-key configs unmeasured): 64 keys x 2 slots with O
# through Q (:func:`o_in_q`; 224 KB), the widest tile that fits (128 keys x 2 slots: 256 KB of
# K/V alone); 32 keys x 2/3/4 slots also compile clean offline (no spills, none serialised)
# d=96 (split 64 + 32, :func:`head_parts`; session 19, the 64-key configs unmeasured): 128
# keys x 2 slots with O apart (208 KB), d=128's shape; offline also clean: 64 keys x 4/5/6
# slots (176/200/224 KB, O apart), x 7 (O through Q), 32 keys x 8 slots
# With P in registers (no P buffers): 128 keys x 3 slots compile clean at d=128 (O through
# Q, 225 KB) and d=96 (O apart, 193 KB); measured (session 22, two rounds, kernel sums against
# 2 slots): d=128 +0% to +5% (causal 1k -2%), d=96 -1% to -2% unmasked, -5% to +4% causal
_CONFIGS = {64: (64, 128, 4, 240), 96: (64, 128, 2, 240), 128: (64, 128, 2, 240),
            256: (64, 64, 2, 240)}
# d=128 with key lengths that are multiples of 64 but not of 128, and d=128 causal up to
# NARROW_CAUSAL_UPTO keys: 64 keys x 4 slots
_NARROW = {128: (64, 64, 4, 240)}
# Kernel time of the narrow config over the wide one at d=128 causal (session 18, H200,
# profiler sums of two alternating runs per call): bf16 0.95x and 0.97x at 1k (two calls),
# 1.00x at 512, then 1.05x / 1.05x / 1.09x / 1.08x at 2k / 4k / 8k / 16k; fp16 0.89x at 512,
# 0.99x at 1k. Again after P in registers, own tiles, S_0 ahead and the scale in the exponent
# (session 37, bf16, three alternating rounds): 0.96x at 512, 1.04x at 1k, 1.07x at 2k, so
# the narrow tiles stay at 512 keys only.
NARROW_CAUSAL_UPTO = 512
# (head dim, causal) where it runs by default: measured ahead of the tile-level forward
# (d=256, session 19: kernel time 0.61-0.77x the tile-level forward's at 1k-16k, both masks;
# d=96, session 19: +18% to +50% TFLOP/s at 1k-16k, both masks, one round)
AHEAD = frozenset({(64, False), (64, True), (96, False), (96, True), (128, False),
                   (128, True), (256, False), (256, True)})
# Key lengths from which a causal case of AHEAD runs here, by head dim (others: any). d=64
# causal, kernel time against the tile-level forward's (session 26, H200, bf16, profiler sums,
# both with the scale in the exponent): 1.09x at 512, 1.03x at 1k, then 0.97x / 0.94x / 0.97x
# / 0.98x at 2k / 4k / 8k / 16k. With the causal windows (session 42, H100, two rounds):
# 1.14-1.30x at 512, 1.02-1.08x at 1k; the one in chunks of 1 within windows at 2k 0.94-0.96x
# the chunks of 8 that ran there.
CAUSAL_AHEAD_FROM = {64: 2048}
# Key lengths up to which the unmasked forward issues each item's S_0 ahead (NEXT_S0, see
# next_s0), by head dim: d=64 512, kernel sums -6.3% (session 43, H100, bf16, two alternating
# rounds: 198.3 / 197.9 -> 185.9 / 185.2 us); at 1k level (1.001x), d=128 512 / 1k level
# (0.999x / 1.015x).
NEXT_S0_UNMASKED_UPTO = {64: 512}


@constexpr_function
def mma_layouts(warps, n_scores, n_out):
    """The register layouts of this module's products over ``warps`` warps (16-row wgmma
    slices): scores ``(rows, n_scores)`` fp32, outputs ``(rows, n_out)`` fp32, and the scores'
    fp16/bf16 copy as the register A operand of an output product."""
    scores = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[warps, 1],
                                       instr_shape=[16, n_scores, 16])
    out = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[warps, 1],
                                    instr_shape=[16, n_out, 16])
    return scores, out, gl.DotOperandLayout(operand_index=0, parent=out, k_width=2)


@constexpr_function
def _p_layout(rows, keys, dtype):
    """The shared-memory layout of a consumer's P tile ``(rows, keys)``."""
    return gl.NVMMASharedLayout.get_default_for([rows, keys], dtype)


@gluon.jit
def _work_tile(w, n_work, n_tiles, CAUSAL: gl.constexpr, HEAVY_LAST: gl.constexpr,
               GROUP: gl.constexpr):
    """(tile, batch * heads + head) of work item ``w`` of ``n_work``. Without a mask a head's
    tiles are neighbours in the order (its K/V stay in L2); causal orders take every head's
    heaviest tile first: the last query tile (the forward, ``HEAVY_LAST``) or the first key
    tile (dK/dV). A persistent program takes items ``program_id + k * num_programs``; causal
    items get lighter with k, so on odd rounds k the programs take the round's items in
    reverse ("snake" order) and each program's total stays close to the others' (the
    hardware's scheduler no longer balances a static split; without it the persistent
    forward measured 2-8% slower at causal 8k/16k, session 12). With one program per item
    there is one round: the order is unchanged. (The forward's and dQ's orders only: in the
    dK/dV kernel the snake's registers made ptxas spill at d=128, and its persistent grid
    runs at d=64 alone.)

    ``GROUP`` > 1 (causal): the heaviest-first order walks chunks of GROUP query tiles,
    every head's tiles of a chunk neighbours, so programs running at once share their
    head's K/V in L2 (with GROUP 1 they run the same tile of different heads and each
    streams its own head's K/V from HBM: 128 FLOP per byte at 128 rows, under the H200's
    ~150).

    ``GROUP`` < 0 (causal, :func:`causal_window`): GROUP 1's order within windows of -GROUP
    heads, one window after the other: a head's tiles are at most -GROUP * tiles items
    apart, so its K/V are still in L2 when its next tile comes (with GROUP 1 every head
    comes between, and at 512 keys the L2 no longer holds them all), and where items start
    as SMs free up (one program per item) the last ones are still the lightest (chunks that
    hold a head's every tile end on the last head's heaviest among them)."""
    n_bh = n_work // n_tiles
    tile = w % n_tiles
    bh = w // n_tiles
    if CAUSAL:
        if HEAVY_LAST:
            step = gl.num_programs(0)
            if (w // step) % 2 == 1:                    # an odd round: its items reversed
                base = w - w % step
                count = gl.minimum(n_work - base, step)     # (the last round may be partial)
                w = base + count - 1 - w % step
        if GROUP > 1:
            chunk = w // (n_bh * GROUP)
            width = gl.minimum(n_tiles - chunk * GROUP, GROUP)     # (the last may be short)
            rest = w - chunk * n_bh * GROUP
            tile = chunk * GROUP + rest % width
            bh = rest // width
        elif GROUP < 0:                     # windows of -GROUP heads, each heaviest first
            per = -GROUP * n_tiles
            window = w // per
            heads = gl.minimum(n_bh + GROUP * window, -GROUP)     # (the last may be short)
            rest = w - window * per
            tile = rest // heads
            bh = rest % heads - GROUP * window
        else:
            tile = w // n_bh
            bh = w % n_bh
        if HEAVY_LAST:
            tile = n_tiles - 1 - tile
    return tile, bh


@gluon.jit
def _work_block(w, n_work, n_mtiles, nheads, group, seqlen_q, seqlen_k, ROWS: gl.constexpr,
                BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, CAUSAL: gl.constexpr,
                GROUP: gl.constexpr = 1):
    """Work item w's ROWS query rows of one (batch, head): (first row m0, batch, head, Q/O
    row and column in the folded views, K/V row and column, K/V tiles to visit, tiles before
    the causal mask starts)."""
    tile, bh = _work_tile(w, n_work, n_mtiles, CAUSAL, True, GROUP)
    off_b = bh // nheads
    off_h = bh % nheads
    m0 = tile * ROWS
    if CAUSAL:   # keys 0 .. m0 + ROWS - 1; tiles reaching past row m0 need the mask
        n_tiles = gl.cdiv(m0 + ROWS, BLOCK_N)
        n_unmasked = m0 // BLOCK_N
    else:
        n_tiles = seqlen_k // BLOCK_N
        n_unmasked = n_tiles
    return (m0, off_b, off_h, off_b * seqlen_q + m0, off_h * HEAD_D, off_b * seqlen_k,
            (off_h // group) * HEAD_D, n_tiles, n_unmasked)


@gluon.jit
def _query_block(n_mtiles, nheads, group, seqlen_q, seqlen_k, ROWS: gl.constexpr,
                 BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, CAUSAL: gl.constexpr):
    """:func:`_work_block` of this program (one work item per program; the dQ kernel)."""
    return _work_block(gl.program_id(0), gl.num_programs(0), n_mtiles, nheads, group, seqlen_q,
                       seqlen_k, ROWS, BLOCK_N, HEAD_D, CAUSAL)


@gluon.jit
def barriers(N: gl.constexpr, COUNT: gl.constexpr):
    """N mbarriers in shared memory, each initialised to wait for COUNT arrivals."""
    bars = gl.allocate_shared_memory(gl.int64, [N, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(N):
        mbarrier.init(bars.index(i), count=COUNT)
    return bars


@gluon.jit
def _kv_ring_barriers(NUM_STAGES: gl.constexpr):
    """The barriers of a CTA whose two consumers stream one K/V ring (the forward, dQ): each
    consumer's Q barrier, and per slot K ready, V ready and empty (free again once both
    consumers released it), initialised."""
    return (barriers(2, 1), barriers(NUM_STAGES, 1), barriers(NUM_STAGES, 1),
            barriers(NUM_STAGES, 2))


@gluon.jit
def _load_tile(desc, desc2, smem, smem2, row, col, bar):
    """TMA, the tile of ``desc`` at (row, col) into ``smem``, arriving on ``bar``; where the
    head dim is split (:func:`head_parts`: ``desc2`` not None) also its second part (the
    columns from ``col`` + the first part's width) into ``smem2``, on the same barrier."""
    if desc2 is None:
        mbarrier.expect(bar, desc.block_type.nbytes)
        tma.async_copy_global_to_shared(desc, [row, col], bar, smem)
    else:
        mbarrier.expect(bar, desc.block_type.nbytes + desc2.block_type.nbytes)
        tma.async_copy_global_to_shared(desc, [row, col], bar, smem)
        tma.async_copy_global_to_shared(desc2, [row, col + desc.block_type.shape[1]], bar, smem2)


@gluon.jit
def _load_slot(desc, desc2, ring, ring2, slot, row, col, bar):
    """:func:`_load_tile` into ring slot ``slot`` (of ``ring2`` too, where the head dim is
    split)."""
    if ring2 is None:
        _load_tile(desc, desc2, ring.index(slot), ring2, row, col, bar)
    else:
        _load_tile(desc, desc2, ring.index(slot), ring2.index(slot), row, col, bar)


@gluon.jit
def _load_kv_ring(k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty, kv_row0,
                  kv_col, n_tiles, it, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr,
                  k_desc2=None, v_desc2=None, k_smem2=None, v_smem2=None):
    """K and V tiles 0..n_tiles-1 into the ring, as its loads ``it``, ``it + 1``, ... (slot
    and barrier phase follow from that count); a slot is refilled only after both consumers
    released it, K and V signal separately so S = Q K^T can start before V has landed. K and
    V of a slot are freed apart (``k_empty``, ``v_empty``; the same barrier twice where a
    kernel frees them together): the forward frees K_j once S_j is done, so S_{j+2} can be
    issued with two slots. ``k_desc2`` ... ``v_smem2``: the head dim's second part (the
    forward at d=96), loaded into a ring of its own beside the first."""
    for j in range(n_tiles):
        r = it + j
        slot = r % NUM_STAGES
        # A fresh barrier passes a wait on parity 1: the first lap finds every slot free.
        phase = ((r // NUM_STAGES) & 1) ^ 1
        mbarrier.wait(k_empty.index(slot), phase)
        row = kv_row0 + j * BLOCK_N
        _load_slot(k_desc, k_desc2, k_smem, k_smem2, slot, row, kv_col, k_ready.index(slot))
        mbarrier.wait(v_empty.index(slot), phase)
        _load_slot(v_desc, v_desc2, v_smem, v_smem2, slot, row, kv_col, v_ready.index(slot))


@gluon.jit
def _load_kv(k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, empty,
             kv_row0, kv_col, n_tiles, BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr,
             k_desc2=None, v_desc2=None, k_smem2=None, v_smem2=None):
    """Loader partition of one work item (the dQ kernel): its K/V tiles into a fresh ring
    (and their second parts into rings of their own where the head dim is split: ``k_desc2``
    ... ``v_smem2`` not None, d=96)."""
    _load_kv_ring(k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, empty, empty, kv_row0,
                  kv_col, n_tiles, 0, BLOCK_N, NUM_STAGES, k_desc2, v_desc2, k_smem2, v_smem2)


@gluon.jit
def _load_works(k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty, nheads,
                group, seqlen_q, seqlen_k, n_mtiles, n_work, ROWS: gl.constexpr,
                BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr,
                CAUSAL: gl.constexpr, GROUP: gl.constexpr, k_desc2, v_desc2, k_smem2, v_smem2,
                HEAD_D2: gl.constexpr):
    """Loader partition of the forward: the K/V tiles of this program's work items
    (``program_id``, ``+ num_programs``, ...) through one ring, so the next item's first
    tiles load while the consumers finish the current one (and their second parts beside
    them where the head dim is split: ``HEAD_D2`` > 0)."""
    it = 0
    for w in range(gl.program_id(0), n_work, gl.num_programs(0)):
        _, _, _, _, _, kv_row0, kv_col, n_tiles, _ = _work_block(
            w, n_work, n_mtiles, nheads, group, seqlen_q, seqlen_k, ROWS, BLOCK_N,
            HEAD_D + HEAD_D2, CAUSAL, GROUP)
        _load_kv_ring(k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty,
                      kv_row0, kv_col, n_tiles, it, BLOCK_N, NUM_STAGES, k_desc2, v_desc2,
                      k_smem2, v_smem2)
        it += n_tiles


@gluon.jit
def _softmax_tile(s, m_i, l_i, rows, j, n_unmasked, qk_scale, p_buf, BLOCK_N: gl.constexpr,
                  CAUSAL: gl.constexpr):
    """Tile j's complete scores ``s`` ``(rows, BLOCK_N)`` fp32, unscaled: masked; P =
    exp2(s * qk_scale - m) (fp32, the layout of ``s``), the new row max m (log2 domain), the
    discount ``alpha`` of the earlier tiles and the new row sum (``(rows,)`` each). The scale
    goes into each score's exponent as one FFMA, and the row max is taken before scaling
    (``qk_scale`` > 0, :func:`supports`): a separate multiply per score cost 64 of a d=64
    tile's ~516 instructions per thread, whose issue slots (two consumers a scheduler) matched
    the tensor cores' time for the tile (offline SASS, session 25). P is stored (fenced) to
    ``p_buf``, the shared-memory A operand of its P V, unless ``p_buf`` is None
    (:func:`_rs_softmax`: P in registers; in session 9's schedule that made ptxas serialise
    every wgmma, C7512)."""
    if CAUSAL:
        if j >= n_unmasked:
            cols = j * BLOCK_N + gl.arange(0, s.shape[1], layout=gl.SliceLayout(0, s.type.layout))
            s = gl.where(cols[None, :] <= rows[:, None], s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(s * qk_scale - m_new[:, None])
    l_i = l_i * alpha + gl.sum(p, axis=1)
    if p_buf is not None:
        p_buf.store(p.to(p_buf.dtype))
        fence_async_shared()
    return p, m_new, alpha, l_i


@gluon.jit
def _rs_tiles(p, q_smem, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty, s_zero, acc, m_i,
              l_i, rows, n_tiles, n_unmasked, qk_scale, it, anchor, NUM_STAGES: gl.constexpr,
              BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr, o_layout: gl.constexpr,
              p_layout: gl.constexpr, PAIRS: gl.constexpr):
    """Tiles 0 .. n_tiles - 3 of an item at a whole head dim with P in registers
    (:func:`_rs_products`, :func:`_rs_softmax`; the ring's loads from ``it`` on). ``PAIRS``:
    two tiles a trip and an odd count's last one after: P_j and P_{j+1} then alternate
    register sets, so half of the moves of P into the A operand's registers go (offline at
    d=64: 429 instructions a tile against 453 one tile a trip), for 32 more registers of P.
    Returns (P, O, row max, row sum)."""
    if PAIRS:
        for jj in range(0, n_tiles - 3, 2):
            for u in gl.static_range(2):
                s, acc = _rs_products(p, q_smem, k_smem, v_smem, k_ready, v_ready, k_empty,
                                      s_zero, acc, it + jj + u, NUM_STAGES)
                p, acc, m_i, l_i = _rs_softmax(s, p, acc, m_i, l_i, rows, jj + u + 1,
                                               n_unmasked, qk_scale, v_empty, it + jj + u,
                                               anchor, NUM_STAGES, BLOCK_N, CAUSAL, o_layout,
                                               p_layout)
        if n_tiles % 2 == 1 and n_tiles > 2:
            j = n_tiles - 3
            s, acc = _rs_products(p, q_smem, k_smem, v_smem, k_ready, v_ready, k_empty, s_zero,
                                  acc, it + j, NUM_STAGES)
            p, acc, m_i, l_i = _rs_softmax(s, p, acc, m_i, l_i, rows, j + 1, n_unmasked,
                                           qk_scale, v_empty, it + j, anchor, NUM_STAGES,
                                           BLOCK_N, CAUSAL, o_layout, p_layout)
    else:
        for j in range(n_tiles - 2):
            s, acc = _rs_products(p, q_smem, k_smem, v_smem, k_ready, v_ready, k_empty, s_zero,
                                  acc, it + j, NUM_STAGES)
            p, acc, m_i, l_i = _rs_softmax(s, p, acc, m_i, l_i, rows, j + 1, n_unmasked,
                                           qk_scale, v_empty, it + j, anchor, NUM_STAGES,
                                           BLOCK_N, CAUSAL, o_layout, p_layout)
    return p, acc, m_i, l_i


@gluon.jit
def _first_softmax(s_0, m_i, l_i, rows, n_unmasked, qk_scale, p_smem, P0: gl.constexpr,
                   BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr, O_IN_P: gl.constexpr):
    """An item's first softmax (:func:`_softmax_tile` of S_0 into P buffer ``P0``), once the
    previous item's O has left that consumer's second P buffer (``O_IN_P``)."""
    if O_IN_P:
        tma.store_wait(0)
    _p, m_new, alpha, l_i = _softmax_tile(s_0, m_i, l_i, rows, 0, n_unmasked, qk_scale,
                                         p_smem.index(P0), BLOCK_N, CAUSAL)
    return m_new, alpha, l_i


@gluon.jit
def _start(q_smem, k_smem, k_ready, it, first_row, ROWS: gl.constexpr, BLOCK_N: gl.constexpr,
           HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, s_layout: gl.constexpr,
           o_layout: gl.constexpr, q_smem2=None, k_smem2=None):
    """The online softmax's start for ROWS query rows from sequence row ``first_row`` whose
    first K tile is the ring's load ``it``: row max -inf, row sum 0, the rows' positions, S's
    zero input, S_0 (complete) and O's zero accumulator. S_0 is waited for before O's zeros
    exist: the compiler would otherwise place them after the first issue, and ptxas serialises
    every wgmma when ordinary instructions write an accumulator mid-flight (C7515). (A split
    head dim's second O accumulator is made by the caller, also after that wait.)"""
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    m_i = gl.full([ROWS], float("-inf"), gl.float32, row_layout)
    l_i = gl.full([ROWS], 0.0, gl.float32, row_layout)
    rows = first_row + gl.arange(0, ROWS, layout=row_layout)
    s_zero = gl.zeros([ROWS, BLOCK_N], gl.float32, s_layout)
    s_tok = _issue_s(q_smem, k_smem, k_ready, s_zero, it, NUM_STAGES, q_smem2, k_smem2)
    s_0 = warpgroup_mma_init(warpgroup_mma_wait(0, deps=(s_tok,)))
    acc = warpgroup_mma_init(gl.zeros([ROWS, HEAD_D], gl.float32, o_layout))
    return m_i, l_i, rows, s_zero, s_0, acc


@gluon.jit
def _issue_s(q_smem, k_smem, k_ready, s_zero, r, NUM_STAGES: gl.constexpr, q_smem2=None,
             k_smem2=None):
    """Issue S = Q K^T once K (the ring's load r) has landed, over as many of the tile's keys
    as ``s_zero`` is wide (all but for :func:`half_diagonal`'s tile); with a split head dim
    (``q_smem2``, ``k_smem2``: its second part) S = Q_1 K_1^T + Q_2 K_2^T, two wgmma chained
    through the accumulator (two commit groups: see :func:`_consume`'s waits)."""
    slot = r % NUM_STAGES
    mbarrier.wait(k_ready.index(slot), (r // NUM_STAGES) & 1)
    k_tile = k_smem.index(slot)
    if s_zero.shape[1] < k_tile.shape[0]:
        k_tile = k_tile.slice(0, s_zero.shape[1])
    s = warpgroup_mma(q_smem, k_tile.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    if q_smem2 is not None:
        s = warpgroup_mma(q_smem2, k_smem2.index(slot).permute((1, 0)), s, is_async=True)
    return s


@gluon.jit
def _pv(p_op, v_smem, v_ready, acc, r, NUM_STAGES: gl.constexpr):
    """Issue O += P V once V (the ring's load r) has landed, over as many of the tile's rows
    as P has keys (all but for :func:`half_diagonal`'s tile)."""
    slot = r % NUM_STAGES
    mbarrier.wait(v_ready.index(slot), (r // NUM_STAGES) & 1)
    v_tile = v_smem.index(slot)
    if p_op.shape[1] < v_tile.shape[0]:
        v_tile = v_tile.slice(0, p_op.shape[1])
    return warpgroup_mma(p_op, v_tile, acc, is_async=True)


@gluon.jit
def _pv_part(p_op, v_smem2, acc2, r, NUM_STAGES: gl.constexpr):
    """Issue O_2 += P V_2 for a split head dim's second part (V_2 arrives on V's barrier, which
    :func:`_pv` waited for just before)."""
    return warpgroup_mma(p_op, v_smem2.index(r % NUM_STAGES), acc2, is_async=True)


@gluon.jit
def _rs_products(p_op, q_smem, k_smem, v_smem, k_ready, v_ready, k_empty, s_zero, acc, r,
                 NUM_STAGES: gl.constexpr, acc2=None, q_smem2=None, k_smem2=None,
                 v_smem2=None):
    """Tile r's products with P in registers (``P_REGS``, FA3's order): issue S_{r+1} = Q
    K_{r+1}^T, then O += P_r V_r with ``p_op`` = P_r ``(rows, BLOCK_N)`` fp16/bf16 as wgmma's
    register A operand; wait for S_{r+1} alone (P_r V_r stays in flight: it was issued last)
    and free K_{r+1}. Returns S_{r+1} ``(rows, BLOCK_N)`` fp32, complete, and O's token.

    A split head dim (``acc2``, ``q_smem2`` ... ``v_smem2``: its second part) issues S as two
    wgmma and O_2 += P_r V_{2,r} after O's product, from the same ``p_op`` (the A operand's
    register layout does not depend on the product's width: the layouts with the 64- and
    32-column outputs as parent are one linear layout); of the four commit groups the wait
    leaves the two products in flight, and O_2's token is returned third. (Two arities: a
    Gluon function cannot return None.)"""
    s_tok = _issue_s(q_smem, k_smem, k_ready, s_zero, r + 1, NUM_STAGES, q_smem2, k_smem2)
    acc = _pv(p_op, v_smem, v_ready, acc, r, NUM_STAGES)
    if acc2 is None:
        s = warpgroup_mma_wait(1, deps=(s_tok,))
        mbarrier.arrive(k_empty.index((r + 1) % NUM_STAGES), count=1)
        return s, acc
    else:
        acc2 = _pv_part(p_op, v_smem2, acc2, r, NUM_STAGES)
        s = warpgroup_mma_wait(2, deps=(s_tok,))
        mbarrier.arrive(k_empty.index((r + 1) % NUM_STAGES), count=1)
        return s, acc, acc2


@gluon.jit
def _rs_softmax(s, p_op, acc, m_i, l_i, rows, j, n_unmasked, qk_scale, v_empty, r, anchor,
                NUM_STAGES: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr,
                o_layout: gl.constexpr, p_layout: gl.constexpr, acc2=None,
                o2_layout: gl.constexpr = None):
    """Tile j's softmax (scores ``s``) while P_{j-1} V_{j-1} (the ring's load r, A operand
    ``p_op``) computes; then wait for that product, free V_{j-1}, discount O and make P_j
    wgmma's A operand (fp16/bf16 in layout ``p_layout``). ``p_op`` is a dependency of the
    wait: wgmma reads its registers until then. Returns (P_j, O, row max, row sum), and O_2
    fifth where the head dim is split: its second accumulator ``acc2`` (layout
    ``o2_layout``) is waited for and discounted alike.

    ``anchor`` (shared, ``(rows,)`` fp32, never read): the new row sums are stored there
    before the wait only to hold the softmax above it. ptxas otherwise hoists the wait
    (nothing orders it after the exp2; in the shared-memory schedule the next S's issue
    does) to just after the first row max, and the softmax no longer overlaps P V: offline,
    the exp2 and conversions then followed the wait whatever the order written here. A
    store is kept before the wait, and it needs every exp2 of the row sums."""
    p, m_new, alpha, l_i = _softmax_tile(s, m_i, l_i, rows, j, n_unmasked, qk_scale, None,
                                         BLOCK_N, CAUSAL)
    anchor.store(l_i)
    if acc2 is None:
        acc, p_op = warpgroup_mma_wait(0, deps=(acc, p_op))
        mbarrier.arrive(v_empty.index(r % NUM_STAGES), count=1)
        p_next = gl.convert_layout(p.to(p_op.dtype), p_layout)
        return p_next, _rescaled(acc, alpha, o_layout), m_new, l_i
    else:
        acc, acc2, p_op = warpgroup_mma_wait(0, deps=(acc, acc2, p_op))
        mbarrier.arrive(v_empty.index(r % NUM_STAGES), count=1)
        p_next = gl.convert_layout(p.to(p_op.dtype), p_layout)
        return (p_next, _rescaled(acc, alpha, o_layout), m_new, l_i,
                _rescaled(acc2, alpha, o2_layout))


@gluon.jit
def _half_softmax(s, p_op, acc, m_i, l_i, rows, j, n_unmasked, qk_scale, v_ready, v_empty, r,
                  anchor, v_smem, NUM_STAGES: gl.constexpr, BLOCK_N: gl.constexpr,
                  CAUSAL: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr,
                  row_layout: gl.constexpr):
    """:func:`_rs_softmax` of scores ``s`` over the first ``BLOCK_N // 2`` keys of tile j (the
    ring's load r + 1; :func:`_rs_products` with a half-wide zero input), then that tile's
    P V over V's first rows, waited for: the item's last product. The row statistics change
    layout around it (the half tile's rows are held as the whole one's). Returns (O, row max,
    row sum)."""
    h_rows: gl.constexpr = gl.SliceLayout(1, s.type.layout)
    p_half, acc, m_new, l_new = _rs_softmax(s, p_op, acc, gl.convert_layout(m_i, h_rows),
                                            gl.convert_layout(l_i, h_rows),
                                            gl.convert_layout(rows, h_rows), j, n_unmasked,
                                            qk_scale, v_empty, r, anchor, NUM_STAGES, BLOCK_N,
                                            CAUSAL, o_layout, p_layout)
    acc = _pv(p_half, v_smem, v_ready, acc, r + 1, NUM_STAGES)
    acc, p_half = warpgroup_mma_wait(0, deps=(acc, p_half))
    mbarrier.arrive(v_empty.index((r + 1) % NUM_STAGES), count=1)
    return acc, gl.convert_layout(m_new, row_layout), gl.convert_layout(l_new, row_layout)


@gluon.jit
def _rescaled(acc, alpha, o_layout: gl.constexpr):
    """O discounted to the new row max."""
    return acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]


@gluon.jit
def _write_out(acc, m_i, l_i, lse_row, o_smem, o_desc, q_row0, q_col, dtype: gl.constexpr,
               o_layout: gl.constexpr, acc2=None, o_smem2=None, o_desc2=None,
               o2_layout: gl.constexpr = None):
    """O = acc / l through ``o_smem`` by TMA (not waited for: the next item's epilogue, or the
    kernel's end, waits); LSE = m + log l (natural log) at ``lse_row`` (pointers). Every row
    saw at least one key: l > 0. A split head dim's second part (``acc2``) leaves likewise
    through ``o_smem2``, into the columns after the first part's."""
    o = _normalized(acc, l_i, dtype, o_layout)
    if acc2 is not None:
        o2 = _normalized(acc2, l_i, dtype, o2_layout)
    else:
        o2 = acc2
    _store_out(o, m_i, l_i, lse_row, o_smem, o_desc, q_row0, q_col, o2, o_smem2, o_desc2)


@gluon.jit
def _normalized(acc, l_i, dtype: gl.constexpr, o_layout: gl.constexpr):
    """O = acc / l ``(rows, d)`` in the output's dtype."""
    return (acc / gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))[:, None]).to(dtype)


@gluon.jit
def _store_out(o, m_i, l_i, lse_row, o_smem, o_desc, q_row0, q_col, o2=None, o_smem2=None,
               o_desc2=None):
    """:func:`_write_out` of a normalised O (and second part ``o2``)."""
    gl.store(lse_row, (m_i + gl.log2(l_i)) * 0.6931471805599453)
    tma.store_wait(0)          # (the previous item's O has left o_smem)
    o_smem.store(o)
    if o2 is not None:
        o_smem2.store(o2)
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [q_row0, q_col], o_smem)
    if o2 is not None:
        tma.async_copy_shared_to_global(o_desc2, [q_row0, q_col + o_desc.block_type.shape[1]],
                                        o_smem2)


@gluon.jit
def _own_tiles(m0, n_tiles, n_unmasked, HALF: gl.constexpr, BLOCK_M: gl.constexpr,
               BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """(tiles read, tiles before the mask) of consumer ``HALF`` in an item from query row m0
    with ``n_tiles`` K/V tiles, ``n_unmasked`` before the item's mask. Causal, with tiles no
    wider than a consumer's rows (:func:`_skips`), the first consumer's rows (m0 .. m0 +
    BLOCK_M - 1) end a whole tile before the item's last, all masked for them, so it stops
    there; and the second's mask starts a tile later, at its own first row. Unchanged
    otherwise."""
    if _skips(CAUSAL, BLOCK_M, BLOCK_N):
        first_row = m0 + HALF * BLOCK_M
        return gl.cdiv(first_row + BLOCK_M, BLOCK_N), (first_row + 1) // BLOCK_N
    else:
        return n_tiles, n_unmasked


@constexpr_function
def _skips(causal, rows, keys):
    """Whether causal items have tiles that the first consumer skips (:func:`_own_tiles`):
    key tiles no wider than a consumer's rows (64 keys at d=128 causal up to 512 keys,
    d=256). Wider tiles compile the kernel without the skip's code (with it, unused, d=128
    causal 4k measured 3% slower, session 24)."""
    return causal and keys <= rows


@gluon.jit
def _pass_slot(k_ready, v_ready, k_empty, v_empty, r, NUM_STAGES: gl.constexpr):
    """Release the ring's load r unread (a tile this consumer skips, :func:`_own_tiles`). The
    wait for each load comes first: an arrival before the loader has refilled the slot would
    count towards the slot's previous load and free it before the other consumer read it."""
    slot = r % NUM_STAGES
    phase = (r // NUM_STAGES) & 1
    mbarrier.wait(k_ready.index(slot), phase)
    mbarrier.arrive(k_empty.index(slot), count=1)
    mbarrier.wait(v_ready.index(slot), phase)
    mbarrier.arrive(v_empty.index(slot), count=1)


@gluon.jit
def _load_q(q_desc, q_smem, q_bar, w, n_work, n_mtiles, nheads, group, seqlen_q, seqlen_k,
            HALF: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
            HEAD_D: gl.constexpr, CAUSAL: gl.constexpr, GROUP: gl.constexpr, q_desc2=None,
            q_smem2=None, HEAD_D2: gl.constexpr = 0):
    """Start loading this consumer's Q rows of work item w (half ``HALF`` of its rows; and
    their second part into ``q_smem2`` where the head dim is split: ``HEAD_D2`` > 0)."""
    _, _, _, q_row0, q_col, _, _, _, _ = _work_block(
        w, n_work, n_mtiles, nheads, group, seqlen_q, seqlen_k, 2 * BLOCK_M, BLOCK_N,
        HEAD_D + HEAD_D2, CAUSAL, GROUP)
    _load_tile(q_desc, q_desc2, q_smem, q_smem2, q_row0 + HALF * BLOCK_M, q_col, q_bar)


@gluon.jit
def _consume(q_desc, o_desc, q_smem, o_smem, p_smem, q_bar, k_smem, v_smem, k_ready, v_ready,
             k_empty, v_empty, LSE, stride_lse_b, stride_lse_h, nheads, group, seqlen_q, seqlen_k,
             n_mtiles, n_work, qk_scale, HALF: gl.constexpr, BLOCK_M: gl.constexpr,
             BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr,
             CAUSAL: gl.constexpr, GROUP: gl.constexpr, O_IN_P: gl.constexpr,
             O_IN_Q: gl.constexpr, EARLY_S1: gl.constexpr, q_desc2, o_desc2, q_smem2, o_smem2,
             k_smem2, v_smem2, HEAD_D2: gl.constexpr, P_REGS: gl.constexpr,
             NEXT_S0: gl.constexpr, HALF_DIAG: gl.constexpr = False):
    """Consumer partition (one warpgroup) ``HALF``: :func:`_consume_ahead` where ``NEXT_S0``
    (its two Q tiles of ``q_smem`` and barriers of ``q_bar``: 4 each; ``HALF_DIAG``:
    :func:`half_diagonal`), else :func:`_consume_in_turn` (one: ``q_smem`` and ``q_bar`` hold
    2)."""
    if NEXT_S0:
        _consume_ahead(q_desc, o_desc, q_smem, o_smem, p_smem, q_bar, k_smem, v_smem, k_ready,
                       v_ready, k_empty, v_empty, LSE, stride_lse_b, stride_lse_h, nheads,
                       group, seqlen_q, seqlen_k, n_mtiles, n_work, qk_scale, HALF, BLOCK_M,
                       BLOCK_N, HEAD_D, NUM_STAGES, CAUSAL, GROUP, HALF_DIAG)
    else:
        _consume_in_turn(q_desc, o_desc, q_smem.index(HALF), o_smem, p_smem, q_bar.index(HALF),
                         k_smem, v_smem, k_ready, v_ready, k_empty, v_empty, LSE,
                         stride_lse_b, stride_lse_h, nheads, group, seqlen_q, seqlen_k,
                         n_mtiles, n_work, qk_scale, HALF, BLOCK_M, BLOCK_N, HEAD_D,
                         NUM_STAGES, CAUSAL, GROUP, O_IN_P, O_IN_Q, EARLY_S1, q_desc2,
                         o_desc2, q_smem2, o_smem2, k_smem2, v_smem2, HEAD_D2, P_REGS)


@gluon.jit
def _consume_in_turn(q_desc, o_desc, q_smem, o_smem, p_smem, q_bar, k_smem, v_smem, k_ready,
                     v_ready, k_empty, v_empty, LSE, stride_lse_b, stride_lse_h, nheads, group,
                     seqlen_q, seqlen_k, n_mtiles, n_work, qk_scale, HALF: gl.constexpr,
                     BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr,
                     NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, GROUP: gl.constexpr,
                     O_IN_P: gl.constexpr, O_IN_Q: gl.constexpr, EARLY_S1: gl.constexpr,
                     q_desc2, o_desc2, q_smem2, o_smem2, k_smem2, v_smem2,
                     HEAD_D2: gl.constexpr, P_REGS: gl.constexpr):
    """A consumer whose items each start with S_0 (:func:`_consume`): for each of this program's
    work items, half ``HALF`` (BLOCK_M query rows) of its rows over its K/V tiles (tiles from
    ``n_unmasked`` on get the causal mask), read from the ring in the loader's order. Writes
    those rows of O (TMA) and LSE. The next item's Q loads as soon as the last S has read this
    one's. ``O_IN_P``: ``o_smem`` is this consumer's second P buffer (P_1, P_3, ... are written
    there), free from an item's last P V until the next item's second softmax: its O store is
    waited for once S_0 of the next item has landed. ``O_IN_Q``: ``o_smem`` is this consumer's Q
    tile, free once the item's last S has read it; the next item's Q then loads only after O has
    left it (not as soon as that last S is done).

    ``HEAD_D2`` > 0 (d=96: 64 + 32, :func:`head_parts`): the head dim's columns from HEAD_D
    on are a second part with tiles of their own (``q_smem2``, ``k_smem2``, ``v_smem2``, the
    rings of both consumers; ``o_smem2``), S sums both parts' products and O is two
    accumulators, ``acc`` (HEAD_D columns) and ``acc2`` (HEAD_D2), rescaled alike. Each
    wgmma is a commit group of its own, so S and P V are two groups each: waiting for P V
    while S_{j+2} computes leaves 2 in flight, not 1.

    ``P_REGS`` (d=64/96/128 by default, :func:`p_in_registers`; ``p_smem``
    is then ``(2, BLOCK_M)`` fp32, each consumer's store anchor, see :func:`_rs_softmax`): P
    stays in registers as P V's A operand, in FA3's order per tile j (:func:`_rs_products`,
    :func:`_rs_softmax`): issue S_{j+1}, issue P_j V_j (and P_j V_{2,j} where the head dim
    is split), wait for S_{j+1} alone, softmax of S_{j+1} into P_{j+1}, wait for the
    products, discount O. Live per thread: O 64 + S 64 + P_j and P_{j+1} 32 each (d=128,
    128 keys; d=96: O 32 + 16)."""
    s_layout: gl.constexpr = mma_layouts(4, BLOCK_N, HEAD_D)[0]
    o_layout: gl.constexpr = mma_layouts(4, BLOCK_N, HEAD_D)[1]
    p_layout: gl.constexpr = mma_layouts(4, BLOCK_N, HEAD_D)[2]
    dtype: gl.constexpr = q_desc.dtype
    P0: gl.constexpr = 2 * HALF         # this consumer's two P buffers: P0, P0 + 1
    first, step = gl.program_id(0), gl.num_programs(0)
    if HEAD_D2 > 0:                     # this consumer's tiles of the second part
        o2_layout: gl.constexpr = mma_layouts(4, BLOCK_N, HEAD_D2)[1]
        q_smem2 = q_smem2.index(HALF)
        o_smem2 = o_smem2.index(HALF)
    else:
        o2_layout: gl.constexpr = None

    _load_q(q_desc, q_smem, q_bar, first, n_work, n_mtiles, nheads, group, seqlen_q, seqlen_k,
            HALF, BLOCK_M, BLOCK_N, HEAD_D, CAUSAL, GROUP, q_desc2, q_smem2, HEAD_D2)
    it = 0          # K/V tiles read from the ring so far
    t = 0           # work items done so far (Q's barrier phase)
    for w in range(first, n_work, step):
        m0, off_b, off_h, q_row0, q_col, _, _, n_tiles, n_unmasked = _work_block(
            w, n_work, n_mtiles, nheads, group, seqlen_q, seqlen_k, 2 * BLOCK_M, BLOCK_N,
            HEAD_D + HEAD_D2, CAUSAL, GROUP)
        n_all = n_tiles                 # the item's tiles (the ring's count)
        n_tiles, n_unmasked = _own_tiles(m0, n_all, n_unmasked, HALF, BLOCK_M, BLOCK_N,
                                         CAUSAL)        # this consumer's
        mbarrier.wait(q_bar, t & 1)
        m_i, l_i, rows, s_zero, s_0, acc = _start(q_smem, k_smem, k_ready, it,
                                                  m0 + HALF * BLOCK_M, BLOCK_M, BLOCK_N,
                                                  HEAD_D, NUM_STAGES, s_layout, o_layout,
                                                  q_smem2, k_smem2)
        if HEAD_D2 > 0:
            acc2 = warpgroup_mma_init(gl.zeros([BLOCK_M, HEAD_D2], gl.float32, o2_layout))
            s_0, acc, acc2 = warpgroup_mma_wait(0, deps=(s_0, acc, acc2))
        else:
            s_0, acc = warpgroup_mma_wait(0, deps=(s_0, acc))      # (complete: as tensors)
            acc2 = None                 # (no second part; :func:`_write_out` skips it)
        mbarrier.arrive(k_empty.index(it % NUM_STAGES), count=1)   # K_0 read
        more = w + step < n_work
        if n_tiles == 1 and more and not O_IN_Q:    # S_0 was this Q's last S: load the next
            _load_q(q_desc, q_smem, q_bar, w + step, n_work, n_mtiles, nheads, group,
                    seqlen_q, seqlen_k, HALF, BLOCK_M, BLOCK_N, HEAD_D, CAUSAL, GROUP,
                    q_desc2, q_smem2, HEAD_D2)
        if P_REGS:
            anchor = p_smem.index(HALF)     # (see _rs_softmax)
            p, m_i, alpha, l_i = _softmax_tile(s_0, m_i, l_i, rows, 0, n_unmasked, qk_scale,
                                               None, BLOCK_N, CAUSAL)
            p = gl.convert_layout(p.to(dtype), p_layout)
            if HEAD_D2 > 0:
                for j in range(n_tiles - 2):
                    s, acc, acc2 = _rs_products(p, q_smem, k_smem, v_smem, k_ready, v_ready,
                                                k_empty, s_zero, acc, it + j, NUM_STAGES, acc2,
                                                q_smem2, k_smem2, v_smem2)
                    p, acc, m_i, l_i, acc2 = _rs_softmax(
                        s, p, acc, m_i, l_i, rows, j + 1, n_unmasked, qk_scale, v_empty,
                        it + j, anchor, NUM_STAGES, BLOCK_N, CAUSAL, o_layout, p_layout, acc2,
                        o2_layout)
            else:
                p, acc, m_i, l_i = _rs_tiles(p, q_smem, k_smem, v_smem, k_ready, v_ready,
                                             k_empty, v_empty, s_zero, acc, m_i, l_i, rows,
                                             n_tiles, n_unmasked, qk_scale, it, anchor,
                                             NUM_STAGES, BLOCK_N, CAUSAL, o_layout, p_layout,
                                             True)
            if n_tiles > 1:             # (peeled: its S is this Q's last)
                j = n_tiles - 2
                if HEAD_D2 > 0:
                    s, acc, acc2 = _rs_products(p, q_smem, k_smem, v_smem, k_ready, v_ready,
                                                k_empty, s_zero, acc, it + j, NUM_STAGES, acc2,
                                                q_smem2, k_smem2, v_smem2)
                else:
                    s, acc = _rs_products(p, q_smem, k_smem, v_smem, k_ready, v_ready, k_empty,
                                          s_zero, acc, it + j, NUM_STAGES)
                if more and not O_IN_Q:
                    _load_q(q_desc, q_smem, q_bar, w + step, n_work, n_mtiles, nheads, group,
                            seqlen_q, seqlen_k, HALF, BLOCK_M, BLOCK_N, HEAD_D, CAUSAL, GROUP,
                            q_desc2, q_smem2, HEAD_D2)
                if HEAD_D2 > 0:
                    p, acc, m_i, l_i, acc2 = _rs_softmax(
                        s, p, acc, m_i, l_i, rows, j + 1, n_unmasked, qk_scale, v_empty,
                        it + j, anchor, NUM_STAGES, BLOCK_N, CAUSAL, o_layout, p_layout, acc2,
                        o2_layout)
                else:
                    p, acc, m_i, l_i = _rs_softmax(s, p, acc, m_i, l_i, rows, j + 1,
                                                   n_unmasked, qk_scale, v_empty, it + j,
                                                   anchor, NUM_STAGES, BLOCK_N, CAUSAL,
                                                   o_layout, p_layout)
            j = n_tiles - 1
            acc = _pv(p, v_smem, v_ready, acc, it + j, NUM_STAGES)
            if HEAD_D2 > 0:
                acc2 = _pv_part(p, v_smem2, acc2, it + j, NUM_STAGES)
                acc, acc2, p = warpgroup_mma_wait(0, deps=(acc, acc2, p))
            else:
                acc, p = warpgroup_mma_wait(0, deps=(acc, p))
        else:
            if not EARLY_S1:
                m_i, alpha, l_i = _first_softmax(s_0, m_i, l_i, rows, n_unmasked, qk_scale, p_smem,
                                                 P0, BLOCK_N, CAUSAL, O_IN_P)
            # Per tile j (P_j in its buffer, S_{j+1} in flight): issue P_j V_j; wait for S_{j+1}
            # alone and run its softmax while P_j V_j computes (P_{j+1} into the other buffer);
            # issue S_{j+2}; wait for P_j V_j alone and discount O while S_{j+2} computes. So the
            # warpgroup's CUDA-core work overlaps both of its products. ``EARLY_S1``: S_1 is
            # issued before the first softmax, so that one overlaps a product too.
            if n_tiles > 1:
                s_tok = _issue_s(q_smem, k_smem, k_ready, s_zero, it + 1, NUM_STAGES, q_smem2,
                                 k_smem2)
                if EARLY_S1:
                    m_i, alpha, l_i = _first_softmax(s_0, m_i, l_i, rows, n_unmasked, qk_scale,
                                                     p_smem, P0, BLOCK_N, CAUSAL, O_IN_P)
                for j in range(n_tiles - 2):
                    s = warpgroup_mma_wait(0, deps=(s_tok,))
                    mbarrier.arrive(k_empty.index((it + j + 1) % NUM_STAGES), count=1)  # K_{j+1}
                    acc = _pv(p_smem.index(P0 + j % 2), v_smem, v_ready, acc, it + j, NUM_STAGES)
                    if HEAD_D2 > 0:
                        acc2 = _pv_part(p_smem.index(P0 + j % 2), v_smem2, acc2, it + j,
                                        NUM_STAGES)
                    _p, m_new, alpha, l_i = _softmax_tile(s, m_i, l_i, rows, j + 1, n_unmasked,
                                                         qk_scale, p_smem.index(P0 + (j + 1) % 2),
                                                         BLOCK_N, CAUSAL)
                    s_tok = _issue_s(q_smem, k_smem, k_ready, s_zero, it + j + 2, NUM_STAGES,
                                     q_smem2, k_smem2)
                    if HEAD_D2 > 0:     # (S_{j+2}: two groups in flight)
                        acc, acc2 = warpgroup_mma_wait(2, deps=(acc, acc2))
                    else:
                        acc = warpgroup_mma_wait(1, deps=(acc,))
                    mbarrier.arrive(v_empty.index((it + j) % NUM_STAGES), count=1)  # V_j read
                    acc = _rescaled(acc, alpha, o_layout)
                    if HEAD_D2 > 0:
                        acc2 = _rescaled(acc2, alpha, o2_layout)
                    m_i = m_new
                j = n_tiles - 2             # (no S_{j+2} to issue)
                s = warpgroup_mma_wait(0, deps=(s_tok,))
                mbarrier.arrive(k_empty.index((it + j + 1) % NUM_STAGES), count=1)
                if more and not O_IN_Q:     # every S has read this Q: load the next item's
                    _load_q(q_desc, q_smem, q_bar, w + step, n_work, n_mtiles, nheads, group,
                            seqlen_q, seqlen_k, HALF, BLOCK_M, BLOCK_N, HEAD_D, CAUSAL, GROUP,
                            q_desc2, q_smem2, HEAD_D2)
                acc = _pv(p_smem.index(P0 + j % 2), v_smem, v_ready, acc, it + j, NUM_STAGES)
                if HEAD_D2 > 0:
                    acc2 = _pv_part(p_smem.index(P0 + j % 2), v_smem2, acc2, it + j, NUM_STAGES)
                _p, m_i, alpha, l_i = _softmax_tile(s, m_i, l_i, rows, j + 1, n_unmasked, qk_scale,
                                                   p_smem.index(P0 + (j + 1) % 2), BLOCK_N, CAUSAL)
                if HEAD_D2 > 0:
                    acc, acc2 = warpgroup_mma_wait(0, deps=(acc, acc2))
                else:
                    acc = warpgroup_mma_wait(0, deps=(acc,))
                mbarrier.arrive(v_empty.index((it + j) % NUM_STAGES), count=1)
                acc = _rescaled(acc, alpha, o_layout)
                if HEAD_D2 > 0:
                    acc2 = _rescaled(acc2, alpha, o2_layout)
            elif EARLY_S1:
                m_i, alpha, l_i = _first_softmax(s_0, m_i, l_i, rows, n_unmasked, qk_scale, p_smem,
                                                 P0, BLOCK_N, CAUSAL, O_IN_P)
            j = n_tiles - 1
            acc = _pv(p_smem.index(P0 + j % 2), v_smem, v_ready, acc, it + j, NUM_STAGES)
            if HEAD_D2 > 0:
                acc2 = _pv_part(p_smem.index(P0 + j % 2), v_smem2, acc2, it + j, NUM_STAGES)
                acc, acc2 = warpgroup_mma_wait(0, deps=(acc, acc2))
            else:
                acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(v_empty.index((it + j) % NUM_STAGES), count=1)
        lse_row = LSE + off_b * stride_lse_b + off_h * stride_lse_h + rows
        _write_out(acc, m_i, l_i, lse_row, o_smem, o_desc, q_row0 + HALF * BLOCK_M, q_col,
                   dtype, o_layout, acc2, o_smem2, o_desc2, o2_layout)
        if _skips(CAUSAL, BLOCK_M, BLOCK_N):    # tiles wholly above this consumer's diagonal
            for j in range(n_tiles, n_all):
                _pass_slot(k_ready, v_ready, k_empty, v_empty, it + j, NUM_STAGES)
        if O_IN_Q and more:             # the next item's Q, once O has left its tile
            tma.store_wait(0)
            _load_q(q_desc, q_smem, q_bar, w + step, n_work, n_mtiles, nheads, group, seqlen_q,
                    seqlen_k, HALF, BLOCK_M, BLOCK_N, HEAD_D, CAUSAL, GROUP, q_desc2, q_smem2,
                    HEAD_D2)
        it += n_all
        t += 1
    tma.store_wait(0)


@gluon.jit
def _consume_ahead(q_desc, o_desc, q_smem, o_smem, p_smem, q_bar, k_smem, v_smem, k_ready,
                   v_ready, k_empty, v_empty, LSE, stride_lse_b, stride_lse_h, nheads, group,
                   seqlen_q, seqlen_k, n_mtiles, n_work, qk_scale, HALF: gl.constexpr,
                   BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr,
                   NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, GROUP: gl.constexpr,
                   HALF_DIAG: gl.constexpr = False):
    """:func:`_consume_in_turn` with P in registers (``P_REGS``, a whole head dim, O apart) and each
    item's S_0 issued before the previous item's epilogue (:func:`next_s0`): at 512 keys an
    item has 1 to 8 tiles, and with S_0 waited for at the item's start both consumers (who
    start an item together) leave the tensor cores idle through their epilogues and S_0's
    latency. So this consumer keeps two Q tiles (``q_smem``, ``q_bar``: four each, buffers
    ``2 * HALF`` and ``2 * HALF + 1``; item t in buffer t % 2, loaded once item t - 2's last
    S has read that buffer), and a turn of the item loop issues its S_0, then stores the
    previous item's O and LSE (O normalised in the turn before) while S_0 computes. (S_0 is
    issued and waited for within one turn: in flight across the loop's back edge, ptxas
    serialised every wgmma, C7511/C7517.)

    ``HALF_DIAG`` (:func:`half_diagonal`): the first consumer's last tile of a causal item
    with more than one tile is the item's diagonal, where its rows see only the first
    ``BLOCK_N // 2`` keys; it computes S, P and P V over those alone
    (:func:`_rs_products` with a half-wide zero input, :func:`_half_softmax`)."""
    HALF_D: gl.constexpr = HALF_DIAG and HALF == 0
    s_layout: gl.constexpr = mma_layouts(4, BLOCK_N, HEAD_D)[0]
    o_layout: gl.constexpr = mma_layouts(4, BLOCK_N, HEAD_D)[1]
    p_layout: gl.constexpr = mma_layouts(4, BLOCK_N, HEAD_D)[2]
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    dtype: gl.constexpr = q_desc.dtype
    Q0: gl.constexpr = 2 * HALF         # this consumer's two Q buffers: Q0, Q0 + 1
    first, step = gl.program_id(0), gl.num_programs(0)
    anchor = p_smem.index(HALF)         # (see _rs_softmax)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    if HALF_D:                          # (the half tile's S input, made before any wgmma)
        h_layout: gl.constexpr = mma_layouts(4, BLOCK_N // 2, HEAD_D)[0]
        h_zero = gl.zeros([BLOCK_M, BLOCK_N // 2], gl.float32, h_layout)

    for k in gl.static_range(2):        # the first two items' Q
        if first + k * step < n_work:
            _load_q(q_desc, q_smem.index(Q0 + k), q_bar.index(Q0 + k), first + k * step,
                    n_work, n_mtiles, nheads, group, seqlen_q, seqlen_k, HALF, BLOCK_M,
                    BLOCK_N, HEAD_D, CAUSAL, GROUP)
    # The previous item's results, for its epilogue in the next turn (none before the first)
    o = gl.zeros([BLOCK_M, HEAD_D], dtype, o_layout)
    m_i = gl.full([BLOCK_M], 0.0, gl.float32, row_layout)
    l_i = gl.full([BLOCK_M], 1.0, gl.float32, row_layout)
    lse_row = LSE + gl.arange(0, BLOCK_M, layout=row_layout)
    o_row = 0
    o_col = 0
    it = 0          # K/V tiles of the ring so far
    t = 0           # work items done so far (Q buffer t % 2, its barrier's phase)
    for w in range(first, n_work, step):
        m0, off_b, off_h, q_row0, q_col, _, _, n_all, n_unmasked = _work_block(
            w, n_work, n_mtiles, nheads, group, seqlen_q, seqlen_k, 2 * BLOCK_M, BLOCK_N,
            HEAD_D, CAUSAL, GROUP)
        n_tiles, n_unmasked = _own_tiles(m0, n_all, n_unmasked, HALF, BLOCK_M, BLOCK_N,
                                         CAUSAL)
        q_buf = Q0 + t % 2
        q_cur = q_smem.index(q_buf)
        mbarrier.wait(q_bar.index(q_buf), (t // 2) & 1)
        s_tok = _issue_s(q_cur, k_smem, k_ready, s_zero, it, NUM_STAGES)
        if t > 0:                       # the previous item's epilogue, under S_0
            _store_out(o, m_i, l_i, lse_row, o_smem, o_desc, o_row, o_col)
        s_0 = warpgroup_mma_init(warpgroup_mma_wait(0, deps=(s_tok,)))
        # (O's zeros after the wait: see _start)
        acc = warpgroup_mma_init(gl.zeros([BLOCK_M, HEAD_D], gl.float32, o_layout))
        m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, row_layout)
        l_i = gl.full([BLOCK_M], 0.0, gl.float32, row_layout)
        rows = m0 + HALF * BLOCK_M + gl.arange(0, BLOCK_M, layout=row_layout)
        s_0, acc = warpgroup_mma_wait(0, deps=(s_0, acc))
        mbarrier.arrive(k_empty.index(it % NUM_STAGES), count=1)   # K_0 read
        refill = w + 2 * step < n_work      # item t + 2, into this item's Q buffer
        if n_tiles == 1 and refill:         # S_0 was this Q's last S
            _load_q(q_desc, q_cur, q_bar.index(q_buf), w + 2 * step, n_work, n_mtiles,
                    nheads, group, seqlen_q, seqlen_k, HALF, BLOCK_M, BLOCK_N, HEAD_D,
                    CAUSAL, GROUP)
        p, m_i, alpha, l_i = _softmax_tile(s_0, m_i, l_i, rows, 0, n_unmasked, qk_scale,
                                           None, BLOCK_N, CAUSAL)
        p = gl.convert_layout(p.to(dtype), p_layout)
        # (one tile a trip: with two, the second P's registers made ptxas spill 140 B at
        # d=128 beside the previous item's O, offline)
        p, acc, m_i, l_i = _rs_tiles(p, q_cur, k_smem, v_smem, k_ready, v_ready, k_empty,
                                     v_empty, s_zero, acc, m_i, l_i, rows, n_tiles, n_unmasked,
                                     qk_scale, it, anchor, NUM_STAGES, BLOCK_N, CAUSAL,
                                     o_layout, p_layout, False)
        if n_tiles > 1:                 # (peeled: its S is this Q's last)
            j = n_tiles - 2
            if HALF_D:                  # (the diagonal over its first half: see above)
                s_h, acc = _rs_products(p, q_cur, k_smem, v_smem, k_ready, v_ready, k_empty,
                                        h_zero, acc, it + j, NUM_STAGES)
            else:
                s, acc = _rs_products(p, q_cur, k_smem, v_smem, k_ready, v_ready, k_empty,
                                      s_zero, acc, it + j, NUM_STAGES)
            if refill:
                _load_q(q_desc, q_cur, q_bar.index(q_buf), w + 2 * step, n_work, n_mtiles,
                        nheads, group, seqlen_q, seqlen_k, HALF, BLOCK_M, BLOCK_N, HEAD_D,
                        CAUSAL, GROUP)
            if HALF_D:
                acc, m_i, l_i = _half_softmax(s_h, p, acc, m_i, l_i, rows, j + 1, n_unmasked,
                                              qk_scale, v_ready, v_empty, it + j, anchor,
                                              v_smem, NUM_STAGES, BLOCK_N, CAUSAL, o_layout,
                                              p_layout, row_layout)
            else:
                p, acc, m_i, l_i = _rs_softmax(s, p, acc, m_i, l_i, rows, j + 1, n_unmasked,
                                               qk_scale, v_empty, it + j, anchor, NUM_STAGES,
                                               BLOCK_N, CAUSAL, o_layout, p_layout)
        if not HALF_D or n_tiles == 1:  # (the half diagonal's P V is done)
            j = n_tiles - 1
            acc = _pv(p, v_smem, v_ready, acc, it + j, NUM_STAGES)
            acc, p = warpgroup_mma_wait(0, deps=(acc, p))
            mbarrier.arrive(v_empty.index((it + j) % NUM_STAGES), count=1)
        if _skips(CAUSAL, BLOCK_M, BLOCK_N):    # tiles wholly above this consumer's diagonal
            for j in range(n_tiles, n_all):
                _pass_slot(k_ready, v_ready, k_empty, v_empty, it + j, NUM_STAGES)
        # O normalised in this turn: ptxas waits for every wgmma in flight before a use of
        # registers that a wgmma wrote in an earlier turn (C7517), so the next S_0 would not
        # overlap the division
        o = _normalized(acc, l_i, dtype, o_layout)
        lse_row = LSE + off_b * stride_lse_b + off_h * stride_lse_h + rows
        o_row = q_row0 + HALF * BLOCK_M
        o_col = q_col
        it += n_all
        t += 1
    if t > 0:                           # the last item's epilogue
        _store_out(o, m_i, l_i, lse_row, o_smem, o_desc, o_row, o_col)
    tma.store_wait(0)


@gluon.jit
def _fwd_hopper_kernel(q_desc, k_desc, v_desc, o_desc, q_desc2, k_desc2, v_desc2, o_desc2, LSE,
                       stride_lse_b, stride_lse_h, nheads, group, seqlen_q, seqlen_k, n_mtiles,
                       n_work, qk_scale, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                       HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                       CONSUMER_REGS: gl.constexpr, GROUP: gl.constexpr,
                       O_IN_P: gl.constexpr, O_IN_Q: gl.constexpr, EARLY_S1: gl.constexpr,
                       HEAD_D2: gl.constexpr = 0, P_REGS: gl.constexpr = False,
                       NEXT_S0: gl.constexpr = False, HALF_DIAG: gl.constexpr = False):
    # A program takes work items program_id, + num_programs, ... (n_work in all; a grid of
    # n_work programs: one each): 2 * BLOCK_M query rows of one (batch, head) apiece.
    # HEAD_D2 > 0: the head dim is split (HEAD_D + HEAD_D2 columns; the *_desc2 descriptors
    # read the second part), else the *_desc2 are None. P_REGS: P in registers (no P buffers).
    # NEXT_S0 (:func:`next_s0`): two Q tiles per consumer (:func:`_consume_ahead`).
    q_smem = gl.allocate_shared_memory(q_desc.dtype, [4 if NEXT_S0 else 2, BLOCK_M, HEAD_D],
                                       q_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [NUM_STAGES, BLOCK_N, HEAD_D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [NUM_STAGES, BLOCK_N, HEAD_D], v_desc.layout)
    if P_REGS:      # no P buffers: each consumer's row sums (see _rs_softmax)
        gl.static_assert(not (O_IN_P or EARLY_S1),
                         "P in registers: no O through P, no early S_1")
        p_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M],
                                           gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    else:
        p_smem = gl.allocate_shared_memory(q_desc.dtype, [4, BLOCK_M, BLOCK_N],
                                           _p_layout(BLOCK_M, BLOCK_N, q_desc.dtype))
    if O_IN_P:      # O leaves through each consumer's second P buffer (see _consume)
        o0 = p_smem.index(1)._reinterpret(o_desc.dtype, [BLOCK_M, HEAD_D], o_desc.layout)
        o1 = p_smem.index(3)._reinterpret(o_desc.dtype, [BLOCK_M, HEAD_D], o_desc.layout)
    elif O_IN_Q:    # O leaves through each consumer's Q tile (see _consume)
        o0 = q_smem.index(0)._reinterpret(o_desc.dtype, [BLOCK_M, HEAD_D], o_desc.layout)
        o1 = q_smem.index(1)._reinterpret(o_desc.dtype, [BLOCK_M, HEAD_D], o_desc.layout)
    else:
        o_smem = gl.allocate_shared_memory(o_desc.dtype, [2, BLOCK_M, HEAD_D], o_desc.layout)
        o0, o1 = o_smem.index(0), o_smem.index(1)
    if HEAD_D2 > 0:     # the second part's tiles (O: apart, or in the second part's Q tiles)
        gl.static_assert(not O_IN_P, "a split head dim's O cannot leave through P buffers")
        q_smem2 = gl.allocate_shared_memory(q_desc2.dtype, [2, BLOCK_M, HEAD_D2],
                                            q_desc2.layout)
        k_smem2 = gl.allocate_shared_memory(k_desc2.dtype, [NUM_STAGES, BLOCK_N, HEAD_D2],
                                            k_desc2.layout)
        v_smem2 = gl.allocate_shared_memory(v_desc2.dtype, [NUM_STAGES, BLOCK_N, HEAD_D2],
                                            v_desc2.layout)
        if O_IN_Q:
            o_smem2 = q_smem2._reinterpret(o_desc2.dtype, [2, BLOCK_M, HEAD_D2], o_desc2.layout)
        else:
            o_smem2 = gl.allocate_shared_memory(o_desc2.dtype, [2, BLOCK_M, HEAD_D2],
                                                o_desc2.layout)
        q2_desc, k2_desc, v2_desc, o2_desc = q_desc2, k_desc2, v_desc2, o_desc2
    else:   # (constexpr Nones: warp_specialize's argument tuples take no bare None)
        q_smem2: gl.constexpr = None
        k_smem2: gl.constexpr = None
        v_smem2: gl.constexpr = None
        o_smem2: gl.constexpr = None
        q2_desc: gl.constexpr = None
        k2_desc: gl.constexpr = None
        v2_desc: gl.constexpr = None
        o2_desc: gl.constexpr = None
    q_bar, k_ready, v_ready, v_empty = _kv_ring_barriers(NUM_STAGES)
    k_empty = barriers(NUM_STAGES, 2)       # K freed apart from V (see _load_kv_ring)
    if NEXT_S0:     # (two Q tiles per consumer: four Q barriers, the ring's two unused)
        gl.static_assert(P_REGS and HEAD_D2 == 0 and not (O_IN_P or O_IN_Q),
                         "S_0 ahead: P in registers, a whole head dim, O apart")
        q_bar = barriers(4, 1)

    gl.warp_specialize([
        (_consume, (q_desc, o_desc, q_smem, o0, p_smem,
                    q_bar, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty, LSE,
                    stride_lse_b, stride_lse_h, nheads, group, seqlen_q, seqlen_k, n_mtiles,
                    n_work, qk_scale, 0, BLOCK_M, BLOCK_N, HEAD_D, NUM_STAGES, CAUSAL, GROUP,
                    O_IN_P, O_IN_Q, EARLY_S1, q2_desc, o2_desc, q_smem2, o_smem2, k_smem2,
                    v_smem2, HEAD_D2, P_REGS, NEXT_S0, HALF_DIAG)),
        (_consume, (q_desc, o_desc, q_smem, o1, p_smem,
                    q_bar, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty, LSE,
                    stride_lse_b, stride_lse_h, nheads, group, seqlen_q, seqlen_k, n_mtiles,
                    n_work, qk_scale, 1, BLOCK_M, BLOCK_N, HEAD_D, NUM_STAGES, CAUSAL, GROUP,
                    O_IN_P, O_IN_Q, EARLY_S1, q2_desc, o2_desc, q_smem2, o_smem2, k_smem2,
                    v_smem2, HEAD_D2, P_REGS, NEXT_S0, HALF_DIAG)),
        (_load_works, (k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty,
                       nheads, group, seqlen_q, seqlen_k, n_mtiles, n_work, 2 * BLOCK_M,
                       BLOCK_N, HEAD_D, NUM_STAGES, CAUSAL, GROUP, k2_desc, v2_desc, k_smem2,
                       v_smem2, HEAD_D2)),
    ], [4, 1], [CONSUMER_REGS, 24])


def env_config(module: str, configs: dict, d: int) -> tuple[int, int, int, int]:
    """``configs[d]``, or the four integers (``a,b,c,d``) of the Gluon kernel ``module``'s
    config override when it is set (:data:`.common.GLUON_SWITCHES`; for sweeps)."""
    text = getenv(GLUON_SWITCHES[module][2])
    return tuple(int(x) for x in text.split(",")) if text else configs[d]


def config(d: int, seqlen_k: int, causal: bool = False) -> tuple[int, int, int, int]:
    """(rows per consumer, keys per tile, ring slots, consumer registers) for head dim d,
    ``seqlen_k`` keys and the mask (:data:`_NARROW` tiles where the wide ones do not divide
    the keys, and causal up to :data:`NARROW_CAUSAL_UPTO` keys, where they measured ahead);
    ``FLASHTILE_GLUON_FWD_CONFIG=rows,keys,slots,regs`` overrides it (for sweeps; the
    schedule holds two K tiles at once, so at least 2 slots)."""
    configs = _CONFIGS
    if d in _NARROW and (seqlen_k % _CONFIGS[d][1]
                         or (causal and seqlen_k <= NARROW_CAUSAL_UPTO)):
        configs = {**_CONFIGS, d: _NARROW[d]}
    rows, keys, stages, regs = env_config("fwd_hopper", configs, d)
    if stages < 2:
        raise ValueError(f"FLASHTILE_GLUON_FWD_CONFIG: the Gluon forward needs at least 2 ring "
                         f"slots (it holds K_j and K_(j+1)), got {stages}")
    return rows, keys, stages, regs


def folded(t: torch.Tensor) -> torch.Tensor | None:
    """``(b, s, h, d)`` as the 2-D ``(b*s, h*d)`` view TMA reads, or None if the strides do
    not allow one."""
    b, s, h, d = t.shape
    if t.stride(3) != 1 or t.stride(2) != d or t.stride(1) != h * d or \
            (b > 1 and t.stride(0) != s * h * d) or t.data_ptr() % 16:
        return None
    return t.as_strided((b * s, h * d), (h * d, 1))


@functools.lru_cache(maxsize=None)
def _tile_layout(rows: int, d: int, dtype: torch.dtype):
    # (made once: building it costs ~8 us of host time, and a backward builds six)
    gdt = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16,
           torch.float32: gl.float32}[dtype]
    return gl.NVMMASharedLayout.get_default_for([rows, d], gdt)


def descriptor(t: torch.Tensor, rows: int, cols: int | None = None) -> TensorDescriptor:
    """A TMA descriptor of ``t`` ``(b, s, h, d)`` read as :func:`folded` ``(b*s, h*d)`` in
    ``(rows, cols)`` tiles, ``cols`` d unless given (a part of a split head dim, see
    :func:`head_parts`; the caller has checked that it folds)."""
    t2, cols = folded(t), cols or t.shape[3]
    return TensorDescriptor(t2, list(t2.shape), list(t2.stride()), [rows, cols],
                            _tile_layout(rows, cols, t.dtype))


def part_descriptor(t: torch.Tensor, tile: tuple[int, int]) -> TensorDescriptor:
    """:func:`descriptor` of ``t`` in ``tile`` = ``(rows, cols)`` tiles (a part of the head
    dim: the forward's split head dim, the d=256 dK/dV kernel's column halves)."""
    return descriptor(t, *tile)


def head_parts(d: int) -> tuple[int, int]:
    """The head dim of the forward, the dK/dV kernel (:mod:`.bwd_hopper`) and the dQ kernel
    (:mod:`.dq_hopper`) as (first part, second part): Gluon's tensor shapes are powers of
    two, so d=96 runs as 64 + 32 columns (tiles of each part; the forward's S summed over
    both, O in two accumulators; dK/dV's S^T and dP^T summed over both, dK and dV in two
    accumulators each; dQ's S and dP summed over both, dQ in two accumulators), and the
    second part is 0 for the others (one tile each, as before). (Padding
    d=96 to 128 would spend a third more MACs: at best 0.75 of d=128's rate.)"""
    return (64, 32) if d == 96 else (d, 0)


def enabled() -> bool:
    """Switched on: ``FLASHTILE_GLUON_FWD`` unset, ``auto`` (the cases of :data:`AHEAD`) or
    ``1`` (every covered call); ``0`` turns it off."""
    return gluon_switch_on("fwd_hopper")


def covers(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, params, head_dims) -> bool:
    """The device, dtype, feature, head-dim and layout conditions that this kernel and the
    Gluon dK/dV and dQ kernels share; each adds its own tile multiples and passes the head
    dims it has configs for, ``head_dims`` (d = dv; the forward's include 96 and 256, the
    d=64/128 dK/dV and dQ kernels' 96, d=256's dK/dV and dQ kernels' 256 alone).
    The mask is read from the window, as the tile-level kernels do: none, or causal
    (``(-1, 0)``, which needs ``seqlen_q == seqlen_k``; :func:`causal`)."""
    if not is_sm90(q.device):
        return False
    if q.dtype not in (torch.float16, torch.bfloat16) or not (q.dtype == k.dtype == v.dtype):
        return False
    if q.dim() != 4 or params.cu_seqlens_q is not None or params.block_table is not None:
        return False
    if (params.dropout_p or params.softcap or params.alibi_slopes is not None
            or params.attn_bias is not None or params.score_mod is not None
            or params.mask_mod is not None or params.block_mask is not None
            or params.window_left != -1 or params.window_right not in (0, -1)):
        return False
    d = q.shape[3]
    if d not in head_dims or k.shape[3] != d or v.shape[3] != d:
        return False
    if causal(params) and q.shape[1] != k.shape[1]:
        return False
    return all(folded(t) is not None for t in (q, k, v))


def causal(params) -> bool:
    """The Gluon kernels' CAUSAL flag: the window ``(-1, 0)``."""
    return params.window_right == 0


def gradient_tiles_fit(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, q_tile: int,
                       k_tile: int) -> bool:
    """The backward kernels' conditions beyond :func:`covers`: lengths that are multiples of
    their (query, key) tiles, and a ``dout`` shaped and typed like q that TMA can read."""
    return (q.shape[1] % q_tile == 0 and k.shape[1] % k_tile == 0
            and dout.shape == q.shape and dout.dtype == q.dtype and folded(dout) is not None)


def supports(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, params) -> bool:
    """True when this kernel runs the call: switched on, covered (see the module docstring),
    and under ``auto`` a case of :data:`AHEAD` (:func:`ahead`)."""
    switch = gluon_switch("fwd_hopper")
    if switch in ("", "0") or not covers(q, k, v, params, _CONFIGS):
        return False
    if params.softmax_scale <= 0:   # (the row max is taken before scaling: _softmax_tile)
        return False
    if switch == "auto" and not ahead(q.shape[3], causal(params), k.shape[1]):
        return False
    rows, keys = config(q.shape[3], k.shape[1], causal(params))[:2]
    return q.shape[1] % (2 * rows) == 0 and k.shape[1] % keys == 0


def ahead(d: int, is_causal: bool, seqlen_k: int) -> bool:
    """Whether the default (``auto``) runs head dim ``d`` with this mask and ``seqlen_k`` keys
    on this kernel: a case of :data:`AHEAD`, causal from :data:`CAUSAL_AHEAD_FROM` keys on."""
    if (d, is_causal) not in AHEAD:
        return False
    return not is_causal or seqlen_k >= CAUSAL_AHEAD_FROM.get(d, 0)


def programs(n_work: int, device: torch.device, variable: str, auto: bool) -> int:
    """The grid for ``n_work`` work items: one program each, or one per SM (a program's
    shared memory fills an SM), each looping over items ``program_id``, ``+ num_programs``,
    ... so that one item's epilogue and the next one's first loads overlap (short sequences:
    few tiles per item). ``variable`` (``FLASHTILE_GLUON_FWD_PERSISTENT``, or ``_BWD_`` for
    the Gluon dK/dV kernel) set to ``1`` asks for one per SM, ``0`` for one per item; unset
    or ``auto``, ``auto`` decides: the calling kernel's rule of where the persistent grid
    measured ahead. Off a GPU (the tools that compile for sm_90a on the CPU) the grid is the
    H200's (:func:`.common.sm_count`)."""
    value = getenv(variable, "auto")
    if value in ("", "0") or (value == "auto" and not auto):
        return n_work
    return min(n_work, sm_count(device))


def causal_group(n_tiles: int, single_upto: int,
                 variable: str = "FLASHTILE_GLUON_FWD_GROUP") -> int:
    """Tiles per chunk of the causal order (:func:`_work_tile`) for ``n_tiles`` work tiles
    per head: 1 up to ``single_upto`` tiles per head (the calling kernel's measured rule, e.g.
    :data:`SINGLE_UPTO`), else 8. ``variable`` (``FLASHTILE_GLUON_FWD_GROUP``, or ``_BWD_``
    for the dK/dV kernel's key tiles) set to a positive integer forces it; unset or ``auto``:
    the rule. Chunks of 8 measured ahead of 1 (session 13, H200, bf16, same run): the forward
    +10%/+7% at d=128 causal 1k/4k, -2% at 16k; the forward+backward (the dK/dV order)
    +4%/+10%/+1% at d=128 1k/4k/16k, +8.5%/+5.6% at d=64 4k/16k; but not where a chunk of 8
    holds a head's every tile and the heaviest-first order is gone (:data:`SINGLE_UPTO`)."""
    value = getenv(variable, "auto")
    if value in ("", "auto"):
        return 1 if n_tiles <= single_upto else 8
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{variable} must be a positive integer or 'auto', got {value!r}")
    return int(value)


# The forward's work tiles per head (2 * BLOCK_M query rows each) up to which its causal order
# runs in chunks of 1 (:func:`causal_group`), by head dim. Measured against chunks of 8: d=64
# 1k (8 tiles) +10% (session 13); d=128 512 (4 tiles) +7% in alternating runs, and 1k (8
# tiles) -7% (session 15). On the H100 (session 40) chunks of 8 took 23% less time at d=128
# causal 512 and 31% less at d=256, 6% more at d=96: chunks of 1 re-read K/V from HBM there
# (:func:`causal_window`), unsettled on the H200. Session 41 (H100, two rounds) made the
# windows of :func:`causal_window` the default where chunks of 1 run (d=128 causal 512 -31%,
# d=96 -19%), and d=256 chunks of 8 from 2 tiles (its windows of 66 heads, 33 MB, pass
# WINDOW_BYTES; chunks of 8 took 113.6 us against 161.6 at causal 512, the same as session 40).
# Session 42 (H100, four rounds in two calls): d=64 causal 2k (16 tiles) in chunks of 1 within
# windows of 33 pairs took 3-5% less than chunks of 8 (bf16 366.8-369.5 against 380.3-388.0
# us, fp16 366.1 / 376.2 against 391.8 / 396.3); at 4k (32 tiles, windows of 33 MB forced)
# level, and d=128 causal 2k level or slower, so those stay.
SINGLE_UPTO = {64: 16, 96: 4, 128: 4, 256: 0}


def early_s1(d: int, causal: bool) -> bool:
    """Whether an item's S_1 is issued before its first softmax (the kernel's ``EARLY_S1``;
    an item's start is otherwise bare, and short sequences have few tiles per item):
    ``FLASHTILE_GLUON_FWD_EARLY_S1`` set to ``1``/``0`` forces it; unset or ``auto``, the
    measured rule. Kernel time against S_1 after it (session 17, H200, bf16, profiler sums of
    two alternating runs at 512/1k/4k): d=64 unmasked -1%/-4%/-2%, d=128 causal
    -5.5%/-4%/-3%, but d=128 unmasked +1%/+2%/+2% (no spills either way: why is not
    established), so there it stays after. d=64 causal runs the tile-level forward by default
    up to 2k keys (:data:`CAUSAL_AHEAD_FROM`). d=256
    never: S_0 and S_1 live beside its 128 registers of O made ptxas spill (offline, 64 keys
    x 2 slots: 84 B unmasked, 16 B causal; 0 B with S_1 after). d=96 never either (its split
    tiles at 128 keys x 2 slots, offline: 192 B unmasked, 12/16 B causal; 0 B with S_1
    after; unmeasured on the GPU)."""
    forced = env_forced("FLASHTILE_GLUON_FWD_EARLY_S1")
    if forced is not None:
        return forced
    return ((causal and d <= 128) or d < 128) and d != 96


# An H200 SM's shared memory for one CTA (227 KB), less 1 KB for the barriers and what the
# compiler adds (344 B at the default configs)
SHARED_BYTES = 227 * 1024 - 1024


def _bytes_apart(rows: int, keys: int, stages: int, d: int, p_tiles: int = 4) -> int:
    """A config's shared memory with O in tiles of its own (2-byte elements): Q and O
    ``2 x (rows, d)``, K and V ``stages x (keys, d)``, ``p_tiles`` P ``(rows, keys)`` (four,
    or none with P in registers: :func:`p_in_registers`)."""
    return 2 * (4 * rows * d + 2 * stages * keys * d + p_tiles * rows * keys)


def o_in_p(rows: int, keys: int, stages: int, d: int, p_tiles: int = 4) -> bool:
    """Whether O must leave through a P buffer for a config to fit in shared memory
    (:func:`_bytes_apart`); it can when a P buffer holds O (``keys >= d``), e.g. 128 keys x
    2 slots at d=128 (256 KB with O apart, 224 KB through P). Never without P buffers
    (``p_tiles`` 0: they are what made O apart too large)."""
    return p_tiles > 0 and _bytes_apart(rows, keys, stages, d, p_tiles) > SHARED_BYTES \
        and keys >= d


def o_in_q(rows: int, keys: int, stages: int, d: int, p_tiles: int = 4) -> bool:
    """Whether O must leave through each consumer's Q tile: the config does not fit with O
    apart and a P buffer cannot hold O (``keys < d``, or no P buffers), e.g. 64 keys x 2
    slots at d=256 (288 KB apart, 224 KB through Q). Its cost: an item's next Q loads once O
    has left the tile, not while the item's last P V computes."""
    return _bytes_apart(rows, keys, stages, d, p_tiles) > SHARED_BYTES \
        and (keys < d or p_tiles == 0)


def p_in_registers(d: int) -> bool:
    """Whether P stays in registers as the A operand of P V (the kernel's ``P_REGS``, in
    FlashAttention-3's order per tile: issue S_{j+1}, issue P_j V_j, wait for S_{j+1},
    softmax into P_{j+1}, wait for P_j V_j, discount O; see :func:`_consume`): by default at
    d=64, d=96 and d=128 (kernel time -3.6% to -9.2% at d=128, session 21; at d=96, split
    head dim, one register P feeds both output products: -7% to -11% unmasked, -1% to -7%
    causal, session 22); ``FLASHTILE_GLUON_FWD_P_REGS=0`` stores P to shared memory instead.
    Ignored at d=256 (its 128 registers of O leave no room for two P). It needs no P buffers
    and no early S_1."""
    forced = env_forced("FLASHTILE_GLUON_FWD_P_REGS")
    return forced is not False and d in (64, 96, 128)


def next_s0(d: int, block_m: int, block_n: int, stages: int, causal: bool,
            seqlen_k: int) -> bool:
    """Whether each item's S_0 is issued before the previous item's epilogue (the kernel's
    ``NEXT_S0``, :func:`_consume_ahead`; two Q tiles per consumer). It applies with P in
    registers and a whole head dim (d=64/128) where the second Q tiles fit beside O's
    (:func:`_bytes_apart`), and runs there by default with the causal mask, and unmasked up
    to :data:`NEXT_S0_UNMASKED_UPTO` keys: forward kernel time against S_0 in its item's turn
    (session 24, H200, bf16, two alternating rounds, 16k tokens) d=128 causal -3.4% at 512,
    -0.6% to -0.9% at 1k-16k; unmasked +0.3% to +1.7% at d=128 (20 B of spills offline at
    4k) and level at d=64 from 1k; d=64 unmasked 512 -6.3% (session 43, H100; items of 4
    tiles, where the item boundary weighs most). ``FLASHTILE_GLUON_FWD_NEXT_S0`` set to
    ``1``/``0`` forces it (``1`` only where it applies)."""
    forced = env_forced("FLASHTILE_GLUON_FWD_NEXT_S0")
    fits = _bytes_apart(block_m, block_n, stages, d, 0) + 4 * block_m * d <= SHARED_BYTES
    applies = p_in_registers(d) and head_parts(d)[1] == 0 and fits
    default = causal or seqlen_k <= NEXT_S0_UNMASKED_UPTO.get(d, 0)
    return applies and (default if forced is None else forced)


def half_diagonal(block_m: int, block_n: int, causal: bool, ahead_s0: bool) -> bool:
    """Whether the first consumer computes an item's last (diagonal) tile over its first
    ``block_n // 2`` keys alone (the kernel's ``HALF_DIAG``, :func:`_consume_ahead`): its
    rows end at the item's row m0 + block_m - 1, so the tile's other half is masked whole for
    it. Causal, tiles twice a consumer's rows wide (narrower ones skip such tiles whole:
    :func:`_own_tiles`), S_0 ahead (``ahead_s0``, :func:`next_s0`; the causal default at
    d=64 and d=128), and ``FLASHTILE_GLUON_FWD_HALF_DIAG=1``: opt-in, not yet run on a GPU
    (session 55). It saves half a tile a causal item for one of the two consumers: about 3% of
    the d=64 causal forward's tiles at 2k keys, 6% at 1k."""
    return bool(env_forced("FLASHTILE_GLUON_FWD_HALF_DIAG")) and causal and ahead_s0 \
        and block_n == 2 * block_m


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, params, out: torch.Tensor,
            lse: torch.Tensor, record=None) -> None:
    """Run the kernel into ``out`` ``(b, sq, hq, d)`` and ``lse`` float32 ``(b, hq, sq)``
    (natural log). The caller has checked :func:`supports`; ``record`` as in
    :func:`.bwd_hopper.dkdv`."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    block_m, block_n, stages, regs = config(d, sk, causal(params))
    p_regs = p_in_registers(d)
    p_tiles = 0 if p_regs else 4
    n_mtiles = sq // (2 * block_m)
    n_work = n_mtiles * b * hq
    grid = programs(n_work, q.device, "FLASHTILE_GLUON_FWD_PERSISTENT", True)
    group = causal_window(causal_group(n_mtiles, SINGLE_UPTO[d]), n_mtiles, b * hq,
                          2 * sk * d * k.element_size(), grid,
                          default="auto") if causal(params) else 1
    ahead_s0 = next_s0(d, block_m, block_n, stages, causal(params), sk)
    half_diag = half_diagonal(block_m, block_n, causal(params), ahead_s0)
    # q, k, v, out in tiles of each part of the head dim (one part, or two: the kernel's
    # *_desc2 descriptors, None where the head dim is whole)
    parts = [cols for cols in head_parts(d) if cols]
    tiles = tuple((t, (rows, cols)) for cols in parts
                  for t, rows in ((q, block_m), (k, block_n), (v, block_n), (out, block_m)))
    plans.gluon_launch(
        record, _fwd_hopper_kernel,
        (grid,), tiles,
        ((None,) * (8 - len(tiles))
         + (lse, lse.stride(0), lse.stride(1), hq, hq // hkv, sq, sk, n_mtiles, n_work,
            params.softmax_scale * LOG2E)),
        dict(BLOCK_M=block_m, BLOCK_N=block_n, HEAD_D=head_parts(d)[0],
             HEAD_D2=head_parts(d)[1], NUM_STAGES=stages,
             CAUSAL=causal(params), CONSUMER_REGS=regs, num_warps=4,
             GROUP=group,
             O_IN_P=o_in_p(block_m, block_n, stages, d, p_tiles),
             O_IN_Q=o_in_q(block_m, block_n, stages, d, p_tiles),
             EARLY_S1=early_s1(d, causal(params)) and not p_regs, P_REGS=p_regs,
             NEXT_S0=ahead_s0, HALF_DIAG=half_diag),
        part_descriptor, "fwd",
        f"gluon {2 * block_m}x{block_n}/{stages}s" + (f" window {-group}" if group < 0 else "")
        + (" half-diag" if half_diag else ""))
