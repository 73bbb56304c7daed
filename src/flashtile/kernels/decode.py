"""Split-KV decoding ("flash-decoding") over a contiguous or paged KV cache.

Decoding reads the whole cache for a handful of query rows, so it is bound by HBM bandwidth and
the only goal is to keep every SM streaming K/V. Two ideas:

- **GQA packing.** One program serves *all* query heads of one KV head: the ``group * seqlen_q``
  query rows of the group are packed into the M dimension of the tile (row ``r`` is query
  ``i = r // group`` of head ``hkv * group + r % group``), so each K/V tile is read once for the
  whole group instead of ``group`` times.
- **Split-KV.** When ``batch * nheads_k`` programs cannot fill the GPU, the visible key range of
  each (sequence, KV head) is cut into ``num_splits`` consecutive slices, one program each. Every
  program keeps the online-softmax state of its slice and writes a partial output and LSE; the
  combine kernel merges the splits with the same discount rule the tile loop uses.

Notation (also see :mod:`flashtile.kernels.common`):

- ``BLOCK_M`` packed rows per program (>= 16 for ``tl.dot``), ``BLOCK_N`` keys per tile,
  ``HEAD_D``/``HEAD_DV`` head dims padded to powers of two.
- Keys are addressed by *slot*: slot ``p`` of sequence ``b`` is row ``p`` of cache row
  ``cache_batch_idx[b]`` (contiguous) or row ``p % page_size`` of page
  ``block_table[b, p // page_size]`` (paged, no gather copy: one table entry per tile when the
  page size (a compile-time constant) is a multiple of the tile, else one per key).
  Tiles start at multiples of ``BLOCK_N`` in slot coordinates, so a paged and a contiguous cache
  holding the same tokens are processed identically (bitwise-equal results).
- The valid keys of sequence ``b`` are slots ``[key_start, key_end)`` =
  ``[leftpad[b], cache_seqlens[b] + seqlen_new)``. With ``n = key_end - key_start`` valid keys,
  query ``i`` sees slot ``p`` iff ``i + off - left <= p <= i + off + right`` with
  ``off = key_end - seqlen_q`` (bottom-right alignment in slot coordinates; the left padding
  cancels out), and ALiBi's distance ``i + off - p`` is the same as flash-attn's.
- ``m_i``, ``l_i``, ``acc``: running max (log2 domain), running sum of ``exp2(s2 - m_i)`` and
  unnormalised output, per packed row. A split writes ``acc / l_i`` and ``m_i + log2(l_i)``
  (``-inf`` and 0 when its slice saw no key); the combine keeps ``(m, l, acc)`` over splits:
  ``w_s = exp2(lse_s - m)``, ``l = sum w_s``, ``out = sum w_s o_s / l``, ``lse = m + log2(l)``.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from . import plans
from .common import (LN2_K, LOG2E_K, SMEM_LIMIT, TunedLaunch, alloc, autotune_enabled,
                     band_mask, cdiv, cuda_properties, dot_precision, interpreting, next_pow2,
                     padded_headdim, score_args, scores_log2, sm_count, softmax_step,
                     tile_ranges)

MIN_KEYS_PER_SPLIT = 256        # below this a split's fixed cost outweighs the parallelism
MAX_BLOCK_M = 64
MAX_SPLITS = 128
COMBINE_MAX_BLOCK_S = 64        # splits the combine merges per step (one step up to 64 splits)
COMBINE_MAX_ELEMS = 8192        # ... while a step's (splits x head dim) tile stays in registers

NO_SPECIALIZE = ["seqlen_q", "seqlen_new", "group", "num_splits",
                 "window_left", "window_right", "kv_bucket", "stride_slope_b", "slots"]


# ----------------------------------------------------------------------------------------------
# Kernels

@triton.jit
def _decode_tiles(acc, l_i, m_i, q, K, V, k_head, v_head, table_row, start, stop,
                  k_desc, v_desc, desc_row, k_col, v_col,
                  offs_i, offs_d, offs_dv, head_d, head_dv, seqlen_q, key_start, key_end,
                  diag_off, window_left, window_right, slope_log2, qk_scale, softcap_log2,
                  stride_kb, stride_ks, stride_vb, stride_vs,
                  BLOCK_N: tl.constexpr, MASKED: tl.constexpr, PAGED: tl.constexpr,
                  PAGE_SIZE: tl.constexpr,
                  EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, HAS_LEFT: tl.constexpr,
                  HAS_RIGHT: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_ALIBI: tl.constexpr,
                  TMA: tl.constexpr, PRECISION: tl.constexpr):
    """Fold the key tiles ``[start, stop)`` (slots) into ``(acc, l_i, m_i)``.

    ``k_head``/``v_head``: pointer offsets of the KV head (plus the cache row when contiguous);
    ``table_row``: pointer to the sequence's block-table row (paged). ``TMA``: K/V tiles come
    through the tensor descriptors ``k_desc``/``v_desc`` instead (the cache seen as a 2-D
    ``(rows, heads * d)`` matrix; tile rows from ``desc_row + slot`` or the page's first row,
    columns from ``k_col``/``v_col``), except for pages smaller than a tile."""
    if PAGED and PAGE_SIZE % BLOCK_N == 0:
        # Block-table entries are read one tile ahead (carried through the loop), so a tile's
        # K/V copies never wait on its own lookup and the software pipeline stays full.
        page_next = tl.load(table_row + start // PAGE_SIZE, mask=start < stop, other=0)
    for start_n in range(start, stop, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)                         # slots
        if MASKED:
            in_seq = (offs_n >= key_start) & (offs_n < key_end)
        if PAGED and PAGE_SIZE % BLOCK_N == 0:
            # The tile lies inside one page: one block-table entry, then contiguous rows.
            page = page_next.to(tl.int64)
            ahead = start_n + BLOCK_N
            page_next = tl.load(table_row + ahead // PAGE_SIZE, mask=ahead < stop, other=0)
            row = (offs_n % PAGE_SIZE).to(tl.int64)
            k_rows = page * stride_kb + row * stride_ks
            v_rows = page * stride_vb + row * stride_vs
        elif PAGED:
            # Pages smaller than the tile: look the page up per key.
            if MASKED:
                page = tl.load(table_row + offs_n // PAGE_SIZE, mask=in_seq, other=0)
            else:
                page = tl.load(table_row + offs_n // PAGE_SIZE)
            page = page.to(tl.int64)
            row = (offs_n % PAGE_SIZE).to(tl.int64)
            k_rows = page * stride_kb + row * stride_ks
            v_rows = page * stride_vb + row * stride_vs
        else:
            k_rows = offs_n.to(tl.int64) * stride_ks
            v_rows = offs_n.to(tl.int64) * stride_vs
        k_ptrs = K + k_head + k_rows[:, None] + offs_d[None, :]
        v_ptrs = V + v_head + v_rows[:, None] + offs_dv[None, :]
        if TMA and (not PAGED or PAGE_SIZE % BLOCK_N == 0):
            # The copy engine fetches whole tiles (no per-thread address math, no registers held
            # by loads in flight). Rows outside the sequence hold whatever the cache has there:
            # their scores are masked below, and their V rows zeroed, so 0 * garbage never
            # reaches the accumulator.
            if PAGED:
                tile_row = (page * PAGE_SIZE + start_n % PAGE_SIZE).to(tl.int32)
            else:
                tile_row = desc_row + start_n
            k = k_desc.load([tile_row, k_col])
        # (plain loads mask the head dim only when it is padded: see common.load_tile for why)
        elif MASKED and EVEN_D:
            k = tl.load(k_ptrs, mask=in_seq[:, None], other=0.0)
        elif MASKED:
            k = tl.load(k_ptrs, mask=in_seq[:, None] & (offs_d[None, :] < head_d), other=0.0)
        elif EVEN_D:
            k = tl.load(k_ptrs)
        else:
            k = tl.load(k_ptrs, mask=offs_d[None, :] < head_d, other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision=PRECISION)          # (BLOCK_M, BLOCK_N)
        rows, cols = offs_i[:, None], offs_n[None, :]
        s2, _ = scores_log2(qk, rows, cols, seqlen_q, key_end, slope_log2, qk_scale,
                            softcap_log2, HAS_SOFTCAP, HAS_ALIBI)
        if MASKED:
            keep = band_mask(rows, cols, key_end, diag_off, window_left, window_right,
                             HAS_LEFT, HAS_RIGHT)
            keep = keep & (offs_n >= key_start)[None, :]
            s2 = tl.where(keep, s2, float("-inf"))
        p, alpha, l_i, m_new = softmax_step(s2, m_i, l_i, MASKED)
        if TMA and (not PAGED or PAGE_SIZE % BLOCK_N == 0):
            v = v_desc.load([tile_row, v_col])
            if MASKED:
                v = tl.where(in_seq[:, None], v, 0.0)
        elif MASKED and EVEN_DV:
            v = tl.load(v_ptrs, mask=in_seq[:, None], other=0.0)
        elif MASKED:
            v = tl.load(v_ptrs, mask=in_seq[:, None] & (offs_dv[None, :] < head_dv), other=0.0)
        elif EVEN_DV:
            v = tl.load(v_ptrs)
        else:
            v = tl.load(v_ptrs, mask=offs_dv[None, :] < head_dv, other=0.0)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit(do_not_specialize=NO_SPECIALIZE)
def _decode_kernel(Q, K, V, O, LSE, SEQLENS, LEFTPAD, BATCH_IDX, BLOCK_TABLE, SLOPES,
                   stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                   stride_vb, stride_vs, stride_vh, stride_ob, stride_osplit, stride_os,
                   stride_oh, stride_lb, stride_lsplit, stride_lh, stride_bt, stride_slope_b,
                   seqlen_q, seqlen_new, group, head_d, head_dv, num_splits,
                   window_left, window_right, qk_scale, softcap_log2, kv_bucket,
                   k_desc, v_desc, slots,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr,
                   HEAD_DV: tl.constexpr, EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr,
                   PAGED: tl.constexpr, PAGE_SIZE: tl.constexpr, HAS_BATCH_IDX: tl.constexpr,
                   HAS_LEFTPAD: tl.constexpr,
                   HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
                   HAS_ALIBI: tl.constexpr, SPLIT: tl.constexpr, TMA: tl.constexpr,
                   PRECISION: tl.constexpr):
    # Grid: (split, mblock + n_mblocks * kv_head, batch).
    off_split = tl.program_id(0)
    pid_mh = tl.program_id(1)
    off_b = tl.program_id(2)
    n_rows = group * seqlen_q
    n_mblocks = tl.cdiv(n_rows, BLOCK_M)
    off_hkv = pid_mh // n_mblocks
    start_m = (pid_mh % n_mblocks) * BLOCK_M
    off_b64 = off_b.to(tl.int64)

    offs_r = start_m + tl.arange(0, BLOCK_M)                             # packed rows
    offs_i = offs_r // group                                             # query index
    offs_h = off_hkv * group + offs_r % group                            # query head
    row_ok = offs_r < n_rows
    offs_d = tl.arange(0, HEAD_D)
    offs_dv = tl.arange(0, HEAD_DV)
    q_ptrs = (Q + off_b64 * stride_qb + offs_i.to(tl.int64)[:, None] * stride_qs
              + offs_h.to(tl.int64)[:, None] * stride_qh + offs_d[None, :])
    q = tl.load(q_ptrs, mask=row_ok[:, None] & (offs_d[None, :] < head_d), other=0.0)
    slope_log2 = 0.0
    if HAS_ALIBI:
        slope = tl.load(SLOPES + off_b64 * stride_slope_b + offs_h, mask=row_ok, other=0.0)
        slope_log2 = (slope * LOG2E_K)[:, None]

    # The sequence: valid slots [key_start, key_end), where its KV head lives.
    key_end = tl.load(SEQLENS + off_b) + seqlen_new
    key_start = 0
    if HAS_LEFTPAD:
        key_start = tl.load(LEFTPAD + off_b)
    diag_off = key_end - seqlen_q
    table_row = BLOCK_TABLE
    k_head = off_hkv.to(tl.int64) * stride_kh
    v_head = off_hkv.to(tl.int64) * stride_vh
    if PAGED:
        table_row = BLOCK_TABLE + off_b64 * stride_bt
    else:
        cache_row = off_b64
        if HAS_BATCH_IDX:
            cache_row = tl.load(BATCH_IDX + off_b).to(tl.int64)
        k_head += cache_row * stride_kb
        v_head += cache_row * stride_vb
    desc_row = 0
    if TMA and not PAGED:
        # k_desc/v_desc see the cache as a (rows, row stride) matrix (:func:`_descriptors`):
        # row = cache row * slots + slot, or page * page size + row in page when paged.
        desc_row = (cache_row * slots).to(tl.int32)
    k_col = off_hkv * stride_kh
    v_col = off_hkv * stride_vh

    # Visible tiles, then this split's slice of them.
    row_hi = (tl.minimum(start_m + BLOCK_M, n_rows) - 1) // group
    a, b, c, d = tile_ranges(start_m // group, row_hi, key_start, key_end, diag_off,
                                  window_left, window_right, BLOCK_N, HAS_LEFT, HAS_RIGHT)
    tiles_per_split = tl.cdiv((d - a) // BLOCK_N, num_splits)
    lo = a + off_split * tiles_per_split * BLOCK_N
    hi = tl.minimum(lo + tiles_per_split * BLOCK_N, d)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DV], tl.float32)
    acc, l_i, m_i = _decode_tiles(
        acc, l_i, m_i, q, K, V, k_head, v_head, table_row, tl.maximum(a, lo), tl.minimum(b, hi),
        k_desc, v_desc, desc_row, k_col, v_col,
        offs_i, offs_d, offs_dv, head_d, head_dv, seqlen_q, key_start, key_end, diag_off,
        window_left, window_right, slope_log2, qk_scale, softcap_log2,
        stride_kb, stride_ks, stride_vb, stride_vs,
        BLOCK_N, True, PAGED, PAGE_SIZE, EVEN_D, EVEN_DV, HAS_LEFT, HAS_RIGHT, HAS_SOFTCAP, HAS_ALIBI,
        TMA, PRECISION)
    acc, l_i, m_i = _decode_tiles(
        acc, l_i, m_i, q, K, V, k_head, v_head, table_row, tl.maximum(b, lo), tl.minimum(c, hi),
        k_desc, v_desc, desc_row, k_col, v_col,
        offs_i, offs_d, offs_dv, head_d, head_dv, seqlen_q, key_start, key_end, diag_off,
        window_left, window_right, slope_log2, qk_scale, softcap_log2,
        stride_kb, stride_ks, stride_vb, stride_vs,
        BLOCK_N, False, PAGED, PAGE_SIZE, EVEN_D, EVEN_DV, HAS_LEFT, HAS_RIGHT, HAS_SOFTCAP, HAS_ALIBI,
        TMA, PRECISION)
    acc, l_i, m_i = _decode_tiles(
        acc, l_i, m_i, q, K, V, k_head, v_head, table_row, tl.maximum(c, lo), tl.minimum(d, hi),
        k_desc, v_desc, desc_row, k_col, v_col,
        offs_i, offs_d, offs_dv, head_d, head_dv, seqlen_q, key_start, key_end, diag_off,
        window_left, window_right, slope_log2, qk_scale, softcap_log2,
        stride_kb, stride_ks, stride_vb, stride_vs,
        BLOCK_N, True, PAGED, PAGE_SIZE, EVEN_D, EVEN_DV, HAS_LEFT, HAS_RIGHT, HAS_SOFTCAP, HAS_ALIBI,
        TMA, PRECISION)

    # Rows that saw no key (in this slice): output 0, LSE -inf, never 0/0.
    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse2 = tl.where(empty, float("-inf"), m_i + tl.math.log2(tl.where(empty, 1.0, l_i)))
    if not SPLIT:
        lse2 = lse2 * LN2_K                                # final: natural log
    o_ptrs = (O + off_b64 * stride_ob + off_split.to(tl.int64) * stride_osplit
              + offs_i.to(tl.int64)[:, None] * stride_os + offs_h.to(tl.int64)[:, None] * stride_oh
              + offs_dv[None, :])
    tl.store(o_ptrs, out.to(O.dtype.element_ty),
             mask=row_ok[:, None] & (offs_dv[None, :] < head_dv))
    l_ptrs = (LSE + off_b64 * stride_lb + off_split.to(tl.int64) * stride_lsplit
              + offs_h.to(tl.int64) * stride_lh + offs_i)
    tl.store(l_ptrs, lse2, mask=row_ok)


@triton.jit(do_not_specialize=["seqlen_q", "nheads", "head_dv", "num_splits"])
def _combine_kernel(O_PART, LSE_PART, O, LSE,
                    stride_pb, stride_psplit, stride_ps, stride_ph,
                    stride_lpb, stride_lpsplit, stride_lph,
                    stride_ob, stride_os, stride_oh, stride_lb, stride_lh,
                    seqlen_q, nheads, head_dv, num_splits,
                    BLOCK_S: tl.constexpr, HEAD_DV: tl.constexpr):
    """One program per output row ``(b, h, i)``: merge the ``num_splits`` partial rows."""
    pid = tl.program_id(0)
    off_i = pid % seqlen_q
    off_h = (pid // seqlen_q) % nheads
    off_b = (pid // (seqlen_q * nheads)).to(tl.int64)
    offs_dv = tl.arange(0, HEAD_DV)
    dv_ok = offs_dv < head_dv
    lse_base = LSE_PART + off_b * stride_lpb + off_h * stride_lph + off_i
    o_base = O_PART + off_b * stride_pb + off_i * stride_ps + off_h * stride_ph

    m = tl.full([1], float("-inf"), tl.float32)
    l = tl.zeros([1], tl.float32)
    acc = tl.zeros([HEAD_DV], tl.float32)
    for s0 in range(0, num_splits, BLOCK_S):
        offs_s = s0 + tl.arange(0, BLOCK_S)
        s_ok = offs_s < num_splits
        lse_s = tl.load(lse_base + offs_s.to(tl.int64) * stride_lpsplit, mask=s_ok,
                        other=float("-inf"))
        m_new = tl.maximum(m, tl.max(lse_s, 0))
        m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        w = tl.math.exp2(lse_s - m_shift)                                # 0 for empty splits
        alpha = tl.math.exp2(m - m_shift)
        o_s = tl.load(o_base + offs_s.to(tl.int64)[:, None] * stride_psplit + offs_dv[None, :],
                      mask=s_ok[:, None] & dv_ok[None, :], other=0.0)
        acc = acc * alpha + tl.sum(w[:, None] * o_s, 0)
        l = l * alpha + tl.sum(w, 0)
        m = m_new
    empty = l == 0.0
    out = acc / tl.where(empty, 1.0, l)
    lse = tl.where(empty, float("-inf"),
                   (m + tl.math.log2(tl.where(empty, 1.0, l))) * LN2_K)
    tl.store(O + off_b * stride_ob + off_i * stride_os + off_h * stride_oh + offs_dv,
             out.to(O.dtype.element_ty), mask=dv_ok)
    tl.store(LSE + off_b * stride_lb + off_h * stride_lh + off_i + tl.arange(0, 1), lse)


# ----------------------------------------------------------------------------------------------
# Configs

def _size_descriptors(nargs):
    """Config pre-hook: a host TMA descriptor's block is the tile the config loads."""
    if nargs.get("TMA"):
        nargs["k_desc"].block_shape = [nargs["BLOCK_N"], nargs["HEAD_D"]]
        nargs["v_desc"].block_shape = [nargs["BLOCK_N"], nargs["HEAD_DV"]]


