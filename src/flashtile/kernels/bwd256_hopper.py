"""Hopper dK/dV kernel at head dim 256, written in Gluon: the two consumers split the head dim.

Computes dK, dV (like k, v) from q, k, v ``(b, s, h, 256)``, ``dout``, LSE and D. A consumer of
:mod:`.bwd_hopper` owns its keys and the whole head dim, and at d=256 its dK and dV (64 x 256 fp32
each) alone would take 256 registers a thread; here both consumers take the same 64 keys and split
the work. Cover: sm_90, dense fp16/bf16 (no varlen, paging, dropout, softcap, ALiBi, bias or
mods), d = 256, causal only with sq = sk, lengths that are multiples of the tiles, foldable
q/k/v/dout (:func:`.fwd_hopper.covers`, :func:`.fwd_hopper.gradient_tiles_fit`). On by default
(``FLASHTILE_GLUON_BWD256=0``: the tile-level kernel, :mod:`.bwd`). dQ: a second pass, this
design transposed (:mod:`.dq256_hopper`; ``FLASHTILE_GLUON_DQ256=0``: :mod:`.bwd`'s).

Notation:

- work item: ``BLOCK_N`` = 64 keys (one wgmma's rows) of one (batch, KV head) (:func:`_item`), a
  program each (``FLASHTILE_GLUON_BWD256_PERSISTENT=1``: a program per SM, looping over items);
  ``BLOCK_M`` queries per (Q, dO) tile, ``NUM_STAGES`` ring slots, ``CONSUMER_REGS``
  (:data:`_CONFIGS`); ``HEAD_D`` = 256, ``HALF_D`` = 128 (a consumer's columns of dK and dV);
  ``CAUSAL``; ``GROUP``: key tiles per causal chunk (:data:`SINGLE_UPTO` 0: always 8);
- ``S^T = K Q^T``, ``P^T = exp2(S^T * qk_scale - LSE * log2e)``, ``dP^T = V dO^T``,
  ``dS^T = P^T (dP^T - D)`` with ``D = rowsum(dO * O)`` (the preprocess kernel's rows),
  ``dV = P^T dO``, ``dK = scale * dS^T Q`` (keys as rows);
- the loader (:func:`_load`, one warp, 24 registers) loads the item's K and V once and streams
  (Q, dO) tiles of every query head of the KV head (GQA) through the ring, causal items from
  their first key's query tile; consumer 0 (:func:`_p_consume`): S^T, P^T and column half 0 of dK,
  dV; consumer 1 (:func:`_ds_consume`): dP^T, dS^T and half 1 (up to 240 registers each);
- two shared P^T and two dS^T tiles (tile t in buffer t % 2), each freed by a barrier once the
  other consumer's products that read it are done. Shared memory: K + V 64 KB, a ring slot
  ``2 * BLOCK_M * 256 * 2`` B, the P^T/dS^T tiles ``2 * 2 * 64 * BLOCK_M * 2`` B.

Schedule per (Q, dO) tile t:

- consumer 0 (:func:`_p_tile`): P^T (causal mask) into its tile; ``dV_0 += P^T dO[:, :128]``
  (P^T from registers); issue S^T_{t+1}, which runs while consumer 1 computes dS^T;
  ``dK_0 += dS^T Q[:, :128]``; the next P^T is computed while dK_0 and consumer 1's three
  products run (S^T and dV_0 waited for before the back edge, dK_0 once P^T is stored);
- consumer 1 (:func:`_ds_tile`): dS^T from the fp16/bf16 P^T it reads back (the product's operand
  anyway) into its tile; ``dK_1 += dS^T Q[:, 128:]``, ``dV_1 += P^T dO[:, 128:]`` (both from the
  shared tiles: dS^T as a register A operand made ptxas serialise every wgmma, C7512); issue
  dP^T_{t+1};
- epilogue: once every product that reads K and V is done, consumer h stages ``scale * dK_h`` and
  ``dV_h`` in column half h of the K and V tiles and stores them by TMA; the next item's K and V
  load once both halves have left, after its first ``NUM_STAGES`` (Q, dO) tiles.

Measured (H200, forward+backward, kernel sums):

- against the tile-level backward: 0.57-0.61x its time at 4k and 16k, causal or not; 0.55x ->
  0.91-0.97x cuDNN (session 19);
- 64 queries x 2 slots against 32 x 4: time 0.95-0.98x, 1.01x at 16k unmasked (session 19);
- offline (sm_90a): every config tried, 0 B of spills and no wgmma serialised; rejected: dS^T
  as consumer 1's register operand (C7512), S^T_{t+1} waited for at the next tile's top (C7514);
- rejected (session 52, H100, 2 rounds): consumer 1 issuing dV_1 as soon as P^T has landed and
  computing dS^T under it (offline no wgmma serialised, 4 B spill when causal): 0.999x-1.054x
  the time at 4k/16k, causal or not (slower at three of four points).

Details, commands and raw data: docs/perf.md.
"""
from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_init, warpgroup_mma_wait)
from triton.runtime.jit import constexpr_function

