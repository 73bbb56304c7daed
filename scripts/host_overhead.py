"""Host (Python) time per flashtile call, measured on a machine without a GPU.

At small sizes a GPU step can be bound by the host: the time to validate, build kernel
arguments and launch. This tool runs the real public API with small CPU tensors while a
stand-in driver reports a Hopper target, kernels compile for sm_90a (never run: their launch is
a no-op) and the autotuners skip timing. What remains is exactly the host path of a GPU call
(validation, autograd, autotuner lookup, Triton's argument binding, torch allocations), timed
over many calls, with a cProfile breakdown of the top functions.

    python3 scripts/host_overhead.py [--what fwdbwd|fwd|decode|flex|varlen] [--cache N] [--tma]
        [--headdim D] [--seqlen N]
        [--profile] [--gpu] [--gluon] [--check-plans [decode|dense|gluon]]
    python3 scripts/host_overhead.py --pieces [--calls N] [--rounds R] [--heads H]

``flex``: ``flex_attention`` forward+backward with a 50% random block mask; ``varlen``:
``flash_attn_varlen_func`` forward+backward over 4 packed sequences (512 tokens).
``--gluon``: the CPU stands in for an sm_90 GPU in the Gluon kernels' checks too, so fwd and
fwdbwd take the Gluon kernels where a Hopper call would (their launches no-ops as well).
``--pieces`` (implies ``--gluon``): the pieces of a planned forward+backward's host path, each
timed alone in turn with the others (:func:`pieces`), medians of ``--rounds``.
"""

from __future__ import annotations

import argparse
import cProfile
import inspect
import os
import pstats
import sys
import time

os.environ.pop("TRITON_INTERPRET", None)
os.environ.setdefault("FLASHTILE_AUTOTUNE", "0")

import torch                                                   # noqa: E402
import triton                                                  # noqa: E402
from triton.compiler import compiler as triton_compiler        # noqa: E402
from triton.runtime import autotuner, driver                   # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from inspect_kernels import HopperStandIn                      # noqa: E402


