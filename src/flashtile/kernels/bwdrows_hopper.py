"""Hopper dK/dV + dQ kernel (one pass) in Gluon with the queries as rows: FlashAttention-3's layout.

:mod:`.bwd_hopper` computes its products transposed (keys as rows, 32 queries per tile); its
three N=32 products with both operands in shared memory are bound by shared-memory bandwidth
(Nsight Compute, H200, d=128 4k bf16: tensor pipe 49%, L1/shared 71%). This kernel takes
the layout of FlashAttention-3's backward instead, at d=128 and in one pass only (dQ added
by TMA reductions into an fp32 accumulator, as :mod:`.bwd_hopper`'s one pass does).

Notation (per CTA: one work item, 128 keys of one KV head, :func:`.bwd_hopper._item`):

- two consumer warpgroups; consumer ``HALF`` owns keys ``[64 HALF, 64 HALF + 64)`` of the
  item, its K and V tiles (``BLOCK_N x HEAD_D`` = 64 x 128) in shared memory;
- a one-warp loader (:func:`.bwd_hopper._load_q_do`) streams (Q_j, dO_j) tiles of
  ``BLOCK_M`` = 64 queries into a ring of ``NUM_STAGES`` = 2 slots, every query head of the
  KV head in turn (GQA), the causal item starting at its first key's query tile;
- per query tile j, consumer ``HALF``:

  1. ``S = Q_j K^T`` and ``dP = dO_j V^T`` (M = 64 queries, N = 64 keys, K = d; both
     operands from shared memory, K and V through a permuted view);
  2. rows are queries: ``P = exp2(S * scale * log2e - LSE * log2e)`` (causal: key <= query),
     ``dS = P * (dP - D)``;
  3. P and dS (fp16/bf16) into its own 64 x 64 shared tiles ``p_smem[HALF]``,
     ``ds_smem[HALF]``, fenced and announced on ``ds_ready`` (once both consumers' dQ
     products of tile j-1 have released the dS tiles, ``ds_free``);
  4. ``dV += P^T dO_j`` and ``dK += dS^T Q_j`` (M = 64 keys, N = d, K = 64 queries; A is the
     transposed, MN-major view of its P / dS tile, B the ring slot's dO / Q);
  5. once both dS halves are in: ``dQ_j[:, 64 HALF : 64 HALF + 64] = dS_0 K_0[:, part] +
     dS_1 K_1[:, part]`` (M = 64 queries, N = 64, K = 2 x 64 keys, two wgmma chained), out
     through the fp32 shared tile ``dq_smem[HALF]`` as a TMA reduce-add
     (:func:`.bwd_hopper._tma_reduce_add`) into the accumulator of
     :func:`.bwd_hopper.dq_acc_shape` (whose TMA blocks are exactly such 64 x 64 parts);
  6. one wait for dV, dK and dQ, then the ring slot goes back to the loader and the dS tile
     to the other consumer.

  At the end dK (times the softmax scale) and dV leave through the K and V tiles by TMA,
  once the other consumer's last dQ products have read this one's K.

One program per item (no persistent grid: ``FLASHTILE_GLUON_BWD_PERSISTENT=1`` sends the call
to :mod:`.bwd_hopper`'s kernel, which has one),
the causal order of :func:`.bwd_hopper._item` with chunks of 1 (``GROUP`` as
:mod:`.bwd_hopper` chooses it). Registers per consumer thread (240): dK, dV 64 + 64, S, dP
32 + 32, the dQ part 32 (after S and dP are dead). Shared memory at d=128: K, V 64 KB, the
ring 2 x 32 KB, P, dS 32 KB, the dQ staging 32 KB: 192 KB (+ barriers).

The default since session 22 (:func:`enabled`: unset, ``auto`` or ``1``; ``0`` keeps
:mod:`.bwd_hopper`'s transposed kernel; anything else a ValueError):
:func:`.bwd_hopper.dkdv`'s one-pass calls at d=128 run here (:func:`takes`: query lengths
that are multiples of 64 as well); two passes, ``deterministic=True`` and the other head dims
keep :mod:`.bwd_hopper`, and so does a forced persistent grid. d=64 does not fall out: a
consumer's dQ part would be 64 queries x 32 columns, not the accumulator's 64-column TMA
blocks (and an M=32 wgmma does not exist); the ``own-dq`` schedule below, whose parts are 64
x d, would lift that limit.

Offline verdict (sm_90a, bf16, 1k, 16 heads, triton 3.6's ptxas; ``scripts/inspect_kernels.py
--gluon --one-pass --d 128 [--causal]``), unmasked and causal
alike: 0 B of spills (consumers at 240 registers by ``setmaxnreg``; ptxas reports the
kernel's 168), 197,024 B of shared memory, 64 HGMMA (per consumer and tile: S 8, dP 8, dV 4,
dK 4, dQ 2 x 4) for 4 wgmma waits (two per consumer and tile), no C75xx warning (no wgmma
serialised). The first version held the shared tiles' wgmma descriptors as loop invariants
and spilled 284 B inside the tile loop (see the opaque zero in :func:`_rows_consume`).
On the H200 (session 22, bf16, 16k tokens, two alternating rounds against the transposed
kernel, backward kernel sums): -4.1% / -7.3% / -6.1% unmasked at 1k / 4k / 16k, -4.3% / -6.2% /
-5.1% causal; the backward alone by do_bench 0.85-0.93x cuDNN (the transposed kernel:
0.81-0.88x in the same runs), forward+backward 0.86-0.97x. Nsight Compute at 4k unmasked: 2,699
us (the transposed kernel 2,900, cuDNN's 2,302), tensor pipe 52% (49%, 64%), L1 67% (71%, 69%),
issue slots 20% busy: the consumers wait more than they issue.

Three more schedules, one at a time, for the sweep (:func:`schedule`:
``FLASHTILE_GLUON_BWD_ROWS_SCHEDULE`` = ``skew``, ``own-dq`` or ``ahead``; unset: one tile at
a time as above).

Skewed schedule (``skew``, the constexpr ``SKEW``; :func:`_rows_consume_skewed`). Tile by tile,
each consumer needs the other's dS of the same tile before its dQ (step 5), which holds the two
in step: their softmax phases coincide and nothing feeds the tensor pipe meanwhile (Nsight
Compute, H200, d=128 4k: issue slots 20% busy). Skewed, tile t issues its S, dP, P, dS, dV and
dK as above and then the dQ part of tile t-1, whose dS halves both consumers stored a tile ago,
so a consumer waits for the other's dS one tile behind and the two may drift apart by up to a
tile:

- the dS tiles double-buffered, ``ds_smem[2 (t % 2) + HALF]`` (+16 KB), with a ``ds_ready``
  and a ``ds_free`` barrier per buffer (both consumers' dS of tile t stored; both
  consumers' dQ products of tile t read them: the buffer's refill, tile t+2, waits for it);
  the P tile stays single (its one reader, this consumer's dV, is waited in the same tile),
  and so does the dQ staging tile;
- the ring slot goes back after the tile's dV and dK, as before (dQ reads dS and K only);
- tile 0 is peeled (no dQ before it; rather than a dQ under a condition inside the loop),
  the last tile's dQ follows the loop, and dK/dV leave once ``ds_free`` of that last tile
  completes. Every item has a tile (n_t >= 1: causal items need ``seqlen_q == seqlen_k``).

Offline (same build, ``skew``), unmasked and causal alike:
0 B of spills (240 registers per consumer: the live set of the loop is as tile by tile,
dK, dV 128 + S, dP 64, then dQ 32 once S and dP are dead), 213,416 B of shared memory
(+16,392), 128 HGMMA for 10 wgmma waits (per consumer: tile 0 24 HGMMA / 2 waits, the loop
32 / 2, the last dQ 8 / 1), no C75xx warning. The default build (``SKEW`` off) is unchanged:
the same PTX after stripping ``.loc``/``.file`` lines and debug labels, the same SASS.

On the H200 (one short session, bf16, 4 x 4k x 16 heads, d=128; Nsight Compute with
``--clock-control none``, two launches of each, tile by tile -> skewed): unmasked 2.70 / 2.69
-> 2.59 / 2.61 ms (-3.5%), tensor pipe (``sm__pipe_tensor_cycles_active``) 54.2% -> 56.5%,
issue slots 20.5% -> 24.1%, L1 67% -> 70%; causal 1.50 / 1.50 -> 1.49 / 1.49 ms (-0.5%),
tensor pipe 50.0% -> 50.2%, issue slots 22.3% -> 24.6%. The whole backward by ``do_bench``
(4 alternating rounds) moved within its noise: unmasked 2.91-3.08 -> 2.88-2.96 ms, causal
1.69-1.80 -> 1.70-1.77 ms. dK and dV equal the tile-by-tile kernel's bit for bit, dQ within
1.6e-3 of its largest element (the reductions' order); tests/test_bwdrows_hopper.py passed
with ``SKEW`` on and off. Still opt-in: one session's numbers, not the A/B rounds of
docs/perf.md.

Own-dQ schedule (``own-dq``, the constexpr ``OWN_DQ``; :func:`_rows_consume_own`).
Step 5 splits dQ by columns, so each consumer needs the other's dS every tile; split by keys
instead, it needs nothing of the other's: consumer ``HALF`` computes ``dQ_j += dS_HALF
K_HALF`` over its own 64 keys and all ``HEAD_D`` columns (M = 64 queries, N = 128, K = 64
keys; A its own dS tile, B its own K tile, both in shared memory already) and reduces that
64 x 128 fp32 part into the accumulator, where the other consumer's part adds up in the L2.
No ``ds_ready``/``ds_free`` wait remains (the two barriers are allocated, 16 B, and never
used): the P and dS tiles' only readers are the consumer's own dV, dK and dQ products, waited
in the tile, and so are its K tile's, so dK and dV leave through K and V after the loop
without a cross-consumer wait either, and neither consumer waits for the other's K and V to
land. The cost: twice the reduce-add traffic (per query tile and item 2 x 32 KB of fp32
instead of 2 x 16 KB), the dQ staging tile twice as large (``dq_smem[HALF]`` 64 x 128 fp32,
32 KB, one TMA reduction whose four 64 x 32 boxes the warpgroup's four warps issue), and the
accumulator's TMA descriptor in 64 x 128 blocks (:func:`dkdv`). Registers: dK, dV 128 + the
dQ part 64 once S and dP are dead.

Offline (same build, ``own-dq``; not yet run on a GPU),
unmasked and causal alike: 0 B of spills (240 registers per consumer; ptxas reports the
kernel's 168), 229,736 B of shared memory (+32,712; 2,712 B under the 232,448 B of one
H200 SM, so the 64 x 128 part is staged whole, not as two 64 x 64 halves), 56 HGMMA (per
consumer and tile: S 8, dP 8, dV 4, dK 4, dQ 4 at N = 128) for 4 wgmma waits (two per
consumer and tile), no C75xx warning; SASS: STS 114 (82), SYNCS 23 (43), BAR 37 (42). The
default build (``OWN_DQ`` off) is unchanged: the same PTX after stripping ``.loc``/``.file``
lines and debug labels, the same SASS. Whether dropping the handshake pays for the doubled
reduce traffic is for the GPU to say.

S and dP ahead (``ahead``, the constexpr ``AHEAD``; :func:`_rows_consume_ahead`). Tile by tile,
a consumer's tensor pipe idles during its softmax unless the other consumer issues (Nsight
Compute at 4k: tensor pipe 52%, issue slots 20%). Ahead, tile 0's S and dP are issued before
the loop, and tile t, after issuing its dV, dK and dQ, waits for ring slot t+1 and issues
S_{t+1}, waits for dV, dK and dQ only (``warpgroup_mma_wait(1)``: S_{t+1} stays in flight),
stages the dQ part in shared memory, issues dP_{t+1} (into the registers the dQ part leaves)
and then the dQ reduction; tile t+1 starts by waiting for its S and dP. The last tile (no t+1)
is peeled. The schedule the brief named first, S_{t+1} and dP_{t+1} both issued before the wait
for dV, dK and dQ, spills: S, dP 64 + dK, dV 128 + dQ 32 = 224 of the 240 registers live across
the dQ reduction, and ptxas keeps S in local memory (512 B spills unmasked, 516 B causal,
C7512: every wgmma serialised). With ``OWN_DQ`` (dQ 64 registers) S ahead of the wait spills
too (772 B, C7512), and S and dP both issued after the staging leave 4 B of spills causal
(outside the tile loop; 0 B unmasked): not offered.

Offline (same build, ``ahead``; not yet run on a GPU),
unmasked and causal alike: 0 B of spills (240 registers per consumer; ptxas reports the
kernel's 168), 197,024 B of shared memory (as tile by tile), 128 HGMMA for 8 wgmma waits
(per consumer: the loop 32 HGMMA / 2 waits, the peeled last tile 32 / 2), no C75xx warning;
SASS STS 130 (82), BAR 54 (42), SYNCS 61 (43). Two other clean placements compiled the same
numbers: S ahead alone (dP at the tile's top) and S and dP both issued after the dQ part is
staged. The default build (``AHEAD`` off) is unchanged: the same PTX up to its debug
sections after stripping ``.loc``/``.file`` lines and labels, the same SASS.
"""
from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)
from triton.runtime.jit import constexpr_function

