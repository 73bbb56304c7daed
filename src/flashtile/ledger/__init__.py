"""The ledger: FLOPs, HBM traffic and memory of standard vs tiled attention — stated, measured,
and the FlashAttention paper's Figure 2 reproduced.

Attention is slow because of what it moves, not what it computes. For a workload (batch, heads,
sequence lengths, head dims, dtype, causal, dropout, block-sparse density) and a GPU (SRAM per
SM, L2, SMs; the present one by default) the ledger states:

  FLOPs            executed matmul FLOPs: standard; tiled with the recomputation in backward
  HBM bytes        standard (eager, op by op): Theta(N d + N^2)
                   tiled, every tile load counted (the paper's Theta(N^2 d^2 / M))
                   tiled, what reaches DRAM once L2 catches the re-reads
  extra memory     Theta(N^2) (S, P, dP, dS) vs Theta(N) (O, LSE, D)

examples:
  flashtile ledger                                   # GPT-2 medium attention, model only
  flashtile ledger --seqlen 1024 2048 4096 8192 --headdim 64 128 --tokens 16384 --hidden 2048
  flashtile ledger --measure --ncu --out ledger-out  # + time, memory, ncu DRAM bytes (GPU)
  flashtile ledger --paper --measure --ncu --out fig2  # Figure 2 and the essay table

Measurement needs a CUDA GPU; on a CPU machine the ledger prints the model and says so.
Python: flashtile.ledger.estimate(Workload(...)) -> LedgerResult. See docs/ledger.md.
"""

from .cli import add_arguments, run
from .model import (Hardware, LedgerResult, TileConfig, Traffic, Workload, block_sweep,
                    conventional_flops, density_sweep, estimate)

__all__ = [
    "Hardware", "LedgerResult", "TileConfig", "Traffic", "Workload", "add_arguments",
    "block_sweep", "conventional_flops", "density_sweep", "estimate", "run",
]
