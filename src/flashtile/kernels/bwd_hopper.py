"""Hopper dK/dV kernel in Gluon: the backward's larger half, warp-specialised, with FA3's registers.

Computes dK, dV (like k, v) from q, k, v ``(b, s, h, d)``, ``dout``, LSE and ``D = rowsum(dO * O)``
(the preprocess kernel's rows) for d in {64, 96, 128} (d=256: :mod:`.bwd256_hopper`). Cover:
:func:`.fwd_hopper.covers` (sm_90, dense fp16/bf16, causal only with sq = sk, foldable layouts),
lengths that are multiples of the tiles and a foldable ``dout``. On by default
(``FLASHTILE_GLUON_BWD=0``: the tile-level kernel of :mod:`.bwd`, which spills at d=128 and
cannot give its math warps more registers). dQ: a second pass (:mod:`.bwd`'s dQ kernel;
:mod:`.dq_hopper` at d=96) or this pass where :func:`one_pass` measured ahead
(``FLASHTILE_BWD_DQ=atomic`` forces it, ``two-pass`` or ``deterministic=True`` avoids it); at
d=128 the one pass runs :mod:`.bwdrows_hopper` by default.

Notation:

- work item: ``2 * BLOCK_N`` keys of one (batch, KV head) (:func:`_item`); a program takes items
  ``program_id``, ``+ num_programs``, ... (``DYNAMIC``, :func:`claims_items`, opt-in:
  ``program_id``, then the items its loader claims from a count, one item ahead,
  :func:`_load_claimed`; the claim helpers are shared with :mod:`.bwdrows_hopper`); an item's
  (Q, dO) tiles cover every query head of its KV head in turn (GQA: dK, dV summed in
  registers, written once), causal items from their first key's query tile;
- ``BLOCK_N`` keys per consumer (64), ``BLOCK_M`` queries per tile, ``NUM_STAGES`` ring slots,
  ``CONSUMER_REGS`` (:data:`_CONFIGS`); ``HEAD_D``, ``HEAD_D2`` (:func:`.fwd_hopper.head_parts`);
  ``CAUSAL``; ``GROUP`` (:data:`SINGLE_UPTO`); ``KV_BUFS``: K/V buffers per consumer (2 in a
  persistent grid); ``ONE_PASS``: dQ added here; ``DQ_LATE``: a tile's dQ part leaves under the
  next tile's products; ``SKIP_MASKED`` (:func:`skips_masked`): causal, the second consumer
  skips the item's tiles wholly above its keys; ``SERIAL`` (:func:`serial`): the serial
  order below, with :data:`SERIAL_CONFIGS`; ``ROTATE`` (:func:`rotates`; d=128's rule): one
  pass, unmasked items start at their own query tile (:func:`item_query_tile`);
- the *loader* (one warp, 24 registers, :func:`_load_q_do`) streams (Q, dO) by TMA into the ring
  (``ready``; ``empty``: count 2); two *consumers* (a warpgroup each, up to 240 registers,
  ``HALF`` 0/1, :func:`_dkdv_consume`) keep their K and V in shared memory (``kv_bar``); one
  pass: ``ds_ready`` (both dS^T tiles stored), ``ds_free`` (both consumers' dQ products done);
- keys as rows: ``S^T = K Q^T``, ``dP^T = V dO^T``, ``P^T = exp2(S^T * qk_scale - LSE * log2e)``,
  ``dS^T = P^T (dP^T - D)``, ``dV += P^T dO``, ``dK += dS^T Q`` (P^T, dS^T register A operands).

Schedule (a consumer, per item):

1. Wait for K/V (one pass: the other consumer's K too), issue tile 0's S^T and dP^T, start the
   next item's K/V load into the other buffer once the previous item's dK, dV have left it
   (persistent grid; placed after the last tile's wait, this load made ptxas serialise every
   wgmma), and wait for tile 0 before dK/dV's zeros exist (else ptxas serialises every wgmma).
2. Per tile t: one wait for S^T, dP^T, dV, dK; free slot t-1; P^T, dS^T (one pass: dS^T to its
   shared tile); issue dV, (its dQ^T part,) dK; (one pass: wait for dQ^T, free the dS^T tiles,
   reduce it;) issue tile t+1's S^T and dP^T (``DQ_LATE``: the reduction after them).
3. dK * scale and dV through the K and V tiles by TMA (one pass: once the other consumer's last
   dQ products have read this K).

``SERIAL`` (d=64's one pass by default, at 128 queries per tile): in step 2 the consumer waits
for dV and dK before it issues tile t+1's S^T and dP^T, and the one pass's dQ products follow
dV and dK; a tile's LSE and D rows stay one per thread until used; causal MHA items run their
masked tiles in a loop of their own. So S^T and dP^T of 128 queries (128 registers) fit beside
dK and dV (64), and the tensor cores are kept busy by the other consumer.

- One wait per tile with the next S^T, dP^T issued right after dV, dK: ptxas serialises every
  wgmma of a stage in which ordinary instructions touch an accumulator still in flight.
- ``BLOCK_M`` = 32 at d=128: at 64, dK, dV, S^T and dP^T fill 192 of the 240 registers and ptxas
  spills and serialises (C7512); at d=96 dK + dV are 96 registers, so 64 queries fit.
- One pass: a consumer's part of ``dQ^T = K^T dS^T`` over both consumers' keys (d=128: half the
  head dim; d=64: half the queries) leaves through shared memory as a TMA reduce-add (summed in
  L2) into an fp32 accumulator (:func:`dq_acc_shape`): 5 tile products against two passes' 7.
  Not at d=96 (:func:`has_one_pass`: the parts would be 64 and 32 rows; a wgmma's rows are 64).
- d=96: 64 + 32 columns as in the forward; S^T and dP^T chain two wgmma each, the same P^T, dS^T
  feed both parts' dK, dV, which leave per part through K's and V's tiles. ``HEAD_D2`` = 0
  compiles d=64/128 to the same PTX as before.

Measured (H200, forward+backward; "time": kernel time):

- against :mod:`.bwd`'s kernel (372 B of spills at d=128, session 8): 0.73x -> 0.80x cuDNN
  (session 10); d=96 in two parts: 0.68-0.70x -> 0.82-0.88x cuDNN (sessions 19-20);
- persistent grid (:func:`persistent_ahead`, ``FLASHTILE_GLUON_BWD_PERSISTENT=1``/``0`` forces):
  d=64 +9% to +29% at 512, -1% to +7% beyond (session 12); d=128 mostly behind, by up to 12%
  (sessions 12, 15); d=96 time -3% to +3% (session 21); d=64 causal from 2k behind, 3.6% /
  2.2% at 2k/4k (session 35: one program per item there);
- one K/V buffer per consumer where a program has one item: +0.4% to +4% at d=128 (session 15);
- one pass (:func:`one_pass`): d=64 +4% to +9%, d=128 +2% to +10% but not 16k unmasked or causal
  1k (session 14); d=128 causal, the early pass: time -2% to -3% at 512/1k (session 16);
- d=96 at 64 queries per tile: time 0.89-0.93x of 32; with :mod:`.dq_hopper` 0.77-0.88x,
  0.91-1.02x cuDNN (session 21);
- ``SKIP_MASKED`` (session 32, offline, sm_90a): none serialised; no spills at d=64 (two passes
  and one) and d=128 two passes; d=96's item-level spills 76 -> 92 B, d=128's transposed one
  pass (not its default) 16 B; off, every variant's SASS is identical to before. On the H200
  (session 33) d=64 0.934x/0.956x at 512/1k, d=96 0.972x/0.984x, neutral to +1.7% from 2k:
  on up to 1k keys (:func:`skips_masked`);
- offline: none serialised; spills 0-8 B at d=128 (88-116 B with two K/V buffers), elsewhere
  item-level scalars only (up to 76 B, d=96 causal);
- Nsight Compute, d=128 4k: tensor pipe 49%, L1/shared 71% (cuDNN 64%, 69%); suspects: the
  transposed N=32 products reading both operands from shared memory (session 22; hence
  :mod:`.bwdrows_hopper`);
- the serial order at 128 queries per tile (d=64, session 39, H100, fwd+bwd kernel sums,
  two alternating rounds): one pass 0.958-0.977x unmasked (1k-16k), 0.912-0.913x causal
  (4k/16k); on by default there (:func:`serial`);
- rejected: one tile at a time (FA3's order, S^T, dP^T accumulated onto -LSE and -D), time +14%
  to +33% at 64 x 32, level at 64 x 64 (session 22, git 31e9a46); per-thread
  ``red.global.add.f32`` dQ, 30-43% slower at d=128 (session 13).

Details, commands and raw data: docs/perf.md.
"""
from __future__ import annotations

import torch
from triton._C.libtriton import ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_init, warpgroup_mma_wait)
from triton.runtime.jit import constexpr_function

from . import fwd_hopper, plans
from .common import causal_window, env_forced, gluon_switch_on, sm_count

# (head dim) -> (keys per consumer, queries per tile, ring slots, consumer registers).
# d = 128 takes 32 queries per tile: at 64, dK, dV, S^T and dP^T alone fill 192 of the 240
# registers and ptxas spills 144-400 B and serialises the wgmmas (C7512); at 32, none.
# d = 96 (split 64 + 32) takes 64 queries: dK + dV are 96 registers there, not 128, so
# S^T + dP^T (64) fit beside them; none serialised offline (sm_90a, bf16, 4k: 8 waits for
# 112 HGMMA), only item-level scalars spill outside the tile loop (28 B unmasked, 76 B
# causal). On the H200 (session 21, two alternating rounds, bf16, 1k/4k/16k) its
# forward+backward kernels took 0.89-0.93x the time of 32 queries per tile (0 B of spills,
# 8 waits for 80 HGMMA): half the tiles to load, wait for and mask, and S^T/dP^T at N=64.
_CONFIGS = {64: (64, 64, 4, 240), 96: (64, 64, 4, 240), 128: (64, 32, 4, 240)}

# Work items per KV head up to which the causal order of key tiles runs in chunks of 1
# (:func:`.fwd_hopper.causal_group`), by head dim: d=64 up to 8 (chunks of 8 lost 6% at 1k,
# session 13); never at d=128 (chunks of 1 lost 5% at 1k, 512 within its noise, session 15);
# d=96 takes d=128's rule, unmeasured.
SINGLE_UPTO = {64: 8, 96: 0, 128: 0}


