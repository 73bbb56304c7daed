"""Hopper dQ kernel at head dim 256, written in Gluon: the two consumers split dQ's head dim.

Computes dQ (like q) from q, k, v ``(b, s, h, 256)``, ``dout``, LSE and D in the backward's
second pass: :mod:`.bwd256_hopper`'s design transposed. A consumer of :mod:`.dq_hopper` owns its
rows and the whole head dim, and at d=256 its dQ (64 x 256 fp32) alone would take 128 registers
a thread beside S and dP; here both consumers take the same query rows and split the work.
Cover: :mod:`.bwd256_hopper`'s (:func:`.fwd_hopper.covers` at d=256,
:func:`.fwd_hopper.gradient_tiles_fit`), dQ in two passes. On by default on sm_90
(``FLASHTILE_GLUON_DQ256=0``: the tile-level dQ kernel of :mod:`.bwd`, 128x32 / 8 warps / 2
stages at d=256). A module of its own: switches, config overrides and plan keys are per module
(:data:`.common.GLUON_SWITCHES`), and the backward picks dQ modules by their ``supports``, ``dq``.

Notation:

- work item: ``BLOCK_M`` = 64 query rows of one (batch, query head), a program each; causal,
  heaviest first in chunks of ``GROUP`` tiles per head (:func:`.fwd_hopper.causal_group`: 8, or
  1 up to :data:`SINGLE_UPTO`; ``FLASHTILE_GLUON_DQ256_GROUP`` forces it), key tiles up to the
  item's last row (:func:`.fwd_hopper._work_block`; GQA: a query head reads its KV head's K, V);
- ``BLOCK_N`` keys per K/V tile, ``NUM_STAGES`` ring slots, ``CONSUMER_REGS`` (:data:`_CONFIGS`);
  ``HEAD_D`` = 256, ``HALF_D`` = 128 (a consumer's columns of dQ); ``CAUSAL``;
- ``S = Q K^T``, ``P = exp2(S * qk_scale - LSE * log2e)``, ``dP = dO V^T``, ``dS = P (dP - D)``
  with ``D = rowsum(dO * O)`` (the preprocess kernel's rows), ``dQ = scale * dS K``;
- the loader (:func:`_load`, one warp, 24 registers) loads Q and dO once (``q_bar``) and streams
  (K, V) tiles through the ring (:func:`.fwd_hopper._load_kv`; both consumers release a slot);
  consumer 0 (:func:`_p_consume`): S, P and dQ's column half 0; consumer 1 (:func:`_ds_consume`):
  dP, dS and half 1;
- two shared P and two dS tiles (tile j in buffer j % 2) with ``*_ready`` and ``*_free`` barriers;
  shared memory: Q + dO ``2 * BLOCK_M * 512`` B, a ring slot ``2 * BLOCK_N * 512`` B, the P/dS
  tiles ``4 * BLOCK_M * BLOCK_N * 2`` B (224 KB at the default 64 rows x 64 keys x 2 slots).

Schedule per K/V tile j:

- consumer 0 (:func:`_p_tile`): P_j (causal mask on the tiles that reach past the item's first
  row) into its tile; issue S_{j+1}, which runs while consumer 1 computes dS_j; once dS_j has
  landed, ``dQ_0 += dS_j K_j[:, :128]``; the next P is computed while dQ_0 runs (S_{j+1} waited
  for before the back edge, as in :mod:`.bwd256_hopper`). With two slots K_{j+1} loads only once
  tile j-1's dQ products are done, so S_{j+1} may wait for it;
- consumer 1 (:func:`_ds_tile`): P_j read back (its tile freed at once), dS_j into its tile
  (freed once consumer 0's product that reads it is done), ``dQ_1 += dS_j K_j[:, 128:]``, then
  dP_{j+1}, so dQ_1 computes while it waits for V_{j+1}; both waited for before the back edge.
  Both read dS from its shared tile: as a register A operand it made ptxas serialise the wgmmas
  of :mod:`.dq_hopper` and :mod:`.bwd256_hopper`;
- epilogue: consumer h stages ``scale * dQ_h`` in column half h of a tile only it reads (consumer
  0: Q, once its last S is done; consumer 1: dO, once its last dP is) and stores it by TMA
  (:func:`.bwd256_hopper._store_half`).

Measured (H200, bf16, 16k tokens, forward+backward, one round):

- against the tile-level dQ kernel: +8% / +5% unmasked at 4k / 16k, +10% / +4% causal (session 20);
- 32 keys x 4 slots (no wait for K, but m64n32 S and dP): +2% to +6% over the tile-level dQ,
  behind the default at all four points (session 20);
- offline: every 64-row config tried, 0 B of spills and no wgmma serialised; 128 rows x 32 keys
  spill 112-120 B (dQ's half alone is then 128 registers a thread), so rows are 64;
- rejected (offline): consumer 1's dQ_1 and next dP in flight across the back edge (C7511, every
  wgmma serialised, even with every wgmma waited for at once).

Details, commands and raw data: docs/perf.md.
"""
from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_init, warpgroup_mma_wait)

