"""Launch plans: a call signature's kernel launches, recorded once and replayed by later calls.

A small attention step is bound by the host: per launch, building ~60 kernel arguments, then
Triton's argument binding and kernel lookup, cost tens of microseconds on the development CPU
and 3-5x that on the H200's host. Training and serving loops repeat the same call signature
(shapes, strides, dtypes, flags) thousands of times, so the first call of a signature records

- each launch's compiled kernel, grid and full argument list (every kernel parameter in order,
  as Triton's launcher takes them), with the call's tensors blanked out and their names kept;
- the shapes and dtypes of the buffers the call allocates (outputs, scratch; an accumulator
  is zeroed by a recorded kernel, as the one-pass dQ's by the preprocess), and the copies it
  ends with (a one-pass dQ's fp32 sum into dQ);

and a later call with the same key allocates its buffers and relaunches the recorded kernels
with its own tensors: no argument building, no binding, no autotuner lookup.

Why it is safe:

- The caller's key holds everything its launching code reads besides tensor contents and
  addresses (layouts, dtypes, 16-byte alignment, every scalar and flag); the replayed argument
  lists then equal the ones the full path builds. ``scripts/host_overhead.py --check-plans``
  compares both, launch by launch, argument by argument (a CI test).
- A tensor argument that is none of the call's named tensors (a buffer made on the side), or
  one inside a tuple argument, would be replayed stale: such a call gets no plan. Values that
  change every call (dropout's seed and offset, a score_mod's captured tensors) are named
  too, and a replay passes the call's own.
- Plans hold no tensor (a KV cache of gigabytes, say), only shapes.
- Launch hooks (a profiler such as proton) need Triton's own launch path: no plans then.

``FLASHTILE_LAUNCH_PLANS=0`` turns plans off (on by default).
"""

from __future__ import annotations

import torch
from triton import knobs
from triton.runtime import driver

from .common import TunedLaunch, alloc, getenv, interpreting

try:        # (Triton's per-launch TMA descriptor encoding; see _direct_launch)
    from triton.backends.nvidia.driver import make_tensordesc_arg
except ImportError:
    make_tensordesc_arg = None

MAX_PLANS = 256


def enabled() -> bool:
    """Plans are used unless ``FLASHTILE_LAUNCH_PLANS=0``, never under the interpreter, never
    while a launch hook is installed."""
    if getenv("FLASHTILE_LAUNCH_PLANS", "1") in ("", "0") or interpreting():
        return False
    runtime = knobs.runtime
    enter, exit_ = runtime.launch_enter_hook, runtime.launch_exit_hook
    return ((enter is None or not getattr(enter, "calls", True))
            and (exit_ is None or not getattr(exit_, "calls", True)))


def sig(t: torch.Tensor | None):
    """What a tensor contributes to a call's launches: layout, dtype, and whether its address
    is 16-byte aligned (Triton specialises pointers on that)."""
    return None if t is None else (t.shape, t.stride(), t.dtype, t.data_ptr() % 16 == 0)


def device_key(t: torch.Tensor):
    """The tensor's device and the current CUDA device (a compiled kernel belongs to one)."""
    device = t.device
    return device, torch.cuda.current_device() if device.type == "cuda" else -1


def int_class(x: int) -> str:
    """The type Triton gives an int argument it does not specialise on."""
    return "i32" if -2**31 <= x < 2**31 else "i64" if x < 2**63 else "u64"


# Kernel parameters whose values a replay takes from the call (name in the call's dict):
# dropout's RNG key (new every call), and the compiled mods' captured tensors with their sizes
# and strides (a flat tuple, :meth:`flashtile.codegen.CompiledMod.kernel_args`).
CALL_VALUES = {"seed": "seed", "rng_offset": "offset", "sm_args": "sm_args",
               "mm_args": "mm_args"}