def decode_config(block_n: int, warps: int, stages: int) -> triton.Config:
    return triton.Config({"BLOCK_N": block_n}, num_warps=warps, num_stages=stages,
                         pre_hook=_size_descriptors)


# (BLOCK_N, num_warps, num_stages). First (the untuned default): 128-key tiles, 3 stages, i.e.
# ~190 KB of K/V in shared memory and one program per SM with two tiles always in flight: the
# best at (1, 32k) and (8, 8k) on the H200 (docs/perf.md, session 7). Last: small enough for
# any head dim up to 256 in fp32 (~155 KB).
DECODE_SHAPES = [(128, 4, 3), (64, 4, 3), (64, 4, 2), (128, 4, 2), (64, 4, 4), (32, 4, 4),
                 (64, 8, 3), (32, 4, 2)]


def _decode_configs():
    if interpreting():
        # The interpreter fails with more than one config ("0 active drivers"): pin one.
        return [decode_config(16, 4, 1)]
    return [decode_config(n, w, s) for (n, w, s) in DECODE_SHAPES]


def decode_smem(block_m: int, block_n: int, stages: int, head_d: int, head_dv: int,
                item: int) -> int:
    """Shared memory of a decode program: the pipelined K+V tiles, the query tile, and 8 KB for
    the compiler's own buffers (layout conversions, barriers)."""
    return stages * block_n * (head_d + head_dv) * item + block_m * head_d * item + 8192


