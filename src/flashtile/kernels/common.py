"""Pieces shared by the forward and backward kernels.

Notation (all kernels):

- ``BLOCK_M`` query rows per tile, ``BLOCK_N`` keys per tile; ``HEAD_D``/``HEAD_DV`` the QK / V
  head dims rounded up to a power of two (>= 16, what ``tl.dot`` needs); the padding columns are
  loaded as 0 and never stored.
- Scores live in the log2 domain: ``s2 = (q . k) * scale * log2(e)`` so that ``exp2`` (one
  instruction) replaces ``exp``; the saved LSE is converted back to natural log.
- The visible band (``flashtile.params``): query ``i`` sees key ``j`` iff
  ``i + off - left <= j <= i + off + right``; ``HAS_LEFT``/``HAS_RIGHT`` say whether a side is
  bounded. Tiles split into *masked* ones (the band edge or the sequence end crosses them: each
  element is tested) and *full* ones (every element visible: no mask arithmetic at all).
"""

from __future__ import annotations

import functools
import math
import os

import torch
import triton
import triton.language as tl

from ..backend import interpreter_enabled
from ..params import DROPOUT_UNIT
from ..reference.philox import dropout_stride_b

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
# The same constants as compile-time values for the kernel bodies (Triton reads module globals
# only when they are constexpr).
LOG2E_K = tl.constexpr(LOG2E)
LN2_K = tl.constexpr(LN2)
DROPOUT_UNIT_K = tl.constexpr(float(DROPOUT_UNIT))


# Integer arguments Triton must not specialise on (value 1 / divisibility by 16): otherwise every
# new sequence length or window recompiles all kernels. Strides stay specialised (alignment), and
# so do head_d/head_dv: knowing d % 16 == 0 (d = 96, 160) keeps head-dim-masked loads 16 bytes
# wide, hence pipelined (see load_tile); a model has one or two head dims. The attention mask's
# strides too: a unit key stride and 16-divisible others are what let its tiles load as vectors.
NO_SPECIALIZE = ["nheads", "group", "seqlen_q", "seqlen_k", "seq_bucket",
                 "window_left", "window_right", "stride_slope_b", "seed", "rng_offset",
                 "rng_stride_b", "stride_lse_b", "stride_lse_h", "mask_b", "mask_h", "mask_nq",
                 "mask_nkv"]


def next_pow2(n: int) -> int:
    """Smallest power of two ``>= n`` (``n >= 1``). Plain Python: ``triton.next_power_of_2`` is a
    constexpr function, ~3 us per call from the host, and a launch makes several."""
    return 1 << (n - 1).bit_length()


def padded_headdim(d: int) -> int:
    return max(16, next_pow2(d))


# On POSIX ``os.environ`` keeps the environment's bytes in a plain dict, which every
# assignment and deletion through ``os.environ`` updates (``monkeypatch.setenv`` included).
_ENVIRON = getattr(os.environ, "_data", None) if os.name == "posix" else None
_ENV_KEYS: dict = {}


def getenv(name: str, default: str | None = None) -> str | None:
    """``os.environ.get(name, default)`` for the launch path, where a forward+backward reads
    about ten switches: ``os.environ.get`` encodes the name on each call and pays an exception
    for an unset one (~0.5 us on the development CPU); this looks the bytes up directly
    (~0.06 us)."""
    if _ENVIRON is None:
        return os.environ.get(name, default)
    key = _ENV_KEYS.get(name)
    if key is None:
        key = _ENV_KEYS[name] = os.fsencode(name)
    value = _ENVIRON.get(key)
    return default if value is None else os.fsdecode(value)


def env_forced(name: str) -> bool | None:
    """A schedule switch that forces a measured rule either way: ``1`` True, ``0`` False,
    unset, empty or ``auto`` None (the caller's rule decides); anything else a ValueError."""
    value = getenv(name, "auto")
    if value in ("", "auto"):
        return None
    if value not in ("0", "1"):
        raise ValueError(f"{name} must be 0, 1 or 'auto', got {value!r}")
    return value == "1"


# The Gluon kernels for sm_90 (modules of this package): their switch, its default, and the
# variable that overrides their config (sweeps). The dK/dV kernel is on by default (faster
# than the tile-level one, docs/perf.md session 10; at d=96, in split tiles, session 20); the
# forward is on where it measured ahead ("auto": d=128, and d=64 without the causal mask,
# session 11; d=96 and d=256, session 19);
# dQ is opt-in (no net gain, session 10); the d=256 dK/dV kernel is on (0.57-0.61x the
# tile-level backward's time, session 19), and so is the d=256 dQ kernel (forward+backward
# +4% to +10% over the tile-level dQ pass, session 20, one round).
GLUON_SWITCHES = {"fwd_hopper": ("FLASHTILE_GLUON_FWD", "auto", "FLASHTILE_GLUON_FWD_CONFIG"),
                  "bwd_hopper": ("FLASHTILE_GLUON_BWD", "1", "FLASHTILE_GLUON_BWD_CONFIG"),
                  "dq_hopper": ("FLASHTILE_GLUON_DQ", "auto", "FLASHTILE_GLUON_DQ_CONFIG"),
                  "bwd256_hopper": ("FLASHTILE_GLUON_BWD256", "1",
                                    "FLASHTILE_GLUON_BWD256_CONFIG"),
                  "dq256_hopper": ("FLASHTILE_GLUON_DQ256", "1",
                                   "FLASHTILE_GLUON_DQ256_CONFIG")}


# Further variables a Gluon kernel's launch reads (for plan keys): the grids, the causal
# orders, the forward's first softmax, P operand and S_0 ahead, and the one-pass dQ's schedule
# and kernel.
GLUON_OPTIONS = {"fwd_hopper": ("FLASHTILE_GLUON_FWD_PERSISTENT",
                                "FLASHTILE_GLUON_FWD_GROUP", "FLASHTILE_GLUON_FWD_WINDOW",
                                "FLASHTILE_GLUON_FWD_EARLY_S1",
                                "FLASHTILE_GLUON_FWD_P_REGS", "FLASHTILE_GLUON_FWD_NEXT_S0",
                                "FLASHTILE_GLUON_FWD_HALF_DIAG"),
                 "bwd_hopper": ("FLASHTILE_GLUON_BWD_PERSISTENT",
                                "FLASHTILE_GLUON_BWD_GROUP", "FLASHTILE_GLUON_BWD_WINDOW",
                                "FLASHTILE_GLUON_BWD_DQ_LATE",
                                "FLASHTILE_GLUON_BWD_ROWS", "FLASHTILE_GLUON_BWD_SERIAL",
                                "FLASHTILE_GLUON_BWD_SKIP_MASKED", "FLASHTILE_GLUON_BWD_ROTATE",
                                "FLASHTILE_GLUON_BWD_EXPAND", "FLASHTILE_GLUON_BWD_EXPAND_ADD",
                                "FLASHTILE_GLUON_BWD_DYNAMIC",
                                "FLASHTILE_GLUON_BWD_CLAIM_MID"),
                 "bwd256_hopper": ("FLASHTILE_GLUON_BWD256_PERSISTENT",
                                   "FLASHTILE_GLUON_BWD256_GROUP"),
                 "dq256_hopper": ("FLASHTILE_GLUON_DQ256_GROUP",)}


