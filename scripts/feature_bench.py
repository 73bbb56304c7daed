"""Feature benchmarks on one CUDA GPU, in one process: the GPU measurements that issues 3
(fusion), 4 (block-sparse / FlexAttention) and 5 (decoding, varlen) still list under "Show".

Parts (``--part``, comma separated, or ``all``):

- ``fusion`` (issue 3), bf16, 16k tokens, 16 heads, d=128, forward+backward:
  causal vs full at seqlen 8k (target >= 1.8x faster); ``window_size=(256, 0)`` vs full at 16k
  (>= 10x); ``dropout_p=0.1`` vs 0 at 8k (<= 20% overhead);
  ``flashtile.scaled_dot_product_attention`` vs torch SDPA with the same float mask
  ``(b, 1, s, s)`` at 2k/4k; ``flashtile.flex_attention`` vs ``torch.compile(flex_attention)``
  with the same score_mod (relative position bias, softcap) at 4k.
- ``sparse`` (issue 4), b=16, h=8, seqlen 4k, d=64, bf16, forward+backward: flashtile
  ``flex_attention`` + ``flashtile.create_block_mask`` vs torch's compiled ``flex_attention`` +
  torch's ``create_block_mask`` on random block layouts (density 1.0/0.6/0.4/0.2; target:
  0.2 <= 0.3x the dense time, on device time), causal, sliding window 1024 and a document mask
  (goal: faster than torch on each); each fwd+bwd is timed as plain calls and as CUDA-graph
  replays (``<provider>-graph``: device time, without the host's per-call work);
  ``flashtile.create_block_mask`` time at seqlen 131072 (causal) on the GPU.
- ``decode`` (issue 5): ``flashtile.kvcache.decode_bandwidth`` at (batch, cache_len) = (1, 32k),
  (8, 8k), (32, 8k), (64, 4k), (8, 128k), hq/hkv = 32/8, d=128, bf16, contiguous and paged
  (page 256), plain calls and CUDA-graph replays; targets: >= 85% of the 2 GiB device-to-device
  copy bandwidth measured in the same run, faster than SDPA, paged within 10% of contiguous.
- ``varlen`` (issue 5): ``flash_attn_varlen_func`` forward+backward on 16k packed tokens of
  lengths drawn from [256, 4096] (seed fixed) vs ``flash_attn_func`` on 4 x 4096, TFLOP/s counting
  only real (unpadded) work, causal and not; target: within 10%.

Every provider is first checked against ``flashtile.attention_reference`` (float64) on slices
of the very inputs it is timed on (batch 0 / head 0 and the last batch / last head, all
sequence positions, so forward and gradients are exact for the slice):
``err <= 2 * err(attention_reference in the same dtype) + floor`` (the test suite's rule, floors
4x for dQ/dK). A provider that fails is reported WRONG and not timed; one that raises is
reported ``error: ...``; nothing stops the run. Time = median of ``triton.testing.do_bench``
(decoding's CUDA-graph rows: median with a cold, clean L2, ``flashtile.bench.timing.
cold_clean_ms``, because do_bench's write flush charges ~15 us of dirty-line write-back to a
~40 us call; the do_bench figure is kept in each decode row's config as ``gbps_dobench``);
FLOPs as flash-attention counts them (DESIGN.md): fwd ``4*b*h*sq*sk*d``, halved when causal,
fwd+bwd 3.5x fwd. Ratios compare providers measured in the same run.

Kernels run with ``FLASHTILE_AUTOTUNE=0`` (the first fitting config: compiles in seconds, not
minutes) unless ``--autotune`` is given or the variable is already set.

JSON goes to ``--out`` (default ``$OUT``, else ``./bench-out``) as ``feature-<part>.json``,
rewritten after every measurement so a run cut short still leaves its results. Items are
skipped, with a note, once ``--budget-s`` seconds (default 540) have passed.

GPU session: two device calls (``timeout_s=600`` each; estimated 3-5 minutes of work each,
most of it compiling: Triton kernels and ``torch.compile`` of torch's flex_attention). fusion and
varlen share the dense kernels, sparse and decode are independent. The device copy of the tree
has no .git: put the commit in ``FLASHTILE_COMMIT`` (it goes into the JSON)::

    # call 1
    export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src FLASHTILE_COMMIT=<sha>; set -o pipefail; \
    nvidia-smi -L; python3 scripts/feature_bench.py --part fusion,varlen --budget-s 540 \
        --out $OUT/features 2>&1 | tee $OUT/features-1.log
    # call 2
    export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src FLASHTILE_COMMIT=<sha>; set -o pipefail; \
    python3 scripts/feature_bench.py --part sparse,decode --budget-s 540 \
        --out $OUT/features 2>&1 | tee $OUT/features-2.log

A quick GPU pass over every part (small shapes, numbers not for the record)::

    python3 scripts/feature_bench.py --quick --budget-s 300 --out $OUT/features-quick

``--only WORD[,WORD]`` keeps the items whose name contains one of the words (e.g.
``--only causal,window``). ``--cpu-smoke`` runs tiny fp32 shapes on the CPU to exercise the
script's logic without a GPU (numbers meaningless; torch's flex has no CPU backward, so its rows
are errors there): ``python scripts/feature_bench.py --cpu-smoke --out /tmp/fb`` takes seconds on
the torch path; with ``TRITON_INTERPRET=1 FLASHTILE_BACKEND=triton`` it runs the Triton kernels
under the interpreter (~3 minutes).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

_T0 = time.monotonic()              # the budget counts from here, torch's import included

import torch  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PARTS = ("fusion", "sparse", "decode", "varlen")
GRAD_NAMES = ("dq", "dk", "dv")
# Absolute error floors of the kernel tests (tests/utils.py); 4x for dQ and dK, which sum over
# a whole sequence.
FLOORS = {torch.float32: 2e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}
FLOOR_GRAD_FACTOR = {"dq": 4.0, "dk": 4.0}
# Measured on the same H200 in another run (anchors/h200-2026-11-29.json): context only, every
# target below compares numbers of the *same* run.
ANCHORS = {
    "copy_gbps_read_plus_write": 4264.9,
    "decode_sdpa_gbps": {"b1 L32768": 2692, "b8 L8192": 3400, "b32 L8192": 4350,
                         "b64 L4096": 4245, "b8 L131072": 4579},
    "flex_block_sparse_s4k_d64_h8_b16_fwdbwd_ms": {"1.00": 6.716, "0.62": 4.227,
                                                   "0.43": 3.041, "0.23": 1.792},
}


# ==============================================================================================
# Pure helpers (tested on the CPU by tests/test_feature_bench.py)
# ==============================================================================================

def attn_flops(batch: int, heads: int, seqlen_q: int, seqlen_k: int, headdim: int,
               causal: bool = False, mode: str = "fwdbwd") -> float:
    """FLOPs by flash-attention's convention (DESIGN.md): fwd ``4*b*h*sq*sk*d``, halved when
    causal; ``bwd`` 2.5x and ``fwdbwd`` 3.5x the forward. One formula for the project: the
    benchmark CLI's (:func:`flashtile.bench.cases.attention_flops`)."""
    from flashtile.bench.cases import MODE_FLOP_FACTOR, attention_flops
    if mode not in MODE_FLOP_FACTOR:
        raise ValueError(f"mode must be one of {sorted(MODE_FLOP_FACTOR)}, got {mode!r}")
    return attention_flops(batch, heads, seqlen_q, seqlen_k, headdim, headdim, causal, mode)


def varlen_flops(lengths, heads: int, headdim: int, causal: bool = False,
                 mode: str = "fwdbwd") -> float:
    """Real (unpadded) work of a packed batch: the sum of :func:`attn_flops` per sequence."""
    return sum(attn_flops(1, heads, n, n, headdim, causal, mode) for n in lengths)


def tflops(flops: Optional[float], ms: Optional[float]) -> Optional[float]:
    if flops is None or not ms:
        return None
    return flops / (ms * 1e-3) / 1e12


def mixed_lengths(total: int, lo: int, hi: int, seed: int = 0) -> list[int]:
    """Sequence lengths drawn uniformly from ``[lo, hi]`` (``random.Random(seed)``) that add up
    to exactly ``total``. The draw that would overshoot is cut so that every length stays in
    ``[lo, hi]`` (needs ``hi >= 2 * lo``); only a ``total < lo`` gives one shorter sequence."""
    if not 0 < lo <= hi or hi < 2 * lo:
        raise ValueError(f"need 0 < lo and hi >= 2 * lo, got lo={lo}, hi={hi}")
    if total < 1:
        raise ValueError(f"total must be >= 1, got {total}")
    rng = random.Random(seed)
    lengths: list[int] = []
    left = total
    while left > 0:
        n = rng.randint(lo, hi)
        if left <= hi and (n >= left or left - n < lo):
            n = left                       # the rest fits in one sequence
        elif left - n < lo:
            n = left - lo                  # leave room for one more sequence of >= lo
        lengths.append(n)
        left -= n
    return lengths


def cu_seqlens(lengths) -> list[int]:
    """``[0, l0, l0 + l1, ...]``: the ``cu_seqlens`` of a packed batch."""
    out = [0]
    for n in lengths:
        out.append(out[-1] + int(n))
    return out


