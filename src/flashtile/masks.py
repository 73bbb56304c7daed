"""Block-sparse masks, FlexAttention compatible: ``BlockMask``, ``create_block_mask`` and a
library of ready ``mask_mod`` / ``score_mod`` functions.

A ``mask_mod(b, h, q_idx, kv_idx) -> bool tensor`` says which (query, key) pairs are visible; a
``score_mod(score, b, h, q_idx, kv_idx) -> score`` rewrites a score. Both are plain Python over
integer index tensors that broadcast against each other (any shapes), so the same function runs
on the block-mask builder, the float64 reference and the chunked torch path. Write them with
comparisons, arithmetic, ``torch.where`` and indexing of captured tensors; no Python ``if`` on a
tensor value. ``h`` is the *query* head.

A :class:`BlockMask` cuts the ``Q_LEN x KV_LEN`` score matrix into ``BLOCK_SIZE = (BQ, BKV)``
tiles and, for every (batch, head, query block), lists the key blocks that are not empty:

- *full* blocks: every element visible; attention runs them without evaluating ``mask_mod``;
- *partial* blocks: some elements visible; ``mask_mod`` is evaluated per element;
- empty blocks are not listed and never loaded, so work scales with the block density.

Picture (Q_LEN = KV_LEN = 4 * 128, causal, BLOCK_SIZE 128; ``#`` full, ``+`` partial,
``.`` empty)::

              kv block 0 1 2 3
    q block 0          + . . .      kv_num_blocks[.., 0] = 1   kv_indices[.., 0, :1] = [0]
    q block 1          # + . .      kv_num_blocks[.., 1] = 1   kv_indices[.., 1, :1] = [1]
    q block 2          # # + .      full_kv_num_blocks[.., 2] = 2
    q block 3          # # # +      full_kv_indices[.., 2, :2] = [0, 1]

References: Dao et al., "FlashAttention" (2022), block-sparse FlashAttention; Dong et al.,
"Flex Attention: A Programming Model for Generating Optimized Attention Kernels" (2024).
"""

from __future__ import annotations

import inspect
import math
from concurrent.futures import ThreadPoolExecutor
from numbers import Integral
from typing import Callable, Optional, Union

import torch

_DEFAULT_BLOCK_SIZE = 128
# Elements (and columns) of one mask_mod evaluation in create_block_mask. CPU: small enough to
# stay in cache and below the allocator's mmap threshold (fresh large buffers cost page faults on
# every tile). GPU: large, so that kernel launches do not dominate.
_TILE_ELEMENTS = 1 << 19
_TILE_COLUMNS = 4096
_GPU_TILE_ELEMENTS = 1 << 25
_GPU_TILE_COLUMNS = 1 << 16
_MAX_WORKERS = 8
_INDEX_DTYPE = torch.int32    # index tensors passed to mask_mods, as in torch's FlexAttention

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
ScoreMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
                    torch.Tensor]


# --------------------------------------------------------------------------------------------
# small helpers


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def _is_int(x) -> bool:
    return isinstance(x, Integral) and not isinstance(x, bool)


def _mod_name(fn) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def _named(fn, name: str):
    fn.__name__ = name
    fn.__qualname__ = name
    return fn


def _check_block_size(BLOCK_SIZE) -> tuple[int, int]:
    """``BLOCK_SIZE`` as ``(BQ, BKV)``; an int means both."""
    if _is_int(BLOCK_SIZE):
        sizes = (int(BLOCK_SIZE), int(BLOCK_SIZE))
    elif (isinstance(BLOCK_SIZE, (tuple, list)) and len(BLOCK_SIZE) == 2
          and all(_is_int(s) for s in BLOCK_SIZE)):
        sizes = (int(BLOCK_SIZE[0]), int(BLOCK_SIZE[1]))
    else:
        raise TypeError(f"BLOCK_SIZE must be a positive int or a pair of positive ints "
                        f"(q_block, kv_block), got {BLOCK_SIZE!r}; e.g. BLOCK_SIZE=128 or "
                        "BLOCK_SIZE=(128, 64)")
    if min(sizes) < 1:
        raise ValueError(f"BLOCK_SIZE entries must be positive, got {BLOCK_SIZE!r}; "
                         "e.g. BLOCK_SIZE=128")
    return sizes


def _check_length(name: str, value) -> int:
    if not _is_int(value):
        raise TypeError(f"{name} must be a positive int, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be a positive int, got {value}")
    return int(value)


def _check_broadcast_dim(name: str, value) -> int:
    """``B``/``H`` of create_block_mask: ``None`` (broadcast, stored as 1) or a positive int."""
    if value is None:
        return 1
    if not _is_int(value):
        raise TypeError(f"{name} must be None (broadcast over it) or a positive int, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be None (broadcast over it) or a positive int, got {value}")
    return int(value)


def _check_mask_mod(mask_mod, where: str) -> None:
    if not callable(mask_mod):
        raise TypeError(f"{where}: mask_mod must be a function mask_mod(b, h, q_idx, kv_idx) -> "
                        f"bool tensor, got {type(mask_mod).__name__}")
    _check_arity(mask_mod, where, "mask_mod", ("b", "h", "q_idx", "kv_idx"),
                 {5: " (5 arguments looks like a score_mod(score, b, h, q_idx, kv_idx): pass "
                     "it to flex_attention(score_mod=...) instead)"})


def _check_arity(fn, where: str, kind: str, names: tuple[str, ...],
                 hints: dict[int, str]) -> None:
    """A mod that cannot take ``len(names)`` positional arguments is a clear ``TypeError``
    naming them (``hints``: an extra line by required-argument count); callables whose
    signature cannot be read (builtins) pass, to be tried."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):      # builtins, some C callables: cannot tell, try it
        return
    positional = [p for p in params
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    variadic = any(p.kind == p.VAR_POSITIONAL for p in params)
    required = [p for p in positional if p.default is p.empty]
    n = len(names)
    if not variadic and (len(required) > n or len(positional) < n):
        raise TypeError(f"{where}: {kind} must take {n} arguments ({', '.join(names)}), "
                        f"{_mod_name(fn)} takes {len(positional)}{hints.get(len(required), '')}")


def _check_mask_result(result, target: tuple[int, ...], mask_mod) -> torch.Tensor:
    """A mask_mod's result as a 4-d bool tensor broadcastable to ``target`` (b, h, q, kv)."""
    name = _mod_name(mask_mod)
    if not isinstance(result, torch.Tensor):
        raise TypeError(f"mask_mod {name} must return a bool tensor (True = visible), got "
                        f"{type(result).__name__}; build it from the index tensors, e.g. "
                        "return q_idx >= kv_idx")
    if result.dtype != torch.bool:
        raise TypeError(f"mask_mod {name} must return a bool tensor (True = visible), got dtype "
                        f"{result.dtype}; use comparisons (q_idx >= kv_idx) or .bool(). A "
                        "function that returns scores is a score_mod: pass it as "
                        "flex_attention(score_mod=...)")
    if result.dim() > 4:
        raise ValueError(f"mask_mod {name} returned shape {tuple(result.shape)}, which has more "
                         f"than 4 dimensions; it must broadcast to (b, h, q, kv) = {target}")
    result = result.reshape((1,) * (4 - result.dim()) + tuple(result.shape))
    if any(r not in (1, t) for r, t in zip(result.shape, target)):
        raise ValueError(f"mask_mod {name} returned shape {tuple(result.shape)}, which does not "
                         f"broadcast to (b, h, q, kv) = {target}; combine the index tensors "
                         "elementwise (they already broadcast) instead of reshaping them")
    return result


