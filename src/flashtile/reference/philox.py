"""A bit-exact PyTorch replica of Triton's ``tl.rand``: the dropout RNG of both backends.

Dropout never stores its mask. Each (batch, head, query, key) position maps to a 64-bit counter
(shared by 8 positions, below); the Philox 4x32-10 block cipher turns ``(seed, counter)`` into
random words, and the position is kept iff its uniform is ``>= dropout_p``. The backward (and the
torch path, and the tests) regenerate the same mask from ``(seed, offset)`` alone. The Triton
kernels call ``philox4x32(seed, counter)`` (``flashtile.kernels.common``: ``tl.randint4x`` bit
for bit, with fewer multiply instructions); this module computes the same bits with torch
integer ops, so the torch path and the kernels drop exactly the same positions.

Notation (Triton's ``triton/language/random.py``, which this mirrors):

- words: 32-bit unsigned integers, held here in int64 tensors with values in ``[0, 2**32)``
  (torch has no uint32 arithmetic; the high 32 bits of the int64 stay zero after masking).
- counter block ``(c0, c1, c2, c3)``: ``c0``/``c1`` are the low/high words of the int64
  counter, ``c2 = c3 = 0``.
- key ``(k0, k1)``: the low/high words of the seed; each round adds the Weyl constants
  ``KEY_A``/``KEY_B`` to it.
- round: ``c0, c1, c2, c3 = hi(B*c2) ^ c1 ^ k0, lo(B*c2), hi(A*c0) ^ c3 ^ k1, lo(A*c0)``.
- ``tl.rand`` keeps ``c0`` of the final block and maps it to ``[0, 1)``: reinterpret as int32,
  fold negatives with ``x -> -x - 1`` (so the value lies in ``[0, 2**31)``), multiply by the
  float32 constant ``4.6566127342e-10`` (just below ``2**-31``, so the result stays ``< 1``)
  (:func:`philox_uniform`, kept as the tested link to Triton's own generator).

Attention dropout uses all four output words (``tl.randint4x``), each split into two 16-bit
uniforms: one Philox call serves 8 positions, the queries ``{i, i + 8}`` times the keys
``{j, j + 1, j + 8, j + 9}`` of a 16 x 16 block (the positions one GPU thread holds in the
tensor-core accumulator layout, so the kernels never move random numbers between threads).
Position ``(b, h, i, j)`` is kept iff its 16-bit value ``>= round(dropout_p * 2**16)``, and
``dropout_p`` itself is held at that resolution (:class:`flashtile.AttentionParams`). Counter
layout (the kernels use the same formula, ``flashtile.kernels.common.dropout_keep``)::

    row group  g_q = (i // 16) * 8 + i % 8          (cdiv(seqlen_q, 16) * 8 per head)
    key group  g_k = (j // 16) * 4 + (j // 2) % 4   (cdiv(seqlen_k, 16) * 4 per row group)
    counter = offset + ((b * nheads + h) * cdiv(seqlen_q, 16) * 8 + g_q)
                       * cdiv(seqlen_k, 16) * 4 + g_k
    value   = (word[2 * (i // 8 % 2) + j // 8 % 2] >> (16 * (j % 2))) & 0xFFFF
"""

from __future__ import annotations

import torch

from ..params import DROPOUT_UNIT, AttentionParams

_MASK32 = 0xFFFFFFFF
_MASK16 = 0xFFFF
# Philox 4x32 constants (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", 2011).
_KEY_A = 0x9E3779B9      # Weyl increment of k0 (golden ratio)
_KEY_B = 0xBB67AE85      # Weyl increment of k1 (sqrt(3) - 1)
_ROUND_A = 0xD2511F53    # multiplier of c0
_ROUND_B = 0xCD9E8D57    # multiplier of c2
_N_ROUNDS = 10           # tl.rand's default
# tl.rand's int32 -> [0, 1) scale, rounded to float32 exactly as Triton does.
_UNIFORM_SCALE = 4.6566127342e-10

# Largest offset draw_seed_offset returns: leaves 2**63 - 2**40 counters for b*h*sq*sk.
_OFFSET_RANGE = 2 ** 40
_SEED_RANGE = 2 ** 31


