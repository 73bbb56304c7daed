"""Compile flashtile's kernels for Hopper (sm_90a) on a machine without a GPU, and read the result.

Triton ships ``ptxas`` and ``cuobjdump``, so the whole pipeline up to SASS runs on the CPU: this
tool drives the public API with CPU tensors, a stand-in driver reports an H100/H200 target, each
kernel launch compiles (never runs) with the config given here, and the report lists per kernel:
registers and spills (``ptxas -v``), shared memory, and SASS instruction counts that matter
(``HGMMA`` = wgmma tensor-core ops, ``HMMA`` = the older mma path, ``LDL``/``STL`` = local-memory
spill traffic, ``RED``/``ATOM`` = atomics), plus TTGIR layout conversions and shared-memory
allocations. ``--dump DIR`` keeps ttgir/ptx/sass for reading; ``--loops`` adds each kernel's tile
loops, the instructions a warp issues per trip by kind (the issue, MUFU and tensor budget of a
tile: docs/perf.md, session 25). No GPU time is spent.

    python3 scripts/inspect_kernels.py --d 128 --causal --fwd 128,64,8,3 --dkdv 64,128,8,3 \\
        --dq 128,64,8,3 [--deterministic] [--dump /tmp/k]
    python3 scripts/inspect_kernels.py --gluon --d 128 [--causal] [--heads 16 --kv-heads 4]
    FLASHTILE_GLUON_FWD_CONFIG=64,32,4,240 python3 scripts/inspect_kernels.py --gluon --d 256

``--gluon`` compiles the Gluon kernels (``kernels/fwd_hopper.py``, ``kernels/bwd_hopper.py``,
``kernels/dq_hopper.py``, ``kernels/bwd256_hopper.py``, ``kernels/dq256_hopper.py``;
configs from ``FLASHTILE_GLUON_FWD_CONFIG``/``_BWD_CONFIG``/``_DQ_CONFIG``/``_BWD256_CONFIG``/
``_DQ256_CONFIG`` or their defaults; a backward kernel without a config for ``--d`` is
skipped: d=256 compiles the forward and the d=256 dK/dV and dQ kernels, d=96 the forward, the
dK/dV kernel (without its one pass) and the dQ kernel in split tiles) and exits 1 if ptxas
spills or warns of a performance loss in any (its C75xx warnings: wgmma serialised), 0
otherwise. ``--one-pass --d 128`` compiles the queries-as-rows one-pass kernel
(``kernels/bwdrows_hopper.py``, the default there, listed as ``gluon dkdv rows``);
``FLASHTILE_GLUON_BWD_ROWS=0`` compiles the transposed ``gluon dkdv+dq (one pass)`` instead.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)        # compile for the GPU, never interpret

import torch                                                   # noqa: E402
import triton                                                  # noqa: E402
from triton.backends.compiler import GPUTarget                 # noqa: E402
from triton.runtime import driver                              # noqa: E402

BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


class HopperStandIn:
    """Just enough of Triton's CUDA driver to compile for sm_90 without a device."""

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        return torch.device("cpu")


def _config(text):
    m, n, w, s, *reg = (int(x) for x in text.split(","))
    return triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s,
                         maxnreg=reg[0] if reg else None)


class Capture:
    """Replaces a kernel's launcher (``flashtile.kernels.common.TunedLaunch``):
    ``launch[grid](*args, **kw)`` compiles the kernel with ``config`` and never runs it."""

    def __init__(self, name, tuner, config, sink):
        self.name, self.fn, self.config, self.sink = name, tuner.fn, config, sink

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            kernel = self.fn.run(*args, grid=grid, warmup=True, **kwargs,
                                 **self.config.all_kwargs())
            self.sink.append((self.name, kernel))
        return launch