def speedup(base_ms: Optional[float], ms: Optional[float]) -> Optional[float]:
    """``base_ms / ms``: how many times faster ``ms`` is than ``base_ms`` (None if unknown)."""
    if base_ms is None or not ms:
        return None
    return base_ms / ms


def ratio(num: Optional[float], den: Optional[float]) -> Optional[float]:
    """``num / den`` (None if either is unknown or ``den`` is 0)."""
    if num is None or not den:
        return None
    return num / den


def overhead(ms: Optional[float], base_ms: Optional[float]) -> Optional[float]:
    """``ms / base_ms - 1``: the extra time over ``base_ms`` as a fraction (None if unknown)."""
    if ms is None or not base_ms:
        return None
    return ms / base_ms - 1.0


@dataclass
class Target:
    """One number with what it should be: ``value op threshold``.

    ``kind`` is ``"target"`` (an issue's acceptance number), ``"goal"`` (stated as a goal, e.g.
    faster than torch) or ``"info"`` (reported, nothing to pass).
    """

    name: str
    value: Optional[float]
    op: str = "info"                     # ">=", "<=", ">", "<" or "info"
    threshold: Optional[float] = None
    kind: str = "target"
    unit: str = "x"
    note: str = ""

    @property
    def status(self) -> str:
        if self.op == "info" or self.kind == "info":
            return "info"
        if self.value is None or self.threshold is None or math.isnan(self.value):
            return "n/a"
        ok = {">=": self.value >= self.threshold, "<=": self.value <= self.threshold,
              ">": self.value > self.threshold, "<": self.value < self.threshold}[self.op]
        return "PASS" if ok else ("FAIL" if self.kind == "target" else "MISS")

    def wants(self) -> str:
        if self.op == "info" or self.threshold is None:
            return ""
        return f"{self.op} {self.threshold:g}{self.unit}"

    def as_dict(self) -> dict:
        d = asdict(self)
        d["status"] = self.status
        return d


@dataclass
class Measurement:
    """One provider on one item: status ``ok`` / ``WRONG`` / ``error`` / ``skipped``."""

    part: str
    item: str
    provider: str
    status: str
    ms: Optional[float] = None
    tflops: Optional[float] = None
    gbps: Optional[float] = None
    check: Optional[dict] = None
    note: str = ""
    config: dict = field(default_factory=dict)


class Recorder:
    """Measurements, targets and notes of the parts run; rewrites ``feature-<part>.json``
    after every change (atomically), so a run cut short keeps what it measured."""

    def __init__(self, out_dir: Optional[Path], meta: dict,
                 targets_for: Optional[dict[str, Callable[["Recorder"], list[Target]]]] = None):
        self.out_dir = out_dir
        self.meta = meta
        self.targets_for = targets_for or {}
        self.measurements: list[Measurement] = []
        self.notes: dict[str, list[str]] = {}
        self.parts: list[str] = []

    def start_part(self, part: str) -> None:
        if part not in self.parts:
            self.parts.append(part)
        self.write(part)

    def add(self, m: Measurement) -> Measurement:
        self.measurements.append(m)
        self.write(m.part)
        return m

    def note(self, part: str, text: str) -> None:
        self.notes.setdefault(part, []).append(text)
        self.write(part)

    def of(self, part: str) -> list[Measurement]:
        return [m for m in self.measurements if m.part == part]

    def get(self, part: str, item: str, provider: str) -> Optional[Measurement]:
        for m in reversed(self.measurements):
            if (m.part, m.item, m.provider) == (part, item, provider):
                return m
        return None

    def ms(self, part: str, item: str, provider: str) -> Optional[float]:
        m = self.get(part, item, provider)
        return m.ms if m is not None and m.status == "ok" else None

    def value(self, part: str, item: str, provider: str, key: str) -> Optional[float]:
        m = self.get(part, item, provider)
        return getattr(m, key) if m is not None and m.status == "ok" else None

    def targets(self, part: str) -> list[Target]:
        fn = self.targets_for.get(part)
        if fn is None:
            return []
        try:
            return fn(self)
        except Exception as exc:  # a bug in a target formula must not lose the measurements
            return [Target(f"targets failed: {type(exc).__name__}: {exc}", None)]

    def as_dict(self, part: str) -> dict:
        return {"part": part, "meta": self.meta,
                "measurements": [asdict(m) for m in self.of(part)],
                "targets": [t.as_dict() for t in self.targets(part)],
                "notes": self.notes.get(part, [])}

    def write(self, part: str) -> Optional[Path]:
        if self.out_dir is None:
            return None
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / f"feature-{part}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(_finite(self.as_dict(part)), indent=1,
                                  default=_json_default))
        os.replace(tmp, path)
        return path


def _finite(x):
    """Replace inf/NaN floats (e.g. the error of a NaN output) by strings: strict JSON."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _json_default(x):
    if isinstance(x, torch.dtype):
        return str(x).replace("torch.", "")
    if isinstance(x, (set, tuple)):
        return list(x)
    return repr(x)


def parse_parts(text: str) -> list[str]:
    """``"fusion,sparse"`` -> ``["fusion", "sparse"]``; ``"all"`` -> every part, in order."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise argparse.ArgumentTypeError("--part needs at least one of "
                                         f"{', '.join(PARTS)} or all")
    if "all" in names:
        return list(PARTS)
    bad = [n for n in names if n not in PARTS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown part(s) {', '.join(bad)}; choose from "
                                         f"{', '.join(PARTS)} or all")
    return [p for p in PARTS if p in names]          # canonical order, no duplicates


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="feature_bench.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", type=parse_parts, default=list(PARTS),
                   help="comma-separated subset of fusion,sparse,decode,varlen, or all "
                        "(default all)")
    p.add_argument("--quick", action="store_true", help="small shapes (a fast check of the run)")
    p.add_argument("--out", type=Path, default=None,
                   help="folder for feature-<part>.json (default $OUT, else ./bench-out)")
    p.add_argument("--budget-s", type=float, default=540.0,
                   help="skip the remaining items once this many seconds have passed "
                        "(default 540)")
    p.add_argument("--only", type=lambda s: [w for w in s.split(",") if w], default=None,
                   help="keep only items whose name contains one of these comma-separated words")
    p.add_argument("--autotune", action="store_true",
                   help="let the kernels autotune (slow first calls); default "
                        "FLASHTILE_AUTOTUNE=0 unless already set")
    p.add_argument("--warmup-ms", type=float, default=25.0, help="do_bench warmup (ms)")
    p.add_argument("--rep-ms", type=float, default=100.0, help="do_bench repetition time (ms)")
    p.add_argument("--decode-modes", type=lambda s: [w for w in s.split(",") if w],
                   default=["eager", "graph"],
                   help="decode timing modes: eager (plain calls), graph (CUDA-graph replay)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cpu-smoke", action="store_true",
                   help="tiny shapes on the CPU to exercise the script (numbers meaningless)")
    return p


