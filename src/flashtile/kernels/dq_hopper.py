"""Hopper dQ kernel in Gluon: the backward's other half, with the dK/dV kernel's structure.

Computes dQ (like q) from q, k, v ``(b, s, h, d)``, ``dout``, LSE and ``D = rowsum(dO * O)`` (the
preprocess kernel's rows) in the backward's second pass: :mod:`.bwd_hopper`'s schedule with
queries and keys swapped. Cover: :mod:`.bwd_hopper`'s (dense fp16/bf16, d in {64, 96, 128},
causal only with sq = sk, foldable q/k/v/dout, lengths that are multiples of the tiles), two-pass
dQ, no bias gradient. ``FLASHTILE_GLUON_DQ`` unset or ``auto`` runs the head dims of
:data:`AHEAD` (d=96, which the tile-level dQ kernel pads to 128; d=64/128 add dQ in the dK/dV
pass by default), ``1`` every covered call, ``0`` none; the rest runs :mod:`.bwd`'s dQ kernel.

Notation:

- one program: ``2 * BLOCK_M`` query rows of one (batch, query head), causal heaviest first
  (:func:`.fwd_hopper._query_block`); ``BLOCK_M`` rows per consumer (64), ``BLOCK_N`` keys per
  K/V tile (128), ``NUM_STAGES``, ``CONSUMER_REGS`` (:data:`_CONFIGS`); ``HEAD_D``, ``HEAD_D2``
  (:func:`.fwd_hopper.head_parts`); ``CAUSAL``;
- the loader (one warp, 24 registers) is the forward's (:func:`.fwd_hopper._load_kv`: K and V
  land on ``k_ready``, ``v_ready``; a slot is refilled once both consumers arrived on ``empty``);
  two consumers (:func:`_dq_consume`, up to 240 registers) keep their Q, dO and dS tiles in shared
  memory and both read every slot;
- ``S = Q K^T``, ``dP = dO V^T``, ``P = exp2(S * qk_scale - LSE * log2e)``, ``dS = P (dP - D)``,
  ``dQ += dS K``; dQ scaled once at the end and stored by TMA through Q's tile.

Schedule (a consumer): S_0, dP_0 issued and waited for before dQ's zeros exist; per tile j one
wait for S_j, dP_j and dQ, slot j-1 freed, dS_j into the shared dS tile, ``dQ += dS_j K_j``
issued, then S_{j+1} and dP_{j+1}; the last tile peeled. Causal: a consumer masks the tiles that
reach past its first row and releases those past its last row (the other consumer's diagonal)
unread, each after it has landed so that the release counts towards its own lap.

- One wait per tile with the next S and dP issued right after dQ: ptxas serialises every wgmma of
  a stage in which ordinary instructions touch an accumulator still in flight.
- dS goes through shared memory: as a register A operand (the dK/dV kernel's way) ptxas
  serialised every wgmma (C7512 at 128 keys; C7511 at 64 or 32 keys, dS in registers or shared
  memory); with dS in shared memory and 128 keys it serialises none, at every head dim and mask.
- d=96: 64 + 32 columns as in the forward, each part with its own tiles and descriptors; S and dP
  chain two wgmma each, ``dQ += dS K_1`` and ``dQ_2 += dS K_2`` read the same dS tile, dQ leaves
  per part through Q's tiles. ``HEAD_D2`` = 0: the same PTX as before (debug lines stripped).

Measured (H200, bf16, 1k/4k/16k):

- d=64/128: correct, no net gain over the tile-level dQ kernel (+2-8% at most 4k/16k points,
  behind at several 1k, equal geomean; session 10): opt-in there;
- d=96: forward+backward kernel time 0.91-0.95x of the tile-level dQ kernel's beside the 32-query
  dK/dV kernel, 0.83-0.94x beside the 64-query one (session 21): the default; 3 slots 0.93-0.97x
  where 2 took 0.97-1.01x (one round);
- offline (the d=64/128 configs chosen so, no GPU sweep): 128 keys compile with 0 B of spills and
  one wait per tile (d=96, 3 slots: 8 waits for 112 HGMMA, 229,848 B of shared memory); 64 and
  32 keys serialise every wgmma (C7511).

Details, commands and raw data: docs/perf.md.
"""
from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_init, warpgroup_mma_wait)

from . import fwd_hopper, plans
from .common import gluon_switch, gluon_switch_on

