"""The materialising reference: ``softmax(mask(mod(scale * Q K^T))) V`` in float64.

Every test, benchmark and example takes its ground truth from here; nobody re-writes it.
It materialises the ``(batch, nheads, seqlen_q, seqlen_k)`` score matrix, so use small shapes.
"""

from __future__ import annotations

import math

import torch

from ..params import AttentionParams


def visible_mask(q_idx: torch.Tensor, kv_idx: torch.Tensor, seqlen_q: int, seqlen_k: int,
                 params: AttentionParams) -> torch.Tensor:
    """Which (query, key) pairs the causal/window band and the sequence ends allow.

    ``q_idx``/``kv_idx`` are integer tensors that broadcast against each other (for a full matrix
    pass ``arange(sq)[:, None]`` and ``arange(sk)[None, :]``). Returns a bool tensor of the
    broadcast shape. See :mod:`flashtile.params` for the rule.
    """
    off = params.diagonal_offset(seqlen_q, seqlen_k)
    keep = (kv_idx < seqlen_k) & (q_idx < seqlen_q)
    if params.window_left >= 0:
        keep = keep & (kv_idx >= q_idx + off - params.window_left)
    if params.window_right >= 0:
        keep = keep & (kv_idx <= q_idx + off + params.window_right)
    return keep


def sum_to_shape(grad: torch.Tensor, shape) -> torch.Tensor:
    """Reduce a ``(b, h, sq, sk)`` gradient to a tensor that broadcast to it from ``shape`` (up
    to 4 dims, right-aligned): sum over the broadcast dimensions, then drop the leading ones."""
    full = (1,) * (4 - len(shape)) + tuple(shape)
    dims = [i for i in range(4) if full[i] == 1 and grad.shape[i] != 1]
    if dims:
        grad = grad.sum(dim=dims, keepdim=True)
    return grad.reshape(shape)


def alibi_bias(slopes: torch.Tensor, batch: int, nheads: int, q_idx: torch.Tensor,
               kv_idx: torch.Tensor, seqlen_q: int, seqlen_k: int) -> torch.Tensor:
    """flash-attn's ALiBi bias ``-slope * |i + sk - sq - j|`` as ``(batch, nheads, *idx_shape)``."""
    dist = (q_idx + seqlen_k - seqlen_q - kv_idx).abs()
    slopes = slopes.reshape(-1 if slopes.dim() == 2 else 1, nheads).expand(batch, nheads)
    return -slopes[:, :, None, None].to(torch.float64) * dist.to(torch.float64)


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        params: AttentionParams | None = None, *,
                        dropout_keep: torch.Tensor | None = None,
                        dtype: torch.dtype = torch.float64,
                        return_probs: bool = False):
    """Materialising attention, computed in ``dtype`` (float64 by default).

    Args:
        q: ``(batch, seqlen_q, nheads_q, headdim)``.
        k: ``(batch, seqlen_k, nheads_kv, headdim)``.
        v: ``(batch, seqlen_k, nheads_kv, headdim_v)``.
        params: what to compute; ``None`` means plain softmax attention with scale 1/sqrt(d).
        dropout_keep: bool ``(batch, nheads_q, seqlen_q, seqlen_k)``, True where the dropout
            kept the probability (e.g. ``S_dmask >= 0`` from ``return_attn_probs=True``).
        dtype: compute dtype. ``float64`` for ground truth; the input dtype to measure what plain
            PyTorch loses in that dtype (the tests' error budget).
        return_probs: also return the ``(batch, nheads_q, seqlen_q, seqlen_k)`` probabilities
            (before dropout).

    Returns:
        ``(out, lse)``: out ``(batch, seqlen_q, nheads_q, headdim_v)`` in ``dtype``; lse float32
        ``(batch, nheads_q, seqlen_q)``, natural log, ``-inf`` for rows that see no key (their
        output is 0). With ``return_probs`` a third element, the probabilities.
    """
    batch, seqlen_q, nheads, headdim = q.shape
    seqlen_k, nheads_kv = k.shape[1], k.shape[2]
    if params is None:
        params = AttentionParams(softmax_scale=1.0 / math.sqrt(headdim))
    group = nheads // nheads_kv
    qf = q.to(dtype).transpose(1, 2)                                   # (b, hq, sq, d)
    kf = k.to(dtype).transpose(1, 2).repeat_interleave(group, dim=1)   # (b, hq, sk, d)
    vf = v.to(dtype).transpose(1, 2).repeat_interleave(group, dim=1)   # (b, hq, sk, dv)
    scores = torch.matmul(qf, kf.transpose(-1, -2)) * params.softmax_scale  # (b, hq, sq, sk)

    dev = q.device
    q_idx = torch.arange(seqlen_q, device=dev)[:, None]
    kv_idx = torch.arange(seqlen_k, device=dev)[None, :]
    if params.softcap > 0:
        scores = params.softcap * torch.tanh(scores / params.softcap)
    if params.alibi_slopes is not None:
        scores = scores + alibi_bias(params.alibi_slopes.to(dev), batch, nheads, q_idx, kv_idx,
                                     seqlen_q, seqlen_k).to(dtype)
    b_idx = torch.arange(batch, device=dev)[:, None, None, None]
    h_idx = torch.arange(nheads, device=dev)[None, :, None, None]
    if params.score_mod is not None:
        scores = params.score_mod(scores, b_idx, h_idx, q_idx[None, None], kv_idx[None, None])
        scores = scores.to(dtype)
    keep = visible_mask(q_idx, kv_idx, seqlen_q, seqlen_k, params)[None, None]
    if params.mask_mod is not None:
        keep = keep & params.mask_mod(b_idx, h_idx, q_idx[None, None], kv_idx[None, None]).bool()
    if params.block_mask is not None:
        keep = keep & params.block_mask.to_dense_mask(seqlen_q, seqlen_k).to(dev)
    if params.attn_bias is not None:
        bias = params.attn_bias
        if bias.dtype == torch.bool:
            keep = keep & bias
        else:
            scores = scores + bias.to(dtype)
    keep = keep.expand_as(scores)
    scores = scores.masked_fill(~keep, float("-inf"))

    lse = torch.logsumexp(scores, dim=-1)                              # (b, hq, sq)
    probs = torch.exp(scores - lse[..., None])
    probs = torch.where(torch.isfinite(lse)[..., None] & keep, probs, torch.zeros_like(probs))
    weights = probs
    if params.dropout_p > 0:
        if dropout_keep is None:
            raise ValueError("attention_reference with dropout_p > 0 needs dropout_keep "
                             "(e.g. S_dmask >= 0 from return_attn_probs=True)")
        weights = probs * dropout_keep.to(dtype) / (1.0 - params.dropout_p)
    out = torch.matmul(weights, vf).transpose(1, 2)                    # (b, sq, hq, dv)
    lse = lse.to(torch.float32)
    if return_probs:
        return out, lse, probs
    return out, lse
