"""``flex_attention``: the FlexAttention-compatible entry point, layout ``(batch, nheads, seqlen,
headdim)``.

Code written for ``torch.nn.attention.flex_attention`` runs unchanged after swapping the import
for ``flashtile`` (``flex_attention``, ``create_block_mask``, ``BlockMask``, ``and_masks``,
``or_masks``); flashtile adds ``dropout_p``. Validation and dispatch only: the parameters object
goes to :mod:`flashtile.autograd` like every other public function.
"""

from __future__ import annotations

import math
import warnings

import torch

from . import _validate as V
from .autograd import attention
from .backend import resolve
from .masks import BlockMask, _check_arity, _check_mask_result, _mod_name, noop_mask
from .params import AttentionParams
from .reference.philox import draw_seed_offset

_FLEX_LAYOUT = "(batch, nheads, seqlen, headdim)"
_warned_fallback = False


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None,
                   enable_gqa=False, return_lse=False, dropout_p=0.0):
    """Attention with a user ``score_mod`` and a block-sparse ``block_mask`` (FlexAttention).

    ``out = softmax(mask(score_mod(scale * query @ key^T))) @ value``, computed tile by tile
    over the key blocks ``block_mask`` lists (empty blocks are never loaded; full blocks skip
    the mask_mod). The mask is aligned top-left (query ``i``, key ``j`` are absolute positions
    from 0, as in torch).

    Args:
        query: ``(batch, nheads, seqlen_q, headdim)``, float16 / bfloat16 / float32.
        key: ``(batch, nheads_kv, seqlen_k, headdim)``.
        value: ``(batch, nheads_kv, seqlen_k, headdim_v)``; ``headdim_v`` may differ.
            Strided views are fine as long as the last dimension is contiguous.
        score_mod: ``score_mod(score, b, h, q_idx, kv_idx) -> score``, applied to the scaled
            score before the softmax; ``h`` is the query head. Plain torch operators on
            tensors that broadcast (see :mod:`flashtile.masks`), differentiated through.
        block_mask: a :class:`~flashtile.masks.BlockMask` built for exactly
            ``(seqlen_q, seqlen_k)``, with batch 1 or ``batch`` and heads 1 or ``nheads``, on
            ``query``'s device (``create_block_mask(..., device=query.device)``). ``None``:
            every key is visible.
        scale: multiplies ``query @ key^T``; default ``1 / sqrt(headdim)``.
        enable_gqa: must be True when ``nheads_kv < nheads`` (GQA/MQA; query head ``h`` reads
            key/value head ``h // (nheads // nheads_kv)``, never expanded in memory).
        return_lse: also return the log-sum-exp.
        dropout_p: dropout on the attention probabilities (flashtile extension; 0 at
            evaluation). The mask is regenerated in backward from a seed drawn from torch's
            generator, so ``torch.manual_seed`` makes it reproducible. Resolution 2**-16
            (see :func:`flashtile.flash_attn_func`).

    Returns:
        ``out`` ``(batch, nheads, seqlen_q, headdim_v)`` in the input dtype (a transposed view
        of a ``(batch, seqlen_q, nheads, headdim_v)`` buffer); with ``return_lse`` the tuple
        ``(out, lse)``, lse float32 ``(batch, nheads, seqlen_q)``, natural log. Rows that see no
        key get output 0 and lse ``-inf`` (and zero gradients).

    Example:
        >>> from flashtile import flex_attention, create_block_mask
        >>> from flashtile.masks import causal_mask, sliding_window, and_masks, softcap
        >>> q = torch.randn(2, 8, 4096, 64, device="cuda", dtype=torch.bfloat16)
        >>> k, v = torch.randn_like(q), torch.randn_like(q)
        >>> bm = create_block_mask(and_masks(causal_mask, sliding_window(1024)), None, None,
        ...                        4096, 4096, device="cuda")
        >>> out = flex_attention(q, k, v, score_mod=softcap(30.0), block_mask=bm)
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        V.check_tensor(name, t, 4, _FLEX_LAYOUT)
    V.check_same(("query", "key", "value"), (query, key, value))
    V.check_bool("enable_gqa", enable_gqa)
    V.check_bool("return_lse", return_lse)
    batch, nheads, seqlen_q, headdim = query.shape
    nheads_kv, seqlen_k = key.shape[1], key.shape[2]
    if not enable_gqa and nheads != nheads_kv:
        raise ValueError(f"query has {nheads} heads but key/value have {nheads_kv}; for "
                         "grouped-query attention (GQA/MQA) set enable_gqa=True, otherwise give "
                         "them the same number of heads")
    V.check_qkv_shapes(query, key, value, seq_dim=2, head_dim=1, layout=_FLEX_LAYOUT)
    softmax_scale = V.check_scale("scale", scale)
    dropout_p = V.check_dropout(dropout_p)
    _check_score_mod(score_mod, query)
    _check_block_mask(block_mask, batch, nheads, seqlen_q, seqlen_k, query.device)

    mask_mod = None
    if block_mask is not None and block_mask.mask_mod is not noop_mask:
        mask_mod = block_mask.mask_mod
    seed, offset = draw_seed_offset(query.device) if dropout_p > 0 else (0, 0)
    params = AttentionParams(
        softmax_scale=softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(headdim),
        bottom_right=False, score_mod=score_mod, mask_mod=mask_mod, block_mask=block_mask,
        dropout_p=dropout_p, seed=seed, offset=offset)
    backend = _pick_backend(params, query.device)
    out, lse = attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                         params, backend)                    # (b, sq, hq, dv), (b, hq, sq)
    out = out.transpose(1, 2)                                # (b, hq, sq, dv)
    return (out, lse) if return_lse else out


def _pick_backend(params: AttentionParams, device: torch.device) -> str:
    """The backend for this call: :func:`flashtile.backend.resolve`, except that a call the
    Triton kernels cannot run goes to the torch path with a one-time warning saying why:
    a score_mod/mask_mod the code generator does not support, captured tensors that need a
    gradient, or BlockMask blocks that are not multiples of 16 (kernel tiles must not straddle
    them)."""
    global _warned_fallback
    backend = resolve(device)
    if backend != "triton":
        return backend
    reason = _kernel_limitation(params)
    if reason is None:
        return backend
    if not _warned_fallback:
        warnings.warn(f"flex_attention runs on the (much slower) torch path: {reason}",
                      RuntimeWarning, stacklevel=3)
        _warned_fallback = True
    return "torch"


def _kernel_limitation(params: AttentionParams) -> str | None:
    """Why the kernels cannot run this call, or None."""
    from .codegen import UnsupportedModError, compile_mods
    try:
        compiled = compile_mods(params)
    except UnsupportedModError as error:
        return str(error)
    if any(c.buffers_require_grad for c in compiled):
        return "a tensor captured by score_mod requires grad (the kernels give it no gradient)"
    bm = params.block_mask
    if bm is not None and any(size % 16 for size in bm.BLOCK_SIZE):
        return f"BLOCK_SIZE {bm.BLOCK_SIZE} is not a multiple of 16"
    return None


def _check_score_mod(score_mod, query: torch.Tensor) -> None:
    """Callable, and on one probe element returns a floating tensor that broadcasts."""
    if score_mod is None:
        return
    if not callable(score_mod):
        raise TypeError(f"score_mod must be a function score_mod(score, b, h, q_idx, kv_idx) -> "
                        f"score, got {type(score_mod).__name__}")
    _check_arity(score_mod, "flex_attention", "score_mod", ("score", "b", "h", "q_idx", "kv_idx"),
                 {4: " (4 arguments looks like a mask_mod(b, h, q_idx, kv_idx): pass it to "
                     "create_block_mask and give flex_attention the block_mask)"})
    idx = torch.zeros((1, 1, 1, 1), dtype=torch.int64, device=query.device)
    score = torch.zeros((1, 1, 1, 1), dtype=torch.float32, device=query.device)
    name = _mod_name(score_mod)
    result = _probe("score_mod", name, score_mod, (score, idx, idx, idx, idx), query.device)
    if not isinstance(result, torch.Tensor) or not result.dtype.is_floating_point:
        got = result.dtype if isinstance(result, torch.Tensor) else type(result).__name__
        hint = (" (a bool result looks like a mask_mod: pass it to create_block_mask and give "
                "flex_attention the block_mask)" if got == torch.bool else "")
        raise TypeError(f"score_mod {name} must return a floating-point tensor of the score's "
                        f"shape, got {got}{hint}")
    if result.dim() > 4 or result.numel() != 1:
        raise ValueError(f"score_mod {name} returned shape {tuple(result.shape)} for a "
                         "(1, 1, 1, 1) score; it must work elementwise and keep the score's shape")


def _check_block_mask(block_mask, batch: int, nheads: int, seqlen_q: int, seqlen_k: int,
                      device: torch.device) -> None:
    if block_mask is None:
        return
    if not isinstance(block_mask, BlockMask):
        raise TypeError(f"block_mask must be a flashtile BlockMask, got "
                        f"{type(block_mask).__module__}.{type(block_mask).__name__}; build it "
                        "with flashtile.create_block_mask (same arguments as torch's) or "
                        "flashtile.masks.BlockMask.from_kv_blocks")
    block_mask.check_compatible(batch, nheads, seqlen_q, seqlen_k, device)
    _check_captured_devices("mask_mod", _mod_name(block_mask.mask_mod), block_mask.mask_mod,
                            device)
    # The mask_mod's result type is probed once per mask and device, not per call: the probe
    # launches small torch ops, and reading back whether any block is partial would
    # synchronise every call with the device.
    probed = block_mask.__dict__.setdefault("_probed_on", set())
    if block_mask.mask_mod is not noop_mask and device not in probed:
        b = torch.zeros((1, 1, 1, 1), dtype=torch.int64, device=device)
        result = _probe("mask_mod", _mod_name(block_mask.mask_mod), block_mask.mask_mod,
                        (b, b, b, b), device)
        _check_mask_result(result, (1, 1, 1, 1), block_mask.mask_mod)
        probed.add(device)


def _probe(kind: str, name: str, fn, args, device: torch.device):
    """Call a mod on one element, after checking the devices of the tensors it captured."""
    _check_captured_devices(kind, name, fn, device)
    return fn(*args)


def _check_captured_devices(kind: str, name: str, fn, device: torch.device) -> None:
    """A tensor a mod captured on another device is a clear error here, not a failure deep in
    the torch path or a hidden copy per call on the kernel path. The tensors are the ones the
    code generator's fingerprint finds (closures, defaults, globals, partials)."""
    from .codegen.trace import Uncacheable, fingerprint
    try:
        _, tensors = fingerprint(fn)
    except Uncacheable:         # reaches arbitrary objects: nothing to enumerate; torch will say
        return
    for value in tensors:
        if value.device != device:
            raise ValueError(f"{kind} {name} captures a tensor on {value.device} but the inputs "
                             f"are on {device}; create it there or move it with "
                             f".to('{device}')")


__all__ = ["flex_attention"]
