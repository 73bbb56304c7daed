"""What a small attention step's host time is made of, on the machine this runs on.

At short sequences a training step is bound by the host (docs/perf.md, sessions 16-17: on the
H200's host a small flashtile forward+backward took 337-793 us of host time, SDPA's 163-266).
``scripts/host_overhead.py`` times the whole step and profiles its Python; this tool times the
pieces a step is built from, each alone, in the same process, so that their costs on one host
can be compared: an allocation, a one-kernel torch op, a Triton launch, the autograd engine
with a C++ node and with a Python ``autograd.Function`` (whose backward runs on the engine's
device thread and must take the GIL there), and the flashtile and SDPA steps themselves.

    python3 scripts/host_pieces.py [--calls N] [--rounds R] [--json PATH] [--trace PATH]
    python3 scripts/host_pieces.py --profile-backward CALLS

On a GPU machine everything runs on the GPU; elsewhere on the CPU (there CPU tensors' backward
runs on the calling thread and the kernels compute, so only the Python pieces mean much).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl


@triton.jit
def _touch(x_ptr):
    """The smallest launch: one program storing one element."""
    tl.store(x_ptr, tl.load(x_ptr))


class _Identity(torch.autograd.Function):
    """A Python autograd node that does nothing: what the engine costs around one."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g


class _LikeFlashtile(torch.autograd.Function):
    """A Python node shaped like flashtile's (``autograd.FlashAttnFunction``) that launches no
    kernel: q, k, v in; out and a non-differentiable LSE out (or out alone); five tensors
    saved; dq, dk, dv back. ``materialize``: whether the engine fills the LSE's missing
    gradient with zeros before the backward (its default)."""

    @staticmethod
    def forward(ctx, q, k, v, out, lse, with_lse: bool, materialize: bool):
        ctx.set_materialize_grads(materialize)
        ctx.save_for_backward(q, k, v, out, lse)
        if not with_lse:
            return out.view_as(out)
        ctx.mark_non_differentiable(lse)
        return out.view_as(out), lse.view_as(lse)

    @staticmethod
    def backward(ctx, dout, *_):
        ctx.saved_tensors                       # (unpacked, as flashtile's backward does)
        return dout, dout, dout, None, None, None, None


class _BackwardOnly(torch.autograd.Function):
    """flashtile's backward kernels inside a Python node whose forward launches nothing (out
    and LSE computed beforehand): the engine's cost around a real backward. ``seconds``: the
    time of each call of the backward itself (on the engine's device thread)."""

    seconds: list[float] = []
    profiler: cProfile.Profile | None = None     # (set: the backward runs under it)

    @staticmethod
    def forward(ctx, q, k, v, out, lse, impl, params):
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.impl, ctx.params = impl, params
        ctx.mark_non_differentiable(lse)
        return out.view_as(out), lse.view_as(lse)

    @staticmethod
    def backward(ctx, dout, _):
        q, k, v, out, lse = ctx.saved_tensors
        start = time.perf_counter()
        grads = _under(_BackwardOnly.profiler, ctx.impl.backward, dout, q, k, v, out, lse,
                       ctx.params)
        _BackwardOnly.seconds.append(time.perf_counter() - start)
        return (*grads, None, None, None, None)


def _under(profiler: cProfile.Profile | None, fn, *args):
    """``fn(*args)``, under ``profiler`` when there is one."""
    return fn(*args) if profiler is None else profiler.runcall(fn, *args)


