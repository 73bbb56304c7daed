"""The Gluon dQ kernel for Hopper (:mod:`flashtile.kernels.dq_hopper`): which calls take it, and
the gradients against the float64 reference (GPU), with and without the Gluon dK/dV kernel."""

from __future__ import annotations

import pytest
import torch
from test_fwd_hopper import fallback_call
from test_kernels import check
from utils import GLUON_SHAPES, assert_replays_match, count_calls, gluon_switched_on, needs_hopper

from flashtile.kernels import bwd_hopper, dq_hopper


@pytest.fixture
def gluon_calls(monkeypatch):
    """Turns the (opt-in) Gluon dQ kernel on and counts its launches (the real one runs)."""
    yield from gluon_switched_on(monkeypatch, "FLASHTILE_GLUON_DQ", dq_hopper, "dq")


def test_config_override(monkeypatch):
    monkeypatch.setenv("FLASHTILE_GLUON_DQ_CONFIG", "64,64,3,232")
    assert dq_hopper.config(128) == (64, 64, 3, 232)
    monkeypatch.delenv("FLASHTILE_GLUON_DQ_CONFIG")
    assert dq_hopper.config(128) == dq_hopper._CONFIGS[128]


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("dkdv", ["gluon-dkdv", "tile-dkdv"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", GLUON_SHAPES, ids=lambda s: "B{}-S{}-H{}/{}-D{}".format(*s))
def test_gluon_dq(gluon_calls, monkeypatch, shape, causal, dtype, dkdv):
    """dQ from the Gluon kernel, dK/dV from the Gluon kernel (the default) or the tile-level
    one (``FLASHTILE_GLUON_BWD=0``)."""
    monkeypatch.setenv("FLASHTILE_GLUON_BWD", "1" if dkdv == "gluon-dkdv" else "0")
    dkdv_calls = count_calls(monkeypatch, bwd_hopper, "dkdv")
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert len(gluon_calls) == 1, "this call should have run the Gluon dQ kernel"
    assert len(dkdv_calls) == (1 if dkdv == "gluon-dkdv" else 0)


@pytest.mark.gpu
@needs_hopper
def test_with_the_gluon_forward_and_a_scale(gluon_calls, monkeypatch):
    monkeypatch.setenv("FLASHTILE_GLUON_FWD", "1")
    check(2, 512, 512, 4, 2, 128, 128, torch.bfloat16, causal=True, scale=0.3)
    assert len(gluon_calls) == 1


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("d", [64, 128])
def test_off_runs_the_tile_level_kernel(gluon_calls, monkeypatch, d):
    """``FLASHTILE_GLUON_DQ=0`` (the default): the same dense calls go to the tile-level dQ."""
    monkeypatch.setenv("FLASHTILE_GLUON_DQ", "0")
    for causal in (False, True):
        check(1, 1024, 1024, 8, 2, d, d, torch.bfloat16, causal=causal)
    assert gluon_calls == []


@pytest.mark.gpu
@needs_hopper
def test_replayed_calls_launch_it_afresh(gluon_calls, monkeypatch):
    """A backward replayed from its launch plan launches the Gluon dQ kernel afresh, with
    this call's pointers, and gives the same gradients."""
    assert_replays_match(monkeypatch, gluon_calls)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("case", ["ragged-length", "bhsd-layout", "d96", "softcap",
                                  "atomic-dq"])
def test_other_calls_fall_back(gluon_calls, monkeypatch, case):
    """Calls outside the kernel's cover run the tile-level dQ kernel, still within budget."""
    shape, kwargs = fallback_call(case, monkeypatch)
    check(*shape, **kwargs)
    assert gluon_calls == []
