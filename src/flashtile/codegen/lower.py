"""Lowering a traced mod (an aten graph at one scalar position) to Triton source.

Every 0-dim value of the graph becomes a Triton value that may be a scalar or a tile: the
generated code is written only with elementwise operations, so it broadcasts like the index
tiles the kernel passes in. Each graph node becomes one line ``tN = <expr>``; a value is

- a :class:`Val`: a variable or a literal, with its *kind* ``"f"`` (float32), ``"i"`` (integer,
  whatever width the kernel's indices have) or ``"b"`` (int1);
- a :class:`View`: a captured tensor (a *buffer*) with some of its dimensions fixed by
  ``select``/``index``; once every dimension is fixed, reading it emits one masked ``tl.load``.

For a ``score_mod`` each float node also gets a *tangent* (forward-mode derivative with respect
to ``score``, ``None`` meaning exactly 0), with torch's conventions at kinks and ties (abs at 0,
clamp at its bounds, min/max ties split in half), so ``d score_mod / d score`` is generated from
the same graph. Three functions share one line list; each keeps only the lines it needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .errors import UnsupportedModError
from .trace import ARG_NAMES, Traced

MAX_BUFFERS = 4          # captured tensors one mod may read (extra pointer arguments)

_KINDS = {torch.bool: "b"}
for _dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
    _KINDS[_dt] = "f"
for _dt in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64):
    _KINDS[_dt] = "i"
_RANK = {"b": 0, "i": 1, "f": 2}
_TL = {"f": "tl.float32", "i": "tl.int32", "b": "tl.int1"}
LN2 = math.log(2.0)


@dataclass(frozen=True)
class Val:
    """A Triton expression: a variable name (``deps`` = {name}) or a literal (``const`` set)."""

    text: str
    kind: str
    deps: frozenset = frozenset()
    const: object = None
    is_const: bool = False
    nonneg: bool = False          # provably >= 0 (index arithmetic: no negative wrap needed)


@dataclass(frozen=True)
class View:
    """A captured tensor with dimensions fixed so far (``None`` = still free)."""

    slot: int
    index: tuple                  # one entry per buffer dimension: Val or None


@dataclass
class Buffer:
    tensor: torch.Tensor
    offset: int                   # position of its pointer in the ``args`` tuple
    literal: bool                 # created inside the function (torch.tensor([...]))

    @property
    def n_args(self) -> int:
        return 1 + 2 * self.tensor.dim()


@dataclass
class Lowered:
    """Result of lowering: the source of the jit functions and the buffers they read."""

    kind: str
    source: str                   # module body (helpers + jit functions), no header
    buffers: list = field(default_factory=list)    # list[Buffer]
    helpers: tuple = ()


def _lit_text(value, kind: str) -> str:
    if kind == "b":
        return "True" if value else "False"
    if kind == "i":
        v = int(value)
        return f"({v})" if v < 0 else str(v)
    v = float(value)
    if math.isnan(v):
        return 'float("nan")'
    if math.isinf(v):
        return 'float("inf")' if v > 0 else 'float("-inf")'
    return f"({v!r})" if v < 0 or (v == 0 and math.copysign(1, v) < 0) else repr(v)


def lit(value, kind: str) -> Val:
    if kind == "b":
        value = bool(value)
    elif kind == "i":
        value = int(value)
    else:
        value = float(value)
    return Val(_lit_text(value, kind), kind, const=value, is_const=True, nonneg=value >= 0)


def _is(v, value) -> bool:
    return isinstance(v, Val) and v.is_const and v.const == value


# Helper jit functions copied into a generated module when used. Written so that they are
# correct whether Triton's integer ``//``/``%`` truncate (GPU) or floor.
HELPERS = {
    "_tanh": '''
@triton.jit
def _tanh(x):
    # tanh without libdevice (same code on GPU and in the interpreter); an odd series near 0
    # keeps the relative accuracy that 1 - 2 / (exp(2x) + 1) loses there.
    ax = tl.abs(x)
    e = tl.exp(-2.0 * ax)
    big = (1.0 - e) / (1.0 + e)
    x2 = ax * ax
    c5 = 0.13333333333333333 + x2 * (-0.05396825396825397)
    small = ax * (1.0 + x2 * (-0.3333333333333333 + x2 * c5))
    t = tl.where(ax < 0.125, small, big)
    return tl.where(x < 0, -t, t)
''',
    "_floordiv": '''
@triton.jit
def _floordiv(a, b):
    # Python/torch floor division of integers.
    q = a // b
    r = a - q * b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), q - 1, q)
''',
    "_truncdiv": '''
@triton.jit
def _truncdiv(a, b):
    # C-style (toward zero) division of integers.
    q = a // b
    r = a - q * b
    return tl.where((r != 0) & ((r < 0) != (a < 0)), q + 1, q)
''',
    "_remainder": '''
@triton.jit
def _remainder(a, b):
    # Python/torch remainder of integers: the sign of the divisor.
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
''',
    "_round_bf16": '''
@triton.jit
def _round_bf16(x):
    # float32 -> nearest bfloat16 (ties to even) -> float32 with integer ops: the same bits on
    # the GPU and in the interpreter (whose float32 -> bfloat16 cast truncates).
    bits = x.to(tl.uint32, bitcast=True)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return tl.where(x != x, x, bits.to(tl.float32, bitcast=True))
''',
    "_expm1": '''
@triton.jit
def _expm1(x):
    # exp(x) - 1 without the cancellation near 0 (Kahan): (u - 1) * x / log(u), u = exp(x).
    u = tl.exp(x)
    um1 = u - 1.0
    r = tl.where(u == 1.0, x, um1 * (x / tl.log(tl.where(u == 1.0, 2.0, u))))
    return tl.where(um1 == -1.0, -1.0, tl.where(u == float("inf"), u, r))
''',
    "_log1p": '''
@triton.jit
def _log1p(x):
    # log(1 + x) without the cancellation near 0 (Kahan): log(u) * x / (u - 1), u = 1 + x.
    u = 1.0 + x
    r = tl.where(u == 1.0, x, tl.log(u) * (x / tl.where(u == 1.0, 1.0, u - 1.0)))
    return tl.where(u == float("inf"), u, r)
''',
    "_trunc": '''
@triton.jit
def _trunc(x):
    return tl.where(x < 0, tl.ceil(x), tl.floor(x))
''',
    "_round": '''
@triton.jit
def _round(x):
    # Round half to even, as torch.round.
    r = tl.floor(x + 0.5)
    half = (r - x) == 0.5
    odd = (r - 2.0 * tl.floor(r * 0.5)) != 0.0
    return tl.where(half & odd, r - 1.0, r)
''',
}


# Why an op is rejected, and what to write instead.
_HINTS = {
    "pow.Tensor_Tensor": "x ** y with two tensors: write torch.exp(y * torch.log(x)) (x > 0).",
    "index_select": "index with [] instead: table[q_idx].",
    "gather": "index with [] instead: table[q_idx].",
    "take": "index with [] instead: table[q_idx].",
    "slice": "slice the tensor outside the mod (table = table[1:]) and capture the result.",
    "arange": "create tensors outside the mod and capture them.",
    "empty": "create tensors outside the mod and capture them.",
}
_SHAPE_OPS = {"expand", "view", "reshape", "unsqueeze", "squeeze", "permute", "transpose", "t",
              "flatten", "unflatten", "_unsafe_view", "as_strided", "broadcast_to", "contiguous",
              "repeat", "cat", "stack"}
_REDUCTIONS = {"sum", "mean", "amax", "amin", "max", "min", "prod", "any", "all", "argmax",
               "argmin", "logsumexp", "softmax", "_softmax", "cumsum", "var", "std"}
_SUPPORTED_SUMMARY = (
    "Supported inside a mod: + - * / // % neg abs pow(tensor, number) pow(number, tensor) "
    "exp exp2 expm1 log log2 log1p sqrt rsqrt reciprocal tanh sigmoid sin cos erf relu floor ceil "
    "trunc round sign minimum maximum clamp where masked_fill comparisons & | ^ ~ logical_*, "
    "casts (.float() .long() .bool() .to(dtype)), isnan/isinf/isfinite, and reading a captured "
    "tensor at integer positions (table[q_idx - kv_idx], scales[h], bias[h, q_idx]). Anything "
    "else runs on the torch path (FLASHTILE_BACKEND=torch).")


class Lowering:
    """One pass over the graph: primal lines, tangent lines (score_mod), buffers."""

    def __init__(self, traced: Traced):
        self.traced = traced
        self.kind = traced.kind
        self.want_grad = traced.kind == "score_mod"
        self.lines: list = []                 # (name, expr, deps, comment)
        self.n = 0
        self.env: dict = {}
        self.tan: dict = {}
        self.buffers: list[Buffer] = []
        self.helpers: set = set()
        self.loads: dict = {}
        self.cse: dict = {}
        self.comment = ""
        self.node = None

    # ---- emission ---------------------------------------------------------------------------

    def let(self, expr: str, kind: str, *vals, nonneg: bool = False, extra_deps=()) -> Val:
        """A new line ``tN = expr`` (or the earlier line with the same pure expression)."""
        if (expr, kind) in self.cse:
            return self.cse[(expr, kind)]
        name = f"t{self.n}"
        self.n += 1
        deps = frozenset().union(*[v.deps for v in vals if isinstance(v, Val)], extra_deps)
        self.lines.append((name, expr, deps, self.comment))
        out = Val(name, kind, frozenset([name]), nonneg=nonneg)
        self.cse[(expr, kind)] = out
        return out

    def helper(self, name: str) -> str:
        self.helpers.add(name)
        return name

    def cast(self, v: Val, kind: str) -> Val:
        if v.kind == kind:
            return v
        if v.is_const:
            return lit(v.const, kind)
        if kind == "b":
            return self.let(f"{v.text} != 0", "b", v)
        return self.let(f"tl.cast({v.text}, {_TL[kind]})", kind, v, nonneg=v.nonneg)

    def binary(self, op: str, a: Val, b: Val, kind: str, nonneg=False) -> Val:
        return self.let(f"{a.text} {op} {b.text}", kind, a, b, nonneg=nonneg)

    def call(self, fn: str, *vals: Val, kind: str, nonneg=False) -> Val:
        return self.let(f"{fn}({', '.join(v.text for v in vals)})", kind, *vals, nonneg=nonneg)

    def where(self, c: Val, a: Val, b: Val, kind: str) -> Val:
        if c.is_const:
            return a if c.const else b
        if a.is_const and b.is_const and a.const == b.const and a.kind == b.kind:
            return a
        return self.let(f"tl.where({c.text}, {a.text}, {b.text})", kind, c, a, b,
                        nonneg=a.nonneg and b.nonneg)

    def maximum(self, a: Val, b: Val, kind: str, minimum=False) -> Val:
        fn = "tl.minimum" if minimum else "tl.maximum"
        nan = ", propagate_nan=tl.PropagateNan.ALL" if kind == "f" else ""
        nonneg = (a.nonneg and b.nonneg) if minimum else (a.nonneg or b.nonneg)
        return self.let(f"{fn}({a.text}, {b.text}{nan})", kind, a, b, nonneg=nonneg)

    # Float algebra for tangents: folds 0 and 1 so that simple mods give simple derivatives.
    def fmul(self, a, b):
        if a is None or b is None or _is(a, 0.0) or _is(b, 0.0):
            return None
        if _is(a, 1.0):
            return self.cast(b, "f")
        if _is(b, 1.0):
            return self.cast(a, "f")
        if a.is_const and b.is_const:
            return lit(a.const * b.const, "f")
        return self.binary("*", self.cast(a, "f"), self.cast(b, "f"), "f")

    def fadd(self, a, b):
        if a is None:
            return b
        if b is None:
            return a
        if a.is_const and b.is_const:
            return lit(a.const + b.const, "f")
        return self.binary("+", a, b, "f")

    def fneg(self, a):
        if a is None:
            return None
        if a.is_const:
            return lit(-a.const, "f")
        return self.let(f"-{a.text}", "f", a)

    def fdiv(self, a, b):
        if a is None:
            return None
        if _is(b, 1.0):
            return a
        if a.is_const and b.is_const and b.const != 0:
            return lit(a.const / b.const, "f")
        return self.binary("/", a, self.cast(b, "f"), "f")

    # ---- argument access ----------------------------------------------------------------------

    def arg(self, a) -> Val:
        """The value of a node argument (node, Python number)."""
        if isinstance(a, torch.fx.Node):
            v = self.env[a]
            if isinstance(v, View):
                return self.read(v, a)
            return v
        if isinstance(a, bool):
            return lit(a, "b")
        if isinstance(a, int):
            return lit(a, "i")
        if isinstance(a, float):
            return lit(a, "f")
        self.unsupported(f"argument {a!r} of type {type(a).__name__}")

    def targ(self, a):
        """The tangent of a node argument (``None`` = 0)."""
        if isinstance(a, torch.fx.Node):
            return self.tan.get(a)
        return None

    def out_kind(self) -> str:
        for a in _flat_args(self.node):
            if isinstance(a, torch.fx.Node) and isinstance(self.env.get(a), View):
                self.read(self.env[a], a)     # raises for a tensor not indexed down to a scalar
        val = self.node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            self.unsupported("an op without a tensor result")
        if val.dim() != 0:
            self.unsupported(f"an op whose result has shape {tuple(val.shape)} (a mod computes one "
                             "value per position; every intermediate must be a scalar)")
        if val.dtype not in _KINDS:
            self.unsupported(f"dtype {val.dtype}")
        return _KINDS[val.dtype]

    # ---- buffers --------------------------------------------------------------------------------

    def buffer_view(self, tensor: torch.Tensor, literal: bool) -> View:
        for i, buf in enumerate(self.buffers):
            if buf.tensor is tensor:
                return View(i, (None,) * tensor.dim())
        if tensor.dtype not in _KINDS:
            self.unsupported(f"a captured tensor of dtype {tensor.dtype}")
        if len(self.buffers) == MAX_BUFFERS:
            shapes = ", ".join(f"{tuple(b.tensor.shape)} {b.tensor.dtype}" for b in self.buffers)
            raise UnsupportedModError(
                f"{self.kind} {self.traced.name} reads more than {MAX_BUFFERS} captured tensors "
                f"(the kernels take at most {MAX_BUFFERS} extra pointers; already {shapes}, then "
                f"{tuple(tensor.shape)} {tensor.dtype}). Stack tensors of one dtype into one "
                "(bias = torch.stack([a, b]); bias[0, q_idx], bias[1, kv_idx]) or precompute a "
                "combined table outside the mod.")
        offset = sum(b.n_args for b in self.buffers)
        slot = len(self.buffers)
        self.buffers.append(Buffer(tensor, offset, literal))
        return View(slot, (None,) * tensor.dim())

    def read(self, view: View, node) -> Val:
        """Load a fully indexed captured tensor (masked: 0 outside the tensor)."""
        if any(ix is None for ix in view.index):
            free = sum(ix is None for ix in view.index)
            shape = tuple(self.buffers[view.slot].tensor.shape)
            self.unsupported(
                f"a captured tensor of shape {shape} used with {free} dimension(s) not indexed; "
                "index every dimension with a position (table[q_idx - kv_idx], scales[h], "
                "bias[h, q_idx]) so that the mod reads one element per position")
        key = (view.slot, tuple(ix.text for ix in view.index))
        if key in self.loads:
            return self.loads[key]
        buf = self.buffers[view.slot]
        k = view.slot
        comment, self.comment = self.comment, f"BUF{k}[{', '.join(key[1])}]"
        try:
            out = self._load(view, buf, k)
        finally:
            self.comment = comment
        self.loads[key] = out
        return out

    def _load(self, view: View, buf: Buffer, k: int) -> Val:
        ptr = f"BUF{k}"
        size_names = [f"BUF{k}_SIZE{d}" for d in range(buf.tensor.dim())]
        stride_names = [f"BUF{k}_STRIDE{d}" for d in range(buf.tensor.dim())]
        terms, masks, vals = [], [], []
        for d, ix in enumerate(view.index):
            size, stride = size_names[d], stride_names[d]
            if ix.is_const:
                c = int(ix.const)
                if c < 0:
                    pos = self.let(f"{c} + {size}", "i", extra_deps={size})
                    masks.append(f"({pos.text} >= 0)")
                else:
                    pos = ix
                masks.append(f"({pos.text} < {size})")
            else:
                pos = self.cast(ix, "i")
                if not pos.nonneg:
                    # torch wraps negative positions (table[-1] is the last element).
                    pos = self.let(f"tl.where({pos.text} < 0, {pos.text} + {size}, {pos.text})",
                                   "i", pos, extra_deps={size})
                    masks.append(f"({pos.text} >= 0)")
                masks.append(f"({pos.text} < {size})")
            vals.append(pos)
            terms.append(f"tl.cast({pos.text}, tl.int64) * {stride}")
        deps = set(size_names) | set(stride_names) | {ptr}
        dtype = buf.tensor.dtype
        kind = "f" if dtype.is_floating_point else "i"       # bool arrives as uint8
        if terms:
            off = self.let(" + ".join(terms), "i", *vals, extra_deps=deps)
            ok = self.let(" & ".join(masks), "b", *vals, extra_deps=deps)
            raw = self.let(f"tl.load({ptr} + {off.text}, mask={ok.text}, other=0)", kind, off, ok,
                           extra_deps={ptr})
        else:
            raw = self.let(f"tl.load({ptr})", kind, extra_deps={ptr})
        if dtype == torch.bool:
            return self.let(f"{raw.text} != 0", "b", raw)
        if dtype.is_floating_point and dtype != torch.float32:
            return self.let(f"tl.cast({raw.text}, tl.float32)", "f", raw)
        if dtype in (torch.int8, torch.uint8, torch.int16):
            return self.let(f"tl.cast({raw.text}, tl.int32)", "i", raw, nonneg=dtype == torch.uint8)
        return raw

    # ---- errors -------------------------------------------------------------------------------

    def unsupported(self, what: str, hint: str = ""):
        node = self.node
        where = ""
        if node is not None:
            trace = node.meta.get("stack_trace")
            if trace:
                where = f" at {trace.strip()}"
        op = _op_name(node) if node is not None and node.op == "call_function" else ""
        name, overload = (op.split(".") + [""])[:2] if op else ("", "")
        hint = hint or _HINTS.get(f"{name}.{overload}") or _HINTS.get(name, "")
        if not hint and name in _SHAPE_OPS:
            hint = ("a mod computes one value per (b, h, q_idx, kv_idx) position; shape "
                    "operations have no meaning there.")
        if not hint and name in _REDUCTIONS:
            hint = ("a mod sees one position at a time; compute reductions outside the mod and "
                    "capture the result.")
        raise UnsupportedModError(
            f"{self.kind} {self.traced.name} cannot be fused into the Triton kernels: "
            f"{what}{where}.\n{hint + chr(10) if hint else ''}{_SUPPORTED_SUMMARY}")

    # ---- the pass -------------------------------------------------------------------------------

    def run(self) -> Lowered:
        graph = self.traced.gm.graph
        names = ARG_NAMES[self.kind]
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        for node, name in zip(placeholders, names):
            kind = "f" if name == "score" else "i"
            self.env[node] = Val(name, kind, frozenset(), nonneg=kind == "i")
            if name == "score":
                self.tan[node] = lit(1.0, "f")
        result = None
        for node in graph.nodes:
            self.node = node
            if node.op == "get_attr":
                tensor = getattr(self.traced.gm, node.target)
                literal = bool(node.users) and all(_op_name(u).startswith("lift_fresh")
                                                   for u in node.users)
                if literal and tensor.numel() == 1 and tensor.dtype in _KINDS:
                    self.env[node] = lit(tensor.item(), _KINDS[tensor.dtype])
                elif node.users:
                    self.env[node] = self.buffer_view(tensor, literal)
            elif node.op == "call_function":
                if not node.users and _base_name(node) == _op_name(node).split(".")[0]:
                    continue                      # dead code (e.g. an unused intermediate)
                self.comment = _op_name(node)
                self.call_function(node)
            elif node.op == "output":
                result = node.args[0]
        self.node = None
        return self.finish(result)

    def call_function(self, node):
        op = _op_name(node)
        name = _base_name(node)
        inplace = name != op.split(".")[0]
        if inplace:
            if isinstance(self.env.get(node.args[0]), View):
                self.unsupported(f"aten.{op} modifies a captured tensor in place",
                                 "Leave captured tensors unchanged inside a mod.")
        handler = OPS.get(name)
        if handler is None:
            self.unsupported(f"aten.{op} is not supported")
        out = handler(self, node)
        self.env[node] = out
        if self.want_grad and isinstance(out, Val) and out.kind == "f":
            self.tangent(node, name, op, out)
        if inplace and isinstance(node.args[0], torch.fx.Node):
            # Later readers of the mutated tensor see the new value (after the tangent rule,
            # which needs the old one).
            self.env[node.args[0]] = out
            self.tan[node.args[0]] = self.tan.get(node)

    def tangent(self, node, name: str, op: str, out: Val):
        inputs = [a for a in _flat_args(node) if isinstance(a, torch.fx.Node)]
        if not any(self.tan.get(a) is not None for a in inputs):
            return
        rule = TANGENTS.get(name)
        if rule is None:
            if name in NONDIFF:
                return
            self.unsupported(f"the derivative of aten.{op} with respect to score")
        t = rule(self, node, out)
        if t is not None:
            self.tan[node] = t

    def finish(self, result) -> Lowered:
        if isinstance(result, (tuple, list)):
            self.unsupported(f"the {self.kind} returns {len(result)} values; it must return one")
        out = self.arg(result) if result is not None else None
        if out is None:
            self.unsupported(f"the {self.kind} returns None")
        grad = self.tan.get(result) if isinstance(result, torch.fx.Node) else None
        if self.kind == "score_mod":
            out = self.cast(out, "f")
            like = "score.shape"
            fns = [("score_mod_fn", [out]), ("score_mod_grad_fn", [grad]),
                   ("score_mod_fwd_grad_fn", [out, grad])]
        else:
            out = self.cast(out, "b")
            like = "(b + h + q_idx + kv_idx).shape"
            fns = [("mask_mod_fn", [out])]
        params = ", ".join(ARG_NAMES[self.kind]) + ", args"
        parts = []
        for name in sorted(self.helpers):
            parts.append(HELPERS[name].strip("\n"))
        for fn_name, rets in fns:
            parts.append(self.function(fn_name, params, rets, like))
        return Lowered(kind=self.kind, source="\n\n\n".join(parts) + "\n",
                       buffers=self.buffers, helpers=tuple(sorted(self.helpers)))

    def function(self, fn_name: str, params: str, rets: list, like: str) -> str:
        dtype = "tl.float32" if self.kind == "score_mod" else "tl.int1"
        needed = set()
        for r in rets:
            if r is not None:
                needed |= set(r.deps)
        keep = []
        for name, expr, deps, comment in reversed(self.lines):
            if name in needed:
                keep.append((name, expr, comment))
                needed |= deps
        body = []
        for b, buf in enumerate(self.buffers):
            names = [f"BUF{b}"]
            for d in range(buf.tensor.dim()):
                names += [f"BUF{b}_SIZE{d}", f"BUF{b}_STRIDE{d}"]
            for i, n in enumerate(names):
                if n in needed:
                    body.append(f"    {n} = args[{buf.offset + i}]")
        for name, expr, comment in reversed(keep):
            line = f"    {name} = {expr}"
            body.append(f"{line}  # {comment}" if comment and len(line) < 80 else line)
        outs = []
        for r in rets:
            if r is None:
                outs.append(f"tl.zeros({like}, {dtype})")
            elif r.is_const:
                value = _lit_text(r.const, "f") if self.kind == "score_mod" else int(bool(r.const))
                outs.append(f"tl.full({like}, {value}, {dtype})")
            else:
                outs.append(f"tl.broadcast_to({r.text}, {like})")
        body.append(f"    return {', '.join(outs)}")
        return f"@triton.jit\ndef {fn_name}({params}):\n" + "\n".join(body)


def _op_name(node) -> str:
    """``add.Tensor`` for ``aten.add.Tensor`` (overload ``default`` kept)."""
    target = node.target
    schema = getattr(target, "_schema", None)
    if schema is None:
        return getattr(target, "__name__", str(target))
    name = schema.name.split("::")[-1]
    return f"{name}.{schema.overload_name or 'default'}"


def _base_name(node) -> str:
    """``mul`` for ``aten.mul.Tensor`` and for its in-place variant ``aten.mul_.Tensor``."""
    name = _op_name(node).split(".")[0]
    if name.endswith("_") and not name.startswith("_") and name[:-1] in OPS:
        return name[:-1]
    return name


def _flat_args(node):
    for a in list(node.args) + list(node.kwargs.values()):
        if isinstance(a, (list, tuple)):
            yield from a
        else:
            yield a


def _overload(node) -> str:
    return _op_name(node).split(".")[1]


# ---- primal rules: (lowering, node) -> Val | View ----------------------------------------------

def _identity(L: Lowering, node):
    v = L.env[node.args[0]] if isinstance(node.args[0], torch.fx.Node) else L.arg(node.args[0])
    if isinstance(v, View):
        return v
    return L.cast(v, L.out_kind())


def _shape_noop(L: Lowering, node):
    src = node.args[0]
    val = node.meta.get("val")
    if isinstance(src, torch.fx.Node) and isinstance(val, torch.Tensor) and val.dim() == 0 and \
            isinstance(src.meta.get("val"), torch.Tensor) and src.meta["val"].dim() == 0:
        return L.arg(src)
    L.unsupported(f"aten.{_op_name(node)} is not supported")


def _arith(op: str):
    def rule(L: Lowering, node):
        kind = L.out_kind()
        a, b = L.arg(node.args[0]), L.arg(node.args[1])
        alpha = node.kwargs.get("alpha", 1)
        name = _base_name(node)
        if name == "rsub":
            a, b = b, a
        if kind == "b":
            if op in "+*":
                return L.binary("|" if op == "+" else "&", L.cast(a, "b"), L.cast(b, "b"), "b")
            L.unsupported(f"aten.{_op_name(node)} on bool tensors (use & | ~)")
        a, b = L.cast(a, kind), L.cast(b, kind)
        if alpha != 1:
            b = L.binary("*", lit(alpha, kind), b, kind, nonneg=b.nonneg and alpha >= 0)
        nonneg = a.nonneg and b.nonneg and op in "+*"
        return L.binary(op, a, b, kind, nonneg=nonneg)
    return rule


def _div(L: Lowering, node):
    kind = L.out_kind()
    a, b = L.arg(node.args[0]), L.arg(node.args[1])
    mode = node.kwargs.get("rounding_mode")
    if mode is None:
        return L.binary("/", L.cast(a, "f"), L.cast(b, "f"), "f")
    if kind == "i":
        fn = L.helper("_floordiv" if mode == "floor" else "_truncdiv")
        return L.call(fn, a, b, kind="i", nonneg=a.nonneg and b.is_const and b.const > 0)
    q = L.binary("/", L.cast(a, "f"), L.cast(b, "f"), "f")
    return L.call("tl.floor" if mode == "floor" else L.helper("_trunc"), q, kind="f")


def _floor_divide(L: Lowering, node):
    kind = L.out_kind()
    a, b = L.cast(L.arg(node.args[0]), kind), L.cast(L.arg(node.args[1]), kind)
    if kind == "i":
        return L.call(L.helper("_floordiv"), a, b, kind="i",
                      nonneg=a.nonneg and b.is_const and b.const > 0)
    return L.call("tl.floor", L.binary("/", a, b, "f"), kind="f")


def _remainder(L: Lowering, node):
    kind = L.out_kind()
    a, b = L.cast(L.arg(node.args[0]), kind), L.cast(L.arg(node.args[1]), kind)
    if kind == "i":
        return L.call(L.helper("_remainder"), a, b, kind="i", nonneg=b.is_const and b.const > 0)
    q = L.call("tl.floor", L.binary("/", a, b, "f"), kind="f")
    return L.binary("-", a, L.binary("*", q, b, "f"), "f")


def _fmod(L: Lowering, node):
    kind = L.out_kind()
    a, b = L.cast(L.arg(node.args[0]), kind), L.cast(L.arg(node.args[1]), kind)
    if kind == "i":
        q = L.call(L.helper("_truncdiv"), a, b, kind="i")
        return L.binary("-", a, L.binary("*", q, b, "i"), "i", nonneg=a.nonneg)
    q = L.call(L.helper("_trunc"), L.binary("/", a, b, "f"), kind="f")
    return L.binary("-", a, L.binary("*", q, b, "f"), "f")


def _neg(L: Lowering, node):
    kind = L.out_kind()
    x = L.cast(L.arg(node.args[0]), kind)
    if x.is_const:
        return lit(-x.const, kind)
    return L.let(f"-{x.text}", kind, x)


def _unary(fn: str, *, float_only=True, helper=False):
    def rule(L: Lowering, node):
        kind = L.out_kind()
        x = L.arg(node.args[0])
        if kind != "f" and fn in _ROUNDING:
            return L.cast(x, kind)            # floor/ceil/trunc/round of integers: unchanged
        x = L.cast(x, "f" if float_only else kind)
        name = L.helper(fn) if helper else fn
        return L.call(name, x, kind=kind, nonneg=fn == "tl.abs")
    return rule


_ROUNDING = {"tl.floor", "tl.ceil", "_trunc", "_round"}


def _reciprocal(L: Lowering, node):
    return L.binary("/", lit(1.0, "f"), L.cast(L.arg(node.args[0]), "f"), "f")


def _relu(L: Lowering, node):
    kind = L.out_kind()
    return L.maximum(L.cast(L.arg(node.args[0]), kind), lit(0, kind), kind)


def _sign(L: Lowering, node):
    kind = L.out_kind()
    x = L.cast(L.arg(node.args[0]), kind)
    zero = L.let(f"{x.text} * 0.0", "f", x) if kind == "f" else lit(0, kind)  # keeps NaN
    neg = L.where(L.binary("<", x, lit(0, kind), "b"), lit(-1, kind), zero, kind)
    return L.where(L.binary(">", x, lit(0, kind), "b"), lit(1, kind), neg, kind)


def _pow_const(L: Lowering, x: Val, c, kind: str) -> Val:
    """``x ** c`` for a Python number ``c``."""
    if kind == "i":
        c = int(c)
        if c < 0:
            L.unsupported("integer tensor to a negative power")
        out = lit(1, "i")
        for _ in range(c):
            out = x if _is(out, 1) else L.binary("*", out, x, "i", nonneg=out.nonneg and x.nonneg)
        return out
    x = L.cast(x, "f")
    c = float(c)
    if c == 0:
        return lit(1.0, "f")
    if c == 1:
        return x
    if c == 0.5:
        return L.call("tl.sqrt", x, kind="f")
    if c == -0.5:
        return L.call("tl.rsqrt", x, kind="f")
    if c.is_integer() and abs(c) <= 4:
        out = x
        for _ in range(int(abs(c)) - 1):
            out = L.binary("*", out, x, "f")
        return out if c > 0 else L.binary("/", lit(1.0, "f"), out, "f")
    if c.is_integer():
        ax = L.call("tl.abs", x, kind="f")
        m = L.call("tl.exp2", L.binary("*", lit(c, "f"), L.call("tl.log2", ax, kind="f"), "f"),
                   kind="f")
        if int(c) % 2 == 0:
            return m
        return L.where(L.binary("<", x, lit(0.0, "f"), "b"), L.fneg(m), m, "f")
    return L.call("tl.exp2", L.binary("*", lit(c, "f"), L.call("tl.log2", x, kind="f"), "f"),
                  kind="f")


def _pow(L: Lowering, node):
    kind = L.out_kind()
    ov = _overload(node)
    if ov == "Tensor_Scalar":
        return _pow_const(L, L.cast(L.arg(node.args[0]), kind), node.args[1], kind)
    if ov == "Scalar":
        base = float(node.args[0])
        if base <= 0:
            L.unsupported(f"{base} ** tensor (only a positive base is supported)")
        x = L.cast(L.arg(node.args[1]), "f")
        return L.call("tl.exp2", L.binary("*", x, lit(math.log2(base), "f"), "f"), kind="f")
    if ov == "Tensor_Tensor":
        b = node.args[1]
        if isinstance(L.env.get(b), Val) and L.env[b].is_const:      # x ** torch.tensor(2.0)
            return _pow_const(L, L.cast(L.arg(node.args[0]), kind), L.env[b].const, kind)
    L.unsupported(f"aten.{_op_name(node)} is not supported")


def _compare(op: str):
    def rule(L: Lowering, node):
        a, b = L.arg(node.args[0]), L.arg(node.args[1])
        kind = max(a.kind, b.kind, key=_RANK.get)
        return L.binary(op, L.cast(a, kind), L.cast(b, kind), "b")
    return rule


def _logical(op: str):
    def rule(L: Lowering, node):
        a, b = L.cast(L.arg(node.args[0]), "b"), L.cast(L.arg(node.args[1]), "b")
        for x, y in ((a, b), (b, a)):
            if x.is_const and op == "&":
                return y if x.const else lit(False, "b")
            if x.is_const and op == "|":
                return lit(True, "b") if x.const else y
        return L.binary(op, a, b, "b")
    return rule


def _logical_not(L: Lowering, node):
    x = L.cast(L.arg(node.args[0]), "b")
    if x.is_const:
        return lit(not x.const, "b")
    return L.let(f"~{x.text}", "b", x)


def _bitwise(op: str):
    def rule(L: Lowering, node):
        kind = L.out_kind()
        if kind == "b":
            return _logical(op)(L, node)
        a, b = L.cast(L.arg(node.args[0]), kind), L.cast(L.arg(node.args[1]), kind)
        return L.binary(op, a, b, kind)
    return rule


def _bitwise_not(L: Lowering, node):
    kind = L.out_kind()
    if kind == "b":
        return _logical_not(L, node)
    x = L.cast(L.arg(node.args[0]), kind)
    return L.let(f"~{x.text}", kind, x)


def _where(L: Lowering, node):
    kind = L.out_kind()
    c = L.cast(L.arg(node.args[0]), "b")
    a, b = L.cast(L.arg(node.args[1]), kind), L.cast(L.arg(node.args[2]), kind)
    return L.where(c, a, b, kind)


def _masked_fill(L: Lowering, node):
    kind = L.out_kind()
    x = L.cast(L.arg(node.args[0]), kind)
    c = L.cast(L.arg(node.args[1]), "b")
    v = L.cast(L.arg(node.args[2]), kind)
    return L.where(c, v, x, kind)


def _minmax(minimum: bool):
    def rule(L: Lowering, node):
        kind = L.out_kind()
        a, b = L.cast(L.arg(node.args[0]), kind), L.cast(L.arg(node.args[1]), kind)
        return L.maximum(a, b, kind, minimum=minimum)
    return rule


def _clamp_bounds(node):
    name = _base_name(node)
    args = list(node.args) + [None, None]
    if name == "clamp_min":
        return args[1], None
    if name == "clamp_max":
        return None, args[1]
    return node.kwargs.get("min", args[1]), node.kwargs.get("max", args[2])


def _clamp(L: Lowering, node):
    kind = L.out_kind()
    x = L.cast(L.arg(node.args[0]), kind)
    lo, hi = _clamp_bounds(node)
    if lo is not None:
        x = L.maximum(x, L.cast(L.arg(lo), kind), kind)
    if hi is not None:
        x = L.maximum(x, L.cast(L.arg(hi), kind), kind, minimum=True)
    return x


def _to_copy(L: Lowering, node):
    x = L.env[node.args[0]] if isinstance(node.args[0], torch.fx.Node) else L.arg(node.args[0])
    if isinstance(x, View):
        x = L.read(x, node.args[0])
    dtype = node.kwargs.get("dtype")
    kind = L.out_kind()
    if dtype == torch.int64 and x.kind != "i" and not x.is_const:
        # float/bool -> int64 (truncating like torch); int32 would overflow sooner.
        return L.let(f"tl.cast({x.text}, tl.int64)", "i", x, nonneg=x.nonneg)
    out = L.cast(x, kind)
    if dtype in (torch.float16, torch.bfloat16) and not out.is_const:
        # Values stay float32 in the kernel; the cast rounds (to nearest even) like torch's.
        if dtype == torch.float16:
            out = L.let(f"tl.cast(tl.cast({out.text}, tl.float16), tl.float32)", "f", out)
        else:
            out = L.call(L.helper("_round_bf16"), out, kind="f")
    return out


def _constant(L: Lowering, node):
    kind = L.out_kind()
    name = _base_name(node)
    args = node.args
    if name == "scalar_tensor":
        value = args[0]
    elif name in ("full", "new_full"):
        size = args[0] if name == "full" else args[1]
        if list(size):
            L.unsupported(f"aten.{_op_name(node)} of shape {list(size)}", _HINTS["arange"])
        value = args[1] if name == "full" else args[2]
    elif name == "full_like":
        value = args[1]
    elif name in ("zeros_like", "zeros", "new_zeros"):
        value = 0
    elif name in ("ones_like", "ones", "new_ones"):
        value = 1
    else:
        L.unsupported(f"aten.{_op_name(node)} is not supported")
    if name in ("zeros", "ones") and list(args[0]):
        L.unsupported(f"aten.{_op_name(node)} of shape {list(args[0])}", _HINTS["arange"])
    if name in ("new_zeros", "new_ones") and list(args[1]):
        L.unsupported(f"aten.{_op_name(node)} of shape {list(args[1])}", _HINTS["arange"])
    return lit(value, kind)


def _copy(L: Lowering, node):
    return L.cast(L.arg(node.args[1]), L.out_kind())


def _select(L: Lowering, node):
    view = L.env.get(node.args[0]) if isinstance(node.args[0], torch.fx.Node) else None
    if not isinstance(view, View):
        L.unsupported("indexing a computed value (only captured tensors can be indexed)")
    dim, index = node.args[1], node.args[2]
    free = [i for i, ix in enumerate(view.index) if ix is None]
    if dim < 0:
        dim += len(free)
    new = list(view.index)
    new[free[dim]] = lit(index, "i")
    return View(view.slot, tuple(new))


def _index(L: Lowering, node):
    view = L.env.get(node.args[0]) if isinstance(node.args[0], torch.fx.Node) else None
    if not isinstance(view, View):
        L.unsupported("indexing a computed value (only captured tensors can be indexed)")
    indices = list(node.args[1])
    free = [i for i, ix in enumerate(view.index) if ix is None]
    if any(ix is None for ix in indices) or len(indices) != len(free):
        L.unsupported("indexing a captured tensor with slices or fewer positions than dimensions",
                      "Index every dimension at once: bias[h, q_idx - kv_idx].")
    new = list(view.index)
    for d, ix in zip(free, indices):
        v = L.arg(ix)
        if v.kind != "i":
            L.unsupported(f"indexing with a {'bool' if v.kind == 'b' else 'float'} tensor",
                          "Index with integer positions; use torch.where for conditions.")
        new[d] = v
    return View(view.slot, tuple(new))


def _isnan(L: Lowering, node):
    x = L.arg(node.args[0])
    if x.kind != "f":
        return lit(False, "b")
    return L.binary("!=", x, x, "b")


def _isinf(L: Lowering, node):
    x = L.arg(node.args[0])
    if x.kind != "f":
        return lit(False, "b")
    return L.binary("==", L.call("tl.abs", x, kind="f"), lit(math.inf, "f"), "b")


def _isfinite(L: Lowering, node):
    x = L.arg(node.args[0])
    if x.kind != "f":
        return lit(True, "b")
    return L.binary("<", L.call("tl.abs", x, kind="f"), lit(math.inf, "f"), "b")


OPS = {
    "add": _arith("+"), "sub": _arith("-"), "mul": _arith("*"), "rsub": _arith("-"),
    "div": _div, "true_divide": _div, "floor_divide": _floor_divide, "remainder": _remainder,
    "fmod": _fmod, "neg": _neg, "pow": _pow,
    "abs": _unary("tl.abs", float_only=False), "exp": _unary("tl.exp"),
    "exp2": _unary("tl.exp2"), "log": _unary("tl.log"), "log2": _unary("tl.log2"),
    "sqrt": _unary("tl.sqrt"), "rsqrt": _unary("tl.rsqrt"), "sin": _unary("tl.sin"),
    "cos": _unary("tl.cos"), "erf": _unary("tl.erf"), "sigmoid": _unary("tl.sigmoid"),
    "tanh": _unary("_tanh", helper=True), "expm1": _unary("_expm1", helper=True),
    "log1p": _unary("_log1p", helper=True), "floor": _unary("tl.floor", float_only=False),
    "ceil": _unary("tl.ceil", float_only=False), "trunc": _unary("_trunc", helper=True),
    "round": _unary("_round", helper=True), "reciprocal": _reciprocal, "relu": _relu,
    "sign": _sign, "sgn": _sign,
    "minimum": _minmax(True), "maximum": _minmax(False), "fmin": _minmax(True),
    "fmax": _minmax(False),
    "clamp": _clamp, "clamp_min": _clamp, "clamp_max": _clamp, "clip": _clamp,
    "where": _where, "masked_fill": _masked_fill,
    "eq": _compare("=="), "ne": _compare("!="), "lt": _compare("<"), "le": _compare("<="),
    "gt": _compare(">"), "ge": _compare(">="),
    "logical_and": _logical("&"), "logical_or": _logical("|"), "logical_xor": _logical("^"),
    "logical_not": _logical_not,
    "bitwise_and": _bitwise("&"), "bitwise_or": _bitwise("|"), "bitwise_xor": _bitwise("^"),
    "bitwise_not": _bitwise_not, "__and__": _bitwise("&"), "__or__": _bitwise("|"),
    "__xor__": _bitwise("^"),
    "_to_copy": _to_copy, "to": _to_copy,
    "clone": _identity, "alias": _identity, "detach": _identity, "lift_fresh_copy": _identity,
    "lift_fresh": _identity, "positive": _identity,
    "expand": _shape_noop, "view": _shape_noop, "reshape": _shape_noop, "squeeze": _shape_noop,
    "_unsafe_view": _shape_noop,
    "scalar_tensor": _constant, "full": _constant, "full_like": _constant, "zeros_like": _constant,
    "ones_like": _constant, "zeros": _constant, "ones": _constant, "new_full": _constant,
    "new_zeros": _constant, "new_ones": _constant,
    "copy": _copy, "select": _select, "index": _index,
    "isnan": _isnan, "isinf": _isinf, "isfinite": _isfinite,
}

# Ops whose derivative is zero everywhere it exists (torch returns zero gradients too).
NONDIFF = {"floor", "ceil", "trunc", "round", "sign", "sgn", "floor_divide", "eq", "ne", "lt",
           "le", "gt", "ge", "isnan", "isinf", "isfinite", "scalar_tensor", "full", "full_like",
           "zeros_like", "ones_like", "zeros", "ones", "new_full", "new_zeros", "new_ones",
           "select", "index"}


# ---- tangent rules: (lowering, node, primal out) -> tangent Val | None ---------------------------

def _t_arith(L: Lowering, node, out):
    name = _base_name(node)
    if node.kwargs.get("rounding_mode") is not None:
        return None                       # torch: zero gradient for rounded division
    ta, tb = L.targ(node.args[0]), L.targ(node.args[1])
    alpha = node.kwargs.get("alpha", 1)
    if name in ("add", "sub", "rsub"):
        if alpha != 1:
            tb = L.fmul(tb, lit(alpha, "f")) if name != "rsub" else tb
            ta = L.fmul(ta, lit(alpha, "f")) if name == "rsub" else ta
        if name == "add":
            return L.fadd(ta, tb)
        if name == "sub":
            return L.fadd(ta, L.fneg(tb))
        return L.fadd(tb, L.fneg(ta))         # rsub(self, other) = other - alpha * self
    a, b = L.arg(node.args[0]), L.arg(node.args[1])
    if name == "mul":
        return L.fadd(L.fmul(ta, b), L.fmul(a, tb))
    # true division: d(a/b) = da / b - db * a / (b * b)
    first = L.fdiv(ta, b)
    if tb is None:
        return first
    bf = L.cast(b, "f")
    second = L.fdiv(L.fmul(tb, a), L.binary("*", bf, bf, "f"))
    return L.fadd(first, L.fneg(second))


def _t_neg(L, node, out):
    return L.fneg(L.targ(node.args[0]))


def _t_pass(L, node, out):
    return L.targ(node.args[0])


def _t_to_copy(L, node, out):
    x = node.args[0]
    src = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if isinstance(src, torch.Tensor) and src.dtype.is_floating_point:
        return L.targ(x)
    return None


def _t_copy(L, node, out):
    return L.targ(node.args[1])


def _t_unary(deriv):
    """Rules of the form ``tangent = tx * deriv(L, x, out)``."""
    def rule(L, node, out):
        tx = L.targ(node.args[0])
        if tx is None:
            return None
        x = L.cast(L.arg(node.args[0]), "f")
        return L.fmul(tx, deriv(L, x, out))
    return rule


def _d_abs(L, x, out):
    pos = L.binary(">", x, lit(0.0, "f"), "b")
    neg = L.binary("<", x, lit(0.0, "f"), "b")
    return L.where(pos, lit(1.0, "f"), L.where(neg, lit(-1.0, "f"), lit(0.0, "f"), "f"), "f")


_DERIVS = {
    "abs": _d_abs,
    "exp": lambda L, x, out: out,
    "exp2": lambda L, x, out: L.fmul(out, lit(LN2, "f")),
    "log": lambda L, x, out: L.fdiv(lit(1.0, "f"), x),
    "log2": lambda L, x, out: L.fdiv(lit(1.0, "f"), L.fmul(x, lit(LN2, "f"))),
    "expm1": lambda L, x, out: L.binary("+", out, lit(1.0, "f"), "f"),
    "log1p": lambda L, x, out: L.fdiv(lit(1.0, "f"), L.binary("+", x, lit(1.0, "f"), "f")),
    "sqrt": lambda L, x, out: L.fdiv(lit(0.5, "f"), out),
    "rsqrt": lambda L, x, out: L.fmul(lit(-0.5, "f"), L.fmul(out, L.fmul(out, out))),
    "tanh": lambda L, x, out: L.binary("-", lit(1.0, "f"), L.fmul(out, out), "f"),
    "sigmoid": lambda L, x, out: L.fmul(out, L.binary("-", lit(1.0, "f"), out, "f")),
    "sin": lambda L, x, out: L.call("tl.cos", x, kind="f"),
    "cos": lambda L, x, out: L.fneg(L.call("tl.sin", x, kind="f")),
    "erf": lambda L, x, out: L.fmul(lit(2.0 / math.sqrt(math.pi), "f"),
                                    L.call("tl.exp", L.fneg(L.fmul(x, x)), kind="f")),
    "reciprocal": lambda L, x, out: L.fneg(L.fmul(out, out)),
    "relu": lambda L, x, out: L.where(L.binary(">", out, lit(0.0, "f"), "b"),
                                      lit(1.0, "f"), lit(0.0, "f"), "f"),
}


def _t_pow(L, node, out):
    ov = _overload(node)
    if ov == "Scalar":
        tx = L.targ(node.args[1])
        return L.fmul(tx, L.fmul(out, lit(math.log(float(node.args[0])), "f")))
    tx = L.targ(node.args[0])
    if ov == "Tensor_Tensor":
        if L.targ(node.args[1]) is not None:
            L.unsupported("the derivative of x ** y in y")
        c = L.env[node.args[1]].const
    else:
        c = node.args[1]
    if tx is None or c == 0:
        return None
    x = L.cast(L.arg(node.args[0]), "f")
    return L.fmul(tx, L.fmul(lit(c, "f"), _pow_const(L, x, float(c) - 1, "f")))


def _t_where(L, node, out):
    ta, tb = L.targ(node.args[1]), L.targ(node.args[2])
    if ta is None and tb is None:
        return None
    c = L.cast(L.arg(node.args[0]), "b")
    return L.where(c, ta or lit(0.0, "f"), tb or lit(0.0, "f"), "f")


def _t_masked_fill(L, node, out):
    tx, tv = L.targ(node.args[0]), L.targ(node.args[2])
    if tx is None and tv is None:
        return None
    c = L.cast(L.arg(node.args[1]), "b")
    return L.where(c, tv or lit(0.0, "f"), tx or lit(0.0, "f"), "f")


def _t_minmax(minimum: bool):
    def rule(L, node, out):
        ta, tb = L.targ(node.args[0]), L.targ(node.args[1])
        a, b = L.cast(L.arg(node.args[0]), "f"), L.cast(L.arg(node.args[1]), "f")
        zero = lit(0.0, "f")
        tie = L.binary("==", a, b, "b")
        a_wins = L.binary("<" if minimum else ">", a, b, "b")
        half = L.fmul(L.fadd(ta, tb), lit(0.5, "f")) or zero
        return L.where(tie, half, L.where(a_wins, ta or zero, tb or zero, "f"), "f")
    return rule


def _t_clamp(L, node, out):
    tx = L.targ(node.args[0])
    x = L.cast(L.arg(node.args[0]), "f")
    lo, hi = _clamp_bounds(node)
    zero = lit(0.0, "f")
    inside = lit(True, "b")
    t_out_lo, t_out_hi = zero, zero
    below = lit(False, "b")
    if lo is not None:
        lov = L.cast(L.arg(lo), "f")
        inside = L.binary(">=", x, lov, "b")
        below = L.binary("<", x, lov, "b")
        t_out_lo = L.targ(lo) or zero
    if hi is not None:
        hiv = L.cast(L.arg(hi), "f")
        le = L.binary("<=", x, hiv, "b")
        inside = le if inside.is_const else L.binary("&", inside, le, "b")
        t_out_hi = L.targ(hi) or zero
    outside = L.where(below, t_out_lo, t_out_hi, "f")
    return L.where(inside, tx or zero, outside, "f")


def _t_remainder(L, node, out):
    ta, tb = L.targ(node.args[0]), L.targ(node.args[1])
    if tb is None:
        return ta
    a, b = L.cast(L.arg(node.args[0]), "f"), L.cast(L.arg(node.args[1]), "f")
    fn = "tl.floor" if _base_name(node) == "remainder" else L.helper("_trunc")
    q = L.call(fn, L.binary("/", a, b, "f"), kind="f")
    return L.fadd(ta, L.fneg(L.fmul(tb, q)))


TANGENTS = {
    "add": _t_arith, "sub": _t_arith, "rsub": _t_arith, "mul": _t_arith, "div": _t_arith,
    "true_divide": _t_arith, "neg": _t_neg, "positive": _t_pass,
    "clone": _t_pass, "alias": _t_pass, "detach": lambda L, node, out: None,
    "lift_fresh_copy": _t_pass, "lift_fresh": _t_pass, "expand": _t_pass, "view": _t_pass,
    "reshape": _t_pass, "squeeze": _t_pass, "_unsafe_view": _t_pass,
    "_to_copy": _t_to_copy, "to": _t_to_copy, "copy": _t_copy,
    "pow": _t_pow, "where": _t_where, "masked_fill": _t_masked_fill,
    "minimum": _t_minmax(True), "maximum": _t_minmax(False), "fmin": _t_minmax(True),
    "fmax": _t_minmax(False),
    "clamp": _t_clamp, "clamp_min": _t_clamp, "clamp_max": _t_clamp, "clip": _t_clamp,
    "remainder": _t_remainder, "fmod": _t_remainder,
}
for _name, _deriv in _DERIVS.items():
    TANGENTS[_name] = _t_unary(_deriv)


def lower(traced: Traced) -> Lowered:
    """Lower a traced mod to the source of its jit functions (see the package docstring)."""
    return Lowering(traced).run()
