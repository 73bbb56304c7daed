"""Launch plans (flashtile.kernels.plans): a call signature's launches recorded once and
replayed by later calls. Replays change only the host path, so results must be bitwise equal
to the full path's, and a replay must use its own call's tensors (never the recording call's).

The launch-by-launch comparison of planned and full paths (kernel, grid, every argument) runs
on the CPU in tests/test_tools.py (``scripts/host_overhead.py --check-plans``); here the GPU
runs them.
"""

from __future__ import annotations

import pytest
import torch
from utils import DEVICE, HOPPER

import flashtile
from flashtile.params import AttentionParams

VARIANTS = {
    "causal": dict(causal=True),
    "gqa-4/2-window": dict(window_size=(48, 0), hkv=2),
    "softcap-alibi": dict(softcap=15.0, alibi=True),
    "d96-noncausal": dict(d=96),
    "dropout": dict(dropout_p=0.2, causal=True),
    # (on sm_90: the Gluon forward and dK/dV kernels, their launches kept with the plans)
    "gluon-d128-causal": dict(d=128, s=256, causal=True),
    "gluon-d64-gqa-full": dict(d=64, s=256, hkv=2),
    # (dK/dV per query head, summed per KV head by the plan's closing copies)
    "gluon-d128-gqa-causal-per-query-head": dict(d=128, s=256, hkv=2, causal=True,
                                                 env={"FLASHTILE_GLUON_BWD_EXPAND": "1"}),
}


def without_then_with_plans(monkeypatch, run, calls) -> None:
    """Each call's results without plans, then with them (the first call records a plan, the
    others replay it): bitwise equal, same shapes, and exactly one new backward plan."""
    from flashtile.kernels import bwd

    monkeypatch.setenv("FLASHTILE_LAUNCH_PLANS", "0")
    want = [run(*c) for c in calls]
    monkeypatch.setenv("FLASHTILE_LAUNCH_PLANS", "1")
    before = len(bwd._PLANS)
    got = [run(*c) for c in calls]
    assert len(bwd._PLANS) == before + 1
    for w, g in zip(want, got):
        assert all(torch.equal(x, y) and x.shape == y.shape for x, y in zip(w, g))


def fwd_bwd(q, k, v, dout, seed, **kw):
    torch.manual_seed(seed)                     # dropout's key is drawn from torch's generator
    out = flashtile.flash_attn_func(q, k, v, **kw)
    return (out, *torch.autograd.grad(out, (q, k, v), dout))


def inputs(d=64, hkv=4, alibi=False, dtype=torch.bfloat16, s=200, **kw):
    b, hq = 2, 4
    q, k, v = (torch.randn(b, s, h, d, device=DEVICE, dtype=dtype, requires_grad=True)
               for h in (hq, hkv, hkv))
    if alibi:
        kw["alibi_slopes"] = torch.rand(hq, device=DEVICE)
    return (q, k, v, torch.randn(b, s, hq, d, device=DEVICE, dtype=dtype)), kw


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(VARIANTS), ids=list(VARIANTS))
def test_gpu_replays_equal_the_full_path(monkeypatch, name):
    """Record on inputs A, replay on inputs B (same signature): B's results bitwise equal B's
    without plans, and A's replay (a third call) still gives A's. A and B draw different
    dropout keys: a replay passes its own."""
    from flashtile.kernels import bwd, fwd, plans

    variant = dict(VARIANTS[name])
    for var, value in variant.pop("env", {}).items():
        monkeypatch.setenv(var, value)
    a, kw = inputs(**variant)
    b, _ = inputs(**variant)
    monkeypatch.setenv("FLASHTILE_LAUNCH_PLANS", "0")
    want_a, want_b = fwd_bwd(*a, 1, **kw), fwd_bwd(*b, 2, **kw)
    monkeypatch.setenv("FLASHTILE_LAUNCH_PLANS", "1")
    fwd_before, bwd_before = len(fwd._PLANS), len(bwd._PLANS)
    got_a = fwd_bwd(*a, 1, **kw)                                 # records
    assert (len(fwd._PLANS), len(bwd._PLANS)) == (fwd_before + 1, bwd_before + 1)
    if HOPPER and name.startswith("gluon"):     # (both plans hold Gluon launches)
        for kernels in (fwd._PLANS, bwd._PLANS):
            newest = list(kernels.plans.values())[-1]
            assert any(isinstance(x, plans._GluonLaunch) for x in newest.launches)
            # (and their replays call Triton's C launcher with descriptors kept by address)
            assert all(x.direct is not None for x in newest.launches
                       if isinstance(x, plans._GluonLaunch))
    got_b = fwd_bwd(*b, 2, **kw)                                 # replays with B's tensors
    again_a = fwd_bwd(*a, 1, **kw)
    for want, got in ((want_a, got_a), (want_b, got_b), (want_a, again_a)):
        for w, g in zip(want, got):
            assert torch.equal(w, g)