def _prune_decode_configs(configs, named_args, **kwargs):
    """Drop configs that do not fit in shared memory (``SMEM_LIMIT``: 128-key tiles x 3 stages
    at d = 128 in 16 bits, ~205 KB, do); only the first without autotuning
    (``FLASHTILE_AUTOTUNE=0``)."""
    head_d, head_dv = kwargs.get("HEAD_D", 128), kwargs.get("HEAD_DV", 128)
    item = named_args["K"].element_size() if "K" in named_args else 2
    block_m = kwargs.get("BLOCK_M", 16)
    def smem(c):
        return decode_smem(block_m, c.kwargs["BLOCK_N"], c.num_stages, head_d, head_dv, item)
    keep = [c for c in configs if smem(c) <= SMEM_LIMIT] or [min(configs, key=smem)]
    return keep if autotune_enabled() else keep[:1]


_decode = triton.autotune(
    configs=_decode_configs(),
    # PAGED and TMA are deliberately not part of the key: a paged and a contiguous cache (or
    # plain and TMA loads, see use_tma) then run the same tile size, which keeps their results
    # bitwise equal.
    key=["HEAD_D", "HEAD_DV", "BLOCK_M", "SPLIT", "HAS_LEFT", "HAS_RIGHT", "HAS_SOFTCAP",
         "HAS_ALIBI", "PRECISION", "kv_bucket"],
    cache_results=True,
    prune_configs_by={"early_config_prune": _prune_decode_configs},
)(_decode_kernel)
_decode_launch = TunedLaunch(_decode)


