"""The host path of a call: TunedLaunch decides once per key and then launches its choice
directly; a call without gradients skips the autograd Function; a flex call compiles its
score_mod / mask_mod once; switches are read from the environment as ``os.environ`` has
them."""

from __future__ import annotations

import os

import pytest
import torch
import triton

import flashtile
from flashtile import AttentionParams, autograd
from flashtile.codegen import compiler
from flashtile.kernels.common import TunedLaunch, getenv, graph_bench, mod_args


class FakeTuner:
    """Records how it was launched; the 'tuning' picks a config from the key argument."""

    arg_names = ["X", "n", "FLAG"]
    keys = ["FLAG", "n"]

    def __init__(self):
        self.calls = []
        self.best_config = None
        tuner = self

        class Fn:
            def __getitem__(self, grid):
                def run(*args, **kwargs):
                    tuner.calls.append(("direct", grid, args, kwargs))
                return run
        self.fn = Fn()

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.best_config = triton.Config({"BLOCK": 16 * kwargs["FLAG"]}, num_warps=4)
            self.calls.append(("tuned", grid, args, kwargs))
        return run


def test_tunes_once_per_key_then_launches_directly():
    tuner = FakeTuner()
    launch = TunedLaunch(tuner)
    x = torch.zeros(2, dtype=torch.float16)
    launch[(3,)](x, 7, FLAG=1)
    launch[(3,)](x, 7, FLAG=1)
    launch[(4,)](x, 8, FLAG=1)                  # n is part of the key: tuned again
    launch[(3,)](x.float(), 7, FLAG=1)          # so is the tensors' dtype
    kinds = [c[0] for c in tuner.calls]
    assert kinds == ["tuned", "direct", "tuned", "tuned"]
    _, grid, args, kwargs = tuner.calls[1]
    assert grid == (3,) and args == (x, 7)
    assert kwargs["FLAG"] == 1 and kwargs["BLOCK"] == 16 and kwargs["num_warps"] == 4
    assert tuner.best_config.kwargs == {"BLOCK": 16}


def test_dense_autotuners_time_with_graph_replays():
    """The forward, dK/dV and dQ autotuners time their configs with :func:`graph_bench` (CUDA
    graph replays), not Triton's default timer, whose measurement a small call's host time
    can enter (kernels/common.py)."""
    from flashtile.kernels import bwd, fwd
    for tuner in (fwd._fwd, bwd._dkdv, bwd._dq):
        assert tuner.do_bench is graph_bench, tuner.base_fn.__name__


@pytest.mark.gpu
def test_autotuned_calls_are_correct(monkeypatch, tmp_path):
    """With autotuning on (the default outside the tests) and an empty Triton cache, the
    tile-level forward and backward time every fitting config through graph replays (counted),
    then run the chosen ones within the error budget; an accumulator the dK/dV tuner zeroes
    (one-pass dQ) included."""
    from test_kernels import check

    from flashtile.kernels import bwd, fwd
    timed = []
    replay = triton.testing.do_bench_cudagraph

    def counted(fn, *args, **kwargs):
        timed.append(1)
        return replay(fn, *args, **kwargs)
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", counted)
    for name, value in (("FLASHTILE_AUTOTUNE", "1"), ("FLASHTILE_GLUON_FWD", "0"),
                        ("FLASHTILE_GLUON_BWD", "0"), ("FLASHTILE_BWD_DQ", "atomic"),
                        ("TRITON_CACHE_DIR", str(tmp_path))):
        monkeypatch.setenv(name, value)
    for launch in (fwd._fwd_launch, bwd._dkdv_launch, bwd._dq_launch):
        launch.reset()                  # (a choice made earlier in this process is forgotten)
    check(2, 384, 384, 4, 2, 64, 64, torch.bfloat16, causal=True)
    assert len(timed) >= 2, "the forward's and the dK/dV kernel's configs should be timed"


def _count_function_applies(monkeypatch) -> list:
    calls = []
    original = autograd.FlashAttnFunction.apply

    def counted(*args):
        calls.append(1)
        return original(*args)
    monkeypatch.setattr(autograd.FlashAttnFunction, "apply", counted)
    return calls


