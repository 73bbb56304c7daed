"""The Gluon dK/dV kernel for Hopper (:mod:`flashtile.kernels.bwd_hopper`): which calls take
it, and the gradients against the float64 reference (GPU; over the Gluon shapes with the
Gluon forward in tests/test_fwd_hopper.py); and what it shares with the Gluon dQ kernel
(switch, launch plans, fallbacks), for both."""

from __future__ import annotations

import pytest
import torch
from test_fwd_hopper import fallback_call
from test_kernels import check
from utils import (FLOOR, assert_d96_needs_dv96, assert_replays_match, assert_split_descriptors,
                   assert_within_budget, check_causal_groups, check_causal_windows,
                   check_persistent,
                   d96_gqa_inputs, gluon_cases_over, gluon_launches, gluon_switched_on,
                   needs_hopper)

from flashtile import attention_reference, flash_attn_func
from flashtile.interface import _flash_params
from flashtile.kernels import bwd_hopper, bwdrows_hopper, common, dq_hopper, fwd_hopper, plans


@pytest.fixture
def gluon_calls(monkeypatch):
    """Turns the Gluon dK/dV kernel on (as by default) and counts its launches (the real one
    runs)."""
    yield from gluon_switched_on(monkeypatch, "FLASHTILE_GLUON_BWD", bwd_hopper, "dkdv")


def reference_grads(q, k, v, dout, params=None):
    """(dq, dk, dv) of :func:`attention_reference` in float64 and in q's dtype."""
    def grads(dt):
        ins = [t.detach().to(dt).requires_grad_() for t in (q, k, v)]
        out = attention_reference(*ins, params, dtype=dt)[0]
        return torch.autograd.grad(out, ins, dout.to(dt))
    return grads(torch.float64), grads(q.dtype)


def assert_grads_within(label: str, grads, ref, same) -> None:
    """Each of (dq, dk, dv) within budget of the references (:func:`reference_grads`; floors
    as in ``test_kernels.check``)."""
    for name, g, r, s in zip(("dq", "dk", "dv"), grads, ref, same):
        assert_within_budget(name + label, g, r, s, FLOOR[g.dtype] * (4 if name != "dv" else 1))


@pytest.mark.parametrize("d,seqlen,group", [(64, 1024, 1), (64, 4096, 8), (128, 512, 8),
                                            (96, 512, 8)])
def test_causal_chunks_of_key_tiles_by_head_dim(monkeypatch, d, seqlen, group):
    """The dK/dV kernel's causal order runs in chunks of 1 up to
    :data:`bwd_hopper.SINGLE_UPTO` work items per head (d=64: 8, so 1k keys; d=128 and d=96,
    d=128's rule: never), else 8. Runs on the CPU: the launch is captured, not made."""
    seen = gluon_launches(monkeypatch, run=False)
    monkeypatch.delenv("FLASHTILE_GLUON_BWD_GROUP", raising=False)
    q, k, v, dout = (torch.randn(1, seqlen, 2, d, dtype=torch.bfloat16) for _ in range(4))
    params, _ = _flash_params(q, k, v, 0.0, None, True, (-1, -1), 0.0, None, False)
    lse = dsum = torch.zeros(1, 2, seqlen)
    bwd_hopper.dkdv(q, k, v, dout, lse, dsum, torch.empty_like(k), torch.empty_like(v), params)
    ((role, _, meta),) = seen
    assert role == "dkdv" and meta["CAUSAL"] and meta["GROUP"] == group


@pytest.mark.parametrize("value,causal,hq,one_pass,d,seqlen,skips", [
    ("1", True, 2, False, 64, 1024, True), ("1", False, 2, False, 64, 1024, False),
    ("1", True, 4, False, 64, 1024, False), ("1", True, 2, True, 64, 1024, True),
    ("1", True, 2, True, 128, 1024, True), ("1", True, 4, True, 128, 1024, False),
    ("1", True, 2, False, 64, 2048, True), ("0", True, 2, False, 64, 1024, False),
    ("0", True, 4, True, 128, 512, False), ("auto", True, 2, False, 64, 1024, True),
    (None, True, 2, False, 64, 512, True), (None, True, 2, True, 128, 1024, True),
    (None, True, 4, True, 128, 1024, False), (None, True, 4, False, 64, 1024, False),
    (None, False, 2, False, 64, 1024, False), (None, True, 2, False, 64, 2048, False),
    (None, True, 2, True, 128, 2048, False)])
