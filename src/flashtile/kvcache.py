"""KV-cache decoding: ``flash_attn_with_kvcache`` (validation, docstring, dispatch) and a GPU
bandwidth probe for it.

What one call does, in order (nothing is written before every check has passed):

1. append: the new keys (rotated first, when rotary tables are given) and values are written
   IN PLACE into the cache at slots ``cache_seqlens[b] ... cache_seqlens[b] + seqlen_new - 1``
   of sequence ``b`` (through ``cache_batch_idx`` or ``block_table`` when given);
2. the queries are rotated (into a new tensor; ``q`` itself is never modified);
3. attention of the queries over the sequence's valid cache range ``[leftpad[b], end_b)``,
   ``end_b = cache_seqlens[b] + seqlen_new``, read in place (paged caches page by page).

Backends: the Triton path (:mod:`flashtile.kernels.rotary` then :mod:`flashtile.kernels.decode`:
split-KV "flash-decoding" with GQA packing) and the torch path
(:mod:`flashtile.reference.kvcache`), with the same semantics.
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from dataclasses import dataclass
from numbers import Integral
from typing import Optional

import numpy as np
import torch

from . import _validate as V
from .backend import resolve
from .params import AttentionParams

_Q_LAYOUT = "(batch, seqlen_q, nheads, headdim)"
_CACHE_LAYOUT = "(batch_cache, seqlen_cache, nheads_k, headdim)"
_PAGED_LAYOUT = "(num_blocks, page_block_size, nheads_k, headdim)"
_NEW_LAYOUT = "(batch, seqlen_new, nheads_k, headdim)"


@dataclass(frozen=True, eq=False)
class KVCacheCall:
    """Everything about one ``flash_attn_with_kvcache`` call except q, the caches and the
    attention parameters (those travel in :class:`~flashtile.params.AttentionParams`).

    Positions are *slot* indices of a sequence's cache (0 .. capacity - 1). Sequence ``b`` holds
    valid keys in ``[leftpad[b], cache_seqlens[b])`` before the call and in
    ``[leftpad[b], cache_seqlens[b] + seqlen_new)`` after the append.

    Attributes:
        cache_seqlens: int32 ``(batch,)``, filled slots before the append (absolute, i.e. they
            include the left padding).
        capacity: slots per sequence: ``seqlen_cache``, or ``max_blocks_per_seq * page_size``.
        seqlen_new: new tokens appended per sequence (0: no append).
        k_new, v_new: ``(batch, seqlen_new, nheads_k, d | dv)`` or None.
        batch_idx: int32 ``(batch,)``, cache row of each sequence (contiguous caches), or None.
        leftpad: int32 ``(batch,)``, first valid slot of each sequence, or None (= 0).
        block_table: int32 ``(batch, max_blocks_per_seq)``: slot ``p`` of sequence ``b`` lives
            in page ``block_table[b, p // page_size]`` at row ``p % page_size``; or None.
        page_size: rows per page (0 for a contiguous cache).
        rotary_cos, rotary_sin: ``(seqlen_ro, rotary_dim / 2)`` or None.
        rotary_interleaved: rotate pairs ``(2i, 2i+1)`` (True) or halves ``(i, i + rd/2)``.
        rotary_q_steps: query ``i`` is rotated at position ``cache_seqlens + i`` (causal/local)
            instead of ``cache_seqlens`` for every query.
        num_splits: the user's request (0 = heuristic).
    """

    cache_seqlens: torch.Tensor
    capacity: int
    seqlen_new: int = 0
    k_new: Optional[torch.Tensor] = None
    v_new: Optional[torch.Tensor] = None
    batch_idx: Optional[torch.Tensor] = None
    leftpad: Optional[torch.Tensor] = None
    block_table: Optional[torch.Tensor] = None
    page_size: int = 0
    rotary_cos: Optional[torch.Tensor] = None
    rotary_sin: Optional[torch.Tensor] = None
    rotary_interleaved: bool = True
    rotary_q_steps: bool = False
    num_splits: int = 0

    @property
    def paged(self) -> bool:
        return self.block_table is not None

    @property
    def has_rotary(self) -> bool:
        return self.rotary_cos is not None

    @property
    def rotary_dim(self) -> int:
        return 0 if self.rotary_cos is None else 2 * self.rotary_cos.shape[1]


# ----------------------------------------------------------------------------------------------
# Value checks (they read tensor contents: one device->host copy per call)

_value_checks_override: Optional[bool] = None


def set_value_checks(enabled: Optional[bool]) -> None:
    """Turn the checks that read tensor *values* (cache_seqlens against the capacity, block_table
    entries, cache_batch_idx range, rotary table length, ...) on or off for this process;
    ``None`` goes back to ``FLASHTILE_CHECK_VALUES`` (default on).

    They cost one device-to-host copy (a synchronisation) per call. Turn them off only for
    inputs you trust, e.g. in a serving loop: an out-of-range index then reads or writes
    out of bounds. Shapes, dtypes and devices are always checked. The value checks are skipped
    automatically while a CUDA graph is being captured (a synchronisation is illegal there).
    """
    global _value_checks_override
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool or None, got {enabled!r}")
    _value_checks_override = enabled


@contextmanager
def value_checks(enabled: bool):
    """Context manager form of :func:`set_value_checks`."""
    global _value_checks_override
    old = _value_checks_override
    set_value_checks(enabled)
    try:
        yield
    finally:
        _value_checks_override = old


def _value_checks_enabled(device: torch.device) -> bool:
    if _value_checks_override is not None:
        enabled = _value_checks_override
    else:
        enabled = os.environ.get("FLASHTILE_CHECK_VALUES", "1").strip() not in ("0", "")
    if enabled and device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return False
    return enabled


# ----------------------------------------------------------------------------------------------
# The public function

def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None,
                            block_table=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0, rotary_interleaved=True,
                            alibi_slopes=None, num_splits=0, return_softmax_lse=False):
    """Attention of new queries over a KV cache, appending new keys/values first (decoding).

    Inference only (no gradient). If ``k`` and ``v`` are given they are written into the cache
    in place, at slots ``cache_seqlens[b], cache_seqlens[b] + 1, ...`` of every sequence ``b``,
    after rotary embedding of ``k`` when ``rotary_cos``/``rotary_sin`` are given. Then the
    (rotated) queries attend to the sequence's valid cache slots, which now include the new
    tokens. Memory-bound: the cache is read once, in place (paged caches through the block
    table, no gather copy); when ``batch * nheads_k`` cannot fill the GPU the key range is split
    across programs (flash-decoding) and the partial results are merged with the online-softmax
    rule. All query heads of one KV head read each K/V tile together (GQA packing).

    Args:
        q: ``(batch, seqlen_q, nheads, headdim)``, float16 / bfloat16 / float32.
        k_cache, v_cache: ``(batch_cache, seqlen_cache, nheads_k, headdim[_v])`` without
            ``block_table``, or paged ``(num_blocks, page_block_size, nheads_k, headdim[_v])``
            with it (``page_block_size`` a multiple of 16). Same dtype and device as ``q``;
            ``nheads % nheads_k == 0``; ``headdim_v`` may differ from ``headdim`` (<= 256).
            Modified in place when ``k``/``v`` are given.
        k, v: optional new tokens ``(batch, seqlen_new, nheads_k, headdim[_v])`` (both or
            neither).
        rotary_cos, rotary_sin: optional ``(seqlen_ro, rotary_dim / 2)``, same dtype as ``q``
            or float32; ``rotary_dim <= headdim`` (columns past it are not rotated). Need ``k``
            and ``v``. New key ``j`` of sequence ``b`` is rotated at position
            ``cache_seqlens[b] + j`` (its slot index; left padding is counted, as flash-attn
            does). Query ``i`` is rotated at ``cache_seqlens[b] + i`` if ``causal`` or a window
            is set, otherwise every query at ``cache_seqlens[b]``.
        cache_seqlens: int, or int32 ``(batch,)``: slots already filled in each sequence,
            counted from slot 0 (including any left padding). None: the whole cache
            (``seqlen_cache`` slots; nothing can then be appended).
        cache_batch_idx: optional int32 ``(batch,)``: sequence ``b`` uses cache row
            ``cache_batch_idx[b]`` (contiguous caches only; the rows must be distinct when
            appending). Without it sequence ``b`` uses row ``b`` (``batch_cache >= batch``).
        cache_leftpad: optional int32 ``(batch,)``: the cache of sequence ``b`` starts at slot
            ``cache_leftpad[b] <= cache_seqlens[b]``; earlier slots are ignored.
        block_table: optional int32 ``(batch, max_blocks_per_seq)``: slot ``p`` of sequence
            ``b`` lives in page ``block_table[b, p // page_block_size]``, row
            ``p % page_block_size``. Entries of pages a call does not touch are not read.
        softmax_scale: defaults to ``1 / sqrt(headdim)``.
        causal: causal mask aligned to the bottom-right corner of each sequence: with
            ``n = cache_seqlens + seqlen_new - leftpad`` valid keys, query ``i`` sees valid key
            ``j`` (counted from the first valid slot) iff ``j <= i + n - seqlen_q``::

                seqlen_q=2, 5 valid keys          seqlen_q=3, 2 valid keys
                  1 1 1 1 0                         0 0   <- sees no key:
                  1 1 1 1 1                         1 0      output 0, lse -inf
                                                    1 1

        window_size: ``(left, right)``: query ``i`` sees keys in
            ``[i + n - seqlen_q - left, i + n - seqlen_q + right]``; -1 = unbounded.
        softcap: if > 0, ``score = softcap * tanh(score / softcap)``.
        rotary_interleaved: True: rotate pairs of adjacent columns ``(2i, 2i+1)`` (GPT-J);
            False: rotate column ``i`` with ``i + rotary_dim / 2`` (GPT-NeoX).
        alibi_slopes: float32 ``(nheads,)`` or ``(batch, nheads)``; adds
            ``-slope * |i + n - seqlen_q - j|``.
        num_splits: programs per (sequence, KV head) along the key range. 0: chosen from
            ``batch * nheads_k`` against the GPU's SM count and the cache length; 1: no split
            (no merge pass). Capped at 128 and at the number of key tiles.
        return_softmax_lse: also return the log-sum-exp.

    Returns:
        ``out`` ``(batch, seqlen_q, nheads, headdim_v)`` in q's dtype, and with
        ``return_softmax_lse=True`` the pair ``(out, softmax_lse)``, ``softmax_lse`` float32
        ``(batch, nheads, seqlen_q)`` (natural log). Rows that see no key: 0 and ``-inf``.

    Raises:
        TypeError / ValueError naming the argument, before anything is launched or written:
        wrong shapes/dtypes/devices, an append that does not fit (``cache_seqlens +
        seqlen_new > capacity``), block_table entries out of ``[0, num_blocks)``,
        cache_batch_idx out of range, rotary tables too short or of the wrong shape, ...
        (see :func:`set_value_checks` for the checks that read tensor values).

    Example:
        >>> k_cache = torch.zeros(4, 4096, 8, 128, device="cuda", dtype=torch.bfloat16)
        >>> v_cache = torch.zeros_like(k_cache)
        >>> lens = torch.zeros(4, dtype=torch.int32, device="cuda")
        >>> q = torch.randn(4, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
        >>> k_new, v_new = torch.randn(2, 4, 1, 8, 128, device="cuda", dtype=torch.bfloat16)
        >>> out = flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new,
        ...                               cache_seqlens=lens, causal=True)  # (4, 1, 32, 128)
        >>> lens += 1                                                     # the caller's job
    """
    params, call, backend = _kvcache_args(
        q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
        cache_leftpad, block_table, softmax_scale, causal, window_size, softcap,
        rotary_interleaved, alibi_slopes, num_splits, return_softmax_lse)
    if _value_checks_enabled(q.device):
        check_values(q, k_cache, call)
    with torch.no_grad():
        if backend == "triton":
            from .kernels.decode import kvcache_forward
        else:
            from .reference.kvcache import kvcache_forward
        out, lse = kvcache_forward(q, k_cache, v_cache, call, params)
    return (out, lse) if return_softmax_lse else out


# ----------------------------------------------------------------------------------------------
# Validation: shapes, dtypes, devices (no synchronisation)

def _index_tensor(name: str, x, shape: tuple, layout: str, device: torch.device) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be an int32 tensor of shape {layout}, got {type(x).__name__}")
    if x.dtype != torch.int32:
        raise TypeError(f"{name} must be int32, got {x.dtype}; use {name}.to(torch.int32)")
    if tuple(x.shape) != shape:
        raise ValueError(f"{name} must have shape {layout} = {shape}, got {tuple(x.shape)}")
    if x.device != device:
        raise ValueError(f"{name} must be on {device} like q, got {x.device}; move it with "
                         f"{name}.to(q.device)")
    if x.stride(-1) != 1:
        x = x.contiguous()
    return x


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _kvcache_args(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens,
                  cache_batch_idx, cache_leftpad, block_table, softmax_scale, causal, window_size,
                  softcap, rotary_interleaved, alibi_slopes, num_splits, return_softmax_lse):
    """Validate every argument that can be checked without reading tensor values and build
    ``(AttentionParams, KVCacheCall, backend)``."""
    paged = block_table is not None
    cache_layout = _PAGED_LAYOUT if paged else _CACHE_LAYOUT
    V.check_tensor("q", q, 4, _Q_LAYOUT)
    V.check_tensor("k_cache", k_cache, 4, cache_layout)
    V.check_tensor("v_cache", v_cache, 4, cache_layout.replace("headdim", "headdim_v"))
    if (k is None) != (v is None):
        raise ValueError("k and v must be given together (the new keys and values to append), "
                         f"got k={'None' if k is None else 'a tensor'}, "
                         f"v={'None' if v is None else 'a tensor'}")
    tensors = [("q", q), ("k_cache", k_cache), ("v_cache", v_cache)]
    if k is not None:
        V.check_tensor("k", k, 4, _NEW_LAYOUT)
        V.check_tensor("v", v, 4, _NEW_LAYOUT.replace("headdim", "headdim_v"))
        tensors += [("k", k), ("v", v)]
    V.check_same(tuple(n for n, _ in tensors), tuple(t for _, t in tensors))
    device = q.device

    batch, seqlen_q, nheads, head_d = q.shape
    rows_or_blocks, slots, nheads_k, cache_d = k_cache.shape
    if tuple(v_cache.shape[:3]) != (rows_or_blocks, slots, nheads_k):
        raise ValueError(f"k_cache and v_cache must agree in all but the last dimension "
                         f"{cache_layout}, got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    head_dv = v_cache.shape[3]
    if cache_d != head_d:
        raise ValueError(f"q and k_cache must have the same head dim, got {head_d} and {cache_d}")
    for name, dim in (("q/k_cache", head_d), ("v_cache", head_dv)):
        if dim > V.MAX_HEADDIM:
            raise ValueError(f"{name} head dim must be at most {V.MAX_HEADDIM}, got {dim}")
    if nheads % nheads_k != 0:
        raise ValueError(f"the number of query heads ({nheads}) must be a multiple of the number "
                         f"of key/value heads in the cache ({nheads_k}) for GQA/MQA")
    if k is not None:
        want_k = (batch, k.shape[1], nheads_k, head_d)
        want_v = (batch, k.shape[1], nheads_k, head_dv)
        if tuple(k.shape) != want_k:
            raise ValueError(f"k must have shape {_NEW_LAYOUT} = {want_k} (batch and heads of q "
                             f"and the cache), got {tuple(k.shape)}")
        if tuple(v.shape) != want_v:
            raise ValueError(f"v must have shape {_NEW_LAYOUT.replace('headdim', 'headdim_v')} = "
                             f"{want_v}, got {tuple(v.shape)}")
    seqlen_new = 0 if k is None else k.shape[1]

    # Where the sequences live.
    page_size = 0
    if paged:
        if cache_batch_idx is not None:
            raise ValueError("cache_batch_idx cannot be combined with block_table: the block table "
                             "already maps each sequence to its pages; pass "
                             "block_table[cache_batch_idx] instead")
        if not isinstance(block_table, torch.Tensor):
            raise TypeError("block_table must be an int32 tensor of shape (batch, "
                            f"max_blocks_per_seq), got {type(block_table).__name__}")
        if block_table.dim() != 2:
            raise ValueError("block_table must have shape (batch, max_blocks_per_seq), got "
                             f"{tuple(block_table.shape)}")
        block_table = _index_tensor("block_table", block_table, (batch, block_table.shape[1]),
                                    "(batch, max_blocks_per_seq)", device)
        page_size = slots
        if page_size % 16 != 0:
            raise ValueError(f"page_block_size (k_cache.shape[1] with block_table) must be a "
                             f"multiple of 16, got {page_size}")
        capacity = block_table.shape[1] * page_size
    else:
        capacity = slots
        if cache_batch_idx is not None:
            cache_batch_idx = _index_tensor("cache_batch_idx", cache_batch_idx, (batch,),
                                            "(batch,)", device)
        elif rows_or_blocks < batch:
            raise ValueError(f"k_cache has {rows_or_blocks} rows (batch_cache) but q has batch "
                             f"{batch}; give the cache at least batch rows or pass "
                             "cache_batch_idx")

    # Sequence lengths.
    if cache_seqlens is None:
        if k is not None:
            raise ValueError("cache_seqlens is required when k/v are appended: it says where the "
                             "new tokens go (None would count the whole cache as filled)")
        cache_seqlens = capacity
    if isinstance(cache_seqlens, torch.Tensor):
        seqlens = _index_tensor("cache_seqlens", cache_seqlens, (batch,), "(batch,)", device)
    else:
        n = _check_int("cache_seqlens", cache_seqlens, 0)
        if n + seqlen_new > capacity:
            raise ValueError(_too_small_message(n, seqlen_new, capacity, paged))
        seqlens = torch.full((batch,), n, dtype=torch.int32, device=device)
    if cache_leftpad is not None:
        cache_leftpad = _index_tensor("cache_leftpad", cache_leftpad, (batch,), "(batch,)", device)

    # Attention parameters (same rules as flash_attn_func).
    scale = V.check_scale("softmax_scale", softmax_scale)
    V.check_bool("causal", causal)
    left, right = V.check_window(window_size)
    if causal:
        right = 0 if right < 0 else min(right, 0)
    params = AttentionParams(
        softmax_scale=scale if scale is not None else 1.0 / math.sqrt(head_d),
        window_left=left, window_right=right, bottom_right=True, causal=causal,
        softcap=V.check_softcap(softcap),
        alibi_slopes=V.check_alibi(alibi_slopes, batch, nheads, device))

    # Rotary tables.
    V.check_bool("rotary_interleaved", rotary_interleaved)
    if (rotary_cos is None) != (rotary_sin is None):
        raise ValueError("rotary_cos and rotary_sin must be given together")
    if rotary_cos is not None:
        if k is None:
            raise ValueError("rotary_cos/rotary_sin need k and v: rotary embedding is applied to "
                             "the new keys as they are appended (and to q); pass k and v, or "
                             "rotate q yourself")
        for name, t in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)):
            V.check_tensor(name, t, 2, "(seqlen_ro, rotary_dim / 2)")
            if t.dtype not in (q.dtype, torch.float32):
                raise TypeError(f"{name} must have q's dtype ({q.dtype}) or float32, got "
                                f"{t.dtype}; cast it with .to(q.dtype)")
            if t.device != device:
                raise ValueError(f"{name} must be on {device} like q, got {t.device}")
        if rotary_cos.shape != rotary_sin.shape or rotary_cos.dtype != rotary_sin.dtype:
            raise ValueError(f"rotary_cos and rotary_sin must have the same shape and dtype, got "
                             f"{tuple(rotary_cos.shape)} {rotary_cos.dtype} and "
                             f"{tuple(rotary_sin.shape)} {rotary_sin.dtype}")
        rotary_dim = 2 * rotary_cos.shape[1]
        if rotary_dim > head_d:
            raise ValueError(f"rotary_cos/rotary_sin have {rotary_cos.shape[1]} columns, i.e. "
                             f"rotary_dim = {rotary_dim} > headdim = {head_d}; the tables must be "
                             f"(seqlen_ro, rotary_dim / 2) with rotary_dim <= headdim")

    num_splits = _check_int("num_splits", num_splits, 0)
    V.check_bool("return_softmax_lse", return_softmax_lse)
    backend = resolve(device)
    call = KVCacheCall(
        cache_seqlens=seqlens, capacity=capacity, seqlen_new=seqlen_new, k_new=k, v_new=v,
        batch_idx=cache_batch_idx, leftpad=cache_leftpad, block_table=block_table,
        page_size=page_size, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
        rotary_interleaved=rotary_interleaved,
        rotary_q_steps=bool(causal or params.has_window), num_splits=num_splits)
    return params, call, backend


def _too_small_message(seqlen: int, seqlen_new: int, capacity: int, paged: bool) -> str:
    where = ("max_blocks_per_seq * page_block_size" if paged else "seqlen_cache")
    return (f"the cache is too small for the append: cache_seqlens ({seqlen}) + seqlen_new "
            f"({seqlen_new}) = {seqlen + seqlen_new} > capacity ({where} = {capacity}); "
            "allocate a longer cache (or more blocks per sequence), or evict tokens first")


# ----------------------------------------------------------------------------------------------
# Validation: values (one device->host copy)

def _to_host(*tensors: Optional[torch.Tensor]) -> list[Optional[np.ndarray]]:
    """The int32 index tensors as int64 numpy arrays, in one device->host copy (one
    synchronisation, two launches) however many there are."""
    present = [t for t in tensors if t is not None]
    flat = torch.cat([t.reshape(-1) for t in present]) if len(present) > 1 else present[0]
    host = flat.reshape(-1).cpu().numpy().astype(np.int64)
    out, at = [], 0
    for t in tensors:
        if t is None:
            out.append(None)
            continue
        out.append(host[at:at + t.numel()].reshape(t.shape))
        at += t.numel()
    return out


def check_values(q: torch.Tensor, k_cache: torch.Tensor, call: KVCacheCall) -> None:
    """Checks that read index tensors. The index tensors are copied to the host at once and
    checked there with numpy: one synchronisation, and no chain of small device kernels (each
    costing a launch) in the decoding step."""
    batch, seqlen_q = q.shape[:2]
    seqlens, leftpad, batch_idx, table = _to_host(call.cache_seqlens, call.leftpad,
                                                  call.batch_idx, call.block_table)
    end = seqlens + call.seqlen_new                                        # (batch,)
    start = leftpad if leftpad is not None else np.zeros_like(seqlens)

    def first(bad: np.ndarray) -> int:
        return int(np.flatnonzero(bad)[0])

    bad_len = seqlens < 0
    if bad_len.any():
        raise ValueError(f"cache_seqlens must be >= 0, got {int(seqlens[first(bad_len)])} for "
                         f"sequence {first(bad_len)}")
    over = end > call.capacity
    if over.any():
        raise ValueError(f"sequence {first(over)}: " + _too_small_message(
            int(seqlens[first(over)]), call.seqlen_new, call.capacity, call.paged))
    if leftpad is not None:
        bad_pad = (start < 0) | (start > seqlens)
        if bad_pad.any():
            i = first(bad_pad)
            raise ValueError(
                f"cache_leftpad must satisfy 0 <= cache_leftpad[b] <= cache_seqlens[b], got "
                f"cache_leftpad[{i}] = {int(start[i])} with cache_seqlens = {int(seqlens[i])}")
    if batch_idx is not None:
        rows = k_cache.shape[0]
        bad_idx = (batch_idx < 0) | (batch_idx >= rows)
        if bad_idx.any():
            i = first(bad_idx)
            raise ValueError(
                f"cache_batch_idx[{i}] = {int(batch_idx[i])} is out of range: the cache has "
                f"{rows} rows (batch_cache); entries must be in [0, {rows})")
        if call.seqlen_new > 0 and batch > 1:
            srt = np.sort(batch_idx)
            dup = srt[1:] == srt[:-1]
            if dup.any():
                raise ValueError(
                    f"cache_batch_idx has a repeated row ({int(srt[1:][first(dup)])}) while k/v "
                    "are appended: two sequences would write the same cache slots; use distinct "
                    "rows")
    if table is not None:                                                  # (batch, max_blocks)
        page = call.page_size
        V.check_pages_in_range(table, start, end, page, k_cache.shape[0],
                               "from cache_leftpad // page_block_size to the last slot after "
                               "the append")
        if call.seqlen_new > 0:
            slot = seqlens[:, None] + np.arange(call.seqlen_new)[None, :]
            col = np.clip(slot // page, 0, table.shape[1] - 1)
            phys = np.sort((np.take_along_axis(table, col, 1) * page + slot % page).ravel())
            dup_slot = phys[1:] == phys[:-1]
            if dup_slot.any():
                raise ValueError(
                    "block_table maps two appended tokens to the same page row (page "
                    f"{int(phys[1:][first(dup_slot)]) // page}): sequences that append must own "
                    "the pages they write; give each sequence its own page for new tokens")
    if call.rotary_cos is not None:
        steps = max(call.seqlen_new, seqlen_q if call.rotary_q_steps else 1)
        need = seqlens + steps
        seqlen_ro = call.rotary_cos.shape[0]
        short = need > seqlen_ro
        if short.any():
            i = first(short)
            span = "max(seqlen_new, seqlen_q)" if call.rotary_q_steps else "seqlen_new"
            raise ValueError(
                f"rotary_cos/rotary_sin have {seqlen_ro} rows but sequence {i} needs positions "
                f"up to {int(need[i]) - 1} (cache_seqlens + {span} - 1); use tables with at "
                f"least max(cache_seqlens) + {span} = {int(need.max())} rows")


# ----------------------------------------------------------------------------------------------
# Benchmark helper (GPU only)

def decode_bandwidth(batch: int, cache_len: int, hq: int = 32, hkv: int = 8, d: int = 128,
                     dtype: torch.dtype = torch.bfloat16, paged_block: Optional[int] = None, *,
                     num_splits: int = 0, checked: bool = False, cuda_graph: bool = False,
                     device: str = "cuda") -> dict:
    """Effective decoding bandwidth: bytes of K and V read / median time.

    CUDA-graph replays (device time) are timed with a cold, clean L2
    (:func:`flashtile.bench.timing.cold_clean_ms`: each call after a 256 MB read flush):
    ``do_bench``'s own flush (a 256 MB write) makes every call also write back up to the L2's
    size of dirty lines, ~15 us on the H200. Eager calls are timed by ``do_bench`` (they are
    host-bound at small sizes, and a longer flush would hide part of the host's work). The
    do_bench times are always reported too (``ms_dobench``/``gbps_dobench``).

    One query token per sequence (``q`` ``(batch, 1, hq, d)``) against full caches of
    ``cache_len`` tokens (contiguous, or paged with ``paged_block`` rows per page and the pages
    of each sequence scattered at random). The same bytes ``2 * batch * cache_len * hkv * d *
    itemsize`` are credited to every provider:

    - ``flashtile``: :func:`flash_attn_with_kvcache` (``num_splits`` as given; value checks off
      unless ``checked=True``, since they synchronise with the host every call);
    - ``sdpa_gqa``: ``F.scaled_dot_product_attention(q, k, v, enable_gqa=True)`` on
      ``(batch, heads, seqlen, d)`` contiguous tensors;
    - ``sdpa_expanded``: the same with K/V expanded to ``hq`` heads beforehand (the expansion is
      not timed; SDPA then reads ``hq / hkv`` times the bytes it is credited with).

    ``cuda_graph=True`` times every provider as a replayed CUDA graph (no CPU launch overhead).

    Returns:
        dict with ``gbps`` and ``ms`` per provider (and the same after do_bench's flush:
        ``gbps_dobench``, ``ms_dobench``), ``bytes``, ``num_splits`` (the split count the
        heuristic or the argument gave) and the case.
    """
    import torch.nn.functional as F
    from triton.testing import do_bench

    from .bench.timing import capture_graph, cold_clean_ms
    from .kernels.decode import resolve_num_splits

    if not torch.cuda.is_available():
        raise RuntimeError("decode_bandwidth needs a CUDA GPU")
    gen = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(batch, 1, hq, d, device=device, dtype=dtype, generator=gen)
    capacity = -(-cache_len // paged_block) * paged_block if paged_block else cache_len
    seqlens = torch.full((batch,), cache_len, dtype=torch.int32, device=device)
    if paged_block:
        per_seq = -(-cache_len // paged_block)
        num_blocks = batch * per_seq
        k_cache = torch.randn(num_blocks, paged_block, hkv, d, device=device, dtype=dtype,
                              generator=gen)
        block_table = torch.randperm(num_blocks, device=device, generator=gen).to(torch.int32)
        block_table = block_table.view(batch, per_seq)
    else:
        k_cache = torch.randn(batch, cache_len, hkv, d, device=device, dtype=dtype, generator=gen)
        block_table = None
    v_cache = torch.randn(k_cache.shape, device=device, dtype=dtype, generator=gen)

    def flashtile_call():
        return flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens,
                                       block_table=block_table, num_splits=num_splits)

    def logical(cache):                       # the same tokens as (b, hkv, S, d), contiguous
        if paged_block:
            cache = cache[block_table.long().flatten()].view(batch, -1, hkv, d)[:, :cache_len]
        return cache.transpose(1, 2).contiguous()

    qs = q.transpose(1, 2).contiguous()                                    # (b, hq, 1, d)
    ks, vs = logical(k_cache), logical(v_cache)                            # (b, hkv, S, d)
    ke = ks.repeat_interleave(hq // hkv, dim=1)                            # (b, hq, S, d)
    ve = vs.repeat_interleave(hq // hkv, dim=1)
    providers = {
        "flashtile": flashtile_call,
        "sdpa_gqa": lambda: F.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True),
        "sdpa_expanded": lambda: F.scaled_dot_product_attention(qs, ke, ve),
    }
    nbytes = 2 * batch * cache_len * hkv * d * k_cache.element_size()
    result = {"case": dict(batch=batch, cache_len=cache_len, hq=hq, hkv=hkv, d=d,
                           dtype=str(dtype).split(".")[-1], paged_block=paged_block,
                           cuda_graph=cuda_graph, checked=checked),
              "bytes": nbytes, "ms": {}, "gbps": {}, "ms_dobench": {}, "gbps_dobench": {},
              "num_splits": resolve_num_splits(num_splits, batch, hkv, hq // hkv, capacity,
                                               q.device)}
    with value_checks(checked):
        for name, fn in providers.items():
            try:
                fn()
                torch.cuda.synchronize()
                if cuda_graph:
                    with value_checks(False):
                        fn = capture_graph(fn)[0].replay
                ms_dobench = do_bench(fn, return_mode="median")
                # Eager calls keep do_bench's time: the read flush's longer GPU time would hide
                # part of the host's launch work (seen: 1,048 vs 138 GB/s at b1 L4k eager).
                ms = cold_clean_ms(fn) if cuda_graph else ms_dobench
            except Exception as err:  # pragma: no cover - a provider missing on this torch
                for key in ("ms", "gbps", "ms_dobench", "gbps_dobench"):
                    result[key][name] = None
                result.setdefault("errors", {})[name] = repr(err)
                continue
            result["ms"][name], result["ms_dobench"][name] = ms, ms_dobench
            result["gbps"][name] = nbytes / (ms * 1e-3) / 1e9
            result["gbps_dobench"][name] = nbytes / (ms_dobench * 1e-3) / 1e9
    return result


__all__ = ["KVCacheCall", "check_values", "decode_bandwidth", "flash_attn_with_kvcache",
           "set_value_checks", "value_checks"]
