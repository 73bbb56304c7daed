"""Correctness before speed: every provider is compared with the float64 reference before it is
timed, and a provider that fails is reported ``WRONG`` and never timed.

The rule is the test suite's (STYLE.md): for the output and, when the mode has a backward, for
dQ, dK and dV,

    err(provider, fp64 reference) <= 2 * err(plain torch in the same dtype, fp64 reference) + floor

with ``err`` the max absolute difference and ``floor`` the kernel tests' absolute floor for the
dtype (``FLOORS``; four times that for dQ and dK, which sum over a whole sequence), for when
plain torch happens to be very accurate.
Large cases are checked on :meth:`BenchCase.check_instance` (same head dim, mask, dtype and GQA
ratio, seqlen <= 1024) so the float64 scores fit in memory.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch

from ..params import AttentionParams
from ..reference.dense import attention_reference
from .cases import BenchCase
from .providers import Provider

# The same floors as tests/test_kernels.py, so "WRONG" here means what a failing test means.
FLOORS = {"fp32": 2e-5, "fp16": 1e-3, "bf16": 8e-3}
FLOOR_GRAD_FACTOR = {"dq": 4.0, "dk": 4.0}
GRAD_NAMES = ("dq", "dk", "dv")


@dataclass(frozen=True)
class Reference:
    """Inputs of one check instance, the float64 answers and the per-tensor error budgets."""

    case: BenchCase
    inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor]   # q, k, v in (b, s, h, d)
    dout: torch.Tensor                                        # (b, s, h, dv)
    expected: dict[str, torch.Tensor]                         # "out", "dq", "dk", "dv" in fp64
    budgets: dict[str, float]


@dataclass(frozen=True)
class CheckResult:
    """Outcome of checking one provider on one check instance.

    ``status`` is ``"ok"``, ``"WRONG"`` (error over budget), ``"n/a"`` (the provider does not
    support the case) or ``"error"`` (it raised); ``errors``/``budgets`` are per tensor.
    """

    status: str
    instance: BenchCase
    with_grads: bool
    reason: str | None = None
    errors: dict[str, float] = field(default_factory=dict)
    budgets: dict[str, float] = field(default_factory=dict)

    @property
    def worst_ratio(self) -> float | None:
        """Largest ``err / budget`` over the checked tensors (< 1 passes)."""
        ratios = [self.errors[n] / self.budgets[n] for n in self.errors if self.budgets[n] > 0]
        return max(ratios) if ratios else None

    def as_dict(self) -> dict:
        shape = self.instance.as_dict()
        return {"status": self.status, "reason": self.reason, "with_grads": self.with_grads,
                "instance": {k: shape[k] for k in ("b", "h", "hkv", "s", "d", "dv", "causal",
                                                   "dtype")},
                "errors": self.errors, "budgets": self.budgets, "worst_ratio": self.worst_ratio}


def max_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    """Max absolute difference in float64; NaN or inf anywhere in ``x`` counts as infinite."""
    x = x.detach().double()
    if not torch.isfinite(x).all():
        return float("inf")
    return float((x - ref).abs().max()) if x.numel() else 0.0


def random_inputs(case: BenchCase, device: torch.device, seed: int = 0):
    """Fresh ``randn`` Q, K, V and dO for ``case`` in ``(b, s, h, d)`` (never zeros)."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device).to(case.torch_dtype)
    b, s = case.batch, case.seqlen
    q = randn(b, s, case.nheads, case.headdim)
    k = randn(b, s, case.nheads_kv, case.headdim)
    v = randn(b, s, case.nheads_kv, case.dv)
    dout = randn(b, s, case.nheads, case.dv)
    return (q, k, v), dout


def _reference_params(case: BenchCase) -> AttentionParams:
    return AttentionParams(softmax_scale=case.scale, causal=case.causal,
                           window_right=0 if case.causal else -1)


def _reference_run(inputs, dout, case: BenchCase, dtype: torch.dtype, with_grads: bool):
    """``attention_reference`` in ``dtype`` with its gradients: ``{"out", "dq", "dk", "dv"}``."""
    leaves = [x.detach().to(dtype).clone().requires_grad_(with_grads) for x in inputs]
    out, _ = attention_reference(*leaves, _reference_params(case), dtype=dtype)
    result = {"out": out.detach()}
    if with_grads:
        out.backward(dout.to(dtype))
        result.update({name: leaf.grad for name, leaf in zip(GRAD_NAMES, leaves)})
    return result


