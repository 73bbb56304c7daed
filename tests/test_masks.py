"""BlockMask construction (flashtile.masks) against brute-force dense classification.

For every library mask_mod, odd lengths and BLOCK_SIZE values (int and tuple), B/H None and
explicit: the partial/full block layouts of ``create_block_mask`` equal those computed from the
materialised element mask, and the eight index lists follow the documented layout.
"""

from __future__ import annotations

import pytest
import torch

from flashtile import masks
from flashtile.masks import (BlockMask, and_masks, butterfly_block_layout, causal_mask,
                             create_block_mask, create_mask, dilated, document_mask, layout_mask,
                             noop_mask, or_masks, prefix_lm, random_block, random_block_layout,
                             sliding_window, strided_block_layout)

# --------------------------------------------------------------------------------------------
# brute force


def _element_mask(mask_mod, batch, nheads, q_len, kv_len):
    """``(batch, nheads, q_len, kv_len)`` bool from int64 index grids (independent of masks.py)."""
    b = torch.arange(batch)[:, None, None, None]
    h = torch.arange(nheads)[None, :, None, None]
    q = torch.arange(q_len)[None, None, :, None]
    kv = torch.arange(kv_len)[None, None, None, :]
    return mask_mod(b, h, q, kv).expand(batch, nheads, q_len, kv_len)


