"""Hopper dK/dV + dQ kernel (one pass) in Gluon with the queries as rows: FlashAttention-3's layout.

Computes dK, dV (like k, v) and adds ``softmax_scale * dS K`` into the fp32 accumulator of
:func:`.bwd_hopper.dq_acc_shape` by TMA reductions (as :mod:`.bwd_hopper`'s one pass), in FA3's
layout: :mod:`.bwd_hopper`'s transposed N=32 products (keys as rows, 32 queries per tile) with both
operands in shared memory are bound by shared-memory bandwidth. The default since session 22 for
the one pass of :func:`.bwd_hopper.dkdv` at d=128 (:func:`takes`: query lengths that are multiples
of 64; :func:`enabled`: ``FLASHTILE_GLUON_BWD_ROWS`` unset, ``auto`` or ``1``; ``0`` keeps
:mod:`.bwd_hopper`'s kernel); two passes, ``deterministic=True`` and the other head dims run
:mod:`.bwd_hopper`; d=64 (:data:`OPT_IN`) runs here only with ``FLASHTILE_GLUON_BWD_ROWS=1``.

Notation (at d=128; a work item: 128 keys of one KV head, :func:`.bwd_hopper._item`):

- ``BLOCK_N`` = 64 keys per consumer, ``BLOCK_M`` = 64 queries per (Q, dO) tile, ``HEAD_D`` = 128,
  ``NUM_STAGES`` = 2 ring slots, ``CONSUMER_REGS`` = 240 (:data:`_CONFIGS`); ``CAUSAL``;
  ``GROUP``: the causal chunks :mod:`.bwd_hopper` chooses (8 key tiles at d=128);
  ``PERSISTENT``: a program per SM looping over items (:func:`persistent`);
- consumer ``HALF`` (a warpgroup) owns keys ``[64 HALF, 64 HALF + 64)`` of the item, their K and
  V tiles (64 x 128) in shared memory, and dQ's columns ``[64 HALF, 64 HALF + 64)``;
- the loader (one warp, :func:`.bwd_hopper._load_q_do`) streams (Q_j, dO_j) tiles into the ring,
  every query head of the KV head in turn (GQA), a causal item from its first key's query tile;
- per consumer shared tiles ``p_smem``, ``ds_smem`` (64 x 64 fp16/bf16), ``dq_smem`` (64 x 64
  fp32) and, persistent, ``dv_stage``; barriers ``ready``/``empty`` per slot, ``kv_bar`` per
  consumer, ``ds_ready`` (both dS halves stored), ``ds_free`` (both consumers' dQ products done).

Schedule, per query tile j and consumer ``HALF`` (:func:`_tile`):

1. ``S = Q_j K^T`` and ``dP = dO_j V^T`` (M = 64 queries, N = 64 keys, K = d; both operands in
   shared memory), issued one tile ahead (step 6);
2. ``P = exp2(S * qk_scale - LSE * log2e)`` (causal: key <= query) into ``p_smem[HALF]``
   (its one reader, this consumer's dV of tile j-1, is done); ``dV += P^T dO_j`` issued (M = 64
   keys, N = d; A: the P tile's transposed view, B: the ring slot's dO);
3. under dV: ``dS = P (dP - D)``, P read back from ``p_smem[HALF]`` (from registers, ptxas
   hoists the arithmetic above the barrier and dV's issue), into ``ds_smem[HALF]`` once both
   consumers' dQ products of tile j-1 have released the dS tiles (``ds_free``); fenced,
   announced on ``ds_ready``; LSE and D rows of tile j are loaded during tile j-1;
4. ``dK += dS^T Q_j`` (A: the dS tile's transposed view, B: the ring slot's Q);
5. once both dS halves are in, its dQ columns ``part`` = ``[64 HALF, 64 HALF + 64)``:
   ``dQ_j[:, part] = dS_0 K_0[:, part] + dS_1 K_1[:, part]`` (M = 64 queries, K = 2 x 64 keys,
   two chained wgmma), out through ``dq_smem[HALF]`` as a TMA reduce-add
   (:func:`.bwd_hopper._tma_reduce_add`; the accumulator's TMA blocks are such 64 x 64 parts);
6. ``S_{j+1}`` is issued behind dV, dK and dQ, then one wait for those three
   (``warpgroup_mma_wait(1)``: S_{j+1} stays in flight); slot and dS tile go back; the dQ part
   is staged; ``dP_{j+1}`` is issued (into the registers the dQ part leaves) before the
   reduction. So the tensor pipe has this consumer's next products while it waits and stages.
   Tile 0's S and dP are issued before the loop; the last tile is peeled.

At an item's end, once the other consumer's last dQ products have read this K, dK * scale and dV
leave by TMA through the K and V tiles; persistent, through the dQ staging tile (read as 64 x 128
fp16/bf16) and ``dv_stage`` while K and V take the next item's load.

- dP_{j+1} after the staging: S, dP, dK, dV and the dQ part (32 + 32 + 64 + 64 + 32 registers)
  would need 224 of 240 at once; with S_{j+1} and dP_{j+1} both issued before the wait for tile
  j's products, ptxas spilled S (512 B) and serialised every wgmma (C7512).
- The opaque zeros (``r >> 30``) in :func:`_tile` and :func:`_item_grads`: the shared tiles' wgmma
  descriptors, hoisted as loop invariants, spilled (284 B in the tile loop, 344 B in the item loop).
- Grid (:func:`persistent`; ``FLASHTILE_GLUON_BWD_PERSISTENT=1``/``0`` forces it): unmasked, a
  program per SM, so that an epilogue overlaps the next item's loads; causal, a program per item
  (items of unequal length in a fixed turn leave programs idle) and no ``dv_stage``; causal
  from 1k keys (:func:`dynamic`), a program per SM whose items after the first are *claimed*:
  the loader takes ``num_programs`` + the count at ``COUNT`` (an int32 the preprocess zeroes)
  once the previous item's loads are issued, and publishes it in ``claims`` (two slots,
  ``claimed``/``claim_free`` barriers) for the consumers, who read it at their item's end
  to load its K and V (:func:`.bwd_hopper._claim`, :func:`.bwd_hopper._claimed`,
  :func:`.bwd_hopper._load_claimed`).
- Shared memory: K, V 64 KB, the ring 64 KB, P, dS 32 KB, dQ staging 32 KB (197,024 B in all);
  persistent, ``dv_stage`` 32 KB more (229,808 B); claimed, 112 B more (229,920 B).
- d=64: a dQ part is 64 queries x 32 columns (an N=32 wgmma whose B is a 32-column slice of a
  128-byte-swizzled K tile).

Measured (H200, bf16, 16k tokens; backward kernel time unless noted):

- this layout one tile at a time against :mod:`.bwd_hopper`'s: -4.1% to -7.3%; Nsight Compute at
  4k: tensor pipe 52% (transposed 49%), issue slots 20% busy: the consumers waited (session 22);
- S and dP one tile ahead: -4.7% to -8.2%; Nsight Compute at 4k unmasked 2,502 µs against cuDNN's
  2,302, tensor pipe ~56% (session 23);
- persistent grid: unmasked -0.6% to -6.3%; causal +1% to +35% (session 23); causal with odd
  rounds' items reversed (a snake order: in chunks of 8 key tiles program p otherwise takes tile
  p % 8 every round) still +1% to +15% at 512-16k (session 26; removed);
- forward+backward kernels 0.95-0.99x cuDNN unmasked, 0.90-0.99x causal (session 23);
- d=64: correct, but 10-18% slower than the transposed kernel (session 24), so opt-in; a third
  ring slot or two programs per SM there are untried;
- offline (``scripts/inspect_kernels.py --gluon --one-pass --d 128 [--causal]``): 0 B of spills,
  128 HGMMA for 8 waits, no C75xx warning; with ``SKIP_MASKED`` (session 32, causal: the second
  consumer's first tile, above its keys, only hands over a zero dS half and adds its dQ
  columns, :func:`_skipped_tile`) 0 B, 132 HGMMA for 9 waits; off, the SASS is identical to
  before. On the H200 (session 33, MHA fwd+bwd kernel sums) 0.985x at 512, 0.961x at 1k,
  1.016x/1.019x at 2k/4k, so on up to 1k keys (:func:`.bwd_hopper.skips_masked`). With GQA,
  the ring carrying the item's tiles query tile by query tile so that the skipped ones (one
  per query head) came first: deadlocked as first written (session 33: all skipped loads
  released before the first dS hand-over, more than the ring's 2 slots; each is now released
  just before its hand-over), then, mended, 1.075x / 1.132x of no skip at 8:1 causal 512 /
  1k (session 34): removed;
- unmasked items rotated (``ROTATE``, :func:`.bwd_hopper.rotates`: each starts at its own query
  tile, so that a head's items running at once add dQ into different accumulator tiles):
  -0.5% to -5.6% at 1k-16k (session 44, H100, two calls), the default;
- dS computed under dV (steps 2-3, session 51 offline, session 52 timed): dS from P in
  registers was hoisted by ptxas above the barrier and dV's issue (no overlap); from P read
  back from its shared tile the FMULs interleave with dV's HGMMA (0 B, 9 waits for 132 HGMMA,
  loop 675 instructions against 565); dV and dK left in flight across the back edge instead:
  144 B of spills and every wgmma serialised (C7514). On the H100 (session 52, fwd+bwd kernel
  sums, 2 rounds) 0.960x-1.000x of the previous order at 512-16k, bf16 and fp16, causal or not
  (MHA), 0.954x-0.999x with GQA 8:1: the default;
- claimed items (session 53, H100, 16k tokens, this kernel's time against a program per item,
  2-3 alternating rounds, calls 1 / 2 / 4): causal bf16 1k -10.1% / -3.5% / -5.5%, 2k -8.6% /
  -3.2% / -6.4%, 4k -4.4% / -1.9% / -2.0%, 8k +1.0% (call 2), 16k -2.2% / -3.2% / -2.9%,
  512 +4.2% (call 2; so from 1k); fp16 1k-16k -2.5% to -6.4%; GQA 8:1 per query head 1k
  -7.7%, 4k -2.1%; offline 4 B of spills between the tile loops (the fixed turn's persistent
  causal build has the same);
- rejected (session 23): dQ one tile late with double-buffered dS tiles, -0.2% to -2.8% (noise,
  +16 KB); each consumer's dQ over its own keys and all columns (no dS handshake, twice the
  reductions), +3% to +10.5%.

Details, commands and raw data: docs/perf.md.
"""
from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)
from triton.runtime.jit import constexpr_function