def _index_tensors(batch: int, nheads: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``b`` as ``(batch, 1, 1, 1)`` and ``h`` as ``(1, nheads, 1, 1)``."""
    b = torch.arange(batch, dtype=_INDEX_DTYPE, device=device).view(batch, 1, 1, 1)
    h = torch.arange(nheads, dtype=_INDEX_DTYPE, device=device).view(1, nheads, 1, 1)
    return b, h


def _check_device(device) -> torch.device:
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={str(device)!r} but CUDA is not available on this machine; "
                         "pass device=\"cpu\" (the block mask must live where q/k/v live)")
    return device


# --------------------------------------------------------------------------------------------
# dense block layouts <-> ordered index lists


def _dense_to_ordered(layout: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Bool ``(..., rows, cols)`` -> ``(num (..., rows) int32, indices (..., rows, cols) int32)``.

    ``indices[..., r, :num[..., r]]`` are the listed columns in increasing order; the remaining
    entries are the unlisted columns, also increasing (each row is a permutation of
    ``range(cols)``), so a kernel may prefetch past the count without reading out of range.
    """
    dense = layout.to(torch.int8)
    num = dense.sum(dim=-1, dtype=torch.int32)
    indices = torch.argsort(dense, dim=-1, descending=True, stable=True).to(torch.int32)
    return num.contiguous(), indices.contiguous()


def _ordered_to_dense(num: torch.Tensor, indices: torch.Tensor, cols: int) -> torch.Tensor:
    """Inverse of :func:`_dense_to_ordered`: bool ``(..., rows, cols)``."""
    width = indices.shape[-1]
    listed = torch.arange(width, device=indices.device) < num[..., None].long()
    target = torch.where(listed, indices.long(), torch.full_like(indices.long(), cols))
    dense = torch.zeros(*indices.shape[:-1], cols + 1, dtype=torch.bool, device=indices.device)
    dense.scatter_(-1, target, True)
    return dense[..., :cols]


def _expand_block_size(layout: torch.Tensor, block_q: int, block_kv: int, seqlen_q: int,
                       seqlen_k: int) -> torch.Tensor:
    """Block layout ``(..., nq, nkv)`` -> element layout ``(..., seqlen_q, seqlen_k)``."""
    q_block = torch.arange(seqlen_q, device=layout.device) // block_q
    kv_block = torch.arange(seqlen_k, device=layout.device) // block_kv
    return layout[..., q_block, :][..., kv_block]


# --------------------------------------------------------------------------------------------
# BlockMask


def noop_mask(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
              kv_idx: torch.Tensor) -> torch.Tensor:
    """The mask_mod that hides nothing (a 0-d ``True`` that broadcasts to any shape)."""
    return torch.ones((), dtype=torch.bool, device=b.device)


def _sliced_mask_mod(b, h, q_idx, kv_idx):
    raise RuntimeError("this BlockMask was sliced with [] over batch/head, so its mask_mod no "
                       "longer matches the b/h indices; set block_mask.mask_mod to a mask_mod "
                       "written for the sliced indices, or slice the inputs instead")


class BlockMask:
    """Block-sparse attention mask (FlexAttention's format; same attribute names as torch's).

    The score matrix of one (batch, head) is cut into tiles of ``BLOCK_SIZE = (BQ, BKV)``; with
    ``nq = ceil(Q_LEN / BQ)`` query blocks and ``nkv = ceil(KV_LEN / BKV)`` key blocks, and
    ``B``/``H`` the mask's batch/head sizes (1 = the same mask for every batch/head):

    ==================  =====================  ===========================================
    attribute           shape, dtype           meaning
    ==================  =====================  ===========================================
    kv_num_blocks       (B, H, nq) int32       partial key blocks of each query block
    kv_indices          (B, H, nq, nkv) int32  their indices, increasing, first
                                               ``kv_num_blocks`` entries valid
    full_kv_num_blocks  (B, H, nq) int32       full key blocks of each query block
    full_kv_indices     (B, H, nq, nkv) int32  their indices (same convention)
    q_num_blocks        (B, H, nkv) int32      transposed: partial query blocks of each key
    q_indices           (B, H, nkv, nq) int32  block (the dK/dV backward iterates these)
    full_q_num_blocks   (B, H, nkv) int32      full query blocks of each key block
    full_q_indices      (B, H, nkv, nq) int32
    BLOCK_SIZE          (int, int)             (BQ, BKV)
    seq_lengths         (int, int)             (Q_LEN, KV_LEN)
    mask_mod            callable               evaluated on partial blocks only
    ==================  =====================  ===========================================

    Padding: each index row is a permutation of ``range(width)``: the listed blocks first, in
    increasing order, then the unlisted ones, also increasing, so reading past the count never
    goes out of range. A block is never listed both partial and full. All tensors are
    contiguous and on one device.

    Semantics: element ``(q, kv)`` of batch ``b``, head ``h`` is visible iff its block is listed
    full, or listed partial and ``mask_mod(b, h, q, kv)`` is True. "Full" means every element
    *inside the sequences* is visible: the last block row/column may overhang ``Q_LEN``/
    ``KV_LEN`` and the sequence-end bound still applies there. With ``B == 1`` (``H == 1``)
    the mask is shared by every batch (head) and its mask_mod must not depend on ``b`` (``h``).

    Build one with :func:`create_block_mask` (from a mask_mod), :meth:`from_layout` (from a
    block-level bool layout, all blocks full) or :meth:`from_kv_blocks` (from index lists).
    """

    def __init__(self, seq_lengths: tuple[int, int], kv_num_blocks: torch.Tensor,
                 kv_indices: torch.Tensor, full_kv_num_blocks: Optional[torch.Tensor],
                 full_kv_indices: Optional[torch.Tensor], q_num_blocks: Optional[torch.Tensor],
                 q_indices: Optional[torch.Tensor], full_q_num_blocks: Optional[torch.Tensor],
                 full_q_indices: Optional[torch.Tensor],
                 BLOCK_SIZE: Union[int, tuple[int, int]] = _DEFAULT_BLOCK_SIZE,
                 mask_mod: Optional[MaskMod] = None) -> None:
        """Low level: every list given. Prefer :func:`create_block_mask`, :meth:`from_layout`
        or :meth:`from_kv_blocks`, which derive and check the transposed lists."""
        self.seq_lengths = (int(seq_lengths[0]), int(seq_lengths[1]))
        self.kv_num_blocks = kv_num_blocks
        self.kv_indices = kv_indices
        self.full_kv_num_blocks = full_kv_num_blocks
        self.full_kv_indices = full_kv_indices
        self.q_num_blocks = q_num_blocks
        self.q_indices = q_indices
        self.full_q_num_blocks = full_q_num_blocks
        self.full_q_indices = full_q_indices
        self.BLOCK_SIZE = _check_block_size(BLOCK_SIZE)
        self.mask_mod = mask_mod if mask_mod is not None else noop_mask
        if full_kv_num_blocks is None or q_num_blocks is None or (
                full_kv_num_blocks is not None and full_q_num_blocks is None):
            self._derive_missing_lists()

    def _derive_missing_lists(self) -> None:
        """torch allows ``None`` for the full and transposed lists; flashtile always holds all
        eight (no full blocks = zero counts), derived from the forward lists."""
        nkv = _cdiv(self.seq_lengths[1], self.BLOCK_SIZE[1])
        partial = _ordered_to_dense(self.kv_num_blocks, self.kv_indices, nkv)
        if self.full_kv_num_blocks is None:
            full = torch.zeros_like(partial)
        else:
            full = _ordered_to_dense(self.full_kv_num_blocks, self.full_kv_indices, nkv)
        derived = BlockMask._from_layouts(partial, full, self.seq_lengths, self.BLOCK_SIZE,
                                          self.mask_mod)
        for name in self._TENSORS:
            setattr(self, name, getattr(derived, name))

    # ---- construction ----------------------------------------------------------------------

    @classmethod
    def _from_layouts(cls, partial: torch.Tensor, full: torch.Tensor,
                      seq_lengths: tuple[int, int], BLOCK_SIZE: tuple[int, int],
                      mask_mod: Optional[MaskMod]) -> "BlockMask":
        """From disjoint bool block layouts ``(B, H, nq, nkv)``: build all eight lists."""
        kv_num, kv_idx = _dense_to_ordered(partial)
        full_kv_num, full_kv_idx = _dense_to_ordered(full)
        q_num, q_idx = _dense_to_ordered(partial.transpose(-1, -2))
        full_q_num, full_q_idx = _dense_to_ordered(full.transpose(-1, -2))
        return cls(seq_lengths, kv_num, kv_idx, full_kv_num, full_kv_idx, q_num, q_idx,
                   full_q_num, full_q_idx, BLOCK_SIZE, mask_mod)

    @classmethod
    def from_kv_blocks(cls, kv_num_blocks: torch.Tensor, kv_indices: torch.Tensor,
                       full_kv_num_blocks: Optional[torch.Tensor] = None,
                       full_kv_indices: Optional[torch.Tensor] = None,
                       BLOCK_SIZE: Union[int, tuple[int, int]] = _DEFAULT_BLOCK_SIZE,
                       mask_mod: Optional[MaskMod] = None,
                       seq_lengths: Optional[tuple[int, int]] = None,
                       compute_q_blocks: bool = True) -> "BlockMask":
        """A BlockMask from the forward lists (torch's ``BlockMask.from_kv_blocks``).

        Args:
            kv_num_blocks: int ``(B, H, nq)``, partial key blocks per query block.
            kv_indices: int ``(B, H, nq, width)``; the first ``kv_num_blocks`` entries of each
                row are the partial blocks (any order, no repeats, ``< nkv``).
            full_kv_num_blocks, full_kv_indices: the same for full blocks (``None``: none);
                they must not repeat a partial block.
            BLOCK_SIZE: int or ``(BQ, BKV)``.
            mask_mod: evaluated on partial blocks (``None``: :func:`noop_mask`).
            seq_lengths: ``(Q_LEN, KV_LEN)``; default ``(nq * BQ, width * BKV)``.
            compute_q_blocks: accepted for torch compatibility; the transposed lists are always
                built (the backward needs them).

        The lists are re-normalised (sorted, padded as described in :class:`BlockMask`).
        """
        del compute_q_blocks
        block_q, block_kv = _check_block_size(BLOCK_SIZE)
        for name, t in (("kv_num_blocks", kv_num_blocks), ("kv_indices", kv_indices)):
            if not isinstance(t, torch.Tensor) or t.dtype.is_floating_point or t.is_complex():
                raise TypeError(f"{name} must be an integer tensor, got "
                                f"{getattr(t, 'dtype', type(t).__name__)}")
        if (full_kv_num_blocks is None) != (full_kv_indices is None):
            raise ValueError("full_kv_num_blocks and full_kv_indices must be given together "
                             "(or both None)")
        if kv_indices.dim() != 4 or kv_num_blocks.shape != kv_indices.shape[:-1]:
            raise ValueError(f"kv_indices must be (B, H, nq, width) and kv_num_blocks (B, H, nq), "
                             f"got {tuple(kv_indices.shape)} and {tuple(kv_num_blocks.shape)}")
        nq = kv_indices.shape[-2]
        if seq_lengths is None:
            seq_lengths = (nq * block_q, kv_indices.shape[-1] * block_kv)
        q_len = _check_length("seq_lengths[0]", seq_lengths[0])
        kv_len = _check_length("seq_lengths[1]", seq_lengths[1])
        nkv = _cdiv(kv_len, block_kv)
        if nq != _cdiv(q_len, block_q):
            raise ValueError(f"kv_indices has {nq} query blocks but seq_lengths[0]={q_len} with "
                             f"BLOCK_SIZE[0]={block_q} needs {_cdiv(q_len, block_q)}")

        def dense(num, idx, name):
            if idx.shape != kv_indices.shape or num.shape != kv_num_blocks.shape:
                raise ValueError(f"{name} lists must have the shapes of kv_num_blocks/kv_indices "
                                 f"{tuple(kv_num_blocks.shape)}/{tuple(kv_indices.shape)}, got "
                                 f"{tuple(num.shape)}/{tuple(idx.shape)}")
            num, idx = num.long(), idx.long()
            if bool((num < 0).any()) or bool((num > idx.shape[-1]).any()):
                raise ValueError(f"{name} counts must lie in [0, {idx.shape[-1]}]")
            listed = torch.arange(idx.shape[-1], device=idx.device) < num[..., None]
            if bool(((idx < 0) | (idx >= nkv))[listed].any()):
                raise ValueError(f"{name} indices must lie in [0, {nkv}) (KV_LEN={kv_len}, "
                                 f"BLOCK_SIZE[1]={block_kv})")
            layout = _ordered_to_dense(num, idx.clamp(0, nkv - 1), nkv)
            if int(layout.sum()) != int(num.sum()):
                raise ValueError(f"{name} lists repeat a block within a row")
            return layout

        partial = dense(kv_num_blocks, kv_indices, "partial (kv_num_blocks/kv_indices)")
        if full_kv_num_blocks is not None:
            full = dense(full_kv_num_blocks, full_kv_indices,
                         "full (full_kv_num_blocks/full_kv_indices)")
            if bool((partial & full).any()):
                raise ValueError("a block is listed both partial and full; list each block once")
        else:
            full = torch.zeros_like(partial)
        return cls._from_layouts(partial, full, (q_len, kv_len), (block_q, block_kv), mask_mod)

    @classmethod
    def from_layout(cls, layout: torch.Tensor, Q_LEN: int, KV_LEN: int,
                    BLOCK_SIZE: Union[int, tuple[int, int]] = _DEFAULT_BLOCK_SIZE) -> "BlockMask":
        """A BlockMask whose listed blocks are all full, from a block-level bool layout.

        Args:
            layout: bool (or 0/1 integer) ``(nq, nkv)`` or ``(B|1, H|1, nq, nkv)``, True where
                the block is computed (e.g. :func:`butterfly_block_layout`,
                :func:`random_block_layout`, :func:`strided_block_layout`).
            Q_LEN, KV_LEN: sequence lengths; ``nq = ceil(Q_LEN / BQ)``,
                ``nkv = ceil(KV_LEN / BKV)``.
            BLOCK_SIZE: int or ``(BQ, BKV)``.

        Example:
            >>> layout = butterfly_block_layout(8, 8)                   # (1, 1, 8, 8)
            >>> bm = BlockMask.from_layout(layout, 1024, 1024, BLOCK_SIZE=128)
        """
        block_q, block_kv = _check_block_size(BLOCK_SIZE)
        q_len, kv_len = _check_length("Q_LEN", Q_LEN), _check_length("KV_LEN", KV_LEN)
        if not isinstance(layout, torch.Tensor):
            raise TypeError(f"layout must be a bool tensor (nq, nkv) or (B, H, nq, nkv), got "
                            f"{type(layout).__name__}")
        if layout.dtype.is_floating_point or layout.is_complex():
            raise TypeError(f"layout must be bool (True = compute the block), got {layout.dtype}")
        if layout.dim() == 2:
            layout = layout[None, None]
        if layout.dim() != 4:
            raise ValueError(f"layout must have shape (nq, nkv) or (B, H, nq, nkv), got "
                             f"{tuple(layout.shape)}")
        if layout.dtype != torch.bool:
            if bool(((layout != 0) & (layout != 1)).any()):
                raise ValueError("an integer layout must hold only 0 and 1")
            layout = layout != 0
        want = (_cdiv(q_len, block_q), _cdiv(kv_len, block_kv))
        if tuple(layout.shape[-2:]) != want:
            raise ValueError(f"layout has {tuple(layout.shape[-2:])} blocks but Q_LEN={q_len}, "
                             f"KV_LEN={kv_len} with BLOCK_SIZE=({block_q}, {block_kv}) need "
                             f"{want} (nq, nkv)")
        layout = layout.contiguous()
        return cls._from_layouts(torch.zeros_like(layout), layout, (q_len, kv_len),
                                 (block_q, block_kv), None)

    @classmethod
    def from_bool_mask(cls, mask: torch.Tensor, Q_LEN: int, KV_LEN: int,
                       BLOCK_SIZE: Union[int, tuple[int, int]] = _DEFAULT_BLOCK_SIZE
                       ) -> "BlockMask":
        """The block summary of an element mask: blocks with no True are empty (never loaded),
        blocks that are all True inside the sequences are full, the rest partial.

        Args:
            mask: bool, broadcastable to ``(B, H, Q_LEN, KV_LEN)`` with 4 or fewer dims (e.g.
                SDPA's ``attn_mask``); read one strip of query blocks at a time, never expanded
                over batch/heads.
            Q_LEN, KV_LEN, BLOCK_SIZE: as in :func:`create_block_mask`.

        The result lists blocks only; the element mask itself must still be applied inside
        partial blocks (``scaled_dot_product_attention`` keeps it as the additive/bool bias).
        """
        block_q, block_kv = _check_block_size(BLOCK_SIZE)
        q_len, kv_len = _check_length("Q_LEN", Q_LEN), _check_length("KV_LEN", KV_LEN)
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() > 4:
            raise TypeError("mask must be a bool tensor with at most 4 dims, got "
                            f"{getattr(mask, 'dtype', type(mask).__name__)}")
        full4 = mask[(None,) * (4 - mask.dim())]                       # (B|1, H|1, sq|1, sk|1)
        nq, nkv = _cdiv(q_len, block_q), _cdiv(kv_len, block_kv)
        shape = (full4.shape[0], full4.shape[1], nq, nkv)
        any_visible = torch.zeros(shape, dtype=torch.bool, device=mask.device)
        all_visible = torch.zeros(shape, dtype=torch.bool, device=mask.device)
        for qb in range(nq):
            rows = slice(qb * block_q, min((qb + 1) * block_q, q_len))
            strip = full4[:, :, rows if full4.shape[2] > 1 else slice(None)]
            strip = strip.expand(*strip.shape[:2], rows.stop - rows.start, kv_len)
            pad = nkv * block_kv - kv_len
            # Outside the sequence counts as False for "any" and True for "all".
            lo = torch.nn.functional.pad(strip, (0, pad), value=False)
            hi = torch.nn.functional.pad(strip, (0, pad), value=True)
            any_visible[:, :, qb] = lo.view(*lo.shape[:3], nkv, block_kv).any(-1).any(2)
            all_visible[:, :, qb] = hi.view(*hi.shape[:3], nkv, block_kv).all(-1).all(2)
        return cls._from_layouts(any_visible & ~all_visible, all_visible, (q_len, kv_len),
                                 (block_q, block_kv), None)

    # ---- views -----------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(B, H, Q_LEN, KV_LEN)`` (B/H are 1 where the mask is shared)."""
        return tuple(self.kv_num_blocks.shape[:2]) + self.seq_lengths

    @property
    def device(self) -> torch.device:
        return self.kv_num_blocks.device

    @property
    def num_blocks(self) -> tuple[int, int]:
        """``(nq, nkv)``: query and key blocks."""
        return self.kv_indices.shape[-2], self.q_indices.shape[-2]

    def dense_layouts(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(partial, full)``: disjoint bool block layouts ``(B, H, nq, nkv)``."""
        nkv = self.num_blocks[1]
        return (_ordered_to_dense(self.kv_num_blocks, self.kv_indices, nkv),
                _ordered_to_dense(self.full_kv_num_blocks, self.full_kv_indices, nkv))

    def to_dense(self) -> torch.Tensor:
        """Bool ``(B, H, nq, nkv)``: True where the block is computed (partial or full)."""
        partial, full = self.dense_layouts()
        return partial | full

    def to_dense_mask(self, seqlen_q: int, seqlen_k: int) -> torch.Tensor:
        """The element mask bool ``(B, H, seqlen_q, seqlen_k)`` this block mask stands for.

        ``full block | (partial block & mask_mod)``, with ``mask_mod`` evaluated on this mask's
        own ``b < B``, ``h < H``. Materialises ``seqlen_q x seqlen_k``: for the reference and
        tests. ``(seqlen_q, seqlen_k)`` must equal :attr:`seq_lengths`.
        """
        if (seqlen_q, seqlen_k) != self.seq_lengths:
            raise ValueError(f"this BlockMask was built for (Q_LEN, KV_LEN) = {self.seq_lengths}, "
                             f"got ({seqlen_q}, {seqlen_k}); build it with the inputs' lengths")
        block_q, block_kv = self.BLOCK_SIZE
        partial, full = self.dense_layouts()
        partial = _expand_block_size(partial, block_q, block_kv, seqlen_q, seqlen_k)
        full = _expand_block_size(full, block_q, block_kv, seqlen_q, seqlen_k)
        batch, nheads = self.shape[:2]
        b, h = _index_tensors(batch, nheads, self.device)
        q_idx = torch.arange(seqlen_q, dtype=_INDEX_DTYPE, device=self.device).view(1, 1, -1, 1)
        kv_idx = torch.arange(seqlen_k, dtype=_INDEX_DTYPE, device=self.device).view(1, 1, 1, -1)
        if not bool(partial.any()):
            return full
        keep = _check_mask_result(self.mask_mod(b, h, q_idx, kv_idx),
                                  (batch, nheads, seqlen_q, seqlen_k), self.mask_mod)
        return full | (partial & keep)

    def numel(self) -> int:
        """Elements of the (unsparsified) mask: ``B * H * Q_LEN * KV_LEN``."""
        return math.prod(self.shape)

    def density(self) -> float:
        """Fraction of blocks that are computed (partial or full), in ``[0, 1]``."""
        listed = int(self.kv_num_blocks.sum()) + int(self.full_kv_num_blocks.sum())
        return listed / self.kv_indices.numel()

    def sparsity(self) -> float:
        """Percentage of blocks that are skipped: ``100 * (1 - density())``."""
        return 100.0 * (1.0 - self.density())

    def to(self, device: Union[torch.device, str]) -> "BlockMask":
        """A copy with every tensor on ``device`` (the mask_mod's captured tensors are not
        moved: capture them on the device you will run on)."""
        tensors = [getattr(self, name).to(device) for name in self._TENSORS]
        return BlockMask(self.seq_lengths, *tensors, BLOCK_SIZE=self.BLOCK_SIZE,
                         mask_mod=self.mask_mod)

    _TENSORS = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices",
                "q_num_blocks", "q_indices", "full_q_num_blocks", "full_q_indices")

    def as_tuple(self, flatten: bool = True) -> tuple:
        """``(*seq_lengths, 8 tensors, *BLOCK_SIZE, mask_mod)`` (torch's order); with
        ``flatten=False`` the lengths and block size stay tuples."""
        tensors = tuple(getattr(self, name) for name in self._TENSORS)
        if flatten:
            return (*self.seq_lengths, *tensors, *self.BLOCK_SIZE, self.mask_mod)
        return (self.seq_lengths, *tensors, self.BLOCK_SIZE, self.mask_mod)

    def __getitem__(self, index) -> "BlockMask":
        """Select batches/heads: ``bm[b]``, ``bm[b, h]``, slices too. Dimensions are kept
        (an int selects a size-1 slice), as torch does. The result's mask_mod raises: its
        b/h indices no longer match the original function."""
        index = index if isinstance(index, tuple) else (index,)
        if len(index) > 2:
            raise IndexError("BlockMask indexing selects batch and head only: bm[b] or bm[b, h]")
        sizes = self.shape[:2]
        norm = []
        for i, n in zip(index + (slice(None),) * (2 - len(index)), sizes):
            if _is_int(i):
                if not -n <= i < n:
                    raise IndexError(f"index {i} out of range for size {n}")
                i = i % n
                i = slice(i, i + 1)
            elif not isinstance(i, slice):
                raise TypeError(f"BlockMask indices must be ints or slices, got {i!r}")
            norm.append(i)
        partial, full = self.dense_layouts()
        partial, full = partial[norm[0], norm[1]], full[norm[0], norm[1]]
        if partial.shape[0] == 0 or partial.shape[1] == 0:
            raise IndexError(f"index {index!r} selects no batch/head of a mask of shape "
                             f"{self.shape}")
        keeps_all = all(s == slice(None) for s in norm)
        return BlockMask._from_layouts(partial.contiguous(), full.contiguous(), self.seq_lengths,
                                       self.BLOCK_SIZE,
                                       self.mask_mod if keeps_all else _sliced_mask_mod)

    # ---- printing ----------------------------------------------------------------------------

    def to_string(self, grid_size: Union[int, tuple[int, int]] = (20, 20),
                  limit: int = 4) -> str:
        """ASCII picture of each (batch, head) layout: ``#`` full, ``+`` partial (or a mix of
        full and empty when several blocks share one cell), ``.`` empty. At most ``grid_size``
        cells per side (-1: one cell per block), at most ``limit`` (batch, head) pictures."""
        partial, full = self.dense_layouts()
        nq, nkv = partial.shape[-2:]
        if grid_size == -1:
            rows, cols = nq, nkv
        elif _is_int(grid_size):
            rows = cols = grid_size
        else:
            rows, cols = grid_size
        row_step, col_step = max(1, _cdiv(nq, rows)), max(1, _cdiv(nkv, cols))
        pictures = []
        batch, nheads = self.shape[:2]
        for n, (b, h) in enumerate((b, h) for b in range(batch) for h in range(nheads)):
            if n == limit:
                pictures.append(f"... ({batch * nheads - limit} more; to_string(limit=N) or "
                                "bm[b, h] shows others)")
                break
            lines = [f"(b={b}, h={h})"]
            for r in range(0, nq, row_step):
                line = []
                for c in range(0, nkv, col_step):
                    p = partial[b, h, r:r + row_step, c:c + col_step]
                    f = full[b, h, r:r + row_step, c:c + col_step]
                    line.append("#" if bool(f.all()) else "." if not bool((p | f).any()) else "+")
                lines.append(" ".join(line))
            pictures.append("\n".join(lines))
        return "\n".join(pictures)

    def __repr__(self) -> str:
        return (f"BlockMask(shape={self.shape}, BLOCK_SIZE={self.BLOCK_SIZE}, "
                f"sparsity={self.sparsity():.2f}%, mask_mod={_mod_name(self.mask_mod)},\n"
                f"{self.to_string(limit=2)}\n)")

    __str__ = __repr__

    def check_compatible(self, batch: int, nheads: int, seqlen_q: int, seqlen_k: int,
                         device: torch.device, where: str = "block_mask") -> None:
        """Raise ``ValueError`` unless this mask fits inputs of these sizes on ``device``."""
        mb, mh = self.shape[:2]
        if self.seq_lengths != (seqlen_q, seqlen_k):
            raise ValueError(f"{where} was built for (Q_LEN, KV_LEN) = {self.seq_lengths} but the "
                             f"inputs have seqlen_q={seqlen_q}, seqlen_k={seqlen_k}; build it "
                             f"with create_block_mask(mask_mod, B, H, {seqlen_q}, {seqlen_k}, ...)")
        if mb not in (1, batch):
            raise ValueError(f"{where} has batch size {mb} but the inputs have batch {batch}; "
                             "build it with B=None (shared) or B=batch")
        if mh not in (1, nheads):
            raise ValueError(f"{where} has {mh} heads but the query has {nheads}; build it with "
                             "H=None (shared) or H=number of query heads")
        if self.device != torch.device(device):
            raise ValueError(f"{where} lives on {self.device} but the inputs on {device}; "
                             f"move it with {where}.to({str(device)!r})")


# --------------------------------------------------------------------------------------------
# create_block_mask


def _segments(length: int, block: int, max_len: int) -> list[tuple[int, int, int]]:
    """Tiles ``[start, end)`` of one axis for create_block_mask, with their reduction group.

    Whole blocks when a block fits in ``max_len`` (``group = block``; the last tile may overhang
    ``length``, the caller clamps indices), else pieces of one block (``group = end - start``,
    never past ``length``). Each tile covers ``(end - start) // group`` blocks starting at
    block ``start // block``.
    """
    n_blocks = _cdiv(length, block)
    if block <= max_len:
        step = max(1, max_len // block) * block
        return [(s, min(s + step, n_blocks * block), block)
                for s in range(0, n_blocks * block, step)]
    out = []
    for blk in range(n_blocks):
        end = min((blk + 1) * block, length)
        out.extend((s, min(s + max_len, end), min(s + max_len, end) - s)
                   for s in range(blk * block, end, max_len))
    return out


def _classify_blocks(mask_mod: MaskMod, batch: int, nheads: int, q_len: int, kv_len: int,
                     block_q: int, block_kv: int, device: torch.device):
    """``(partial, full)`` bool ``(batch, nheads, nq, nkv)``, evaluating mask_mod tile by tile.

    Exact: every element inside the sequences is evaluated once. Tiles have at most
    ``_TILE_ELEMENTS`` elements; indices past ``Q_LEN``/``KV_LEN`` (the overhang of the last
    block) are clamped to the last row/column, which duplicates values already in the block and
    so changes neither its "any" nor its "all".
    """
    b_idx, h_idx = _index_tensors(batch, nheads, device)
    probe = _check_mask_result(
        mask_mod(b_idx, h_idx, torch.zeros((1, 1, 1, 1), dtype=_INDEX_DTYPE, device=device),
                 torch.zeros((1, 1, 1, 1), dtype=_INDEX_DTYPE, device=device)),
        (batch, nheads, 1, 1), mask_mod)
    depth = probe.shape[0] * probe.shape[1]         # (b, h) planes the result really has
    nq, nkv = _cdiv(q_len, block_q), _cdiv(kv_len, block_kv)

    on_cpu = device.type == "cpu"
    tile_elements = _TILE_ELEMENTS if on_cpu else _GPU_TILE_ELEMENTS
    col_tiles = _segments(kv_len, block_kv, _TILE_COLUMNS if on_cpu else _GPU_TILE_COLUMNS)
    max_cols = max(end - start for start, end, _ in col_tiles)
    row_tiles = _segments(q_len, block_q, max(1, tile_elements // (depth * max_cols)))
    q_all = torch.arange(nq * block_q, dtype=_INDEX_DTYPE, device=device).clamp_(max=q_len - 1)
    kv_all = torch.arange(nkv * block_kv, dtype=_INDEX_DTYPE, device=device).clamp_(
        max=kv_len - 1)

    def classify_rows(row_tiles, any_visible, all_visible):
        for r0, r1, rgroup in row_tiles:
            q_idx = q_all[r0:r1].view(1, 1, -1, 1)
            qb0, nrb = r0 // block_q, (r1 - r0) // rgroup
            for c0, c1, cgroup in col_tiles:
                kv_idx = kv_all[c0:c1].view(1, 1, 1, -1)
                kb0, ncb = c0 // block_kv, (c1 - c0) // cgroup
                tile = _check_mask_result(mask_mod(b_idx, h_idx, q_idx, kv_idx),
                                          (batch, nheads, r1 - r0, c1 - c0), mask_mod)
                tb, th, tq, tk = tile.shape
                # any/all over each block = max/min of the 0/1 bytes over its rows, then its
                # columns. A dimension of size 1 (result independent of q or kv) needs none.
                u8 = tile.contiguous().view(torch.uint8).reshape(tb * th, tq, tk)
                hi, lo = u8, u8
                if tq > 1:
                    hi = u8.view(tb * th, nrb, rgroup, tk).amax(dim=2)
                    lo = u8.view(tb * th, nrb, rgroup, tk).amin(dim=2)
                if tk > 1:
                    hi = hi.reshape(tb * th, hi.shape[1], ncb, cgroup).amax(dim=3)
                    lo = lo.reshape(tb * th, lo.shape[1], ncb, cgroup).amin(dim=3)
                hi = hi.view(tb, th, hi.shape[1], hi.shape[2]).bool()
                lo = lo.view(tb, th, lo.shape[1], lo.shape[2]).bool()
                any_visible[:, :, qb0:qb0 + nrb, kb0:kb0 + ncb] |= hi
                all_visible[:, :, qb0:qb0 + nrb, kb0:kb0 + ncb] &= lo

    def new_grids():
        return (torch.zeros(batch, nheads, nq, nkv, dtype=torch.bool, device=device),
                torch.ones(batch, nheads, nq, nkv, dtype=torch.bool, device=device))

    if not on_cpu:
        any_visible, all_visible = new_grids()
        classify_rows(row_tiles, any_visible, all_visible)
        return any_visible & ~all_visible, all_visible
    # On CPU the tiles are too small for torch's OpenMP pool (its barriers stall badly when the
    # cores are shared); run single-threaded ops on our own worker threads instead, each with
    # its own grids (a block row can span several row tiles), combined at the end.
    threads = torch.get_num_threads()
    workers = max(1, min(threads, len(row_tiles), _MAX_WORKERS))
    grids = [new_grids() for _ in range(workers)]
    torch.set_num_threads(1)
    try:
        if workers == 1:
            classify_rows(row_tiles, *grids[0])
        else:
            def work(w):
                torch.set_num_threads(1)
                classify_rows(row_tiles[w::workers], *grids[w])
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(work, range(workers)))
    finally:
        torch.set_num_threads(threads)
    any_visible, all_visible = grids[0]
    for more_any, more_all in grids[1:]:
        any_visible |= more_any
        all_visible &= more_all
    return any_visible & ~all_visible, all_visible


def create_block_mask(mask_mod: MaskMod, B: Optional[int], H: Optional[int], Q_LEN: int,
                      KV_LEN: int, device: Union[torch.device, str] = "cuda",
                      BLOCK_SIZE: Union[int, tuple[int, int]] = _DEFAULT_BLOCK_SIZE,
                      _compile: bool = False) -> BlockMask:
    """Build a :class:`BlockMask` from a ``mask_mod``, without materialising ``Q_LEN x KV_LEN``.

    ``mask_mod`` is evaluated exactly on every element, one tile of at most ~0.5M elements at
    a time (int32 index tensors, like torch's), and each ``BQ x BKV`` block is classified as
    empty (not listed), full (every element visible: no mask work at run time) or partial.

    Args:
        mask_mod: ``mask_mod(b, h, q_idx, kv_idx) -> bool tensor`` (True = visible); the index
            tensors broadcast (``b`` is ``(B, 1, 1, 1)``, ``h`` is ``(1, H, 1, 1)``, ``q_idx``
            ``(1, 1, n, 1)``, ``kv_idx`` ``(1, 1, 1, m)``).
        B, H: batch size and number of *query* heads, or ``None`` to share one mask over all
            batches / heads (the mask_mod then must not depend on ``b`` / ``h``).
        Q_LEN, KV_LEN: query and key sequence lengths (any positive ints; the last block may
            overhang).
        device: where the mask is built and stored; it must be q/k/v's device.
        BLOCK_SIZE: int or ``(BQ, BKV)`` (default 128).
        _compile: accepted for torch compatibility, ignored.

    Returns:
        BlockMask with ``B or 1`` batches and ``H or 1`` heads.

    Example:
        >>> bm = create_block_mask(causal_mask, None, None, 4096, 4096, device="cpu")
        >>> out = flex_attention(q, k, v, block_mask=bm)          # q: (b, h, 4096, d)
    """
    del _compile
    _check_mask_mod(mask_mod, "create_block_mask")
    batch, nheads = _check_broadcast_dim("B", B), _check_broadcast_dim("H", H)
    q_len, kv_len = _check_length("Q_LEN", Q_LEN), _check_length("KV_LEN", KV_LEN)
    block_q, block_kv = _check_block_size(BLOCK_SIZE)
    device = _check_device(device)
    with torch.no_grad():
        partial, full = _classify_blocks(mask_mod, batch, nheads, q_len, kv_len, block_q,
                                         block_kv, device)
    return BlockMask._from_layouts(partial, full, (q_len, kv_len), (block_q, block_kv), mask_mod)


def create_mask(mask_mod: MaskMod, B: Optional[int], H: Optional[int], Q_LEN: int, KV_LEN: int,
                device: Union[torch.device, str] = "cuda") -> torch.Tensor:
    """The dense bool mask ``(B or 1, H or 1, Q_LEN, KV_LEN)`` of a mask_mod (materialises it:
    small shapes, tests, or an SDPA ``attn_mask``)."""
    _check_mask_mod(mask_mod, "create_mask")
    batch, nheads = _check_broadcast_dim("B", B), _check_broadcast_dim("H", H)
    q_len, kv_len = _check_length("Q_LEN", Q_LEN), _check_length("KV_LEN", KV_LEN)
    device = _check_device(device)
    b, h = _index_tensors(batch, nheads, device)
    q_idx = torch.arange(q_len, dtype=_INDEX_DTYPE, device=device).view(1, 1, -1, 1)
    kv_idx = torch.arange(kv_len, dtype=_INDEX_DTYPE, device=device).view(1, 1, 1, -1)
    target = (batch, nheads, q_len, kv_len)
    return _check_mask_result(mask_mod(b, h, q_idx, kv_idx), target, mask_mod).expand(target)


# --------------------------------------------------------------------------------------------
# composing mask_mods


def and_masks(*mask_mods: MaskMod) -> MaskMod:
    """The mask_mod that is True where every one of ``mask_mods`` is (none: always True)."""
    for m in mask_mods:
        if not callable(m):
            raise TypeError(f"and_masks takes mask_mod functions, got {type(m).__name__}")

    def and_mask(b, h, q_idx, kv_idx):
        result = torch.ones((), dtype=torch.bool, device=b.device)
        for m in mask_mods:
            result = result & m(b, h, q_idx, kv_idx)
        return result
    return _named(and_mask, f"and_masks({', '.join(_mod_name(m) for m in mask_mods)})")


def or_masks(*mask_mods: MaskMod) -> MaskMod:
    """The mask_mod that is True where any of ``mask_mods`` is (none: always False)."""
    for m in mask_mods:
        if not callable(m):
            raise TypeError(f"or_masks takes mask_mod functions, got {type(m).__name__}")

    def or_mask(b, h, q_idx, kv_idx):
        result = torch.zeros((), dtype=torch.bool, device=b.device)
        for m in mask_mods:
            result = result | m(b, h, q_idx, kv_idx)
        return result
    return _named(or_mask, f"or_masks({', '.join(_mod_name(m) for m in mask_mods)})")


# --------------------------------------------------------------------------------------------
# mask_mod library


def causal_mask(b, h, q_idx, kv_idx):
    """Query ``i`` sees keys ``j <= i`` (top-left aligned, as FlexAttention/SDPA)::

        1 0 0 0
        1 1 0 0
        1 1 1 0
    """
    return q_idx >= kv_idx


def sliding_window(window: int, causal: bool = True) -> MaskMod:
    """Query ``i`` sees keys ``i - window <= j <= i`` (``causal=False``: ``|i - j| <= window``).

    ``window=2``, causal::

        1 0 0 0 0
        1 1 0 0 0
        1 1 1 0 0
        0 1 1 1 0
    """
    if not _is_int(window) or window < 0:
        raise ValueError(f"window must be a non-negative int, got {window!r}")
    if causal:
        def mask_mod(b, h, q_idx, kv_idx):
            # 0 <= i - j <= w  <=>  |2 (i - j) - w| <= w: one comparison instead of two.
            return (2 * q_idx - window - 2 * kv_idx).abs() <= window
    else:
        def mask_mod(b, h, q_idx, kv_idx):
            return (q_idx - kv_idx).abs() <= window
    return _named(mask_mod, f"sliding_window({window}{'' if causal else ', causal=False'})")


def _check_int_tensor(name: str, x, dims: tuple[int, ...]) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or x.dtype.is_floating_point or x.dtype == torch.bool \
            or x.is_complex():
        raise TypeError(f"{name} must be an integer tensor, got "
                        f"{getattr(x, 'dtype', type(x).__name__)}")
    if x.dim() not in dims:
        raise ValueError(f"{name} must have {' or '.join(map(str, dims))} dimensions, got shape "
                         f"{tuple(x.shape)}")
    return x


def document_mask(doc_ids: torch.Tensor, kv_doc_ids: Optional[torch.Tensor] = None) -> MaskMod:
    """Packed sequences: a query sees only keys of its own document.

    Args:
        doc_ids: integer ``(seqlen,)`` (shared by the batch) or ``(batch, seqlen)``: the
            document of each query token, e.g. ``[0, 0, 0, 1, 1, 2]``. Keep it on the device
            the attention runs on.
        kv_doc_ids: the documents of the key tokens when they differ (default ``doc_ids``).

    Combine with causal for packed causal LM: ``and_masks(causal_mask, document_mask(ids))``::

        doc_ids = [0, 0, 1, 1, 1]
        1 1 0 0 0
        1 1 0 0 0
        0 0 1 1 1
        0 0 1 1 1
        0 0 1 1 1
    """
    doc_ids = _check_int_tensor("doc_ids", doc_ids, (1, 2))
    kv_doc_ids = doc_ids if kv_doc_ids is None else _check_int_tensor("kv_doc_ids", kv_doc_ids,
                                                                      (doc_ids.dim(),))
    if doc_ids.dim() == 1:
        def mask_mod(b, h, q_idx, kv_idx):
            return doc_ids[q_idx] == kv_doc_ids[kv_idx]
    else:
        def mask_mod(b, h, q_idx, kv_idx):
            return doc_ids[b, q_idx] == kv_doc_ids[b, kv_idx]
    return _named(mask_mod, "document_mask")


def prefix_lm(prefix_len: Union[int, torch.Tensor]) -> MaskMod:
    """Prefix LM: every query sees the first ``prefix_len`` keys, and causal after them.

    ``prefix_len`` is an int or an integer tensor ``(batch,)`` (one prefix per sequence)::

        prefix_len = 2
        1 1 0 0
        1 1 0 0
        1 1 1 0
        1 1 1 1
    """
    if isinstance(prefix_len, torch.Tensor):
        prefix = _check_int_tensor("prefix_len", prefix_len, (1,))

        def mask_mod(b, h, q_idx, kv_idx):
            return (kv_idx < prefix[b]) | (q_idx >= kv_idx)
    else:
        if not _is_int(prefix_len) or prefix_len < 0:
            raise ValueError(f"prefix_len must be a non-negative int or an integer tensor "
                             f"(batch,), got {prefix_len!r}")

        def mask_mod(b, h, q_idx, kv_idx):
            return (kv_idx < prefix_len) | (q_idx >= kv_idx)
    return _named(mask_mod, "prefix_lm")


def dilated(stride: int) -> MaskMod:
    """Dilated (strided) attention: query ``i`` sees keys ``j`` with ``(i - j) % stride == 0``.
    Combine with :func:`causal_mask` or :func:`sliding_window` via :func:`and_masks`::

        stride = 2
        1 0 1 0
        0 1 0 1
        1 0 1 0
    """
    if not _is_int(stride) or stride < 1:
        raise ValueError(f"stride must be a positive int, got {stride!r}")

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx) % stride == 0
    return _named(mask_mod, f"dilated({stride})")


def layout_mask(layout: torch.Tensor, BLOCK_SIZE: Union[int, tuple[int, int]]) -> MaskMod:
    """The mask_mod of a block layout: element ``(i, j)`` is visible iff block
    ``(i // BQ, j // BKV)`` is True in ``layout`` (bool ``(nq, nkv)`` or ``(B|1, H|1, nq, nkv)``).

    With :func:`create_block_mask` at the same ``BLOCK_SIZE`` every block comes out full or
    empty; at another block size blocks may come out partial.
    """
    block_q, block_kv = _check_block_size(BLOCK_SIZE)
    if not isinstance(layout, torch.Tensor) or layout.dtype != torch.bool:
        raise TypeError(f"layout must be a bool tensor, got {getattr(layout, 'dtype', layout)!r}")
    if layout.dim() == 2:
        layout = layout[None, None]
    if layout.dim() != 4:
        raise ValueError(f"layout must be (nq, nkv) or (B, H, nq, nkv), got {tuple(layout.shape)}")
    lb, lh = layout.shape[:2]

    def mask_mod(b, h, q_idx, kv_idx):
        return layout[b % lb, h % lh, q_idx // block_q, kv_idx // block_kv]
    return _named(mask_mod, "layout_mask")


def random_block(density: float, Q_LEN: int, KV_LEN: int,
                 BLOCK_SIZE: Union[int, tuple[int, int]] = _DEFAULT_BLOCK_SIZE,
                 B: Optional[int] = None, H: Optional[int] = None, seed: int = 0,
                 device: Union[torch.device, str] = "cpu") -> MaskMod:
    """A mask_mod that keeps a random ``density`` fraction of the ``BLOCK_SIZE`` blocks
    (:func:`random_block_layout` wrapped by :func:`layout_mask`)."""
    block_q, block_kv = _check_block_size(BLOCK_SIZE)
    layout = random_block_layout(_cdiv(_check_length("Q_LEN", Q_LEN), block_q),
                                 _cdiv(_check_length("KV_LEN", KV_LEN), block_kv), density,
                                 B=B, H=H, seed=seed, device=device)
    return _named(layout_mask(layout, (block_q, block_kv)), f"random_block({density})")


# --------------------------------------------------------------------------------------------
# block layouts (for BlockMask.from_layout)


def random_block_layout(n_q_blocks: int, n_kv_blocks: int, density: float,
                        B: Optional[int] = None, H: Optional[int] = None, seed: int = 0,
                        device: Union[torch.device, str] = "cpu") -> torch.Tensor:
    """Bool ``(B or 1, H or 1, n_q_blocks, n_kv_blocks)`` with exactly
    ``round(density * n_q_blocks * n_kv_blocks)`` True blocks per (batch, head), chosen
    uniformly with a generator seeded by ``seed`` (reproducible, independent of the global RNG).
    Some query blocks may get no key block: their rows see no key (output 0)."""
    n_q_blocks, n_kv_blocks = (_check_length("n_q_blocks", n_q_blocks),
                               _check_length("n_kv_blocks", n_kv_blocks))
    if isinstance(density, bool) or not isinstance(density, (int, float)) \
            or not 0.0 <= density <= 1.0:
        raise ValueError(f"density must be a float in [0, 1], got {density!r}")
    batch, nheads = _check_broadcast_dim("B", B), _check_broadcast_dim("H", H)
    total = n_q_blocks * n_kv_blocks
    keep = round(density * total)
    # Drawn on the CPU whatever the default device (`with torch.device("cuda")` would otherwise
    # ask a CPU generator for CUDA numbers, an error), so a seed gives one layout everywhere.
    gen = torch.Generator(device="cpu").manual_seed(seed)
    order = torch.rand(batch, nheads, total, generator=gen, device="cpu").argsort(dim=-1)
    layout = order < keep            # the `keep` blocks ranked first by a random permutation
    return layout.view(batch, nheads, n_q_blocks, n_kv_blocks).to(device)


def butterfly_block_layout(n_q_blocks: int, n_kv_blocks: Optional[int] = None,
                           max_stride: Optional[int] = None,
                           device: Union[torch.device, str] = "cpu") -> torch.Tensor:
    """Flat butterfly pattern (Dao et al., "Pixelated Butterfly", 2021; used by block-sparse
    FlashAttention): block ``(i, j)`` is kept iff ``i XOR j`` is 0 or a power of two
    ``<= max_stride`` (default: any). Bool ``(1, 1, n_q_blocks, n_kv_blocks)``; about
    ``log2(n) + 1`` blocks per row::

        n = 8:   # # . # . . . #
                 # # # . . . # .
                 . # # # . # . .   ...
    """
    n_q_blocks = _check_length("n_q_blocks", n_q_blocks)
    n_kv_blocks = n_q_blocks if n_kv_blocks is None else _check_length("n_kv_blocks",
                                                                       n_kv_blocks)
    if max_stride is not None and (not _is_int(max_stride) or max_stride < 1):
        raise ValueError(f"max_stride must be a positive int or None, got {max_stride!r}")
    i = torch.arange(n_q_blocks, device=device)[:, None]
    j = torch.arange(n_kv_blocks, device=device)[None, :]
    x = i ^ j
    keep = (x & (x - 1)) == 0                         # 0 or a power of two
    if max_stride is not None:
        keep = keep & (x <= max_stride)
    return keep[None, None].to(device)


def strided_block_layout(n_q_blocks: int, n_kv_blocks: Optional[int] = None, stride: int = 4,
                         local: int = 1, causal: bool = False,
                         device: Union[torch.device, str] = "cpu") -> torch.Tensor:
    """Sparse-Transformer style strided pattern (Child et al., 2019), at block level: block
    ``(i, j)`` is kept iff ``|i - j| < local`` (a local band) or ``(i - j) % stride == 0``;
    with ``causal`` only ``j <= i``. Bool ``(1, 1, n_q_blocks, n_kv_blocks)``::

        stride 3, local 1:   # . . # . .
                             . # . . # .
                             . . # . . #
                             # . . # . .
    """
    n_q_blocks = _check_length("n_q_blocks", n_q_blocks)
    n_kv_blocks = n_q_blocks if n_kv_blocks is None else _check_length("n_kv_blocks",
                                                                       n_kv_blocks)
    if not _is_int(stride) or stride < 1:
        raise ValueError(f"stride must be a positive int, got {stride!r}")
    if not _is_int(local) or local < 0:
        raise ValueError(f"local must be a non-negative int, got {local!r}")
    i = torch.arange(n_q_blocks, device=device)[:, None]
    j = torch.arange(n_kv_blocks, device=device)[None, :]
    keep = ((i - j).abs() < local) | ((i - j) % stride == 0)
    if causal:
        keep = keep & (j <= i)
    return keep[None, None].to(device)


# --------------------------------------------------------------------------------------------
# score_mod library


def relative_position_bias(table: torch.Tensor) -> ScoreMod:
    """Adds a learned bias indexed by the relative position ``i - j``.

    ``table`` is float ``(2 * L - 1,)`` (shared by the heads) or ``(H, 2 * L - 1)``; entry
    ``L - 1 + (i - j)`` is added, with ``i - j`` clamped to ``[-(L - 1), L - 1]`` (T5-style
    saturation for distances beyond the table).
    """
    if not isinstance(table, torch.Tensor) or not table.dtype.is_floating_point:
        raise TypeError(f"table must be a float tensor, got {getattr(table, 'dtype', table)!r}")
    if table.dim() not in (1, 2) or table.shape[-1] % 2 != 1:
        raise ValueError(f"table must be (2L-1,) or (H, 2L-1) (an odd last dim), got "
                         f"{tuple(table.shape)}")
    reach = (table.shape[-1] - 1) // 2

    if table.dim() == 1:
        def score_mod(score, b, h, q_idx, kv_idx):
            return score + table[(q_idx - kv_idx).clamp(-reach, reach) + reach]
    else:
        def score_mod(score, b, h, q_idx, kv_idx):
            return score + table[h, (q_idx - kv_idx).clamp(-reach, reach) + reach]
    return _named(score_mod, "relative_position_bias")


def alibi_slopes(nheads: int) -> torch.Tensor:
    """The standard ALiBi slopes (Press et al., 2022): float32 ``(nheads,)``, the geometric
    sequence ``2^(-8/n), 2^(-16/n), ...`` (interleaved for non-powers of two)."""
    nheads = _check_length("nheads", nheads)
    closest = 2 ** math.floor(math.log2(nheads))

    def geometric(n):
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]
    slopes = geometric(closest)
    if closest < nheads:
        slopes += geometric(2 * closest)[0::2][:nheads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi(slopes: torch.Tensor) -> ScoreMod:
    """ALiBi: adds ``-slope[h] * |i - j|`` (``slopes`` float ``(H,)`` or ``(B, H)``; see
    :func:`alibi_slopes`). Equals flash-attn's ``alibi_slopes`` when ``seqlen_q == seqlen_k``."""
    if not isinstance(slopes, torch.Tensor) or not slopes.dtype.is_floating_point:
        raise TypeError(f"slopes must be a float tensor, got {getattr(slopes, 'dtype', slopes)!r}")
    if slopes.dim() not in (1, 2):
        raise ValueError(f"slopes must be (H,) or (B, H), got {tuple(slopes.shape)}")
    if slopes.dim() == 1:
        def score_mod(score, b, h, q_idx, kv_idx):
            return score - slopes[h] * (q_idx - kv_idx).abs()
    else:
        def score_mod(score, b, h, q_idx, kv_idx):
            return score - slopes[b, h] * (q_idx - kv_idx).abs()
    return _named(score_mod, "alibi")


def softcap(cap: float) -> ScoreMod:
    """Soft-capping (Gemma 2): ``score -> cap * tanh(score / cap)``, bounded in ``(-cap, cap)``."""
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not cap > 0 \
            or not math.isfinite(cap):
        raise ValueError(f"cap must be a positive finite float, got {cap!r}")
    cap = float(cap)

    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)
    return _named(score_mod, f"softcap({cap:g})")


def per_head_scale(scales: torch.Tensor) -> ScoreMod:
    """Multiplies each head's scores by ``scales[h]`` (float ``(H,)``), e.g. a learned
    per-head temperature."""
    if not isinstance(scales, torch.Tensor) or not scales.dtype.is_floating_point \
            or scales.dim() != 1:
        raise TypeError(f"scales must be a float tensor (H,), got "
                        f"{getattr(scales, 'shape', scales)!r}")

    def score_mod(score, b, h, q_idx, kv_idx):
        return score * scales[h]
    return _named(score_mod, "per_head_scale")


__all__ = [
    "BlockMask", "alibi", "alibi_slopes", "and_masks", "butterfly_block_layout", "causal_mask",
    "create_block_mask", "create_mask", "dilated", "document_mask", "layout_mask", "noop_mask",
    "or_masks", "per_head_scale", "prefix_lm", "random_block", "random_block_layout",
    "relative_position_bias", "sliding_window", "softcap", "strided_block_layout",
]
