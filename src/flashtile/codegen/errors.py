"""Errors of the code generator."""

from __future__ import annotations


class UnsupportedModError(NotImplementedError):
    """A ``score_mod``/``mask_mod`` that cannot be fused into a Triton kernel.

    A ``NotImplementedError``: callers catch it and run the same function on the torch path.
    The message names the construct (aten op, Python decision on a value, too many captured
    tensors, ...), the user's line where it can, and a rewrite that can be fused.
    """
