"""The Gluon dQ kernel for Hopper (:mod:`flashtile.kernels.dq_hopper`): the gradients against the
float64 reference (GPU), with and without the Gluon dK/dV kernel, at d = 64/128 and at d=96 in
split tiles (64 + 32 columns); d=96's config, cover and launch (CPU, captured). Its switch,
launch plans and fallbacks are tested with the dK/dV kernel's (tests/test_bwd_hopper.py)."""

from __future__ import annotations

import pytest
import torch
from test_kernels import check
from utils import (GLUON_SHAPES, assert_d96_needs_dv96, assert_split_descriptors, count_calls,
                   d96_gqa_inputs, gluon_cases_over, gluon_launches, gluon_switched_on,
                   needs_hopper)

from flashtile.interface import _flash_params
from flashtile.kernels import bwd_hopper, dq_hopper, fwd_hopper


@pytest.fixture
def gluon_calls(monkeypatch):
    """Turns the Gluon dQ kernel on (at d=64/128 too, where it is opt-in), with two passes
    (in one pass the dK/dV kernel adds dQ), and counts its launches (the real one runs)."""
    monkeypatch.setenv("FLASHTILE_BWD_DQ", "two-pass")
    yield from gluon_switched_on(monkeypatch, "FLASHTILE_GLUON_DQ", dq_hopper, "dq")


def test_config_override(monkeypatch):
    monkeypatch.setenv("FLASHTILE_GLUON_DQ_CONFIG", "64,64,3,232")
    assert dq_hopper.config(128) == (64, 64, 3, 232)
    monkeypatch.delenv("FLASHTILE_GLUON_DQ_CONFIG")
    assert dq_hopper.config(128) == dq_hopper._CONFIGS[128]


def test_head_dim_96_config(monkeypatch):
    """d=96: 64 rows per consumer x 128 keys x 3 slots, 240 registers (the offline compiler's
    verdict: no spills, none serialised, 229,848 B of shared memory; 64 keys serialise every
    wgmma, as at d = 64/128)."""
    monkeypatch.delenv("FLASHTILE_GLUON_DQ_CONFIG", raising=False)
    assert dq_hopper.config(96) == (64, 128, 3, 240)
    assert sorted(dq_hopper._CONFIGS) == [64, 96, 128]


