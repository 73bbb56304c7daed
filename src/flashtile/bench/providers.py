"""The attention implementations the benchmark compares ("providers").

Each provider takes Q, K, V in its own native layout (no hidden transposes inside the timed call):

==============  ============  ==================================================================
name            layout        what runs
==============  ============  ==================================================================
flashtile       (b, s, h, d)  ``flashtile.flash_attn_func``
sdpa-cudnn      (b, h, s, d)  torch SDPA forced to ``SDPBackend.CUDNN_ATTENTION``
sdpa-flash      (b, h, s, d)  torch SDPA forced to ``SDPBackend.FLASH_ATTENTION`` (FA2 kernels)
sdpa-efficient  (b, h, s, d)  torch SDPA forced to ``SDPBackend.EFFICIENT_ATTENTION``
sdpa-math       (b, h, s, d)  torch SDPA forced to ``SDPBackend.MATH`` (materialising)
flex            (b, h, s, d)  ``torch.compile(flex_attention)``, causal via a BlockMask
eager           (b, h, s, d)  matmul + softmax + matmul (K/V expanded for GQA)
fa2             (b, s, h, d)  ``flash_attn.flash_attn_func`` (FlashAttention-2), if importable
fa4             (b, s, h, d)  ``flash_attn.cute.flash_attn_func`` (FlashAttention-4), if importable
==============  ============  ==================================================================

A provider says up front when it cannot run a case (:meth:`Provider.unavailable`) and turns
"not supported" failures at run time into a reason (:meth:`Provider.explain_failure`); the runner
reports both as ``n/a``. Third-party packages are imported lazily, inside ``try``.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Callable

import torch

from .cases import BenchCase

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
GIB = 2 ** 30


class Provider:
    """Base class: one attention implementation.

    Subclasses set ``name``, ``layout`` (``"bshd"`` or ``"bhsd"``), ``description`` and
    implement :meth:`build`.
    """

    name = "?"
    layout = "bshd"
    description = ""
    # Bytes per element of the (b, h, s, s) matrices the provider materialises, per pass;
    # 0 for the tiled implementations.
    materialised_bytes_per_score = 0.0

    def unavailable(self, case: BenchCase, device: torch.device) -> str | None:
        """Why this provider cannot run ``case`` on ``device``, or ``None`` if it can."""
        return None

    def build(self, case: BenchCase, device: torch.device) -> AttentionFn:
        """A function ``(q, k, v) -> out`` (native layout) for this case; called outside timing."""
        raise NotImplementedError

    def context(self):
        """Context manager around every call (SDPA's backend selection)."""
        return contextlib.nullcontext()

    def explain_failure(self, error: BaseException, warning_texts: list[str]) -> str | None:
        """The reason if ``error`` means "case not supported"; ``None`` for a real error."""
        text = str(error)
        if (isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in text
                or "can't allocate memory" in text):
            return "out of memory at this size"
        if isinstance(error, NotImplementedError):
            return f"not supported: {_first_line(error)}"
        return None

    def launched_configs(self, case: BenchCase, device: torch.device) -> dict | None:
        """The kernel configs the last timed call ran (the subject's own kernels), if known."""
        return None

    def memory_estimate(self, case: BenchCase) -> float:
        """Bytes of ``seqlen x seqlen`` intermediates (for a clear n/a before an OOM)."""
        passes = 1 if case.mode == "fwd" else 2
        return self.materialised_bytes_per_score * passes * case.scores

    def to_native(self, x: torch.Tensor) -> torch.Tensor:
        """``(b, s, h, d)`` -> this provider's layout, contiguous (a fresh tensor)."""
        if self.layout == "bhsd":
            return x.transpose(1, 2).contiguous()
        return x.clone(memory_format=torch.contiguous_format)

    def from_native(self, x: torch.Tensor) -> torch.Tensor:
        """This provider's layout -> ``(b, s, h, d)`` (a view)."""
        return x.transpose(1, 2) if self.layout == "bhsd" else x


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:200]


def try_import(module: str, attr: str):
    """``(function, None)`` if ``module.attr`` imports, else ``(None, reason)``."""
    try:
        return getattr(importlib.import_module(module), attr), None
    except Exception as exc:  # ImportError, but also CUDA/ABI errors raised at import time
        return None, f"{module}.{attr} is not importable ({_first_line(exc)})"


def _needs_cuda(device: torch.device) -> str | None:
    return None if device.type == "cuda" else "needs a CUDA device"


def _needs_half(case: BenchCase) -> str | None:
    if case.dtype in ("bf16", "fp16"):
        return None
    return f"supports fp16/bf16 only, not {case.dtype}"