def _brute_layouts(mask_mod, batch, nheads, q_len, kv_len, block_q, block_kv):
    """``(partial, full)`` per block by looping over blocks: full = every in-range element."""
    dense = _element_mask(mask_mod, batch, nheads, q_len, kv_len)
    nq, nkv = -(-q_len // block_q), -(-kv_len // block_kv)
    partial = torch.zeros(batch, nheads, nq, nkv, dtype=torch.bool)
    full = torch.zeros_like(partial)
    for i in range(nq):
        for j in range(nkv):
            blk = dense[:, :, i * block_q:(i + 1) * block_q, j * block_kv:(j + 1) * block_kv]
            blk = blk.reshape(batch, nheads, -1)
            full[:, :, i, j] = blk.all(-1)
            partial[:, :, i, j] = blk.any(-1) & ~blk.all(-1)
    return partial, full


def _check_lists(bm: BlockMask):
    """The documented layout: shapes, int32, contiguous, permutation rows, listed part sorted,
    partial/full disjoint, transposed lists = transposed layouts."""
    batch, nheads = bm.shape[:2]
    nq, nkv = bm.num_blocks
    shapes = {"kv_num_blocks": (batch, nheads, nq), "kv_indices": (batch, nheads, nq, nkv),
              "full_kv_num_blocks": (batch, nheads, nq),
              "full_kv_indices": (batch, nheads, nq, nkv), "q_num_blocks": (batch, nheads, nkv),
              "q_indices": (batch, nheads, nkv, nq), "full_q_num_blocks": (batch, nheads, nkv),
              "full_q_indices": (batch, nheads, nkv, nq)}
    for name, shape in shapes.items():
        t = getattr(bm, name)
        assert t.shape == shape, name
        assert t.dtype == torch.int32 and t.is_contiguous(), name
    for num, idx in ((bm.kv_num_blocks, bm.kv_indices), (bm.full_kv_num_blocks,
                                                         bm.full_kv_indices),
                     (bm.q_num_blocks, bm.q_indices), (bm.full_q_num_blocks, bm.full_q_indices)):
        width = idx.shape[-1]
        assert torch.equal(idx.sort(dim=-1).values,
                           torch.arange(width, dtype=torch.int32).expand_as(idx))
        listed = torch.arange(width) < num[..., None]
        steps = idx[..., 1:] - idx[..., :-1]
        assert bool((steps > 0)[listed[..., 1:]].all())          # listed part increasing
    partial, full = bm.dense_layouts()
    assert not bool((partial & full).any())
    rebuilt = masks._ordered_to_dense(bm.q_num_blocks, bm.q_indices, nq).transpose(-1, -2)
    assert torch.equal(rebuilt, partial)
    rebuilt = masks._ordered_to_dense(bm.full_q_num_blocks, bm.full_q_indices, nq)
    assert torch.equal(rebuilt.transpose(-1, -2), full)


# --------------------------------------------------------------------------------------------
# the mask library at odd lengths / block sizes


def _doc_ids(length, batch=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shape = (length,) if batch is None else (batch, length)
    return torch.randint(0, 3, shape, generator=gen).cumsum(-1) // 2


# name -> (factory(B, H, Q, KV) -> mask_mod, needs explicit B, needs explicit H)
MASKS = {
    "causal": (lambda B, H, Q, KV: causal_mask, False, False),
    "sliding-5": (lambda B, H, Q, KV: sliding_window(5), False, False),
    "sliding-3-bidir": (lambda B, H, Q, KV: sliding_window(3, causal=False), False, False),
    "document": (lambda B, H, Q, KV: document_mask(_doc_ids(max(Q, KV))), False, False),
    "document-per-batch": (lambda B, H, Q, KV: document_mask(_doc_ids(max(Q, KV), batch=B)),
                           True, False),
    "prefix-lm-9": (lambda B, H, Q, KV: prefix_lm(9), False, False),
    "prefix-lm-per-batch": (lambda B, H, Q, KV: prefix_lm(torch.tensor([4, 17])[:B]), True,
                            False),
    "dilated-3": (lambda B, H, Q, KV: dilated(3), False, False),
    "random-block": (lambda B, H, Q, KV: random_block(0.4, Q, KV, BLOCK_SIZE=(6, 9), seed=3),
                     False, False),
    "and-causal-sliding": (lambda B, H, Q, KV: and_masks(causal_mask, sliding_window(11)),
                           False, False),
    "or-dilated-sliding": (lambda B, H, Q, KV: or_masks(dilated(4), sliding_window(2)),
                           False, False),
    "per-head": (lambda B, H, Q, KV: lambda b, h, q, kv: (q - kv) % (h + 2) == 0, False, True),
    "everything": (lambda B, H, Q, KV: noop_mask, False, False),
    "nothing": (lambda B, H, Q, KV: or_masks(), False, False),
}

GEOMETRY = [  # (Q_LEN, KV_LEN, BLOCK_SIZE)
    (37, 37, 8),
    (29, 41, (8, 16)),
    (64, 48, 16),            # lengths that are multiples of the blocks
    (50, 23, (7, 5)),
    (5, 70, (16, 32)),       # one query block
]


def _geometry_id(g):
    q_len, kv_len, block = g
    block = f"{block[0]}x{block[1]}" if isinstance(block, tuple) else block
    return f"Q{q_len}-KV{kv_len}-BS{block}"


@pytest.mark.parametrize("geometry", GEOMETRY, ids=[_geometry_id(g) for g in GEOMETRY])
@pytest.mark.parametrize("name", list(MASKS))
def test_create_block_mask_matches_brute_force(name, geometry):
    q_len, kv_len, block = geometry
    factory, needs_b, needs_h = MASKS[name]
    for B, H in ((None, None), (2, 3)):
        if (needs_b and B is None) or (needs_h and H is None):
            continue
        mask_mod = factory(B or 1, H or 1, q_len, kv_len)
        bm = create_block_mask(mask_mod, B, H, q_len, kv_len, device="cpu", BLOCK_SIZE=block)
        block_q, block_kv = (block, block) if isinstance(block, int) else block
        assert bm.BLOCK_SIZE == (block_q, block_kv)
        assert bm.shape == (B or 1, H or 1, q_len, kv_len)
        assert bm.mask_mod is mask_mod
        partial, full = _brute_layouts(mask_mod, B or 1, H or 1, q_len, kv_len, block_q,
                                       block_kv)
        got_partial, got_full = bm.dense_layouts()
        assert torch.equal(got_partial, partial), f"{name} partial blocks"
        assert torch.equal(got_full, full), f"{name} full blocks"
        _check_lists(bm)
        dense = _element_mask(mask_mod, B or 1, H or 1, q_len, kv_len)
        assert torch.equal(bm.to_dense_mask(q_len, kv_len), dense)


def test_tiles_smaller_than_a_block(monkeypatch):
    """Blocks larger than a tile are classified piece by piece (any/all combined)."""
    monkeypatch.setattr(masks, "_TILE_COLUMNS", 8)
    monkeypatch.setattr(masks, "_TILE_ELEMENTS", 48)
    for mask_mod in (causal_mask, sliding_window(6), dilated(5)):
        for block in ((16, 12), (4, 3), (5, 20)):
            bm = create_block_mask(mask_mod, None, 2, 45, 53, device="cpu", BLOCK_SIZE=block)
            partial, full = _brute_layouts(mask_mod, 1, 2, 45, 53, *block)
            assert torch.equal(bm.dense_layouts()[0], partial)
            assert torch.equal(bm.dense_layouts()[1], full)


def test_mask_mod_ignoring_some_indices():
    """Results that do not depend on q or kv (size-1 dims) are broadcast, not reduced."""
    for mask_mod in (lambda b, h, q, kv: kv < 19, lambda b, h, q, kv: q % 3 == 0,
                     lambda b, h, q, kv: h == 1):
        bm = create_block_mask(mask_mod, 2, 3, 33, 40, device="cpu", BLOCK_SIZE=(8, 8))
        partial, full = _brute_layouts(mask_mod, 2, 3, 33, 40, 8, 8)
        assert torch.equal(bm.dense_layouts()[0], partial)
        assert torch.equal(bm.dense_layouts()[1], full)


def test_causal_128k_is_built_tile_by_tile():
    """create_block_mask never materialises Q_LEN x KV_LEN: at 128k (16G elements) mask_mod
    only ever sees tiles of at most ``_TILE_ELEMENTS`` (512k) elements, and every element once."""
    n = 131072
    threads = torch.get_num_threads()
    seen = []                        # broadcast element count of each call (worker threads)

    def counted_causal(b, h, q_idx, kv_idx):
        seen.append(torch.broadcast_shapes(b.shape, h.shape, q_idx.shape, kv_idx.shape).numel())
        return causal_mask(b, h, q_idx, kv_idx)
    bm = create_block_mask(counted_causal, None, None, n, n, device="cpu", BLOCK_SIZE=128)
    assert torch.get_num_threads() == threads                    # restored after the build
    assert max(seen) <= masks._TILE_ELEMENTS, f"a mask_mod call saw {max(seen)} elements"
    assert sum(x for x in seen if x > 1) == n * n                # each element once (+ 1 probe)
    blocks = n // 128
    assert torch.equal(bm.kv_num_blocks[0, 0], torch.ones(blocks, dtype=torch.int32))
    assert torch.equal(bm.full_kv_num_blocks[0, 0], torch.arange(blocks, dtype=torch.int32))
    assert torch.equal(bm.kv_indices[0, 0, :, 0], torch.arange(blocks, dtype=torch.int32))
    assert torch.equal(bm.full_q_num_blocks[0, 0],
                       torch.arange(blocks - 1, -1, -1, dtype=torch.int32))
    assert bm.density() == pytest.approx((blocks * (blocks + 1) / 2) / blocks ** 2)


# --------------------------------------------------------------------------------------------
# composition


def test_and_or_masks():
    a, b = sliding_window(4), dilated(3)
    ea, eb = _element_mask(a, 1, 1, 20, 20), _element_mask(b, 1, 1, 20, 20)
    assert torch.equal(_element_mask(and_masks(a, b), 1, 1, 20, 20), ea & eb)
    assert torch.equal(_element_mask(or_masks(a, b), 1, 1, 20, 20), ea | eb)
    assert torch.equal(_element_mask(and_masks(a, b, causal_mask), 1, 1, 20, 20),
                       ea & eb & _element_mask(causal_mask, 1, 1, 20, 20))
    assert bool(_element_mask(and_masks(), 1, 1, 3, 3).all())
    assert not bool(_element_mask(or_masks(), 1, 1, 3, 3).any())
    assert and_masks(a, b).__name__ == "and_masks(sliding_window(4), dilated(3))"
    with pytest.raises(TypeError, match="mask_mod functions"):
        and_masks(a, 3)
    with pytest.raises(TypeError, match="mask_mod functions"):
        or_masks("causal")


def test_create_mask_is_dense():
    dense = create_mask(causal_mask, None, 2, 5, 7, device="cpu")
    assert dense.shape == (1, 2, 5, 7)
    assert torch.equal(dense[0, 0], torch.ones(5, 7, dtype=torch.bool).tril())


# --------------------------------------------------------------------------------------------
# block layouts and from_layout


def test_random_block_layout():
    layout = random_block_layout(6, 9, 0.4, B=2, H=3, seed=5)
    assert layout.shape == (2, 3, 6, 9) and layout.dtype == torch.bool
    assert torch.equal(layout.sum(dim=(-1, -2)), torch.full((2, 3), round(0.4 * 54)))
    assert torch.equal(layout, random_block_layout(6, 9, 0.4, B=2, H=3, seed=5))
    assert not torch.equal(layout, random_block_layout(6, 9, 0.4, B=2, H=3, seed=6))
    assert not bool(random_block_layout(3, 3, 0.0).any())
    assert bool(random_block_layout(3, 3, 1.0).all())
    with pytest.raises(ValueError, match="density"):
        random_block_layout(3, 3, 1.5)


LAYOUT_BUILDERS = {
    "random": lambda **kw: random_block_layout(6, 9, 0.4, B=2, H=3, seed=5, **kw),
    "butterfly": lambda **kw: butterfly_block_layout(8, 6, **kw),
    "strided": lambda **kw: strided_block_layout(7, stride=3, local=2, causal=True, **kw),
}


@pytest.mark.parametrize("default", ["meta", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("name", list(LAYOUT_BUILDERS))
def test_block_layouts_ignore_the_default_device(name, default):
    """Inside ``with torch.device(...)`` (a user's model code) a layout is the same, on the
    device asked for: the seeded CPU generator is not asked for numbers on the default device
    (under ``with torch.device("cuda")``: "Expected a 'cuda' device type for generator"), and
    nothing is built there and copied back (from "meta", which holds no data, it cannot be)."""
    build = LAYOUT_BUILDERS[name]
    expected = build()
    with torch.device(default):
        on_cpu = build()
        on_default = build(device=default)
    assert on_cpu.device == torch.device("cpu") and torch.equal(on_cpu, expected)
    assert on_default.device.type == default and on_default.shape == expected.shape
    if default != "meta":
        assert torch.equal(on_default.cpu(), expected)


def test_butterfly_block_layout():
    layout = butterfly_block_layout(16)[0, 0]
    assert torch.equal(layout.sum(-1), torch.full((16,), 5))          # i, and i ^ 1, 2, 4, 8
    assert torch.equal(layout, layout.T)
    for i in range(16):
        assert set(torch.nonzero(layout[i]).flatten().tolist()) == {i, i ^ 1, i ^ 2, i ^ 4,
                                                                      i ^ 8}
    assert torch.equal(butterfly_block_layout(16, max_stride=2)[0, 0].sum(-1),
                       torch.full((16,), 3))
    assert butterfly_block_layout(5, 7).shape == (1, 1, 5, 7)


def test_strided_block_layout():
    layout = strided_block_layout(6, stride=3, local=1)[0, 0]
    expect = torch.tensor([[(abs(i - j) < 1) or ((i - j) % 3 == 0) for j in range(6)]
                           for i in range(6)])
    assert torch.equal(layout, expect)
    causal = strided_block_layout(6, stride=2, local=2, causal=True)[0, 0]
    assert not bool(causal.triu(1).any())


LAYOUTS = {
    "butterfly": lambda nq, nkv: butterfly_block_layout(nq, nkv),
    "strided": lambda nq, nkv: strided_block_layout(nq, nkv, stride=3, local=2),
    "random-0.3-per-head": lambda nq, nkv: random_block_layout(nq, nkv, 0.3, H=3, seed=1),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_from_layout(name):
    q_len, kv_len, block = 45, 38, (8, 6)
    layout = LAYOUTS[name](6, 7)
    bm = BlockMask.from_layout(layout, q_len, kv_len, BLOCK_SIZE=block)
    assert torch.equal(bm.to_dense(), layout)
    assert int(bm.kv_num_blocks.sum()) == 0                            # every block full
    assert torch.equal(bm.full_kv_num_blocks, layout.sum(-1, dtype=torch.int32))
    assert bm.mask_mod is noop_mask
    _check_lists(bm)
    dense = _element_mask(layout_mask(layout, block), 1, layout.shape[1], q_len, kv_len)
    assert torch.equal(bm.to_dense_mask(q_len, kv_len), dense)
    # Building from the equivalent mask_mod at the same block size gives the same lists.
    same = create_block_mask(layout_mask(layout, block), None, layout.shape[1], q_len, kv_len,
                             device="cpu", BLOCK_SIZE=block)
    assert torch.equal(same.full_kv_indices, bm.full_kv_indices)
    assert torch.equal(same.full_q_indices, bm.full_q_indices)
    assert bm.density() == pytest.approx(float(layout.float().mean()))
    assert bm.sparsity() == pytest.approx(100 * (1 - bm.density()))


def test_from_layout_errors():
    with pytest.raises(ValueError, match=r"need \(4, 3\)"):
        BlockMask.from_layout(torch.ones(4, 4, dtype=torch.bool), 64, 40, BLOCK_SIZE=16)
    with pytest.raises(TypeError, match="bool"):
        BlockMask.from_layout(torch.ones(4, 4), 64, 64, BLOCK_SIZE=16)
    with pytest.raises(ValueError, match="0 and 1"):
        BlockMask.from_layout(torch.full((4, 4), 2), 64, 64, BLOCK_SIZE=16)
    with pytest.raises(ValueError, match="shape"):
        BlockMask.from_layout(torch.ones(2, 4, 4, dtype=torch.bool), 64, 64, BLOCK_SIZE=16)
    # 0/1 integer layouts are accepted
    bm = BlockMask.from_layout(torch.eye(4, dtype=torch.int64), 64, 64, BLOCK_SIZE=16)
    assert torch.equal(bm.to_dense()[0, 0], torch.eye(4, dtype=torch.bool))


# --------------------------------------------------------------------------------------------
# from_kv_blocks, views, printing


def test_from_kv_blocks_normalises_torch_style_lists():
    reference = create_block_mask(sliding_window(9), None, 2, 40, 40, device="cpu", BLOCK_SIZE=8)
    # Same lists, listed blocks in reversed order and padding garbage after the counts.
    idx = reference.kv_indices.clone()
    for h in range(2):
        for i in range(5):
            n = int(reference.kv_num_blocks[0, h, i])
            idx[0, h, i, :n] = idx[0, h, i, :n].flip(0)
            idx[0, h, i, n:] = 0
    bm = BlockMask.from_kv_blocks(reference.kv_num_blocks, idx, reference.full_kv_num_blocks,
                                  reference.full_kv_indices, BLOCK_SIZE=8,
                                  mask_mod=reference.mask_mod, seq_lengths=(40, 40))
    for name in BlockMask._TENSORS:
        assert torch.equal(getattr(bm, name), getattr(reference, name)), name
    # No full lists: everything partial; default seq_lengths from the block counts.
    bm = BlockMask.from_kv_blocks(reference.kv_num_blocks, reference.kv_indices, BLOCK_SIZE=8)
    assert bm.seq_lengths == (40, 40)
    assert int(bm.full_kv_num_blocks.sum()) == 0
    _check_lists(bm)


def test_from_kv_blocks_errors():
    num = torch.tensor([[[1, 2]]], dtype=torch.int32)
    idx = torch.tensor([[[0, 1], [1, 1]]], dtype=torch.int32)
    with pytest.raises(ValueError, match="repeat"):
        BlockMask.from_kv_blocks(num[None, 0], idx[None], BLOCK_SIZE=4)
    with pytest.raises(ValueError, match=r"lie in \[0, 2\)"):
        BlockMask.from_kv_blocks(torch.tensor([[[1, 1]]]), torch.tensor([[[[0, 1], [5, 0]]]]),
                                 BLOCK_SIZE=4)
    with pytest.raises(ValueError, match="both partial and full"):
        BlockMask.from_kv_blocks(torch.tensor([[[1, 1]]]), torch.tensor([[[[0, 1], [1, 0]]]]),
                                 torch.tensor([[[1, 0]]]), torch.tensor([[[[0, 1], [0, 1]]]]),
                                 BLOCK_SIZE=4)
    with pytest.raises(ValueError, match="together"):
        BlockMask.from_kv_blocks(torch.tensor([[[1, 1]]]), torch.tensor([[[[0, 1], [1, 0]]]]),
                                 torch.tensor([[[1, 0]]]), None, BLOCK_SIZE=4)
    with pytest.raises(ValueError, match="query blocks"):
        BlockMask.from_kv_blocks(torch.tensor([[[1, 1]]]), torch.tensor([[[[0, 1], [1, 0]]]]),
                                 BLOCK_SIZE=4, seq_lengths=(20, 8))
    with pytest.raises(TypeError, match="integer"):
        BlockMask.from_kv_blocks(torch.tensor([[[1.0]]]), torch.tensor([[[[0]]]]), BLOCK_SIZE=4)


def test_views_and_repr():
    bm = create_block_mask(causal_mask, 2, 3, 100, 100, device="cpu", BLOCK_SIZE=25)
    assert bm.shape == (2, 3, 100, 100)
    assert bm.num_blocks == (4, 4)
    assert bm.numel() == 2 * 3 * 100 * 100
    assert bm.density() == pytest.approx(10 / 16)
    assert bm.sparsity() == pytest.approx(37.5)
    assert torch.equal(bm.to_dense()[0, 0], torch.ones(4, 4, dtype=torch.bool).tril())
    text = repr(bm)
    assert "sparsity=37.50%" in text and "mask_mod=causal_mask" in text
    assert "+ . . .\n# + . .\n# # + .\n# # # +" in text
    assert "more" in bm.to_string(limit=2)
    moved = bm.to("cpu")
    for name in BlockMask._TENSORS:
        assert torch.equal(getattr(moved, name), getattr(bm, name))
    first = bm[1, 2]
    assert first.shape == (1, 1, 100, 100)
    assert torch.equal(first.kv_indices, bm.kv_indices[1:2, 2:3])
    with pytest.raises(RuntimeError, match="sliced"):
        first.mask_mod(*(torch.zeros(1, dtype=torch.int32),) * 4)
    assert bm[:, 1:].shape == (2, 2, 100, 100)
    assert len(bm.as_tuple()) == 2 + 8 + 2 + 1


# --------------------------------------------------------------------------------------------
# errors


def _returns_int(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx).int()


def _score_like(score, b, h, q_idx, kv_idx):
    return score


@pytest.mark.parametrize("case", [
    "mask-returns-int", "mask-returns-python-bool", "mask-is-score-mod", "mask-not-callable",
    "mask-bad-shape", "block-size-zero", "block-size-float", "block-size-triple",
    "block-size-bool", "q-len-zero", "kv-len-float", "batch-zero", "heads-float",
])
def test_create_block_mask_errors(case):
    calls = {
        "mask-returns-int": (TypeError, "bool tensor.*torch.int32",
                             dict(mask_mod=_returns_int)),
        "mask-returns-python-bool": (TypeError, "bool tensor.*got bool",
                                     dict(mask_mod=lambda b, h, q, kv: True)),
        "mask-is-score-mod": (TypeError, "looks like a score_mod", dict(mask_mod=_score_like)),
        "mask-not-callable": (TypeError, "must be a function", dict(mask_mod="causal")),
        "mask-bad-shape": (ValueError, "does not broadcast",
                           dict(mask_mod=lambda b, h, q, kv: torch.ones(3, 5, 1, 1,
                                                                        dtype=torch.bool))),
        "block-size-zero": (ValueError, "BLOCK_SIZE entries must be positive",
                            dict(BLOCK_SIZE=0)),
        "block-size-float": (TypeError, "BLOCK_SIZE must be", dict(BLOCK_SIZE=64.0)),
        "block-size-triple": (TypeError, "BLOCK_SIZE must be", dict(BLOCK_SIZE=(8, 8, 8))),
        "block-size-bool": (TypeError, "BLOCK_SIZE must be", dict(BLOCK_SIZE=True)),
        "q-len-zero": (ValueError, "Q_LEN", dict(Q_LEN=0)),
        "kv-len-float": (TypeError, "KV_LEN", dict(KV_LEN=16.0)),
        "batch-zero": (ValueError, "B must be", dict(B=0)),
        "heads-float": (TypeError, "H must be", dict(H=2.0)),
    }
    error, match, overrides = calls[case]
    kwargs = dict(mask_mod=causal_mask, B=None, H=None, Q_LEN=16, KV_LEN=16, device="cpu",
                  BLOCK_SIZE=8)
    kwargs.update(overrides)
    with pytest.raises(error, match=match):
        create_block_mask(**kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_device_without_gpu():
    with pytest.raises(ValueError, match='device="cpu"'):
        create_block_mask(causal_mask, None, None, 16, 16)            # default device="cuda"


def test_library_argument_errors():
    with pytest.raises(ValueError, match="window"):
        sliding_window(-1)
    with pytest.raises(ValueError, match="stride"):
        dilated(0)
    with pytest.raises(TypeError, match="doc_ids must be an integer tensor"):
        document_mask(torch.zeros(5))
    with pytest.raises(ValueError, match="prefix_len"):
        prefix_lm(-2)
    with pytest.raises(ValueError, match="odd last dim"):
        masks.relative_position_bias(torch.zeros(4))
    with pytest.raises(ValueError, match="cap"):
        masks.softcap(0.0)
    with pytest.raises(TypeError, match="slopes"):
        masks.alibi(torch.ones(4, dtype=torch.int64))


def test_alibi_slopes():
    assert torch.allclose(masks.alibi_slopes(8), 2.0 ** (-torch.arange(1, 9.0)))
    assert masks.alibi_slopes(12).shape == (12,)
