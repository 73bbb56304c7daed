"""The public layer: bad input gets a clear error before any launch; the backend switch works."""

from __future__ import annotations

import pytest
import torch

import flashtile
from flashtile import flash_attn_func
from utils import DEVICE


def qkv(b=1, s=8, h=2, d=16, dtype=torch.float32, hkv=None, sk=None, dv=None):
    hkv = h if hkv is None else hkv
    sk = s if sk is None else sk
    dv = d if dv is None else dv
    return (torch.randn(b, s, h, d, dtype=dtype), torch.randn(b, sk, hkv, d, dtype=dtype),
            torch.randn(b, sk, hkv, dv, dtype=dtype))


def _noncontig_last(t):
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


# (id, build(q, k, v) -> (args, kwargs), exception type, words the message must contain)
BAD_INPUTS = [
    ("q-not-tensor", lambda q, k, v: ((q.tolist(), k, v), {}), TypeError, ["q", "torch.Tensor"]),
    ("rank-3", lambda q, k, v: ((q[0], k, v), {}), ValueError, ["q", "4 dimensions"]),
    ("dtype-mix", lambda q, k, v: ((q.half(), k, v), {}), TypeError, ["one dtype", "float16"]),
    ("dtype-int", lambda q, k, v: ((q.long(), k.long(), v.long()), {}), TypeError,
     ["float16, bfloat16 or float32"]),
    ("dtype-float64", lambda q, k, v: ((q.double(), k.double(), v.double()), {}), TypeError,
     ["float64"]),
    ("device-mix", lambda q, k, v: ((q, k.to("meta"), v), {}), ValueError, ["one device"]),
    ("batch-mismatch", lambda q, k, v: ((q, k[:0].new_empty(2, *k.shape[1:]).normal_(), v), {}),
     ValueError, ["batch"]),
    ("kv-seqlen", lambda q, k, v: ((q, k, v[:, :4]), {}), ValueError, ["same seqlen"]),
    ("kv-heads", lambda q, k, v: ((q, k, v[:, :, :1]), {}), ValueError, ["same number of heads"]),
    ("gqa-not-multiple", lambda q, k, v: qkv_args(h=3, hkv=2), ValueError, ["multiple", "3", "2"]),
    ("headdim-qk", lambda q, k, v: ((q, k[..., :8], v), {}), ValueError, ["same head dim"]),
    ("headdim-257", lambda q, k, v: qkv_args(d=257), ValueError, ["at most 256", "257"]),
    ("headdim-v-300", lambda q, k, v: qkv_args(dv=300), ValueError, ["at most 256", "300"]),
    ("last-dim-strided", lambda q, k, v: ((_noncontig_last(q), k, v), {}), ValueError,
     ["contiguous in its last dimension", ".contiguous()"]),
    ("empty-seqlen", lambda q, k, v: ((q[:, :0], k, v), {}), ValueError, ["empty"]),
    ("empty-batch", lambda q, k, v: ((q[:0], k[:0], v[:0]), {}), ValueError, ["empty"]),
    ("scale-str", lambda q, k, v: ((q, k, v), dict(softmax_scale="0.1")), TypeError,
     ["softmax_scale"]),
    ("scale-nan", lambda q, k, v: ((q, k, v), dict(softmax_scale=float("nan"))), TypeError,
     ["finite"]),
    ("causal-int", lambda q, k, v: ((q, k, v), dict(causal=1)), TypeError, ["causal", "bool"]),
    ("window-float", lambda q, k, v: ((q, k, v), dict(window_size=(2.0, 0))), TypeError,
     ["window_size", "ints"]),
    ("window-triple", lambda q, k, v: ((q, k, v), dict(window_size=(1, 2, 3))), TypeError,
     ["window_size"]),
    ("window-negative", lambda q, k, v: ((q, k, v), dict(window_size=(-2, 0))), ValueError,
     [">= -1"]),
    ("softcap-negative", lambda q, k, v: ((q, k, v), dict(softcap=-1.0)), ValueError,
     ["softcap", ">= 0"]),
    ("dropout-1", lambda q, k, v: ((q, k, v), dict(dropout_p=1.0)), ValueError, ["[0, 1)"]),
    ("dropout-negative", lambda q, k, v: ((q, k, v), dict(dropout_p=-0.1)), ValueError,
     ["[0, 1)"]),
    ("alibi-shape", lambda q, k, v: ((q, k, v), dict(alibi_slopes=torch.ones(3))), ValueError,
     ["alibi_slopes", "(2,)"]),
    ("alibi-dtype", lambda q, k, v: ((q, k, v), dict(alibi_slopes=torch.ones(2).half())),
     TypeError, ["float32"]),
    ("alibi-list", lambda q, k, v: ((q, k, v), dict(alibi_slopes=[0.5, 0.5])), TypeError,
     ["alibi_slopes"]),
    ("return-probs-str", lambda q, k, v: ((q, k, v), dict(return_attn_probs="yes")), TypeError,
     ["return_attn_probs"]),
]