class FlashtileProvider(Provider):
    name = "flashtile"
    layout = "bshd"
    description = "flashtile.flash_attn_func"

    def build(self, case, device):
        from flashtile import flash_attn_func
        from flashtile.kernels import plans
        causal, scale = case.causal, case.scale
        plans.gluon_configs.clear()         # (so that launched_configs sees this case's)

        def run(q, k, v):
            return flash_attn_func(q, k, v, causal=causal, softmax_scale=scale)
        return run

    def launched_configs(self, case, device):
        """``{"fwd" | "dkdv" | "dq": "BLOCK_MxBLOCK_N/warps w/stages s"}`` of the kernels the
        case's mode runs (their autotuners' last config; replayed launch plans set it too; a
        Gluon kernel's label; dQ ``"in the dK/dV pass"`` when the backward ran one pass);
        None on the torch path."""
        from flashtile.backend import resolve
        if resolve(device) != "triton":
            return None
        from flashtile.kernels import bwd, fwd, plans
        tuners = {"fwd": fwd._fwd, "dkdv": bwd._dkdv, "dq": bwd._dq}
        names = {"fwd": ["fwd"], "bwd": ["dkdv", "dq"]}.get(case.mode, ["fwd", "dkdv", "dq"])
        out = {}
        for name in names:
            c = getattr(tuners[name], "best_config", None)
            if name == "dq" and bwd.last_dq_pass == "atomic":
                out[name] = "in the dK/dV pass"
            elif name in plans.gluon_configs:   # (a Gluon kernel ran it: its label)
                out[name] = plans.gluon_configs[name]
            elif c is not None:
                out[name] = (f"{c.kwargs['BLOCK_M']}x{c.kwargs['BLOCK_N']}/{c.num_warps}w/"
                             f"{c.num_stages}s")
        return out or None


class SdpaProvider(Provider):
    """torch SDPA with one backend forced, so torch cannot silently fall back to another."""

    layout = "bhsd"
    _CUDA_ONLY = ("CUDNN_ATTENTION", "EFFICIENT_ATTENTION")

    def __init__(self, name: str, backend: str, description: str):
        self.name = name
        self.backend = backend
        self.description = description
        if backend == "MATH":
            # S, P and a temporary, counted as float32 (torch may upcast half types).
            self.materialised_bytes_per_score = 3 * 4

    def unavailable(self, case, device):
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: F401
        except ImportError:
            return "torch.nn.attention.sdpa_kernel is missing (torch >= 2.3 needed)"
        if not hasattr(SDPBackend, self.backend):
            return f"this torch has no SDPBackend.{self.backend}"
        if self.backend in self._CUDA_ONLY:
            return _needs_cuda(device)
        return None

    def context(self):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(getattr(SDPBackend, self.backend))

    def build(self, case, device):
        import torch.nn.functional as F
        causal, scale = case.causal, case.scale
        # enable_gqa only when needed, so MHA also runs on a torch that lacks the argument.
        extra = {"enable_gqa": True} if case.gqa > 1 else {}

        def run(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, **extra)
        return run

    def explain_failure(self, error, warning_texts):
        text = str(error)
        if "No available kernel" in text or "No viable backend" in text:
            # On CUDA torch explains its refusal in warnings ("X kernel not used because:"
            # followed by the reasons); keep the reasons.
            reasons = [w.strip() for w in warning_texts if not w.strip().endswith("because:")]
            why = "; ".join(dict.fromkeys(reasons)) or "no reason given"
            return f"SDPBackend.{self.backend} has no kernel for this case: {why}"[:300]
        return super().explain_failure(error, warning_texts)


class FlexProvider(Provider):
    name = "flex"
    layout = "bhsd"
    description = "torch.compile(flex_attention), causal as a BlockMask"

    def __init__(self):
        self._compiled = None
        self._block_masks: dict[tuple, object] = {}     # (seqlen, device) -> BlockMask

    def unavailable(self, case, device):
        if device.type != "cuda":
            return "benchmarked on CUDA only (its CPU path compiles slowly)"
        _, reason = try_import("torch.nn.attention.flex_attention", "flex_attention")
        return reason

    def _compiled_flex(self):
        if self._compiled is None:
            import torch._dynamo.config as dynamo_config
            from torch.nn.attention.flex_attention import flex_attention
            # One compiled graph per shape: lift the recompile limit (8 by default), past which
            # dynamo silently falls back to the materialising eager flex_attention.
            for limit in ("recompile_limit", "cache_size_limit"):
                if hasattr(dynamo_config, limit):
                    setattr(dynamo_config, limit, max(getattr(dynamo_config, limit), 1024))
            for limit in ("accumulated_recompile_limit", "accumulated_cache_size_limit"):
                if hasattr(dynamo_config, limit):
                    setattr(dynamo_config, limit, max(getattr(dynamo_config, limit), 4096))
            self._compiled = torch.compile(flex_attention, dynamic=False)
        return self._compiled

    def _causal_block_mask(self, seqlen: int, device: torch.device):
        key = (seqlen, str(device))
        if key not in self._block_masks:
            from torch.nn.attention.flex_attention import create_block_mask

            def causal(b, h, q_idx, kv_idx):
                return q_idx >= kv_idx
            self._block_masks[key] = create_block_mask(causal, B=None, H=None, Q_LEN=seqlen,
                                                       KV_LEN=seqlen, device=device)
        return self._block_masks[key]

    def build(self, case, device):
        flex = self._compiled_flex()
        block_mask = self._causal_block_mask(case.seqlen, device) if case.causal else None
        scale, gqa = case.scale, case.gqa > 1

        def run(q, k, v):
            return flex(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=gqa)
        return run


