"""The queries-as-rows one-pass dK/dV + dQ kernel for Hopper
(:mod:`flashtile.kernels.bwdrows_hopper`, the default at d=128 since session 22;
``FLASHTILE_GLUON_BWD_ROWS=0`` switches it off): which calls go there (CPU, launches
captured), and the gradients against the float64 reference (GPU)."""

from __future__ import annotations

import pytest
import torch
from test_kernels import check
from utils import gluon_cases_over, gluon_launches, gluon_switched_on, needs_hopper

from flashtile.interface import _flash_params
from flashtile.kernels import bwd_hopper, bwdrows_hopper, common, dq_hopper


@pytest.fixture
def gluon_calls(monkeypatch):
    """The Gluon dK/dV kernel switched on (as by default), its launcher's calls counted (the
    real one runs; the rows kernel is launched from it)."""
    yield from gluon_switched_on(monkeypatch, "FLASHTILE_GLUON_BWD", bwd_hopper, "dkdv")


def _rows_run(gluon_calls, monkeypatch, shape, causal, dtype, rows=None, persistent=None,
              dynamic=None):
    """Gradients of one call of ``shape`` ``(b, s, hq, hkv, d)`` in one pass (dQ added by the
    dK/dV kernel) against the float64 reference (:func:`test_kernels.check`), with
    ``FLASHTILE_GLUON_BWD_ROWS`` / ``_PERSISTENT`` / ``_DYNAMIC`` set as given (None: unset);
    asserts one dK/dV call, of the rows kernel, and no dQ kernel. Returns its launch's grid,
    meta and label."""
    for name, value in (("FLASHTILE_GLUON_BWD_ROWS", rows),
                        ("FLASHTILE_GLUON_BWD_PERSISTENT", persistent),
                        ("FLASHTILE_GLUON_BWD_DYNAMIC", dynamic)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("FLASHTILE_BWD_DQ", "atomic")
    monkeypatch.setenv("FLASHTILE_GLUON_DQ", "1")   # (two passes would launch its dQ kernel)
    dq_calls = []
    monkeypatch.setattr(dq_hopper, "dq", lambda *a, **k: dq_calls.append(a))
    launches = gluon_launches(monkeypatch, full=True)
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)
    assert len(gluon_calls) == 1 and dq_calls == []
    ((kernel, grid, meta, label),) = [(x[1], x[2], x[5], x[8]) for x in launches
                                      if x[7] == "dkdv"]
    assert kernel is bwdrows_hopper._dkdv_rows_kernel, label
    return grid, meta, label


@gluon_cases_over([(3, 1024, 12, 4, 128), (1, 256, 2, 2, 128), (1, 128, 1, 1, 128)])
def test_rows_layout(gluon_calls, monkeypatch, shape, causal, dtype):
    """The one pass at d=128 (``FLASHTILE_GLUON_BWD_ROWS`` unset): the rows kernel computes
    dK, dV and dQ (GQA 3:1 with several items per KV head, causal: per query head; MHA with
    one item of 128 keys and 4 query tiles per head, and one item of 2 query tiles: one tile
    in the loop, the other peeled; causal and not; fewer items than SMs: one program each,
    except the causal GQA case's 288 items per query head, which are claimed by one program
    per SM, :func:`bwdrows_hopper.dynamic`): all three gradients within budget, one launch,
    of the rows kernel, and no dQ kernel."""
    monkeypatch.delenv("FLASHTILE_GLUON_BWD_EXPAND", raising=False)
    grid, meta, label = _rows_run(gluon_calls, monkeypatch, shape, causal, dtype)
    b, s, hq, hkv, d = shape
    per_query_head = causal and hq > hkv                 # (bwd_hopper.expands)
    n_work = b * (hq if per_query_head else hkv) * s // 128
    sms = common.sm_count(torch.device("cuda"))
    claimed = causal and s // 128 >= bwdrows_hopper.DYNAMIC_FROM and n_work > sms
    assert label == ("gluon rows 128x64/2s +dQ" + (" persistent claimed" if claimed else "")
                     + ("" if causal else " rotated")
                     + (" per query head" if per_query_head else "")), label
    assert meta["CAUSAL"] == causal and meta["DYNAMIC"] == claimed
    assert grid == ((sms,) if claimed else (n_work,))