from . import bwd_hopper, fwd_hopper, plans
from .common import gluon_switch_on

# (head dim) -> (keys per item, queries per tile, ring slots, consumer registers); the keys
# are one wgmma's 64 rows. Offline (sm_90a, scripts/inspect_kernels.py --gluon --d 256, bf16
# and fp16, causal or not) every config tried compiles with 0 B of spills and 11 wgmma waits
# (none serialised): 32 queries x 4 / 3 / 2 slots (213.5 / 180.7 / 148 KB of shared memory,
# 80 HGMMA), 64 x 2 (229.9 KB, 96 HGMMA; its busiest partition up to register 231 of 240),
# 16 x 4 / 8 (139.8 / 205.4 KB, 72 HGMMA), and at 232 registers too. On the H200 (session
# 19, kernel sums of forward+backward, 2 alternating rounds) 64 x 2 against 32 x 4: 0.95x /
# 0.98x / 0.98x at 4k unmasked / 4k causal / 16k causal, 1.01x at 16k unmasked: the default.
# Tried and rejected offline: dS^T as consumer 1's register A operand of dK_1 (C7512, every
# wgmma serialised; from its shared tile none is), and consumer 0 waiting for S^T of tile
# t+1 at the top of the next tile rather than before the loop's back edge (C7514).
_CONFIGS = {256: (64, 64, 2, 240)}

# Work items per KV head up to which the causal order runs in chunks of 1
# (:func:`.fwd_hopper.causal_group`): never (bwd_hopper's d=128 rule; unmeasured here).
SINGLE_UPTO = 0


@constexpr_function
def _pt_layout(keys, queries, dtype):
    """The shared layout of a ``P^T``/``dS^T`` tile ``(keys, queries)`` (a wgmma A operand)."""
    return gl.NVMMASharedLayout.get_default_for([keys, queries], dtype)


@gluon.jit
def _item(w, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k, stride_b, stride_h,
          BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_D: gl.constexpr,
          CAUSAL: gl.constexpr, GROUP: gl.constexpr):
    """Work item w: BLOCK_N keys of one (batch, KV head), causal orders taking the first keys
    (seen by the most queries) first (:func:`.fwd_hopper._work_tile`). Returns (first key n0,
    K/V row and column in the folded views, first query tile i0, query tiles per head n_i,
    tiles in all n_t, Q/dO row and column, the offset of the group's first query head's rows
    in an ``(b, hq, sq)`` array of strides ``stride_b``/``stride_h``)."""
    tile, bh = fwd_hopper._work_tile(w, n_work, n_ntiles, CAUSAL, False, GROUP)
    off_b = bh // nheads_kv
    off_hkv = bh % nheads_kv
    n0 = tile * BLOCK_N
    if CAUSAL:   # queries before the item's first key see none of its keys
        i0 = n0 // BLOCK_M
    else:
        i0 = 0
    n_i = seqlen_q // BLOCK_M - i0
    return (n0, off_b * seqlen_k + n0, off_hkv * HEAD_D, i0, n_i, group * n_i,
            off_b * seqlen_q, off_hkv * group * HEAD_D,
            off_b * stride_b + off_hkv * group * stride_h)


