"""The one parameters object that travels from the public functions down to the kernels.

Notation used everywhere below the public layer:

- layout ``(batch, seqlen, nheads, headdim)`` (flash-attn's); the FlexAttention/SDPA layout
  ``(batch, nheads, seqlen, headdim)`` is turned into it with a free ``transpose(1, 2)`` view.
- ``sq``/``sk``: query/key sequence lengths; ``hq``/``hkv``: query/key-value heads (GQA when
  ``hq > hkv``, query head ``h`` reads KV head ``h // (hq // hkv)``).
- Visibility: query row ``i`` sees key ``j`` iff ``i + off - left <= j <= i + off + right``
  (a side is unbounded when its window is -1), with ``off = sk - sq`` (bottom-right alignment,
  flash-attn) or ``off = 0`` (top-left alignment, SDPA's ``is_causal``). Causal is ``right = 0``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional

import torch


# Dropout rates are held in units of 2**-16 (AttentionParams.dropout_p).
DROPOUT_UNIT = 2 ** 16


@dataclass(frozen=True, eq=False)
class AttentionParams:
    """Everything that changes what attention computes, except the tensors Q/K/V themselves.

    Attributes:
        softmax_scale: multiplies ``Q K^T`` before everything else.
        window_left, window_right: the visible band (see module docstring); -1 = unbounded.
        bottom_right: causal/window alignment when ``sq != sk`` (True: flash-attn; False: SDPA).
        causal: True when the user asked for causal (``window_right`` is then 0).
        softcap: if > 0, ``score = softcap * tanh(score / softcap)`` after scaling.
        alibi_slopes: float32 ``(hq,)`` or ``(batch, hq)``; adds ``-slope * |i + sk - sq - j|``.
        dropout_p: probability of dropping a probability (kept ones scaled by ``1/(1-p)``),
            held as a multiple of 2**-16 (the resolution of the dropout RNG's 16-bit uniforms,
            ``reference/philox.py``): 0.1 becomes 6554/65536, so the rate drawn and the scale
            applied agree exactly.
        seed, offset: key of the counter-based RNG that draws the dropout mask.
        deterministic: bitwise-reproducible dQ: the backward computes dQ in a second pass,
            without atomics, whatever ``FLASHTILE_BWD_DQ`` says (default False: one pass with
            fp32 reductions where it measured faster, :func:`flashtile.kernels.bwd.dq_mode`).
        score_mod: FlexAttention ``score_mod(score, b, h, q_idx, kv_idx) -> score``.
        mask_mod: FlexAttention ``mask_mod(b, h, q_idx, kv_idx) -> bool``.
        block_mask: a :class:`flashtile.masks.BlockMask` (block-sparse attention).
        attn_bias: float ``(b|1, h|1, sq|1, sk|1)`` added to scores, or bool (True = keep).
        cu_seqlens_q, cu_seqlens_k: int32 ``(batch + 1,)`` sequence starts (varlen: Q/K/V are
            packed ``(total, nheads, headdim)``); ``max_seqlen_q``/``max_seqlen_k`` their maxima.
        block_table: varlen with paged K/V: int32 ``(batch, max_blocks)``; key ``j`` of sequence
            ``b`` is row ``j % page`` of page ``block_table[b, j // page]`` of K/V
            ``(num_blocks, page, nheads_k, headdim)`` (forward only).
        seq_order: varlen: int32 ``(batch,)``, the order in which the kernels' grid takes the
            sequences (heaviest first); None keeps the batch order.
    """

    softmax_scale: float
    window_left: int = -1
    window_right: int = -1
    bottom_right: bool = True
    causal: bool = False
    softcap: float = 0.0
    alibi_slopes: Optional[torch.Tensor] = None
    dropout_p: float = 0.0
    seed: int = 0
    offset: int = 0
    deterministic: bool = False
    score_mod: Optional[Callable] = None
    mask_mod: Optional[Callable] = None
    block_mask: Optional[object] = None
    attn_bias: Optional[torch.Tensor] = None
    cu_seqlens_q: Optional[torch.Tensor] = None
    cu_seqlens_k: Optional[torch.Tensor] = None
    max_seqlen_q: int = 0
    max_seqlen_k: int = 0
    block_table: Optional[torch.Tensor] = None
    seq_order: Optional[torch.Tensor] = None

    def __post_init__(self):
        if self.dropout_p > 0:
            units = min(DROPOUT_UNIT - 1, max(1, round(self.dropout_p * DROPOUT_UNIT)))
            object.__setattr__(self, "dropout_p", units / DROPOUT_UNIT)

    def with_(self, **changes) -> "AttentionParams":
        return replace(self, **changes)

    @property
    def has_window(self) -> bool:
        return self.window_left >= 0 or self.window_right >= 0

    def diagonal_offset(self, seqlen_q: int, seqlen_k: int) -> int:
        """``off`` in the visibility rule for one sequence pair."""
        return seqlen_k - seqlen_q if self.bottom_right else 0