@gluon_cases_over([(3, 1024, 12, 4, 64), (4, 2048, 8, 8, 64)])
def test_rows_layout_d64(gluon_calls, monkeypatch, shape, causal, dtype):
    """d=64 in the rows kernel (:data:`bwdrows_hopper.OPT_IN`, ``FLASHTILE_GLUON_BWD_ROWS=1``):
    each consumer's dQ part 64 queries x 32 columns (a 32-column slice of the K tiles as
    wgmma's B operand, the accumulator's TMA blocks 64 x 32); GQA 3:1 with 96 items and MHA
    with 512 (unmasked: one program per SM over several items), causal and not: all three
    gradients within budget, one launch of the rows kernel."""
    _, meta, _ = _rows_run(gluon_calls, monkeypatch, shape, causal, dtype, rows="1")
    assert meta["HEAD_D"] == 64


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_rows_layout_one_query_tile(gluon_calls, monkeypatch, dtype):
    """Few query tiles per item (64 queries, 128 keys, no mask: causal needs seqlen_q ==
    seqlen_k): GQA 2:1, two tiles per item, one per query head (one tile in the loop, the
    other peeled); MHA, one tile per item (the loop empty, the peeled tile alone, with the
    LSE and D rows loaded before the loop): within budget."""
    monkeypatch.delenv("FLASHTILE_GLUON_BWD_ROWS", raising=False)
    monkeypatch.setenv("FLASHTILE_BWD_DQ", "atomic")
    monkeypatch.setenv("FLASHTILE_GLUON_DQ", "1")
    launches = gluon_launches(monkeypatch, full=True)
    for hq in (2, 1):
        check(1, 64, 128, hq, 1, 128, 128, dtype)
        assert len(gluon_calls) == 1
        gluon_calls.clear()
        (kernel,) = [x[1] for x in launches if x[7] == "dkdv"]
        launches.clear()
        assert kernel is bwdrows_hopper._dkdv_rows_kernel, hq


def test_rows_grid_rule(monkeypatch):
    """The rows kernel's grid (:func:`bwdrows_hopper.persistent`): with more items than SMs
    (256 here; the H200's 132 SMs off a GPU), one program per SM unmasked (``PERSISTENT``:
    the next item's K/V load overlaps dK/dV's staging tiles; labelled so), one per item
    causal; ``FLASHTILE_GLUON_BWD_PERSISTENT=1``/``0`` forces either; unmasked items rotated
    (:func:`bwd_hopper.rotates`, d=128's rule). Runs on the CPU: the launches are captured,
    not made."""
    for name in ("FLASHTILE_GLUON_BWD_ROWS", "FLASHTILE_GLUON_BWD_CONFIG",
                 "FLASHTILE_GLUON_BWD_ROTATE"):
        monkeypatch.delenv(name, raising=False)
    launches = gluon_launches(monkeypatch, run=False, full=True)
    sms = common.sm_count(torch.device("cpu"))
    q = torch.randn(2, 4096, 8, 128, dtype=torch.bfloat16)
    k = torch.randn(2, 4096, 4, 128, dtype=torch.bfloat16)
    n_work = 2 * 4 * 4096 // 128
    assert n_work > sms
    for value, causal, expect in ((None, False, sms), (None, True, n_work), ("0", False, n_work),
                                  ("1", True, sms), ("auto", False, sms)):
        if value is None:
            monkeypatch.delenv("FLASHTILE_GLUON_BWD_PERSISTENT", raising=False)
        else:
            monkeypatch.setenv("FLASHTILE_GLUON_BWD_PERSISTENT", value)
        params, _ = _flash_params(q, k, k, 0.0, None, causal, (-1, -1), 0.0, None, False)
        lse = dsum = torch.zeros(2, 8, 4096)
        bwd_hopper.dkdv(q, k, k, q, lse, dsum, torch.empty_like(k), torch.empty_like(k),
                        params, dq_acc=torch.zeros(bwd_hopper.dq_acc_shape(q)))
        ((_, kernel, grid, _, _, meta, _, _, label),) = launches
        launches.clear()
        assert kernel is bwdrows_hopper._dkdv_rows_kernel and grid == (expect,), (value, causal)
        assert meta["PERSISTENT"] == (expect == sms) == (" persistent" in label), label
        assert meta["ROTATE"] is (not causal) is label.endswith(" rotated"), label


