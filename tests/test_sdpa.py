"""scaled_dot_product_attention: torch's semantics (top-left causal, bool/float masks of any
broadcast shape, GQA), fused in the kernels, checked against the float64 reference and torch."""

from __future__ import annotations

import pytest
import torch
from utils import DEVICE, DTYPE, FLOOR, assert_within_budget

import flashtile
from flashtile import AttentionParams, attention_reference, scaled_dot_product_attention



def _bhsd(b, h, s, d):
    return torch.randn(b, h, s, d, device=DEVICE, dtype=DTYPE)


MASKS = {
    "bool-full": lambda b, h, sq, sk: torch.rand(b, h, sq, sk, device=DEVICE) > 0.3,
    "bool-2d": lambda b, h, sq, sk: torch.rand(sq, sk, device=DEVICE) > 0.5,
    "bool-keys": lambda b, h, sq, sk: torch.rand(b, 1, 1, sk, device=DEVICE) > 0.2,
    "float-heads": lambda b, h, sq, sk: torch.randn(1, h, sq, sk, device=DEVICE, dtype=DTYPE),
    "float-rows": lambda b, h, sq, sk: torch.randn(b, 1, sq, 1, device=DEVICE, dtype=DTYPE),
    "float-neg-inf": lambda b, h, sq, sk: torch.where(
        torch.rand(b, h, sq, sk, device=DEVICE) > 0.5, 0.0, float("-inf")).to(DTYPE),
    "none-causal": None,
}


@pytest.mark.parametrize("mask", list(MASKS), ids=list(MASKS))
@pytest.mark.parametrize("sq,sk,hq,hkv", [(29, 45, 4, 2), (40, 23, 2, 2)], ids=["q<k-gqa", "q>k"])
def test_sdpa_matches_reference(backend, mask, sq, sk, hq, hkv):
    b, d = 2, 16
    query, key, value = _bhsd(b, hq, sq, d), _bhsd(b, hkv, sk, d), _bhsd(b, hkv, sk, d)
    attn_mask = MASKS[mask](b, hq, sq, sk) if MASKS[mask] else None
    causal = attn_mask is None
    qi, ki, vi = (t.clone().requires_grad_() for t in (query, key, value))
    out = scaled_dot_product_attention(qi, ki, vi, attn_mask=attn_mask, is_causal=causal,
                                       enable_gqa=hq != hkv)
    dout = torch.randn_like(out)
    out.backward(dout)
    params = AttentionParams(softmax_scale=d ** -0.5, window_right=0 if causal else -1,
                             bottom_right=False, causal=causal, attn_bias=attn_mask)

    def reference(dt):
        qr, kr, vr = (t.transpose(1, 2).to(dt).requires_grad_() for t in (query, key, value))
        o, _ = attention_reference(qr, kr, vr, params, dtype=dt)
        o.transpose(1, 2).backward(dout.to(dt))
        return o.transpose(1, 2), qr.grad.transpose(1, 2), kr.grad.transpose(1, 2), \
            vr.grad.transpose(1, 2)

    ref, same = reference(torch.float64), reference(DTYPE)
    for name, x, r, s in zip(("out", "dq", "dk", "dv"), (out, qi.grad, ki.grad, vi.grad),
                             ref, same):
        assert_within_budget(name, x, r, s, FLOOR[DTYPE] * (1 if name == "out" else 4))


def test_sdpa_agrees_with_torch_where_torch_is_defined():
    """Same numbers as torch's SDPA (top-left causal, GQA) where torch returns no NaN."""
    query, key, value = (_bhsd(1, 4, 33, 16).double(), _bhsd(1, 2, 47, 16).double(),
                         _bhsd(1, 2, 47, 16).double())
    flashtile.set_backend("torch")
    try:
        ours = scaled_dot_product_attention(query.float(), key.float(), value.float(),
                                            is_causal=True, enable_gqa=True)
    finally:
        flashtile.set_backend(None)
    theirs = torch.nn.functional.scaled_dot_product_attention(query, key, value, is_causal=True,
                                                              enable_gqa=True)
    assert (ours.double() - theirs).abs().max() < 1e-5


@pytest.mark.parametrize("shape", [(2, 4, 19, 27), (1, 4, 19, 27), (2, 1, 1, 27), (19, 27),
                                   (2, 1, 19, 1)], ids=["full", "heads", "keys", "2d", "rows"])
def test_float_mask_gradient(backend, shape):
    try:
        b, h, sq, sk, d = 2, 4, 19, 27, 16
        query, key, value = _bhsd(b, h, sq, d), _bhsd(b, h, sk, d), _bhsd(b, h, sk, d)
        bias = torch.randn(*shape, device=DEVICE, dtype=DTYPE, requires_grad=True)
        out = scaled_dot_product_attention(query, key, value, attn_mask=bias)
        dout = torch.randn_like(out)
        out.backward(dout)
        ref_bias = bias.detach().double().requires_grad_()
        params = AttentionParams(softmax_scale=d ** -0.5, bottom_right=False, attn_bias=ref_bias)
        o, _ = attention_reference(*(t.transpose(1, 2) for t in (query, key, value)), params)
        o.transpose(1, 2).backward(dout.double())
        same_bias = bias.detach().clone().requires_grad_()
        o2, _ = attention_reference(*(t.transpose(1, 2) for t in (query, key, value)),
                                    params.with_(attn_bias=same_bias), dtype=DTYPE)
        o2.transpose(1, 2).backward(dout)
        assert bias.grad.shape == bias.shape and bias.grad.dtype == bias.dtype
        assert_within_budget("dbias", bias.grad, ref_bias.grad, same_bias.grad, FLOOR[DTYPE] * 4)
    finally:
        flashtile.set_backend(None)


