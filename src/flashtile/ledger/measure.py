"""Measuring what the model predicts: time, peak memory and (with Nsight Compute) HBM bytes.

- :func:`eager_attention`: the standard attention the ledger models op by op (nanoGPT's
  ``matmul -> * scale -> [masked_fill] -> softmax -> [dropout] -> matmul``).
- :func:`build_step`: one forward (+ backward) step of ``"standard"`` (eager) or ``"flashtile"``
  on fresh random inputs, in each implementation's native layout.
- :func:`measure_step`: median time (``triton.testing.do_bench``) and peak extra memory
  (``torch.cuda.max_memory_allocated`` above the inputs).
- :func:`run_ncu`: re-launches steps in a child process (``python -m flashtile.ledger._child``)
  under ``ncu --profile-from-start off``; the child warms up, then brackets each step with
  ``cudaProfilerStart/Stop`` and a marker kernel, so only the measured steps are profiled and the
  kernels can be assigned to their step. DRAM bytes (``dram__bytes_read/write.sum``) and, where
  the metrics exist, L2 sectors requested by the SMs are summed over each step's kernels.
  ``--cache-control all`` (ncu's default) flushes the caches before every kernel, so the numbers
  are per-kernel cold-cache traffic, as the model assumes.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Callable, Optional

from .model import TileConfig, Workload

DTYPE_NAMES = ("bf16", "fp16", "fp32")
MARKER_NAME = "_ledger_step_marker"
NCU_DRAM_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")
NCU_L2_METRICS = ("lts__t_sectors_srcunit_tex_op_read.sum",
                  "lts__t_sectors_srcunit_tex_op_write.sum")
SECTOR_BYTES = 32


def torch_dtype(name: str):
    import torch
    table = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    if name not in table:
        raise ValueError(f"dtype must be one of {sorted(table)}, got {name!r}")
    return table[name]


def gpu_available() -> bool:
    try:
        import torch
        return bool(torch.cuda.is_available())
    except Exception:  # pragma: no cover
        return False


# --------------------------------------------------------------------------------------------
# The standard attention we measure (and model op by op in model.standard_ops)
# --------------------------------------------------------------------------------------------

def eager_attention(q, k, v, masked_out=None, dropout_p: float = 0.0,
                    scale: Optional[float] = None):
    """Standard attention in eager PyTorch, layout ``(batch, nheads, seqlen, headdim)``.

    Args:
        q: ``(b, hq, sq, d)``; k: ``(b, hkv, sk, d)``; v: ``(b, hkv, sk, dv)``.
        masked_out: bool ``(sq, sk)``, True where a score is masked (e.g. ``~tril``), or None.
        dropout_p: dropout on the probabilities (training mode).
        scale: softmax scale, default ``1/sqrt(d)``.

    Returns ``(b, hq, sq, dv)``. Every intermediate is an ``(b, hq, sq, sk)`` tensor in HBM.
    """
    import torch
    import torch.nn.functional as F
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k = k.repeat_interleave(group, dim=1)                  # (b, hq, sk, d)
        v = v.repeat_interleave(group, dim=1)                  # (b, hq, sk, dv)
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale      # (b, hq, sq, sk)
    if masked_out is not None:
        scores = scores.masked_fill(masked_out, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if dropout_p > 0:
        probs = F.dropout(probs, p=dropout_p, training=True)
    return torch.matmul(probs, v)                              # (b, hq, sq, dv)


def causal_masked_out(seqlen_q: int, seqlen_k: int, device):
    """True where a query may not see a key, bottom-right aligned (flash-attn's causal)."""
    import torch
    keep = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    return ~keep.tril(diagonal=seqlen_k - seqlen_q)


class Step:
    """One forward (+ backward) step on pre-built inputs; call it to run it.

    ``inputs``: the tensors it runs on (its layout); ``to_common(out)`` views an output in the
    flash layout ``(b, sq, hq, dv)`` so two implementations can be compared.
    """

    def __init__(self, name: str, fn: Callable, inputs: dict, to_common: Callable):
        self.name = name
        self.fn = fn
        self.inputs = inputs
        self.to_common = to_common     # output -> (b, sq, hq, dv) for cross-checks

    def __call__(self):
        return self.fn()


def make_inputs(w: Workload, dtype_name: str, device, seed: int = 0) -> dict:
    """Q, K, V, dO in flash layout ``(b, s, h, d)``, random normal, fixed seed."""
    import torch
    dtype = torch_dtype(dtype_name)
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device, dtype=dtype)
    return {
        "q": randn(w.batch, w.seqlen_q, w.nheads, w.headdim),
        "k": randn(w.batch, w.seqlen_k, w.nheads_kv, w.headdim),
        "v": randn(w.batch, w.seqlen_k, w.nheads_kv, w.headdim_v),
        "dout": randn(w.batch, w.seqlen_q, w.nheads, w.headdim_v),
    }