def causal_order(q: torch.Tensor, item_heads: int, n_ntiles: int, n_programs: int) -> int:
    """The causal ``GROUP`` of the dK/dV kernels (this one and :mod:`.bwdrows_hopper`) for
    ``n_ntiles`` key items per (batch, item head) on ``n_programs``; the items' heads are k's,
    or q's where dK/dV are computed per query head (:func:`dkdv_heads`): the chunks of
    :data:`SINGLE_UPTO` (:func:`.fwd_hopper.causal_group`, ``FLASHTILE_GLUON_BWD_GROUP``), in
    windows where ``FLASHTILE_GLUON_BWD_WINDOW`` asks (:func:`.common.causal_window`: a
    pair's items all read its query heads' Q and dO)."""
    b, sq, hq, d = q.shape
    group = fwd_hopper.causal_group(n_ntiles, SINGLE_UPTO[d], "FLASHTILE_GLUON_BWD_GROUP")
    return causal_window(group, n_ntiles, b * item_heads,
                         (hq // item_heads) * 2 * sq * d * q.element_size(), n_programs,
                         "FLASHTILE_GLUON_BWD_WINDOW")


@builtin
def _tma_reduce_add(tensor_desc, coord, src, _semantic=None):
    """Add the shared tile ``src`` into ``tensor_desc`` at ``coord`` by TMA
    (``cp.reduce.async.bulk.tensor ... .add``: summed in the L2, no registers and no per-thread
    atomics), completed like a TMA store (:func:`tma.store_wait`). Triton 3.6 has the builder
    call but no Gluon wrapper for it."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle,
                                              coord, src.handle)


@constexpr_function
def _ds_layout():
    """dS^T tiles' shared layout: 64-byte swizzle, so that a 32-query column slice (d=64: a
    consumer's half of the queries) starts on a swizzle atom and reads as a wgmma operand."""
    return gl.NVMMASharedLayout(swizzle_byte_width=64, element_bitwidth=16, rank=2)


@gluon.jit
def _item(w, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k, stride_lse_b,
          stride_lse_h, stride_d_b, stride_d_h, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
          HEAD_D: gl.constexpr, CAUSAL: gl.constexpr, GROUP: gl.constexpr,
          ROTATE: gl.constexpr = False):
    """Work item w: 2 * BLOCK_N keys of one (batch, KV head), causal orders taking the first
    keys (seen by the most queries) first, in chunks of GROUP key tiles per head
    (:func:`.fwd_hopper._work_tile`). Returns (first key n0, K/V row and column in the
    folded views, first query tile i0, query tiles per head n_i, tiles in all n_t, Q/dO row
    and column, LSE and D offsets; the strides enter only the offsets). ``ROTATE``
    (unmasked, :func:`rotates`): the item starts at its own query tile, ``tile % n_i``, and
    wraps around (:func:`item_query_tile`; told by a negative i0), so that the items of a head
    that run at once add their dQ parts into different tiles of the accumulator."""
    tile, bh = fwd_hopper._work_tile(w, n_work, n_ntiles, CAUSAL, False, GROUP)
    off_b = bh // nheads_kv
    off_hkv = bh % nheads_kv
    n0 = tile * (2 * BLOCK_N)
    n_i = seqlen_q // BLOCK_M
    if CAUSAL:   # queries before the item's first key see none of its keys
        i0 = n0 // BLOCK_M
        n_i -= i0
    elif ROTATE:
        i0 = tile % n_i - n_i
    else:
        i0 = 0
    return (n0, off_b * seqlen_k + n0, off_hkv * HEAD_D, i0, n_i, group * n_i,
            off_b * seqlen_q, off_hkv * group * HEAD_D,
            off_b * stride_lse_b + off_hkv * group * stride_lse_h,
            off_b * stride_d_b + off_hkv * group * stride_d_h)


@gluon.jit
def item_query_tile(t, i0, n_i):
    """The query tile of an item's tile t (of query head ``t // n_i`` in the item's group):
    ``i0 + t % n_i``; a negative ``i0`` (:func:`_item`'s ``ROTATE``) starts the item at tile
    ``i0 + n_i`` and wraps around at ``n_i``."""
    i = i0 + t % n_i
    return i + n_i * (i < 0).to(gl.int32)


@gluon.jit
def _load_q_do(q_desc, do_desc, q_smem, do_smem, ready, empty, n_work, n_ntiles, nheads_kv,
               group, seqlen_q, seqlen_k, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
               HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
               GROUP: gl.constexpr, q_desc2, do_desc2, q_smem2, do_smem2,
               HEAD_D2: gl.constexpr, ROTATE: gl.constexpr = False):
    """Loader partition: for each of this program's work items (``program_id``,
    ``+ num_programs``, ...), its (Q, dO) tiles t = 0..n_t-1 into one ring (its loads counted
    across items: slot and phase), where tile t is :func:`item_query_tile` of the group's query head
    ``t // n_i``; a slot is refilled only after both consumers released it. A split head dim
    (``HEAD_D2`` > 0) loads each tile's second part into ``q_smem2``/``do_smem2``."""
    it = 0
    for w in range(gl.program_id(0), n_work, gl.num_programs(0)):
        _, _, _, i0, n_i, n_t, q_row0, q_col0, _, _ = _item(
            w, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k, 0, 0, 0, 0, BLOCK_N,
            BLOCK_M, HEAD_D + HEAD_D2, CAUSAL, GROUP, ROTATE)
        for u in range(n_t):
            load_q_do_tile(q_desc, do_desc, q_smem, do_smem, ready, empty, it + u, u, i0,
                           n_i, q_row0, q_col0, BLOCK_M, HEAD_D + HEAD_D2, NUM_STAGES,
                           q_desc2, do_desc2, q_smem2, do_smem2)
        it += n_t


@constexpr_function
def _claim_layout():
    """The published item numbers' shared layout (``[2, 1, 1]`` int32: a slot each, no
    swizzle)."""
    return gl.SwizzledSharedLayout(1, 1, 1, [1, 0])


@gluon.jit
def _claim_slots():
    """The claimed items' shared slots and barriers (:func:`_claim`): two int32 slots,
    ``claimed`` (the loader's arrival) and ``claim_free`` (both consumers')."""
    claims = gl.allocate_shared_memory(gl.int32, [2, 1, 1], _claim_layout())
    return claims, fwd_hopper.barriers(2, 1), fwd_hopper.barriers(2, 2)


@gluon.jit
def _claim(COUNT, claims, claimed, claim_free, done):
    """The loader's claim of the item that follows its program's ``done``-th (``DYNAMIC``):
    ``num_programs + `` the count at ``COUNT`` (int32, zeroed by the preprocess) before this
    claim's increment, so that items past the grid's first go, in order, to whichever program
    asks first. Published in ``claims`` slot ``done % 2`` once both consumers have read the
    one before in that slot (``claim_free``), announced on ``claimed``. Returns the item."""
    w = gl.num_programs(0) + gl.atomic_add(COUNT, 1, sem="relaxed")
    slot = done % 2
    mbarrier.wait(claim_free.index(slot), ((done // 2) & 1) ^ 1)
    layout: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [1, 1], [1, 0])  # (one warp)
    claims.index(slot).store(gl.full([1, 1], w, gl.int32, layout))
    gl.thread_barrier()
    mbarrier.arrive(claimed.index(slot), count=1)
    return w


@gluon.jit
def _claimed(claims, claimed, claim_free, done):
    """A consumer's read of the item that follows its program's ``done``-th, as :func:`_claim`
    published it (a warpgroup's four warps read it, then release the slot)."""
    slot = done % 2
    mbarrier.wait(claimed.index(slot), (done // 2) & 1)
    layout: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [4, 1], [1, 0])
    w = gl.max(gl.max(claims.index(slot).load(layout), axis=1), axis=0)
    gl.thread_barrier()             # (every warp has read it before the slot goes back)
    mbarrier.arrive(claim_free.index(slot), count=1)
    return w


@gluon.jit
def _load_items(q_desc, do_desc, q_smem, do_smem, ready, empty, COUNT, claims, claimed,
                claim_free, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k,
                BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_D: gl.constexpr,
                NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, GROUP: gl.constexpr,
                q_desc2, do_desc2, q_smem2, do_smem2, HEAD_D2: gl.constexpr,
                ROTATE: gl.constexpr, DYNAMIC: gl.constexpr, CLAIM_FIRST: gl.constexpr):
    """Loader partition: :func:`_load_claimed` (``DYNAMIC``), else :func:`_load_q_do` over the
    program's items in a fixed turn."""
    if DYNAMIC:
        _load_claimed(q_desc, do_desc, q_smem, do_smem, ready, empty, COUNT, claims, claimed,
                      claim_free, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k,
                      BLOCK_N, BLOCK_M, HEAD_D, NUM_STAGES, CAUSAL, GROUP, q_desc2, do_desc2,
                      q_smem2, do_smem2, HEAD_D2, ROTATE, CLAIM_FIRST, DYNAMIC)
    else:
        _load_q_do(q_desc, do_desc, q_smem, do_smem, ready, empty, n_work, n_ntiles, nheads_kv,
                   group, seqlen_q, seqlen_k, BLOCK_N, BLOCK_M, HEAD_D, NUM_STAGES, CAUSAL,
                   GROUP, q_desc2, do_desc2, q_smem2, do_smem2, HEAD_D2, ROTATE)


@gluon.jit
def _load_claimed(q_desc, do_desc, q_smem, do_smem, ready, empty, COUNT, claims, claimed,
                  claim_free, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k,
                  BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_D: gl.constexpr,
                  NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, GROUP: gl.constexpr,
                  q_desc2, do_desc2, q_smem2, do_smem2, HEAD_D2: gl.constexpr,
                  ROTATE: gl.constexpr, CLAIM_FIRST: gl.constexpr, DYNAMIC: gl.constexpr):
    """:func:`_load_q_do`'s ring over the items that this program claims (:func:`_claim`):
    the next one claimed once this one's loads are issued (:mod:`.bwdrows_hopper`, whose
    consumers want it at their item's end), or (``CLAIM_FIRST``) before they are (this
    kernel's consumers load the next item's K and V from their item's first tile on).

    ``DYNAMIC`` = 2 (:func:`claimed_grid`): each claim is made once the item's first (Q, dO)
    load is issued, rather than between two items' loads. The loader waits for the claim's
    atomic there (Triton broadcasts a scalar atomic's result through shared memory at once).
    Between two items that wait holds back the next item's first load, which the consumers
    are about to need; after it, the ring's slots are the loader's only wait."""
    MID: gl.constexpr = DYNAMIC == 2
    it = 0
    done = 0
    w = gl.program_id(0)
    while w < n_work:
        if CLAIM_FIRST and not MID:
            w_next = _claim(COUNT, claims, claimed, claim_free, done)
        _, _, _, i0, n_i, n_t, q_row0, q_col0, _, _ = _item(
            w, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k, 0, 0, 0, 0, BLOCK_N,
            BLOCK_M, HEAD_D + HEAD_D2, CAUSAL, GROUP, ROTATE)
        if MID:         # (tile 0, then the claim, then the rest; every item has a tile 0:
                        # causal needs sq == sk, and lengths are multiples of the tiles)
            load_q_do_tile(q_desc, do_desc, q_smem, do_smem, ready, empty, it, 0, i0, n_i,
                           q_row0, q_col0, BLOCK_M, HEAD_D + HEAD_D2, NUM_STAGES, q_desc2,
                           do_desc2, q_smem2, do_smem2)
            w_next = _claim(COUNT, claims, claimed, claim_free, done)
        for u in range(1 if MID else 0, n_t):
            load_q_do_tile(q_desc, do_desc, q_smem, do_smem, ready, empty, it + u, u, i0, n_i,
                           q_row0, q_col0, BLOCK_M, HEAD_D + HEAD_D2, NUM_STAGES, q_desc2,
                           do_desc2, q_smem2, do_smem2)
        it += n_t
        if not CLAIM_FIRST and not MID:
            w_next = _claim(COUNT, claims, claimed, claim_free, done)
        w = w_next
        done += 1


@gluon.jit
def load_q_do_tile(q_desc, do_desc, q_smem, do_smem, ready, empty, r, t, i0, n_i, q_row0,
                   q_col0, BLOCK_M: gl.constexpr, HEAD_D: gl.constexpr,
                   NUM_STAGES: gl.constexpr, q_desc2=None, do_desc2=None, q_smem2=None,
                   do_smem2=None):
    """The ring's load r: a work item's (Q, dO) tile t (:func:`item_query_tile` of the group's
    query head ``t // n_i``, from row ``q_row0`` and column ``q_col0`` of the folded
    views; ``HEAD_D``: the whole head dim) into slot ``r % NUM_STAGES``, once both consumers
    released it (also the d=256 kernel's loader, :mod:`.bwd256_hopper`). Where the head dim
    is split (``q_desc2`` not None: d=96) also the tile's second part, the columns after
    ``q_desc``'s, into the same slot of ``q_smem2``/``do_smem2``, on the same barrier."""
    slot = r % NUM_STAGES
    mbarrier.wait(empty.index(slot), ((r // NUM_STAGES) & 1) ^ 1)
    row = q_row0 + item_query_tile(t, i0, n_i) * BLOCK_M
    col = q_col0 + (t // n_i) * HEAD_D
    bar = ready.index(slot)
    if q_desc2 is None:
        mbarrier.expect(bar, q_desc.block_type.nbytes + do_desc.block_type.nbytes)
    else:
        mbarrier.expect(bar, q_desc.block_type.nbytes + do_desc.block_type.nbytes
                        + q_desc2.block_type.nbytes + do_desc2.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [row, col], bar, q_smem.index(slot))
    tma.async_copy_global_to_shared(do_desc, [row, col], bar, do_smem.index(slot))
    if q_desc2 is not None:
        col2 = col + q_desc.block_type.shape[1]
        tma.async_copy_global_to_shared(q_desc2, [row, col2], bar, q_smem2.index(slot))
        tma.async_copy_global_to_shared(do_desc2, [row, col2], bar, do_smem2.index(slot))


@gluon.jit
def _query_pos(t, i0, n_i, BLOCK_M: gl.constexpr, col_layout: gl.constexpr):
    """Sequence positions of tile t's queries (tile t: :func:`item_query_tile`)."""
    return item_query_tile(t, i0, n_i) * BLOCK_M + gl.arange(0, BLOCK_M, layout=col_layout)


@constexpr_function
def _masked_tiles(skip_masked, half, keys, queries):
    """The query tiles at the start of a causal item that lie wholly above consumer
    ``half``'s keys and that it skips (:func:`skips_masked`): the second consumer's keys start
    ``keys`` rows after the item's first query, so ``keys // queries`` tiles (d=64: 1 of
    each item's (Q, dO) tiles, d=96: 1, d=128: 2); none for the first consumer."""
    return half * keys // queries if skip_masked else 0


@gluon.jit
def _pass_slots(ready, empty, start, stop, NUM_STAGES: gl.constexpr):
    """Release the ring's loads ``[start, stop)`` unread (tiles this consumer skips). Each
    wait for its load comes first: an arrival before the loader has refilled the slot would
    count towards the slot's previous load and free it before the other consumer read it. In
    a one pass, release each load just before its tile's dS hand-over, never all first: the
    other consumer awaits that hand-over before it frees a slot, so more skipped loads than
    ring slots would deadlock (session 33: the rows kernel with GQA hung on the H200)."""
    for r in range(start, stop):
        mbarrier.wait(ready.index(r % NUM_STAGES), (r // NUM_STAGES) & 1)
        mbarrier.arrive(empty.index(r % NUM_STAGES), count=1)


@gluon.jit
def _skipped_dq(k_smem, ds_smem, dq_smem, dq_desc, ds_ready, ds_free, ds_zero, dq_zero, r, c,
                t, i0, n_i, q_row0, q_col0, sm_scale, HALF: gl.constexpr,
                BLOCK_M: gl.constexpr, HEAD_D: gl.constexpr, KV_BUFS: gl.constexpr):
    """One pass, a tile this consumer skips (ring load r, the item's tile t): its dS^T is zero,
    but its part of the tile's dQ (from the other consumer's dS^T) is still owed, and the
    dS^T hand-over keeps its turn: zeros published, the dQ products, their reduction."""
    _ds_publish(ds_zero, ds_smem, ds_ready, ds_free, r, HALF)
    dqt = _dq_issue(k_smem, ds_smem, ds_ready, dq_zero, r, c, HALF, HEAD_D, KV_BUFS)
    dqt = warpgroup_mma_wait(0, deps=(dqt,))
    _ds_release(ds_free)
    _dq_reduce(dqt, dq_smem.index(HALF), dq_desc, t, i0, n_i, q_row0, q_col0, sm_scale, HALF,
               BLOCK_M, HEAD_D)


@gluon.jit
def _row_stats(LSE, DSUM, lse_base, d_base, stride_lse_h, stride_d_h, t, i0, n_i,
               BLOCK_M: gl.constexpr, col_layout: gl.constexpr):
    """Tile t's LSE rows (log2 domain) and D rows (of the group's query head ``t // n_i``)."""
    gi = t // n_i
    q_pos = _query_pos(t, i0, n_i, BLOCK_M, col_layout)
    lse2 = gl.load(LSE + lse_base + gi * stride_lse_h + q_pos) * 1.4426950408889634
    d_row = gl.load(DSUM + d_base + gi * stride_d_h + q_pos)
    return lse2, d_row


@gluon.jit
def _grad_operands(st, dpt, keys, t, i0, n_i, lse2, d_row, qk_scale, BLOCK_M: gl.constexpr,
                   CAUSAL: gl.constexpr, dtype: gl.constexpr, a_layout: gl.constexpr):
    """P^T and dS^T of tile t, as register A operands of dV += P^T dO and dK += dS^T Q, and
    dS^T in the scores' layout (one pass: stored for the dQ products)."""
    col_layout: gl.constexpr = gl.SliceLayout(0, st.type.layout)
    # (SERIAL: the rows arrive one per thread and spread over the columns here, just before
    # use, so that 2 * BLOCK_M / 4 registers do not stay live across the products)
    lse2 = gl.convert_layout(lse2, col_layout)
    pt = gl.exp2(st * qk_scale - lse2[None, :])
    if CAUSAL:                                   # key j is seen by query i iff j <= i
        q_pos = _query_pos(t, i0, n_i, BLOCK_M, col_layout)
        pt = gl.where(keys[:, None] <= q_pos[None, :], pt, 0.0)
    dst = (pt * (dpt - gl.convert_layout(d_row, col_layout)[None, :])).to(dtype)
    return gl.convert_layout(pt.to(dtype), a_layout), gl.convert_layout(dst, a_layout), dst


@gluon.jit
def _load_kv(k_desc, v_desc, k_smem, v_smem, kv_bar, buf, item_row, kv_col,
             ROW_OFF: gl.constexpr, k_desc2, v_desc2, k_smem2, v_smem2):
    """Start loading a consumer's K and V tiles of one work item (rows from ``item_row +
    ROW_OFF``) into buffer ``buf`` of ``k_smem``/``v_smem`` (arriving on
    ``kv_bar.index(buf)``); where the head dim is split (``k_desc2`` not None) also their
    second parts, the columns after ``k_desc``'s, into the same buffer of
    ``k_smem2``/``v_smem2``, on the same barrier."""
    k_buf = k_smem.index(buf)
    v_buf = v_smem.index(buf)
    bar = kv_bar.index(buf)
    kv_row0 = item_row + ROW_OFF
    if k_desc2 is None:
        mbarrier.expect(bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    else:
        mbarrier.expect(bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes
                        + k_desc2.block_type.nbytes + v_desc2.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [kv_row0, kv_col], bar, k_buf)
    tma.async_copy_global_to_shared(v_desc, [kv_row0, kv_col], bar, v_buf)
    if k_desc2 is not None:
        col2 = kv_col + k_desc.block_type.shape[1]
        tma.async_copy_global_to_shared(k_desc2, [kv_row0, col2], bar, k_smem2.index(buf))
        tma.async_copy_global_to_shared(v_desc2, [kv_row0, col2], bar, v_smem2.index(buf))


@gluon.jit
def _kv_column(col, KV_SHARE: gl.constexpr, HEAD_D: gl.constexpr):
    """The K/V column an item of head column ``col`` loads from: its own, or with ``KV_SHARE``
    query heads per KV head (:func:`dkdv_heads`) its KV head's, ``col // HEAD_D // KV_SHARE``
    (``HEAD_D``: the whole head dim, both parts where it is split)."""
    if KV_SHARE > 1:
        col = col // (HEAD_D * KV_SHARE) * HEAD_D
    return col


@gluon.jit
def _issue_st_dpt(k_cur, v_cur, q_smem, do_smem, slot, s_zero, k_cur2, v_cur2, q_smem2,
                  do_smem2):
    """Issue S^T = K Q^T and dP^T = V dO^T of the (Q, dO) tile in ring slot ``slot``; where
    the head dim is split (``k_cur2`` not None: d=96) each sums both parts' products, two
    wgmma chained through the accumulator (S^T's two, then dP^T's)."""
    st = warpgroup_mma(k_cur, q_smem.index(slot).permute((1, 0)), s_zero, use_acc=False,
                       is_async=True)
    if k_cur2 is not None:
        st = warpgroup_mma(k_cur2, q_smem2.index(slot).permute((1, 0)), st, is_async=True)
    dpt = warpgroup_mma(v_cur, do_smem.index(slot).permute((1, 0)), s_zero, use_acc=False,
                        is_async=True)
    if k_cur2 is not None:
        dpt = warpgroup_mma(v_cur2, do_smem2.index(slot).permute((1, 0)), dpt, is_async=True)
    return st, dpt


@gluon.jit
def _ds_publish(dst, ds_smem, ds_ready, ds_free, g, HALF: gl.constexpr):
    """One pass: this consumer's dS^T of tile g (``g``: tiles read so far) into its shared
    tile, once both consumers' dQ products of tile g-1 have read the tiles; then announced."""
    mbarrier.wait(ds_free, (g & 1) ^ 1)
    ds_smem.index(HALF).store(dst)
    fence_async_shared()
    gl.thread_barrier()         # (every thread's part stored before the one arrival)
    mbarrier.arrive(ds_ready, count=1)


@gluon.jit
def _dq_issue(k_smem, ds_smem, ds_ready, dq_zero, g, c, HALF: gl.constexpr,
              HEAD_D: gl.constexpr, KV_BUFS: gl.constexpr):
    """One pass: this consumer's part of tile g's dQ^T = K^T dS^T, summed over both
    consumers' keys (their dS^T tiles and K buffers ``KV_BUFS * half + c % KV_BUFS``),
    issued once both dS^T tiles are in shared memory. Parts: at d=128 the head dim's half
    ``HALF`` (64 rows x all queries), at d=64 all 64 rows x the queries' half ``HALF``:
    ``dq_zero``'s shape."""
    Q_PART: gl.constexpr = dq_zero.shape[1]
    mbarrier.wait(ds_ready, g & 1)
    k0 = k_smem.index(c % KV_BUFS)
    k1 = k_smem.index(KV_BUFS + c % KV_BUFS)
    if HEAD_D == 64:
        a0 = k0.permute((1, 0))
        a1 = k1.permute((1, 0))
        b0 = ds_smem.index(0).slice(HALF * Q_PART, Q_PART, dim=1)
        b1 = ds_smem.index(1).slice(HALF * Q_PART, Q_PART, dim=1)
    else:
        a0 = k0.slice(HALF * 64, 64, dim=1).permute((1, 0))
        a1 = k1.slice(HALF * 64, 64, dim=1).permute((1, 0))
        b0 = ds_smem.index(0)
        b1 = ds_smem.index(1)
    dqt = warpgroup_mma(a0, b0, dq_zero, use_acc=False, is_async=True)
    return warpgroup_mma(a1, b1, dqt, is_async=True)


@gluon.jit
def _ds_release(ds_free):
    """One pass: this consumer's dQ products of the tile are done (waited for): the dS^T
    tiles may be overwritten as far as it is concerned."""
    gl.thread_barrier()         # (every warp's products done before the one arrival)
    mbarrier.arrive(ds_free, count=1)


@gluon.jit
def _dq_reduce(dqt, dq_smem, dq_desc, t, i0, n_i, q_row0, q_col0, sm_scale,
               HALF: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_D: gl.constexpr):
    """One pass: tile t's dQ^T part (complete) leaves as ``sm_scale * dQ`` through this
    consumer's shared tile by a TMA reduction into the fp32 accumulator (``dq_desc``:
    ``(b * sq, hq * d)`` in ``(Q_PART, 64)`` blocks), once the previous tile's reduction has
    read the tile."""
    Q_PART: gl.constexpr = dqt.shape[1]
    row = q_row0 + item_query_tile(t, i0, n_i) * BLOCK_M
    col = q_col0 + (t // n_i) * HEAD_D
    if HEAD_D == 64:
        row += HALF * Q_PART
    else:
        col += HALF * 64
    tma.store_wait(0)
    gl.thread_barrier()         # (the wait is the issuing thread's: all others wait for it)
    dq_smem.permute((1, 0)).store(dqt * sm_scale)
    fence_async_shared()
    gl.thread_barrier()
    _tma_reduce_add(dq_desc, [row, col], dq_smem)


@gluon.jit
def _dkdv_consume(k_desc, v_desc, dk_desc, dv_desc, dq_desc, k_smem, v_smem, kv_bar, q_smem,
                  do_smem, ds_smem, dq_smem, ds_ready, ds_free, ready, empty, LSE, DSUM,
                  stride_lse_b, stride_lse_h, stride_d_b, stride_d_h, n_work, n_ntiles,
                  nheads_kv, group, seqlen_q, seqlen_k, qk_scale, sm_scale,
                  HALF: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
                  HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                  GROUP: gl.constexpr, ONE_PASS: gl.constexpr, DQ_LATE: gl.constexpr,
                  KV_BUFS: gl.constexpr, k_desc2, v_desc2, dk_desc2, dv_desc2, k_smem2,
                  v_smem2, q_smem2, do_smem2, HEAD_D2: gl.constexpr,
                  SKIP_MASKED: gl.constexpr, SERIAL: gl.constexpr, ROTATE: gl.constexpr,
                  KV_SHARE: gl.constexpr, claims, claimed, claim_free, DYNAMIC: gl.constexpr):
    """Consumer partition (one warpgroup): for each of this program's work items, dK and dV of
    its keys' half ``HALF`` (BLOCK_N keys) over the loader's (Q, dO) tiles, written by TMA.
    With ``KV_BUFS=2`` (a persistent grid), K and V alternate between two buffers
    (``k_smem``/``v_smem``/``kv_bar`` index ``2 * HALF + item % 2``): the next item's load in
    one while this item's dK/dV leave through the other; with one item per program one buffer
    each (``KV_BUFS=1``, 64 KB less shared memory at d=128). ``ONE_PASS``: per tile also its
    part of dQ (:func:`_dq_issue`) from both consumers' dS^T tiles, added into the fp32
    accumulator by TMA (:func:`_dq_reduce`); the other consumer's K buffer is read too, so dK
    is staged in this one's only after both consumers' last dQ products of the item.
    ``DQ_LATE``: a tile's dQ part leaves after the next tile's S^T and dP^T are issued (its
    shared-memory store under their products).

    ``HEAD_D2`` > 0 (d=96: 64 + 32, :func:`.fwd_hopper.head_parts`): the head dim's columns
    from HEAD_D on are a second part with tiles of their own (``k_smem2``, ``v_smem2``,
    ``q_smem2``, ``do_smem2``) and descriptors (``*_desc2``); S^T and dP^T each sum both
    parts' products (two wgmma chained through the accumulator), and dK and dV are two
    accumulators each, ``dk``/``dv`` (HEAD_D columns) and ``dk2``/``dv2`` (HEAD_D2), fed the
    same P^T and dS^T operands. Two passes only (no ``ONE_PASS``).

    ``SKIP_MASKED`` (causal, one query head per KV head: :func:`skips_masked`): the second
    consumer skips the item's first ``SKIP`` tiles, wholly above its keys
    (:func:`_masked_tiles`), releasing their slots unread (one pass: it still computes its
    part of their dQ, :func:`_skipped_dq`); its tile loop starts at ``SKIP``. (A loop counted
    from 0 over the consumer's own tiles, or one over the ring's loads that maps each to its
    tile, as GQA would need, made ptxas serialise every wgmma, C7512; this one does not.)
    ``ROTATE``: unmasked items start at their own query tile (:func:`_item`). ``KV_SHARE`` > 1
    (:func:`dkdv_heads`): the items' heads are query heads, ``KV_SHARE`` of them reading one KV
    head's K and V (:func:`_kv_column`), dK and dV leaving at the item's own head.
    ``DYNAMIC`` (:func:`claims_items`): a program's items after its first are those its loader
    claims (:func:`_claim`, one item ahead), read through ``claims`` at each item's start."""
    s_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_M, HEAD_D)[0]
    g_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_M, HEAD_D)[1]
    a_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_M, HEAD_D)[2]
    if SERIAL:      # (a tile's LSE and D rows: one per thread until used)
        col_layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    else:
        col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    dtype: gl.constexpr = k_desc.dtype
    SKIP: gl.constexpr = _masked_tiles(SKIP_MASKED, HALF, BLOCK_N, BLOCK_M)
    first, step = gl.program_id(0), gl.num_programs(0)
    if HEAD_D2 > 0:     # (the second part's accumulators and register A operands)
        gl.static_assert(not ONE_PASS, "a split head dim's dK/dV kernel has no one pass")
        g2_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_M, HEAD_D2)[1]
        a2_layout: gl.constexpr = fwd_hopper.mma_layouts(4, BLOCK_M, HEAD_D2)[2]
    if ONE_PASS:    # (a dQ^T part: 64 rows of the head dim x Q_PART queries)
        Q_PART: gl.constexpr = dq_smem.shape[1]
        dq_layout: gl.constexpr = fwd_hopper.mma_layouts(4, Q_PART, HEAD_D)[0]
        dq_zero = gl.zeros([64, Q_PART], gl.float32, dq_layout)

    _, kv_row0, kv_col, _, _, _, _, _, _, _ = _item(
        first, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k, 0, 0, 0, 0, BLOCK_N,
        BLOCK_M, HEAD_D + HEAD_D2, CAUSAL, GROUP)
    _load_kv(k_desc, v_desc, k_smem, v_smem, kv_bar, KV_BUFS * HALF, kv_row0,
             _kv_column(kv_col, KV_SHARE, HEAD_D + HEAD_D2), HALF * BLOCK_N, k_desc2, v_desc2,
             k_smem2, v_smem2)
    it = 0          # (Q, dO) tiles read from the ring so far
    c = 0           # work items done so far
    w = first
    while w < n_work:
        n0, kv_row0, kv_col, i0, n_i, n_t, q_row0, q_col0, lse_base, d_base = _item(
            w, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k, stride_lse_b,
            stride_lse_h, stride_d_b, stride_d_h, BLOCK_N, BLOCK_M, HEAD_D + HEAD_D2, CAUSAL,
            GROUP, ROTATE)
        buf = KV_BUFS * HALF + c % KV_BUFS
        k_cur = k_smem.index(buf)
        v_cur = v_smem.index(buf)
        if HEAD_D2 > 0:
            k_cur2 = k_smem2.index(buf)
            v_cur2 = v_smem2.index(buf)
        else:
            k_cur2: gl.constexpr = None
            v_cur2: gl.constexpr = None
        mbarrier.wait(kv_bar.index(buf), (c // KV_BUFS) & 1)
        if ONE_PASS:    # (the other consumer's K: read by this one's dQ products)
            mbarrier.wait(kv_bar.index(KV_BUFS * (1 - HALF) + c % KV_BUFS), (c // KV_BUFS) & 1)

        keys = n0 + HALF * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, s_layout))
        key_last = n0 + HALF * BLOCK_N + BLOCK_N - 1
        s_zero = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, s_layout)
        if SKIP > 0:    # (tiles 0 .. SKIP-1: wholly masked for this consumer's keys)
            if ONE_PASS:
                ds_zero = gl.zeros([BLOCK_N, BLOCK_M], dtype, s_layout)
                for t in range(SKIP):
                    # (each slot just before its hand-over: :func:`_pass_slots`)
                    _pass_slots(ready, empty, it + t, it + t + 1, NUM_STAGES)
                    _skipped_dq(k_smem, ds_smem, dq_smem, dq_desc, ds_ready, ds_free, ds_zero,
                                dq_zero, it + t, c, t, i0, n_i, q_row0, q_col0, sm_scale, HALF,
                                BLOCK_M, HEAD_D, KV_BUFS)
            else:
                _pass_slots(ready, empty, it, it + SKIP, NUM_STAGES)
        # (the next tile's S^T and dP^T in flight across dV and dK)
        mbarrier.wait(ready.index((it + SKIP) % NUM_STAGES), ((it + SKIP) // NUM_STAGES) & 1)
        st, dpt = _issue_st_dpt(k_cur, v_cur, q_smem, do_smem, (it + SKIP) % NUM_STAGES,
                                s_zero, k_cur2, v_cur2, q_smem2, do_smem2)
        if DYNAMIC:
            w_next = _claimed(claims, claimed, claim_free, c)
        else:
            w_next = w + step
        if w_next < n_work:
            # The next item's K and V load during this one, into the other buffer once the
            # previous item's dK and dV have left it. (Issued while tile 0's products run;
            # placed after the last tile's wait instead, it made ptxas serialise every wgmma.)
            tma.store_wait(0)
            _, nrow, ncol, _, _, _, _, _, _, _ = _item(
                w_next, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k, 0, 0, 0, 0,
                BLOCK_N, BLOCK_M, HEAD_D + HEAD_D2, CAUSAL, GROUP)
            _load_kv(k_desc, v_desc, k_smem, v_smem, kv_bar, KV_BUFS * HALF + (c + 1) % KV_BUFS,
                     nrow, _kv_column(ncol, KV_SHARE, HEAD_D + HEAD_D2), HALF * BLOCK_N,
                     k_desc2, v_desc2, k_smem2, v_smem2)
        # Tile 0's products complete before dK/dV's zeros exist (see fwd_hopper: the compiler
        # would otherwise place the zeros mid-flight and ptxas serialise every wgmma).
        st, dpt = warpgroup_mma_wait(0, deps=(st, dpt))
        st, dpt = warpgroup_mma_init(st), warpgroup_mma_init(dpt)
        dk = warpgroup_mma_init(gl.zeros([BLOCK_N, HEAD_D], gl.float32, g_layout))
        dv = warpgroup_mma_init(gl.zeros([BLOCK_N, HEAD_D], gl.float32, g_layout))
        if HEAD_D2 > 0:
            dk2 = warpgroup_mma_init(gl.zeros([BLOCK_N, HEAD_D2], gl.float32, g2_layout))
            dv2 = warpgroup_mma_init(gl.zeros([BLOCK_N, HEAD_D2], gl.float32, g2_layout))
        else:           # (no second part)
            dk2 = None
            dv2 = None
        lse2, d_row = _row_stats(LSE, DSUM, lse_base, d_base, stride_lse_h, stride_d_h, SKIP,
                                 i0, n_i, BLOCK_M, col_layout)
        # Causal with the serial order: the tiles that reach this consumer's keys first, masked,
        # then the rest without the mask (two copies of the loop; one pass at 128 queries held
        # the masked loop's query positions in registers and spilled), MHA only (with GQA the
        # masked tiles recur per query head); otherwise one loop, masked where causal.
        PHASES: gl.constexpr = 2 if SERIAL and CAUSAL else 1
        n_diag = n_t - 1
        if PHASES == 2:
            if group == 1:
                n_diag = gl.minimum(n_t - 1, gl.maximum(
                    SKIP, gl.cdiv(key_last + 1 - i0 * BLOCK_M, BLOCK_M)))
        for phase in gl.static_range(PHASES):
            lo = SKIP if phase == 0 else n_diag
            hi = n_diag if phase == 0 else n_t - 1
            for t in range(lo, hi):  # the last tile has no next S^T: peeled below
                r = it + t
                if HEAD_D2 > 0:
                    st, dpt, dk, dv, dk2, dv2 = warpgroup_mma_wait(
                        0, deps=(st, dpt, dk, dv, dk2, dv2))
                else:
                    st, dpt, dk, dv = warpgroup_mma_wait(0, deps=(st, dpt, dk, dv))
                if t > SKIP:    # tile t-1's Q and dO are read: hand its slot back to the loader
                    mbarrier.arrive(empty.index((r - 1) % NUM_STAGES), count=1)
                pt_op, dst_op, dst = _grad_operands(st, dpt, keys, t, i0, n_i, lse2, d_row,
                                                    qk_scale, BLOCK_M, CAUSAL and phase == 0,
                                                    dtype, a_layout)
                if ONE_PASS:
                    _ds_publish(dst, ds_smem, ds_ready, ds_free, r, HALF)
                # (the next tile's rows are fetched now, to land while the GEMMs run)
                lse2, d_row = _row_stats(LSE, DSUM, lse_base, d_base, stride_lse_h, stride_d_h,
                                         t + 1, i0, n_i, BLOCK_M, col_layout)
                slot = r % NUM_STAGES
                dv = warpgroup_mma(pt_op, do_smem.index(slot), dv, is_async=True)
                if HEAD_D2 > 0:
                    dv2 = warpgroup_mma(gl.convert_layout(pt_op, a2_layout), do_smem2.index(slot),
                                        dv2, is_async=True)
                if ONE_PASS and not SERIAL:
                    dqt = _dq_issue(k_smem, ds_smem, ds_ready, dq_zero, r, c, HALF, HEAD_D,
                                    KV_BUFS)
                dk = warpgroup_mma(dst_op, q_smem.index(slot), dk, is_async=True)
                if HEAD_D2 > 0:
                    dk2 = warpgroup_mma(gl.convert_layout(dst_op, a2_layout), q_smem2.index(slot),
                                        dk2, is_async=True)
                if SERIAL:
                    # dV, dK done before the next S^T, dP^T take registers; one pass: the dQ
                    # products after them, so that P^T and dS^T are no longer live beside dQ^T
                    dk, dv = warpgroup_mma_wait(0, deps=(dk, dv))
                    dk, dv = warpgroup_mma_init(dk), warpgroup_mma_init(dv)
                    if ONE_PASS:
                        dqt = _dq_issue(k_smem, ds_smem, ds_ready, dq_zero, r, c, HALF, HEAD_D,
                                        KV_BUFS)
                if ONE_PASS:    # (dV and dQ done; dK may still run)
                    dqt = warpgroup_mma_wait(1 - SERIAL, deps=(dqt,))
                    _ds_release(ds_free)
                    if not DQ_LATE:
                        _dq_reduce(dqt, dq_smem.index(HALF), dq_desc, t, i0, n_i, q_row0, q_col0,
                                   sm_scale, HALF, BLOCK_M, HEAD_D)
                nslot = (r + 1) % NUM_STAGES
                mbarrier.wait(ready.index(nslot), ((r + 1) // NUM_STAGES) & 1)
                st, dpt = _issue_st_dpt(k_cur, v_cur, q_smem, do_smem, nslot, s_zero, k_cur2,
                                        v_cur2, q_smem2, do_smem2)
                if ONE_PASS and DQ_LATE:    # (under the next tile's S^T and dP^T)
                    _dq_reduce(dqt, dq_smem.index(HALF), dq_desc, t, i0, n_i, q_row0, q_col0,
                               sm_scale, HALF, BLOCK_M, HEAD_D)
        t = n_t - 1
        r = it + t
        if HEAD_D2 > 0:
            st, dpt, dk, dv, dk2, dv2 = warpgroup_mma_wait(0, deps=(st, dpt, dk, dv, dk2, dv2))
        else:
            st, dpt, dk, dv = warpgroup_mma_wait(0, deps=(st, dpt, dk, dv))
        if t > SKIP:
            mbarrier.arrive(empty.index((r - 1) % NUM_STAGES), count=1)
        pt_op, dst_op, dst = _grad_operands(st, dpt, keys, t, i0, n_i, lse2, d_row, qk_scale,
                                            BLOCK_M, CAUSAL, dtype, a_layout)
        if ONE_PASS:
            _ds_publish(dst, ds_smem, ds_ready, ds_free, r, HALF)
        slot = r % NUM_STAGES
        dv = warpgroup_mma(pt_op, do_smem.index(slot), dv, is_async=True)
        if HEAD_D2 > 0:
            dv2 = warpgroup_mma(gl.convert_layout(pt_op, a2_layout), do_smem2.index(slot), dv2,
                                is_async=True)
        if ONE_PASS:
            dqt = _dq_issue(k_smem, ds_smem, ds_ready, dq_zero, r, c, HALF, HEAD_D, KV_BUFS)
        dk = warpgroup_mma(dst_op, q_smem.index(slot), dk, is_async=True)
        if HEAD_D2 > 0:
            dk2 = warpgroup_mma(gl.convert_layout(dst_op, a2_layout), q_smem2.index(slot), dk2,
                                is_async=True)
        if ONE_PASS:
            dqt = warpgroup_mma_wait(1, deps=(dqt,))
            _ds_release(ds_free)
            _dq_reduce(dqt, dq_smem.index(HALF), dq_desc, t, i0, n_i, q_row0, q_col0,
                       sm_scale, HALF, BLOCK_M, HEAD_D)
        if HEAD_D2 > 0:
            dk, dv, dk2, dv2 = warpgroup_mma_wait(0, deps=(dk, dv, dk2, dv2))
        else:
            dk, dv = warpgroup_mma_wait(0, deps=(dk, dv))
        mbarrier.arrive(empty.index(slot), count=1)
        if ONE_PASS:    # the other consumer's last dQ products have read this one's K
            mbarrier.wait(ds_free, r & 1)

        # This item's K and V are no longer read: their tiles stage dK and dV for the TMA
        # stores (waited for before the buffer is loaded again, or at the end).
        k_cur.store((dk * sm_scale).to(dtype))
        v_cur.store(dv.to(dtype))
        if HEAD_D2 > 0:
            k_cur2.store((dk2 * sm_scale).to(dtype))
            v_cur2.store(dv2.to(dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(dk_desc, [kv_row0 + HALF * BLOCK_N, kv_col], k_cur)
        tma.async_copy_shared_to_global(dv_desc, [kv_row0 + HALF * BLOCK_N, kv_col], v_cur)
        if HEAD_D2 > 0:
            tma.async_copy_shared_to_global(dk_desc2, [kv_row0 + HALF * BLOCK_N,
                                                       kv_col + HEAD_D], k_cur2)
            tma.async_copy_shared_to_global(dv_desc2, [kv_row0 + HALF * BLOCK_N,
                                                       kv_col + HEAD_D], v_cur2)
        it += n_t
        c += 1
        w = w_next
    tma.store_wait(0)


@gluon.jit
def _dkdv_hopper_kernel(q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, dq_desc, q_desc2,
                        k_desc2, v_desc2, do_desc2, dk_desc2, dv_desc2, LSE, DSUM,
                        stride_lse_b, stride_lse_h, stride_d_b, stride_d_h,
                        nheads_kv, group, seqlen_q, seqlen_k, n_ntiles, n_work, qk_scale,
                        sm_scale, COUNT, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr,
                        HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                        CONSUMER_REGS: gl.constexpr, GROUP: gl.constexpr,
                        ONE_PASS: gl.constexpr, DQ_LATE: gl.constexpr,
                        KV_BUFS: gl.constexpr, HEAD_D2: gl.constexpr = 0,
                        SKIP_MASKED: gl.constexpr = False, SERIAL: gl.constexpr = False,
                        ROTATE: gl.constexpr = False, KV_SHARE: gl.constexpr = 1,
                        DYNAMIC: gl.constexpr = False):
    # A program takes work items program_id, + num_programs, ... (n_work in all; a grid of
    # n_work programs: one each; DYNAMIC: program_id, then the items its loader claims from
    # the count at COUNT): 2 * BLOCK_N keys of one (batch, KV head) apiece. KV_BUFS:
    # K/V buffers per consumer (2 when a program has a next item to load ahead, else 1).
    # HEAD_D2 > 0: the head dim is split (HEAD_D + HEAD_D2 columns; the *_desc2 descriptors
    # read and write the second part), else the *_desc2 are None.
    dtype: gl.constexpr = k_desc.dtype
    k_smem = gl.allocate_shared_memory(dtype, [2 * KV_BUFS, BLOCK_N, HEAD_D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [2 * KV_BUFS, BLOCK_N, HEAD_D], v_desc.layout)
    q_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_D], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_D], do_desc.layout)
    if HEAD_D2 > 0:     # the second part's tiles (dK and dV leave through K's and V's)
        k_smem2 = gl.allocate_shared_memory(dtype, [2 * KV_BUFS, BLOCK_N, HEAD_D2],
                                            k_desc2.layout)
        v_smem2 = gl.allocate_shared_memory(dtype, [2 * KV_BUFS, BLOCK_N, HEAD_D2],
                                            v_desc2.layout)
        q_smem2 = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_D2],
                                            q_desc2.layout)
        do_smem2 = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_D2],
                                             do_desc2.layout)
        q2_desc, k2_desc, v2_desc, do2_desc = q_desc2, k_desc2, v_desc2, do_desc2
        dk2_desc, dv2_desc = dk_desc2, dv_desc2
    else:   # (constexpr Nones: warp_specialize's argument tuples take no bare None)
        k_smem2: gl.constexpr = None
        v_smem2: gl.constexpr = None
        q_smem2: gl.constexpr = None
        do_smem2: gl.constexpr = None
        q2_desc: gl.constexpr = None
        k2_desc: gl.constexpr = None
        v2_desc: gl.constexpr = None
        do2_desc: gl.constexpr = None
        dk2_desc: gl.constexpr = None
        dv2_desc: gl.constexpr = None
    kv_bar = fwd_hopper.barriers(2 * KV_BUFS, 1)
    ready = fwd_hopper.barriers(NUM_STAGES, 1)
    empty = fwd_hopper.barriers(NUM_STAGES, 2)          # both consumers release a slot
    if ONE_PASS:    # each consumer's dS^T tile and dQ part; both arrive on ds_ready/ds_free
        ds_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, BLOCK_M], _ds_layout())
        # (each consumer's dQ part tile: the accumulator's TMA block, :func:`dkdv`)
        dq_smem = gl.allocate_shared_memory(gl.float32, [2, dq_desc.block_type.shape[0], 64],
                                            dq_desc.layout)
        ds_ready = fwd_hopper.barriers(1, 2).index(0)
        ds_free = fwd_hopper.barriers(1, 2).index(0)
    else:           # (stand-ins, never touched)
        ds_smem, dq_smem, ds_ready, ds_free = k_smem, k_smem, kv_bar.index(0), kv_bar.index(0)
    if DYNAMIC:     # (the claimed items' slots, :func:`_claim`)
        claims, claimed, claim_free = _claim_slots()
    else:           # (constexpr Nones: warp_specialize's argument tuples take no bare None)
        claims: gl.constexpr = None
        claimed: gl.constexpr = None
        claim_free: gl.constexpr = None

    # (the two consumers' lists differ in HALF only, yet are spelled out: the Gluon front end
    # passes the constexprs of a concatenated tuple on as tensors)
    gl.warp_specialize([
        (_dkdv_consume, (k_desc, v_desc, dk_desc, dv_desc, dq_desc, k_smem, v_smem, kv_bar,
                         q_smem, do_smem, ds_smem, dq_smem, ds_ready, ds_free, ready, empty,
                         LSE, DSUM, stride_lse_b, stride_lse_h, stride_d_b, stride_d_h, n_work,
                         n_ntiles, nheads_kv, group, seqlen_q, seqlen_k, qk_scale, sm_scale,
                         0, BLOCK_N, BLOCK_M, HEAD_D, NUM_STAGES, CAUSAL, GROUP, ONE_PASS,
                         DQ_LATE, KV_BUFS, k2_desc, v2_desc, dk2_desc, dv2_desc, k_smem2,
                         v_smem2, q_smem2, do_smem2, HEAD_D2, SKIP_MASKED, SERIAL, ROTATE,
                         KV_SHARE, claims, claimed, claim_free, DYNAMIC)),
        (_dkdv_consume, (k_desc, v_desc, dk_desc, dv_desc, dq_desc, k_smem, v_smem, kv_bar,
                         q_smem, do_smem, ds_smem, dq_smem, ds_ready, ds_free, ready, empty,
                         LSE, DSUM, stride_lse_b, stride_lse_h, stride_d_b, stride_d_h, n_work,
                         n_ntiles, nheads_kv, group, seqlen_q, seqlen_k, qk_scale, sm_scale,
                         1, BLOCK_N, BLOCK_M, HEAD_D, NUM_STAGES, CAUSAL, GROUP, ONE_PASS,
                         DQ_LATE, KV_BUFS, k2_desc, v2_desc, dk2_desc, dv2_desc, k_smem2,
                         v_smem2, q_smem2, do_smem2, HEAD_D2, SKIP_MASKED, SERIAL, ROTATE,
                         KV_SHARE, claims, claimed, claim_free, DYNAMIC)),
        (_load_items, (q_desc, do_desc, q_smem, do_smem, ready, empty, COUNT, claims, claimed,
                       claim_free, n_work, n_ntiles, nheads_kv, group, seqlen_q, seqlen_k,
                       BLOCK_N, BLOCK_M, HEAD_D, NUM_STAGES, CAUSAL, GROUP, q2_desc, do2_desc,
                       q_smem2, do_smem2, HEAD_D2, ROTATE, DYNAMIC, True)),
    ], [4, 1], [CONSUMER_REGS, 24])


def config(d: int) -> tuple[int, int, int, int]:
    """(keys per consumer, queries per tile, ring slots, consumer registers) for head dim d;
    ``FLASHTILE_GLUON_BWD_CONFIG=keys,queries,slots,regs`` overrides it (for sweeps)."""
    return fwd_hopper.env_config("bwd_hopper", _CONFIGS, d)


def enabled() -> bool:
    """On by default; ``FLASHTILE_GLUON_BWD=0`` turns it off (the tile-level dK/dV kernel then
    runs)."""
    return gluon_switch_on("bwd_hopper")


def supports(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             params) -> bool:
    """True when this kernel can compute the call's dK and dV (see the module docstring)."""
    if not (enabled() and fwd_hopper.covers(q, k, v, params, _CONFIGS)):
        return False
    keys, queries = config(q.shape[3])[:2]
    return fwd_hopper.gradient_tiles_fit(dout, q, k, queries, 2 * keys)


def one_pass(d: int, causal: bool, n_ntiles: int) -> str:
    """Where this kernel's one pass (dQ added by TMA reductions in the dK/dV pass) measured
    ahead of two passes with ``deterministic=False`` (the default): ``"early"`` (a tile's dQ
    part leaves right after its own products) or ``"two-pass"``; the late reductions (under
    the next tile's products) are only forced (:func:`dq_late`). ``n_ntiles``: work items per
    KV head (128 keys each).

    Measured (session 14, H200, bf16, forward+backward, two calls, 1k/4k/16k, against two
    passes): ahead at every unmasked point (d=64 +4% to +9%, d=128 +5% to +8% at 1k/4k, -1%
    at 16k) and causal from 4k on (d=64 +5% to +6%, d=128 +2% to +10%). Causal with at most
    8 items per head (1k): at d=64 the early variant swung from -20% to +10% between the two
    calls and the late one gained +7% and +8%; at d=128 both lost (early 0% and -15%, late
    -7%). Out of sample (session 14, 512/2k/8k, this rule against two passes): +6% to +9% at
    2k/8k unmasked, +1% to +6% causal; at 512 (host-bound: the same code measured 15-20%
    apart in two calls) d=64 causal's late pass lost in both calls (145 and 130 TFLOP/s
    against 163), so at most 4 items per head takes two passes there.

    Session 16 timed the kernels themselves (profiler sums per forward+backward, which the
    host cannot stretch; two default runs bracketing each variant within 1%): at d=128 causal
    the early one pass took the backward's kernels from 477 to 463 us at 512 and from 657-662
    to 648 us at 1k (-3%/-2%), the late one 469/660. At d=64 causal it lost: 495 against 480
    us at 512, and the early pass 747 against 742 at 1k (the late one, the rule there, 742).
    So d=128 causal takes the early pass at every length; session 14's loss there was read
    from host-bound wall times.

    Session 32 (kernel sums, two alternating rounds, d=64 causal fwd+bwd, after session 31's
    one-loop tile-level dQ): two passes against the late pass 0.972x at 1k (942/939 against
    970/965 us), 1.014x at 2k and 1.041x at 4k against the early one. So d=64 causal with at
    most 8 items per head (up to 1k) now takes two passes; the late pass is only forced
    (:func:`dq_late`)."""
    if not has_one_pass(d):
        return "two-pass"
    if causal and n_ntiles <= 8 and d <= 64:
        return "two-pass"
    return "early"


def has_one_pass(d: int) -> bool:
    """Whether this kernel can add dQ in its own pass at head dim d: d=64 and d=128. Not d=96:
    its consumers' dQ^T parts would be the head dim's 64 and 32 rows, and a wgmma's rows are
    64 (a forced one pass, ``FLASHTILE_BWD_DQ=atomic``, runs the tile-level kernels there)."""
    return fwd_hopper.head_parts(d)[1] == 0


# The serial order's config by head dim (:func:`serial`): d=64 at 128 queries per tile
# (FlashAttention-3's 128 x 128 tiles at d=64), 2 ring slots (3 do not fit beside the one
# pass's dS^T and dQ tiles).
SERIAL_CONFIGS = {64: (64, 128, 2, 240)}


def serial(d: int, one_pass: bool, seqlen_q: int) -> bool:
    """Whether each consumer waits for a tile's dV and dK products before it issues the next
    tile's S^T and dP^T (FlashAttention-3's order in its backward; the tile's LSE and D rows
    held one per thread until used; one pass: the dQ products after dV and dK; causal MHA:
    the masked tiles in a loop of their own), so that S^T and dP^T of 128 queries fit beside
    dK and dV (d=64: 128 + 64 of the 240 registers; the overlap then comes from the two
    consumers alone). By default at d=64 in the one pass (:func:`one_pass`) where the queries
    divide into 128-query tiles (:data:`SERIAL_CONFIGS`); ``FLASHTILE_GLUON_BWD_SERIAL=1`` /
    ``0`` force it on / off (with the config of :func:`config`, or
    ``FLASHTILE_GLUON_BWD_CONFIG``).

    Measured (session 39, H100, fwd+bwd kernel sums, two alternating rounds, against 64
    queries in the overlapped order): one pass 0.977x / 0.958x / 0.961x unmasked at 1k / 4k /
    16k, 0.913x / 0.912x causal at 4k / 16k (the backward alone ~6% and ~12% faster); two
    passes at 128 queries 0.98-1.07x of the one pass at 64 (causal 1k, two passes by
    :func:`one_pass`: 0.999x). Offline (sm_90a): the one pass spills 264 B (unmasked) and 416 B
    (causal, two loop copies), none serialised; without the serial order 128 queries spill
    692-1072 B and serialise every wgmma."""
    forced = env_forced("FLASHTILE_GLUON_BWD_SERIAL")
    if forced is not None:
        return forced
    return one_pass and d in SERIAL_CONFIGS and seqlen_q % SERIAL_CONFIGS[d][1] == 0


def launch_config(d: int, serial_order: bool) -> tuple[int, int, int, int]:
    """:func:`config`, or :data:`SERIAL_CONFIGS` for the serial order (either overridden by
    ``FLASHTILE_GLUON_BWD_CONFIG``)."""
    serial_config = serial_order and d in SERIAL_CONFIGS
    return fwd_hopper.env_config("bwd_hopper", SERIAL_CONFIGS if serial_config else _CONFIGS, d)


def dq_late() -> bool:
    """One pass: whether a tile's dQ part leaves under the next tile's products (which spilled
    more in session 14, with two K/V buffers per consumer: d=64 8-32 B against 0 B, d=128
    204-280 B against 88-116 B). ``FLASHTILE_GLUON_BWD_DQ_LATE=1`` forces it; unset, ``auto``
    or ``0``: the early reductions. It was d=64 causal 1k's rule until session 32, where two
    passes measured ahead there (:func:`one_pass`)."""
    return bool(env_forced("FLASHTILE_GLUON_BWD_DQ_LATE"))


def claims_items(q: torch.Tensor, k: torch.Tensor, params, one_pass: bool = True) -> bool:
    """Whether this call's dK/dV kernel (``one_pass``: with dQ) is to claim its items from a
    count that the preprocess zeroes (the caller then passes one to :func:`dkdv`): the rows
    kernel's :func:`.bwdrows_hopper.dynamic` where it runs; in this kernel
    ``FLASHTILE_GLUON_BWD_DYNAMIC=1`` (for d=64's causal one pass from 2k keys, one program
    per item by default, whose fixed turn measured 3.6% / 2.2% slower at 2k / 4k:
    :func:`persistent_ahead`), unset, ``auto`` or ``0`` never: claimed, this kernel took
    1.120x / 1.079x its time at d=64 causal 2k bf16 / fp16 (H100, session 54, two
    alternating rounds; forward+backward kernel sums 1.075x / 1.041x)."""
    from . import bwdrows_hopper        # (imports this module)
    if one_pass and bwdrows_hopper.takes(q, k):
        keys = 2 * bwdrows_hopper._CONFIGS[q.shape[3]][0]
        return bwdrows_hopper.dynamic(fwd_hopper.causal(params), k.shape[1] // keys,
                                      q.shape[3])
    return bool(env_forced("FLASHTILE_GLUON_BWD_DYNAMIC"))


def claimed_grid(n_work: int, device: torch.device, count,
                 persistent: bool) -> tuple[int, bool | int]:
    """(programs, ``DYNAMIC``) of a dK/dV kernel (this one, :mod:`.bwdrows_hopper`) over
    ``n_work`` items: with a ``count`` (:func:`claims_items`) one program per SM, claiming its
    items after the first where there are more items than SMs; without one, the kernel's own
    rule (``persistent``: :func:`.fwd_hopper.programs`, which ``FLASHTILE_GLUON_BWD_PERSISTENT``
    overrides) in a fixed turn. ``DYNAMIC``: False (a fixed turn), True (claimed), or 2 where
    ``FLASHTILE_GLUON_BWD_CLAIM_MID=1`` asks for each claim after its item's first load
    (:func:`_load_claimed`; opt-in). Why that: the loader waits for a claim's atomic, and
    where the claim stands between two items' loads the wait holds back the next item's first
    tile. Measured (H200, session 55, bf16, dK/dV kernel time): at d=64 causal 2k / 4k over
    one program per item (one round of each variant between two of it), the claimed grid
    1.121x / 1.166x, claimed mid 1.071x / 1.074x, so the claim's wait was about half the loss
    and the double-buffered grid the rest; in the rows kernel at d=128 causal 2k / 16k (two
    alternating rounds), mid over its default claims 1.027x / 1.012x. Neither is a
    default."""
    if count is None:
        return fwd_hopper.programs(n_work, device, "FLASHTILE_GLUON_BWD_PERSISTENT",
                                   persistent), False
    programs = min(n_work, sm_count(device))
    claimed = programs < n_work
    return programs, 2 if claimed and env_forced("FLASHTILE_GLUON_BWD_CLAIM_MID") else claimed


def claim_label(mode: bool | int) -> str:
    """A launch label's part for :func:`claimed_grid`'s ``DYNAMIC``."""
    return " claimed mid" if mode == 2 else " claimed" if mode else ""


def dq_acc_shape(q: torch.Tensor) -> tuple[int, int, int, int]:
    """The one pass's float32 dQ accumulator for q ``(b, sq, hq, d)``: ``(b, sq, hq * d / 64,
    64)``, so that its TMA blocks are one consumer's dQ part (queries x 64 of the head dim);
    the same bytes as q's shape, read back through a view."""
    b, sq, hq, d = q.shape
    return b, sq, hq * d // 64, 64


# Work items per KV head up to which the causal second consumer skips its masked tiles by
# default (:func:`skips_masked`): 8, so up to 1k keys (session 33).
SKIP_UPTO = 8


def skips_masked(causal: bool, n_ntiles: int, gqa: bool) -> bool:
    """Whether the second consumer skips each causal item's (Q, dO) tiles that lie wholly
    above its keys (:func:`_masked_tiles`), for ``n_ntiles`` work items per KV head, with
    (``gqa``) or without several query heads per KV head. At d=64 that is one of an item's
    tiles: ~10% of this kernel's products at 512 and ~5% at 1k in two passes; a one pass still
    computes the tile's dQ part (4 of 5 products saved). In :mod:`.bwdrows_hopper`'s one pass
    (d=128's default) 4.5 of 5.

    Measured (session 33, H200, bf16, causal MHA fwd+bwd kernel sums, two alternating rounds,
    the skip against none): d=64 0.934x at 512, 0.956x at 1k (two passes), 0.999x at 2k and
    1.017x at 4k (one pass); d=96 0.972x / 0.984x / 1.005x / 0.990x; d=128 (rows kernel)
    0.985x / 0.961x / 1.016x / 1.019x. So by default it skips up to :data:`SKIP_UPTO` items
    per head (1k keys), where the saved products are a large share and the item loop short;
    ``FLASHTILE_GLUON_BWD_SKIP_MASKED=1`` forces it at every length, ``0`` turns it off.

    Never with several query heads in an item (``gqa``; GQA computed per query head,
    :func:`expands`, has one), where the masked tiles recur within the item,
    once per query head. This kernel mapping each load to its tile made ptxas serialise every
    wgmma (C7512, session 32); the rows kernel carried the item's tiles query tile by query
    tile so that they came first, and measured 1.075x / 1.132x of no skip at d=128 8:1 causal
    512 / 1k (session 34, fwd+bwd kernel sums, two rounds; its first form deadlocked, session
    33): removed since."""
    forced = env_forced("FLASHTILE_GLUON_BWD_SKIP_MASKED")
    if not causal or gqa:
        return False
    return n_ntiles <= SKIP_UPTO if forced is None else forced


# Head dims whose unmasked one pass rotates its items by default (:func:`rotates`).
ROTATE_HEADDIMS = (128,)


def rotates(d: int, causal: bool, one_pass: bool) -> bool:
    """Whether each unmasked item of the one pass starts at its own query tile and wraps
    around (the kernels' ``ROTATE``, :func:`_item`), instead of every item at tile 0. Without
    the mask a head's items are neighbours in the order, so at 16k keys up to 128 programs run
    items of one head at once, in step, and each query tile's dQ part arrives from all of them
    together as TMA reductions into the same 32 KB of the accumulator; rotated, the items
    running at once add into different tiles (causal items already start at their own
    diagonal). Suggested by issue 7's grid (session 41, H100, bf16): the unmasked backward's
    kernels fall behind cuDNN's as the items of a head grow in number (d=128: 0.96x at 512,
    0.95x at 4k, 0.91x at 8k, 0.78x at 16k; d=64 1.08x to 0.85x) while the causal ones hold.

    Measured (session 44, H100, bf16, backward kernel sums, two alternating rounds, two
    calls): d=128 (the rows kernel, :mod:`.bwdrows_hopper`) -2.1% at 1k, -5.6% at 2k, -0.5%
    at 4k, -3.8% at 8k, -5.4% and -4.3% at 16k, so it is the rule there
    (:data:`ROTATE_HEADDIMS`); d=64 (this module's serial order, whose spills grow from 264 to
    356 B rotated) +7.7% at 1k, +8.8% at 4k, +7.6% at 16k: off. ``FLASHTILE_GLUON_BWD_ROTATE``
    ``1`` / ``0`` forces it either way (unset or ``auto``: the rule)."""
    forced = env_forced("FLASHTILE_GLUON_BWD_ROTATE")
    if causal or not one_pass:
        return False
    return d in ROTATE_HEADDIMS if forced is None else forced


def work_tiles(q: torch.Tensor, k: torch.Tensor) -> int:
    """Work items per KV head (``2 * BLOCK_N`` keys each) for q and k ``(b, s, h, d)``."""
    return k.shape[1] // (2 * config(q.shape[3])[0])


def call_one_pass(q: torch.Tensor, k: torch.Tensor, params) -> str:
    """:func:`one_pass` for a call this kernel covers."""
    return one_pass(q.shape[3], fwd_hopper.causal(params), work_tiles(q, k))


def persistent_ahead(d: int, causal: bool = False, n_ntiles: int = 0) -> bool:
    """Where this kernel's persistent grid measured ahead of one program per item, for head
    dim ``d`` and ``n_ntiles`` work items per KV head: d=64, but not causal with more than 8
    items per head (where its one pass runs, from 2k). Session 35 (kernel sums, three
    alternating rounds, d=64 causal fwd+bwd): one program per item 0.964x at 2k (1551 against
    1609 us), 0.978x at 4k (2700 against 2760): the causal items' unequal lengths, taken in a
    fixed turn on a persistent grid, leave programs idle (as the rows kernel's causal grid,
    :func:`.bwdrows_hopper.persistent`). Earlier (session 12,
    H200, bf16, forward+backward in the same runs, 512 to 16k, causal or not): d=64 (ahead at 9
    of 12 points, +0.5% to +29%, the most at 512; within 1% behind at the other three); not
    d=128 (behind at 10 of 12 points, -2% to -8.5%; again in session 15, after one program
    per item got one K/V buffer per consumer: -1% to -3% unmasked at 1k/2k, -9% to -12%
    causal at 512 to 2k). d=96 takes d=128's rule: with 64 queries per tile and the Gluon dQ
    kernel the persistent grid moved kernel time by -3% to +3% (session 21: ahead at 1k and
    4k unmasked, behind at 16k unmasked and causal 1k/4k)."""
    return d == 64 and not (causal and n_ntiles > 8)     # (:func:`one_pass`'s 8 items)


def dkdv_heads(q: torch.Tensor, k: torch.Tensor, params, one_pass: bool) -> int:
    """The heads of the dK/dV that :func:`dkdv` writes (``one_pass``: with dQ): k's, or with
    GQA q's where they are computed per query head (:func:`expands`), each work item one query
    head's keys (``KV_SHARE``; the caller then sums each KV head's group,
    :func:`.bwd._sum_head_groups`), in this kernel or the rows kernel (d=128's one pass)."""
    from . import bwdrows_hopper        # (imports this module)
    hq, hkv = q.shape[2], k.shape[2]
    if hq == hkv:
        return hkv
    rows = one_pass and bwdrows_hopper.takes(q, k)
    return hq if expands(q.shape[3], rows, params, one_pass) else hkv


def expands(d: int, rows: bool, params, one_pass: bool) -> bool:
    """Whether a GQA call's dK/dV are computed per query head (:func:`dkdv_heads`) at head dim
    ``d``, in the rows kernel (``rows``: :func:`.bwdrows_hopper.takes`) or this one: causal in
    a one pass, where measured ahead: the rows kernel at d=128 and this kernel's one pass at
    d=64 (2k keys on, :func:`one_pass`); ``FLASHTILE_GLUON_BWD_EXPAND=1`` / ``0`` forces it
    either way, except in d=64's opt-in rows kernel (never run so on a GPU).

    Why: an item that walks every query head of its KV head is ``hq / hkv`` MHA items long in
    ``hq / hkv`` times fewer items, and at causal lengths, one program per item, SMs stand
    idle while the long items finish (H100, session 49, GQA 8:1 d=128 bf16, 16k tokens: the
    rows kernel 700 / 1,674 / 5,730 us at causal 1k / 4k / 16k against 444 / 1,442 / 5,362
    for MHA of the same FLOPs). Per query head the items are MHA's, K and V read from the KV
    head, and each KV head's group is summed after, as cuDNN does (``fmha_reduce_head``).

    Measured (H100, forward+backward kernel sums, two alternating rounds, bf16, 16k tokens,
    per query head over per KV head): the rows kernel, d=128 causal GQA 8:1, 0.786 / 0.934 /
    0.974 at 1k / 4k / 16k (session 49, call 6; 0.77x -> 0.96x cuDNN at 1k), unmasked 1.054 /
    1.007 / 0.972 (session 50, call 2). This kernel (session 50, calls 2-3): d=64 causal GQA
    8:1 0.742 / 0.724 / 0.691 at 2k / 4k / 16k (0.69x -> 0.97x cuDNN at 4k), GQA 4:1 0.798 /
    0.753 at 2k / 4k; but 1.049 (8:1) and 1.083 (4:1) at 1k, two passes on a persistent grid,
    which already balances the items; unmasked d=64 1.092 / 1.055 / 1.027 at 1k / 4k / 16k;
    d=96 (two passes only) causal 1.039 / 1.029 / 1.003 / 0.995 at 1k / 2k / 4k / 16k. This
    kernel's one pass at d=128 (``FLASHTILE_GLUON_BWD_ROWS=0``) is unmeasured so: per KV head."""
    from . import bwdrows_hopper        # (imports this module)
    if rows and d in bwdrows_hopper.OPT_IN:
        return False
    forced = env_forced("FLASHTILE_GLUON_BWD_EXPAND")
    if forced is not None:
        return forced
    return one_pass and fwd_hopper.causal(params) and d == (128 if rows else 64)


def adds_dkdv(q: torch.Tensor, k: torch.Tensor, heads: int, one_pass: bool) -> bool:
    """Whether dK/dV of ``heads`` heads (:func:`dkdv_heads`; above k's: per query head) are
    added into float32 accumulators by the rows kernel (:func:`.bwdrows_hopper.adds`) instead
    of written as per-query-head parts and summed after."""
    from . import bwdrows_hopper        # (imports this module)
    return (heads > k.shape[2] and one_pass and bwdrows_hopper.takes(q, k)
            and bwdrows_hopper.adds())                                  # (dv = d there)


def dkdv(q, k, v, dout, lse, dsum, dk, dv, params, record=None, dq_acc=None,
         add_to=None, count=None) -> None:
    """dK and dV into ``dk``/``dv`` (typed like k/v; shaped like them, or with q's heads:
    each query head's, :func:`dkdv_heads`) from q, k, v ``(b, s, h, d)``,
    ``dout`` like q, and the float32 ``(b, hq, sq)`` rows ``lse`` (natural log) and ``dsum``
    (``rowsum(dO * O)``). The caller has checked :func:`supports`; ``record``: the calling
    plan's recorder (:func:`.plans.gluon_launch`). With ``dq_acc`` (float32, contiguous, shaped
    :func:`dq_acc_shape`, zeros) the same pass adds ``softmax_scale * dS K`` into it (one
    pass). The one pass at d=128 runs :mod:`.bwdrows_hopper`'s kernel instead (queries as
    rows, by default since session 22; ``FLASHTILE_GLUON_BWD_ROWS=0`` keeps this one,
    :func:`.bwdrows_hopper.takes`; ``add_to``: its per-query-head dK/dV added into float32
    accumulators, :func:`adds_dkdv`). ``count`` (an int32 zero, where :func:`claims_items`
    says so): the items are claimed from it (:func:`claimed_grid`); without it, never."""
    if dq_acc is not None:
        from . import bwdrows_hopper        # (imports this module)
        if bwdrows_hopper.takes(q, k):
            return bwdrows_hopper.dkdv(q, k, v, dout, lse, dsum, dk, dv, params, record, dq_acc,
                                       add_to, count)
    if add_to is not None:
        raise ValueError("dK/dV added per query head (add_to) run in the rows kernel only "
                         "(adds_dkdv)")
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    heads = dk.shape[2]                 # (the items' heads: k's, or q's per query head)
    lse, dsum = lse.contiguous(), dsum.contiguous()     # (the kernel steps along sq by 1)
    serial_order = serial(d, dq_acc is not None, sq)
    block_n, block_m, stages, regs = launch_config(d, serial_order)
    n_ntiles = work_tiles(q, k)
    n_work = n_ntiles * b * heads
    causal = fwd_hopper.causal(params)
    if dq_acc is not None and not has_one_pass(d):
        raise ValueError(f"the Gluon dK/dV kernel has no one pass at d={d} (has_one_pass)")
    late = dq_acc is not None and dq_late()
    rotated = rotates(d, causal, dq_acc is not None)
    # one pass: a TMA block of the accumulator is one consumer's dQ part (at d=64 half the
    # queries); two passes: a stand-in
    first, second = fwd_hopper.head_parts(d)   # (d=96: 64 + 32 columns, else d + 0)
    dq_tile = ((dq_acc, (block_m // 2 if d == 64 else block_m, 64)) if dq_acc is not None
               else (dk, (block_n, first)))
    # q, k, v, dout, dk, dv in tiles of the head dim's first part, the dQ accumulator's (or
    # its stand-in), then the second part's tiles where the head dim is split (the kernel's
    # *_desc2 descriptors; None where it is whole)
    operands = ((q, block_m), (k, block_n), (v, block_n), (dout, block_m), (dk, block_n),
                (dv, block_n))
    tiles = (tuple((t, (rows, first)) for t, rows in operands) + (dq_tile,)
             + (tuple((t, (rows, second)) for t, rows in operands) if second else ()))
    grid, claimed = claimed_grid(n_work, q.device, count, persistent_ahead(d, causal, n_ntiles))
    group = causal_order(q, heads, n_ntiles, grid) if causal else 1
    plans.gluon_launch(
        record, _dkdv_hopper_kernel, (grid,), tiles,
        ((None,) * (13 - len(tiles))
         + (lse, dsum, lse.stride(0), lse.stride(1), dsum.stride(0), dsum.stride(1),
            heads, hq // heads, sq, sk, n_ntiles, n_work,
            params.softmax_scale * fwd_hopper.LOG2E, params.softmax_scale,
            count if claimed else lse)),
        dict(BLOCK_N=block_n, BLOCK_M=block_m, HEAD_D=first, HEAD_D2=second, NUM_STAGES=stages,
             CAUSAL=causal, CONSUMER_REGS=regs, num_warps=4,
             GROUP=group, ONE_PASS=dq_acc is not None,
             DQ_LATE=late, KV_BUFS=2 if grid < n_work else 1,
             SKIP_MASKED=skips_masked(causal, n_ntiles, hq > heads), SERIAL=serial_order,
             ROTATE=rotated, KV_SHARE=heads // hkv, DYNAMIC=claimed),
        fwd_hopper.part_descriptor, "dkdv", f"gluon {2 * block_n}x{block_m}/{stages}s"
        + (" serial" if serial_order else "") + claim_label(claimed)
        + (f" window {-group}" if group < 0 else "")
        + ("" if dq_acc is None else " +dQ late" if late else " +dQ")
        + (" rotated" if rotated else "") + (" per query head" if heads > hkv else ""))
