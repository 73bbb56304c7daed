"""Compile FlexAttention ``score_mod`` / ``mask_mod`` Python functions into Triton code.

A mod is written once in plain torch operators, for one position (FlexAttention semantics)::

    def rel_bias(score, b, h, q_idx, kv_idx):
        return score + table[q_idx - kv_idx + n - 1] * scales[h]

    def document(b, h, q_idx, kv_idx):
        return doc[q_idx] == doc[kv_idx]

It runs on torch tensors (the reference and the torch path, broadcasting ``b (B,1,1,1)``,
``h (1,H,1,1)``, ``q_idx (1,1,M,1)``, ``kv_idx (1,1,1,N)``) and, compiled here, inside the
Triton kernels. Pipeline: :mod:`.trace` (``make_fx`` on 0-dim fake tensors -> aten graph) ->
:mod:`.lower` (aten graph -> Triton lines, plus the derivative in ``score``) -> :mod:`.module`
(source file in a cache directory, imported) -> :mod:`.compiler` (:class:`CompiledMod`, caches).

Calling contract of the generated ``@triton.jit`` functions
-------------------------------------------------------------

Pass ``compiled.fn`` (and ``grad_fn`` / ``fwd_grad_fn``) to a kernel as ``tl.constexpr``
arguments and ``compiled.kernel_args(device)`` as one ordinary (tuple) argument::

    @triton.jit
    def kernel(..., SCORE_MOD: tl.constexpr, score_mod_args, MASK_MOD: tl.constexpr,
               mask_mod_args, ...):
        s = SCORE_MOD(qk * sm_scale, off_b, off_h, offs_m[:, None], offs_n[None, :],
                      score_mod_args)
        keep = MASK_MOD(off_b, off_h, offs_m[:, None], offs_n[None, :], mask_mod_args)

    kernel[grid](..., SCORE_MOD=sm.fn, score_mod_args=sm.kernel_args(q.device),
                 MASK_MOD=mm.fn, mask_mod_args=mm.kernel_args(q.device), ...)

``score_mod_fn(score, b, h, q_idx, kv_idx, args) -> tile``
    ``score``: float32 tile (e.g. ``(BLOCK_M, BLOCK_N)``), the *natural-log-domain* score
    ``softmax_scale * q.k`` (multiply the result by ``log2(e)`` for an exp2 softmax).
    ``b``, ``h``: batch and query-head index, integer scalars (or integer tiles broadcastable to
    ``score``, e.g. rows of several heads packed in one tile). ``q_idx``, ``kv_idx``: absolute
    query / key positions, integer tiles broadcastable to ``score`` -- ``(BLOCK_M, 1)`` and
    ``(1, BLOCK_N)`` in the forward, or ``(1, BLOCK_M)`` / ``(BLOCK_N, 1)`` for a transposed
    tile in a dK/dV backward: the code is elementwise, any orientation works. int32 is fine
    (index arithmetic happens in the index type; products beyond 2**31 overflow).
    ``args``: the tuple from ``kernel_args()`` (``()`` for a mod without captured tensors).
    Returns a float32 tile of ``score``'s shape.
``score_mod_grad_fn(score, b, h, q_idx, kv_idx, args) -> tile``
    ``d score_mod / d score`` at each element, float32, ``score``'s shape (torch's conventions:
    ``abs`` has slope 0 at 0, ``clamp`` passes the gradient at its bounds, ``minimum``/``maximum``
    ties split it in half). Positions a mask hides may have any slope (even inf/NaN): zero
    ``dS`` there before multiplying.
``score_mod_fwd_grad_fn(score, b, h, q_idx, kv_idx, args) -> (tile, tile)``
    Both at once, sharing their common subexpressions (what a backward needs).
``mask_mod_fn(b, h, q_idx, kv_idx, args) -> int1 tile``
    ``True`` = visible; shape = the broadcast of ``b + h + q_idx + kv_idx``.

``args`` layout (flat tuple): for each captured tensor, in order, its pointer, then per dimension
``size, stride`` (in elements): ``(BUF0, BUF0_SIZE0, BUF0_STRIDE0, ..., BUF1, ...)``; a 0-dim
tensor contributes only its pointer. At most :data:`MAX_BUFFERS` tensors (any number of
dimensions, any strides, dtypes float16/bfloat16/float32/float64/int*/uint8/bool). Reads are
``tl.load(BUF + i0 * STRIDE0 + ...)`` with torch's negative-index wrap and a bounds mask:
positions outside the tensor read 0 (the kernels evaluate mods on padded rows/columns past the
sequence ends, which they mask afterwards; torch would raise instead).

Arithmetic happens in float32 (float64 tensors are read as float32; ``.half()`` / ``.bfloat16()``
casts round like torch and go on in float32). Unsupported constructs raise
:class:`UnsupportedModError` (a ``NotImplementedError``) at compile time, naming the construct and
a rewrite; the torch path accepts every function.
"""

from .compiler import (CompiledMod, cache_info, clear_cache, compile_mask_mod, compile_mods,
                       compile_score_mod)
from .errors import UnsupportedModError
from .lower import MAX_BUFFERS

__all__ = ["CompiledMod", "MAX_BUFFERS", "UnsupportedModError", "cache_info", "clear_cache",
           "compile_mask_mod", "compile_mods", "compile_score_mod"]