def gluon_switch(module: str) -> str:
    """The Gluon kernel ``module``'s switch: its variable, else its default (``"auto"``: on
    where it measured ahead, the module decides; ``"0"`` or empty: off; anything else: on)."""
    name, default, _ = GLUON_SWITCHES[module]
    return getenv(name, default)


def gluon_switch_on(module: str) -> bool:
    """Whether the Gluon kernel ``module`` is switched on (``auto`` included)."""
    return gluon_switch(module) not in ("", "0")


@functools.lru_cache(maxsize=None)
def _settings_names(modules: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[bytes, ...]]:
    """The variables :func:`gluon_settings` reads for ``modules``, as names and as the bytes
    ``os.environ`` keeps them under on POSIX."""
    names = tuple(name for m in modules
                  for name in (*GLUON_SWITCHES[m][::2], *GLUON_OPTIONS.get(m, ())))
    return names, tuple(os.fsencode(name) for name in names)


def gluon_settings(device: torch.device, modules: tuple[str, ...]) -> tuple | None:
    """All that a call's choice of the Gluon ``modules`` reads besides its signature (for a
    plan key): None off sm_90, where none runs; else their switches', config overrides' and
    options' (:data:`GLUON_OPTIONS`) values, read anew on every call (tests and sweeps set
    them between calls). On POSIX the values are the environment's raw bytes (None when
    unset), looked up in one pass: a backward reads 14 variables, ~4 us through
    :func:`getenv` on the development CPU, ~0.5 us so (a key only compares them)."""
    if not is_sm90(device):
        return None
    names, keys = _settings_names(modules)
    if _ENVIRON is None:
        return tuple(os.environ.get(name) for name in names)
    return tuple(map(_ENVIRON.get, keys))


@functools.lru_cache(maxsize=None)
def _sm90(index: int) -> bool:
    return torch.cuda.get_device_capability(index)[0] == 9


def device_index(device: torch.device) -> int:
    """The CUDA device index of ``device`` (the current device when it names none)."""
    return device.index if device.index is not None else torch.cuda.current_device()


@functools.lru_cache(maxsize=None)
def _properties(index: int):
    return torch.cuda.get_device_properties(index)


def cuda_properties(device: torch.device):
    """The CUDA device's properties (read once per device: the call costs microseconds)."""
    return _properties(device_index(device))


DEFAULT_SM_COUNT = 132          # the H200; used when no GPU is visible (interpreter)


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of ``device`` (the H200's 132 when not a CUDA device)."""
    if device.type != "cuda":
        return DEFAULT_SM_COUNT
    return cuda_properties(device).multi_processor_count


def is_sm90(device: torch.device) -> bool:
    """Whether ``device`` is a Hopper GPU (the capability is looked up once per device)."""
    return device.type == "cuda" and _sm90(device_index(device))


def gluon_kernels(module: str, device: torch.device):
    """The Gluon kernel module ``module`` when ``device`` is an sm_90 GPU and the module is
    switched on, else None. Imported on first use: ``triton.experimental.gluon`` and the
    kernels add ~35 ms to ``import flashtile``, which no CPU or non-Hopper user should pay."""
    if not is_sm90(device) or not gluon_switch_on(module):
        return None
    import importlib
    return importlib.import_module(f".{module}", __package__)


# Both read once, when the kernels are imported: each ``os.environ`` read costs ~1.5 us on the
# development CPU and a forward+backward made eight of them (~15% of its host time).
# The interpreter cannot change afterwards anyway: the kernels were defined for it
# (:data:`INTERPRET_K`).
_POISON = os.environ.get("FLASHTILE_POISON", "0") not in ("", "0")
_INTERPRETING = interpreter_enabled()


def alloc(shape, dtype, device) -> torch.Tensor:
    """An output buffer; NaN-filled (integers: -1, which no count or index starts from) when
    ``FLASHTILE_POISON=1`` (the tests; read at import) so that any element a kernel forgets to
    write shows up instead of passing on leftover memory."""
    if _POISON:
        return torch.full(shape, float("nan") if dtype.is_floating_point else -1, dtype=dtype,
                          device=device)
    # (sizes as separate ints: ~1.6 us on the development CPU, against ~2.4 for a tuple and
    # ~3.3 for a torch.Size, which launch plans keep)
    return torch.empty(*shape, dtype=dtype, device=device) if shape else torch.empty(
        (), dtype=dtype, device=device)


def dot_precision(dtype: torch.dtype) -> str:
    """fp32 inputs use exact fp32 products (``ieee``), not tf32: users of fp32 expect fp32."""
    return "ieee" if dtype == torch.float32 else "tf32"


def interpreting() -> bool:
    """Whether the kernels run in Triton's interpreter (``TRITON_INTERPRET``, as at import)."""
    return _INTERPRETING


def graph_bench(kernel_call, quantiles):
    """The dense kernels' autotuning timer: CUDA-graph replays of a config's launches. Triton's
    default timer launches each call after a 256 MB L2 flush, through the autotuner's full
    launch path; when that path takes longer on the host than the flush on the device, the
    host's time enters the measurement, and for calls of tens of microseconds it decides the
    pick (session 15: d=64 causal 512 picked 128x128/8w/3s, 131 TFLOP/s, where 64x64/4w/3s
    measured 208). Replays time the kernel alone (without the flush: the K/V of such calls fit
    in L2 anyway). Measured (session 16, H200, each run autotuning with an empty cache): the
    picks at d=64 causal 512/1k were the same in both rounds, where Triton's timer picked
    differently in each; forward 512 +28% and forward+backward 512 +20%/+24% against its
    picks."""
    # (the timer runs on a stream of its own, which would not wait for the call's inputs, e.g.
    # D from the preprocess kernel; it synchronises when done)
    torch.cuda.synchronize()
    return triton.testing.do_bench_cudagraph(kernel_call, rep=100, quantiles=quantiles)


def autotune_enabled() -> bool:
    """``FLASHTILE_AUTOTUNE=0`` uses the first fitting config instead of timing all of them
    (fast first calls, e.g. for test suites that compile many shapes)."""
    return os.environ.get("FLASHTILE_AUTOTUNE", "1") not in ("0", "")


# Shared memory per block on Hopper (H100/H200: 227 KB), less a little for the kernels' own
# small buffers (LSE/D rows, layout-conversion scratch).
SMEM_LIMIT = 232448 - 2048


def smem_estimate(kind: str, block_m: int, block_n: int, stages: int, head_d: int,
                  head_dv: int, elem: int, bias_elem: int = 0) -> int:
    """Bytes of shared memory a config needs: the tiles that stay resident plus ``stages``
    copies of the tiles streamed through the loop (what Triton allocates once the loads are
    pipelined; matches its reports within a few KB). ``bias_elem``: bytes per element of an
    attention mask streamed with the keys (forward and dQ pipeline it; 0: none)."""
    width = (head_d + head_dv) * elem
    if kind == "dkdv":                                 # K, V resident; Q, dO streamed
        return block_n * width + stages * block_m * width
    streamed = stages * (block_n * width + block_m * block_n * bias_elem)      # K, V (+ mask)
    if kind == "fwd":                                  # Q resident
        return block_m * head_d * elem + streamed
    return block_m * width + streamed                  # dq: Q, dO resident


def prune_configs(configs, named_args, kind: str = "fwd", **kwargs):
    """Keep configs whose tiles fit: in shared memory (:func:`smem_estimate`) and, for head dims
    above 128, small enough not to drown in register spills; only the first without autotuning.
    ``kind``: ``fwd``, ``dkdv`` or ``dq`` (bind it with :func:`functools.partial`)."""
    hd, hdv = kwargs.get("HEAD_D", 64), kwargs.get("HEAD_DV", 64)
    head = max(hd, hdv)
    q, bias = named_args.get("Q"), named_args.get("BIAS")
    elem = q.element_size() if hasattr(q, "element_size") else 2
    bias_elem = bias.element_size() if kwargs.get("HAS_BIAS") and hasattr(bias, "element_size") \
        else 0
    keep = [c for c in configs
            if (head <= 128 or c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] <= 64 * 64)
            and smem_estimate(kind, c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_stages,
                              hd, hdv, elem, bias_elem) <= SMEM_LIMIT]
    keep = keep or configs[-1:]
    if head > 128 and keep[-1] is configs[-1]:
        # Each list ends with its large-head config (fits d=256, fewest spills): try it first.
        keep = keep[-1:] + keep[:-1]
    if kwargs.get("SPARSE"):
        # Kernel tiles must not straddle BlockMask blocks.
        bq, bkv = kwargs["MASK_BQ"], kwargs["MASK_BKV"]
        fit = [c for c in keep if bq % c.kwargs["BLOCK_M"] == 0 and bkv % c.kwargs["BLOCK_N"] == 0]
        keep = fit or [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16},
                                     num_warps=4, num_stages=2)]
    pick = os.environ.get("FLASHTILE_CONFIG_PICK")
    if pick:
        # Compile-cache warming (scripts/bwd_sweep.py --warm-procs): process i compiles config i.
        return keep[int(pick) % len(keep):][:1]
    return keep if autotune_enabled() else keep[:1]