from . import bwd256_hopper, fwd_hopper, plans
from .common import gluon_switch_on

# (head dim) -> (query rows per item, keys per tile, ring slots, consumer registers).
# Offline (sm_90a, scripts/inspect_kernels.py --gluon --d 256, bf16 and fp16, causal or not;
# no GPU measurement yet) every 64-row config tried compiles with 0 B of spills and 14 wgmma
# waits (none serialised): 64 keys x 2 slots (229.8 KB of shared memory, 80 HGMMA, the
# busiest partition up to register 149 of 240), 32 keys x 4 / 3 / 2 slots (213.5 / 180.7 /
# 147.9 KB, 72 HGMMA), and at 232 registers. 128 rows x 32 keys x 2 slots (229.8 KB) spills
# 112-120 B (dQ's half alone is then 128 registers per thread), so rows are 64.
# The default follows the brief and bwd256's measurement (its 64-query x 2-slot ring beat
# 32 x 4, where K's part is Q's): with two slots K_{j+1} loads only once tile j-1's dQ
# products are done, so S_{j+1} may wait for it each tile; 32 keys x 3/4 slots do not, but
# run S and dP as m64n32 wgmmas. On the H200 (session 20, one round) 32 keys x 4 slots was
# behind the default at all four points (4k/16k, causal or not: 2-6% less over the
# tile-level dQ pass than the default's 4-10%).
# Tried and rejected offline: consumer 1 with its dQ_1 and next dP in flight across the
# loop's back edge (waited for at the top of the next tile: C7511, every wgmma serialised,
# even with every wgmma waited for at once).
_CONFIGS = {256: (64, 64, 2, 240)}

# Work tiles per head up to which the causal order runs in chunks of 1
# (:func:`.fwd_hopper.causal_group`): the forward's d=256 rule until session 41, when the
# forward took chunks of 8 from 2 tiles; here chunks of 8 measured level at causal 512
# (session 41, H100, fwd+bwd kernel sums 570.0 / 571.4 us against 571.5 / 570.8).
SINGLE_UPTO = 4


