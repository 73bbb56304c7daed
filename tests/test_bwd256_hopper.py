"""The d=256 Gluon dK/dV kernel for Hopper (:mod:`flashtile.kernels.bwd256_hopper`): its
config, cover, switch and launch (CPU: the launch captured, not made), and the gradients
against the float64 reference with dQ in two passes (GPU, sm_90 only)."""

from __future__ import annotations

import pytest
import torch
from test_kernels import check
from utils import (FLOOR, assert_within_budget, check_persistent, count_calls,
                   gluon_cases_over, gluon_launches, gluon_switched_on, needs_hopper)

from flashtile import attention_reference, flash_attn_func
from flashtile.interface import _flash_params
from flashtile.kernels import bwd256_hopper, common, dq256_hopper, fwd_hopper, plans

SWITCH = "FLASHTILE_GLUON_BWD256"


@pytest.fixture
def gluon_calls(monkeypatch):
    """Turns the d=256 Gluon dK/dV kernel on and counts its launches (the real one runs)."""
    monkeypatch.delenv("FLASHTILE_BWD_DQ", raising=False)
    yield from gluon_switched_on(monkeypatch, SWITCH, bwd256_hopper, "dkdv")


def qkv(b=1, sq=512, sk=None, hq=4, hkv=2, d=256, dtype=torch.bfloat16):
    """CPU inputs ``(b, s, h, d)`` for the decisions below."""
    sk = sq if sk is None else sk
    return (torch.randn(b, sq, hq, d, dtype=dtype), torch.randn(b, sk, hkv, d, dtype=dtype),
            torch.randn(b, sk, hkv, d, dtype=dtype))


def flash_params(q, k, v, causal=False, softcap=0.0):
    return _flash_params(q, k, v, 0.0, None, causal, (-1, -1), softcap, None, False)[0]


# ----------------------------------------------------------------------------------------------
# CPU: config, switch, cover, launch


def test_config_and_its_override(monkeypatch):
    """64 keys x 64 queries x 2 slots by default; ``FLASHTILE_GLUON_BWD256_CONFIG`` overrides
    it, and refuses what the kernel cannot run (keys other than 64, fewer than 2 slots,
    other query tiles)."""
    monkeypatch.delenv("FLASHTILE_GLUON_BWD256_CONFIG", raising=False)
    assert bwd256_hopper.config(256) == (64, 64, 2, 240)
    monkeypatch.setenv("FLASHTILE_GLUON_BWD256_CONFIG", "64,32,4,240")
    assert bwd256_hopper.config(256) == (64, 32, 4, 240)
    for bad in ("128,32,4,240", "64,32,1,240", "64,48,2,240"):
        monkeypatch.setenv("FLASHTILE_GLUON_BWD256_CONFIG", bad)
        with pytest.raises(ValueError, match="64 keys"):
            bwd256_hopper.config(256)


def test_switch_is_on_by_default_and_in_the_plan_key(monkeypatch):
    """On unless ``FLASHTILE_GLUON_BWD256=0`` (measured ahead on the H200); its switch,
    config and options are part of the backward's plan key (:func:`.common.gluon_settings`,
    read as on sm_90 here)."""
    monkeypatch.delenv(SWITCH, raising=False)
    assert bwd256_hopper.enabled()
    monkeypatch.setenv(SWITCH, "0")
    assert not bwd256_hopper.enabled()
    assert common.GLUON_SWITCHES["bwd256_hopper"] == (SWITCH, "1",
                                                        "FLASHTILE_GLUON_BWD256_CONFIG")
    monkeypatch.setattr(common, "is_sm90", lambda device: True)
    off = common.gluon_settings(torch.device("cpu"), ("bwd_hopper", "bwd256_hopper"))
    monkeypatch.setenv(SWITCH, "1")
    assert bwd256_hopper.enabled()
    on = common.gluon_settings(torch.device("cpu"), ("bwd_hopper", "bwd256_hopper"))
    assert off != on
    monkeypatch.setenv("FLASHTILE_GLUON_BWD256_PERSISTENT", "1")
    assert common.gluon_settings(torch.device("cpu"), ("bwd_hopper", "bwd256_hopper")) != on


@pytest.mark.parametrize("case,expected", [
    ("dense", True), ("causal", True), ("gqa-mqa", True), ("fp16", True), ("switched-off", False),
    ("d128", False), ("dv128", False), ("fp32", False), ("ragged-queries", False),
    ("ragged-keys", False), ("causal-sq-ne-sk", False), ("softcap", False),
    ("dout-dtype", False), ("bhsd-layout", False)])