def test_skip_masked_rule(monkeypatch, value, causal, hq, one_pass, d, seqlen, skips):
    """The second consumer skips each causal item's tiles above its keys, in two passes and
    in one (:mod:`.bwdrows_hopper`'s kernel at d=128), only with one query head per KV head
    (GQA 2:1 here does not, forced or not). Unset or ``auto``: up to
    :data:`bwd_hopper.SKIP_UPTO` work items per head (1k keys, not 2k); ``1`` at every
    length, ``0`` never. What the launch gets. Runs on the CPU: the launch is captured, not
    made."""
    monkeypatch.delenv("FLASHTILE_GLUON_BWD_ROWS", raising=False)
    seen = gluon_launches(monkeypatch, run=False, full=True)
    if value is None:
        monkeypatch.delenv("FLASHTILE_GLUON_BWD_SKIP_MASKED", raising=False)
    else:
        monkeypatch.setenv("FLASHTILE_GLUON_BWD_SKIP_MASKED", value)
    q, dout = (torch.randn(1, seqlen, hq, d, dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(1, seqlen, 2, d, dtype=torch.bfloat16) for _ in range(2))
    params, _ = _flash_params(q, k, v, 0.0, None, causal, (-1, -1), 0.0, None, False)
    lse = dsum = torch.zeros(1, hq, seqlen)
    dq_acc = torch.zeros(bwd_hopper.dq_acc_shape(q)) if one_pass else None
    bwd_hopper.dkdv(q, k, v, dout, lse, dsum, torch.empty_like(k), torch.empty_like(v), params,
                    dq_acc=dq_acc)
    ((_, kernel, _, _, _, meta, _, role, _),) = seen
    assert role == "dkdv" and meta["SKIP_MASKED"] is skips
    if d == 128 and one_pass:   # (the rows kernel: a one pass by construction)
        assert kernel is bwdrows_hopper._dkdv_rows_kernel
    else:
        assert kernel is bwd_hopper._dkdv_hopper_kernel and meta["ONE_PASS"] is one_pass
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_SKIP_MASKED", "yes")
    with pytest.raises(ValueError, match="0, 1 or 'auto'"):
        bwd_hopper.skips_masked(True, 8, False)


def check_skip_masked(gluon_calls, monkeypatch, shape, causal, dtype, one_pass) -> None:
    """``FLASHTILE_GLUON_BWD_SKIP_MASKED=1`` over one call: all three gradients within budget
    (``test_kernels.check``), one launch of the dK/dV kernel, with the skip exactly where it
    applies (causal, one query head per work item: MHA, or causal GQA in d=128's rows kernel,
    per query head: :func:`.bwd_hopper.expands`)."""
    monkeypatch.setenv("FLASHTILE_BWD_DQ", "atomic" if one_pass else "two-pass")
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_SKIP_MASKED", "1")
    launches = gluon_launches(monkeypatch)
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert len(gluon_calls) == 1
    (meta,) = [meta for role, _, meta in launches if role == "dkdv"]
    # (the rows kernel, d=128's default one pass, has no ONE_PASS switch: it is one)
    assert meta.get("ONE_PASS", True) is one_pass
    # (one query head an item: MHA, or GQA per query head by the backward's own rule)
    q = torch.empty(b, s, hq, d, dtype=dtype, device="cuda")
    k = torch.empty(b, s, hkv, d, dtype=dtype, device="cuda")
    params, _ = _flash_params(q, k, k, 0.0, None, causal, (-1, -1), 0.0, None, False)
    one_head = bwd_hopper.dkdv_heads(q, k, params, one_pass) == hq
    assert meta["SKIP_MASKED"] is (causal and one_head)


@gluon_cases_over([(3, 512, 4, 4, 64), (2, 1024, 8, 8, 64), (2, 1024, 4, 4, 128),
                   (1, 512, 2, 2, 96), (2, 1024, 8, 2, 64)])
def test_skip_masked_tiles(gluon_calls, monkeypatch, shape, causal, dtype):
    """The skip in two passes: the second consumer releases the tiles wholly above its keys
    unread (d=64 and d=96: one an item, d=128: two); several items per program (d=64's
    persistent grid) and one; GQA (where it stays off) and the unmasked calls unchanged."""
    check_skip_masked(gluon_calls, monkeypatch, shape, causal, dtype, one_pass=False)


@gluon_cases_over([(3, 512, 4, 4, 64), (2, 2048, 4, 4, 64), (2, 1024, 4, 4, 128),
                   (2, 1024, 8, 2, 64)])
def test_skip_masked_tiles_one_pass(gluon_calls, monkeypatch, shape, causal, dtype):
    """The skip in one pass (at d=128 this kernel's, not the rows kernel's): the second
    consumer skips the products of the tiles above its keys but still adds its part of their
    dQ."""
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_ROWS", "0")   # (this kernel, not the rows one)
    check_skip_masked(gluon_calls, monkeypatch, shape, causal, dtype, one_pass=True)


@gluon_cases_over([(2, 1024, 4, 4, 128), (4, 512, 4, 4, 128), (2, 1024, 8, 2, 128),
                   (2, 1024, 4, 4, 64)])
def test_skip_masked_tiles_rows(gluon_calls, monkeypatch, shape, causal, dtype):
    """The skip in the rows kernel's one pass (:mod:`.bwdrows_hopper`: d=128's default, d=64
    with ``FLASHTILE_GLUON_BWD_ROWS=1``): the second consumer's tiles above its keys only
    hand over a zero dS half and add their dQ columns from the other's; GQA 4:1 at d=128
    causal runs per query head (:func:`.bwd_hopper.expands`), so it skips as MHA does;
    d=64's GQA (per KV head) does not."""
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_ROWS", "1")
    check_skip_masked(gluon_calls, monkeypatch, shape, causal, dtype, one_pass=True)
    assert plans.gluon_configs["dkdv"].startswith("gluon rows"), plans.gluon_configs


@pytest.mark.parametrize("persistent", [False, True], ids=["one-per-item", "one-per-sm"])
def test_kv_buffers_follow_the_grid(monkeypatch, persistent):
    """Each consumer keeps two K/V buffers only when a program has a next item to load ahead
    (a persistent grid smaller than the work), else one (64 KB less shared memory at d=128).
    Runs on the CPU, which gets the H200's grids: the launch is captured, not made."""
    from flashtile.kernels.common import DEFAULT_SM_COUNT
    seen = gluon_launches(monkeypatch, run=False)
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_PERSISTENT", "1" if persistent else "0")
    q, k, v, dout = (torch.randn(1, 4096, 16, 128, dtype=torch.bfloat16) for _ in range(4))
    params, _ = _flash_params(q, k, v, 0.0, None, False, (-1, -1), 0.0, None, False)
    lse = dsum = torch.zeros(1, 16, 4096)
    bwd_hopper.dkdv(q, k, v, dout, lse, dsum, torch.empty_like(k), torch.empty_like(v), params)
    ((role, grid, meta),) = seen
    assert role == "dkdv"
    n_work = bwd_hopper.work_tiles(q, k) * 16                # (b = 1, 16 KV heads)
    assert grid == ((DEFAULT_SM_COUNT,) if persistent else (n_work,))
    assert n_work > DEFAULT_SM_COUNT
    assert meta["KV_BUFS"] == (2 if persistent else 1)


@pytest.mark.parametrize("causal,seqlen,per_sm", [(False, 2048, True), (True, 1024, True),
                                                   (True, 2048, False)])
def test_default_grid_at_d64(monkeypatch, causal, seqlen, per_sm):
    """d=64's default grid (:func:`.bwd_hopper.persistent_ahead`): one program per SM
    unmasked and causal up to 8 items per head (1k), one per item causal beyond. Runs on the
    CPU, which gets the H200's grids: the launch is captured, not made."""
    from flashtile.kernels.common import DEFAULT_SM_COUNT
    seen = gluon_launches(monkeypatch, run=False)
    monkeypatch.delenv("FLASHTILE_GLUON_BWD_PERSISTENT", raising=False)
    q, k, v, dout = (torch.randn(2, seqlen, 16, 64, dtype=torch.bfloat16) for _ in range(4))
    params, _ = _flash_params(q, k, v, 0.0, None, causal, (-1, -1), 0.0, None, False)
    lse = dsum = torch.zeros(2, 16, seqlen)
    bwd_hopper.dkdv(q, k, v, dout, lse, dsum, torch.empty_like(k), torch.empty_like(v), params)
    ((role, grid, _),) = seen
    n_work = bwd_hopper.work_tiles(q, k) * 2 * 16
    assert role == "dkdv" and n_work > DEFAULT_SM_COUNT
    assert grid == ((DEFAULT_SM_COUNT,) if per_sm else (n_work,))


def test_head_dim_96_config_and_rules(monkeypatch):
    """d=96: 64 keys x 64 queries x 4 slots (measured ahead of 32 queries, session 21),
    d=128's rules for the grid (one program per item) and the causal chunks (never of 1); and
    no one pass (:func:`has_one_pass`)."""
    monkeypatch.delenv("FLASHTILE_GLUON_BWD_CONFIG", raising=False)
    assert bwd_hopper.config(96) == (64, 64, 4, 240)
    assert bwd_hopper.SINGLE_UPTO[96] == 0
    assert not bwd_hopper.persistent_ahead(96)
    assert [bwd_hopper.has_one_pass(d) for d in (64, 96, 128)] == [True, False, True]


def test_head_dim_96_runs_in_split_tiles(monkeypatch):
    """d=96 (switched on, on a stubbed sm_90 device): the dK/dV kernel covers it (and the Gluon
    dQ kernel, tests/test_dq_hopper.py); the launch splits the head dim into 64 + 32 columns:
    thirteen TMA descriptors (q, k, v, dout, dk, dv for columns 0:64, the dQ stand-in, then the six for
    64:96), all over the folded ``(b*s, h*96)`` views, boxes of 64 and 32 columns (rows: 64 for
    q/dout/k/v/dk/dv), swizzled 128 and 64 bytes; ``HEAD_D=64, HEAD_D2=32``, two
    passes (a dQ accumulator is refused). The lengths must be multiples of the 64-query and
    128-key tiles, and d = dv. The other head dims pass seven descriptors and None for the
    second part's six. The launch is captured, not made."""
    monkeypatch.setattr(fwd_hopper, "is_sm90", lambda device: True)
    for variable in ("FLASHTILE_GLUON_BWD", "FLASHTILE_GLUON_DQ"):
        monkeypatch.setenv(variable, "1")
    for variable in ("FLASHTILE_GLUON_BWD_CONFIG", "FLASHTILE_GLUON_BWD_PERSISTENT"):
        monkeypatch.delenv(variable, raising=False)
    launches = gluon_launches(monkeypatch, run=False, full=True)
    q, dout, k, v = d96_gqa_inputs()
    lse = dsum = torch.zeros(2, 3, 1024)
    for causal in (False, True):
        params, _ = _flash_params(q, k, v, 0.0, None, causal, (-1, -1), 0.0, None, False)
        assert bwd_hopper.supports(dout, q, k, v, params)
        assert dq_hopper.supports(dout, q, k, v, params)
        assert bwd_hopper.call_one_pass(q, k, params) == "two-pass"
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        bwd_hopper.dkdv(q, k, v, dout, lse, dsum, dk, dv, params)
        (_, _, grid, tiles, args, meta, make_descriptor, role, _), = launches
        launches.clear()
        assert role == "dkdv" and meta["HEAD_D"] == 64 and meta["HEAD_D2"] == 32
        assert meta["BLOCK_N"] == 64 and meta["BLOCK_M"] == 64 and meta["NUM_STAGES"] == 4
        assert meta["CAUSAL"] == causal and not meta["ONE_PASS"] and meta["KV_BUFS"] == 1
        assert grid == (2 * 1 * 1024 // 128,)                 # one program per item
        assert [(t, tile) for t, tile in tiles] == [
            (q, (64, 64)), (k, (64, 64)), (v, (64, 64)), (dout, (64, 64)), (dk, (64, 64)),
            (dv, (64, 64)), (dk, (64, 64)),
            (q, (64, 32)), (k, (64, 32)), (v, (64, 32)), (dout, (64, 32)), (dk, (64, 32)),
            (dv, (64, 32))]
        assert args[0] is lse, "no None in place of a second-part descriptor"
        assert_split_descriptors(tiles, make_descriptor)
        with pytest.raises(ValueError, match="no one pass at d=96"):
            bwd_hopper.dkdv(q, k, v, dout, lse, dsum, dk, dv, params,
                            dq_acc=torch.zeros(2, 1024, 3, 96))
    params, _ = _flash_params(q, k, v, 0.0, None, False, (-1, -1), 0.0, None, False)
    for sq, sk, runs in ((1024, 960, False), (992, 1024, False), (960, 1024, True)):
        qq = torch.randn(2, sq, 3, 96, dtype=torch.bfloat16)
        kk = torch.randn(2, sk, 1, 96, dtype=torch.bfloat16)
        assert bwd_hopper.supports(qq.clone(), qq, kk, kk, params) == runs, (sq, sk)
    assert_d96_needs_dv96(bwd_hopper.supports)
    q = torch.randn(1, 512, 2, 128, dtype=torch.bfloat16)
    params, _ = _flash_params(q, q, q, 0.0, None, False, (-1, -1), 0.0, None, False)
    bwd_hopper.dkdv(q, q, q, q, torch.zeros(1, 2, 512), torch.zeros(1, 2, 512),
                    torch.empty_like(q), torch.empty_like(q), params)
    (_, _, _, tiles, args, meta, _, _, _), = launches
    assert len(tiles) == 7 and args[:6] == (None,) * 6 and meta["HEAD_D2"] == 0
    assert [tile for _, tile in tiles] == [(32, 128), (64, 128), (64, 128), (32, 128),
                                           (64, 128), (64, 128), (64, 128)]


@pytest.mark.parametrize("module", ["bwd_hopper", "dq_hopper"])
def test_tile_and_dout_conditions(monkeypatch, module):
    """Beyond the shared device/feature cover (stubbed true here, so this runs on CPU): the
    lengths must be multiples of the kernel's tiles and dout must be shaped, typed and laid
    out like q."""
    from flashtile.kernels import dq_hopper, fwd_hopper
    kernel = {"bwd_hopper": bwd_hopper, "dq_hopper": dq_hopper}[module]
    monkeypatch.setenv("FLASHTILE_GLUON_BWD", "1")
    monkeypatch.setenv("FLASHTILE_GLUON_DQ", "1")
    monkeypatch.setattr(fwd_hopper, "covers", lambda *args: True)

    def qkv(s):
        return [torch.randn(1, s, 2, 128, dtype=torch.bfloat16) for _ in range(3)]
    q, k, v = qkv(512)
    params, _ = _flash_params(q, k, v, 0.0, None, False, (-1, -1), 0.0, None, False)
    assert kernel.supports(q.clone(), q, k, v, params)
    assert not kernel.supports(*qkv(512 + 16)[:1], *qkv(512 + 16), params), "ragged length"
    assert not kernel.supports(q.half(), q, k, v, params), "dout dtype"
    strided = torch.randn(1, 2, 512, 128, dtype=torch.bfloat16).transpose(1, 2)
    assert not kernel.supports(strided, q, k, v, params), "dout TMA cannot read"


@pytest.mark.gpu
@needs_hopper
def test_causal_as_a_window(gluon_calls):
    """A non-causal call with the window (-1, 0) has the causal mask (sq == sk): the Gluon
    kernels read the mask from the window, as the tile-level ones do."""
    check(1, 512, 512, 4, 2, 128, 128, torch.bfloat16, window=(-1, 0))
    assert len(gluon_calls) == 1


# Both Gluon backward kernels (dK/dV; dQ, opt-in): their switch, module and launcher.
BACKWARD = {"dkdv": ("FLASHTILE_GLUON_BWD", bwd_hopper, "dkdv"),
            "dq": ("FLASHTILE_GLUON_DQ", dq_hopper, "dq")}


@pytest.fixture(params=list(BACKWARD))
def backward_calls(request, monkeypatch):
    """Each Gluon backward kernel switched on in turn: (its switch, its counted launches); the
    Gluon dQ kernel with two passes (in one pass the dK/dV kernel adds dQ)."""
    variable, module, name = BACKWARD[request.param]
    if name == "dq":
        monkeypatch.setenv("FLASHTILE_BWD_DQ", "two-pass")
    for calls in gluon_switched_on(monkeypatch, variable, module, name):
        yield variable, calls


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("d", [64, 96, 128])
def test_switched_off_runs_the_tile_level_kernel(backward_calls, monkeypatch, d):
    """Switched off (``=0``; dQ's default): the same dense calls go to the tile-level kernel."""
    variable, calls = backward_calls
    monkeypatch.setenv(variable, "0")
    for causal in (False, True):
        check(1, 1024, 1024, 8, 2, d, d, torch.bfloat16, causal=causal)
    assert calls == []


@gluon_cases_over([(2, 1024, 8, 2, 128), (2, 1024, 8, 8, 64), (1, 256, 2, 2, 128),
                   (3, 512, 4, 1, 64)])
def test_one_pass_dq(gluon_calls, monkeypatch, shape, causal, dtype):
    """``FLASHTILE_BWD_DQ=atomic``: the Gluon dK/dV kernel also computes dQ, each consumer
    its part from both consumers' dS^T tiles, added by TMA reductions into an fp32
    accumulator; GQA/MQA (dQ of every query head of a KV head), causal, one and several work
    items per program (d=64's persistent grid); all three gradients within budget; one
    launch of the kernel and none of a dQ kernel."""
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_ROWS", "0")   # (this kernel, not the rows one)
    monkeypatch.setenv("FLASHTILE_BWD_DQ", "atomic")
    monkeypatch.setenv("FLASHTILE_GLUON_DQ", "1")   # (two passes would launch its dQ kernel)
    dq_calls = []
    monkeypatch.setattr(dq_hopper, "dq", lambda *a, **k: dq_calls.append(a))
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert len(gluon_calls) == 1, "the one-pass backward should have run the Gluon kernel"
    assert dq_calls == []


@pytest.mark.parametrize("value", [None, "auto", "0", "1"])
def test_per_query_head_rule(monkeypatch, value):
    """:func:`bwd_hopper.expands` through the call's own pass choice
    (:func:`bwd_hopper.call_one_pass`): GQA's dK/dV per query head at d=64 causal from 2k (this
    kernel's one pass) and at d=128 causal (the rows kernel); per KV head at d=64 1k (two
    passes), unmasked, at d=96 (two passes only) and in this kernel's one pass at d=128
    (``FLASHTILE_GLUON_BWD_ROWS=0``: unmeasured); ``1`` / ``0`` force it either way; MHA keeps
    its heads. Runs on the CPU."""
    if value is None:
        monkeypatch.delenv("FLASHTILE_GLUON_BWD_EXPAND", raising=False)
    else:
        monkeypatch.setenv("FLASHTILE_GLUON_BWD_EXPAND", value)
    forced = {"0": False, "1": True}.get(value)
    # (head dim, keys, causal, FLASHTILE_GLUON_BWD_ROWS, one pass?, per query head by rule?)
    for d, seqlen, causal, rows, one_pass, rule in (
            (64, 2048, True, None, True, True), (64, 4096, True, None, True, True),
            (64, 1024, True, None, False, False), (64, 2048, False, None, True, False),
            (96, 2048, True, None, False, False), (96, 4096, True, None, False, False),
            (128, 2048, True, None, True, True), (128, 2048, False, None, True, False),
            (128, 2048, True, "0", True, False)):
        if rows is None:
            monkeypatch.delenv("FLASHTILE_GLUON_BWD_ROWS", raising=False)
        else:
            monkeypatch.setenv("FLASHTILE_GLUON_BWD_ROWS", rows)
        q = torch.randn(2, seqlen, 8, d, dtype=torch.bfloat16)
        k = torch.randn(2, seqlen, 2, d, dtype=torch.bfloat16)
        params, _ = _flash_params(q, k, k, 0.0, None, causal, (-1, -1), 0.0, None, False)
        case = (d, seqlen, causal, rows, value)
        assert (bwd_hopper.has_one_pass(d)
                and bwd_hopper.call_one_pass(q, k, params) != "two-pass") is one_pass, case
        want = rule if forced is None else forced
        assert bwd_hopper.dkdv_heads(q, k, params, one_pass) == (8 if want else 2), case
        assert bwd_hopper.dkdv_heads(q, q, params, one_pass) == 8, case          # (MHA)


def test_per_query_head_launch(monkeypatch):
    """``FLASHTILE_GLUON_BWD_EXPAND=1`` in this kernel (:func:`bwd_hopper.dkdv_heads`: d=64
    and d=96, one pass and two; forced here): dK/dV buffers with q's heads make a grid over
    (batch, query head, key item), ``KV_SHARE`` = hq / hkv, one query head an item (group 1:
    MHA's skip and serial order), labelled so; k-shaped buffers keep the per-KV-head launch.
    Captured on the CPU."""
    for name in ("FLASHTILE_GLUON_BWD_ROWS", "FLASHTILE_GLUON_BWD_CONFIG",
                 "FLASHTILE_GLUON_BWD_PERSISTENT", "FLASHTILE_GLUON_BWD_SKIP_MASKED",
                 "FLASHTILE_GLUON_BWD_SERIAL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_EXPAND", "1")
    launches = gluon_launches(monkeypatch, run=False, full=True)
    for d, one_pass in ((64, True), (64, False), (96, False)):
        q, dout = (torch.randn(2, 1024, 6, d, dtype=torch.bfloat16) for _ in range(2))
        k = torch.randn(2, 1024, 2, d, dtype=torch.bfloat16)
        params, _ = _flash_params(q, k, k, 0.0, None, True, (-1, -1), 0.0, None, False)
        heads = bwd_hopper.dkdv_heads(q, k, params, one_pass)
        assert heads == 6, (d, one_pass)
        lse = dsum = torch.zeros(2, 6, 1024)
        dq_acc = torch.zeros(bwd_hopper.dq_acc_shape(q)) if one_pass else None
        for parts, share in ((torch.empty(2, 1024, heads, d, dtype=torch.bfloat16), 3),
                             (torch.empty_like(k), 1)):
            bwd_hopper.dkdv(q, k, k, dout, lse, dsum, parts, parts.clone(), params,
                            dq_acc=dq_acc)
            ((_, kernel, grid, _, args, meta, _, _, label),) = launches
            launches.clear()
            assert kernel is bwd_hopper._dkdv_hopper_kernel, (d, one_pass)
            assert meta["KV_SHARE"] == share
            assert label.endswith(" per query head") is (share > 1), label
            items_heads = 6 if share > 1 else 2
            n_work = bwd_hopper.work_tiles(q, k) * 2 * items_heads
            # (the arguments end: heads, group, sq, sk, n_ntiles, n_work, two scales, the
            # claimed items' count or its stand-in)
            assert args[-9:-3] == (items_heads, 6 // items_heads, 1024, 1024,
                                   bwd_hopper.work_tiles(q, k), n_work), args[-9:]
            assert grid[0] <= n_work, grid
            assert meta["SKIP_MASKED"] is (share > 1 and bwd_hopper.skips_masked(
                True, bwd_hopper.work_tiles(q, k), False))


def test_zero_pair_fills_the_accumulators():
    """``bwd._zero_pair``: the first n elements of both float32 accumulators (the dK/dV that
    GQA's query heads add into, :func:`bwd_hopper.adds_dkdv`) become zeros, in programs of
    BLOCK, the last one partial; nothing beyond n is written. (The Triton interpreter on the
    CPU, the GPU otherwise.)"""
    from flashtile.kernels import bwd
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x, y = (torch.full((100,), float("nan"), device=device) for _ in range(2))
    bwd._zero_pair[(3,)](x, y, 37, BLOCK=16)
    for t in (x, y):
        assert torch.equal(t[:37], torch.zeros(37, device=device))
        assert t[37:].isnan().all()


@pytest.mark.parametrize("g,d,dv", [(4, 8, 8), (3, 24, 40)], ids=["g4-d8", "g3-d24-dv40"])
def test_sum_head_groups(g, d, dv):
    """``bwd._sum_head_groups``: each (batch, key, KV head) row of dK / dV is the float32 sum,
    rounded once, of its g query heads' parts, in one launch for both (grid axis 1); a head
    dim below its padded block and a last partial block of rows; the parts are not modified.
    (The Triton interpreter on the CPU, the GPU otherwise; fp16.)"""
    from flashtile.kernels import bwd
    device = "cuda" if torch.cuda.is_available() else "cpu"
    b, s, hkv, block_r = 2, 7, 3, 8
    dk_parts = torch.randn(b, s, hkv * g, d, device=device).to(torch.float16)
    dv_parts = torch.randn(b, s, hkv * g, dv, device=device).to(torch.float16)
    before = dk_parts.clone(), dv_parts.clone()
    dk_out = torch.full((b, s, hkv, d), float("nan"), dtype=torch.float16, device=device)
    dv_out = torch.full((b, s, hkv, dv), float("nan"), dtype=torch.float16, device=device)
    n_rows = b * s * hkv                                  # (42: 5 full blocks of 8 and 2)
    bwd._sum_head_groups[(-(-n_rows // block_r), 2)](
        dk_parts, dv_parts, dk_out, dv_out, n_rows, G=g, HEAD_D=d, HEAD_DV=dv, BLOCK_R=block_r,
        BLOCK_D=32 if d > 16 else 16, BLOCK_DV=64 if dv > 32 else 16)
    for out, parts, width in ((dk_out, dk_parts, d), (dv_out, dv_parts, dv)):
        want = parts.float().view(b, s, hkv, g, width).sum(3).to(torch.float16)
        assert torch.equal(out, want)
    assert torch.equal(dk_parts, before[0]) and torch.equal(dv_parts, before[1])


@gluon_cases_over([(2, 1024, 8, 2, 64), (3, 512, 4, 1, 64), (2, 1024, 6, 2, 96)])
def test_per_query_head(gluon_calls, monkeypatch, shape, causal, dtype):
    """``FLASHTILE_GLUON_BWD_EXPAND=1`` at d=64 (one pass and two) and d=96 (two passes):
    GQA and MQA, causal and not, dK/dV per query head in this kernel, summed per KV head:
    all three gradients within budget (outputs NaN-poisoned); one launch, per query head."""
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_EXPAND", "1")
    b, s, hq, hkv, d = shape
    launches = gluon_launches(monkeypatch)
    for mode in ("atomic", "two-pass") if d == 64 else ("two-pass",):
        monkeypatch.setenv("FLASHTILE_BWD_DQ", mode)
        launches.clear()
        gluon_calls.clear()
        check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
        assert len(gluon_calls) == 1, mode
        (meta,) = [meta for role, _, meta in launches if role == "dkdv"]
        assert meta["KV_SHARE"] == hq // hkv, mode


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("shape", [(1, 2048, 8, 2, 64), (2, 2304, 4, 1, 64)],
                         ids=lambda s: "B{}-S{}-H{}/{}-D{}".format(*s))
@needs_hopper
@pytest.mark.gpu
def test_per_query_head_default(gluon_calls, monkeypatch, shape, dtype):
    """The default rule (:func:`bwd_hopper.expands`, no variable set): d=64 causal GQA/MQA
    from 2k keys (one pass; 2304: a partial last key tile) runs per query head; all three
    gradients within budget (outputs NaN-poisoned); one launch, ``KV_SHARE`` query heads."""
    for name in ("FLASHTILE_GLUON_BWD_EXPAND", "FLASHTILE_BWD_DQ", "FLASHTILE_GLUON_BWD_ROWS"):
        monkeypatch.delenv(name, raising=False)
    launches = gluon_launches(monkeypatch)
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=True)
    assert len(gluon_calls) == 1
    (meta,) = [meta for role, _, meta in launches if role == "dkdv"]
    assert meta["KV_SHARE"] == hq // hkv and meta["ONE_PASS"]


@gluon_cases_over([(2, 1024, 8, 2, 128), (3, 512, 4, 1, 64)])
def test_one_pass_dq_late(gluon_calls, monkeypatch, shape, causal, dtype):
    """``FLASHTILE_GLUON_BWD_DQ_LATE=1``: each tile's dQ part leaves after the next tile's
    products are issued; all three gradients within budget."""
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_ROWS", "0")   # (this kernel, not the rows one)
    monkeypatch.setenv("FLASHTILE_BWD_DQ", "atomic")
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_DQ_LATE", "1")
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert len(gluon_calls) == 1


@gluon_cases_over([(3, 512, 4, 4, 64), (2, 1024, 8, 2, 64), (1, 256, 2, 1, 64),
                   (2, 512, 4, 4, 128)])
@pytest.mark.parametrize("one_pass", [False, True], ids=["two-pass", "one-pass"])
@pytest.mark.parametrize("wide", [False, True], ids=["default-queries", "128-queries"])
def test_serial_order(gluon_calls, monkeypatch, shape, causal, dtype, one_pass, wide):
    """``FLASHTILE_GLUON_BWD_SERIAL=1``: each consumer waits for a tile's dV and dK before the
    next tile's S^T and dP^T (LSE and D one per thread until used), at each head dim's default
    queries per tile and at a wider tile in 2 slots (``FLASHTILE_GLUON_BWD_CONFIG``: d=64 128
    queries, d=128 64);
    two passes and one, causal, GQA/MQA, several items per program: all three gradients
    within budget, one launch of this kernel with the switch on."""
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_ROWS", "0")   # (this kernel, not the rows one)
    monkeypatch.setenv("FLASHTILE_BWD_DQ", "atomic" if one_pass else "two-pass")
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_SERIAL", "1")
    b, s, hq, hkv, d = shape
    # (d=128 keeps 32 queries: its S^T, dP^T, dK, dV fill the registers; its "wide" case runs
    # 64 queries x 2 slots, the serial order's other shape there)
    queries = (128 if d == 64 else 64) if wide else bwd_hopper.config(d)[1]
    slots = 2 if wide else bwd_hopper.config(d)[2]
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_CONFIG", f"64,{queries},{slots},240")
    launches = gluon_launches(monkeypatch)
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert len(gluon_calls) == 1
    (meta,) = [meta for role, _, meta in launches if role == "dkdv"]
    assert meta["SERIAL"] is True and meta["ONE_PASS"] is one_pass
    assert meta["BLOCK_M"] == queries and meta["NUM_STAGES"] == slots


def test_serial_switch(monkeypatch):
    """The serial order's rule: d=64's one pass where the queries divide into 128-query
    tiles; ``1``/``0`` force it; anything else is rejected."""
    monkeypatch.delenv("FLASHTILE_GLUON_BWD_SERIAL", raising=False)
    assert bwd_hopper.serial(64, True, 1024) is True
    assert bwd_hopper.serial(64, True, 320) is False      # (5 tiles of 64, not of 128)
    assert bwd_hopper.serial(64, False, 1024) is False    # (two passes)
    assert bwd_hopper.serial(128, True, 1024) is False
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_SERIAL", "1")
    assert bwd_hopper.serial(128, False, 1024) is True
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_SERIAL", "0")
    assert bwd_hopper.serial(64, True, 1024) is False
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_SERIAL", "yes")
    with pytest.raises(ValueError, match="FLASHTILE_GLUON_BWD_SERIAL"):
        bwd_hopper.serial(64, True, 1024)


@pytest.mark.parametrize("d,seqlen,causal,one_pass,serial,queries", [
    (64, 1024, False, True, True, 128), (64, 2048, True, True, True, 128),
    (64, 1024, True, False, False, 64), (64, 320, False, True, False, 64),
    (128, 1024, False, False, False, 32)])
def test_default_serial_config(monkeypatch, d, seqlen, causal, one_pass, serial, queries):
    """The launch the rule makes (captured on the CPU, not run): d=64's one pass in the
    serial order at 128 queries per tile, 2 slots; two passes, lengths 128 does not divide,
    and d=128 in their old configs."""
    seen = gluon_launches(monkeypatch, run=False)
    for name in ("FLASHTILE_GLUON_BWD_SERIAL", "FLASHTILE_GLUON_BWD_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    q, k, v, dout = (torch.randn(1, seqlen, 4, d, dtype=torch.bfloat16) for _ in range(4))
    params, _ = _flash_params(q, k, v, 0.0, None, causal, (-1, -1), 0.0, None, False)
    lse = dsum = torch.zeros(1, 4, seqlen)
    dq_acc = (torch.zeros(bwd_hopper.dq_acc_shape(q)) if one_pass else None)
    bwd_hopper.dkdv(q, k, v, dout, lse, dsum, torch.empty_like(k), torch.empty_like(v), params,
                    dq_acc=dq_acc)
    ((role, _, meta),) = seen
    assert role == "dkdv" and meta["SERIAL"] is serial and meta["BLOCK_M"] == queries
    assert meta["NUM_STAGES"] == (2 if serial else bwd_hopper.config(d)[2])


def test_dq_late_switch(monkeypatch):
    """``FLASHTILE_GLUON_BWD_DQ_LATE``: ``1`` forces the late dQ reductions; unset, ``auto``
    or ``0`` the early ones (no rule picks the late pass since session 32); anything else
    refused."""
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_DQ_LATE", "2")
    with pytest.raises(ValueError, match="0, 1 or 'auto'"):
        bwd_hopper.dq_late()
    monkeypatch.delenv("FLASHTILE_GLUON_BWD_DQ_LATE")
    assert not bwd_hopper.dq_late()
    for value, late in (("auto", False), ("0", False), ("1", True)):
        monkeypatch.setenv("FLASHTILE_GLUON_BWD_DQ_LATE", value)
        assert bwd_hopper.dq_late() is late


@pytest.mark.parametrize("d,causal,n_ntiles,expected", [
    (64, False, 4, "early"), (128, False, 8, "early"), (128, False, 128, "early"),
    (64, True, 8, "two-pass"), (64, True, 5, "two-pass"), (64, True, 4, "two-pass"),
    (64, True, 9, "early"), (128, True, 8, "early"), (128, True, 4, "early"),
    (128, True, 32, "early"), (96, False, 8, "two-pass"), (96, True, 32, "two-pass")])
def test_one_pass_rule(d, causal, n_ntiles, expected):
    """Where one pass measured ahead (sessions 14, 16 and 32): everywhere but d=64 causal with
    at most 8 work items per head (up to 1k), which takes two passes; d=96 has no one pass
    (:func:`bwd_hopper.has_one_pass`)."""
    assert bwd_hopper.one_pass(d, causal, n_ntiles) == expected


def test_dq_mode_switch(monkeypatch):
    """``FLASHTILE_BWD_DQ``: ``auto`` by default, ``atomic``/``two-pass`` force, anything else
    refused; ``deterministic=True`` is always two passes."""
    from flashtile.kernels import bwd
    monkeypatch.delenv("FLASHTILE_BWD_DQ", raising=False)
    assert bwd.dq_mode() == "auto"
    assert bwd.dq_mode(deterministic=True) == "two-pass"
    monkeypatch.setenv("FLASHTILE_BWD_DQ", "atomic")
    assert bwd.dq_mode() == "atomic"
    assert bwd.dq_mode(deterministic=True) == "two-pass"
    monkeypatch.setenv("FLASHTILE_BWD_DQ", "one")
    with pytest.raises(ValueError, match="'auto', 'atomic' or 'two-pass'"):
        bwd.dq_mode()


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("shape,causal,deterministic,expected", [
    ((2, 1024, 8, 2, 128), False, False, "+dQ rotated"),
    ((2, 1024, 8, 8, 64), True, False, None),
    ((1, 2048, 4, 4, 64), True, False, "+dQ"),
    ((2, 512, 8, 8, 64), True, False, None),
    ((2, 1024, 8, 2, 128), True, False, "+dQ"),
    ((1, 2048, 4, 4, 128), True, False, "+dQ"),
    ((2, 1024, 8, 2, 128), False, True, None),
    ((2, 1024, 8, 2, 96), True, False, None),
    ((1, 2048, 8, 2, 64), True, False, "+dQ")],
    ids=["d128-full", "d64-causal-1k", "d64-causal-2k", "d64-causal-512", "d128-causal-1k",
         "d128-causal-2k", "deterministic", "d96-causal-1k", "d64-gqa-causal-2k"])
def test_default_dq_pass(gluon_calls, monkeypatch, shape, causal, deterministic, expected):
    """By default the Gluon dK/dV kernel adds dQ itself where :func:`bwd_hopper.one_pass`
    says so (no dQ kernel runs then; at d=128 the queries-as-rows kernel of
    :mod:`.bwdrows_hopper`), the early reductions everywhere (the late ones only forced);
    ``deterministic=True``, d=64 causal up to 1k and d=96 (split tiles) run two passes; causal
    GQA at d=128 and at d=64 from 2k per query head (labelled so). Gradients
    within budget; the second call of each signature replays its launch plan (the
    accumulator zeroed by the preprocess and the final copy included; at d=96 thirteen
    descriptors) and gives the same gradients bit for bit only in two passes (one pass sums
    in arrival order), within budget either way."""
    from flashtile.kernels import bwd
    monkeypatch.delenv("FLASHTILE_BWD_DQ", raising=False)
    monkeypatch.delenv("FLASHTILE_GLUON_BWD_DQ_LATE", raising=False)
    monkeypatch.delenv("FLASHTILE_GLUON_BWD_ROWS", raising=False)
    monkeypatch.setenv("FLASHTILE_LAUNCH_PLANS", "1")
    launches = gluon_launches(monkeypatch)
    b, s, hq, hkv, d = shape
    q, k, v = (torch.randn(b, s, h, d, dtype=torch.bfloat16, device="cuda")
               for h in (hq, hkv, hkv))
    dout = torch.randn(b, s, hq, d, dtype=torch.bfloat16, device="cuda")

    params, _ = _flash_params(q, k, v, 0.0, None, causal, (-1, -1), 0.0, None, False)

    def kernel_grads():
        ins = [t.detach().requires_grad_() for t in (q, k, v)]
        out = flash_attn_func(*ins, causal=causal, deterministic=deterministic)
        return torch.autograd.grad(out, ins, dout)

    ref, same = reference_grads(q, k, v, dout, params)
    plans_before = len(bwd._PLANS)
    first = kernel_grads()
    labels = [meta for role, _, meta in launches if role == "dkdv"]
    assert len(gluon_calls) == 1 and len(labels) == 1
    if expected in ("+dQ", "+dQ rotated") and d == 128:   # (d=128's one pass: bwdrows_hopper)
        assert plans.gluon_configs["dkdv"].startswith("gluon rows"), plans.gluon_configs
    else:
        assert labels[0]["ONE_PASS"] == (expected is not None), labels[0]
        assert labels[0]["DQ_LATE"] == (expected == "+dQ late"), labels[0]
    # (GQA per query head, :func:`bwd_hopper.dkdv_heads`, says so after the config)
    config = plans.gluon_configs["dkdv"]
    per_head = bwd_hopper.dkdv_heads(q, k, params, expected is not None) > hkv
    assert config.endswith(" per query head") is per_head, config
    assert config.removesuffix(" per query head").endswith(expected or "s"), config
    assert bwd.last_dq_pass == ("two-pass" if expected is None else "atomic")
    assert len(bwd._PLANS) == plans_before + 1, "the first call should have recorded a plan"
    replayed = kernel_grads()
    assert len(gluon_calls) == 1, "the second call should have replayed the plan"
    assert_grads_within("", first, ref, same)
    assert_grads_within(" (replayed)", replayed, ref, same)
    for name, a, b_ in zip(("dq", "dk", "dv"), first, replayed):
        if expected is None or name != "dq":
            assert torch.equal(a, b_), f"{name}: a replay should equal the first call"


@gluon_cases_over([(2, 1024, 8, 2, 128), (2, 1024, 8, 8, 64)])
def test_causal_order_groups(gluon_calls, monkeypatch, shape, causal, dtype):
    """``FLASHTILE_GLUON_BWD_GROUP``: the dK/dV kernel's causal order in chunks of key items
    (:func:`utils.check_causal_groups`)."""
    check_causal_groups(monkeypatch, "FLASHTILE_GLUON_BWD_GROUP", "dkdv", shape, causal,
                        dtype, gluon_calls)


@gluon_cases_over([(2, 1024, 8, 8, 64), (3, 512, 8, 2, 64), (2, 512, 6, 3, 128)])
def test_causal_order_windows(gluon_calls, monkeypatch, shape, causal, dtype):
    """``FLASHTILE_GLUON_BWD_WINDOW`` (:func:`utils.check_causal_windows`): 16, 6 and 6
    (batch, KV head) pairs (GQA 4 and 2 in the last two; windows of 5 end on 1 pair, of 4 on
    4 and 2), d=64's one pass in the serial order and d=128's in :mod:`.bwdrows_hopper`."""
    check_causal_windows(monkeypatch, "FLASHTILE_GLUON_BWD", "dkdv", shape, causal, dtype,
                         gluon_calls)


def one_pass_launches(monkeypatch, variable, values, heads, d, causal):
    """(meta, label) of each one-pass launch of :func:`bwd_hopper.dkdv` for a (1, 1024, heads,
    d) bf16 call, made once with ``variable`` at each of ``values``; captured on the CPU."""
    seen = gluon_launches(monkeypatch, run=False, full=True)
    q, k, v, dout = (torch.randn(1, 1024, heads, d, dtype=torch.bfloat16) for _ in range(4))
    params, _ = _flash_params(q, k, v, 0.0, None, causal, (-1, -1), 0.0, None, False)
    lse = dsum = torch.zeros(1, heads, 1024)
    for value in values:
        monkeypatch.setenv(variable, value)
        bwd_hopper.dkdv(q, k, v, dout, lse, dsum, torch.empty_like(k), torch.empty_like(v),
                        params, dq_acc=torch.zeros(bwd_hopper.dq_acc_shape(q)))
    return [(launch[5], launch[8]) for launch in seen]


def test_causal_window_launch(monkeypatch):
    """With ``FLASHTILE_GLUON_BWD_WINDOW=auto`` the d=64 causal dK/dV kernel at 1k keys
    (chunks of 1 by rule, 768 items on its persistent grid of 132) is launched in windows of
    33 pairs (264 items: two rounds), labelled so; unset, it is not. Captured on the CPU."""
    monkeypatch.delenv("FLASHTILE_GLUON_BWD_GROUP", raising=False)
    launches = one_pass_launches(monkeypatch, "FLASHTILE_GLUON_BWD_WINDOW", ("auto", "0"), 96,
                                 64, True)
    (windowed, plain) = [(meta["GROUP"], label) for meta, label in launches]
    assert windowed[0] == -33 and windowed[1].endswith("serial window 33 +dQ"), windowed
    assert plain[0] == 1 and "window" not in plain[1], plain


def test_causal_window_launch_rows(monkeypatch):
    """The d=128 one pass (:mod:`.bwdrows_hopper`, one chunk of a head's 8 key tiles at 1k)
    takes the windows too: ``FLASHTILE_GLUON_BWD_WINDOW=auto``, one program per item there
    and 512 KB of Q and dO a pair: windows of 32 (24 MB holds 48). Captured on the CPU."""
    monkeypatch.delenv("FLASHTILE_GLUON_BWD_GROUP", raising=False)
    ((meta, label),) = one_pass_launches(monkeypatch, "FLASHTILE_GLUON_BWD_WINDOW", ("auto",),
                                         48, 128, True)
    assert meta["GROUP"] == -32 and label.startswith("gluon rows"), label
    assert label.endswith(" window 32"), label


@gluon_cases_over([(2, 1024, 8, 2, 128), (2, 1024, 8, 8, 64), (1, 256, 2, 2, 128),
                   (3, 512, 4, 1, 64), (4, 2048, 8, 8, 128)])
@pytest.mark.parametrize("rows", ["auto", "0"], ids=["default-kernel", "keys-as-rows"])
def test_rotated_items(gluon_calls, monkeypatch, shape, causal, dtype, rows):
    """``FLASHTILE_GLUON_BWD_ROTATE=1``: the one pass's unmasked items start at their own query
    tile and wrap around (:func:`bwd_hopper.rotates`), in the rows kernel (d=128's default)
    and in the keys-as-rows kernel (d=64's, and d=128's with ``FLASHTILE_GLUON_BWD_ROWS=0``):
    items of 1-16 key tiles a head over 4-32 query tiles (every start, the wrap included),
    GQA/MQA (the rotation within each query head), one program per item and per SM (512
    items); all three gradients within budget against float64 (outputs NaN-poisoned before
    the launch), and the launch rotated exactly when unmasked (causal items keep their
    diagonal start)."""
    monkeypatch.setenv("FLASHTILE_BWD_DQ", "atomic")
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_ROTATE", "1")
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_ROWS", rows)
    launches = gluon_launches(monkeypatch)
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert len(gluon_calls) == 1
    (meta,) = [meta for role, _, meta in launches if role == "dkdv"]
    assert meta["ROTATE"] is (not causal)


def test_rotate_rule(monkeypatch):
    """:func:`bwd_hopper.rotates`: by default (unset or ``auto``) at d=128 only, where it
    measured ahead (session 44; d=64 measured slower); ``1`` / ``0`` force it either way;
    never for two passes (no dQ added) or causal items (they start at their diagonal);
    anything else is refused."""
    for value, expect in ((None, {64: False, 128: True}), ("auto", {64: False, 128: True}),
                          ("0", {64: False, 128: False}), ("1", {64: True, 128: True})):
        if value is None:
            monkeypatch.delenv("FLASHTILE_GLUON_BWD_ROTATE", raising=False)
        else:
            monkeypatch.setenv("FLASHTILE_GLUON_BWD_ROTATE", value)
        for d in (64, 128):
            assert bwd_hopper.rotates(d, False, True) is expect[d], (value, d)
            assert not bwd_hopper.rotates(d, True, True) and not bwd_hopper.rotates(d, False, False)
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_ROTATE", "yes")
    with pytest.raises(ValueError, match="FLASHTILE_GLUON_BWD_ROTATE"):
        bwd_hopper.rotates(128, False, True)


@pytest.mark.parametrize("d,causal", [(64, False), (128, False), (64, True), (128, True)])
def test_rotated_launch(monkeypatch, d, causal):
    """The one pass's launch (d=64: this module's kernel, d=128: the rows kernel) with
    ``FLASHTILE_GLUON_BWD_ROTATE`` ``auto`` (rotated at d=128 unmasked), ``1`` (rotated
    wherever unmasked) and ``0`` (never): ``ROTATE`` and the label say the same (the plan
    keys hold the variable: test_plans). Captured on the CPU."""
    launches = one_pass_launches(monkeypatch, "FLASHTILE_GLUON_BWD_ROTATE", ("auto", "1", "0"),
                                 4, d, causal)
    expected = [d == 128 and not causal, not causal, False]
    assert [meta["ROTATE"] for meta, _ in launches] == expected, launches
    assert [label.endswith(" rotated") for _, label in launches] == expected, launches


def test_claimed_grid_rule(monkeypatch):
    """:func:`bwd_hopper.claims_items` in this kernel: ``FLASHTILE_GLUON_BWD_DYNAMIC=1`` with the
    count it asks for (which the backward allocates and the preprocess zeroes):
    d=64's causal one pass at 4k keys (512 items, one program each by default) and d=96's
    two passes run one program per SM with K and V double-buffered, each item after a
    program's first claimed (``DYNAMIC``, the count the kernel's last argument, labelled
    " claimed"); unset, ``auto`` or ``0``, or without a count: the default grid. Runs on the
    CPU: the launches are captured, not made."""
    for name in ("FLASHTILE_GLUON_BWD_PERSISTENT", "FLASHTILE_GLUON_BWD_CONFIG",
                 "FLASHTILE_GLUON_BWD_ROWS"):
        monkeypatch.delenv(name, raising=False)
    launches = gluon_launches(monkeypatch, run=False, full=True)
    sms = common.sm_count(torch.device("cpu"))
    count = torch.zeros(1, dtype=torch.int32)
    for d, one_pass in ((64, True), (96, False)):
        q = torch.randn(2, 4096, 8, d, dtype=torch.bfloat16)
        params, _ = _flash_params(q, q, q, 0.0, None, True, (-1, -1), 0.0, None, False)
        lse = dsum = torch.zeros(2, 8, 4096)
        n_work = 2 * 8 * 4096 // 128
        for value, with_count, claimed in (("1", True, True), ("1", False, False),
                                           (None, True, False), ("auto", True, False),
                                           ("0", True, False)):
            if value is None:
                monkeypatch.delenv("FLASHTILE_GLUON_BWD_DYNAMIC", raising=False)
            else:
                monkeypatch.setenv("FLASHTILE_GLUON_BWD_DYNAMIC", value)
            asks = bwd_hopper.claims_items(q, q, params, one_pass)
            assert asks is (value == "1"), (d, value)
            # (a count where the rule asks for one, as the backward passes it)
            bwd_hopper.dkdv(q, q, q, q, lse, dsum, torch.empty_like(q), torch.empty_like(q),
                            params, dq_acc=(torch.zeros(bwd_hopper.dq_acc_shape(q))
                                            if one_pass else None),
                            count=count if with_count and asks else None)
            ((_, kernel, grid, _, args, meta, _, _, label),) = launches
            launches.clear()
            assert kernel is bwd_hopper._dkdv_hopper_kernel, (d, value)
            assert meta["DYNAMIC"] is claimed and (" claimed" in label) is claimed, label
            assert (args[-1] is count) is claimed, (d, value)
            if claimed:
                assert grid == (sms,) and meta["KV_BUFS"] == 2, (d, grid)
            else:   # (the default: d=64 causal from 2k and d=96, one program per item)
                assert grid == (n_work,) and meta["KV_BUFS"] == 1, (d, value, grid)


def test_claim_mid_rule(monkeypatch):
    """:func:`bwd_hopper.claimed_grid`: ``FLASHTILE_GLUON_BWD_CLAIM_MID=1`` turns a claimed grid
    of either dK/dV kernel (the rows kernel's causal default at d=128; this one's at d=64
    with ``FLASHTILE_GLUON_BWD_DYNAMIC=1``) into ``DYNAMIC`` = 2, labelled " claimed mid";
    unset or ``0`` leave it claimed as before; a grid without claims stays without. A
    variable of the plans' keys. Runs on the CPU: the launches are captured, not made."""
    assert "FLASHTILE_GLUON_BWD_CLAIM_MID" in common.GLUON_OPTIONS["bwd_hopper"]
    for name in ("FLASHTILE_GLUON_BWD_PERSISTENT", "FLASHTILE_GLUON_BWD_CONFIG",
                 "FLASHTILE_GLUON_BWD_ROWS"):
        monkeypatch.delenv(name, raising=False)
    launches = gluon_launches(monkeypatch, run=False, full=True)
    count = torch.zeros(1, dtype=torch.int32)
    for d, dynamic in ((128, None), (64, "1")):
        q = torch.randn(2, 4096, 8, d, dtype=torch.bfloat16)
        params, _ = _flash_params(q, q, q, 0.0, None, True, (-1, -1), 0.0, None, False)
        lse = dsum = torch.zeros(2, 8, 4096)
        for mid, with_count, mode in (("1", True, 2), (None, True, True), ("0", True, True),
                                      ("1", False, False)):
            for name, value in (("FLASHTILE_GLUON_BWD_CLAIM_MID", mid),
                                ("FLASHTILE_GLUON_BWD_DYNAMIC", dynamic)):
                if value is None:
                    monkeypatch.delenv(name, raising=False)
                else:
                    monkeypatch.setenv(name, value)
            assert bwd_hopper.claims_items(q, q, params), d
            bwd_hopper.dkdv(q, q, q, q, lse, dsum, torch.empty_like(q), torch.empty_like(q),
                            params, dq_acc=torch.zeros(bwd_hopper.dq_acc_shape(q)),
                            count=count if with_count else None)
            ((_, _, _, _, _, meta, _, _, label),) = launches
            launches.clear()
            assert meta["DYNAMIC"] == mode and type(meta["DYNAMIC"]) is type(mode), (d, mid)
            assert (" claimed" in label) is bool(mode), label
            assert (" claimed mid" in label) is (mode == 2), label


@gluon_cases_over([(2, 2048, 8, 8, 64), (4, 2048, 8, 4, 128)])
def test_claimed_mid(gluon_calls, monkeypatch, shape, causal, dtype):
    """``FLASHTILE_GLUON_BWD_CLAIM_MID=1`` with ``FLASHTILE_GLUON_BWD_DYNAMIC=1``: each claim
    made after its item's first (Q, dO) load, in this kernel (d=64's one pass, MHA) and the
    rows kernel (d=128, GQA 2:1, per query head when causal): all three gradients within
    budget (outputs NaN-poisoned), one launch labelled " claimed mid" on one program per
    SM; then a second call of the same signature, replaying the plan: within budget again."""
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_DYNAMIC", "1")
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_CLAIM_MID", "1")
    launches = gluon_launches(monkeypatch, full=True)
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    ((grid, meta, label),) = [(x[2], x[5], x[8]) for x in launches if x[7] == "dkdv"]
    assert meta["DYNAMIC"] == 2 and " claimed mid" in label, label
    assert grid == (common.sm_count(torch.device("cuda")),)
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)


@gluon_cases_over([(4, 2048, 8, 8, 64), (2, 2048, 16, 8, 64), (4, 2048, 8, 4, 96)])
def test_claimed_grid(gluon_calls, monkeypatch, shape, causal, dtype):
    """``FLASHTILE_GLUON_BWD_DYNAMIC=1`` in this kernel: one program per SM, each item after a
    program's first claimed from the count that the preprocess zeroed (d=64 MHA, d=64 GQA 2:1
    per query head when causal, d=96 in split tiles and two passes; causal items of unequal
    length): all three gradients within budget (outputs NaN-poisoned, the count poisoned to
    -1), one launch on fewer programs than items, with K and V double-buffered; then a
    second call of the same signature, which replays the first's launch plan (a new count,
    zeroed again): within budget again."""
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_DYNAMIC", "1")
    launches = gluon_launches(monkeypatch, full=True)
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    ((grid, meta, label),) = [(x[2], x[5], x[8]) for x in launches if x[7] == "dkdv"]
    assert meta["DYNAMIC"] and meta["KV_BUFS"] == 2 and " claimed" in label, label
    assert grid == (common.sm_count(torch.device("cuda")),)
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)


@gluon_cases_over([(4, 2048, 8, 8, 128), (4, 2048, 16, 4, 64), (1, 256, 2, 2, 128),
                   (4, 2048, 8, 4, 96)])
def test_persistent_grid(gluon_calls, monkeypatch, shape, causal, dtype):
    """``FLASHTILE_GLUON_BWD_PERSISTENT=1``: one program per SM, each looping over work items
    (512 or 256 items of 128 keys: two to four apiece, of different lengths when causal; at
    d=96, 256 items in split tiles) with K and V double-buffered, and a call with fewer items
    than SMs; gradients within budget."""
    b, s, _, hkv, _ = shape
    check_persistent(monkeypatch, "FLASHTILE_GLUON_BWD_PERSISTENT", "dkdv", shape,
                     b * hkv * s // 128, causal, dtype, gluon_calls)


@pytest.mark.gpu
@needs_hopper
def test_replayed_calls_launch_it_afresh(backward_calls, monkeypatch):
    """A backward replayed from its launch plan launches the Gluon kernel afresh, with this
    call's pointers, and gives the same gradients."""
    assert_replays_match(monkeypatch, backward_calls[1])


@pytest.mark.gpu
@needs_hopper
def test_with_the_gluon_forward_and_a_scale(backward_calls, monkeypatch):
    monkeypatch.setenv("FLASHTILE_GLUON_FWD", "1")
    check(2, 512, 512, 4, 2, 128, 128, torch.bfloat16, causal=True, scale=0.3)
    assert len(backward_calls[1]) == 1


@gluon_cases_over([(2, 1024, 8, 2, 96), (1, 256, 2, 2, 96), (3, 512, 4, 1, 96)])
def test_head_dim_96(gluon_calls, monkeypatch, shape, causal, dtype):
    """d=96 on the Gluon dK/dV kernel in split tiles (64 + 32 columns): GQA 4:1, MQA, one
    work item per KV head and several; one launch, dQ in two passes (the tile-level dQ
    kernel), all three gradients (NaN-poisoned before the launches) within budget."""
    from flashtile.kernels import bwd
    monkeypatch.delenv("FLASHTILE_BWD_DQ", raising=False)
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert len(gluon_calls) == 1, "this call should have run the Gluon dK/dV kernel"
    assert bwd.last_dq_pass == "two-pass"


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_head_dim_96_32_queries(gluon_calls, monkeypatch, causal):
    """The other d=96 config (for sweeps): 32 queries per tile, the default up to session 20
    (bwd_hopper._CONFIGS); GQA, several items per KV head; gradients within budget."""
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_CONFIG", "64,32,4,240")
    check(2, 1024, 1024, 8, 2, 96, 96, torch.bfloat16, causal=causal)
    assert len(gluon_calls) == 1


@pytest.mark.gpu
@needs_hopper
def test_head_dim_96_forced_one_pass_runs_the_tile_level_kernel(gluon_calls, monkeypatch):
    """``FLASHTILE_BWD_DQ=atomic`` at d=96, where the Gluon kernel has no one pass: the
    tile-level dK/dV kernel adds dQ; gradients within budget."""
    from flashtile.kernels import bwd
    monkeypatch.setenv("FLASHTILE_BWD_DQ", "atomic")
    check(1, 512, 512, 4, 2, 96, 96, torch.bfloat16, causal=True)
    assert gluon_calls == []
    assert bwd.last_dq_pass == "atomic"


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("case", ["ragged-length", "bhsd-layout", "d80", "softcap",
                                  "atomic-dq"])
def test_other_calls_fall_back(backward_calls, monkeypatch, case):
    """Calls outside the kernels' cover run the tile-level kernels, still within budget. A
    forced one pass (``FLASHTILE_BWD_DQ=atomic``) runs no dQ kernel at all: the Gluon dK/dV
    kernel adds dQ itself."""
    shape, kwargs = fallback_call(case, monkeypatch)
    check(*shape, **kwargs)
    one_pass = case == "atomic-dq" and backward_calls[0] == "FLASHTILE_GLUON_BWD"
    assert len(backward_calls[1]) == (1 if one_pass else 0)


@pytest.mark.gpu
@needs_hopper
def test_strided_dout_falls_back(gluon_calls):
    """A dout that is a (b, h, s, d)-allocated view cannot be read by TMA: the tile-level kernel
    runs; with the same values contiguous the Gluon kernel runs; both within budget."""
    q, k, v = (torch.randn(1, 512, 2, 64, dtype=torch.bfloat16, device="cuda")
               for _ in range(3))
    dout = torch.randn(1, 2, 512, 64, dtype=torch.bfloat16, device="cuda").transpose(1, 2)

    def kernel_grads(kernel_dout):
        ins = [t.detach().requires_grad_() for t in (q, k, v)]
        return torch.autograd.grad(flash_attn_func(*ins), ins, kernel_dout)

    ref, same = reference_grads(q, k, v, dout)
    strided = kernel_grads(dout)
    assert gluon_calls == []
    contiguous = kernel_grads(dout.contiguous())
    assert len(gluon_calls) == 1
    assert_grads_within(" (strided dout)", strided, ref, same)
    assert_grads_within(" (contiguous dout)", contiguous, ref, same)


@pytest.mark.gpu
@needs_hopper
def test_bench_rows_name_the_gluon_kernel():
    """The bench's flashtile rows say that dK/dV and, at d=128, the forward ran in the Gluon
    kernels (with their configs; the one pass at d=128 in the queries-as-rows kernel,
    :mod:`.bwdrows_hopper`), and that dQ was added in the dK/dV pass (one pass, the default
    at d=128 unmasked)."""
    from flashtile.bench import providers
    from flashtile.kernels import bwdrows_hopper
    from flashtile.bench.cases import BenchCase
    provider = providers.FlashtileProvider()
    case = BenchCase(batch=1, seqlen=512, nheads=4, nheads_kv=4, headdim=128, causal=False,
                     dtype="bf16", mode="fwdbwd")
    device = torch.device("cuda")
    q, k, v = (torch.randn(1, 512, 4, 128, dtype=torch.bfloat16, device=device,
                           requires_grad=True) for _ in range(3))
    provider.build(case, device)(q, k, v).sum().backward()
    configs = provider.launched_configs(case, device)
    keys, queries, slots = bwdrows_hopper._CONFIGS[128][:3]
    assert configs["dkdv"] == f"gluon rows {2 * keys}x{queries}/{slots}s +dQ rotated", configs
    assert configs["fwd"] == "gluon {}x{}/{}s".format(2 * fwd_hopper.config(128, 512)[0],
                                                      *fwd_hopper.config(128, 512)[1:3]), configs
    assert configs["dq"] == "in the dK/dV pass", configs