@gluon.jit
def _p_tile(s, dq, rows, lse2, j, n_unmasked, q_smem, k_smem, pt_smem, ds_smem, k_ready,
            empty, pt_ready, pt_free, ds_ready, ds_free, qk_scale, s_zero,
            BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
            NEXT: gl.constexpr):
    """Consumer 0, K/V tile j: with ``S_j`` complete (and ``dQ_0`` of tile j-1 in flight),
    P_j into its shared tile; then, tile j-1's products done (its slot and dS tile released),
    the next tile's ``S`` (``NEXT``) and, once consumer 1's dS_j has landed,
    ``dQ_0 += dS_j K_j[:, :128]``."""
    HALF_D: gl.constexpr = q_smem.shape[1] // 2
    b = j % 2
    s, dq = warpgroup_mma_wait(1, deps=(s, dq))     # (S_j done already: as tensors)
    p = gl.exp2(s * qk_scale - lse2[:, None])
    if CAUSAL:                  # tiles from n_unmasked on reach past the first row
        if j >= n_unmasked:
            cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s.type.layout))
            p = gl.where(cols[None, :] <= rows[:, None], p, 0.0)
    mbarrier.wait(pt_free.index(b), ((j // 2) & 1) ^ 1)     # (P_{j-2} read)
    pt_smem.index(b).store(p.to(pt_smem.dtype))
    gl.thread_barrier()         # (every thread's part stored before the one arrival)
    mbarrier.arrive(pt_ready.index(b), count=1)
    dq = warpgroup_mma_wait(0, deps=(dq,))
    if j > 0:                   # tile j-1's K and dS are read as far as this one goes
        mbarrier.arrive(empty.index((j - 1) % NUM_STAGES), count=1)
        mbarrier.arrive(ds_free.index((j - 1) % 2), count=1)
    if NEXT:
        s = fwd_hopper._issue_s(q_smem, k_smem, k_ready, s_zero, j + 1, NUM_STAGES)
    mbarrier.wait(ds_ready.index(b), (j // 2) & 1)
    dq = warpgroup_mma(ds_smem.index(b),
                       k_smem.index(j % NUM_STAGES).slice(0, HALF_D, dim=1), dq, is_async=True)
    if NEXT:
        s, dq = warpgroup_mma_wait(1, deps=(s, dq))
        s = warpgroup_mma_init(s)
        dq = warpgroup_mma_init(dq)
    return s, dq


@gluon.jit
def _p_consume(q_smem, k_smem, pt_smem, ds_smem, q_bar, k_ready, empty, pt_ready, pt_free,
               ds_ready, ds_free, dq_desc, LSE, lse_base, q_row0, q_col, m0, n_tiles,
               n_unmasked, qk_scale, sm_scale, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
               HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    """Consumer 0 (the default partition): ``S``, ``P``, and column half 0 of dQ."""
    HALF_D: gl.constexpr = HEAD_D // 2
    s_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_N, HALF_D)[0]
    g_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_N, HALF_D)[1]
    rows = m0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    lse2 = gl.load(LSE + lse_base + rows) * 1.4426950408889634
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    mbarrier.wait(q_bar, 0)
    s = fwd_hopper._issue_s(q_smem, k_smem, k_ready, s_zero, 0, NUM_STAGES)
    # S_0 completes before dQ's zeros exist (see fwd_hopper: the compiler would otherwise
    # place the zeros mid-flight and ptxas serialise every wgmma).
    s = warpgroup_mma_init(warpgroup_mma_wait(0, deps=(s,)))
    dq = warpgroup_mma_init(gl.zeros([BLOCK_M, HALF_D], gl.float32, g_layout))
    for j in range(n_tiles - 1):        # the last tile has no next S: peeled below
        s, dq = _p_tile(s, dq, rows, lse2, j, n_unmasked, q_smem, k_smem, pt_smem, ds_smem,
                        k_ready, empty, pt_ready, pt_free, ds_ready, ds_free, qk_scale, s_zero,
                        BLOCK_N, NUM_STAGES, CAUSAL, True)
    s, dq = _p_tile(s, dq, rows, lse2, n_tiles - 1, n_unmasked, q_smem, k_smem, pt_smem,
                    ds_smem, k_ready, empty, pt_ready, pt_free, ds_ready, ds_free, qk_scale,
                    s_zero, BLOCK_N, NUM_STAGES, CAUSAL, False)
    dq = warpgroup_mma_wait(0, deps=(dq,))
    # (one item per program: the last slot and dS tile need no release; no S reads Q now)
    bwd256_hopper._store_half(dq * sm_scale, None, q_smem, None, dq_desc, None, None, q_row0,
                              q_col, 0)


@gluon.jit
def _ds_tile(dp, dq, d_row, j, do_smem, k_smem, v_smem, pt_smem, ds_smem, k_ready, v_ready,
             empty, pt_ready, pt_free, ds_ready, ds_free, s_zero, NUM_STAGES: gl.constexpr,
             NEXT: gl.constexpr):
    """Consumer 1, K/V tile j: with ``dP_j`` and tile j-1's ``dQ_1`` complete (tile j-1's slot
    released at once), P_j read back once consumer 0 stored it (its tile released), dS_j into
    its shared tile, then ``dQ_1 += dS_j K_j[:, 128:]`` and the next tile's ``dP``
    (``NEXT``), both waited for before the loop's back edge (in flight across it, ptxas
    serialised every wgmma: C7511)."""
    HALF_D: gl.constexpr = do_smem.shape[1] // 2
    b = j % 2
    # (both done already; as tensors. One wait(0) for both here made ptxas serialise every
    # wgmma, C7511; this pair, as consumer 0's, does not)
    dp, dq = warpgroup_mma_wait(1, deps=(dp, dq))
    dq = warpgroup_mma_wait(0, deps=(dq,))
    if j > 0:                   # tile j-1's K and V are read
        mbarrier.arrive(empty.index((j - 1) % NUM_STAGES), count=1)
    mbarrier.wait(pt_ready.index(b), (j // 2) & 1)
    p = pt_smem.index(b).load(dp.type.layout).to(gl.float32)
    ds = (p * (dp - d_row[:, None])).to(ds_smem.dtype)
    mbarrier.wait(ds_free.index(b), ((j // 2) & 1) ^ 1)     # (dS_{j-2} read)
    ds_smem.index(b).store(ds)
    fence_async_shared()
    gl.thread_barrier()         # (every thread's P read and dS stored before the arrivals)
    mbarrier.arrive(ds_ready.index(b), count=1)
    mbarrier.arrive(pt_free.index(b), count=1)
    slot = j % NUM_STAGES       # (K_j landed: consumer 0 saw it; this partition waits too)
    mbarrier.wait(k_ready.index(slot), (j // NUM_STAGES) & 1)
    dq = warpgroup_mma(ds_smem.index(b), k_smem.index(slot).slice(HALF_D, HALF_D, dim=1), dq,
                       is_async=True)
    if NEXT:                    # (dQ_1 computes while this partition waits for V_{j+1})
        dp = fwd_hopper._issue_s(do_smem, v_smem, v_ready, s_zero, j + 1, NUM_STAGES)
        dp, dq = warpgroup_mma_wait(0, deps=(dp, dq))
        dp = warpgroup_mma_init(dp)
        dq = warpgroup_mma_init(dq)
    return dp, dq


@gluon.jit
def _ds_consume(do_smem, k_smem, v_smem, pt_smem, ds_smem, q_bar, k_ready, v_ready, empty,
                pt_ready, pt_free, ds_ready, ds_free, dq_desc, DSUM, d_base, q_row0, q_col, m0,
                n_tiles, sm_scale, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr):
    """Consumer 1 (a four-warp worker): ``dP``, ``dS``, and column half 1 of dQ."""
    HALF_D: gl.constexpr = HEAD_D // 2
    s_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_N, HALF_D)[0]
    g_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_N, HALF_D)[1]
    rows = m0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    d_row = gl.load(DSUM + d_base + rows)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    mbarrier.wait(q_bar, 0)
    # (dP = dO V^T is issued as S = Q K^T is: V's ready barriers in K's place)
    dp = fwd_hopper._issue_s(do_smem, v_smem, v_ready, s_zero, 0, NUM_STAGES)
    dp = warpgroup_mma_init(warpgroup_mma_wait(0, deps=(dp,)))
    dq = warpgroup_mma_init(gl.zeros([BLOCK_M, HALF_D], gl.float32, g_layout))
    for j in range(n_tiles - 1):
        dp, dq = _ds_tile(dp, dq, d_row, j, do_smem, k_smem, v_smem, pt_smem, ds_smem, k_ready,
                          v_ready, empty, pt_ready, pt_free, ds_ready, ds_free, s_zero,
                          NUM_STAGES, True)
    dp, dq = _ds_tile(dp, dq, d_row, n_tiles - 1, do_smem, k_smem, v_smem, pt_smem, ds_smem,
                      k_ready, v_ready, empty, pt_ready, pt_free, ds_ready, ds_free, s_zero,
                      NUM_STAGES, False)
    dq = warpgroup_mma_wait(0, deps=(dq,))
    # (no dP reads dO now: its column half 1 stages this half of dQ)
    bwd256_hopper._store_half(dq * sm_scale, None, do_smem, None, dq_desc, None, None, q_row0,
                              q_col, 1)


@gluon.jit
def _load(q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem, q_bar, k_ready,
          v_ready, empty, q_row0, q_col, kv_row0, kv_col, n_tiles, BLOCK_N: gl.constexpr,
          NUM_STAGES: gl.constexpr):
    """Loader partition: the item's Q and dO tiles (one barrier), then its K/V tiles through
    the ring (:func:`.fwd_hopper._load_kv`)."""
    mbarrier.expect(q_bar, q_desc.block_type.nbytes + do_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row0, q_col], q_bar, q_smem)
    tma.async_copy_global_to_shared(do_desc, [q_row0, q_col], q_bar, do_smem)
    fwd_hopper._load_kv(k_desc, v_desc, k_smem, v_smem, k_ready, v_ready, empty, kv_row0,
                        kv_col, n_tiles, BLOCK_N, NUM_STAGES)


@gluon.jit
def _dq256_kernel(q_desc, k_desc, v_desc, do_desc, dq_desc, LSE, DSUM, stride_lse_b,
                  stride_lse_h, stride_d_b, stride_d_h, nheads, group, seqlen_q, seqlen_k,
                  n_mtiles, qk_scale, sm_scale, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                  HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                  CONSUMER_REGS: gl.constexpr, GROUP: gl.constexpr):
    # One program: BLOCK_M query rows of one (batch, query head); causal: heaviest first.
    m0, off_b, off_h, q_row0, q_col, kv_row0, kv_col, n_tiles, n_unmasked = \
        fwd_hopper._work_block(gl.program_id(0), gl.num_programs(0), n_mtiles, nheads, group,
                               seqlen_q, seqlen_k, BLOCK_M, BLOCK_N, HEAD_D, CAUSAL, GROUP)
    lse_base = off_b * stride_lse_b + off_h * stride_lse_h
    d_base = off_b * stride_d_b + off_h * stride_d_h

    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_D], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_D], do_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_D], v_desc.layout)
    pt_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M, BLOCK_N],
                                        fwd_hopper._p_layout(BLOCK_M, BLOCK_N, dtype))
    ds_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M, BLOCK_N],
                                        fwd_hopper._p_layout(BLOCK_M, BLOCK_N, dtype))
    q_bar = fwd_hopper.barriers(1, 1).index(0)          # Q and dO landed
    k_ready = fwd_hopper.barriers(NUM_STAGES, 1)
    v_ready = fwd_hopper.barriers(NUM_STAGES, 1)
    empty = fwd_hopper.barriers(NUM_STAGES, 2)          # both consumers release a slot
    pt_ready = fwd_hopper.barriers(2, 1)                # consumer 0 stored P
    pt_free = fwd_hopper.barriers(2, 1)                 # consumer 1 read P
    ds_ready = fwd_hopper.barriers(2, 1)                # consumer 1 stored dS
    ds_free = fwd_hopper.barriers(2, 1)                 # consumer 0's read of dS done

    gl.warp_specialize([
        (_p_consume, (q_smem, k_smem, pt_smem, ds_smem, q_bar, k_ready, empty, pt_ready,
                      pt_free, ds_ready, ds_free, dq_desc, LSE, lse_base, q_row0, q_col, m0,
                      n_tiles, n_unmasked, qk_scale, sm_scale, BLOCK_M, BLOCK_N, HEAD_D,
                      NUM_STAGES, CAUSAL)),
        (_ds_consume, (do_smem, k_smem, v_smem, pt_smem, ds_smem, q_bar, k_ready, v_ready,
                       empty, pt_ready, pt_free, ds_ready, ds_free, dq_desc, DSUM, d_base,
                       q_row0, q_col, m0, n_tiles, sm_scale, BLOCK_M, BLOCK_N, HEAD_D,
                       NUM_STAGES)),
        (_load, (q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem, q_bar,
                 k_ready, v_ready, empty, q_row0, q_col, kv_row0, kv_col, n_tiles, BLOCK_N,
                 NUM_STAGES)),
    ], [4, 1], [CONSUMER_REGS, 24])