@gluon.jit
def _load(q_desc, k_desc, v_desc, do_desc, k_smem, v_smem, q_smem, do_smem, k_ready, v_ready,
          kv_empty, ready, empty, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k,
          BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_D: gl.constexpr,
          NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, GROUP: gl.constexpr):
    """Loader partition: for each of this program's work items (``program_id``,
    ``+ num_programs``, ...), its (Q, dO) tiles t = 0..n_t-1 into one ring (loads counted
    across items: slot and phase), where tile t is query tile ``i0 + t % n_i`` of the group's
    query head ``t // n_i``, and its K and V tiles. A slot is refilled only after both
    consumers released it; K and V once both consumers' dK/dV stores of the previous item
    have left them, so they are loaded after the item's first ``NUM_STAGES`` (Q, dO) tiles
    (in a persistent grid those load during the previous item's epilogue)."""
    it = 0
    c = 0
    for w in range(gl.program_id(0), n_work, gl.num_programs(0)):
        _, kv_row0, kv_col, i0, n_i, n_t, q_row0, q_col0, _ = _item(
            w, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k, 0, 0, BLOCK_N, BLOCK_M,
            HEAD_D, CAUSAL, GROUP)
        kv_after = gl.minimum(n_t, NUM_STAGES) - 1
        for t in range(n_t):
            bwd_hopper.load_q_do_tile(q_desc, do_desc, q_smem, do_smem, ready, empty, it + t, t,
                                      i0, n_i, q_row0, q_col0, BLOCK_M, HEAD_D, NUM_STAGES)
            if t == kv_after:
                # (a fresh barrier passes a wait on parity 1: the first item finds them free)
                mbarrier.wait(kv_empty, (c & 1) ^ 1)
                mbarrier.expect(k_ready, k_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(k_desc, [kv_row0, kv_col], k_ready, k_smem)
                mbarrier.expect(v_ready, v_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(v_desc, [kv_row0, kv_col], v_ready, v_smem)
        it += n_t
        c += 1


@gluon.jit
def _query_pos(t, i0, n_i, BLOCK_M: gl.constexpr, col_layout: gl.constexpr):
    """Sequence positions of tile t's queries (tile t: query tile ``i0 + t % n_i``)."""
    return (i0 + t % n_i) * BLOCK_M + gl.arange(0, BLOCK_M, layout=col_layout)


@gluon.jit
def _rows(ROWS, base, stride_h, t, i0, n_i, scale, BLOCK_M: gl.constexpr,
          col_layout: gl.constexpr):
    """Tile t's rows of ``ROWS`` (LSE or D; of the group's query head ``t // n_i``) times
    ``scale``."""
    q_pos = _query_pos(t, i0, n_i, BLOCK_M, col_layout)
    return gl.load(ROWS + base + (t // n_i) * stride_h + q_pos) * scale


@gluon.jit
def _store_half(dk, dv, k_smem, v_smem, dk_desc, dv_desc, kv_empty, kv_row0, kv_col,
                HALF: gl.constexpr):
    """A consumer's column half ``HALF`` of dK (already scaled) and dV through the same half
    of the K and V tiles (no product reads them any more) by TMA; K and V are handed back to
    the loader once both halves have left. (The d=256 dQ kernel, :mod:`.dq256_hopper`, writes
    a half of dQ alone: ``dv``, ``v_smem``, ``dv_desc`` and ``kv_empty`` None.)"""
    HALF_D: gl.constexpr = dk_desc.block_type.shape[1]
    k_half = k_smem.slice(HALF * HALF_D, HALF_D, dim=1)
    k_half.store(dk.to(dk_desc.dtype))
    if dv is not None:
        v_half = v_smem.slice(HALF * HALF_D, HALF_D, dim=1)
        v_half.store(dv.to(dv_desc.dtype))
    fence_async_shared()
    gl.thread_barrier()         # (every thread's part stored before the one issue)
    tma.async_copy_shared_to_global(dk_desc, [kv_row0, kv_col + HALF * HALF_D], k_half)
    if dv is not None:
        tma.async_copy_shared_to_global(dv_desc, [kv_row0, kv_col + HALF * HALF_D], v_half)
    tma.store_wait(0)
    if kv_empty is not None:
        gl.thread_barrier()     # (the wait is the issuing thread's: all others wait for it)
        mbarrier.arrive(kv_empty, count=1)


@gluon.jit
def _item_done(dk, dv, r, empty, free, k_smem, v_smem, dk_desc, dv_desc, kv_empty, kv_row0,
               kv_col, sm_scale, NUM_STAGES: gl.constexpr, HALF: gl.constexpr):
    """A consumer's end of a work item whose last tile was the ring's load r: its last
    products done, that tile's slot and the other consumer's shared tile (``free``) handed
    back, then its column half of dK and dV out (:func:`_store_half`)."""
    dk, dv = warpgroup_mma_wait(0, deps=(dk, dv))
    mbarrier.arrive(empty.index(r % NUM_STAGES), count=1)
    mbarrier.arrive(free.index(r % 2), count=1)
    _store_half(dk * sm_scale, dv, k_smem, v_smem, dk_desc, dv_desc, kv_empty, kv_row0,
                kv_col, HALF)


@gluon.jit
def _issue_transposed(kv_smem, x_smem, ready, r, s_zero, NUM_STAGES: gl.constexpr):
    """Once the ring's load r has landed, issue its tile's ``S^T = K Q^T`` (consumer 0: K
    and the Q ring) or ``dP^T = V dO^T`` (consumer 1: V and the dO ring)."""
    slot = r % NUM_STAGES
    mbarrier.wait(ready.index(slot), (r // NUM_STAGES) & 1)
    return warpgroup_mma(kv_smem, x_smem.index(slot).permute((1, 0)), s_zero, use_acc=False,
                         is_async=True)


@gluon.jit
def _item_start(kv_smem, kv_ready, x_smem, ready, r, c, s_zero, BLOCK_N: gl.constexpr,
                HALF_D: gl.constexpr, NUM_STAGES: gl.constexpr, g_layout: gl.constexpr):
    """A consumer's work item c begins: once its K (or V) has landed, tile 0's S^T (or dP^T,
    the ring's load r), completed, and the consumer's zeroed halves of dK and dV."""
    mbarrier.wait(kv_ready, c & 1)
    acc = _issue_transposed(kv_smem, x_smem, ready, r, s_zero, NUM_STAGES)
    # Tile 0's product completes before dK/dV's zeros exist (see fwd_hopper: the compiler
    # would otherwise place the zeros mid-flight and ptxas serialise every wgmma).
    acc = warpgroup_mma_init(warpgroup_mma_wait(0, deps=(acc,)))
    dk = warpgroup_mma_init(gl.zeros([BLOCK_N, HALF_D], gl.float32, g_layout))
    dv = warpgroup_mma_init(gl.zeros([BLOCK_N, HALF_D], gl.float32, g_layout))
    return acc, dk, dv


@gluon.jit
def _p_tile(st, dk, dv, lse2, keys, r, t, i0, n_i, k_smem, q_smem, do_smem, pt_smem, ds_smem,
            ready, empty, pt_ready, pt_free, ds_ready, ds_free, LSE, lse_base, stride_lse_h,
            qk_scale, s_zero, BLOCK_M: gl.constexpr, NUM_STAGES: gl.constexpr,
            CAUSAL: gl.constexpr, NEXT: gl.constexpr, a_layout: gl.constexpr,
            col_layout: gl.constexpr):
    """Consumer 0, tile t (the ring's load r): with ``S^T`` issued (and ``dV_0``, ``dK_0`` of
    tile t-1 in flight), P^T into its shared tile, then ``dV_0 += P^T dO[:, :128]``, the next
    tile's ``S^T`` (``NEXT``) and, once consumer 1's dS^T has landed,
    ``dK_0 += dS^T Q[:, :128]``; tile t-1's slot and dS^T tile are released as soon as its
    ``dK_0`` is done."""
    HALF_D: gl.constexpr = q_smem.shape[2] // 2
    dtype: gl.constexpr = pt_smem.dtype
    slot = r % NUM_STAGES
    b = r % 2
    st, dv = warpgroup_mma_wait(1, deps=(st, dv))
    pt = gl.exp2(st * qk_scale - lse2[None, :])
    if CAUSAL:                                   # key j is seen by query i iff j <= i
        q_pos = _query_pos(t, i0, n_i, BLOCK_M, gl.SliceLayout(0, st.type.layout))
        pt = gl.where(keys[:, None] <= q_pos[None, :], pt, 0.0)
    pt = pt.to(dtype)
    mbarrier.wait(pt_free.index(b), ((r // 2) & 1) ^ 1)     # (tile t-2's P^T read)
    pt_smem.index(b).store(pt)
    fence_async_shared()
    gl.thread_barrier()         # (every thread's part stored before the one arrival)
    mbarrier.arrive(pt_ready.index(b), count=1)
    dk = warpgroup_mma_wait(0, deps=(dk,))
    if t > 0:                   # tile t-1's Q, dO and dS^T are read as far as this one goes
        mbarrier.arrive(empty.index((r - 1) % NUM_STAGES), count=1)
        mbarrier.arrive(ds_free.index((r - 1) % 2), count=1)
    dv = warpgroup_mma(gl.convert_layout(pt, a_layout), do_smem.index(slot).slice(0, HALF_D,
                                                                                   dim=1),
                       dv, is_async=True)
    if NEXT:
        lse2 = _rows(LSE, lse_base, stride_lse_h, t + 1, i0, n_i, 1.4426950408889634,
                     BLOCK_M, col_layout)
        st = _issue_transposed(k_smem, q_smem, ready, r + 1, s_zero, NUM_STAGES)
    mbarrier.wait(ds_ready.index(b), (r // 2) & 1)
    dk = warpgroup_mma(ds_smem.index(b), q_smem.index(slot).slice(0, HALF_D, dim=1), dk,
                       is_async=True)
    if NEXT:
        st, dv = warpgroup_mma_wait(1, deps=(st, dv))
        st = warpgroup_mma_init(st)
        dv = warpgroup_mma_init(dv)
    return st, dk, dv, lse2


@gluon.jit
def _p_consume(k_smem, v_smem, q_smem, do_smem, pt_smem, ds_smem, k_ready, kv_empty, ready,
               empty, pt_ready, pt_free, ds_ready, ds_free, dk_desc, dv_desc, LSE,
               stride_lse_b, stride_lse_h, n_work, n_ntiles, nheads_kv, group, seqlen_q,
               seqlen_k, qk_scale, sm_scale, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
               HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
               GROUP: gl.constexpr):
    """Consumer 0 (the default partition): ``S^T``, ``P^T``, and column half 0 of dK and dV,
    for each of this program's work items."""
    HALF_D: gl.constexpr = HEAD_D // 2
    s_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_M, HALF_D)[0]
    g_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_M, HALF_D)[1]
    a_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_M, HALF_D)[2]
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    it = 0          # (Q, dO) tiles read from the ring so far
    c = 0           # work items done so far
    for w in range(gl.program_id(0), n_work, gl.num_programs(0)):
        n0, kv_row0, kv_col, i0, n_i, n_t, _, _, lse_base = _item(
            w, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k, stride_lse_b,
            stride_lse_h, BLOCK_N, BLOCK_M, HEAD_D, CAUSAL, GROUP)
        keys = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, s_layout))
        s_zero = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, s_layout)
        st, dk, dv = _item_start(k_smem, k_ready, q_smem, ready, it, c, s_zero, BLOCK_N,
                                 HALF_D, NUM_STAGES, g_layout)
        lse2 = _rows(LSE, lse_base, stride_lse_h, 0, i0, n_i, 1.4426950408889634, BLOCK_M,
                     col_layout)
        for t in range(n_t - 1):        # the last tile has no next S^T: peeled below
            st, dk, dv, lse2 = _p_tile(
                st, dk, dv, lse2, keys, it + t, t, i0, n_i, k_smem, q_smem, do_smem, pt_smem,
                ds_smem, ready, empty, pt_ready, pt_free, ds_ready, ds_free, LSE, lse_base,
                stride_lse_h, qk_scale, s_zero, BLOCK_M, NUM_STAGES, CAUSAL, True, a_layout,
                col_layout)
        r = it + n_t - 1
        st, dk, dv, lse2 = _p_tile(
            st, dk, dv, lse2, keys, r, n_t - 1, i0, n_i, k_smem, q_smem, do_smem, pt_smem,
            ds_smem, ready, empty, pt_ready, pt_free, ds_ready, ds_free, LSE, lse_base,
            stride_lse_h, qk_scale, s_zero, BLOCK_M, NUM_STAGES, CAUSAL, False, a_layout,
            col_layout)
        # (consumer 1's last dP^T is done: it stored the last dS^T, which this one waited for)
        _item_done(dk, dv, r, empty, ds_free, k_smem, v_smem, dk_desc, dv_desc, kv_empty,
                   kv_row0, kv_col, sm_scale, NUM_STAGES, 0)
        it += n_t
        c += 1


@gluon.jit
def _ds_tile(dpt, dk, dv, d_row, r, t, i0, n_i, v_smem, q_smem, do_smem, pt_smem, ds_smem,
             ready, empty, pt_ready, pt_free, ds_ready, ds_free, DSUM, d_base, stride_d_h,
             s_zero, BLOCK_M: gl.constexpr, NUM_STAGES: gl.constexpr, NEXT: gl.constexpr,
             a_layout: gl.constexpr, col_layout: gl.constexpr):
    """Consumer 1, tile t (the ring's load r): with ``dP^T`` issued (and tile t-1's ``dK_1``,
    ``dV_1`` in flight), all three done (tile t-1's slot and P^T tile released); P^T read
    back once consumer 0 stored it; dS^T into its shared tile; then
    ``dK_1 += dS^T Q[:, 128:]``, ``dV_1 += P^T dO[:, 128:]`` and the next tile's ``dP^T``
    (``NEXT``)."""
    HALF_D: gl.constexpr = q_smem.shape[2] // 2
    dtype: gl.constexpr = ds_smem.dtype
    slot = r % NUM_STAGES
    b = r % 2
    dpt, dk, dv = warpgroup_mma_wait(0, deps=(dpt, dk, dv))
    if t > 0:                   # tile t-1's Q, dO and P^T are read as far as this one goes
        mbarrier.arrive(empty.index((r - 1) % NUM_STAGES), count=1)
        mbarrier.arrive(pt_free.index((r - 1) % 2), count=1)
    mbarrier.wait(pt_ready.index(b), (r // 2) & 1)
    pt = pt_smem.index(b).load(dpt.type.layout).to(gl.float32)
    dst = (pt * (dpt - d_row[None, :])).to(dtype)
    mbarrier.wait(ds_free.index(b), ((r // 2) & 1) ^ 1)     # (tile t-2's dS^T read)
    ds_smem.index(b).store(dst)
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(ds_ready.index(b), count=1)
    if NEXT:
        d_row = _rows(DSUM, d_base, stride_d_h, t + 1, i0, n_i, 1.0, BLOCK_M, col_layout)
    dk = warpgroup_mma(ds_smem.index(b),
                       q_smem.index(slot).slice(HALF_D, HALF_D, dim=1), dk, is_async=True)
    dv = warpgroup_mma(pt_smem.index(b), do_smem.index(slot).slice(HALF_D, HALF_D, dim=1), dv,
                       is_async=True)
    if NEXT:
        dpt = _issue_transposed(v_smem, do_smem, ready, r + 1, s_zero, NUM_STAGES)
    return dpt, dk, dv, d_row


@gluon.jit
def _ds_consume(k_smem, v_smem, q_smem, do_smem, pt_smem, ds_smem, v_ready, kv_empty, ready,
                empty, pt_ready, pt_free, ds_ready, ds_free, dk_desc, dv_desc, DSUM,
                stride_d_b, stride_d_h, n_work, n_ntiles, nheads_kv, group, seqlen_q,
                seqlen_k, sm_scale, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
                HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                GROUP: gl.constexpr):
    """Consumer 1 (a four-warp worker): ``dP^T``, ``dS^T``, and column half 1 of dK and dV,
    for each of this program's work items."""
    HALF_D: gl.constexpr = HEAD_D // 2
    s_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_M, HALF_D)[0]
    g_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_M, HALF_D)[1]
    a_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_M, HALF_D)[2]
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    it = 0
    c = 0
    for w in range(gl.program_id(0), n_work, gl.num_programs(0)):
        _, kv_row0, kv_col, i0, n_i, n_t, _, _, d_base = _item(
            w, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k, stride_d_b, stride_d_h,
            BLOCK_N, BLOCK_M, HEAD_D, CAUSAL, GROUP)
        s_zero = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, s_layout)
        dpt, dk, dv = _item_start(v_smem, v_ready, do_smem, ready, it, c, s_zero, BLOCK_N,
                                  HALF_D, NUM_STAGES, g_layout)
        d_row = _rows(DSUM, d_base, stride_d_h, 0, i0, n_i, 1.0, BLOCK_M, col_layout)
        for t in range(n_t - 1):
            dpt, dk, dv, d_row = _ds_tile(
                dpt, dk, dv, d_row, it + t, t, i0, n_i, v_smem, q_smem, do_smem, pt_smem,
                ds_smem, ready, empty, pt_ready, pt_free, ds_ready, ds_free, DSUM, d_base,
                stride_d_h, s_zero, BLOCK_M, NUM_STAGES, True, a_layout,
                col_layout)
        r = it + n_t - 1
        dpt, dk, dv, d_row = _ds_tile(
            dpt, dk, dv, d_row, r, n_t - 1, i0, n_i, v_smem, q_smem, do_smem, pt_smem,
            ds_smem, ready, empty, pt_ready, pt_free, ds_ready, ds_free, DSUM, d_base,
            stride_d_h, s_zero, BLOCK_M, NUM_STAGES, False, a_layout,
            col_layout)
        # (consumer 0's last S^T is done: it stored the last P^T, which this one read)
        _item_done(dk, dv, r, empty, pt_free, k_smem, v_smem, dk_desc, dv_desc, kv_empty,
                   kv_row0, kv_col, sm_scale, NUM_STAGES, 1)
        it += n_t
        c += 1


@gluon.jit
def _dkdv256_kernel(q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, LSE, DSUM,
                    stride_lse_b, stride_lse_h, stride_d_b, stride_d_h, nheads_kv, group,
                    seqlen_q, seqlen_k, n_ntiles, n_work, qk_scale, sm_scale,
                    BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_D: gl.constexpr,
                    NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                    CONSUMER_REGS: gl.constexpr, GROUP: gl.constexpr):
    # A program takes work items program_id, + num_programs, ... (n_work in all; a grid of
    # n_work programs: one each): BLOCK_N keys of one (batch, KV head) apiece.
    dtype: gl.constexpr = k_desc.dtype
    k_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_D], v_desc.layout)
    q_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_D], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_D], do_desc.layout)
    pt_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, BLOCK_M],
                                        _pt_layout(BLOCK_N, BLOCK_M, dtype))
    ds_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, BLOCK_M],
                                        _pt_layout(BLOCK_N, BLOCK_M, dtype))
    k_ready = fwd_hopper.barriers(1, 1).index(0)
    v_ready = fwd_hopper.barriers(1, 1).index(0)
    kv_empty = fwd_hopper.barriers(1, 2).index(0)       # both consumers' stores have left
    ready = fwd_hopper.barriers(NUM_STAGES, 1)
    empty = fwd_hopper.barriers(NUM_STAGES, 2)          # both consumers release a slot
    pt_ready = fwd_hopper.barriers(2, 1)                # consumer 0 stored P^T
    pt_free = fwd_hopper.barriers(2, 1)                 # consumer 1's reads of P^T done
    ds_ready = fwd_hopper.barriers(2, 1)                # consumer 1 stored dS^T
    ds_free = fwd_hopper.barriers(2, 1)                 # consumer 0's read of dS^T done

    gl.warp_specialize([
        (_p_consume, (k_smem, v_smem, q_smem, do_smem, pt_smem, ds_smem, k_ready, kv_empty,
                      ready, empty, pt_ready, pt_free, ds_ready, ds_free, dk_desc, dv_desc, LSE,
                      stride_lse_b, stride_lse_h, n_work, n_ntiles, nheads_kv, group, seqlen_q,
                      seqlen_k, qk_scale, sm_scale, BLOCK_N, BLOCK_M, HEAD_D, NUM_STAGES,
                      CAUSAL, GROUP)),
        (_ds_consume, (k_smem, v_smem, q_smem, do_smem, pt_smem, ds_smem, v_ready, kv_empty,
                       ready, empty, pt_ready, pt_free, ds_ready, ds_free, dk_desc, dv_desc,
                       DSUM, stride_d_b, stride_d_h, n_work, n_ntiles, nheads_kv, group,
                       seqlen_q, seqlen_k, sm_scale, BLOCK_N, BLOCK_M, HEAD_D, NUM_STAGES,
                       CAUSAL, GROUP)),
        (_load, (q_desc, k_desc, v_desc, do_desc, k_smem, v_smem, q_smem, do_smem, k_ready,
                 v_ready, kv_empty, ready, empty, n_work, n_ntiles, nheads_kv, group, seqlen_q,
                 seqlen_k, BLOCK_N, BLOCK_M, HEAD_D, NUM_STAGES, CAUSAL, GROUP)),
    ], [4, 1], [CONSUMER_REGS, 24])