def _no_launch(self):
    """Loaded-kernel stand-in: the launch itself becomes a no-op."""
    self.module, self.function = object(), None
    self.n_regs = self.n_spills = 0
    self.n_max_threads = 1024
    self._run = lambda *args, **kwargs: None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--what", default="fwdbwd",
                   choices=("fwd", "fwdbwd", "decode", "flex", "varlen"))
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--cache", type=int, default=256,
                   help="decode: cache length (32768: the split path with its combine launch)")
    p.add_argument("--tma", action="store_true",
                   help="decode: take the TMA-descriptor path (CPU tensors never would)")
    p.add_argument("--gpu", action="store_true",
                   help="on a GPU machine: real launches; a host-bound call's wall time is its "
                        "host time (the GPU runs behind)")
    p.add_argument("--gluon", action="store_true",
                   help="without --gpu: the Gluon kernels' sm_90 check passes for CPU tensors, "
                        "so their host path is timed")
    p.add_argument("--check-plans", nargs="?", const="all",
                   choices=("all", "decode", "dense", "gluon"),
                   help="launches replayed from a plan (decode, flash_attn_func, varlen, flex, "
                        "the Gluon kernels) equal the ones the full path makes, over a set of "
                        "call variants; one part, or all")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--pieces", action="store_true",
                   help="time the pieces of a planned forward+backward (Gluon on sm_90 stood "
                        "in for), each alone, in --rounds rounds")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--headdim", type=int, default=128,
                   help="fwd/fwdbwd: head dim of the (1, seqlen, 16, d) bf16 causal step")
    p.add_argument("--seqlen", type=int, default=128,
                   help="fwd/fwdbwd: its sequence length (the launch configs, and so the "
                        "path, follow the length: e.g. d=64 causal up to 1k takes two passes)")
    p.add_argument("--heads", type=int, default=16,
                   help="--pieces: query/KV heads of the (1, 128, H, 128) bf16 causal step "
                        "(the host path does not depend on it; the one pass's final copy "
                        "computes on the CPU, so fewer heads keep it from dominating)")
    args = p.parse_args()
    if args.pieces:
        args.gluon = True

    dev = "cuda" if args.gpu else "cpu"
    if not args.gpu:
        driver.set_active(HopperStandIn())
        triton_compiler.CompiledKernel._init_handles = _no_launch
        autotuner.Autotuner._bench = lambda self, *a, config, **k: [1.0, 1.0, 1.0]
    import flashtile
    from flashtile import flex, interface, kvcache
    interface.resolve = kvcache.resolve = flex.resolve = lambda device: "triton"   # GPU path
    if args.gluon and not args.gpu:
        from flashtile.kernels import common, fwd_hopper
        common.is_sm90 = fwd_hopper.is_sm90 = lambda device: True

    if args.pieces:
        return pieces(args.calls, args.rounds, args.heads)
    if args.check_plans:
        return check_plans("decode dense gluon" if args.check_plans == "all"
                           else args.check_plans)
    if args.what == "decode":
        from flashtile.kernels import decode
        from flashtile.kvcache import flash_attn_with_kvcache
        if args.tma:
            decode.use_tma = lambda *tensors: True
        b, hq, hkv, d, cache = 1, 32, 8, 128, args.cache
        q = torch.randn(b, 1, hq, d, dtype=torch.bfloat16, device=dev)
        kc = torch.randn(b, cache, hkv, d, dtype=torch.bfloat16, device=dev)
        vc = torch.randn_like(kc)
        lens = torch.full((b,), cache - 8, dtype=torch.int32, device=dev)

        def step():
            flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, causal=True)
    elif args.what == "flex":
        from flashtile import masks
        q, k, v = (torch.randn(1, 16, 512, 128, dtype=torch.bfloat16, device=dev,
                               requires_grad=True) for _ in range(3))
        dout = torch.randn(1, 16, 512, 128, dtype=torch.bfloat16, device=dev)
        layout = masks.random_block_layout(4, 4, 0.5)[0, 0].to(dev)     # (mask_mod indexes it)
        bm = flashtile.create_block_mask(masks.layout_mask(layout, 128), None, None, 512, 512,
                                         device=dev)

        def step():
            # autograd.grad, not .backward: no gradient accumulation on the host
            torch.autograd.grad(flashtile.flex_attention(q, k, v, block_mask=bm), (q, k, v), dout)
    elif args.what == "varlen":
        q, k, v = (torch.randn(512, 16, 128, dtype=torch.bfloat16, device=dev,
                               requires_grad=True) for _ in range(3))
        dout = torch.randn(512, 16, 128, dtype=torch.bfloat16, device=dev)
        cu = torch.tensor([0, 100, 228, 400, 512], dtype=torch.int32, device=dev)

        def step():
            out = flashtile.flash_attn_varlen_func(q, k, v, cu, cu, 172, 172, causal=True)
            torch.autograd.grad(out, (q, k, v), dout)
    else:
        shape = (1, args.seqlen, 16, args.headdim)
        q, k, v = (torch.randn(shape, dtype=torch.bfloat16, device=dev, requires_grad=True)
                   for _ in range(3))
        dout = torch.randn(shape, dtype=torch.bfloat16, device=dev)

        def step():
            out = flashtile.flash_attn_func(q, k, v, causal=True)
            if args.what == "fwdbwd":
                # autograd.grad, not .backward: accumulating .grad on the host (bf16 CPU adds)
                # is not part of a GPU call's host time and swamped it (4.8 ms on the H200 host)
                torch.autograd.grad(out, (q, k, v), dout)

    for _ in range(3):                                          # compile, tune, warm caches
        step()
    if args.gpu:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.calls):
        step()
    per_call = (time.perf_counter() - start) / args.calls
    if args.gpu:
        torch.cuda.synchronize()
        gpu_call = (time.perf_counter() - start) / args.calls
        print(f"(GPU: {gpu_call * 1e6:.0f} us per call until the device finished)")
    print(f"{args.what}: {per_call * 1e6:.0f} us of host time per call "
          f"(triton {triton.__version__}, torch {torch.__version__})")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(50):
            step()
        prof.disable()
        pstats.Stats(prof).sort_stats(os.environ.get("PROFILE_SORT", "cumulative")).print_stats(25)
    return 0


