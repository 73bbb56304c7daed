"""Figure 2 of the FlashAttention paper (Dao et al., 2022) on the present GPU, and the seed
essay's numerical check.

- left: GPT-2 medium attention (batch 64, 16 heads, N 1024, d 64), forward+backward: FLOPs, HBM
  traffic and runtime, standard vs flashtile, beside the paper's A100 numbers and the H200
  anchors (``anchors/h200-2026-11-29.json``, ``extra.figure2_gpt2_medium_fwd_bwd``);
- middle: forward block size 64...512: the model's traffic and the measured runtime (the kernels
  take ``FLASHTILE_FWD_BLOCK_M`` / ``FLASHTILE_FWD_BLOCK_N``; whether they honoured it is
  checked from the launch grid);
- right: block-sparse forward+backward runtime vs fraction of non-zero blocks at seqlen 4k
  (``flex_attention`` with a random ``BlockMask.from_layout`` of 128 x 128 blocks, on the GPU)
  beside the model's traffic and the FlexAttention anchor;
- the essay table: N = 64/128/100, d = 16/32/24, block 8/16/7, max error of the chunked
  online-softmax forward (``flashtile.reference.tiled``) vs ``softmax(Q K^T) V`` in float64.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Optional

from .model import Hardware, TileConfig, Workload, block_sweep, density_sweep, estimate

GPT2_MEDIUM = dict(batch=64, nheads=16, seqlen_q=1024, headdim=64)
BLOCK_SIZES = (64, 128, 256, 512)
SWEEP_BLOCK_N = 64
SPARSE_WORKLOAD = dict(batch=16, nheads=8, seqlen_q=4096, headdim=64)
DENSITIES = (1.0, 0.8, 0.62, 0.43, 0.23)

# Dao et al. 2022, Figure 2 left (A100, GPT-2 medium, forward+backward).
PAPER_A100 = {
    "standard": {"gflops": 66.6, "hbm_gb": 40.3, "ms": 41.7},
    "FlashAttention": {"gflops": 75.2, "hbm_gb": 4.4, "ms": 7.3},
}
# anchors/h200-2026-11-29.json, extra.figure2_gpt2_medium_fwd_bwd: one fwd+bwd step, bf16,
# ncu dram bytes read+write, median do_bench time.
H200_ANCHORS = {
    "eager": {"hbm_gb": 40.09, "ms": 10.73},
    "SDPA flash (FlashAttention-2)": {"hbm_gb": 3.27, "ms": 4.06},
    "SDPA cuDNN": {"hbm_gb": 2.77, "ms": 2.55},
    "FlashAttention-4": {"hbm_gb": 2.76, "ms": 2.33},
}
# anchors: extra.flex_block_sparse_s4k_d64_h8_b16_fwdbwd_ms (torch.compile(flex_attention)).
FLEX_BLOCK_SPARSE_MS = {1.00: 6.716, 0.62: 4.227, 0.43: 3.041, 0.23: 1.792}

ESSAY_CASES = ((64, 16, 8), (128, 32, 16), (100, 24, 7))


# --------------------------------------------------------------------------------------------
# The essay's numerical table
# --------------------------------------------------------------------------------------------

def essay_table(softmax_scale: Optional[float] = None, seed: int = 0) -> dict:
    """Max abs error of the chunked forward vs ``softmax(Q K^T) V`` (float64), fp32 inputs.

    ``softmax_scale=None`` uses the usual ``1/sqrt(d)`` (errors ~1e-7); ``1.0`` is the literal
    unscaled ``softmax(Q K^T) V``, whose sharper softmax loses more (~3e-6 at N=128, d=32, as
    plain fp32 PyTorch does). Also reports plain fp32 PyTorch's error against the same float64
    answer.
    Returns ``{"rows": [...]}`` or ``{"pending": reason}`` while the chunked path is missing.
    """
    import torch

    from ..params import AttentionParams
    from ..reference.dense import attention_reference
    try:
        from ..reference import tiled
    except ImportError as exc:
        return {"pending": f"flashtile.reference.tiled is not available yet ({exc})"}
    rows = []
    for n, d, block in ESSAY_CASES:
        gen = torch.Generator(device="cpu").manual_seed(seed + n)
        q, k, v = (torch.randn(1, n, 1, d, generator=gen, dtype=torch.float32, device="cpu")
                   for _ in range(3))                                   # (b, s, h, d)
        scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d)
        params = AttentionParams(softmax_scale=scale)
        out, lse = tiled.forward(q, k, v, params, chunk_size=block)
        ref, ref_lse = attention_reference(q, k, v, params)             # float64
        plain, _ = attention_reference(q, k, v, params, dtype=torch.float32)
        rows.append({"N": n, "d": d, "block": block,
                     "max_err_tiled": float((out.double() - ref).abs().max()),
                     "max_err_lse": float((lse.double() - ref_lse.double()).abs().max()),
                     "max_err_plain_fp32": float((plain.double() - ref).abs().max())})
    return {"rows": rows, "softmax_scale": softmax_scale}


# --------------------------------------------------------------------------------------------
# Figure 2
# --------------------------------------------------------------------------------------------

def measure_block_sparse(ws: Workload, densities, dtype_name: str, seed: int = 0) -> list[dict]:
    """Forward+backward time of block-sparse ``flex_attention`` at each density (GPU only).

    Random block layouts shared by batch and heads, 128 x 128 blocks, every listed block full
    (no mask evaluation), so the time follows the work the lists allow. Median of do_bench.
    """
    import torch
    import triton

    from ..flex import flex_attention
    from ..masks import BlockMask, random_block_layout

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype_name]
    shape = (ws.batch, ws.nheads, ws.seqlen_q, ws.headdim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True)
               for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=dtype)
    nblocks = -(-ws.seqlen_q // 128)
    rows = []
    for density in densities:
        layout = random_block_layout(nblocks, nblocks, density, seed=seed)
        bm = BlockMask.from_layout(layout.to("cuda"), ws.seqlen_q, ws.seqlen_q, BLOCK_SIZE=128)

        def step():
            flex_attention(q, k, v, block_mask=bm).backward(dout)

        ms = triton.testing.do_bench(step, warmup=25, rep=100, return_mode="median")
        rows.append({"density": density, "actual_density": float(bm.density()), "ms": ms})
    return rows


def judge_honoured(rows: list[dict], w: Workload) -> str:
    """Did the kernels take the forced ``BLOCK_M``? Decided from the forward's launch grid.

    ``rows``: ``{"block_m", "kernels": [{"grid", "us"}...]}`` per block size. "honoured" when the
    longest kernel's program count is ``ceil(sq / BLOCK_M) * b * h`` for every block size;
    "not honoured" when it does not change with the block size; otherwise "unclear".
    """
    counts = {}
    for row in rows:
        kernels = [k for k in row.get("kernels") or [] if k.get("grid")]
        if not kernels:
            return "unclear (no launch grid recorded)"
        main = max(kernels, key=lambda k: k.get("us") or 0)
        grid = main["grid"]
        counts[row["block_m"]] = int(math.prod(int(x) for x in grid))
    if not counts:
        return "unclear (no launch grid recorded)"
    expected = {bm: -(-w.seqlen_q // bm) * w.batch * w.nheads for bm in counts}
    if all(counts[bm] == expected[bm] for bm in counts):
        return "honoured"
    if len(set(counts.values())) == 1 and len(counts) > 1:
        return "not honoured"
    return f"unclear (programs per block size: {counts})"


def figure2(hardware: Hardware, tiles: TileConfig, dtype_name: str = "bf16",
            measure: bool = False, ncu: Optional[str] = None, log=print,
            fixed_tiles: bool = False) -> dict:
    """Compute (and, on a GPU, measure) the three panels. Returns a JSON-ready dict.

    When measuring, the left panel's model uses the block sizes the kernels actually launched
    (their autotuners' choice) unless ``fixed_tiles``."""
    from .measure import measure_workload, run_child, step_spec
    dtype_bytes = 4 if dtype_name == "fp32" else 2
    w = Workload(**GPT2_MEDIUM, dtype_bytes=dtype_bytes)
    left = {"workload": w.label, "model": None, "tiles": asdict(tiles), "tiles_source": "given",
            "paper_a100": PAPER_A100, "h200_anchors": H200_ANCHORS, "measured": None,
            "ncu": None}
    if measure:
        log("measuring GPT-2 medium forward+backward (standard, flashtile)...")
        left["measured"] = measure_workload(w, dtype_name)
        launched = left["measured"].get("flashtile", {}).get("tiles")
        if launched and not fixed_tiles:
            tiles = TileConfig(**launched)
            left["tiles"], left["tiles_source"] = launched, "launched by the kernels"
        if ncu:
            log("profiling one forward+backward step of each under Nsight Compute...")
            left["ncu"] = run_child({"mode": "ncu", "steps": [
                step_spec("standard", w, dtype_name), step_spec("flashtile", w, dtype_name)]},
                ncu=ncu)
    left["model"] = estimate(w, hardware, tiles).to_dict()

    middle = {"workload": w.label + " forward", "block_n": SWEEP_BLOCK_N,
              "model": block_sweep(w, BLOCK_SIZES, hardware, tiles, SWEEP_BLOCK_N),
              "honoured": None, "measured": None}
    if measure:
        log("block-size sweep: one child process per BLOCK_M ...")
        measured = []
        for bm in BLOCK_SIZES:
            env = {"FLASHTILE_FWD_BLOCK_M": bm, "FLASHTILE_FWD_BLOCK_N": SWEEP_BLOCK_N}
            res = run_child({"mode": "time", "steps": [step_spec("flashtile", w, dtype_name,
                                                                 "fwd")]}, env=env, timeout=240)
            step = res["steps"][0] if res["steps"] else {}
            row = {"block_m": bm, "ms": step.get("ms"), "kernels": step.get("kernels"),
                   "error": step.get("error") or res.get("error")}
            if ncu:
                prof = run_child({"mode": "ncu", "steps": [step_spec("flashtile", w, dtype_name,
                                                                     "fwd")]}, env=env, ncu=ncu)
                pstep = prof["steps"][0] if prof["steps"] else {}
                row.update({"ncu_dram": pstep.get("dram"), "ncu_l2": pstep.get("l2"),
                            "ncu_error": pstep.get("error") or prof.get("error")})
            measured.append(row)
        middle["measured"] = measured
        ok = [row for row in measured if not row.get("error")]
        middle["honoured"] = judge_honoured(ok, w) if ok else "unclear (every run failed)"

    ws = Workload(**SPARSE_WORKLOAD, dtype_bytes=dtype_bytes)
    right = {"workload": ws.label + " forward+backward",
             "model": density_sweep(ws, DENSITIES, hardware, tiles),
             "flex_anchor_ms": {str(k): v for k, v in FLEX_BLOCK_SPARSE_MS.items()},
             "measured": None}
    if measure:
        log("block-sparse: flex_attention fwd+bwd over random block layouts ...")
        try:
            right["measured"] = measure_block_sparse(ws, DENSITIES, dtype_name)
        except Exception as error:  # noqa: BLE001 - reported, never invented
            right["measured"] = f"failed: {type(error).__name__}: {error}"
    return {"left": left, "middle": middle, "right": right}


# --------------------------------------------------------------------------------------------
# Plot
# --------------------------------------------------------------------------------------------

def plot_figure2(fig2: dict, path: str) -> Optional[str]:
    """Four panels (HBM GB, runtime, block size, density) as a PNG. Returns the path, or None
    when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker  # noqa: F401
    except ImportError:
        return None
    left, middle, right = fig2["left"], fig2["middle"], fig2["right"]
    model = left["model"]["bytes"]
    fig, axes = plt.subplots(1, 4, figsize=(19, 4.6))

    # (a) HBM traffic
    names, gbs, colors = [], [], []

    def bar(name, gb, color):
        if gb is not None:
            names.append(name)
            gbs.append(gb)
            colors.append(color)
    bar("standard\nmodel", (model["standard_fwd"] + model["standard_bwd"]) / 1e9, "#c44e52")
    bar("flashtile\nmodel (DRAM)", (model["tiled_dram_fwd"] + model["tiled_dram_bwd"]) / 1e9,
        "#4c72b0")
    bar("flashtile\ntile loads", (model["tiled_tile_loads_fwd"] + model["tiled_tile_loads_bwd"])
        / 1e9, "#8eaad8")
    ncu = left.get("ncu") or {}
    for step in ncu.get("steps", []):
        if step.get("dram") is not None:
            bar(f"{step['impl']}\nncu", step["dram"] / 1e9,
                "#dd8452" if step["impl"] == "standard" else "#55a868")
    for name, anchor in H200_ANCHORS.items():
        bar(name.replace(" (", "\n("), anchor["hbm_gb"], "#999999")
    bar("paper A100\nstandard", PAPER_A100["standard"]["hbm_gb"], "#dddddd")
    bar("paper A100\nFlashAttn", PAPER_A100["FlashAttention"]["hbm_gb"], "#dddddd")
    ax = axes[0]
    ax.bar(range(len(gbs)), gbs, color=colors)
    ax.set_xticks(range(len(gbs)), names, fontsize=6, rotation=60, ha="right")
    ax.set_yscale("log")
    ax.set_ylim(1, max(gbs) * 2)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_ylabel("HBM read + write (GB)")
    ax.set_title("GPT-2 medium fwd+bwd: HBM traffic")
    for i, gb in enumerate(gbs):
        ax.text(i, gb, f"{gb:.1f}" if gb >= 10 else f"{gb:.2f}", ha="center", va="bottom",
                fontsize=6)

    # (b) runtime
    ax = axes[1]
    names, ms, colors = [], [], []
    meas = left.get("measured") or {}
    for impl, color in (("standard", "#c44e52"), ("flashtile", "#4c72b0")):
        if meas.get(impl, {}).get("ms") is not None:
            names.append(f"{impl}\n(this GPU)")
            ms.append(meas[impl]["ms"])
            colors.append(color)
    for name, anchor in H200_ANCHORS.items():
        names.append(name.replace(" (", "\n("))
        ms.append(anchor["ms"])
        colors.append("#999999")
    for name, vals in PAPER_A100.items():
        names.append(f"paper A100\n{name}")
        ms.append(vals["ms"])
        colors.append("#dddddd")
    ax.bar(range(len(ms)), ms, color=colors)
    ax.set_xticks(range(len(ms)), names, fontsize=6, rotation=60, ha="right")
    ax.set_ylabel("runtime (ms)")
    ax.set_title("GPT-2 medium fwd+bwd: runtime" + ("" if meas else " (anchors only)"))
    for i, t in enumerate(ms):
        ax.text(i, t, f"{t:.2f}", ha="center", va="bottom", fontsize=6)

    # (c) block size
    ax = axes[2]
    bms = [row["block_m"] for row in middle["model"]]
    xs = range(len(bms))
    ax.bar([x - 0.2 for x in xs], [row["tile_loads_fwd"] / 1e9 for row in middle["model"]],
           width=0.4, color="#8eaad8", label="model: tile loads")
    ax.bar([x + 0.2 for x in xs], [row["dram_fwd"] / 1e9 for row in middle["model"]],
           width=0.4, color="#4c72b0", label="model: DRAM")
    if middle.get("measured"):
        l2 = [row.get("ncu_l2") for row in middle["measured"]]
        if any(v is not None for v in l2):
            ax.plot(list(xs), [v / 1e9 if v is not None else float("nan") for v in l2], "o",
                    color="#55a868", label="ncu: L2 from SMs")
        dram = [row.get("ncu_dram") for row in middle["measured"]]
        if any(v is not None for v in dram):
            ax.plot(list(xs), [v / 1e9 if v is not None else float("nan") for v in dram], "s",
                    color="#dd8452", label="ncu: DRAM")
    ax.set_xticks(list(xs), [str(b) for b in bms])
    ax.set_xlabel("forward BLOCK_M (BLOCK_N = %d)" % middle["block_n"])
    ax.set_ylabel("forward traffic (GB)")
    ax.legend(fontsize=6, loc="upper right")
    title = "block size (forward)"
    if middle.get("measured") and middle.get("honoured") == "honoured":
        twin = ax.twinx()
        twin.plot(list(xs), [row.get("ms") or float("nan") for row in middle["measured"]],
                  "k-^", label="runtime")
        twin.set_ylabel("runtime (ms)")
        twin.set_ylim(bottom=0)
    elif middle.get("measured"):
        title += f"\nruntime not shown: block size {middle.get('honoured')}"
    ax.set_title(title, fontsize=9)

    # (d) density
    ax = axes[3]
    dens = [row["density"] for row in right["model"]]
    full = right["model"][0]["tile_loads"]
    ax.plot(dens, [row["tile_loads"] / full for row in right["model"]], "o-", color="#8eaad8",
            label="model: tile loads / dense")
    ax.plot(dens, [row["flops"] / right["model"][0]["flops"] for row in right["model"]], "--",
            color="#4c72b0", label="model: FLOPs / dense")
    flex = right["flex_anchor_ms"]
    dense_ms = flex["1.0"]
    ax.plot([float(k) for k in flex], [v / dense_ms for v in flex.values()], "s", color="#999999",
            label="FlexAttention H200 anchor: time / dense")
    ax.set_xlabel("fraction of non-zero blocks")
    ax.set_ylabel("relative to dense")
    ax.set_xlim(1.05, 0.0)
    ax.set_ylim(0, 1.1)
    ax.legend(fontsize=6, loc="upper right")
    measured = right.get("measured")
    if isinstance(measured, list) and measured:
        base = measured[0]["ms"]
        ax.plot([r["density"] for r in measured], [r["ms"] / base for r in measured], "o-",
                color="#c44e52", label="flashtile: time / dense")
        ax.legend(fontsize=6, loc="upper right")
        ax.set_title("block-sparse, seqlen 4k, fwd+bwd: measured vs model", fontsize=9)
    else:
        ax.set_title("block-sparse, seqlen 4k: model only (runtime needs --measure on a GPU)",
                     fontsize=9)

    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


__all__ = ["BLOCK_SIZES", "ESSAY_CASES", "FLEX_BLOCK_SPARSE_MS", "GPT2_MEDIUM", "H200_ANCHORS",
           "PAPER_A100", "essay_table", "figure2", "judge_honoured", "plot_figure2"]