def build_step(impl: str, w: Workload, dtype_name: str = "bf16", device="cuda",
               mode: str = "fwdbwd", inputs: Optional[dict] = None) -> Step:
    """One step of ``impl`` (``"standard"`` or ``"flashtile"``) on workload ``w``.

    ``mode``: ``"fwd"`` (inputs without grad) or ``"fwdbwd"`` (forward, then
    ``torch.autograd.grad`` of all three inputs, so nothing accumulates between calls).
    Each implementation gets its native layout: eager ``(b, h, s, d)`` contiguous, flashtile
    ``(b, s, h, d)``. ``inputs`` (from :func:`make_inputs`) lets two steps share data.
    """
    import torch
    if mode not in ("fwd", "fwdbwd"):
        raise ValueError(f"mode must be 'fwd' or 'fwdbwd', got {mode!r}")
    base = inputs if inputs is not None else make_inputs(w, dtype_name, device)
    grad = mode == "fwdbwd"

    if impl == "standard":
        t = {n: x.transpose(1, 2).contiguous().requires_grad_(grad and n != "dout")
             for n, x in base.items()}                                    # (b, h, s, d)
        masked_out = causal_masked_out(w.seqlen_q, w.seqlen_k, device) if w.causal else None

        def fwd():
            return eager_attention(t["q"], t["k"], t["v"], masked_out, w.dropout_p)

        def to_common(out):
            return out.transpose(1, 2)
    elif impl == "flashtile":
        import flashtile
        t = {n: x.detach().clone().requires_grad_(grad and n != "dout")
             for n, x in base.items()}                                    # (b, s, h, d)

        def fwd():
            return flashtile.flash_attn_func(t["q"], t["k"], t["v"], dropout_p=w.dropout_p,
                                             causal=w.causal)

        def to_common(out):
            return out
    else:
        raise ValueError(f"impl must be 'standard' or 'flashtile', got {impl!r}")

    if not grad:
        return Step(impl, fwd, t, to_common)

    def fwdbwd():
        out = fwd()
        return (out,) + torch.autograd.grad(out, (t["q"], t["k"], t["v"]), t["dout"])
    return Step(impl, fwdbwd, t, to_common)


def _do_bench(fn: Callable, warmup: int = 25, rep: int = 100) -> float:
    """Median ms of ``triton.testing.do_bench`` (flushes L2 between calls)."""
    from triton.testing import do_bench
    try:
        return float(do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))
    except TypeError:  # pragma: no cover - older triton
        return float(do_bench(fn, warmup=warmup, rep=rep, quantiles=[0.5])[0])


def peak_extra_memory(step: Step) -> int:
    """Bytes allocated at the peak of one call above what was allocated before it.

    Garbage is collected first: tensors of earlier work kept alive only by reference cycles
    would otherwise be freed by a collection *during* the call and lower its peak (seen once
    as 1.5 MiB under the model in a test worker that had run other tests)."""
    import gc

    import torch
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    result = step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del result
    return int(peak)


