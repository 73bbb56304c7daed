"""Varlen on the torch path: packed sequences ``(total, nheads, headdim)`` with ``cu_seqlens``.

Each sequence runs through :mod:`flashtile.reference.tiled` on its own slice (views, no copies),
with the dropout counters of sequence ``b`` starting at
``offset + b * dropout_stride_b(nheads, max_sq, max_sk)`` exactly as in the kernels, so both
backends drop the same positions.
"""

from __future__ import annotations

import torch

from ..params import AttentionParams
from . import tiled
from .philox import dropout_stride_b


def _sequences(params: AttentionParams, nheads: int):
    """``(b, q_slice, k_slice, params_b)`` for each packed sequence."""
    cu_q = params.cu_seqlens_q.tolist()
    cu_k = params.cu_seqlens_k.tolist()
    stride = dropout_stride_b(nheads, params.max_seqlen_q, params.max_seqlen_k)
    slopes = params.alibi_slopes
    for b in range(len(cu_q) - 1):
        params_b = params.with_(
            cu_seqlens_q=None, cu_seqlens_k=None, block_table=None,
            offset=params.offset + b * stride,
            alibi_slopes=slopes[b] if slopes is not None and slopes.dim() == 2 else slopes)
        yield b, slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1]), params_b


def sequence_kv(k, v, params: AttentionParams, b: int, ks: slice):
    """Keys and values of sequence ``b`` as ``(len, nheads_k, d)``: a slice of the packed k/v, or,
    with ``params.block_table``, its pages of ``(num_blocks, page, nheads_k, d)`` k/v gathered in
    order (the torch path may copy; the kernels read the pages in place)."""
    if params.block_table is None:
        return k[ks], v[ks]
    n, page = ks.stop - ks.start, k.shape[1]
    pages = params.block_table[b, :-(-n // page)].long()
    return (k[pages].reshape(-1, *k.shape[2:])[:n], v[pages].reshape(-1, *v.shape[2:])[:n])


def forward(q, k, v, params: AttentionParams):
    """q ``(total_q, hq, d)``, k ``(total_k, hkv, d)``, v ``(total_k, hkv, dv)`` ->
    out ``(total_q, hq, dv)``, lse float32 ``(hq, total_q)``."""
    nheads = q.shape[1]
    out = torch.zeros(q.shape[0], nheads, v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.full((nheads, q.shape[0]), float("-inf"), dtype=torch.float32, device=q.device)
    for b, qs, ks, params_b in _sequences(params, nheads):
        if qs.stop == qs.start or ks.stop == ks.start:
            continue                             # no rows, or rows that see no key: 0 / -inf
        kb, vb = sequence_kv(k, v, params, b, ks)
        o, l = tiled.forward(q[qs].unsqueeze(0), kb.unsqueeze(0), vb.unsqueeze(0), params_b)
        out[qs] = o[0]
        lse[:, qs] = l[0]
    return out, lse


def backward(dout, q, k, v, out, lse, params: AttentionParams):
    """Gradients shaped like ``(q, k, v)``; sequences without keys get zero gradients."""
    nheads = q.shape[1]
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for _, qs, ks, params_b in _sequences(params, nheads):
        if qs.stop == qs.start or ks.stop == ks.start:
            continue
        g = tiled.backward(dout[qs].unsqueeze(0), q[qs].unsqueeze(0), k[ks].unsqueeze(0),
                           v[ks].unsqueeze(0), out[qs].unsqueeze(0), lse[:, qs].unsqueeze(0),
                           params_b)
        dq[qs], dk[ks], dv[ks] = g[0][0], g[1][0], g[2][0]
    return dq, dk, dv
