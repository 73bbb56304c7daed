"""``compile_score_mod`` / ``compile_mask_mod``: Python function -> :class:`CompiledMod`.

Two caches keep repeated calls cheap:

1. **Fingerprint -> template** (no tracing at all). The key is the function's code plus
   everything it can read (closure cells, defaults, referenced globals, recursively), with
   tensors described by dtype and shape; the tensors themselves are re-collected on every call
   and become the buffers. So a fresh ``lambda`` per call, or a bias table updated in place or
   replaced by another of the same shape, costs a dictionary lookup (tens of microseconds).
   Functions that reach arbitrary objects (``self.table``) cannot be fingerprinted and are
   traced on every call (a few tens of milliseconds).
2. **Source hash -> module** (:mod:`.module`): identical generated code is imported once and
   shares one ``JITFunction``, so Triton compiles each kernel once per distinct mod.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from . import module as _module
from .lower import MAX_BUFFERS, lower
from .trace import Uncacheable, fingerprint, trace

_MAX_TEMPLATES = 512


@dataclass(frozen=True, eq=False)
class CompiledMod:
    """A mod compiled to Triton ``@triton.jit`` functions, plus the tensors they read.

    Attributes:
        kind: ``"score_mod"`` or ``"mask_mod"``.
        fn: ``score_mod_fn(score, b, h, q_idx, kv_idx, args)`` -> float32 tile, or
            ``mask_mod_fn(b, h, q_idx, kv_idx, args)`` -> int1 tile (contract: package docstring).
        grad_fn: ``score_mod_grad_fn(...)``, same arguments as ``fn``: ``d fn / d score``
            (float32 tile); ``None`` for a mask_mod.
        fwd_grad_fn: ``score_mod_fwd_grad_fn(...)`` -> ``(fn(...), grad_fn(...))`` sharing
            their common work (the backward needs both); ``None`` for a mask_mod.
        buffers: the captured tensors, in ``args`` order (the user's tensors, not copies).
        source: the generated module's full text (for reading and debugging).
        key: hash of the generated source (equal keys = same jit functions).
    """

    kind: str
    fn: object
    grad_fn: Optional[object]
    fwd_grad_fn: Optional[object]
    buffers: tuple
    source: str
    key: str

    @property
    def n_buffers(self) -> int:
        return len(self.buffers)

    @property
    def buffers_require_grad(self) -> bool:
        """True when a captured tensor wants a gradient: the kernels do not produce one, so the
        caller must use the torch path (autograd differentiates the function there)."""
        return any(b.requires_grad for b in self.buffers)

    def kernel_args(self, device: Optional[torch.device] = None) -> tuple:
        """The ``args`` tuple to pass to the kernel, flat:
        ``(BUF0, BUF0_SIZE0, BUF0_STRIDE0, BUF0_SIZE1, BUF0_STRIDE1, ..., BUF1, ...)``.

        ``device``: where the kernel runs; buffers elsewhere are copied there (keep captured
        tensors on the kernel's device to avoid a copy per call). Bool buffers are passed as
        ``uint8`` views (the generated code compares with 0).
        """
        out = []
        for buf in self.buffers:
            t = buf.detach()
            if device is not None and t.device != torch.device(device):
                t = t.to(device)
            if t.dtype == torch.bool:
                t = t.view(torch.uint8)
            out.append(t)
            for d in range(t.dim()):
                out += [t.shape[d], t.stride(d)]
        return tuple(out)


@dataclass(frozen=True, eq=False)
class _Template:
    kind: str
    key: str
    module: object
    slots: tuple            # per buffer: ("capture", i) | ("tensor", t)
    source: str

    def instantiate(self, captured: list) -> CompiledMod:
        buffers = tuple(captured[v] if how == "capture" else v for how, v in self.slots)
        m = self.module
        if self.kind == "score_mod":
            fns = (m.score_mod_fn, m.score_mod_grad_fn, m.score_mod_fwd_grad_fn)
        else:
            fns = (m.mask_mod_fn, None, None)
        return CompiledMod(self.kind, *fns, buffers=buffers, source=self.source, key=self.key)


_lock = threading.RLock()
_templates: "OrderedDict[tuple, _Template]" = OrderedDict()
_stats = {"traces": 0, "template_hits": 0, "uncacheable": 0}


def _identity_score(score, b, h, q_idx, kv_idx):
    return score


def _full_mask(b, h, q_idx, kv_idx):
    return True


def compile_score_mod(score_mod: Optional[Callable]) -> CompiledMod:
    """Compile ``score_mod(score, b, h, q_idx, kv_idx) -> score`` (``None``: the identity).

    Raises :class:`~flashtile.codegen.UnsupportedModError` (a ``NotImplementedError``) when the
    function cannot be fused; the message names the construct and a rewrite. The torch path runs
    any function, so callers may catch it and fall back.
    """
    return _compile(_identity_score if score_mod is None else score_mod, "score_mod")


def compile_mask_mod(mask_mod: Optional[Callable]) -> CompiledMod:
    """Compile ``mask_mod(b, h, q_idx, kv_idx) -> bool`` (``None``: every key visible).
    Errors as :func:`compile_score_mod`."""
    return _compile(_full_mask if mask_mod is None else mask_mod, "mask_mod")


def compile_mods(params) -> tuple[CompiledMod, CompiledMod]:
    """``(compile_score_mod(params.score_mod), compile_mask_mod(params.mask_mod))`` for one
    :class:`flashtile.AttentionParams`, compiled once per params object and kept on it: a
    ``flex_attention`` call's backend check, forward and backward then share one set (and the
    backward runs the very functions the forward ran), instead of fingerprinting the user's
    functions again in each (~50 us of host time per step)."""
    mods = params.__dict__.get("_compiled_mods")
    if mods is None:
        mods = (compile_score_mod(params.score_mod), compile_mask_mod(params.mask_mod))
        object.__setattr__(params, "_compiled_mods", mods)     # a frozen dataclass
    return mods


def _compile(fn: Callable, kind: str) -> CompiledMod:
    if not callable(fn):
        args = "score, b, h, q_idx, kv_idx" if kind == "score_mod" else "b, h, q_idx, kv_idx"
        raise TypeError(f"{kind} must be a function {kind}({args}), got {type(fn).__name__}")
    try:
        key, captured = fingerprint(fn)
        key = (kind, key)
        hash(key)
    except (Uncacheable, TypeError, RecursionError):
        key, captured = None, []
    with _lock:
        if key is not None:
            template = _templates.get(key)
            if template is not None:
                _templates.move_to_end(key)
                _stats["template_hits"] += 1
                return template.instantiate(captured)
        traced = trace(fn, kind)
        _stats["traces"] += 1
        lowered = lower(traced)
        src_key, mod = _module.load(lowered.source)
        slots, cacheable = [], key is not None
        for buf in lowered.buffers:
            index = next((i for i, t in enumerate(captured) if t is buf.tensor), None)
            if index is not None:
                slots.append(("capture", index))
            else:
                # A literal created inside the function (same value every call), or a tensor
                # reached through an object the fingerprint cannot see (never cached).
                slots.append(("tensor", buf.tensor))
                cacheable = cacheable and buf.literal
        template = _Template(kind, src_key, mod, tuple(slots),
                             _module.full_source(lowered.source))
        if cacheable:
            _templates[key] = template
            while len(_templates) > _MAX_TEMPLATES:
                _templates.popitem(last=False)
        else:
            _stats["uncacheable"] += 1
        return template.instantiate(captured)


def cache_info() -> dict:
    """Counters: ``traces`` (slow path runs), ``template_hits`` (no trace), ``uncacheable``
    (functions traced every call), ``templates`` and ``modules`` (cache sizes)."""
    with _lock:
        return dict(_stats, templates=len(_templates), modules=_module.loaded_count())


def clear_cache() -> None:
    """Forget fingerprints (modules stay imported: jit functions must outlive their kernels)."""
    with _lock:
        _templates.clear()


__all__ = ["CompiledMod", "MAX_BUFFERS", "cache_info", "clear_cache", "compile_mask_mod",
           "compile_mods", "compile_score_mod"]
