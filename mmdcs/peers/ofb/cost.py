"""FLOPs of the searched networks as a differentiable function of the widths, counted the way
:func:`mmdcs.analysis.complexity.count_flops` (``mmengine.analysis``) counts the compact model:
multiply-accumulates of convolutions, linear layers and attention products (Q·Kᵀ and W·V),
5 per element of a LayerNorm, nothing for element-wise operations.

The widths may be tensors (expected widths E_p[·] of the bi-masks, differentiable in α) or
numbers (a compact model); the result is then a tensor or a float.
"""
from typing import Sequence, Union

from torch import Tensor

Number = Union[float, int, Tensor]

#: MACs per element of an affine LayerNorm in mmengine's count
LAYER_NORM_MACS = 5


def linear_macs(tokens: Number, in_features: Number, out_features: Number) -> Number:
    return tokens * in_features * out_features


def attention_macs(tokens: Number, keys: Number, width: Number) -> Number:
    """Q·Kᵀ and W·V over all heads: ``tokens · keys · (d_qk + d_v)`` with d = the total width."""
    return tokens * keys * 2 * width


def layer_norm_macs(tokens: Number, width: Number) -> Number:
    return LAYER_NORM_MACS * tokens * width


def vit_block_macs(tokens: Number, embed: Number, qkv: Number, hidden: Number) -> Number:
    """A pre-norm ViT block: LN, qkv, attention, proj, LN, fc1, fc2 (``qkv`` = heads·head_dim)."""
    return (2 * layer_norm_macs(tokens, embed) + linear_macs(tokens, embed, 3 * qkv)
            + attention_macs(tokens, tokens, qkv) + linear_macs(tokens, qkv, embed)
            + linear_macs(tokens, embed, hidden) + linear_macs(tokens, hidden, embed))


def vit_macs(num_patches: int, patch_size: int, in_channels: int, embed: Number,
             qkv: Sequence[Number], hidden: Sequence[Number], num_prefix_tokens: int = 1,
             final_norm: bool = True) -> Number:
    """A ViT backbone at ``num_patches`` patches: patch embedding, the blocks, the final norm."""
    if len(qkv) != len(hidden):
        raise ValueError(f'{len(qkv)} qkv widths for {len(hidden)} MLP widths')
    tokens = num_patches + num_prefix_tokens
    total = num_patches * embed * in_channels * patch_size * patch_size
    for q, h in zip(qkv, hidden):
        total = total + vit_block_macs(tokens, embed, q, h)
    if final_norm:
        total = total + layer_norm_macs(tokens, embed)
    return total