from . import bwd_hopper, fwd_hopper, plans
from .bwd_hopper import (_claim_slots, _claimed, _item, _kv_column, _load_items, _load_kv,
                         _query_pos, _row_stats, _tma_reduce_add, item_query_tile)
from .common import env_forced

# (head dim) -> (keys per consumer, queries per tile, ring slots, consumer registers)
_CONFIGS = {128: (64, 64, 2, 240), 64: (64, 64, 2, 240)}

# Head dims that run here only when ``FLASHTILE_GLUON_BWD_ROWS=1`` asks (d=64: correct on
# the H200, but 10-18% slower than the transposed kernel, session 24)
OPT_IN = frozenset({64})


@constexpr_function
def _tile_layout(rows, cols, dtype):
    """P and dS tiles' shared layout (64 x 64 fp16/bf16: 128-byte swizzle), read as the A
    operand both as they are (dQ) and transposed (dV, dK)."""
    return gl.NVMMASharedLayout.get_default_for([rows, cols], dtype)


@gluon.jit
def _tile(r, t, s, dp, dk, dv, dq_desc, k_smem, v_smem, q_smem, do_smem, p_smem, ds_smem,
          dq_buf, ds_ready, ds_free, ready, empty, LSE, DSUM, stride_lse_h, stride_d_h, keys,
          s_zero, dq_zero, i0, n_i, q_row0, q_col0, lse_base, d_base, qk_scale, sm_scale,
          lse2, d_row, HALF: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_D: gl.constexpr,
          NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, LAST: gl.constexpr):
    """Tile t of the work item (the program's tile r, counted across its items: the ring's
    slot and the barriers' phases) for consumer ``HALF``, from its S and dP in flight (steps
    2-6 of the module docstring): wait for them; P stored and dV issued, then dS computed
    under dV (P's tile is read by this consumer's dV alone: no hand-over), stored and handed
    over; dK and dQ issued; then (not ``LAST``) S of tile t+1 before the wait for dV, dK and
    dQ (one group stays in flight), and dP of tile t+1 once the dQ part is staged in shared
    memory, before the dQ reduction. The tile's LSE and D rows come in as ``lse2``,
    ``d_row``, loaded during the tile before (the compiler otherwise sinks D's load to its
    first use, just after dV's issue). Returns dK, dV, tile t+1's S, dP (in flight;
    ``LAST``: tile t's, spent) and tile t+1's rows (``LAST``: tile t's)."""
    row_layout: gl.constexpr = gl.SliceLayout(1, s_zero.type.layout)
    dtype: gl.constexpr = q_smem.dtype
    slot = r % NUM_STAGES
    # The shared tiles' wgmma descriptors are loop invariants: hoisted, the 40 of them (K, V,
    # P, dS, K's dQ columns; 64 bits each) overflow the uniform registers and spill. Indexed
    # by an opaque zero of the loops (r < 2^30), they are made per tile.
    z = r >> 30
    k_cur = k_smem.index(HALF + z)
    v_cur = v_smem.index(HALF + z)
    p_buf = p_smem.index(HALF + z)
    ds_buf = ds_smem.index(HALF + z)
    q_tile = q_smem.index(slot)
    do_tile = do_smem.index(slot)
    q_pos = _query_pos(t, i0, n_i, BLOCK_M, row_layout)
    s, dp = warpgroup_mma_wait(0, deps=(s, dp))
    p = gl.exp2(s * qk_scale - lse2[:, None])
    # (causal: every tile is masked; masking only the tiles that reach the diagonal measured
    # 0-4% slower, session 23)
    if CAUSAL:                                   # key j is seen by query i iff j <= i
        p = gl.where(keys[None, :] <= q_pos[:, None], p, 0.0)
    p_buf.store(p.to(dtype))        # (its one reader, this consumer's dV of t-1, is done)
    fence_async_shared()
    gl.thread_barrier()
    dv = warpgroup_mma(p_buf.permute((1, 0)), do_tile, dv, is_async=True)
    # dS from P as stored (the product's operand anyway): a load after the barrier, which
    # the compiler cannot hoist above dV's issue as it would the product of registers
    p = p_buf.load(s_zero.type.layout).to(gl.float32)
    ds = (p * (dp - d_row[:, None])).to(dtype)
    # dS into its shared tile once both consumers' dQ products of tile t-1 have read it
    mbarrier.wait(ds_free, (r & 1) ^ 1)
    ds_buf.store(ds)
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(ds_ready, count=1)
    dk = warpgroup_mma(ds_buf.permute((1, 0)), q_tile, dk, is_async=True)
    mbarrier.wait(ds_ready, r & 1)                  # (the other consumer's dS half)
    # (this consumer's dQ columns of both K tiles: the B operands of dQ = dS K)
    k0_part = k_smem.index(z).slice(HALF * (HEAD_D // 2), HEAD_D // 2, dim=1)
    k1_part = k_smem.index(1 + z).slice(HALF * (HEAD_D // 2), HEAD_D // 2, dim=1)
    dq = warpgroup_mma(ds_smem.index(z), k0_part, dq_zero, use_acc=False, is_async=True)
    dq = warpgroup_mma(ds_smem.index(1 + z), k1_part, dq, is_async=True)
    next_slot = (r + 1) % NUM_STAGES
    if LAST:
        dv, dk, dq = warpgroup_mma_wait(0, deps=(dv, dk, dq))
    else:
        # S of tile t+1 into the tensor pipe behind this tile's products (dP too would spill:
        # module docstring)
        mbarrier.wait(ready.index(next_slot), ((r + 1) // NUM_STAGES) & 1)
        s = warpgroup_mma(q_smem.index(next_slot), k_cur.permute((1, 0)), s_zero,
                          use_acc=False, is_async=True)
        lse2, d_row = _row_stats(LSE, DSUM, lse_base, d_base, stride_lse_h, stride_d_h, t + 1,
                                 i0, n_i, BLOCK_M, row_layout)
        dv, dk, dq = warpgroup_mma_wait(1, deps=(dv, dk, dq))
    # the dQ part (64 queries x this consumer's half of d, complete) out as ``sm_scale * dQ``
    # through its shared tile, once the previous tile's reduction has read it, with dP of
    # t+1 issued before the reduction (into the registers the dQ part leaves)
    row = q_row0 + item_query_tile(t, i0, n_i) * BLOCK_M
    col = q_col0 + (t // n_i) * HEAD_D + HALF * (HEAD_D // 2)
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
    return dk, dv, s, dp, lse2, d_row


@gluon.jit
def _skipped_tile(r, t, dq_desc, k_smem, ds_smem, dq_buf, ds_ready, ds_free, dq_zero, ds_zero,
                  i0, n_i, q_row0, q_col0, sm_scale, HALF: gl.constexpr, BLOCK_M: gl.constexpr,
                  HEAD_D: gl.constexpr):
    """Tile t of the item (the program's tile r) for a consumer whose keys it does not reach
    (``SKIP_MASKED``, :func:`.bwd_hopper.skips_masked`; its slot the caller has released
    unread, :func:`.bwd_hopper._pass_slots`): a zero dS half keeps the hand-over's turn, and
    its dQ columns, from the other consumer's dS half alone, leave as in :func:`_tile`. No S,
    dP, dV or dK products."""
    z = r >> 30                                     # (opaque zero: see :func:`_tile`)
    mbarrier.wait(ds_free, (r & 1) ^ 1)
    ds_smem.index(HALF + z).store(ds_zero)
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(ds_ready, count=1)
    mbarrier.wait(ds_ready, r & 1)                  # (the other consumer's dS half)
    k_part = k_smem.index(1 - HALF + z).slice(HALF * (HEAD_D // 2), HEAD_D // 2, dim=1)
    dq = warpgroup_mma(ds_smem.index(1 - HALF + z), k_part, dq_zero, use_acc=False,
                       is_async=True)
    dq = warpgroup_mma_wait(0, deps=(dq,))
    row = q_row0 + item_query_tile(t, i0, n_i) * BLOCK_M
    col = q_col0 + (t // n_i) * HEAD_D + HALF * (HEAD_D // 2)
    tma.store_wait(0)
    gl.thread_barrier()
    mbarrier.arrive(ds_free, count=1)
    dq_buf.store(dq * sm_scale)
    fence_async_shared()
    gl.thread_barrier()
    _tma_reduce_add(dq_desc, [row, col], dq_buf)


@gluon.jit
def _item_grads(w, it, done, k_smem, v_smem, kv_bar, q_smem, do_smem, p_smem, ds_smem, dq_buf,
                dq_desc, ds_ready, ds_free, ready, empty, LSE, DSUM, stride_lse_b,
                stride_lse_h, stride_d_b, stride_d_h, n_work, n_ntiles, nheads_kv, group,
                seqlen_q, seqlen_k, qk_scale, sm_scale, s_zero, dq_zero, HALF: gl.constexpr,
                BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_D: gl.constexpr,
                NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, GROUP: gl.constexpr,
                SKIP_MASKED: gl.constexpr, ROTATE: gl.constexpr):
    """Work item w of consumer ``HALF``, its K and V loading (the program's ``done``-th item,
    whose tiles follow the program's ``it`` earlier ones): tile 0's S and dP, each tile
    issuing the next one's (:func:`_tile`), the last tile peeled, until the other consumer's
    last dQ products have read this one's K. ``SKIP_MASKED`` (one query head per KV head): the
    second consumer's tiles above its keys, the item's first, only hand over and add their dQ
    (:func:`_skipped_tile`). ``ROTATE``: an unmasked item starts at its own query tile
    (:func:`.bwd_hopper._item`). The first tile's LSE and D rows are loaded here (each tile
    loads the next one's). Returns dK, dV (fp32, unscaled), the item's K/V row and
    column and its tile count."""
    s_layout: gl.constexpr = s_zero.type.layout
    g_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_N, HEAD_D)[1]
    n0, kv_row0, kv_col, i0, n_i, n_t, q_row0, q_col0, lse_base, d_base = _item(
        w, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k, stride_lse_b, stride_lse_h,
        stride_d_b, stride_d_h, BLOCK_N, BLOCK_M, HEAD_D, CAUSAL, GROUP, ROTATE)
    mbarrier.wait(kv_bar.index(HALF), done & 1)
    mbarrier.wait(kv_bar.index(1 - HALF), done & 1)  # (the other K: read by the dQ products)
    keys = n0 + HALF * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    SKIP: gl.constexpr = bwd_hopper._masked_tiles(SKIP_MASKED, HALF, BLOCK_N, BLOCK_M)
    if SKIP > 0:
        ds_zero = gl.zeros([BLOCK_M, BLOCK_N], ds_smem.dtype, s_layout)
        for u in range(SKIP):
            # (each slot just before its hand-over: :func:`.bwd_hopper._pass_slots`)
            bwd_hopper._pass_slots(ready, empty, it + u, it + u + 1, NUM_STAGES)
            _skipped_tile(it + u, u, dq_desc, k_smem, ds_smem, dq_buf, ds_ready, ds_free,
                          dq_zero, ds_zero, i0, n_i, q_row0, q_col0, sm_scale, HALF, BLOCK_M,
                          HEAD_D)
    dk = gl.zeros([BLOCK_N, HEAD_D], gl.float32, g_layout)
    dv = gl.zeros([BLOCK_N, HEAD_D], gl.float32, g_layout)
    first = it + SKIP                               # (its first tile's S and dP, before the loop)
    slot = first % NUM_STAGES
    z = first >> 30                                 # (opaque zero: see :func:`_tile`)
    mbarrier.wait(ready.index(slot), (first // NUM_STAGES) & 1)
    s = warpgroup_mma(q_smem.index(slot), k_smem.index(HALF + z).permute((1, 0)), s_zero,
                      use_acc=False, is_async=True)
    dp = warpgroup_mma(do_smem.index(slot), v_smem.index(HALF + z).permute((1, 0)), s_zero,
                       use_acc=False, is_async=True)
    last = it + n_t - 1
    lse2, d_row = _row_stats(LSE, DSUM, lse_base, d_base, stride_lse_h, stride_d_h, SKIP, i0,
                             n_i, BLOCK_M, gl.SliceLayout(1, s_layout))
    for u in range(SKIP, n_t - 1):
        dk, dv, s, dp, lse2, d_row = _tile(
            it + u, u, s, dp, dk, dv, dq_desc, k_smem, v_smem, q_smem, do_smem, p_smem, ds_smem,
            dq_buf, ds_ready, ds_free, ready, empty, LSE, DSUM, stride_lse_h, stride_d_h, keys,
            s_zero, dq_zero, i0, n_i, q_row0, q_col0, lse_base, d_base, qk_scale, sm_scale,
            lse2, d_row, HALF, BLOCK_M, HEAD_D, NUM_STAGES, CAUSAL, False)
    dk, dv, s, dp, lse2, d_row = _tile(
        last, n_t - 1, s, dp, dk, dv, dq_desc, k_smem, v_smem, q_smem, do_smem, p_smem, ds_smem,
        dq_buf, ds_ready, ds_free, ready, empty, LSE, DSUM, stride_lse_h, stride_d_h, keys,
        s_zero, dq_zero, i0, n_i, q_row0, q_col0, lse_base, d_base, qk_scale, sm_scale, lse2,
        d_row, HALF, BLOCK_M, HEAD_D, NUM_STAGES, CAUSAL, True)
    # the other consumer's last dQ products have read this one's K (its own products are
    # done): the K and V tiles are free
    mbarrier.wait(ds_free, last & 1)
    return dk, dv, kv_row0, kv_col, n_t


@gluon.jit
def _rows_consume(k_desc, v_desc, dk_desc, dv_desc, dq_desc, k_smem, v_smem, kv_bar, q_smem,
                  do_smem, p_smem, ds_smem, dq_smem, dv_stage, ds_ready, ds_free, ready, empty,
                  LSE, DSUM, stride_lse_b, stride_lse_h, stride_d_b, stride_d_h, n_work,
                  n_ntiles, nheads_kv, group, seqlen_q, seqlen_k, qk_scale, sm_scale,
                  DK_ACC, DV_ACC, acc_stride, claims, claimed, claim_free,
                  HALF: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
                  HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                  GROUP: gl.constexpr, PERSISTENT: gl.constexpr, SKIP_MASKED: gl.constexpr,
                  ROTATE: gl.constexpr, KV_SHARE: gl.constexpr, ADD_DKDV: gl.constexpr,
                  DYNAMIC: gl.constexpr):
    """Consumer partition (one warpgroup): dK and dV of the keys' half ``HALF`` and the dQ
    columns' half ``HALF`` of every query tile of its program's work item
    (:func:`_item_grads`); dK and dV leave through the K and V tiles. ``PERSISTENT``: of the
    items ``program_id``, ``+ num_programs``, ... in turn, each one's K and V loaded as soon
    as the previous one's last readers are done, dK and dV leaving meanwhile through the dQ
    staging tile and a dV tile; ``DYNAMIC``: of the items ``program_id`` and then those the
    loader claims for the program (:func:`.bwd_hopper._claim`, read through ``claims``).
    ``KV_SHARE`` > 1 (:func:`.bwd_hopper.expands`): the items' heads are query heads,
    ``KV_SHARE`` of them reading one KV head's K and V
    (:func:`_kv_column`), and dK, dV leave at the item's own head of the per-query-head
    outputs, or with ``ADD_DKDV`` are added into the KV head's float32 accumulators
    ``DK_ACC``/``DV_ACC`` (:func:`_dkdv_add`)."""
    s_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_N, HEAD_D)[0]
    dtype: gl.constexpr = k_desc.dtype
    first = gl.program_id(0)
    _, kv_row0, kv_col, _, _, _, _, _, _, _ = _item(
        first, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k, 0, 0, 0, 0, BLOCK_N,
        BLOCK_M, HEAD_D, CAUSAL, GROUP)
    _load_kv(k_desc, v_desc, k_smem, v_smem, kv_bar, HALF, kv_row0,
             _kv_column(kv_col, KV_SHARE, HEAD_D), HALF * BLOCK_N, None, None, None, None)
    dq_buf = dq_smem.index(HALF)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    # (the dQ part: this consumer's half of the head dim)
    dq_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_N, HEAD_D // 2)[1]
    dq_zero = gl.zeros([BLOCK_M, HEAD_D // 2], gl.float32, dq_layout)
    if PERSISTENT:
        # (dK through the dQ staging tile: 64 x d/2 fp32 = 64 x d fp16/bf16)
        dk_buf = dq_buf._reinterpret(dtype, [BLOCK_N, HEAD_D], dk_desc.layout)
        dv_buf = dv_stage.index(HALF)
        step = gl.num_programs(0)
        it = 0                      # (tiles of the earlier items: ring slots, phases)
        done = 0                    # (items before this one: the K/V barriers' phase)
        w = first
        while w < n_work:
            dk, dv, kv_row0, kv_col, n_t = _item_grads(
                w, it, done, k_smem, v_smem, kv_bar, q_smem, do_smem, p_smem, ds_smem, dq_buf,
                dq_desc, ds_ready, ds_free, ready, empty, LSE, DSUM, stride_lse_b, stride_lse_h,
                stride_d_b, stride_d_h, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k,
                qk_scale, sm_scale, s_zero, dq_zero, HALF, BLOCK_N, BLOCK_M, HEAD_D,
                NUM_STAGES, CAUSAL, GROUP, SKIP_MASKED, ROTATE)
            if DYNAMIC:     # (the loader publishes each next item: bwd_hopper._claim)
                w_next = _claimed(claims, claimed, claim_free, done)
            else:
                w_next = w + step
            _item_end(w_next, dk, dv, kv_row0, kv_col, k_desc, v_desc, dk_desc, dv_desc, k_smem,
                      v_smem, kv_bar, dk_buf, dv_buf, n_work, n_ntiles, nheads_kv, group,
                      seqlen_q, seqlen_k, sm_scale, DK_ACC, DV_ACC, acc_stride, HALF, BLOCK_N,
                      BLOCK_M, HEAD_D, CAUSAL, GROUP, KV_SHARE, ADD_DKDV)
            w = w_next
            it += n_t
            done += 1
    else:
        dk, dv, kv_row0, kv_col, n_t = _item_grads(
            first, 0, 0, k_smem, v_smem, kv_bar, q_smem, do_smem, p_smem, ds_smem, dq_buf,
            dq_desc, ds_ready, ds_free, ready, empty, LSE, DSUM, stride_lse_b, stride_lse_h,
            stride_d_b, stride_d_h, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k,
            qk_scale, sm_scale, s_zero, dq_zero, HALF, BLOCK_N, BLOCK_M, HEAD_D, NUM_STAGES,
            CAUSAL, GROUP, SKIP_MASKED, ROTATE)
        if ADD_DKDV:
            _dkdv_add(dk, dv, DK_ACC, DV_ACC, acc_stride, kv_row0,
                      _kv_column(kv_col, KV_SHARE, HEAD_D), sm_scale, HALF, BLOCK_N, HEAD_D)
        else:
            _dkdv_out(dk, dv, dk_desc, dv_desc, k_smem.index(HALF), v_smem.index(HALF),
                      kv_row0, kv_col, sm_scale, HALF, BLOCK_N)


@gluon.jit
def _item_end(w_next, dk, dv, kv_row0, kv_col, k_desc, v_desc, dk_desc, dv_desc, k_smem, v_smem,
              kv_bar, dk_buf, dv_buf, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k,
              sm_scale, DK_ACC, DV_ACC, acc_stride, HALF: gl.constexpr, BLOCK_N: gl.constexpr,
              BLOCK_M: gl.constexpr, HEAD_D: gl.constexpr, CAUSAL: gl.constexpr,
              GROUP: gl.constexpr, KV_SHARE: gl.constexpr, ADD_DKDV: gl.constexpr):
    """A persistent program's item end for consumer ``HALF``: item ``w_next``'s K and V start
    loading (if there is one) while this item's dK and dV leave (added, or through the dQ
    staging tile ``dk_buf`` and ``dv_buf``)."""
    if w_next < n_work:     # (the next item's K and V, while dK and dV leave)
        _, next_row, next_col, _, _, _, _, _, _, _ = _item(
            w_next, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k, 0, 0, 0, 0, BLOCK_N,
            BLOCK_M, HEAD_D, CAUSAL, GROUP)
        _load_kv(k_desc, v_desc, k_smem, v_smem, kv_bar, HALF, next_row,
                 _kv_column(next_col, KV_SHARE, HEAD_D), HALF * BLOCK_N, None, None, None, None)
    if ADD_DKDV:
        _dkdv_add(dk, dv, DK_ACC, DV_ACC, acc_stride, kv_row0,
                  _kv_column(kv_col, KV_SHARE, HEAD_D), sm_scale, HALF, BLOCK_N, HEAD_D)
    else:
        tma.store_wait(0)       # (dK's staging tile: the last dQ reduction has read it)
        gl.thread_barrier()     # (the wait is the issuing thread's: all others wait)
        _dkdv_out(dk, dv, dk_desc, dv_desc, dk_buf, dv_buf, kv_row0, kv_col, sm_scale, HALF,
                  BLOCK_N)


@gluon.jit
def _dkdv_add(dk, dv, DK_ACC, DV_ACC, acc_stride, kv_row0, col, sm_scale, HALF: gl.constexpr,
              BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr):
    """dK (times ``sm_scale``) and dV of the keys' half ``HALF`` added into the float32
    accumulators ``DK_ACC``/``DV_ACC`` (k's folded ``(b * s, h * d)`` view, rows of
    ``acc_stride`` elements) at column ``col`` by atomic adds from the registers: the query
    heads of a KV head sum there, in float32, with no shared-memory staging (the kernel's end
    completes the adds). Then, as :func:`_dkdv_out` ends, a wait for this thread's TMA
    operations: the item's last dQ reductions read their staging tile until done."""
    layout: gl.constexpr = dk.type.layout
    rows = kv_row0 + HALF * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
    cols = col + gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, layout))
    offs = rows.to(gl.int64)[:, None] * acc_stride + cols[None, :]
    gl.atomic_add(DK_ACC + offs, dk * sm_scale, sem="relaxed")
    gl.atomic_add(DV_ACC + offs, dv, sem="relaxed")
    tma.store_wait(0)


@gluon.jit
def _dkdv_out(dk, dv, dk_desc, dv_desc, dk_buf, dv_buf, kv_row0, kv_col, sm_scale,
              HALF: gl.constexpr, BLOCK_N: gl.constexpr):
    """dK (times ``sm_scale``) and dV of the keys' half ``HALF`` out by TMA through the
    shared tiles ``dk_buf`` and ``dv_buf``, whose last readers the caller has seen done."""
    dtype: gl.constexpr = dk_desc.dtype
    dk_buf.store((dk * sm_scale).to(dtype))
    dv_buf.store(dv.to(dtype))
    fence_async_shared()
    gl.thread_barrier()
    tma.async_copy_shared_to_global(dk_desc, [kv_row0 + HALF * BLOCK_N, kv_col], dk_buf)
    tma.async_copy_shared_to_global(dv_desc, [kv_row0 + HALF * BLOCK_N, kv_col], dv_buf)
    tma.store_wait(0)


@gluon.jit
def _dkdv_rows_kernel(q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, dq_desc, LSE, DSUM,
                      stride_lse_b, stride_lse_h, stride_d_b, stride_d_h, nheads_kv, group,
                      seqlen_q, seqlen_k, n_ntiles, n_work, qk_scale, sm_scale,
                      DK_ACC, DV_ACC, acc_stride, COUNT, BLOCK_N: gl.constexpr,
                      BLOCK_M: gl.constexpr, HEAD_D: gl.constexpr,
                      NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                      CONSUMER_REGS: gl.constexpr, GROUP: gl.constexpr,
                      PERSISTENT: gl.constexpr, SKIP_MASKED: gl.constexpr = False,
                      ROTATE: gl.constexpr = False, KV_SHARE: gl.constexpr = 1,
                      ADD_DKDV: gl.constexpr = False, DYNAMIC: gl.constexpr = False):
    # One program per work item (n_work programs) or per SM (:func:`dkdv`), each taking items
    # program_id, + num_programs, ... (``DYNAMIC``: program_id, then items claimed from the
    # count at ``COUNT``): 2 * BLOCK_N keys of one (batch, KV head).
    dtype: gl.constexpr = k_desc.dtype
    k_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, HEAD_D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, HEAD_D], v_desc.layout)
    q_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_D], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_D], do_desc.layout)
    p_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M, BLOCK_N],
                                       _tile_layout(BLOCK_M, BLOCK_N, dtype))
    ds_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M, BLOCK_N],
                                        _tile_layout(BLOCK_M, BLOCK_N, dtype))
    dq_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M, HEAD_D // 2], dq_desc.layout)
    if PERSISTENT:      # (dV's staging tiles: K and V take the next item's load meanwhile)
        dv_stage = gl.allocate_shared_memory(dtype, [2, BLOCK_N, HEAD_D], dv_desc.layout)
    else:
        dv_stage: gl.constexpr = None
    kv_bar = fwd_hopper.barriers(2, 1)
    ready = fwd_hopper.barriers(NUM_STAGES, 1)
    empty = fwd_hopper.barriers(NUM_STAGES, 2)          # both consumers release a slot
    ds_ready = fwd_hopper.barriers(1, 2).index(0)       # both dS halves stored
    ds_free = fwd_hopper.barriers(1, 2).index(0)        # both consumers' dQ products done
    if DYNAMIC:     # (the claimed items' slots, :func:`.bwd_hopper._claim`)
        claims, claimed, claim_free = _claim_slots()
    else:           # (constexpr Nones: warp_specialize's argument tuples take no bare None)
        claims: gl.constexpr = None
        claimed: gl.constexpr = None
        claim_free: gl.constexpr = None
    no: gl.constexpr = None
    # (the two consumers' lists differ in HALF only, yet are spelled out: the Gluon front end
    # passes the constexprs of a concatenated tuple on as tensors)
    gl.warp_specialize([
        (_rows_consume, (k_desc, v_desc, dk_desc, dv_desc, dq_desc, k_smem, v_smem, kv_bar,
                         q_smem, do_smem, p_smem, ds_smem, dq_smem, dv_stage, ds_ready, ds_free,
                         ready, empty, LSE, DSUM, stride_lse_b, stride_lse_h, stride_d_b,
                         stride_d_h, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k,
                         qk_scale, sm_scale, DK_ACC, DV_ACC, acc_stride, claims, claimed,
                         claim_free, 0, BLOCK_N, BLOCK_M, HEAD_D, NUM_STAGES, CAUSAL, GROUP,
                         PERSISTENT, SKIP_MASKED, ROTATE, KV_SHARE, ADD_DKDV, DYNAMIC)),
        (_rows_consume, (k_desc, v_desc, dk_desc, dv_desc, dq_desc, k_smem, v_smem, kv_bar,
                         q_smem, do_smem, p_smem, ds_smem, dq_smem, dv_stage, ds_ready, ds_free,
                         ready, empty, LSE, DSUM, stride_lse_b, stride_lse_h, stride_d_b,
                         stride_d_h, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k,
                         qk_scale, sm_scale, DK_ACC, DV_ACC, acc_stride, claims, claimed,
                         claim_free, 1, BLOCK_N, BLOCK_M, HEAD_D, NUM_STAGES, CAUSAL, GROUP,
                         PERSISTENT, SKIP_MASKED, ROTATE, KV_SHARE, ADD_DKDV, DYNAMIC)),
        (_load_items, (q_desc, do_desc, q_smem, do_smem, ready, empty, COUNT, claims, claimed,
                       claim_free, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k,
                       BLOCK_N, BLOCK_M, HEAD_D, NUM_STAGES, CAUSAL, GROUP, no, no, no, no, 0,
                       ROTATE, DYNAMIC, False)),
    ], [4, 1], [CONSUMER_REGS, 24])


def enabled() -> bool:
    """Whether the one pass at d=128 takes this kernel: unset, empty, ``auto`` or ``1``
    (measured 4-7% ahead of the transposed kernel, session 22; d=64 only with ``1``,
    :data:`OPT_IN`); ``FLASHTILE_GLUON_BWD_ROWS=0`` keeps :mod:`.bwd_hopper`'s; anything
    else a ValueError."""
    return env_forced("FLASHTILE_GLUON_BWD_ROWS") is not False


def persistent(causal: bool) -> bool:
    """The grid's rule (``FLASHTILE_GLUON_BWD_PERSISTENT`` unset or ``auto``): one program per
    SM unmasked, one per item causal. Measured (session 23, two alternating rounds each,
    backward kernel sums, d=128 bf16, 16k tokens), one per SM against one per item:
    unmasked -6.6% / -4.2% / -2.7% at 512 / 1k / 2k, level at 4k-16k (call 3), and against
    the kernel before either -6.3% / -2.9% / -1.9% / -0.6% / -0.8% / -1.4% at 512-16k (call
    4); causal +35% / +28% / +13% / +5% / +2% / +1% at 512-16k (call 3: items of unequal
    length taken in a fixed turn leave programs idle where one per item lets the hardware
    balance them). A first per-item build in the item loop's shape ran causal 6-9% slower
    (call 4); the per-item build is now the kernel before the loop, up to the order of its
    item arithmetic in the PTX."""
    return not causal


# Key items per KV head from which a causal call claims its items (:func:`dynamic`): 8, so
# from 1k keys (at 512 the rows kernel took +4.2% with them, session 53).
DYNAMIC_FROM = 8


def dynamic(causal: bool, n_ntiles: int, d: int = 128) -> bool:
    """Whether the grid is one program per SM whose items after the first are claimed at run
    time from a count (``DYNAMIC``, :func:`.bwd_hopper._claim`), for ``n_ntiles`` key items
    per KV head: taken in the work order by whichever program is free first, as the hardware
    hands out one program per item, but with each item's K/V load and dK/dV epilogue
    overlapping the next item (:func:`persistent`'s gain without its fixed turn).
    ``FLASHTILE_GLUON_BWD_DYNAMIC`` ``1``/``0`` forces it; unset or ``auto``: causal from
    :data:`DYNAMIC_FROM` items per head at head dim ``d`` = 128 (d=64's opt-in,
    :data:`OPT_IN`, is unmeasured with it).
    Measured on the H100 (session 53, d=128, 16k tokens, this kernel's time against one
    program per item, 2-3 alternating rounds, three calls): causal bf16 512 +4.2%, 1k -3.5%
    to -10.1%, 2k -3.2% to -8.6%, 4k -1.9% to -4.4%, 8k +1.0%, 16k -2.2% to -3.2%; fp16
    1k-16k -2.5% to -6.4%; GQA 8:1 (per query head) 1k -7.7%, 4k -2.1%; unmasked against the
    fixed turn -4% to +2% (forward+backward kernel sums), so left to it. As the default
    (session 54, 2k, two rounds): one program per item 1.028x / 1.034x its time, bf16 / fp16."""
    forced = env_forced("FLASHTILE_GLUON_BWD_DYNAMIC")
    if forced is not None:
        return forced
    return causal and n_ntiles >= DYNAMIC_FROM and d not in OPT_IN


def takes(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether a one-pass call that :mod:`.bwd_hopper` covers runs here: not switched off
    (:func:`enabled`), a head dim with a config (d=128; d=64 of :data:`OPT_IN` only with
    ``FLASHTILE_GLUON_BWD_ROWS=1``), and lengths that are multiples of this kernel's tiles
    (64 queries; 128 keys)."""
    if not enabled():
        return False
    d = q.shape[3]
    if d not in _CONFIGS or (d in OPT_IN
                             and env_forced("FLASHTILE_GLUON_BWD_ROWS") is not True):
        return False
    keys, queries = _CONFIGS[d][:2]
    return q.shape[1] % queries == 0 and k.shape[1] % (2 * keys) == 0


def adds() -> bool:
    """Whether the per-query-head dK/dV (:func:`.bwd_hopper.expands`) are added into float32
    accumulators by atomics from the kernel's registers (``ADD_DKDV``: no per-query-head bf16
    parts, 134 MB at GQA 8:1 and 16k tokens, and no summing pass, 67 us on the H100 in session
    49; a zero fill and a cast instead) rather than written as parts and summed after.
    ``FLASHTILE_GLUON_BWD_EXPAND_ADD=1``; unset, ``auto`` or ``0``: parts, which measured
    ahead at 1k (H100, session 50, call 1, GQA 8:1 d=128 causal bf16, 16k tokens,
    forward+backward kernel sums, two alternating rounds: the atomics 1.055 / 1.001 / 0.988 of
    the parts at 1k / 4k / 16k). The sums' order then varies from run to run, as the one
    pass's dQ's may."""
    return bool(env_forced("FLASHTILE_GLUON_BWD_EXPAND_ADD"))


def dkdv(q, k, v, dout, lse, dsum, dk, dv, params, record, dq_acc, add_to=None,
         count=None) -> None:
    """dK and dV into ``dk``/``dv`` and ``softmax_scale * dS K`` added into ``dq_acc``
    (float32, :func:`.bwd_hopper.dq_acc_shape`, zeros), as :func:`.bwd_hopper.dkdv`'s one
    pass (same arguments; the caller has checked :func:`takes`). ``dk``/``dv`` with q's heads
    (:func:`.bwd_hopper.expands`) take each query head's dK and dV, for the caller to sum per
    KV head; ``add_to`` (float32 ``(dk_acc, dv_acc)`` shaped like k, zeros: :func:`adds`) has each
    query head's added there instead (``dk``/``dv`` shaped like k, then unused). ``count``:
    an int32 zero (the preprocess's), given where :func:`dynamic` says so
    (:func:`.bwd_hopper.claims_items`): the items are claimed from it
    (:func:`.bwd_hopper.claimed_grid`); without it, never."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    # (the items' heads: k's, or q's per query head)
    heads = hq if add_to is not None else dk.shape[2]
    lse, dsum = lse.contiguous(), dsum.contiguous()     # (the kernel steps along sq by 1)
    block_n, block_m, stages, regs = _CONFIGS[d]
    n_ntiles = sk // (2 * block_n)
    n_work = n_ntiles * b * heads
    causal = fwd_hopper.causal(params)
    # (the dQ accumulator's TMA blocks: a consumer's part, half the head dim)
    tiles = ((q, (block_m, d)), (k, (block_n, d)), (v, (block_n, d)), (dout, (block_m, d)),
             (dk, (block_n, d)), (dv, (block_n, d)), (dq_acc, (block_m, d // 2)))
    # (one program per SM unmasked, per item causal: :func:`persistent`; claimed items:
    # :func:`dynamic`)
    n_programs, claims = bwd_hopper.claimed_grid(n_work, q.device, count, persistent(causal))
    persist = n_programs < n_work
    group = bwd_hopper.causal_order(q, heads, n_ntiles, n_programs) if causal else 1
    rotated = bwd_hopper.rotates(d, causal, True)
    plans.gluon_launch(
        record, _dkdv_rows_kernel, (n_programs,), tiles,
        (lse, dsum, lse.stride(0), lse.stride(1), dsum.stride(0), dsum.stride(1), heads,
         hq // heads, sq, sk, n_ntiles, n_work, params.softmax_scale * fwd_hopper.LOG2E,
         params.softmax_scale, *(add_to or (lse, lse)), hkv * d,
         count if claims else lse),
        dict(BLOCK_N=block_n, BLOCK_M=block_m, HEAD_D=d, NUM_STAGES=stages, CAUSAL=causal,
             CONSUMER_REGS=regs, PERSISTENT=persist, num_warps=4,
             SKIP_MASKED=bwd_hopper.skips_masked(causal, n_ntiles, hq > heads),
             GROUP=group, ROTATE=rotated, KV_SHARE=heads // hkv,
             ADD_DKDV=add_to is not None, DYNAMIC=claims),
        fwd_hopper.part_descriptor, "dkdv",
        f"gluon rows {2 * block_n}x{block_m}/{stages}s +dQ"
        + (" persistent" if persist else "") + bwd_hopper.claim_label(claims)
        + (f" window {-group}" if group < 0 else "")
        + (" rotated" if rotated else "") + (" per query head" if heads > hkv else "")
        + (" added" if add_to is not None else ""))