def call_key(q, k, v, params) -> tuple | None:
    """The part of a forward/backward call's key that q, k, v and ``params`` give, or None when
    the call is not planned (paged K/V, a bias). Varlen enters by ``cu_seqlens`` layouts and
    the maxima (the lengths are the call's own tensors). A compiled mod enters by its generated
    code's key (the same function with other captured scalars compiles to other code) and its
    captured tensors' layouts, a block mask by its lists' layouts: their contents are the
    call's own (:func:`params_tensors`). Dropout's seed and offset are replayed per call
    (:data:`CALL_VALUES`): only their int types count."""
    p = params
    if p.attn_bias is not None or p.block_table is not None or not enabled():
        return None
    varlen = None
    if p.cu_seqlens_q is not None:
        varlen = (sig(p.cu_seqlens_q), sig(p.cu_seqlens_k), p.max_seqlen_q, p.max_seqlen_k,
                  sig(p.seq_order))
    mods = None
    if p.score_mod is not None or p.mask_mod is not None:
        from ..codegen import compile_mods
        sm, mm = compile_mods(p)                     # (cached on params by the interface)
        mods = (sm.key, mm.key, *(sig(b) for b in sm.buffers), None,
                *(sig(b) for b in mm.buffers))
    bm = p.block_mask
    lists = None if bm is None else (bm.BLOCK_SIZE, bm.seq_lengths,
                                     *(sig(getattr(bm, n)) for n in BLOCK_MASK_LISTS))
    return (*device_key(q), sig(q), sig(k), sig(v), p.softmax_scale, p.window_left,
            p.window_right, p.bottom_right, p.softcap, sig(p.alibi_slopes), p.dropout_p,
            int_class(p.seed), int_class(p.offset), mods, lists, varlen)


def backward_key(planned: dict | None, q, k, v, params) -> tuple[tuple | None, dict | None]:
    """A backward's :func:`call_key` and :func:`params_tensors`, taken from its forward's when
    it made them: ``planned`` is what :func:`flashtile.kernels.fwd.forward` left there. The
    autograd layer hands it from the forward to the backward of one call only when autograd
    gives the backward the forward's own q, k and v at their addresses (no saved-tensor hook
    replaced them), with the same params: :func:`call_key` would then give the same value;
    only the current CUDA device is read anew, as the backward runs on the engine's thread.
    Saves a key's signatures and the named tensors' dict on each backward (~5 us on the
    development CPU, more on the H200's host, session 18).

    As if computed anew in every other case: plans switched off since the forward (or a
    launch hook installed) give None; a forward without a key (plans off then, or no
    ``planned``) leaves the backward to compute its own. ``(None, None)`` when not planned."""
    saved = planned.get("key") if planned else None
    if saved is None:
        key = call_key(q, k, v, params)
        return key, (None if key is None else params_tensors(params, q.device))
    if not enabled():
        return None, None
    return (*device_key(q), *saved[2:]), planned["named"]


BLOCK_MASK_LISTS = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices",
                    "q_num_blocks", "q_indices", "full_q_num_blocks", "full_q_indices")


def params_tensors(params, device: torch.device) -> dict:
    """The tensors ``params`` hands the kernels, by name, and its per-call values
    (:data:`CALL_VALUES`)."""
    named = {"slopes": params.alibi_slopes, "seed": params.seed, "offset": params.offset,
             "sm_args": (), "mm_args": (), "cu_seqlens_q": params.cu_seqlens_q,
             "cu_seqlens_k": params.cu_seqlens_k, "seq_order": params.seq_order}
    if params.score_mod is not None or params.mask_mod is not None:
        from ..codegen import compile_mods
        sm, mm = compile_mods(params)
        named.update(sm_args=sm.kernel_args(device), mm_args=mm.kernel_args(device))
    if params.block_mask is not None:
        named.update((n, getattr(params.block_mask, n)) for n in BLOCK_MASK_LISTS)
    return named


class _Launch:
    """One recorded launch; ``places``: (parameter index, tensor name) of the blanked tensors."""

    def __init__(self, jit_fn, grid: tuple, args: tuple, kwargs: dict, tuned, names: dict,
                 scalars: dict):
        self.tuned = tuned                            # (autotuner, config) or None
        binder = jit_fn.device_caches[driver.active.get_current_device()][4]
        bound, _, _ = binder(*args, **kwargs)
        self.values = list(bound.values())
        self.places = []
        for i, value in enumerate(self.values):
            if jit_fn.arg_names[i] in scalars:        # a per-call value (dropout's seed)
                self.places.append((i, scalars[jit_fn.arg_names[i]]))
                self.values[i] = None
            elif isinstance(value, torch.Tensor):
                if id(value) not in names:
                    raise LookupError(f"{jit_fn.arg_names[i]}: a tensor the call did not name")
                self.places.append((i, names[id(value)]))
                self.values[i] = None                 # keep no tensor alive
            elif isinstance(value, (tuple, list)) and any(
                    isinstance(x, torch.Tensor) for x in value):
                # (a tuple of tensors is replayed only as a per-call value: the mods' captures)
                raise LookupError(f"{jit_fn.arg_names[i]}: tensors inside a tuple")
        kernel = jit_fn.run(*args, grid=grid, warmup=True, **kwargs)
        self.kernel = kernel.result() if hasattr(kernel, "result") else kernel
        self.grid = tuple(grid) + (1,) * (3 - len(grid))

    def __call__(self, tensors: dict, stream) -> None:
        if self.tuned is not None:
            # (what TunedLaunch does too: the ledger reads back the config that ran last)
            self.tuned[0].best_config = self.tuned[1]
        values = list(self.values)
        for i, name in self.places:
            values[i] = tensors[name]
        k = self.kernel
        k.run(*self.grid, stream, k.function, k.packed_metadata, None, None, None, *values)