def autotuned_tiles(base: Optional[TileConfig] = None) -> Optional[TileConfig]:
    """The block sizes flashtile's kernels launched last (the autotuners' ``best_config``), as a
    :class:`TileConfig`; None if the kernels are not loaded or expose no such choice."""
    fwd = sys.modules.get("flashtile.kernels.fwd")
    bwd = sys.modules.get("flashtile.kernels.bwd")
    changes = {}
    for tuner, (m_name, n_name) in ((getattr(fwd, "_fwd", None), ("fwd_block_m", "fwd_block_n")),
                                    (getattr(bwd, "_dkdv", None), ("dkdv_block_m",
                                                                   "dkdv_block_n")),
                                    (getattr(bwd, "_dq", None), ("dq_block_m", "dq_block_n"))):
        kwargs = getattr(getattr(tuner, "best_config", None), "kwargs", None) or {}
        try:
            changes[m_name], changes[n_name] = int(kwargs["BLOCK_M"]), int(kwargs["BLOCK_N"])
        except (KeyError, TypeError, ValueError):
            continue
    if changes and bwd is not None:
        changes["backward"] = bwd.last_dq_pass
    return (base or TileConfig()).with_(**changes) if changes else None


def _tiles_dict(tiles: Optional[TileConfig]) -> Optional[dict]:
    from dataclasses import asdict
    return asdict(tiles) if tiles is not None else None


def _cpu_bench(fn: Callable, rep: int = 5) -> float:
    """Median ms of a few calls (CPU; only used to exercise the measuring code without a GPU)."""
    import time
    times = []
    for _ in range(rep):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[len(times) // 2]


def measure_workload(w: Workload, dtype_name: str = "bf16", impls=("standard", "flashtile"),
                     mode: str = "fwdbwd", warmup: int = 25, rep: int = 100,
                     device: str = "cuda") -> dict:
    """Time, peak extra memory and agreement of each implementation on one workload.

    Returns ``{impl: {"ms", "peak_extra_bytes", "max_abs_diff_vs_standard"}}``; an
    implementation that fails (not built yet, out of memory...) gets ``{"error": "..."}``
    instead. ``device="cpu"`` times with ``time.perf_counter`` and reports no memory (tests).
    """
    import torch
    cuda = device == "cuda"
    results: dict = {}
    inputs = make_inputs(w, dtype_name, device)
    reference_out = None
    for impl in impls:
        entry: dict = {}
        step = None
        try:
            step = build_step(impl, w, dtype_name, device, mode, inputs)
            first = step()                               # compile / autotune, and check
            out = step.to_common(first[0] if isinstance(first, tuple) else first)
            out = out.detach().float()
            if impl == "flashtile" and cuda:
                entry["tiles"] = _tiles_dict(autotuned_tiles())
            if impl == "standard":
                reference_out = out
            elif reference_out is not None and w.dropout_p == 0:
                entry["max_abs_diff_vs_standard"] = float((out - reference_out).abs().max())
            del first, out
            entry["peak_extra_bytes"] = peak_extra_memory(step) if cuda else None
            entry["ms"] = _do_bench(step, warmup, rep) if cuda else _cpu_bench(step)
        except Exception as exc:  # reported, not raised: the ledger still prints the model
            entry["error"] = f"{type(exc).__name__}: {exc}"[:500]
        finally:
            del step
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
        results[impl] = entry
    del inputs, reference_out
    if cuda:
        torch.cuda.empty_cache()
    return results


# --------------------------------------------------------------------------------------------
# Nsight Compute
# --------------------------------------------------------------------------------------------

def find_ncu(explicit: Optional[str] = None) -> Optional[str]:
    """Path of the ``ncu`` binary: ``explicit``, ``$FLASHTILE_NCU``, ``PATH``, then the CUDA
    toolkit / Nsight Compute install folders (newest first). None if there is none."""
    for cand in (explicit, os.environ.get("FLASHTILE_NCU")):
        if cand:
            return cand if os.path.isfile(cand) and os.access(cand, os.X_OK) else None
    found = shutil.which("ncu")
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", "")]
    patterns = [os.path.join(r, "bin", "ncu") for r in roots if r]
    patterns += ["/usr/local/cuda/bin/ncu", "/usr/local/cuda-*/bin/ncu",
                 "/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda*/nsight-compute*/ncu",
                 "/opt/nvidia/nsight-compute*/ncu", "/usr/bin/ncu"]
    hits = []
    for pattern in patterns:
        hits += [p for p in glob.glob(pattern) if os.path.isfile(p) and os.access(p, os.X_OK)]
    if not hits:
        return None

    def version_key(path):
        return [int(x) for x in re.findall(r"\d+", path)]
    return sorted(set(hits), key=version_key, reverse=True)[0]


_UNIT_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
                "Ki": 1024.0, "Mi": 1024.0 ** 2, "Gi": 1024.0 ** 3, "Ti": 1024.0 ** 4}


