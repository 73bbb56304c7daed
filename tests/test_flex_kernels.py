"""flex_attention on the Triton kernels: compiled score_mod/mask_mod and block-sparse loops
(partial blocks evaluate mask_mod, full blocks skip it), against the float64 reference.
Shapes and masks come from test_flex.py (the torch path's tests); block sizes are multiples
of 16, as the kernels need."""

from __future__ import annotations

import pytest
import torch
import test_flex as F

import flashtile
from flashtile import BlockMask, create_block_mask
from flashtile.masks import layout_mask, random_block_layout, sliding_window

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"


@pytest.fixture(autouse=True)
def _triton(monkeypatch):
    flashtile.set_backend("triton")
    # Any fallback to the torch path would make these tests vacuous: make it an error.
    monkeypatch.setattr(flashtile.flex, "_kernel_limitation", _no_fallback)
    yield
    flashtile.set_backend(None)


_REAL_LIMITATION = flashtile.flex._kernel_limitation


def _no_fallback(params):
    reason = _REAL_LIMITATION(params)
    assert reason is None, reason
    return None


SHAPES = [(2, 45, 37, 4, 2, 16, 16, 16), (1, 40, 70, 2, 1, 24, 16, (32, 16))]


def _inputs(*shape):
    return tuple(t.to(DEVICE) for t in F._inputs(*shape))


@pytest.mark.parametrize("shape", SHAPES, ids=[F._mask_shape_id(s) for s in SHAPES])
@pytest.mark.parametrize("name", list(F.MASKS))
def test_library_masks_on_kernels(name, shape):
    b, sq, sk, hq, hkv, d, dv, block = shape
    with torch.device(DEVICE):                   # tensors the mask captures live with q/k/v
        mask_mod, B, H = F.MASKS[name](b, hq, sq, sk)
    bm = create_block_mask(mask_mod, B, H, sq, sk, device=DEVICE, BLOCK_SIZE=block)
    q, k, v = _inputs(b, sq, sk, hq, hkv, d, dv)
    F._check(q, k, v, dict(mask_mod=mask_mod), block_mask=bm)


@pytest.mark.parametrize("with_mask", [False, True], ids=["no-mask", "sliding-11"])
@pytest.mark.parametrize("name", F.SCORE_MODS)
def test_score_mods_on_kernels(name, with_mask):
    b, sq, sk, hq, hkv, d = 2, 33, 27, 4, 2, 16
    with torch.device(DEVICE):
        score_mod = F._score_mods(hq, sq, sk)[name]
    q, k, v = _inputs(b, sq, sk, hq, hkv, d)
    if with_mask:
        mask_mod = sliding_window(11)
        bm = create_block_mask(mask_mod, None, None, sq, sk, device=DEVICE, BLOCK_SIZE=16)
        F._check(q, k, v, dict(score_mod=score_mod, mask_mod=mask_mod), score_mod=score_mod,
                 block_mask=bm)
    else:
        F._check(q, k, v, dict(score_mod=score_mod), score_mod=score_mod)


@pytest.mark.parametrize("density", [0.2, 0.6])
def test_random_layouts_on_kernels(density):
    b, sq, sk, hq, hkv, d, block = 2, 70, 61, 4, 2, 16, (16, 32)
    layout = random_block_layout(-(-sq // block[0]), -(-sk // block[1]), density, B=b, H=hq,
                                 seed=4, device=DEVICE)
    bm = BlockMask.from_layout(layout, sq, sk, BLOCK_SIZE=block)
    q, k, v = _inputs(b, sq, sk, hq, hkv, d)
    F._check(q, k, v, dict(mask_mod=layout_mask(layout, block), scale=0.3), block_mask=bm,
             scale=0.3)


def test_unsupported_mod_falls_back_with_a_reason(monkeypatch):
    monkeypatch.setattr(flashtile.flex, "_warned_fallback", False)
    monkeypatch.setattr(flashtile.flex, "_kernel_limitation", _REAL_LIMITATION)
    q, k, v = _inputs(1, 8, 8, 2, 2, 16)
    with pytest.warns(RuntimeWarning, match="torch path"):
        flashtile.flex_attention(q, k, v, score_mod=lambda s, b, h, i, j: s + torch.cumsum(s, 0))


def test_mod_capturing_a_tensor_on_another_device_is_a_clear_error():
    from flashtile.masks import document_mask, relative_position_bias
    q, k, v = _inputs(1, 8, 8, 2, 2, 16)
    elsewhere = "meta"
    with pytest.raises(ValueError, match="captures a tensor on meta"):
        flashtile.flex_attention(q, k, v,
                                 score_mod=relative_position_bias(torch.zeros(15, device=elsewhere)))
    docs = torch.zeros(8, dtype=torch.long, device=elsewhere)
    bm = create_block_mask(document_mask(torch.zeros(8, dtype=torch.long)), None, None, 8, 8,
                           device="cpu", BLOCK_SIZE=16)
    bm.mask_mod = document_mask(docs)
    with pytest.raises(ValueError, match="captures a tensor on meta"):
        flashtile.flex_attention(q.cpu(), k.cpu(), v.cpu(), block_mask=bm)