def config(d: int) -> tuple[int, int, int, int]:
    """(query rows per item, keys per tile, ring slots, consumer registers) for head dim d;
    ``FLASHTILE_GLUON_DQ256_CONFIG=rows,keys,slots,regs`` overrides it (for sweeps). The
    schedule holds K/V tiles j and j+1 at once (2+ slots); 64 rows (one wgmma's: 128
    spill)."""
    rows, keys, stages, regs = fwd_hopper.env_config("dq256_hopper", _CONFIGS, d)
    if rows != 64 or keys not in (32, 64) or stages < 2:
        raise ValueError(f"FLASHTILE_GLUON_DQ256_CONFIG: the d=256 Gluon dQ kernel needs 64 "
                         f"query rows, 32 or 64 keys and at least 2 ring slots, got "
                         f"{rows},{keys},{stages},{regs}")
    return rows, keys, stages, regs


def enabled() -> bool:
    """On unless ``FLASHTILE_GLUON_DQ256=0`` (then the tile-level dQ kernel runs)."""
    return gluon_switch_on("dq256_hopper")


def supports(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             params) -> bool:
    """True when this kernel can compute the call's dQ (see the module docstring)."""
    if not (enabled() and fwd_hopper.covers(q, k, v, params, _CONFIGS)):
        return False
    rows, keys = config(q.shape[3])[:2]
    return fwd_hopper.gradient_tiles_fit(dout, q, k, rows, keys)


