"""What one benchmark point is (:class:`BenchCase`), how many FLOPs it counts, and the grid.

FLOPs follow flash-attention's benchmarks, so TFLOP/s figures compare with theirs and with
``shared/anchors``: forward ``2*b*h*sq*sk*(d + dv)`` (``4*b*h*sq*sk*d`` when ``dv == d``: one
matmul for ``Q K^T``, one for ``P V``), halved when causal; backward 2.5x forward (five matmuls of
which one recomputes ``S``); forward+backward 3.5x forward.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

MODES = ("fwd", "bwd", "fwdbwd")
MODE_FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
FLOP_CONVENTION = ("fwd = 2*b*h*sq*sk*(d+dv) (= 4*b*h*sq*sk*d), halved when causal; "
                   "bwd = 2.5x fwd; fwdbwd = 3.5x fwd (flash-attention's benchmark convention)")

# The float64 reference materialises (batch, nheads, sq, sk) several times (scores, probs and
# their gradients); 2**24 elements keeps one copy at 128 MiB.
CHECK_MAX_SEQLEN = 1024
CHECK_MAX_SCORES = 2 ** 24


def attention_flops(batch: int, nheads: int, seqlen_q: int, seqlen_k: int, headdim: int,
                    headdim_v: int, causal: bool, mode: str) -> float:
    """FLOPs of one attention call in flash-attention's convention (see module docstring)."""
    forward = 2.0 * batch * nheads * seqlen_q * seqlen_k * (headdim + headdim_v)
    if causal:
        forward /= 2
    return forward * MODE_FLOP_FACTOR[mode]


@dataclass(frozen=True)
class BenchCase:
    """One point of the grid: a shape, a mask, a dtype and what is timed.

    Square attention (``seqlen_q == seqlen_k == seqlen``), so causal alignment (top-left for SDPA,
    bottom-right for flash-attn) is the same for every provider.
    """

    batch: int
    seqlen: int
    nheads: int
    nheads_kv: int
    headdim: int
    causal: bool
    dtype: str              # key of DTYPES
    mode: str               # one of MODES
    headdim_v: int | None = None    # None: same as headdim

    @property
    def dv(self) -> int:
        return self.headdim if self.headdim_v is None else self.headdim_v

    @property
    def gqa(self) -> int:
        """Query heads per key/value head (1 = multi-head attention)."""
        return self.nheads // self.nheads_kv

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def needs_grad(self) -> bool:
        return self.mode != "fwd"

    @property
    def scale(self) -> float:
        return self.headdim ** -0.5

    @property
    def flops(self) -> float:
        return attention_flops(self.batch, self.nheads, self.seqlen, self.seqlen, self.headdim,
                               self.dv, self.causal, self.mode)

    @property
    def scores(self) -> int:
        """Elements of the ``(batch, nheads, seqlen, seqlen)`` score matrix."""
        return self.batch * self.nheads * self.seqlen * self.seqlen

    def check_instance(self) -> "BenchCase":
        """A copy small enough for the float64 reference, with the same head dim, mask, dtype
        and GQA ratio: seqlen capped at 1024, then batch 1, then fewer key/value heads."""
        case = replace(self, seqlen=min(self.seqlen, CHECK_MAX_SEQLEN))
        if case.scores > CHECK_MAX_SCORES:
            case = replace(case, batch=1)
        while case.scores > CHECK_MAX_SCORES and case.nheads_kv > 1:
            kv = case.nheads_kv // 2
            case = replace(case, nheads_kv=kv, nheads=kv * self.gqa)
        return case

    def shape_key(self) -> "BenchCase":
        """The case without its mode: inputs and reference outputs depend only on this."""
        return replace(self, mode="fwd")

    def label(self) -> str:
        """Readable id, e.g. ``b16-h16/16-s1024-d128-causal-bf16-fwd``."""
        mask = "causal" if self.causal else "full"
        dv = "" if self.dv == self.headdim else f"-dv{self.dv}"
        return (f"b{self.batch}-h{self.nheads}/{self.nheads_kv}-s{self.seqlen}-d{self.headdim}"
                f"{dv}-{mask}-{self.dtype}-{self.mode}")

    def as_dict(self) -> dict:
        """The JSON fields (names as in ``shared/anchors``: b, h, s, d)."""
        return {"b": self.batch, "h": self.nheads, "hkv": self.nheads_kv, "s": self.seqlen,
                "d": self.headdim, "dv": self.dv, "causal": self.causal, "dtype": self.dtype,
                "mode": self.mode, "gqa": self.gqa, "flops": self.flops}


@dataclass(frozen=True)
class GridSpec:
    """The benchmark grid as the user asked for it (resolved from the command line)."""

    seqlens: tuple[int, ...]
    headdims: tuple[int, ...]
    causal: tuple[bool, ...]
    dtypes: tuple[str, ...]
    modes: tuple[str, ...]
    gqa: int = 1
    nheads: int | None = None      # None: 2048 // headdim (hidden size 2048, like the anchors)
    batch: int | None = None       # None: tokens // seqlen
    tokens: int = 16384


def resolve_heads(spec: GridSpec, headdim: int) -> tuple[int, int, str | None]:
    """``(nheads, nheads_kv, note)`` for one head dim; the note says what was rounded."""
    if spec.nheads is not None:
        if spec.nheads % spec.gqa:
            raise ValueError(f"--nheads {spec.nheads} is not a multiple of --gqa {spec.gqa}; "
                             f"pick nheads = k * {spec.gqa}")
        return spec.nheads, spec.nheads // spec.gqa, None
    nheads = max(1, 2048 // headdim)
    rounded = max(spec.gqa, nheads - nheads % spec.gqa)
    note = None
    if rounded != nheads:
        note = (f"d={headdim}: nheads 2048/{headdim} = {nheads} rounded to {rounded}, "
                f"a multiple of --gqa {spec.gqa}")
    return rounded, rounded // spec.gqa, note


def resolve_batch(spec: GridSpec, seqlen: int) -> tuple[int, str | None]:
    """``(batch, note)`` for one seqlen: ``--batch`` or ``tokens // seqlen`` (at least 1)."""
    if spec.batch is not None:
        return spec.batch, None
    batch = max(1, spec.tokens // seqlen)
    if batch * seqlen != spec.tokens:
        return batch, (f"s={seqlen}: {spec.tokens} tokens is not a multiple of the seqlen; "
                       f"batch rounded to {batch} ({batch * seqlen} tokens)")
    return batch, None


def build_cases(spec: GridSpec) -> tuple[list[BenchCase], list[str]]:
    """All cases of the grid, in table order, and notes about rounded batch/head counts."""
    cases, notes = [], []
    for dtype in spec.dtypes:
        for mode in spec.modes:
            for headdim in spec.headdims:
                nheads, nheads_kv, note = resolve_heads(spec, headdim)
                notes.append(note)
                for causal in spec.causal:
                    for seqlen in spec.seqlens:
                        batch, note = resolve_batch(spec, seqlen)
                        notes.append(note)
                        cases.append(BenchCase(batch=batch, seqlen=seqlen, nheads=nheads,
                                               nheads_kv=nheads_kv, headdim=headdim,
                                               causal=causal, dtype=dtype, mode=mode))
    unique_notes = list(dict.fromkeys(n for n in notes if n))
    return cases, unique_notes
