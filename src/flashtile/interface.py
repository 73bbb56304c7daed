"""The public functions: validate, document, dispatch.

Nothing here touches pointers or autograd internals; each function checks its inputs, builds one
:class:`~flashtile.params.AttentionParams` and hands it to :mod:`flashtile.autograd`.
"""

from __future__ import annotations

import math

import torch

from . import _validate as V
from .autograd import attention
from .backend import resolve
from .params import AttentionParams
from .reference.dense import attention_reference
from .reference.philox import draw_seed_offset, dropout_keep

_FLASH_LAYOUT = "(batch, seqlen, nheads, headdim)"


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
        dropout_p: dropout probability on the attention weights (0 at evaluation).
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
        deterministic: accepted for compatibility; flashtile's backward has no atomics, so the
            gradients are always bitwise reproducible.
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


def _flash_params(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                  deterministic) -> tuple[AttentionParams, str]:
    """Validate flash-attn style arguments and build the parameters object and the backend."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        V.check_tensor(name, t, 4, _FLASH_LAYOUT)
    V.check_same(("q", "k", "v"), (q, k, v))
    V.check_qkv_shapes(q, k, v, seq_dim=1, head_dim=2, layout=_FLASH_LAYOUT)
    scale = V.check_scale("softmax_scale", softmax_scale)
    V.check_bool("causal", causal)
    V.check_bool("deterministic", deterministic)
    left, right = V.check_window(window_size)
    if causal:
        right = 0 if right < 0 else min(right, 0)
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
    return params, resolve(q.device)


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