@pytest.mark.parametrize("module,switch", [(bwd256_hopper, SWITCH),
                                           (dq256_hopper, "FLASHTILE_GLUON_DQ256")],
                         ids=["dkdv", "dq"])
def test_cover(monkeypatch, case, expected, module, switch):
    """Which calls the d=256 kernels take, the dK/dV kernel and the dQ kernel alike (the
    device read as sm_90, so this runs on the CPU): fp16/bf16 d=256 dense calls with lengths
    in whole tiles (64 queries, 64 keys), causal only with sq = sk, q/k/v/dout that TMA can
    read, and only when switched on."""
    monkeypatch.setattr(fwd_hopper, "is_sm90", lambda device: True)
    monkeypatch.setenv(switch, "1")
    for name in ("FLASHTILE_GLUON_BWD256_CONFIG", "FLASHTILE_GLUON_DQ256_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    shape, causal, softcap = {}, case == "causal", 0.0
    if case == "switched-off":
        monkeypatch.setenv(switch, "0")
    elif case == "gqa-mqa":
        shape = dict(hq=8, hkv=1)
    elif case == "fp16":
        shape = dict(dtype=torch.float16)
    elif case == "d128":
        shape = dict(d=128)
    elif case == "fp32":
        shape = dict(dtype=torch.float32)
    elif case == "ragged-queries":
        shape = dict(sq=512 + 16)
    elif case == "ragged-keys":
        shape = dict(sk=512 + 32)
    elif case == "causal-sq-ne-sk":
        shape, causal = dict(sk=768), True
    elif case == "softcap":
        softcap = 20.0
    q, k, v = qkv(**shape)
    if case == "dv128":
        v = v[..., :128].contiguous()
    dout = q.clone()
    if case == "dout-dtype":
        dout = q.half()
    elif case == "bhsd-layout":
        dout = torch.randn(1, 4, 512, 256, dtype=q.dtype).transpose(1, 2)
    params = flash_params(q, k, v, causal, softcap)
    assert module.supports(dout, q, k, v, params) == expected


@pytest.mark.parametrize("persistent", [False, True], ids=["one-per-item", "one-per-sm"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_launch(monkeypatch, causal, persistent):
    """One launch of 64-key work items (b * hkv * sk / 64 of them): one program each, or with
    ``FLASHTILE_GLUON_BWD256_PERSISTENT=1`` one per SM (the H200's 132 off a GPU); the
    default config's tiles; causal orders in chunks of 8 key items. Runs on the CPU: the
    launch is captured, not made."""
    seen = gluon_launches(monkeypatch, run=False)
    monkeypatch.setenv("FLASHTILE_GLUON_BWD256_PERSISTENT", "1" if persistent else "0")
    monkeypatch.delenv("FLASHTILE_GLUON_BWD256_GROUP", raising=False)
    monkeypatch.delenv("FLASHTILE_GLUON_BWD256_CONFIG", raising=False)
    q, k, v = qkv(b=2, sq=4096, hq=8, hkv=2)
    lse = dsum = torch.zeros(2, 8, 4096)
    bwd256_hopper.dkdv(q, k, v, q.clone(), lse, dsum, torch.empty_like(k), torch.empty_like(v),
                       flash_params(q, k, v, causal))
    ((role, grid, meta),) = seen
    n_work = 2 * 2 * 4096 // 64
    assert role == "dkdv" and grid == ((132,) if persistent else (n_work,))
    assert (meta["BLOCK_N"], meta["BLOCK_M"], meta["HEAD_D"], meta["NUM_STAGES"]) == \
        (64, 64, 256, 2)
    assert meta["CAUSAL"] == causal and meta["GROUP"] == (8 if causal else 1)


@pytest.mark.parametrize("module,stood_in", [("bwd256_hopper", ("dk", "dv")),
                                             ("dq256_hopper", ("dq",))], ids=["dkdv", "dq"])
def test_backward_dispatch(monkeypatch, module, stood_in):
    """:func:`.bwd.backward` sends a covered call's dK/dV to the d=256 dK/dV kernel, or its dQ
    to the d=256 dQ kernel, with dQ in two passes (a stand-in writes zeros; the other
    gradients come from the tile-level kernels, interpreted here on the CPU), and neither in
    a forced one pass (the tile-level kernels then compute all three)."""
    import flashtile
    from flashtile.kernels import bwd
    if not common.interpreting():
        pytest.skip("the CPU run of the tile-level kernels needs Triton's interpreter")
    calls = []

    class Stand:
        @staticmethod
        def dkdv(q, k, v, dout, lse, dsum, dk, dv, params, record=None):
            calls.append(record)
            dk.zero_()
            dv.zero_()

        @staticmethod
        def dq(q, k, v, dout, lse, dsum, dq, params, record=None):
            calls.append(record)
            dq.zero_()

    monkeypatch.setattr(bwd, "_gluon_kernel",
                        lambda name, *args: Stand if name == module else None)
    flashtile.set_backend("triton")
    try:
        q, k, v = (torch.randn(1, 16, 1, 16, requires_grad=True) for _ in range(3))
        out = flash_attn_func(q, k, v)
        for mode in ("two-pass", "atomic"):
            monkeypatch.setenv("FLASHTILE_BWD_DQ", mode)
            grads = torch.autograd.grad(out, (q, k, v), torch.ones_like(out),
                                        retain_graph=True)
            assert bwd.last_dq_pass == mode
            assert len(calls) == 1          # (the forced one pass did not call it)
            for name, g in zip(("dq", "dk", "dv"), grads):
                assert torch.isfinite(g).all(), name
                assert (g == 0).all() == (mode == "two-pass" and name in stood_in), name
    finally:
        flashtile.set_backend(None)


# ----------------------------------------------------------------------------------------------
# GPU (sm_90): gradients against the float64 reference


def assert_ran(calls: list, n: int = 1) -> None:
    """The kernel ran ``n`` times and the last backward's dK/dV launch was its own, with dQ
    in two passes."""
    from flashtile.kernels import bwd
    assert len(calls) == n, f"the d=256 Gluon dK/dV kernel ran {len(calls)} times, not {n}"
    assert plans.gluon_configs["dkdv"].startswith("gluon d256"), plans.gluon_configs
    assert bwd.last_dq_pass == "two-pass"


# (b, s, hq, hkv, d), with the default's 64-key items and 64-query tiles: two items per
# head and two query tiles; GQA with two heads per KV head over two batches; MQA with 16
# items per head (causal items of 16 query tiles down to 1)
SHAPES = [(1, 128, 2, 2, 256), (2, 512, 4, 2, 256), (1, 1024, 4, 1, 256)]


@gluon_cases_over(SHAPES)
def test_gradients(gluon_calls, shape, causal, dtype):
    """dQ, dK and dV (and the forward's outputs) within budget of the float64 reference."""
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert_ran(gluon_calls)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("config", ["64,32,4,240", "64,32,2,240", "64,16,4,240"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_other_configs(gluon_calls, monkeypatch, config, causal):
    """The configs that compile clean offline besides the default (32 queries per tile with
    four slots, 32 with two, 16 with four): gradients within budget."""
    monkeypatch.setenv("FLASHTILE_GLUON_BWD256_CONFIG", config)
    check(2, 512, 512, 4, 2, 256, 256, torch.bfloat16, causal=causal)
    assert_ran(gluon_calls)
    assert plans.gluon_configs["dkdv"].endswith("64x{}/{}s".format(*config.split(",")[1:3]))


@gluon_cases_over([(2, 2048, 4, 4, 256), (1, 256, 2, 2, 256)])
def test_persistent_grid(gluon_calls, monkeypatch, shape, causal, dtype):
    """``FLASHTILE_GLUON_BWD256_PERSISTENT=1``: one program per SM looping over work items
    (256 items: about two apiece, of different lengths when causal; K and V reloaded once an
    item's dK and dV have left), and a call with fewer items than SMs."""
    b, s, _, hkv, _ = shape
    check_persistent(monkeypatch, "FLASHTILE_GLUON_BWD256_PERSISTENT", "dkdv", shape,
                     b * hkv * s // 64, causal, dtype, gluon_calls)
    assert_ran(gluon_calls)


@pytest.mark.gpu
@needs_hopper
def test_with_the_gluon_forward_and_a_scale(gluon_calls, monkeypatch):
    monkeypatch.setenv("FLASHTILE_GLUON_FWD", "1")
    check(2, 512, 512, 4, 2, 256, 256, torch.bfloat16, causal=True, scale=0.3)
    assert_ran(gluon_calls)


@pytest.mark.gpu
@needs_hopper
def test_replayed_calls_launch_it_afresh(gluon_calls, monkeypatch):
    """A backward replayed from its launch plan launches this kernel and the d=256 dQ kernel
    (:mod:`flashtile.kernels.dq256_hopper`, its default) afresh with the call's pointers:
    every replay's gradients equal the first call's, and within budget."""
    from flashtile.kernels import bwd
    monkeypatch.setenv("FLASHTILE_LAUNCH_PLANS", "1")
    monkeypatch.setenv("FLASHTILE_GLUON_DQ256", "1")
    dq_calls = count_calls(monkeypatch, dq256_hopper, "dq")
    q, k, v = (torch.randn(1, 512, h, 256, dtype=torch.bfloat16, device="cuda")
               for h in (4, 2, 2))
    dout = torch.randn(1, 512, 4, 256, dtype=torch.bfloat16, device="cuda")
    params = flash_params(q, k, v, causal=True)

    def grads(dt=None):
        ins = [t.detach().to(dt or t.dtype).requires_grad_() for t in (q, k, v)]
        if dt is None:
            out = flash_attn_func(*ins, causal=True)
        else:
            out = attention_reference(*ins, params, dtype=dt)[0]
        return torch.autograd.grad(out, ins, dout.to(out.dtype))

    before = len(bwd._PLANS)
    runs = [grads() for _ in range(3)]
    assert len(bwd._PLANS) == before + 1, "the first backward should have recorded one plan"
    assert_ran(gluon_calls)     # (once: the later calls replayed the plan)
    assert len(dq_calls) == 1 and plans.gluon_configs["dq"].startswith("gluon d256"), (
        dq_calls, plans.gluon_configs)
    plan = list(bwd._PLANS.plans.values())[-1]
    assert any(isinstance(x, plans._GluonLaunch) for x in plan.launches), "no Gluon step"
    ref, same = grads(torch.float64), grads(torch.bfloat16)
    for later in runs[1:]:
        for name, a, b in zip(("dq", "dk", "dv"), later, runs[0]):
            assert torch.equal(a, b), f"{name} of a replayed call differs from the first"
    for name, g, r, s in zip(("dq", "dk", "dv"), runs[0], ref, same):
        assert_within_budget(name, g, r, s, FLOOR[g.dtype] * (4 if name != "dv" else 1))


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("case", ["dkdv-switched-off", "dq-switched-off", "ragged-length",
                                  "causal-sq-ne-sk", "bhsd-layout", "softcap", "atomic-dq",
                                  "d128"])
def test_other_calls_fall_back(gluon_calls, monkeypatch, case):
    """Calls outside the d=256 kernels' cover run the tile-level kernels in their place
    (d=128: the d=128 Gluon dK/dV kernel), still within budget; so does a forced one pass
    (``FLASHTILE_BWD_DQ=atomic``: the tile-level dK/dV kernel adds dQ); either kernel switched
    off leaves the other running."""
    monkeypatch.setenv("FLASHTILE_GLUON_DQ256", "1")
    monkeypatch.delenv("FLASHTILE_GLUON_DQ256_CONFIG", raising=False)
    dq_calls = count_calls(monkeypatch, dq256_hopper, "dq")
    b, sq, sk, hq, hkv, d = 1, 512, 512, 4, 2, 256
    kwargs = {}
    if case == "dkdv-switched-off":
        monkeypatch.setenv(SWITCH, "0")
    elif case == "dq-switched-off":
        monkeypatch.setenv("FLASHTILE_GLUON_DQ256", "0")
    elif case == "ragged-length":
        sq = sk = 300
    elif case == "causal-sq-ne-sk":
        sk, kwargs = 768, dict(causal=True)
    elif case == "bhsd-layout":
        kwargs = dict(strided=True)
    elif case == "softcap":
        kwargs = dict(softcap=20.0)
    elif case == "atomic-dq":
        monkeypatch.setenv("FLASHTILE_BWD_DQ", "atomic")
    elif case == "d128":
        d = 128
    check(b, sq, sk, hq, hkv, d, d, torch.bfloat16, **kwargs)
    assert len(gluon_calls) == int(case == "dq-switched-off"), "the d=256 dK/dV kernel"
    assert len(dq_calls) == int(case == "dkdv-switched-off"), "the d=256 dQ kernel"