# (head dim) -> (rows per consumer, keys per tile, ring slots, consumer registers).
# Chosen offline by ptxas verdicts only (scripts/inspect_kernels.py --gluon; no GPU sweep yet):
# 128 keys per tile is the only width at which ptxas keeps the wgmmas asynchronous (64 and 32
# keys: C7511 at d = 64 and 128 over the 2-4 slots and 160-248 registers tried). Per consumer
# the registers then hold dQ (32 | 64 per thread at d = 64 | 128), S and dP (64 each): no
# spills. Shared memory: the Q, dO (2 x 2 x BLOCK_M x d) and dS (2 x 64 x 128) tiles plus the
# (K, V) ring; at d = 128 two slots already take 224 KB of the 227 KB, so the loader runs one
# tile ahead (three slots: 288 KB); at d = 64 four slots take 192 KB (two and three also
# compile clean). d = 96 (split 64 + 32, causal or not): dQ 48 registers per thread (32 + 16),
# S and dP 64 each; 128 keys x 3 slots: 0 B of spills, 8 waits for 112 HGMMA, 229,848 B of
# shared memory (Q, dO 48 KB, dS 32 KB, three (K, V) slots 144 KB), so the loader runs two
# tiles ahead at no cost in occupancy (one CTA per SM either way); two slots compile the same
# (180,648 B); 64 keys: C7511 (every wgmma serialised) at 2-4 slots. On the H200 (session 21,
# one round) 2 slots took 0.97-1.01x the tile-level dQ's kernel time where 3 took 0.93-0.97x.
_CONFIGS = {64: (64, 128, 4, 240), 96: (64, 128, 3, 240), 128: (64, 128, 2, 240)}

# Head dims where it runs by default (``FLASHTILE_GLUON_DQ`` unset or ``auto``): d=96, where the
# tile-level dQ kernel pads the head dim to 128 (session 21: forward+backward kernels 0.83-0.94x
# with it); d=64/128 add dQ in the dK/dV kernel by default (one pass).
AHEAD = frozenset({96})


@gluon.jit
def _issue_dq(s, dp, dq, rows, j, n_unmasked, lse2, d_row, qk_scale, ds_smem, k_smem,
              BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    """dS_j = P_j (dP_j - D) into ``ds_smem``, then issue dQ += dS_j K_j. Tiles from
    ``n_unmasked`` on reach past the first row and get the causal mask (key <= query)."""
    p = gl.exp2(s * qk_scale - lse2[:, None])
    if CAUSAL:
        if j >= n_unmasked:
            cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s.type.layout))
            p = gl.where(cols[None, :] <= rows[:, None], p, 0.0)
    ds_smem.store((p * (dp - d_row[:, None])).to(ds_smem.dtype))
    fence_async_shared()
    return warpgroup_mma(ds_smem, k_smem.index(j % NUM_STAGES), dq, is_async=True)


