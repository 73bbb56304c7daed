"""Tracing a ``score_mod`` / ``mask_mod`` into an aten graph, and the cheap fingerprint that lets
a second call with the same function skip the trace.

The function is called once on **0-dim** example tensors (score ``float32``, indices ``int64``)
under ``make_fx(tracing_mode="fake")``: one scalar position, exactly FlexAttention's semantics
(there the function is vmapped over scalars). Every value in the graph is therefore 0-dim,
except captured tensors (``get_attr`` nodes) and their partial selections. Fake tensors make any
Python decision on a value (``if q_idx > kv_idx:``, ``and``/``or``, ``.item()``) an error
instead of a silently baked branch.

Plain Python indexing ``table[h]`` with a 0-dim integer tensor would turn ``h`` into a Python
int (a data-dependent ``.item()``); :class:`_IndexMode` rewrites ``Tensor.__getitem__`` into
``aten.index.Tensor`` / ``aten.select.int`` so that indexing stays in the graph.
"""

from __future__ import annotations

import functools
import numbers
import sys
import types
from dataclasses import dataclass
from typing import Callable

import torch
import torch.fx.traceback as fx_traceback
from torch.fx.experimental.proxy_tensor import make_fx
from torch.overrides import TorchFunctionMode

from .errors import UnsupportedModError

aten = torch.ops.aten

# Argument names of the two kinds of functions, in call order.
ARG_NAMES = {
    "score_mod": ("score", "b", "h", "q_idx", "kv_idx"),
    "mask_mod": ("b", "h", "q_idx", "kv_idx"),
}

_THIS_DIR = __file__.rsplit("/", 1)[0]
_TORCH_DIR = torch.__file__.rsplit("/", 1)[0]

# Tensor methods that read a value into Python: a fused function cannot do that.
_VALUE_READS = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__,
                torch.Tensor.__int__, torch.Tensor.__float__, torch.Tensor.__index__,
                torch.Tensor.numpy}

_DATA_DEPENDENT_HINT = (
    "it reads a tensor value into Python (an `if`/`while` on a tensor, `and`/`or`/`not` between "
    "tensors, int()/float()/.item(), or a tensor used as a Python index/slice bound). Inside a "
    "mod every decision must stay a tensor operation: use torch.where(cond, a, b) instead of "
    "if/else, & | ~ instead of and/or/not"
)


def _user_frame() -> str:
    """``file:line: code`` of the innermost frame outside torch and flashtile.codegen."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_THIS_DIR) and not name.startswith(_TORCH_DIR):
            import linecache
            line = linecache.getline(name, frame.f_lineno).strip()
            return f"{name}:{frame.f_lineno}: {line}"
        frame = frame.f_back
    return "<unknown>"


class _IndexMode(TorchFunctionMode):
    """Active only while the user function runs: keeps tensor indexing in the graph, forbids
    reading values into Python, and tags each graph node with the user line that created it."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind                # "score_mod `name` (file:line)", for messages

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        where = _user_frame()
        if func in _VALUE_READS:
            raise UnsupportedModError(f"{self.kind} cannot be fused: at {where}\n"
                                      f"{_DATA_DEPENDENT_HINT}.")
        fx_traceback.set_stack_trace([where])
        if func is torch.Tensor.__getitem__:
            return _getitem(self.kind, where, *args)
        return func(*args, **kwargs)


def _getitem(kind: str, where: str, tensor: torch.Tensor, index) -> torch.Tensor:
    """``tensor[index]`` with integer tensors and ints (one per leading dimension)."""
    items = index if isinstance(index, tuple) else (index,)
    out = tensor
    dim = 0
    tensors = []
    for item in items:
        if isinstance(item, bool) or (isinstance(item, torch.Tensor) and item.dtype == torch.bool):
            raise UnsupportedModError(
                f"{kind} cannot be fused: at {where}\nboolean-mask indexing of a captured tensor "
                "is not supported; index with integer positions (e.g. table[q_idx]) and use "
                "torch.where for conditions.")
        if isinstance(item, int):
            out = aten.select.int(out, dim, item)      # the dimension disappears
        elif isinstance(item, torch.Tensor) and not item.is_floating_point():
            tensors.append((dim, item))
            dim += 1
        else:
            raise UnsupportedModError(
                f"{kind} cannot be fused: at {where}\nindex {item!r} is not supported inside a "
                "mod: index a captured tensor with integer tensors or ints, one per dimension "
                "(table[q_idx - kv_idx], bias[h, q_idx], bias[0, q_idx]); slice it outside the "
                "mod (table = table[1:]) and capture the result.")
    if tensors:
        if len(tensors) != out.dim():
            raise UnsupportedModError(
                f"{kind} cannot be fused: at {where}\na captured tensor of {out.dim()} remaining "
                f"dimension(s) is indexed with {len(tensors)} index tensor(s). Index every "
                "dimension at once: write bias[h, q_idx - kv_idx], not bias[h][q_idx - kv_idx] "
                "(chained indexing means something else when the torch path broadcasts the "
                "indices).")
        out = aten.index.Tensor(out, [t for _, t in tensors])
    return out


@dataclass(frozen=True)
class Traced:
    """The aten graph of one mod, and what the lowering needs to know about it."""

    kind: str                       # "score_mod" | "mask_mod"
    gm: torch.fx.GraphModule
    name: str                       # the user function's name, for messages


