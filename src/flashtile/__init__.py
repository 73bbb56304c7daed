"""flashtile: exact attention that is fast because it moves less.

Tiling with online softmax, recomputation in backward and kernel fusion, in Triton, with an
exact chunked PyTorch path for CPU. See README.md and DESIGN notes in docs/.
"""

from .backend import get_backend, set_backend
from .interface import flash_attn_func, flash_attn_varlen_func, scaled_dot_product_attention
from .flex import flex_attention
from .kvcache import flash_attn_with_kvcache
from .masks import BlockMask, and_masks, create_block_mask, create_mask, noop_mask, or_masks
from .params import AttentionParams
from .reference.dense import attention_reference

__version__ = "0.1.0"

__all__ = [
    "AttentionParams",
    "BlockMask",
    "and_masks",
    "create_block_mask",
    "create_mask",
    "flex_attention",
    "noop_mask",
    "or_masks",
    "attention_reference",
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "get_backend",
    "scaled_dot_product_attention",
    "set_backend",
]