def _parse_value(value: str, unit: str) -> tuple[float, str]:
    """``("1,234.5", "Mbyte") -> (1.2345e9, "byte")``; units ``byte`` or ``sector``."""
    text = value.strip().replace(",", "")
    if text in ("", "n/a", "N/A"):
        return float("nan"), ""
    number = float(text)
    unit = unit.strip()
    m = re.fullmatch(r"(Ki|Mi|Gi|Ti|K|M|G|T)?(byte|sector|B)s?", unit)
    if not m:
        return number, unit
    base = "byte" if m.group(2) in ("byte", "B") else "sector"
    return number * _UNIT_PREFIX[m.group(1) or ""], base


def parse_ncu_csv(text: str) -> list[dict]:
    """Kernels from ``ncu --csv`` output (one row per kernel and metric), in launch order.

    Each kernel: ``{"id", "name", "grid", "block", "dram_read", "dram_write", "l2_read",
    "l2_write"}`` in bytes (L2 sectors are converted at 32 bytes; missing metrics are None).
    Lines that are not CSV (``==PROF==`` messages, the program's own output) are ignored.
    """
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return []
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    kernels: dict = {}
    order: list = []
    for row in reader:
        if row.get("ID") in (None, "ID"):
            continue
        kid = row["ID"]
        if kid not in kernels:
            kernels[kid] = {"id": int(kid) if kid.isdigit() else kid,
                            "name": row.get("Kernel Name", ""), "grid": row.get("Grid Size"),
                            "block": row.get("Block Size"), "dram_read": None,
                            "dram_write": None, "l2_read": None, "l2_write": None}
            order.append(kid)
        metric = row.get("Metric Name", "")
        value, unit = _parse_value(row.get("Metric Value", ""), row.get("Metric Unit", ""))
        if unit == "sector":
            value *= SECTOR_BYTES
        key = {"dram__bytes_read.sum": "dram_read", "dram__bytes_write.sum": "dram_write",
               NCU_L2_METRICS[0]: "l2_read", NCU_L2_METRICS[1]: "l2_write"}.get(metric)
        if key:
            kernels[kid][key] = value
    return [kernels[k] for k in order]


def split_by_marker(kernels: list[dict], marker: str = MARKER_NAME) -> list[list[dict]]:
    """Group kernels into steps: each marker kernel starts a new group (markers dropped)."""
    groups: list[list[dict]] = []
    for k in kernels:
        if marker in (k.get("name") or ""):
            groups.append([])
        elif groups:
            groups[-1].append(k)
    return groups