def dq(q, k, v, dout, lse, dsum, dq_out, params, record=None) -> None:
    """dQ into ``dq_out`` (shaped and typed like q, foldable) from q, k, v ``(b, s, h, 256)``,
    ``dout`` like q, and the float32 ``(b, hq, sq)`` rows ``lse`` (natural log) and ``dsum``
    (``rowsum(dO * O)``). The caller has checked :func:`supports`; ``record`` as in
    :func:`.bwd256_hopper.dkdv`."""
    b, sq, hq, d = q.shape
    hkv = k.shape[2]
    lse, dsum = lse.contiguous(), dsum.contiguous()     # (the kernel steps along sq by 1)
    block_m, block_n, stages, regs = config(d)
    n_mtiles = sq // block_m
    causal = fwd_hopper.causal(params)
    # (whole rows of the head dim; dQ in a consumer's column halves)
    plans.gluon_launch(
        record, _dq256_kernel, (n_mtiles * b * hq,),
        ((q, (block_m, d)), (k, (block_n, d)), (v, (block_n, d)), (dout, (block_m, d)),
         (dq_out, (block_m, d // 2))),
        (lse, dsum, lse.stride(0), lse.stride(1), dsum.stride(0), dsum.stride(1), hq,
         hq // hkv, sq, k.shape[1], n_mtiles, params.softmax_scale * fwd_hopper.LOG2E,
         params.softmax_scale),
        dict(BLOCK_M=block_m, BLOCK_N=block_n, HEAD_D=d, NUM_STAGES=stages, CAUSAL=causal,
             CONSUMER_REGS=regs, num_warps=4,
             GROUP=fwd_hopper.causal_group(n_mtiles, SINGLE_UPTO,
                                           "FLASHTILE_GLUON_DQ256_GROUP") if causal else 1),
        fwd_hopper.part_descriptor, "dq", f"gluon d256 {block_m}x{block_n}/{stages}s")