def qkv_args(**shape):
    return qkv(**shape), {}


@pytest.mark.parametrize("build,exc,words", [b[1:] for b in BAD_INPUTS],
                         ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_a_clear_error(build, exc, words):
    q, k, v = qkv()
    for causal in (False, True):        # (a good call of the same tensors is remembered first)
        flash_attn_func(q, k, v, causal=causal)
    args, kwargs = build(q, k, v)
    with pytest.raises(exc) as info:
        flash_attn_func(*args, **kwargs)
    message = str(info.value)
    for word in words:
        assert word in message, f"{message!r} should mention {word!r}"


def test_parameters_are_remembered_per_signature():
    """A signature seen before reuses its parameters object (validation and the dataclass are
    the largest host cost of a small call); anything that changes them is part of the key."""
    from flashtile.interface import _PARAMS, _flash_params
    q, k, v = qkv(d=16)
    args = (0.0, None, True, (-1, -1), 0.0, None, False)
    first, _ = _flash_params(q, k, v, *args)
    again, _ = _flash_params(*(torch.randn_like(t) for t in (q, k, v)), *args)
    assert again is first and first.causal and first.window_right == 0
    wider, _ = _flash_params(*qkv(d=64), *args)
    assert wider is not first and wider.softmax_scale == 64 ** -0.5 != first.softmax_scale
    full, _ = _flash_params(q, k, v, 0.0, None, False, (-1, -1), 0.0, None, False)
    assert full is not first and not full.causal
    # other argument types and per-call values take the full path and are never remembered
    size = len(_PARAMS)
    listed, _ = _flash_params(q, k, v, 0.0, None, True, [-1, -1], 0.0, None, False)
    dropped, _ = _flash_params(q, k, v, 0.1, None, True, (-1, -1), 0.0, None, False)
    slopes, _ = _flash_params(q, k, v, 0.0, None, True, (-1, -1), 0.0, torch.ones(2), False)
    assert len(_PARAMS) == size and listed is not first and listed.causal
    assert dropped.dropout_p > 0 and slopes.alibi_slopes is not None
    with pytest.raises(TypeError, match="causal must be a bool"):
        _flash_params(q, k, v, 0.0, None, 1, (-1, -1), 0.0, None, False)


def test_backend_switch(monkeypatch):
    q, k, v = (t.to(DEVICE) for t in qkv())
    monkeypatch.setenv("FLASHTILE_BACKEND", "nonsense")
    with pytest.raises(ValueError, match="FLASHTILE_BACKEND"):
        flash_attn_func(q, k, v)
    monkeypatch.setenv("FLASHTILE_BACKEND", "torch")
    out_torch = flash_attn_func(q, k, v)
    flashtile.set_backend("triton")
    try:
        out_triton = flash_attn_func(q, k, v)      # interpreter on CPU, kernels on GPU
    finally:
        flashtile.set_backend(None)
    ref, _ = flashtile.attention_reference(q, k, v)
    assert (out_torch.double() - ref).abs().max() < 1e-5
    assert (out_triton.double() - ref).abs().max() < 1e-5
    with pytest.raises(ValueError, match="one of"):
        flashtile.set_backend("cuda")


def test_triton_backend_on_cpu_tensors_without_the_interpreter(monkeypatch):
    """CPU tensors with FLASHTILE_BACKEND=triton and no interpreter (a GPU machine): an error
    that says how to fix it, before any launch."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setenv("FLASHTILE_BACKEND", "triton")
    with pytest.raises(ValueError, match=r"needs CUDA tensors, got tensors on cpu.*"
                                         r"TRITON_INTERPRET=1.*FLASHTILE_BACKEND=torch"):
        flash_attn_func(*qkv())


def test_public_names():
    for name in ("flash_attn_func", "attention_reference", "set_backend", "get_backend"):
        assert name in flashtile.__all__ and hasattr(flashtile, name)