def pieces(calls: int, rounds: int, heads: int) -> int:
    """The host path of a planned forward+backward, piece by piece (the step of
    ``--what fwdbwd`` with ``heads`` heads; the Gluon kernels' sm_90 check stood in for, every
    launch a no-op). Each piece is timed over ``calls`` calls after a warm-up, all pieces in
    turn, ``rounds`` times; the median and every round are printed (us per call). On the
    H200's host Python runs 3-5x slower, and 1.4-1.7x slower again on the autograd engine's
    thread (docs/perf.md, session 18): compare pieces, not absolute times."""
    import flashtile
    from flashtile.autograd import _impl
    from flashtile.interface import _flash_params
    from flashtile.kernels import bwd, common, plans

    shape = (1, 128, heads, 128)
    q, k, v = (torch.randn(shape, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn(shape, dtype=torch.bfloat16)
    params, backend = _flash_params(q, k, v, 0.0, None, True, (-1, -1), 0.0, None, False)
    impl = _impl(backend, params)
    qd, kd, vd = q.detach(), k.detach(), v.detach()
    out, lse = impl.forward(qd, kd, vd, params)
    graph = flashtile.flash_attn_func(q, k, v, causal=True)      # (backward replayed on it)
    torch.autograd.grad(flashtile.flash_attn_func(q, k, v, causal=True), (q, k, v), dout)
    bwd_modules = ("bwd_hopper", "dq_hopper", "bwd256_hopper", "dq256_hopper")
    bwd_plan = list(bwd._PLANS.plans.values())[-1]
    inputs = {"q": qd, "k": kd, "v": vd, "dout": dout, "out": out, "lse": lse,
              "dq_acc": bwd._dummy(qd.device), **plans.params_tensors(params, qd.device)}
    calls_by_name = {
        "fwd+bwd (autograd.grad)": lambda: torch.autograd.grad(
            flashtile.flash_attn_func(q, k, v, causal=True), (q, k, v), dout),
        "fwd, with grad": lambda: flashtile.flash_attn_func(q, k, v, causal=True),
        "bwd through the engine (retain_graph)": lambda: torch.autograd.grad(
            graph, (q, k, v), dout, retain_graph=True),
        "bwd alone (kernels.backward)": lambda: impl.backward(dout, qd, kd, vd, out, lse,
                                                             params),
        "  plans.call_key": lambda: plans.call_key(qd, kd, vd, params),
        "  plans.params_tensors": lambda: plans.params_tensors(params, qd.device),
        "  gluon_settings (bwd's 4 modules)": lambda: common.gluon_settings(qd.device,
                                                                           bwd_modules),
        "  plans.enabled": plans.enabled,
        "  bwd plan.replay": lambda: bwd_plan.replay(inputs, qd.device),
        "  torch.empty (dq's shape)": lambda: torch.empty(shape, dtype=torch.bfloat16),
    }
    if "planned" in inspect.signature(impl.forward).parameters:
        # (the backward through autograd starts its plan key from its forward's)
        planned: dict = {}
        impl.forward(qd, kd, vd, params, planned)
        calls_by_name["bwd alone, key from the forward"] = lambda: impl.backward(
            dout, qd, kd, vd, out, lse, params, planned=planned)
        calls_by_name["  plans.backward_key"] = lambda: plans.backward_key(planned, qd, kd, vd,
                                                                          params)
    times: dict[str, list[float]] = {name: [] for name in calls_by_name}
    for _ in range(rounds):
        for name, fn in calls_by_name.items():
            for _ in range(min(calls, 20)):
                fn()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - start) / calls * 1e6)
    print(f"host time per call on the CPU stand-in, median of {rounds} rounds of {calls} "
          f"(step (1, 128, {heads}, 128) bf16 causal; triton {triton.__version__}, torch "
          f"{torch.__version__}):")
    from host_pieces import print_medians      # (the GPU pieces' table, same format)
    print_medians(times)
    return 0


