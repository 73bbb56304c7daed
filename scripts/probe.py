"""Quick speed probe (development aid until ``flashtile bench`` grows the full grid): flashtile
vs SDPA's cuDNN and flash backends, bf16, 16k tokens, TFLOP/s by flash-attention's convention."""

import torch
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashtile

TOKENS = 16384


def tflops(ms, b, h, s, d, causal, mode):
    f = 4 * b * h * s * s * d * (0.5 if causal else 1.0) * (3.5 if mode == "fwdbwd" else 1.0)
    return f / ms * 1e-9


def bench(fn, mode, out_grad):
    if mode == "fwd":
        return triton.testing.do_bench(fn, warmup=50, rep=200, return_mode="median")
    return triton.testing.do_bench(lambda: fn().backward(out_grad), warmup=50, rep=200,
                                   return_mode="median")


print(f"{'d':>4} {'causal':>6} {'s':>6} {'mode':>7} {'flashtile':>10} {'cudnn':>8} {'flash':>8} {'vs cudnn':>9}")
for d in (64, 128):
    for causal in (False, True):
        for s in (1024, 4096, 16384):
            b, h = TOKENS // s, 2048 // d
            q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
            qt, kt, vt = (t.detach().transpose(1, 2).requires_grad_() for t in (q, k, v))
            g = torch.randn_like(q)
            gt = g.transpose(1, 2)
            for mode in ("fwd", "fwdbwd"):
                res = {}
                res["flashtile"] = bench(lambda: flashtile.flash_attn_func(q, k, v, causal=causal), mode, g)
                for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
                    def f(be=be):
                        with sdpa_kernel(be):
                            return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                    try:
                        res[name] = bench(f, mode, gt)
                    except Exception as e:  # noqa: BLE001
                        res[name] = float("nan")
                tf = {kk: tflops(ms, b, h, s, d, causal, mode) for kk, ms in res.items()}
                print(f"{d:>4} {str(causal):>6} {s:>6} {mode:>7} {tf['flashtile']:>10.1f} {tf['cudnn']:>8.1f} {tf['flash']:>8.1f} {tf['flashtile']/tf['cudnn']:>9.2f}", flush=True)
