"""Forward + backward at seqlen 65,536 (b=1, h=16, d=128, bf16) with peak extra memory.

Eager attention would need S and P of 16 * 65536^2 elements each: 128 GiB in bf16 for one of them.
"""

import torch
import triton

import flashtile

b, s, h, d = 1, 65536, 16, 128
q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
dout = torch.randn_like(q)
torch.cuda.synchronize()
base = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
out = flashtile.flash_attn_func(q, k, v, causal=False)
out.backward(dout)
torch.cuda.synchronize()
peak = torch.cuda.max_memory_allocated() - base
inputs = 4 * q.numel() * q.element_size()
ms = triton.testing.do_bench(lambda: flashtile.flash_attn_func(q, k, v).backward(dout), warmup=1, rep=3,
                             return_mode="median")
flops = 4 * b * h * s * s * d * 3.5
print(f"seqlen {s} b{b} h{h} d{d} bf16 fwd+bwd: {ms:.1f} ms, {flops / ms * 1e-9:.0f} TFLOP/s; "
      f"peak extra memory {peak / 2**20:.0f} MiB (q/k/v/dout = {inputs / 2**20:.0f} MiB); "
      f"eager S alone would be {b * h * s * s * 2 / 2**30:.0f} GiB")
print("finite:", bool(torch.isfinite(out).all() and torch.isfinite(q.grad).all()))
