"""Shared test helpers: the error-budget rule and readable ids."""

from __future__ import annotations

import pytest
import torch

import flashtile


GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
# The interpreter mis-computes bf16 dots: fp32 there, fp16 on the GPU.
DTYPE = torch.float16 if GPU else torch.float32
FLOOR = {torch.float32: 2e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}
BACKENDS = ["triton", "torch"]
HOPPER = GPU and torch.cuda.get_device_capability()[0] == 9
needs_hopper = pytest.mark.skipif(not HOPPER, reason="needs an sm_90 GPU")
# (b, s, hq, hkv, d) of the Gluon kernels' GPU tests: GQA and MQA, one and several tiles per
# head, both head dims
GLUON_SHAPES = [(2, 256, 4, 4, 128), (1, 1024, 8, 2, 128), (3, 512, 4, 1, 64),
                (1, 2048, 2, 2, 64)]


def gluon_cases_over(shapes):
    """The Gluon kernels' GPU-test parametrization: ``shape`` over ``shapes`` ``(b, s, hq,
    hkv, d)``, ``causal`` and ``dtype`` (bf16, fp16), on an sm_90 GPU only."""
    def mark(test):
        for decorator in (pytest.mark.parametrize("shape", shapes,
                                                  ids=lambda s: "B{}-S{}-H{}/{}-D{}".format(*s)),
                          pytest.mark.parametrize("causal", [False, True],
                                                  ids=["full", "causal"]),
                          pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16],
                                                  ids=["bf16", "fp16"]),
                          needs_hopper, pytest.mark.gpu):
            test = decorator(test)
        return test
    return mark


gluon_cases = gluon_cases_over(GLUON_SHAPES)


def max_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    """Max abs difference in float64; NaN anywhere in ``x`` counts as infinite error."""
    x = x.detach().double()
    ref = ref.detach().double()
    if torch.isnan(x).any():
        return float("inf")
    diff = (x - ref).abs()
    # Masked (-inf) entries of LSE compare equal when both are -inf.
    both_inf = torch.isinf(x) & torch.isinf(ref) & (torch.sign(x) == torch.sign(ref))
    diff = torch.where(both_inf, torch.zeros_like(diff), diff)
    return float(diff.max()) if diff.numel() else 0.0


def assert_within_budget(name: str, ours: torch.Tensor, ref64: torch.Tensor,
                         same_dtype: torch.Tensor, floor: float) -> None:
    """``err(ours) <= 2 * err(torch in the same dtype) + floor``, both against the fp64 ref."""
    e_ours = max_err(ours, ref64)
    e_torch = max_err(same_dtype, ref64)
    budget = 2 * e_torch + floor
    assert e_ours <= budget, (f"{name}: error {e_ours:.3e} > budget {budget:.3e} "
                              f"(torch same-dtype error {e_torch:.3e}, floor {floor:.1e})")


def shape_id(b, sq, sk, hq, hkv, d, dv=None) -> str:
    dv = d if dv is None else dv
    s = f"B{b}-Sq{sq}-Sk{sk}-H{hq}/{hkv}-D{d}"
    return s if dv == d else s + f"-Dv{dv}"


def count_calls(monkeypatch, module, name: str) -> list:
    """Wrap ``module.name`` (the real one still runs) and return the list that collects the
    shape of each call's first argument."""
    calls = []
    real = getattr(module, name)

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)
    monkeypatch.setattr(module, name, spy)
    return calls


def gluon_switched_on(monkeypatch, variable: str, module, name: str):
    """The Gluon test files' fixture body: switches ``variable`` on and yields the calls of
    ``module.name`` (:func:`count_calls`: the real one runs), on the triton backend. Launch
    plans are cleared first: a call replayed from a plan relaunches the kernel without calling
    ``module.name``, so only a test's own first call of each signature is counted."""
    from flashtile.kernels import plans
    plans.clear()
    monkeypatch.setenv(variable, "1")
    calls = count_calls(monkeypatch, module, name)
    flashtile.set_backend("triton")
    yield calls
    flashtile.set_backend(None)