def summarize_kernels(kernels: list[dict]) -> dict:
    """Sum a step's kernels: DRAM read/write/total and L2 (from SMs) read/write/total, bytes."""
    def total(key):
        vals = [k[key] for k in kernels if k.get(key) is not None and not math.isnan(k[key])]
        return float(sum(vals)) if vals else None
    out = {key: total(key) for key in ("dram_read", "dram_write", "l2_read", "l2_write")}
    out["dram"] = (out["dram_read"] or 0.0) + (out["dram_write"] or 0.0) \
        if out["dram_read"] is not None else None
    out["l2"] = (out["l2_read"] or 0.0) + (out["l2_write"] or 0.0) \
        if out["l2_read"] is not None else None
    out["kernels"] = [{"name": (k.get("name") or "")[:120], "grid": k.get("grid"),
                       "dram_read": k.get("dram_read"), "dram_write": k.get("dram_write"),
                       "l2_read": k.get("l2_read"), "l2_write": k.get("l2_write")}
                      for k in kernels]
    return out


def _ncu_help(ncu: str) -> str:
    try:
        proc = subprocess.run([ncu, "--help"], capture_output=True, text=True, timeout=60)
        return proc.stdout + proc.stderr
    except Exception:
        return ""


def run_child(spec: dict, env: Optional[dict] = None, ncu: Optional[str] = None,
              with_l2: bool = True, timeout: int = 300) -> dict:
    """Run ``python -m flashtile.ledger._child`` on ``spec`` (optionally under ncu).

    ``spec``: ``{"mode": "ncu" | "time", "steps": [{"impl", "workload", "dtype", "step_mode"}]}``.
    Returns ``{"steps": [per-step dict], "error": str | None, "ncu_command": [...]}``; under ncu
    each step gets ``summarize_kernels`` of its kernels.
    """
    workdir = tempfile.mkdtemp(prefix="flashtile-ledger-")
    spec = dict(spec, result_path=os.path.join(workdir, "result.json"))
    spec_path = os.path.join(workdir, "spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    child_env = dict(os.environ)
    child_env.update({k: str(v) for k, v in (env or {}).items()})
    cmd = [sys.executable, "-m", "flashtile.ledger._child", spec_path]
    log = os.path.join(workdir, "ncu.csv")
    report: dict = {"steps": [], "error": None}
    if ncu:
        help_text = _ncu_help(ncu)
        metrics = list(NCU_DRAM_METRICS) + (list(NCU_L2_METRICS) if with_l2 else [])
        prefix = [ncu, "--profile-from-start", "off", "--target-processes", "all",
                  "--clock-control", "none", "--cache-control", "all",
                  "--metrics", ",".join(metrics), "--csv", "--log-file", log]
        if "--print-units" in help_text:
            prefix[-2:-2] = ["--print-units", "base"]
        cmd = prefix + cmd
        report["ncu_command"] = cmd
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=child_env)
    except subprocess.TimeoutExpired:
        report["error"] = f"child timed out after {timeout} s"
        return report
    output = proc.stdout + "\n" + proc.stderr
    text = open(log).read() if ncu and os.path.exists(log) else ""
    kernels = parse_ncu_csv(text + "\n" + proc.stdout) if ncu else []
    if ncu and not kernels and with_l2 and "metric" in (output + text).lower():
        # this ncu / GPU lacks the L2 metrics: measure DRAM bytes only
        return run_child({k: v for k, v in spec.items() if k != "result_path"}, env, ncu,
                         with_l2=False, timeout=timeout)
    child_result = None
    if os.path.exists(spec["result_path"]):
        with open(spec["result_path"]) as f:
            child_result = json.load(f)
    if child_result is None:
        report["error"] = f"child failed (exit {proc.returncode}): {(text + output)[-1500:]}"
        return report
    steps = child_result["steps"]
    if not ncu:
        report["steps"] = steps
        return report
    if not kernels:
        report["error"] = ("ncu produced no kernel rows (exit %d): %s"
                           % (proc.returncode, (text + output)[-1500:]))
        report["steps"] = steps
        return report
    groups = split_by_marker(kernels)
    profiled = [i for i, s in enumerate(steps) if s.get("profiled")]
    if len(groups) != len(profiled):
        report["error"] = (f"found {len(groups)} marker-delimited kernel groups for "
                           f"{len(profiled)} profiled steps; per-step split unreliable")
    for i, s in enumerate(steps):
        entry = dict(s)
        if i in profiled and profiled.index(i) < len(groups):
            entry.update(summarize_kernels(groups[profiled.index(i)]))
        report["steps"].append(entry)
    return report