def test_head_dim_96_runs_in_split_tiles(monkeypatch):
    """d=96 (switched on, on a stubbed sm_90 device): the dQ kernel covers it, causal or not,
    GQA 3:1; the launch splits the head dim into 64 + 32 columns: ten TMA descriptors (q, k,
    v, dout, dq for columns 0:64, then the five for 64:96), all over the folded
    ``(b*s, h*96)`` views, boxes of 64 and 32 columns (rows: 64 for q/dout/dq, 128 for k/v),
    swizzled 128 and 64 bytes; ``HEAD_D=64, HEAD_D2=32``, 3 slots, one program per 128 query
    rows of each (batch, query head). The lengths must be multiples of the 128-row and 128-key
    tiles, and d = dv. By default (switch unset or ``auto``) it covers d=96 alone, not
    d=64/128; ``0`` covers nothing. The other head dims pass five descriptors and None for the
    second part's five. The launch is captured, not made."""
    monkeypatch.setattr(fwd_hopper, "is_sm90", lambda device: True)
    monkeypatch.setenv("FLASHTILE_GLUON_DQ", "1")
    monkeypatch.delenv("FLASHTILE_GLUON_DQ_CONFIG", raising=False)
    launches = gluon_launches(monkeypatch, run=False, full=True)
    q, dout, k, v = d96_gqa_inputs()
    lse = dsum = torch.zeros(2, 3, 1024)
    for causal in (False, True):
        params, _ = _flash_params(q, k, v, 0.0, None, causal, (-1, -1), 0.0, None, False)
        assert dq_hopper.supports(dout, q, k, v, params)
        assert bwd_hopper.call_one_pass(q, k, params) == "two-pass"    # (so bwd runs dQ apart)
        dq = torch.empty_like(q)
        dq_hopper.dq(q, k, v, dout, lse, dsum, dq, params)
        (_, _, grid, tiles, args, meta, make_descriptor, role, label), = launches
        launches.clear()
        assert role == "dq" and label == "gluon 128x128/3s"
        assert meta["HEAD_D"] == 64 and meta["HEAD_D2"] == 32
        assert meta["BLOCK_M"] == 64 and meta["BLOCK_N"] == 128 and meta["NUM_STAGES"] == 3
        assert meta["CAUSAL"] == causal and meta["CONSUMER_REGS"] == 240
        assert grid == (1024 // 128 * 2 * 3,)
        assert [(t, tile) for t, tile in tiles] == [
            (q, (64, 64)), (k, (128, 64)), (v, (128, 64)), (dout, (64, 64)), (dq, (64, 64)),
            (q, (64, 32)), (k, (128, 32)), (v, (128, 32)), (dout, (64, 32)), (dq, (64, 32))]
        assert args[0] is lse and args[1] is dsum, "no None in place of a descriptor"
        assert_split_descriptors(tiles, make_descriptor)
    params, _ = _flash_params(q, k, v, 0.0, None, False, (-1, -1), 0.0, None, False)
    for sq, sk, runs in ((1024, 960, False), (960, 1024, False), (896, 1024, True)):
        qq = torch.randn(2, sq, 3, 96, dtype=torch.bfloat16)
        kk = torch.randn(2, sk, 1, 96, dtype=torch.bfloat16)
        assert dq_hopper.supports(qq.clone(), qq, kk, kk, params) == runs, (sq, sk)
    assert_d96_needs_dv96(dq_hopper.supports)
    params, _ = _flash_params(q, k, v, 0.0, None, False, (-1, -1), 0.0, None, False)
    q128 = torch.randn(1, 512, 2, 128, dtype=torch.bfloat16)
    params128, _ = _flash_params(q128, q128, q128, 0.0, None, False, (-1, -1), 0.0, None, False)
    for switch, on_96, on_128 in ((None, True, False), ("auto", True, False), ("0", False, False),
                                  ("1", True, True)):
        if switch is None:
            monkeypatch.delenv("FLASHTILE_GLUON_DQ")
        else:
            monkeypatch.setenv("FLASHTILE_GLUON_DQ", switch)
        assert dq_hopper.supports(dout, q, k, v, params) == on_96, switch
        assert dq_hopper.supports(q128, q128, q128, q128, params128) == on_128, switch
    q, params = q128, params128
    dq_hopper.dq(q, q, q, q, torch.zeros(1, 2, 512), torch.zeros(1, 2, 512),
                 torch.empty_like(q), params)
    (_, _, _, tiles, args, meta, _, _, _), = launches
    assert len(tiles) == 5 and args[:5] == (None,) * 5 and meta["HEAD_D2"] == 0
    assert [tile for _, tile in tiles] == [(64, 128), (128, 128), (128, 128), (64, 128),
                                           (64, 128)]


@gluon_cases_over(GLUON_SHAPES + [(2, 1024, 8, 2, 96), (1, 256, 2, 2, 96), (3, 512, 4, 1, 96)])
@pytest.mark.parametrize("dkdv", ["gluon-dkdv", "tile-dkdv"])
def test_gluon_dq(gluon_calls, monkeypatch, shape, causal, dtype, dkdv):
    """dQ from the Gluon kernel, dK/dV from the Gluon kernel (the default) or the tile-level
    one (``FLASHTILE_GLUON_BWD=0``); all three gradients (NaN-poisoned before the launches)
    within budget. d=96 in split tiles (64 + 32 columns: GQA 4:1, MQA, one and several
    query blocks per head) in the backward's default dQ mode (``FLASHTILE_BWD_DQ`` unset:
    d=96 has no one pass, so two passes)."""
    from flashtile.kernels import bwd
    b, s, hq, hkv, d = shape
    if d == 96:
        monkeypatch.delenv("FLASHTILE_BWD_DQ", raising=False)
    monkeypatch.setenv("FLASHTILE_GLUON_BWD", "1" if dkdv == "gluon-dkdv" else "0")
    dkdv_calls = count_calls(monkeypatch, bwd_hopper, "dkdv")
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert len(gluon_calls) == 1, "this call should have run the Gluon dQ kernel"
    assert len(dkdv_calls) == (1 if dkdv == "gluon-dkdv" else 0)
    assert bwd.last_dq_pass == "two-pass"


@pytest.mark.gpu
@needs_hopper
def test_head_dim_96_forced_one_pass_runs_no_dq_kernel(gluon_calls, monkeypatch):
    """``FLASHTILE_BWD_DQ=atomic`` at d=96 with this kernel switched on: the tile-level dK/dV
    kernel adds dQ (the Gluon one has no one pass there) and no dQ kernel runs; gradients
    within budget."""
    from flashtile.kernels import bwd
    monkeypatch.setenv("FLASHTILE_BWD_DQ", "atomic")
    check(1, 512, 512, 4, 2, 96, 96, torch.bfloat16, causal=True)
    assert gluon_calls == []
    assert bwd.last_dq_pass == "atomic"