def test_forward_without_gradients_skips_the_autograd_function(monkeypatch):
    calls = _count_function_applies(monkeypatch)
    q, k, v = (torch.randn(1, 24, 2, 16) for _ in range(3))
    with torch.no_grad():
        plain = flashtile.flash_attn_func(q, k, v, causal=True)
    assert calls == [] and plain.grad_fn is None
    assert torch.equal(plain, flashtile.flash_attn_func(q, k, v, causal=True))   # no input grads
    assert calls == []
    leaf = q.clone().requires_grad_()
    tracked = flashtile.flash_attn_func(leaf, k, v, causal=True)
    assert calls == [1] and tracked.grad_fn is not None
    assert torch.equal(tracked.detach(), plain)


def test_the_engine_materialises_no_lse_gradient(monkeypatch):
    """LSE has no gradient, and the engine hands the backward None for it (no zero-filled
    buffer, which cost an allocation and a kernel per step); the gradients are unchanged. A
    backward with no gradient at all returns None for every input."""
    seen = []
    original = autograd.FlashAttnFunction.backward

    def spy(ctx, dout, dlse):
        seen.append((dout is None, dlse))
        return original(ctx, dout, dlse)
    monkeypatch.setattr(autograd.FlashAttnFunction, "backward", staticmethod(spy))
    q, k, v = (torch.randn(1, 24, 2, 16, requires_grad=True) for _ in range(3))
    out, lse, _ = flashtile.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    grads = torch.autograd.grad((out * out).sum(), (q, k, v))
    assert seen == [(False, None)]
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / 4          # (softmax scale 1/sqrt(16))
    scores = scores.masked_fill(~torch.ones(24, 24, dtype=torch.bool).tril(), float("-inf"))
    ref = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v)
    want = torch.autograd.grad((ref * ref).sum(), (q, k, v))
    for got, exp in zip(grads, want):
        torch.testing.assert_close(got, exp, atol=1e-5, rtol=1e-4)
    assert original(None, None, None) == (None,) * 6


def test_a_mask_that_needs_a_gradient_still_goes_through_autograd(monkeypatch):
    calls = _count_function_applies(monkeypatch)
    q, k, v = (torch.randn(1, 2, 24, 16) for _ in range(3))
    bias = torch.randn(1, 1, 24, 24, requires_grad=True)
    out = flashtile.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    out.sum().backward()
    assert calls == [1]
    assert bias.grad is not None and bias.grad.abs().sum() > 0


def test_mods_are_compiled_once_per_call(monkeypatch):
    prints = []
    original = compiler.fingerprint

    def counted(fn):
        prints.append(fn)
        return original(fn)
    monkeypatch.setattr(compiler, "fingerprint", counted)
    scale = torch.tensor(0.5)
    params = AttentionParams(softmax_scale=1.0, score_mod=lambda s, b, h, qi, ki: s * scale,
                             mask_mod=lambda b, h, qi, ki: qi >= ki)
    score, mask = compiler.compile_mods(params)
    assert len(prints) == 2                       # score_mod and mask_mod, once each
    assert compiler.compile_mods(params) == (score, mask)
    forward = mod_args(params, torch.device("cpu"))
    backward = mod_args(params, torch.device("cpu"), with_grad=True)
    assert len(prints) == 2                       # the forward and backward reuse them
    assert forward["SCORE_MOD"] is score.fn and backward["SCORE_MOD"] is score.fwd_grad_fn
    assert forward["sm_args"][0].data_ptr() == scale.data_ptr()      # the captured tensor itself
    # A new call (a new params object) fingerprints again: captured values may have changed.
    compiler.compile_mods(params.with_(softmax_scale=2.0))
    assert len(prints) == 4


def test_getenv_follows_os_environ(monkeypatch):
    """The launch path's ``getenv`` sees every change made through ``os.environ`` (set,
    changed, deleted; non-ASCII values) and returns the default for an unset name."""
    name = "FLASHTILE_TEST_GETENV"
    monkeypatch.delenv(name, raising=False)
    assert getenv(name) is None and getenv(name, "auto") == "auto"
    for value in ("1", "", "0", "grüße"):
        monkeypatch.setenv(name, value)
        assert getenv(name, "auto") == value == os.environ[name]
    monkeypatch.delenv(name)
    assert getenv(name, "x") == "x"


