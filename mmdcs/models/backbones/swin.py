"""Swin Transformer (Liu et al., 2021) with DCS / KCR channel selection.

Layout and parameter names follow timm's ``swin_transformer.py`` (``patch_embed.proj/norm``,
``layers.{i}.downsample`` at the *start* of stages 1..3, ``layers.{i}.blocks.{j}`` with ``norm1``,
``attn.qkv/proj/relative_position_bias_table``, ``norm2``, ``mlp.fc1/fc2``), so timm checkpoints
convert by renaming only the final norm and the classifier (:func:`convert_timm`); the original
Microsoft layout converts too (:func:`convert_official_swin`).

Every block is a DCS or KCR block (method.md §2): the window attention is a
:class:`~mmdcs.selection.DCSAttention` whose Q/K mask is per token inside each window, with the
relative position bias and the shifted-window mask passed as its additive ``attn_bias``; the MLP is
a :class:`~mmdcs.selection.GatedMLP`.

Any input size: the image is padded to a multiple of the patch size, every feature map to a
multiple of the window (the shifted-window mask is computed for the padded size, cached by size),
and the result cropped back; PatchMerging pads odd sizes. Where a map is not a multiple of the
window, the two reference implementations differ in the order of padding and cyclic shift, and so
in their features (by up to ~0.5 on stage 3 at 320×256 with the same weights):

* ``window_padding='mmdet'`` (the default): pad the map, then shift — the official Swin
  detection / segmentation code, mmdet's and mmseg's ``SwinTransformer``: what detection and
  segmentation users (and their checkpoints) expect;
* ``window_padding='timm'``: shift, then pad — timm's ``SwinTransformer`` (for timm users, e.g.
  classification at a size that needs padding).

At sizes that need no padding (every stage map a multiple of 7 or at most 7 on a side, e.g. 224,
448×224) the two are the same. A side of the map that fits in one window takes the window to that
side and is not shifted, as timm (and the original code) do at 224 classification, so the numerics
equal timm's there; ``pad_small_map=True`` keeps the 7×7 window and the shift whatever the size
(mmdet's behaviour, e.g. on the 7×7 stage 3 at 224: with ``window_padding='mmdet'`` and
``pad_small_map=True`` the features equal mmdet's ``SwinTransformer`` at every size). Tests: ``tests/test_models/test_swin_padding.py``
(every stage against mmdet's and timm's models, converted weights, at 320×256, 256×256, 320×320).
"""
import math
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn.bricks import DropPath
from torch import Tensor

from mmdcs.registry import MODELS
from mmdcs.selection import DEFAULT_GATE_INIT, CostTerm, DCSAttention, GatedMLP, mlp_residual
from mmdcs.selection.cost import mlp_cost_term
from .base import (AttentionLayout, SelectableBackbone, check_choice, drop_path_rates,
                   enclosing_module, feature_to_bchw, normalize_out_indices, query_cell)

Size = Tuple[int, int]

#: the order of window padding and cyclic shift (see the module doc)
WINDOW_PADDINGS = ('mmdet', 'timm')

#: arch -> the timm model with the same layout (random init there, converted here)
TIMM_MODELS = {
    'swin-t': 'swin_tiny_patch4_window7_224',
    'swin-s': 'swin_small_patch4_window7_224',
    'swin-b': 'swin_base_patch4_window7_224',
}


