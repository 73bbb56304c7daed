"""flash_attn_varlen_func: packed sequences, both backends, against the float64 reference run
on each sequence alone."""

from __future__ import annotations

import pytest
import torch
from utils import DEVICE, DTYPE, FLOOR, assert_within_budget

import flashtile
from flashtile import attention_reference, flash_attn_varlen_func
from flashtile.interface import _flash_params



def _cu(lengths):
    return torch.tensor([0] + list(torch.tensor(lengths).cumsum(0).tolist()), dtype=torch.int32,
                        device=DEVICE)


CASES = {
    "plain": dict(lq=[17, 5, 33], lk=[17, 5, 33]),
    "sq-ne-sk": dict(lq=[9, 30, 1], lk=[25, 12, 40]),
    "causal": dict(lq=[9, 30, 1], lk=[25, 12, 40], causal=True),
    "empty-seqs": dict(lq=[0, 12, 7], lk=[10, 0, 7], causal=True),
    "window": dict(lq=[20, 31], lk=[26, 31], window=(4, 2)),
    "alibi-softcap": dict(lq=[20, 31], lk=[26, 31], alibi=True, softcap=3.0, causal=True),
    "dropout": dict(lq=[20, 11], lk=[16, 29], dropout=0.25),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_varlen_matches_per_sequence_reference(backend, case):
    c = CASES[case]
    hq, hkv, d = 4, 2, 16
    cu_q, cu_k = _cu(c["lq"]), _cu(c["lk"])
    q = torch.randn(sum(c["lq"]), hq, d, device=DEVICE, dtype=DTYPE)
    k = torch.randn(sum(c["lk"]), hkv, d, device=DEVICE, dtype=DTYPE)
    v = torch.randn(sum(c["lk"]), hkv, d, device=DEVICE, dtype=DTYPE)
    batch = len(c["lq"])
    slopes = torch.rand(batch, hq, device=DEVICE) if c.get("alibi") else None
    kwargs = dict(causal=c.get("causal", False), window_size=c.get("window", (-1, -1)),
                  softcap=c.get("softcap", 0.0), alibi_slopes=slopes,
                  dropout_p=c.get("dropout", 0.0))
    qi, ki, vi = (t.clone().requires_grad_() for t in (q, k, v))
    out, lse, s_dmask = flash_attn_varlen_func(qi, ki, vi, cu_q, cu_k, max(c["lq"]), max(c["lk"]),
                                               return_attn_probs=True, **kwargs)
    assert out.shape == (q.shape[0], hq, d) and lse.shape == (hq, q.shape[0])
    dout = torch.randn_like(out)
    out.backward(dout)

    for b in range(batch):
        qs = slice(int(cu_q[b]), int(cu_q[b + 1]))
        ks = slice(int(cu_k[b]), int(cu_k[b + 1]))
        if qs.stop == qs.start:
            continue
        if ks.stop == ks.start:                 # rows that see no key: 0 and -inf, no NaN
            assert torch.all(out[qs] == 0) and torch.all(lse[:, qs] == float("-inf"))
            assert torch.all(qi.grad[qs] == 0)
            continue
        seq = [t[None, s] for t, s in ((q, qs), (k, ks), (v, ks))]
        params, _ = _flash_params(*seq, kwargs["dropout_p"], None, kwargs["causal"],
                                  kwargs["window_size"], kwargs["softcap"],
                                  None if slopes is None else slopes[b:b + 1], False)
        sq, sk = qs.stop - qs.start, ks.stop - ks.start
        keep = s_dmask[b:b + 1, :, :sq, :sk] >= 0

        def reference(dt):
            qr, kr, vr = (t.to(dt).requires_grad_() for t in seq)
            o, l = attention_reference(qr, kr, vr, params, dropout_keep=keep, dtype=dt)
            o.backward(dout[None, qs].to(dt))
            return o, l, qr.grad, kr.grad, vr.grad

        ref, same = reference(torch.float64), reference(DTYPE)
        ours = (out[None, qs], lse[None, :, qs], qi.grad[None, qs], ki.grad[None, ks],
                vi.grad[None, ks])
        for name, x, r, s in zip(("out", "lse", "dq", "dk", "dv"), ours, ref, same):
            assert_within_budget(f"seq{b}-{name}", x, r, s, FLOOR[DTYPE] * (1 if name == "out" else 4))
    # keys of sequences no query sees get zero gradient, never NaN
    assert not torch.isnan(ki.grad).any() and not torch.isnan(qi.grad).any()


def test_varlen_equals_batched_for_equal_lengths():
    b, s, h, d = 3, 21, 2, 16
    q, k, v = (torch.randn(b, s, h, d, device=DEVICE, dtype=DTYPE) for _ in range(3))
    cu = _cu([s] * b)
    packed = flash_attn_varlen_func(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu, cu,
                                    s, s, causal=True)
    batched = flashtile.flash_attn_func(q, k, v, causal=True)
    assert torch.allclose(packed.view(b, s, h, d).float(), batched.float(), atol=1e-3)


BAD = {
    "cu-int64": (lambda cu: cu.long(), TypeError, "int32"),
    "cu-decreasing": (lambda cu: torch.tensor([0, 10, 5, 20], dtype=torch.int32, device=DEVICE),
                      ValueError, "never decrease"),
    "cu-last": (lambda cu: torch.tensor([0, 10, 15, 19], dtype=torch.int32, device=DEVICE),
                ValueError, "packed length"),
    "cu-2d": (lambda cu: cu[None], ValueError, r"batch \+ 1"),
    "cu-list": (lambda cu: cu.tolist(), TypeError, "tensor"),
}


@pytest.mark.parametrize("name", list(BAD), ids=list(BAD))
def test_varlen_bad_cu_seqlens(name):
    build, exc, word = BAD[name]
    q = torch.randn(20, 2, 16, device=DEVICE, dtype=DTYPE)
    cu = _cu([10, 5, 5])
    with pytest.raises(exc, match=word):
        flash_attn_varlen_func(q, q, q, build(cu), cu, 10, 10)


def test_varlen_max_seqlen_too_small():
    q = torch.randn(20, 2, 16, device=DEVICE, dtype=DTYPE)
    cu = _cu([10, 5, 5])
    with pytest.raises(ValueError, match="longest"):
        flash_attn_varlen_func(q, q, q, cu, cu, 9, 10)
    with pytest.raises(ValueError, match="same batch"):
        flash_attn_varlen_func(q, q, q, cu, _cu([10, 10]), 10, 10)