def _mulhilo(multiplier: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """High and low 32-bit words of ``multiplier * x`` for a 32-bit constant and 32-bit words.

    The full product needs 64 unsigned bits, which would overflow int64, so ``x`` is split into
    16-bit halves: ``multiplier * x = 2**16 * u + (t & 0xFFFF)`` with ``t = multiplier * x_lo``
    and ``u = multiplier * x_hi + (t >> 16)``; every intermediate stays below ``2**49``.
    """
    t = (x & _MASK16) * multiplier
    u = (x >> 16) * multiplier + (t >> 16)
    hi = u >> 16
    lo = ((u & _MASK16) << 16) | (t & _MASK16)
    return hi, lo


def philox_4x32(c0: torch.Tensor, c1: torch.Tensor, c2: torch.Tensor, c3: torch.Tensor,
                k0: int, k1: int, n_rounds: int = _N_ROUNDS):
    """Philox 4x32: encrypt the counter block ``(c0, c1, c2, c3)`` under the key ``(k0, k1)``.

    Words are int64 tensors (or ints for the key) with values in ``[0, 2**32)``; returns the four
    output words in the same form. With 10 rounds this reproduces Random123's known-answer
    vectors (and ``triton.language.random.philox`` for 32-bit counters).
    """
    for _ in range(n_rounds):
        hi_b, lo_b = _mulhilo(_ROUND_B, c2)
        hi_a, lo_a = _mulhilo(_ROUND_A, c0)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0 = (k0 + _KEY_A) & _MASK32
        k1 = (k1 + _KEY_B) & _MASK32
    return c0, c1, c2, c3


def philox_uniform(seed: int, counters: torch.Tensor) -> torch.Tensor:
    """Uniform floats in ``[0, 1)``, bitwise equal to ``tl.rand(seed, counters)``.

    Args:
        seed: Python int (Triton converts it to uint64; negative seeds wrap the same way here).
        counters: integer tensor of any shape (int64 for counters ``>= 2**31``).

    Returns:
        float32 tensor of ``counters.shape`` on ``counters.device``.
    """
    counters = counters.to(torch.int64)
    # Counter block: the int64 counter's low and high words (Triton: offset.to(uint32) and
    # (offset >> 32).to(uint32); the arithmetic shift then truncation equals masking).
    lo = counters & _MASK32
    hi = (counters >> 32) & _MASK32
    zero = torch.zeros_like(lo)
    # Key: the seed as uint64, split into words (Python's & on negative ints is two's complement,
    # matching Triton's sign-extending cast).
    word, _, _, _ = philox_4x32(lo, hi, zero, zero, seed & _MASK32, (seed >> 32) & _MASK32)
    # uint_to_uniform_float: as int32, x < 0 becomes -x - 1 = 2**32 - 1 - x (unsigned view).
    folded = torch.where(word >= 2 ** 31, _MASK32 - word, word)      # in [0, 2**31)
    scale = torch.tensor(_UNIFORM_SCALE, dtype=torch.float32, device=counters.device)
    return folded.to(torch.float32) * scale


POSITIONS_PER_CALL = 8    # positions served by one Philox call (4 words x two 16-bit halves)


def dropout_threshold(p: float) -> int:
    """``p`` in units of 2**-16 (a 16-bit uniform ``u`` is kept iff ``u >= threshold``); ``p``
    is already such a multiple in :class:`AttentionParams`, so this is exact."""
    return round(p * DROPOUT_UNIT)


def _row_groups(seqlen_q: int) -> int:
    return -(-seqlen_q // 16) * 8


def _key_groups(seqlen_k: int) -> int:
    return -(-seqlen_k // 16) * 4


def dropout_stride_b(nheads: int, seqlen_q: int, seqlen_k: int) -> int:
    """Counters one batch entry uses: ``nheads * cdiv(seqlen_q, 16) * 8 * cdiv(seqlen_k, 16) * 4``
    (about ``nheads * seqlen_q * seqlen_k / 8``)."""
    return nheads * _row_groups(seqlen_q) * _key_groups(seqlen_k)


def dropout_counters(params: AttentionParams, batch_idx, head_idx, q_idx, kv_idx,
                     nheads: int, seqlen_q: int, seqlen_k: int) -> torch.Tensor:
    """The Philox counter behind each attention position, int64, broadcast over the indices
    (the module docstring's layout; ``nheads`` is the number of *query* heads). Index arguments
    are integer tensors (or ints) that broadcast against each other, e.g. ``(b, 1, 1, 1)``,
    ``(1, h, 1, 1)``, ``(sq, 1)``, ``(1, n)``.
    """
    def as64(x):
        return torch.as_tensor(x, dtype=torch.int64)
    i, j = as64(q_idx), as64(kv_idx)
    row_group = (as64(batch_idx) * nheads + as64(head_idx)) * _row_groups(seqlen_q) \
        + (i // 16) * 8 + i % 8
    return params.offset + row_group * _key_groups(seqlen_k) + (j // 16) * 4 + (j // 2) % 4


def dropout_uniform16(seed: int, counters: torch.Tensor, q_idx, kv_idx) -> torch.Tensor:
    """The 16-bit uniform of each position (int64 in ``[0, 2**16)``): half ``j % 2`` of word
    ``2 * (i // 8 % 2) + j // 8 % 2`` of ``philox(seed, counter)``, bitwise as the kernels'
    ``philox4x32`` (and ``tl.randint4x``)."""
    counters = counters.to(torch.int64)
    lo = counters & _MASK32
    hi = (counters >> 32) & _MASK32
    zero = torch.zeros_like(lo)
    words = torch.stack(torch.broadcast_tensors(
        *philox_4x32(lo, hi, zero, zero, seed & _MASK32, (seed >> 32) & _MASK32)))
    i = torch.as_tensor(q_idx, dtype=torch.int64, device=counters.device)
    j = torch.as_tensor(kv_idx, dtype=torch.int64, device=counters.device)
    which = (2 * (i // 8 % 2) + j // 8 % 2).expand(counters.shape)
    word = torch.gather(words, 0, which[None]).squeeze(0)
    return (word >> (16 * (j % 2))) & _MASK16


def dropout_keep(params: AttentionParams, b_idx, h_idx, q_idx, kv_idx, nheads: int,
                 seqlen_q: int, seqlen_k: int) -> torch.Tensor:
    """Bool tensor, True where dropout keeps the position: its 16-bit uniform is
    ``>= round(params.dropout_p * 2**16)``. Same broadcasting as :func:`dropout_counters`;
    both backends agree on every position."""
    counters = dropout_counters(params, b_idx, h_idx, q_idx, kv_idx, nheads, seqlen_q, seqlen_k)
    return (dropout_uniform16(params.seed, counters, q_idx, kv_idx)
            >= dropout_threshold(params.dropout_p))


def draw_seed_offset(device: torch.device | str | None = None) -> tuple[int, int]:
    """Draw a fresh ``(seed, offset)`` pair for one dropout call, as Python ints.

    Both come from torch's default *CPU* generator, so

    - ``torch.manual_seed(s)`` makes a whole training run reproducible;
    - consecutive calls advance the generator, so two dropout calls (two layers, two steps) get
      different masks;
    - nothing is read back from a GPU: drawing on the CPU never waits for the device, whatever
      ``device`` the attention runs on (the argument is accepted for symmetry and unused).

    ``seed`` lies in ``[0, 2**31)`` (a non-negative int32 kernel argument); ``offset`` in
    ``[0, 2**40)``, which leaves ``2**63 - 2**40`` counters for ``b * h * sq * sk`` before the
    int64 counter could overflow.
    """
    del device
    draws = torch.randint(0, _OFFSET_RANGE, (2,), dtype=torch.int64, device="cpu")
    seed = int(draws[0]) % _SEED_RANGE
    offset = int(draws[1])
    return seed, offset


__all__ = ["POSITIONS_PER_CALL", "draw_seed_offset", "dropout_counters", "dropout_keep",
           "dropout_stride_b", "dropout_threshold", "dropout_uniform16", "philox_4x32",
           "philox_uniform"]