def test_pinned_forward_config_from_the_environment(monkeypatch):
    """FLASHTILE_FWD_BLOCK_M/N pin the tile-level forward to one config (the A/B runs of
    docs/perf.md); FLASHTILE_FWD_WARPS / FLASHTILE_FWD_STAGES set its warps and stages, else
    8 warps from 128 rows (4 below) and 3 stages; FLASHTILE_FWD_MAXNREG caps its registers.
    (``interpreting`` is patched off: under the interpreter the list is one pinned config
    whatever the environment says.)"""
    from flashtile.kernels import fwd
    monkeypatch.setattr(fwd, "interpreting", lambda: False)
    monkeypatch.setenv("FLASHTILE_FWD_BLOCK_M", "64")
    monkeypatch.setenv("FLASHTILE_FWD_BLOCK_N", "128")
    (config,) = fwd._fwd_configs()
    assert (config.kwargs, config.num_warps, config.num_stages) == (
        {"BLOCK_M": 64, "BLOCK_N": 128}, 4, 3)
    monkeypatch.setenv("FLASHTILE_FWD_WARPS", "8")
    monkeypatch.setenv("FLASHTILE_FWD_STAGES", "2")
    (config,) = fwd._fwd_configs()
    assert (config.num_warps, config.num_stages, config.maxnreg) == (8, 2, None)
    monkeypatch.setenv("FLASHTILE_FWD_MAXNREG", "80")
    (config,) = fwd._fwd_configs()
    assert config.maxnreg == 80
    monkeypatch.delenv("FLASHTILE_FWD_MAXNREG")
    monkeypatch.setenv("FLASHTILE_FWD_STAGES", "three")
    with pytest.raises(ValueError, match="FLASHTILE_FWD_STAGES must be a positive integer"):
        fwd._fwd_configs()
    monkeypatch.delenv("FLASHTILE_FWD_STAGES")
    monkeypatch.delenv("FLASHTILE_FWD_BLOCK_N")
    assert len(fwd._fwd_configs()) > 1, "without both block sizes the whole list is tuned"


def test_forward_pick_pinned_at_d64_causal_short(monkeypatch):
    """The tile-level forward's tuning list is cut to 64 x 64 / 4 warps / 3 stages for the
    plain causal call at d=64 up to 1k keys on sm_90 (``fwd._PINNED``: the tuner's other picks
    there measured slower in the runs that took them; untuned too), and left whole everywhere
    else: longer keys, d=128, a window with a left bound or none at all, dropout, another GPU.
    (``interpreting`` and ``is_sm90`` are patched: the list and the capability are the GPU's.)"""
    from flashtile.kernels import fwd
    monkeypatch.setattr(fwd, "interpreting", lambda: False)
    for name in ("FLASHTILE_FWD_BLOCK_M", "FLASHTILE_FWD_BLOCK_N", "FLASHTILE_CONFIG_PICK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FLASHTILE_AUTOTUNE", "1")
    configs = fwd._fwd_configs()
    q = torch.empty(1, 2, 2, 64, dtype=torch.bfloat16)

    def picks(sm90=True, bucket=512, head=64, **flags):
        monkeypatch.setattr(fwd, "is_sm90", lambda device: sm90)
        kwargs = dict(HEAD_D=head, HEAD_DV=head, HAS_LEFT=False, HAS_RIGHT=True, window_right=0)
        kept = fwd._fwd_prune(configs, {"Q": q, "seq_bucket": bucket}, **{**kwargs, **flags})
        return [(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)
                for c in kept]

    assert picks() == picks(bucket=1024) == [(64, 64, 4, 3)]
    monkeypatch.setenv("FLASHTILE_AUTOTUNE", "0")      # (untuned: the first that fits)
    assert picks() == [(64, 64, 4, 3)] and picks(bucket=2048) != picks()
    monkeypatch.setenv("FLASHTILE_AUTOTUNE", "1")
    whole = picks(bucket=2048)
    assert len(whole) == len(configs) > 1
    assert picks(window_right=8) == picks()      # (one tuning key: the bound is not in it)
    for other in (picks(head=128), picks(HAS_RIGHT=False),
                  picks(HAS_LEFT=True), picks(HAS_DROPOUT=True), picks(sm90=False)):
        assert len(other) > 1, other