def make_reference(case: BenchCase, device: torch.device, with_grads: bool) -> Reference:
    """Inputs, float64 answers and budgets for one check instance."""
    inputs, dout = random_inputs(case, device)
    expected = _reference_run(inputs, dout, case, torch.float64, with_grads)
    same_dtype = _reference_run(inputs, dout, case, case.torch_dtype, with_grads)
    budgets = {}
    for name, ref in expected.items():
        floor = FLOORS[case.dtype] * FLOOR_GRAD_FACTOR.get(name, 1.0)
        budgets[name] = 2.0 * max_err(same_dtype[name], ref) + floor
    return Reference(case=case, inputs=inputs, dout=dout, expected=expected, budgets=budgets)


def _run_provider(provider: Provider, ref: Reference, device: torch.device, with_grads: bool):
    """The provider's out (and grads) on the reference inputs, in ``(b, s, h, d)``."""
    leaves = [provider.to_native(x).requires_grad_(with_grads) for x in ref.inputs]
    with provider.context():
        fn = provider.build(ref.case, device)
        out = fn(*leaves)
        if with_grads:
            out.backward(provider.to_native(ref.dout))
    result = {"out": provider.from_native(out.detach())}
    if with_grads:
        for name, leaf in zip(GRAD_NAMES, leaves):
            grad = leaf.grad
            result[name] = None if grad is None else provider.from_native(grad)
    return result


def check_provider(provider: Provider, ref: Reference, device: torch.device,
                   with_grads: bool) -> CheckResult:
    """Run ``provider`` on the reference inputs and judge it; never raises."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = _run_provider(provider, ref, device, with_grads)
        except Exception as exc:  # any failure becomes a reported status, not a crash
            texts = [str(w.message) for w in caught]
            reason = provider.explain_failure(exc, texts)
            if reason is not None:
                return CheckResult("n/a", ref.case, with_grads, reason=reason)
            return CheckResult("error", ref.case, with_grads,
                               reason=f"{type(exc).__name__}: {str(exc).strip()[:300]}")
    errors, problems = {}, []
    for name, expected in ref.expected.items():
        if name != "out" and not with_grads:
            continue
        value = got.get(name)
        if value is None or tuple(value.shape) != tuple(expected.shape):
            shape = None if value is None else tuple(value.shape)
            errors[name] = float("inf")
            problems.append(f"{name} has shape {shape}, expected {tuple(expected.shape)}")
            continue
        errors[name] = max_err(value, expected)
        if not errors[name] <= ref.budgets[name]:
            problems.append(f"{name} err {errors[name]:.2e} > budget {ref.budgets[name]:.2e}")
    budgets = {name: ref.budgets[name] for name in errors}
    status = "WRONG" if problems else "ok"
    reason = "; ".join(problems) if problems else None
    return CheckResult(status, ref.case, with_grads, reason=reason, errors=errors,
                       budgets=budgets)


class Checker:
    """Checks providers once per (check instance, with/without gradients) and remembers it.

    Several grid points share one check instance (seqlens above 1024 all reduce to the same one),
    so a provider is checked once for all of them; a check with gradients also answers the
    forward-only question.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self._references: dict[tuple, Reference] = {}
        self._results: dict[tuple, CheckResult] = {}

    def check(self, provider: Provider, case: BenchCase) -> CheckResult:
        instance = case.check_instance().shape_key()
        with_grads = case.needs_grad
        for grads in ((True, False) if not with_grads else (True,)):
            cached = self._results.get((provider.name, instance, grads))
            if cached is not None:
                return cached
        result = check_provider(provider, self._reference(instance, with_grads), self.device,
                                with_grads)
        self._results[(provider.name, instance, with_grads)] = result
        return result

    def _reference(self, instance: BenchCase, with_grads: bool) -> Reference:
        key = (instance, with_grads)
        if key not in self._references:
            # Reuse a with-gradients reference for forward-only checks.
            if not with_grads and (instance, True) in self._references:
                return self._references[(instance, True)]
            self._references[key] = make_reference(instance, self.device, with_grads)
        return self._references[key]
