"""No host synchronisation per call on the GPU paths a training or decoding loop repeats.

A call that reads a device value back (``.item()``, ``bool(t.any())``, ``.cpu()``) stalls the
host until the GPU has finished everything queued, so the next launch cannot overlap the
current kernels: small and sparse steps become host-bound. torch's sync debug mode turns every
such read into an error. (Varlen reads cu_seqlens on purpose, once per tensor version: only
the first call with a new tensor waits. The KV cache's value checks read values on purpose,
documented; the KV cache is tested here with its value checks off, as a decoding loop under
CUDA graphs runs it.)
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import flashtile
from flashtile import masks
from flashtile.kvcache import value_checks

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16


@contextlib.contextmanager
def no_sync():
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def _qkv(*shape):
    return [torch.randn(*shape, device="cuda", dtype=BF16, requires_grad=True) for _ in range(3)]


def test_flash_attn_func_forward_backward_never_syncs():
    q, k, v = _qkv(2, 256, 4, 64)
    dout = torch.randn_like(q)
    for _ in range(2):                     # the first call compiles; the second is a loop's call
        with no_sync():
            out = flashtile.flash_attn_func(q, k, v, causal=True, dropout_p=0.1)
            torch.autograd.grad(out, (q, k, v), dout)


def test_varlen_with_the_same_cu_seqlens_never_syncs_again():
    lengths = [100, 37, 250]
    cu = torch.tensor([0, 100, 137, 387], dtype=torch.int32, device="cuda")
    q, k, v = _qkv(sum(lengths), 4, 64)
    dout = torch.randn_like(q)
    flashtile.flash_attn_varlen_func(q, k, v, cu, cu, 250, 250, causal=True)   # reads cu once
    for _ in range(2):              # the layers of a step pass the same tensors
        with no_sync():
            out = flashtile.flash_attn_varlen_func(q, k, v, cu, cu, 250, 250, causal=True)
            torch.autograd.grad(out, (q, k, v), dout)


def test_flex_attention_with_block_mask_never_syncs():
    q, k, v = _qkv(2, 4, 384, 64)
    dout = torch.randn_like(q)
    layout = masks.random_block_layout(3, 3, 0.6, seed=1, device="cuda")[0, 0]
    bm = flashtile.create_block_mask(masks.layout_mask(layout, 128), None, None, 384, 384,
                                     device="cuda")
    causal = flashtile.create_block_mask(masks.causal_mask, None, None, 384, 384, device="cuda")
    for _ in range(2):
        with no_sync():
            for mask in (bm, causal):
                out = flashtile.flex_attention(q, k, v, block_mask=mask)
                torch.autograd.grad(out, (q, k, v), dout)


def test_kvcache_decode_without_value_checks_never_syncs():
    q = torch.randn(4, 1, 8, 64, device="cuda", dtype=BF16)
    kc = torch.randn(4, 512, 2, 64, device="cuda", dtype=BF16)
    vc = torch.randn_like(kc)
    k_new, v_new = (torch.randn(4, 1, 2, 64, device="cuda", dtype=BF16) for _ in range(2))
    lens = torch.full((4,), 300, dtype=torch.int32, device="cuda")
    with value_checks(False):
        for _ in range(2):
            with no_sync():
                flashtile.flash_attn_with_kvcache(q, kc, vc, k_new, v_new, cache_seqlens=lens,
                                                  causal=True, num_splits=0)