class Plan:
    """A call signature's launches (:class:`_Launch`, :class:`_GluonLaunch`), the buffers each
    call allocates, the copies it ends with and the outputs it returns (by name)."""

    def __init__(self, launches: list, buffers: list[tuple], outputs: tuple[str, ...],
                 copies: tuple = ()):
        self.launches, self.buffers, self.outputs = launches, buffers, outputs
        self.copies = copies

    def replay(self, tensors: dict, device: torch.device) -> tuple:
        """Allocate the buffers (through ``alloc``: NaN-poisoned under the tests), add them to
        ``tensors`` (the call's inputs by name), relaunch, then copy (:func:`copy_into`);
        returns the outputs. (Shapes are kept as tuples of ints, which ``alloc`` passes as
        separate sizes: a ``torch.Size`` takes torch ~1 us longer to parse per allocation on
        the development CPU.)"""
        tensors = dict(tensors)
        for name, shape, dtype in self.buffers:
            tensors[name] = alloc(shape, dtype, device)
        stream = driver.active.get_current_stream(driver.active.get_current_device())
        for launch in self.launches:
            launch(tensors, stream)
        for dst, src in self.copies:
            copy_into(tensors[dst], tensors[src])
        return tuple(tensors[name] for name in self.outputs)


def copy_into(dst: torch.Tensor, src: torch.Tensor) -> None:
    """A call's closing copy: ``src``'s elements in ``dst``'s shape and dtype (a one-pass dQ's
    float32 sum; GQA's dK/dV added per query head into float32, :func:`.bwd_hopper.adds_dkdv`)."""
    # (view_as: a torch.Size argument costs ~4 us more to parse on the development CPU)
    dst.copy_(src.view_as(dst))


class Recorder:
    """Collects a call's launches as they happen (``add`` after each), then makes the plan."""

    def __init__(self):
        self.raw: list[tuple] = []

    def add(self, launcher, grid, args: tuple, kwargs: dict) -> None:
        """``launcher``: a ``TunedLaunch`` (its chosen config is recorded) or a JIT function;
        ``grid``: a tuple, or a function of the launch's meta-parameters."""
        tuned = None
        if isinstance(launcher, TunedLaunch):
            fn, tuned = launcher.tuner.fn, (launcher.tuner, launcher.tuner.best_config)
            kwargs = {**kwargs, **tuned[1].all_kwargs()}
        else:
            fn = launcher
        self.raw.append((_Launch, fn, grid(kwargs) if callable(grid) else grid, args, kwargs,
                         tuned))

    def add_gluon(self, kernel, grid: tuple, descriptors: list, tiles: tuple, args: tuple,
                  meta: dict, role: str, label: str) -> None:
        """A Gluon launch (:func:`gluon_launch`)."""
        self.raw.append((_GluonLaunch, kernel, grid, descriptors, tiles, args, meta, role,
                         label))

    def plan(self, tensors: dict, buffers: tuple[str, ...], outputs: tuple[str, ...],
             scalars: dict | None = None, copies: tuple[tuple[str, str], ...] = ()):
        """The plan, or None when a launch passed a tensor missing from ``tensors`` (the call's
        inputs and ``buffers``, by name; stand-ins may appear under several names).
        ``scalars``: kernel parameter -> name of the call's value that replays pass there;
        ``copies``: (dst, src) names, copied after the launches as the call did
        (:func:`copy_into`)."""
        # (a buffer's name wins over an input that is a stand-in for it: buffers are what a
        # replay allocates)
        names = {id(t): name for name, t in tensors.items()
                 if t is not None and name not in buffers}
        names.update((id(tensors[name]), name) for name in buffers)
        try:
            launches = [raw[0](*raw[1:], names, scalars or {}) for raw in self.raw]
        except LookupError:
            return None
        finally:
            self.raw.clear()
        return Plan(launches, [(n, tuple(tensors[n].shape), tensors[n].dtype) for n in buffers],
                    outputs, copies)