def profile_backward(calls: int, top: int = 20) -> str:
    """Where flashtile's backward spends its host time on the autograd engine's device thread
    (inside :class:`_BackwardOnly`) against the same calls on the main thread (on the H200's
    host the engine's took 161 us per call against 107, session 18): each function's
    cumulative time per call (cProfile, which slows both sides alike), the ``top`` functions
    of the engine's side."""
    q, k, v, dout, params, impl, out, lse = _step("cuda" if torch.cuda.is_available() else "cpu")
    engine, main = cProfile.Profile(), cProfile.Profile()
    for on_engine, on_main in ((None, None), (engine, main)):      # (a warm-up, then profiled)
        _BackwardOnly.profiler = on_engine
        for _ in range(calls):
            torch.autograd.grad(_BackwardOnly.apply(q, k, v, out, lse, impl, params)[0],
                                (q, k, v), dout)
        for _ in range(calls):
            _under(on_main, impl.backward, dout, q.detach(), k.detach(), v.detach(), out, lse,
                   params)
    _BackwardOnly.profiler = None

    def per_call(profile):
        stats = pstats.Stats(profile).stats        # {func: (cc, nc, tottime, cumtime, callers)}
        return {f"{Path(f).name}:{line}({name})": (ct / calls * 1e6, tt / calls * 1e6)
                for (f, line, name), (_, _, tt, ct, _) in stats.items()}
    e, m = per_call(engine), per_call(main)
    rows = sorted(e, key=lambda f: -e[f][0])[:top]
    width = max(map(len, rows))
    lines = [f"flashtile's backward under cProfile, us per call of {calls} (cumulative / own): "
             f"{'engine thread':>20} {'main thread':>20}"]
    for f in rows:
        em, mm = e[f], m.get(f, (0.0, 0.0))
        lines.append(f"  {f:<{width}} {em[0]:9.1f} / {em[1]:7.1f} {mm[0]:9.1f} / {mm[1]:7.1f}")
    return "\n".join(lines)


def _two_parts(impl, params, q, k, v, dout):
    """A forward+backward step built from the pieces above: the forward kernels without
    autograd, then ``autograd.grad`` over :class:`_BackwardOnly`. Against "flashtile fwd+bwd"
    (one ``FlashAttnFunction`` node, which saves its own outputs): what the sum of the parts
    leaves out."""
    with torch.no_grad():
        out, lse = impl.forward(q, k, v, params)
    return torch.autograd.grad(_BackwardOnly.apply(q, k, v, out, lse, impl, params)[0],
                               (q, k, v), dout)


def _triton_encoding(step):
    """``step()`` with replayed Gluon launches taking Triton's own launch path, which encodes
    every TMA descriptor anew (``plans.direct_launches``); the piece before it keeps each
    encoded one by address."""
    from flashtile.kernels import plans
    plans.direct_launches = False
    try:
        return step()
    finally:
        plans.direct_launches = True


@torch.library.custom_op("flashtile_pieces::identity", mutates_args=())
def _op_identity(x: torch.Tensor) -> torch.Tensor:
    """A ``torch.library`` custom op with its backward registered in Python: the dispatcher's
    path around a Python backward, against a plain ``autograd.Function``. Its forward copies
    (a custom op may not return its input), one torch kernel like ``x * 2``'s."""
    return x.clone()


def _op_identity_backward(ctx, g):
    return g


torch.library.register_autograd("flashtile_pieces::identity", _op_identity_backward)


def print_medians(times: dict[str, list[float]]) -> None:
    """One line per piece: its median µs over the rounds, then every round's."""
    width = max(map(len, times))
    for name, runs in times.items():
        runs_text = " ".join(f"{t:.1f}" for t in runs)
        print(f"  {name:<{width}}  {sorted(runs)[len(runs) // 2]:8.1f} us   ({runs_text})")


def per_call_us(fn, calls: int, cuda: bool) -> float:
    """Host time per call of ``fn`` (after a warm-up): the loop's wall time, ended before the
    device finishes (tiny kernels: the device runs behind the host)."""
    for _ in range(20):
        fn()
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    if cuda:
        torch.cuda.synchronize()
    return elapsed / calls * 1e6


def _step(dev: str):
    """The step's inputs, (1, 128, 16, 128) bf16 on a GPU (fp32 on the CPU), causal: q, k, v
    (requiring grad), dout, flashtile's params and backend module (the Triton kernels on a
    GPU), and the forward's out and LSE."""
    from flashtile.autograd import _impl
    from flashtile.interface import _flash_params
    shape = (1, 128, 16, 128)
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    q, k, v = (torch.randn(shape, dtype=dtype, device=dev, requires_grad=True)
               for _ in range(3))
    dout = torch.randn(shape, dtype=dtype, device=dev)
    params, backend = _flash_params(q, k, v, 0.0, None, True, (-1, -1), 0.0, None, False)
    impl = _impl(backend, params)
    with torch.no_grad():
        out, lse = impl.forward(q, k, v, params)
    return q, k, v, dout, params, impl, out, lse