def trace(fn: Callable, kind: str) -> Traced:
    """Trace ``fn`` at one scalar position. Raises :class:`UnsupportedModError` (a
    ``NotImplementedError``) when the function makes Python decisions on values."""
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    names = ARG_NAMES[kind]
    examples = [torch.empty((), dtype=torch.float32 if n == "score" else torch.int64)
                for n in names]

    def body(*args):
        with _IndexMode(f"{kind} {_name(fn)}"):
            return fn(*args)

    try:
        with fx_traceback.preserve_node_meta():
            gm = make_fx(body, tracing_mode="fake", _allow_non_fake_inputs=True)(*examples)
    except UnsupportedModError:
        raise
    except (GuardOnDataDependentSymNode, torch._subclasses.fake_tensor.DataDependentOutputException,
            torch._subclasses.fake_tensor.DynamicOutputShapeException) as err:
        raise UnsupportedModError(f"{kind} {_name(fn)} cannot be fused: {_DATA_DEPENDENT_HINT}. "
                                  f"(torch said: {str(err).splitlines()[0]})") from None
    return Traced(kind=kind, gm=gm, name=_name(fn))


def _name(fn) -> str:
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    code = getattr(fn, "__code__", None)
    if code is not None:
        return f"`{name}` ({code.co_filename}:{code.co_firstlineno})"
    return f"`{name}`"


# --------------------------------------------------------------------------------------------
# Fingerprint: what a function's behaviour can depend on, without running it.


class Uncacheable(Exception):
    """The function reaches an object whose state the fingerprint cannot capture."""


_SCALARS = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)
_MAX_ITEMS = 64
_MAX_DEPTH = 8


def fingerprint(fn: Callable) -> tuple[tuple, list[torch.Tensor]]:
    """A hashable key for everything ``fn`` can read (code, defaults, closure cells, referenced
    globals, recursively through the functions and containers it reaches) and the list of
    tensors met on the way, in a fixed order.

    Tensors enter the key by dtype and shape only, so a new closure over new tensors of the same
    shape (a fresh ``lambda`` per call, an updated bias table) maps to the same key; the compiled
    code is reused and the new tensors become the buffers. Anything else the key cannot describe
    by value (an arbitrary object whose attributes may change) raises :class:`Uncacheable`.
    """
    tensors: list[torch.Tensor] = []
    key = _fp(fn, tensors, 0, set())
    return (key, torch.get_default_dtype()), tensors


def _fp(obj, tensors: list, depth: int, active: set):
    if depth > _MAX_DEPTH:
        raise Uncacheable("too deep")
    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return ("T", obj.dtype, tuple(obj.shape))
    if isinstance(obj, _SCALARS) or (isinstance(obj, numbers.Number) and not hasattr(obj, "shape")):
        return (type(obj).__name__, obj)
    if isinstance(obj, types.ModuleType):
        return ("M", obj.__name__)
    if id(obj) in active:
        return ("cycle",)
    active.add(id(obj))
    try:
        return _fp_container(obj, tensors, depth, active)
    finally:
        active.discard(id(obj))


def _fp_container(obj, tensors, depth, active):
    if isinstance(obj, (tuple, list)):
        if len(obj) > _MAX_ITEMS:
            raise Uncacheable("long sequence")
        return (type(obj).__name__, tuple(_fp(x, tensors, depth + 1, active) for x in obj))
    if isinstance(obj, dict):
        if len(obj) > _MAX_ITEMS or not all(isinstance(k, (str, int)) for k in obj):
            raise Uncacheable("dict")
        return ("dict", tuple((k, _fp(v, tensors, depth + 1, active)) for k, v in obj.items()))
    if isinstance(obj, types.FunctionType):
        return _fp_function(obj, tensors, depth, active)
    if isinstance(obj, functools.partial):
        return ("partial", _fp(obj.func, tensors, depth + 1, active),
                _fp(obj.args, tensors, depth + 1, active),
                _fp(dict(obj.keywords), tensors, depth + 1, active))
    if isinstance(obj, (types.BuiltinFunctionType, types.BuiltinMethodType, type,
                        torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
        return ("B", getattr(obj, "__module__", None), getattr(obj, "__qualname__", repr(obj)))
    module = getattr(type(obj), "__module__", "") or ""
    if module.startswith("torch") and callable(obj) and not isinstance(obj, torch.nn.Module):
        return ("B", module, type(obj).__qualname__, getattr(obj, "__name__", None))
    raise Uncacheable(type(obj).__qualname__)


def _global_names(code: types.CodeType, out: set) -> set:
    out.update(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _global_names(const, out)
    return out


def _fp_function(fn: types.FunctionType, tensors, depth, active):
    cells = []
    for cell in fn.__closure__ or ():
        try:
            cells.append(_fp(cell.cell_contents, tensors, depth + 1, active))
        except ValueError:           # an empty cell
            cells.append(("empty",))
    glob = fn.__globals__
    names = sorted(n for n in _global_names(fn.__code__, set()) if n in glob)
    globals_fp = tuple((n, _fp(glob[n], tensors, depth + 1, active)) for n in names)
    return ("F", fn.__code__,
            _fp(fn.__defaults__, tensors, depth + 1, active),
            _fp(fn.__kwdefaults__, tensors, depth + 1, active),
            tuple(cells), globals_fp)
