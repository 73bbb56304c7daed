"""Forward kernel: tiled attention with online softmax.

One program owns ``BLOCK_M`` query rows of one (batch, head) and streams the visible K/V tiles
through SRAM. Per row it keeps

- ``m_i``  the running max of the log2-domain scores seen so far,
- ``l_i``  the running sum of ``exp2(s2 - m_i)``,
- ``acc``  the running ``sum_j exp2(s2_j - m_i) v_j`` (``BLOCK_M x HEAD_DV``, fp32).

When a tile raises the max from ``m_old`` to ``m_new`` both ``l_i`` and ``acc`` are multiplied by
``exp2(m_old - m_new)`` (the discount), so the result never depends on the order of the tiles.
The output is normalised once at the end; only O and the LSE reach HBM.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import plans
from .common import (LN2_K, LOG2E_K, NO_SPECIALIZE, TunedLaunch, add_bias, alibi_slope_log2, alloc,
                     band_mask, bias_args, cdiv, diagonal_args, dot_precision, dropout_args,
                     dropout_bases, dropout_keep, env_block, gluon_kernels, gluon_settings,
                     graph_bench, interpreting, is_sm90, load_tile, mod_args, next_tile_start,
                     padded_headdim, prune_configs, query_tile, score_args, scores_log2, seq_bounds,
                     seq_bucket, softmax_step, sparse_args, strides, tile_ranges, tile_start,
                     varlen_args, window_args)


@triton.jit
def _fwd_tiles(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, start, stop, idx_ptr,
               table_row, stride_kp, stride_vp, offs_m, offs_d, offs_dv, head_d, head_dv,
               seqlen_q, seqlen_k, diag_off, window_left, window_right, slope_log2, qk_scale,
               softcap_log2,
               row_base, seed, rng_offset, dropout_p, bias_base, stride_bm, stride_bn,
               off_b, off_h, sm_args, mm_args,
               BLOCK_N: tl.constexpr, MASKED: tl.constexpr, EVEN_D: tl.constexpr,
               EVEN_DV: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr,
               HAS_SOFTCAP: tl.constexpr, HAS_ALIBI: tl.constexpr, HAS_DROPOUT: tl.constexpr,
               HAS_BIAS: tl.constexpr, BIAS_BOOL: tl.constexpr, SCORE_MOD: tl.constexpr,
               HAS_SCORE_MOD: tl.constexpr, MASK_MOD: tl.constexpr, USE_MASK_MOD: tl.constexpr,
               INDEXED: tl.constexpr, LIST_BLOCK: tl.constexpr, PAGED: tl.constexpr,
               PAGE_SIZE: tl.constexpr, PRECISION: tl.constexpr, SCALE_IN_EXP: tl.constexpr,
               mask_from=0, MASK_FROM: tl.constexpr = False, EVEN_K: tl.constexpr = False):
    """Fold the key tiles number ``[start, stop)`` (:func:`tile_start`: contiguous, or the
    blocks listed at ``idx_ptr``) into ``(acc, l_i, m_i)``. ``MASKED`` tiles test the
    band and the end of the keys per element; full tiles skip all of that. ``USE_MASK_MOD``
    evaluates the user's mask_mod (partial blocks of a block mask); ``HAS_SCORE_MOD`` applies
    the compiled score_mod (both from :mod:`flashtile.codegen`). ``PAGED``: K/V live in pages of
    ``PAGE_SIZE`` rows (a multiple of BLOCK_N, so a tile never straddles two), page
    ``table_row[key // PAGE_SIZE]`` at ``k_base + page * stride_kp``. ``SCALE_IN_EXP`` (plain
    scores, a positive scale: :func:`scale_in_exp`): the scores stay unscaled and the scale
    goes into each one's exponent (:func:`.common.softmax_step`). ``MASK_FROM``: a ``MASKED``
    loop applies the band only to the tiles from key ``mask_from`` on (a run-time branch), so
    full tiles and the diagonal ones can share one loop (``ONE_LOOP``); with ``EVEN_K`` (the
    keys end on a tile boundary) its loads need no bounds test."""
    CHECK_KEYS: tl.constexpr = MASKED and not (MASK_FROM and EVEN_K)
    listed = tile_start(start, stop, idx_ptr, BLOCK_N, LIST_BLOCK, INDEXED)
    if PAGED:
        # Block-table entries are read one tile ahead too, so a tile's K/V copies never wait on
        # their own lookup (paged caches come with consecutive tiles, never a block list).
        tl.static_assert(not INDEXED)
        page_next = tl.load(table_row + start * BLOCK_N // PAGE_SIZE, mask=start < stop, other=0)
    for t in range(start, stop):
        start_n = t * BLOCK_N
        if INDEXED:
            start_n = listed
            listed = next_tile_start(t, listed, stop, idx_ptr, BLOCK_N, LIST_BLOCK)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        rows = offs_m[:, None]
        cols = offs_n[None, :]
        if PAGED:
            page = page_next.to(tl.int64)
            page_next = tl.load(table_row + (start_n + BLOCK_N) // PAGE_SIZE, mask=t + 1 < stop,
                                other=0)
            k_tile = k_base + page * stride_kp + (start_n % PAGE_SIZE) * stride_kn
            v_tile = v_base + page * stride_vp + (start_n % PAGE_SIZE) * stride_vn
            offs_t = tl.arange(0, BLOCK_N)                          # rows within the tile
            k = load_tile(k_tile, offs_t, stride_kn, offs_d, seqlen_k - start_n, head_d, MASKED,
                          EVEN_D)
        else:
            k = load_tile(k_base, offs_n, stride_kn, offs_d, seqlen_k, head_d, CHECK_KEYS,
                          EVEN_D)
        qk = tl.dot(q, tl.trans(k), input_precision=PRECISION)          # (BLOCK_M, BLOCK_N)
        if SCALE_IN_EXP:
            s2 = qk
        else:
            s2, _ = scores_log2(qk, rows, cols, seqlen_q, seqlen_k, slope_log2, qk_scale,
                                softcap_log2, HAS_SOFTCAP, HAS_ALIBI)
        if HAS_SCORE_MOD:
            s2 = SCORE_MOD(s2 * LN2_K, off_b, off_h, rows, cols, sm_args) * LOG2E_K
        if HAS_BIAS:
            s2 = add_bias(s2, bias_base, stride_bm, stride_bn, rows, cols, seqlen_q,
                          seqlen_k, BIAS_BOOL, MASKED)
        if USE_MASK_MOD:
            s2 = tl.where(MASK_MOD(off_b, off_h, rows, cols, mm_args),
                          s2, float("-inf"))
        if MASKED and MASK_FROM:
            if start_n >= mask_from:
                keep = band_mask(rows, cols, seqlen_k, diag_off, window_left, window_right,
                                 HAS_LEFT, HAS_RIGHT)
                s2 = tl.where(keep, s2, float("-inf"))
        elif MASKED:
            keep = band_mask(rows, cols, seqlen_k, diag_off, window_left, window_right,
                             HAS_LEFT, HAS_RIGHT)
            s2 = tl.where(keep, s2, float("-inf"))
        p, alpha, l_i, m_new = softmax_step(s2, m_i, l_i,
                                            MASKED or HAS_BIAS or USE_MASK_MOD or HAS_SCORE_MOD,
                                            qk_scale if SCALE_IN_EXP else None)
        if PAGED:
            v = load_tile(v_tile, offs_t, stride_vn, offs_dv, seqlen_k - start_n, head_dv, MASKED,
                          EVEN_DV)
        else:
            v = load_tile(v_base, offs_n, stride_vn, offs_dv, seqlen_k, head_dv, CHECK_KEYS,
                          EVEN_DV)
        acc = acc * alpha[:, None]
        if HAS_DROPOUT:
            # l_i sums the undropped p (softmax first, then dropout); 1/(1-p) comes at the end.
            p = tl.where(dropout_keep(seed, rng_offset, row_base, start_n, seqlen_k, dropout_p,
                                      offs_m.shape[0], BLOCK_N), p, 0.0)
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit(do_not_specialize=NO_SPECIALIZE)
def _fwd_kernel(Q, K, V, O, LSE, SLOPES, BIAS,
                stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                stride_vb, stride_vs, stride_vh, stride_ob, stride_os, stride_oh,
                stride_slope_b, nheads, group, seqlen_q, seqlen_k, head_d, head_dv, seq_bucket,
                CU_Q, CU_K, SEQ_ORDER, stride_lse_b, stride_lse_h, window_left, window_right,
                qk_scale, softcap_log2,
                seed, rng_offset, rng_stride_b, dropout_p,
                stride_bb, stride_bh, stride_bm, stride_bn, sm_args, mm_args,
                KV_NUM, KV_IDX, FULL_KV_NUM, FULL_KV_IDX, mask_b, mask_h, mask_nq, mask_nkv,
                BLOCK_TABLE, stride_bt,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr,
                HEAD_DV: tl.constexpr, EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr,
                HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, BOTTOM_RIGHT: tl.constexpr,
                HAS_SOFTCAP: tl.constexpr, HAS_ALIBI: tl.constexpr, HAS_DROPOUT: tl.constexpr,
                IS_VARLEN: tl.constexpr, HAS_BIAS: tl.constexpr, BIAS_BOOL: tl.constexpr,
                SCORE_MOD: tl.constexpr, HAS_SCORE_MOD: tl.constexpr, MASK_MOD: tl.constexpr,
                HAS_MASK_MOD: tl.constexpr, SPARSE: tl.constexpr, MASK_BQ: tl.constexpr,
                MASK_BKV: tl.constexpr, FULL_BOUND: tl.constexpr, PAGED: tl.constexpr,
                PAGE_SIZE: tl.constexpr, PRECISION: tl.constexpr, SCALE_IN_EXP: tl.constexpr,
                ONE_LOOP: tl.constexpr, EVEN_K: tl.constexpr):
    # For varlen, seqlen_q/k are the maxima until seq_bounds reads this sequence's own.
    start_m, off_b, off_h, off_hkv = query_tile(nheads, group, seqlen_q, SEQ_ORDER, BLOCK_M,
                                                IS_VARLEN)
    q_start, k_start, seqlen_q, seqlen_k, diag_off = seq_bounds(
        CU_Q, CU_K, off_b, seqlen_q, seqlen_k, IS_VARLEN, BOTTOM_RIGHT)
    if start_m >= seqlen_q:
        return                                   # varlen: this sequence is shorter

    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    offs_dv = tl.arange(0, HEAD_DV)
    q_base = Q + off_b * stride_qb + off_h * stride_qh + q_start * stride_qs
    q = load_tile(q_base, offs_m, stride_qs, offs_d, seqlen_q, head_d, True, EVEN_D)
    if PAGED:            # pages found per tile; stride_kb/vb are the page strides here
        k_base = K + off_hkv * stride_kh
        v_base = V + off_hkv * stride_vh
    else:
        k_base = K + off_b * stride_kb + off_hkv * stride_kh + k_start * stride_ks
        v_base = V + off_b * stride_vb + off_hkv * stride_vh + k_start * stride_vs
    table_row = BLOCK_TABLE + off_b * stride_bt
    slope_log2 = alibi_slope_log2(SLOPES, off_b, stride_slope_b, off_h, HAS_ALIBI)

    bias_base = BIAS + off_b * stride_bb + off_h * stride_bh
    # dropout counters: this batch entry's first, this query tile's first row group
    rng_offset, row_base = dropout_bases(rng_offset, rng_stride_b, off_b, off_h, seqlen_q)
    row_base += start_m // 2
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DV], tl.float32)
    row_hi = tl.minimum(start_m + BLOCK_M, seqlen_q) - 1
    if SPARSE:
        # Block-sparse: walk only the key blocks the BlockMask lists for this query block;
        # partial blocks evaluate mask_mod, full blocks skip it (and every mask) entirely.
        row = ((off_b % mask_b) * mask_h + off_h % mask_h) * mask_nq + start_m // MASK_BQ
        per_block = MASK_BKV // BLOCK_N
        acc, l_i, m_i = _fwd_tiles(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_vs, 0,
                                   tl.load(KV_NUM + row) * per_block, KV_IDX + row * mask_nkv,
                                   table_row, stride_kb, stride_vb, offs_m, offs_d, offs_dv,
                                   head_d, head_dv, seqlen_q, seqlen_k, diag_off, window_left,
                                   window_right, slope_log2, qk_scale,
                                   softcap_log2, row_base, seed, rng_offset, dropout_p,
                                   bias_base, stride_bm, stride_bn, off_b, off_h, sm_args,
                                   mm_args, BLOCK_N, True, EVEN_D, EVEN_DV, HAS_LEFT,
                                   HAS_RIGHT, HAS_SOFTCAP, HAS_ALIBI, HAS_DROPOUT, HAS_BIAS,
                                   BIAS_BOOL, SCORE_MOD, HAS_SCORE_MOD, MASK_MOD, HAS_MASK_MOD,
                                   True, MASK_BKV, PAGED, PAGE_SIZE,
                                   PRECISION, SCALE_IN_EXP)
        acc, l_i, m_i = _fwd_tiles(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_vs, 0,
                                   tl.load(FULL_KV_NUM + row) * per_block,
                                   FULL_KV_IDX + row * mask_nkv,
                                   table_row, stride_kb, stride_vb, offs_m, offs_d, offs_dv,
                                   head_d, head_dv, seqlen_q, seqlen_k, diag_off, window_left,
                                   window_right, slope_log2, qk_scale,
                                   softcap_log2, row_base, seed, rng_offset, dropout_p,
                                   bias_base, stride_bm, stride_bn, off_b, off_h, sm_args,
                                   mm_args, BLOCK_N, FULL_BOUND, EVEN_D, EVEN_DV, HAS_LEFT,
                                   HAS_RIGHT, HAS_SOFTCAP, HAS_ALIBI, HAS_DROPOUT, HAS_BIAS,
                                   BIAS_BOOL, SCORE_MOD, HAS_SCORE_MOD, MASK_MOD, False,
                                   True, MASK_BKV, PAGED, PAGE_SIZE,
                                   PRECISION, SCALE_IN_EXP)
    else:
        a, b, c, d = tile_ranges(start_m, row_hi, 0, seqlen_k, diag_off, window_left,
                                 window_right, BLOCK_N, HAS_LEFT, HAS_RIGHT)
        # ONE_LOOP: the diagonal tiles in the full tiles' loop, masked from c on under a
        # run-time branch: one software pipeline, whose loads reach the diagonal tiles early,
        # and one prologue a program instead of two (short causal sequences: a few tiles each)
        full_stop = c
        if ONE_LOOP:
            full_stop = d
        acc, l_i, m_i = _fwd_tiles(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_vs,
                                   a // BLOCK_N, b // BLOCK_N, KV_IDX, table_row, stride_kb,
                                   stride_vb, offs_m, offs_d,
                                   offs_dv, head_d, head_dv, seqlen_q, seqlen_k,
                                   diag_off, window_left, window_right, slope_log2, qk_scale,
                                   softcap_log2, row_base, seed, rng_offset, dropout_p,
                                   bias_base, stride_bm, stride_bn, off_b, off_h, sm_args,
                                   mm_args, BLOCK_N, True, EVEN_D, EVEN_DV, HAS_LEFT,
                                   HAS_RIGHT, HAS_SOFTCAP, HAS_ALIBI, HAS_DROPOUT, HAS_BIAS,
                                   BIAS_BOOL, SCORE_MOD, HAS_SCORE_MOD, MASK_MOD, HAS_MASK_MOD,
                                   False, MASK_BKV, PAGED, PAGE_SIZE,
                                   PRECISION, SCALE_IN_EXP)
        acc, l_i, m_i = _fwd_tiles(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_vs,
                                   b // BLOCK_N, full_stop // BLOCK_N, KV_IDX, table_row,
                                   stride_kb, stride_vb, offs_m, offs_d,
                                   offs_dv, head_d, head_dv, seqlen_q, seqlen_k,
                                   diag_off, window_left, window_right, slope_log2, qk_scale,
                                   softcap_log2, row_base, seed, rng_offset, dropout_p,
                                   bias_base, stride_bm, stride_bn, off_b, off_h, sm_args,
                                   mm_args, BLOCK_N, ONE_LOOP, EVEN_D, EVEN_DV, HAS_LEFT,
                                   HAS_RIGHT, HAS_SOFTCAP, HAS_ALIBI, HAS_DROPOUT, HAS_BIAS,
                                   BIAS_BOOL, SCORE_MOD, HAS_SCORE_MOD, MASK_MOD, HAS_MASK_MOD,
                                   False, MASK_BKV, PAGED, PAGE_SIZE,
                                   PRECISION, SCALE_IN_EXP, c, ONE_LOOP, EVEN_K)
        if not ONE_LOOP:
            acc, l_i, m_i = _fwd_tiles(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_vs,
                                       c // BLOCK_N, d // BLOCK_N, KV_IDX, table_row, stride_kb,
                                       stride_vb, offs_m, offs_d,
                                       offs_dv, head_d, head_dv, seqlen_q, seqlen_k,
                                       diag_off, window_left, window_right, slope_log2, qk_scale,
                                       softcap_log2, row_base, seed, rng_offset, dropout_p,
                                       bias_base, stride_bm, stride_bn, off_b, off_h, sm_args,
                                       mm_args, BLOCK_N, True, EVEN_D, EVEN_DV, HAS_LEFT,
                                       HAS_RIGHT, HAS_SOFTCAP, HAS_ALIBI, HAS_DROPOUT, HAS_BIAS,
                                       BIAS_BOOL, SCORE_MOD, HAS_SCORE_MOD, MASK_MOD, HAS_MASK_MOD,
                                       False, MASK_BKV, PAGED, PAGE_SIZE,
                                       PRECISION, SCALE_IN_EXP)

    # Rows that saw no key: output 0, LSE -inf (DESIGN.md), never 0/0.
    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    if HAS_DROPOUT:
        out = out * (1.0 / (1.0 - dropout_p))
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * LN2_K)
    row_ok = offs_m < seqlen_q
    tl.store(LSE + off_b * stride_lse_b + off_h * stride_lse_h + q_start + offs_m, lse, mask=row_ok)
    o_ptrs = (O + off_b * stride_ob + off_h * stride_oh + (q_start + offs_m[:, None]) * stride_os
              + offs_dv[None, :])
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_ok[:, None] & (offs_dv[None, :] < head_dv))


def scale_in_exp(params) -> bool:
    """Whether the forward keeps the scores unscaled and scales each in its exponent
    (``SCALE_IN_EXP``): plain scores (no softcap, ALiBi, bias or score_mod, which work on
    scaled ones) and a positive scale (the row max is taken before scaling). It saves a
    multiply per score (the Gluon forward does the same, session 25)."""
    return (params.softmax_scale > 0 and params.softcap == 0 and params.alibi_slopes is None
            and params.attn_bias is None and params.score_mod is None)


def _fwd_configs():
    if interpreting():
        # The interpreter fails with more than one config ("0 active drivers"): pin one.
        return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=4, num_stages=1)]
    bm, bn = env_block("FLASHTILE_FWD_BLOCK_M"), env_block("FLASHTILE_FWD_BLOCK_N")
    if bm and bn:
        warps = env_block("FLASHTILE_FWD_WARPS") or (8 if bm >= 128 else 4)
        # FLASHTILE_FWD_MAXNREG caps the registers a thread (ptxas's .maxnreg), so that more
        # programs share an SM: the short causal forward is bound by latency, not issue
        return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps,
                              num_stages=env_block("FLASHTILE_FWD_STAGES") or 3,
                              maxnreg=env_block("FLASHTILE_FWD_MAXNREG"))]
    # (64 x 128 with 4 warps, cuDNN's tile at d=64 causal: 254 registers, two programs an SM,
    # 27-50% slower than 64 x 64 at 512/1k on the H200, session 29: not listed)
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s)
            for (m, n, w, s) in [(128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 4, 3),
                                 (64, 64, 4, 3), (128, 32, 4, 4), (64, 32, 4, 2)]]


# Where the autotuner's pick measured wrong, the config that measured fastest: the plain
# causal forward at d=64 up to 1k keys on sm_90 (issue 7's points the Gluon forward leaves to
# this kernel). 64 x 64 / 4 warps / 3 stages took 145-166 us at 512 keys and 224-255 at 1k in
# the grid runs since session 9 that picked it (bf16 and fp16, H100 and H200); the tuner's
# other picks there (128x64/8w/3s in sessions 12 and 44, 128x32/4w/4s, 128x128/8w in session
# 15) took 166-262 us at 512 and 248-350 at 1k in the runs that picked them (session 44, fp16:
# 165.9 against session 41's 147.8 at 512). Graph replays with a warm L2 (graph_bench) rank
# these configs close; the calls themselves come with a cold one.
_PINNED = {"shape": (64, 64, 4, 3), "head": 64, "up_to": 1024,
           "off": ("HAS_LEFT", "HAS_SOFTCAP", "HAS_ALIBI", "HAS_DROPOUT", "IS_VARLEN", "HAS_BIAS",
                   "HAS_SCORE_MOD", "HAS_MASK_MOD", "SPARSE")}


def _fwd_prune(configs, named_args, **kwargs):
    """:func:`prune_configs`, of :data:`_PINNED`'s config alone for the calls it names (also
    with autotuning off, ``FLASHTILE_AUTOTUNE=0``). Causal is a right bound without a left one
    (``HAS_RIGHT``, not ``HAS_LEFT``); the bound's value is not in the tuning key, so every such
    call shares the causal call's pick and is pinned alike."""
    q = named_args.get("Q")
    if (kwargs.get("HEAD_D") == kwargs.get("HEAD_DV") == _PINNED["head"]
            and kwargs.get("HAS_RIGHT") and not any(kwargs.get(k) for k in _PINNED["off"])
            and named_args.get("seq_bucket", 0) <= _PINNED["up_to"]
            and isinstance(q, torch.Tensor) and is_sm90(q.device)):
        configs = [c for c in configs if (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps,
                                          c.num_stages) == _PINNED["shape"]] or configs
    return prune_configs(configs, named_args, **kwargs)