class TunedLaunch:
    """``tuned[grid](*args, **kwargs)`` for a ``triton.autotune``-wrapped kernel, with a fast path.

    Triton's autotuner rebuilds its cache key from every argument on each call (~75 us of host
    time for these ~80-argument kernels, measured with ``scripts/host_overhead.py``), which a
    small attention step feels. The first call of a key goes through the autotuner (tuning,
    pruning, ``reset_to_zero`` included); later ones launch the JIT function directly with the
    config it chose. Same key as the autotuner: its ``key`` arguments plus the tensors' dtypes
    (those of the first tensor argument suffice here: Q fixes the others).
    """

    def __init__(self, tuner):
        self.tuner = tuner
        self.names = tuner.arg_names
        self.key_at = [(self.names.index(k) if k in self.names else None, k) for k in tuner.keys]
        self.chosen: dict = {}

    def reset(self) -> None:
        """Forget every choice (after the tuner's configs were changed by hand, e.g. a sweep),
        and the launch plans that replay them."""
        from . import plans
        self.chosen.clear()
        self.tuner.cache.clear()
        plans.clear()

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            key = [args[i] if i is not None and i < len(args) else kwargs.get(name)
                   for i, name in self.key_at]
            key.append(getattr(args[0], "dtype", None))
            key = tuple(key)
            config = self.chosen.get(key)
            if config is None:
                self.tuner[grid](*args, **kwargs)
                self.chosen[key] = self.tuner.best_config
            else:
                self.tuner.best_config = config            # what the ledger reads back
                if config.pre_hook:
                    # (the autotuner passes every argument; hooks here read only keyword
                    # arguments and the config's, which keeps this path cheap)
                    config.pre_hook({**kwargs, **config.all_kwargs()})
                self.tuner.fn[grid](*args, **kwargs, **config.all_kwargs())
        return launch