def launch(record: Recorder | None, launcher, grid, args: tuple, kwargs: dict) -> None:
    """``launcher[grid](*args, **kwargs)``, then kept by ``record`` when the call is recorded."""
    launcher[grid](*args, **kwargs)
    if record is not None:
        record.add(launcher, grid, args, kwargs)


class Plans:
    """One launching function's plans by key (cleared when full: signatures are few)."""

    registry: list["Plans"] = []

    def __init__(self):
        self.plans: dict = {}
        Plans.registry.append(self)

    def get(self, key):
        return self.plans.get(key)

    def put(self, key, plan: Plan | None) -> None:
        if plan is None:
            return
        if len(self.plans) >= MAX_PLANS:
            self.plans.clear()
        self.plans[key] = plan

    def __len__(self) -> int:
        return len(self.plans)


class Tma:
    """What Triton's launcher reads of a host TMA descriptor: ``base`` (for its address),
    ``shape``, ``strides`` and ``padding``. A replayed Gluon launch passes these in place of
    ``TensorDescriptor`` objects, whose construction and checks cost ~5 us each on the
    development CPU (a backward makes six)."""

    __slots__ = ("base", "shape", "strides", "padding")

    def __init__(self, base: torch.Tensor, shape: list, strides: list, padding: str):
        self.base, self.shape, self.strides, self.padding = base, shape, strides, padding


# The label of each Gluon kernel's last launch by role ("fwd", "dkdv", "dq"), planned or
# replayed: the bench reports which kernels and configs ran.
gluon_configs: dict[str, str] = {}


def gluon_launch(record: Recorder | None, kernel, grid: tuple, tiles: tuple, args: tuple,
                 meta: dict, make_descriptor, role: str, label: str) -> None:
    """``kernel[grid](*descriptors, *args, **meta)`` for a Gluon kernel, whose leading
    parameters are TMA descriptors ``make_descriptor(t, rows)`` of each ``(t, rows)`` in
    ``tiles``; then kept by ``record`` when the call is recorded (:class:`_GluonLaunch`)."""
    descriptors = [make_descriptor(t, rows) for t, rows in tiles]
    kernel[grid](*descriptors, *args, **meta)
    gluon_configs[role] = label
    if record is not None and hasattr(kernel, "device_caches"):   # (not a capture stand-in)
        record.add_gluon(kernel, grid, descriptors, tiles, args, meta, role, label)