@pytest.mark.gpu
def test_gpu_flex_replays_equal_the_full_path(monkeypatch):
    """flex_attention with a block mask and a score_mod capturing a tensor: recorded with one
    captured tensor, replayed with another (same layout): the full path's results bitwise."""
    from flashtile import masks

    b, h, s, d = 2, 4, 384, 64

    def causal(b_, h_, i, j):
        return i >= j

    def captures(bias):
        def score_mod(score, b_, h_, i, j):
            return score + bias[h_]
        return score_mod
    bm = masks.create_block_mask(causal, None, None, s, s, device=DEVICE)
    calls = []
    for _ in range(2):
        q, k, v = (torch.randn(b, h, s, d, device=DEVICE, dtype=torch.bfloat16,
                               requires_grad=True) for _ in range(3))
        dout = torch.randn(b, h, s, d, device=DEVICE, dtype=torch.bfloat16)
        mod = captures(torch.randn(h, device=DEVICE))
        calls.append((q, k, v, dout, mod))

    def run(q, k, v, dout, mod):
        out = flashtile.flex_attention(q, k, v, score_mod=mod, block_mask=bm)
        return (out, *torch.autograd.grad(out, (q, k, v), dout))
    without_then_with_plans(monkeypatch, run, calls)


@pytest.mark.gpu
def test_gpu_varlen_replays_equal_the_full_path(monkeypatch):
    """flash_attn_varlen_func recorded on one packing, replayed on another with the same
    total and longest sequence: the full path's results bitwise (the gradients are views of
    the kernels' (1, total, h, d) buffers)."""
    def packed(lengths):
        total, h, d = sum(lengths), 4, 64
        q, k, v = (torch.randn(total, h, d, device=DEVICE, dtype=torch.bfloat16,
                               requires_grad=True) for _ in range(3))
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32,
                          device=DEVICE)
        return q, k, v, torch.randn(total, h, d, device=DEVICE, dtype=torch.bfloat16), cu

    def run(q, k, v, dout, cu):
        out = flashtile.flash_attn_varlen_func(q, k, v, cu, cu, 300, 300, causal=True)
        return (out, *torch.autograd.grad(out, (q, k, v), dout))
    without_then_with_plans(monkeypatch, run, [packed([300, 17, 250]), packed([250, 300, 17])])


@pytest.mark.gpu
def test_gpu_decode_replays_equal_the_full_path(monkeypatch):
    """Decoding (split + combine) replayed from a plan, cache lengths changed between calls:
    the full path's results bitwise."""
    from flashtile.kernels import decode
    from flashtile.kvcache import flash_attn_with_kvcache

    q = torch.randn(2, 1, 8, 128, device=DEVICE, dtype=torch.bfloat16)
    kc = torch.randn(2, 4096, 2, 128, device=DEVICE, dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    lens = torch.tensor([4000, 1500], dtype=torch.int32, device=DEVICE)

    def call():
        return flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, num_splits=0,
                                       return_softmax_lse=True)
    for new in ([4000, 1500], [17, 4096], [1, 2]):
        lens.copy_(torch.tensor(new, dtype=torch.int32))
        monkeypatch.setenv("FLASHTILE_LAUNCH_PLANS", "0")
        want = call()
        monkeypatch.setenv("FLASHTILE_LAUNCH_PLANS", "1")
        got = call()
        assert len(decode._PLANS) == 1
        assert all(torch.equal(w, g) for w, g in zip(want, got))


