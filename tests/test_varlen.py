"""flash_attn_varlen_func: packed sequences, both backends, against the float64 reference run
on each sequence alone."""

from __future__ import annotations

import pytest
import torch
from utils import DEVICE, DTYPE, FLOOR, assert_within_budget

import flashtile
from flashtile import attention_reference, flash_attn_func, flash_attn_varlen_func
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
    check_case(case)


@pytest.mark.parametrize("case", ["causal", "empty-seqs", "dropout"])
def test_varlen_one_pass_dq(monkeypatch, case):
    """dQ added in the dK/dV pass (``FLASHTILE_BWD_DQ=atomic``) into the fp32 accumulator that
    the preprocess kernel zeroes, row by row of each packed sequence (buffers are NaN-poisoned
    under the tests: a row it missed would show)."""
    monkeypatch.setenv("FLASHTILE_BWD_DQ", "atomic")
    flashtile.set_backend("triton")
    try:
        check_case(case)
    finally:
        flashtile.set_backend(None)


def check_case(case):
    """One of :data:`CASES`, forward and backward, against the float64 reference run on each
    sequence alone (and the same reference in the inputs' dtype for the error budget)."""
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


def test_varlen_outputs_are_tensors_of_their_own(backend):
    """The output and the gradients are contiguous tensors of the packed shape, not autograd
    views (the Triton path writes them through (1, total, h, d) buffers): the same kind of
    tensor a dense call returns."""
    lengths, h, d = [9, 30, 1], 2, 16
    q, k, v = (torch.randn(sum(lengths), h, d, device=DEVICE, dtype=DTYPE, requires_grad=True)
               for _ in range(3))
    cu = _cu(lengths)
    out = flash_attn_varlen_func(q, k, v, cu, cu, 30, 30, causal=True)
    assert out.shape == (40, h, d) and out.is_contiguous() and not out._is_view()
    out.sum().backward()
    for t in (q, k, v):
        assert t.grad.shape == t.shape and t.grad.is_contiguous() and not t.grad._is_view()


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


def test_varlen_padded_layout_is_pointed_to_the_packed_one():
    """A (batch, seqlen, nheads, headdim) tensor given to the varlen API gets the reshape that
    packs it, not the dense API's hint to add a batch axis."""
    q = torch.randn(2, 10, 2, 16, device=DEVICE, dtype=DTYPE)
    cu = _cu([10, 10])
    with pytest.raises(ValueError, match=r"3 dimensions .*q\.reshape\(-1, \*q\.shape\[-2:\]\)"):
        flash_attn_varlen_func(q, q, q, cu, cu, 10, 10)
    with pytest.raises(ValueError, match=r"4 dimensions .*q\.unsqueeze\(0\)"):
        flash_attn_func(q[0], q, q)


@pytest.mark.parametrize("backend", ["triton"], indirect=True)
def test_cu_seqlens_read_once_per_version(backend, monkeypatch):
    """The Triton path reads cu_seqlens on the host (a wait on the device) once per tensor
    object and version: the layers of a step reuse the values; an in-place write is seen and
    checked; a new tensor with other values is read again. (The torch path reads it itself.)"""
    from flashtile import _validate

    q = torch.randn(20, 2, 16, device=DEVICE, dtype=DTYPE)
    cu, other, single = _cu([10, 5, 5]), _cu([4, 16]), _cu([4])
    reads = []
    real = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda t: reads.append(t.numel()) or real(t))
    first = flash_attn_varlen_func(q, q, q, cu, cu, 10, 10)
    assert reads == [4]                                  # cu_seqlens_q is cu_seqlens_k
    again = flash_attn_varlen_func(q, q, q, cu, cu, 10, 10)
    assert reads == [4] and torch.equal(first, again)
    cu[1:3] = torch.tensor([12, 9], dtype=torch.int32)   # in place: bumps cu._version
    with pytest.raises(ValueError, match="never decrease"):
        flash_attn_varlen_func(q, q, q, cu, cu, 12, 12)
    assert reads == [4, 4]
    out = flash_attn_varlen_func(q, q, q, other, other, 16, 16)
    assert reads == [4, 4, 3]
    assert torch.equal(out[:4], flash_attn_varlen_func(q[:4], q[:4], q[:4], single, single, 4, 4))
    assert len(_validate._HOST_VALUES) <= _validate.HOST_VALUES_KEPT


# ----------------------------------------------------------------------------------------------
# Paged K/V (block_table): a prefill over a paged cache, forward only.

PAGE = 128


