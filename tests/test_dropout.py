"""Dropout inside the kernels and the torch path: the mask is regenerated from (seed, offset),
never stored; both backends draw the same positions; the reference is rebuilt from S_dmask."""

from __future__ import annotations

import pytest
import torch
from utils import BACKENDS, DEVICE, DTYPE, FLOOR, assert_within_budget, shape_id

import flashtile
from flashtile import attention_reference, flash_attn_func
from flashtile.interface import _flash_params



def _inputs(b, sq, sk, hq, hkv, d):
    return (torch.randn(b, sq, hq, d, device=DEVICE, dtype=DTYPE),
            torch.randn(b, sk, hkv, d, device=DEVICE, dtype=DTYPE),
            torch.randn(b, sk, hkv, d, device=DEVICE, dtype=DTYPE))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", [(2, 37, 45, 4, 2, 16), (1, 50, 31, 2, 1, 24)],
                         ids=lambda s: shape_id(*s))
def test_dropout_matches_reference(backend, shape, causal):
    p = 0.3
    q, k, v = _inputs(*shape)
    qi, ki, vi = (t.clone().requires_grad_() for t in (q, k, v))
    out, lse, s_dmask = flash_attn_func(qi, ki, vi, dropout_p=p, causal=causal,
                                        return_attn_probs=True)
    dout = torch.randn_like(out)
    out.backward(dout)
    keep = s_dmask >= 0
    assert (~keep).any() and keep.any()
    params, _ = _flash_params(q, k, v, p, None, causal, (-1, -1), 0.0, None, False)

    def reference(dt):
        qr, kr, vr = (t.to(dt).requires_grad_() for t in (q, k, v))
        o, _ = attention_reference(qr, kr, vr, params, dropout_keep=keep, dtype=dt)
        o.backward(dout.to(dt))
        return o, qr.grad, kr.grad, vr.grad

    ref, same = reference(torch.float64), reference(DTYPE)
    for name, ours, r, s in zip(("out", "dq", "dk", "dv"), (out, qi.grad, ki.grad, vi.grad),
                                ref, same):
        assert_within_budget(name, ours, r, s, FLOOR[DTYPE] * (4 if name != "out" else 1))


def test_backends_drop_the_same_positions():
    q, k, v = _inputs(1, 40, 40, 2, 2, 16)
    masks = {}
    for name in BACKENDS:
        flashtile.set_backend(name)
        try:
            torch.manual_seed(7)
            out, _, s_dmask = flash_attn_func(q, k, v, dropout_p=0.5, return_attn_probs=True)
        finally:
            flashtile.set_backend(None)
        masks[name] = (s_dmask >= 0, out)
    assert torch.equal(masks["triton"][0], masks["torch"][0])
    assert (masks["triton"][1].double() - masks["torch"][1].double()).abs().max() < 1e-2


def test_keep_fraction_and_reproducibility(backend):
    p = 0.2
    q, k, v = _inputs(2, 64, 64, 2, 2, 16)
    torch.manual_seed(123)
    out1, _, m1 = flash_attn_func(q, k, v, dropout_p=p, return_attn_probs=True)
    out2, _, m2 = flash_attn_func(q, k, v, dropout_p=p, return_attn_probs=True)
    torch.manual_seed(123)
    out3, _, m3 = flash_attn_func(q, k, v, dropout_p=p, return_attn_probs=True)
    assert torch.equal(out1, out3) and torch.equal(m1, m3), "torch.manual_seed must reproduce"
    assert not torch.equal(m1 >= 0, m2 >= 0), "consecutive calls must draw new masks"
    n = m1.numel()
    kept = (m1 >= 0).sum().item() / n
    sigma = (p * (1 - p) / n) ** 0.5
    assert abs(kept - (1 - p)) < 5 * sigma, f"kept {kept:.4f}, expected {1 - p} +- {5 * sigma:.4f}"


def test_s_dmask_without_dropout_is_the_probabilities(backend):
    q, k, v = _inputs(1, 20, 30, 2, 1, 16)
    _, lse, probs = flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert (probs >= 0).all()
    sums = probs.double().sum(-1)
    visible = torch.isfinite(lse)
    assert torch.allclose(sums[visible], torch.ones_like(sums[visible]), atol=1e-2)
