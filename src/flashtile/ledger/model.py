"""The ledger's model: FLOPs, memory traffic and extra memory of standard vs tiled attention.

Pure arithmetic (no torch, no GPU). Three frozen dataclasses describe what is computed and on
what; :func:`estimate` returns a :class:`LedgerResult`.

Notation (per batch element and head unless a formula says otherwise):

- ``sq``/``sk``: query/key rows, ``d``/``dv``: QK and V head dims, ``e``: bytes per element,
  ``hq``/``hkv``: query/KV heads (``G = hq // hkv`` query heads share one KV head).
- ``SS = b * hq * sq * sk``: score elements (the N x N matrix over all heads).
- ``M``: SRAM (shared memory) per SM in bytes.

Three traffic figures, because "HBM accesses" means different things to different readers:

``standard`` (eager PyTorch)
    What ``measure.eager_attention`` (nanoGPT's ``matmul -> * scale -> [mask] -> softmax ->
    [dropout] -> matmul``) reads and writes, kernel by kernel. Every N x N intermediate makes a
    round trip through HBM: Theta(N d + N^2). This is also what Nsight Compute measures for it.

``tiled``, *tile loads*
    The paper's accounting (Theorem 2): every tile a program loads into SRAM counts as an HBM
    read, every result it stores as a write. K/V are re-read once per query block, so this is
    ``Theta(N^2 d / BLOCK) = Theta(N^2 d^2 / M)`` with ``BLOCK = Theta(M / d)``. On a GPU these
    loads are served by L2 and then HBM; Nsight Compute's L2 sector counts see them. The counts
    equal, byte for byte, what flashtile's kernels load and store under Triton's interpreter
    (``tests/test_ledger.py``).

``tiled``, *DRAM*
    What reaches HBM once the L2 cache catches re-reads: programs that share a K/V head run at
    the same time (consecutive program ids), so a head's K/V come from DRAM once per *wave* of
    such programs, as long as the concurrently used K/V fit in L2. Close to the compulsory
    ``Theta(N d)`` traffic on today's GPUs; this is what ``dram__bytes`` in ncu measures.

FLOPs count the matmuls actually executed (2 per multiply-add) plus a small per-score-element
count for softmax, scaling, masking and dropout. ``conventional_flops`` gives flash-attention's
benchmark convention (fwd ``4 b h sq sk d``, halved when causal, bwd 2.5x) used for TFLOP/s.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Optional

DTYPE_BYTES = {"fp32": 4, "float32": 4, "fp16": 2, "float16": 2, "bf16": 2, "bfloat16": 2}
STAT_BYTES = 4  # LSE and D = rowsum(dO * O) are float32 per query row

# Per score element, non-matmul work (documented guesses of the instruction count; they matter
# only for the small "softmax FLOPs" line, never for HBM traffic).
_SOFTMAX_FWD_STANDARD = 6   # scale, max, subtract, exp, sum, divide
_SOFTMAX_BWD_STANDARD = 5   # P * dP, row sum, subtract, multiply, scale
_SOFTMAX_FWD_TILED = 5      # scale (folded into exp2), max, subtract, exp, sum
_SOFTMAX_BWD_TILED = 5      # per recomputation: scale, subtract LSE, exp; dS: subtract D, multiply
_DROPOUT_PER_ELEMENT = 1


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Workload:
    """One attention call: shapes, dtype and the features that change the work.

    Attributes:
        batch, nheads, seqlen_q, headdim: the query side (``nheads`` query heads).
        seqlen_k: key length (default ``seqlen_q``).
        headdim_v: V head dim (default ``headdim``).
        nheads_kv: KV heads (default ``nheads``; fewer means GQA/MQA).
        dtype_bytes: bytes per element of Q/K/V/O and the gradients (2 for fp16/bf16).
        causal: bottom-right aligned causal mask (flash-attn convention).
        dropout_p: dropout on the probabilities (the tiled kernels replay it from the RNG seed;
            eager stores a mask).
        density: fraction of non-zero blocks for block-sparse attention (1.0 = dense). Scales the
            N^2 terms of the tiled model; eager attention computes every block regardless.

    Example:
        >>> Workload(batch=64, nheads=16, seqlen_q=1024, headdim=64).label
        'b64 h16 N1024 d64 16-bit'
    """

    batch: int
    nheads: int
    seqlen_q: int
    headdim: int
    seqlen_k: Optional[int] = None
    headdim_v: Optional[int] = None
    nheads_kv: Optional[int] = None
    dtype_bytes: int = 2
    causal: bool = False
    dropout_p: float = 0.0
    density: float = 1.0

    def __post_init__(self):
        if self.seqlen_k is None:
            object.__setattr__(self, "seqlen_k", self.seqlen_q)
        if self.headdim_v is None:
            object.__setattr__(self, "headdim_v", self.headdim)
        if self.nheads_kv is None:
            object.__setattr__(self, "nheads_kv", self.nheads)
        for name in ("batch", "nheads", "seqlen_q", "seqlen_k", "headdim", "headdim_v",
                     "nheads_kv", "dtype_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Workload.{name} must be a positive int, got {value!r}")
        if self.nheads % self.nheads_kv:
            raise ValueError(f"Workload.nheads ({self.nheads}) must be a multiple of nheads_kv "
                             f"({self.nheads_kv}); pick nheads_kv among the divisors of nheads")
        if not 0.0 <= self.dropout_p < 1.0:
            raise ValueError(f"Workload.dropout_p must be in [0, 1), got {self.dropout_p!r}")
        if not 0.0 < self.density <= 1.0:
            raise ValueError(f"Workload.density must be in (0, 1], got {self.density!r}")

    @property
    def group(self) -> int:
        """Query heads per KV head."""
        return self.nheads // self.nheads_kv

    @property
    def label(self) -> str:
        parts = [f"b{self.batch}", f"h{self.nheads}"]
        if self.nheads_kv != self.nheads:
            parts[-1] += f"/{self.nheads_kv}"
        parts.append(f"N{self.seqlen_q}" if self.seqlen_k == self.seqlen_q
                     else f"Nq{self.seqlen_q} Nk{self.seqlen_k}")
        parts.append(f"d{self.headdim}" + (f" dv{self.headdim_v}"
                                           if self.headdim_v != self.headdim else ""))
        parts.append({2: "16-bit", 4: "fp32"}.get(self.dtype_bytes, f"{self.dtype_bytes}B"))
        if self.causal:
            parts.append("causal")
        if self.dropout_p:
            parts.append(f"dropout {self.dropout_p:g}")
        if self.density < 1.0:
            parts.append(f"density {self.density:g}")
        return " ".join(parts)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Hardware:
    """What the memory model needs to know about a GPU.

    Attributes:
        name: for the report.
        sram_bytes: shared memory per SM (the paper's ``M``).
        l2_bytes: L2 cache size (catches re-reads in the DRAM model).
        num_sms: streaming multiprocessors (how many programs run at once).
        hbm_bytes_per_s: achievable HBM bandwidth (for the roofline time), or None.
        matmul_flops_per_s: 16-bit tensor-core matmul peak (for the roofline time), or None.
    """

    name: str
    sram_bytes: int
    l2_bytes: int
    num_sms: int
    hbm_bytes_per_s: Optional[float] = None
    matmul_flops_per_s: Optional[float] = None

    def with_(self, **changes) -> "Hardware":
        return replace(self, **changes)

    @classmethod
    def preset(cls, name: str) -> "Hardware":
        """``"h200"``, ``"h100"`` or ``"a100"`` (values below; H200 peaks measured on the
        anchor run: 4.26 TB/s copy, 722 TFLOP/s bf16 matmul)."""
        key = name.lower()
        if key not in PRESETS:
            raise ValueError(f"unknown hardware preset {name!r}; choose one of {sorted(PRESETS)}")
        return PRESETS[key]

    @classmethod
    def present(cls) -> "Hardware":
        """The current CUDA device (torch), else the H200 preset."""
        try:
            import torch
            if not torch.cuda.is_available():
                return PRESETS["h200"]
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
        except Exception:  # pragma: no cover - depends on the machine
            return PRESETS["h200"]
        base = next((p for k, p in PRESETS.items() if k.upper() in props.name.upper()), None)
        sram = getattr(props, "shared_memory_per_multiprocessor", 0) or (
            base.sram_bytes if base else 228 * 1024)
        l2 = getattr(props, "L2_cache_size", 0) or (base.l2_bytes if base else 50 * 2**20)
        return cls(name=props.name, sram_bytes=int(sram), l2_bytes=int(l2),
                   num_sms=int(props.multi_processor_count),
                   hbm_bytes_per_s=base.hbm_bytes_per_s if base else None,
                   matmul_flops_per_s=base.matmul_flops_per_s if base else None)


PRESETS = {
    "h200": Hardware("NVIDIA H200 (preset)", sram_bytes=228 * 1024, l2_bytes=50 * 2**20,
                     num_sms=132, hbm_bytes_per_s=4.265e12, matmul_flops_per_s=722e12),
    "h100": Hardware("NVIDIA H100 SXM (preset)", sram_bytes=228 * 1024, l2_bytes=50 * 2**20,
                     num_sms=132, hbm_bytes_per_s=3.35e12 * 0.9, matmul_flops_per_s=989e12 * 0.7),
    "a100": Hardware("NVIDIA A100 40GB (preset)", sram_bytes=164 * 1024, l2_bytes=40 * 2**20,
                     num_sms=108, hbm_bytes_per_s=1.555e12 * 0.9, matmul_flops_per_s=312e12 * 0.8),
}


@dataclass(frozen=True)
class TileConfig:
    """Block sizes and pass structure of the tiled kernels.

    Forward: a grid over query blocks of ``fwd_block_m`` rows; each program streams every
    visible K/V tile of ``fwd_block_n`` rows and writes O and LSE once.

    Backward, ``backward="atomic"`` (flashtile's one pass: by default where the Gluon dK/dV
    kernel measured it ahead, or with ``FLASHTILE_BWD_DQ=atomic``; flash-attn 2 style): one
    pass over KV blocks as the dK/dV pass below that also adds each tile's dQ share into a
    float32 buffer with atomic adds (one fewer recomputation, more dQ traffic), plus the zeros
    of that buffer (written by the preprocess kernel, or by a fill without one) and its
    float32 -> dtype conversion.

    ``backward="two-pass"`` (the model's default; flashtile's with ``deterministic=True`` and
    wherever the one pass did not measure ahead; no atomics):

    - preprocess: ``D = rowsum(dO * O)`` (reads O, dO; writes D);
    - dK/dV pass: a grid over KV blocks of ``dkdv_block_n`` rows; each program keeps its K/V block
      on chip and loops over the visible query blocks (``dkdv_block_m`` rows) of *every* query head
      of its GQA group, reading Q, dO, LSE and D, recomputing P and dS;
    - dQ pass: a grid over query blocks of ``dq_block_m`` rows; each loops over the visible KV
      blocks (``dq_block_n`` rows), reading K and V, recomputing P and dS (QK^T and dO V^T again).

    ``ctas_per_sm``: programs resident per SM (for the DRAM/L2 model).
    """

    fwd_block_m: int = 128
    fwd_block_n: int = 64
    dkdv_block_n: int = 128
    dkdv_block_m: int = 64
    dq_block_m: int = 128
    dq_block_n: int = 64
    backward: str = "two-pass"
    preprocess: bool = True
    ctas_per_sm: int = 1

    def __post_init__(self):
        for name in ("fwd_block_m", "fwd_block_n", "dkdv_block_n", "dkdv_block_m", "dq_block_m",
                     "dq_block_n", "ctas_per_sm"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"TileConfig.{name} must be a positive int, got {value!r}")
        if self.backward not in ("two-pass", "atomic"):
            raise ValueError(f"TileConfig.backward must be 'two-pass' or 'atomic', got "
                             f"{self.backward!r}")

    def with_(self, **changes) -> "TileConfig":
        return replace(self, **changes)

    @classmethod
    def from_sram(cls, sram_bytes: int, headdim: int, headdim_v: Optional[int] = None,
                  dtype_bytes: int = 2, power_of_two: bool = False, **changes) -> "TileConfig":
        """The paper's rule: every block gets ``B = M / (4 d e)`` rows (the Q, K, V and O tiles
        each take a quarter of SRAM), so the number of passes over K/V is ``N / B = 4 N d e / M``
        and the streamed traffic is ``Theta(N^2 d^2 / M)``. ``power_of_two`` rounds ``B`` down
        to a power of two (what a kernel would launch)."""
        width = max(headdim, headdim_v or headdim)
        block = max(1, sram_bytes // (4 * width * dtype_bytes))
        if power_of_two:
            block = 1 << (block.bit_length() - 1)
        return cls(fwd_block_m=block, fwd_block_n=block, dkdv_block_n=block, dkdv_block_m=block,
                   dq_block_m=block, dq_block_n=block, **changes)

    @classmethod
    def from_env(cls, base: Optional["TileConfig"] = None) -> "TileConfig":
        """``base`` (default config) with ``FLASHTILE_FWD_BLOCK_M`` / ``FLASHTILE_FWD_BLOCK_N``
        applied, the variables the kernels honour to force forward block sizes."""
        from ..kernels.common import env_block      # (the kernels' own reading of them)
        base = base or cls()
        changes = {attr: value for var, attr in (("FLASHTILE_FWD_BLOCK_M", "fwd_block_m"),
                                                 ("FLASHTILE_FWD_BLOCK_N", "fwd_block_n"))
                   if (value := env_block(var)) is not None}
        return base.with_(**changes) if changes else base


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Traffic:
    """Bytes one kernel (or one eager op) moves between HBM and the chip.

    ``stream`` is the part of ``read`` that is re-read data (K/V per query block, Q/dO per KV
    block): the N^2 term of the tiled model; zero for eager ops.
    """

    name: str
    read: float
    write: float
    stream: float = 0.0

    @property
    def total(self) -> float:
        return self.read + self.write


def _sum(items) -> float:
    return float(sum(t.total for t in items))


@dataclass(frozen=True)
class LedgerResult:
    """The ledger of one workload: FLOPs, traffic and extra memory, standard vs tiled.

    FLOP fields count executed matmul FLOPs (2 per multiply-add); ``*_softmax_flops`` the
    per-element rest. Traffic fields are tuples of :class:`Traffic` (per eager op or per tiled
    kernel); properties sum them. Memory fields are the peak bytes allocated beyond the inputs
    (Q, K, V, dO) during one forward+backward step.
    """

    workload: Workload
    hardware: Hardware
    tiles: TileConfig
    standard_flops_fwd: float
    standard_flops_bwd: float
    tiled_flops_fwd: float
    tiled_flops_bwd: float
    standard_softmax_flops_fwd: float
    standard_softmax_flops_bwd: float
    tiled_softmax_flops_fwd: float
    tiled_softmax_flops_bwd: float
    standard_fwd: tuple = field(repr=False)
    standard_bwd: tuple = field(repr=False)
    tiled_fwd: tuple = field(repr=False)           # tile loads (paper accounting)
    tiled_bwd: tuple = field(repr=False)
    tiled_dram_fwd: tuple = field(repr=False)      # after L2 reuse
    tiled_dram_bwd: tuple = field(repr=False)
    textbook_standard_fwd: float = 0.0             # the paper's Algorithm 0 / 3 counts
    textbook_standard_bwd: float = 0.0
    standard_memory_fwd: float = 0.0
    standard_memory_peak: float = 0.0
    tiled_memory_fwd: float = 0.0
    tiled_memory_peak: float = 0.0
    theta_term: float = 0.0                        # b * hq * sq * sk * d^2 * e^2 / M, in bytes

    # -- sums -----------------------------------------------------------------------------------
    @property
    def standard_flops(self) -> float:
        return self.standard_flops_fwd + self.standard_flops_bwd

    @property
    def tiled_flops(self) -> float:
        return self.tiled_flops_fwd + self.tiled_flops_bwd

    @property
    def standard_bytes_fwd(self) -> float:
        return _sum(self.standard_fwd)

    @property
    def standard_bytes_bwd(self) -> float:
        return _sum(self.standard_bwd)

    @property
    def standard_bytes(self) -> float:
        return self.standard_bytes_fwd + self.standard_bytes_bwd

    @property
    def tiled_bytes_fwd(self) -> float:
        return _sum(self.tiled_fwd)

    @property
    def tiled_bytes_bwd(self) -> float:
        return _sum(self.tiled_bwd)

    @property
    def tiled_bytes(self) -> float:
        return self.tiled_bytes_fwd + self.tiled_bytes_bwd

    @property
    def tiled_dram_bytes_fwd(self) -> float:
        return _sum(self.tiled_dram_fwd)

    @property
    def tiled_dram_bytes_bwd(self) -> float:
        return _sum(self.tiled_dram_bwd)

    @property
    def tiled_dram_bytes(self) -> float:
        return self.tiled_dram_bytes_fwd + self.tiled_dram_bytes_bwd

    @property
    def tiled_stream_bytes(self) -> float:
        """The N^2 term of the tiled traffic: all re-read tile loads, forward and backward."""
        return float(sum(t.stream for t in self.tiled_fwd + self.tiled_bwd))

    @property
    def tiled_stream_bytes_fwd(self) -> float:
        return float(sum(t.stream for t in self.tiled_fwd))

    @property
    def theta_constant(self) -> float:
        """``tiled_stream_bytes / theta_term``: constant when blocks follow ``M / (4 d e)``."""
        return self.tiled_stream_bytes / self.theta_term if self.theta_term else float("nan")

    def roofline_ms(self, which: str) -> Optional[float]:
        """Lower bound on time (ms): max(matmul FLOPs / peak, DRAM bytes / bandwidth), fwd+bwd.

        ``which`` is ``"standard"`` or ``"tiled"``. None if the hardware has no peaks or the
        dtype is not 16-bit (the peak is the 16-bit tensor-core one)."""
        hw = self.hardware
        if not hw.hbm_bytes_per_s or not hw.matmul_flops_per_s or self.workload.dtype_bytes != 2:
            return None
        flops, nbytes = ((self.standard_flops, self.standard_bytes) if which == "standard"
                         else (self.tiled_flops, self.tiled_dram_bytes))
        return 1e3 * max(flops / hw.matmul_flops_per_s, nbytes / hw.hbm_bytes_per_s)

    def to_dict(self) -> dict:
        """Everything, JSON-ready (traffic per op/kernel included)."""
        def ops(items):
            return [{"name": t.name, "read": t.read, "write": t.write, "stream": t.stream}
                    for t in items]
        return {
            "workload": self.workload.to_dict(), "label": self.workload.label,
            "hardware": asdict(self.hardware), "tiles": asdict(self.tiles),
            "flops": {
                "standard_fwd": self.standard_flops_fwd, "standard_bwd": self.standard_flops_bwd,
                "tiled_fwd": self.tiled_flops_fwd, "tiled_bwd": self.tiled_flops_bwd,
                "standard_softmax_fwd": self.standard_softmax_flops_fwd,
                "standard_softmax_bwd": self.standard_softmax_flops_bwd,
                "tiled_softmax_fwd": self.tiled_softmax_flops_fwd,
                "tiled_softmax_bwd": self.tiled_softmax_flops_bwd,
                "conventional_fwd": conventional_flops(self.workload, "fwd"),
                "conventional_fwdbwd": conventional_flops(self.workload, "fwdbwd"),
            },
            "bytes": {
                "standard_fwd": self.standard_bytes_fwd, "standard_bwd": self.standard_bytes_bwd,
                "textbook_standard_fwd": self.textbook_standard_fwd,
                "textbook_standard_bwd": self.textbook_standard_bwd,
                "tiled_tile_loads_fwd": self.tiled_bytes_fwd,
                "tiled_tile_loads_bwd": self.tiled_bytes_bwd,
                "tiled_dram_fwd": self.tiled_dram_bytes_fwd,
                "tiled_dram_bwd": self.tiled_dram_bytes_bwd,
                "tiled_stream": self.tiled_stream_bytes,
                "theta_term": self.theta_term, "theta_constant": self.theta_constant,
            },
            "ops": {"standard_fwd": ops(self.standard_fwd), "standard_bwd": ops(self.standard_bwd),
                    "tiled_fwd": ops(self.tiled_fwd), "tiled_bwd": ops(self.tiled_bwd),
                    "tiled_dram_fwd": ops(self.tiled_dram_fwd),
                    "tiled_dram_bwd": ops(self.tiled_dram_bwd)},
            "memory": {"standard_fwd": self.standard_memory_fwd,
                       "standard_peak": self.standard_memory_peak,
                       "tiled_fwd": self.tiled_memory_fwd, "tiled_peak": self.tiled_memory_peak},
            "roofline_ms": {"standard": self.roofline_ms("standard"),
                            "tiled": self.roofline_ms("tiled")},
        }


# --------------------------------------------------------------------------------------------
# Block visibility (which tiles a program loads)
# --------------------------------------------------------------------------------------------

def kv_rows_per_query_block(sq: int, sk: int, block_m: int, block_n: int,
                            causal: bool) -> list[tuple[int, int]]:
    """``(query rows, KV rows loaded)`` for each query block of ``block_m`` rows.

    Without a mask every block loads all ``sk`` rows. Causal (bottom-right, ``off = sk - sq``):
    query row ``i`` sees keys ``j <= i + off``; a block loads whole ``block_n`` tiles up to the
    one holding its last visible key (the diagonal tile is loaded, then masked) and nothing
    after it. A block that sees no key loads nothing.
    """
    off = sk - sq
    blocks = []
    for start in range(0, sq, block_m):
        rows = min(block_m, sq - start)
        if not causal:
            blocks.append((rows, sk))
            continue
        visible_end = min(sk, start + rows + off)          # keys [0, visible_end)
        loaded = 0 if visible_end <= 0 else min(sk, -(-visible_end // block_n) * block_n)
        blocks.append((rows, loaded))
    return blocks


def query_rows_per_kv_block(sq: int, sk: int, block_n: int, block_m: int,
                            causal: bool) -> list[tuple[int, int]]:
    """``(KV rows, query rows loaded)`` for each KV block of ``block_n`` rows (the dK/dV pass).

    Causal: key ``j`` is seen by queries ``i >= j - off``; the loop starts at the query tile
    (``block_m`` rows) holding the first such query and runs to the end.
    """
    off = sk - sq
    blocks = []
    for start in range(0, sk, block_n):
        rows = min(block_n, sk - start)
        if not causal:
            blocks.append((rows, sq))
            continue
        first = max(0, start - off)
        loaded = 0 if first >= sq else sq - (first // block_m) * block_m
        blocks.append((rows, loaded))
    return blocks


def visible_pairs(w: Workload) -> float:
    """Score elements that are not masked, over all batches and heads (exact)."""
    if not w.causal:
        pairs = w.seqlen_q * w.seqlen_k
    else:
        off = w.seqlen_k - w.seqlen_q
        # sum over i of clamp(i + off + 1, 0, sk)
        pairs = sum(min(w.seqlen_k, max(0, i + off + 1)) for i in range(w.seqlen_q))
    return float(w.batch * w.nheads * pairs * w.density)


def conventional_flops(w: Workload, mode: str = "fwdbwd") -> float:
    """flash-attn's benchmark convention: fwd ``2 b h sq sk (d + dv)`` (``4 b h sq sk d`` when
    ``dv == d``), halved when causal; bwd 2.5x fwd; fwd+bwd 3.5x fwd. ``mode`` in
    ``fwd``/``bwd``/``fwdbwd``."""
    fwd = 2.0 * w.batch * w.nheads * w.seqlen_q * w.seqlen_k * (w.headdim + w.headdim_v)
    fwd *= w.density * (0.5 if w.causal else 1.0)
    factor = {"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5}
    if mode not in factor:
        raise ValueError(f"mode must be one of {sorted(factor)}, got {mode!r}")
    return fwd * factor[mode]


# --------------------------------------------------------------------------------------------
# Standard attention (eager PyTorch), op by op
# --------------------------------------------------------------------------------------------

def standard_ops(w: Workload) -> tuple[tuple[Traffic, ...], tuple[Traffic, ...]]:
    """Traffic of ``measure.eager_attention``'s kernels, forward and backward (autograd order).

    Every op reads its inputs from and writes its output to HBM; an N x N tensor (``SS * e``
    bytes) is far larger than L2 at the sizes where attention matters. The causal mask is one
    ``(sq, sk)`` bool shared by all heads (counted once per op that reads it).
    """
    e, b, hq, hkv = w.dtype_bytes, w.batch, w.nheads, w.nheads_kv
    sq, sk, d, dv = w.seqlen_q, w.seqlen_k, w.headdim, w.headdim_v
    ss = float(b * hq * sq * sk)                  # score elements
    n2 = ss * e                                   # one N x N tensor
    q_bytes, o_bytes = b * hq * sq * d * e, b * hq * sq * dv * e
    kq_bytes, vq_bytes = b * hq * sk * d * e, b * hq * sk * dv * e     # K, V per query head
    kv_native = b * hkv * sk * (d + dv) * e
    mask = float(sq * sk) if w.causal else 0.0
    drop_mask = ss if w.dropout_p > 0 else 0.0    # bool mask, 1 byte per element

    fwd, bwd = [], []
    if hkv != hq:
        fwd.append(Traffic("expand K/V to query heads (GQA)", kv_native, kq_bytes + vq_bytes))
    fwd.append(Traffic("S = Q K^T (matmul)", q_bytes + kq_bytes, n2))
    fwd.append(Traffic("S = S * scale", n2, n2))
    if w.causal:
        fwd.append(Traffic("S = masked_fill(S, causal)", n2 + mask, n2))
    fwd.append(Traffic("P = softmax(S)", n2, n2))
    if w.dropout_p > 0:
        fwd.append(Traffic("P = dropout(P)", n2, n2 + drop_mask))
    fwd.append(Traffic("O = P V (matmul)", n2 + vq_bytes, o_bytes))

    bwd.append(Traffic("dP = dO V^T (matmul)", o_bytes + vq_bytes, n2))
    bwd.append(Traffic("dV = P^T dO (matmul)", n2 + o_bytes, vq_bytes))
    if w.dropout_p > 0:
        bwd.append(Traffic("dropout backward", n2 + drop_mask, n2))
    bwd.append(Traffic("softmax backward", 2 * n2, n2))
    if w.causal:
        bwd.append(Traffic("masked_fill backward", n2 + mask, n2))
    bwd.append(Traffic("scale backward", n2, n2))
    bwd.append(Traffic("dQ = dS K (matmul)", n2 + kq_bytes, q_bytes))
    bwd.append(Traffic("dK = dS^T Q (matmul)", n2 + q_bytes, kq_bytes))
    if hkv != hq:
        bwd.append(Traffic("sum dK/dV over the GQA group", kq_bytes + vq_bytes, kv_native))
    return tuple(fwd), tuple(bwd)


def textbook_standard_bytes(w: Workload) -> tuple[float, float]:
    """The paper's Algorithm 0 (forward) and its standard backward, one kernel per line:
    forward ``4 N^2 + 4 N d``-ish (S and P written and read once), backward
    ``7 N^2 + 8 N d``-ish; eager PyTorch adds a separate scaling op (and mask/dropout ops)."""
    e = w.dtype_bytes
    b, hq, sq, sk, d, dv = w.batch, w.nheads, w.seqlen_q, w.seqlen_k, w.headdim, w.headdim_v
    n2 = float(b * hq * sq * sk * e)
    q, k = b * hq * sq * d * e, b * hq * sk * d * e
    v, o = b * hq * sk * dv * e, b * hq * sq * dv * e
    fwd = (q + k + n2) + (n2 + n2) + (n2 + v + o)
    bwd = ((n2 + o + v) + (o + v + n2)          # dV = P^T dO ; dP = dO V^T
           + 3 * n2                            # dS = P * (dP - rowsum(dP * P))
           + (n2 + k + q) + (n2 + q + k))      # dQ = dS K ; dK = dS^T Q
    return fwd, bwd


# --------------------------------------------------------------------------------------------
# Tiled kernels
# --------------------------------------------------------------------------------------------

def _dram(t: Traffic, unique: float, sharing: int, hw: Hardware, tiles: TileConfig,
          num_shares: int) -> Traffic:
    """``t`` after L2 reuse of its streamed operand.

    ``unique``: bytes of the streamed operand (all heads); ``sharing``: programs that read the
    same head's copy; ``num_shares``: how many such heads. Programs with consecutive ids run
    together, so each head's operand comes from DRAM once per wave of ``concurrent`` programs;
    the rest hit in L2 if the operands of the heads in flight fit there (else a proportional
    part misses).
    """
    if t.stream <= 0 or unique <= 0:
        return t
    concurrent = max(1, hw.num_sms * tiles.ctas_per_sm)
    waves = max(1, -(-sharing // concurrent))
    per_head = unique / max(1, num_shares)
    heads_in_flight = min(num_shares, max(1, concurrent // max(1, sharing)))
    working_set = per_head * heads_in_flight
    hit = min(1.0, hw.l2_bytes / working_set) if working_set > 0 else 1.0
    floor = min(t.stream, unique * waves)
    stream = floor + (t.stream - floor) * (1.0 - hit)
    return Traffic(t.name, t.read - t.stream + stream, t.write, stream)


@dataclass(frozen=True)
class TiledModel:
    """What :func:`tiled_passes` returns: traffic per kernel (tile loads and after L2), executed
    matmul FLOPs, and the score elements computed once in forward / per backward recomputation."""

    fwd: tuple
    bwd: tuple
    dram_fwd: tuple
    dram_bwd: tuple
    flops_fwd: float
    flops_bwd: float
    scores_fwd: float
    scores_bwd: float


def tiled_passes(w: Workload, tiles: TileConfig, hw: Hardware) -> TiledModel:
    """Traffic and FLOPs of the tiled kernels (see :class:`TileConfig` for the passes).

    Tile loads are exact sums over blocks (ragged last blocks and causal diagonals included).
    ``density`` scales the streamed terms and FLOPs (block-sparse: only listed blocks load).
    """
    e, b, hq, hkv, g = w.dtype_bytes, w.batch, w.nheads, w.nheads_kv, w.group
    sq, sk, d, dv, rho = w.seqlen_q, w.seqlen_k, w.headdim, w.headdim_v, w.density
    kv_row = (d + dv) * e                      # one K row + one V row
    q_row_bwd = (d + dv) * e + 2 * STAT_BYTES  # Q, dO, LSE, D of one query row

    # forward: grid (query blocks) x (b * hq); K/V streamed
    fb = kv_rows_per_query_block(sq, sk, tiles.fwd_block_m, tiles.fwd_block_n, w.causal)
    fwd_kv_rows = sum(kv for _, kv in fb) * rho
    fwd_pairs = sum(rows * kv for rows, kv in fb) * rho
    stream = float(b * hq * fwd_kv_rows * kv_row)
    fwd = Traffic("forward (Q once, K/V per query block; O, LSE)",
                  b * hq * sq * d * e + stream, b * hq * sq * (dv * e + STAT_BYTES), stream)
    kv_unique = float(b * hkv * sk * kv_row)
    dram_fwd = _dram(fwd, kv_unique, len(fb) * g, hw, tiles, b * hkv)
    flops_fwd = 2.0 * b * hq * fwd_pairs * (d + dv)

    bwd, dram_bwd = [], []
    q_own = float(b * hq * sq * q_row_bwd)
    atomic = tiles.backward == "atomic"
    acc_zeros = Traffic("dQ accumulator zero-fill", 0.0, b * hq * sq * d * STAT_BYTES)
    if tiles.preprocess:    # (in one pass it also zeroes the float32 dQ accumulator)
        pre = Traffic("backward preprocess D = rowsum(dO * O)"
                      + (" + dQ accumulator zeros" if atomic else ""),
                      2.0 * b * hq * sq * dv * e,
                      b * hq * sq * STAT_BYTES + (acc_zeros.write if atomic else 0.0))
        bwd.append(pre)
        dram_bwd.append(pre)
    elif atomic:            # (a fill then zeroes it)
        bwd.append(acc_zeros)
        dram_bwd.append(acc_zeros)

    # dK/dV pass: grid (KV blocks) x (b * hkv); Q, dO, LSE, D of the G query heads streamed
    kb = query_rows_per_kv_block(sq, sk, tiles.dkdv_block_n, tiles.dkdv_block_m, w.causal)
    q_rows_loaded = sum(q for _, q in kb) * rho
    dkdv_pairs = sum(rows * q for rows, q in kb) * rho
    stream = float(b * hq * q_rows_loaded * q_row_bwd)
    extra_read = extra_write = extra_stream = 0.0
    if atomic:  # read-modify-write of float32 dQ rows for every (KV block, visible query row)
        extra_stream = float(b * hq * q_rows_loaded * d * STAT_BYTES)
        extra_read = extra_write = extra_stream
    dkdv = Traffic("dK/dV pass (K/V once, Q/dO/LSE/D per KV block; dK, dV)"
                   + (" + atomic dQ" if atomic else ""),
                   kv_unique + stream + extra_read, kv_unique + extra_write, stream + extra_stream)
    bwd.append(dkdv)
    dram_dkdv = _dram(Traffic(dkdv.name, dkdv.read - extra_read, dkdv.write - extra_write,
                              stream), q_own, len(kb), hw, tiles, b * hkv)
    if atomic:  # the atomics run in L2; DRAM sees each float32 dQ line fetched and written back
        dq_acc = float(b * hq * sq * d * STAT_BYTES)
        acc = _dram(Traffic("dQ accumulate", extra_stream, 0.0, extra_stream), dq_acc, len(kb),
                    hw, tiles, b * hkv)
        dram_dkdv = Traffic(dkdv.name, dram_dkdv.read + acc.read, dram_dkdv.write + acc.read,
                            dram_dkdv.stream + acc.stream)
    dram_bwd.append(dram_dkdv)
    flops_bwd = 2.0 * b * hq * dkdv_pairs * (2 * d + 2 * dv)   # QK^T, dO V^T, P^T dO, dS^T Q

    if atomic:
        conv = Traffic("dQ float32 -> dtype", b * hq * sq * d * STAT_BYTES, b * hq * sq * d * e)
        bwd.append(conv)
        dram_bwd.append(conv)
        flops_bwd += 2.0 * b * hq * dkdv_pairs * d                  # dQ = dS K
    else:
        # dQ pass: grid (query blocks) x (b * hq); K/V streamed again
        qb = kv_rows_per_query_block(sq, sk, tiles.dq_block_m, tiles.dq_block_n, w.causal)
        kv_loaded = sum(kv for _, kv in qb) * rho
        dq_pairs = sum(rows * kv for rows, kv in qb) * rho
        stream = float(b * hq * kv_loaded * kv_row)
        dq = Traffic("dQ pass (Q/dO/LSE/D once, K/V per query block; dQ)", q_own + stream,
                     b * hq * sq * d * e, stream)
        bwd.append(dq)
        dram_bwd.append(_dram(dq, kv_unique, len(qb) * g, hw, tiles, b * hkv))
        flops_bwd += 2.0 * b * hq * dq_pairs * (2 * d + dv)         # QK^T, dO V^T, dS K
    return TiledModel(fwd=(fwd,), bwd=tuple(bwd), dram_fwd=(dram_fwd,), dram_bwd=tuple(dram_bwd),
                      flops_fwd=flops_fwd, flops_bwd=flops_bwd,
                      scores_fwd=float(b * hq * fwd_pairs), scores_bwd=float(b * hq * dkdv_pairs))


# --------------------------------------------------------------------------------------------
# The ledger
# --------------------------------------------------------------------------------------------

def estimate(workload: Workload, hardware: Optional[Hardware] = None,
             tiles: Optional[TileConfig] = None) -> LedgerResult:
    """FLOPs, HBM traffic and extra memory of one forward+backward step, standard vs tiled.

    Args:
        workload: the shapes and features.
        hardware: SRAM/L2/SM count (default: the H200 preset; ``Hardware.present()`` for the
            current GPU).
        tiles: the tiled kernels' block sizes (default :class:`TileConfig` with the
            ``FLASHTILE_FWD_BLOCK_*`` environment applied).

    Example:
        >>> r = estimate(Workload(batch=64, nheads=16, seqlen_q=1024, headdim=64))
        >>> round(r.standard_bytes / 1e9, 1), round(r.tiled_dram_bytes / 1e9, 2)
        (33.8, 2.31)
    """
    w = workload
    hw = hardware or PRESETS["h200"]
    tiles = tiles or TileConfig.from_env()
    e, b, hq, hkv = w.dtype_bytes, w.batch, w.nheads, w.nheads_kv
    sq, sk, d, dv = w.seqlen_q, w.seqlen_k, w.headdim, w.headdim_v

    # FLOPs. Eager computes every score (a mask only sets -inf); tiled skips invisible tiles.
    full = float(b * hq * sq * sk)
    std_fwd = 2.0 * full * (d + dv)
    std_bwd = 2.0 * full * (2 * d + 2 * dv)                  # dV, dP, dQ, dK
    drop = _DROPOUT_PER_ELEMENT if w.dropout_p > 0 else 0
    std_sm_fwd = full * (_SOFTMAX_FWD_STANDARD + drop)
    std_sm_bwd = full * (_SOFTMAX_BWD_STANDARD + drop)

    tm = tiled_passes(w, tiles, hw)
    recomputations = 1 if tiles.backward == "atomic" else 2   # P is rebuilt in each bwd pass
    t_sm_fwd = tm.scores_fwd * (_SOFTMAX_FWD_TILED + drop)
    t_sm_bwd = recomputations * tm.scores_bwd * (_SOFTMAX_BWD_TILED + 2 * drop)

    std_fwd_ops, std_bwd_ops = standard_ops(w)
    text_fwd, text_bwd = textbook_standard_bytes(w)

    # Extra memory beyond Q, K, V, dO (see docs/ledger.md for the eager timeline).
    n2 = full * e
    o = b * hq * sq * dv * e
    grads = b * hq * sq * d * e + b * hkv * sk * (d + dv) * e
    gqa = b * hq * sk * (d + dv) * e if hkv != hq else 0.0     # K and V repeated to hq heads
    dropout_mask = full if w.dropout_p > 0 else 0.0
    # forward: S and S*scale coexist, then S*scale and P; P (+ dropped P, mask) stay saved
    std_mem_fwd = gqa + 2 * n2 + (n2 + dropout_mask if w.dropout_p > 0 else 0.0) + o
    # backward: softmax backward holds four N x N tensors at once, with O and dV (hq heads):
    # P (saved by softmax), dP (its incoming gradient), dS (its output, allocated first) and
    # dP * P, a temporary PyTorch's CUDA kernel materialises before the row sums
    # (softmax_backward_cuda_out: `Tensor tmp = grad * output`; the CPU kernel fuses it, 3 N²
    # there). Dropout's backward runs before it and holds less (P, two gradients, the mask).
    # Of the repeated K and V only K is still saved (by S = Q K^T; O = P V's backward has run).
    # The peak matches eager on an H200 to the byte (torch 2.11; bf16, fp32; causal, dropout, GQA).
    gqa_bwd = b * hq * sk * d * e if hkv != hq else 0.0
    std_mem_peak = max(std_mem_fwd, gqa_bwd + 4 * n2 + o + b * hq * sk * dv * e)
    lse = b * hq * sq * STAT_BYTES
    t_mem_fwd = o + lse
    dq_acc = b * hq * sq * d * STAT_BYTES if tiles.backward == "atomic" else 0.0
    t_mem_peak = o + lse + lse + grads + dq_acc     # + D, dQ, dK, dV

    theta = float(b * hq * sq * sk) * d * d * e * e / hw.sram_bytes
    return LedgerResult(
        workload=w, hardware=hw, tiles=tiles,
        standard_flops_fwd=std_fwd, standard_flops_bwd=std_bwd,
        tiled_flops_fwd=tm.flops_fwd, tiled_flops_bwd=tm.flops_bwd,
        standard_softmax_flops_fwd=std_sm_fwd, standard_softmax_flops_bwd=std_sm_bwd,
        tiled_softmax_flops_fwd=t_sm_fwd, tiled_softmax_flops_bwd=t_sm_bwd,
        standard_fwd=std_fwd_ops, standard_bwd=std_bwd_ops,
        tiled_fwd=tm.fwd, tiled_bwd=tm.bwd, tiled_dram_fwd=tm.dram_fwd, tiled_dram_bwd=tm.dram_bwd,
        textbook_standard_fwd=text_fwd, textbook_standard_bwd=text_bwd,
        standard_memory_fwd=std_mem_fwd, standard_memory_peak=std_mem_peak,
        tiled_memory_fwd=t_mem_fwd, tiled_memory_peak=t_mem_peak,
        theta_term=theta,
    )


def block_sweep(workload: Workload, block_sizes=(64, 128, 256, 512),
                hardware: Optional[Hardware] = None, base: Optional[TileConfig] = None,
                block_n: Optional[int] = 64) -> list[dict]:
    """Forward traffic for each forward ``BLOCK_M`` (the paper's Figure 2, middle): tile loads
    fall as ``1 / BLOCK_M``; DRAM traffic stays near ``Q + K + V + O``."""
    base = base or TileConfig()
    rows = []
    for bm in block_sizes:
        tiles = base.with_(fwd_block_m=int(bm), fwd_block_n=int(block_n or base.fwd_block_n))
        r = estimate(workload, hardware, tiles)
        rows.append({"block_m": int(bm), "block_n": tiles.fwd_block_n,
                     "tile_loads_fwd": r.tiled_bytes_fwd, "dram_fwd": r.tiled_dram_bytes_fwd,
                     "stream_fwd": r.tiled_stream_bytes_fwd})
    return rows


def density_sweep(workload: Workload, densities=(1.0, 0.8, 0.6, 0.4, 0.2),
                  hardware: Optional[Hardware] = None,
                  tiles: Optional[TileConfig] = None) -> list[dict]:
    """Tiled fwd+bwd traffic and FLOPs vs the fraction of non-zero blocks (Figure 2, right)."""
    rows = []
    for rho in densities:
        r = estimate(replace(workload, density=float(rho)), hardware, tiles)
        rows.append({"density": float(rho), "tile_loads": r.tiled_bytes,
                     "dram": r.tiled_dram_bytes, "flops": r.tiled_flops})
    return rows


__all__ = [
    "DTYPE_BYTES", "Hardware", "LedgerResult", "PRESETS", "TileConfig", "Traffic", "Workload",
    "block_sweep", "conventional_flops", "density_sweep", "estimate", "kv_rows_per_query_block",
    "query_rows_per_kv_block", "standard_ops", "textbook_standard_bytes", "TiledModel",
    "tiled_passes",
    "visible_pairs",
]
