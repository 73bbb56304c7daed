"""Backward tuning sweep on one CUDA GPU: dQ strategy x tile configs, against SDPA cuDNN.

For each point (head dim, causal, seqlen; 16k tokens, nheads = 2048 / d as the anchors) and
each dQ strategy of ``flashtile.kernels.bwd`` (``atomic``: one pass, dQ summed with atomics;
``two-pass``: a separate dQ pass, bitwise reproducible), this

1. checks forward and gradients of two heads against the float64 reference
   (``err <= 2 * err(reference in the same dtype) + floor``, floors 4x for dQ/dK);
2. times forward and forward+backward (median of ``triton.testing.do_bench``), and SDPA's cuDNN
   backend on the same inputs;
3. records every autotuned kernel's per-config timings (``configs_timings``), so one run says
   which tile shapes win where.

``--warm-procs N`` first compiles every candidate config in N parallel processes
(:mod:`flashtile.bench.warm`), so the autotuning that follows mostly loads binaries instead of
compiling them one by one. JSON goes to ``--out``/bwd-sweep.json (rewritten after each point); the table is printed
last. FLOPs: flash-attention's convention (fwd 4*b*h*s*s*d, halved when causal; fwd+bwd 3.5x).

    python3 scripts/bwd_sweep.py --headdims 64,128 --seqlens 1024,4096,16384 --warm-procs 12
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

TOKENS = 16384
FLOOR = {torch.float16: 1e-3, torch.bfloat16: 8e-3}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def make_inputs(seqlen: int, d: int, dtype, seed: int = 0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    batch, heads = max(1, TOKENS // seqlen), 2048 // d
    q, k, v, dout = (torch.randn(batch, seqlen, heads, d, device="cuda", dtype=dtype, generator=g)
                     for _ in range(4))
    return q, k, v, dout


def fwd_bwd(q, k, v, dout, causal):
    import flashtile
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = flashtile.flash_attn_func(q, k, v, causal=causal)
    out.backward(dout)
    return out, q.grad, k.grad, v.grad


def check(q, k, v, dout, causal, dtype) -> dict:
    """Two heads of the very inputs against float64; returns the worst budget ratio per output."""
    import flashtile
    from flashtile.interface import _flash_params
    outs = fwd_bwd(q, k, v, dout, causal)
    sl = (slice(0, 1), slice(None), slice(0, 2))              # batch 0, heads 0-1 (MHA)
    params, _ = _flash_params(q, k, v, 0.0, None, causal, (-1, -1), 0.0, None, False)
    refs = {}
    for dt in (torch.float64, dtype):
        qr, kr, vr = (t[sl].detach().to(dt).requires_grad_() for t in (q, k, v))
        o, _ = flashtile.attention_reference(qr, kr, vr, params, dtype=dt)
        o.backward(dout[sl].to(dt))
        refs[dt] = (o, qr.grad, kr.grad, vr.grad)
    ratios = {}
    for i, name in enumerate(("out", "dq", "dk", "dv")):
        ref64 = refs[torch.float64][i]
        ours = (outs[i][sl].double() - ref64).abs().max().item()
        torch_err = (refs[dtype][i].double() - ref64).abs().max().item()
        floor = FLOOR[dtype] * (4 if name in ("dq", "dk") else 1)
        ratios[name] = ours / (2 * torch_err + floor)
    return ratios


def tuner_report() -> dict:
    """Per-config median ms of each flashtile autotuner's last tuning, best first."""
    from flashtile.kernels import bwd, fwd
    report = {}
    for name, tuner in (("fwd", fwd._fwd), ("dkdv", bwd._dkdv), ("dq", bwd._dq)):
        timings = getattr(tuner, "configs_timings", None) or {}
        rows = []
        for cfg, t in sorted(timings.items(), key=lambda kv: kv[1][0] if isinstance(kv[1], list) else kv[1]):
            ms = t[0] if isinstance(t, list) else t
            kw = cfg.kwargs
            rows.append({"block_m": kw["BLOCK_M"], "block_n": kw["BLOCK_N"], "warps": cfg.num_warps,
                         "stages": cfg.num_stages, "ms": ms})
        report[name] = rows
        tuner.configs_timings = {}                             # so the next point starts empty
    return report


