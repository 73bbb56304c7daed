"""Pure-PyTorch statements of attention.

- :mod:`flashtile.reference.dense`: the materialising float64 reference every test, benchmark and
  example compares against (it builds the N x N matrix; for small shapes only).
- :mod:`flashtile.reference.tiled`: the chunked online-softmax path (the CPU backend), the same
  algorithm as the kernels, with O(N) extra memory.
"""

from .dense import attention_reference, visible_mask

__all__ = ["attention_reference", "visible_mask"]