_fwd = triton.autotune(
    configs=_fwd_configs(),
    key=["HEAD_D", "HEAD_DV", "HAS_LEFT", "HAS_RIGHT", "HAS_SOFTCAP", "HAS_ALIBI", "PRECISION",
         "ONE_LOOP", "EVEN_K", "HAS_DROPOUT", "IS_VARLEN", "HAS_BIAS", "BIAS_BOOL",
         "HAS_SCORE_MOD", "HAS_MASK_MOD", "SPARSE", "MASK_BQ", "MASK_BKV", "seq_bucket"],
    cache_results=True, do_bench=graph_bench,
    prune_configs_by={"early_config_prune": _fwd_prune},
)(_fwd_kernel)
_fwd_launch = TunedLaunch(_fwd)
_PLANS = plans.Plans()          # dense calls' launches by signature (:mod:`.plans`)


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, params,
            planned: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the forward kernel.

    Shapes: q ``(b, sq, hq, d)``, k ``(b, sk, hkv, d)``, v ``(b, sk, hkv, dv)`` (last dim
    contiguous, any other strides). Returns out ``(b, sq, hq, dv)`` in q's dtype and lse float32
    ``(b, hq, sq)`` (natural log). Varlen (``params.cu_seqlens_q`` set): q ``(total_q, hq, d)``,
    k/v ``(total_k, hkv, d|dv)``, out ``(total_q, hq, dv)``, lse ``(hq, total_q)``; with
    ``params.block_table`` k/v are pages ``(num_blocks, page, hkv, d|dv)``.

    A call whose signature was launched before replays its launch plan
    (:func:`flashtile.kernels.plans.call_key`): only the outputs are allocated. ``planned``
    (a dict, when the caller will run this call's backward): gets the call's key and named
    tensors, which :func:`flashtile.kernels.bwd.backward` takes instead of making its own
    (:func:`flashtile.kernels.plans.backward_key`).
    """
    varlen = params.cu_seqlens_q is not None
    out_shape = (*q.shape[:-1], v.shape[-1])
    paged = params.block_table is not None       # varlen over paged K/V: k/v stay 4-D pages
    if varlen:                                   # (total, h, d) -> (1, total, h, d) views
        q = q.unsqueeze(0)
        if not paged:
            k, v = k.unsqueeze(0), v.unsqueeze(0)
        batch = params.cu_seqlens_q.numel() - 1
        seqlen_q, seqlen_k = params.max_seqlen_q, params.max_seqlen_k
    else:
        batch, seqlen_q = q.shape[0], q.shape[1]
        seqlen_k = k.shape[1]
    key = plans.call_key(q, k, v, params)        # (q, k, v as the kernel sees them)
    record = None
    if key is not None:
        named = plans.params_tensors(params, q.device)
        if planned is not None:                  # (for the backward: plans.backward_key)
            planned["key"], planned["named"] = key, named
        # (with the Gluon forward's switch and config: whether it runs is then a function of
        # the key, and its launch is a step of the plan like any other)
        key = (*key, gluon_settings(q.device, ("fwd_hopper",)))
        inputs = {"q": q, "k": k, "v": v, **named}
        plan = _PLANS.get(key)
        if plan is not None:
            out4, lse = plan.replay(inputs, q.device)
            return (out4[0].detach() if varlen else out4), lse
        record = plans.Recorder()
    nheads, head_d = q.shape[2], q.shape[3]
    nheads_kv, head_dv = k.shape[2], v.shape[3]
    # varlen: out (total, h, dv) aliases the kernel's (1, total, h, dv) buffer, detached so
    # that it is a tensor of its own, not an autograd view (as a dense call's output is)
    out4 = alloc((1, *out_shape) if varlen else out_shape, q.dtype, q.device)
    out = out4[0].detach() if varlen else out4
    lse_shape = (nheads, q.shape[1]) if varlen else (batch, nheads, seqlen_q)
    lse = alloc(lse_shape, torch.float32, q.device)
    hopper = gluon_kernels("fwd_hopper", q.device)  # sm_90 dense (Gluon, where it is ahead)
    if hopper is not None and hopper.supports(q, k, v, params):
        hopper.forward(q, k, v, params, out4, lse, record)
    else:
        slopes = params.alibi_slopes
        stride_slope_b = slopes.stride(0) if slopes is not None and slopes.dim() == 2 else 0
        HEAD_D, HEAD_DV = padded_headdim(head_d), padded_headdim(head_dv)

        def grid(meta):
            return (cdiv(seqlen_q, meta["BLOCK_M"]) * batch * nheads,)

        bias = bias_args(params, batch, nheads, seqlen_q, seqlen_k, lse)
        args = (
            q, k, v, out4, lse, slopes if slopes is not None else lse, bias.pop("BIAS"),
            *strides(q, varlen), *strides(k, varlen and not paged),
            *strides(v, varlen and not paged), *strides(out4, varlen),
            stride_slope_b, nheads, nheads // nheads_kv, seqlen_q, seqlen_k, head_d, head_dv,
            seq_bucket(seqlen_q, seqlen_k))
        kwargs = dict(
            **varlen_args(params, batch, nheads, seqlen_q, seqlen_k, lse),
            **window_args(params), **score_args(params), **dropout_args(params), **bias,
            **mod_args(params, q.device), **sparse_args(params, seqlen_k, lse, "kv"),
            BLOCK_TABLE=params.block_table if paged else lse,
            stride_bt=params.block_table.stride(0) if paged else 0,
            HEAD_D=HEAD_D, HEAD_DV=HEAD_DV, EVEN_D=HEAD_D == head_d, EVEN_DV=HEAD_DV == head_dv,
            PAGED=paged, PAGE_SIZE=k.shape[1] if paged else 1, PRECISION=dot_precision(q.dtype),
            SCALE_IN_EXP=scale_in_exp(params), **diagonal_args(params, seqlen_k, head_d),
        )
        plans.launch(record, _fwd_launch, grid, args, kwargs)
    if record is not None:
        _PLANS.put(key, record.plan({**inputs, "out": out4, "lse": lse}, ("out", "lse"),
                                    ("out", "lse"), plans.CALL_VALUES))
    return out, lse