def flops(seqlen, d, causal, mode):
    batch, heads = max(1, TOKENS // seqlen), 2048 // d
    f = 4 * batch * heads * seqlen * seqlen * d * (0.5 if causal else 1.0)
    return f * (3.5 if mode == "fwdbwd" else 1.0)


def causal_list(text):
    return {"both": [False, True], "yes": [True], "no": [False]}[text]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--headdims", default="64,128")
    p.add_argument("--seqlens", default="1024,4096,16384")
    p.add_argument("--causal", default="both", choices=("both", "yes", "no"))
    p.add_argument("--modes", default="atomic,two-pass")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    p.add_argument("--warm-procs", type=int, default=0)
    p.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    args = p.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    modes = args.modes.split(",")

    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = {"commit": os.environ.get("FLASHTILE_COMMIT", "unknown"), "dtype": args.dtype,
              "device": torch.cuda.get_device_name(), "tokens": TOKENS, "points": []}
    if args.warm_procs:
        from flashtile.bench.warm import warm_compile_cache
        result["warm_s"] = warm_compile_cache(_ints(args.headdims), causal_list(args.causal),
                                              [args.dtype], procs=args.warm_procs)
        print(f"warm-up compile in {args.warm_procs} processes: {result['warm_s']:.0f} s", flush=True)

    for d in _ints(args.headdims):
        for causal in causal_list(args.causal):
            for seqlen in _ints(args.seqlens):
                q, k, v, dout = make_inputs(seqlen, d, dtype)
                point = {"d": d, "causal": causal, "seqlen": seqlen, "modes": {}}
                qt, kt, vt = (t.transpose(1, 2).detach().requires_grad_() for t in (q, k, v))
                dt = dout.transpose(1, 2)

                def cudnn_fb():
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        o = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                    o.backward(dt)

                def cudnn_f():
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                try:
                    point["cudnn_fwd_ms"] = triton.testing.do_bench(cudnn_f)
                    point["cudnn_fwdbwd_ms"] = triton.testing.do_bench(cudnn_fb)
                except Exception as e:                                   # noqa: BLE001
                    point["cudnn_error"] = str(e).splitlines()[0]
                for mode in modes:
                    os.environ["FLASHTILE_BWD_DQ"] = mode
                    t0 = time.time()
                    entry = {"check": check(q, k, v, dout, causal, dtype)}
                    entry["first_call_s"] = time.time() - t0
                    entry["tuning"] = tuner_report()
                    import flashtile
                    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))

                    def f():
                        flashtile.flash_attn_func(qg, kg, vg, causal=causal)

                    def fb():
                        flashtile.flash_attn_func(qg, kg, vg, causal=causal).backward(dout)
                    entry["fwd_ms"] = triton.testing.do_bench(f)
                    entry["fwdbwd_ms"] = triton.testing.do_bench(fb)
                    point["modes"][mode] = entry
                result["points"].append(point)
                (out_dir / "bwd-sweep.json").write_text(json.dumps(result, indent=1))
                print(f"d={d} causal={causal} s={seqlen}: " + ", ".join(
                    f"{m} {e['fwdbwd_ms']:.2f} ms (check max ratio {max(e['check'].values()):.2f})"
                    for m, e in point["modes"].items())
                    + (f"; cudnn {point['cudnn_fwdbwd_ms']:.2f} ms" if "cudnn_fwdbwd_ms" in point else ""),
                    flush=True)

    print("\n| d | causal | seqlen | mode | fwd TF/s | fwd+bwd TF/s | cuDNN fwd / fwd+bwd | ratio fwd / fwd+bwd | check | best dkdv | best dq |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for pt in result["points"]:
        cf, cfb = pt.get("cudnn_fwd_ms"), pt.get("cudnn_fwdbwd_ms")
        for mode, e in pt["modes"].items():
            tf = flops(pt["seqlen"], pt["d"], pt["causal"], "fwd") / e["fwd_ms"] / 1e9
            tfb = flops(pt["seqlen"], pt["d"], pt["causal"], "fwdbwd") / e["fwdbwd_ms"] / 1e9
            c = (f"{flops(pt['seqlen'], pt['d'], pt['causal'], 'fwd') / cf / 1e9:.0f} / "
                 f"{flops(pt['seqlen'], pt['d'], pt['causal'], 'fwdbwd') / cfb / 1e9:.0f}") if cf else "-"
            r = f"{cf / e['fwd_ms']:.2f} / {cfb / e['fwdbwd_ms']:.2f}" if cf else "-"
            best = {k: (f"{v[0]['block_m']}x{v[0]['block_n']} w{v[0]['warps']} s{v[0]['stages']}" if v else "-")
                    for k, v in e["tuning"].items()}
            ok = "ok" if max(e["check"].values()) <= 1 else f"FAIL {max(e['check'].values()):.2f}"
            print(f"| {pt['d']} | {'yes' if pt['causal'] else 'no'} | {pt['seqlen']} | {mode} | {tf:.0f} | "
                  f"{tfb:.0f} | {c} | {r} | {ok} | {best['dkdv']} | {best['dq']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
