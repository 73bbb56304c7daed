"""The d=256 Gluon dQ kernel for Hopper (:mod:`flashtile.kernels.dq256_hopper`): its config,
cover, switch and launch (CPU: the launch captured, not made), and the gradients against the
float64 reference (GPU, sm_90 only)."""

from __future__ import annotations

import pytest
import torch
from test_bwd256_hopper import SHAPES, flash_params, qkv
from test_kernels import check
from utils import count_calls, gluon_cases_over, gluon_launches, gluon_switched_on, needs_hopper

from flashtile.kernels import bwd256_hopper, common, dq256_hopper, plans

SWITCH = "FLASHTILE_GLUON_DQ256"
CONFIG = "FLASHTILE_GLUON_DQ256_CONFIG"


@pytest.fixture
def gluon_calls(monkeypatch):
    """Turns the d=256 Gluon dQ kernel on (its default), with dQ in two passes, and counts
    its launches (the real one runs)."""
    monkeypatch.delenv("FLASHTILE_BWD_DQ", raising=False)
    monkeypatch.delenv(CONFIG, raising=False)
    yield from gluon_switched_on(monkeypatch, SWITCH, dq256_hopper, "dq")


# ----------------------------------------------------------------------------------------------
# CPU: config, switch, cover, launch


def test_config_and_its_override(monkeypatch):
    """64 query rows x 64 keys x 2 slots by default; ``FLASHTILE_GLUON_DQ256_CONFIG``
    overrides it, and refuses what the kernel cannot run (rows other than 64: 128 spill;
    keys other than 32 or 64; fewer than 2 slots)."""
    monkeypatch.delenv(CONFIG, raising=False)
    assert dq256_hopper.config(256) == (64, 64, 2, 240)
    monkeypatch.setenv(CONFIG, "64,32,4,240")
    assert dq256_hopper.config(256) == (64, 32, 4, 240)
    for bad in ("128,32,2,240", "64,128,2,240", "64,64,1,240", "64,16,4,240"):
        monkeypatch.setenv(CONFIG, bad)
        with pytest.raises(ValueError, match="64 query rows"):
            dq256_hopper.config(256)


def test_switch_is_on_by_default_and_in_the_plan_key(monkeypatch):
    """On unless ``FLASHTILE_GLUON_DQ256=0`` (measured ahead, session 20); its switch, config
    and causal-order option are part of the backward's plan key (read as on sm_90 here)."""
    monkeypatch.delenv(SWITCH, raising=False)
    assert dq256_hopper.enabled()
    assert common.GLUON_SWITCHES["dq256_hopper"] == (SWITCH, "1", CONFIG)
    monkeypatch.setattr(common, "is_sm90", lambda device: True)
    modules = ("bwd256_hopper", "dq256_hopper")
    on = common.gluon_settings(torch.device("cpu"), modules)
    monkeypatch.setenv(SWITCH, "0")
    assert not dq256_hopper.enabled()
    off = common.gluon_settings(torch.device("cpu"), modules)
    assert off != on
    monkeypatch.setenv(CONFIG, "64,32,4,240")
    assert common.gluon_settings(torch.device("cpu"), modules) != on
    monkeypatch.delenv(CONFIG)
    monkeypatch.setenv("FLASHTILE_GLUON_DQ256_GROUP", "1")
    assert common.gluon_settings(torch.device("cpu"), modules) != on


