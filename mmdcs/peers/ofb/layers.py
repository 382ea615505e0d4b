"""Searchable transformer layers of OFB: attention and MLP with a bi-mask, their compression
(drop cells, slice to the support, finish) and fusion, and a LayerNorm over a channel subset.

* :class:`OFBAttention` — multi-head attention whose q, k and v are multiplied by the
  (heads × head_dim) bi-mask, as the public code's ``MAESparseAttention``. The scale stays
  ``head_dim_full^-0.5`` when channels are pruned (the public code switches it to the kept width
  at the end of the search, which changes the function; here the compact model computes what the
  masked supernet computed). Fusing folds the mask into the q, k, v rows of ``qkv``.
* :class:`OFBMlp` — MLP whose hidden activations (fc1 output, before GELU) are multiplied by the
  bi-mask; fusing folds it into fc1.
* :func:`masked_layer_norm` — LayerNorm over the embedding support only (zeros elsewhere), so a
  supernet whose embedding support is smaller than its width computes exactly what the sliced
  network computes.

Without a bi-mask (``search=False``) the layers are the plain dense layers of a compact model.
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .bimask import BiMask, head_choices, head_dim_choices, mlp_choices
from .compress import Optimizers, compress_group_, remap_param_, slice_param_, sync_layer_attrs_


def masked_layer_norm(x: Tensor, norm: nn.LayerNorm, index: Optional[Tensor] = None) -> Tensor:
    """``norm(x)``, or, with ``index``, the LayerNorm of the channels ``index`` alone (with their
    affine parameters) and 0 on the other channels."""
    if index is None:
        return norm(x)
    kept = F.layer_norm(x.index_select(-1, index), (index.numel(), ),
                        norm.weight.index_select(0, index) if norm.weight is not None else None,
                        norm.bias.index_select(0, index) if norm.bias is not None else None,
                        norm.eps)
    return torch.zeros_like(x).index_copy(-1, index, kept)


class _Searchable(nn.Module):
    """Shared compression logic of the layers with one bi-mask."""
    bimask: Optional[BiMask]

    def compress_(self, threshold: float, optimizers: Optimizers = None) -> bool:
        """Drop the cells of low p, slice the weights to the support, finish the search of the
        layer when one cell is left. Returns whether anything changed."""
        bm = self.bimask
        if bm is None or bm.is_finished:
            return False
        return compress_group_(bm, threshold, lambda keep: self.slice_units_(keep, optimizers),
                               optimizers)

    def slice_units_(self, keep, optimizers: Optimizers = None) -> None:
        raise NotImplementedError

    @property
    def search_finished(self) -> bool:
        return self.bimask is None or self.bimask.is_finished


class OFBAttention(_Searchable):
    """Multi-head self-attention with a (heads × head_dim) bi-mask on q, k and v.

    Args:
        dim: input / output width.
        num_heads, head_dim: the heads and channels per head (head_dim default dim // heads).
        qkv_bias: bias of the qkv projection.
        attn_drop, proj_drop: dropout on the attention weights / after the projection.
        search: add the bi-mask (the searchable supernet layer).
        scale: the attention scale (default ``head_dim^-0.5``; a compact layer gets the full
            model's).
    """

    def __init__(self, dim: int, num_heads: int, head_dim: Optional[int] = None,
                 qkv_bias: bool = True, attn_drop: float = 0., proj_drop: float = 0.,
                 search: bool = True, scale: Optional[float] = None):
        super().__init__()
        head_dim = head_dim or dim // num_heads
        if num_heads < 1 or head_dim < 1:
            raise ValueError(f'OFBAttention: heads ({num_heads}) and head_dim ({head_dim}) must '
                             'be ≥ 1')
        self.scale = float(scale) if scale is not None else head_dim**-0.5
        self._num_heads, self._head_dim = num_heads, head_dim
        self.qkv = nn.Linear(dim, 3 * num_heads * head_dim, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(num_heads * head_dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        self.bimask = BiMask((num_heads, head_dim),
                             (head_choices(num_heads), head_dim_choices(head_dim))) \
            if search else None

    @property
    def num_heads(self) -> int:
        return self.bimask.units[0] if self.bimask is not None else self._num_heads

    @property
    def head_dim(self) -> int:
        return self.bimask.units[1] if self.bimask is not None else self._head_dim

    def forward(self, x: Tensor, attn_bias: Optional[Tensor] = None) -> Tensor:
        """x: (B, N, C); attn_bias: additive (…, heads, N, N) or None."""
        B, N, _ = x.shape
        H, d = self.num_heads, self.head_dim
        q, k, v = self.qkv(x).reshape(B, N, 3, H, d).permute(2, 0, 3, 1, 4).unbind(0)
        mask = self.bimask() if self.bimask is not None else None
        if mask is not None:
            mask = mask.to(q.dtype)[None, :, None, :]
            q, k, v = q * mask, k * mask, v * mask
        x = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_bias, dropout_p=self.attn_drop if self.training else 0.,
            scale=self.scale)
        return self.proj_drop(self.proj(x.transpose(1, 2).reshape(B, N, H * d)))

    def unit_index(self, heads: Tensor, dims: Tensor) -> Tensor:
        """Flat (head, channel) positions in the H·d layout of the kept units."""
        return (heads[:, None] * self.head_dim + dims).flatten()

    def slice_units_(self, keep: Tuple[Tensor, Tensor], optimizers: Optimizers = None) -> None:
        """Keep the heads ``keep[0]`` and, in each, the channels ``keep[1]`` (rows of q, k, v,
        columns of proj, the scores; and what :meth:`slice_heads_` adds)."""
        heads, dims = (t.to(self.qkv.weight.device) for t in keep)
        units = self.unit_index(heads, dims)
        width = self.num_heads * self.head_dim
        rows = torch.cat([s * width + units for s in range(3)])
        slice_param_(self.qkv.weight, rows, 0, optimizers)
        if self.qkv.bias is not None:
            slice_param_(self.qkv.bias, rows, 0, optimizers)
        slice_param_(self.proj.weight, units, 1, optimizers)
        self.slice_heads_(heads, optimizers)
        if self.bimask is not None:
            remap_param_(self.bimask.score,
                         lambda t: t.index_select(0, heads.to(t.device)).gather(
                             1, dims.to(t.device)), optimizers)
        else:
            self._num_heads, self._head_dim = dims.shape
        sync_layer_attrs_(self)

    def slice_heads_(self, heads: Tensor, optimizers: Optimizers = None) -> None:
        """Slice per-head parameters beyond q, k, v (e.g. a relative position bias table)."""

    def fuse_(self) -> None:
        """Fold the finished mask into the q, k, v rows of ``qkv``."""
        bm = self.bimask
        if bm is None or bm.is_fused:
            return
        if not bm.is_finished:
            raise RuntimeError('OFBAttention.fuse_: the search of this layer is not finished')
        with torch.no_grad():
            m = bm.score.detach().flatten().repeat(3)
            self.qkv.weight.mul_(m[:, None])
            if self.qkv.bias is not None:
                self.qkv.bias.mul_(m)
        bm.mark_fused_()


class OFBMlp(_Searchable):
    """fc1 → (× bi-mask) → GELU → dropout → fc2 → dropout.

    Args:
        dim: input / output width.
        hidden: hidden width.
        drop: dropout.
        search: add the bi-mask over the hidden channels.
    """

    def __init__(self, dim: int, hidden: int, drop: float = 0., search: bool = True):
        super().__init__()
        if hidden < 1:
            raise ValueError(f'OFBMlp: hidden width must be ≥ 1, got {hidden}')
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop2 = nn.Dropout(drop)
        self.bimask = BiMask((hidden, ), (mlp_choices(hidden), )) if search else None

    @property
    def hidden(self) -> int:
        return self.fc1.weight.shape[0]

    def forward(self, x: Tensor) -> Tensor:
        x = self.fc1(x)
        mask = self.bimask() if self.bimask is not None else None
        if mask is not None:
            x = x * mask.to(x.dtype)
        return self.drop2(self.fc2(self.drop1(self.act(x))))

    def slice_units_(self, keep: Tensor, optimizers: Optimizers = None) -> None:
        keep = keep.to(self.fc1.weight.device)
        slice_param_(self.fc1.weight, keep, 0, optimizers)
        slice_param_(self.fc1.bias, keep, 0, optimizers)
        slice_param_(self.fc2.weight, keep, 1, optimizers)
        if self.bimask is not None:
            slice_param_(self.bimask.score, keep, 0, optimizers)
        sync_layer_attrs_(self)

    def fuse_(self) -> None:
        bm = self.bimask
        if bm is None or bm.is_fused:
            return
        if not bm.is_finished:
            raise RuntimeError('OFBMlp.fuse_: the search of this layer is not finished')
        with torch.no_grad():
            m = bm.score.detach()
            self.fc1.weight.mul_(m[:, None])
            self.fc1.bias.mul_(m)
        bm.mark_fused_()
