"""The exact chunked PyTorch path: online softmax over K/V chunks, recomputing backward.

This is the CPU backend and the readable statement of the algorithm the Triton kernels run.
Only Q, K, V, O and the per-row log-sum-exp ever exist at full size; the score matrix exists one
chunk of keys at a time, so the extra memory is ``O(batch * nheads * seqlen_q * chunk_size)``,
never ``seqlen_q x seqlen_k`` per batch-head. (Q, O and dO are copied once into the rows layout
below, in the compute dtype: O(N) like the inputs. K and V are only ever sliced per chunk.)

Notation:

- ``b, sq, sk``: batch, query and key lengths; ``hq``/``hkv``: query and key-value heads;
  ``g = hq // hkv`` query heads share one KV head (GQA); ``d``/``dv``: QK and V head dims.
- rows: the ``g * sq`` query rows that read one KV head, laid out ``(b, hkv, g * sq, .)``, so one
  matmul against a ``(b, hkv, n, d)`` key chunk serves the whole group without expanding K/V.
  The same memory viewed as ``(b, hq, sq, .)`` ("heads" layout) is what masks and mods see.
- chunk: keys ``[start, end)``, ``n = end - start <= chunk_size``. Only chunks the causal/window
  band lets some query see are visited (:func:`key_chunks`). With ``params.block_mask`` the walk
  follows the mask's block lists instead (query block by query block over the listed key
  blocks; see the block-sparse section at the end).
- ``s``: one chunk's scores after scale, softcap, ALiBi, ``score_mod`` and the float bias,
  ``-inf`` where the band, ``mask_mod`` or the bool bias hide the key.
- ``m``, ``l``: running row max and running row sum of ``exp(s - m)``; ``acc``: the unnormalised
  output. A chunk that raises the max discounts both by ``alpha = exp(m_old - m_new)``.
- ``lse = m + log(l)`` (natural log); rows that see no key keep ``l = 0``: out 0, lse ``-inf``.
- backward: ``P = exp(s - lse)`` recomputed per chunk, ``D = rowsum(dO * O)``,
  ``dV = P^T dO``, ``dP = dO V^T``, ``dS = P * (dP - D)``, ``dQ += dS K * scale``,
  ``dK = dS^T Q * scale``. Dropout multiplies ``P`` by ``Z = keep / (1 - p)`` before ``P V``
  (``l`` uses the undropped ``P``) and is replayed from ``(seed, offset)`` in backward.

References: Milakov & Gimelshein, "Online normalizer calculation for softmax" (2018); Dao et al.,
"FlashAttention" (2022) and "FlashAttention-2" (2023).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..masks import BlockMask
from ..params import AttentionParams
from .dense import alibi_bias, sum_to_shape, visible_mask
from .philox import dropout_keep

_NEG_INF = float("-inf")


@dataclass(frozen=True)
class _Layout:
    """Sizes of one call and the moves between the input layout and the rows layout."""

    batch: int
    seqlen_q: int
    seqlen_k: int
    nheads: int
    nheads_kv: int
    dtype: torch.dtype  # compute dtype: float64 for float64 inputs, float32 otherwise

    @property
    def group(self) -> int:
        return self.nheads // self.nheads_kv

    @property
    def nrows(self) -> int:
        return self.group * self.seqlen_q

    def to_rows(self, x: torch.Tensor) -> torch.Tensor:
        """``(b, sq, hq, e)`` -> ``(b, hkv, g * sq, e)`` in the compute dtype."""
        b, sq, _, e = x.shape
        x = x.to(self.dtype).reshape(b, sq, self.nheads_kv, self.group, e)   # (b, sq, hkv, g, e)
        return x.permute(0, 2, 3, 1, 4).reshape(b, self.nheads_kv, self.nrows, e)

    def from_rows(self, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``(b, hkv, g * sq, e)`` -> ``(b, sq, hq, e)`` in ``dtype``."""
        e = x.shape[-1]
        b, hkv, g, sq = self.batch, self.nheads_kv, self.group, self.seqlen_q
        x = x.reshape(b, hkv, g, sq, e)                                   # (b, hkv, g, sq, e)
        return x.permute(0, 3, 1, 2, 4).reshape(b, sq, self.nheads, e).to(dtype)  # (b, sq, hq, e)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        """Rows layout ``(b, hkv, g * sq, n)`` viewed as ``(b, hq, sq, n)``."""
        return x.view(self.batch, self.nheads, self.seqlen_q, x.shape[-1])

    def rows(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """Anything broadcastable to ``(b, hq, sq, n)`` as rows layout ``(b, hkv, g * sq, n)``."""
        x = x.expand(self.batch, self.nheads, self.seqlen_q, n)
        return x.reshape(self.batch, self.nheads_kv, self.nrows, n)

    def kv_chunk(self, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """Keys or values ``[start, end)`` of ``(b, sk, hkv, e)`` as ``(b, hkv, n, e)``."""
        return x[:, start:end].to(self.dtype).transpose(1, 2)


class _NotABlockMaskError(TypeError, NotImplementedError):
    """``params.block_mask`` is not a :class:`flashtile.masks.BlockMask` (a ``TypeError``; also a
    ``NotImplementedError`` for callers written before the block-sparse path existed)."""


def _layout(q: torch.Tensor, k: torch.Tensor, params: AttentionParams,
            chunk_size: int) -> _Layout:
    if params.block_mask is not None and not isinstance(params.block_mask, BlockMask):
        raise _NotABlockMaskError(
            f"params.block_mask must be a flashtile.masks.BlockMask for block-sparse attention, "
            f"got {type(params.block_mask).__name__}; build it with "
            "flashtile.masks.create_block_mask or BlockMask.from_layout")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    batch, seqlen_q, nheads, _ = q.shape
    seqlen_k, nheads_kv = k.shape[1], k.shape[2]
    if nheads % nheads_kv != 0:
        raise ValueError(f"nheads_q ({nheads}) must be a multiple of nheads_kv ({nheads_kv})")
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    if params.block_mask is not None:
        params.block_mask.check_compatible(batch, nheads, seqlen_q, seqlen_k, q.device,
                                           where="params.block_mask")
    return _Layout(batch, seqlen_q, seqlen_k, nheads, nheads_kv, dtype)


def key_chunks(params: AttentionParams, seqlen_q: int, seqlen_k: int,
               chunk_size: int) -> list[tuple[int, int]]:
    """The key chunks ``[start, end)`` that at least one query row can see.

    The union of the rows' bands ``[i + off - left, i + off + right]`` over ``i < seqlen_q`` is
    the single interval ``[off - left, seqlen_q - 1 + off + right]`` (consecutive rows' bands
    overlap), clipped to ``[0, seqlen_k)``. Chunks start on multiples of ``chunk_size``, like the
    kernels' tiles, and chunks wholly outside the interval are never visited::

        sq=4, sk=10, chunk 3, window (1, 0), bottom-right (off = 6): row i sees [i + 5, i + 6]

                   chunk   0 0 0 | 1 1 1 | 2 2 2 | 3
                   row 0   . . . | . . x | x . . | .
                   row 1   . . . | . . . | x x . | .
                   row 2   . . . | . . . | . x x | .
                   row 3   . . . | . . . | . . x | x

        visited: [3, 6) [6, 9) [9, 10); chunk 0 is never loaded.

    Every visited chunk meets all query rows, so bottom-right causal skips no chunk (its last row
    sees every key); top-left causal with ``sq < sk`` and bounded windows do skip.
    """
    if seqlen_q == 0 or seqlen_k == 0:
        return []
    off = params.diagonal_offset(seqlen_q, seqlen_k)
    first, last = 0, seqlen_k - 1
    if params.window_left >= 0:
        first = max(first, off - params.window_left)
    if params.window_right >= 0:
        last = min(last, seqlen_q - 1 + off + params.window_right)
    if first > last:
        return []
    starts = range(first // chunk_size * chunk_size, last + 1, chunk_size)
    return [(start, min(start + chunk_size, seqlen_k)) for start in starts]


def _attn_bias_chunk(bias: torch.Tensor, start: int, end: int) -> torch.Tensor:
    """The keys ``[start, end)`` of a bias broadcastable to ``(b, hq, sq, sk)``; a view, no copy."""
    bias = bias[(None,) * (4 - bias.dim())]          # (b|1, h|1, sq|1, sk|1)
    return bias if bias.shape[-1] == 1 else bias[..., start:end]


def _chunk_scores(raw: torch.Tensor, params: AttentionParams, lay: _Layout,
                  start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Modified scores and visibility of one key chunk, in the order of ``attention_reference``.

    Args:
        raw: ``(b, hq, sq, n)``, ``softmax_scale * Q K^T`` for keys ``[start, end)``.

    Returns:
        ``(scores, keep)``: scores ``(b, hq, sq, n)`` after softcap, ALiBi, ``score_mod`` and the
        float bias (not yet masked); keep, bool broadcastable to it, True where the key is visible.
    """
    dev = raw.device
    q_idx = torch.arange(lay.seqlen_q, device=dev)[:, None]           # (sq, 1)
    kv_idx = torch.arange(start, end, device=dev)[None, :]            # (1, n), absolute positions
    b_idx = torch.arange(lay.batch, device=dev)[:, None, None, None]  # (b, 1, 1, 1)
    h_idx = torch.arange(lay.nheads, device=dev)[None, :, None, None]  # (1, hq, 1, 1)

    scores = raw
    if params.softcap > 0:
        scores = params.softcap * torch.tanh(scores / params.softcap)
    if params.alibi_slopes is not None:
        scores = scores + alibi_bias(params.alibi_slopes.to(dev), lay.batch, lay.nheads, q_idx,
                                     kv_idx, lay.seqlen_q, lay.seqlen_k).to(lay.dtype)
    if params.score_mod is not None:
        scores = params.score_mod(scores, b_idx, h_idx, q_idx[None, None], kv_idx[None, None])
        scores = scores.to(lay.dtype)
    keep = visible_mask(q_idx, kv_idx, lay.seqlen_q, lay.seqlen_k, params)   # (sq, n)
    if params.mask_mod is not None:
        keep = keep & params.mask_mod(b_idx, h_idx, q_idx[None, None], kv_idx[None, None]).bool()
    if params.attn_bias is not None:
        bias = _attn_bias_chunk(params.attn_bias, start, end)
        if bias.dtype == torch.bool:
            keep = keep & bias
        else:
            scores = scores + bias.to(lay.dtype)
    return scores, keep


def _dropout_scale(params: AttentionParams, lay: _Layout, start: int, end: int,
                   dev: torch.device) -> torch.Tensor:
    """``Z = keep / (1 - p)`` for keys ``[start, end)`` in rows layout ``(b, hkv, g * sq, n)``."""
    keep = dropout_keep(params,
                        torch.arange(lay.batch, device=dev)[:, None, None, None],
                        torch.arange(lay.nheads, device=dev)[None, :, None, None],
                        torch.arange(lay.seqlen_q, device=dev)[:, None],
                        torch.arange(start, end, device=dev)[None, :],
                        lay.nheads, lay.seqlen_q, lay.seqlen_k)       # (b, hq, sq, n)
    return lay.rows(keep.to(lay.dtype) * (1.0 / (1.0 - params.dropout_p)), end - start)


def _online_softmax(qh: torch.Tensor, k: torch.Tensor, v: torch.Tensor | None,
                    params: AttentionParams, lay: _Layout, chunk_size: int):
    """The forward loop over key chunks.

    Args:
        qh: queries in rows layout ``(b, hkv, g * sq, d)``, compute dtype.
        k, v: ``(b, sk, hkv, d)``, ``(b, sk, hkv, dv)`` as given; ``v=None`` computes only the
            row statistics (the float64 backward uses that to recover an exact lse).

    Returns:
        ``(m, l, acc)``: running max and sum ``(b, hkv, g * sq)``, unnormalised output
        ``(b, hkv, g * sq, dv)`` (``None`` without ``v``).
    """
    shape = qh.shape[:-1]
    m = torch.full(shape, _NEG_INF, dtype=lay.dtype, device=qh.device)
    l = torch.zeros(shape, dtype=lay.dtype, device=qh.device)
    acc = None if v is None else qh.new_zeros(*shape, v.shape[-1])
    for start, end in key_chunks(params, lay.seqlen_q, lay.seqlen_k, chunk_size):
        n = end - start
        kc = lay.kv_chunk(k, start, end)                                  # (b, hkv, n, d)
        raw = lay.heads(torch.matmul(qh, kc.transpose(-1, -2))) * params.softmax_scale
        scores, keep = _chunk_scores(raw, params, lay, start, end)        # (b, hq, sq, n)
        s = lay.rows(scores.masked_fill(~keep, _NEG_INF), n)             # (b, hkv, g*sq, n)

        m_new = torch.maximum(m, s.amax(dim=-1))
        # A row that has seen no visible key yet has m_new = -inf; subtracting 0 instead keeps
        # exp(-inf - -inf) = NaN out (p and alpha are then exactly 0, as they should be).
        m_safe = torch.where(m_new == _NEG_INF, torch.zeros_like(m_new), m_new)
        p = torch.exp(s - m_safe[..., None])                              # (b, hkv, g*sq, n)
        alpha = torch.exp(m - m_safe)                                     # discount, (b, hkv, g*sq)
        l = l * alpha + p.sum(dim=-1)
        if v is not None:
            if params.dropout_p > 0:
                p = p * _dropout_scale(params, lay, start, end, qh.device)
            acc = acc * alpha[..., None] + torch.matmul(p, lay.kv_chunk(v, start, end))
        m = m_new
    return m, l, acc


def _lse(m: torch.Tensor, l: torch.Tensor) -> torch.Tensor:
    """``m + log(l)``, ``-inf`` where the row saw no key (``l = 0``)."""
    return torch.where(l > 0, m + torch.log(l), torch.full_like(m, _NEG_INF))


@torch.no_grad()
def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, params: AttentionParams,
            chunk_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention forward, one chunk of ``chunk_size`` keys at a time.

    Args:
        q: ``(b, sq, hq, d)``; k: ``(b, sk, hkv, d)``; v: ``(b, sk, hkv, dv)``; ``hq % hkv == 0``.
        params: what to compute (every feature of :func:`attention_reference`). With a
            ``block_mask`` only its listed key blocks are visited (see the block-sparse section).
        chunk_size: keys per chunk; any positive int (it need not divide ``sk``). With a
            ``block_mask``: keys gathered per step, rounded down to whole blocks (at least one).

    Returns:
        ``(out, lse)``: out ``(b, sq, hq, dv)`` in ``q.dtype`` (0 for rows that see no key);
        lse float32 ``(b, hq, sq)``, natural log, ``-inf`` for those rows. Computed in float32
        (float64 for float64 inputs).
    """
    lay = _layout(q, k, params, chunk_size)
    if params.block_mask is not None:
        return _sparse_forward(q, k, v, params, _sparse_plan(q, params, lay, chunk_size))
    qh = lay.to_rows(q)                                                   # (b, hkv, g*sq, d)
    m, l, acc = _online_softmax(qh, k, v, params, lay, chunk_size)
    # Normalise once at the end; rows with l = 0 have acc = 0 and stay 0.
    out = acc / torch.where(l > 0, l, torch.ones_like(l))[..., None]
    lse = _lse(m, l).reshape(lay.batch, lay.nheads, lay.seqlen_q).to(torch.float32)
    return lay.from_rows(out, q.dtype), lse


def _chain_to_raw(ds: torch.Tensor, raw: torch.Tensor, scores: torch.Tensor, keep: torch.Tensor,
                  params: AttentionParams) -> torch.Tensor:
    """Gradient w.r.t. ``raw = scale * Q K^T`` from the gradient ``ds`` w.r.t. ``scores``.

    All arguments in heads layout ``(b, hq, sq, n)``. ALiBi and the float bias are additive
    (derivative 1); softcap has ``d(c * tanh(x / c))/dx = 1 - tanh(x / c)**2``; a ``score_mod``
    is differentiated by autograd on this chunk (``scores`` was built from ``raw`` with grad on).
    """
    if params.score_mod is not None:
        if not scores.requires_grad:          # a score_mod that ignores the score
            return torch.zeros_like(raw)
        (draw,) = torch.autograd.grad(scores, raw, ds, allow_unused=True)
        if draw is None:
            return torch.zeros_like(raw)
        # ds is 0 at hidden keys, but a score_mod may have an infinite slope there.
        return torch.where(keep, draw, torch.zeros_like(draw))
    if params.softcap > 0:
        tanh = torch.tanh(raw / params.softcap)
        return ds * (1 - tanh * tanh)
    return ds


@torch.no_grad()
def backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             out: torch.Tensor, lse: torch.Tensor, params: AttentionParams,
             chunk_size: int = 128, need_bias_grad: bool = False):
    """Attention backward, recomputing the probabilities one key chunk at a time.

    Args:
        dout: ``(b, sq, hq, dv)``, gradient of ``out``.
        q, k, v: as in :func:`forward`; out, lse: what :func:`forward` returned.
        params, chunk_size: as in :func:`forward` (same ``seed``/``offset``: the dropout mask is
            regenerated, not stored).

    Returns:
        ``(dq, dk, dv)`` in the dtypes and shapes of ``q``, ``k``, ``v``. Rows that see no key
        contribute nothing (their ``P`` is 0), so their ``dq`` is 0.
    """
    if need_bias_grad and params.block_mask is not None:
        raise NotImplementedError("attn_bias gradients with a block mask")
    lay = _layout(q, k, params, chunk_size)
    if params.block_mask is not None:
        return _sparse_backward(dout, q, k, v, out, lse, params,
                                _sparse_plan(q, params, lay, chunk_size))
    qh = lay.to_rows(q)                                                   # (b, hkv, g*sq, d)
    doh = lay.to_rows(dout)                                               # (b, hkv, g*sq, dv)
    delta = (doh * lay.to_rows(out)).sum(dim=-1)                          # D, (b, hkv, g*sq)
    if lay.dtype == torch.float64:
        # The saved lse is float32; in float64 its rounding (~1e-7 relative) would dominate the
        # gradients, so recover the exact one with a statistics-only pass over K.
        m, l, _ = _online_softmax(qh, k, None, params, lay, chunk_size)
        lse_rows = _lse(m, l)
    else:
        lse_rows = lse.to(lay.dtype).reshape(lay.batch, lay.nheads_kv, lay.nrows)
    # Rows that saw no key have lse = -inf and only -inf scores: subtract 0 so P = exp(-inf) = 0.
    lse_safe = torch.where(lse_rows == _NEG_INF, torch.zeros_like(lse_rows), lse_rows)

    dq = torch.zeros_like(qh)
    dbias = None
    if need_bias_grad:                         # shaped like the (broadcast) bias, not N x N
        dbias = torch.zeros(params.attn_bias.shape, dtype=lay.dtype, device=q.device)
    dk = torch.zeros(k.shape, dtype=lay.dtype, device=k.device)          # (b, sk, hkv, d)
    dv = torch.zeros(v.shape, dtype=lay.dtype, device=v.device)          # (b, sk, hkv, dv)
    for start, end in key_chunks(params, lay.seqlen_q, lay.seqlen_k, chunk_size):
        n = end - start
        kc = lay.kv_chunk(k, start, end)                                  # (b, hkv, n, d)
        vc = lay.kv_chunk(v, start, end)                                  # (b, hkv, n, dv)
        raw = lay.heads(torch.matmul(qh, kc.transpose(-1, -2))) * params.softmax_scale
        with torch.enable_grad():
            raw.requires_grad_(params.score_mod is not None)
            scores, keep = _chunk_scores(raw, params, lay, start, end)    # (b, hq, sq, n)
        s = lay.rows(scores.detach().masked_fill(~keep, _NEG_INF), n)    # (b, hkv, g*sq, n)
        p = torch.exp(s - lse_safe[..., None])                            # P, (b, hkv, g*sq, n)

        dp = torch.matmul(doh, vc.transpose(-1, -2))                      # dP = dO V^T
        p_dropped = p
        if params.dropout_p > 0:
            z = _dropout_scale(params, lay, start, end, q.device)
            p_dropped = p * z                                             # what multiplied V
            dp = dp * z                                                   # gradient w.r.t. P
        dv[:, start:end] = torch.matmul(p_dropped.transpose(-1, -2), doh).transpose(1, 2)
        ds = p * (dp - delta[..., None])                                  # dS, (b, hkv, g*sq, n)
        if need_bias_grad:
            _accumulate_bias_grad(dbias, lay.heads(ds), start, end)
        ds = _chain_to_raw(lay.heads(ds), raw, scores, keep, params)
        ds = lay.rows(ds, n) * params.softmax_scale                       # d(QK^T)
        dq += torch.matmul(ds, kc)
        dk[:, start:end] = torch.matmul(ds.transpose(-1, -2), qh).transpose(1, 2)
    grads = (lay.from_rows(dq, q.dtype), dk.to(k.dtype), dv.to(v.dtype))
    if need_bias_grad:
        return (*grads, dbias.to(params.attn_bias.dtype))
    return grads


def _accumulate_bias_grad(dbias: torch.Tensor, ds: torch.Tensor, start: int, end: int) -> None:
    """Add one chunk's ``dS`` ``(b, hq, sq, n)`` (the bias is added to the final score, so its
    gradient is dS) into ``dbias``, summed over the dimensions along which the bias broadcasts."""
    full = dbias[(None,) * (4 - dbias.dim())]                           # (b|1, h|1, sq|1, sk|1)
    keys = slice(None) if full.shape[3] == 1 else slice(start, end)
    full[..., keys] += sum_to_shape(ds, full[..., keys].shape).to(full.dtype)


# --------------------------------------------------------------------------------------------
# block-sparse path: params.block_mask
#
# A BlockMask lists, per (batch, head, query block), the key blocks to visit, split into full
# blocks (no mask_mod evaluation) and partial blocks (mask_mod per element); empty blocks are
# never loaded, so work scales with the block density. The forward and the dQ pass walk query
# blocks over their listed key blocks (kv_num_blocks/kv_indices and the full_ pair); the dK/dV
# pass walks key blocks over their listed query blocks (q_num_blocks/q_indices and the full_
# pair), as the kernels do. Every step gathers ``step`` listed blocks of K/V (or Q/dO) at once.
#
# Compute heads: with a mask shared by the heads (its H is 1) the g query heads of one KV head
# have the same lists, so they are stacked as ``g * n`` rows against one gathered K/V block
# (``Hx = hkv`` compute heads, ``G = g`` query heads each, like the rows layout above). With a
# per-head mask every query head gathers its own blocks (``Hx = hq``, ``G = 1``) and reads K/V
# head ``h // g``; its dK/dV are summed over the group at the end. Either way the rows of
# compute head ``x`` are query heads ``x * G .. x * G + G - 1``, so ``(b, Hx, G * n, .)`` and
# the heads layout ``(b, hq, n, .)`` are views of each other.
#
# Positions: the listed blocks' element positions ``(B|1, H|1, n)``; the overhang of the last
# block past the sequence and the padding entries past a row's count are clamped to a valid
# position (so mods and gathers stay in range) and hidden by ``inside``.


@dataclass(frozen=True)
class _SparsePlan:
    """How one call walks ``params.block_mask``."""

    lay: _Layout
    block_q: int
    block_kv: int
    n_q_blocks: int
    n_kv_blocks: int
    kv_step: int                  # key blocks gathered per step (forward, dQ pass)
    q_step: int                   # query blocks gathered per step (dK/dV pass)
    kv_heads: torch.Tensor        # (Hx,) KV head read by compute head x
    q_heads: torch.Tensor         # (Hx, G) query head of member y of compute head x
    batch_idx: torch.Tensor       # (b, 1, 1, 1) int64, as mods see b
    head_idx: torch.Tensor        # (1, hq, 1, 1) int64, as mods see h

    def q_range(self, i: int) -> tuple[int, int]:
        start = i * self.block_q
        return start, min(start + self.block_q, self.lay.seqlen_q)

    def kv_range(self, j: int) -> tuple[int, int]:
        start = j * self.block_kv
        return start, min(start + self.block_kv, self.lay.seqlen_k)

    def strip(self, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """Queries ``[start, end)`` of ``(b, sq, hq, e)`` as compute rows ``(b, Hx, G * n, e)``."""
        b, hx = self.lay.batch, self.kv_heads.numel()
        x = x[:, start:end].to(self.lay.dtype).permute(0, 2, 1, 3)         # (b, hq, n, e)
        return x.reshape(b, hx, -1, x.shape[-1])

    def unstrip(self, x: torch.Tensor) -> torch.Tensor:
        """Compute rows ``(b, Hx, G * n, e)`` -> ``(b, n, hq, e)``."""
        b, hq = self.lay.batch, self.lay.nheads
        return x.reshape(b, hq, -1, x.shape[-1]).permute(0, 2, 1, 3)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        """Compute rows ``(b, Hx, G * n, m)`` viewed as heads ``(b, hq, n, m)``."""
        return x.view(self.lay.batch, self.lay.nheads, -1, x.shape[-1])

    def rows(self, x: torch.Tensor, n: int, m: int) -> torch.Tensor:
        """Anything broadcastable to heads ``(b, hq, n, m)`` as compute rows ``(b, Hx, G*n, m)``."""
        x = x.expand(self.lay.batch, self.lay.nheads, n, m)
        return x.reshape(self.lay.batch, self.kv_heads.numel(), -1, m)

    def gather_kv(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Keys/values at positions ``pos`` (B|1, H|1, n) of ``(b, sk, hkv, e)`` as
        ``(b, Hx, n, e)`` in the compute dtype."""
        b_idx = self.batch_idx.view(-1, 1, 1)
        return x[b_idx, pos, self.kv_heads.view(1, -1, 1)].to(self.lay.dtype)

    def gather_q(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Query rows at positions ``pos`` (B|1, H|1, n) of ``(b, sq, hq, e)`` as compute rows
        ``(b, Hx, G * n, e)``; a ``(b, hq, sq)`` tensor gives ``(b, Hx, G * n)``."""
        b_idx = self.batch_idx.view(-1, 1, 1, 1)
        pos4 = pos[:, :, None, :]                                         # (B, H, 1, n)
        heads4 = self.q_heads[None, :, :, None]                           # (1, Hx, G, 1)
        if x.dim() == 3:                                                  # (b, hq, sq)
            return x[b_idx, heads4, pos4].to(self.lay.dtype).flatten(2)
        return x[b_idx, pos4, heads4].to(self.lay.dtype).flatten(2, 3)


def _sparse_plan(q: torch.Tensor, params: AttentionParams, lay: _Layout,
                 chunk_size: int) -> _SparsePlan:
    bm = params.block_mask
    block_q, block_kv = bm.BLOCK_SIZE
    dev = q.device
    group = lay.group
    if bm.shape[1] > 1 and group > 1:            # per-head lists: one compute head per query head
        kv_heads = torch.arange(lay.nheads, device=dev) // group
        q_heads = torch.arange(lay.nheads, device=dev).view(lay.nheads, 1)
    else:                                        # shared lists: stack the group's query heads
        kv_heads = torch.arange(lay.nheads_kv, device=dev)
        q_heads = torch.arange(lay.nheads, device=dev).view(lay.nheads_kv, group)
    n_q_blocks, n_kv_blocks = bm.num_blocks
    return _SparsePlan(lay, block_q, block_kv, n_q_blocks, n_kv_blocks,
                       max(1, chunk_size // block_kv), max(1, chunk_size // block_q),
                       kv_heads, q_heads,
                       torch.arange(lay.batch, device=dev).view(-1, 1, 1, 1),
                       torch.arange(lay.nheads, device=dev).view(1, -1, 1, 1))


def _listed_positions(counts: torch.Tensor, indices: torch.Tensor, first: int, stop: int,
                      block: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Element positions of listed blocks ``first .. stop - 1`` of one block row.

    Args:
        counts: ``(B|1, H|1)`` listed blocks; indices: ``(B|1, H|1, width)`` block indices.
            Entries past a (batch, head)'s count (``stop`` is the largest count) are padding.

    Returns:
        ``(pos, inside)``, both ``(B|1, H|1, s * block)``: int64 positions clamped to
        ``[0, length)``, and True where the block is listed and the position is in the sequence.
    """
    blocks = indices[..., first:stop].long()                                  # (B, H, s)
    s = blocks.shape[-1]
    listed = first + torch.arange(s, device=blocks.device) < counts[..., None]  # (B, H, s)
    pos = blocks[..., None] * block + torch.arange(block, device=blocks.device)  # (B, H, s, block)
    inside = (pos < length) & listed[..., None]
    return pos.clamp_(max=length - 1).flatten(-2), inside.flatten(-2)


def _indexed_scores(raw: torch.Tensor, params: AttentionParams, plan: _SparsePlan,
                    q_idx: torch.Tensor, kv_idx: torch.Tensor,
                    partial: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_chunk_scores` for arbitrary broadcasting positions.

    Args:
        raw: heads layout ``(b, hq, n, m)``, ``softmax_scale * Q K^T``.
        q_idx, kv_idx: int64 absolute positions broadcastable to ``raw`` (e.g. ``(n, 1)`` and
            ``(B|1, H|1, 1, m)``).
        partial: evaluate ``mask_mod`` (partial blocks); full blocks skip it.

    Returns:
        ``(scores, keep)`` as in :func:`_chunk_scores`.
    """
    lay = plan.lay
    b_idx, h_idx = plan.batch_idx, plan.head_idx
    scores = raw
    if params.softcap > 0:
        scores = params.softcap * torch.tanh(scores / params.softcap)
    if params.alibi_slopes is not None:
        slopes = params.alibi_slopes.to(device=raw.device, dtype=lay.dtype)
        slopes = slopes.reshape(-1 if slopes.dim() == 2 else 1, lay.nheads)[:, :, None, None]
        dist = (q_idx + lay.seqlen_k - lay.seqlen_q - kv_idx).abs()
        scores = scores - slopes * dist.to(lay.dtype)
    if params.score_mod is not None:
        scores = params.score_mod(scores, b_idx, h_idx, q_idx, kv_idx).to(lay.dtype)
    keep = visible_mask(q_idx, kv_idx, lay.seqlen_q, lay.seqlen_k, params)
    if partial and params.mask_mod is not None:
        keep = keep & params.mask_mod(b_idx, h_idx, q_idx, kv_idx).bool()
    if params.attn_bias is not None:
        bias = params.attn_bias
        bias = bias[(None,) * (4 - bias.dim())].expand(lay.batch, lay.nheads, lay.seqlen_q,
                                                       lay.seqlen_k)
        bias = bias[b_idx, h_idx, q_idx, kv_idx]
        if bias.dtype == torch.bool:
            keep = keep & bias
        else:
            scores = scores + bias.to(lay.dtype)
    return scores, keep


def _block_lists(bm: BlockMask, transposed: bool, row: int):
    """``(counts (B, H), indices (B, H, width), partial)`` for the full then the partial list
    of block row ``row`` (a query block, or a key block when ``transposed``)."""
    if transposed:
        pairs = ((bm.full_q_num_blocks, bm.full_q_indices, False),
                 (bm.q_num_blocks, bm.q_indices, True))
    else:
        pairs = ((bm.full_kv_num_blocks, bm.full_kv_indices, False),
                 (bm.kv_num_blocks, bm.kv_indices, True))
    for counts, indices, partial in pairs:
        yield counts[:, :, row].long(), indices[:, :, row], partial


def _query_block_steps(plan: _SparsePlan, params: AttentionParams, qs: torch.Tensor,
                       k: torch.Tensor, v: torch.Tensor | None, i: int, need_grad: bool = False):
    """The steps of query block ``i`` over its listed key blocks.

    Args:
        qs: the block's queries as compute rows ``(b, Hx, G * n, d)``.
        need_grad: build ``scores`` from ``raw`` with autograd on (backward with a score_mod).

    Yields:
        ``(kc, vc, raw, scores, keep, kv_idx)``: gathered keys/values ``(b, Hx, m, .)`` (``vc``
        None without ``v``), raw/scores in heads layout ``(b, hq, n, m)``, keep broadcastable to
        it, and the key positions ``(B|1, H|1, 1, m)``.
    """
    lay = plan.lay
    start, end = plan.q_range(i)
    q_idx = torch.arange(start, end, device=qs.device)[:, None]                # (n, 1)
    for counts, indices, partial in _block_lists(params.block_mask, False, i):
        most = int(counts.max())
        for first in range(0, most, plan.kv_step):
            pos, inside = _listed_positions(counts, indices, first,
                                            min(first + plan.kv_step, most), plan.block_kv,
                                            lay.seqlen_k)                      # (B, H, m)
            kc = plan.gather_kv(k, pos)                                        # (b, Hx, m, d)
            vc = None if v is None else plan.gather_kv(v, pos)                 # (b, Hx, m, dv)
            raw = plan.heads(torch.matmul(qs, kc.transpose(-1, -2))) * params.softmax_scale
            kv_idx = pos[:, :, None, :]                                        # (B, H, 1, m)
            with torch.enable_grad():
                raw.requires_grad_(need_grad and params.score_mod is not None)
                scores, keep = _indexed_scores(raw, params, plan, q_idx, kv_idx, partial)
            yield kc, vc, raw, scores, keep & inside[:, :, None, :], kv_idx


def _sparse_softmax(plan: _SparsePlan, params: AttentionParams, qs: torch.Tensor,
                    k: torch.Tensor, v: torch.Tensor | None, i: int):
    """Online softmax of query block ``i`` over its listed key blocks: ``(m, l, acc)`` in
    compute rows (``acc`` None without ``v``), as :func:`_online_softmax`."""
    lay = plan.lay
    rows = qs.shape[:-1]
    n = rows[-1] // plan.q_heads.shape[1]
    m = torch.full(rows, _NEG_INF, dtype=lay.dtype, device=qs.device)
    l = torch.zeros(rows, dtype=lay.dtype, device=qs.device)
    acc = None if v is None else qs.new_zeros(*rows, v.shape[-1])
    q_idx = torch.arange(*plan.q_range(i), device=qs.device)[:, None]
    for _, vc, _, scores, keep, kv_idx in _query_block_steps(plan, params, qs, k, v, i):
        width = kv_idx.shape[-1]
        s = plan.rows(scores.detach().masked_fill(~keep, _NEG_INF), n, width)   # (b, Hx, G*n, m)
        m_new = torch.maximum(m, s.amax(dim=-1))
        m_safe = torch.where(m_new == _NEG_INF, torch.zeros_like(m_new), m_new)
        p = torch.exp(s - m_safe[..., None])
        alpha = torch.exp(m - m_safe)
        l = l * alpha + p.sum(dim=-1)
        if v is not None:
            if params.dropout_p > 0:
                p = p * plan.rows(_indexed_dropout(params, plan, q_idx, kv_idx), n, width)
            acc = acc * alpha[..., None] + torch.matmul(p, vc)
        m = m_new
    return m, l, acc


def _indexed_dropout(params: AttentionParams, plan: _SparsePlan, q_idx: torch.Tensor,
                     kv_idx: torch.Tensor) -> torch.Tensor:
    """``Z = keep / (1 - p)`` at broadcasting positions, heads layout."""
    lay = plan.lay
    keep = dropout_keep(params, plan.batch_idx, plan.head_idx, q_idx, kv_idx, lay.nheads,
                        lay.seqlen_q, lay.seqlen_k)
    return keep.to(lay.dtype) * (1.0 / (1.0 - params.dropout_p))


def _sparse_forward(q, k, v, params: AttentionParams, plan: _SparsePlan):
    """:func:`forward` over the listed blocks of ``params.block_mask``."""
    lay = plan.lay
    out = torch.empty(lay.batch, lay.seqlen_q, lay.nheads, v.shape[-1], dtype=q.dtype,
                      device=q.device)
    lse = torch.empty(lay.batch, lay.nheads, lay.seqlen_q, dtype=torch.float32, device=q.device)
    for i in range(plan.n_q_blocks):
        start, end = plan.q_range(i)
        qs = plan.strip(q, start, end)                                        # (b, Hx, G*n, d)
        m, l, acc = _sparse_softmax(plan, params, qs, k, v, i)
        acc = acc / torch.where(l > 0, l, torch.ones_like(l))[..., None]
        out[:, start:end] = plan.unstrip(acc).to(q.dtype)
        lse[:, :, start:end] = _lse(m, l).reshape(lay.batch, lay.nheads, end - start)
    return out, lse


def _sparse_backward(dout, q, k, v, out, lse, params: AttentionParams, plan: _SparsePlan):
    """:func:`backward` over the listed blocks: a dQ pass over query blocks, then a dK/dV pass
    over key blocks (the transposed lists), so every gradient is written once, in order."""
    lay = plan.lay
    bm = params.block_mask
    delta = (dout.to(lay.dtype) * out.to(lay.dtype)).sum(dim=-1).transpose(1, 2)  # D, (b, hq, sq)
    if lay.dtype == torch.float64:
        # As in backward(): recover the exact lse with a statistics-only pass.
        lse = torch.empty(lay.batch, lay.nheads, lay.seqlen_q, dtype=lay.dtype, device=q.device)
        for i in range(plan.n_q_blocks):
            start, end = plan.q_range(i)
            m, l, _ = _sparse_softmax(plan, params, plan.strip(q, start, end), k, None, i)
            lse[:, :, start:end] = _lse(m, l).reshape(lay.batch, lay.nheads, end - start)
    lse = lse.to(lay.dtype)
    lse = torch.where(lse == _NEG_INF, torch.zeros_like(lse), lse)           # P = exp(-inf) = 0

    # dQ: query blocks over their listed key blocks.
    dq = torch.zeros(q.shape, dtype=lay.dtype, device=q.device)               # (b, sq, hq, d)
    for i in range(plan.n_q_blocks):
        start, end = plan.q_range(i)
        n = end - start
        qs, dos = plan.strip(q, start, end), plan.strip(dout, start, end)     # (b, Hx, G*n, .)
        lse_rows = lse[:, :, start:end].reshape(*qs.shape[:-1])
        delta_rows = delta[:, :, start:end].reshape(*qs.shape[:-1])
        q_idx = torch.arange(start, end, device=q.device)[:, None]
        dqs = qs.new_zeros(qs.shape)
        for kc, vc, raw, scores, keep, kv_idx in _query_block_steps(plan, params, qs, k, v, i,
                                                                    need_grad=True):
            width = kv_idx.shape[-1]
            s = plan.rows(scores.detach().masked_fill(~keep, _NEG_INF), n, width)
            p = torch.exp(s - lse_rows[..., None])                            # P
            dp = torch.matmul(dos, vc.transpose(-1, -2))                      # dP = dO V^T
            if params.dropout_p > 0:
                dp = dp * plan.rows(_indexed_dropout(params, plan, q_idx, kv_idx), n, width)
            ds = p * (dp - delta_rows[..., None])                             # dS
            ds = _chain_to_raw(plan.heads(ds), raw, scores, keep, params)
            ds = plan.rows(ds, n, width) * params.softmax_scale
            dqs += torch.matmul(ds, kc)
        dq[:, start:end] = plan.unstrip(dqs)

    # dK, dV: key blocks over their listed query blocks.
    dk = torch.zeros(k.shape, dtype=lay.dtype, device=k.device)               # (b, sk, hkv, d)
    dv = torch.zeros(v.shape, dtype=lay.dtype, device=v.device)               # (b, sk, hkv, dv)
    hx = plan.kv_heads.numel()
    for j in range(plan.n_kv_blocks):
        start, end = plan.kv_range(j)
        width = end - start
        kb = k[:, start:end, plan.kv_heads].to(lay.dtype).transpose(1, 2)     # (b, Hx, w, d)
        vb = v[:, start:end, plan.kv_heads].to(lay.dtype).transpose(1, 2)     # (b, Hx, w, dv)
        kv_idx = torch.arange(start, end, device=k.device)[None, :]           # (1, w)
        dkb, dvb = kb.new_zeros(kb.shape), vb.new_zeros(vb.shape)
        for counts, indices, partial in _block_lists(bm, True, j):
            most = int(counts.max())
            for first in range(0, most, plan.q_step):
                pos, inside = _listed_positions(counts, indices, first,
                                                min(first + plan.q_step, most), plan.block_q,
                                                lay.seqlen_q)                 # (B, H, n)
                n = pos.shape[-1]
                qg, dog = plan.gather_q(q, pos), plan.gather_q(dout, pos)     # (b, Hx, G*n, .)
                lse_g, delta_g = plan.gather_q(lse, pos), plan.gather_q(delta, pos)
                q_idx = pos[:, :, :, None]                                    # (B, H, n, 1)
                raw = plan.heads(torch.matmul(qg, kb.transpose(-1, -2))) * params.softmax_scale
                with torch.enable_grad():
                    raw.requires_grad_(params.score_mod is not None)
                    scores, keep = _indexed_scores(raw, params, plan, q_idx, kv_idx, partial)
                keep = keep & inside[:, :, :, None]
                s = plan.rows(scores.detach().masked_fill(~keep, _NEG_INF), n, width)
                p = torch.exp(s - lse_g[..., None])                           # P, (b, Hx, G*n, w)
                dp = torch.matmul(dog, vb.transpose(-1, -2))
                p_dropped = p
                if params.dropout_p > 0:
                    z = plan.rows(_indexed_dropout(params, plan, q_idx, kv_idx), n, width)
                    p_dropped, dp = p * z, dp * z
                dvb += torch.matmul(p_dropped.transpose(-1, -2), dog)
                ds = p * (dp - delta_g[..., None])
                ds = _chain_to_raw(plan.heads(ds), raw, scores, keep, params)
                ds = plan.rows(ds, n, width) * params.softmax_scale
                dkb += torch.matmul(ds.transpose(-1, -2), qg)
        if hx != lay.nheads_kv:                   # per-head lists: sum each KV head's group
            dkb = dkb.view(lay.batch, lay.nheads_kv, lay.group, width, -1).sum(dim=2)
            dvb = dvb.view(lay.batch, lay.nheads_kv, lay.group, width, -1).sum(dim=2)
        dk[:, start:end] = dkb.transpose(1, 2)
        dv[:, start:end] = dvb.transpose(1, 2)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


__all__ = ["backward", "forward", "key_chunks"]