from . import bwd_hopper, fwd_hopper, plans
from .bwd_hopper import (_item, _load_kv, _load_q_do, _row_stats, _tma_reduce_add,
                         reduce_through)
from .common import env_forced, getenv

# (head dim) -> (keys per consumer, queries per tile, ring slots, consumer registers)
_CONFIGS = {128: (64, 64, 2, 240)}


@constexpr_function
def _tile_layout(rows, cols, dtype):
    """P and dS tiles' shared layout (64 x 64 fp16/bf16: 128-byte swizzle), read as the A
    operand both as they are (dQ) and transposed (dV, dK)."""
    return gl.NVMMASharedLayout.get_default_for([rows, cols], dtype)


@gluon.jit
def _scores(s, dp, keys, q_pos, lse2, d_row, qk_scale, CAUSAL: gl.constexpr,
            dtype: gl.constexpr):
    """P and dS of one tile (queries as rows) in ``dtype``, from S and dP ``(queries,
    keys)`` fp32 and the tile's rows LSE (log2 domain) and D."""
    p = gl.exp2(s * qk_scale - lse2[:, None])
    if CAUSAL:                                   # key j is seen by query i iff j <= i
        p = gl.where(keys[None, :] <= q_pos[:, None], p, 0.0)
    ds = p * (dp - d_row[:, None])
    return p.to(dtype), ds.to(dtype)