# (The cover: tests/test_bwd256_hopper.py::test_cover, the same for both d=256 kernels.)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_launch(monkeypatch, causal):
    """One launch, one program per 64 query rows of each (batch, query head); the default
    config's tiles; causal orders in chunks of 8 query tiles. Runs on the CPU: the launch is
    captured, not made."""
    seen = gluon_launches(monkeypatch, run=False)
    monkeypatch.delenv("FLASHTILE_GLUON_DQ256_GROUP", raising=False)
    monkeypatch.delenv(CONFIG, raising=False)
    q, k, v = qkv(b=2, sq=4096, hq=8, hkv=2)
    lse = dsum = torch.zeros(2, 8, 4096)
    dq256_hopper.dq(q, k, v, q.clone(), lse, dsum, torch.empty_like(q),
                    flash_params(q, k, v, causal))
    ((role, grid, meta),) = seen
    assert role == "dq" and grid == (2 * 8 * 4096 // 64,)
    assert (meta["BLOCK_M"], meta["BLOCK_N"], meta["HEAD_D"], meta["NUM_STAGES"]) == \
        (64, 64, 256, 2)
    assert meta["CAUSAL"] == causal and meta["GROUP"] == (8 if causal else 1)


# (The backward's dispatch: test_bwd256_hopper.py::test_backward_dispatch, for both d=256
# kernels.)


# ----------------------------------------------------------------------------------------------
# GPU (sm_90): gradients against the float64 reference


def assert_ran(calls: list, n: int = 1) -> None:
    """The kernel ran ``n`` times and the last backward's dQ launch was its own."""
    assert len(calls) == n, f"the d=256 Gluon dQ kernel ran {len(calls)} times, not {n}"
    assert plans.gluon_configs["dq"].startswith("gluon d256"), plans.gluon_configs


# (SHAPES, the d=256 dK/dV kernel's: here two query tiles per head; GQA with two heads per KV
# head over two batches; MQA with 16 query tiles per head, causal items of 16 key tiles down
# to 1)
@gluon_cases_over(SHAPES)
def test_gradients(gluon_calls, monkeypatch, shape, causal, dtype):
    """dQ (and dK, dV, the forward's outputs) within budget of the float64 reference, dK/dV
    from the d=256 Gluon dK/dV kernel (its default)."""
    dkdv_calls = count_calls(monkeypatch, bwd256_hopper, "dkdv")
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert_ran(gluon_calls)
    assert len(dkdv_calls) == 1


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("config", ["64,32,4,240", "64,32,3,240", "64,32,2,240"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_other_configs(gluon_calls, monkeypatch, config, causal):
    """The configs that compile clean offline besides the default (32 keys per tile with
    four, three and two slots): gradients within budget."""
    monkeypatch.setenv(CONFIG, config)
    check(2, 512, 512, 4, 2, 256, 256, torch.bfloat16, causal=causal)
    assert_ran(gluon_calls)
    assert plans.gluon_configs["dq"].endswith("64x{}/{}s".format(*config.split(",")[1:3]))


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("group", ["1", "3"])
def test_causal_orders(gluon_calls, monkeypatch, group):
    """Causal orders in chunks of 1 and 3 query tiles (``FLASHTILE_GLUON_DQ256_GROUP``; 16
    tiles per head: a short last chunk): every item walked once."""
    monkeypatch.setenv("FLASHTILE_GLUON_DQ256_GROUP", group)
    check(1, 1024, 1024, 4, 2, 256, 256, torch.bfloat16, causal=True)
    assert_ran(gluon_calls)


@pytest.mark.gpu
@needs_hopper
def test_with_the_tile_level_dkdv_and_a_scale(gluon_calls, monkeypatch):
    """dK/dV from the tile-level kernel (``FLASHTILE_GLUON_BWD256=0``), the Gluon forward,
    a softmax scale other than the default."""
    monkeypatch.setenv("FLASHTILE_GLUON_BWD256", "0")
    monkeypatch.setenv("FLASHTILE_GLUON_FWD", "1")
    check(2, 512, 512, 4, 2, 256, 256, torch.float16, causal=True, scale=0.3)
    assert_ran(gluon_calls)


# (Replayed from a launch plan: test_bwd256_hopper.py::test_replayed_calls_launch_it_afresh
# runs both d=256 kernels, this one by its default.)


# (Calls outside the cover, switched off or in a forced one pass:
# test_bwd256_hopper.py::test_other_calls_fall_back, for both d=256 kernels.)