def test_rows_with_everything_masked_are_zero_not_nan(backend):
    query, key, value = _bhsd(1, 2, 8, 16), _bhsd(1, 2, 8, 16), _bhsd(1, 2, 8, 16)
    mask = torch.ones(8, 8, dtype=torch.bool, device=DEVICE)
    mask[3] = False
    out = scaled_dot_product_attention(query, key, value, attn_mask=mask)
    assert not torch.isnan(out).any()
    assert torch.all(out[:, :, 3] == 0)


BAD = {
    "mask-shape": (dict(attn_mask=torch.ones(3, 5, dtype=torch.bool)), ValueError, "broadcast"),
    "mask-int": (dict(attn_mask=torch.ones(8, 8, dtype=torch.int32)), TypeError, "bool"),
    "mask-and-causal": (dict(attn_mask=torch.ones(8, 8, dtype=torch.bool), is_causal=True),
                        ValueError, "not both"),
    "dropout-2": (dict(dropout_p=2.0), ValueError, "dropout_p"),
    "causal-int": (dict(is_causal=1), TypeError, "is_causal"),
    "gqa-str": (dict(enable_gqa="yes"), TypeError, "enable_gqa"),
    "scale-inf": (dict(scale=float("inf")), TypeError, "finite"),
}


@pytest.mark.parametrize("name", list(BAD), ids=list(BAD))
def test_sdpa_bad_input(name):
    kwargs, exc, word = BAD[name]
    if "attn_mask" in kwargs:
        kwargs = dict(kwargs, attn_mask=kwargs["attn_mask"].to(DEVICE))
    t = _bhsd(1, 2, 8, 16)
    for causal in (False, True):        # (a good call of the same tensors is remembered first)
        scaled_dot_product_attention(t, t, t, is_causal=causal)
    with pytest.raises(exc, match=word):
        scaled_dot_product_attention(t, t, t, **kwargs)


def test_sdpa_gqa_needs_enable_gqa():
    for _ in range(2):                  # (also once the GQA signature was remembered)
        scaled_dot_product_attention(_bhsd(1, 4, 8, 16), _bhsd(1, 2, 8, 16), _bhsd(1, 2, 8, 16),
                                     enable_gqa=True)
    with pytest.raises(ValueError, match="enable_gqa=True"):
        scaled_dot_product_attention(_bhsd(1, 4, 8, 16), _bhsd(1, 2, 8, 16), _bhsd(1, 2, 8, 16))


def test_sdpa_parameters_are_remembered_per_signature():
    """As flash_attn_func's (tests/test_interface.py): one object per signature, the mask,
    dropout and other argument types never remembered; flash-attn's and SDPA's entries apart
    (the same tensors mean other axes and another causal alignment)."""
    from flashtile.interface import _PARAMS, _flash_params, _remembered, _sdpa_params, \
        _sdpa_signature
    t = _bhsd(1, 2, 8, 16)

    def params(mask=None, dropout=0.0, causal=True, scale=None, gqa=False):
        return _remembered(_sdpa_signature(t, t, t, mask, dropout, causal, scale, gqa),
                           lambda: _sdpa_params(t, t, t, mask, dropout, causal, scale, gqa))
    first = params()
    assert params() is first and not first.bottom_right and first.window_right == 0
    assert params(causal=False) is not first and params(scale=0.5).softmax_scale == 0.5
    size = len(_PARAMS)
    mask = torch.ones(8, 8, dtype=torch.bool, device=DEVICE)
    assert params(mask=mask, causal=False).attn_bias is mask
    assert params(dropout=0.25).dropout_p == 0.25
    assert len(_PARAMS) == size
    flash, _ = _flash_params(t, t, t, 0.0, None, True, (-1, -1), 0.0, None, False)
    assert flash is not first and flash.bottom_right


def test_bool_mask_skips_hidden_tiles(monkeypatch):
    """A bool mask with whole hidden tiles: the kernels get a block summary (empty tiles never
    loaded, full tiles listed as full) and the answer stays exact."""
    import flashtile.interface as interface
    monkeypatch.setattr(interface, "SDPA_MASK_BLOCK", 16)
    seen = {}
    real = interface.attention

    def spy(q, k, v, params, backend):
        seen["block_mask"] = params.block_mask
        return real(q, k, v, params, backend)

    monkeypatch.setattr(interface, "attention", spy)
    flashtile.set_backend("triton")
    try:
        b, h, sq, sk, d = 1, 2, 48, 64, 16
        mask = torch.rand(sq, sk, device=DEVICE) > 0.3
        mask[:16, 16:] = False                       # hidden tiles
        mask[16:32, :32] = True                      # full tiles
        query, key, value = _bhsd(b, h, sq, d), _bhsd(b, h, sk, d), _bhsd(b, h, sk, d)
        out = scaled_dot_product_attention(query, key, value, attn_mask=mask)
    finally:
        flashtile.set_backend(None)
    bm = seen["block_mask"]
    partial, full = bm.dense_layouts()
    assert not (partial | full)[0, 0, 0, 1:].any()          # hidden tiles are not listed
    assert full[0, 0, 1, :2].all()                          # all-True tiles are full
    params = AttentionParams(softmax_scale=d ** -0.5, bottom_right=False, attn_bias=mask)
    ref, _ = attention_reference(*(t.transpose(1, 2) for t in (query, key, value)), params)
    same, _ = attention_reference(*(t.transpose(1, 2) for t in (query, key, value)), params,
                                  dtype=DTYPE)
    assert_within_budget("out", out, ref.transpose(1, 2), same.transpose(1, 2), FLOOR[DTYPE])