# ----------------------------------------------------------------------------- windows
def window_partition(x: Tensor, window: Size) -> Tensor:
    """(B, H, W, C) → (B·nW, wh·ww, C); H and W are multiples of the window."""
    B, H, W, C = x.shape
    wh, ww = window
    x = x.view(B, H // wh, wh, W // ww, ww, C).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, wh * ww, C)


def window_reverse(windows: Tensor, window: Size, H: int, W: int) -> Tensor:
    """(B·nW, wh·ww, C) → (B, H, W, C), the inverse of :func:`window_partition`."""
    wh, ww = window
    C = windows.shape[-1]
    x = windows.view(-1, H // wh, W // ww, wh, ww, C).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, H, W, C)


def window_order(size: Size, window: Size, shift: Size = (0, 0)) -> Tuple[Tensor, Tensor]:
    """(order, inverse) of the windows of a (padded) map of ``size``: the windowed sequence
    ``window_partition(torch.roll(x, (-sh, -sw), (1, 2)), window)`` is the row-major map
    (B, H·W, C) indexed by ``order`` along the tokens, and ``inverse`` takes it back (the
    cyclic shift undone too). One gather each way instead of a roll (two copies per shifted
    dimension) and a permute copy (tools/analysis/latency.py --modules)."""
    Hp, Wp = size
    idx = torch.arange(Hp * Wp).view(1, Hp, Wp, 1)
    if any(shift):
        idx = torch.roll(idx, shifts=(-shift[0], -shift[1]), dims=(1, 2))
    order = window_partition(idx, window).reshape(-1)
    return order, torch.argsort(order)


def relative_position_index(window: Size, table_window: Size) -> Tensor:
    """(N, N) indices into a ``(2·Th-1)·(2·Tw-1)`` bias table (timm's layout) for the token
    pairs of a ``window`` ≤ ``table_window``: a smaller window reads the exact sub-table."""
    wh, ww = window
    th, tw = table_window
    coords = torch.stack(torch.meshgrid(torch.arange(wh), torch.arange(ww), indexing='ij'))
    coords = coords.flatten(1)
    rel = coords[:, :, None] - coords[:, None, :]  # 2, N, N
    return (rel[0] + th - 1) * (2 * tw - 1) + (rel[1] + tw - 1)


def shifted_window_mask(size: Size, window: Size, shift: Size) -> Tensor:
    """(nW, N, N) additive mask (0 / -100, as timm and mmdet) of the shifted windows of a
    (padded) map of ``size``: tokens that came from different regions before the cyclic shift
    do not attend to each other."""
    region = []
    for length, w, s in zip(size, window, shift):
        r = torch.zeros(length)
        if s > 0:
            r[length - w:length - s] = 1
            r[length - s:] = 2
        region.append(r)
    img = (region[0][:, None] * 3 + region[1][None, :])[None, :, :, None]  # 1, H, W, 1
    ids = window_partition(img, window).squeeze(-1)  # nW, N
    mask = ids[:, None, :] - ids[:, :, None]
    return torch.zeros_like(mask).masked_fill(mask != 0, -100.)


# ----------------------------------------------------------------------------- layers
class PatchEmbed(nn.Module):
    """Non-overlapping patch embedding (conv + LayerNorm); pads the image to a multiple of the
    patch size (right/bottom). Returns (B, H, W, C) tokens."""

    def __init__(self, patch_size: int, in_channels: int, embed_dims: int):
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_channels, embed_dims, patch_size, patch_size)
        self.norm = nn.LayerNorm(embed_dims)

    def forward(self, x: Tensor) -> Tensor:
        p = self.patch_size
        H, W = x.shape[-2:]
        if H % p or W % p:
            x = F.pad(x, (0, (p - W % p) % p, 0, (p - H % p) % p))
        return self.norm(self.proj(x).permute(0, 2, 3, 1))


class RelativePositionBiasMixin:
    """The relative position bias of a window attention (timm's parameter
    ``relative_position_bias_table``) and the bias of windowed tokens, shared by
    :class:`WindowAttention` and OFB's."""

    def init_relative_position_bias(self, window_size: Size, num_heads: int) -> None:
        self.window_size = tuple(window_size)
        wh, ww = self.window_size
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * wh - 1) * (2 * ww - 1), num_heads))
        nn.init.trunc_normal_(self.relative_position_bias_table, std=.02)
        self.register_buffer('relative_position_index',
                             relative_position_index(self.window_size, self.window_size),
                             persistent=False)

    def relative_position_bias(self, window: Size) -> Tensor:
        """(heads, N, N) bias of a window (the configured one, or a smaller one)."""
        if tuple(window) == self.window_size:
            index = self.relative_position_index
        else:
            index = relative_position_index(window, self.window_size).to(
                self.relative_position_bias_table.device)
        n = window[0] * window[1]
        bias = self.relative_position_bias_table[index.view(-1)].view(n, n, -1)
        return bias.permute(2, 0, 1)

    def window_attn_bias(self, x: Tensor, window: Optional[Size] = None,
                         mask: Optional[Tensor] = None) -> Tensor:
        """The additive attention bias of windowed tokens ``x`` (B·nW, N, C): the relative
        position bias of ``window`` (default: the configured one) plus the (nW, N, N)
        shifted-window ``mask`` when given; (1 or B·nW, heads, N, N) in ``x``'s dtype."""
        bias = self.relative_position_bias(window or self.window_size).unsqueeze(0)
        if mask is not None:
            nw, n = mask.shape[0], mask.shape[-1]
            bias = (bias + mask.to(bias.dtype).unsqueeze(1)).unsqueeze(0)  # 1, nW, heads, N, N
            bias = bias.expand(x.shape[0] // nw, -1, -1, -1, -1).reshape(-1, self.num_heads, n, n)
        return bias.to(x.dtype)


class WindowAttention(RelativePositionBiasMixin, DCSAttention):
    """Window attention with relative position bias (timm's ``WindowAttention`` parameters) and
    the per-token Q/K channel mask of DCS inside every window; with ``select_heads=True`` a gate
    per head (method.md §2.7), whose pruning also removes the head's column of the relative
    position bias table (:meth:`prune_heads_`)."""

    def __init__(self, dim: int, num_heads: int, window_size: Size, qkv_bias: bool = True,
                 attn_drop: float = 0., proj_drop: float = 0., qk_select: Optional[str] = None,
                 gate_init: float = DEFAULT_GATE_INIT, tau: float = 4.5,
                 theta_rank: Optional[int] = None, select_heads: bool = False):
        super().__init__(dim, num_heads, qkv_bias, attn_drop, proj_drop, qk_select,
                         gate_init=gate_init, tau=tau, theta_rank=theta_rank,
                         select_heads=select_heads)
        self.init_relative_position_bias(window_size, num_heads)

    def forward(self, x: Tensor, window: Size, mask: Optional[Tensor] = None) -> Tensor:
        """x: (B·nW, N, C) windowed tokens; mask: (nW, N, N) shifted-window mask or None."""
        return super().forward(x, attn_bias=self.window_attn_bias(x, window, mask))

    @torch.no_grad()
    def prune_heads_(self, keep: Sequence[int]) -> None:
        """As :meth:`DCSAttention.prune_heads_` (rows of q, k, v and Linear_θ, columns of
        ``proj``), and the kept heads' columns of ``relative_position_bias_table`` ((2·wh−1)·
        (2·ww−1) parameters per head): the bias of every window, shifted or not, padded or
        smaller than the configured one, is read from the kept columns."""
        super().prune_heads_(keep)  # checks keep before changing anything
        table = self.relative_position_bias_table
        cols = torch.tensor(sorted(int(h) for h in keep), device=table.device)
        self.relative_position_bias_table = nn.Parameter(
            table.index_select(1, cols).clone(), requires_grad=table.requires_grad)


class SwinBlock(nn.Module):
    """(Shifted-)window attention block: ``x + attn(norm1(x))``, ``x + mlp(norm2(x))``."""

    def __init__(self, dim: int, num_heads: int, window_size: int = 7, shift: bool = False,
                 mlp_ratio: float = 4., qkv_bias: bool = True, drop: float = 0.,
                 attn_drop: float = 0., drop_path: float = 0., pad_small_map: bool = False,
                 qk_select: Optional[str] = None, mlp_select: bool = False,
                 gate_init: float = DEFAULT_GATE_INIT, tau: float = 4.5,
                 window_padding: str = 'mmdet', select_hidden: bool = False,
                 theta_rank: Optional[int] = None, select_heads: bool = False):
        super().__init__()
        if window_padding not in WINDOW_PADDINGS:
            raise ValueError(f'window_padding must be one of {WINDOW_PADDINGS}, got '
                             f'{window_padding!r}')
        self.window_size = window_size
        self.shift_size = window_size // 2 if shift else 0
        self.pad_small_map = pad_small_map
        self.window_padding = window_padding
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, num_heads, (window_size, window_size), qkv_bias,
                                    attn_drop, drop, qk_select, gate_init, tau, theta_rank,
                                    select_heads)
        self.drop_path1 = DropPath(drop_path) if drop_path > 0. else nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = GatedMLP(dim, int(dim * mlp_ratio), drop=drop, select=mlp_select,
                            gate_init=gate_init, tau=tau, select_hidden=select_hidden)
        self.drop_path2 = DropPath(drop_path) if drop_path > 0. else nn.Identity()
        self._masks: Dict[tuple, Any] = {}  # shifted-window masks and window orders

    def window_and_shift(self, H: int, W: int) -> Tuple[Size, Size]:
        """A side that fits in one window takes the window to its length and no shift (timm at
        224), unless ``pad_small_map``."""
        w, s = self.window_size, self.shift_size
        if self.pad_small_map:
            return (w, w), (s, s)
        window = tuple(min(n, w) for n in (H, W))
        shift = tuple(0 if n <= w else s for n in (H, W))
        return window, shift

    def _mask(self, size: Size, window: Size, shift: Size, device) -> Optional[Tensor]:
        if not any(shift):
            return None
        key = (size, window, shift, str(device))
        if key not in self._masks:
            if len(self._masks) > 32:
                self._masks.clear()
            self._masks[key] = shifted_window_mask(size, window, shift).to(device)
        return self._masks[key]

    def _order(self, size: Size, window: Size, shift: Size, device) -> Tuple[Tensor, Tensor]:
        key = ('order', size, window, shift, str(device))
        if key not in self._masks:
            if len(self._masks) > 32:
                self._masks.clear()
            self._masks[key] = tuple(t.to(device) for t in window_order(size, window, shift))
        return self._masks[key]

    def _attn(self, x: Tensor) -> Tensor:
        """Window attention of (B, H, W, C). ``window_padding`` 'mmdet': pad, shift, attend,
        shift back, crop; 'timm': shift, pad, attend, crop, shift back. The mask is that of the
        padded map in both (as both references compute it). The shift and the window partition
        are one gather of the tokens (:func:`window_order`), and so is their inverse, except in
        timm's order on a map that needs padding."""
        B, H, W, C = x.shape
        window, shift = self.window_and_shift(H, W)
        pad_h, pad_w = (-H) % window[0], (-W) % window[1]
        Hp, Wp = H + pad_h, W + pad_w
        shift_first = getattr(self, 'window_padding', 'mmdet') == 'timm'
        if not (shift_first and any(shift) and (pad_h or pad_w)):
            if pad_h or pad_w:
                x = F.pad(x, (0, 0, 0, pad_w, 0, pad_h))
            order, inverse = self._order((Hp, Wp), window, shift, x.device)
            windows = x.reshape(B, Hp * Wp, C).index_select(1, order)
            x = self.attn(windows.view(-1, window[0] * window[1], C), window,
                          self._mask((Hp, Wp), window, shift, x.device))
            x = x.reshape(B, Hp * Wp, -1).index_select(1, inverse).view(B, Hp, Wp, -1)
            return x[:, :H, :W, :] if pad_h or pad_w else x
        # timm's order on a map that needs padding: shift, pad, attend, crop, shift back
        x = torch.roll(x, shifts=(-shift[0], -shift[1]), dims=(1, 2))
        x = F.pad(x, (0, 0, 0, pad_w, 0, pad_h))
        x = self.attn(window_partition(x, window), window,
                      self._mask((Hp, Wp), window, shift, x.device))
        x = window_reverse(x, window, Hp, Wp)[:, :H, :W, :]
        return torch.roll(x, shifts=shift, dims=(1, 2))

    def forward(self, x: Tensor) -> Tensor:
        """x: (B, H, W, C)."""
        x = x + self.drop_path1(self._attn(self.norm1(x)))
        # x is this block's own tensor: a pruned MLP may add its update into it in place
        return mlp_residual(self.mlp, x, self.norm2(x), self.drop_path2, inplace=True)