def parse_args(argv=None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.out is None:
        args.out = Path(os.environ.get("OUT") or "bench-out")
    bad = [m for m in args.decode_modes if m not in ("eager", "graph")]
    if bad:
        build_parser().error(f"--decode-modes: unknown mode(s) {bad}; use eager and/or graph")
    if args.budget_s <= 0:
        build_parser().error("--budget-s must be > 0")
    return args


@dataclass(frozen=True)
class Sizes:
    """Every shape the run uses; :func:`sizes_for` shrinks them for ``--quick``/``--cpu-smoke``."""

    dtype: str = "bf16"
    # fusion (issue 3): batch = tokens // seqlen, heads = 2048 // headdim as in the anchors
    tokens: int = 16384
    heads: int = 16
    headdim: int = 128
    causal_seqlen: int = 8192
    window_seqlen: int = 16384
    window: int = 256
    dropout_p: float = 0.1
    sdpa_seqlens: tuple = (2048, 4096)
    flex_seqlen: int = 4096
    relpos_reach: int = 128
    softcap: float = 5.0
    # sparse (issue 4)
    sparse_batch: int = 16
    sparse_heads: int = 8
    sparse_seqlen: int = 4096
    sparse_headdim: int = 64
    sliding: int = 1024
    densities: tuple = (1.0, 0.6, 0.4, 0.2)
    big_mask_seqlen: int = 131072
    block: int = 128
    # decode (issue 5)
    decode_cases: tuple = ((1, 32768), (8, 8192), (32, 8192), (64, 4096), (8, 131072))
    decode_hq: int = 32
    decode_hkv: int = 8
    decode_headdim: int = 128
    page: int = 256
    copy_bytes: int = 2 << 30
    # varlen (issue 5)
    varlen_tokens: int = 16384
    varlen_lo: int = 256
    varlen_hi: int = 4096
    varlen_heads: int = 16
    varlen_headdim: int = 128

    @property
    def torch_dtype(self) -> torch.dtype:
        return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[self.dtype]


def sizes_for(quick: bool = False, cpu_smoke: bool = False) -> Sizes:
    full = Sizes()
    if cpu_smoke:
        return replace(full, dtype="fp32", tokens=256, heads=2, headdim=32, causal_seqlen=128,
                       window_seqlen=256, window=16, sdpa_seqlens=(64,), flex_seqlen=128,
                       relpos_reach=8, sparse_batch=2, sparse_heads=2, sparse_seqlen=128,
                       sparse_headdim=32, sliding=32, big_mask_seqlen=512, block=32,
                       decode_cases=((2, 256),), decode_hq=4, decode_hkv=2, decode_headdim=32,
                       page=32, copy_bytes=1 << 20, varlen_tokens=256, varlen_lo=16,
                       varlen_hi=64, varlen_heads=2, varlen_headdim=32)
    if quick:
        return replace(full, tokens=4096, causal_seqlen=2048, window_seqlen=4096,
                       sdpa_seqlens=(1024,), flex_seqlen=1024, sparse_batch=2, sparse_heads=4,
                       sparse_seqlen=1024, big_mask_seqlen=16384,
                       decode_cases=((1, 4096), (8, 1024), (64, 512), (8, 16384)),
                       copy_bytes=256 << 20, varlen_tokens=4096, varlen_lo=128, varlen_hi=1024)
    return full


def kfmt(n: int) -> str:
    """4096 -> '4k', 131072 -> '128k', 1000 -> '1000'."""
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


# ---- item names (shared by the measuring code and the target formulas) -----------------------

def fusion_items(z: Sizes) -> dict[str, str]:
    s8, s16 = kfmt(z.causal_seqlen), kfmt(z.window_seqlen)
    return {"full": f"full s{s8}", "causal": f"causal s{s8}",
            "dropout": f"dropout{z.dropout_p:g} s{s8}", "full16": f"full s{s16}",
            "window": f"window({z.window},0) s{s16}",
            **{f"sdpa{s}": f"sdpa float-mask s{kfmt(s)}" for s in z.sdpa_seqlens},
            "relpos": f"flex relpos s{kfmt(z.flex_seqlen)}",
            "softcap": f"flex softcap s{kfmt(z.flex_seqlen)}"}


def sparse_mask_names(z: Sizes) -> list[str]:
    return ([f"random {d:.1f}" for d in z.densities]
            + ["causal", f"sliding window {z.sliding}", "document"])


COPY_ITEM = "copy d2d"


def decode_item(batch: int, cache_len: int, paged: bool, mode: str) -> str:
    return f"b{batch} L{kfmt(cache_len)} {'paged' if paged else 'contig'} {mode}"


def varlen_items(z: Sizes, causal: bool) -> tuple[str, str]:
    tag = "causal" if causal else "full"
    return (f"varlen {tag} {kfmt(z.varlen_tokens)} tokens",
            f"fixed {tag} {z.varlen_tokens // z.varlen_hi}x{kfmt(z.varlen_hi)}")


# ---- targets ----------------------------------------------------------------------------------

def fusion_targets(rec: Recorder, z: Sizes) -> list[Target]:
    it, ft = fusion_items(z), "flashtile"
    ms = rec.ms
    out = [
        Target(f"causal vs full, s{kfmt(z.causal_seqlen)}: speedup",
               speedup(ms("fusion", it["full"], ft), ms("fusion", it["causal"], ft)), ">=", 1.8),
        Target(f"window {z.window} vs full, s{kfmt(z.window_seqlen)}: speedup",
               speedup(ms("fusion", it["full16"], ft), ms("fusion", it["window"], ft)),
               ">=", 10.0),
        Target(f"dropout {z.dropout_p:g} overhead, s{kfmt(z.causal_seqlen)}",
               overhead(ms("fusion", it["dropout"], ft), ms("fusion", it["full"], ft)),
               "<=", 0.20, unit=""),
    ]
    for s in z.sdpa_seqlens:
        name = it[f"sdpa{s}"]
        out.append(Target(f"{name}: flashtile speedup vs torch SDPA",
                          speedup(ms("fusion", name, "torch-sdpa"),
                                  ms("fusion", name, "flashtile-sdpa")), ">=", 1.0, kind="goal"))
    for key in ("relpos", "softcap"):
        name = it[key]
        out.append(Target(f"{name}: flashtile speedup vs torch flex",
                          speedup(ms("fusion", name, "torch-flex"),
                                  ms("fusion", name, "flashtile-flex")), ">=", 1.0, kind="goal"))
    return out


def sparse_targets(rec: Recorder, z: Sizes) -> list[Target]:
    out = []
    dense, sparsest = f"random {max(z.densities):.1f}", f"random {min(z.densities):.1f}"
    # Device time (graph replays) carries the target: whether work scales with density. Plain
    # calls are reported too; at low density they can be bound by the host's per-call time.
    for prov in ("flashtile-graph", "flashtile", "torch-flex-graph", "torch-flex"):
        out.append(Target(f"{prov}: time at density {min(z.densities):.1f} / dense",
                          ratio(rec.ms("sparse", sparsest, prov), rec.ms("sparse", dense, prov)),
                          "<=", 0.3 if prov == "flashtile-graph" else None,
                          kind="target" if prov == "flashtile-graph" else "info"))
    for name in sparse_mask_names(z):
        for mode in ("", "-graph"):
            out.append(Target(f"{name}: flashtile speedup vs torch flex{mode and ' (graphs)'}",
                              speedup(rec.ms("sparse", name, f"torch-flex{mode}"),
                                      rec.ms("sparse", name, f"flashtile{mode}")), ">=", 1.0,
                              kind="goal"))
    big = f"create_block_mask causal s{kfmt(z.big_mask_seqlen)}"
    out.append(Target(f"{big} (ms, median)", rec.ms("sparse", big, "flashtile"), "info",
                      unit=" ms"))
    return out


def decode_targets(rec: Recorder, z: Sizes, modes=("eager", "graph")) -> list[Target]:
    copy = rec.value("decode", COPY_ITEM, "torch", "gbps")
    out = [Target("copy bandwidth GB/s (read+write)", copy, "info", unit=" GB/s")]
    for mode in modes:
        for batch, n in z.decode_cases:
            contig, paged = decode_item(batch, n, False, mode), decode_item(batch, n, True, mode)
            ft = rec.value("decode", contig, "flashtile", "gbps")
            ft_paged = rec.value("decode", paged, "flashtile", "gbps")
            sdpa = [rec.ms("decode", contig, p) for p in ("sdpa_gqa", "sdpa_expanded")]
            sdpa = [x for x in sdpa if x is not None]
            tag = f"b{batch} L{kfmt(n)} {mode}"
            out.append(Target(f"{tag}: flashtile / copy bandwidth", ratio(ft, copy), ">=", 0.85,
                              unit=""))
            out.append(Target(f"{tag}: paged / copy bandwidth", ratio(ft_paged, copy), "info",
                              unit=""))
            out.append(Target(f"{tag}: flashtile speedup vs best SDPA",
                              speedup(min(sdpa) if sdpa else None,
                                      rec.ms("decode", contig, "flashtile")), ">", 1.0))
            out.append(Target(f"{tag}: paged time overhead vs contiguous",
                              overhead(rec.ms("decode", paged, "flashtile"),
                                       rec.ms("decode", contig, "flashtile")), "<=", 0.10,
                              unit=""))
    return out


def varlen_targets(rec: Recorder, z: Sizes) -> list[Target]:
    out = []
    for causal in (False, True):
        var, fixed = varlen_items(z, causal)
        a = rec.value("varlen", var, "flashtile", "tflops")
        b = rec.value("varlen", fixed, "flashtile", "tflops")
        out.append(Target(f"{var}: TFLOP/s vs fixed length", ratio(a, b), ">=", 0.9, unit=""))
    return out


def make_targets(z: Sizes, decode_modes=("eager", "graph")) -> dict:
    return {"fusion": lambda r: fusion_targets(r, z), "sparse": lambda r: sparse_targets(r, z),
            "decode": lambda r: decode_targets(r, z, decode_modes),
            "varlen": lambda r: varlen_targets(r, z)}


# ---- tables -----------------------------------------------------------------------------------

def _num(x: Optional[float], digits: int = 3) -> str:
    if x is None:
        return "-"
    return f"{x:.{digits}f}" if abs(x) < 1000 else f"{x:,.0f}"


def _pct(x: Optional[float], signed: bool = False) -> str:
    return "-" if x is None else f"{x:+.0%}" if signed else f"{x:.0%}"


def measurement_table(rec: Recorder, part: str) -> tuple[str, list[str], list[list[str]]]:
    rows = []
    for m in rec.of(part):
        rate = (f"{m.tflops:.0f} TF/s" if m.tflops is not None
                else f"{m.gbps:,.0f} GB/s" if m.gbps is not None else "")
        check = ""
        if m.check and m.check.get("worst_ratio") is not None:
            check = f"{m.check['worst_ratio']:.2f}"
        status = m.status if len(m.status) < 60 else m.status[:57] + "..."
        rows.append([m.item, m.provider, status, _num(m.ms), rate, check, m.note[:60]])
    return (f"{part}: measurements (check = worst err / budget, < 1 passes)",
            ["item", "provider", "status", "ms", "rate", "check", "note"], rows)


def target_table(rec: Recorder, part: str) -> tuple[str, list[str], list[list[str]]]:
    rows = [[t.name, _num(t.value), t.wants(), t.status] for t in rec.targets(part)]
    return f"{part}: targets", ["what", "value", "wants", "result"], rows


def decode_table(rec: Recorder, z: Sizes, modes) -> tuple[str, list[str], list[list[str]]]:
    """One row per (case, mode): GB/s of each provider, and the three targets' verdicts."""
    copy = rec.value("decode", COPY_ITEM, "torch", "gbps")
    targets = {t.name: t for t in rec.targets("decode")}
    rows = []
    for mode in modes:
        for batch, n in z.decode_cases:
            contig, paged = decode_item(batch, n, False, mode), decode_item(batch, n, True, mode)
            tag = f"b{batch} L{kfmt(n)} {mode}"

            def gb(item, prov):
                x = rec.value("decode", item, prov, "gbps")
                return "-" if x is None else f"{x:,.0f}"
            verdict = {k: targets.get(f"{tag}: {k}") for k in (
                "flashtile / copy bandwidth", "flashtile speedup vs best SDPA",
                "paged time overhead vs contiguous")}
            rows.append([tag, gb(contig, "flashtile"),
                         _pct(verdict["flashtile / copy bandwidth"].value),
                         gb(paged, "flashtile"),
                         _pct(verdict["paged time overhead vs contiguous"].value, signed=True),
                         gb(contig, "sdpa_gqa"), gb(contig, "sdpa_expanded"),
                         _num(verdict["flashtile speedup vs best SDPA"].value, 2),
                         " ".join(t.status for t in verdict.values())])
    title = (f"decode GB/s (K+V bytes / time), copy {_num(copy, 0)} GB/s (read+write); "
             "results: >= 85% copy | faster than SDPA | paged <= +10%")
    return title, ["case", "flashtile", "% copy", "paged", "paged +time", "sdpa_gqa",
                   "sdpa_expanded", "vs SDPA", "results"], rows


def not_ok_table(rec: Recorder, part: str) -> tuple[str, list[str], list[list[str]]]:
    rows = [[m.item, m.provider, m.status[:100]] for m in rec.of(part) if m.status != "ok"]
    return f"{part}: not measured", ["item", "provider", "status"], rows


def render(title: str, columns: list[str], rows: list[list[str]], stream) -> None:
    """A rich table, or plain ``|``-separated lines where rich is missing."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(f"== {title}", file=stream)
        for row in [columns] + rows:
            print(" | ".join(row), file=stream)
        return
    table = Table(title=title)
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*row)
    Console(file=stream, width=160).print(table)


def print_tables(rec: Recorder, parts, sizes: Optional[Sizes] = None,
                 decode_modes=("eager", "graph"), stream=None) -> None:
    """Each part's tables: measurements and targets (decode: one compact table, plus what was
    not measured)."""
    stream = stream or sys.stdout
    for part in parts:
        if part == "decode" and sizes is not None:
            tables = [decode_table(rec, sizes, decode_modes), not_ok_table(rec, part)]
            tables = [t for t in tables if t[2]]
        else:
            tables = [measurement_table(rec, part), target_table(rec, part)]
        for title, columns, rows in tables:
            render(title, columns, rows, stream)
        for text in rec.notes.get(part, []):
            print(f"note ({part}): {text}", file=stream)
    stream.flush()


# ==============================================================================================
# Checking against the float64 reference
# ==============================================================================================

def max_err(x: Optional[torch.Tensor], ref: torch.Tensor) -> float:
    """Max abs difference in float64; a missing tensor, a shape mismatch, NaN or inf in ``x``
    count as infinite."""
    if x is None or tuple(x.shape) != tuple(ref.shape):
        return float("inf")
    x = x.detach().double()
    if not bool(torch.isfinite(x).all()):
        return float("inf")
    return float((x - ref.double()).abs().max()) if x.numel() else 0.0


def reference_run(q, k, v, dout, params, keep, dtype: torch.dtype, grads: bool) -> dict:
    """``flashtile.attention_reference`` in ``dtype`` on (b, s, h, d) slices, with gradients."""
    from flashtile import attention_reference
    leaves = [t.detach().to(dtype).requires_grad_(grads) for t in (q, k, v)]
    out, _ = attention_reference(*leaves, params, dropout_keep=keep, dtype=dtype)
    result = {"out": out.detach()}
    if grads:
        out.backward(dout.to(dtype))
        result.update({n: leaf.grad for n, leaf in zip(GRAD_NAMES, leaves)})
    return result


def judge(got: dict, q, k, v, dout, params, keep=None, grads: bool = True,
          names=("out", "dq", "dk", "dv")) -> dict:
    """``err(got) <= 2 * err(reference in q's dtype) + floor`` for each tensor in ``names``.
    Returns ``{"ok", "errors", "budgets", "worst_ratio", "reason"}``."""
    expected = reference_run(q, k, v, dout, params, keep, torch.float64, grads)
    same = reference_run(q, k, v, dout, params, keep, q.dtype, grads)
    errors, budgets, problems = {}, {}, []
    for name in names:
        if name not in expected:
            continue
        ref = expected[name]
        budgets[name] = (2.0 * max_err(same[name], ref)
                         + FLOORS.get(q.dtype, 8e-3) * FLOOR_GRAD_FACTOR.get(name, 1.0))
        errors[name] = max_err(got.get(name), ref)
        if not errors[name] <= budgets[name]:
            problems.append(f"{name} err {errors[name]:.2e} > budget {budgets[name]:.2e}")
    ratios = [errors[n] / budgets[n] for n in errors if budgets[n] > 0]
    return {"ok": not problems, "errors": errors, "budgets": budgets,
            "worst_ratio": max(ratios) if ratios else None, "reason": "; ".join(problems)}


def merge_checks(checks: dict[str, dict]) -> dict:
    """One check record from several slices: ok iff all are, worst ratio over all."""
    ratios = [c["worst_ratio"] for c in checks.values() if c.get("worst_ratio") is not None]
    reasons = [f"{s}: {c['reason']}" for s, c in checks.items() if c.get("reason")]
    return {"ok": all(c["ok"] for c in checks.values()),
            "worst_ratio": max(ratios) if ratios else None,
            "reason": "; ".join(reasons), "slices": checks}


def shifted_score_mod(mod, b0: int, h0: int):
    """``mod`` seen from a slice that starts at batch ``b0``, head ``h0`` (the reference runs on
    a one-batch, one-head slice whose indices start at 0)."""
    if mod is None:
        return None

    def score_mod(score, b, h, q_idx, kv_idx):
        return mod(score, b + b0, h + h0, q_idx, kv_idx)
    return score_mod


def shifted_mask_mod(mod, b0: int, h0: int):
    if mod is None:
        return None

    def mask_mod(b, h, q_idx, kv_idx):
        return mod(b + b0, h + h0, q_idx, kv_idx)
    return mask_mod


# ==============================================================================================
# The harness
# ==============================================================================================

@dataclass
class Problem:
    """One attention configuration: inputs in (b, s, h, d) and what the reference needs.

    ``reference(b0, h0, rng_state) -> (AttentionParams, dropout_keep or None)`` describes the
    one-batch, one-head slice starting at ``(b0, h0)``; ``rng_state`` is torch's CPU generator
    state just before the provider's checked call (dropout keys are drawn from it).
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    dout: torch.Tensor
    reference: Callable
    flops: Optional[float] = None
    config: dict = field(default_factory=dict)


@dataclass
class Provider:
    """An attention function in its native layout (``bshd`` or ``bhsd``)."""

    name: str
    fn: Callable
    layout: str = "bshd"
    flex: bool = False          # flashtile.flex_attention: a torch-path fallback is an error

    def to_native(self, x: torch.Tensor) -> torch.Tensor:
        x = x.detach()
        return x.transpose(1, 2).contiguous() if self.layout == "bhsd" else x.clone()

    def from_native(self, x: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        if x is None:
            return None
        return x.transpose(1, 2) if self.layout == "bhsd" else x


def check_slices(batch: int, heads: int) -> list[tuple[int, int]]:
    """The (batch, head) slices every provider is checked on: the first and the last."""
    return sorted({(0, 0), (batch - 1, heads - 1)})


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


class Runner:
    """Times, checks, records; owns the budget and the progress log."""

    def __init__(self, args, sizes: Sizes, recorder: Recorder, device: torch.device,
                 start: Optional[float] = None):
        self.args = args
        self.z = sizes
        self.rec = recorder
        self.device = device
        self.start = time.monotonic() if start is None else start     # budget clock

    # ---- bookkeeping ---------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def log(self, text: str) -> None:
        print(f"[{self.elapsed():6.1f}s] {text}", flush=True)

    def wanted(self, item: str) -> bool:
        return not self.args.only or any(w in item for w in self.args.only)

    def over_budget(self) -> bool:
        return self.elapsed() > self.args.budget_s

    def skip(self, part: str, item: str, provider: str, config=None) -> Optional[Measurement]:
        """Record a budget skip (and return it) when over budget, else None."""
        if not self.over_budget():
            return None
        self.log(f"{part} | {item} | {provider}: skipped (budget {self.args.budget_s:g}s used)")
        return self.rec.add(Measurement(part, item, provider, "skipped", config=config or {},
                                        note=f"skipped: --budget-s {self.args.budget_s:g} "
                                             "exceeded"))

    def error(self, part, item, provider, exc, config=None) -> Measurement:
        self.log(f"{part} | {item} | {provider}: error: {_short(exc)}")
        if os.environ.get("FEATURE_BENCH_TRACEBACK"):
            traceback.print_exc()
        return self.rec.add(Measurement(part, item, provider, f"error: {_short(exc)}",
                                        config=config or {}))

    def cleanup(self) -> None:
        """Free cached device memory between items (never raises: after a CUDA error the
        remaining items report their own errors)."""
        if self.device.type == "cuda":
            try:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            except Exception as exc:
                self.log(f"cleanup: {_short(exc)}")

    # ---- timing --------------------------------------------------------------------------
    def time_ms(self, fn: Callable, grad_to_none=()) -> float:
        """Median milliseconds of ``fn`` (``do_bench`` on CUDA, ``perf_counter`` on CPU)."""
        grad_to_none = list(grad_to_none)
        if self.device.type == "cuda":
            import triton.testing
            return float(triton.testing.do_bench(
                fn, warmup=self.args.warmup_ms, rep=self.args.rep_ms,
                grad_to_none=grad_to_none or None, return_mode="median"))
        times = []
        for _ in range(3):
            for t in grad_to_none:
                t.grad = None
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    def host_ms(self, fn: Callable, reps: int = 3) -> tuple[float, float, object]:
        """``(first call ms, median of the next reps ms, last result)`` of a host-driven call,
        synchronising the device around each."""
        def once():
            self.sync()
            t0 = time.perf_counter()
            result = fn()
            self.sync()
            return (time.perf_counter() - t0) * 1e3, result
        first, result = once()
        rest = []
        for _ in range(reps):
            ms, result = once()
            rest.append(ms)
        return first, statistics.median(rest) if rest else first, result

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    # ---- one attention provider, forward + backward ---------------------------------------
    def attention(self, part: str, item: str, provider: Provider, problem: Problem,
                  graph: bool = False) -> Measurement:
        """Check ``provider`` on slices of ``problem`` against the float64 reference, then time
        forward+backward; records and returns the measurement. Never raises. ``graph``: also
        time a CUDA-graph replay of the same step, recorded as provider ``<name>-graph``."""
        config = dict(problem.config)
        skipped = self.skip(part, item, provider.name, config)
        if skipped is not None:
            return skipped
        self.log(f"{part} | {item} | {provider.name}: checking")
        leaves = out = None
        try:
            leaves = [provider.to_native(t).requires_grad_() for t in
                      (problem.q, problem.k, problem.v)]
            dout = provider.to_native(problem.dout)
            rng_state = torch.get_rng_state()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                if provider.flex:
                    _reset_flex_fallback_warning()
                out = provider.fn(*leaves)
                out.backward(dout)
            fallback = [str(w.message) for w in caught if "torch path" in str(w.message)]
            if fallback:
                raise RuntimeError(f"not timed, the kernels were not used: {fallback[0]}")
            got = {"out": provider.from_native(out.detach()),
                   **{n: provider.from_native(t.grad) for n, t in zip(GRAD_NAMES, leaves)}}
            out = None
            check = self.check_problem(problem, got, rng_state)
            del got
            if not check["ok"]:
                self.log(f"{part} | {item} | {provider.name}: WRONG ({check['reason'][:200]})")
                return self.rec.add(Measurement(part, item, provider.name, "WRONG", check=check,
                                                config=config, note=check["reason"][:200]))
            for t in leaves:
                t.grad = None
            ms = self.time_ms(lambda: provider.fn(*leaves).backward(dout), grad_to_none=leaves)
            rate = tflops(problem.flops, ms)
            self.log(f"{part} | {item} | {provider.name}: {ms:.3f} ms"
                     + (f", {rate:.0f} TFLOP/s" if rate else "")
                     + f" (check worst err/budget {check['worst_ratio'] or 0:.2f})")
            if graph and self.device.type == "cuda":
                self.graph_attention(part, item, provider, leaves, dout, problem, config)
            return self.rec.add(Measurement(part, item, provider.name, "ok", ms=ms, tflops=rate,
                                            check=check, config=config))
        except Exception as exc:
            return self.error(part, item, provider.name, exc, config)
        finally:
            leaves = out = dout = None      # free the inputs' copies before the next item
            self.cleanup()

    def graph_attention(self, part, item, provider, leaves, dout, problem, config) -> None:
        """Time forward+backward replayed from a CUDA graph: the device time of the step
        without the host's per-call work (Python, autograd, launches), which plain calls
        expose whenever it exceeds the kernels' time. The replayed step is the one just
        checked; its gradients are compared with a plain call's once more, so a capture that
        froze anything host-side cannot pass."""
        from flashtile.bench.timing import capture_graph

        name = f"{provider.name}-graph"
        try:
            def step():
                out = provider.fn(*leaves)
                return torch.autograd.grad(out, leaves, dout)
            g, captured = capture_graph(step, warmups=2)
            g.replay()
            plain = step()
            same = all(torch.equal(a, b) for a, b in zip(captured, plain))
            if not same:
                raise RuntimeError("graph replay gradients differ from a plain call's")
            ms = self.time_ms(g.replay)
            rate = tflops(problem.flops, ms)
            self.log(f"{part} | {item} | {name}: {ms:.3f} ms" + (f", {rate:.0f} TFLOP/s" if rate
                                                                 else ""))
            self.rec.add(Measurement(part, item, name, "ok", ms=ms, tflops=rate, config=config,
                                     note="CUDA-graph replay of fwd+bwd (device time)"))
            del g, captured, plain
        except Exception as exc:
            self.error(part, item, name, exc, config)

    def check_problem(self, problem: Problem, got: dict, rng_state) -> dict:
        b, _, h, _ = problem.q.shape
        group = h // problem.k.shape[2]
        checks = {}
        for b0, h0 in check_slices(b, h):
            params, keep = problem.reference(b0, h0, rng_state)
            hk = h0 // group
            sl_q = (slice(b0, b0 + 1), slice(None), slice(h0, h0 + 1))
            sl_k = (slice(b0, b0 + 1), slice(None), slice(hk, hk + 1))
            mine = {"out": got["out"][sl_q], "dq": _sl(got.get("dq"), sl_q),
                    "dk": _sl(got.get("dk"), sl_k), "dv": _sl(got.get("dv"), sl_k)}
            # With GQA the slice holds one query head of the group: dK/dV are not exact there.
            names = ("out", "dq", "dk", "dv") if group == 1 else ("out", "dq")
            checks[f"b{b0}h{h0}"] = judge(mine, problem.q[sl_q], problem.k[sl_k],
                                          problem.v[sl_k], problem.dout[sl_q], params, keep,
                                          grads=True, names=names)
        return merge_checks(checks)


def _sl(t, index):
    return None if t is None else t[index]


def _reset_flex_fallback_warning() -> None:
    """flashtile warns once per process when flex_attention falls back to the torch path; reset
    it so every flex provider's checked call can be caught falling back."""
    try:
        import flashtile.flex as flex_module
        flex_module._warned_fallback = False
    except Exception:
        pass


def randn(shape, dtype, device, gen) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(dtype)


def qkv(batch, seqlen, heads, headdim, dtype, device, seed) -> tuple:
    """Fresh q, k, v, dout in (b, s, h, d)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    return tuple(randn((batch, seqlen, heads, headdim), dtype, device, gen) for _ in range(4))


_TORCH_FLEX = None


def torch_flex():
    """``torch.compile(torch.nn.attention.flex_attention.flex_attention)``, built once. The
    recompile limits are raised: every new score_mod/mask_mod is a recompile, and past the
    limit torch would silently run the (materialising) eager version."""
    global _TORCH_FLEX
    if _TORCH_FLEX is None:
        import torch._dynamo
        from torch.nn.attention.flex_attention import flex_attention
        for name in ("cache_size_limit", "recompile_limit"):
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, 64)
        _TORCH_FLEX = torch.compile(flex_attention, dynamic=False)
    return _TORCH_FLEX


# ==============================================================================================
# Part 1: fusion (issue 3)
# ==============================================================================================

def run_fusion(r: Runner) -> None:
    import flashtile
    from flashtile import AttentionParams
    from flashtile.masks import relative_position_bias, softcap
    from flashtile.reference.philox import draw_seed_offset, dropout_keep

    z, dev, dt = r.z, r.device, r.z.torch_dtype
    items = fusion_items(z)
    heads, d = z.heads, z.headdim
    scale = 1.0 / math.sqrt(d)

    def flash(**kw) -> Provider:
        return Provider("flashtile", lambda q, k, v: flashtile.flash_attn_func(q, k, v, **kw))

    def plain_reference(**kw):
        def reference(b0, h0, rng_state):
            return AttentionParams(softmax_scale=scale, **kw), None
        return reference

    def problem(seqlen, reference, causal=False, **config):
        batch = max(1, z.tokens // seqlen)
        q, k, v, dout = qkv(batch, seqlen, heads, d, dt, dev, r.args.seed)
        flops = attn_flops(batch, heads, seqlen, seqlen, d, causal)
        return Problem(q, k, v, dout, reference, flops,
                       dict(batch=batch, heads=heads, seqlen=seqlen, headdim=d, dtype=z.dtype,
                            causal=causal, **config))

    # -- causal vs full at 8k; dropout at 8k ------------------------------------------------
    s8 = z.causal_seqlen
    if r.wanted(items["full"]):
        r.attention("fusion", items["full"], flash(), problem(s8, plain_reference()))
    if r.wanted(items["causal"]):
        r.attention("fusion", items["causal"], flash(causal=True),
                    problem(s8, plain_reference(causal=True, window_right=0), causal=True))
    if r.wanted(items["dropout"]):
        p = z.dropout_p

        def dropout_reference(b0, h0, rng_state):
            saved = torch.get_rng_state()
            torch.set_rng_state(rng_state)             # the key the checked call drew
            seed, offset = draw_seed_offset(dev)
            torch.set_rng_state(saved)
            params = AttentionParams(softmax_scale=scale, dropout_p=p, seed=seed, offset=offset)
            idx = torch.arange(s8, device=dev)
            keep = dropout_keep(params, b0, h0, idx[:, None], idx[None, :], heads, s8, s8)
            return params, keep[None, None]
        # FLOPs as without dropout (the convention counts the matmuls).
        r.attention("fusion", items["dropout"], flash(dropout_p=p),
                    problem(s8, dropout_reference, dropout_p=p))

    # -- window (256, 0) vs full at 16k -----------------------------------------------------
    s16 = z.window_seqlen
    if r.wanted(items["full16"]):
        r.attention("fusion", items["full16"], flash(), problem(s16, plain_reference()))
    if r.wanted(items["window"]):
        prob = problem(s16, plain_reference(window_left=z.window, window_right=0),
                       window_size=(z.window, 0))
        prob.flops = None        # the convention has no window rule: compare times
        r.attention("fusion", items["window"], flash(window_size=(z.window, 0)), prob)

    # -- float mask: flashtile SDPA vs torch SDPA -------------------------------------------
    for s in z.sdpa_seqlens:
        name = items[f"sdpa{s}"]
        if not r.wanted(name):
            continue
        try:
            batch = max(1, z.tokens // s)
            gen = torch.Generator(device=dev).manual_seed(r.args.seed + 1)
            mask = randn((batch, 1, s, s), dt, dev, gen)           # additive float mask

            def sdpa_reference(b0, h0, rng_state, mask=mask):
                return AttentionParams(softmax_scale=scale, bottom_right=False,
                                       attn_bias=mask[b0:b0 + 1]), None
            prob = problem(s, sdpa_reference, mask_shape=list(mask.shape))
        except Exception as exc:
            r.error("fusion", name, "setup", exc)
            continue
        r.attention("fusion", name, Provider(
            "flashtile-sdpa", lambda q, k, v, m=mask: flashtile.scaled_dot_product_attention(
                q, k, v, attn_mask=m), "bhsd"), prob)
        r.attention("fusion", name, Provider(
            "torch-sdpa", lambda q, k, v, m=mask: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=m), "bhsd"), prob)
        del mask, prob
        r.cleanup()

    # -- score_mod: flashtile flex vs torch.compile(flex_attention) -------------------------
    s = z.flex_seqlen
    gen = torch.Generator(device=dev).manual_seed(r.args.seed + 2)
    table = torch.randn(heads, 2 * z.relpos_reach - 1, generator=gen, device=dev) * 0.5
    mods = {"relpos": relative_position_bias(table), "softcap": softcap(z.softcap)}
    for key, mod in mods.items():
        name = items[key]
        if not r.wanted(name):
            continue

        def mod_reference(b0, h0, rng_state, mod=mod):
            return AttentionParams(softmax_scale=scale, bottom_right=False,
                                   score_mod=shifted_score_mod(mod, b0, h0)), None
        prob = problem(s, mod_reference, score_mod=key)
        r.attention("fusion", name, Provider(
            "flashtile-flex", lambda q, k, v, m=mod: flashtile.flex_attention(q, k, v, score_mod=m),
            "bhsd", flex=True), prob)
        try:
            fx = torch_flex()
        except Exception as exc:
            r.error("fusion", name, "torch-flex", exc)
            continue
        r.attention("fusion", name, Provider(
            "torch-flex", lambda q, k, v, m=mod, fx=fx: fx(q, k, v, score_mod=m), "bhsd"), prob)


# ==============================================================================================
# Part 2: block-sparse (issue 4)
# ==============================================================================================

def causal_layout_ok(bm, n_blocks: int) -> bool:
    """A causal BlockMask's lists: diagonal blocks partial, blocks below it full, none above."""
    partial, full = (x[0, 0].cpu() for x in bm.dense_layouts())
    eye = torch.eye(n_blocks, dtype=torch.bool)
    below = torch.ones(n_blocks, n_blocks, dtype=torch.bool).tril(-1)
    return bool(torch.equal(partial, eye) and torch.equal(full, below))


def run_sparse(r: Runner) -> None:
    import flashtile
    from flashtile import AttentionParams
    from flashtile.masks import (causal_mask, document_mask, layout_mask, random_block_layout,
                                 sliding_window)

    z, dev, dt = r.z, r.device, r.z.torch_dtype
    B, H, S, D, blk = z.sparse_batch, z.sparse_heads, z.sparse_seqlen, z.sparse_headdim, z.block
    scale = 1.0 / math.sqrt(D)
    nb = -(-S // blk)

    # -- create_block_mask at 128k (causal), on the GPU --------------------------------------
    big = f"create_block_mask causal s{kfmt(z.big_mask_seqlen)}"
    if r.wanted(big) and r.skip("sparse", big, "flashtile") is None:
        try:
            n = z.big_mask_seqlen
            first, med, bm = r.host_ms(lambda: flashtile.create_block_mask(
                causal_mask, None, None, n, n, device=dev, BLOCK_SIZE=blk), reps=3)
            ok = causal_layout_ok(bm, -(-n // blk))
            r.log(f"sparse | {big}: first {first:.1f} ms, median {med:.1f} ms, "
                  f"layout {'ok' if ok else 'WRONG'}")
            r.rec.add(Measurement("sparse", big, "flashtile", "ok" if ok else "WRONG",
                                  ms=med if ok else None, note=f"first call {first:.1f} ms",
                                  config=dict(seqlen=n, block=blk)))
            del bm
        except Exception as exc:
            r.error("sparse", big, "flashtile", exc)
        r.cleanup()

    # -- flex fwd+bwd per mask: flashtile vs torch compiled ---------------------------------
    try:
        from torch.nn.attention.flex_attention import create_block_mask as torch_create_block_mask
    except Exception as exc:                      # torch without FlexAttention
        torch_create_block_mask = None
        r.rec.note("sparse", f"torch flex_attention unavailable: {_short(exc)}")
    q, k, v, dout = qkv(B, S, H, D, dt, dev, r.args.seed)
    layout_buf = torch.zeros(nb, nb, dtype=torch.bool, device=dev)

    def torch_layout_mod(b, h, q_idx, kv_idx):     # one function object: no recompiles
        return layout_buf[q_idx // blk, kv_idx // blk]

    doc_ids = torch.tensor(sum(([i] * n for i, n in enumerate(
        mixed_lengths(S, max(1, S // 16), max(2, S // 4), r.args.seed))), []),
        dtype=torch.int32, device=dev)
    cases = []                # (name, flashtile mask_mod, torch mask_mod, layout or None)
    for density in z.densities:
        layout = random_block_layout(nb, nb, density, seed=r.args.seed, device=dev)[0, 0]
        cases.append((f"random {density:.1f}", layout_mask(layout, blk), torch_layout_mod, layout))
    window = sliding_window(z.sliding)
    doc = document_mask(doc_ids)
    cases += [("causal", causal_mask, causal_mask, None),
              (f"sliding window {z.sliding}", window, window, None),
              ("document", doc, doc, None)]
    flops_dense = attn_flops(B, H, S, S, D)
    for name, ft_mod, torch_mod, layout in cases:
        if not r.wanted(name):
            continue
        if r.skip("sparse", name, "flashtile") is not None:
            continue
        config = dict(batch=B, heads=H, seqlen=S, headdim=D, dtype=z.dtype, block=blk)

        def reference(b0, h0, rng_state, mod=ft_mod):
            return AttentionParams(softmax_scale=scale, bottom_right=False,
                                   mask_mod=shifted_mask_mod(mod, b0, h0)), None
        try:
            first, med, ft_bm = r.host_ms(lambda m=ft_mod: flashtile.create_block_mask(
                m, None, None, S, S, device=dev, BLOCK_SIZE=blk), reps=2)
            config.update(density=ft_bm.density(), flashtile_create_block_mask_ms=med)
        except Exception as exc:
            r.error("sparse", name, "flashtile", exc, config)
            continue
        prob = Problem(q, k, v, dout, reference, None, config)
        m = r.attention("sparse", name, Provider(
            "flashtile", lambda q, k, v, bm=ft_bm: flashtile.flex_attention(q, k, v, block_mask=bm),
            "bhsd", flex=True), prob, graph=True)
        m.note = "; ".join(x for x in (f"density {config['density']:.3f}", m.note) if x)
        if m.status == "ok":
            m.tflops = tflops(flops_dense * config["density"], m.ms)
            m.config["flops"] = "dense convention x block density"
        r.rec.write("sparse")
        if torch_create_block_mask is None:
            continue
        try:
            if layout is not None:
                layout_buf.copy_(layout)
            t_first, t_med, torch_bm = r.host_ms(lambda m=torch_mod: torch_create_block_mask(
                m, None, None, S, S, device=dev, BLOCK_SIZE=blk), reps=2)
            fx = torch_flex()
        except Exception as exc:
            r.error("sparse", name, "torch-flex", exc, config)
            continue
        tconfig = dict(config, torch_create_block_mask_ms=t_med)
        m = r.attention("sparse", name, Provider(
            "torch-flex", lambda q, k, v, bm=torch_bm, fx=fx: fx(q, k, v, block_mask=bm), "bhsd"),
            Problem(q, k, v, dout, reference, None, tconfig), graph=True)
        if m.status == "ok":
            m.tflops = tflops(flops_dense * config["density"], m.ms)
        r.rec.write("sparse")
        del ft_bm, torch_bm
        r.cleanup()


# ==============================================================================================
# Part 3: decoding (issue 5)
# ==============================================================================================

def copy_bandwidth(r: Runner, nbytes: int) -> Optional[float]:
    """GB/s of a device-to-device copy of ``nbytes``, counting bytes read + written."""
    item = COPY_ITEM                   # one name for the target formula; the size is in config
    if r.skip("decode", item, "torch") is not None:
        return None
    try:
        src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=r.device).normal_()
        dst = torch.empty_like(src)
        ms = r.time_ms(lambda: dst.copy_(src))
        ok = torch.equal(dst, src)
        gbps = 2 * nbytes / (ms * 1e-3) / 1e9
        r.log(f"decode | {item}: {ms:.3f} ms, {gbps:,.0f} GB/s (read + write)")
        r.rec.add(Measurement("decode", item, "torch", "ok" if ok else "WRONG", ms=ms, gbps=gbps,
                              config=dict(bytes=nbytes, counts="read + write")))
        src = dst = None
        r.cleanup()
        return gbps
    except Exception as exc:
        r.error("decode", item, "torch", exc)
        return None


def decode_inputs(batch, cache_len, hq, hkv, d, dtype, device, page: Optional[int], seed):
    """q ``(b, 1, hq, d)``, the logical caches ``(b, L, hkv, d)``, and the caches as the call
    takes them: the same tensors (contiguous) or pages scattered by a random block table."""
    gen = torch.Generator(device=device).manual_seed(seed)
    q = randn((batch, 1, hq, d), dtype, device, gen)
    k = randn((batch, cache_len, hkv, d), dtype, device, gen)
    v = randn((batch, cache_len, hkv, d), dtype, device, gen)
    if not page:
        return q, k, v, k, v, None
    per_seq = -(-cache_len // page)
    perm = torch.randperm(batch * per_seq, generator=gen, device=device)
    table = perm.to(torch.int32).view(batch, per_seq)
    pages = []
    for logical in (k, v):
        padded = torch.zeros(batch, per_seq * page, hkv, d, dtype=dtype, device=device)
        padded[:, :cache_len] = logical
        paged = torch.empty(batch * per_seq, page, hkv, d, dtype=dtype, device=device)
        paged[perm] = padded.view(batch * per_seq, page, hkv, d)
        pages.append(paged)
    return q, k, v, pages[0], pages[1], table


def check_decode(r: Runner, batch, cache_len, page) -> dict[str, dict]:
    """Check flashtile (and, contiguous only, both SDPA forms) on the full case: rows of the
    first and last sequence vs the float64 reference. ``{provider: check}``."""
    import flashtile
    from flashtile import AttentionParams
    z, dev, dt = r.z, r.device, r.z.torch_dtype
    hq, hkv, d = z.decode_hq, z.decode_hkv, z.decode_headdim
    q, k, v, kc, vc, table = decode_inputs(batch, cache_len, hq, hkv, d, dt, dev, page,
                                           r.args.seed)
    outs = {"flashtile": flashtile.flash_attn_with_kvcache(
        q, kc, vc, cache_seqlens=cache_len, block_table=table)}
    del kc, vc
    if not page:
        F = torch.nn.functional
        qs, ks, vs = (t.transpose(1, 2) for t in (q, k, v))
        try:
            outs["sdpa_gqa"] = F.scaled_dot_product_attention(qs, ks, vs,
                                                              enable_gqa=True).transpose(1, 2)
        except Exception as exc:
            outs["sdpa_gqa"] = exc
        try:
            g = hq // hkv
            outs["sdpa_expanded"] = F.scaled_dot_product_attention(
                qs, ks.repeat_interleave(g, 1), vs.repeat_interleave(g, 1)).transpose(1, 2)
        except Exception as exc:
            outs["sdpa_expanded"] = exc
    params = AttentionParams(softmax_scale=1.0 / math.sqrt(d))
    checks = {}
    for name, out in outs.items():
        if isinstance(out, Exception):
            checks[name] = {"ok": False, "reason": f"error: {_short(out)}", "worst_ratio": None}
            continue
        per = {}
        for b0 in sorted({0, batch - 1}):
            s = slice(b0, b0 + 1)
            per[f"b{b0}"] = judge({"out": out[s]}, q[s], k[s], v[s], None, params, grads=False,
                                  names=("out",))
        checks[name] = merge_checks(per)
    return checks


def run_decode(r: Runner, bandwidth: Optional[Callable] = None) -> None:
    """Copy bandwidth, then every (batch, cache_len) contiguous and paged: check, then time with
    ``bandwidth`` (default :func:`flashtile.kvcache.decode_bandwidth`) in each mode."""
    if bandwidth is None:
        from flashtile.kvcache import decode_bandwidth as bandwidth
    copy_gbps = copy_bandwidth(r, r.z.copy_bytes) if r.wanted("copy") else None
    for batch, n in r.z.decode_cases:
        for paged in (False, True):
            decode_case(r, batch, n, paged, bandwidth, copy_gbps)
            r.cleanup()


def decode_case(r: Runner, batch: int, n: int, paged: bool, bandwidth: Callable,
                copy_gbps: Optional[float]) -> None:
    z = r.z
    page = z.page if paged else None
    items = [(m, decode_item(batch, n, paged, m)) for m in r.args.decode_modes]
    items = [(m, item) for m, item in items if r.wanted(item)]
    if not items or r.skip("decode", items[0][1], "flashtile") is not None:
        return
    config = dict(batch=batch, cache_len=n, hq=z.decode_hq, hkv=z.decode_hkv,
                  headdim=z.decode_headdim, dtype=z.dtype, page=page,
                  bytes=2 * batch * n * z.decode_hkv * z.decode_headdim
                  * z.torch_dtype.itemsize)
    tag = f"b{batch} L{kfmt(n)} {'paged' if paged else 'contig'}"
    try:
        r.log(f"decode | {tag}: checking")
        checks = check_decode(r, batch, n, page)
        r.log(f"decode | {tag}: " + ", ".join(
            f"{p} {'ok' if c['ok'] else 'WRONG'} ({c.get('worst_ratio') or 0:.2f})"
            for p, c in checks.items()))
    except Exception as exc:
        for _, item in items:
            r.error("decode", item, "flashtile", exc, config)
        return
    finally:
        r.cleanup()
    for mode, item in items:
        if r.skip("decode", item, "flashtile", config) is not None:
            continue
        try:
            res = bandwidth(batch, n, z.decode_hq, z.decode_hkv, z.decode_headdim, z.torch_dtype,
                            paged_block=page, cuda_graph=(mode == "graph"),
                            device=str(r.device))
        except Exception as exc:
            m = r.error("decode", item, "flashtile", exc, config)
            m.check = checks.get("flashtile")
            r.rec.write("decode")
            continue
        finally:
            r.cleanup()
        cfg = dict(config, mode=mode, num_splits=res.get("num_splits"))
        for prov in ("flashtile", "sdpa_gqa", "sdpa_expanded"):
            if paged and prov != "flashtile":
                continue                # SDPA reads the same contiguous tensors either way
            _record_decode(r, item, prov, res, checks.get(prov), cfg, copy_gbps)


def _record_decode(r: Runner, item, prov, res, check, config, copy_gbps) -> None:
    err = (res.get("errors") or {}).get(prov)
    ms, gbps = res["ms"].get(prov), res["gbps"].get(prov)
    # the same call timed by do_bench (its write flush adds the L2's dirty write-back): info
    config = dict(config, gbps_dobench=(res.get("gbps_dobench") or {}).get(prov))
    if check is not None and not check["ok"]:
        status, ms, gbps, note = "WRONG", None, None, check.get("reason", "")[:200]
    elif err or ms is None:
        status, note = f"error: {err or 'not measured'}"[:300], ""
    else:
        status = "ok"
        note = f"{gbps / copy_gbps:.0%} of copy" if copy_gbps and gbps else ""
    r.log(f"decode | {item} | {prov}: {status}"
          + (f" {ms * 1e3:.1f} us, {gbps:,.0f} GB/s" if status == "ok" else ""))
    r.rec.add(Measurement("decode", item, prov, status, ms=ms, gbps=gbps, check=check,
                          note=note, config=config))


# ==============================================================================================
# Part 4: varlen (issue 5)
# ==============================================================================================

def run_varlen(r: Runner) -> None:
    import flashtile
    from flashtile import AttentionParams
    z, dev, dt = r.z, r.device, r.z.torch_dtype
    H, D = z.varlen_heads, z.varlen_headdim
    scale = 1.0 / math.sqrt(D)
    lengths = mixed_lengths(z.varlen_tokens, z.varlen_lo, z.varlen_hi, r.args.seed)
    cu_list = cu_seqlens(lengths)
    cu = torch.tensor(cu_list, dtype=torch.int32, device=dev)
    max_len = max(lengths)
    r.rec.note("varlen", f"{len(lengths)} sequences, lengths {min(lengths)}..{max_len} "
                         f"(mean {statistics.mean(lengths):.0f}), {sum(lengths)} tokens, seed "
                         f"{r.args.seed}")
    total = sum(lengths)
    gen = torch.Generator(device=dev).manual_seed(r.args.seed)
    packed = [randn((total, H, D), dt, dev, gen) for _ in range(4)]          # q, k, v, dout
    fixed_batch, fixed_len = max(1, z.varlen_tokens // z.varlen_hi), z.varlen_hi
    for causal in (False, True):
        var_item, fixed_item = varlen_items(z, causal)
        base = dict(heads=H, headdim=D, dtype=z.dtype, causal=causal)
        if r.wanted(var_item):
            _varlen_one(r, var_item, packed, lengths, cu_list, cu, max_len, causal, scale,
                        dict(base, sequences=len(lengths), tokens=total, max_seqlen=max_len,
                             lengths=lengths))
        if r.wanted(fixed_item):
            q, k, v, dout = qkv(fixed_batch, fixed_len, H, D, dt, dev, r.args.seed)

            def reference(b0, h0, rng_state, causal=causal):
                return AttentionParams(softmax_scale=scale, causal=causal,
                                       window_right=0 if causal else -1), None
            r.attention("varlen", fixed_item, Provider(
                "flashtile",
                lambda q, k, v, c=causal: flashtile.flash_attn_func(q, k, v, causal=c)),
                Problem(q, k, v, dout, reference,
                        attn_flops(fixed_batch, H, fixed_len, fixed_len, D, causal),
                        dict(base, batch=fixed_batch, seqlen=fixed_len)))
            del q, k, v, dout
            r.cleanup()


def _varlen_one(r: Runner, item, packed, lengths, cu_list, cu, max_len, causal, scale,
                config) -> None:
    """flash_attn_varlen_func fwd+bwd: check two sequences (the longest and the last) on the
    first and last head, then time; TFLOP/s over the real work only."""
    import flashtile
    from flashtile import AttentionParams
    skipped = r.skip("varlen", item, "flashtile", config)
    if skipped is not None:
        return
    r.log(f"varlen | {item} | flashtile: checking")
    leaves = None
    try:
        q, k, v, dout = packed
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]

        def call():
            return flashtile.flash_attn_varlen_func(*leaves, cu, cu, max_len, max_len,
                                                    causal=causal)
        out = call()
        out.backward(dout)
        got = {"out": out.detach(), **{n: t.grad for n, t in zip(GRAD_NAMES, leaves)}}
        del out
        params = AttentionParams(softmax_scale=scale, causal=causal,
                                 window_right=0 if causal else -1)
        H = q.shape[1]
        checks = {}
        for i in sorted({max(range(len(lengths)), key=lambda j: lengths[j]), len(lengths) - 1}):
            rows = slice(cu_list[i], cu_list[i + 1])
            for h0 in sorted({0, H - 1}):
                cols = slice(h0, h0 + 1)

                def sl(t):
                    return t[rows, cols].unsqueeze(0)          # (1, len, 1, d)
                checks[f"seq{i}h{h0}"] = judge({n: sl(t) for n, t in got.items()}, sl(q), sl(k),
                                               sl(v), sl(dout), params)
        del got
        check = merge_checks(checks)
        if not check["ok"]:
            r.log(f"varlen | {item} | flashtile: WRONG ({check['reason'][:200]})")
            r.rec.add(Measurement("varlen", item, "flashtile", "WRONG", check=check,
                                  config=config, note=check["reason"][:200]))
            return
        for t in leaves:
            t.grad = None
        ms = r.time_ms(lambda: call().backward(dout), grad_to_none=leaves)
        rate = tflops(varlen_flops(lengths, H, q.shape[2], causal), ms)
        r.log(f"varlen | {item} | flashtile: {ms:.3f} ms, {rate:.0f} TFLOP/s (real work; check "
              f"worst err/budget {check['worst_ratio'] or 0:.2f})")
        r.rec.add(Measurement("varlen", item, "flashtile", "ok", ms=ms, tflops=rate, check=check,
                              config=config))
    except Exception as exc:
        r.error("varlen", item, "flashtile", exc, config)
    finally:
        leaves = None
        r.cleanup()


# ==============================================================================================
# main
# ==============================================================================================

RUNNERS = {"fusion": run_fusion, "sparse": run_sparse, "decode": run_decode,
           "varlen": run_varlen}


def _commit() -> Optional[str]:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                              capture_output=True, text=True, timeout=5).stdout.strip() or None
    except Exception:
        return None


def build_meta(args, sizes: Sizes, device: torch.device) -> dict:
    meta = {"script": "scripts/feature_bench.py",
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            # the device copy of the tree has no .git: pass FLASHTILE_COMMIT=<sha> there
            "commit": os.environ.get("FLASHTILE_COMMIT") or _commit(),
            "torch": torch.__version__,
            "flashtile_autotune": os.environ.get("FLASHTILE_AUTOTUNE"),
            "quick": args.quick, "cpu_smoke": args.cpu_smoke, "sizes": asdict(sizes),
            "flop_convention": "fwd 4*b*h*sq*sk*d, halved when causal; fwd+bwd 3.5x fwd; "
                               "time = median of triton.testing.do_bench (decode graph rows: "
                               "cold_clean_ms, a read flush before each call)",
            "check_rule": "err <= 2*err(attention_reference in the same dtype) + floor "
                          "(floor x4 for dq/dk), on the first and last (batch, head) slice",
            "anchors_other_run": ANCHORS}
    try:
        import triton
        meta["triton"] = triton.__version__
    except Exception:
        meta["triton"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        meta["device"] = f"{props.name} ({props.multi_processor_count} SMs)"
    else:
        meta["device"] = "cpu (--cpu-smoke: numbers meaningless)"
    return meta


def _import_flashtile() -> str:
    """Make ``flashtile`` importable from the repository's src/ when it is not installed."""
    try:
        import flashtile
    except ImportError:
        sys.path.insert(0, str(REPO / "src"))
        import flashtile
    return flashtile.__file__


def main(argv=None) -> int:
    args = parse_args(argv)
    if not args.cpu_smoke and not torch.cuda.is_available():
        print("feature_bench.py: no CUDA GPU is visible (torch.cuda.is_available() is False). "
              "It measures on a GPU: run it on the GPU machine (commands in the module "
              "docstring), or pass --cpu-smoke for a dry run of the script's logic on tiny "
              "shapes.", file=sys.stderr, flush=True)
        return 2
    if args.autotune:
        os.environ["FLASHTILE_AUTOTUNE"] = "1"
    else:
        os.environ.setdefault("FLASHTILE_AUTOTUNE", "0")
    _import_flashtile()
    device = torch.device("cpu" if args.cpu_smoke else "cuda")
    sizes = sizes_for(args.quick, args.cpu_smoke)
    recorder = Recorder(args.out, build_meta(args, sizes, device),
                        make_targets(sizes, tuple(args.decode_modes)))
    runner = Runner(args, sizes, recorder, device, start=_T0)
    runner.log(f"parts {','.join(args.part)}; budget {args.budget_s:g}s; out {args.out}; "
               f"FLASHTILE_AUTOTUNE={os.environ['FLASHTILE_AUTOTUNE']}; "
               f"device {recorder.meta['device']}")
    for part in args.part:
        recorder.start_part(part)
        if runner.over_budget():
            recorder.note(part, f"not run: --budget-s {args.budget_s:g} exceeded before it began")
            runner.log(f"{part}: not run (budget)")
            continue
        runner.log(f"=== {part}")
        try:
            RUNNERS[part](runner)
        except Exception as exc:           # a bug in one part's set-up must not stop the others
            recorder.note(part, f"part stopped early: {_short(exc)}")
            runner.log(f"{part}: stopped early: {_short(exc)}")
            traceback.print_exc()
        runner.cleanup()
        recorder.write(part)
        # Print now: a later part cut short loses nothing.
        print_tables(recorder, [part], sizes, tuple(args.decode_modes))
    runner.log(f"done; JSON in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
