"""The Gluon forward for Hopper (:mod:`flashtile.kernels.fwd_hopper`): which calls take it, and
its outputs and the gradients computed from its LSE against the float64 reference (GPU)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from test_kernels import check
from utils import (assert_split_descriptors, check_causal_groups, check_causal_windows,
                   check_persistent, count_calls,
                   d96_gqa_inputs, gluon_cases, gluon_cases_over, gluon_launches,
                   gluon_switched_on, needs_hopper)

from flashtile.interface import _flash_params
from flashtile.kernels import bwd256_hopper, bwd_hopper, dq_hopper, fwd_hopper


@pytest.fixture
def gluon_calls(monkeypatch):
    """Turns the (opt-in) Gluon forward on and counts its launches (the real one runs)."""
    yield from gluon_switched_on(monkeypatch, "FLASHTILE_GLUON_FWD", fwd_hopper, "forward")


def test_folded_view_only_for_foldable_strides():
    t = torch.randn(2, 8, 3, 16)
    f = fwd_hopper.folded(t)
    assert f.shape == (16, 48) and f.data_ptr() == t.data_ptr()
    assert torch.equal(f.view(2, 8, 3, 16), t)
    assert fwd_hopper.folded(torch.randn(2, 3, 8, 16).transpose(1, 2)) is None   # (b, h, s, d)
    assert fwd_hopper.folded(torch.randn(2, 8, 3, 32)[..., :16]) is None         # d sliced


@pytest.mark.parametrize("causal,window,sk,covered,masked", [
    (True, (-1, -1), 512, True, True), (False, (-1, 0), 512, True, True),
    (False, (-1, -1), 512, True, False), (True, (-1, -1), 768, False, True),
    (False, (8, 0), 512, False, True), (False, (-1, 4), 512, False, False)])
def test_cover_reads_the_mask_from_the_window(monkeypatch, causal, window, sk, covered, masked):
    """The Gluon kernels take no window or the causal one ((-1, 0), also when given as a
    window; it needs sq == sk), and their CAUSAL flag comes from the window, as the tile-level
    kernels' mask does (so a plan key, which holds the window, decides it). The device is
    stubbed as an sm_90 GPU."""
    monkeypatch.setattr(fwd_hopper, "is_sm90", lambda device: True)
    q = torch.randn(1, 512, 2, 128, dtype=torch.bfloat16)
    k = torch.randn(1, sk, 2, 128, dtype=torch.bfloat16)
    params, _ = _flash_params(q, k, k, 0.0, None, causal, window, 0.0, None, False)
    assert fwd_hopper.covers(q, k, k, params, fwd_hopper._CONFIGS) == covered
    assert fwd_hopper.causal(params) == masked


def test_gluon_is_imported_only_where_it_runs():
    """Gluon and the kernels cost ~35 ms of import time: ``import flashtile``, the kernel
    modules and a CPU forward+backward (the dK/dV kernel is on by default) must not pull them
    in, even with all three switched on; on an sm_90 GPU a switched-on module is found."""
    code = ("import os, sys, torch, flashtile, flashtile.kernels.fwd, flashtile.kernels.bwd\n"
            "from flashtile.kernels.common import gluon_kernels\n"
            "os.environ['FLASHTILE_GLUON_FWD'] = os.environ['FLASHTILE_GLUON_DQ'] = '1'\n"
            "if not torch.cuda.is_available():  # (the interpreter runs the kernels)\n"
            "    flashtile.set_backend('triton')\n"
            "    q = torch.randn(1, 128, 2, 64, requires_grad=True)\n"
            "    flashtile.flash_attn_func(q, q, q).sum().backward()\n"
            "q = torch.randn(1)\n"
            "assert gluon_kernels('bwd_hopper', q.device) is None\n"
            "assert not any(m.endswith('_hopper') for m in sys.modules), 'imported eagerly'\n"
            "gpu = torch.device('cuda')\n"
            "if torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9:\n"
            "    assert gluon_kernels('bwd_hopper', gpu).__name__.endswith('bwd_hopper')\n"
            "    os.environ['FLASHTILE_GLUON_BWD'] = '0'\n"
            "    assert gluon_kernels('bwd_hopper', gpu) is None\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHTILE_GLUON")}
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


@pytest.mark.parametrize("switch,d,causal,runs", [
    (None, 128, False, True), (None, 128, True, True), (None, 64, False, True),
    (None, 64, True, False), ("auto", 64, True, False), ("1", 64, True, True),
    ("0", 128, False, False), (None, 256, False, True), ("auto", 256, True, True),
    ("1", 256, False, True), ("1", 256, True, True), ("0", 256, False, False),
    (None, 96, False, True), ("auto", 96, True, True), ("1", 96, False, True),
    ("1", 96, True, True), ("0", 96, False, False)])
def test_default_forward_runs_where_it_measured_ahead(monkeypatch, switch, d, causal, runs):
    """Unset or ``auto``, the Gluon forward takes the (head dim, mask) cases where it beat the
    tile-level forward on the H200 (d=128, d=64 unmasked: docs/perf.md session 11; d=256:
    session 19; d=96: session 19); ``1`` forces it on every covered call, ``0`` off. The
    device is stubbed as an sm_90 GPU."""
    monkeypatch.setattr(fwd_hopper, "is_sm90", lambda device: True)
    if switch is None:
        monkeypatch.delenv("FLASHTILE_GLUON_FWD", raising=False)
    else:
        monkeypatch.setenv("FLASHTILE_GLUON_FWD", switch)
    monkeypatch.delenv("FLASHTILE_GLUON_FWD_CONFIG", raising=False)
    q = torch.randn(1, 512, 2, d, dtype=torch.bfloat16)
    params, _ = _flash_params(q, q, q, 0.0, None, causal, (-1, -1), 0.0, None, False)
    assert fwd_hopper.supports(q, q, q, params) == runs


@pytest.mark.parametrize("scale,runs", [(None, True), (0.3, True), (1e-6, True), (0.0, False),
                                         (-0.125, False)])
def test_positive_scales_only(monkeypatch, scale, runs):
    """The kernel takes each row's max before scaling and folds the scale into the exponent
    (``_softmax_tile``), which needs a positive scale: a zero or negative ``softmax_scale``
    goes to the tile-level forward, causal or not, whatever the switch. The device is
    stubbed as an sm_90 GPU."""
    monkeypatch.setattr(fwd_hopper, "is_sm90", lambda device: True)
    monkeypatch.setenv("FLASHTILE_GLUON_FWD", "1")
    monkeypatch.delenv("FLASHTILE_GLUON_FWD_CONFIG", raising=False)
    q = torch.randn(1, 512, 2, 128, dtype=torch.bfloat16)
    for causal in (False, True):
        params, _ = _flash_params(q, q, q, 0.0, scale, causal, (-1, -1), 0.0, None, False)
        assert fwd_hopper.supports(q, q, q, params) == runs


@gluon_cases_over([(2, 512, 4, 4, 128), (2, 512, 4, 2, 64)])
@pytest.mark.parametrize("scale", [0.3, -0.125, 0.0])
def test_any_scale(gluon_calls, monkeypatch, shape, causal, dtype, scale):
    """Outputs (NaN-poisoned) and gradients within budget for a positive scale (the Gluon
    forward, its scale in each score's exponent) and for zero and negative ones (the
    tile-level forward takes them: :func:`test_positive_scales_only`)."""
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal, scale=scale)
    assert len(gluon_calls) == (scale > 0)


@pytest.mark.parametrize("module,variable,default", [
    (fwd_hopper, "FLASHTILE_GLUON_FWD", True), (bwd_hopper, "FLASHTILE_GLUON_BWD", True),
    (dq_hopper, "FLASHTILE_GLUON_DQ", True)], ids=["fwd", "dkdv", "dq"])
def test_switches_and_cpu_tensors(monkeypatch, module, variable, default):
    """Each Gluon kernel's switch and its default (dK/dV on, the forward and dQ on where they
    measured ahead); switched on, CPU tensors never take it."""
    monkeypatch.delenv(variable, raising=False)
    assert module.enabled() == default
    monkeypatch.setenv(variable, "0")
    assert not module.enabled()
    monkeypatch.setenv(variable, "1")
    assert module.enabled()
    q = torch.randn(1, 256, 2, 64, dtype=torch.float16)
    params, _ = _flash_params(q, q, q, 0.0, None, False, (-1, -1), 0.0, None, False)
    assert not module.supports(*(q,) * (3 if module is fwd_hopper else 4), params)


@gluon_cases
def test_gluon_forward_and_gradients(gluon_calls, monkeypatch, shape, causal, dtype):
    """Out, LSE and the gradients of the Gluon forward and the Gluon dK/dV kernel (on by
    default; GQA: dK/dV summed over the group in registers)."""
    dkdv_calls = count_calls(monkeypatch, bwd_hopper, "dkdv")
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert len(gluon_calls) == 1, "this call should have run the Gluon forward"
    assert len(dkdv_calls) == 1, "this call should have run the Gluon dK/dV kernel"


def test_persistent_grid_size(monkeypatch):
    """The grids (``FLASHTILE_GLUON_FWD_PERSISTENT``; ``_BWD_``: the dK/dV kernel): ``1``
    one program per SM (fewer when there are fewer work items), ``0`` one per item, unset or
    ``auto`` the kernel's rule."""
    monkeypatch.setattr(fwd_hopper, "sm_count", lambda device: 132)
    cuda = torch.device("cuda", 0)
    for variable in ("FLASHTILE_GLUON_FWD_PERSISTENT", "FLASHTILE_GLUON_BWD_PERSISTENT"):
        monkeypatch.delenv(variable, raising=False)
        assert fwd_hopper.programs(288, cuda, variable, True) == 132
        assert fwd_hopper.programs(288, cuda, variable, False) == 288
        monkeypatch.setenv(variable, "auto")
        assert fwd_hopper.programs(288, cuda, variable, False) == 288
        monkeypatch.setenv(variable, "1")
        assert fwd_hopper.programs(288, cuda, variable, False) == 132
        assert fwd_hopper.programs(100, cuda, variable, False) == 100
        monkeypatch.setenv(variable, "0")
        assert fwd_hopper.programs(288, cuda, variable, True) == 288