def pieces(dev: str) -> dict:
    """name -> a call of that piece (the step of :func:`_step`)."""
    import flashtile
    cuda = dev == "cuda"
    q, k, v, dout, params, impl, out, lse = _step(dev)
    x = torch.randn(4096, device=dev, requires_grad=True)
    g = torch.randn(4096, device=dev)

    def sdpa(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
            is_causal=True).transpose(1, 2)

    calls = {
        "torch.empty (one buffer)": lambda: torch.empty(dout.shape, dtype=dout.dtype, device=dev),
        "x * 2 (one torch kernel)": lambda: x.detach() * 2,
        "autograd.grad over x * 2 (C++ node)": lambda: torch.autograd.grad(x * 2, x, g),
        "autograd.grad over a Python Function": lambda: torch.autograd.grad(
            _Identity.apply(x), x, g),
        "autograd.grad over a torch.library custom op (Python backward)": lambda:
            torch.autograd.grad(_op_identity(x), x, g),
        "autograd.grad, a node like flashtile's": lambda: torch.autograd.grad(
            _LikeFlashtile.apply(q, k, v, out, lse, True, True)[0], (q, k, v), dout),
        "  ... without materialising LSE's gradient": lambda: torch.autograd.grad(
            _LikeFlashtile.apply(q, k, v, out, lse, True, False)[0], (q, k, v), dout),
        "  ... without LSE as an output": lambda: torch.autograd.grad(
            _LikeFlashtile.apply(q, k, v, out, lse, False, True), (q, k, v), dout),
        "autograd.grad over flashtile's backward alone": lambda: torch.autograd.grad(
            _BackwardOnly.apply(q, k, v, out, lse, impl, params)[0], (q, k, v), dout),
        "  ... after a forward without grad (the step in two parts)": lambda: _two_parts(
            impl, params, q, k, v, dout),
        "flashtile fwd, no grad": lambda: flashtile.flash_attn_func(
            q.detach(), k.detach(), v.detach(), causal=True),
        "flashtile fwd": lambda: flashtile.flash_attn_func(q, k, v, causal=True),
        "flashtile fwd+bwd": lambda: torch.autograd.grad(
            flashtile.flash_attn_func(q, k, v, causal=True), (q, k, v), dout),
        "  ... Triton encoding every TMA descriptor per launch": lambda: _triton_encoding(
            lambda: torch.autograd.grad(flashtile.flash_attn_func(q, k, v, causal=True),
                                        (q, k, v), dout)),
        "flashtile backward alone (no autograd engine)": lambda: impl.backward(
            dout, q.detach(), k.detach(), v.detach(), out, lse, params),
        "sdpa fwd": lambda: sdpa(q, k, v),
        "sdpa fwd+bwd": lambda: torch.autograd.grad(sdpa(q, k, v), (q, k, v), dout),
    }
    if cuda:
        buf = torch.zeros(1, device=dev)
        calls["Triton launch (one pointer)"] = lambda: _touch[(1,)](buf)
    return calls


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3,
                   help="each piece is timed this often, in turn with the others; the "
                        "median is reported (the host's speed drifts)")
    p.add_argument("--json", help="also write {piece: [us per round]} here")
    p.add_argument("--trace", help="also write a torch-profiler trace (Chrome JSON, CPU and "
                                   "GPU, every thread) of 20 flashtile forward+backward steps")
    p.add_argument("--profile-backward", type=int, metavar="CALLS", default=0,
                   help="instead: profile flashtile's backward on the engine's thread and "
                        "on the main thread, CALLS calls each")
    args = p.parse_args()
    if args.profile_backward:
        print(profile_backward(args.profile_backward))
        return 0
    cuda = torch.cuda.is_available()
    calls = pieces("cuda" if cuda else "cpu")
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.rounds):
        for name, fn in calls.items():
            times[name].append(per_call_us(fn, args.calls, cuda))
    print(f"host time per call, median of {args.rounds} rounds of {args.calls} calls "
          f"({torch.cuda.get_device_name() if cuda else 'CPU'}, torch {torch.__version__}, "
          f"triton {triton.__version__}, python {sys.version.split()[0]}):")
    print_medians(times)
    inside = sorted(_BackwardOnly.seconds)
    print(f"  (inside the engine, flashtile's backward itself took "
          f"{inside[len(inside) // 2] * 1e6:.1f} us per call, median of {len(inside)})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(times, f, indent=1)
    if args.trace:
        from torch.profiler import ProfilerActivity, profile
        step = calls["flashtile fwd+bwd"]
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=activities) as prof:
            for _ in range(20):
                step()
            if cuda:
                torch.cuda.synchronize()
        prof.export_chrome_trace(args.trace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