def config(d: int) -> tuple[int, int, int, int]:
    """(keys per item, queries per tile, ring slots, consumer registers) for head dim d;
    ``FLASHTILE_GLUON_BWD256_CONFIG=keys,queries,slots,regs`` overrides it (for sweeps). The
    keys are one wgmma's 64 rows; the schedule holds tiles t and t+1 at once (2+ slots)."""
    keys, queries, stages, regs = fwd_hopper.env_config("bwd256_hopper", _CONFIGS, d)
    if keys != 64 or stages < 2 or queries not in (16, 32, 64):
        raise ValueError(f"FLASHTILE_GLUON_BWD256_CONFIG: the d=256 Gluon dK/dV kernel needs "
                         f"64 keys, 16, 32 or 64 queries and at least 2 ring slots, got "
                         f"{keys},{queries},{stages},{regs}")
    return keys, queries, stages, regs


def enabled() -> bool:
    """On by default (measured ahead on the H200, session 19); ``FLASHTILE_GLUON_BWD256=0``
    turns it off."""
    return gluon_switch_on("bwd256_hopper")


def supports(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             params) -> bool:
    """True when this kernel can compute the call's dK and dV (see the module docstring)."""
    if not (enabled() and fwd_hopper.covers(q, k, v, params, _CONFIGS)):
        return False
    keys, queries = config(q.shape[3])[:2]
    return fwd_hopper.gradient_tiles_fit(dout, q, k, queries, keys)