@gluon.jit
def _scores_and_dp(q_smem, do_smem, k_smem, v_smem, k_ready, v_ready, s_zero, j,
                   NUM_STAGES: gl.constexpr, q_smem2=None, do_smem2=None, k_smem2=None,
                   v_smem2=None):
    """Issue S_j = Q K_j^T and dP_j = dO V_j^T, each once its tile has landed; where the head
    dim is split (``q_smem2`` not None: d=96) each sums both parts' products, two wgmma
    chained through the accumulator (the second parts land on the first's barriers)."""
    slot = j % NUM_STAGES
    phase = (j // NUM_STAGES) & 1
    mbarrier.wait(k_ready.index(slot), phase)
    s = warpgroup_mma(q_smem, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False,
                      is_async=True)
    if q_smem2 is not None:
        s = warpgroup_mma(q_smem2, k_smem2.index(slot).permute((1, 0)), s, is_async=True)
    mbarrier.wait(v_ready.index(slot), phase)
    dp = warpgroup_mma(do_smem, v_smem.index(slot).permute((1, 0)), s_zero, use_acc=False,
                       is_async=True)
    if q_smem2 is not None:
        dp = warpgroup_mma(do_smem2, v_smem2.index(slot).permute((1, 0)), dp, is_async=True)
    return s, dp


@gluon.jit
def _dq_consume(q_desc, do_desc, dq_desc, q_smem, do_smem, ds_smem, q_bar, k_smem, v_smem,
                k_ready, v_ready, empty, LSE, DSUM, lse_base, d_base, q_row0, q_col, first_row,
                n_tiles, qk_scale, sm_scale, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                q_desc2, do_desc2, dq_desc2, q_smem2, do_smem2, k_smem2, v_smem2,
                HEAD_D2: gl.constexpr):
    """Consumer partition (one warpgroup): dQ of BLOCK_M query rows starting at sequence row
    ``first_row``, over the loader's n_tiles (K, V) tiles (its own Q, dO and dS tiles in shared
    memory); writes it by TMA.

    ``HEAD_D2`` > 0 (d=96: 64 + 32, :func:`.fwd_hopper.head_parts`): the head dim's columns
    from HEAD_D on are a second part with tiles of their own (``q_smem2``, ``do_smem2``, the
    rings ``k_smem2``, ``v_smem2``) and descriptors (``*_desc2``); S and dP each sum both
    parts' products, and dQ is two accumulators, ``dq`` (HEAD_D columns, ``dS K``) and
    ``dq2`` (HEAD_D2, ``dS K_2``), from the same shared dS tile, written per part."""
    s_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_N, HEAD_D)[0]
    g_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_N, HEAD_D)[1]
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    dtype: gl.constexpr = q_desc.dtype

    if HEAD_D2 > 0:
        g2_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_N, HEAD_D2)[1]
        mbarrier.expect(q_bar, q_desc.block_type.nbytes + do_desc.block_type.nbytes
                        + q_desc2.block_type.nbytes + do_desc2.block_type.nbytes)
    else:
        mbarrier.expect(q_bar, q_desc.block_type.nbytes + do_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row0, q_col], q_bar, q_smem)
    tma.async_copy_global_to_shared(do_desc, [q_row0, q_col], q_bar, do_smem)
    if HEAD_D2 > 0:
        tma.async_copy_global_to_shared(q_desc2, [q_row0, q_col + HEAD_D], q_bar, q_smem2)
        tma.async_copy_global_to_shared(do_desc2, [q_row0, q_col + HEAD_D], q_bar, do_smem2)
    rows = first_row + gl.arange(0, BLOCK_M, layout=row_layout)
    lse2 = gl.load(LSE + lse_base + rows) * 1.4426950408889634
    d_row = gl.load(DSUM + d_base + rows)
    if CAUSAL:   # keys up to this consumer's last row; tiles reaching past its first are masked
        n_mine = gl.cdiv(first_row + BLOCK_M, BLOCK_N)
        n_unmasked = first_row // BLOCK_N
    else:
        n_mine = n_tiles
        n_unmasked = n_tiles
    mbarrier.wait(q_bar, 0)

    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    s, dp = _scores_and_dp(q_smem, do_smem, k_smem, v_smem, k_ready, v_ready, s_zero, 0,
                           NUM_STAGES, q_smem2, do_smem2, k_smem2, v_smem2)
    # Tile 0's products complete before dQ's zeros exist (see fwd_hopper: the compiler would
    # otherwise place the zeros mid-flight and ptxas serialise every wgmma).
    s, dp = warpgroup_mma_wait(0, deps=(s, dp))
    s, dp = warpgroup_mma_init(s), warpgroup_mma_init(dp)
    dq = warpgroup_mma_init(gl.zeros([BLOCK_M, HEAD_D], gl.float32, g_layout))
    if HEAD_D2 > 0:
        dq2 = warpgroup_mma_init(gl.zeros([BLOCK_M, HEAD_D2], gl.float32, g2_layout))
    else:           # (no second part)
        dq2 = None
    for j in range(n_mine - 1):         # the last tile has no next S: peeled below
        if HEAD_D2 > 0:
            s, dp, dq, dq2 = warpgroup_mma_wait(0, deps=(s, dp, dq, dq2))
        else:
            s, dp, dq = warpgroup_mma_wait(0, deps=(s, dp, dq))
        if j > 0:   # tile j-1's K and V are read: hand its slot back to the loader
            mbarrier.arrive(empty.index((j - 1) % NUM_STAGES), count=1)
        dq = _issue_dq(s, dp, dq, rows, j, n_unmasked, lse2, d_row, qk_scale, ds_smem, k_smem,
                       BLOCK_N, NUM_STAGES, CAUSAL)
        if HEAD_D2 > 0:     # (the same dS tile, K's second part)
            dq2 = warpgroup_mma(ds_smem, k_smem2.index(j % NUM_STAGES), dq2, is_async=True)
        s, dp = _scores_and_dp(q_smem, do_smem, k_smem, v_smem, k_ready, v_ready, s_zero, j + 1,
                               NUM_STAGES, q_smem2, do_smem2, k_smem2, v_smem2)
    j = n_mine - 1
    if HEAD_D2 > 0:
        s, dp, dq, dq2 = warpgroup_mma_wait(0, deps=(s, dp, dq, dq2))
    else:
        s, dp, dq = warpgroup_mma_wait(0, deps=(s, dp, dq))
    if j > 0:
        mbarrier.arrive(empty.index((j - 1) % NUM_STAGES), count=1)
    dq = _issue_dq(s, dp, dq, rows, j, n_unmasked, lse2, d_row, qk_scale, ds_smem, k_smem,
                   BLOCK_N, NUM_STAGES, CAUSAL)
    if HEAD_D2 > 0:
        dq2 = warpgroup_mma(ds_smem, k_smem2.index(j % NUM_STAGES), dq2, is_async=True)
        dq, dq2 = warpgroup_mma_wait(0, deps=(dq, dq2))
    else:
        dq = warpgroup_mma_wait(0, deps=(dq,))
    mbarrier.arrive(empty.index(j % NUM_STAGES), count=1)
    # Causal: the tiles past this consumer's rows (the other one's diagonal) are released
    # unread, each after it has landed, so that every release counts towards its own lap.
    for t in range(n_mine, n_tiles):
        slot = t % NUM_STAGES
        mbarrier.wait(v_ready.index(slot), (t // NUM_STAGES) & 1)
        mbarrier.arrive(empty.index(slot), count=1)

    # Q is no longer read: its tile stages dQ for the TMA store (each part through its own).
    q_smem.store((dq * sm_scale).to(dtype))
    if HEAD_D2 > 0:
        q_smem2.store((dq2 * sm_scale).to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dq_desc, [q_row0, q_col], q_smem)
    if HEAD_D2 > 0:
        tma.async_copy_shared_to_global(dq_desc2, [q_row0, q_col + HEAD_D], q_smem2)
    tma.store_wait(0)


@gluon.jit
def _dq_hopper_kernel(q_desc, k_desc, v_desc, do_desc, dq_desc, q_desc2, k_desc2, v_desc2,
                      do_desc2, dq_desc2, LSE, DSUM, stride_lse_b, stride_lse_h, stride_d_b,
                      stride_d_h, nheads, group, seqlen_q, seqlen_k, n_mtiles, qk_scale,
                      sm_scale, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                      HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                      CONSUMER_REGS: gl.constexpr, HEAD_D2: gl.constexpr = 0):
    # One CTA: 2 * BLOCK_M query rows of one (batch, query head); causal: last rows first.
    # HEAD_D2 > 0: the head dim is split (HEAD_D + HEAD_D2 columns; the *_desc2 descriptors
    # read and write the second part), else the *_desc2 are None.
    m0, off_b, off_h, q_row0, q_col, kv_row0, kv_col, n_tiles, _ = fwd_hopper._query_block(
        n_mtiles, nheads, group, seqlen_q, seqlen_k, 2 * BLOCK_M, BLOCK_N, HEAD_D + HEAD_D2,
        CAUSAL)
    lse_base = off_b * stride_lse_b + off_h * stride_lse_h
    d_base = off_b * stride_d_b + off_h * stride_d_h

    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M, HEAD_D], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M, HEAD_D], do_desc.layout)
    ds_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M, BLOCK_N],
                                        fwd_hopper._p_layout(BLOCK_M, BLOCK_N, dtype))
    k_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_D], v_desc.layout)
    if HEAD_D2 > 0:     # the second part's tiles (dQ leaves through Q's)
        q_smem2 = gl.allocate_shared_memory(dtype, [2, BLOCK_M, HEAD_D2], q_desc2.layout)
        do_smem2 = gl.allocate_shared_memory(dtype, [2, BLOCK_M, HEAD_D2], do_desc2.layout)
        k_smem2 = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_D2],
                                            k_desc2.layout)
        v_smem2 = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_D2],
                                            v_desc2.layout)
        q0_smem2 = q_smem2.index(0)
        q1_smem2 = q_smem2.index(1)
        do0_smem2 = do_smem2.index(0)
        do1_smem2 = do_smem2.index(1)
        q2_desc, k2_desc, v2_desc, do2_desc, dq2_desc = (q_desc2, k_desc2, v_desc2, do_desc2,
                                                         dq_desc2)
    else:   # (constexpr Nones: warp_specialize's argument tuples take no bare None)
        k_smem2: gl.constexpr = None
        v_smem2: gl.constexpr = None
        q0_smem2: gl.constexpr = None
        q1_smem2: gl.constexpr = None
        do0_smem2: gl.constexpr = None
        do1_smem2: gl.constexpr = None
        q2_desc: gl.constexpr = None
        k2_desc: gl.constexpr = None
        v2_desc: gl.constexpr = None
        do2_desc: gl.constexpr = None
        dq2_desc: gl.constexpr = None
    q_bar, k_ready, v_ready, empty = fwd_hopper._kv_ring_barriers(NUM_STAGES)

    gl.warp_specialize([
        (_dq_consume, (q_desc, do_desc, dq_desc, q_smem.index(0), do_smem.index(0),
                       ds_smem.index(0), q_bar.index(0), k_smem, v_smem, k_ready, v_ready,
                       empty, LSE, DSUM, lse_base, d_base, q_row0, q_col, m0, n_tiles, qk_scale,
                       sm_scale, BLOCK_M, BLOCK_N, HEAD_D, NUM_STAGES, CAUSAL, q2_desc,
                       do2_desc, dq2_desc, q0_smem2, do0_smem2, k_smem2, v_smem2, HEAD_D2)),
        (_dq_consume, (q_desc, do_desc, dq_desc, q_smem.index(1), do_smem.index(1),
                       ds_smem.index(1), q_bar.index(1), k_smem, v_smem, k_ready, v_ready,
                       empty, LSE, DSUM, lse_base, d_base, q_row0 + BLOCK_M, q_col,
                       m0 + BLOCK_M, n_tiles, qk_scale, sm_scale, BLOCK_M, BLOCK_N, HEAD_D,
                       NUM_STAGES, CAUSAL, q2_desc, do2_desc, dq2_desc, q1_smem2, do1_smem2,
                       k_smem2, v_smem2, HEAD_D2)),
        (fwd_hopper._load_kv, (k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, empty,
                               kv_row0, kv_col, n_tiles, BLOCK_N, NUM_STAGES, k2_desc, v2_desc,
                               k_smem2, v_smem2)),
    ], [4, 1], [CONSUMER_REGS, 24])