@gluon_cases_over([(4, 2048, 8, 8, 128), (8, 2048, 8, 2, 128)])
def test_rows_persistent_grid(gluon_calls, monkeypatch, shape, causal, dtype):
    """``FLASHTILE_GLUON_BWD_PERSISTENT=1``: one program per SM, each taking several work
    items in turn (512 items of MHA, 256 of GQA 4:1, causal ones of unequal length), with
    the next item's K and V loaded while dK and dV leave: all three gradients within
    budget, one launch of the rows kernel on fewer programs than items."""
    grid, meta, _ = _rows_run(gluon_calls, monkeypatch, shape, causal, dtype, persistent="1")
    b, s, hq, hkv, d = shape
    assert meta["PERSISTENT"]
    assert grid == (common.sm_count(torch.device("cuda")),) < (b * hkv * s // 128,)


def test_rows_claimed_grid_rule(monkeypatch):
    """:func:`bwdrows_hopper.dynamic`: with a count to claim from
    (:func:`bwd_hopper.claims_items`, which the backward allocates and the preprocess
    zeroes), one program per SM, each item after its first claimed at run time
    (``DYNAMIC``, the count among the kernel's arguments, labelled " claimed"): causal from
    :data:`bwdrows_hopper.DYNAMIC_FROM` items per head (unset), and unmasked too where
    ``FLASHTILE_GLUON_BWD_DYNAMIC=1``; without a count, with fewer items than SMs, causal
    below that count (512 keys: 4 items per head) or ``0``, the grid of
    :func:`bwdrows_hopper.persistent`; anything else is refused. Runs on the CPU: the
    launches are captured, not made."""
    assert "FLASHTILE_GLUON_BWD_DYNAMIC" in common.GLUON_OPTIONS["bwd_hopper"]
    for name in ("FLASHTILE_GLUON_BWD_ROWS", "FLASHTILE_GLUON_BWD_CONFIG",
                 "FLASHTILE_GLUON_BWD_PERSISTENT"):
        monkeypatch.delenv(name, raising=False)
    launches = gluon_launches(monkeypatch, run=False, full=True)
    sms = common.sm_count(torch.device("cpu"))
    q = torch.randn(2, 4096, 8, 128, dtype=torch.bfloat16)
    n_work = 2 * 8 * 4096 // 128
    count = torch.zeros(1, dtype=torch.int32)
    for value, causal, with_count, seqlen, expect, claims in (
            ("1", True, True, 4096, sms, True), ("1", False, True, 4096, sms, True),
            ("1", True, False, 4096, n_work, False), ("0", True, True, 4096, n_work, False),
            (None, True, True, 4096, sms, True), ("auto", True, True, 4096, sms, True),
            (None, False, True, 4096, sms, False),
            ("1", True, True, 512, 2 * 8 * 512 // 128, False),
            (None, True, True, 2048, sms, True)):
        if value is None:
            monkeypatch.delenv("FLASHTILE_GLUON_BWD_DYNAMIC", raising=False)
        else:
            monkeypatch.setenv("FLASHTILE_GLUON_BWD_DYNAMIC", value)
        qs = q[:, :seqlen]
        params, _ = _flash_params(qs, qs, qs, 0.0, None, causal, (-1, -1), 0.0, None, False)
        asks = bwd_hopper.claims_items(qs, qs, params)
        assert asks is (value == "1" or (value != "0" and causal)), (value, causal, seqlen)
        lse = dsum = torch.zeros(2, 8, seqlen)
        # (a count where the rule asks for one, as the backward passes it)
        bwd_hopper.dkdv(qs, qs, qs, qs, lse, dsum, torch.empty_like(qs), torch.empty_like(qs),
                        params, dq_acc=torch.zeros(bwd_hopper.dq_acc_shape(qs)),
                        count=count if with_count and asks else None)
        ((_, kernel, grid, _, args, meta, _, _, label),) = launches
        launches.clear()
        assert kernel is bwdrows_hopper._dkdv_rows_kernel and grid == (expect,), (value, causal)
        assert meta["DYNAMIC"] is claims and (" claimed" in label) is claims, label
        assert meta["PERSISTENT"] is (grid[0] < n_work * seqlen // 4096), label
        assert (args[-1] is count) is claims
    monkeypatch.delenv("FLASHTILE_GLUON_BWD_DYNAMIC", raising=False)
    assert not bwdrows_hopper.dynamic(True, bwdrows_hopper.DYNAMIC_FROM - 1)
    assert bwdrows_hopper.dynamic(True, bwdrows_hopper.DYNAMIC_FROM)
    assert not bwdrows_hopper.dynamic(False, 64)
    assert not bwdrows_hopper.dynamic(True, 64, 64)      # (d=64's opt-in: unmeasured)
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_DYNAMIC", "yes")
    with pytest.raises(ValueError, match="FLASHTILE_GLUON_BWD_DYNAMIC must be 0, 1 or 'auto'"):
        bwdrows_hopper.dynamic(True, 16)


@gluon_cases_over([(4, 2048, 8, 8, 128), (8, 2048, 8, 2, 128), (3, 2048, 12, 4, 128)])
def test_rows_claimed_grid(gluon_calls, monkeypatch, shape, causal, dtype):
    """``FLASHTILE_GLUON_BWD_DYNAMIC=1``: one program per SM, each item after a program's
    first claimed from the count that the preprocess zeroed (causal items of unequal
    length; MHA, GQA 4:1, and GQA 3:1, causal per query head): all three gradients within
    budget (outputs NaN-poisoned, the count poisoned to -1 before the preprocess), one
    launch of the rows kernel on fewer programs than items; then a second call of the
    same signature, which replays the first's launch plan (a new count, zeroed again):
    within budget again."""
    grid, meta, label = _rows_run(gluon_calls, monkeypatch, shape, causal, dtype,
                                  dynamic="1")
    b, s, hq, hkv, d = shape
    assert meta["DYNAMIC"] and meta["PERSISTENT"] and " claimed" in label, label
    assert grid == (common.sm_count(torch.device("cuda")),)
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)


def _gqa_call(monkeypatch, *unset, batch=2):
    """The per-query-head launch tests' setting: the rows kernel's variables and ``unset``
    removed, Gluon launches captured (not made); q ``(batch, 1024, 8, 128)`` and k
    ``(batch, 1024, 2, 128)`` bf16 on the CPU (GQA 4:1), and their causal and unmasked params.
    Returns (launches, q, k, causal params, unmasked params)."""
    for name in ("FLASHTILE_GLUON_BWD_ROWS", "FLASHTILE_GLUON_BWD_CONFIG",
                 "FLASHTILE_GLUON_BWD_PERSISTENT", *unset):
        monkeypatch.delenv(name, raising=False)
    launches = gluon_launches(monkeypatch, run=False, full=True)
    q = torch.randn(batch, 1024, 8, 128, dtype=torch.bfloat16)
    k = torch.randn(batch, 1024, 2, 128, dtype=torch.bfloat16)
    causal, _ = _flash_params(q, k, k, 0.0, None, True, (-1, -1), 0.0, None, False)
    full, _ = _flash_params(q, k, k, 0.0, None, False, (-1, -1), 0.0, None, False)
    return launches, q, k, causal, full


def test_rows_per_query_head_rule(monkeypatch):
    """:func:`bwd_hopper.expands` in the rows kernel: a causal GQA one pass at d=128 computes
    dK/dV per query head (``dkdv_heads`` is q's heads; unset, ``auto``, ``1``), a grid over
    (batch, query head, key item) with ``KV_SHARE`` query heads per KV head and the
    masked-tile skip of MHA (an item has one query head); ``0``, unmasked (unless ``1``) and
    MHA keep k's heads; d=64
    follows :mod:`.bwd_hopper`'s own rule (its opt-in rows kernel,
    ``FLASHTILE_GLUON_BWD_ROWS=1``, never); anything else is refused; the variable is a
    plan-key option. Runs on the CPU: the launches are captured, not made."""
    assert "FLASHTILE_GLUON_BWD_EXPAND" in common.GLUON_OPTIONS["bwd_hopper"]
    launches, q, k, params, full = _gqa_call(monkeypatch, "FLASHTILE_GLUON_BWD_SKIP_MASKED")
    d64 = q[..., :64], k[..., :64]
    for value, causal_heads, full_heads in ((None, 8, 2), ("auto", 8, 2), ("0", 2, 2),
                                            ("1", 8, 8)):
        if value is None:
            monkeypatch.delenv("FLASHTILE_GLUON_BWD_EXPAND", raising=False)
        else:
            monkeypatch.setenv("FLASHTILE_GLUON_BWD_EXPAND", value)
        assert bwd_hopper.dkdv_heads(q, k, params, True) == causal_heads, value
        assert bwd_hopper.dkdv_heads(q, k, full, True) == full_heads, value
        assert bwd_hopper.dkdv_heads(q, q, params, True) == 8                  # MHA
        # (d=64: the transposed kernel's rule, :func:`bwd_hopper.expands`: causal in one pass)
        assert bwd_hopper.dkdv_heads(*d64, params, True) == (2 if value == "0" else 8)
        monkeypatch.setenv("FLASHTILE_GLUON_BWD_ROWS", "1")
        assert bwd_hopper.dkdv_heads(*d64, params, True) == 2
        monkeypatch.delenv("FLASHTILE_GLUON_BWD_ROWS")
    parts = torch.empty(2, 1024, 8, 128, dtype=torch.bfloat16)
    lse = dsum = torch.zeros(2, 8, 1024)
    bwd_hopper.dkdv(q, k, k, q, lse, dsum, parts, parts.clone(), params,
                    dq_acc=torch.zeros(bwd_hopper.dq_acc_shape(q)))
    ((_, kernel, grid, _, args, meta, _, _, label),) = launches
    assert kernel is bwdrows_hopper._dkdv_rows_kernel and label.endswith(" per query head")
    assert grid == (2 * 8 * 1024 // 128,)                   # (causal: a program per item)
    assert meta["KV_SHARE"] == 4 and meta["SKIP_MASKED"]
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_EXPAND", "yes")
    with pytest.raises(ValueError, match="FLASHTILE_GLUON_BWD_EXPAND must be 0, 1 or 'auto'"):
        bwd_hopper.dkdv_heads(q, k, params, True)


def test_rows_per_query_head_added_launch(monkeypatch):
    """``FLASHTILE_GLUON_BWD_EXPAND_ADD=1`` (:func:`bwdrows_hopper.adds`, opt-in): the
    per-query-head dK/dV are added into float32 accumulators shaped like k (``ADD_DKDV``, the
    accumulators among the kernel's arguments, labelled " added"); only where dK/dV are per
    query head and in the rows kernel (``adds_dkdv``); unset, ``auto`` or ``0``: parts. Runs on
    the CPU: the launches are captured, not made."""
    assert "FLASHTILE_GLUON_BWD_EXPAND_ADD" in common.GLUON_OPTIONS["bwd_hopper"]
    # (8 sequences: windows of the causal order differ between 16 and 64 (batch, head) pairs)
    launches, q, k, causal, full = _gqa_call(monkeypatch, "FLASHTILE_GLUON_BWD_EXPAND", batch=8)

    def adds(q, k, params, one_pass=True):
        heads = bwd_hopper.dkdv_heads(q, k, params, one_pass)
        return bwd_hopper.adds_dkdv(q, k, heads, one_pass)

    for value, want in ((None, False), ("auto", False), ("0", False), ("1", True)):
        if value is None:
            monkeypatch.delenv("FLASHTILE_GLUON_BWD_EXPAND_ADD", raising=False)
        else:
            monkeypatch.setenv("FLASHTILE_GLUON_BWD_EXPAND_ADD", value)
        assert adds(q, k, causal) is want, value
        assert not adds(q, k, causal, one_pass=False)     # (two passes: not the rows kernel)
        assert not adds(q, k, full)                       # (unmasked: per KV head)
        assert not adds(q, q, causal)                     # (MHA)
    acc = (torch.zeros(k.shape), torch.zeros(k.shape))
    lse = dsum = torch.zeros(8, 8, 1024)
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_WINDOW", "auto")   # (windows count the heads)
    bwd_hopper.dkdv(q, k, k, q, lse, dsum, torch.empty_like(k), torch.empty_like(k), causal,
                    dq_acc=torch.zeros(bwd_hopper.dq_acc_shape(q)), add_to=acc)
    ((_, kernel, grid, _, args, meta, _, _, label),) = launches
    assert kernel is bwdrows_hopper._dkdv_rows_kernel and meta["ADD_DKDV"]
    assert meta["KV_SHARE"] == 4 and grid == (8 * 8 * 1024 // 128,)
    # (the causal order's windows over the items' heads, q's, not k's: 32 pairs, not 8)
    assert meta["GROUP"] == bwd_hopper.causal_order(q, 8, 1024 // 128, grid[0]) == -32
    assert bwd_hopper.causal_order(q, 2, 1024 // 128, grid[0] // 4) == -8
    assert args[-4] is acc[0] and args[-3] is acc[1] and args[-2] == 2 * 128, args[-4:]
    assert label.endswith(" per query head added"), label
    with pytest.raises(ValueError, match="rows kernel only"):
        bwd_hopper.dkdv(q, k, k, q, lse, dsum, torch.empty_like(k), torch.empty_like(k),
                        causal, add_to=acc)                      # (two passes)


@gluon_cases_over([(2, 1024, 16, 2, 128), (1, 256, 4, 1, 128)])
def test_rows_per_query_head_added(gluon_calls, monkeypatch, shape, causal, dtype):
    """``FLASHTILE_GLUON_BWD_EXPAND=1`` with ``FLASHTILE_GLUON_BWD_EXPAND_ADD=1``: GQA 8:1 and
    MQA, causal and not, each query head's dK/dV added into float32 accumulators by atomics
    from the kernel's registers, then cast: all three gradients within budget, the launch
    labelled so; then a second call of the same signature, which replays the first's launch
    plan (the accumulators' zero fill, the kernel, the casts): within budget again."""
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_EXPAND", "1")
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_EXPAND_ADD", "1")
    grid, meta, label = _rows_run(gluon_calls, monkeypatch, shape, causal, dtype)
    assert meta["ADD_DKDV"] and label.endswith(" per query head added"), label
    b, s, hq, hkv, d = shape
    check(b, s, s, hq, hkv, d, d, dtype, causal=causal)


@gluon_cases_over([(2, 1024, 16, 2, 128), (3, 512, 12, 4, 128), (1, 256, 4, 1, 128)])
def test_rows_per_query_head(gluon_calls, monkeypatch, shape, causal, dtype):
    """``FLASHTILE_GLUON_BWD_EXPAND=1`` (causal GQA's default; forced here for the unmasked
    cases too): GQA 8:1 and 3:1 and MQA, causal and not, dK/dV computed per query head and
    summed per KV head: all three gradients within budget (the outputs NaN-poisoned), one
    launch of the rows kernel with ``KV_SHARE`` = hq / hkv over (batch, query head, key
    item)."""
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_EXPAND", "1")
    grid, meta, label = _rows_run(gluon_calls, monkeypatch, shape, causal, dtype)
    b, s, hq, hkv, d = shape
    assert meta["KV_SHARE"] == hq // hkv and label.endswith(" per query head"), label
    if causal:      # (one item per query head and 128 keys; claimed from 8 items per head)
        items = b * hq * s // 128
        assert meta["DYNAMIC"] is bwdrows_hopper.dynamic(True, s // 128), label
        assert grid == ((min(items, common.sm_count(torch.device("cuda"))),)
                        if meta["DYNAMIC"] else (items,)), (grid, label)


def _call(d: int = 128, sq: int = 1024, causal: bool = False):
    """q, k, v, dout ``(2, sq, 4, d)`` / k, v ``(2, 1024, 2, d)`` bf16 on the CPU, and the
    call's params."""
    q, dout = (torch.randn(2, sq, 4, d, dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(2, 1024, 2, d, dtype=torch.bfloat16) for _ in range(2))
    params, _ = _flash_params(q, k, v, 0.0, None, causal, (-1, -1), 0.0, None, False)
    return q, k, v, dout, params


def test_rows_switch_routes_the_one_pass_at_d128(monkeypatch):
    """``FLASHTILE_GLUON_BWD_ROWS``: unset, ``auto`` and ``1`` send
    :func:`bwd_hopper.dkdv`'s one pass at d=128 (causal and not) to the rows kernel: 64
    queries x 2 slots, one program per item (32 items: fewer than SMs), the dQ accumulator
    in 64 x 64 blocks; two passes and query lengths that are not multiples of 64 keep
    :mod:`.bwd_hopper`'s kernel, as does ``0``, and so does d=64 unless ``1`` asks for it
    (then with 64 x 32 dQ blocks); anything else is refused. The variable
    is one of the plan keys' options. Runs on the CPU: the launches are captured, not
    made."""
    assert "FLASHTILE_GLUON_BWD_ROWS" in common.GLUON_OPTIONS["bwd_hopper"]
    monkeypatch.delenv("FLASHTILE_GLUON_BWD_CONFIG", raising=False)
    monkeypatch.delenv("FLASHTILE_GLUON_BWD_PERSISTENT", raising=False)
    launches = gluon_launches(monkeypatch, run=False, full=True)

    def launched(d=128, sq=1024, causal=False, one_pass=True):
        q, k, v, dout, params = _call(d, sq, causal)
        lse = dsum = torch.zeros(2, 4, sq)
        dq_acc = torch.zeros(bwd_hopper.dq_acc_shape(q)) if one_pass else None
        bwd_hopper.dkdv(q, k, v, dout, lse, dsum, torch.empty_like(k), torch.empty_like(v),
                        params, dq_acc=dq_acc)
        (launch,) = launches
        launches.clear()
        return launch, dq_acc

    for value, causal in ((None, False), ("auto", True), ("1", False), ("1", True)):
        if value is None:
            monkeypatch.delenv("FLASHTILE_GLUON_BWD_ROWS", raising=False)
        else:
            monkeypatch.setenv("FLASHTILE_GLUON_BWD_ROWS", value)
        assert bwdrows_hopper.enabled()
        (_, kernel, grid, tiles, _, meta, _, role, label), dq_acc = launched(causal=causal)
        assert kernel is bwdrows_hopper._dkdv_rows_kernel and role == "dkdv"
        assert label == "gluon rows 128x64/2s +dQ" + ("" if causal else " rotated"), label
        assert meta["BLOCK_M"] == 64 and meta["BLOCK_N"] == 64 and meta["NUM_STAGES"] == 2
        assert meta["HEAD_D"] == 128 and meta["CAUSAL"] == causal and not meta["PERSISTENT"]
        assert grid == (2 * 2 * 1024 // 128,)        # (b * hkv * items per KV head)
        assert tiles[-1][0] is dq_acc and tiles[-1][1] == (64, 64)
        assert [tile for _, tile in tiles[:6]] == [(64, 128)] * 6
    for case in (dict(one_pass=False), dict(sq=1056)):
        (_, kernel, *_), _ = launched(**case)
        assert kernel is bwd_hopper._dkdv_hopper_kernel, case
    # d=64 (OPT_IN): here with FLASHTILE_GLUON_BWD_ROWS=1 only, dQ in 64 x 32 parts
    (_, kernel, _, tiles, _, meta, *_), dq_acc = launched(d=64)
    assert kernel is bwdrows_hopper._dkdv_rows_kernel and meta["HEAD_D"] == 64
    assert tiles[-1][0] is dq_acc and tiles[-1][1] == (64, 32)
    for value in (None, "auto"):
        if value is None:
            monkeypatch.delenv("FLASHTILE_GLUON_BWD_ROWS")
        else:
            monkeypatch.setenv("FLASHTILE_GLUON_BWD_ROWS", value)
        (_, kernel, *_), _ = launched(d=64)
        assert kernel is bwd_hopper._dkdv_hopper_kernel, value
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_ROWS", "0")
    (_, kernel, *_), _ = launched()
    assert kernel is bwd_hopper._dkdv_hopper_kernel
    assert not bwdrows_hopper.enabled()
    monkeypatch.setenv("FLASHTILE_GLUON_BWD_ROWS", "yes")
    with pytest.raises(ValueError, match="FLASHTILE_GLUON_BWD_ROWS must be 0, 1 or 'auto'"):
        launched()
    launched(one_pass=False)       # (two passes never read it)