class _GluonLaunch:
    """One recorded Gluon launch. Its TMA descriptors hold the call's addresses, so a replay
    passes light ones (:class:`Tma`) of the recorded shapes, strides and padding over the
    call's own tensors (by name, as :class:`_Launch` does), skipping the descriptors'
    construction and Triton's binding (~30 us per launch on the development CPU)."""

    def __init__(self, kernel, grid: tuple, descriptors: list, tiles: tuple, args: tuple,
                 meta: dict, role: str, label: str, names: dict, scalars: dict):
        binder = kernel.device_caches[driver.active.get_current_device()][4]
        bound, _, _ = binder(*descriptors, *args, **meta)
        self.values = list(bound.values())
        self.role, self.label = role, label
        self.tmas = []                                # (tensor name, shape, strides, padding)
        for i, ((t, _), d) in enumerate(zip(tiles, descriptors)):
            if id(t) not in names:
                raise LookupError("a TMA descriptor over a tensor the call did not name")
            self.tmas.append((i, names[id(t)], d.shape, d.strides, d.padding))
            self.values[i] = None                     # (keep no tensor alive)
        self.places = []
        for i, a in enumerate(args, start=len(tiles)):
            if isinstance(a, torch.Tensor):
                if id(a) not in names:
                    raise LookupError("a tensor the call did not name")
                self.places.append((i, names[id(a)]))
                self.values[i] = None
        compiled = kernel.run(*descriptors, *args, grid=grid, warmup=True, **meta)
        self.kernel = compiled.result() if hasattr(compiled, "result") else compiled
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.direct = _direct_launch(self.kernel.run)
        self.expanded: dict = {}                      # (position, address) -> launcher args
        self.flat = None                              # (the C launcher's arguments: _layout)

    def __call__(self, tensors: dict, stream) -> None:
        gluon_configs[self.role] = self.label
        k = self.kernel
        if self.direct is None or not direct_launches:
            values = list(self.values)
            for i, name in self.places:
                values[i] = tensors[name]
            for i, name, shape, strides, padding in self.tmas:
                values[i] = Tma(tensors[name], shape, strides, padding)  # (folded view)
            k.run(*self.grid, stream, k.function, k.packed_metadata, None, None, None, *values)
            return
        if self.flat is None:
            self._layout(tensors)
        flat = self.flat.copy()
        flat[3] = stream
        for at, name in self.flat_places:
            flat[at] = tensors[name]
        for at, end, tma in self.flat_tmas:
            flat[at:end] = self._encoded(tensors, *tma)
        self.direct[0](*flat)

    def _encoded(self, tensors: dict, i: int, name: str, shape, strides, padding) -> list:
        """The launcher's arguments for the TMA descriptor at parameter ``i`` over the call's
        tensor ``name`` (:func:`_direct_launch`), encoded once per address."""
        base = tensors[name]
        key = (i, base.data_ptr())
        args = self.expanded.get(key)
        if args is None:                              # (a Tma is made only to encode one)
            if len(self.expanded) >= 64:              # (addresses seen: few in a loop)
                self.expanded.clear()
            args = self.expanded[key] = make_tensordesc_arg(
                Tma(base, shape, strides, padding), self.direct[3][i])
        return args

    def _layout(self, tensors: dict) -> None:
        """The C launcher's flat argument list (grid, stream, function, flags, metadata, then
        every kernel argument, a TMA descriptor's encoding expanded in place) with this
        launch's fixed values filled in, and where a call's own go: ``flat_places``
        (position, tensor name) and ``flat_tmas`` (the slice of a descriptor's encoding, whose
        length its rank fixes, and the descriptor: a row of ``tmas``). Built at the first
        direct call (``tensors``: its own): a replay then copies it and sets those few
        positions instead of walking every argument (~40 for the dK/dV kernel)."""
        _, coop, pdl, metas = self.direct
        k = self.kernel
        flat = [*self.grid, None, k.function, coop, pdl, None, None, k.packed_metadata, None,
                None, None]
        places = dict(self.places)
        tmas = {tma[0]: tma for tma in self.tmas}
        self.flat_places, self.flat_tmas = [], []
        for i, value in enumerate(self.values):
            if i in tmas:
                n = len(self._encoded(tensors, *tmas[i]))
                self.flat_tmas.append((len(flat), len(flat) + n, tmas[i]))
                flat.extend([None] * n)
            elif i in metas:
                flat.extend(value)
            else:
                if i in places:
                    self.flat_places.append((len(flat), places[i]))
                flat.append(value)                    # (None where the call's tensor goes)
        self.flat = flat


# Whether replayed Gluon launches may call Triton's C launcher themselves (_direct_launch);
# False takes Triton's own path (scripts/host_pieces.py times both in one process).
direct_launches = True


def _direct_launch(launcher):
    """How to call Triton's compiled launcher ``launcher`` (a kernel's ``run``) without its
    per-launch TMA descriptor expansion, or None to keep its own path. Triton 3.6 wraps the C
    launcher of a kernel with descriptor parameters in a function that encodes every
    descriptor anew on each launch (``make_tensordesc_arg``: one ``cuTensorMapEncodeTiled``
    each, ~5 us on the H200's host; a planned forward+backward has 11). A replay's descriptors
    differ only by their tensor's address (shape, strides and padding are the plan's), so
    :class:`_GluonLaunch` keeps each encoded one by address: in a loop the caching allocator
    hands back the same blocks. Returns ``(C launcher, cooperative, pdl, {parameter position:
    descriptor metadata})``; None when the launcher is not built that way (another Triton, a
    stand-in on the CPU) or needs scratch memory allocated per launch."""
    wrapper = getattr(launcher, "launch", None)
    closure = getattr(wrapper, "__closure__", None)
    if closure is None or make_tensordesc_arg is None:
        return None
    names = dict(zip(wrapper.__code__.co_freevars, (c.cell_contents for c in closure)))
    if not {"launcher", "tensordesc_indices", "tensordesc_meta"} <= names.keys():
        return None
    flags = [getattr(launcher, name, None) for name in ("launch_cooperative_grid", "launch_pdl")]
    if (getattr(launcher, "global_scratch_size", 1) or getattr(launcher, "profile_scratch_size", 1)
            or None in flags or None in names["tensordesc_meta"]):
        return None
    metas = dict(zip(sorted(names["tensordesc_indices"]), names["tensordesc_meta"]))
    return (names["launcher"], *flags, metas)


def clear() -> None:
    """Forget every plan (after configs were changed by hand, e.g. a tuning sweep)."""
    for plans in Plans.registry:
        plans.plans.clear()