def test_call_key_plans_only_what_it_can_replay(monkeypatch):
    """Calls get a key when every tensor they hand the kernels is the call's own: dropout
    enters only by its int types (replays pass their own key), a block mask by its lists'
    layouts, mods by their generated code and their captured tensors' layouts, varlen by the
    cu_seqlens layouts and the maxima; never with a bias or paged K/V; nothing under the
    interpreter or with FLASHTILE_LAUNCH_PLANS=0."""
    from flashtile import masks
    from flashtile.kernels import plans

    monkeypatch.setattr(plans, "interpreting", lambda: False)
    key = plans.call_key
    q = torch.randn(1, 16, 2, 16)
    base = AttentionParams(softmax_scale=0.25, causal=True, window_right=0)
    assert key(q, q, q, base) is not None
    assert key(q, q, q, base) == key(q.clone(), q, q, base)
    assert key(q, q, q, base) != key(q, q, q, base.with_(softcap=2.0))
    assert key(q, q, q, base) != key(q.transpose(1, 2).contiguous().transpose(1, 2), q, q, base)
    drop = base.with_(dropout_p=0.1, seed=5, offset=7)
    assert key(q, q, q, drop) == key(q, q, q, drop.with_(seed=9, offset=2**31 - 1))
    assert key(q, q, q, drop) != key(q, q, q, drop.with_(offset=2**31))

    def window(b, h, i, j):
        return i - j < 4
    bm = masks.create_block_mask(window, None, None, 16, 16, device="cpu", BLOCK_SIZE=16)
    again = masks.create_block_mask(window, None, None, 16, 16, device="cpu", BLOCK_SIZE=16)
    flex = AttentionParams(softmax_scale=0.25, mask_mod=window, block_mask=bm)
    assert key(q, q, q, flex) is not None
    assert key(q, q, q, flex) == key(q, q, q, flex.with_(block_mask=again))   # same layouts
    cpu = torch.device("cpu")
    assert plans.params_tensors(flex, cpu)["kv_indices"] is bm.kv_indices

    def captures(bias):
        def score_mod(score, b, h, i, j):
            return score + bias[h]
        return score_mod
    a, b, wide = torch.randn(2), torch.randn(2), torch.randn(2, 2)[:, 0]
    mod_a = base.with_(score_mod=captures(a))
    assert key(q, q, q, mod_a) == key(q, q, q, base.with_(score_mod=captures(b)))
    assert key(q, q, q, mod_a) != key(q, q, q, base.with_(score_mod=captures(wide)))  # stride
    assert plans.params_tensors(mod_a, cpu)["sm_args"][0].data_ptr() == a.data_ptr()
    cu = torch.tensor([0, 6, 16], dtype=torch.int32)
    packed = base.with_(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=10, max_seqlen_k=10)
    q1 = q[0]                                                        # (total, h, d)
    assert key(q1, q1, q1, packed) == key(q1, q1, q1, packed.with_(
        cu_seqlens_q=torch.tensor([0, 10, 16], dtype=torch.int32)))  # other lengths: own tensors
    assert key(q1, q1, q1, packed) != key(q1, q1, q1, packed.with_(max_seqlen_q=11))
    assert plans.params_tensors(packed, cpu)["cu_seqlens_q"] is cu
    never = {"bias": dict(attn_bias=torch.zeros(1, 1, 16, 16)),
             "paged K/V": dict(cu_seqlens_q=cu, block_table=torch.zeros(2, 1, dtype=torch.int32))}
    for name, change in never.items():
        assert key(q, q, q, base.with_(**change)) is None, name
    monkeypatch.setenv("FLASHTILE_LAUNCH_PLANS", "0")
    assert key(q, q, q, base) is None
    monkeypatch.setenv("FLASHTILE_LAUNCH_PLANS", "1")
    monkeypatch.setattr(plans, "interpreting", lambda: True)
    assert key(q, q, q, base) is None