def dkdv(q, k, v, dout, lse, dsum, dk, dv, params, record=None) -> None:
    """dK and dV into ``dk``/``dv`` (shaped and typed like k/v) from q, k, v ``(b, s, h, 256)``,
    ``dout`` like q, and the float32 ``(b, hq, sq)`` rows ``lse`` (natural log) and ``dsum``
    (``rowsum(dO * O)``). The caller has checked :func:`supports`; ``record``: the calling
    plan's recorder (:func:`.plans.gluon_launch`)."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    lse, dsum = lse.contiguous(), dsum.contiguous()     # (the kernel steps along sq by 1)
    block_n, block_m, stages, regs = config(d)
    n_ntiles = sk // block_n
    n_work = n_ntiles * b * hkv
    causal = fwd_hopper.causal(params)
    grid = fwd_hopper.programs(n_work, q.device, "FLASHTILE_GLUON_BWD256_PERSISTENT", False)
    # (whole rows of the head dim; dK and dV in a consumer's column halves)
    plans.gluon_launch(
        record, _dkdv256_kernel, (grid,),
        ((q, (block_m, d)), (k, (block_n, d)), (v, (block_n, d)), (dout, (block_m, d)),
         (dk, (block_n, d // 2)), (dv, (block_n, d // 2))),
        (lse, dsum, lse.stride(0), lse.stride(1), dsum.stride(0), dsum.stride(1),
         hkv, hq // hkv, sq, sk, n_ntiles, n_work, params.softmax_scale * fwd_hopper.LOG2E,
         params.softmax_scale),
        dict(BLOCK_N=block_n, BLOCK_M=block_m, HEAD_D=d, NUM_STAGES=stages, CAUSAL=causal,
             CONSUMER_REGS=regs, num_warps=4,
             GROUP=fwd_hopper.causal_group(n_ntiles, SINGLE_UPTO,
                                           "FLASHTILE_GLUON_BWD256_GROUP") if causal else 1),
        fwd_hopper.part_descriptor, "dkdv", f"gluon d256 {block_n}x{block_m}/{stages}s")
