"""The autograd layer: one ``torch.autograd.Function`` that saves only O and LSE in forward and
recomputes the probabilities in backward.

Both backends expose the same two functions (layout ``(batch, seqlen, nheads, headdim)``):

- ``forward(q, k, v, params) -> (out, lse)``
- ``backward(dout, q, k, v, out, lse, params) -> (dq, dk, dv)``

``flashtile.kernels`` holds the Triton launchers, ``flashtile.reference.tiled`` the chunked torch
path. This layer picks one and never touches pointers.
"""

from __future__ import annotations

import weakref

import torch

from .params import AttentionParams


def _impl(backend: str, params: AttentionParams):
    if backend == "triton":
        from . import kernels
        return kernels
    if params.cu_seqlens_q is not None:
        from .reference import varlen
        return varlen
    from .reference import tiled
    return tiled


def _mark(q, k, v) -> tuple:
    """What tells the backward that autograd handed it the forward's own q, k and v: weak
    references to them and their addresses. A saved-tensor hook (activation offloading,
    ``torch.autograd.graph.save_on_cpu``) hands the backward other tensors, of other addresses
    and maybe other strides, and ``.data`` assignments swap a tensor's memory unseen by
    autograd: the forward's plan key would not describe those (kernels.plans.backward_key)."""
    return tuple(map(weakref.ref, (q, k, v))), (q.data_ptr(), k.data_ptr(), v.data_ptr())


def _same(mark: tuple, q, k, v) -> bool:
    """Whether q, k, v are the tensors :func:`_mark` marked, at the same addresses."""
    refs, ptrs = mark
    return (refs[0]() is q and refs[1]() is k and refs[2]() is v
            and ptrs == (q.data_ptr(), k.data_ptr(), v.data_ptr()))


class FlashAttnFunction(torch.autograd.Function):
    """``(q, k, v, attn_bias) -> (out, lse)`` with the recomputing backward. ``lse`` has no
    gradient; ``attn_bias`` (``params.attn_bias``, passed again so autograd sees it) gets one
    when it is a float tensor that requires grad."""

    @staticmethod
    def forward(ctx, q, k, v, attn_bias, params: AttentionParams, backend: str):
        # LSE has no gradient: without this the engine would fill one with zeros before
        # every backward (an allocation and a kernel; ~20-40 us of host time on the H200's
        # host, session 17). ``dout`` is then None when no gradient reached ``out`` either.
        ctx.set_materialize_grads(False)
        # The Triton launchers' forward leaves its launch-plan key in ``planned`` and the
        # backward starts its own from it (kernels.plans.backward_key: on the engine's
        # thread each microsecond of Python costs ~1.6 on the H200's host, session 18)
        ctx.extra = {"planned": {}} if backend == "triton" else {}
        if ctx.extra:
            ctx.marked = _mark(q, k, v)
        ctx.impl = _impl(backend, params)
        out, lse = ctx.impl.forward(q, k, v, params, **ctx.extra)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.params = params
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        if dout is None:                    # (every gradient is zero: None says so)
            return None, None, None, None, None, None
        q, k, v, out, lse = ctx.saved_tensors
        impl, extra = ctx.impl, ctx.extra
        if extra and not _same(ctx.marked, q, k, v):
            extra = {"planned": None}       # (not the forward's tensors: a key of their own)
        if ctx.needs_input_grad[3]:
            dq, dk, dv, dbias = impl.backward(dout, q, k, v, out, lse, ctx.params,
                                              need_bias_grad=True, **extra)
        else:
            dq, dk, dv = impl.backward(dout, q, k, v, out, lse, ctx.params, **extra)
            dbias = None
        return dq, dk, dv, dbias, None, None


def attention(q, k, v, params: AttentionParams, backend: str):
    """Run attention with autograd support; returns ``(out, lse)``. Without a gradient to
    compute (``torch.no_grad()``, or no input requiring one) the forward runs directly: the
    same result, without ``Function.apply``'s ~20 us of host time (inference at small sizes is
    bound by the host)."""
    bias = params.attn_bias
    if not torch.is_grad_enabled() or not (
            q.requires_grad or k.requires_grad or v.requires_grad
            or (bias is not None and bias.requires_grad)):
        return _impl(backend, params).forward(q, k, v, params)
    return FlashAttnFunction.apply(q, k, v, bias, params, backend)
