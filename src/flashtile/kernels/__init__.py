"""Triton kernels and their launchers (no autograd here).

- ``fwd.py``: tiled forward with online softmax, writes O and LSE.
- ``bwd.py``: recomputing backward: ``D = rowsum(dO * O)``, then a dK/dV pass and a dQ pass.
- ``common.py``: band/tile arithmetic, score modification, buffers.
"""

from .bwd import backward
from .fwd import forward

__all__ = ["backward", "forward"]
