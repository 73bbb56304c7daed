"""Backward kernels: recompute the probabilities tile by tile from Q, K and the saved LSE.

With ``P = exp(S - LSE)`` (never stored), ``D = rowsum(dO * O)``:

    dV = P^T dO      dP = dO V^T      dS = P * (dP - D)      dQ = dS K * scale      dK = dS^T Q * scale

1. ``_bwd_preprocess``: ``D`` for every query row.
2. ``_bwd_dkdv_kernel``: one program per (KV tile, batch, KV head); K and V stay in SRAM while the
   program walks the query tiles that see them, for every query head of its GQA group, so dK/dV of
   a KV head are summed in registers instead of through atomics. It works on ``S^T`` tiles (see
   :func:`_dkdv_tiles`).
3. dQ, one of two ways:

   - *two passes* (always with ``deterministic=True``): ``_bwd_dq_kernel``, one program per
     (query tile, batch, query head), walks the visible K/V tiles like the forward and
     recomputes ``P`` and ``dP``: 7 tile matmuls per visited tile, no atomics, so dQ is
     bitwise reproducible too;
   - *one pass*: the dK/dV program also computes each tile's ``dS K`` and adds it to an fp32
     dQ buffer: 5 matmuls per tile. In this kernel the adds are relaxed per-thread atomics,
     which on the H200 cost more than the recomputation they save (docs/perf.md); the Gluon
     dK/dV kernel on sm_90 adds whole tiles by TMA reductions (:mod:`.bwd_hopper`) and is
     ahead there. So by default (:func:`dq_mode` ``auto``) one pass runs where the Gluon
     kernel covers the call and :func:`.bwd_hopper.one_pass` measured it ahead, two passes
     elsewhere.

   dK and dV never use atomics: bitwise reproducible either way.

Notation as in ``common.py``; ``lse2`` is the LSE in the log2 domain, ``+inf`` for rows that see
no key so that their recomputed ``P`` is exactly 0.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

from ..reference.dense import sum_to_shape

from . import plans
from .common import (LOG2E_K, NO_SPECIALIZE, TunedLaunch, alibi_slope_log2, alloc, band_mask,
                     bias_args, bwd_probs, cdiv, chain_ds, diagonal_args, dot_precision,
                     dropout_args, dropout_bases, dropout_keep, getenv, gluon_kernels,
                     gluon_settings, graph_bench, interpreting, load_tile, mod_args,
                     next_tile_start, padded_headdim, prune_configs, query_tile, row_ranges,
                     score_args, seq_bounds, seq_bucket, sparse_args, strides, tile_ranges,
                     tile_start, varlen_args, varlen_sequence, window_args)


@triton.jit(do_not_specialize=["n"])
def _zero_pair(X, Y, n, BLOCK: tl.constexpr):
    """``X[:n]`` and ``Y[:n]`` set to zeros: the float32 dK/dV accumulators that GQA's query
    heads add into (:func:`.bwd_hopper.adds_dkdv`), zeroed by a launch a plan replays."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    tl.store(X + offs, tl.zeros([BLOCK], X.dtype.element_ty), mask=ok)
    tl.store(Y + offs, tl.zeros([BLOCK], Y.dtype.element_ty), mask=ok)


