"""The dropout RNG: ``flashtile.reference.philox`` against Triton's ``tl.rand`` and the kernels'
``dropout_keep`` bit for bit, the Philox known-answer vectors, the counter layout and the keep
statistics."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from flashtile.params import AttentionParams
from flashtile.reference.philox import (POSITIONS_PER_CALL, draw_seed_offset, dropout_counters,
                                        dropout_keep, dropout_stride_b, dropout_uniform16,
                                        philox_4x32, philox_uniform)

SEEDS = [0, 1, 12345, 2**31 - 1, 2**33 + 7, -5]


def _offsets() -> torch.Tensor:
    """1024 int64 counters: small, around the 32-bit boundary, above 2**40, random, negative."""
    special = torch.tensor([0, 1, 2, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 2**33 + 5,
                            2**40, 2**40 + 12345, 2**62 + 3, 2**63 - 1, -1, -2**32, -2**40 - 7],
                           dtype=torch.int64)
    small = torch.arange(500, dtype=torch.int64)
    shifted = torch.arange(256, dtype=torch.int64) + (2**32 - 100)
    rand = torch.randint(0, 2**62, (1024 - special.numel() - 500 - 256,), dtype=torch.int64,
                         generator=torch.Generator().manual_seed(7))
    return torch.cat([special, small, shifted, rand])


# Runs in a fresh process: TRITON_INTERPRET must be set before triton is imported, and
# another test module may already have imported triton in this process. @triton.jit needs the
# kernel's source, so the script is written to a file rather than passed with -c. On the CPU
# it runs under the interpreter; on a GPU it runs compiled (the inline-PTX multiplies of
# ``philox4x32`` exist only there).
_TRITON_SCRIPT = textwrap.dedent('''
    import sys
    import torch
    import triton
    import triton.language as tl

    from flashtile.kernels.common import dropout_keep, philox4x32

    @triton.jit
    def _rand_kernel(out_ptr, words_ptr, offsets_ptr, seed, N: tl.constexpr):
        idx = tl.arange(0, N)
        offsets = tl.load(offsets_ptr + idx)
        tl.store(out_ptr + idx, tl.rand(seed, offsets))
        # flashtile's Philox against Triton's, all four words
        ours = philox4x32(seed, offsets)
        theirs = tl.randint4x(seed, offsets)
        same = ((ours[0] == theirs[0]) & (ours[1] == theirs[1]) & (ours[2] == theirs[2])
                & (ours[3] == theirs[3]))
        tl.store(words_ptr + idx, same.to(tl.int8))

    @triton.jit
    def _keep_kernel(out_ptr, seed, rng_offset, row_base, seqlen_k, dropout_p,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TRANSPOSED: tl.constexpr):
        start_m = tl.program_id(0) * BLOCK_M
        start_n = tl.program_id(1) * BLOCK_N
        keep = dropout_keep(seed, rng_offset, row_base + start_m // 2, start_n, seqlen_k,
                            dropout_p, BLOCK_M, BLOCK_N)
        rows = start_m + tl.arange(0, BLOCK_M)
        cols = start_n + tl.arange(0, BLOCK_N)
        if TRANSPOSED:      # as the dK/dV pass takes it: (BLOCK_N, BLOCK_M), keys down
            ptrs = out_ptr + rows[None, :] * 64 + cols[:, None]
            tl.store(ptrs, tl.trans(keep).to(tl.int8))
        else:
            ptrs = out_ptr + rows[:, None] * 64 + cols[None, :]
            tl.store(ptrs, keep.to(tl.int8))

    dev = sys.argv[3]
    offsets = torch.load(sys.argv[1]).to(dev)
    seeds = [int(s) for s in sys.argv[4:]]
    results = {}
    for seed in seeds:
        out = torch.full(offsets.shape, float("nan"), dtype=torch.float32, device=dev)
        same = torch.full(offsets.shape, -1, dtype=torch.int8, device=dev)
        _rand_kernel[(1,)](out, same, offsets, seed, N=offsets.numel())
        results[seed] = out.cpu()
        results[("words", seed)] = same.cpu()
    # dropout_keep: 32 queries x 64 keys of one head in 2 x 2 tiles of 16 x 32, both
    # orientations, p = 0.3 (19661 / 2**16). "small": head 5 of 8, 32 x 64 per head. "large":
    # head 3 of 4 at 2**20 x 2**20 per head, counters near 2**38 (int64 arithmetic in the kernel).
    for name, row_base, seqlen_k in (("small", 5 * 16, 64), ("large", 3 * 2**19, 2**20)):
        for transposed in (False, True):
            keep = torch.full((32, 64), -1, dtype=torch.int8, device=dev)
            _keep_kernel[(2, 2)](keep, 77, 2**33 + 9, row_base, seqlen_k, 19661 / 65536,
                                 BLOCK_M=16, BLOCK_N=32, TRANSPOSED=transposed)
            results[(name, transposed)] = keep.cpu()
    torch.save(results, sys.argv[2])
''')


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")
@pytest.mark.parametrize("dev", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="compiled kernels need a GPU"))])
def test_bitwise_equal_to_triton_tl_rand(tmp_path, dev):
    offsets = _offsets()
    assert offsets.dtype == torch.int64 and offsets.numel() == 1024
    script = tmp_path / "triton_rand.py"
    script.write_text(_TRITON_SCRIPT)
    torch.save(offsets, tmp_path / "offsets.pt")
    env = dict(os.environ)
    if dev == "cpu":
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))), "src"), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "offsets.pt"),
                           str(tmp_path / "out.pt"), dev, *map(str, SEEDS)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = torch.load(tmp_path / "out.pt")
    for seed in SEEDS:
        ours = philox_uniform(seed, offsets)
        theirs = results[seed]
        differ = ours.view(torch.int32) != theirs.view(torch.int32)
        assert not differ.any(), (f"seed {seed}: {int(differ.sum())} of {offsets.numel()} differ, "
                                  f"first at counter {int(offsets[differ][0])}")
        assert torch.equal(results[("words", seed)], torch.ones_like(results[("words", seed)])), \
            f"seed {seed}: philox4x32 differs from tl.randint4x"
    # The kernels' dropout_keep against the replica, position by position, in both orientations.
    params = AttentionParams(softmax_scale=1.0, dropout_p=19661 / 65536, seed=77, offset=2**33 + 9)
    rows, cols = torch.arange(32)[:, None], torch.arange(64)[None, :]
    for name, head, nheads, seqlen in (("small", 5, 8, None), ("large", 3, 4, 2**20)):
        ours = dropout_keep(params, 0, head, rows, cols, nheads, seqlen or 32, seqlen or 64)
        assert 0.6 < ours.double().mean() < 0.8
        for transposed in (False, True):
            assert torch.equal(results[(name, transposed)].bool(), ours), (name, transposed)


@pytest.mark.parametrize("counter, key, expected", [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
], ids=["zeros", "ones", "pi"])
def test_philox_known_answers(counter, key, expected):
    """Random123's Philox4x32-10 known-answer vectors."""
    words = philox_4x32(*(torch.tensor([c], dtype=torch.int64) for c in counter), *key)
    assert tuple(int(w) for w in words) == expected


