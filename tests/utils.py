"""Shared test helpers: the error-budget rule and readable ids."""

from __future__ import annotations

import torch

import flashtile


GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
# The interpreter mis-computes bf16 dots: fp32 there, fp16 on the GPU.
DTYPE = torch.float16 if GPU else torch.float32
FLOOR = {torch.float32: 2e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}
BACKENDS = ["triton", "torch"]


def max_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    """Max abs difference in float64; NaN anywhere in ``x`` counts as infinite error."""
    x = x.detach().double()
    ref = ref.detach().double()
    if torch.isnan(x).any():
        return float("inf")
    diff = (x - ref).abs()
    # Masked (-inf) entries of LSE compare equal when both are -inf.
    both_inf = torch.isinf(x) & torch.isinf(ref) & (torch.sign(x) == torch.sign(ref))
    diff = torch.where(both_inf, torch.zeros_like(diff), diff)
    return float(diff.max()) if diff.numel() else 0.0


def assert_within_budget(name: str, ours: torch.Tensor, ref64: torch.Tensor,
                         same_dtype: torch.Tensor, floor: float) -> None:
    """``err(ours) <= 2 * err(torch in the same dtype) + floor``, both against the fp64 ref."""
    e_ours = max_err(ours, ref64)
    e_torch = max_err(same_dtype, ref64)
    budget = 2 * e_torch + floor
    assert e_ours <= budget, (f"{name}: error {e_ours:.3e} > budget {budget:.3e} "
                              f"(torch same-dtype error {e_torch:.3e}, floor {floor:.1e})")


def shape_id(b, sq, sk, hq, hkv, d, dv=None) -> str:
    dv = d if dv is None else dv
    s = f"B{b}-Sq{sq}-Sk{sk}-H{hq}/{hkv}-D{d}"
    return s if dv == d else s + f"-Dv{dv}"




def count_calls(monkeypatch, module, name: str) -> list:
    """Wrap ``module.name`` (the real one still runs) and return the list that collects the
    shape of each call's first argument."""
    calls = []
    real = getattr(module, name)

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)
    monkeypatch.setattr(module, name, spy)
    return calls


__all__ = ["BACKENDS", "DEVICE", "DTYPE", "FLOOR", "GPU", "assert_within_budget", "count_calls",
           "flashtile", "max_err", "shape_id"]