# ----------------------------------------------------------------------------------------------
# Launchers


def block_m(rows: int) -> int:
    """Packed rows per program for ``rows = group * seqlen_q``."""
    return min(max(16, next_pow2(rows)), MAX_BLOCK_M)


def num_splits_heuristic(programs: int, capacity: int, sms: int) -> int:
    """Splits per (sequence, KV head, row block) for ``programs`` unsplit programs over caches of
    ``capacity`` slots: as many as keep ``programs * splits`` within one program per SM (at
    least ``MIN_KEYS_PER_SPLIT`` keys per split, at most ``MAX_SPLITS``).

    Why one per SM: decoding is bound by how many K/V bytes are in flight, and the default
    config (128-key tiles, 3 stages) fills an SM's shared memory with them; more, smaller
    programs per SM measured slower at (1, 32k) and (8, 8k) on the H200 (session 7), and every
    extra split is one more partial row to merge. E.g. on 132 SMs: 8 programs (batch 1, 8 KV
    heads) -> 16 splits; 64 -> 2; 100 or more -> 1.
    """
    most = max(1, min(MAX_SPLITS, capacity // MIN_KEYS_PER_SPLIT))
    return max(1, min(most, sms // programs))


def combine_block_s(splits: int, head_dv: int) -> int:
    """Splits merged per step of the combine: all of them in one step when the tile fits (each
    step is a dependent round trip to memory), else steps of ``COMBINE_MAX_ELEMS // head_dv``
    (``head_dv`` padded: powers of two throughout)."""
    return min(next_pow2(splits), COMBINE_MAX_BLOCK_S, max(1, COMBINE_MAX_ELEMS // head_dv))


def resolve_num_splits(requested: int, batch: int, nheads_kv: int, rows: int, capacity: int,
                       device: torch.device) -> int:
    """The split count a call uses: the heuristic for 0, else ``requested``; capped at
    ``MAX_SPLITS`` and at one split per 16 cache slots (at least 1). Only shapes enter (the
    capacity, not the actual lengths), so choosing it never synchronises with the device."""
    programs = batch * nheads_kv * cdiv(rows, block_m(rows))
    splits = requested or num_splits_heuristic(programs, capacity, sm_count(device))
    return max(1, min(splits, MAX_SPLITS, cdiv(capacity, 16)))


def _descriptor_ok(cache: torch.Tensor, head_d: int) -> bool:
    """Whether ``cache`` ``(batch or pages, slots, heads, d)`` can be read as the 2-D matrix
    ``(batch * slots, row stride)`` by TMA: unit stride along d, batch rows back to back, every
    head inside its row, 16-byte aligned base and rows, int32 row coordinates."""
    nb, slots, heads, _ = cache.shape
    sb, ss, sh, sd = cache.stride()
    item = cache.element_size()
    return (sd == 1 and sb == slots * ss and (heads - 1) * sh + head_d <= ss
            and (ss * item) % 16 == 0 and (sh * item) % 16 == 0 and cache.data_ptr() % 16 == 0
            and nb * slots < 2**31)


def _descriptors(k_cache: torch.Tensor, v_cache: torch.Tensor):
    """Host TMA descriptors of the caches seen as ``(batch * slots, row stride)`` matrices (a
    head's tile is a column window); the block shape is set per config (:func:`_size_descriptors`).
    Host descriptors travel as kernel parameters: no per-program setup on the device."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    def matrix(cache):
        rows, row_stride = cache.shape[0] * cache.shape[1], cache.stride(1)
        return TensorDescriptor(cache, [rows, row_stride], [row_stride, 1],
                                [16, cache.shape[3]])
    return matrix(k_cache), matrix(v_cache)


def use_tma(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    """Read K/V tiles with TMA (Hopper's copy engine) when the device has it, both caches allow
    it (:func:`_descriptor_ok`, head dims that need no padding) and the call is being captured
    into a CUDA graph.

    Why only under capture: TMA saves ~1.6 us of device time at (1, 32k) (40.4 against 42.0),
    but its host descriptors add ~80 us of host time per eager call on the H200's host (337
    against 260 us), where small decodes are host-bound already; a graph pays for them once.
    The values loaded are the same, so eager and captured calls agree bitwise (tested). TMA
    is not part of the autotuner's key, so a capture reuses the config tuned by the eager
    warm-up call instead of tuning inside the capture. ``FLASHTILE_DECODE_TMA=1`` takes TMA
    always, ``=0`` never (the benchmark's A/B switch); the interpreter always takes it
    (the tests)."""
    mode = os.environ.get("FLASHTILE_DECODE_TMA", "auto")
    if mode in ("0", ""):
        return False
    if not interpreting():
        if q.device.type != "cuda":
            return False
        if (cuda_properties(q.device).major < 9                   # TMA: Hopper and later
                or (mode != "1" and not torch.cuda.is_current_stream_capturing())):
            return False
    head_d, head_dv = k_cache.shape[3], v_cache.shape[3]
    return (padded_headdim(head_d) == head_d and padded_headdim(head_dv) == head_dv
            and _descriptor_ok(k_cache, head_d) and _descriptor_ok(v_cache, head_dv))


# ----------------------------------------------------------------------------------------------
# Launch plans (:mod:`flashtile.kernels.plans`): a decode step's host work, done once per signature

_PLANS = plans.Plans()


def _plan_key(q, k_cache, v_cache, call, params) -> tuple:
    """Everything :func:`decode` reads besides tensor contents and addresses: two calls with
    the same key build the same kernel arguments up to the tensors themselves."""
    sig = plans.sig
    return (*plans.device_key(q), sig(q), sig(k_cache), sig(v_cache),
            sig(call.cache_seqlens), sig(call.leftpad), sig(call.batch_idx),
            sig(call.block_table), call.capacity, call.seqlen_new, call.page_size,
            call.num_splits, params.softmax_scale, params.softcap, params.window_left,
            params.window_right, sig(params.alibi_slopes))


def _inputs(q, k_cache, v_cache, call, params) -> dict:
    """The call's own tensors by name (None: absent; the launch stands in ``cache_seqlens`` for
    an absent index tensor and ``lse`` for absent slopes: never read, the kernels' flags say
    so, only a valid pointer)."""
    return {"q": q, "k": k_cache, "v": v_cache, "seqlens": call.cache_seqlens,
            "leftpad": call.leftpad, "batch_idx": call.batch_idx,
            "block_table": call.block_table, "slopes": params.alibi_slopes}


def decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, call,
           params) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of ``q`` ``(b, sq, hq, d)`` over the valid cache slots of each sequence (the
    cache already holds the appended tokens). Returns out ``(b, sq, hq, dv)`` in q's dtype and
    lse float32 ``(b, hq, sq)``.

    With launch plans on (:mod:`flashtile.kernels.plans`, the default), a call whose
    signature (:func:`_plan_key`) was seen before skips the argument building and Triton's
    argument binding: it allocates the outputs and relaunches the recorded kernels with this
    call's tensors."""
    record = None
    tma = use_tma(q, k_cache, v_cache)
    if not tma and plans.enabled():                # (TMA descriptors are made per call)
        key = _plan_key(q, k_cache, v_cache, call, params)
        plan = _PLANS.get(key)
        if plan is not None:
            return plan.replay(_inputs(q, k_cache, v_cache, call, params), q.device)
        record = plans.Recorder()
    batch, seqlen_q, nheads, head_d = q.shape
    nheads_kv, head_dv = k_cache.shape[2], v_cache.shape[3]
    group = nheads // nheads_kv
    rows = group * seqlen_q
    bm = block_m(rows)
    n_mblocks = cdiv(rows, bm)
    splits = resolve_num_splits(call.num_splits, batch, nheads_kv, rows, call.capacity, q.device)
    out = alloc((batch, seqlen_q, nheads, head_dv), q.dtype, q.device)
    lse = alloc((batch, nheads, seqlen_q), torch.float32, q.device)
    if splits > 1:
        o_dst = alloc((batch, splits, seqlen_q, nheads, head_dv), torch.float32, q.device)
        l_dst = alloc((batch, splits, nheads, seqlen_q), torch.float32, q.device)
        o_strides = o_dst.stride()[:4]
        l_strides = l_dst.stride()[:3]
    else:
        o_dst, l_dst = out, lse
        o_strides = (out.stride(0), 0, out.stride(1), out.stride(2))
        l_strides = (lse.stride(0), 0, lse.stride(1))
    slopes = params.alibi_slopes
    stride_slope_b = slopes.stride(0) if slopes is not None and slopes.dim() == 2 else 0
    HEAD_D, HEAD_DV = padded_headdim(head_d), padded_headdim(head_dv)
    score = score_args(params)
    score.pop("HAS_ALIBI")
    k_desc, v_desc = _descriptors(k_cache, v_cache) if tma else (k_cache, v_cache)
    seqlens = call.cache_seqlens
    split_grid = (splits, n_mblocks * nheads_kv, batch)
    split_args = (
        q, k_cache, v_cache, o_dst, l_dst, seqlens, *(
            t if t is not None else seqlens for t in (call.leftpad, call.batch_idx,
                                                       call.block_table)),
        slopes if slopes is not None else lse,
        *q.stride()[:3], *k_cache.stride()[:3], *v_cache.stride()[:3], *o_strides, *l_strides,
        call.block_table.stride(0) if call.block_table is not None else 0, stride_slope_b,
        seqlen_q, call.seqlen_new, group, head_d, head_dv, splits,
        max(params.window_left, 0), max(params.window_right, 0))
    split_kwargs = dict(
        **score, kv_bucket=next_pow2(cdiv(call.capacity, splits)),
        k_desc=k_desc, v_desc=v_desc, slots=k_cache.shape[1],
        BLOCK_M=bm, HEAD_D=HEAD_D, HEAD_DV=HEAD_DV, EVEN_D=HEAD_D == head_d,
        EVEN_DV=HEAD_DV == head_dv, PAGED=call.block_table is not None,
        PAGE_SIZE=max(call.page_size, 1),
        HAS_BATCH_IDX=call.batch_idx is not None, HAS_LEFTPAD=call.leftpad is not None,
        HAS_LEFT=params.window_left >= 0, HAS_RIGHT=params.window_right >= 0,
        HAS_ALIBI=slopes is not None, SPLIT=splits > 1, TMA=tma,
        PRECISION=dot_precision(q.dtype),
    )
    plans.launch(record, _decode_launch, split_grid, split_args, split_kwargs)
    if splits > 1:
        combine_grid = (batch * nheads * seqlen_q, 1, 1)
        combine_args = (o_dst, l_dst, out, lse, *o_dst.stride()[:4], *l_dst.stride()[:3],
                        *out.stride()[:3], *lse.stride()[:2], seqlen_q, nheads, head_dv, splits)
        combine_kwargs = dict(BLOCK_S=combine_block_s(splits, HEAD_DV), HEAD_DV=HEAD_DV,
                              num_warps=4)
        plans.launch(record, _combine_kernel, combine_grid, combine_args, combine_kwargs)
    if record is not None:
        tensors = {**_inputs(q, k_cache, v_cache, call, params), "out": out, "lse": lse,
                   "o_dst": o_dst, "l_dst": l_dst}
        _PLANS.put(key, record.plan(tensors, ("out", "lse", "o_dst", "l_dst") if splits > 1
                                    else ("out", "lse"), ("out", "lse")))
    return out, lse


def kvcache_forward(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, call,
                    params) -> tuple[torch.Tensor, torch.Tensor]:
    """The Triton path of ``flash_attn_with_kvcache``: append (rotated) k/v into the cache,
    rotate q into a new buffer, then split-KV attention (+ combine when split)."""
    from .rotary import append_to_cache, rotate_queries

    if call.k_new is not None:
        append_to_cache(k_cache, v_cache, call)
    if call.has_rotary:
        q = rotate_queries(q, call)
    return decode(q, k_cache, v_cache, call, params)


__all__ = ["decode", "kvcache_forward", "num_splits_heuristic", "resolve_num_splits", "sm_count",
           "use_tma"]