def _paged(k_packed, lengths, pages_per_seq, num_blocks, seed=0):
    """Scatter packed keys into shuffled pages; returns (k_pages, block_table). Unused pages and
    rows hold random values (they must never be read)."""
    g = torch.Generator().manual_seed(seed)
    h, d = k_packed.shape[1:]
    k_pages = torch.randn(num_blocks, PAGE, h, d, generator=g).to(DEVICE, k_packed.dtype)
    order = torch.randperm(num_blocks, generator=g)
    table = torch.full((len(lengths), pages_per_seq), -1, dtype=torch.int32)
    start, used = 0, 0
    for b, n in enumerate(lengths):
        for j in range(-(-n // PAGE)):
            page = int(order[used])
            used += 1
            table[b, j] = page
            rows = k_packed[start + j * PAGE:start + min(n, (j + 1) * PAGE)]
            k_pages[page, :rows.shape[0]] = rows
        start += n
    return k_pages, table.to(DEVICE)


@pytest.mark.parametrize("causal", [False, True, "features"],
                         ids=["full", "causal", "window-softcap-alibi-dropout"])
def test_paged_varlen_equals_packed(backend, causal):
    lq, lk = [40, 1, 77], [300, 129, 77]
    hq, hkv, d = 4, 2, 16
    q = torch.randn(sum(lq), hq, d, device=DEVICE, dtype=DTYPE)
    k = torch.randn(sum(lk), hkv, d, device=DEVICE, dtype=DTYPE)
    v = torch.randn(sum(lk), hkv, d, device=DEVICE, dtype=DTYPE)
    k_pages, table = _paged(k, lk, pages_per_seq=4, num_blocks=9)
    v_pages, table_v = _paged(v, lk, pages_per_seq=4, num_blocks=9)
    assert torch.equal(table, table_v)                    # same seed: the same page layout
    cu_q, cu_k = _cu(lq), _cu(lk)
    kwargs = dict(causal=causal is True)
    if causal == "features":
        kwargs = dict(causal=True, window_size=(50, 0), softcap=4.0, dropout_p=0.2,
                      alibi_slopes=torch.rand(len(lq), hq, device=DEVICE))
    with torch.no_grad():
        torch.manual_seed(5)
        packed, lse_packed, _ = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lq), max(lk),
                                                       return_attn_probs=True, **kwargs)
        torch.manual_seed(5)                               # the same dropout key
        paged, lse_paged, _ = flash_attn_varlen_func(q, k_pages, v_pages, cu_q, cu_k, max(lq),
                                                     max(lk), block_table=table,
                                                     return_attn_probs=True, **kwargs)
    # The same tiles in the same order, only fetched through the table: identical results.
    assert torch.equal(paged, packed) and torch.equal(lse_paged, lse_packed)
    if causal == "features":
        return                                      # the packed path is checked elsewhere
    # and the paged result against the float64 reference of each sequence
    for b in range(len(lq)):
        qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        seq = [t[None, s] for t, s in ((q, qs), (k, ks), (v, ks))]
        params, _ = _flash_params(*seq, 0.0, None, causal, (-1, -1), 0.0, None, False)
        ref, _ = attention_reference(*(t.double() for t in seq), params)
        same, _ = attention_reference(*seq, params, dtype=DTYPE)
        assert_within_budget(f"seq{b}", paged[None, qs], ref, same, FLOOR[DTYPE])


def _paged_inputs():
    q = torch.randn(30, 2, 16, device=DEVICE, dtype=DTYPE)
    pages = torch.randn(4, PAGE, 1, 16, device=DEVICE, dtype=DTYPE)
    table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32, device=DEVICE)
    return q, pages, table, _cu([10, 20]), _cu([200, 256])


PAGED_BAD = {
    "table-int64": (lambda q, p, t: dict(block_table=t.long()), TypeError, "int32"),
    "table-batch": (lambda q, p, t: dict(block_table=t[:1]), ValueError, "batch=2"),
    "page-size": (lambda q, p, t: dict(k=p[:, :64], v=p[:, :64], block_table=t), ValueError,
                  "multiple of 128"),
    "page-out-of-range": (lambda q, p, t: dict(block_table=t.clone().fill_(4)), ValueError,
                          "out of range"),
    "table-too-short": (lambda q, p, t: dict(block_table=t[:, :1]), ValueError, "holds 1 pages"),
    "kv-3d": (lambda q, p, t: dict(k=p[:, 0], v=p[:, 0], block_table=t), ValueError, "4 dimensions"),
}


@pytest.mark.parametrize("name", list(PAGED_BAD), ids=list(PAGED_BAD))
def test_paged_varlen_bad_input(name):
    q, pages, table, cu_q, cu_k = _paged_inputs()
    build, exc, word = PAGED_BAD[name]
    args = dict(k=pages, v=pages, block_table=table)
    args.update(build(q, pages, table))
    with pytest.raises(exc, match=word):
        flash_attn_varlen_func(q, args["k"], args["v"], cu_q, cu_k, 20, 256,
                               block_table=args["block_table"])


def test_paged_varlen_is_forward_only():
    q, pages, table, cu_q, cu_k = _paged_inputs()
    with pytest.raises(ValueError, match="forward only"):
        flash_attn_varlen_func(q.requires_grad_(), pages, pages, cu_q, cu_k, 20, 256,
                               block_table=table)


def test_grid_takes_heaviest_sequences_first(monkeypatch):
    from flashtile import interface
    order = interface._heaviest_first([5, 40, 1, 40], [5, 30, 50, 40], "cpu")
    assert order.tolist() == [3, 1, 2, 0] and order.dtype == torch.int32
    # The order changes when a sequence runs, never what it computes (bitwise).
    lq, lk = [9, 30, 1, 17], [25, 12, 40, 17]
    q = torch.randn(sum(lq), 4, 16, device=DEVICE, dtype=DTYPE, requires_grad=True)
    k = torch.randn(sum(lk), 2, 16, device=DEVICE, dtype=DTYPE, requires_grad=True)
    v = torch.randn(sum(lk), 2, 16, device=DEVICE, dtype=DTYPE, requires_grad=True)
    results = []
    for reverse in (False, True):
        monkeypatch.setattr(interface, "_heaviest_first", lambda lq_, lk_, dev, r=reverse: (
            torch.arange(len(lq_), dtype=torch.int32, device=dev).flip(0) if r
            else torch.arange(len(lq_), dtype=torch.int32, device=dev)))
        out = flash_attn_varlen_func(q, k, v, _cu(lq), _cu(lk), max(lq), max(lk), causal=True)
        grads = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
        results.append((out, *grads))
    for a, b in zip(*results):
        assert torch.equal(a, b)