class EagerProvider(Provider):
    """What a user writes without a fused kernel: ``softmax(Q K^T * scale) V``."""

    name = "eager"
    layout = "bhsd"
    description = "matmul + softmax + matmul in PyTorch"

    def memory_estimate(self, case):
        # Forward keeps S and P; backward's peak is P, dP, dS and CUDA's dP * P temporary
        # (all in the input dtype; see flashtile.ledger's eager timeline).
        elem = torch.finfo(case.torch_dtype).bits // 8
        return (2 if case.mode == "fwd" else 4) * elem * case.scores

    def build(self, case, device):
        causal, scale, group = case.causal, case.scale, case.gqa

        def run(q, k, v):                                         # q (b, h, s, d)
            if group > 1:                                         # k, v (b, hkv, s, d)
                k = k.repeat_interleave(group, dim=1)             # (b, h, s, d)
                v = v.repeat_interleave(group, dim=1)
            scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # (b, h, s, s)
            if causal:
                s = scores.shape[-1]
                hidden = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
                scores = scores.masked_fill(hidden, float("-inf"))
            return torch.matmul(torch.softmax(scores, dim=-1), v)  # (b, h, s, dv)
        return run


class FlashAttnProvider(Provider):
    """flash-attn's own packages: FlashAttention-2 (``flash_attn``) or -4 (``flash_attn.cute``)."""

    layout = "bshd"

    def __init__(self, name: str, module: str, description: str, min_capability: int):
        self.name = name
        self.module = module
        self.description = description
        self.min_capability = min_capability

    def unavailable(self, case, device):
        _, reason = try_import(self.module, "flash_attn_func")
        reason = reason or _needs_cuda(device) or _needs_half(case)
        if reason is None:
            major, minor = torch.cuda.get_device_capability(device)
            if major * 10 + minor < self.min_capability:
                reason = f"needs compute capability >= {self.min_capability / 10:.1f}"
        return reason

    def build(self, case, device):
        func, _ = try_import(self.module, "flash_attn_func")
        causal, scale = case.causal, case.scale

        def run(q, k, v):
            out = func(q, k, v, softmax_scale=scale, causal=causal)
            # flash_attn.cute returns (out, lse).
            return out[0] if isinstance(out, tuple) else out
        return run

    def explain_failure(self, error, warning_texts):
        text = str(error).lower()
        if any(w in text for w in ("not supported", "unsupported", "only supports")):
            return f"not supported: {_first_line(error)}"
        return super().explain_failure(error, warning_texts)


def default_providers() -> dict[str, Provider]:
    """All providers, in table order."""
    providers = [
        FlashtileProvider(),
        SdpaProvider("sdpa-cudnn", "CUDNN_ATTENTION", "torch SDPA, cuDNN backend"),
        SdpaProvider("sdpa-flash", "FLASH_ATTENTION", "torch SDPA, flash backend (FA2 kernels)"),
        SdpaProvider("sdpa-efficient", "EFFICIENT_ATTENTION",
                     "torch SDPA, memory-efficient backend"),
        SdpaProvider("sdpa-math", "MATH", "torch SDPA, math backend (materialising)"),
        FlexProvider(),
        EagerProvider(),
        FlashAttnProvider("fa2", "flash_attn", "flash_attn.flash_attn_func (FlashAttention-2)", 80),
        FlashAttnProvider("fa4", "flash_attn.cute",
                          "flash_attn.cute.flash_attn_func (FlashAttention-4)", 90),
    ]
    return {p.name: p for p in providers}


# The registry the CLI reads; tests add providers to it (e.g. a deliberately wrong one).
PROVIDERS: dict[str, Provider] = default_providers()

ALIASES = {"cudnn": "sdpa-cudnn", "flash": "sdpa-flash", "efficient": "sdpa-efficient",
           "effic": "sdpa-efficient", "math": "sdpa-math", "flexattention": "flex",
           "flash-attn": "fa2", "flash-attn-2": "fa2", "flash-attn-4": "fa4"}
CUDNN = "sdpa-cudnn"


def resolve_names(names: list[str]) -> list[str]:
    """Canonical provider names for user input (aliases, ``_`` for ``-``, any case; ``all``).

    Raises ``ValueError`` naming the unknown entries and the valid ones.
    """
    resolved, unknown = [], []
    for raw in names:
        name = raw.strip().lower().replace("_", "-")
        name = ALIASES.get(name, name)
        if name == "all":
            resolved += [n for n in PROVIDERS if n not in resolved]
        elif name in PROVIDERS:
            if name not in resolved:
                resolved.append(name)
        elif name:
            unknown.append(raw)
    if unknown:
        raise ValueError(f"unknown provider(s) {', '.join(map(repr, unknown))}; choose from "
                         f"{', '.join(PROVIDERS)} (aliases: {', '.join(ALIASES)})")
    if not resolved:
        raise ValueError(f"--providers is empty; choose from {', '.join(PROVIDERS)}")
    return resolved