def test_persistent_rule_of_dkdv():
    """Where the dK/dV kernel's persistent grid runs by default (measured, sessions 12 and
    35): d=64, unmasked at any length and causal up to 8 items per head (1k), not causal
    beyond; never d=128. (The forward's runs wherever the Gluon forward does.)"""
    assert bwd_hopper.persistent_ahead(64) and not bwd_hopper.persistent_ahead(128)
    assert bwd_hopper.persistent_ahead(64, False, 128)
    assert bwd_hopper.persistent_ahead(64, True, 8)
    assert not bwd_hopper.persistent_ahead(64, True, 16)
    assert not bwd_hopper.persistent_ahead(128, True, 4)


@gluon_cases_over([(3, 1024, 12, 4, 128), (2, 1024, 12, 12, 64), (1, 256, 2, 2, 128)])
def test_persistent_grid(gluon_calls, monkeypatch, shape, causal, dtype):
    """One program per SM, each looping over work items through one K/V ring: 288 items of
    128 rows over the SMs (two or three apiece, of different lengths when causal), 192 (the
    second round partial, and in causal calls taken in reverse: the snake order), and a call
    with fewer items than SMs; outputs and gradients within budget."""
    b, s, hq, _, _ = shape
    check_persistent(monkeypatch, "FLASHTILE_GLUON_FWD_PERSISTENT", "fwd", shape,
                     b * hq * s // 128, causal, dtype, gluon_calls)


@gluon_cases_over([(3, 1024, 12, 4, 128), (2, 1024, 12, 12, 64)])
def test_causal_order_groups(gluon_calls, monkeypatch, shape, causal, dtype):
    """``FLASHTILE_GLUON_FWD_GROUP``: the forward's causal order in chunks of query tiles
    (:func:`utils.check_causal_groups`)."""
    check_causal_groups(monkeypatch, "FLASHTILE_GLUON_FWD_GROUP", "fwd", shape, causal,
                        dtype, gluon_calls)


@pytest.mark.parametrize("d,seqlen,group", [(128, 512, 1), (128, 1024, 8), (64, 1024, 1),
                                             (64, 2048, 1), (64, 4096, 8), (256, 512, 8),
                                             (256, 1024, 8), (96, 512, 1), (96, 1024, 8)])
def test_causal_chunks_by_head_dim(monkeypatch, d, seqlen, group):
    """The forward's causal order runs in chunks of 1 up to :data:`fwd_hopper.SINGLE_UPTO`
    work tiles per head (d=128: 4, so 512 keys; d=64: 16, so 2k; d=256: never), else 8 (two
    heads: too few for a window). Runs on the CPU: the launch is captured, not made."""
    seen = gluon_launches(monkeypatch, run=False)
    monkeypatch.delenv("FLASHTILE_GLUON_FWD_GROUP", raising=False)
    monkeypatch.delenv("FLASHTILE_GLUON_FWD_WINDOW", raising=False)
    q, k, v = (torch.randn(1, seqlen, 2, d, dtype=torch.bfloat16) for _ in range(3))
    params, _ = _flash_params(q, k, v, 0.0, None, True, (-1, -1), 0.0, None, False)
    fwd_hopper.forward(q, k, v, params, torch.empty_like(q), torch.empty(1, 2, seqlen))
    ((role, _, meta),) = seen
    assert role == "fwd" and meta["CAUSAL"] and meta["GROUP"] == group


def test_causal_group_rule_and_bad_value(monkeypatch):
    monkeypatch.delenv("FLASHTILE_GLUON_FWD_GROUP", raising=False)
    rule = fwd_hopper.SINGLE_UPTO                       # the measured rule
    assert fwd_hopper.causal_group(8, rule[128]) == 8
    assert fwd_hopper.causal_group(4, rule[128]) == 1
    assert fwd_hopper.causal_group(16, rule[64]) == 1
    assert fwd_hopper.causal_group(32, rule[64]) == 8
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_GROUP", "0")
    with pytest.raises(ValueError, match="positive integer"):
        fwd_hopper.causal_group(8, rule[128])
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_GROUP", "3")
    assert fwd_hopper.causal_group(8, rule[64]) == 3


@gluon_cases_over([(3, 1024, 12, 4, 128), (2, 512, 9, 9, 64), (1, 512, 6, 2, 256)])
def test_causal_order_windows(gluon_calls, monkeypatch, shape, causal, dtype):
    """``FLASHTILE_GLUON_FWD_WINDOW`` (:func:`utils.check_causal_windows`): 36, 18 and 6
    (batch, head) pairs, GQA among them, over a persistent grid (last windows of 1, 3, 1
    heads, then 4, 2, 2)."""
    check_causal_windows(monkeypatch, "FLASHTILE_GLUON_FWD", "fwd", shape, causal, dtype,
                         gluon_calls)


def test_causal_window_rule_and_bad_value(monkeypatch):
    """:func:`fwd_hopper.causal_window`: unset, the caller's default (the forward's ``auto``,
    else off); ``auto`` on a persistent grid takes
    the fewest pairs whose items fill whole pairs of rounds, with one program per item a power
    of two that fills 24 MB, and none past 24 MB; windows replace chunks of 1 and a chunk of
    every tile (not chunks of 8 over 16 tiles), and a window of every pair is chunks of 1."""
    window = fwd_hopper.causal_window
    kv = 2 * 512 * 128 * 2                      # d=128 bf16 at 512 keys: 256 KB a head
    monkeypatch.delenv("FLASHTILE_GLUON_FWD_WINDOW", raising=False)
    assert window(1, 4, 512, kv, 132) == 1 and window(8, 8, 512, kv, 132) == 8
    assert window(1, 4, 512, kv, 132, default="auto") == -66
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_WINDOW", "0")
    assert window(1, 4, 512, kv, 132) == 1 and window(1, 4, 512, kv, 132, default="auto") == 1
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_WINDOW", "auto")
    assert window(1, 4, 512, kv, 132) == -66    # 66 x 4 items = 2 rounds of 132 programs
    assert window(8, 8, 256, 2 * kv, 132) == -33 and window(1, 16, 256, kv, 132) == -33
    assert window(1, 4, 512, kv, 100) == -50
    assert window(1, 4, 512, kv, 2048) == -64   # one program per item: 24 MB / 256 KB -> 64
    assert window(1, 4, 256, 2 * kv, 132) == 1  # 66 pairs x 512 KB (d=256): past 24 MB
    assert window(1, 4, 512, 1 << 30, 2048) == 1
    assert window(8, 16, 512, kv, 132) == 8 and window(4, 8, 512, kv, 132) == 4
    assert window(1, 4, 64, kv, 132) == 1       # 64 pairs: one window, chunks of 1
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_WINDOW", "5")
    assert window(1, 4, 512, kv, 132) == -5 and window(1, 4, 5, kv, 132) == 1
    for bad in ("-3", "x", "1.5"):
        monkeypatch.setenv("FLASHTILE_GLUON_FWD_WINDOW", bad)
        with pytest.raises(ValueError, match="FLASHTILE_GLUON_FWD_WINDOW must be 0, a positive"):
            window(1, 4, 512, kv, 132)


def test_causal_window_launch(monkeypatch):
    """With windows asked for or by default, the causal forward at d=128 512 keys (chunks of 1
    by rule; 384 items on the persistent grid of 132 programs off a GPU) is launched with
    ``GROUP`` -66 and a label that names the window; unmasked, or off, it is not. Runs on the
    CPU: the launch is captured, not made."""
    seen = gluon_launches(monkeypatch, run=False, full=True)
    monkeypatch.delenv("FLASHTILE_GLUON_FWD_GROUP", raising=False)
    q, k, v = (torch.randn(2, 512, 48, 128, dtype=torch.bfloat16) for _ in range(3))
    for value, causal in (("auto", True), ("auto", False), ("0", True), (None, True)):
        if value is None:
            monkeypatch.delenv("FLASHTILE_GLUON_FWD_WINDOW", raising=False)
        else:
            monkeypatch.setenv("FLASHTILE_GLUON_FWD_WINDOW", value)
        params, _ = _flash_params(q, k, v, 0.0, None, causal, (-1, -1), 0.0, None, False)
        fwd_hopper.forward(q, k, v, params, torch.empty_like(q), torch.empty(2, 48, 512))
    metas = [(launch[5]["GROUP"], launch[8]) for launch in seen]
    assert metas[0] == (-66, "gluon 128x64/4s window 66"), metas   # 96 pairs, 66 a window
    assert metas[1][0] == 1 and "window" not in metas[1][1], metas
    assert metas[2][0] == 1 and "window" not in metas[2][1], metas
    assert metas[3] == metas[0], metas                              # the default: auto


@pytest.mark.parametrize("seqlen,meta", [(2048, (-33, "gluon 128x128/4s window 33")),
                                         (4096, (8, "gluon 128x128/4s"))])
def test_d64_causal_windows_by_default_up_to_2k(monkeypatch, seqlen, meta):
    """d=64's causal forward runs chunks of 1 within windows by default up to 16 tiles a head
    (2k keys: 96 pairs, windows of 33 x 512 KB of K/V on 132 programs; session 42, -4% to -7%
    against chunks of 8), and chunks of 8 at 4k. Runs on the CPU: the launch is captured."""
    seen = gluon_launches(monkeypatch, run=False, full=True)
    for variable in ("FLASHTILE_GLUON_FWD_GROUP", "FLASHTILE_GLUON_FWD_WINDOW"):
        monkeypatch.delenv(variable, raising=False)
    q, k, v = (torch.randn(2, seqlen, 48, 64, dtype=torch.bfloat16) for _ in range(3))
    params, _ = _flash_params(q, k, v, 0.0, None, True, (-1, -1), 0.0, None, False)
    fwd_hopper.forward(q, k, v, params, torch.empty_like(q), torch.empty(2, 48, seqlen))
    assert [(launch[5]["GROUP"], launch[8]) for launch in seen] == [meta]


@pytest.mark.parametrize("d,causal,early", [(64, False, True), (64, True, True),
                                             (128, False, False), (128, True, True),
                                             (256, False, False), (256, True, False),
                                             (96, False, False), (96, True, False)])
def test_first_softmax_rule_by_head_dim_and_mask(monkeypatch, d, causal, early):
    """With P through shared memory (``FLASHTILE_GLUON_FWD_P_REGS=0`` at d=64/96/128; d=256
    always), S_1 is issued before an item's first softmax (``EARLY_S1``) except at d=128
    without a mask (:func:`fwd_hopper.early_s1`, measured per case) and at d=256 and d=96 (it
    spills there, offline). Runs on the CPU: the launch is captured, not made."""
    seen = gluon_launches(monkeypatch, run=False)
    monkeypatch.delenv("FLASHTILE_GLUON_FWD_EARLY_S1", raising=False)
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_P_REGS", "0")
    q, k, v = (torch.randn(1, 512, 2, d, dtype=torch.bfloat16) for _ in range(3))
    params, _ = _flash_params(q, k, v, 0.0, None, causal, (-1, -1), 0.0, None, False)
    fwd_hopper.forward(q, k, v, params, torch.empty_like(q), torch.empty(1, 2, 512))
    ((role, _, meta),) = seen
    assert role == "fwd" and meta["EARLY_S1"] == early


def test_first_softmax_switch_and_bad_value(monkeypatch):
    for value, early in (("1", True), ("0", False), ("auto", False), ("", False)):
        monkeypatch.setenv("FLASHTILE_GLUON_FWD_EARLY_S1", value)
        assert fwd_hopper.early_s1(128, False) == early, value
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_EARLY_S1", "yes")
    with pytest.raises(ValueError, match="must be 0, 1 or 'auto'"):
        fwd_hopper.early_s1(64, True)


@gluon_cases_over([(3, 1024, 12, 4, 128), (2, 1024, 12, 12, 64)])
@pytest.mark.parametrize("early", ["0", "1"])
def test_first_softmax_either_side_of_s1(gluon_calls, monkeypatch, shape, causal, dtype, early):
    """Both schedules of an item's start with P through shared memory
    (``FLASHTILE_GLUON_FWD_EARLY_S1``; causal items of one tile take the branch without S_1):
    outputs and gradients within budget, and the launch given the schedule asked for."""
    launches = gluon_launches(monkeypatch)
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_P_REGS", "0")
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_EARLY_S1", early)
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert len(gluon_calls) == 1
    assert [meta["EARLY_S1"] for role, _, meta in launches if role == "fwd"] == [early == "1"]


def test_o_leaves_through_p_only_when_it_must():
    """O is staged in a P buffer only for configs that do not fit apart and whose P buffer
    holds O: d=128's default (128 keys x 2 slots) does, d=64's and d=128's narrow config for
    key lengths that are not multiples of 128 keep their own O tiles."""
    assert fwd_hopper.o_in_p(*fwd_hopper._CONFIGS[128][:3], 128)
    assert not fwd_hopper.o_in_p(*fwd_hopper._NARROW[128][:3], 128)
    assert not fwd_hopper.o_in_p(*fwd_hopper._CONFIGS[64][:3], 64)
    assert fwd_hopper.o_in_p(64, 128, 2, 128)        # 256 KB apart, 224 KB through P
    assert not fwd_hopper.o_in_p(64, 64, 6, 128)     # too large, but P cannot hold O


@pytest.mark.parametrize("d,causal,seqlen", [(128, False, 1024), (128, True, 2048),
                                              (128, True, 1024), (64, False, 1024),
                                              (64, True, 1024), (96, False, 1024),
                                              (96, True, 2048), (256, True, 1024)])
def test_p_in_registers_switch(monkeypatch, d, causal, seqlen):
    """P in registers (``P_REGS``) is the default at d=64, d=96 (split head dim) and d=128 (unset,
    ``auto`` or ``1``; wide and narrow tiles, either mask); with it there is neither O through a
    P buffer nor an early S_1, and S_0 runs ahead where the mask is causal
    (:func:`test_next_s0_rule`) but at d=96. ``0`` stores P to shared memory, the launch
    otherwise the same. At d=256 the variable is ignored. Runs on the CPU: the launch is
    captured, not made."""
    seen = gluon_launches(monkeypatch, run=False)
    for variable in ("FLASHTILE_GLUON_FWD_CONFIG", "FLASHTILE_GLUON_FWD_EARLY_S1",
                     "FLASHTILE_GLUON_FWD_NEXT_S0"):
        monkeypatch.delenv(variable, raising=False)
    q, k, v = (torch.randn(1, seqlen, 2, d, dtype=torch.bfloat16) for _ in range(3))
    params, _ = _flash_params(q, k, v, 0.0, None, causal, (-1, -1), 0.0, None, False)
    metas = []
    for value in (None, "auto", "1", "0"):
        if value is None:
            monkeypatch.delenv("FLASHTILE_GLUON_FWD_P_REGS", raising=False)
        else:
            monkeypatch.setenv("FLASHTILE_GLUON_FWD_P_REGS", value)
        assert fwd_hopper.p_in_registers(d) == (d in (64, 96, 128) and value != "0")
        fwd_hopper.forward(q, k, v, params, torch.empty_like(q), torch.empty(1, 2, seqlen))
        ((role, _, meta),) = seen
        seen.clear()
        metas.append(meta)
    default, auto, asked, smem = metas
    assert default == auto == (asked if d in (64, 96, 128) else smem)
    assert not smem["P_REGS"]
    if d in (64, 96, 128):
        assert asked["P_REGS"] and not (asked["O_IN_P"] or asked["O_IN_Q"] or asked["EARLY_S1"])
        assert not smem["NEXT_S0"] and asked["NEXT_S0"] == (d != 96 and causal)
        assert {key: value for key, value in asked.items()
                if key not in ("P_REGS", "O_IN_P", "EARLY_S1", "NEXT_S0")} == \
            {key: value for key, value in smem.items()
             if key not in ("P_REGS", "O_IN_P", "EARLY_S1", "NEXT_S0")}
    else:
        assert asked == smem
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_P_REGS", "yes")
    with pytest.raises(ValueError, match="must be 0, 1 or 'auto'"):
        fwd_hopper.p_in_registers(128)


def test_no_p_buffers_leave_room_for_o():
    """Without P buffers (P in registers) O has a tile of its own at every d=64/128 config,
    d=128's 128 keys x 2 slots included (192 KB)."""
    for rows, keys, stages, d in (fwd_hopper._CONFIGS[128][:3] + (128,),
                                  fwd_hopper._NARROW[128][:3] + (128,),
                                  fwd_hopper._CONFIGS[64][:3] + (64,)):
        assert not fwd_hopper.o_in_p(rows, keys, stages, d, p_tiles=0)
        assert not fwd_hopper.o_in_q(rows, keys, stages, d, p_tiles=0)
        assert fwd_hopper._bytes_apart(rows, keys, stages, d, 0) <= fwd_hopper.SHARED_BYTES


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_p_in_registers_three_wide_slots_o_through_q(monkeypatch, causal):
    """Without P buffers d=128 fits 128 keys x 3 slots (``FLASHTILE_GLUON_FWD_CONFIG=
    64,128,3,240``, for the sweep) only with O staged in each consumer's Q tile: 256 KB with
    O apart, 224 KB through Q, never through a (missing) P buffer; d=96 fits it with O apart
    (192 KB). The launch gets P_REGS and O_IN_Q. Runs on the CPU: the launch is captured,
    not made."""
    kib = 1024
    assert fwd_hopper._bytes_apart(64, 128, 3, 128, 0) == 256 * kib > fwd_hopper.SHARED_BYTES
    assert fwd_hopper._bytes_apart(64, 128, 3, 128, 0) - 2 * 2 * 64 * 128 == 224 * kib
    assert fwd_hopper.o_in_q(64, 128, 3, 128, p_tiles=0)
    assert not fwd_hopper.o_in_p(64, 128, 3, 128, p_tiles=0)
    assert fwd_hopper._bytes_apart(64, 128, 3, 96, 0) == 192 * kib
    assert not (fwd_hopper.o_in_q(64, 128, 3, 96, 0) or fwd_hopper.o_in_p(64, 128, 3, 96, 0))
    seen = gluon_launches(monkeypatch, run=False)
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_CONFIG", "64,128,3,240")
    monkeypatch.delenv("FLASHTILE_GLUON_FWD_P_REGS", raising=False)
    q, k, v = (torch.randn(1, 1024, 2, 128, dtype=torch.bfloat16) for _ in range(3))
    params, _ = _flash_params(q, k, v, 0.0, None, causal, (-1, -1), 0.0, None, False)
    fwd_hopper.forward(q, k, v, params, torch.empty_like(q), torch.empty(1, 2, 1024))
    ((role, _, meta),) = seen
    assert (meta["BLOCK_N"], meta["NUM_STAGES"]) == (128, 3)
    assert meta["P_REGS"] and meta["O_IN_Q"] and not (meta["O_IN_P"] or meta["EARLY_S1"])


@gluon_cases_over([(3, 1024, 12, 4, 128), (1, 256, 2, 2, 128)])
def test_p_in_registers_o_through_q(gluon_calls, monkeypatch, shape, causal, dtype):
    """P in registers with O leaving through each consumer's Q tile (d=128 at 128 keys x 3
    slots, the sweep's config): 288 items over the SMs (each program loads a next Q after its
    O left), and items of one or two tiles. Outputs (NaN-poisoned before the launch) and
    gradients within budget, and the launch given P_REGS and O_IN_Q."""
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_CONFIG", "64,128,3,240")
    monkeypatch.delenv("FLASHTILE_GLUON_FWD_P_REGS", raising=False)
    launches = gluon_launches(monkeypatch)
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert len(gluon_calls) == 1
    assert [(meta["P_REGS"], meta["O_IN_Q"]) for role, _, meta in launches
            if role == "fwd"] == [(True, True)]


def _switch_case(gluon_calls, monkeypatch, shape, causal, dtype, config, variable, value,
                 meta_key, expect=None):
    """One checked call of the Gluon forward (``test_kernels.check``: outputs NaN-poisoned
    before the launch, gradients) with its config (``FLASHTILE_GLUON_FWD_CONFIG``; None: the
    default) and a schedule switch ``variable`` set to ``value``; the launch's ``meta_key``
    must follow the switch (``value == "1"``, or ``expect`` where given)."""
    monkeypatch.setenv(variable, value)
    if config:
        monkeypatch.setenv("FLASHTILE_GLUON_FWD_CONFIG", config)
    else:
        monkeypatch.delenv("FLASHTILE_GLUON_FWD_CONFIG", raising=False)
    launches = gluon_launches(monkeypatch)
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert len(gluon_calls) == 1
    expect = value == "1" if expect is None else expect
    assert [meta[meta_key] for role, _, meta in launches if role == "fwd"] == [expect]


def _p_operand_case(gluon_calls, monkeypatch, shape, causal, dtype, config, p_regs):
    _switch_case(gluon_calls, monkeypatch, shape, causal, dtype, config,
                 "FLASHTILE_GLUON_FWD_P_REGS", p_regs, "P_REGS")


P_OPERANDS = pytest.mark.parametrize("p_regs", ["1", "0"], ids=["p-in-registers", "p-in-shared"])


@gluon_cases_over([(3, 1024, 12, 4, 128), (2, 1024, 12, 12, 64), (1, 256, 2, 2, 128),
                   (3, 1024, 12, 4, 96), (1, 256, 2, 2, 96), (2, 384, 4, 2, 64),
                   (1, 640, 2, 2, 128)])
@P_OPERANDS
def test_p_operand(gluon_calls, monkeypatch, shape, causal, dtype, p_regs):
    """P V's A operand from registers (the default at d=64/96/128, FA3's order; O apart; at
    d=96 one register P for both parts' products) and from shared memory
    (``FLASHTILE_GLUON_FWD_P_REGS=0``): 288 items over the SMs, a d=64 call, d=96's split
    head dim, items of one or two tiles (the branch without a loop), and 3 or 5 key tiles
    (the in-turn loop's two tiles a trip and the odd remainder). Outputs
    (NaN-poisoned before the launch) and gradients within budget, and the launch given
    P_REGS."""
    _p_operand_case(gluon_calls, monkeypatch, shape, causal, dtype, None, p_regs)


@gluon_cases_over([(3, 1024, 12, 4, 128), (1, 256, 2, 2, 128)])
@P_OPERANDS
def test_p_operand_64_key_tiles(gluon_calls, monkeypatch, shape, causal, dtype, p_regs):
    """As :func:`test_p_operand`, at d=128 on 64 keys x 4 slots (its narrow config; causal,
    the first consumer skips each item's last tile and releases its slot unread, and at 256
    keys reads items of one tile)."""
    _p_operand_case(gluon_calls, monkeypatch, shape, causal, dtype, "64,64,4,240", p_regs)


@gluon_cases_over([(3, 1024, 12, 4, 128), (4, 1024, 16, 4, 64), (1, 256, 2, 2, 128)])
@pytest.mark.parametrize("config", [None, "64,64,4,240"], ids=["default-tiles", "64-keys"])
@pytest.mark.parametrize("ahead", ["1", "0"], ids=["s0-ahead", "s0-in-turn"])
def test_next_s0(gluon_calls, monkeypatch, shape, causal, dtype, config, ahead):
    """Each item's S_0 issued before the previous item's epilogue (``NEXT_S0``, the causal default
    at d=64/128: two Q tiles per consumer, O normalised a turn early) and in its own turn
    (``FLASHTILE_GLUON_FWD_NEXT_S0=0``): 288 items of 128 rows over the SMs (up to three a
    program), 512 at d=64 (up to four: each Q buffer used twice, its barrier's phase flipped),
    items of one or two tiles, and 64-key tiles (causal: the first consumer skips a tile per
    item). Outputs (NaN-poisoned before the launch) and gradients within budget, and the launch
    given NEXT_S0."""
    _switch_case(gluon_calls, monkeypatch, shape, causal, dtype, config,
                 "FLASHTILE_GLUON_FWD_NEXT_S0", ahead, "NEXT_S0")


@gluon_cases_over([(2, 1024, 4, 2, 64), (1, 512, 2, 2, 128), (1, 384, 2, 2, 64)])
@pytest.mark.parametrize("ahead", ["1", "0"], ids=["s0-ahead", "s0-in-turn"])
def test_diagonal_inside_the_tile_loop(gluon_calls, monkeypatch, shape, causal, dtype, ahead):
    """32-key tiles (``FLASHTILE_GLUON_FWD_CONFIG=64,32,4,240``): a consumer's 64 rows reach
    the diagonal in two key tiles, so causal, the mask applies inside the tile loop and not
    only on the peeled last tile (at the default tiles the diagonal's one tile is the peeled
    last), S_0 ahead and in turn, and items of 2 to 12 tiles (384 keys: three items a head,
    each consumer reading up to its diagonal). Outputs (NaN-poisoned before the launch) and
    gradients within budget."""
    _switch_case(gluon_calls, monkeypatch, shape, causal, dtype, "64,32,4,240",
                 "FLASHTILE_GLUON_FWD_NEXT_S0", ahead, "NEXT_S0")


@pytest.mark.parametrize("d,config,applies", [
    (128, (64, 128, 2), True), (128, (64, 64, 4), True), (64, (64, 128, 4), True),
    (96, (64, 128, 2), False), (256, (64, 64, 2), False), (128, (64, 128, 3), False)])
def test_next_s0_rule(monkeypatch, d, config, applies):
    """Where S_0 can run ahead (:func:`fwd_hopper.next_s0`): P in registers and a whole head
    dim (d=64/128, not d=96's split nor d=256), where a second Q tile per consumer fits (not
    128 keys x 3 slots, whose O already leaves through Q); by default there with the causal
    mask, and unmasked only at d=64 up to 512 keys (measured, sessions 24 and 43). ``1``
    forces it with either mask where it applies, ``0`` turns it off; anything else is
    refused."""
    monkeypatch.delenv("FLASHTILE_GLUON_FWD_NEXT_S0", raising=False)
    monkeypatch.delenv("FLASHTILE_GLUON_FWD_P_REGS", raising=False)
    for sk in (256, 512, 1024, 4096):
        assert fwd_hopper.next_s0(d, *config, True, sk) == applies
        assert fwd_hopper.next_s0(d, *config, False, sk) == (applies and d == 64 and sk <= 512)
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_NEXT_S0", "1")
    assert fwd_hopper.next_s0(d, *config, False, 4096) \
        == fwd_hopper.next_s0(d, *config, True, 4096) == applies
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_NEXT_S0", "0")
    assert not fwd_hopper.next_s0(d, *config, True, 4096)
    assert not fwd_hopper.next_s0(d, *config, False, 512)
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_NEXT_S0", "yes")
    with pytest.raises(ValueError, match="FLASHTILE_GLUON_FWD_NEXT_S0"):
        fwd_hopper.next_s0(d, *config, True, 4096)


@pytest.mark.parametrize("d,seqlen,causal,ahead", [
    (64, 512, False, True), (64, 384, False, True), (64, 1024, False, False),
    (64, 512, True, True), (128, 512, False, False), (128, 512, True, True)])
def test_next_s0_by_default(monkeypatch, d, seqlen, causal, ahead):
    """The launch's ``NEXT_S0`` with no variable set (captured on the CPU, not made): causal
    at d=64 and d=128, and d=64 unmasked up to 512 keys (-6.3% kernel time there, session 43),
    not at 1k nor at d=128 unmasked. Fails if the unmasked rule goes."""
    for name in ("FLASHTILE_GLUON_FWD_NEXT_S0", "FLASHTILE_GLUON_FWD_P_REGS",
                 "FLASHTILE_GLUON_FWD_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    seen = gluon_launches(monkeypatch, run=False)
    q, k, v = (torch.randn(1, seqlen, 2, d, dtype=torch.bfloat16) for _ in range(3))
    params, _ = _flash_params(q, k, v, 0.0, None, causal, (-1, -1), 0.0, None, False)
    fwd_hopper.forward(q, k, v, params, torch.empty_like(q), torch.empty(1, 2, seqlen))
    assert [meta["NEXT_S0"] for role, _, meta in seen] == [ahead]


def test_half_diagonal_rule(monkeypatch):
    """:func:`fwd_hopper.half_diagonal` (``FLASHTILE_GLUON_FWD_HALF_DIAG``, opt-in): only with
    ``1``, causal, S_0 ahead and tiles twice a consumer's rows wide; ``0`` and unset off;
    anything else refused. The launch gets it at d=64 causal 2k and d=128 causal 1k (128-key
    tiles), not unmasked nor at d=128 causal 512 (64-key tiles, which skip such tiles whole),
    and its label says so. Runs on the CPU: the launch is captured, not made."""
    for name in ("FLASHTILE_GLUON_FWD_HALF_DIAG", "FLASHTILE_GLUON_FWD_NEXT_S0",
                 "FLASHTILE_GLUON_FWD_P_REGS", "FLASHTILE_GLUON_FWD_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    assert not fwd_hopper.half_diagonal(64, 128, True, True)
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_HALF_DIAG", "1")
    assert fwd_hopper.half_diagonal(64, 128, True, True)
    assert not fwd_hopper.half_diagonal(64, 128, False, True)      # unmasked
    assert not fwd_hopper.half_diagonal(64, 128, True, False)      # S_0 in its turn
    assert not fwd_hopper.half_diagonal(64, 64, True, True)        # 64-key tiles
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_HALF_DIAG", "0")
    assert not fwd_hopper.half_diagonal(64, 128, True, True)
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_HALF_DIAG", "half")
    with pytest.raises(ValueError, match="FLASHTILE_GLUON_FWD_HALF_DIAG"):
        fwd_hopper.half_diagonal(64, 128, True, True)
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_HALF_DIAG", "1")
    seen = gluon_launches(monkeypatch, run=False, full=True)
    for d, seqlen, causal, half in ((64, 2048, True, True), (128, 1024, True, True),
                                    (64, 2048, False, False), (128, 512, True, False)):
        q = torch.randn(1, seqlen, 2, d, dtype=torch.bfloat16)
        params, _ = _flash_params(q, q, q, 0.0, None, causal, (-1, -1), 0.0, None, False)
        fwd_hopper.forward(q, q, q, params, torch.empty_like(q), torch.empty(1, 2, seqlen))
        ((*_, meta, _, _, label),) = seen
        seen.clear()
        assert (meta["HALF_DIAG"], label.endswith(" half-diag")) == (half, half)


@gluon_cases_over([(2, 2048, 4, 4, 64), (2, 1024, 8, 2, 128), (1, 256, 2, 2, 64),
                   (4, 1024, 16, 4, 64)])
def test_half_diagonal(gluon_calls, monkeypatch, shape, causal, dtype):
    """``FLASHTILE_GLUON_FWD_HALF_DIAG=1``: the first consumer's diagonal tile over its first 64
    keys (causal; unmasked runs as before): items of 1 to 16 tiles (an item of one tile keeps
    its whole S_0), d=64 and d=128, GQA, and 512 items over the SMs (up to four a program,
    each Q buffer used twice). Outputs (NaN-poisoned before the launch) and gradients within
    budget, and the launch given HALF_DIAG where causal."""
    _switch_case(gluon_calls, monkeypatch, shape, causal, dtype, None,
                 "FLASHTILE_GLUON_FWD_HALF_DIAG", "1", "HALF_DIAG", expect=causal)


@pytest.mark.parametrize("config,where", [
    ((64, 128, 2, 128), "p"), ((64, 64, 4, 128), "apart"), ((64, 128, 4, 64), "apart"),
    ((64, 64, 2, 256), "q"), ((64, 32, 4, 256), "q"), ((64, 32, 3, 256), "q"),
    ((64, 32, 2, 256), "apart"), ((64, 128, 2, 96), "apart"), ((64, 64, 6, 96), "apart"),
    ((64, 64, 7, 96), "q")])
def test_where_o_leaves(config, where):
    """O has a tile of its own where that fits in shared memory (208 KB at d=256 with 32 keys x
    2 slots; at d=96 with 128 keys x 2 slots, or 64 keys x 6), else leaves through a P buffer
    when one holds it (keys >= d), else through each consumer's Q tile: d=256 at 64 keys x 2
    slots (288 KB apart, 224 KB through Q), or 32 keys x 3 or 4 slots; d=96 at 64 keys x 7
    slots. Never both."""
    in_p, in_q = fwd_hopper.o_in_p(*config), fwd_hopper.o_in_q(*config)
    assert (in_p, in_q) == (where == "p", where == "q")
    rows, keys, stages, d = config
    used = fwd_hopper._bytes_apart(*config) - (4 * rows * d if where != "apart" else 0)
    assert used <= fwd_hopper.SHARED_BYTES


def test_head_dim_256_cover(monkeypatch):
    """d=256: the Gluon forward covers it (forced on: ``FLASHTILE_GLUON_FWD=1``) with 64 keys x
    2 slots, O through Q and S_1 after the first softmax; the d=64/128 dK/dV kernel and the
    Gluon dQ kernel do not, even switched on: d=256's dK/dV kernel does
    (:mod:`.bwd256_hopper`). The device is stubbed as an sm_90 GPU; the launch is captured,
    not made."""
    monkeypatch.setattr(fwd_hopper, "is_sm90", lambda device: True)
    for variable in ("FLASHTILE_GLUON_FWD", "FLASHTILE_GLUON_BWD", "FLASHTILE_GLUON_DQ"):
        monkeypatch.setenv(variable, "1")
    for variable in ("FLASHTILE_GLUON_FWD_CONFIG", "FLASHTILE_GLUON_FWD_EARLY_S1"):
        monkeypatch.delenv(variable, raising=False)
    seen = gluon_launches(monkeypatch, run=False)
    q = torch.randn(1, 1024, 2, 256, dtype=torch.bfloat16)
    for causal in (False, True):
        params, _ = _flash_params(q, q, q, 0.0, None, causal, (-1, -1), 0.0, None, False)
        assert fwd_hopper.covers(q, q, q, params, fwd_hopper._CONFIGS)
        assert fwd_hopper.supports(q, q, q, params)
        assert fwd_hopper.config(256, 1024, causal) == (64, 64, 2, 240)
        assert not bwd_hopper.supports(q, q, q, q, params)
        assert not dq_hopper.supports(q, q, q, q, params)
        assert bwd256_hopper.supports(q, q, q, q, params)
        fwd_hopper.forward(q, q, q, params, torch.empty_like(q), torch.empty(1, 2, 1024))
        role, _, meta = seen.pop()
        assert role == "fwd" and meta["HEAD_D"] == 256 and meta["BLOCK_N"] == 64
        assert meta["O_IN_Q"] and not meta["O_IN_P"] and not meta["EARLY_S1"]
    for sk in (960, 1000):          # keys: a multiple of the 64-key tile, and not
        k = torch.randn(1, sk, 2, 256, dtype=torch.bfloat16)
        params, _ = _flash_params(q, k, k, 0.0, None, False, (-1, -1), 0.0, None, False)
        assert fwd_hopper.supports(q, k, k, params) == (sk == 960)


@gluon_cases_over([(3, 1024, 12, 4, 256), (1, 512, 2, 2, 256), (3, 1024, 12, 4, 96),
                   (1, 512, 2, 2, 96)])
def test_head_dim_96_and_256(gluon_calls, monkeypatch, shape, causal, dtype):
    """d=256 (64 keys x 2 slots, O through each consumer's Q tile: with 288 items over the SMs
    every program loads a next Q after its O left) and d=96 (two parts of 64 and 32 columns,
    128 keys x 2 slots, O apart) on the Gluon forward, GQA, and calls of fewer items than SMs;
    the d=64/96/128 dK/dV kernel takes d=96 (in split tiles too), not d=256 (whose backward
    has its own, :mod:`.bwd256_hopper`): outputs (NaN-poisoned before the launch) and
    gradients within budget."""
    dkdv_calls = count_calls(monkeypatch, bwd_hopper, "dkdv")
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert len(gluon_calls) == 1, "this call should have run the Gluon forward"
    assert len(dkdv_calls) == (1 if d == 96 else 0), dkdv_calls


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("config", ["64,32,2,240", "64,32,4,240"],
                         ids=["32x2-o-apart", "32x4-o-in-q"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_head_dim_256_other_configs(gluon_calls, monkeypatch, config, causal):
    """The other configs at d=256 that compile clean offline (for the sweep): 32 keys x 2
    slots (O apart) and x 4 slots (O through Q); outputs and gradients within budget."""
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_CONFIG", config)
    check(3, 1024, 1024, 12, 4, 256, 256, torch.bfloat16, causal=causal)
    assert len(gluon_calls) == 1


def test_head_dim_96_runs_in_two_parts(monkeypatch):
    """d=96: the Gluon forward covers it only forced on (``FLASHTILE_GLUON_FWD=1``: unmeasured)
    with 128 keys x 2 slots, O apart and S_1 after the first softmax, the head dim split into
    64 + 32 columns: eight TMA descriptors (q, k, v, out for columns 0:64, then for 64:96), all
    over the folded ``(b*s, h*96)`` views, boxes of 64 and 32 columns (rows: 64 for q/out, 128
    for k/v), swizzled 128 and 64 bytes; ``HEAD_D=64, HEAD_D2=32``. The other head dims pass
    four descriptors and None for the second part's. The Gluon dK/dV and dQ kernels cover
    d=96 too (split likewise, tests/test_bwd_hopper.py, tests/test_dq_hopper.py; dQ switched
    on). The device is stubbed as an sm_90 GPU; the launch is captured, not made."""
    monkeypatch.setattr(fwd_hopper, "is_sm90", lambda device: True)
    for variable in ("FLASHTILE_GLUON_FWD", "FLASHTILE_GLUON_BWD", "FLASHTILE_GLUON_DQ"):
        monkeypatch.setenv(variable, "1")
    for variable in ("FLASHTILE_GLUON_FWD_CONFIG", "FLASHTILE_GLUON_FWD_EARLY_S1"):
        monkeypatch.delenv(variable, raising=False)
    launches = gluon_launches(monkeypatch, run=False, full=True)
    assert fwd_hopper.head_parts(96) == (64, 32)
    assert [fwd_hopper.head_parts(d) for d in (64, 128, 256)] == [(64, 0), (128, 0), (256, 0)]
    q, _, k, v = d96_gqa_inputs()
    for causal in (False, True):
        params, _ = _flash_params(q, k, v, 0.0, None, causal, (-1, -1), 0.0, None, False)
        assert fwd_hopper.covers(q, k, v, params, fwd_hopper._CONFIGS)
        assert fwd_hopper.supports(q, k, v, params)
        assert fwd_hopper.config(96, 1024, causal) == (64, 128, 2, 240)
        assert bwd_hopper.supports(q, q, k, v, params)
        assert dq_hopper.supports(q, q, k, v, params)
        out = torch.empty_like(q)
        fwd_hopper.forward(q, k, v, params, out, torch.empty(2, 3, 1024))
        (_, _, _, tiles, args, meta, make_descriptor, role, _), = launches
        launches.clear()
        assert role == "fwd" and meta["HEAD_D"] == 64 and meta["HEAD_D2"] == 32
        assert meta["BLOCK_M"] == 64 and meta["BLOCK_N"] == 128 and meta["NUM_STAGES"] == 2
        assert not (meta["O_IN_P"] or meta["O_IN_Q"] or meta["EARLY_S1"])
        assert [(t, tile) for t, tile in tiles] == [
            (q, (64, 64)), (k, (128, 64)), (v, (128, 64)), (out, (64, 64)),
            (q, (64, 32)), (k, (128, 32)), (v, (128, 32)), (out, (64, 32))]
        assert isinstance(args[0], torch.Tensor), "no None in place of a second descriptor"
        assert_split_descriptors(tiles, make_descriptor)
    for sk, runs in ((1024, True), (960, False), (1000, False)):    # 128-key tiles only
        kk = torch.randn(2, sk, 1, 96, dtype=torch.bfloat16)
        params, _ = _flash_params(q, kk, kk, 0.0, None, False, (-1, -1), 0.0, None, False)
        assert fwd_hopper.supports(q, kk, kk, params) == runs, sk
    for d, dv in ((96, 64), (64, 96), (80, 80)):                 # d = dv = 96 only
        qq, kk = (torch.randn(1, 512, 2, d, dtype=torch.bfloat16) for _ in range(2))
        vv = torch.randn(1, 512, 2, dv, dtype=torch.bfloat16)
        params, _ = _flash_params(qq, kk, vv, 0.0, None, False, (-1, -1), 0.0, None, False)
        assert not fwd_hopper.covers(qq, kk, vv, params, fwd_hopper._CONFIGS), (d, dv)
    q = torch.randn(1, 512, 2, 128, dtype=torch.bfloat16)
    params, _ = _flash_params(q, q, q, 0.0, None, False, (-1, -1), 0.0, None, False)
    fwd_hopper.forward(q, q, q, params, torch.empty_like(q), torch.empty(1, 2, 512))
    (_, _, _, tiles, args, meta, _, _, _), = launches
    assert len(tiles) == 4 and args[:4] == (None,) * 4 and meta["HEAD_D2"] == 0




@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("config,early", [("64,64,4,240", "auto"), ("64,64,7,240", "auto"),
                                          ("64,128,2,240", "1")],
                         ids=["64x4-o-apart", "64x7-o-in-q", "128x2-early-s1"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_head_dim_96_other_schedules(gluon_calls, monkeypatch, config, early, causal):
    """The other d=96 schedules that compile offline (for the sweep): 64 keys x 4 slots (O
    apart), x 7 slots (O through each part's Q tiles) and the default tiles with S_1 before
    the first softmax (it spills there); outputs and gradients within budget."""
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_CONFIG", config)
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_EARLY_S1", early)
    check(3, 1024, 1024, 12, 4, 96, 96, torch.bfloat16, causal=causal)
    assert len(gluon_calls) == 1


@pytest.mark.gpu
@needs_hopper
def test_head_dim_96_replayed_from_its_plan(gluon_calls, monkeypatch):
    """A d=96 forward replayed from its launch plan (eight descriptors, each re-encoded over
    the call's tensors) gives the first call's output and LSE exactly; outputs NaN-poisoned."""
    from flashtile import flash_attn_func
    from flashtile.kernels import fwd, plans
    monkeypatch.setenv("FLASHTILE_LAUNCH_PLANS", "1")
    q, k, v = (torch.randn(2, 512, 3, 96, dtype=torch.bfloat16, device="cuda")
               for _ in range(3))
    before = len(fwd._PLANS)
    runs = [flash_attn_func(q, k, v, causal=True, return_attn_probs=True)[:2] for _ in range(3)]
    assert len(fwd._PLANS) == before + 1 and len(gluon_calls) == 1
    plan = list(fwd._PLANS.plans.values())[-1]
    assert any(isinstance(x, plans._GluonLaunch) for x in plan.launches), "no Gluon step"
    assert not runs[0][0].isnan().any()
    for out, lse in runs[1:]:
        assert torch.equal(out, runs[0][0]) and torch.equal(lse, runs[0][1])


@gluon_cases_over([(2, 1024, 12, 12, 64)])
def test_two_slots(gluon_calls, monkeypatch, shape, causal, dtype):
    """128 keys x 2 ring slots at d=64 (O apart): K and V of a slot are freed apart, so the
    consumer can issue S_{j+2} while P_j V_j still reads V_j (with one barrier per slot this
    hung); outputs and gradients within budget."""
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_CONFIG", "64,128,2,240")
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert len(gluon_calls) == 1


def test_narrow_tiles_where_wide_ones_do_not_divide(monkeypatch):
    """d=128 takes 128-key tiles (2 slots) where they divide the key length, 64-key tiles (4
    slots) where only those do, so such calls keep the Gluon forward, and causal up to 512
    keys; d=64 keeps its one config. The device is stubbed as an sm_90 GPU."""
    monkeypatch.delenv("FLASHTILE_GLUON_FWD_CONFIG", raising=False)
    monkeypatch.setattr(fwd_hopper, "is_sm90", lambda device: True)
    assert fwd_hopper.config(128, 1024) == fwd_hopper._CONFIGS[128] == (64, 128, 2, 240)
    assert fwd_hopper.config(128, 576) == fwd_hopper._NARROW[128] == (64, 64, 4, 240)
    assert fwd_hopper.config(64, 576) == fwd_hopper._CONFIGS[64]
    # causal: the narrow tiles up to NARROW_CAUSAL_UPTO keys (measured ahead there), wide above
    assert fwd_hopper.NARROW_CAUSAL_UPTO == 512
    assert fwd_hopper.config(128, 512, causal=True) == fwd_hopper._NARROW[128]
    assert fwd_hopper.config(128, 1024, causal=True) == fwd_hopper._CONFIGS[128]
    assert fwd_hopper.config(128, 2048, causal=True) == fwd_hopper._CONFIGS[128]
    assert fwd_hopper.config(64, 1024, causal=True) == fwd_hopper._CONFIGS[64]
    q = torch.randn(1, 512, 2, 128, dtype=torch.bfloat16)
    for sk, runs in ((576, True), (1024, True), (560, False)):
        k = torch.randn(1, sk, 2, 128, dtype=torch.bfloat16)
        params, _ = _flash_params(q, k, k, 0.0, None, False, (-1, -1), 0.0, None, False)
        assert fwd_hopper.supports(q, k, k, params) == runs, sk


@pytest.mark.gpu
@needs_hopper
def test_narrow_tiles_run(gluon_calls, monkeypatch):
    """A d=128 call whose key length is a multiple of 64 but not of 128 runs the Gluon forward
    on 64-key tiles; outputs and gradients within budget."""
    launches = gluon_launches(monkeypatch)
    check(2, 512, 576, 4, 2, 128, 128, torch.bfloat16)
    assert len(gluon_calls) == 1
    assert [meta["BLOCK_N"] for role, _, meta in launches if role == "fwd"] == [64]


def test_one_slot_is_refused(monkeypatch):
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_CONFIG", "64,128,1,240")
    with pytest.raises(ValueError, match="at least 2 ring slots"):
        fwd_hopper.config(128, 1024)


@gluon_cases_over([(3, 1024, 12, 4, 128)])
def test_o_through_p_buffers(gluon_calls, monkeypatch, shape, causal, dtype):
    """128 keys x 2 slots at d=128 (O through each consumer's second P buffer, waited for
    after the next item's S_0; 288 items over the SMs, so every program reuses it): outputs
    and gradients within budget."""
    monkeypatch.setenv("FLASHTILE_GLUON_FWD_CONFIG", "64,128,2,240")
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert len(gluon_calls) == 1


@pytest.mark.gpu
@needs_hopper
def test_scale_reaches_the_kernel(gluon_calls):
    check(1, 512, 512, 2, 2, 128, 128, torch.bfloat16, causal=True, scale=0.3)
    assert len(gluon_calls) == 1


def fallback_call(case: str, monkeypatch) -> tuple[list, dict]:
    """``check``'s arguments for a call outside the Gluon kernels' cover (shared with
    test_bwd_hopper): bf16, (1, 512, 2, 128) unless the case changes it."""
    shape = dict(b=1, sq=512, sk=512, hq=2, hkv=2, d=128, dv=128, dtype=torch.bfloat16)
    kwargs = {}
    if case == "ragged-length":
        shape.update(sq=300, sk=300)
    elif case == "causal-sq-ne-sk":
        shape.update(sk=768)
        kwargs.update(causal=True)
    elif case == "bhsd-layout":
        kwargs.update(strided=True)
    elif case == "d96":         # (the Gluon forward's when forced on, not the backward's)
        shape.update(d=96, dv=96)
    elif case == "d80":
        shape.update(d=80, dv=80)
    elif case == "softcap":
        kwargs.update(softcap=20.0)
    elif case == "atomic-dq":
        monkeypatch.setenv("FLASHTILE_BWD_DQ", "atomic")
    else:
        raise ValueError(case)
    return list(shape.values()), kwargs


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("case", ["ragged-length", "causal-sq-ne-sk", "bhsd-layout", "d80",
                                  "softcap"])
def test_other_calls_fall_back(gluon_calls, monkeypatch, case):
    """Calls outside the kernel's cover run the tile-level kernel, still within budget."""
    shape, kwargs = fallback_call(case, monkeypatch)
    check(*shape, **kwargs)
    assert gluon_calls == []


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("d,causal,seqlen,runs", [(128, True, 512, True), (64, False, 512, True),
                                                  (64, True, 512, False),
                                                  (64, True, 2048, True),
                                                  (256, False, 512, True),
                                                  (256, True, 512, True), (96, False, 512, True),
                                                  (96, True, 512, True)])
def test_default_choice_on_the_gpu(gluon_calls, monkeypatch, d, causal, seqlen, runs):
    """With the switch unset, the Gluon forward runs the cases of ``AHEAD`` only (d=64 causal
    from 2k keys on); the others take the tile-level kernel; both within budget."""
    monkeypatch.delenv("FLASHTILE_GLUON_FWD")
    check(1, seqlen, seqlen, 2, 2, d, d, torch.bfloat16, causal=causal)
    assert len(gluon_calls) == (1 if runs else 0)


@pytest.mark.parametrize("d,causal,seqlen_k,runs", [
    (64, False, 128, True), (64, True, 1024, False), (64, True, 1536, False),
    (64, True, 2048, True), (64, True, 16384, True), (128, True, 128, True),
    (96, True, 256, True), (80, False, 4096, False)])
def test_default_cases(d, causal, seqlen_k, runs):
    """The default's rule by head dim, mask and key length (no GPU needed): d=64 causal waits
    for 2k keys, where it measured ahead of the tile-level forward."""
    assert fwd_hopper.ahead(d, causal, seqlen_k) is runs


@pytest.mark.gpu
@needs_hopper
def test_switch_turns_it_off(gluon_calls, monkeypatch):   # (the fixture turned it on)
    monkeypatch.setenv("FLASHTILE_GLUON_FWD", "0")
    check(1, 512, 512, 2, 2, 128, 128, torch.bfloat16)
    assert gluon_calls == []