def check_plans(parts: str = "all") -> int:
    """``parts``: decode, dense, gluon (each also a function below) or all.

    Every decode variant below is called on two sets of tensors of the same layout, with
    plans off, then on (the first call records a plan, the second replays it); the launches
    (kernel, grid, every argument: the call's own tensors by address, the buffers it allocates
    by layout) must be the same with and without plans."""
    from flashtile.kernels import decode
    from flashtile.kvcache import flash_attn_with_kvcache

    seen = []

    def record(self):
        _no_launch(self)
        # (grid, then every kernel argument; stream, function, metadata and hooks left out)
        self._run = lambda *a: seen.append((self.hash, a[:3] + a[9:]))
    triton_compiler.CompiledKernel._init_handles = record

    def inputs(b, cache, variant):
        q = torch.randn(b, 1, 32, 128, dtype=torch.bfloat16)
        if variant == "misaligned q":                        # data_ptr % 16 == 2
            q = torch.randn(q.numel() + 1, dtype=torch.bfloat16)[1:].view(q.shape)
        kc = torch.randn(b, cache, 8, 128, dtype=torch.bfloat16)
        kw = dict(cache_seqlens=torch.full((b,), cache - 8, dtype=torch.int32))
        if variant == "paged":
            kc = torch.randn(b * cache // 256, 256, 8, 128, dtype=torch.bfloat16)
            kw["block_table"] = torch.randperm(b * cache // 256).to(torch.int32).view(b, -1)
        if variant == "leftpad + window + softcap + alibi":
            kw.update(cache_leftpad=torch.full((b,), 3, dtype=torch.int32), window_size=(64, 0),
                      softcap=20.0, alibi_slopes=torch.rand(32))
        if variant == "batch_idx":
            kc = torch.randn(b + 1, cache, 8, 128, dtype=torch.bfloat16)
            kw["cache_batch_idx"] = torch.arange(b, 0, -1).to(torch.int32)
        return q, kc, torch.randn_like(kc), kw

    def launches(call):
        seen.clear()
        call()
        own = {t.data_ptr() for t in call.tensors}

        def arg(v):                     # (tensors inside tuples too: a score_mod's captures)
            if isinstance(v, tuple):
                return tuple(arg(x) for x in v)
            if hasattr(v, "base") and hasattr(v, "strides"):   # a TMA descriptor (Gluon)
                ptr = v.base.data_ptr()
                return ("tma", ptr if ptr in own else None, tuple(v.shape), tuple(v.strides),
                        v.padding)
            if isinstance(v, torch.Tensor):
                return (tuple(v.shape), v.stride(), v.dtype,
                        v.data_ptr() if v.data_ptr() in own else None)
            return v
        return [(h, [arg(v) for v in a]) for h, a in seen]

    failures = 0
    if "decode" in parts:
        for b, cache in ((1, 4096), (16, 1024)):                 # split + combine; one kernel
            for variant in ("plain", "misaligned q", "paged", "leftpad + window + softcap + alibi",
                            "batch_idx"):
                calls = []
                for _ in range(2):                   # the recording call's, the replay's
                    q, kc, vc, kw = inputs(b, cache, variant)

                    def call(q=q, kc=kc, vc=vc, kw=kw):
                        flash_attn_with_kvcache(q, kc, vc, causal=True, **kw)
                    call.tensors = [q, kc, vc, *(t for t in kw.values()
                                                 if isinstance(t, torch.Tensor))]
                    calls.append(call)
                failures += _planned_like_full(launches, calls, f"plans b{b} L{cache} {variant}",
                                               lambda: len(decode._PLANS), 2 if b == 1 else 1)
        # Calls that differ from a recorded one in a single argument must not replay its plan.
        q, kc, vc, kw = inputs(1, 4096, "plain")
        changes = {"window": dict(window_size=(64, 0)), "softcap": dict(softcap=20.0),
                   "scale": dict(softmax_scale=0.05), "alibi": dict(alibi_slopes=torch.rand(32)),
                   "not causal": dict(causal=False), "3 splits": dict(num_splits=3),
                   "leftpad": dict(cache_leftpad=torch.full((1,), 3, dtype=torch.int32)),
                   "shorter cache": dict(cache_seqlens=10)}
        for name, change in changes.items():
            def base():
                flash_attn_with_kvcache(q, kc, vc, causal=True, **kw)

            def changed():
                flash_attn_with_kvcache(q, kc, vc, **{"causal": True, **kw, **change})
            base.tensors = changed.tensors = [q, kc, vc, kw["cache_seqlens"], *(
                t for t in change.values() if isinstance(t, torch.Tensor))]
            failures += _replays_like_full(launches, base, changed,
                                           f"plans, one argument changed ({name})")
        plans = len(decode._PLANS)
        alive = _tensors_kept_alive(lambda: inputs(2, 4096, "plain"), forget=seen.clear)
        recorded = len(decode._PLANS) == plans + 1               # (a new signature)
        failures += alive > 0 or not recorded
        print(f"plans keep {alive} of the call's tensors alive "
              f"({'planned' if recorded else 'NOT PLANNED'})")
    if "dense" in parts:
        failures += check_dense_plans(launches, seen)
    if "gluon" in parts:
        failures += check_gluon_plans(launches)
    return 1 if failures else 0


def _dense_inputs(variant, b=2, s=256, hq=8, hkv=8, d=128, dtype=torch.bfloat16):
    """q, k, v, dout and flash_attn_func's keywords of a dense-plans variant (causal unless
    ``not causal``)."""
    if variant == "gqa 8/2":
        hkv = 2
    if variant == "d 96":
        d = 96
    q, k, v = (torch.randn(b, s, h, d, dtype=dtype, requires_grad=True)
               for h in (hq, hkv, hkv))
    if variant == "misaligned q":                        # data_ptr % 16 == 2
        q = torch.randn(q.numel() + 1, dtype=dtype)[1:].view(q.shape).requires_grad_()
    if variant == "transposed k":                        # (b, h, s, d) memory
        k = k.detach().transpose(1, 2).contiguous().transpose(1, 2).requires_grad_()
    kw = dict(causal=variant != "not causal")
    kw.update({"window": dict(window_size=(64, 0)), "softcap": dict(softcap=20.0),
               "alibi (h)": dict(alibi_slopes=torch.rand(hq)),
               "alibi (b, h)": dict(alibi_slopes=torch.rand(b, hq)),
               "scale": dict(softmax_scale=0.05),
               "dropout": dict(dropout_p=0.1)}.get(variant, {}))
    return q, k, v, torch.randn(b, s, hq, d, dtype=dtype), kw


def _dense_call(q, k, v, dout, kw, seed=0):
    """A flash_attn_func forward + backward; ``.tensors``: the call's own tensors."""
    import flashtile

    def call():
        torch.manual_seed(seed)                          # (dropout's key: the same draw)
        out = flashtile.flash_attn_func(q, k, v, **kw)
        torch.autograd.grad(out, (q, k, v), dout)
    call.tensors = [q, k, v, dout, *(t for t in kw.values() if isinstance(t, torch.Tensor))]
    return call


def _repacked_call(q, k, v, dout, kw):
    """:func:`_dense_call` with every tensor its forward saves for the backward packed as a
    contiguous copy (a saved-tensor hook, as activation offloading installs)."""
    import flashtile

    def call():
        torch.manual_seed(0)
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t.detach().contiguous(),
                                                      lambda t: t):
            out = flashtile.flash_attn_func(q, k, v, **kw)
        torch.autograd.grad(out, (q, k, v), dout)
    call.tensors = [q, k, v, dout]
    return call


def check_dense_plans(launches, seen) -> int:
    """The same for ``flash_attn_func`` forward + backward (4 launches: forward, D rows,
    dK/dV, dQ) over shapes and flags (dropout too: torch's seed is reset before each call, so
    the full and the planned call draw the same RNG key); calls that differ in one argument;
    one-pass dQ calls, never planned."""
    from flashtile.kernels import bwd, fwd

    inputs, make = _dense_inputs, _dense_call
    failures = 0
    variants = ("plain", "not causal", "gqa 8/2", "d 96", "misaligned q", "transposed k",
                "window", "softcap", "alibi (h)", "alibi (b, h)", "scale", "dropout")
    for variant in variants:
        failures += _planned_like_full(launches, [make(*inputs(variant)) for _ in range(2)],
                                       f"plans fwd+bwd {variant}",
                                       lambda: len(fwd._PLANS) + len(bwd._PLANS), 4, new=2)
    q, k, v, dout, kw = inputs("plain")
    changes = {"not causal": dict(causal=False), "window": dict(window_size=(64, 0)),
               "softcap": dict(softcap=20.0), "scale": dict(softmax_scale=0.05),
               "alibi": dict(alibi_slopes=torch.rand(8)), "deterministic": dict(deterministic=True)}
    pairs = {name: (make(q, k, v, dout, kw), make(q, k, v, dout, {**kw, **change}))
             for name, change in changes.items()}
    # A replay draws its own dropout key: recorded with one seed, replayed with another.
    drop = {**kw, "dropout_p": 0.1}
    pairs["dropout seed"] = make(q, k, v, dout, drop, seed=0), make(q, k, v, dout, drop, seed=1)
    pairs["seqlen"] = make(q, k, v, dout, kw), make(*inputs("plain", s=320))
    # A saved-tensor hook hands the backward other tensors than the forward's (here copies,
    # contiguous where k was not): its plan key must be theirs, not the forward's.
    tq, tk, tv, tdout, tkw = inputs("transposed k")
    pairs["saved tensors repacked contiguous"] = (make(tq, tk, tv, tdout, tkw),
                                                  _repacked_call(tq, tk, tv, tdout, tkw))
    for name, (base, changed) in pairs.items():
        failures += _replays_like_full(launches, base, changed,
                                       f"plans fwd+bwd, one argument changed ({name})")
    failures += check_flex_plans(launches)
    failures += check_varlen_plans(launches)
    # A tensor the launching code passes without naming it (here: a stand-in made on the side)
    # must keep the call unplanned: a replay would pass it stale.
    real_bias = fwd.bias_args
    fwd.bias_args = lambda *a, **kw: {**real_bias(*a, **kw), "BIAS": torch.zeros(1)}
    before = len(fwd._PLANS)
    launches(make(*inputs("plain", s=160)))                     # (a new signature)
    fwd.bias_args = real_bias
    ok = len(fwd._PLANS) == before
    failures += not ok
    print(f"plans fwd+bwd, a tensor the call did not name: {'not planned' if ok else 'PLANNED'}")
    # One pass: its plan allocates the accumulator (zeroed by the preprocess) and ends with
    # dQ's copy (a torch op, no launch): forward, preprocess, dK/dV (adding dQ), on a new
    # signature (softcap 5).
    os.environ["FLASHTILE_BWD_DQ"] = "atomic"
    one_pass = [make(*inputs("plain")[:4], {**kw, "softcap": 5.0}) for _ in range(2)]
    failures += _planned_like_full(launches, one_pass, "plans fwd+bwd, one-pass dQ",
                                   lambda: len(fwd._PLANS) + len(bwd._PLANS), 3, new=2)
    os.environ.pop("FLASHTILE_BWD_DQ")
    return failures


def check_flex_plans(launches) -> int:
    """``flex_attention`` forward + backward with block masks and compiled mods (one capturing
    a tensor): planned launches equal the full path's; calls with another mask_mod, block
    size, score_mod or captured tensor launch what the full path launches."""
    import flashtile
    from flashtile import masks
    from flashtile.kernels import bwd

    b, h, s, d = 1, 4, 256, 64
    biases = [torch.randn(h), torch.randn(h)]

    def causal(b_, h_, i, j):
        return i >= j

    def window(b_, h_, i, j):
        return i - j < 96

    def relpos(score, b_, h_, i, j):
        return score - 0.01 * (i - j)

    def captures(n):
        bias = biases[n]

        def score_mod(score, b_, h_, i, j):
            return score + bias[h_]
        return score_mod

    def block_mask(mask_mod, size):
        return masks.create_block_mask(mask_mod, None, None, s, s, device="cpu", BLOCK_SIZE=size)

    def make(mask_mod=None, score_mod=None, size=128):
        q, k, v = (torch.randn(b, h, s, d, dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        dout = torch.randn(b, h, s, d, dtype=torch.bfloat16)
        bm = block_mask(mask_mod, size) if mask_mod is not None else None

        def call():
            out = flashtile.flex_attention(q, k, v, score_mod=score_mod, block_mask=bm)
            torch.autograd.grad(out, (q, k, v), dout)
        call.tensors = [q, k, v, dout, *biases, *(() if bm is None else (getattr(bm, n) for n in (
            "kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices",
            "q_num_blocks", "q_indices", "full_q_num_blocks", "full_q_indices")))]
        return call

    failures = 0
    variants = {"causal block mask": dict(mask_mod=causal),
                "window block mask + relpos score_mod": dict(mask_mod=window, score_mod=relpos),
                "relpos score_mod": dict(score_mod=relpos),
                "score_mod capturing a tensor": dict(mask_mod=causal, score_mod=captures(0))}
    for name, kw in variants.items():
        failures += _planned_like_full(launches, [make(**kw) for _ in range(2)],
                                       f"plans flex {name}", lambda: len(bwd._PLANS), 4)
    pairs = {"mask_mod": (make(mask_mod=causal), make(mask_mod=window)),
             "block size": (make(mask_mod=causal), make(mask_mod=causal, size=64)),
             "score_mod": (make(mask_mod=causal), make(mask_mod=causal, score_mod=relpos)),
             # (the same code, another captured tensor: a replay passes the call's own)
             "captured tensor": (make(mask_mod=causal, score_mod=captures(0)),
                                 make(mask_mod=causal, score_mod=captures(1)))}
    for name, (base, changed) in pairs.items():
        failures += _replays_like_full(launches, base, changed,
                                       f"plans flex, one argument changed ({name})")
    return failures


def check_varlen_plans(launches) -> int:
    """``flash_attn_varlen_func`` forward + backward (the kernels see ``(1, total, h, d)``
    views; the outputs are views of such buffers): planned launches equal the full path's;
    other lengths in the same layouts replay with the call's own ``cu_seqlens``; another
    maximum is another signature."""
    import flashtile
    from flashtile.kernels import bwd

    h, d = 4, 64

    def make(lengths, causal=True, dropout_p=0.0, max_len=None):
        total = sum(lengths)
        q, k, v = (torch.randn(total, h, d, dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        dout = torch.randn(total, h, d, dtype=torch.bfloat16)
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
        longest = max_len or max(lengths)

        def call():
            torch.manual_seed(0)
            out = flashtile.flash_attn_varlen_func(q, k, v, cu, cu, longest, longest,
                                                   causal=causal, dropout_p=dropout_p)
            torch.autograd.grad(out, (q, k, v), dout)
        call.tensors = [q, k, v, dout, cu]
        return call

    failures = 0
    for name, kw in {"causal": {}, "not causal": dict(causal=False),
                     "dropout": dict(dropout_p=0.1)}.items():
        failures += _planned_like_full(launches, [make([100, 37, 120], **kw) for _ in range(2)],
                                       f"plans varlen {name}", lambda: len(bwd._PLANS), 4)
    pairs = {"lengths": (make([100, 37, 120]), make([120, 100, 37])),
             "max_seqlen": (make([100, 37, 120]), make([100, 37, 120], max_len=128))}
    for name, (base, changed) in pairs.items():
        failures += _replays_like_full(launches, base, changed,
                                       f"plans varlen, one argument changed ({name})")
    return failures


def _with_env(call, env: dict):
    """``call`` run with the environment variables ``env`` set (then unset)."""
    def run():
        os.environ.update(env)
        try:
            call()
        finally:
            for var in env:
                os.environ.pop(var)
    run.tensors = call.tensors
    return run


def _backward_env_call(q, k, v, dout, kw, env: dict):
    """A flash_attn_func forward + backward with the environment variables ``env`` set for
    the backward only: the backward's plan key starts from its forward's
    (``plans.backward_key``), but what it launches must follow its own settings."""
    import flashtile

    def call():
        torch.manual_seed(0)
        out = flashtile.flash_attn_func(q, k, v, **kw)
        os.environ.update(env)
        try:
            torch.autograd.grad(out, (q, k, v), dout)
        finally:
            for var in env:
                os.environ.pop(var)
    call.tensors = [q, k, v, dout]
    return call


def check_gluon_plans(launches) -> int:
    """The same for forward + backward calls that take the Gluon kernels (the CPU stands in
    for sm_90 in their checks; the Gluon dQ kernel switched on in some): their launches are
    steps of the forward's and backward's plans, replayed with light TMA descriptors
    (``plans.Tma``, compared by address, shape, strides and padding); they must equal the full
    path's, and a call that differs in one argument or switch must not replay them."""
    from flashtile.kernels import bwd, common, fwd, fwd_hopper
    real = common.is_sm90
    common.is_sm90 = fwd_hopper.is_sm90 = lambda device: True
    dq_on = {"FLASHTILE_GLUON_DQ": "1", "FLASHTILE_BWD_DQ": "two-pass"}
    late = {"FLASHTILE_BWD_DQ": "atomic", "FLASHTILE_GLUON_BWD_DQ_LATE": "1"}
    seen = set()
    try:
        failures = 0
        # (d=64 causal: the tile-level forward, the Gluon dK/dV kernel; kernels: forward,
        # preprocess, dK/dV, and dQ in two passes, which d=64 causal calls this short take by
        # default; the others add dQ in the dK/dV pass, bwd_hopper.one_pass; d=128 causal GQA
        # adds the per-query-head dK/dV's sums, bwd._sum_head_groups)
        for variant, d, (name, env), kernels in (
                ("plain", 128, ("", {}), 3), ("not causal", 128, ("", {}), 3),
                ("gqa 8/2", 128, ("", {}), 4), ("scale", 128, ("", {}), 3),
                ("plain", 64, ("", {}), 4), ("not causal", 64, ("", {}), 3),
                ("plain", 64, (" + late one pass", late), 3),
                ("scale", 64, (" + Gluon dQ", dq_on), 4),
                ("gqa 8/2", 64, (" + Gluon dQ", dq_on), 4)):
            # (a forward plan each, except where an earlier variant recorded its signature)
            new = 1 if (variant, d) in seen else 2
            seen.add((variant, d))
            failures += _planned_like_full(
                launches, [_with_env(_dense_call(*_dense_inputs(variant, d=d)), env)
                           for _ in range(2)],
                f"gluon plans fwd+bwd d{d} {variant}{name}",
                lambda: len(fwd._PLANS) + len(bwd._PLANS), kernels, new=new)
        q, k, v, dout, kw = _dense_inputs("plain")
        changes = {"not causal": (dict(causal=False), {}), "scale": (dict(softmax_scale=0.05), {}),
                   "Gluon forward switched off": ({}, {"FLASHTILE_GLUON_FWD": "0"}),
                   "Gluon dQ switched on": ({}, dq_on)}
        for name, (change, env) in changes.items():
            failures += _replays_like_full(
                launches, _dense_call(q, k, v, dout, kw),
                _with_env(_dense_call(q, k, v, dout, {**kw, **change}), env),
                f"gluon plans fwd+bwd, one argument changed ({name})")
        # (switches changed between a forward and its backward: the backward follows its own)
        for name, env in {"Gluon dQ switched on": dq_on,
                          "Gluon dK/dV switched off": {"FLASHTILE_GLUON_BWD": "0"}}.items():
            failures += _replays_like_full(
                launches, _dense_call(q, k, v, dout, kw),
                _backward_env_call(q, k, v, dout, kw, env),
                f"gluon plans fwd+bwd, changed for the backward only ({name})")
    finally:
        common.is_sm90 = fwd_hopper.is_sm90 = real
    return failures


def _planned_like_full(launches, calls, label: str, count, kernels: int, new: int = 1) -> int:
    """Two calls of one signature, without plans and then with them (the first records, the
    second replays): the same launches, ``kernels`` of them, and ``new`` plans more in
    ``count()``. 1 on a failure."""
    os.environ["FLASHTILE_LAUNCH_PLANS"] = "0"
    full = [launches(call) for call in calls]
    os.environ["FLASHTILE_LAUNCH_PLANS"] = "1"
    before = count()
    planned = [launches(call) for call in calls]
    ok = full == planned and len(full[0]) == kernels
    recorded = count() == before + new
    print(f"{label}: {'same launches' if ok else 'DIFFERENT'}, "
          f"{'planned' if recorded else 'NOT PLANNED'} ({len(full[0])} kernels)")
    return int(not (ok and recorded))


def _replays_like_full(launches, base, changed, label: str) -> int:
    """Record ``base``'s plan, then call ``changed`` (``base`` with one argument changed): its
    launches must be the full path's, not a replay of ``base``'s plan. 1 on a failure."""
    os.environ["FLASHTILE_LAUNCH_PLANS"] = "0"
    full = launches(changed)
    os.environ["FLASHTILE_LAUNCH_PLANS"] = "1"
    launches(base)
    ok = launches(changed) == full
    print(f"{label}: {'launched as without plans' if ok else 'DIFFERENT'}")
    return int(not ok)


def _tensors_kept_alive(make_inputs, forget) -> int:
    """How many of a planned call's tensors outlive the call (a plan must keep none: a cache of
    gigabytes, say). ``forget`` drops this tool's own record of the launches."""
    import gc
    import weakref

    from flashtile.kvcache import flash_attn_with_kvcache

    os.environ["FLASHTILE_LAUNCH_PLANS"] = "1"
    refs = []
    for _ in range(2):                           # the call that records, the one that replays
        q, kc, vc, kw = make_inputs()
        flash_attn_with_kvcache(q, kc, vc, **kw)
        refs += [weakref.ref(t) for t in (q, kc, vc, kw["cache_seqlens"])]
        del q, kc, vc, kw
    forget()
    gc.collect()
    return sum(r() is not None for r in refs)


if __name__ == "__main__":
    sys.exit(main())