@gluon.jit
def _dq_part_reduce(dq, dq_smem, dq_desc, t, i0, n_i, q_row0, q_col0, sm_scale,
                    HALF: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_D: gl.constexpr):
    """Tile t's dQ part (64 queries x 64 columns ``HALF``, complete; ``OWN_DQ``: 64 queries x
    all ``HEAD_D`` columns, this consumer's keys' share) leaves as ``sm_scale * dQ`` through
    this consumer's shared tile by a TMA reduction into the fp32 accumulator, once the
    previous tile's reduction has read the tile (:func:`.bwd_hopper.reduce_through`, as
    :func:`.bwd_hopper._dq_reduce` but untransposed)."""
    row = q_row0 + (i0 + t % n_i) * BLOCK_M
    if dq.shape[1] == HEAD_D:       # (OWN_DQ: the whole head dim, the other's keys added in L2)
        col = q_col0 + (t // n_i) * HEAD_D
    else:
        col = q_col0 + (t // n_i) * HEAD_D + HALF * 64
    reduce_through(dq, sm_scale, dq_smem, dq_smem, dq_desc, row, col)


@gluon.jit
def _rows_consume(k_desc, v_desc, dk_desc, dv_desc, dq_desc, k_smem, v_smem, kv_bar, q_smem,
                  do_smem, p_smem, ds_smem, dq_smem, ds_ready, ds_free, ready, empty, LSE,
                  DSUM, stride_lse_b, stride_lse_h, stride_d_b, stride_d_h, n_work, n_ntiles,
                  nheads_kv, group, seqlen_q, seqlen_k, qk_scale, sm_scale,
                  HALF: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
                  HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                  GROUP: gl.constexpr, SKEW: gl.constexpr, OWN_DQ: gl.constexpr,
                  AHEAD: gl.constexpr):
    """Consumer partition (one warpgroup): its program's work item, dK and dV of the keys'
    half ``HALF`` and the dQ columns' half ``HALF`` of every query tile (``OWN_DQ``: dQ over
    its own keys, all columns; module docstring)."""
    s_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_N, HEAD_D)[0]
    g_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_N, HEAD_D)[1]
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    dtype: gl.constexpr = k_desc.dtype
    w = gl.program_id(0)
    n0, kv_row0, kv_col, i0, n_i, n_t, q_row0, q_col0, lse_base, d_base = _item(
        w, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k, stride_lse_b,
        stride_lse_h, stride_d_b, stride_d_h, BLOCK_N, BLOCK_M, HEAD_D, CAUSAL, GROUP)
    _load_kv(k_desc, v_desc, k_smem, v_smem, kv_bar, HALF, kv_row0, kv_col, HALF * BLOCK_N,
             None, None, None, None)
    mbarrier.wait(kv_bar.index(HALF), 0)
    if not OWN_DQ:
        mbarrier.wait(kv_bar.index(1 - HALF), 0)    # (the other K: read by the dQ products)
    dq_buf = dq_smem.index(HALF)

    keys = n0 + HALF * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    dq_zero = gl.zeros([BLOCK_M, 64], gl.float32, s_layout)
    dk = gl.zeros([BLOCK_N, HEAD_D], gl.float32, g_layout)
    dv = gl.zeros([BLOCK_N, HEAD_D], gl.float32, g_layout)
    if SKEW:                        # (dQ one tile late: the consumers drift apart)
        _rows_consume_skewed(dk, dv, dk_desc, dv_desc, dq_desc, k_smem, v_smem, q_smem,
                             do_smem, p_smem, ds_smem, dq_buf, ds_ready, ds_free, ready, empty,
                             LSE, DSUM, stride_lse_h, stride_d_h, keys, s_zero, dq_zero, kv_row0,
                             kv_col, i0, n_i, n_t, q_row0, q_col0, lse_base, d_base, qk_scale,
                             sm_scale, HALF, BLOCK_N, BLOCK_M, HEAD_D, NUM_STAGES, CAUSAL)
    elif AHEAD:                     # (S and dP of tile t+1 issued within tile t)
        _rows_consume_ahead(dk, dv, dk_desc, dv_desc, dq_desc, k_smem, v_smem, q_smem,
                            do_smem, p_smem, ds_smem, dq_buf, ds_ready, ds_free, ready, empty,
                            LSE, DSUM, stride_lse_h, stride_d_h, keys, s_zero, dq_zero, kv_row0,
                            kv_col, i0, n_i, n_t, q_row0, q_col0, lse_base, d_base, qk_scale,
                            sm_scale, HALF, BLOCK_N, BLOCK_M, HEAD_D, NUM_STAGES, CAUSAL)
    elif OWN_DQ:                    # (dQ over its own keys: no dS handshake)
        _rows_consume_own(dk, dv, dk_desc, dv_desc, dq_desc, k_smem, v_smem, q_smem, do_smem,
                          p_smem, ds_smem, dq_buf, ready, empty, LSE, DSUM, stride_lse_h,
                          stride_d_h, keys, s_zero, kv_row0, kv_col, i0, n_i, n_t, q_row0,
                          q_col0, lse_base, d_base, qk_scale, sm_scale, HALF, BLOCK_N, BLOCK_M,
                          HEAD_D, NUM_STAGES, CAUSAL)
    else:
        for t in range(n_t):
            slot = t % NUM_STAGES
            # The shared tiles' wgmma descriptors are loop invariants: hoisted, the 40 of them
            # (K, V, P, dS, K's dQ columns; 64 bits each) overflow the uniform registers and
            # spill. Indexed by an opaque zero of the loop (t < 2^30), they are made per tile.
            z = t >> 30
            k_cur = k_smem.index(HALF + z)
            v_cur = v_smem.index(HALF + z)
            # (this consumer's dQ columns of both K tiles: the B operands of dQ = dS K)
            k0_part = k_smem.index(z).slice(HALF * 64, 64, dim=1)
            k1_part = k_smem.index(1 + z).slice(HALF * 64, 64, dim=1)
            p_buf = p_smem.index(HALF + z)
            ds_buf = ds_smem.index(HALF + z)
            lse2, d_row = _row_stats(LSE, DSUM, lse_base, d_base, stride_lse_h, stride_d_h, t, i0,
                                     n_i, BLOCK_M, row_layout)
            q_pos = (i0 + t % n_i) * BLOCK_M + gl.arange(0, BLOCK_M, layout=row_layout)
            mbarrier.wait(ready.index(slot), (t // NUM_STAGES) & 1)
            q_tile = q_smem.index(slot)
            do_tile = do_smem.index(slot)
            s = warpgroup_mma(q_tile, k_cur.permute((1, 0)), s_zero, use_acc=False,
                              is_async=True)
            dp = warpgroup_mma(do_tile, v_cur.permute((1, 0)), s_zero, use_acc=False,
                               is_async=True)
            s, dp = warpgroup_mma_wait(0, deps=(s, dp))
            p, ds = _scores(s, dp, keys, q_pos, lse2, d_row, qk_scale, CAUSAL, dtype)
            # P and dS into the shared tiles, once both consumers' dQ products of tile t-1 have
            # read the dS tiles (this one's own dV and dK of t-1, the P tile's reader, are done)
            mbarrier.wait(ds_free, (t & 1) ^ 1)
            p_buf.store(p)
            ds_buf.store(ds)
            fence_async_shared()
            gl.thread_barrier()         # (every thread's part stored before the one arrival)
            mbarrier.arrive(ds_ready, count=1)
            dv = warpgroup_mma(p_buf.permute((1, 0)), do_tile, dv, is_async=True)
            dk = warpgroup_mma(ds_buf.permute((1, 0)), q_tile, dk, is_async=True)
            mbarrier.wait(ds_ready, t & 1)              # (the other consumer's dS half)
            dq = warpgroup_mma(ds_smem.index(z), k0_part, dq_zero, use_acc=False, is_async=True)
            dq = warpgroup_mma(ds_smem.index(1 + z), k1_part, dq, is_async=True)
            dv, dk, dq = warpgroup_mma_wait(0, deps=(dv, dk, dq))
            gl.thread_barrier()         # (every warp's products done before the arrivals)
            mbarrier.arrive(empty.index(slot), count=1)
            mbarrier.arrive(ds_free, count=1)
            _dq_part_reduce(dq, dq_buf, dq_desc, t, i0, n_i, q_row0, q_col0, sm_scale, HALF,
                            BLOCK_M, HEAD_D)
        # the other consumer's last dQ products have read this one's K: K and V stage dK and dV
        mbarrier.wait(ds_free, (n_t - 1) & 1)
        _dkdv_out(dk, dv, dk_desc, dv_desc, k_smem, v_smem, kv_row0, kv_col, sm_scale, HALF,
                  BLOCK_N)


@gluon.jit
def _dkdv_out(dk, dv, dk_desc, dv_desc, k_smem, v_smem, kv_row0, kv_col, sm_scale,
              HALF: gl.constexpr, BLOCK_N: gl.constexpr):
    """dK (times ``sm_scale``) and dV of the keys' half ``HALF`` out by TMA through its K and V
    tiles (the caller has seen the other consumer's last dQ products, K's last readers, done)."""
    dtype: gl.constexpr = dk_desc.dtype
    k_cur = k_smem.index(HALF)
    v_cur = v_smem.index(HALF)
    k_cur.store((dk * sm_scale).to(dtype))
    v_cur.store(dv.to(dtype))
    fence_async_shared()
    gl.thread_barrier()
    tma.async_copy_shared_to_global(dk_desc, [kv_row0 + HALF * BLOCK_N, kv_col], k_cur)
    tma.async_copy_shared_to_global(dv_desc, [kv_row0 + HALF * BLOCK_N, kv_col], v_cur)
    tma.store_wait(0)


@gluon.jit
def _skew_front(t, dk, dv, k_smem, v_smem, q_smem, do_smem, p_smem, ds_smem, ds_ready, ds_free,
                ready, LSE, DSUM, stride_lse_h, stride_d_h, keys, s_zero, i0, n_i, lse_base,
                d_base, qk_scale, HALF: gl.constexpr, BLOCK_M: gl.constexpr,
                NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    """Skewed schedule, tile t up to the issue of its dV and dK products (returned in
    flight): S and dP, P and dS, these into the P tile and dS buffer ``t % 2`` (once both
    consumers' dQ products of tile t-2 have read the buffer, ``ds_free[t % 2]``), announced on
    ``ds_ready[t % 2]``."""
    slot = t % NUM_STAGES
    buf = t % 2
    row_layout: gl.constexpr = gl.SliceLayout(1, s_zero.type.layout)
    dtype: gl.constexpr = q_smem.dtype
    z = t >> 30                     # (the opaque zero of :func:`_rows_consume`)
    k_cur = k_smem.index(HALF + z)
    v_cur = v_smem.index(HALF + z)
    p_buf = p_smem.index(HALF + z)
    ds_buf = ds_smem.index(2 * buf + HALF + z)
    lse2, d_row = _row_stats(LSE, DSUM, lse_base, d_base, stride_lse_h, stride_d_h, t, i0,
                             n_i, BLOCK_M, row_layout)
    q_pos = (i0 + t % n_i) * BLOCK_M + gl.arange(0, BLOCK_M, layout=row_layout)
    mbarrier.wait(ready.index(slot), (t // NUM_STAGES) & 1)
    q_tile = q_smem.index(slot)
    do_tile = do_smem.index(slot)
    s = warpgroup_mma(q_tile, k_cur.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    dp = warpgroup_mma(do_tile, v_cur.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s, dp = warpgroup_mma_wait(0, deps=(s, dp))
    p, ds = _scores(s, dp, keys, q_pos, lse2, d_row, qk_scale, CAUSAL, dtype)
    # (the P tile's reader, this consumer's dV of t-1, is done: waited in tile t-1)
    mbarrier.wait(ds_free.index(buf), ((t // 2) & 1) ^ 1)
    p_buf.store(p)
    ds_buf.store(ds)
    fence_async_shared()
    gl.thread_barrier()             # (every thread's part stored before the one arrival)
    mbarrier.arrive(ds_ready.index(buf), count=1)
    dv = warpgroup_mma(p_buf.permute((1, 0)), do_tile, dv, is_async=True)
    dk = warpgroup_mma(ds_buf.permute((1, 0)), q_tile, dk, is_async=True)
    return dk, dv


@gluon.jit
def _skew_dq(u, k_smem, ds_smem, ds_ready, dq_zero, HALF: gl.constexpr):
    """Skewed schedule: once both consumers' dS of tile u are in (``ds_ready[u % 2]``), issue
    this consumer's dQ part of tile u, ``dS_0 K_0[:, part] + dS_1 K_1[:, part]`` (in flight)."""
    buf = u % 2
    z = u >> 30                     # (the opaque zero of :func:`_rows_consume`)
    k0_part = k_smem.index(z).slice(HALF * 64, 64, dim=1)
    k1_part = k_smem.index(1 + z).slice(HALF * 64, 64, dim=1)
    mbarrier.wait(ds_ready.index(buf), (u // 2) & 1)
    dq = warpgroup_mma(ds_smem.index(2 * buf + z), k0_part, dq_zero, use_acc=False,
                       is_async=True)
    return warpgroup_mma(ds_smem.index(2 * buf + 1 + z), k1_part, dq, is_async=True)


@gluon.jit
def _rows_consume_skewed(dk, dv, dk_desc, dv_desc, dq_desc, k_smem, v_smem, q_smem, do_smem,
                         p_smem, ds_smem, dq_buf, ds_ready, ds_free, ready, empty, LSE, DSUM,
                         stride_lse_h, stride_d_h, keys, s_zero, dq_zero, kv_row0, kv_col, i0,
                         n_i, n_t, q_row0, q_col0, lse_base, d_base, qk_scale, sm_scale,
                         HALF: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
                         HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    """The consumer's tiles with dQ deferred by one tile (``SKEW``, module docstring): tile t
    issues its own dV and dK and the dQ part of tile t-1, whose dS halves (double-buffered,
    ``ds_smem[2 (t % 2) + HALF]``) the other consumer stored one tile ago, so the two drift
    apart by up to a tile instead of meeting every tile. Tile 0 is peeled (no dQ before it);
    the last tile's dQ follows the loop."""
    dk, dv = _skew_front(0, dk, dv, k_smem, v_smem, q_smem, do_smem, p_smem, ds_smem,
                         ds_ready, ds_free, ready, LSE, DSUM, stride_lse_h, stride_d_h, keys,
                         s_zero, i0, n_i, lse_base, d_base, qk_scale, HALF, BLOCK_M,
                         NUM_STAGES, CAUSAL)
    dv, dk = warpgroup_mma_wait(0, deps=(dv, dk))
    gl.thread_barrier()             # (every warp's products done before the arrival)
    mbarrier.arrive(empty.index(0), count=1)
    for t in range(1, n_t):
        dk, dv = _skew_front(t, dk, dv, k_smem, v_smem, q_smem, do_smem, p_smem, ds_smem,
                             ds_ready, ds_free, ready, LSE, DSUM, stride_lse_h, stride_d_h,
                             keys, s_zero, i0, n_i, lse_base, d_base, qk_scale, HALF, BLOCK_M,
                             NUM_STAGES, CAUSAL)
        dq = _skew_dq(t - 1, k_smem, ds_smem, ds_ready, dq_zero, HALF)
        dv, dk, dq = warpgroup_mma_wait(0, deps=(dv, dk, dq))
        gl.thread_barrier()         # (every warp's products done before the arrivals)
        mbarrier.arrive(empty.index(t % NUM_STAGES), count=1)
        mbarrier.arrive(ds_free.index((t - 1) % 2), count=1)
        _dq_part_reduce(dq, dq_buf, dq_desc, t - 1, i0, n_i, q_row0, q_col0, sm_scale, HALF,
                        BLOCK_M, HEAD_D)
    last = n_t - 1
    dq = _skew_dq(last, k_smem, ds_smem, ds_ready, dq_zero, HALF)
    dq = warpgroup_mma_wait(0, deps=(dq,))
    gl.thread_barrier()
    mbarrier.arrive(ds_free.index(last % 2), count=1)
    _dq_part_reduce(dq, dq_buf, dq_desc, last, i0, n_i, q_row0, q_col0, sm_scale, HALF,
                    BLOCK_M, HEAD_D)
    # the other consumer's last dQ products have read this one's K: K and V stage dK and dV
    mbarrier.wait(ds_free.index(last % 2), (last // 2) & 1)
    _dkdv_out(dk, dv, dk_desc, dv_desc, k_smem, v_smem, kv_row0, kv_col, sm_scale, HALF,
              BLOCK_N)


@gluon.jit
def _rows_consume_own(dk, dv, dk_desc, dv_desc, dq_desc, k_smem, v_smem, q_smem, do_smem,
                      p_smem, ds_smem, dq_buf, ready, empty, LSE, DSUM, stride_lse_h,
                      stride_d_h, keys, s_zero, kv_row0, kv_col, i0, n_i, n_t, q_row0, q_col0,
                      lse_base, d_base, qk_scale, sm_scale, HALF: gl.constexpr,
                      BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_D: gl.constexpr,
                      NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    """The consumer's tiles with dQ over its own keys (``OWN_DQ``, module docstring): per tile
    S, dP, P and dS as tile by tile, then dV, dK and ``dQ_j += dS_HALF K_HALF`` (M = 64
    queries, N = ``HEAD_D``, K = 64 keys: its own dS tile and its own K tile), all three
    waited at once, the 64 x ``HEAD_D`` part reduced into the accumulator (where the other
    consumer's part adds up). Nothing here waits for the other consumer: its P and dS tiles
    have this consumer's products as their only readers (waited in the tile), and its K tile
    too, so dK and dV leave through K and V after the loop without a handshake."""
    g_layout: gl.constexpr = dk.type.layout
    row_layout: gl.constexpr = gl.SliceLayout(1, s_zero.type.layout)
    dtype: gl.constexpr = q_smem.dtype
    dq_zero = gl.zeros([BLOCK_M, HEAD_D], gl.float32, g_layout)
    for t in range(n_t):
        slot = t % NUM_STAGES
        z = t >> 30                 # (the opaque zero of :func:`_rows_consume`)
        k_cur = k_smem.index(HALF + z)
        v_cur = v_smem.index(HALF + z)
        p_buf = p_smem.index(HALF + z)
        ds_buf = ds_smem.index(HALF + z)
        lse2, d_row = _row_stats(LSE, DSUM, lse_base, d_base, stride_lse_h, stride_d_h, t, i0,
                                 n_i, BLOCK_M, row_layout)
        q_pos = (i0 + t % n_i) * BLOCK_M + gl.arange(0, BLOCK_M, layout=row_layout)
        mbarrier.wait(ready.index(slot), (t // NUM_STAGES) & 1)
        q_tile = q_smem.index(slot)
        do_tile = do_smem.index(slot)
        s = warpgroup_mma(q_tile, k_cur.permute((1, 0)), s_zero, use_acc=False, is_async=True)
        dp = warpgroup_mma(do_tile, v_cur.permute((1, 0)), s_zero, use_acc=False,
                           is_async=True)
        s, dp = warpgroup_mma_wait(0, deps=(s, dp))
        p, ds = _scores(s, dp, keys, q_pos, lse2, d_row, qk_scale, CAUSAL, dtype)
        # (the tiles' readers, this consumer's dV, dK and dQ of t-1, are done: waited there)
        p_buf.store(p)
        ds_buf.store(ds)
        fence_async_shared()
        gl.thread_barrier()         # (every thread's part stored before the products read it)
        dv = warpgroup_mma(p_buf.permute((1, 0)), do_tile, dv, is_async=True)
        dk = warpgroup_mma(ds_buf.permute((1, 0)), q_tile, dk, is_async=True)
        dq = warpgroup_mma(ds_buf, k_cur, dq_zero, use_acc=False, is_async=True)
        dv, dk, dq = warpgroup_mma_wait(0, deps=(dv, dk, dq))
        gl.thread_barrier()         # (every warp's products done before the arrival)
        mbarrier.arrive(empty.index(slot), count=1)
        _dq_part_reduce(dq, dq_buf, dq_desc, t, i0, n_i, q_row0, q_col0, sm_scale, HALF,
                        BLOCK_M, HEAD_D)
    # (K's one reader, this consumer's dQ products, is done: no wait for the other consumer)
    _dkdv_out(dk, dv, dk_desc, dv_desc, k_smem, v_smem, kv_row0, kv_col, sm_scale, HALF,
              BLOCK_N)


@gluon.jit
def _ahead_tile(t, s, dp, dk, dv, dq_desc, k_smem, v_smem, q_smem, do_smem, p_smem, ds_smem,
                dq_buf, ds_ready, ds_free, ready, empty, LSE, DSUM, stride_lse_h, stride_d_h,
                keys, s_zero, dq_zero, i0, n_i, q_row0, q_col0, lse_base, d_base, qk_scale,
                sm_scale, HALF: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_D: gl.constexpr,
                NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, LAST: gl.constexpr):
    """Rows ahead, tile t from its S and dP in flight: wait for them, P and dS, issue dV, dK
    and dQ; then (not ``LAST``) S of tile t+1 before the wait for dV, dK and dQ (one group
    stays in flight), and dP of tile t+1 once the dQ part is staged in shared memory (its
    registers free again), before the dQ reduction. Returns dK, dV and tile t+1's S, dP (in
    flight; ``LAST``: tile t's, spent)."""
    row_layout: gl.constexpr = gl.SliceLayout(1, s_zero.type.layout)
    dtype: gl.constexpr = q_smem.dtype
    slot = t % NUM_STAGES
    z = t >> 30                     # (the opaque zero of :func:`_rows_consume`)
    k_cur = k_smem.index(HALF + z)
    v_cur = v_smem.index(HALF + z)
    p_buf = p_smem.index(HALF + z)
    ds_buf = ds_smem.index(HALF + z)
    q_tile = q_smem.index(slot)
    do_tile = do_smem.index(slot)
    lse2, d_row = _row_stats(LSE, DSUM, lse_base, d_base, stride_lse_h, stride_d_h, t, i0,
                             n_i, BLOCK_M, row_layout)
    q_pos = (i0 + t % n_i) * BLOCK_M + gl.arange(0, BLOCK_M, layout=row_layout)
    s, dp = warpgroup_mma_wait(0, deps=(s, dp))
    p, ds = _scores(s, dp, keys, q_pos, lse2, d_row, qk_scale, CAUSAL, dtype)
    # P and dS into the shared tiles, once both consumers' dQ products of tile t-1 have read
    # the dS tiles (this one's own dV and dK of t-1, the P tile's reader, are done)
    mbarrier.wait(ds_free, (t & 1) ^ 1)
    p_buf.store(p)
    ds_buf.store(ds)
    fence_async_shared()
    gl.thread_barrier()             # (every thread's part stored before the one arrival)
    mbarrier.arrive(ds_ready, count=1)
    dv = warpgroup_mma(p_buf.permute((1, 0)), do_tile, dv, is_async=True)
    dk = warpgroup_mma(ds_buf.permute((1, 0)), q_tile, dk, is_async=True)
    mbarrier.wait(ds_ready, t & 1)                  # (the other consumer's dS half)
    k0_part = k_smem.index(z).slice(HALF * 64, 64, dim=1)
    k1_part = k_smem.index(1 + z).slice(HALF * 64, 64, dim=1)
    dq = warpgroup_mma(ds_smem.index(z), k0_part, dq_zero, use_acc=False, is_async=True)
    dq = warpgroup_mma(ds_smem.index(1 + z), k1_part, dq, is_async=True)
    next_slot = (t + 1) % NUM_STAGES
    if LAST:
        dv, dk, dq = warpgroup_mma_wait(0, deps=(dv, dk, dq))
    else:
        # S of tile t+1 into the tensor pipe behind this tile's products (S, dP, dK, dV, dQ
        # all live at once would need 224 of the 240 registers: ptxas spills S, C7512)
        mbarrier.wait(ready.index(next_slot), ((t + 1) // NUM_STAGES) & 1)
        s = warpgroup_mma(q_smem.index(next_slot), k_cur.permute((1, 0)), s_zero,
                          use_acc=False, is_async=True)
        dv, dk, dq = warpgroup_mma_wait(1, deps=(dv, dk, dq))
    # the dQ part staged as :func:`_dq_part_reduce` does, with dP of t+1 issued before the
    # reduction (into the registers the dQ part leaves)
    row = q_row0 + (i0 + t % n_i) * BLOCK_M
    col = q_col0 + (t // n_i) * HEAD_D + HALF * 64
    tma.store_wait(0)
    gl.thread_barrier()             # (every warp's products done before the arrivals)
    mbarrier.arrive(empty.index(slot), count=1)
    mbarrier.arrive(ds_free, count=1)
    dq_buf.store(dq * sm_scale)
    fence_async_shared()
    gl.thread_barrier()
    if not LAST:
        dp = warpgroup_mma(do_smem.index(next_slot), v_cur.permute((1, 0)), s_zero,
                           use_acc=False, is_async=True)
    _tma_reduce_add(dq_desc, [row, col], dq_buf)
    return dk, dv, s, dp


@gluon.jit
def _rows_consume_ahead(dk, dv, dk_desc, dv_desc, dq_desc, k_smem, v_smem, q_smem, do_smem,
                        p_smem, ds_smem, dq_buf, ds_ready, ds_free, ready, empty, LSE, DSUM,
                        stride_lse_h, stride_d_h, keys, s_zero, dq_zero, kv_row0, kv_col, i0,
                        n_i, n_t, q_row0, q_col0, lse_base, d_base, qk_scale, sm_scale,
                        HALF: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
                        HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    """The consumer's tiles with S and dP one tile ahead (``AHEAD``, module docstring): tile 0's
    S and dP are issued before the loop, each tile issues the next one's behind its own dV, dK
    and dQ (:func:`_ahead_tile`), and the last tile (no t+1) is peeled."""
    mbarrier.wait(ready.index(0), 0)        # (tile 0's S and dP, before the loop)
    s = warpgroup_mma(q_smem.index(0), k_smem.index(HALF).permute((1, 0)), s_zero,
                      use_acc=False, is_async=True)
    dp = warpgroup_mma(do_smem.index(0), v_smem.index(HALF).permute((1, 0)), s_zero,
                       use_acc=False, is_async=True)
    for t in range(n_t - 1):
        dk, dv, s, dp = _ahead_tile(t, s, dp, dk, dv, dq_desc, k_smem, v_smem, q_smem, do_smem,
                                    p_smem, ds_smem, dq_buf, ds_ready, ds_free, ready, empty,
                                    LSE, DSUM, stride_lse_h, stride_d_h, keys, s_zero, dq_zero,
                                    i0, n_i, q_row0, q_col0, lse_base, d_base, qk_scale,
                                    sm_scale, HALF, BLOCK_M, HEAD_D, NUM_STAGES, CAUSAL, False)
    dk, dv, s, dp = _ahead_tile(n_t - 1, s, dp, dk, dv, dq_desc, k_smem, v_smem, q_smem,
                                do_smem, p_smem, ds_smem, dq_buf, ds_ready, ds_free, ready,
                                empty, LSE, DSUM, stride_lse_h, stride_d_h, keys, s_zero,
                                dq_zero, i0, n_i, q_row0, q_col0, lse_base, d_base, qk_scale,
                                sm_scale, HALF, BLOCK_M, HEAD_D, NUM_STAGES, CAUSAL, True)
    # the other consumer's last dQ products have read this one's K: K and V stage dK and dV
    mbarrier.wait(ds_free, (n_t - 1) & 1)
    _dkdv_out(dk, dv, dk_desc, dv_desc, k_smem, v_smem, kv_row0, kv_col, sm_scale, HALF,
              BLOCK_N)


@gluon.jit
def _dkdv_rows_kernel(q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, dq_desc, LSE, DSUM,
                      stride_lse_b, stride_lse_h, stride_d_b, stride_d_h, nheads_kv, group,
                      seqlen_q, seqlen_k, n_ntiles, n_work, qk_scale, sm_scale,
                      BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_D: gl.constexpr,
                      NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                      CONSUMER_REGS: gl.constexpr, GROUP: gl.constexpr, SKEW: gl.constexpr,
                      OWN_DQ: gl.constexpr, AHEAD: gl.constexpr):
    # One program per work item (n_work programs): 2 * BLOCK_N keys of one (batch, KV head).
    dtype: gl.constexpr = k_desc.dtype
    k_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, HEAD_D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, HEAD_D], v_desc.layout)
    q_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_D], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_D], do_desc.layout)
    p_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M, BLOCK_N],
                                       _tile_layout(BLOCK_M, BLOCK_N, dtype))
    # (SKEW: two dS buffers of both consumers' tiles, ``ds_smem[2 buf + HALF]``)
    ds_smem = gl.allocate_shared_memory(dtype, [2 + 2 * SKEW, BLOCK_M, BLOCK_N],
                                        _tile_layout(BLOCK_M, BLOCK_N, dtype))
    # (OWN_DQ: a consumer's dQ part is 64 x HEAD_D, the accumulator's descriptor in such blocks)
    DQ_COLS: gl.constexpr = HEAD_D if OWN_DQ else 64
    dq_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M, DQ_COLS], dq_desc.layout)
    kv_bar = fwd_hopper.barriers(2, 1)
    ready = fwd_hopper.barriers(NUM_STAGES, 1)
    empty = fwd_hopper.barriers(NUM_STAGES, 2)          # both consumers release a slot
    if SKEW:                                            # (one per dS buffer)
        ds_ready = fwd_hopper.barriers(2, 2)
        ds_free = fwd_hopper.barriers(2, 2)
    else:       # (OWN_DQ: allocated and never waited, 16 B; warp_specialize takes no None)
        ds_ready = fwd_hopper.barriers(1, 2).index(0)   # both dS halves stored
        ds_free = fwd_hopper.barriers(1, 2).index(0)    # both consumers' dQ products done
    # (constexpr Nones: warp_specialize's argument tuples take no bare None)
    no_desc: gl.constexpr = None
    no_smem: gl.constexpr = None
    # (the two consumers' lists differ in HALF only, yet are spelled out: the Gluon front end
    # passes the constexprs of a concatenated tuple on as tensors)
    gl.warp_specialize([
        (_rows_consume, (k_desc, v_desc, dk_desc, dv_desc, dq_desc, k_smem, v_smem, kv_bar,
                         q_smem, do_smem, p_smem, ds_smem, dq_smem, ds_ready, ds_free, ready,
                         empty, LSE, DSUM, stride_lse_b, stride_lse_h, stride_d_b, stride_d_h,
                         n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k, qk_scale,
                         sm_scale, 0, BLOCK_N, BLOCK_M, HEAD_D, NUM_STAGES, CAUSAL, GROUP,
                         SKEW, OWN_DQ, AHEAD)),
        (_rows_consume, (k_desc, v_desc, dk_desc, dv_desc, dq_desc, k_smem, v_smem, kv_bar,
                         q_smem, do_smem, p_smem, ds_smem, dq_smem, ds_ready, ds_free, ready,
                         empty, LSE, DSUM, stride_lse_b, stride_lse_h, stride_d_b, stride_d_h,
                         n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k, qk_scale,
                         sm_scale, 1, BLOCK_N, BLOCK_M, HEAD_D, NUM_STAGES, CAUSAL, GROUP,
                         SKEW, OWN_DQ, AHEAD)),
        (_load_q_do, (q_desc, do_desc, q_smem, do_smem, ready, empty, n_work, n_ntiles,
                      nheads_kv, group, seqlen_q, seqlen_k, BLOCK_N, BLOCK_M, HEAD_D,
                      NUM_STAGES, CAUSAL, GROUP, no_desc, no_desc, no_smem, no_smem, 0)),
    ], [4, 1], [CONSUMER_REGS, 24])


def enabled() -> bool:
    """Whether the one pass at d=128 takes this kernel: unset, empty, ``auto`` or ``1``
    (measured 4-7% ahead of the transposed kernel, session 22); ``FLASHTILE_GLUON_BWD_ROWS=0``
    keeps :mod:`.bwd_hopper`'s; anything else a ValueError."""
    return env_forced("FLASHTILE_GLUON_BWD_ROWS") is not False


# The schedules of the rows kernel, ``FLASHTILE_GLUON_BWD_ROWS_SCHEDULE`` (module docstring):
# one tile at a time (the default), dQ one tile late (``SKEW``), each consumer's dQ over its
# own keys (``OWN_DQ``), the next tile's S and dP issued within the tile (``AHEAD``)
SCHEDULES = ("tiles", "skew", "own-dq", "ahead")


def schedule() -> str:
    """The rows kernel's schedule, one of :data:`SCHEDULES`:
    ``FLASHTILE_GLUON_BWD_ROWS_SCHEDULE`` unset, empty or ``auto`` is ``tiles`` (measured,
    session 22); ``skew``
    (:func:`_rows_consume_skewed`), ``own-dq`` (:func:`_rows_consume_own`) and ``ahead``
    (:func:`_rows_consume_ahead`) are opt-in, for the sweep (module docstring); anything else a
    ValueError."""
    value = getenv("FLASHTILE_GLUON_BWD_ROWS_SCHEDULE", "auto") or "auto"
    if value == "auto":
        return "tiles"
    if value not in SCHEDULES:
        raise ValueError(f"FLASHTILE_GLUON_BWD_ROWS_SCHEDULE must be 'auto' or one of "
                         f"{', '.join(SCHEDULES)} (or unset), got {value!r}")
    return value


def takes(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether a one-pass call that :mod:`.bwd_hopper` covers runs here: not switched off
    (:func:`enabled`), no persistent grid forced (``FLASHTILE_GLUON_BWD_PERSISTENT=1``), a
    head dim with a config (d=128), and lengths that are multiples of
    this kernel's tiles (64 queries; 128 keys, as :mod:`.bwd_hopper`'s at d=128)."""
    if not enabled() or env_forced("FLASHTILE_GLUON_BWD_PERSISTENT") is True:
        return False
    d = q.shape[3]
    if d not in _CONFIGS:
        return False
    keys, queries = _CONFIGS[d][:2]
    return q.shape[1] % queries == 0 and k.shape[1] % (2 * keys) == 0


def dkdv(q, k, v, dout, lse, dsum, dk, dv, params, record, dq_acc) -> None:
    """dK and dV into ``dk``/``dv`` and ``softmax_scale * dS K`` added into ``dq_acc``
    (float32, :func:`.bwd_hopper.dq_acc_shape`, zeros), as :func:`.bwd_hopper.dkdv`'s one
    pass (same arguments; the caller has checked :func:`takes`)."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    lse, dsum = lse.contiguous(), dsum.contiguous()     # (the kernel steps along sq by 1)
    block_n, block_m, stages, regs = _CONFIGS[d]
    n_ntiles = sk // (2 * block_n)
    n_work = n_ntiles * b * hkv
    causal = fwd_hopper.causal(params)
    plan = schedule()
    skew, own, ahead = plan == "skew", plan == "own-dq", plan == "ahead"
    # (the dQ accumulator's TMA blocks: a consumer's part, 64 columns; own: all d of them)
    tiles = ((q, (block_m, d)), (k, (block_n, d)), (v, (block_n, d)), (dout, (block_m, d)),
             (dk, (block_n, d)), (dv, (block_n, d)), (dq_acc, (block_m, d if own else 64)))
    plans.gluon_launch(
        record, _dkdv_rows_kernel, (n_work,), tiles,
        (lse, dsum, lse.stride(0), lse.stride(1), dsum.stride(0), dsum.stride(1), hkv,
         hq // hkv, sq, sk, n_ntiles, n_work, params.softmax_scale * fwd_hopper.LOG2E,
         params.softmax_scale),
        dict(BLOCK_N=block_n, BLOCK_M=block_m, HEAD_D=d, NUM_STAGES=stages, CAUSAL=causal,
             CONSUMER_REGS=regs, SKEW=skew, OWN_DQ=own, AHEAD=ahead, num_warps=4,
             GROUP=fwd_hopper.causal_group(n_ntiles, bwd_hopper.SINGLE_UPTO[d],
                                           "FLASHTILE_GLUON_BWD_GROUP") if causal else 1),
        fwd_hopper.part_descriptor, "dkdv",
        f"gluon rows {2 * block_n}x{block_m}/{stages}s +dQ"
        + ("" if plan == "tiles" else f" {plan}"))