# --------------------------------------------------------------------------------------------
# The child side (runs in the profiled / timed process)
# --------------------------------------------------------------------------------------------

def _marker():
    """A launcher for the one-program Triton kernel whose name marks the start of a step."""
    import torch

    from ._marker import launch_marker
    buf = torch.zeros(1, device="cuda", dtype=torch.int32)

    def launch():
        launch_marker(buf)
    launch()                                   # compile before anything is profiled
    torch.cuda.synchronize()
    return launch


def _kineto_kernels(fn: Callable) -> list[dict]:
    """Kernel launches of one call of ``fn`` as the torch profiler records them (grid, block,
    shared memory, registers); [] if the trace has no such fields."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(prefix="flashtile-trace-"), "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f).get("traceEvents", [])
    kernels = []
    for ev in events:
        if ev.get("cat") != "kernel":
            continue
        args = ev.get("args", {})
        kernels.append({"name": ev.get("name", "")[:120], "grid": args.get("grid"),
                        "block": args.get("block"), "shared_memory": args.get("shared memory"),
                        "registers": args.get("registers per thread"),
                        "us": ev.get("dur")})
    return kernels


def child_main(spec_path: str) -> int:
    """Entry of ``python -m flashtile.ledger._child SPEC``: run the steps, write the result."""
    import gc

    import torch
    import torch.cuda.profiler as cuda_profiler
    with open(spec_path) as f:
        spec = json.load(f)
    mode = spec.get("mode", "ncu")
    steps_out = []
    marker = _marker() if mode == "ncu" else None
    for s in spec["steps"]:
        w = Workload(**s["workload"])
        entry = {"impl": s["impl"], "label": w.label, "profiled": False,
                 "step_mode": s.get("step_mode", "fwdbwd")}
        step = None
        try:
            step = build_step(s["impl"], w, s.get("dtype", "bf16"), "cuda", entry["step_mode"])
            for _ in range(3):                         # compile, autotune, settle the allocator
                step()
            torch.cuda.synchronize()
            if s["impl"] == "flashtile":
                entry["tiles"] = _tiles_dict(autotuned_tiles())
            if mode == "ncu":
                cuda_profiler.start()
                entry["profiled"] = True
                marker()
                step()
                torch.cuda.synchronize()
                cuda_profiler.stop()
            else:
                try:
                    entry["kernels"] = _kineto_kernels(step)
                except Exception as exc:
                    entry["kernels"] = []
                    entry["kernels_error"] = f"{type(exc).__name__}: {exc}"[:300]
                entry["ms"] = _do_bench(step)
        except Exception as exc:
            if mode == "ncu" and entry["profiled"]:
                try:
                    cuda_profiler.stop()
                except Exception:
                    pass
            entry["error"] = f"{type(exc).__name__}: {exc}"[:500]
        finally:
            del step
            gc.collect()
            torch.cuda.empty_cache()
        steps_out.append(entry)
    with open(spec["result_path"], "w") as f:
        json.dump({"steps": steps_out}, f)
    return 0


def step_spec(impl: str, w: Workload, dtype_name: str, step_mode: str = "fwdbwd") -> dict:
    """One entry of a child spec."""
    return {"impl": impl, "workload": w.to_dict(), "dtype": dtype_name, "step_mode": step_mode}


__all__ = [
    "autotuned_tiles", "build_step", "causal_masked_out", "child_main", "eager_attention",
    "find_ncu", "gpu_available", "make_inputs", "measure_workload", "parse_ncu_csv", "peak_extra_memory",
    "run_child", "split_by_marker", "step_spec", "summarize_kernels",
]