def test_a_launch_with_an_unnamed_tensor_is_never_planned(monkeypatch):
    """A tensor argument the call did not name, alone or inside a tuple, makes the plan None
    (a replay would pass it stale); named tensors are blanked (a plan keeps none alive) and
    per-call values take their place by parameter name."""
    from types import SimpleNamespace

    from flashtile.kernels import plans

    def binder(*args, **kwargs):
        return dict(zip(("X", "T", "seed"), args)), None, None

    fake = SimpleNamespace(arg_names=["X", "T", "seed"], device_caches={0: (None,) * 4 + (binder,)},
                           run=lambda *a, **kw: SimpleNamespace(result=lambda: "compiled"))
    monkeypatch.setattr(plans, "driver", SimpleNamespace(
        active=SimpleNamespace(get_current_device=lambda: 0)))
    x, other = torch.zeros(2), torch.zeros(3)

    def plan(t_arg):
        rec = plans.Recorder()
        rec.add(fake, (1,), (x, t_arg, 7), {})
        return rec.plan({"x": x, "seed": 7}, (), ("x",), {"seed": "seed"})
    assert plan(other) is None                                    # unnamed
    assert plan((other, 4)) is None                               # inside a tuple
    made = plan((4, 5))
    launch = made.launches[0]
    assert launch.values == [None, (4, 5), None] and launch.places == [(0, "x"), (2, "seed")]


def test_a_gluon_launch_is_a_plan_step(monkeypatch):
    """A Gluon launch recorded with the call: its TMA descriptors and tensor arguments must
    be over tensors the call named (else no plan); a replay passes light descriptors of the
    recorded shapes over the replaying call's own tensors, in launch order."""
    from types import SimpleNamespace

    from flashtile.kernels import plans

    def binder(*args, **kwargs):
        return dict(zip(("desc", "LSE", "n"), args)), None, None

    ran = []
    compiled = SimpleNamespace(function=None, packed_metadata=None,
                               run=lambda *a: ran.append(a))
    fake = SimpleNamespace(device_caches={0: (None,) * 4 + (binder,)},
                           run=lambda *a, **kw: SimpleNamespace(result=lambda: compiled))
    monkeypatch.setattr(plans, "driver", SimpleNamespace(active=SimpleNamespace(
        get_current_device=lambda: 0, get_current_stream=lambda device: "stream")))
    q, lse, other = torch.zeros(8, 4), torch.zeros(8), torch.zeros(8, 4)
    desc = SimpleNamespace(shape=[8, 4], strides=[4, 1], padding="zero")

    def plan(tile, arg):
        rec = plans.Recorder()
        rec.add_gluon(fake, (2,), [desc], ((tile, 8),), (arg, 5), {}, "fwd", "gluon 8x4")
        return rec.plan({"q": q, "lse": lse}, ("lse",), ("lse",))
    assert plan(other, lse) is None                               # descriptor unnamed
    assert plan(q, other) is None                                 # argument unnamed
    made = plan(q, lse)
    q2 = torch.ones(8, 4)
    plans.gluon_configs.clear()
    (lse2,) = made.replay({"q": q2}, torch.device("cpu"))
    (_, _, _, stream, *_, tma, lse_arg, n), = ran
    assert (stream, n, lse_arg) == ("stream", 5, lse2)
    assert tma.base is q2 and (tma.shape, tma.strides, tma.padding) == ([8, 4], [4, 1], "zero")
    assert plans.gluon_configs == {"fwd": "gluon 8x4"}