def env_block(name: str) -> int | None:
    """A positive integer from the environment, None when unset (the tile-level forward's
    pinned config: ``FLASHTILE_FWD_BLOCK_M`` / ``_N`` / ``_WARPS`` / ``_STAGES``; the ledger's
    model reads the block sizes through this too)."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) == 0:
        raise ValueError(f"{name} must be a positive integer (e.g. 64), got {value!r}; unset it "
                         f"to autotune")
    return int(value)


# The tile-level forward and dQ kernels with the full and the diagonal key tiles in one loop
# (``ONE_LOOP``: the band applied from the diagonal tiles on under a run-time branch).
# ``FLASHTILE_ONE_LOOP`` unset or ``auto`` (None here): where it measured ahead, head dims up
# to :data:`ONE_LOOP_UPTO` with dense keys that end on a 128-key tile (session 31, H200, bf16,
# kernel sums against two loops: d=64 causal forward 0.90x / 0.95x at 512 / 1k,
# forward+backward 0.96-0.97x at 512; head dims below 64, not measured, follow it). Elsewhere
# two loops: at d=128 one loop measured level with even keys (window (256, 0) at 16k,
# forward+backward 0.995x) and slower without (causal varlen 1.012x in both rounds; there one
# loop keeps the loads' bounds test on every tile, two loops on the last only, the likely
# cost). ``1``: one loop wherever a right edge cuts tiles; ``0``: never (read once, at import;
# :func:`diagonal_args`).
ONE_LOOP = env_forced("FLASHTILE_ONE_LOOP")
ONE_LOOP_UPTO = 64


def diagonal_args(params, seqlen_k: int, head_d: int) -> dict:
    """The constexprs of the tile-level kernels that take one query tile a program (forward,
    dQ) for the key tiles a right edge cuts (causal or a right window; without one no tile is
    diagonal and both are off): ``ONE_LOOP`` (:data:`ONE_LOOP`) and ``EVEN_K`` (with it: dense
    keys that end on a tile, every config's BLOCK_N dividing 128, so that the loads need no
    bounds test; False otherwise, so that two loops compile no second variant)."""
    right = params.window_right >= 0
    even = params.cu_seqlens_q is None and seqlen_k % 128 == 0
    if ONE_LOOP is None:
        loop = right and even and head_d <= ONE_LOOP_UPTO
    else:
        loop = right and ONE_LOOP
    return dict(ONE_LOOP=loop, EVEN_K=loop and even)


def window_args(params) -> dict:
    """Runtime band arguments and the constexpr flags that say which sides are bounded (the
    diagonal offset is computed in the kernel, per sequence for varlen)."""
    return dict(
        window_left=max(params.window_left, 0), window_right=max(params.window_right, 0),
        HAS_LEFT=params.window_left >= 0, HAS_RIGHT=params.window_right >= 0,
        BOTTOM_RIGHT=params.bottom_right,
    )


def varlen_args(params, batch: int, nheads: int, seqlen_q: int, seqlen_k: int, lse: torch.Tensor):
    """Sequence bounds, LSE layout and the dropout counter stride of each batch entry.

    Dense: LSE ``(b, h, sq)``. Varlen: q/k are ``(1, total, h, d)`` views, ``seqlen_q/k`` are the
    maxima, LSE is ``(h, total_q)`` and sequence ``b`` starts at ``cu_seqlens[b]``. The dropout
    counters of batch entry ``b`` start at ``b * dropout_stride_b(nheads, seqlen_q, seqlen_k)``
    (maxima) so that every position has its own counter in both layouts.
    """
    varlen = params.cu_seqlens_q is not None
    if varlen:
        stride_lse_b, stride_lse_h = 0, lse.stride(0)
    else:
        stride_lse_b, stride_lse_h = lse.stride(0), lse.stride(1)
    order = lse
    if varlen:
        order = params.seq_order
        if order is None:                        # callers below the public API: keep the order
            order = torch.arange(batch, dtype=torch.int32, device=lse.device)
    return dict(
        CU_Q=params.cu_seqlens_q if varlen else lse, CU_K=params.cu_seqlens_k if varlen else lse,
        SEQ_ORDER=order,
        stride_lse_b=stride_lse_b, stride_lse_h=stride_lse_h,
        rng_stride_b=dropout_stride_b(nheads, seqlen_q, seqlen_k), IS_VARLEN=varlen,
    )


# The L2 bytes a window of the causal order may fill with what its pairs' items all read
# (:func:`causal_window`): half the H100's and the H200's 50 MB, the rest left to the Q and O
# tiles streaming by and to the next window's first items
WINDOW_BYTES = 24 << 20


def causal_window(group: int, n_tiles: int, n_bh: int, head_bytes: int, n_programs: int,
                  variable: str = "FLASHTILE_GLUON_FWD_WINDOW", default: str = "0") -> int:
    """A Gluon kernel's ``GROUP`` with windows (:func:`.fwd_hopper._work_tile`): where the
    causal order runs in chunks of 1 or in one chunk of a pair's every tile (``group`` 1, or
    at least ``n_tiles``), and ``variable`` asks for windows, -W for windows of W of the
    ``n_bh`` (batch, head) pairs, else ``group``. ``head_bytes``: what all of a pair's items
    read (the forward: its K and V; the dK/dV kernels, ``FLASHTILE_GLUON_BWD_WINDOW``: its
    query heads' Q and dO); ``n_programs``: the grid. Chunks of 8 over more tiles than 8
    already end on every pair's lightest tiles.

    Why: in chunks of 1 every head's heaviest tile comes first, then every head's next; at
    d=128 causal 512 the 512 heads' K/V (128 MB) outgrow the L2, so each of a head's four
    items reads them from HBM again (10 tile reads per head, not 4). Chunks of 8 read them
    once: on the H100 (session 40, kernel sums, two rounds) 168.5 / 169.2 us in chunks of 1,
    127.0 / 131.7 in chunks of 8, 141.9 / 140.8 in chunks of 2 (cuDNN 99-100); d=256 causal
    512 164.6 -> 114.0 (one round); d=96 174.3 -> 184.8; on the H200 in session 15 (an older
    kernel) chunks of 1 led by 7%. ``scripts/order_model.py`` (an LRU L2 and tile-unit item
    times) reads chunks of 1 / 8 at d=128 causal 512 as 442 / 256 MB from HBM, both spans
    optimal under a persistent grid's snake; with one program per item (the hardware's
    dynamic order) chunks of 8 end 5-7% later at 1k (a head's heavy tile among the last),
    windows keep chunks of 1's span and chunks of 8's bytes. Under the persistent grid's
    static order a window must span whole pairs of rounds, or the snake's pairs no longer
    balance (windows of 64 pairs at 512: a span of 61 tiles against 40).

    Measured (session 41, H100, kernel sums of two alternating rounds, cuDNN 99-125 us in the
    same runs): the Gluon forward causal at 512 keys, chunks of 1 / 8 / windows of 66, d=128
    166.0 / 128.7 / 114.0 us, d=96 163.6 / 179.4 / 133.3; at 1k (chunks of 8 / windows of
    33) d=128 172 / 165 us: windows are the forward's default. d=256's windows pass 24 MB and
    its chunks of 8 lead (161.6 against 113.6 us: :data:`.fwd_hopper.SINGLE_UPTO`). The dK/dV
    kernels' windows did not lead (d=64 causal 512 / 1k level with chunks of 1, d=128's one
    pass 1-3% slower): off by default there. (The tile-level forward's grid in windows, d=64
    causal 512 +7%, 1k level, was removed: :func:`query_tile`.)

    The dK/dV kernel's chunks of 1 (d=64 up to 8 key tiles, :data:`.bwd_hopper.SINGLE_UPTO`)
    have the same shape: at d=64 causal 1k its 512 heads' Q and dO (128 MB) pass between a
    head's items.

    ``variable`` unset: ``default`` (the calling kernel's measured rule: ``auto`` in the Gluon
    forward, ``0`` in the dK/dV kernels, session 41); ``0``: none;
    ``auto``: a persistent grid (fewer programs than items), the fewest pairs whose items
    fill whole pairs of rounds (d=128 at 512 keys on 132 SMs: 66); one program per item, the
    most pairs, a power of two (few compiled variants), that fit :data:`WINDOW_BYTES`; none
    where the window's bytes do not fit; a positive integer: that many pairs."""
    value = getenv(variable, default) or default
    if value == "auto":
        if n_programs < n_bh * n_tiles:
            heads = math.lcm(2 * n_programs, n_tiles) // n_tiles
        else:
            heads = max(1, WINDOW_BYTES // max(head_bytes, 1))
            heads = 1 << (heads.bit_length() - 1)
        if heads * head_bytes > WINDOW_BYTES:
            return group
    elif value.isdigit():
        heads = int(value)
    else:
        raise ValueError(f"{variable} must be 0, a positive integer (pairs per window) or "
                         f"'auto', got {value!r}")
    if 1 < group < n_tiles or heads == 0 or heads >= n_bh:
        return group            # (a window of every pair is chunks of 1's order)
    return -heads


def strides(t: torch.Tensor, varlen: bool) -> tuple[int, int, int]:
    """(batch, seqlen, head) strides of a ``(b, s, h, d)`` tensor; varlen views ``(1, total, h,
    d)`` get batch stride 0 because sequence ``b`` is addressed through ``cu_seqlens``."""
    return (0 if varlen else t.stride(0)), t.stride(1), t.stride(2)


@triton.jit
def query_tile(nheads, group, seqlen_q, SEQ_ORDER, BLOCK_M: tl.constexpr,
               IS_VARLEN: tl.constexpr):
    """The program's query tile in a flat grid: ``(start_m, off_b, off_h, off_hkv)``. The query
    block varies fastest so that programs of one head run together (K/V stay in L2), and the
    last block (the heaviest under causal) runs first; varlen sequences come heaviest first
    (:func:`varlen_sequence`). ``off_*`` are int64 (offsets into large tensors). (Windows of
    heads here, each window's heaviest blocks first, measured 7% slower at d=64 causal 512
    and level at 1k, session 41: ``docs/experiments/fwd-tile-window-s41.patch``.)"""
    pid = tl.program_id(0)
    n_mblocks = tl.cdiv(seqlen_q, BLOCK_M)
    bh = pid // n_mblocks
    start_m = (n_mblocks - 1 - pid % n_mblocks) * BLOCK_M
    off_h = bh % nheads
    off_hkv = (off_h // group).to(tl.int64)
    off_b = varlen_sequence((bh // nheads).to(tl.int64), SEQ_ORDER, IS_VARLEN)
    return start_m, off_b, off_h.to(tl.int64), off_hkv


@triton.jit
def varlen_sequence(slot, SEQ_ORDER, IS_VARLEN: tl.constexpr):
    """Varlen: the sequence the grid's ``slot``-th batch entry works on, ``SEQ_ORDER[slot]``
    (heaviest first, ``params.seq_order``): the longest programs start first instead of
    straggling at the end of the grid. Dense batches keep their order."""
    if IS_VARLEN:
        slot = tl.load(SEQ_ORDER + slot).to(tl.int64)
    return slot


@triton.jit
def softmax_step(s2, m_i, l_i, MAY_BE_EMPTY: tl.constexpr, scale=None):
    """One online-softmax step over a log2-domain score tile ``s2`` ``(rows, keys)``: returns
    ``(p, alpha, l_i, m_new)`` with ``p = exp2(s2 - m_new)``, the discount
    ``alpha = exp2(m_i - m_new)`` for what was accumulated so far, and the updated row sums.
    ``MAY_BE_EMPTY``: some row may have seen no visible key yet (its max stays -inf); it is
    shifted by 0 instead, so ``exp2(-inf - -inf)`` never makes a NaN.

    ``scale`` (a positive float, or None): ``s2`` is unscaled and its log2-domain scores are
    ``s2 * scale``; the row max is taken before scaling and the scale goes into each score's
    exponent, ``exp2(s2 * scale - m_new)``: one FFMA per score instead of a multiply and an
    FFMA (the multiply fed the row max)."""
    m_tile = tl.max(s2, 1)
    if scale is not None:
        m_tile = m_tile * scale
        s2 = s2 * scale                          # (fused with the subtraction below)
    m_new = tl.maximum(m_i, m_tile)
    m_shift = m_new
    if MAY_BE_EMPTY:
        m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.math.exp2(s2 - m_shift[:, None])
    alpha = tl.math.exp2(m_i - m_shift)
    return p, alpha, l_i * alpha + tl.sum(p, 1), m_new


@triton.jit
def load_tile(base, offs_r, stride_r, offs_c, n_rows, n_cols, CHECK_ROWS: tl.constexpr,
              EVEN_C: tl.constexpr):
    """A ``(rows, cols)`` tile of a row-major matrix (``cols`` contiguous), 0 outside.

    Masks only what can be out of bounds: with ``EVEN_C`` (the padded head dim is the real one)
    no column test at all, so each thread keeps whole 16-byte vector loads. A column test
    against a run-time ``n_cols`` would split them into 2-byte loads, which Triton's pipeliner
    refuses to turn into asynchronous copies ("too small for pipelining"): the loop then waits
    on every load. A row test is constant along a row and costs nothing of that."""
    ptrs = base + offs_r[:, None] * stride_r + offs_c[None, :]
    if CHECK_ROWS and EVEN_C:
        tile = tl.load(ptrs, mask=offs_r[:, None] < n_rows, other=0.0)
    elif CHECK_ROWS:
        tile = tl.load(ptrs, mask=(offs_r[:, None] < n_rows) & (offs_c[None, :] < n_cols),
                       other=0.0)
    elif EVEN_C:
        tile = tl.load(ptrs)
    else:
        tile = tl.load(ptrs, mask=offs_c[None, :] < n_cols, other=0.0)
    return tile


@triton.jit
def tile_start(t, stop, idx_ptr, BLOCK: tl.constexpr, LIST_BLOCK: tl.constexpr,
               INDEXED: tl.constexpr):
    """First row of tile number ``t`` of a loop over ``BLOCK``-row tiles: ``t * BLOCK`` over a
    contiguous range, or, walking a BlockMask list (``INDEXED``; ``LIST_BLOCK``-row blocks, each
    ``LIST_BLOCK // BLOCK`` tiles), tile ``t % per_block`` of listed block ``t // per_block``
    (0 when ``t >= stop``: the list is not read past its count)."""
    if INDEXED:
        per_block: tl.constexpr = LIST_BLOCK // BLOCK
        block = tl.load(idx_ptr + t // per_block, mask=t < stop, other=0)
        start = block * LIST_BLOCK + (t % per_block) * BLOCK
    else:
        start = t * BLOCK
    return start


@triton.jit
def next_tile_start(t, start, stop, idx_ptr, BLOCK: tl.constexpr, LIST_BLOCK: tl.constexpr):
    """:func:`tile_start` of tile ``t + 1`` of a BlockMask list, given tile ``t``'s ``start``.

    The list loops carry the next tile's start from one iteration to the next (one flat loop
    over the whole list, loads pipelined across block boundaries). Reading the list entry of
    tile ``t`` inside iteration ``t`` put a dependent global load in front of every tile's
    address: the pipeliner then either waited on it synchronously or drained all copies each
    iteration. Read one iteration ahead, its latency hides behind a tile of work."""
    per_block: tl.constexpr = LIST_BLOCK // BLOCK
    nxt = t + 1
    jump = (nxt % per_block) == 0
    block = tl.load(idx_ptr + nxt // per_block, mask=jump & (nxt < stop), other=0)
    return tl.where(jump, block * LIST_BLOCK, start + BLOCK)


@triton.jit
def alibi_slope_log2(SLOPES, off_b, stride_slope_b, off_h, HAS_ALIBI: tl.constexpr):
    """The head's ALiBi slope in the log2 domain (0 without ALiBi)."""
    slope_log2 = 0.0
    if HAS_ALIBI:
        slope_log2 = tl.load(SLOPES + off_b * stride_slope_b + off_h) * LOG2E_K
    return slope_log2


@triton.jit
def seq_bounds(CU_Q, CU_K, off_b, seqlen_q, seqlen_k, IS_VARLEN: tl.constexpr,
               BOTTOM_RIGHT: tl.constexpr):
    """``(q_start, k_start, seqlen_q, seqlen_k, diag_off)`` of batch entry ``off_b``."""
    q_start = 0
    k_start = 0
    if IS_VARLEN:
        q_start = tl.load(CU_Q + off_b)
        seqlen_q = tl.load(CU_Q + off_b + 1) - q_start
        k_start = tl.load(CU_K + off_b)
        seqlen_k = tl.load(CU_K + off_b + 1) - k_start
    diag_off = 0
    if BOTTOM_RIGHT:
        diag_off = seqlen_k - seqlen_q
    return q_start, k_start, seqlen_q, seqlen_k, diag_off


def score_args(params) -> dict:
    """Softcap/ALiBi arguments: everything that turns ``q . k`` into a score."""
    softcap = params.softcap
    return dict(
        # Multiplier of q.k before the softcap tanh, or straight into the log2 domain without it.
        qk_scale=params.softmax_scale * LOG2E if softcap == 0 else params.softmax_scale / softcap,
        softcap_log2=softcap * LOG2E,
        HAS_SOFTCAP=softcap > 0,
        HAS_ALIBI=params.alibi_slopes is not None,
    )


@triton.jit
def tile_ranges(row_lo, row_hi, key_start, key_end, diag_off, window_left, window_right,
                BLOCK_N: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr):
    """Key tiles seen by query rows ``[row_lo, row_hi]`` (inclusive) among keys
    ``[key_start, key_end)`` (``key_start`` > 0: a KV cache's left padding), as three
    consecutive ranges of key-tile starts: masked ``[a, b)``, full ``[b, c)``, masked ``[c, d)``
    (multiples of ``BLOCK_N``). Tiles outside ``[a, d)`` are invisible and never loaded."""
    key_lo = key_start
    full_lo = key_start
    if HAS_LEFT:
        key_lo = tl.maximum(row_lo + diag_off - window_left, key_start)
        full_lo = tl.maximum(row_hi + diag_off - window_left, key_start)
    key_hi = key_end
    full_hi = key_end
    if HAS_RIGHT:
        key_hi = tl.minimum(row_hi + diag_off + window_right + 1, key_end)
        full_hi = tl.minimum(row_lo + diag_off + window_right + 1, key_end)
    key_hi = tl.maximum(key_hi, key_lo)
    a = (key_lo // BLOCK_N) * BLOCK_N
    d = tl.cdiv(key_hi, BLOCK_N) * BLOCK_N
    b = tl.minimum(tl.maximum(tl.cdiv(full_lo, BLOCK_N) * BLOCK_N, a), d)
    c = tl.minimum(tl.maximum((full_hi // BLOCK_N) * BLOCK_N, b), d)
    return a, b, c, d


@triton.jit
def row_ranges(col_lo, col_hi, seqlen_q, diag_off, window_left, window_right,
               BLOCK_M: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr):
    """The transpose of :func:`tile_ranges`: query tiles that see keys ``[col_lo, col_hi]``,
    as masked ``[a, b)``, full ``[b, c)``, masked ``[c, d)`` (row starts, multiples of BLOCK_M).

    Key ``j`` is seen by row ``i`` iff ``j - off - right <= i <= j - off + left``. Rows past
    ``seqlen_q`` need no mask in the backward: their Q, dO are loaded as 0 and add nothing."""
    row_lo = 0
    full_lo = 0
    if HAS_RIGHT:
        row_lo = tl.maximum(col_lo - diag_off - window_right, 0)
        full_lo = tl.maximum(col_hi - diag_off - window_right, 0)
    row_hi = seqlen_q
    full_hi = seqlen_q
    if HAS_LEFT:
        row_hi = tl.minimum(col_hi - diag_off + window_left + 1, seqlen_q)
        full_hi = tl.minimum(col_lo - diag_off + window_left + 1, seqlen_q)
    row_hi = tl.maximum(row_hi, row_lo)
    a = (row_lo // BLOCK_M) * BLOCK_M
    d = tl.cdiv(row_hi, BLOCK_M) * BLOCK_M
    b = tl.minimum(tl.maximum(tl.cdiv(full_lo, BLOCK_M) * BLOCK_M, a), d)
    # A full query tile may run past seqlen_q: those rows contribute zeros (see docstring).
    c = tl.minimum(tl.maximum((full_hi // BLOCK_M) * BLOCK_M, b), d)
    if not HAS_LEFT:
        c = d
    return a, b, c, d


@triton.jit
def band_mask(rows, cols, seqlen_k, diag_off, window_left, window_right,
              HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr):
    """Bool tile: inside the band and before the end of the keys. ``rows``/``cols``: query and
    key positions as broadcastable index tiles, ``(BLOCK_M, 1)``/``(1, BLOCK_N)`` for an
    ``S`` tile or ``(1, BLOCK_M)``/``(BLOCK_N, 1)`` for an ``S^T`` tile (every helper below
    takes them so, and works in either orientation)."""
    keep = cols < seqlen_k
    if HAS_LEFT:
        keep = keep & (cols >= rows + diag_off - window_left)
    if HAS_RIGHT:
        keep = keep & (cols <= rows + diag_off + window_right)
    return keep


@triton.jit
def dropout_bases(rng_offset, rng_stride_b, off_b, off_h, seqlen_q):
    """Where the dropout counters of (batch ``off_b``, query head ``off_h``) start: the batch
    entry's first counter (int64: ``b * h * sq * sk / 8`` passes 2**31 at long sequences) and
    the head's first row group (``h * cdiv(seqlen_q, 16) * 8``), as :func:`dropout_keep` takes
    them; the layout is ``reference/philox.py``'s."""
    return (rng_offset + tl.cast(off_b, tl.int64) * rng_stride_b,
            off_h * (tl.cdiv(seqlen_q, 16) * 8))


@triton.jit
def _halves16(w):
    """The two 16-bit uniforms of a 32-bit Philox word, low half first (a new last dim of 2)."""
    return tl.join(w & 0xFFFF, w >> 16)


def _mul_wide_asm(m: int) -> str:
    """Inline PTX: ``$0, $1`` = high, low 32 bits of ``$2 * m`` (one 64-bit product)."""
    return f"{{ .reg .b64 t; mul.wide.u32 t, $2, {m:#x}; mov.b64 {{$1, $0}}, t; }}"


# Philox 4x32-10 (Salmon et al., SC'11): round multipliers, the key's Weyl increments, rounds.
# The multiplies run as inline PTX on the GPU (``_mulhilo``); the interpreter has no PTX.
PHILOX_M_A, PHILOX_M_B = 0xD2511F53, 0xCD9E8D57
PHILOX_M_A_K, PHILOX_M_B_K = tl.constexpr(PHILOX_M_A), tl.constexpr(PHILOX_M_B)
PHILOX_MUL_A_ASM = tl.constexpr(_mul_wide_asm(PHILOX_M_A))
PHILOX_MUL_B_ASM = tl.constexpr(_mul_wide_asm(PHILOX_M_B))
PHILOX_KEY_A_K, PHILOX_KEY_B_K = tl.constexpr(0x9E3779B9), tl.constexpr(0xBB67AE85)
PHILOX_ROUNDS_K = tl.constexpr(10)
INTERPRET_K = tl.constexpr(interpreter_enabled())


@triton.jit
def _mulhilo(c, ASM: tl.constexpr, M: tl.constexpr):
    """(high, low) 32-bit halves of ``c * M`` (``c``: uint32 tensor). ``umulhi`` and ``*``
    compile to two multiplies (``IMAD.HI`` + ``IMAD``); ``mul.wide.u32`` is one
    (``IMAD.WIDE.U32``). With dropout the kernels are limited by this integer work (H200,
    d=128, s8k: forward 3.42 -> 3.25 ms, dQ 3.77 -> 3.32 ms)."""
    if INTERPRET_K:
        return tl.umulhi(c, M), c * M
    else:
        return tl.inline_asm_elementwise(ASM, "=r,=r,r", [c], dtype=(tl.uint32, tl.uint32),
                                         is_pure=True, pack=1)


@triton.jit
def philox4x32(seed, counters):
    """``tl.randint4x(seed, counters)`` bit for bit: Philox 4x32-10 of the counter
    ``(low 32 bits, high 32 bits, 0, 0)`` under the key ``(seed low, seed high)``, four uint32
    tensors shaped like ``counters`` (int64). Half the multiply instructions of Triton's own
    (see :func:`_mulhilo`); the first round's zero words are folded by hand, since inline
    PTX is opaque to constant folding."""
    seed = tl.cast(seed, tl.uint64)     # a launch may pass 1 as a specialised constant
    k0 = (seed & 0xFFFFFFFF).to(tl.uint32)
    k1 = (seed >> 32).to(tl.uint32)
    c0 = counters.to(tl.uint32)
    c1 = (counters >> 32).to(tl.uint32)
    # Round 1 with c2 = c3 = 0: (hi(B c2) ^ c1 ^ k0, B c2, hi(A c0) ^ c3 ^ k1, A c0).
    hi_a, lo_a = _mulhilo(c0, PHILOX_MUL_A_ASM, PHILOX_M_A_K)
    c0, c1, c2, c3 = c1 ^ k0, c1 * 0, hi_a ^ k1, lo_a
    for _ in tl.static_range(PHILOX_ROUNDS_K - 1):
        k0 = tl.add(k0, PHILOX_KEY_A_K, sanitize_overflow=False)
        k1 = tl.add(k1, PHILOX_KEY_B_K, sanitize_overflow=False)
        hi_a, lo_a = _mulhilo(c0, PHILOX_MUL_A_ASM, PHILOX_M_A_K)
        hi_b, lo_b = _mulhilo(c2, PHILOX_MUL_B_ASM, PHILOX_M_B_K)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
    return c0, c1, c2, c3


@triton.jit
def dropout_keep(seed, rng_offset, row_group, start_n, seqlen_k, dropout_p,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Bool ``(BLOCK_M, BLOCK_N)`` tile, True where dropout keeps the probability of (query
    ``start_m + i``, key ``start_n + j``). ``row_group``: the tile's first query row group,
    ``row_base + start_m // 2`` with ``row_base`` from :func:`dropout_bases`.

    One Philox 4x32 call gives eight 16-bit uniforms, kept iff ``>= dropout_p * 2**16`` (an
    integer: ``dropout_p`` is a multiple of 2**-16). The eight positions of one call are the
    queries ``{i, i + 8}`` times the keys ``{j, j + 1, j + 8, j + 9}`` of a 16 x 16 block: the
    register bits of Hopper's and Ampere's MMA accumulator layout (a thread holds rows r and
    r + 8 and, every 8 columns, a column pair). So the reshapes below only rename registers,
    and each thread runs one call per 8 of its probabilities (8 consecutive keys per call cost
    a shared-memory round trip per tile instead: 15 layout conversions per kernel). The dK/dV
    pass, on ``S^T`` tiles, transposes this tile: drawn directly in that orientation, the key
    pair ``{j, j + 1}`` lies across two threads, which would both run the call.

    Counter of the call for query row group ``g_q`` and key group ``g_k`` (query
    ``i -> (i // 16) * 8 + i % 8``, key ``j -> (j // 16) * 4 + (j // 2) % 4``):
    ``rng_offset + (row_base + g_q) * cdiv(seqlen_k, 16) * 4 + g_k``; word
    ``2 * (i // 8 % 2) + j // 8 % 2``, half ``j % 2``. ``reference/philox.py`` draws the same
    numbers, so the torch path and the kernels drop the same positions and the backward
    regenerates the forward's mask instead of storing it. ``start_m``/``start_n`` are multiples
    of 16 (tiles are)."""
    key_groups = tl.cdiv(seqlen_k, 16) * 4
    base = rng_offset + tl.cast(row_group, tl.int64) * key_groups + start_n // 4
    gm = tl.arange(0, BLOCK_M // 2)
    gn = tl.arange(0, BLOCK_N // 4)
    counters = base + (gm[:, None] * key_groups + gn[None, :])          # (BLOCK_M/2, BLOCK_N/4)
    w0, w1, w2, w3 = philox4x32(seed, counters)
    # (..., key bit 0, key bit 3, query bit 3): word 2 * q3 + k3, half k0
    u = tl.join(tl.join(_halves16(w0), _halves16(w1)), tl.join(_halves16(w2), _halves16(w3)))
    u = tl.reshape(u, (BLOCK_M // 16, 8, BLOCK_N // 16, 4, 2, 2, 2))
    u = tl.reshape(tl.permute(u, (0, 6, 1, 2, 5, 3, 4)), (BLOCK_M, BLOCK_N))
    return u >= tl.cast(dropout_p * DROPOUT_UNIT_K, tl.uint32)


@triton.jit
def add_bias(s2, bias_base, stride_bm, stride_bn, rows, cols, seqlen_q, seqlen_k,
             BIAS_BOOL: tl.constexpr, CHECK_COLS: tl.constexpr):
    """SDPA's ``attn_mask`` on a log2-domain score tile: bool (True = keep) or additive float.
    The mask tensor is read through broadcast strides (0 along broadcast dims), never copied.
    ``CHECK_COLS``: the tile may reach past the last key. Tiles that cannot skip that test, so
    the load keeps whole vectors along the keys (see :func:`load_tile`)."""
    inside = rows < seqlen_q
    if CHECK_COLS:
        inside = inside & (cols < seqlen_k)
    ptrs = bias_base + rows * stride_bm + cols * stride_bn
    if BIAS_BOOL:
        keep = tl.load(ptrs, mask=inside, other=0) != 0
        s2 = tl.where(keep, s2, float("-inf"))
    else:
        s2 = s2 + tl.load(ptrs, mask=inside, other=0.0).to(tl.float32) * LOG2E_K
    return s2


def bias_args(params, batch: int, nheads: int, seqlen_q: int, seqlen_k: int, fallback):
    """The attention mask as a broadcast ``(b, h, sq, sk)`` view (strides 0 where it broadcasts)."""
    bias = params.attn_bias
    if bias is None:
        return dict(BIAS=fallback, stride_bb=0, stride_bh=0, stride_bm=0, stride_bn=0,
                    HAS_BIAS=False, BIAS_BOOL=False)
    view = bias[(None,) * (4 - bias.dim())].expand(batch, nheads, seqlen_q, seqlen_k)
    return dict(BIAS=view, stride_bb=view.stride(0), stride_bh=view.stride(1),
                stride_bm=view.stride(2), stride_bn=view.stride(3), HAS_BIAS=True,
                BIAS_BOOL=bias.dtype == torch.bool)


@triton.jit
def bwd_probs(qk, lse2, rows, cols, seqlen_q, seqlen_k, diag_off, window_left, window_right,
              slope_log2, qk_scale, softcap_log2, bias_base, stride_bm, stride_bn, off_b, off_h,
              sm_args, mm_args, MASKED: tl.constexpr, HAS_LEFT: tl.constexpr,
              HAS_RIGHT: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_ALIBI: tl.constexpr,
              HAS_BIAS: tl.constexpr, BIAS_BOOL: tl.constexpr, SCORE_MOD: tl.constexpr,
              HAS_SCORE_MOD: tl.constexpr, MASK_MOD: tl.constexpr, USE_MASK_MOD: tl.constexpr,
              BIAS_CHECK_COLS: tl.constexpr):
    """Recompute ``P = exp(S - LSE)`` for one tile exactly as the forward built ``S`` (scale,
    softcap, ALiBi, score_mod, bias, mask_mod, band), in the orientation of ``qk`` (``lse2``
    broadcast like ``rows``). Returns ``(p, t, g)``: the softcap tanh and
    ``d score_mod / d score`` that :func:`chain_ds` needs."""
    s2, t = scores_log2(qk, rows, cols, seqlen_q, seqlen_k, slope_log2, qk_scale,
                        softcap_log2, HAS_SOFTCAP, HAS_ALIBI)
    g = t
    if HAS_SCORE_MOD:
        s_mod, g = SCORE_MOD(s2 * LN2_K, off_b, off_h, rows, cols, sm_args)
        s2 = s_mod * LOG2E_K
    if HAS_BIAS:
        s2 = add_bias(s2, bias_base, stride_bm, stride_bn, rows, cols, seqlen_q, seqlen_k,
                      BIAS_BOOL, BIAS_CHECK_COLS)
    if USE_MASK_MOD:
        s2 = tl.where(MASK_MOD(off_b, off_h, rows, cols, mm_args), s2, float("-inf"))
    p = tl.math.exp2(s2 - lse2)
    if MASKED:
        keep = band_mask(rows, cols, seqlen_k, diag_off, window_left, window_right,
                         HAS_LEFT, HAS_RIGHT)
        p = tl.where(keep, p, 0.0)
    return p, t, g


@triton.jit
def chain_ds(ds, t, g, HAS_SCORE_MOD: tl.constexpr, HAS_SOFTCAP: tl.constexpr):
    """dS (w.r.t. the final score) -> gradient w.r.t. ``scale * q.k``: through score_mod's slope
    (0 where dS is 0, so a hidden position's inf/NaN slope never leaks) and softcap's tanh."""
    if HAS_SCORE_MOD:
        ds = tl.where(ds == 0.0, 0.0, ds * g)
    if HAS_SOFTCAP:
        ds = ds * (1.0 - t * t)
    return ds


def mod_args(params, device, with_grad: bool = False) -> dict:
    """Compiled score_mod / mask_mod (:mod:`flashtile.codegen`) and their captured tensors.
    ``with_grad``: the score_mod that also returns ``d score_mod / d score`` (the backward's).
    Calls without mods skip the compiler entirely (the kernels never call the placeholders)."""
    if params.score_mod is None and params.mask_mod is None:
        return _placeholder_mods()
    from ..codegen import compile_mods
    sm, mm = compile_mods(params)
    return dict(sm_args=sm.kernel_args(device), mm_args=mm.kernel_args(device),
                SCORE_MOD=sm.fwd_grad_fn if with_grad else sm.fn,
                HAS_SCORE_MOD=params.score_mod is not None,
                MASK_MOD=mm.fn, HAS_MASK_MOD=params.mask_mod is not None)


@functools.lru_cache(maxsize=None)
def _placeholder_mods() -> dict:
    """Identity score_mod / all-visible mask_mod for calls without mods (compiled once)."""
    from ..codegen import compile_mask_mod, compile_score_mod
    return dict(sm_args=(), mm_args=(), SCORE_MOD=compile_score_mod(None).fn,
                HAS_SCORE_MOD=False, MASK_MOD=compile_mask_mod(None).fn, HAS_MASK_MOD=False)


def sparse_args(params, seqlen: int, fallback: torch.Tensor, lists: str) -> dict:
    """A BlockMask's block lists for the kernels: ``lists="kv"`` (forward, dQ: key blocks of each
    query block) or ``"q"`` (dK/dV: query blocks of each key block). int32, contiguous,
    ``(B|1, H|1, rows, width)`` indices padded past their counts. ``FULL_BOUND``: full blocks
    still need the sequence-end test because the last block overhangs ``seqlen``."""
    bm = params.block_mask
    if bm is None:
        return dict(KV_NUM=fallback, KV_IDX=fallback, FULL_KV_NUM=fallback, FULL_KV_IDX=fallback,
                    mask_b=1, mask_h=1, mask_nq=1, mask_nkv=1, SPARSE=False, MASK_BQ=16,
                    MASK_BKV=16, FULL_BOUND=False)
    if lists == "kv":
        num, idx, fnum, fidx = (bm.kv_num_blocks, bm.kv_indices, bm.full_kv_num_blocks,
                                bm.full_kv_indices)
    else:
        num, idx, fnum, fidx = (bm.q_num_blocks, bm.q_indices, bm.full_q_num_blocks,
                                bm.full_q_indices)
    bq, bkv = bm.BLOCK_SIZE
    return dict(KV_NUM=num.contiguous(), KV_IDX=idx.contiguous(), FULL_KV_NUM=fnum.contiguous(),
                FULL_KV_IDX=fidx.contiguous(), mask_b=num.shape[0], mask_h=num.shape[1],
                mask_nq=num.shape[2], mask_nkv=idx.shape[3], SPARSE=True, MASK_BQ=bq,
                MASK_BKV=bkv, FULL_BOUND=seqlen % (bkv if lists == "kv" else bq) != 0)


@triton.jit
def tanh(x):
    # Portable (GPU and interpreter) and saturates cleanly: exp overflow gives exactly +-1.
    return 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)


@triton.jit
def scores_log2(qk, rows, cols, seqlen_q, seqlen_k, slope_log2, qk_scale, softcap_log2,
                HAS_SOFTCAP: tl.constexpr, HAS_ALIBI: tl.constexpr):
    """Raw ``q . k`` -> log2-domain score (scale, softcap, ALiBi). Returns ``(s2, tanh_or_0)``;
    the tanh is kept for the softcap gradient ``1 - tanh^2``."""
    if HAS_SOFTCAP:
        t = tanh(qk * qk_scale)
        s2 = t * softcap_log2
    else:
        t = qk
        s2 = qk * qk_scale
    if HAS_ALIBI:
        dist = rows + (seqlen_k - seqlen_q) - cols
        dist = tl.where(dist < 0, -dist, dist)
        s2 = s2 - slope_log2 * dist.to(tl.float32)
    return s2, t


def seq_bucket(seqlen_q: int, seqlen_k: int) -> int:
    """Autotuning key for sequence lengths: tune once per power of two, not per length."""
    return next_pow2(max(seqlen_q, seqlen_k, 64))


def dropout_args(params) -> dict:
    """Dropout key and rate (a multiple of 2**-16, :class:`flashtile.AttentionParams`); the
    counter layout is shared with ``reference/philox.py``."""
    return dict(seed=params.seed, rng_offset=params.offset, dropout_p=params.dropout_p,
                HAS_DROPOUT=params.dropout_p > 0)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)
