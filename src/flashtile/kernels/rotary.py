"""Rotary embedding and KV-cache append: the first step of ``flash_attn_with_kvcache``.

One program owns one token ``(b, s)`` and ``BLOCK_H`` heads of it (a ``BLOCK_H x HEAD_D`` tile),
rotates the first ``rotary_dim`` columns and writes the row either into the cache (new keys and
values, at slot ``cache_seqlens[b] + s``) or into a fresh buffer (queries).

Notation:

- ``pos``: the rotary position of the token: ``cache_seqlens[b] + s`` (``POS_STEP``), or
  ``cache_seqlens[b]`` for every token (non-causal queries, flash-attn's convention).
- ``half = rotary_dim / 2`` angles per position, ``cos``/``sin`` rows ``(seqlen_ro, half)``.
- Every column ``c < rotary_dim`` has a *partner* column and an angle index ``f``:
  interleaved (GPT-J): partner ``c ^ 1``, ``f = c // 2``; half-split (GPT-NeoX): partner
  ``c +- half``, ``f = c mod half``. Then ``y[c] = x[c] * cos[f] + sign[c] * x[partner] * sin[f]``
  with ``sign = -1`` for the first column of each pair (even / first half) and ``+1`` otherwise.
  Columns ``>= rotary_dim`` are copied.
- Arithmetic is float32 with each product rounded separately (``enable_fp_fusion=False``: no
  FMA), i.e. exactly ``x0 * cos - x1 * sin`` / ``x1 * cos + x0 * sin`` as PyTorch evaluates them
  in float32, then one rounding to the cache dtype.
- Cache slot addressing: contiguous caches ``(rows, seqlen_cache, h, d)`` use row
  ``cache_batch_idx[b]`` (or ``b``); paged caches ``(num_blocks, page_size, h, d)`` use page
  ``block_table[b, slot // page_size]``, row ``slot % page_size``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import alloc, cdiv, next_pow2, padded_headdim

NO_SPECIALIZE = ["seqlen", "nheads", "head_d", "rotary_half", "stride_cos", "stride_sin"]


@triton.jit
def _rotate(x, x_row, offs_d, mask, COS, SIN, pos, stride_cos, stride_sin, rotary_half,
            INTERLEAVED: tl.constexpr):
    """Rotate the columns ``< 2 * rotary_half`` of the float32 tile ``x`` (its rows start at the
    pointers ``x_row``); see the module docstring for partner/angle/sign."""
    if INTERLEAVED:
        partner = offs_d ^ 1
        freq = offs_d // 2
        first = (offs_d % 2) == 0
    else:
        first = offs_d < rotary_half
        partner = tl.where(first, offs_d + rotary_half, offs_d - rotary_half)
        freq = tl.where(first, offs_d, offs_d - rotary_half)
    in_rot = offs_d < 2 * rotary_half
    sign = tl.where(first, -1.0, 1.0)
    x_partner = tl.load(x_row[:, None] + partner[None, :], mask=mask & in_rot[None, :],
                        other=0.0).to(tl.float32)
    cos = tl.load(COS + pos * stride_cos + freq, mask=in_rot, other=1.0).to(tl.float32)
    sin = tl.load(SIN + pos * stride_sin + freq, mask=in_rot, other=0.0).to(tl.float32)
    a = x * cos[None, :]
    b = x_partner * sin[None, :]
    return tl.where(in_rot[None, :], a + sign[None, :] * b, x)


@triton.jit(do_not_specialize=NO_SPECIALIZE)
def _rotary_kernel(X, OUT, COS, SIN, SEQLENS, BATCH_IDX, BLOCK_TABLE,
                   stride_xb, stride_xs, stride_xh, stride_ob, stride_os, stride_oh,
                   stride_cos, stride_sin, stride_bt, seqlen, nheads, head_d, rotary_half,
                   page_size,
                   HAS_ROTARY: tl.constexpr, INTERLEAVED: tl.constexpr, POS_STEP: tl.constexpr,
                   TO_CACHE: tl.constexpr, PAGED: tl.constexpr, HAS_BATCH_IDX: tl.constexpr,
                   BLOCK_H: tl.constexpr, HEAD_D: tl.constexpr):
    pid_t = tl.program_id(0)                       # token b * seqlen + s
    pid_h = tl.program_id(1)
    off_b = pid_t // seqlen
    off_s = pid_t % seqlen
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, HEAD_D)
    mask = (offs_h[:, None] < nheads) & (offs_d[None, :] < head_d)

    x_row = (X + off_b.to(tl.int64) * stride_xb + off_s.to(tl.int64) * stride_xs
             + offs_h.to(tl.int64) * stride_xh)                            # (BLOCK_H,) pointers
    x = tl.load(x_row[:, None] + offs_d[None, :], mask=mask, other=0.0).to(tl.float32)
    filled = tl.load(SEQLENS + off_b)                                      # cache_seqlens[b]
    if HAS_ROTARY:
        pos = filled
        if POS_STEP:
            pos = filled + off_s
        x = _rotate(x, x_row, offs_d, mask, COS, SIN, pos.to(tl.int64), stride_cos,
                    stride_sin, rotary_half, INTERLEAVED)

    if TO_CACHE:
        slot = filled + off_s
        if PAGED:
            row = tl.load(BLOCK_TABLE + off_b.to(tl.int64) * stride_bt + slot // page_size)
            slot = slot % page_size
        elif HAS_BATCH_IDX:
            row = tl.load(BATCH_IDX + off_b)
        else:
            row = off_b
        o_row = OUT + row.to(tl.int64) * stride_ob + slot.to(tl.int64) * stride_os
    else:
        o_row = OUT + off_b.to(tl.int64) * stride_ob + off_s.to(tl.int64) * stride_os
    o_ptrs = o_row + offs_h.to(tl.int64)[:, None] * stride_oh + offs_d[None, :]
    tl.store(o_ptrs, x.to(OUT.dtype.element_ty), mask=mask)


def _block_h(nheads: int, head_d: int) -> int:
    """Heads per program: up to 4096 elements per tile."""
    return max(1, min(next_pow2(nheads), 4096 // padded_headdim(head_d)))


def _launch(x, out, out_strides, call, *, rotary: bool, pos_step: bool, to_cache: bool):
    batch, seqlen, nheads, head_d = x.shape
    block_h = _block_h(nheads, head_d)
    grid = (batch * seqlen, cdiv(nheads, block_h))
    seqlens = call.cache_seqlens
    cos = call.rotary_cos if rotary else seqlens
    sin = call.rotary_sin if rotary else seqlens
    table = call.block_table if call.block_table is not None else seqlens
    batch_idx = call.batch_idx if call.batch_idx is not None else seqlens
    _rotary_kernel[grid](
        x, out, cos, sin, seqlens, batch_idx, table,
        *x.stride()[:3], *out_strides,
        cos.stride(0) if rotary else 0, sin.stride(0) if rotary else 0,
        table.stride(0) if call.block_table is not None else 0,
        seqlen, nheads, head_d, call.rotary_dim // 2 if rotary else 0, max(call.page_size, 1),
        HAS_ROTARY=rotary, INTERLEAVED=call.rotary_interleaved, POS_STEP=pos_step,
        TO_CACHE=to_cache, PAGED=call.block_table is not None,
        HAS_BATCH_IDX=call.batch_idx is not None,
        BLOCK_H=block_h, HEAD_D=padded_headdim(head_d),
        num_warps=4, enable_fp_fusion=False,
    )


def append_to_cache(k_cache: torch.Tensor, v_cache: torch.Tensor, call) -> None:
    """Write ``call.k_new`` (rotated when ``call`` has rotary tables) and ``call.v_new`` into the
    caches at slots ``cache_seqlens[b] + s``. Shapes: see :class:`flashtile.kvcache.KVCacheCall`."""
    _launch(call.k_new, k_cache, k_cache.stride()[:3], call, rotary=call.has_rotary,
            pos_step=True, to_cache=True)
    _launch(call.v_new, v_cache, v_cache.stride()[:3], call, rotary=False, pos_step=True,
            to_cache=True)


def rotate_queries(q: torch.Tensor, call) -> torch.Tensor:
    """A rotated copy of ``q`` ``(b, sq, hq, d)`` (q itself is not modified)."""
    out = alloc(q.shape, q.dtype, q.device)
    _launch(q, out, out.stride()[:3], call, rotary=True, pos_step=call.rotary_q_steps,
            to_cache=False)
    return out


__all__ = ["append_to_cache", "rotate_queries"]