def test_a_replayed_gluon_launch_encodes_each_address_once(monkeypatch):
    """A replayed Gluon launch calls Triton's C launcher itself, with each TMA descriptor
    encoded once per tensor address (Triton's own wrapper, :func:`triton.backends.nvidia.
    driver.wrap_handle_tensordesc`, encodes every one on every launch): the launcher gets
    exactly the arguments that wrapper would give it (two descriptors, each expanded in
    place), and a new address is encoded anew. Encoding is stubbed (no GPU): it returns the
    address it was given."""
    from types import SimpleNamespace

    nv = pytest.importorskip("triton.backends.nvidia.driver")
    from flashtile.kernels import plans

    encoded = []

    def encode(arg, meta):
        encoded.append(arg.base.data_ptr())
        return [("tensormap", arg.base.data_ptr(), meta["swizzle"]), *arg.shape, *arg.strides]
    monkeypatch.setattr(nv, "make_tensordesc_arg", encode)
    monkeypatch.setattr(plans, "make_tensordesc_arg", encode)
    sent = []
    signature = {"desc": "tensordesc<bf16[8,4]>", "desc2": "tensordesc<bf16[8,4]>",
                 "LSE": "*fp32", "n": "i32"}
    wrapper = nv.wrap_handle_tensordesc(lambda *a: sent.append(a), signature,
                                        [{"swizzle": 128}, {"swizzle": 64}])
    launcher = SimpleNamespace(launch=wrapper, global_scratch_size=0, profile_scratch_size=0,
                               launch_cooperative_grid=False, launch_pdl=True)
    compiled = SimpleNamespace(function="fn", packed_metadata="meta", run=launcher)

    def binder(*args, **kwargs):
        return dict(zip(signature, args)), None, None
    fake = SimpleNamespace(device_caches={0: (None,) * 4 + (binder,)},
                           run=lambda *a, **kw: SimpleNamespace(result=lambda: compiled))
    monkeypatch.setattr(plans, "driver", SimpleNamespace(active=SimpleNamespace(
        get_current_device=lambda: 0, get_current_stream=lambda device: "stream")))
    q, lse, k = torch.zeros(8, 4), torch.zeros(8), torch.zeros(8, 4)
    desc = SimpleNamespace(shape=[8, 4], strides=[4, 1], padding="zero")
    rec = plans.Recorder()
    rec.add_gluon(fake, (2,), [desc, desc], ((q, 8), (k, 8)), (lse, 5), {}, "fwd",
                  "gluon 8x4")
    made = rec.plan({"q": q, "k": k, "lse": lse}, ("lse",), ("lse",))
    assert made.launches[0].direct is not None
    q2, q3 = torch.ones(8, 4), torch.ones(8, 4)
    for tensor in (q2, q2, q3, q2):
        (lse2,) = made.replay({"q": tensor, "k": k}, torch.device("cpu"))
        got, by_replays = sent.pop(), len(encoded)
        wrapper(2, 1, 1, "stream", "fn", False, True, None, None, "meta", None, None, None,
                plans.Tma(tensor, [8, 4], [4, 1], "zero"), plans.Tma(k, [8, 4], [4, 1], "zero"),
                lse2, 5)
        del encoded[by_replays:]                    # (the wrapper encodes on every launch)
        assert got == sent.pop()                    # as Triton's wrapper would have sent it
        assert got[13] == ("tensormap", tensor.data_ptr(), 128)
        assert got[18] == ("tensormap", k.data_ptr(), 64) and got[-2] is lse2 and got[-1] == 5
    assert encoded == [q2.data_ptr(), k.data_ptr(), q3.data_ptr()]   # each address once


def test_a_backward_starts_its_key_from_its_forwards(monkeypatch):
    """The backward's plan key taken from its forward's (:func:`plans.backward_key`, handed
    over by the autograd layer in ``planned``) equals the key computed afresh, named tensors
    included; what changed since the forward is read anew: plans switched off or a launch hook
    installed leave the backward unplanned, as they would afresh, and a forward that made no
    key (plans off then) leaves the backward to make its own."""
    from triton import knobs

    from flashtile.kernels import plans

    monkeypatch.setattr(plans, "interpreting", lambda: False)
    monkeypatch.setenv("FLASHTILE_LAUNCH_PLANS", "1")
    q, k, v = (torch.randn(2, 16, 2, 16) for _ in range(3))
    params = AttentionParams(softmax_scale=0.25, causal=True, window_right=0,
                             alibi_slopes=torch.rand(2), dropout_p=0.1, seed=3, offset=8)
    cpu = torch.device("cpu")
    planned = {"key": plans.call_key(q, k, v, params),
               "named": plans.params_tensors(params, cpu)}
    afresh = plans.call_key(q, k, v, params), plans.params_tensors(params, cpu)
    key, named = plans.backward_key(planned, q, k, v, params)
    assert key == afresh[0] and named is planned["named"] and named == afresh[1]
    for without in ({}, None):                      # (no key from the forward: made afresh)
        key, named = plans.backward_key(without, q, k, v, params)
        assert key == afresh[0] and named == afresh[1]
    monkeypatch.setenv("FLASHTILE_LAUNCH_PLANS", "0")
    assert plans.backward_key(planned, q, k, v, params) == (None, None)
    monkeypatch.setenv("FLASHTILE_LAUNCH_PLANS", "1")

    def hook(*args):
        pass
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        assert plans.backward_key(planned, q, k, v, params) == (None, None)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert plans.backward_key(planned, q, k, v, params)[0] == afresh[0]


