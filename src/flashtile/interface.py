"""The public functions: validate, document, dispatch.

Nothing here touches pointers or autograd internals; each function checks its inputs, builds one
:class:`~flashtile.params.AttentionParams` and hands it to :mod:`flashtile.autograd`.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from . import _validate as V
from .autograd import attention
from .backend import resolve
from .masks import BlockMask
from .params import AttentionParams
from .reference.dense import attention_reference
from .reference.philox import draw_seed_offset, dropout_keep

_FLASH_LAYOUT = "(batch, seqlen, nheads, headdim)"
# Block size of the summary that lets the kernels skip tiles a bool attn_mask hides entirely.
SDPA_MASK_BLOCK = 128


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                    return_attn_probs=False):
    """Exact attention, FlashAttention-2 compatible.

    ``out = softmax(mask(softmax_scale * q @ k^T)) @ v`` computed tile by tile: no
    ``seqlen_q x seqlen_k`` matrix is ever stored, the backward recomputes it from Q, K and the
    saved log-sum-exp.

    Args:
        q: ``(batch, seqlen_q, nheads, headdim)``, float16 / bfloat16 / float32.
        k: ``(batch, seqlen_k, nheads_k, headdim)``; ``nheads % nheads_k == 0`` (GQA/MQA; K/V
            are never expanded in memory).
        v: ``(batch, seqlen_k, nheads_k, headdim_v)``; ``headdim_v`` may differ from ``headdim``.
            All three may be strided views as long as the last dimension is contiguous.
        dropout_p: dropout probability on the attention weights (0 at evaluation), applied at a
            resolution of 2**-16 (0.1 -> 6554/65536; the mask is drawn from 16-bit uniforms and
            kept weights are scaled by exactly 1 / (1 - that rate)).
        softmax_scale: defaults to ``1 / sqrt(headdim)``.
        causal: causal mask, aligned to the bottom-right corner when ``seqlen_q != seqlen_k``::

                seqlen_q=2, seqlen_k=5        seqlen_q=5, seqlen_k=2
                  1 1 1 1 0                     0 0      <- rows that see no key:
                  1 1 1 1 1                     0 0         output 0, lse -inf
                                                0 0
                                                1 0
                                                1 1

        window_size: ``(left, right)``; query ``i`` sees keys ``j`` with
            ``i + seqlen_k - seqlen_q - left <= j <= i + seqlen_k - seqlen_q + right``
            (-1 = unbounded on that side). Tiles outside the band are never loaded.
        softcap: if > 0, ``score = softcap * tanh(score / softcap)`` (after scaling).
        alibi_slopes: float32 ``(nheads,)`` or ``(batch, nheads)``; adds
            ``-slope * |i + seqlen_k - seqlen_q - j|`` to the score.
        deterministic: True always computes dQ in a second pass (bitwise reproducible). False
            (the default) lets the backward sum dQ in the dK/dV pass where that is faster (on
            sm_90, the Gluon dK/dV kernel's TMA reductions), so dQ's last bits may differ run
            to run; ``FLASHTILE_BWD_DQ=two-pass|atomic|auto`` forces either way or the
            default unless this is True.
        return_attn_probs: also return the log-sum-exp and the probabilities (testing aid, it
            materialises ``seqlen_q x seqlen_k``).

    Returns:
        ``out`` ``(batch, seqlen_q, nheads, headdim_v)`` in the input dtype; with
        ``return_attn_probs=True`` the tuple ``(out, softmax_lse, S_dmask)`` where
        ``softmax_lse`` is float32 ``(batch, nheads, seqlen_q)`` (natural log, ``-inf`` for rows
        that see no key) and ``S_dmask`` is ``(batch, nheads, seqlen_q, seqlen_k)``: the
        probabilities (0 where masked), negated where dropout dropped the position.

    Example:
        >>> q = torch.randn(2, 1024, 16, 64, device="cuda", dtype=torch.bfloat16)
        >>> k, v = torch.randn_like(q), torch.randn_like(q)
        >>> out = flash_attn_func(q, k, v, causal=True)       # (2, 1024, 16, 64)
    """
    params, backend = _flash_params(q, k, v, dropout_p, softmax_scale, causal, window_size,
                                    softcap, alibi_slopes, deterministic)
    V.check_bool("return_attn_probs", return_attn_probs)
    out, lse = attention(q, k, v, params, backend)
    if not return_attn_probs:
        return out
    return out, lse, _attn_probs(q, k, v, params)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None):
    """Exact attention over packed sequences of different lengths, FlashAttention-2 compatible.

    Sequence ``b`` is rows ``cu_seqlens_q[b]:cu_seqlens_q[b+1]`` of q and
    ``cu_seqlens_k[b]:cu_seqlens_k[b+1]`` of k/v; no work is spent on padding and sequences
    never see each other. Causal/window alignment is per sequence (bottom-right, see
    :func:`flash_attn_func`).

    Args:
        q: ``(total_q, nheads, headdim)``; k: ``(total_k, nheads_k, headdim)``;
            v: ``(total_k, nheads_k, headdim_v)``.
        cu_seqlens_q, cu_seqlens_k: int32 ``(batch + 1,)``, starting at 0, non-decreasing,
            ending at ``total_q``/``total_k``. Checked on the host, read from the device once
            per tensor and version (the layers of a step sharing them wait once; change them
            with torch ops so that the change is seen).
        max_seqlen_q, max_seqlen_k: ints, at least the longest query/key sequence.
        dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic:
            as in :func:`flash_attn_func` (``alibi_slopes`` ``(nheads,)`` or ``(batch, nheads)``).
        return_attn_probs: also return ``softmax_lse`` float32 ``(nheads, total_q)`` and
            ``S_dmask`` ``(batch, nheads, max_seqlen_q, max_seqlen_k)`` (zero-padded).
        block_table: optional int32 ``(batch, max_blocks_per_seq)``, paged K/V (a prefill over a
            paged cache): k/v are then ``(num_blocks, page_block_size, nheads_k, headdim)``
            with ``page_block_size`` a multiple of 128 (flash-attn asks for 256), key ``j`` of
            sequence ``b`` is row ``j % page_block_size`` of page
            ``block_table[b, j // page_block_size]``, and ``cu_seqlens_k`` gives the key
            lengths. Forward only (as in flash-attn): inputs must not require grad.

    Returns:
        ``out`` ``(total_q, nheads, headdim_v)``, or ``(out, softmax_lse, S_dmask)``.

    Example:
        >>> cu = torch.tensor([0, 100, 350, 400], dtype=torch.int32, device="cuda")
        >>> q = torch.randn(400, 8, 64, device="cuda", dtype=torch.bfloat16)
        >>> out = flash_attn_varlen_func(q, q, q, cu, cu, 250, 250, causal=True)
    """
    layout = "(total, nheads, headdim)"
    paged = block_table is not None
    V.check_tensor("q", q, 3, layout)
    kv_layout = "(num_blocks, page_block_size, nheads_k, headdim)" if paged else layout
    for name, t in (("k", k), ("v", v)):
        V.check_tensor(name, t, 4 if paged else 3, kv_layout)
    V.check_same(("q", "k", "v"), (q, k, v))
    if k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"k and v must agree on all but the head dim, got {tuple(k.shape)} and "
                         f"{tuple(v.shape)} (layout {kv_layout})")
    k4, v4 = (k, v) if paged else (k.unsqueeze(0), v.unsqueeze(0))
    V.check_qkv_shapes(q.unsqueeze(0), k4[:1], v4[:1], seq_dim=1, head_dim=2, layout=layout)
    lengths_q = V.check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, q.shape[0], q.device,
                                   "max_seqlen_q", max_seqlen_q)
    lengths_k = V.check_cu_seqlens("cu_seqlens_k", cu_seqlens_k, None if paged else k.shape[0],
                                   q.device, "max_seqlen_k", max_seqlen_k)
    if cu_seqlens_q.numel() != cu_seqlens_k.numel():
        raise ValueError(f"cu_seqlens_q and cu_seqlens_k must describe the same batch, got "
                         f"{cu_seqlens_q.numel() - 1} and {cu_seqlens_k.numel() - 1} sequences")
    if paged:
        _check_paged_varlen(q, k, v, block_table, lengths_k)
    batch = cu_seqlens_q.numel() - 1
    params, backend = _flash_params(q.unsqueeze(0), k4[:1], v4[:1], dropout_p,
                                    softmax_scale, causal, window_size, softcap, None,
                                    deterministic)
    params = params.with_(
        alibi_slopes=V.check_alibi(alibi_slopes, batch, q.shape[1], q.device),
        cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=max(int(max_seqlen_q), 1), max_seqlen_k=max(int(max_seqlen_k), 1),
        block_table=block_table, seq_order=_heaviest_first(lengths_q, lengths_k, q.device))
    V.check_bool("return_attn_probs", return_attn_probs)
    out, lse = attention(q, k, v, params, backend)
    if not return_attn_probs:
        return out
    probs = torch.zeros(batch, q.shape[1], params.max_seqlen_q, params.max_seqlen_k,
                        dtype=q.dtype, device=q.device)
    from .reference.varlen import _sequences, sequence_kv
    for b, qs, ks, params_b in _sequences(params, q.shape[1]):
        if qs.stop > qs.start and ks.stop > ks.start:
            kb, vb = sequence_kv(k, v, params, b, ks)
            probs[b, :, :qs.stop - qs.start, :ks.stop - ks.start] = _attn_probs(
                q[qs].unsqueeze(0), kb.unsqueeze(0), vb.unsqueeze(0), params_b)[0]
    return out, lse, probs


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """Drop-in for ``torch.nn.functional.scaled_dot_product_attention``, tiled and exact.

    Args:
        query: ``(batch, nheads, seqlen_q, headdim)``; key: ``(batch, nheads_kv, seqlen_k,
            headdim)``; value: ``(batch, nheads_kv, seqlen_k, headdim_v)``.
        attn_mask: bool (True = may attend) or float (added to the scores), any shape that
            broadcasts to ``(batch, nheads, seqlen_q, seqlen_k)``; read through broadcast strides,
            never expanded in memory. A float mask that requires grad gets its gradient.
        dropout_p: dropout on the attention weights (applied whenever > 0, as torch does), at a
            resolution of 2**-16 (see :func:`flash_attn_func`).
        is_causal: causal mask aligned to the *top-left* corner (torch's convention: query ``i``
            sees keys ``j <= i``), unlike flash-attn's bottom-right::

                seqlen_q=2, seqlen_k=5
                  1 0 0 0 0
                  1 1 0 0 0

        scale: defaults to ``1 / sqrt(headdim)``.
        enable_gqa: allow ``nheads`` to be a multiple of ``nheads_kv`` (K/V are not expanded).

    Returns:
        ``(batch, nheads, seqlen_q, headdim_v)``. Unlike torch, a query row whose mask hides every
        key returns 0 rather than NaN.
    """
    params = _remembered(
        _sdpa_signature(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa),
        lambda: _sdpa_params(query, key, value, attn_mask, dropout_p, is_causal, scale,
                             enable_gqa))
    batch, nheads, seqlen_q, _ = query.shape
    seqlen_k = key.shape[2]
    if params.dropout_p > 0:
        seed, offset = draw_seed_offset(query.device)
        params = params.with_(seed=seed, offset=offset)
    backend = resolve(query.device)
    if backend == "triton" and attn_mask is not None and attn_mask.dtype == torch.bool:
        # Masks cost only where they bite: tiles the mask hides entirely are never loaded (the
        # kernels' block-sparse loops); the element mask is still applied in the others.
        params = params.with_(block_mask=BlockMask.from_bool_mask(
            attn_mask, seqlen_q, seqlen_k, BLOCK_SIZE=SDPA_MASK_BLOCK))
    # (b, h, s, d) -> (b, s, h, d): free transposed views, no copies.
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    out, _ = attention(q, k, v, params, backend)
    return out.transpose(1, 2)


def _sdpa_signature(query, key, value, attn_mask, dropout_p, is_causal, scale,
                    enable_gqa) -> tuple | None:
    """:func:`_signature` for :func:`scaled_dot_product_attention`: None with a mask (a tensor's
    values), dropout or arguments of other than their defaults' exact types."""
    if (attn_mask is not None or type(dropout_p) is not float or dropout_p != 0.0
            or type(is_causal) is not bool or type(enable_gqa) is not bool
            or not (scale is None or type(scale) is float)):
        return None
    tensors = _tensor_signature(query, key, value)
    return None if tensors is None else ("sdpa", *tensors, is_causal, scale, enable_gqa)


def _sdpa_params(query, key, value, attn_mask, dropout_p, is_causal, scale,
                 enable_gqa) -> AttentionParams:
    """:func:`scaled_dot_product_attention`'s checks and parameters object (no RNG key yet)."""
    layout = "(batch, nheads, seqlen, headdim)"
    for name, t in (("query", query), ("key", key), ("value", value)):
        V.check_tensor(name, t, 4, layout)
    V.check_same(("query", "key", "value"), (query, key, value))
    V.check_qkv_shapes(query, key, value, seq_dim=2, head_dim=1, layout=layout,
                       gqa_hint="" if enable_gqa else "; also pass enable_gqa=True")
    V.check_bool("is_causal", is_causal)
    V.check_bool("enable_gqa", enable_gqa)
    if query.shape[1] != key.shape[1] and not enable_gqa:
        raise ValueError(f"query has {query.shape[1]} heads but key/value have {key.shape[1]}; "
                         "set enable_gqa=True for grouped-query attention")
    scale = V.check_scale("scale", scale)
    if attn_mask is not None:
        batch, nheads, seqlen_q, _ = query.shape
        V.check_attn_mask(attn_mask, (batch, nheads, seqlen_q, key.shape[2]), query.device)
        if is_causal:
            raise ValueError("pass either attn_mask or is_causal=True, not both (as torch); fold "
                             "the causal mask into attn_mask")
    return AttentionParams(
        softmax_scale=scale if scale is not None else 1.0 / math.sqrt(query.shape[-1]),
        window_right=0 if is_causal else -1, bottom_right=False, causal=is_causal,
        dropout_p=V.check_dropout(dropout_p), attn_bias=attn_mask)


def _heaviest_first(lengths_q: list[int], lengths_k: list[int], device) -> torch.Tensor:
    """Sequences by decreasing work (``len_q * len_k``; the lengths are already on the host):
    the kernels' grid starts the longest programs first, so they do not straggle at the end."""
    return _sequence_order(tuple(lengths_q), tuple(lengths_k), torch.device(device))


@functools.lru_cache(maxsize=64)
def _sequence_order(lengths_q: tuple, lengths_k: tuple, device: torch.device) -> torch.Tensor:
    """:func:`_heaviest_first`'s tensor, made once per batch layout: building it copies from the
    host, which waits for the device. Only the kernels read it."""
    order = sorted(range(len(lengths_q)), key=lambda b: -lengths_q[b] * lengths_k[b])
    return torch.tensor(order, dtype=torch.int32, device=device)


PAGED_VARLEN_PAGE = 128   # page sizes a multiple of this: a kernel tile never straddles pages


def _check_paged_varlen(q, k, v, block_table, lengths_k) -> None:
    """``flash_attn_varlen_func`` with ``block_table``: shapes, page size, forward only, and
    every page a sequence uses inside ``[0, num_blocks)``. Reads the table on the host once
    per tensor version (:func:`flashtile._validate.host_values`, as for ``cu_seqlens``)."""
    if not isinstance(block_table, torch.Tensor) or block_table.dtype != torch.int32:
        raise TypeError("block_table must be an int32 tensor of shape (batch, max_blocks_per_seq), "
                        f"got {getattr(block_table, 'dtype', type(block_table).__name__)}")
    batch = len(lengths_k)
    if block_table.dim() != 2 or block_table.shape[0] != batch:
        raise ValueError(f"block_table must have shape (batch={batch}, max_blocks_per_seq), got "
                         f"{tuple(block_table.shape)}")
    if block_table.device != q.device:
        raise ValueError(f"block_table must be on {q.device} like q, got {block_table.device}")
    num_blocks, page = k.shape[0], k.shape[1]
    if page % PAGED_VARLEN_PAGE != 0:
        raise ValueError(f"page_block_size (k.shape[1]) must be a multiple of {PAGED_VARLEN_PAGE} "
                         f"for paged varlen, got {page}")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise ValueError("flash_attn_varlen_func with block_table is forward only (paged caches "
                         "serve inference); run it under torch.no_grad() or detach the inputs")
    capacity = block_table.shape[1] * page
    for b, n in enumerate(lengths_k):
        if n > capacity:
            raise ValueError(f"sequence {b} has {n} keys but block_table holds "
                             f"{block_table.shape[1]} pages of {page} = {capacity} rows")
    ends = np.array(lengths_k, dtype=np.int64)
    V.check_pages_in_range(np.array(V.host_values(block_table), dtype=np.int64),
                           np.zeros_like(ends), ends, page, num_blocks,
                           "keys 0 .. cu_seqlens_k length")


# The public functions' parameters objects by call signature (:func:`_remembered`). A training
# or serving loop repeats a few signatures; the checks and the frozen dataclass cost ~12 us a
# call on the development CPU alone and ~20 us inside a forward+backward step (session 30), a
# call's largest host cost before the launches.
_PARAMS: dict = {}
MAX_SIGNATURES = 256


def _remembered(key: tuple | None, build) -> AttentionParams:
    """``build()``'s parameters object (immutable, holding no tensor), made once per signature
    ``key``; None: a call whose result depends on more than its signature, built every time."""
    params = _PARAMS.get(key) if key is not None else None
    if params is None:
        params = build()
        if key is not None:
            if len(_PARAMS) >= MAX_SIGNATURES:
                _PARAMS.clear()
            _PARAMS[key] = params
    return params


def _tensor_signature(q, k, v) -> tuple | None:
    """What the checks read of Q, K, V (shapes, last strides, dtypes, devices); None unless all
    three are plain tensors (a subclass may answer differently)."""
    if type(q) is not torch.Tensor or type(k) is not torch.Tensor or type(v) is not torch.Tensor:
        return None
    return (q.shape, k.shape, v.shape, q.stride(-1), k.stride(-1), v.stride(-1), q.dtype,
            k.dtype, v.dtype, q.device, k.device, v.device)


def _signature(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
               deterministic) -> tuple | None:
    """Everything :func:`_flash_params` reads, when that is all its result depends on: plain
    tensors, no ALiBi slopes (a tensor's values), no dropout (a fresh RNG key each call) and the
    arguments' exact default types (so ``1`` and ``True``, equal as keys, never share an
    entry). None: the call takes the full path."""
    if (alibi_slopes is not None or type(dropout_p) is not float or dropout_p != 0.0
            or not (softmax_scale is None or type(softmax_scale) is float)
            or type(causal) is not bool or type(deterministic) is not bool
            or type(softcap) is not float or type(window_size) is not tuple
            or len(window_size) != 2 or type(window_size[0]) is not int
            or type(window_size[1]) is not int):
        return None
    tensors = _tensor_signature(q, k, v)
    if tensors is None:
        return None
    return ("flash", *tensors, softmax_scale, causal, window_size, softcap, deterministic)


def _flash_params(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                  deterministic) -> tuple[AttentionParams, str]:
    """Validate flash-attn style arguments and build the parameters object and the backend.
    A signature that passed before reuses its parameters object (:func:`_remembered`); the
    backend is resolved anew (``set_backend`` may change it)."""
    key = _signature(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                     alibi_slopes, deterministic)
    params = _remembered(key, lambda: _checked_params(q, k, v, dropout_p, softmax_scale, causal,
                                                      window_size, softcap, alibi_slopes,
                                                      deterministic))
    return params, resolve(q.device)


def _checked_params(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                    alibi_slopes, deterministic) -> AttentionParams:
    """:func:`_flash_params`' checks and parameters object, for every call."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        V.check_tensor(name, t, 4, _FLASH_LAYOUT)
    V.check_same(("q", "k", "v"), (q, k, v))
    V.check_qkv_shapes(q, k, v, seq_dim=1, head_dim=2, layout=_FLASH_LAYOUT)
    scale = V.check_scale("softmax_scale", softmax_scale)
    V.check_bool("causal", causal)
    V.check_bool("deterministic", deterministic)
    left, right = V.check_window(window_size)
    if causal:
        right = 0                               # causal is the window (left, 0)
    params = AttentionParams(
        softmax_scale=scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]),
        window_left=left, window_right=right, bottom_right=True, causal=causal,
        softcap=V.check_softcap(softcap),
        alibi_slopes=V.check_alibi(alibi_slopes, q.shape[0], q.shape[2], q.device),
        dropout_p=V.check_dropout(dropout_p), deterministic=deterministic)
    if params.dropout_p > 0:
        # A fresh key per call, drawn from torch's CPU generator: torch.manual_seed reproduces
        # a run, consecutive calls differ, and the backward regenerates the same mask.
        seed, offset = draw_seed_offset(q.device)
        params = params.with_(seed=seed, offset=offset)
    return params


def _attn_probs(q, k, v, params: AttentionParams) -> torch.Tensor:
    """``S_dmask`` for ``return_attn_probs``: the probabilities ``(b, h, sq, sk)`` (0 where
    masked), negated where dropout dropped them (the same Philox draws as the kernels)."""
    batch, seqlen_q, nheads, _ = q.shape
    seqlen_k = k.shape[1]
    with torch.no_grad():
        _, _, probs = attention_reference(q.detach(), k.detach(), v.detach(),
                                          params.with_(dropout_p=0.0), dtype=torch.float32,
                                          return_probs=True)
        if params.dropout_p > 0:
            dev = q.device
            keep = dropout_keep(params, torch.arange(batch, device=dev)[:, None, None, None],
                                torch.arange(nheads, device=dev)[None, :, None, None],
                                torch.arange(seqlen_q, device=dev)[:, None],
                                torch.arange(seqlen_k, device=dev)[None, :],
                                nheads, seqlen_q, seqlen_k)
            probs = torch.where(keep, probs, -probs)
    return probs.to(q.dtype)