def ptxas_report(ptx: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.ptx"
        path.write_text(ptx)
        r = subprocess.run([str(BIN / "ptxas"), "-arch=sm_90a", "-v", str(path), "-o",
                            str(Path(tmp) / "k.cubin")], capture_output=True, text=True)
        return " ".join(line.strip() for line in r.stderr.splitlines()
                        if "registers" in line or "spill" in line or "Performance Loss" in line)


def sass_of(cubin: bytes) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        return subprocess.run([str(BIN / "cuobjdump"), "-sass", str(path)], capture_output=True,
                              text=True).stdout


# The opcodes a tile loop's budget is read by (``--loops``): tensor, MUFU, the FP32 pipe, the
# conversions and moves of P, reductions across threads, and the uniform datapath (``U...``)
LOOP_OPS = ("HGMMA", "MUFU.EX2", "FFMA", "FADD", "FMUL", "FMNMX", "FSEL", "F2FP", "PRMT", "SHFL",
            "ISETP", "IMAD", "SYNCS", "BAR", "WARPGROUP")


def tile_loops(sass: str) -> list[str]:
    """The innermost loops of ``sass`` that issue wgmma (the tile loops), one line each: the
    loop's address range, its instruction count (what one warp issues per trip) and its
    counts of :data:`LOOP_OPS` and of uniform-datapath instructions. A loop is a backward
    branch's range; innermost: it holds no other. Per trip the tensor cores need the loop's
    HGMMA work, the issue slots its instruction count per warp of each consumer, the MUFU 8
    cycles per ex2 (16 results a cycle per SM)."""
    code = [(int(a, 16), text.strip()) for a, text in
            re.findall(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", sass, re.M)]
    spans = [(int(m.group(1), 16), addr) for addr, text in code
             if (m := re.search(r"BRA (0x[0-9a-f]+)", text)) and int(m.group(1), 16) < addr]
    lines = []
    for lo, hi in sorted(set(spans)):
        if any(lo <= a and b <= hi and (a, b) != (lo, hi) for a, b in spans):
            continue                                        # (holds an inner loop)
        ops = [re.sub(r"^@!?U?P\w+\s+", "", text).split()[0] for a, text in code
               if lo <= a <= hi]
        count = collections.Counter(op if op.startswith("MUFU") else op.split(".")[0]
                                    for op in ops)
        if not count["HGMMA"]:
            continue
        uniform = sum(v for op, v in count.items() if op.startswith("U"))
        lines.append(f"   loop {lo:#x}-{hi:#x}: {len(ops)} instructions; "
                     + ", ".join(f"{k} {count[k]}" for k in LOOP_OPS) + f", uniform {uniform}")
    return lines


def summarize(name, kernel, dump: Path | None, loops: bool = False) -> tuple[str, str]:
    """Print the kernel's ptxas report and instruction counts (and with ``loops`` its tile
    loops' budgets, :func:`tile_loops`); returns (SASS, report)."""
    sass = sass_of(kernel.asm["cubin"])
    ops = collections.Counter(re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)",
                                         sass, re.M))
    ttgir = kernel.asm["ttgir"]
    report = ptxas_report(kernel.asm["ptx"])
    print(f"== {name}: {report}; shared {kernel.metadata.shared} B")
    keys = ("HGMMA", "HMMA", "LDL", "STL", "RED", "ATOM", "LDSM", "STS", "LDS", "LDGSTS",
            "UTMALDG", "BAR", "SYNCS")
    print("   SASS: " + ", ".join(f"{k} {sum(v for op, v in ops.items() if op.startswith(k))}"
                                  for k in keys))
    print(f"   TTGIR: convert_layout {ttgir.count('ttg.convert_layout')}, local_alloc "
          f"{ttgir.count('ttg.local_alloc')}, warp_group_dot {ttgir.count('warp_group_dot ')}, "
          f"async_copy {ttgir.count('async_copy_global_to_local')}, loops {ttgir.count('scf.for')}")
    if loops:
        print("\n".join(tile_loops(sass)))
    if dump:
        dump.mkdir(parents=True, exist_ok=True)
        for ext in ("ttgir", "ptx"):
            (dump / f"{name}.{ext}").write_text(kernel.asm[ext])
        (dump / f"{name}.sass").write_text(sass)
    return sass, report


class GluonCapture:
    """Replaces a Gluon kernel: ``kernel[grid](*args, **kw)`` compiles it, never runs it."""

    def __init__(self, name, kernel, sink):
        self.name, self.kernel, self.sink = name, kernel, sink

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.sink.append((self.name, self.kernel.warmup(*args, grid=grid, **kwargs)))
        return launch


def has_config(module, d: int) -> bool:
    """Whether the Gluon kernel ``module`` has a config for head dim d (its own, or one given
    by its ``FLASHTILE_GLUON_*_CONFIG`` override); if not, it is skipped, with a note
    (bwd_hopper and dq_hopper cover d 64/96/128, bwd256_hopper d=256 alone)."""
    try:
        module.config(d)
    except KeyError:
        print(f"(skipped {module.__name__.rsplit('.', 1)[-1]}: no config for d={d})")
        return False
    return True


def inspect_gluon(args, dtype) -> int:
    """The Gluon forward, dK/dV (and with ``--one-pass`` the one-pass dK/dV+dQ), and dQ kernels
    at one head dim and mask; 1 if any spills or ptxas warns that it serialised the wgmmas."""
    import flashtile
    from flashtile.kernels import (bwd256_hopper, bwd_hopper, bwdrows_hopper, dq256_hopper,
                                   dq_hopper, fwd_hopper)
    sink = []
    fwd_hopper._fwd_hopper_kernel = GluonCapture("gluon fwd (ws)", fwd_hopper._fwd_hopper_kernel,
                                                 sink)
    bwd_hopper._dkdv_hopper_kernel = GluonCapture("gluon dkdv", bwd_hopper._dkdv_hopper_kernel,
                                                  sink)
    bwdrows_hopper._dkdv_rows_kernel = GluonCapture("gluon dkdv rows",
                                                    bwdrows_hopper._dkdv_rows_kernel, sink)
    dq_hopper._dq_hopper_kernel = GluonCapture("gluon dq", dq_hopper._dq_hopper_kernel, sink)
    bwd256_hopper._dkdv256_kernel = GluonCapture("gluon dkdv256", bwd256_hopper._dkdv256_kernel,
                                                 sink)
    dq256_hopper._dq256_kernel = GluonCapture("gluon dq256", dq256_hopper._dq256_kernel, sink)
    heads = args.heads or 2048 // args.d
    q, dout = (torch.randn(1, args.seqlen, heads, args.d, dtype=dtype) for _ in range(2))
    k, v = (torch.randn(1, args.seqlen, args.kv_heads or heads, args.d, dtype=dtype)
            for _ in range(2))
    params, _ = flashtile.interface._flash_params(q, k, v, 0.0, None, args.causal, (-1, -1), 0.0,
                                                  None, False)
    lse, dsum = torch.zeros(1, heads, args.seqlen), torch.zeros(1, heads, args.seqlen)
    fwd_hopper.forward(q, k, v, params, torch.empty_like(q), lse)

    def parts(heads):       # (dK/dV per query head where FLASHTILE_GLUON_BWD_EXPAND says so)
        return tuple(torch.empty(1, args.seqlen, heads, args.d, dtype=dtype) for _ in range(2))

    def count(one_pass):    # (items claimed from a count: FLASHTILE_GLUON_BWD_DYNAMIC=1)
        return (torch.zeros(1, dtype=torch.int32)
                if bwd_hopper.claims_items(q, k, params, one_pass) else None)

    if has_config(bwd_hopper, args.d):
        bwd_hopper.dkdv(q, k, v, dout, lse, dsum,
                        *parts(bwd_hopper.dkdv_heads(q, k, params, False)), params,
                        count=count(False))
        if args.one_pass and not bwd_hopper.has_one_pass(args.d):
            print(f"(skipped the one-pass dkdv: none at d={args.d})")
        elif args.one_pass:
            bwd_hopper._dkdv_hopper_kernel.name = "gluon dkdv+dq (one pass)"
            heads = bwd_hopper.dkdv_heads(q, k, params, True)
            # (or added into float32 accumulators: FLASHTILE_GLUON_BWD_EXPAND_ADD=1)
            add_to = ((torch.zeros(k.shape), torch.zeros(v.shape))
                      if bwd_hopper.adds_dkdv(q, k, heads, True) else None)
            out = (torch.empty_like(k),) * 2 if add_to else parts(heads)
            bwd_hopper.dkdv(q, k, v, dout, lse, dsum, *out, params,
                            dq_acc=torch.zeros(bwd_hopper.dq_acc_shape(q)), add_to=add_to,
                            count=count(True))
    if has_config(dq_hopper, args.d):
        dq_hopper.dq(q, k, v, dout, lse, dsum, torch.empty_like(q), params)
    if args.d == 256:           # (configs of d=256 alone: not noted as skipped elsewhere)
        bwd256_hopper.dkdv(q, k, v, dout, lse, dsum, torch.empty_like(k), torch.empty_like(v),
                           params)
        dq256_hopper.dq(q, k, v, dout, lse, dsum, torch.empty_like(q), params)
    clean = True
    for name, kernel in sink:
        sass, report = summarize(name, kernel, args.dump, args.loops)
        print(f"   wgmma waits: {sass.count('WARPGROUP.DEPBAR')} for "   # (serialised: one per
              f"{len(re.findall(r'HGMMA', sass))} HGMMA")                 # HGMMA)
        spilled = re.search(r"[1-9]\d* bytes spill", report) is not None
        clean &= not spilled and "Performance Loss" not in report
    print("ptxas: no spills, no serialised wgmma" if clean else
          "ptxas: SPILLS or serialised wgmma (see above)")
    return 0 if clean else 1


def inspect_decode(args, dtype, sink) -> int:
    import flashtile
    from flashtile import kvcache
    from flashtile.kernels import decode
    n, w, st = (int(x) for x in args.decode_config.split(","))
    cfg = triton.Config({"BLOCK_N": n}, num_warps=w, num_stages=st)
    decode._decode_launch = Capture("decode", decode._decode, cfg, sink)
    kvcache.resolve = lambda device: "triton"
    b, hq, hkv, cache = 4, 32, 8, 4096
    q = torch.randn(b, 1, hq, args.d, dtype=dtype)
    lens = torch.full((b,), cache - 8, dtype=torch.int32)
    kwargs = {}
    if args.decode == "paged":
        pages = b * cache // args.page
        kc = torch.randn(pages, args.page, hkv, args.d, dtype=dtype)
        kwargs["block_table"] = torch.arange(pages, dtype=torch.int32).reshape(b, -1)
    else:
        kc = torch.randn(b, cache, hkv, args.d, dtype=dtype)
    try:
        flashtile.flash_attn_with_kvcache(q, kc, torch.randn_like(kc), cache_seqlens=lens,
                                          num_splits=args.decode_splits, **kwargs)
    except Exception as e:                                   # noqa: BLE001
        if not sink:
            raise
        print(f"(stopped after the captured launch: {type(e).__name__})")
    for name, kernel in sink:
        summarize(name, kernel, args.dump, args.loops)
    return 0


def main() -> int:
    os.environ["FLASHTILE_LAUNCH_PLANS"] = "0"     # every launch through the captured launchers
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--seqlen", type=int, default=1024)
    p.add_argument("--heads", type=int, default=0, help="default 2048 / d (the anchors' shape)")
    p.add_argument("--kv-heads", type=int, default=0,
                   help="with --gluon: K/V heads (GQA/MQA; default: --heads)")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--deterministic", action="store_true", help="two-pass dQ")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    p.add_argument("--fwd", default="128,64,8,3",
                   help="tile-level config M,N,warps,stages[,maxnreg] (the same for --dkdv, --dq)")
    p.add_argument("--dkdv", default="64,128,8,3")
    p.add_argument("--dq", default="128,64,8,3")
    p.add_argument("--dropout", type=float, default=0.0, help="dropout_p (0: none)")
    p.add_argument("--bias", action="store_true", help="an additive float mask (b, 1, s, s)")
    p.add_argument("--sparse", type=float, default=0.0,
                   help="compile the block-sparse path: a random 128x128 BlockMask of this density")
    p.add_argument("--decode", choices=("contiguous", "paged"),
                   help="compile the KV-cache decoding kernel instead (q_len 1, hq/hkv 32/8)")
    p.add_argument("--decode-config", default="64,4,3", help="BLOCK_N,warps,stages")
    p.add_argument("--decode-splits", type=int, default=1,
                   help="num_splits (> 1: the kernel writes partials for the combine kernel)")
    p.add_argument("--page", type=int, default=256)
    p.add_argument("--gluon", action="store_true",
                   help="compile the Gluon forward, dK/dV and dQ kernels instead; exit 1 on spills "
                        "or serialised wgmma")
    p.add_argument("--one-pass", action="store_true",
                   help="with --gluon: also the one-pass dK/dV kernel that adds dQ (the "
                        "default where bwd_hopper.one_pass measured it ahead)")
    p.add_argument("--dump", type=Path)
    p.add_argument("--loops", action="store_true",
                   help="per kernel, its tile loops' instruction budgets (tile_loops)")
    args = p.parse_args()

    driver.set_active(HopperStandIn())
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    if args.gluon:
        return inspect_gluon(args, dtype)
    import flashtile
    from flashtile.kernels import bwd, fwd
    sink = []
    fwd._fwd_launch = Capture("fwd", fwd._fwd, _config(args.fwd), sink)
    bwd._dkdv_launch = Capture("dkdv", bwd._dkdv, _config(args.dkdv), sink)
    bwd._dq_launch = Capture("dq", bwd._dq, _config(args.dq), sink)
    bwd._bwd_preprocess = Capture("preprocess", type("T", (), {"fn": bwd._bwd_preprocess})(),
                                  triton.Config({}, num_warps=4, num_stages=1), [])

    if args.decode:
        return inspect_decode(args, dtype, sink)
    heads = args.heads or 2048 // args.d
    q, k, v = (torch.randn(1, args.seqlen, heads, args.d, dtype=dtype) for _ in range(3))
    params, _ = flashtile.interface._flash_params(q, k, v, args.dropout, None, args.causal,
                                                  (-1, -1), 0.0, None, args.deterministic)
    if args.dropout:
        params = params.with_(seed=1, offset=0)
    if args.bias:
        params = params.with_(attn_bias=torch.randn(1, 1, args.seqlen, args.seqlen, dtype=dtype),
                              bottom_right=False)
    if args.sparse:
        nb = -(-args.seqlen // 128)
        layout = flashtile.masks.random_block_layout(nb, nb, args.sparse, seed=0)
        params = params.with_(block_mask=flashtile.BlockMask.from_layout(
            layout, args.seqlen, args.seqlen, BLOCK_SIZE=128))
    out, lse = torch.empty_like(q), torch.empty(1, heads, args.seqlen)
    fwd.forward(q, k, v, params)
    try:
        bwd.backward(torch.randn_like(q), q, k, v, out, lse, params)
    except Exception as e:             # the launches after the captured ones need real outputs
        if not sink or sink[-1][0] == "fwd":
            raise
        print(f"(backward stopped after the captured launches: {type(e).__name__})")
    for name, kernel in sink:
        summarize(name, kernel, args.dump, args.loops)
    return 0


if __name__ == "__main__":
    sys.exit(main())
