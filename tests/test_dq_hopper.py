"""The Gluon dQ kernel for Hopper (:mod:`flashtile.kernels.dq_hopper`): the gradients against the
float64 reference (GPU), with and without the Gluon dK/dV kernel. Its switch, launch plans and
fallbacks are tested with the dK/dV kernel's (tests/test_bwd_hopper.py)."""

from __future__ import annotations

import pytest
from test_kernels import check
from utils import count_calls, gluon_cases, gluon_switched_on

from flashtile.kernels import bwd_hopper, dq_hopper


@pytest.fixture
def gluon_calls(monkeypatch):
    """Turns the (opt-in) Gluon dQ kernel on, with two passes (in one pass the dK/dV kernel
    adds dQ), and counts its launches (the real one runs)."""
    monkeypatch.setenv("FLASHTILE_BWD_DQ", "two-pass")
    yield from gluon_switched_on(monkeypatch, "FLASHTILE_GLUON_DQ", dq_hopper, "dq")


def test_config_override(monkeypatch):
    monkeypatch.setenv("FLASHTILE_GLUON_DQ_CONFIG", "64,64,3,232")
    assert dq_hopper.config(128) == (64, 64, 3, 232)
    monkeypatch.delenv("FLASHTILE_GLUON_DQ_CONFIG")
    assert dq_hopper.config(128) == dq_hopper._CONFIGS[128]


@gluon_cases
@pytest.mark.parametrize("dkdv", ["gluon-dkdv", "tile-dkdv"])
def test_gluon_dq(gluon_calls, monkeypatch, shape, causal, dtype, dkdv):
    """dQ from the Gluon kernel, dK/dV from the Gluon kernel (the default) or the tile-level
    one (``FLASHTILE_GLUON_BWD=0``)."""
    monkeypatch.setenv("FLASHTILE_GLUON_BWD", "1" if dkdv == "gluon-dkdv" else "0")
    dkdv_calls = count_calls(monkeypatch, bwd_hopper, "dkdv")
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert len(gluon_calls) == 1, "this call should have run the Gluon dQ kernel"
    assert len(dkdv_calls) == (1 if dkdv == "gluon-dkdv" else 0)