class PatchMerging(nn.Module):
    """2×2 patch merging (timm's channel order: (0,0), (1,0), (0,1), (1,1)); pads odd sizes."""

    def __init__(self, dim: int, out_dim: Optional[int] = None):
        super().__init__()
        self.out_dim = out_dim or 2 * dim
        self.norm = nn.LayerNorm(4 * dim)
        self.reduction = nn.Linear(4 * dim, self.out_dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        B, H, W, C = x.shape
        x = F.pad(x, (0, 0, 0, W % 2, 0, H % 2))
        H, W = x.shape[1:3]
        x = x.reshape(B, H // 2, 2, W // 2, 2, C).permute(0, 1, 3, 4, 2, 5).flatten(3)
        return self.reduction(self.norm(x))


class SwinStage(nn.Module):
    """Optional PatchMerging (stages 1..3), then blocks alternating plain and shifted windows."""

    def __init__(self, dim: int, out_dim: int, depth: int, downsample: bool,
                 drop_path: Sequence[float], **block_kwargs):
        super().__init__()
        self.downsample = PatchMerging(dim, out_dim) if downsample else nn.Identity()
        self.blocks = nn.Sequential(*[
            SwinBlock(out_dim, shift=j % 2 == 1, drop_path=drop_path[j], **block_kwargs)
            for j in range(depth)
        ])

    def forward(self, x: Tensor) -> Tensor:
        return self.blocks(self.downsample(x))


class WindowLayout(AttentionLayout):
    """Swin: the sequences are the (shifted) windows of each image's map; a query's weights
    lie inside its window (drawn on the unshifted, unpadded map)."""

    def __init__(self, block: SwinBlock):
        self.watch = block
        self.block_hw: Optional[Size] = None

    def observe(self, module, args):
        self.block_hw = (args[0].shape[1], args[0].shape[2])  # (B, H, W, C)

    def query_map(self, attn, image, query, image_hw):
        heads = attn.shape[1]
        H, W = self.block_hw
        (wh, ww), (sh, sw) = self.watch.window_and_shift(H, W)
        Hp, Wp = H + (-H) % wh, W + (-W) % ww
        nW = (Hp // wh) * (Wp // ww)
        r, c = query_cell(query, H, W)
        # position in the cyclically shifted (padded) map, its window, its index there
        rr, cc = (r - sh) % Hp, (c - sw) % Wp
        win = (rr // wh) * (Wp // ww) + cc // ww
        idx = (rr % wh) * ww + cc % ww
        row = attn[image * nW + win, :, idx, :]  # (heads, wh·ww)
        full = attn.new_zeros(heads, Hp, Wp)
        r0, c0 = (rr // wh) * wh, (cc // ww) * ww
        full[:, r0:r0 + wh, c0:c0 + ww] = row.reshape(heads, wh, ww)
        full = torch.roll(full, shifts=(sh, sw), dims=(1, 2))[:, :H, :W]
        return full, (H, W), (r, c)


# ----------------------------------------------------------------------------- backbone
@MODELS.register_module()
class Swin(SelectableBackbone):
    """Swin Transformer backbone: baseline, DCS or KCR; supernet or pruned subnet.

    Args:
        arch: ``'swin-t'``, ``'swin-s'`` or ``'swin-b'``.
        variant, subnet, qk_mask, gate_init, tau: see :class:`SelectableBackbone`.
        img_size: the nominal input size (for the cost model only; any size runs).
        patch_size, in_channels, window_size, mlp_ratio, qkv_bias: as timm.
        drop_rate: dropout after the attention projection and in the MLP.
        attn_drop_rate: dropout on the attention weights.
        drop_path_rate: stochastic depth, growing linearly over all blocks.
        out_indices: stages whose (normalised) feature maps (B, C_i, H_i, W_i) are returned;
            each has its own LayerNorm ``norm{i}``. ``(3,)`` for classification.
        frozen_stages: -1 nothing; 0 the patch embedding; k >= 1 also the first k stages
            and their output norms, a stage being its blocks and the PatchMerging that
            follows them, as mmdet's SwinTransformer (here the PatchMerging after stage i is
            ``layers[i + 1].downsample``, timm's layout). See :class:`SelectableBackbone`.
        pad_small_map: keep the full window and the shift on maps smaller than the window (mmdet);
            by default such a side takes the window to its length and is not shifted (timm).
        window_padding: on maps that are not a multiple of the window, ``'mmdet'`` (default)
            pads and then shifts (official Swin detection code, mmdet, mmseg), ``'timm'``
            shifts and then pads (timm). See the module doc.
        select_heads: a gate per head in every window attention (α of heads beside α of
            channels, searched by the same loop; method.md §2.7); the subnet's ``heads`` list
            the kept heads, and a pruned attention loses the head's rows of q, k, v (and
            Linear_θ), its columns of proj and of the relative position bias table. Off by
            default (the papers).
    """
    family = 'swin'
    takes_img_size = True
    #: KCR's Swin-T/B (method.md §9)
    paper_variant = 'kcr'
    #: the last stage (its output is (B, H, W, C))
    cam_layer = 'layers.-1'
    timm_models = TIMM_MODELS
    #: a gate per head in every window attention (``select_heads=True``) and a subnet's kept
    #: heads (method.md §2.7)
    supports_heads = True
    #: besides timm's: Microsoft's original checkpoints
    checkpoint_layouts = ('timm', 'official')
    arch_zoo = {
        'swin-t': dict(embed_dims=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24)),
        'swin-s': dict(embed_dims=96, depths=(2, 2, 18, 2), num_heads=(3, 6, 12, 24)),
        'swin-b': dict(embed_dims=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32)),
    }

    def __init__(self, arch: str = 'swin-t', variant: Optional[str] = None,
                 subnet=None, qk_mask: str = 'shared', gate_init: float = DEFAULT_GATE_INIT,
                 tau: float = 4.5, img_size: int = 224, patch_size: int = 4,
                 in_channels: int = 3, window_size: int = 7, mlp_ratio: float = 4.,
                 qkv_bias: bool = True, drop_rate: float = 0., attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0., out_indices: Union[int, Sequence[int]] = (3, ),
                 frozen_stages: int = -1, pad_small_map: bool = False,
                 window_padding: str = 'mmdet', init_cfg=None, select_hidden: bool = False,
                 theta_rank: Optional[int] = None, select_heads: bool = False):
        super().__init__(arch, variant, subnet, qk_mask, gate_init, tau, init_cfg,
                         select_hidden=select_hidden, theta_rank=theta_rank,
                         select_heads=select_heads)
        check_choice('window_padding', window_padding, WINDOW_PADDINGS, 'Swin')
        self.window_padding = window_padding
        s = self.arch_settings
        depths, heads = s['depths'], s['num_heads']
        self.num_stages = len(depths)  # before _set_frozen_stages
        self.num_features = [s['embed_dims'] * 2**i for i in range(self.num_stages)]
        self.out_indices = normalize_out_indices(out_indices, self.num_stages, 'Swin')
        self.img_size = img_size
        self.patch_size = patch_size
        self.mlp_ratio = mlp_ratio
        self._set_frozen_stages(frozen_stages)

        self.patch_embed = PatchEmbed(patch_size, in_channels, self.num_features[0])
        dpr = drop_path_rates(drop_path_rate, sum(depths))
        layers, start = [], 0
        for i, depth in enumerate(depths):
            layers.append(SwinStage(
                self.num_features[max(i - 1, 0)], self.num_features[i], depth,
                downsample=i > 0, drop_path=dpr[start:start + depth], num_heads=heads[i],
                window_size=window_size, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias,
                drop=drop_rate, attn_drop=attn_drop_rate, pad_small_map=pad_small_map,
                window_padding=window_padding, qk_select=self.qk_select, mlp_select=self.mlp_select,
                gate_init=self.gate_init, tau=self.init_tau, select_hidden=self.select_hidden,
                theta_rank=self.theta_rank, select_heads=self.select_heads))
            start += depth
        self.layers = nn.Sequential(*layers)
        for i in self.out_indices:
            self.add_module(f'norm{i}', nn.LayerNorm(self.num_features[i]))
        self._init_weights()

    def _init_weights(self) -> None:
        """timm's init (truncated normal .02 on linear weights, zero biases), leaving the
        selection modules at their "all kept" initialisation."""
        for name, m in self.named_modules():
            if isinstance(m, nn.Linear) and '.qk_select.' not in f'.{name}.':
                nn.init.trunc_normal_(m.weight, std=.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    # ----------------------------------------------------------------- contract
    def stem_parts(self) -> list:
        return [self.patch_embed]

    def stage_parts(self, i: int) -> list:
        # layers[i] = the PatchMerging of stage i - 1 (already frozen with it; none for i = 0)
        # and the blocks of stage i; then the PatchMerging that follows them
        parts = [self.layers[i]]
        if i + 1 < self.num_stages:
            parts.append(self.layers[i + 1].downsample)
        if i in self.out_indices:
            parts.append(getattr(self, f'norm{i}'))
        return parts

    def attention_layout(self, name: str) -> 'WindowLayout':
        return WindowLayout(enclosing_module(self, name, SwinBlock))

    def final_token_norm(self) -> Tuple[nn.Module, bool]:
        """The module whose output is the final normalised token map (B, H, W, C: no class
        token), the last stage's norm (DynamicViT's token distillation)."""
        name = f'norm{self.num_stages - 1}'
        if not hasattr(self, name):
            raise ValueError(f'DynamicViTClassifier: the token distillation needs the last stage '
                             f'of {type(self).__name__} in out_indices')
        return getattr(self, name), False

    def tokens_to_bchw(self, act: Tensor, image_hw: Tuple[int, int]) -> Tensor:
        """A stage's output (B, H, W, C) → (B, C, H, W)."""
        return feature_to_bchw(act, channels_last=True)

    @classmethod
    def convert_checkpoint(cls, state_dict: Dict[str, Tensor], arch: str,
                           layout: str = 'timm') -> Dict[str, Tensor]:
        check_choice('layout', layout, cls.checkpoint_layouts, cls.__name__)
        if layout == 'official':
            return convert_official_swin(state_dict, arch)
        return convert_timm(state_dict, arch)

    def forward(self, x: Tensor) -> Tuple[Tensor, ...]:
        x = self.patch_embed(x)
        outs = []
        for i, stage in enumerate(self.layers):
            x = stage(x)
            if i in self.out_indices:
                outs.append(getattr(self, f'norm{i}')(x).permute(0, 3, 1, 2).contiguous())
        return tuple(outs)

    # ----------------------------------------------------------------- cost (method.md §3)
    def stage_tokens(self, img_size: Optional[int] = None) -> List[int]:
        """Tokens of every stage at the nominal input size (56², 28², 14², 7² at 224)."""
        side = math.ceil((img_size or self.img_size) / self.patch_size)
        tokens = []
        for _ in range(self.num_stages):
            tokens.append(side * side)
            side = (side + 1) // 2
        return tokens

    def cost_terms(self) -> List[CostTerm]:
        """KCR on Swin: every block's MLP, l = 2 layers; exact FLOPs 2·N_stage per (kept channel,
        kept hidden unit) pair (fc1 reads D̃ and writes H̃, fc2 the reverse)."""
        tokens = self.stage_tokens()
        terms = []
        for i, stage in enumerate(self.layers):
            for block in stage.blocks:
                mlp = block.mlp
                if getattr(mlp, 'select', None) is None:
                    continue
                terms.append(mlp_cost_term(mlp.select, mlp.hidden_select, mlp.hidden_features,
                                           2. * tokens[i], mlp_layers=2,
                                           params_per_channel=float(mlp.params_per_channel)))
        return terms


# ----------------------------------------------------------------------------- conversion
_BUFFERS = ('relative_position_index', 'attn_mask')


def _check_arch(state_dict: Dict[str, Tensor], arch: str) -> Tuple[int, int]:
    """The embed dims and the number of stages of ``arch``, checked against the weights."""
    if arch not in Swin.arch_zoo:
        raise ValueError(f'unknown Swin arch {arch!r}; valid: {", ".join(Swin.arch_zoo)}')
    s = Swin.arch_zoo[arch]
    w = state_dict.get('patch_embed.proj.weight')
    if w is not None and w.shape[0] != s['embed_dims']:
        raise ValueError(f'the checkpoint has embed dims {w.shape[0]}, arch {arch!r} has '
                         f'{s["embed_dims"]}')
    for i, depth in enumerate(s['depths']):
        if f'layers.{i}.blocks.{depth - 1}.norm1.weight' not in state_dict or \
                f'layers.{i}.blocks.{depth}.norm1.weight' in state_dict:
            raise ValueError(f'the checkpoint does not have {depth} blocks in stage {i} '
                             f'(arch {arch!r})')
    return s['embed_dims'], len(s['depths'])


def convert_timm(state_dict: Dict[str, Tensor], arch: str) -> Dict[str, Tensor]:
    """timm ``SwinTransformer`` weights → an mmpretrain ``ImageClassifier`` with this backbone
    (``backbone.*``, the final ``norm`` as ``backbone.norm3``) and a ``LinearClsHead``
    (``head.fc.*``)."""
    state_dict = state_dict.get('state_dict', state_dict.get('model', state_dict))
    _, num_stages = _check_arch(state_dict, arch)
    out = {}
    for k, v in state_dict.items():
        if k.endswith(_BUFFERS):
            continue
        if k.startswith('head.fc.'):
            out[k] = v
        elif k.startswith('norm.'):
            out[f'backbone.norm{num_stages - 1}.{k[5:]}'] = v
        else:
            out[f'backbone.{k}'] = v
    return out


def convert_official_swin(state_dict: Dict[str, Tensor], arch: str) -> Dict[str, Tensor]:
    """The original Microsoft checkpoints (PatchMerging at the *end* of stages 0..2, ``head.*``,
    persistent ``relative_position_index`` / ``attn_mask`` buffers) → as :func:`convert_timm`."""
    state_dict = state_dict.get('state_dict', state_dict.get('model', state_dict))
    timm_sd = {}
    for k, v in state_dict.items():
        if k.endswith(_BUFFERS):
            continue
        k = re.sub(r'^layers\.(\d+)\.downsample', lambda m: f'layers.{int(m.group(1)) + 1}.'
                   'downsample', k)
        if k.startswith('head.'):
            k = 'head.fc.' + k[5:]
        timm_sd[k] = v
    return convert_timm(timm_sd, arch)