# tl.rand(1234, offsets) bits, recorded with TRITON_INTERPRET=1 and triton 3.6.0.
_PINNED_1234 = [1048724172, 1061298755, 1021798995, 1059173161]


def test_known_values_pinned():
    """Pins the replica without triton installed (the values above)."""
    offsets = torch.tensor([0, 1, 2**32 + 5, 2**40 + 3], dtype=torch.int64)
    bits = philox_uniform(1234, offsets).view(torch.int32).tolist()
    assert bits == _PINNED_1234



def test_uniform_range_shape_dtype():
    counters = torch.arange(4096, dtype=torch.int32).reshape(8, 512)
    u = philox_uniform(3, counters)
    assert u.shape == (8, 512) and u.dtype == torch.float32
    assert (u >= 0).all() and (u < 1).all()
    assert torch.equal(u, philox_uniform(3, counters.to(torch.int64)))
    assert not torch.equal(u, philox_uniform(4, counters))


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_fraction_within_five_sigma(p):
    n = 1 << 20
    params = AttentionParams(softmax_scale=1.0, dropout_p=p, seed=2024, offset=2**33 + 17)
    keep = dropout_keep(params, 0, 0, 0, torch.arange(n), 1, 1, n)
    sigma = (p * (1 - p) / n) ** 0.5
    assert abs(keep.double().mean().item() - (1 - p)) < 5 * sigma


def test_uniform_histogram_flat():
    n, bins = 1 << 20, 16
    u = philox_uniform(99, torch.arange(n, dtype=torch.int64) + 2**35)
    counts = torch.histc(u, bins=bins, min=0.0, max=1.0)
    expected = n / bins
    sigma = (expected * (1 - 1 / bins)) ** 0.5
    assert (counts - expected).abs().max().item() < 5 * sigma