def config(d: int) -> tuple[int, int, int, int]:
    """(rows per consumer, keys per tile, ring slots, consumer registers) for head dim d;
    ``FLASHTILE_GLUON_DQ_CONFIG=rows,keys,slots,regs`` overrides it (for sweeps)."""
    return fwd_hopper.env_config("dq_hopper", _CONFIGS, d)


def enabled() -> bool:
    """Switched on: ``FLASHTILE_GLUON_DQ`` unset or ``auto`` (the head dims of :data:`AHEAD`)
    or ``1`` (every covered call); ``0`` turns it off."""
    return gluon_switch_on("dq_hopper")


def supports(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             params) -> bool:
    """True when this kernel can compute the call's dQ (see the module docstring)."""
    if not (enabled() and fwd_hopper.covers(q, k, v, params, _CONFIGS)):
        return False
    if gluon_switch("dq_hopper") == "auto" and q.shape[3] not in AHEAD:
        return False
    rows, keys = config(q.shape[3])[:2]
    return fwd_hopper.gradient_tiles_fit(dout, q, k, 2 * rows, keys)


def dq(q, k, v, dout, lse, dsum, dq_out, params, record=None) -> None:
    """dQ into ``dq_out`` (shaped and typed like q, foldable) from q, k, v ``(b, s, h, d)``,
    ``dout`` like q, and the float32 ``(b, hq, sq)`` rows ``lse`` (natural log) and ``dsum``
    (``rowsum(dO * O)``). The caller has checked :func:`supports`; ``record`` as in
    :func:`.bwd_hopper.dkdv`."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    lse, dsum = lse.contiguous(), dsum.contiguous()     # (the kernel steps along sq by 1)
    block_m, block_n, stages, regs = config(d)
    n_mtiles = sq // (2 * block_m)
    first, second = fwd_hopper.head_parts(d)   # (d=96: 64 + 32 columns, else d + 0)
    # q, k, v, dout, dq_out in tiles of the head dim's first part, then the second part's
    # where the head dim is split (the kernel's *_desc2 descriptors; None where it is whole)
    operands = ((q, block_m), (k, block_n), (v, block_n), (dout, block_m), (dq_out, block_m))
    tiles = tuple((t, (rows, cols)) for cols in (first, second) if cols
                  for t, rows in operands)
    plans.gluon_launch(
        record, _dq_hopper_kernel, (n_mtiles * b * hq,), tiles,
        ((None,) * (10 - len(tiles))
         + (lse, dsum, lse.stride(0), lse.stride(1), dsum.stride(0), dsum.stride(1), hq,
            hq // hkv, sq, sk, n_mtiles, params.softmax_scale * fwd_hopper.LOG2E,
            params.softmax_scale)),
        dict(BLOCK_M=block_m, BLOCK_N=block_n, HEAD_D=first, HEAD_D2=second,
             NUM_STAGES=stages, CAUSAL=fwd_hopper.causal(params), CONSUMER_REGS=regs,
             num_warps=4),
        fwd_hopper.part_descriptor, "dq", f"gluon {2 * block_m}x{block_n}/{stages}s")