def test_autograd_hands_the_forwards_planned_to_its_backward(monkeypatch):
    """The Triton launchers' forward gets a ``planned`` dict and the same call's backward gets
    that very dict, unless autograd hands the backward other tensors than the forward's
    (saved-tensor hooks) or the forward's at other addresses (a ``.data`` swap): then None
    (a key afresh). Results are those of the launchers called without it."""
    from flashtile import kernels

    seen = []
    real_forward, real_backward = kernels.forward, kernels.backward

    def forward(q, k, v, params, planned=None):
        seen.append(planned)
        return real_forward(q, k, v, params, planned)

    def backward(*args, planned=None, **kwargs):
        seen.append(planned)
        return real_backward(*args, planned=planned, **kwargs)
    monkeypatch.setattr(kernels, "forward", forward)
    monkeypatch.setattr(kernels, "backward", backward)
    monkeypatch.setenv("FLASHTILE_BWD_DQ", "two-pass")     # (no atomics: bitwise comparable)
    q, k, v = (torch.randn(1, 24, 2, 16, device=DEVICE, requires_grad=True) for _ in range(3))
    dout = torch.randn(1, 24, 2, 16, device=DEVICE)
    flashtile.set_backend("triton")
    try:
        out = flashtile.flash_attn_func(q, k, v, causal=True)
        grads = torch.autograd.grad(out, (q, k, v), dout)
    finally:
        flashtile.set_backend(None)
    assert len(seen) == 2 and isinstance(seen[0], dict) and seen[1] is seen[0]
    flashtile.set_backend("triton")
    try:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            hooked = flashtile.flash_attn_func(q, k, v, causal=True)
        torch.autograd.grad(hooked, (q, k, v), dout)
        swapped = flashtile.flash_attn_func(q, k, v, causal=True)
        with torch.no_grad():
            k.data = k.data.clone()
        torch.autograd.grad(swapped, (q, k, v), dout)
    finally:
        flashtile.set_backend(None)
    assert isinstance(seen[2], dict) and seen[3] is None
    assert isinstance(seen[4], dict) and seen[5] is None
    from flashtile.interface import _flash_params
    params, _ = _flash_params(q, k, v, 0.0, None, True, (-1, -1), 0.0, None, False)
    want_out, lse = real_forward(q.detach(), k.detach(), v.detach(), params)
    want = real_backward(dout, q.detach(), k.detach(), v.detach(), want_out, lse, params)
    assert torch.equal(out, want_out) and all(map(torch.equal, grads, want))


def test_plan_keys_hold_every_gluon_variable():
    """Every ``FLASHTILE_GLUON_*`` variable the package reads is one that a plan key holds
    (:data:`.common.GLUON_SWITCHES`' switches and configs, :data:`.common.GLUON_OPTIONS`):
    else a replayed call would keep the launch its variable chose when it was recorded, after
    a test or a sweep set it differently (``FLASHTILE_GLUON_BWD_SKIP_MASKED`` was missing
    until session 43)."""
    import re
    from pathlib import Path

    from flashtile.kernels import common
    keyed = {name for switch, _, config in common.GLUON_SWITCHES.values()
             for name in (switch, config)}
    keyed |= {name for names in common.GLUON_OPTIONS.values() for name in names}
    source = Path(flashtile.__file__).parent
    read = {name for path in source.rglob("*.py")
            for name in re.findall(r"FLASHTILE_GLUON_[A-Z0-9_]*[A-Z0-9]", path.read_text())}
    assert read and read <= keyed, sorted(read - keyed)


def test_closing_copy_casts():
    """A plan's closing copy (:func:`plans.copy_into`): the same elements cast into dst's shape
    and dtype (a one-pass dQ's float32 accumulator into dQ)."""
    from flashtile.kernels import plans

    acc = torch.randn(2, 5, 3, 8)
    dq = torch.full((2, 5, 3, 8), float("nan"), dtype=torch.bfloat16)
    plans.copy_into(dq, acc.view(2, 15, 8))
    assert torch.equal(dq, acc.to(torch.bfloat16))