def test_dropout_counters_layout():
    params = AttentionParams(softmax_scale=1.0, offset=2**36 + 3)
    b, h, sq, sk = 2, 3, 21, 40
    counters = dropout_counters(params, torch.arange(b)[:, None, None, None],
                                torch.arange(h)[None, :, None, None], torch.arange(sq)[:, None],
                                torch.arange(sk)[None, :], h, sq, sk)
    assert counters.shape == (b, h, sq, sk) and counters.dtype == torch.int64
    # Every call serves the queries {i, i+8} x keys {j, j+1, j+8, j+9} of a 16 x 16 block.
    i, j = torch.arange(32)[:, None], torch.arange(48)[None, :]
    full = dropout_counters(params, 0, 0, i, j, 1, 32, 48)
    partner_q = (i // 16) * 16 + (i % 16 + 8) % 16
    partner_k = (j // 16) * 16 + (j % 16 + 8) % 16
    assert torch.equal(full, full[partner_q.squeeze(1)])
    assert torch.equal(full, full[:, partner_k.squeeze(0)])
    assert torch.equal(full, full[:, (j ^ 1).squeeze(0)])
    _, uses = full.unique(return_counts=True)
    assert (uses == POSITIONS_PER_CALL).all()
    # Row-major over (batch, head, row group) then key group, from the offset; calls of different
    # heads and batch entries never collide, and stay below the batch stride.
    stride = dropout_stride_b(h, sq, sk)
    assert stride == h * 2 * 8 * 3 * 4
    assert int(counters.min()) == params.offset
    assert int(counters.max()) < params.offset + b * stride
    per_bh = counters.flatten(2)
    for x in range(b * h):
        for y in range(x):
            assert not set(per_bh.flatten(0, 1)[x].tolist()) & set(per_bh.flatten(0, 1)[y].tolist())
    assert int(dropout_counters(params, 1, 2, 19, 27, h, sq, sk)) == \
        params.offset + ((1 * h + 2) * 16 + (8 + 3)) * 12 + (4 + 1)


def test_dropout_uses_all_four_words_in_16_bit_halves():
    counter = torch.tensor([2**35 + 11], dtype=torch.int64)
    words = philox_4x32(counter & 0xFFFFFFFF, counter >> 32, torch.zeros(1, dtype=torch.int64),
                        torch.zeros(1, dtype=torch.int64), 5, 0)
    halves = [int(w) >> shift & 0xFFFF for w in words for shift in (0, 16)]
    # (query, key) of each (word, half): word 2 * (i // 8 % 2) + j // 8 % 2, half j % 2
    q_idx = torch.tensor([0, 0, 0, 0, 8, 8, 8, 8])
    kv_idx = torch.tensor([0, 1, 8, 9, 0, 1, 8, 9])
    got = dropout_uniform16(5, counter.expand(8), q_idx, kv_idx)
    assert got.tolist() == halves


def test_dropout_keep_is_uniform_threshold():
    params = AttentionParams(softmax_scale=1.0, dropout_p=0.3, seed=11, offset=5)
    assert params.dropout_p == 19661 / 65536                          # held in units of 2**-16
    kv = torch.arange(1000)
    keep = dropout_keep(params, 1, 2, 3, kv, 4, 8, 1000)
    u = dropout_uniform16(11, dropout_counters(params, 1, 2, 3, kv, 4, 8, 1000), 3, kv)
    assert keep.dtype == torch.bool
    assert torch.equal(keep, u >= 19661)


def test_dropout_p_resolution():
    for p, units in [(0.1, 6554), (0.5, 32768), (1e-9, 1), (0.99999999, 65535)]:
        assert AttentionParams(softmax_scale=1.0, dropout_p=p).dropout_p == units / 65536
    assert AttentionParams(softmax_scale=1.0, dropout_p=0.0).dropout_p == 0.0


def test_draw_seed_offset():
    torch.manual_seed(123)
    first = draw_seed_offset("cpu")
    second = draw_seed_offset("cpu")
    torch.manual_seed(123)
    assert draw_seed_offset(torch.device("cpu")) == first        # manual_seed reproduces
    assert first != second                                         # consecutive calls differ
    for seed, offset in (first, second):
        assert type(seed) is int and type(offset) is int
        assert 0 <= seed < 2**31 and 0 <= offset < 2**40