@triton.jit
def _sum_rows(Parts, Out, n_rows, G: tl.constexpr, D: tl.constexpr, BLOCK_R: tl.constexpr,
              BLOCK_D: tl.constexpr):
    """``Out[r, :D]`` = the float32 sum, rounded once to Out's dtype, of ``Parts[r, j, :D]``
    over ``j < G``, for BLOCK_R rows r of a contiguous ``(n_rows, G, D)`` / ``(n_rows, D)``."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_D)
    ok = (rows < n_rows)[:, None] & (cols < D)[None, :]
    parts = Parts + rows[:, None] * (G * D) + cols[None, :]
    total = tl.zeros([BLOCK_R, BLOCK_D], tl.float32)
    for j in tl.static_range(G):
        total += tl.load(parts + j * D, mask=ok, other=0.0).to(tl.float32)
    tl.store(Out + rows[:, None] * D + cols[None, :], total.to(Out.dtype.element_ty), mask=ok)


@triton.jit(do_not_specialize=["n_rows"])
def _sum_head_groups(DK_PARTS, DV_PARTS, DK, DV, n_rows, G: tl.constexpr, HEAD_D: tl.constexpr,
                     HEAD_DV: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr,
                     BLOCK_DV: tl.constexpr):
    """GQA's dK and dV from the parts written per query head (:func:`.bwd_hopper.dkdv_heads`):
    each ``(batch, key, KV head)`` row of dK ``(b, s, hkv, d)`` is the sum of the G rows of
    ``(b, s, hkv * G, d)`` parts that its query heads wrote (they lie next to each other),
    likewise dV; the grid's axis 1 picks dK (0) or dV (1): one launch for both, recorded in
    the plan (a torch sum per tensor ran at ~2.1 TB/s on the H100, 67 us at GQA 8:1 d=128 and
    16k tokens, session 49)."""
    if tl.program_id(1) == 0:
        _sum_rows(DK_PARTS, DK, n_rows, G, HEAD_D, BLOCK_R, BLOCK_D)
    else:
        _sum_rows(DV_PARTS, DV, n_rows, G, HEAD_DV, BLOCK_R, BLOCK_DV)


@triton.jit(do_not_specialize=["seqlen_q", "head_dv", "nheads", "stride_lse_b", "stride_lse_h",
                               "head_d"])
def _bwd_preprocess(O, DO, Dsum, CU_Q, DQ_ACC, stride_ob, stride_os, stride_oh, stride_dob,
                    stride_dos, stride_doh, stride_lse_b, stride_lse_h, stride_dqb, stride_dqs,
                    stride_dqh, nheads, seqlen_q, head_dv, head_d, COUNT, BLOCK_M: tl.constexpr,
                    HEAD_DV: tl.constexpr, HEAD_D: tl.constexpr, IS_VARLEN: tl.constexpr,
                    ZERO_DQ: tl.constexpr, FLAT: tl.constexpr = False,
                    ZERO_COUNT: tl.constexpr = False):
    """``D = rowsum(dO * O)`` for BLOCK_M rows; with ``ZERO_DQ`` also the same rows of the one
    pass's fp32 dQ accumulator set to zeros (one launch less than a separate fill), and with
    ``ZERO_COUNT`` the int32 at ``COUNT`` (the dK/dV kernel's claimed items,
    :func:`.bwdrows_hopper.dynamic`) by the first program.

    A row is one (query, head). Without ``FLAT`` a program takes BLOCK_M queries of one (batch,
    head) (varlen: of one sequence); with ``FLAT`` (dense only) BLOCK_M consecutive rows of one
    batch entry in memory order, query-major, so that a program reads (and zeroes) one
    contiguous run of a packed ``(b, s, h, d)`` tensor instead of BLOCK_M pieces of one head
    dim each, a head's stride apart."""
    pid = tl.program_id(0)
    if FLAT:
        tl.static_assert(not IS_VARLEN)
        n_blocks = tl.cdiv(seqlen_q * nheads, BLOCK_M)
        off_b = (pid // n_blocks).to(tl.int64)
        r = (pid % n_blocks) * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = r < seqlen_q * nheads
        offs_m = (r // nheads).to(tl.int64)                 # query of each row
        off_h = (r % nheads).to(tl.int64)                   # head of each row
        q_start = 0
    else:
        n_mblocks = tl.cdiv(seqlen_q, BLOCK_M)
        bh = pid // n_mblocks
        start_m = (pid % n_mblocks) * BLOCK_M
        off_b = (bh // nheads).to(tl.int64)
        off_h = (bh % nheads).to(tl.int64)
        q_start, _, seqlen_q, _, _ = seq_bounds(CU_Q, CU_Q, off_b, seqlen_q, seqlen_q, IS_VARLEN,
                                                False)
        if start_m >= seqlen_q:
            return
        offs_m = start_m + tl.arange(0, BLOCK_M)
        row_ok = offs_m < seqlen_q
    offs_dv = tl.arange(0, HEAD_DV)
    mask = row_ok[:, None] & (offs_dv[None, :] < head_dv)
    rows = q_start + offs_m
    o = tl.load(O + (off_b * stride_ob + off_h * stride_oh + rows * stride_os)[:, None]
                + offs_dv[None, :], mask=mask, other=0.0).to(tl.float32)
    do = tl.load(DO + (off_b * stride_dob + off_h * stride_doh + rows * stride_dos)[:, None]
                 + offs_dv[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(Dsum + off_b * stride_lse_b + off_h * stride_lse_h + rows, tl.sum(o * do, 1),
             mask=row_ok)
    if ZERO_DQ:
        offs_d = tl.arange(0, HEAD_D)
        tl.store(DQ_ACC + (off_b * stride_dqb + off_h * stride_dqh + rows * stride_dqs)[:, None]
                 + offs_d[None, :], tl.zeros([BLOCK_M, HEAD_D], tl.float32),
                 mask=row_ok[:, None] & (offs_d[None, :] < head_d))
    if ZERO_COUNT:      # (last: at the start, ptxas rescheduled the fp16 build, 158-163 us
        if pid == 0:     # against 94-98 on the H100, session 53; here 97 us, session 54)
            tl.store(COUNT, 0)


@triton.jit
def _row_stats(LSE_row, D_row, offs_m, seqlen_q):
    """``lse2`` (+inf for rows that see no key) and ``D`` for a tile of query rows."""
    lse = tl.load(LSE_row + offs_m, mask=offs_m < seqlen_q, other=0.0)
    lse2 = tl.where(lse == float("-inf"), float("inf"), lse * LOG2E_K)
    Di = tl.load(D_row + offs_m, mask=offs_m < seqlen_q, other=0.0)
    return lse2, Di


@triton.jit
def _dkdv_tiles(dk, dv, k, v, q_base, do_base, dq_base, LSE_row, D_row, stride_qs, stride_dos,
                stride_dqs, start, stop, idx_ptr, start_n, offs_n, offs_d, offs_dv, head_d,
                head_dv, seqlen_q, seqlen_k, diag_off, window_left, window_right, slope_log2,
                qk_scale,
                softcap_log2, sm_scale, row_base, seed, rng_offset, dropout_p, bias_base,
                dbias_base, stride_bm, stride_bn, stride_dbm, off_b, off_h, sm_args, mm_args,
                BLOCK_M: tl.constexpr, MASKED: tl.constexpr, HAS_LEFT: tl.constexpr,
                HAS_RIGHT: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_ALIBI: tl.constexpr,
                HAS_DROPOUT: tl.constexpr, HAS_BIAS: tl.constexpr, BIAS_BOOL: tl.constexpr,
                HAS_DBIAS: tl.constexpr, SCORE_MOD: tl.constexpr, HAS_SCORE_MOD: tl.constexpr,
                MASK_MOD: tl.constexpr, USE_MASK_MOD: tl.constexpr, ATOMIC_DQ: tl.constexpr,
                EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, INDEXED: tl.constexpr,
                LIST_BLOCK: tl.constexpr, PRECISION: tl.constexpr):
    """Accumulate into ``dk``/``dv`` the query tiles number ``[start, stop)`` (contiguous, or
    the blocks listed at ``idx_ptr``: :func:`tile_start`) of one query head
    (and with ``ATOMIC_DQ`` add each tile's ``dS K`` into the fp32 dQ buffer).

    Works on transposed tiles, ``S^T = K Q^T`` of shape ``(BLOCK_N, BLOCK_M)``: then
    ``dV += P^T dO`` and ``dK += dS^T Q`` take the register tile as the left operand as it is,
    instead of transposing a probability tile through shared memory twice per step."""
    cols = offs_n[:, None]
    for tile in range(start, stop):
        # The list entry is read in the iteration itself here, not one ahead as in the forward
        # and dQ loops: on the H200 the look-ahead made this loop slower (block mask of density
        # 1.0, d=64: 3.53 ms vs 3.32 ms), while it sped the other two up (docs/perf.md).
        start_m = tile_start(tile, stop, idx_ptr, BLOCK_M, LIST_BLOCK, INDEXED)
        offs_m = start_m + tl.arange(0, BLOCK_M)
        rows = offs_m[None, :]
        q = load_tile(q_base, offs_m, stride_qs, offs_d, seqlen_q, head_d, True, EVEN_D)
        do = load_tile(do_base, offs_m, stride_dos, offs_dv, seqlen_q, head_dv, True, EVEN_DV)
        lse2, Di = _row_stats(LSE_row, D_row, offs_m, seqlen_q)
        qk_t = tl.dot(k, tl.trans(q), input_precision=PRECISION)        # (BLOCK_N, BLOCK_M)
        p_t, t, g = bwd_probs(qk_t, lse2[None, :], rows, cols, seqlen_q, seqlen_k, diag_off,
                              window_left, window_right, slope_log2, qk_scale, softcap_log2,
                              bias_base, stride_bm, stride_bn, off_b, off_h, sm_args, mm_args,
                              MASKED, HAS_LEFT, HAS_RIGHT, HAS_SOFTCAP, HAS_ALIBI, HAS_BIAS,
                              BIAS_BOOL, SCORE_MOD, HAS_SCORE_MOD, MASK_MOD, USE_MASK_MOD,
                              True)     # the KV tile itself may overhang the keys
        p_used = p_t
        if HAS_DROPOUT:
            # Regenerate the forward's mask; O = (P * Z / (1 - p)) V, so dV uses the dropped P
            # and dP flows back through the same mask. Drawn in (query, key) order, where a
            # thread holds all 8 positions of a Philox call, then transposed through shared
            # memory: half the calls of drawing the S^T tile directly, where two threads share
            # each call (H200, d=128, s8k: dK/dV 8.37 -> 7.41 ms).
            keep_d = tl.trans(dropout_keep(seed, rng_offset, row_base + start_m // 2, start_n,
                                           seqlen_k, dropout_p, BLOCK_M, offs_n.shape[0]))
            p_used = tl.where(keep_d, p_t * (1.0 / (1.0 - dropout_p)), 0.0)
        dv = tl.dot(p_used.to(do.dtype), do, dv, input_precision=PRECISION)
        dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
        if HAS_DROPOUT:
            # dS = P * (dP * Z / (1 - p) - D) = p_used * dP - P * D: the mask is not needed
            # past the dV product (fewer live registers across the dP product)
            ds_t = p_used * dp_t - p_t * Di[None, :]
        else:
            ds_t = p_t * (dp_t - Di[None, :])
        if HAS_DBIAS:
            # The bias is added to the final score, so its gradient is dS itself; each (row,
            # key) pair of a head is visited exactly once here.
            tl.store(dbias_base + rows * stride_dbm + cols, ds_t,
                     mask=(rows < seqlen_q) & (cols < seqlen_k))
        ds_t = chain_ds(ds_t, t, g, HAS_SCORE_MOD, HAS_SOFTCAP).to(q.dtype)
        dk = tl.dot(ds_t, q, dk, input_precision=PRECISION)
        if ATOMIC_DQ:
            # One pass instead of two: this tile's share of dQ goes straight to an fp32
            # buffer. Relaxed order is enough (only the sum matters); the sum's rounding
            # then depends on arrival order, hence ``deterministic=True`` keeps two passes.
            dq = tl.dot(tl.trans(ds_t), k, input_precision=PRECISION)  # (BLOCK_M, HEAD_D)
            tl.atomic_add(dq_base + offs_m[:, None] * stride_dqs + offs_d[None, :], dq * sm_scale,
                          mask=(offs_m[:, None] < seqlen_q) & (offs_d[None, :] < head_d),
                          sem="relaxed")
    return dk, dv


@triton.jit(do_not_specialize=NO_SPECIALIZE)
def _bwd_dkdv_kernel(Q, K, V, DO, LSE, Dsum, DK, DV, DQ_ACC, SLOPES, BIAS, DBIAS,
                     stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                     stride_vb, stride_vs, stride_vh, stride_dob, stride_dos, stride_doh,
                     stride_dkb, stride_dks, stride_dkh, stride_dvb, stride_dvs, stride_dvh,
                     stride_dqb, stride_dqs, stride_dqh,
                     stride_slope_b, nheads, group, seqlen_q, seqlen_k, head_d, head_dv,
                     seq_bucket, CU_Q, CU_K, SEQ_ORDER, stride_lse_b, stride_lse_h, window_left,
                     window_right,
                     qk_scale, softcap_log2, sm_scale, seed, rng_offset, rng_stride_b, dropout_p,
                     stride_bb, stride_bh, stride_bm, stride_bn, stride_dbb, stride_dbh,
                     stride_dbm, sm_args, mm_args, KV_NUM, KV_IDX, FULL_KV_NUM, FULL_KV_IDX,
                     mask_b, mask_h, mask_nq, mask_nkv,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr,
                     HEAD_DV: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr,
                     BOTTOM_RIGHT: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
                     HAS_ALIBI: tl.constexpr, HAS_DROPOUT: tl.constexpr,
                     IS_VARLEN: tl.constexpr, HAS_BIAS: tl.constexpr,
                     BIAS_BOOL: tl.constexpr, HAS_DBIAS: tl.constexpr,
                     SCORE_MOD: tl.constexpr, HAS_SCORE_MOD: tl.constexpr,
                     MASK_MOD: tl.constexpr, HAS_MASK_MOD: tl.constexpr, SPARSE: tl.constexpr,
                     MASK_BQ: tl.constexpr, MASK_BKV: tl.constexpr, FULL_BOUND: tl.constexpr,
                     ATOMIC_DQ: tl.constexpr, EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr,
                     PRECISION: tl.constexpr):
    # Sparse mode reads the BlockMask's transposed lists: for this key block, the query blocks
    # that see it (KV_NUM/KV_IDX hold q_num_blocks/q_indices here; rows = key blocks).
    pid = tl.program_id(0)
    n_nblocks = tl.cdiv(seqlen_k, BLOCK_N)
    bhkv = pid // n_nblocks
    start_n = (pid % n_nblocks) * BLOCK_N
    nheads_kv = nheads // group
    off_b = varlen_sequence((bhkv // nheads_kv).to(tl.int64), SEQ_ORDER, IS_VARLEN)
    off_hkv = (bhkv % nheads_kv).to(tl.int64)
    q_start, k_start, seqlen_q, seqlen_k, diag_off = seq_bounds(
        CU_Q, CU_K, off_b, seqlen_q, seqlen_k, IS_VARLEN, BOTTOM_RIGHT)
    if start_n >= seqlen_k:
        return                                   # varlen: this sequence is shorter

    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_D)
    offs_dv = tl.arange(0, HEAD_DV)
    k = load_tile(K + off_b * stride_kb + off_hkv * stride_kh + k_start * stride_ks, offs_n,
                  stride_ks, offs_d, seqlen_k, head_d, True, EVEN_D)
    v = load_tile(V + off_b * stride_vb + off_hkv * stride_vh + k_start * stride_vs, offs_n,
                  stride_vs, offs_dv, seqlen_k, head_dv, True, EVEN_DV)
    dk = tl.zeros([BLOCK_N, HEAD_D], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DV], tl.float32)
    col_hi = tl.minimum(start_n + BLOCK_N, seqlen_k) - 1
    a, b, c, d = row_ranges(start_n, col_hi, seqlen_q, diag_off, window_left, window_right,
                            BLOCK_M, HAS_LEFT, HAS_RIGHT)
    for gi in range(0, group):
        off_h = off_hkv * group + gi
        q_base = Q + off_b * stride_qb + off_h * stride_qh + q_start * stride_qs
        do_base = DO + off_b * stride_dob + off_h * stride_doh + q_start * stride_dos
        dq_base = DQ_ACC + off_b * stride_dqb + off_h * stride_dqh + q_start * stride_dqs
        rng_base, row_base = dropout_bases(rng_offset, rng_stride_b, off_b, off_h, seqlen_q)
        LSE_row = LSE + off_b * stride_lse_b + off_h * stride_lse_h + q_start
        D_row = Dsum + off_b * stride_lse_b + off_h * stride_lse_h + q_start
        bias_base = BIAS + off_b * stride_bb + off_h * stride_bh
        dbias_base = DBIAS + off_b * stride_dbb + off_h * stride_dbh
        slope_log2 = alibi_slope_log2(SLOPES, off_b, stride_slope_b, off_h, HAS_ALIBI)
        if SPARSE:
            row = ((off_b % mask_b) * mask_h + off_h % mask_h) * mask_nq + start_n // MASK_BKV
            per_block = MASK_BQ // BLOCK_M
            dk, dv = _dkdv_tiles(
                dk, dv, k, v, q_base, do_base, dq_base, LSE_row, D_row, stride_qs, stride_dos,
                stride_dqs, 0, tl.load(KV_NUM + row) * per_block, KV_IDX + row * mask_nkv,
                start_n, offs_n, offs_d, offs_dv, head_d, head_dv,
                seqlen_q, seqlen_k, diag_off, window_left, window_right, slope_log2, qk_scale,
                softcap_log2, sm_scale, row_base, seed, rng_base, dropout_p, bias_base,
                dbias_base, stride_bm, stride_bn, stride_dbm, off_b, off_h, sm_args, mm_args,
                BLOCK_M, True, HAS_LEFT, HAS_RIGHT, HAS_SOFTCAP, HAS_ALIBI, HAS_DROPOUT, HAS_BIAS,
                BIAS_BOOL, HAS_DBIAS, SCORE_MOD, HAS_SCORE_MOD, MASK_MOD, HAS_MASK_MOD,
                ATOMIC_DQ, EVEN_D, EVEN_DV, True, MASK_BQ, PRECISION)
            n_full = tl.load(FULL_KV_NUM + row)
            full_idx = FULL_KV_IDX + row * mask_nkv
            first = tl.load(full_idx)
            last = tl.load(full_idx + n_full - 1, mask=n_full > 0, other=-1)
            if last - first == n_full - 1:
                # The full blocks form one run (lists are increasing: causal, sliding-window and
                # document masks): walk it as a range, without a list read per tile (the read
                # stalls this loop's copies; it cost 23% over the dense loop on the H200).
                dk, dv = _dkdv_tiles(
                    dk, dv, k, v, q_base, do_base, dq_base, LSE_row, D_row, stride_qs,
                    stride_dos, stride_dqs, first * per_block, (first + n_full) * per_block,
                    full_idx, start_n, offs_n, offs_d, offs_dv, head_d, head_dv, seqlen_q,
                    seqlen_k, diag_off, window_left, window_right, slope_log2, qk_scale,
                    softcap_log2, sm_scale, row_base, seed, rng_base, dropout_p, bias_base,
                    dbias_base, stride_bm, stride_bn, stride_dbm, off_b, off_h, sm_args, mm_args,
                    BLOCK_M, False, HAS_LEFT, HAS_RIGHT, HAS_SOFTCAP, HAS_ALIBI, HAS_DROPOUT,
                    HAS_BIAS, BIAS_BOOL, HAS_DBIAS, SCORE_MOD, HAS_SCORE_MOD, MASK_MOD, False,
                    ATOMIC_DQ, EVEN_D, EVEN_DV, False, MASK_BQ, PRECISION)
            else:
                dk, dv = _dkdv_tiles(
                    dk, dv, k, v, q_base, do_base, dq_base, LSE_row, D_row, stride_qs,
                    stride_dos, stride_dqs, 0, n_full * per_block, full_idx, start_n, offs_n,
                    offs_d, offs_dv, head_d, head_dv, seqlen_q, seqlen_k, diag_off, window_left,
                    window_right, slope_log2, qk_scale, softcap_log2, sm_scale, row_base, seed,
                    rng_base, dropout_p, bias_base, dbias_base, stride_bm, stride_bn, stride_dbm,
                    off_b, off_h, sm_args, mm_args, BLOCK_M, False, HAS_LEFT, HAS_RIGHT,
                    HAS_SOFTCAP, HAS_ALIBI, HAS_DROPOUT, HAS_BIAS, BIAS_BOOL, HAS_DBIAS,
                    SCORE_MOD, HAS_SCORE_MOD, MASK_MOD, False, ATOMIC_DQ, EVEN_D, EVEN_DV, True,
                    MASK_BQ, PRECISION)
        else:
            # masked [a, b), full [b, c), masked [c, d): only band-crossing tiles test the mask
            dk, dv = _dkdv_tiles(
                dk, dv, k, v, q_base, do_base, dq_base, LSE_row, D_row, stride_qs, stride_dos,
                stride_dqs, a // BLOCK_M, b // BLOCK_M, KV_IDX, start_n, offs_n, offs_d,
                offs_dv, head_d, head_dv,
                seqlen_q, seqlen_k, diag_off, window_left, window_right, slope_log2, qk_scale,
                softcap_log2, sm_scale, row_base, seed, rng_base, dropout_p, bias_base,
                dbias_base, stride_bm, stride_bn, stride_dbm, off_b, off_h, sm_args, mm_args,
                BLOCK_M, True, HAS_LEFT, HAS_RIGHT, HAS_SOFTCAP, HAS_ALIBI, HAS_DROPOUT, HAS_BIAS,
                BIAS_BOOL, HAS_DBIAS, SCORE_MOD, HAS_SCORE_MOD, MASK_MOD, HAS_MASK_MOD,
                ATOMIC_DQ, EVEN_D, EVEN_DV, False, MASK_BQ, PRECISION)
            dk, dv = _dkdv_tiles(
                dk, dv, k, v, q_base, do_base, dq_base, LSE_row, D_row, stride_qs, stride_dos,
                stride_dqs, b // BLOCK_M, c // BLOCK_M, KV_IDX, start_n, offs_n, offs_d,
                offs_dv, head_d, head_dv,
                seqlen_q, seqlen_k, diag_off, window_left, window_right, slope_log2, qk_scale,
                softcap_log2, sm_scale, row_base, seed, rng_base, dropout_p, bias_base,
                dbias_base, stride_bm, stride_bn, stride_dbm, off_b, off_h, sm_args, mm_args,
                BLOCK_M, False, HAS_LEFT, HAS_RIGHT, HAS_SOFTCAP, HAS_ALIBI, HAS_DROPOUT, HAS_BIAS,
                BIAS_BOOL, HAS_DBIAS, SCORE_MOD, HAS_SCORE_MOD, MASK_MOD, HAS_MASK_MOD,
                ATOMIC_DQ, EVEN_D, EVEN_DV, False, MASK_BQ, PRECISION)
            dk, dv = _dkdv_tiles(
                dk, dv, k, v, q_base, do_base, dq_base, LSE_row, D_row, stride_qs, stride_dos,
                stride_dqs, c // BLOCK_M, d // BLOCK_M, KV_IDX, start_n, offs_n, offs_d,
                offs_dv, head_d, head_dv,
                seqlen_q, seqlen_k, diag_off, window_left, window_right, slope_log2, qk_scale,
                softcap_log2, sm_scale, row_base, seed, rng_base, dropout_p, bias_base,
                dbias_base, stride_bm, stride_bn, stride_dbm, off_b, off_h, sm_args, mm_args,
                BLOCK_M, True, HAS_LEFT, HAS_RIGHT, HAS_SOFTCAP, HAS_ALIBI, HAS_DROPOUT, HAS_BIAS,
                BIAS_BOOL, HAS_DBIAS, SCORE_MOD, HAS_SCORE_MOD, MASK_MOD, HAS_MASK_MOD,
                ATOMIC_DQ, EVEN_D, EVEN_DV, False, MASK_BQ, PRECISION)
    n_ok = offs_n[:, None] < seqlen_k
    cols = k_start + offs_n[:, None]
    tl.store(DK + off_b * stride_dkb + off_hkv * stride_dkh + cols * stride_dks
             + offs_d[None, :], (dk * sm_scale).to(DK.dtype.element_ty),
             mask=n_ok & (offs_d[None, :] < head_d))
    tl.store(DV + off_b * stride_dvb + off_hkv * stride_dvh + cols * stride_dvs
             + offs_dv[None, :], dv.to(DV.dtype.element_ty),
             mask=n_ok & (offs_dv[None, :] < head_dv))


@triton.jit
def _dq_tiles(dq, q, do, lse2, Di, k_base, v_base, stride_kn, stride_vn, start, stop, idx_ptr,
              offs_m,
              offs_d, offs_dv, head_d, head_dv, seqlen_q, seqlen_k, diag_off, window_left,
              window_right, slope_log2, qk_scale, softcap_log2, row_base, seed, rng_offset,
              dropout_p, bias_base, stride_bm, stride_bn, off_b, off_h, sm_args, mm_args,
              BLOCK_N: tl.constexpr, MASKED: tl.constexpr, HAS_LEFT: tl.constexpr,
              HAS_RIGHT: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_ALIBI: tl.constexpr,
              HAS_DROPOUT: tl.constexpr, HAS_BIAS: tl.constexpr, BIAS_BOOL: tl.constexpr,
              SCORE_MOD: tl.constexpr, HAS_SCORE_MOD: tl.constexpr, MASK_MOD: tl.constexpr,
              USE_MASK_MOD: tl.constexpr, EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr,
              INDEXED: tl.constexpr, LIST_BLOCK: tl.constexpr, PRECISION: tl.constexpr,
              mask_from=0, MASK_FROM: tl.constexpr = False, EVEN_K: tl.constexpr = False):
    """Accumulate into ``dq`` the key tiles number ``[start, stop)`` (:func:`tile_start`).
    ``MASK_FROM`` / ``EVEN_K``: as in :func:`.fwd._fwd_tiles` (the band only from key
    ``mask_from`` on, under a run-time branch; no bounds test on the loads where the keys end
    on a tile)."""
    CHECK_KEYS: tl.constexpr = MASKED and not (MASK_FROM and EVEN_K)
    BAND: tl.constexpr = MASKED and not MASK_FROM       # (else applied below, from mask_from)
    rows = offs_m[:, None]
    listed = tile_start(start, stop, idx_ptr, BLOCK_N, LIST_BLOCK, INDEXED)
    for tile in range(start, stop):
        start_n = tile * BLOCK_N
        if INDEXED:
            start_n = listed
            listed = next_tile_start(tile, listed, stop, idx_ptr, BLOCK_N, LIST_BLOCK)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = load_tile(k_base, offs_n, stride_kn, offs_d, seqlen_k, head_d, CHECK_KEYS, EVEN_D)
        v = load_tile(v_base, offs_n, stride_vn, offs_dv, seqlen_k, head_dv, CHECK_KEYS,
                      EVEN_DV)
        cols = offs_n[None, :]
        qk = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        p, t, g = bwd_probs(qk, lse2[:, None], rows, cols, seqlen_q, seqlen_k, diag_off, window_left,
                            window_right, slope_log2, qk_scale, softcap_log2, bias_base,
                            stride_bm, stride_bn, off_b, off_h, sm_args, mm_args, BAND,
                            HAS_LEFT, HAS_RIGHT, HAS_SOFTCAP, HAS_ALIBI, HAS_BIAS, BIAS_BOOL,
                            SCORE_MOD, HAS_SCORE_MOD, MASK_MOD, USE_MASK_MOD, MASKED)
        if MASKED and MASK_FROM:
            if start_n >= mask_from:
                keep = band_mask(rows, cols, seqlen_k, diag_off, window_left, window_right,
                                 HAS_LEFT, HAS_RIGHT)
                p = tl.where(keep, p, 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        if HAS_DROPOUT:
            keep_d = dropout_keep(seed, rng_offset, row_base, start_n, seqlen_k, dropout_p,
                                  offs_m.shape[0], BLOCK_N)
            dp = tl.where(keep_d, dp * (1.0 / (1.0 - dropout_p)), 0.0)
        ds = chain_ds(p * (dp - Di[:, None]), t, g, HAS_SCORE_MOD, HAS_SOFTCAP)
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=PRECISION)
    return dq


@triton.jit(do_not_specialize=NO_SPECIALIZE)
def _bwd_dq_kernel(Q, K, V, DO, LSE, Dsum, DQ, SLOPES, BIAS,
                   stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                   stride_vb, stride_vs, stride_vh, stride_dob, stride_dos, stride_doh,
                   stride_dqb, stride_dqs, stride_dqh,
                   stride_slope_b, nheads, group, seqlen_q, seqlen_k, head_d, head_dv,
                   seq_bucket, CU_Q, CU_K, SEQ_ORDER, stride_lse_b, stride_lse_h, window_left,
                   window_right,
                   qk_scale, softcap_log2, sm_scale, seed, rng_offset, rng_stride_b, dropout_p,
                   stride_bb, stride_bh, stride_bm, stride_bn, sm_args, mm_args,
                   KV_NUM, KV_IDX, FULL_KV_NUM, FULL_KV_IDX, mask_b, mask_h, mask_nq, mask_nkv,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr,
                   HEAD_DV: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr,
                   BOTTOM_RIGHT: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
                   HAS_ALIBI: tl.constexpr, HAS_DROPOUT: tl.constexpr,
                   IS_VARLEN: tl.constexpr, HAS_BIAS: tl.constexpr,
                   BIAS_BOOL: tl.constexpr, SCORE_MOD: tl.constexpr,
                   HAS_SCORE_MOD: tl.constexpr, MASK_MOD: tl.constexpr,
                   HAS_MASK_MOD: tl.constexpr, SPARSE: tl.constexpr, MASK_BQ: tl.constexpr,
                   MASK_BKV: tl.constexpr, FULL_BOUND: tl.constexpr, EVEN_D: tl.constexpr,
                   EVEN_DV: tl.constexpr, PRECISION: tl.constexpr, ONE_LOOP: tl.constexpr,
                   EVEN_K: tl.constexpr):
    start_m, off_b, off_h, off_hkv = query_tile(nheads, group, seqlen_q, SEQ_ORDER, BLOCK_M,
                                                IS_VARLEN)
    q_start, k_start, seqlen_q, seqlen_k, diag_off = seq_bounds(
        CU_Q, CU_K, off_b, seqlen_q, seqlen_k, IS_VARLEN, BOTTOM_RIGHT)
    if start_m >= seqlen_q:
        return

    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    offs_dv = tl.arange(0, HEAD_DV)
    q = load_tile(Q + off_b * stride_qb + off_h * stride_qh + q_start * stride_qs, offs_m,
                  stride_qs, offs_d, seqlen_q, head_d, True, EVEN_D)
    do = load_tile(DO + off_b * stride_dob + off_h * stride_doh + q_start * stride_dos, offs_m,
                   stride_dos, offs_dv, seqlen_q, head_dv, True, EVEN_DV)
    stats = off_b * stride_lse_b + off_h * stride_lse_h + q_start
    lse2, Di = _row_stats(LSE + stats, Dsum + stats, offs_m, seqlen_q)
    slope_log2 = alibi_slope_log2(SLOPES, off_b, stride_slope_b, off_h, HAS_ALIBI)
    k_base = K + off_b * stride_kb + off_hkv * stride_kh + k_start * stride_ks
    v_base = V + off_b * stride_vb + off_hkv * stride_vh + k_start * stride_vs
    # dropout counters: this batch entry's first, this query tile's first row group
    rng_offset, row_base = dropout_bases(rng_offset, rng_stride_b, off_b, off_h, seqlen_q)
    row_base += start_m // 2
    bias_base = BIAS + off_b * stride_bb + off_h * stride_bh
    dq = tl.zeros([BLOCK_M, HEAD_D], tl.float32)
    row_hi = tl.minimum(start_m + BLOCK_M, seqlen_q) - 1
    if SPARSE:
        row = ((off_b % mask_b) * mask_h + off_h % mask_h) * mask_nq + start_m // MASK_BQ
        per_block = MASK_BKV // BLOCK_N
        dq = _dq_tiles(dq, q, do, lse2, Di, k_base, v_base, stride_ks, stride_vs, 0,
                       tl.load(KV_NUM + row) * per_block, KV_IDX + row * mask_nkv,
                       offs_m, offs_d, offs_dv, head_d, head_dv, seqlen_q, seqlen_k, diag_off,
                       window_left, window_right, slope_log2, qk_scale, softcap_log2, row_base,
                       seed, rng_offset, dropout_p, bias_base, stride_bm, stride_bn, off_b, off_h,
                       sm_args, mm_args, BLOCK_N, True, HAS_LEFT, HAS_RIGHT, HAS_SOFTCAP,
                       HAS_ALIBI, HAS_DROPOUT, HAS_BIAS, BIAS_BOOL, SCORE_MOD, HAS_SCORE_MOD,
                       MASK_MOD, HAS_MASK_MOD, EVEN_D, EVEN_DV, True, MASK_BKV, PRECISION)
        dq = _dq_tiles(dq, q, do, lse2, Di, k_base, v_base, stride_ks, stride_vs, 0,
                       tl.load(FULL_KV_NUM + row) * per_block, FULL_KV_IDX + row * mask_nkv,
                       offs_m, offs_d, offs_dv, head_d, head_dv, seqlen_q, seqlen_k, diag_off,
                       window_left, window_right, slope_log2, qk_scale, softcap_log2, row_base,
                       seed, rng_offset, dropout_p, bias_base, stride_bm, stride_bn, off_b, off_h,
                       sm_args, mm_args, BLOCK_N, FULL_BOUND, HAS_LEFT, HAS_RIGHT, HAS_SOFTCAP,
                       HAS_ALIBI, HAS_DROPOUT, HAS_BIAS, BIAS_BOOL, SCORE_MOD, HAS_SCORE_MOD,
                       MASK_MOD, False, EVEN_D, EVEN_DV, True, MASK_BKV, PRECISION)
    else:
        a, b, c, d = tile_ranges(start_m, row_hi, 0, seqlen_k, diag_off, window_left,
                                 window_right, BLOCK_N, HAS_LEFT, HAS_RIGHT)
        # ONE_LOOP: the diagonal tiles in the full tiles' loop (as in .fwd's kernel)
        full_stop = c
        if ONE_LOOP:
            full_stop = d
        dq = _dq_tiles(dq, q, do, lse2, Di, k_base, v_base, stride_ks, stride_vs,
                       a // BLOCK_N, b // BLOCK_N, KV_IDX, offs_m, offs_d, offs_dv, head_d,
                       head_dv, seqlen_q, seqlen_k, diag_off,
                       window_left, window_right, slope_log2, qk_scale, softcap_log2, row_base,
                       seed, rng_offset, dropout_p, bias_base, stride_bm, stride_bn, off_b, off_h,
                       sm_args, mm_args, BLOCK_N, True, HAS_LEFT, HAS_RIGHT, HAS_SOFTCAP,
                       HAS_ALIBI, HAS_DROPOUT, HAS_BIAS, BIAS_BOOL, SCORE_MOD, HAS_SCORE_MOD,
                       MASK_MOD, HAS_MASK_MOD, EVEN_D, EVEN_DV, False, MASK_BKV, PRECISION)
        dq = _dq_tiles(dq, q, do, lse2, Di, k_base, v_base, stride_ks, stride_vs,
                       b // BLOCK_N, full_stop // BLOCK_N, KV_IDX, offs_m, offs_d, offs_dv, head_d,
                       head_dv, seqlen_q, seqlen_k, diag_off,
                       window_left, window_right, slope_log2, qk_scale, softcap_log2, row_base,
                       seed, rng_offset, dropout_p, bias_base, stride_bm, stride_bn, off_b, off_h,
                       sm_args, mm_args, BLOCK_N, ONE_LOOP, HAS_LEFT, HAS_RIGHT, HAS_SOFTCAP,
                       HAS_ALIBI, HAS_DROPOUT, HAS_BIAS, BIAS_BOOL, SCORE_MOD, HAS_SCORE_MOD,
                       MASK_MOD, HAS_MASK_MOD, EVEN_D, EVEN_DV, False, MASK_BKV, PRECISION,
                       c, ONE_LOOP, EVEN_K)
        if not ONE_LOOP:
            dq = _dq_tiles(dq, q, do, lse2, Di, k_base, v_base, stride_ks, stride_vs,
                           c // BLOCK_N, d // BLOCK_N, KV_IDX, offs_m, offs_d, offs_dv, head_d,
                           head_dv, seqlen_q, seqlen_k, diag_off,
                           window_left, window_right, slope_log2, qk_scale, softcap_log2,
                           row_base, seed, rng_offset, dropout_p, bias_base, stride_bm,
                           stride_bn, off_b, off_h, sm_args, mm_args, BLOCK_N, True, HAS_LEFT,
                           HAS_RIGHT, HAS_SOFTCAP, HAS_ALIBI, HAS_DROPOUT, HAS_BIAS, BIAS_BOOL,
                           SCORE_MOD, HAS_SCORE_MOD, MASK_MOD, HAS_MASK_MOD, EVEN_D, EVEN_DV,
                           False, MASK_BKV, PRECISION)
    tl.store(DQ + off_b * stride_dqb + off_h * stride_dqh + (q_start + offs_m[:, None]) * stride_dqs
             + offs_d[None, :], (dq * sm_scale).to(DQ.dtype.element_ty),
             mask=(offs_m[:, None] < seqlen_q) & (offs_d[None, :] < head_d))


def _configs(gpu_shapes):
    if interpreting():
        return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=4, num_stages=1)]
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s)
            for (m, n, w, s) in gpu_shapes]


_KEY = ["ATOMIC_DQ", "HEAD_D", "HEAD_DV", "HAS_LEFT", "HAS_RIGHT", "HAS_SOFTCAP", "HAS_ALIBI", "HAS_DROPOUT",
        "IS_VARLEN", "HAS_BIAS", "BIAS_BOOL", "HAS_SCORE_MOD", "HAS_MASK_MOD", "SPARSE", "MASK_BQ",
        "MASK_BKV", "PRECISION", "ONE_LOOP", "EVEN_K", "seq_bucket"]
def _shapes(env: str, default):
    """``(BLOCK_M, BLOCK_N, num_warps, num_stages)`` candidates; ``env`` may replace them
    (``"64,128,8,2;32,128,4,3"``, for tuning sweeps). The first is the untuned default."""
    value = os.environ.get(env)
    if not value:
        return default
    return [tuple(int(x) for x in item.split(",")) for item in value.split(";") if item]


# dK/dV keeps a KV tile resident and streams query tiles: tall KV tiles, short query tiles.
# Register pressure decides here (two (BLOCK_N, d) fp32 accumulators; scripts/inspect_kernels.py
# shows registers and spills per config). Measured on the H200 (docs/perf.md, bwd sweep):
# 64x128 / 8 warps / 3 stages wins at d=128, 64x64 / 4 warps at d<=64; listed first per head
# dim, they are also the untuned choice (FLASHTILE_AUTOTUNE=0).
# Atomic mode accumulates into DQ_ACC, so every timing run of the autotuner starts it from zero.
# The last entry of each list fits any head dim up to 256 (the fallback when nothing else does).
_DKDV_SHAPES = _shapes("FLASHTILE_DKDV_SHAPES", [
    (64, 128, 8, 3), (64, 64, 4, 3), (32, 128, 8, 3), (64, 128, 8, 2), (32, 128, 8, 2),
    (32, 64, 8, 2)])
_SMALL_HEAD_FIRST = (64, 64, 4, 3)


def _dkdv_prune(configs, named_args, **kwargs):
    if max(kwargs.get("HEAD_D", 64), kwargs.get("HEAD_DV", 64)) <= 64:
        configs = sorted(configs, key=lambda c: (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"],
                                                 c.num_warps, c.num_stages) != _SMALL_HEAD_FIRST)
    return prune_configs(configs, named_args, kind="dkdv", **kwargs)


_dkdv = triton.autotune(
    configs=_configs(_DKDV_SHAPES), key=_KEY, cache_results=True, do_bench=graph_bench,
    prune_configs_by={"early_config_prune": _dkdv_prune}, reset_to_zero=["DQ_ACC"],
)(_bwd_dkdv_kernel)
_dkdv_launch = TunedLaunch(_dkdv)
# dQ keeps a query tile resident and streams KV tiles: the forward's shape. 128x32 / 8 warps
# / 2 stages is for d=256, where autotuning picks it: 1.9 ms against the large-head config's
# 3.0 ms (4k unmasked, H200; 0 spills offline; docs/perf.md, session 19). It does not fit
# fp32 there, so the last entry stays the fallback.
_dq = triton.autotune(
    configs=_configs(_shapes("FLASHTILE_DQ_SHAPES", [
        (128, 64, 8, 3), (64, 64, 4, 3), (128, 64, 8, 2), (128, 128, 8, 2), (128, 32, 4, 3),
        (128, 32, 8, 2), (64, 64, 8, 2)])),
    key=_KEY, prune_configs_by={"early_config_prune": functools.partial(prune_configs, kind="dq")},
    cache_results=True, do_bench=graph_bench,
)(_bwd_dq_kernel)
_dq_launch = TunedLaunch(_dq)


@functools.lru_cache(maxsize=None)
def _dummy(device: torch.device) -> torch.Tensor:
    return torch.zeros(1, dtype=torch.float32, device=device)


def dq_mode(deterministic: bool = False) -> str:
    """``"auto"`` (default: one pass where the Gluon dK/dV kernel runs the call and measured
    ahead with it, :func:`.bwd_hopper.one_pass`; two passes elsewhere), ``"atomic"`` (one
    pass wherever the backward runs) or ``"two-pass"``. ``FLASHTILE_BWD_DQ`` chooses;
    ``deterministic=True`` always takes two passes (a one-pass dQ is summed in arrival order,
    so its last bits may differ between runs)."""
    if deterministic:
        return "two-pass"
    choice = getenv("FLASHTILE_BWD_DQ", "auto") or "auto"
    if choice not in ("auto", "atomic", "two-pass"):
        raise ValueError(f"FLASHTILE_BWD_DQ must be 'auto', 'atomic' or 'two-pass', got "
                         f"{choice!r}")
    return choice


_PLANS = plans.Plans()          # dense calls' launches by signature (:mod:`.plans`)
# (the Gluon kernels a backward may take: their settings are part of its plan key)
_BWD_MODULES = ("bwd_hopper", "dq_hopper", "bwd256_hopper", "dq256_hopper")

# How the last backward computed dQ ("atomic": one pass, or "two-pass"; read by the ledger)
last_dq_pass = "two-pass"


def _gluon_kernel(module: str, dout, q, k, v, params):
    """The Gluon kernel module ``module`` (sm_90) when it is switched on and covers this dense
    call, else None."""
    kernel = gluon_kernels(module, q.device)
    return kernel if kernel is not None and kernel.supports(dout, q, k, v, params) else None


def backward(dout, q, k, v, out, lse, params, need_bias_grad: bool = False,
             planned: dict | None = None):
    """Launch the three backward kernels.

    Shapes as in :func:`flashtile.kernels.fwd.forward` (dense or varlen); ``dout`` like ``out``.
    Returns ``(dq, dk, dv)`` shaped like ``(q, k, v)``, in their dtype; with
    ``need_bias_grad`` also ``dbias`` shaped and typed like ``params.attn_bias``.

    A call whose signature was launched before replays its launch plan
    (:func:`flashtile.kernels.plans.call_key`): only the gradients, the ``D`` rows and, in one
    pass, the dQ accumulator (zeroed by the preprocess kernel) are allocated. ``planned``:
    what this call's :func:`flashtile.kernels.fwd.forward` left in its ``planned``; the
    backward's key then starts from the forward's (:func:`.plans.backward_key`).
    """
    global last_dq_pass
    varlen = params.cu_seqlens_q is not None
    if dout.stride(-1) != 1:
        dout = dout.contiguous()
    if varlen:                                   # (total, h, d) -> (1, total, h, d) views
        q, k, v, out, dout = (t.unsqueeze(0) for t in (q, k, v, out, dout))
    mode = dq_mode(params.deterministic)
    # (tensors as the kernels see them)
    key, named = (None, None) if need_bias_grad else plans.backward_key(planned, q, k, v, params)
    if key is not None:
        # (with the Gluon kernels' switches and configs, and the dQ mode: which kernels run
        # and how is then a function of the key, and their launches are steps of the plan
        # like any other)
        key = (*key, plans.sig(dout), plans.sig(out), plans.sig(lse), mode,
               gluon_settings(q.device, _BWD_MODULES))
        plan = _PLANS.get(key)
        inputs = {"q": q, "k": k, "v": v, "dout": dout, "out": out, "lse": lse,
                  "dq_acc": _dummy(q.device), **named}
        if plan is not None:
            last_dq_pass = "atomic" if plan.copies else "two-pass"   # (one pass ends copying)
            grads = plan.replay(inputs, q.device)
            return tuple(g[0].detach() for g in grads) if varlen else grads
        record = plans.Recorder()
    else:
        record = None
    # sm_90 dense hot path: dK/dV from the Gluon kernel; dQ from the tile-level one, from a
    # Gluon dQ kernel (d=96: on, FLASHTILE_GLUON_DQ=0 turns it off; d=64/128: opt-in,
    # FLASHTILE_GLUON_DQ=1; d=256: on, FLASHTILE_GLUON_DQ256=0 turns it off), or
    # added by the Gluon dK/dV kernel in the same pass (one pass, through TMA reductions)
    dense = not (varlen or need_bias_grad)
    hopper = _gluon_kernel("bwd_hopper", dout, q, k, v, params) if dense else None
    if mode == "auto":
        atomic = hopper is not None and hopper.call_one_pass(q, k, params) != "two-pass"
    else:
        atomic = mode == "atomic"
    if atomic and hopper is not None and not hopper.has_one_pass(q.shape[3]):
        hopper = None       # (a forced one pass at d=96: the tile-level kernel adds dQ)
    hopper_dq = ((_gluon_kernel("dq_hopper", dout, q, k, v, params)
                  or _gluon_kernel("dq256_hopper", dout, q, k, v, params))
                 if dense and not atomic else None)
    # d=256 (FLASHTILE_GLUON_BWD256=0 turns it off): dK/dV from its own Gluon kernel, dQ in two
    # passes (a forced one pass keeps the tile-level kernel)
    hopper256 = (_gluon_kernel("bwd256_hopper", dout, q, k, v, params)
                 if dense and hopper is None and not atomic else None)
    last_dq_pass = "atomic" if atomic else "two-pass"
    # varlen: the gradients (total, h, d) alias the kernels' (1, total, h, d) buffers
    # (detached, as the forward's output)
    dq4 = alloc(q.shape, q.dtype, q.device)
    dk4 = alloc(k.shape, k.dtype, k.device)
    dv4 = alloc(v.shape, v.dtype, v.device)
    dq, dk, dv = (t[0].detach() for t in (dq4, dk4, dv4)) if varlen else (dq4, dk4, dv4)
    if varlen:
        batch = params.cu_seqlens_q.numel() - 1
        seqlen_q, seqlen_k = params.max_seqlen_q, params.max_seqlen_k
    else:
        batch, seqlen_q, seqlen_k = q.shape[0], q.shape[1], k.shape[1]
    nheads, head_d = q.shape[2], q.shape[3]
    nheads_kv, head_dv = k.shape[2], v.shape[3]
    HEAD_D, HEAD_DV = padded_headdim(head_d), padded_headdim(head_dv)
    lay = varlen_args(params, batch, nheads, seqlen_q, seqlen_k, lse)

    dsum = alloc(lse.shape, torch.float32, q.device)
    # One-pass mode adds dQ into an fp32 buffer (an accumulator: the preprocess zeroes it; the
    # Gluon kernel's is shaped for its TMA blocks, the same bytes as dq4's shape).
    # (Two-pass mode passes a one-element dummy: the autotuner zeroes DQ_ACC between timings.)
    dq_acc = (alloc(hopper.dq_acc_shape(q) if hopper is not None else dq4.shape,
                    torch.float32, q.device) if atomic else _dummy(q.device))
    dq_acc_strides = strides(dq_acc.view(dq4.shape), varlen) if atomic else (0, 0, 0)
    # (the dK/dV kernel's claimed items, :func:`.bwd_hopper.claims_items`: a count from zero)
    count = (alloc((1,), torch.int32, q.device) if hopper is not None
             and hopper.claims_items(q, k, params, atomic) else None)
    block_pre = 16 if interpreting() else 64
    plans.launch(record, _bwd_preprocess, (cdiv(seqlen_q, block_pre) * batch * nheads,), (
        out, dout, dsum, lay["CU_Q"], dq_acc, *strides(out, varlen), *strides(dout, varlen),
        lay["stride_lse_b"], lay["stride_lse_h"], *dq_acc_strides, nheads, seqlen_q, head_dv,
        head_d, count if count is not None else dsum), dict(
            BLOCK_M=block_pre, HEAD_DV=HEAD_DV, HEAD_D=HEAD_D, IS_VARLEN=varlen,
            ZERO_DQ=atomic, ZERO_COUNT=count is not None))

    slopes = params.alibi_slopes
    stride_slope_b = slopes.stride(0) if slopes is not None and slopes.dim() == 2 else 0
    common = dict(
        **lay, **window_args(params), **score_args(params), **dropout_args(params),
        **mod_args(params, q.device, with_grad=True), sm_scale=params.softmax_scale, HEAD_D=HEAD_D,
        HEAD_DV=HEAD_DV, EVEN_D=HEAD_D == head_d, EVEN_DV=HEAD_DV == head_dv,
        PRECISION=dot_precision(q.dtype))
    sizes = (stride_slope_b, nheads, nheads // nheads_kv, seqlen_q, seqlen_k, head_d, head_dv,
             seq_bucket(seqlen_q, seqlen_k))
    slopes_arg = slopes if slopes is not None else lse
    bias = bias_args(params, batch, nheads, seqlen_q, seqlen_k, lse)
    bias_ptr = bias.pop("BIAS")
    dbias = None
    if need_bias_grad:
        # Full (b, h, sq, sk) fp32, zero where no tile is visited; reduced to the mask's
        # broadcast shape below. The mask itself is that large, so this adds no new order.
        dbias = torch.zeros(batch, nheads, seqlen_q, seqlen_k, dtype=torch.float32,
                            device=q.device)
    dbias_arg = dbias if dbias is not None else lse
    dbias_strides = dbias.stride()[:3] if dbias is not None else (0, 0, 0)

    def dkdv_grid(meta):
        return (cdiv(seqlen_k, meta["BLOCK_N"]) * batch * nheads_kv,)

    def dq_grid(meta):
        return (cdiv(seqlen_q, meta["BLOCK_M"]) * batch * nheads,)

    # (GQA's dK/dV may be computed per query head, each KV head's group summed at the end
    # from per-query-head parts, or added into float32 accumulators by the kernel:
    # :func:`.bwd_hopper.dkdv_heads`, :func:`.bwd_hopper.adds_dkdv`)
    dkdv_heads = hopper.dkdv_heads(q, k, params, atomic) if hopper is not None else nheads_kv
    sums = add_to = None        # (what dk4/dv4 are summed or cast from at the end)
    dk_out, dv_out = dk4, dv4   # (what the dK/dV kernel writes)
    if hopper is not None and hopper.adds_dkdv(q, k, dkdv_heads, atomic):
        sums = add_to = (alloc(k.shape, torch.float32, k.device),
                         alloc(v.shape, torch.float32, v.device))
        n_acc, block_zero = k.numel(), 16 if interpreting() else 4096
        plans.launch(record, _zero_pair, (cdiv(n_acc, block_zero),), (*add_to, n_acc),
                     dict(BLOCK=block_zero))
    elif dkdv_heads != nheads_kv:
        sums = dk_out, dv_out = (alloc((*k.shape[:2], dkdv_heads, head_d), k.dtype, k.device),
                                 alloc((*v.shape[:2], dkdv_heads, head_dv), v.dtype, v.device))
    if hopper is not None:
        hopper.dkdv(q, k, v, dout, lse, dsum, dk_out, dv_out, params, record,
                    dq_acc if atomic else None, add_to, count)
    elif hopper256 is not None:
        hopper256.dkdv(q, k, v, dout, lse, dsum, dk4, dv4, params, record)
    else:
        plans.launch(record, _dkdv_launch, dkdv_grid, (
            q, k, v, dout, lse, dsum, dk4, dv4, dq_acc, slopes_arg, bias_ptr, dbias_arg,
            *strides(q, varlen), *strides(k, varlen), *strides(v, varlen),
            *strides(dout, varlen), *strides(dk4, varlen), *strides(dv4, varlen),
            *dq_acc_strides, *sizes), dict(
            **common, **bias, **sparse_args(params, seqlen_q, lse, "q"),
            stride_dbb=dbias_strides[0], stride_dbh=dbias_strides[1],
            stride_dbm=dbias_strides[2], HAS_DBIAS=need_bias_grad, ATOMIC_DQ=atomic))
    parts = {}          # (the per-query-head dK/dV parts or accumulators, by name)
    if add_to is not None:
        plans.copy_into(dk4, sums[0])            # (float32 accumulators -> k's dtype)
        plans.copy_into(dv4, sums[1])
    elif sums is not None:
        n_rows = k.shape[0] * k.shape[1] * nheads_kv           # ((batch, key, KV head) rows)
        block_r = 8 if interpreting() else 4096 // max(HEAD_D, HEAD_DV)
        plans.launch(record, _sum_head_groups, (cdiv(n_rows, block_r), 2),
                     (*sums, dk4, dv4, n_rows), dict(
                         G=dkdv_heads // nheads_kv, HEAD_D=head_d, HEAD_DV=head_dv,
                         BLOCK_R=block_r, BLOCK_D=HEAD_D, BLOCK_DV=HEAD_DV))
    if sums is not None:
        parts = {"dk_part": sums[0], "dv_part": sums[1]}
    if atomic:
        dq4.copy_(dq_acc.view_as(dq4))           # already scaled; fp32 -> q's dtype
    elif hopper_dq is not None:
        hopper_dq.dq(q, k, v, dout, lse, dsum, dq4, params, record)
    else:
        plans.launch(record, _dq_launch, dq_grid, (
            q, k, v, dout, lse, dsum, dq4, slopes_arg, bias_ptr,
            *strides(q, varlen), *strides(k, varlen), *strides(v, varlen),
            *strides(dout, varlen), *strides(dq4, varlen), *sizes), dict(
            **common, **bias, **sparse_args(params, seqlen_k, lse, "kv"),
            **diagonal_args(params, seqlen_k, head_d)))
    if record is not None:
        buffers = (("dq", "dk", "dv", "dsum") + (("dq_acc",) if atomic else ()) + tuple(parts)
                   + (("count",) if count is not None else ()))
        copies = (((("dk", "dk_part"), ("dv", "dv_part")) if add_to is not None else ())
                  + ((("dq", "dq_acc"),) if atomic else ()))
        _PLANS.put(key, record.plan({**inputs, "dq": dq4, "dk": dk4, "dv": dv4, "dsum": dsum,
                                     "dq_acc": dq_acc, "count": count, **parts}, buffers,
                                    ("dq", "dk", "dv"),
                                    plans.CALL_VALUES, copies=copies))
    if need_bias_grad:
        return dq, dk, dv, sum_to_shape(dbias, params.attn_bias.shape).to(params.attn_bias.dtype)
    return dq, dk, dv

