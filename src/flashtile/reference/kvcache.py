"""The torch path of ``flash_attn_with_kvcache``: append, rotary, attention over each sequence's
valid cache slots. The same semantics as the Triton path (:mod:`flashtile.kernels.decode`),
written for reading; it is the CPU backend.

Notation (see :class:`flashtile.kvcache.KVCacheCall`):

- slot ``p`` of sequence ``b``: row ``p`` of cache row ``cache_batch_idx[b]`` (or ``b``), or row
  ``p % page_size`` of page ``block_table[b, p // page_size]``;
- sequence ``b`` attends to slots ``[leftpad[b], cache_seqlens[b] + seqlen_new)``, as one
  contiguous key sequence (so causal/window/ALiBi are those of ``flash_attn_func`` with
  ``seqlen_k`` = the number of valid slots, bottom-right aligned);
- rotary: ``rotate(x, cos, sin, positions)`` with float32 arithmetic, each product rounded
  separately: ``x0 * cos - x1 * sin``, ``x1 * cos + x0 * sin`` (pairs ``(2i, 2i+1)`` when
  interleaved, ``(i, i + rotary_dim/2)`` otherwise), then one rounding to the input dtype.
  The Triton kernel computes exactly this (fused multiply-add disabled), so both paths append
  the same bytes.
"""

from __future__ import annotations

import torch

from ..params import AttentionParams
from . import tiled


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
           interleaved: bool) -> torch.Tensor:
    """Rotary embedding of ``x`` ``(b, s, h, d)`` at integer ``positions`` ``(b, s)``.

    ``cos``/``sin``: ``(seqlen_ro, rotary_dim / 2)``; columns ``>= rotary_dim`` are unchanged.
    Returns a new tensor in ``x.dtype``.
    """
    rotary_dim = 2 * cos.shape[1]
    c = cos.float()[positions][:, :, None, :]                            # (b, s, 1, rd/2)
    s = sin.float()[positions][:, :, None, :]
    xf = x[..., :rotary_dim].float()
    if interleaved:
        x0, x1 = xf[..., 0::2], xf[..., 1::2]                             # (b, s, h, rd/2)
        rotated = torch.stack([x0 * c - x1 * s, x1 * c + x0 * s], dim=-1).flatten(-2)
    else:
        x0, x1 = xf[..., :rotary_dim // 2], xf[..., rotary_dim // 2:]
        rotated = torch.cat([x0 * c - x1 * s, x1 * c + x0 * s], dim=-1)
    return torch.cat([rotated.to(x.dtype), x[..., rotary_dim:]], dim=-1)


def cache_index(call, b, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, rows_in_page)`` such that ``cache[rows, rows_in_page]`` are the given slots of
    sequence(s) ``b`` (an int, or a tensor broadcasting against ``slots``)."""
    if call.block_table is not None:
        pages = call.block_table.long()[b, slots // call.page_size]
        return pages, slots % call.page_size
    if call.batch_idx is not None:
        row = call.batch_idx.long()[b]
    else:
        row = torch.as_tensor(b, device=slots.device)
    return torch.broadcast_to(row, slots.shape), slots


def append(k_cache: torch.Tensor, v_cache: torch.Tensor, call) -> None:
    """Write the (rotated) new keys and the new values at slots ``cache_seqlens[b] + j``."""
    batch, seqlen_new = call.k_new.shape[:2]
    dev = k_cache.device
    slots = call.cache_seqlens.long()[:, None] + torch.arange(seqlen_new, device=dev)  # (b, new)
    k_new = call.k_new
    if call.has_rotary:
        k_new = rotate(k_new, call.rotary_cos, call.rotary_sin, slots, call.rotary_interleaved)
    rows, in_page = cache_index(call, torch.arange(batch, device=dev)[:, None], slots)
    k_cache[rows.flatten(), in_page.flatten()] = k_new.flatten(0, 1)    # (b * new, hkv, d)
    v_cache[rows.flatten(), in_page.flatten()] = call.v_new.flatten(0, 1)


def rotate_queries(q: torch.Tensor, call) -> torch.Tensor:
    """Queries rotated at ``cache_seqlens + i`` (causal/local) or ``cache_seqlens``."""
    batch, seqlen_q = q.shape[:2]
    positions = call.cache_seqlens.long()[:, None].expand(batch, seqlen_q)
    if call.rotary_q_steps:
        positions = positions + torch.arange(seqlen_q, device=q.device)
    return rotate(q, call.rotary_cos, call.rotary_sin, positions, call.rotary_interleaved)


@torch.no_grad()
def kvcache_forward(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, call,
                    params: AttentionParams, chunk_size: int = 128):
    """Append, rotate, attend; returns ``(out (b, sq, hq, dv), lse float32 (b, hq, sq))``.

    One sequence at a time: its valid slots are gathered (a copy, in the cache dtype, for a paged
    cache) and handed to the chunked online-softmax path :func:`flashtile.reference.tiled.forward`.
    """
    batch = q.shape[0]
    if call.k_new is not None:
        append(k_cache, v_cache, call)
    if call.has_rotary:
        q = rotate_queries(q, call)
    ends = (call.cache_seqlens.long() + call.seqlen_new).tolist()
    starts = call.leftpad.tolist() if call.leftpad is not None else [0] * batch
    slopes = params.alibi_slopes
    outs, lses = [], []
    for b in range(batch):
        slots = torch.arange(starts[b], ends[b], device=q.device)
        rows, in_page = cache_index(call, b, slots)
        keys = k_cache[rows, in_page][None]                               # (1, n, hkv, d)
        values = v_cache[rows, in_page][None]                             # (1, n, hkv, dv)
        p = params
        if slopes is not None and slopes.dim() == 2:
            p = params.with_(alibi_slopes=slopes[b:b + 1])
        out, lse = tiled.forward(q[b:b + 1], keys, values, p, chunk_size)
        outs.append(out)
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses)


__all__ = ["append", "cache_index", "kvcache_forward", "rotate", "rotate_queries"]