def gluon_launches(monkeypatch, run: bool = True, full: bool = False) -> list:
    """The Gluon launches of the calls that follow, as ``(role, grid, meta)`` (role ``fwd``,
    ``dkdv`` or ``dq``): what a switch actually sent to the kernel. ``run``: the real launch
    runs too (False: captured only, e.g. on the CPU). ``full``: each launch's whole argument
    tuple instead (record, kernel, grid, tiles, args, meta, make_descriptor, role, label)."""
    from flashtile.kernels import plans
    seen, real = [], plans.gluon_launch

    def spy(*args):
        seen.append(args if full else (args[7], args[2], args[5]))
        return real(*args) if run else None
    monkeypatch.setattr(plans, "gluon_launch", spy)
    return seen


def d96_gqa_inputs() -> tuple:
    """q, dout ``(2, 1024, 3, 96)`` and k, v ``(2, 1024, 1, 96)`` bf16 on the CPU (GQA 3:1): the
    d=96 split-tile launch tests' call."""
    q, dout = (torch.randn(2, 1024, 3, 96, dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(2, 1024, 1, 96, dtype=torch.bfloat16) for _ in range(2))
    return q, dout, k, v


def assert_split_descriptors(tiles, make_descriptor, d: int = 96) -> None:
    """A launch's TMA descriptors over head dim ``d`` in parts (d=96: 64 + 32 columns): each
    ``(tensor, tile)`` gets a descriptor with the tile as its block, over the tensor's
    ``(b * s, h * d)`` folded view at its own address, swizzled by the tile's row bytes."""
    for t, tile in tiles:
        desc = make_descriptor(t, tile)
        assert list(desc.block_shape) == list(tile)
        assert list(desc.shape) == [t.shape[0] * t.shape[1], t.shape[2] * d]
        assert desc.base.data_ptr() == t.data_ptr()
        assert desc.layout.swizzle_byte_width == 2 * tile[1]      # 128 B, 64 B


def assert_d96_needs_dv96(supports) -> None:
    """A kernel's ``supports(dout, q, k, v, params)`` at d=96 takes d = dv only (the split
    tiles are those of one head dim): not (d, dv) = (96, 64) nor (64, 96)."""
    from flashtile.interface import _flash_params
    for d, dv in ((96, 64), (64, 96)):
        qq, kk = (torch.randn(1, 512, 2, d, dtype=torch.bfloat16) for _ in range(2))
        vv = torch.randn(1, 512, 2, dv, dtype=torch.bfloat16)
        params, _ = _flash_params(qq, kk, vv, 0.0, None, False, (-1, -1), 0.0, None, False)
        assert not supports(qq.clone(), qq, kk, vv, params), (d, dv)


def check_persistent(monkeypatch, variable: str, role: str, shape, n_work: int, causal: bool,
                     dtype, calls: list) -> None:
    """A Gluon kernel (``role``) with its persistent grid (``variable=1``): launched once, on
    one program per SM (fewer when there are fewer work items); outputs and gradients within
    budget (``test_kernels.check``)."""
    from test_kernels import check

    from flashtile.kernels.common import sm_count
    monkeypatch.setenv(variable, "1")
    launches = gluon_launches(monkeypatch)
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert len(calls) == 1
    grids = [grid for r, grid, _ in launches if r == role]
    assert grids == [(min(n_work, sm_count(torch.device("cuda"))),)], grids


def check_causal_groups(monkeypatch, variable: str, role: str, shape, causal: bool, dtype,
                        calls: list) -> None:
    """A Gluon kernel (``role``) with its causal order in chunks of 1, 4 and 3 tiles
    (``variable``; 8 tiles per head: chunks of 4, and of 3, 3 and a short 2): every item
    walked once (outputs and gradients within budget), each launch given the chunk asked for
    (without a mask the order is unchanged: 1). Windows are turned off (the forward's default
    puts chunks of 1 in windows: :func:`flashtile.kernels.common.causal_window`)."""
    from test_kernels import check
    launches = gluon_launches(monkeypatch)
    b, s, hq, hkv, d = shape
    monkeypatch.setenv(variable.replace("_GROUP", "_WINDOW"), "0")
    for group in ("1", "4", "3"):
        monkeypatch.setenv(variable, group)
        check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert len(calls) == 3
    groups = [meta["GROUP"] for r, _, meta in launches if r == role]
    assert groups == ([1, 4, 3] if causal else [1, 1, 1]), groups


def check_causal_windows(monkeypatch, prefix: str, role: str, shape, causal: bool, dtype,
                         calls: list) -> None:
    """A Gluon kernel (``role``) with its causal order in chunks of 1 (``{prefix}_GROUP``)
    within windows of 5, then 4, (batch, head) pairs (``{prefix}_WINDOW``; the kernel's
    ``GROUP`` < 0, windows short at the end where the pairs do not divide): every item walked
    once (outputs NaN-poisoned before the launch, and gradients, within budget), each causal
    launch given its window (without a mask none: 1)."""
    from test_kernels import check
    launches = gluon_launches(monkeypatch)
    b, s, hq, hkv, d = shape
    monkeypatch.setenv(f"{prefix}_GROUP", "1")
    for heads in ("5", "4"):
        monkeypatch.setenv(f"{prefix}_WINDOW", heads)
        check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert len(calls) == 2
    groups = [meta["GROUP"] for r, _, meta in launches if r == role]
    assert groups == ([-5, -4] if causal else [1, 1]), groups


def assert_replays_match(monkeypatch, calls: list, runs: int = 3) -> None:
    """``runs`` forward+backward calls of one signature (bf16, causal, on the GPU) with the same
    inputs: the first records the backward's launch plan (the Gluon kernel counted in
    ``calls`` runs once, its launch a step of the plan), the others replay it, and every
    call's gradients must equal the first's (the replay's buffers are NaN-poisoned under the
    tests, so a launch that a replay missed shows)."""
    from flashtile.kernels import bwd, plans
    monkeypatch.setenv("FLASHTILE_LAUNCH_PLANS", "1")
    q, k, v = (torch.randn(1, 512, 4, 128, dtype=torch.bfloat16, device="cuda",
                           requires_grad=True) for _ in range(3))
    dout = torch.randn(1, 512, 4, 128, dtype=torch.bfloat16, device="cuda")
    before = len(bwd._PLANS)
    grads = [torch.autograd.grad(flashtile.flash_attn_func(q, k, v, causal=True), (q, k, v),
                                 dout) for _ in range(runs)]
    assert len(bwd._PLANS) == before + 1, "the first backward should have recorded one plan"
    assert len(calls) == 1, f"the Gluon launcher was called {len(calls)} times in {runs} calls"
    plan = list(bwd._PLANS.plans.values())[-1]
    assert any(isinstance(x, plans._GluonLaunch) for x in plan.launches), "no Gluon step"
    for later in grads[1:]:
        for name, a, b in zip(("dq", "dk", "dv"), later, grads[0]):
            assert torch.equal(a, b), f"{name} of a replayed call differs from the first"


__all__ = ["BACKENDS", "DEVICE", "DTYPE", "FLOOR", "GLUON_SHAPES", "GPU", "HOPPER",
           "assert_replays_match", "assert_within_budget", "check_causal_groups",
           "check_causal_windows",
           "check_persistent", "count_calls",
           "gluon_launches",
           "flashtile", "gluon_cases", "gluon_cases_over", "gluon_switched_on", "max_err",
           "needs_hopper", "shape_id"]
