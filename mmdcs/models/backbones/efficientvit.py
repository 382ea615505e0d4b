"""EfficientViT (MIT Han Lab; Cai et al., ICCV 2023) with DCS / KCR channel selection.

The network is timm 1.0.31's ``efficientvit_mit.EfficientVit`` (B0-B3), layer for layer and with
its parameter names, so a timm checkpoint converts by adding a prefix (:func:`convert_timm`):

    stem    3×3 s2 ConvNormAct + residual DSConv blocks                               stride 2
    stages  0, 1: MBConv blocks (the first one strides by 2)                         strides 4, 8
            2, 3: one strided MBConv, then EfficientVitBlocks =
                  context module ResidualBlock(LiteMLA) + local module ResidualBlock(MBConv)
                                                                                     strides 16, 32
    head_in_conv  1×1 ConvNormAct to head_widths[0] (timm's ``head.in_conv``)        stride 32

LiteMLA (lightweight multi-scale linear attention): a 1×1 conv gives q, k, v for ``heads`` heads
of ``dim`` channels (``heads = C // dim``, total_dim = heads·dim); every scale of ``scales`` adds a
branch (5×5 depthwise + grouped 1×1 conv of q, k, v); per branch and head the ReLU linear
attention ``(ReLU(q) (ReLU(k)ᵀ [v 1]))[:-1] / ([...][-1] + eps)`` runs in fp32 with autocast off;
the concatenated outputs (total_dim·(1 + len(scales)) channels) go through ``proj`` (1×1
ConvNorm).

DCS (method.md §2, DCS paper A.1), per LiteMLA:

1. Q/K channel selection: M = gate(Linear_θ(x)) per pixel, on the LiteMLA input x, with
   total_dim channels (one head-split mask of a branch); the same M multiplies q and k of every
   scale branch before the ReLU kernel (``qk_mask='separate'``: one mask for q, one for k).
2. Attention-output selection: α over the concatenated branch outputs; the supernet multiplies
   them by g = gate(α) before ``proj``; the pruned LiteMLA gathers the D̃ kept channels and
   ``proj`` reads only those. The residual stream keeps its C channels.

Head selection (``select_heads=True``, beyond the papers, method.md §2.7): a gate per LiteMLA
head, which is pruned in every scale branch together (its qkv rows, aggregation channels and
groups, Linear_θ rows); ``proj`` keeps reading the channels the α selection keeps (see
:class:`LiteMLA`).

Outputs (``out_indices``): 0 the stem (stride 2), 1-4 the stages (strides 4, 8, 16, 32: timm's
``features_only`` indices 0-3), 5 the ``head_in_conv`` feature (stride 32, head_widths[0]
channels; built only when asked for). The default ``(5, )`` is the classification setting: with
mmpretrain's ``GlobalAveragePooling`` and :class:`EfficientViTClsHead` (timm's ``head.classifier``:
Linear, LayerNorm, Hardswish, Dropout, Linear; :mod:`mmdcs.models.heads.efficientvit_head`) it is
timm's model exactly.
"""
import re
from typing import Dict, List, Optional, Sequence, Tuple, Type, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.nn.modules.batchnorm import _BatchNorm

from mmdcs.registry import MODELS
from mmdcs.selection import (DEFAULT_GATE_INIT, ChannelSelector, CostTerm, QKChannelSelector)
from mmdcs.selection.mlp import (inverted_bottleneck_norms, narrow_inverted_bottleneck_,
                                 zero_positions)
from ..heads.efficientvit_head import EfficientViTClsHead  # noqa: F401  (importable here too)
from .base import SelectableBackbone, check_choice, feature_to_bchw, normalize_out_indices

__all__ = ['EfficientViT', 'LiteMLA', 'TIMM_MODELS', 'convert_timm']

# ----------------------------------------------------------------------------- layers
class ConvNormAct(nn.Module):
    """Conv2d (symmetric 'same' padding, as timm's ``create_conv2d``) + optional norm + act."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3,
                 stride: int = 1, groups: int = 1, bias: bool = False,
                 norm_layer: Optional[Type[nn.Module]] = nn.BatchNorm2d,
                 act_layer: Optional[Type[nn.Module]] = nn.ReLU):
        super().__init__()
        padding = ((stride - 1) + (kernel_size - 1)) // 2
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding,
                              groups=groups, bias=bias)
        self.norm = norm_layer(out_channels) if norm_layer else nn.Identity()
        self.act = act_layer(inplace=True) if act_layer else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.norm(self.conv(x)))


class DSConv(nn.Module):
    """Depthwise 3×3 ConvNormAct + pointwise ConvNorm (the stem's residual blocks)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1,
                 norm_layer: Type[nn.Module] = nn.BatchNorm2d,
                 act_layer: Type[nn.Module] = nn.Hardswish):
        super().__init__()
        self.depth_conv = ConvNormAct(in_channels, in_channels, 3, stride, groups=in_channels,
                                      norm_layer=norm_layer, act_layer=act_layer)
        self.point_conv = ConvNormAct(in_channels, out_channels, 1, norm_layer=norm_layer,
                                      act_layer=None)

    def forward(self, x: Tensor) -> Tensor:
        return self.point_conv(self.depth_conv(x))


class MBConv(nn.Module):
    """Inverted residual: 1×1 expand, 3×3 depthwise, 1×1 project.

    ``fewer_norm`` (the transformer stages): the first two convs have a bias and no norm."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1,
                 expand_ratio: float = 4, fewer_norm: bool = False,
                 norm_layer: Type[nn.Module] = nn.BatchNorm2d,
                 act_layer: Type[nn.Module] = nn.Hardswish):
        super().__init__()
        mid = round(in_channels * expand_ratio)
        norm = None if fewer_norm else norm_layer
        self.inverted_conv = ConvNormAct(in_channels, mid, 1, bias=fewer_norm, norm_layer=norm,
                                         act_layer=act_layer)
        self.depth_conv = ConvNormAct(mid, mid, 3, stride, groups=mid, bias=fewer_norm,
                                      norm_layer=norm, act_layer=act_layer)
        self.point_conv = ConvNormAct(mid, out_channels, 1, norm_layer=norm_layer, act_layer=None)

    def forward(self, x: Tensor) -> Tensor:
        return self.point_conv(self.depth_conv(self.inverted_conv(x)))


class GatedMBConv(MBConv):
    """The MBConv of a transformer block (EfficientViT's FFN), with optional hidden-unit selection
    (``select_hidden``): a gate h = gate(β) over the ``mid`` expanded channels, applied after the
    depthwise conv. Pruned (:meth:`prune_hidden_`): all three convs physically narrower, no
    gather (the residual width is unchanged)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1,
                 expand_ratio: float = 4, fewer_norm: bool = False,
                 norm_layer: Type[nn.Module] = nn.BatchNorm2d,
                 act_layer: Type[nn.Module] = nn.Hardswish, select_hidden: bool = False,
                 gate_init: float = DEFAULT_GATE_INIT, tau: float = 4.5):
        super().__init__(in_channels, out_channels, stride, expand_ratio, fewer_norm,
                         norm_layer, act_layer)
        #: the expanded width H (hidden-prunable module)
        self.hidden_features = self.depth_conv.conv.out_channels
        self.hidden_select = ChannelSelector(self.hidden_features, gate_init, tau) if (
            select_hidden) else None

    def forward(self, x: Tensor) -> Tensor:
        h = self.depth_conv(self.inverted_conv(x))
        if self.hidden_select is not None:
            h = h * self.hidden_select().to(h.dtype).view(1, -1, 1, 1)
        return self.point_conv(h)

    def hidden_norms(self) -> Tensor:
        """L2 norm of each expanded channel's weights (the magnitude pruner's score)."""
        return inverted_bottleneck_norms(self.inverted_conv, self.depth_conv, self.point_conv)

    @torch.no_grad()
    def prune_hidden_(self, keep: Union[Tensor, Sequence[int]], pad: Sequence[int] = ()) -> None:
        """Keep the ``keep`` expanded channels, in place (the ``pad`` ones with zero weights)."""
        self.hidden_features = narrow_inverted_bottleneck_(
            self.inverted_conv, self.depth_conv, self.point_conv, keep, pad)
        self.hidden_select = None


class GroupedPointwiseConv(nn.Conv2d):
    """A grouped 1×1 convolution (LiteMLA's multi-scale aggregation, ``groups = 3·heads``)
    computed as one batched matmul over the groups: the same parameters and result as
    ``nn.Conv2d``, but PyTorch's CPU path runs a grouped 1×1 conv as a loop of tiny convs
    (7× slower at B1's shapes, ``tools/analysis/latency.py --profile``), time that no FLOPs
    count and no pruning removes."""

    def __init__(self, channels: int, groups: int):
        super().__init__(channels, channels, 1, groups=groups, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        B, C, H, W = x.shape
        g = self.groups
        w = self.weight.view(g, C // g, C // g)
        return torch.matmul(w, x.reshape(B, g, C // g, H * W)).view(B, C, H, W)


class ResidualBlock(nn.Module):
    """``main(x) + x`` (``shortcut=False``: ``main(x)``, the strided first block of a stage)."""

    def __init__(self, main: nn.Module, shortcut: bool = True):
        super().__init__()
        self.main = main
        self.shortcut = nn.Identity() if shortcut else None

    def forward(self, x: Tensor) -> Tensor:
        out = self.main(x)
        return out + x if self.shortcut is not None else out


class LiteMLA(nn.Module):
    """Lightweight multi-scale ReLU linear attention, with the two DCS channel selections and
    optional head selection.

    Args:
        in_channels, out_channels: C in and out.
        dim: channels per head (heads = in_channels // dim).
        scales: kernel sizes of the multi-scale aggregation branches.
        eps: of the linear attention's normaliser.
        qk_select: ``None``, ``'shared'`` (one mask M for q and k) or ``'separate'``.
        select: add α over the concatenated branch outputs (the supernet).
        keep: the kept channels of the concatenated outputs (the pruned, deployed form).
        gate_init, tau: initial gate logits and temperature.
        select_heads: a gate per head (``head_select``, α over the heads; method.md §2.7).
        head_keep: the kept heads (the head-pruned form, :meth:`prune_heads_`).

    Head h owns, in every branch, the same channels: its 3·dim rows of ``qkv`` (q, k, v of the
    head are consecutive), the same channels of each scale's depthwise conv and its 3 groups of
    the grouped 1×1 conv (groups = 3·heads), its dim rows of Linear_θ, and its dim outputs
    (channels ``(b·heads + h)·dim + j`` of the concatenation, b the branch): the heads are fully
    separable. ``keep`` (the α selection) always indexes the full concatenation (``cat_dim``);
    a kept channel of a pruned head is read as zero by ``proj`` (its cost stays counted, so
    the count stays linear in the kept channels and the kept heads; method.md §2.7).
    """

    def __init__(self, in_channels: int, out_channels: int, dim: int = 8,
                 scales: Sequence[int] = (5, ), eps: float = 1e-5,
                 norm_layer: Type[nn.Module] = nn.BatchNorm2d, qk_select: Optional[str] = None,
                 select: bool = False, keep: Union[None, Tensor, Sequence[int]] = None,
                 gate_init: float = DEFAULT_GATE_INIT, tau: float = 4.5,
                 theta_rank: Optional[int] = None, select_heads: bool = False,
                 head_keep: Union[None, Tensor, Sequence[int]] = None):
        super().__init__()
        if qk_select not in (None, 'shared', 'separate'):
            raise ValueError(f'qk_select must be None, "shared" or "separate", got {qk_select!r}')
        full_heads = in_channels // dim
        if full_heads < 1:
            raise ValueError(f'LiteMLA: {in_channels} channels hold no head of dim {dim}')
        self._args = dict(in_channels=in_channels, out_channels=out_channels, dim=dim,
                          scales=tuple(scales), eps=eps, norm_layer=norm_layer,
                          qk_select=qk_select, gate_init=gate_init, tau=tau,
                          theta_rank=theta_rank)
        self.eps = eps
        self.dim = dim
        #: heads of the unpruned layout (what ``keep`` and ``head_keep`` index)
        self.full_heads = full_heads
        self.num_branches = 1 + len(scales)
        #: channels of the concatenated branch outputs of the unpruned layout (D of the α
        #: selection)
        self.cat_dim = full_heads * dim * self.num_branches
        # the head-pruned form records its kept heads in its state dict
        self.register_buffer('head_keep', None)
        # where the kept heads' outputs sit in the concatenation, and what proj reads
        self.register_buffer('cat_index', None, persistent=False)
        self.register_buffer('read', None, persistent=False)
        self._set_heads(None if head_keep is None else _check_heads(head_keep, full_heads))
        heads = self.heads
        total_dim = self.total_dim
        self.qkv = ConvNormAct(in_channels, 3 * total_dim, 1, norm_layer=None, act_layer=None)
        self.aggreg = nn.ModuleList([
            nn.Sequential(
                nn.Conv2d(3 * total_dim, 3 * total_dim, s, padding=s // 2,
                          groups=3 * total_dim, bias=False),
                GroupedPointwiseConv(3 * total_dim, 3 * heads),
            ) for s in scales
        ])
        self.kernel_func = nn.ReLU(inplace=False)
        self.qk_select = None if qk_select is None else QKChannelSelector(
            in_channels, total_dim, separate=qk_select == 'separate', gate_init=gate_init,
            tau=tau, theta_rank=theta_rank)
        if keep is not None:
            keep = torch.as_tensor(keep, dtype=torch.long).flatten()
            if keep.numel() == 0:
                raise ValueError('a pruned LiteMLA needs at least one kept channel')
        # the pruned form records its kept channels in its state dict
        self.register_buffer('keep', None if keep is None else keep.clone())
        self._set_read()
        self.select = ChannelSelector(self.cat_dim, gate_init, tau) if (
            select and keep is None) else None
        self.head_select = ChannelSelector(heads, gate_init, tau) if (
            select_heads and head_keep is None) else None
        self.proj = ConvNormAct(self.cat_dim if keep is None else keep.numel(), out_channels, 1,
                                norm_layer=norm_layer, act_layer=None)

    # ----------------------------------------------------------------- head layout
    def _set_heads(self, head_keep: Optional[Tensor]) -> None:
        """The kept heads (None: all), and where their outputs sit in the concatenation."""
        self.head_keep = head_keep
        self.heads = self.full_heads if head_keep is None else head_keep.numel()
        #: number of heads (the head-prunable module's width; ``heads`` too)
        self.num_heads = self.heads
        self.total_dim = self.heads * self.dim
        self.cat_index = None if head_keep is None else self._channels(
            head_keep.tolist()).to(head_keep.device)

    def _channels(self, heads: Sequence[int]) -> Tensor:
        """The channels of the (unpruned) concatenation that ``heads`` output, in the order the
        pruned attention computes them (branch, head, channel)."""
        d, H = self.dim, self.full_heads
        return torch.tensor([(b * H + h) * d + j for b in range(self.num_branches)
                             for h in heads for j in range(d)], dtype=torch.long)

    def _set_read(self) -> None:
        """Head-pruned and channel-pruned: ``read`` picks each kept channel from the pruned
        attention's outputs, a kept channel of a pruned head from an appended zero channel."""
        self.read, self.read_zero = None, False
        if self.head_keep is None or self.keep is None:
            return
        where = {int(c): i for i, c in enumerate(self.cat_index)}
        zero = len(where)
        read = [where.get(int(c), zero) for c in self.keep]
        self.read_zero = zero in read
        self.read = torch.tensor(read, dtype=torch.long, device=self.keep.device)

    def head_gate(self) -> Tensor:
        """g = gate(α) over the heads; in eval, where every α ≤ 0, the head of largest α stays
        open (as the export keeps it: at least one head per attention)."""
        g = self.head_select()
        if self.training:
            return g
        alpha = self.head_select.alpha.detach()
        first = F.one_hot(alpha.argmax(), alpha.numel()).to(g.dtype)
        return torch.where(g.sum() > 0, g, first)

    # ----------------------------------------------------------------- forward
    def _attn(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        dtype = v.dtype
        q, k, v = q.float(), k.float(), v.float()
        kv = k.transpose(-1, -2) @ v
        out = q @ kv
        out = out[..., :-1] / (out[..., -1:] + self.eps)
        return out.to(dtype)

    def _per_branch(self, t: Tensor, m: Tensor) -> Tensor:
        """t: (B, branches·heads, HW, dim); m: (B, HW, total_dim) → t ⊙ m in every branch."""
        B, _, N, d = t.shape
        m = m.to(t.dtype).reshape(B, 1, N, self.heads, d).permute(0, 1, 3, 2, 4)
        return (t.reshape(B, self.num_branches, self.heads, N, d) * m).reshape(t.shape)

    def forward(self, x: Tensor) -> Tensor:
        B, _, H, W = x.shape
        qkv = self.qkv(x)
        multi_scale_qkv = torch.cat([qkv] + [op(qkv) for op in self.aggreg], dim=1)
        multi_scale_qkv = multi_scale_qkv.reshape(B, -1, 3 * self.dim, H * W).transpose(-1, -2)
        q, k, v = multi_scale_qkv.chunk(3, dim=-1)
        if self.qk_select is not None:
            mq, mk = self.qk_select(x.flatten(2).transpose(1, 2))
            q, k = self._per_branch(q, mq), self._per_branch(k, mk)
        q = self.kernel_func(q)
        k = self.kernel_func(k)
        v = F.pad(v, (0, 1), mode='constant', value=1.0)
        if not torch.jit.is_scripting() and v.device.type != 'meta':
            with torch.autocast(device_type=v.device.type, enabled=False):
                out = self._attn(q, k, v)
        else:
            out = self._attn(q, k, v)
        if self.head_select is not None:  # out: (B, branches·heads, HW, dim)
            out = out * self.head_gate().to(out.dtype).repeat(self.num_branches).view(
                1, -1, 1, 1)
        out = out.transpose(-1, -2).reshape(B, -1, H, W)
        if self.read is not None:  # head- and channel-pruned
            if self.read_zero:
                out = torch.cat([out, out.new_zeros(B, 1, H, W)], dim=1)
            out = out.index_select(1, self.read)
        elif self.head_keep is not None:  # head-pruned only: back to the full concatenation
            full = out.new_zeros(B, self.cat_dim, H, W)
            out = full.index_copy(1, self.cat_index, out)
            if self.keep is not None:
                out = out.index_select(1, self.keep)
        elif self.keep is not None:
            out = out.index_select(1, self.keep)
        if self.select is not None:
            out = out * self.select().to(out.dtype).view(1, -1, 1, 1)
        return self.proj(out)

    # ----------------------------------------------------------------- pruning
    @torch.no_grad()
    def pruned(self, keep: Union[Tensor, Sequence[int]], pad: Sequence[int] = ()) -> 'LiteMLA':
        """The deployed LiteMLA for these kept channels (``proj``'s input sliced to them; the
        ``pad`` channels read with zero weights). The kept heads (:meth:`prune_heads_`, done
        first) stay."""
        keep = torch.as_tensor(keep, dtype=torch.long, device=self.proj.conv.weight.device)
        out = LiteMLA(**self._args, keep=keep.cpu(), head_keep=self.head_keep)
        state = {k: v for k, v in self.state_dict().items()
                 if not k.startswith(('select.', 'head_select.'))}
        state['proj.conv.weight'] = state['proj.conv.weight'][:, keep].clone()
        state['proj.conv.weight'][:, zero_positions(keep, pad)] = 0
        state['keep'] = keep
        out.load_state_dict(state)
        return out.to(self.proj.conv.weight.device).train(self.training)

    @torch.no_grad()
    def prune_heads_(self, keep: Sequence[int]) -> None:
        """Keep only the heads ``keep`` (sorted, distinct, ≥ 1; checked by the subnet), in
        place: their rows of ``qkv``, their channels of every scale's depthwise conv and their
        groups of its grouped 1×1 conv, their rows of Linear_θ's output. ``proj`` still reads
        the channels of the concatenation it read (a pruned head's as zero). Once only; before
        the channel pruning (:func:`~mmdcs.selection.apply_subnet_` prunes heads first)."""
        if self.head_keep is not None:
            raise RuntimeError('prune_heads_: this LiteMLA\'s heads are already pruned')
        keep_t = _check_heads(keep, self.full_heads)
        d = self.dim
        rows = torch.tensor([h * 3 * d + j for h in keep_t.tolist() for j in range(3 * d)])
        self.qkv.conv = _sliced_conv(self.qkv.conv, rows, groups=1)
        for i, agg in enumerate(self.aggreg):
            dw, pw = agg[0], agg[1]
            agg[0] = _sliced_conv(dw, rows, groups=len(rows))
            new_pw = GroupedPointwiseConv(len(rows), 3 * len(keep_t)).to(pw.weight)
            new_pw.weight.copy_(pw.weight[rows])
            agg[1] = new_pw
        sel = self.qk_select
        if sel is not None:
            idx = torch.tensor([h * d + j for h in keep_t.tolist() for j in range(d)])
            theta_rows = torch.cat([idx, idx + self.total_dim]) if sel.separate else idx
            sel.theta = _sliced_linear(sel.theta, theta_rows)
            sel.qk_dim = len(idx)
        self._set_heads(keep_t.to(self.qkv.conv.weight.device))
        self._set_read()
        self.head_select = None

    def channel_heads(self) -> Tensor:
        """The head (of the unpruned layout) that outputs each channel of the concatenation
        (``(c // dim) % heads``): the export to a budget ranks a pruned head's channels out
        first (:func:`~mmdcs.selection.budget.budget_subnet`)."""
        return (torch.arange(self.cat_dim) // self.dim) % self.full_heads

    @torch.no_grad()
    def head_norms(self) -> Tensor:
        """The L2 norm of each head's weights (the magnitude pruner's score of a head): its
        rows of ``qkv``, its channels of the depthwise convs and rows of the grouped 1×1 convs
        of every scale, and its columns of ``proj`` in every branch."""
        if self.head_keep is not None:
            raise RuntimeError('head_norms: the heads are already pruned')
        H, d, nb = self.heads, self.dim, self.num_branches

        def per_head(w: Tensor) -> Tensor:  # rows (heads·3·dim, ...) → (heads, )
            return w.detach().float().reshape(H, -1).pow(2).sum(1)

        sq = per_head(self.qkv.conv.weight)
        if self.qkv.conv.bias is not None:
            sq = sq + per_head(self.qkv.conv.bias)
        for agg in self.aggreg:
            sq = sq + per_head(agg[0].weight) + per_head(agg[1].weight)
        w = self.proj.conv.weight
        if self.keep is None:
            cols = w.detach().float().pow(2).sum(dim=(0, 2, 3)).reshape(nb, H, d)
            sq = sq + cols.sum(dim=(0, 2))
        else:
            cols = torch.zeros(self.cat_dim)
            cols[self.keep.cpu()] = w.detach().float().pow(2).sum(dim=(0, 2, 3)).cpu()
            sq = sq + cols.reshape(nb, H, d).sum(dim=(0, 2)).to(sq.device)
        return sq.sqrt()

    def channel_norms(self) -> Tensor:
        """L2 norm of the ``proj`` weights that read each selected channel (the magnitude
        pruner's score, :mod:`mmdcs.selection.budget`)."""
        return self.proj.conv.weight.detach().float().pow(2).sum(dim=(0, 2, 3)).sqrt()

    @property
    def kept(self) -> int:
        return self.cat_dim if self.keep is None else self.keep.numel()

    def extra_repr(self) -> str:
        return (f'heads={self.heads}/{self.full_heads}, dim={self.dim}, '
                f'kept={self.kept}/{self.cat_dim}')


def _check_heads(keep: Union[Tensor, Sequence[int]], heads: int) -> Tensor:
    """Kept heads as a sorted tensor; ValueError unless distinct, ≥ 1 and in [0, heads)."""
    keep = sorted(int(h) for h in torch.as_tensor(keep).flatten().tolist())
    if not keep or len(set(keep)) != len(keep) or not 0 <= keep[0] <= keep[-1] < heads:
        raise ValueError(f'prune_heads_: bad heads {keep} of {heads}')
    return torch.tensor(keep, dtype=torch.long)


def _sliced_conv(conv: nn.Conv2d, rows: Tensor, groups: int) -> nn.Conv2d:
    """A copy of ``conv`` with only the output channels ``rows`` (a dense conv keeps its inputs;
    a depthwise one, ``groups = len(rows)``, its rows' inputs)."""
    rows = rows.to(conv.weight.device)
    in_ch = conv.in_channels if groups == 1 else len(rows)
    out = nn.Conv2d(in_ch, len(rows), conv.kernel_size, conv.stride, conv.padding,
                    conv.dilation, groups, bias=conv.bias is not None).to(conv.weight)
    out.weight.copy_(conv.weight[rows])
    if conv.bias is not None:
        out.bias.copy_(conv.bias[rows])
    return out.train(conv.training)


def _sliced_linear(layer: nn.Linear, rows: Tensor) -> nn.Linear:
    """A copy of ``layer`` with only the output ``rows``."""
    rows = rows.to(layer.weight.device)
    out = nn.Linear(layer.in_features, len(rows), bias=layer.bias is not None).to(layer.weight)
    out.weight.copy_(layer.weight[rows])
    if layer.bias is not None:
        out.bias.copy_(layer.bias[rows])
    return out.train(layer.training)


class EfficientVitBlock(nn.Module):
    """Context module (residual LiteMLA) + local module (residual MBConv, biased, fewer norms)."""

    def __init__(self, in_channels: int, head_dim: int = 32, expand_ratio: float = 4,
                 norm_layer: Type[nn.Module] = nn.BatchNorm2d,
                 act_layer: Type[nn.Module] = nn.Hardswish, select_hidden: bool = False,
                 **select_kwargs):
        super().__init__()
        self.context_module = ResidualBlock(
            LiteMLA(in_channels, in_channels, dim=head_dim, norm_layer=norm_layer,
                    **select_kwargs))
        self.local_module = ResidualBlock(
            GatedMBConv(in_channels, in_channels, expand_ratio=expand_ratio, fewer_norm=True,
                        norm_layer=norm_layer, act_layer=act_layer, select_hidden=select_hidden,
                        gate_init=select_kwargs.get('gate_init', DEFAULT_GATE_INIT),
                        tau=select_kwargs.get('tau', 4.5)))

    def forward(self, x: Tensor) -> Tensor:
        return self.local_module(self.context_module(x))


class Stem(nn.Sequential):
    """3×3 s2 ConvNormAct + ``depth`` residual DSConv blocks."""

    def __init__(self, in_channels: int, out_channels: int, depth: int,
                 norm_layer: Type[nn.Module], act_layer: Type[nn.Module]):
        super().__init__()
        self.add_module('in_conv', ConvNormAct(in_channels, out_channels, 3, 2,
                                               norm_layer=norm_layer, act_layer=act_layer))
        for i in range(depth):
            self.add_module(f'res{i}', ResidualBlock(
                DSConv(out_channels, out_channels, norm_layer=norm_layer, act_layer=act_layer)))


class EfficientVitStage(nn.Module):
    """A strided MBConv, then MBConvs (``vit_stage=False``) or EfficientVitBlocks.

    ``select_hidden``: True gates the MBConv of every EfficientVitBlock (the transformer blocks'
    FFN); ``'all'`` also the other MBConvs of the stage (the convolutional FFNs)."""

    def __init__(self, in_channels: int, out_channels: int, depth: int,
                 norm_layer: Type[nn.Module], act_layer: Type[nn.Module], expand_ratio: float,
                 head_dim: int, vit_stage: bool = False, select_hidden: Union[bool, str] = False,
                 **select_kwargs):
        super().__init__()
        conv_kwargs = dict(norm_layer=norm_layer, act_layer=act_layer,
                           select_hidden=select_hidden == 'all',
                           gate_init=select_kwargs.get('gate_init', DEFAULT_GATE_INIT),
                           tau=select_kwargs.get('tau', 4.5))
        blocks = [ResidualBlock(
            GatedMBConv(in_channels, out_channels, 2, expand_ratio, fewer_norm=vit_stage,
                        **conv_kwargs), shortcut=False)]
        if vit_stage:
            blocks += [
                EfficientVitBlock(out_channels, head_dim, expand_ratio, norm_layer, act_layer,
                                  select_hidden=bool(select_hidden), **select_kwargs)
                for _ in range(depth)
            ]
        else:
            blocks += [
                ResidualBlock(GatedMBConv(out_channels, out_channels, 1, expand_ratio,
                                          **conv_kwargs))
                for _ in range(1, depth)
            ]
        self.blocks = nn.Sequential(*blocks)

    def forward(self, x: Tensor) -> Tensor:
        return self.blocks(x)


# ----------------------------------------------------------------------------- backbone
#: arch -> timm model name (for conversion and the equivalence tests)
TIMM_MODELS = {
    'efficientvit-b0': 'efficientvit_b0',
    'efficientvit-b1': 'efficientvit_b1',
    'efficientvit-b2': 'efficientvit_b2',
    'efficientvit-b3': 'efficientvit_b3',
}


@MODELS.register_module()
class EfficientViT(SelectableBackbone):
    """EfficientViT-B (MIT) backbone with DCS / KCR variants.

    Args:
        arch: ``'efficientvit-b0'`` … ``'efficientvit-b3'`` (timm's ``efficientvit_b0..b3``).
        variant, subnet, qk_mask, gate_init, tau, init_cfg: see :class:`SelectableBackbone`.
        in_channels: image channels.
        out_indices: outputs to return: 0 stem (stride 2), 1-4 stages (strides 4-32), 5 the
            classification feature ``head_in_conv`` (stride 32, head_widths[0] channels; only
            built when 5 is asked for). Default ``(5, )``: the classification setting.
        frozen_stages: -1 nothing; 0 the stem; k >= 1 also the first k stages (outputs 1..k;
            ``head_in_conv`` is not a stage). See :class:`SelectableBackbone`.
        norm_eval: keep the BatchNorm layers in eval mode during training (detection).
        select_heads: a gate per head of every LiteMLA (heads = C // head_dim, each pruned in
            every scale branch together; method.md §2.7); the subnet's ``heads`` list the kept
            heads and the pruned LiteMLAs are narrower. Off by default (the paper).
    """
    family = 'efficientvit'
    arch_zoo = {
        'efficientvit-b0': dict(widths=(8, 16, 32, 64, 128), depths=(1, 2, 2, 2, 2),
                                head_dim=16, head_widths=(1024, 1280)),
        'efficientvit-b1': dict(widths=(16, 32, 64, 128, 256), depths=(1, 2, 3, 3, 4),
                                head_dim=16, head_widths=(1536, 1600)),
        'efficientvit-b2': dict(widths=(24, 48, 96, 192, 384), depths=(1, 3, 4, 4, 6),
                                head_dim=32, head_widths=(2304, 2560)),
        'efficientvit-b3': dict(widths=(32, 64, 128, 256, 512), depths=(1, 4, 6, 6, 9),
                                head_dim=32, head_widths=(2304, 2560)),
    }
    #: first stage index (in ``stages``) made of EfficientVitBlocks
    vit_from = 2
    num_outputs = 6
    num_stages = 4
    #: LiteMLA is ReLU linear attention, ReLU(Q)(ReLU(K)ᵀV): no softmax attention matrix
    softmax_attention = False
    #: the DCS paper's EfficientViT-B1 (method.md §9)
    paper_variant = 'dcs'
    #: the last stage (a (B, C, h, w) map)
    cam_layer = 'stages.-1'
    timm_models = TIMM_MODELS
    #: a gate per LiteMLA head (``select_heads=True``) and a subnet's kept heads (method.md
    #: §2.7; :class:`LiteMLA`)
    supports_heads = True

    def __init__(self, arch: str = 'efficientvit-b1', variant: Optional[str] = None,
                 subnet=None, qk_mask: str = 'shared', gate_init: float = DEFAULT_GATE_INIT,
                 tau: float = 4.5, in_channels: int = 3,
                 out_indices: Union[int, Sequence[int]] = (5, ), frozen_stages: int = -1,
                 norm_eval: bool = False, expand_ratio: float = 4, init_cfg=None,
                 select_hidden: bool = False, theta_rank: Optional[int] = None,
                 select_heads: bool = False):
        super().__init__(arch, variant, subnet, qk_mask, gate_init, tau, init_cfg,
                         select_hidden=select_hidden, theta_rank=theta_rank,
                         select_heads=select_heads)
        s = self.arch_settings
        widths, depths = s['widths'], s['depths']
        norm_layer, act_layer = nn.BatchNorm2d, nn.Hardswish
        self.out_indices = normalize_out_indices(out_indices, self.num_outputs,
                                                 type(self).__name__)
        self._set_frozen_stages(frozen_stages)
        self.norm_eval = norm_eval
        self.head_dim = s['head_dim']
        self.expand_ratio = expand_ratio
        #: channels and stride of every output index
        self.channels = tuple(widths) + (s['head_widths'][0], )
        self.strides = (2, 4, 8, 16, 32, 32)
        #: channels of the requested outputs (for a neck's ``in_channels``)
        self.out_channels = tuple(self.channels[i] for i in self.out_indices)

        select_kwargs = dict(qk_select=self.qk_select, select=self.mlp_select,
                             gate_init=self.gate_init, tau=self.init_tau,
                             theta_rank=self.theta_rank, select_hidden=self.select_hidden,
                             select_heads=self.select_heads)
        self.stem = Stem(in_channels, widths[0], depths[0], norm_layer, act_layer)
        self.stages = nn.Sequential(*[
            EfficientVitStage(widths[i], widths[i + 1], depths[i + 1], norm_layer, act_layer,
                              expand_ratio, self.head_dim, vit_stage=i >= self.vit_from,
                              **select_kwargs) for i in range(len(widths) - 1)
        ])
        self.head_in_conv = ConvNormAct(widths[-1], s['head_widths'][0], 1,
                                        norm_layer=norm_layer, act_layer=act_layer) if (
                                            self.num_outputs - 1 in self.out_indices) else None

    # ----------------------------------------------------------------- forward
    def forward(self, x: Tensor) -> Tuple[Tensor, ...]:
        outs = []
        x = self.stem(x)
        if 0 in self.out_indices:
            outs.append(x)
        for i, stage in enumerate(self.stages, start=1):
            x = stage(x)
            if i in self.out_indices:
                outs.append(x)
        if self.head_in_conv is not None:
            outs.append(self.head_in_conv(x))
        return tuple(outs)

    def stem_parts(self) -> list:
        return [self.stem]

    def stage_parts(self, i: int) -> list:
        return [self.stages[i]]

    def tokens_to_bchw(self, act: Tensor, image_hw: Tuple[int, int]) -> Tensor:
        return feature_to_bchw(act)

    @classmethod
    def convert_checkpoint(cls, state_dict: Dict[str, Tensor], arch: str,
                           layout: str = 'timm') -> Dict[str, Tensor]:
        check_choice('layout', layout, cls.checkpoint_layouts, cls.__name__)
        return convert_timm(state_dict, arch)

    def train(self, mode: bool = True):
        super().train(mode)
        if mode and self.norm_eval:
            for m in self.modules():
                if isinstance(m, _BatchNorm):
                    m.eval()
        return self

    # ----------------------------------------------------------------- method
    def attentions(self) -> Dict[str, LiteMLA]:
        """Path → LiteMLA of every transformer block (supernet or pruned)."""
        return {n: m for n, m in self.named_modules() if isinstance(m, LiteMLA)}

    def cost_terms(self) -> List[CostTerm]:
        """Per prunable LiteMLA j (DCS paper A.1, method.md §3), at the nominal 224 input:

        * paper: (2D̃² + D̃) + (1 + D̃)·H·W·C with H×W the block's feature map and C the output
          channels of the next MBConv's first conv (a proxy: the residual keeps all channels);
        * flops: H·W·C_out per kept channel, the MACs of ``proj`` (the only layer whose shape
          depends on D̃; the gather before it costs no MACs).

        With hidden-unit selection the block's MBConv (its FFN) adds H·W·(C + 9 + C) per kept
        expanded channel (1×1 expand, 3×3 depthwise, 1×1 project; ``flops_per_hidden``); in
        ``'paper'`` mode the paper's term is scaled by H̃/H (:class:`CostTerm`). With
        ``select_hidden='all'`` every other gated MBConv adds a hidden-only term (no D̃;
        ``'flops'`` mode only: the paper has no such term).
        """
        terms = []
        for i, stage in enumerate(self.stages):
            hw = (self.nominal_size // self.strides[i + 1])**2
            for j, block in enumerate(stage.blocks):
                if not isinstance(block, EfficientVitBlock):
                    mb = block.main
                    if getattr(mb, 'hidden_select', None) is not None:
                        hw_in = hw * (4 if j == 0 else 1)  # the first MBConv strides by 2
                        k = mb.depth_conv.conv.kernel_size
                        # + the BatchNorms after the expand and depthwise convs (2 per element
                        # in eval, mmengine's count)
                        bn1 = 2 if isinstance(mb.inverted_conv.norm, _BatchNorm) else 0
                        bn2 = 2 if isinstance(mb.depth_conv.norm, _BatchNorm) else 0
                        terms.append(CostTerm(None, hidden=mb.hidden_select,
                                              hidden_dim=float(mb.hidden_features),
                                              flops_per_hidden=float(
                                                  hw_in * (mb.inverted_conv.conv.in_channels
                                                           + bn1)
                                                  + hw * (k[0] * k[1] + bn2
                                                          + mb.point_conv.conv.out_channels))))
                    continue
                attn = block.context_module.main
                if attn.select is None:
                    continue
                mb = block.local_module.main
                next_conv = mb.inverted_conv.conv
                hidden = getattr(mb, 'hidden_select', None)
                per_hidden = 0. if hidden is None else float(hw * (
                    next_conv.in_channels + mb.depth_conv.conv.kernel_size[0]
                    * mb.depth_conv.conv.kernel_size[1] + mb.point_conv.conv.out_channels))
                terms.append(CostTerm(attn.select, mlp_layers=1,
                                      conv_hwc=float(hw * next_conv.out_channels),
                                      flops_per_channel=float(hw * attn.proj.conv.out_channels),
                                      params_per_channel=float(attn.proj.conv.out_channels),
                                      hidden=hidden, hidden_dim=float(mb.hidden_features),
                                      flops_per_hidden=per_hidden))
        return terms

    # ----------------------------------------------------------------- checkpoints
    def load_converted(self, state_dict: dict, strict: bool = True):
        """As :meth:`SelectableBackbone.load_converted`; the classification feature
        (``head_in_conv``) of a checkpoint is dropped when this backbone does not build it."""
        if self.head_in_conv is None:
            state_dict = {k: v for k, v in state_dict.items()
                          if not k.startswith('head_in_conv.')}
        return super().load_converted(state_dict, strict)


# ----------------------------------------------------------------------------- timm conversion
def convert_timm(state_dict: Dict[str, Tensor], arch: str) -> Dict[str, Tensor]:
    """A timm ``efficientvit_b*`` state dict → the state dict of the mmpretrain ImageClassifier
    of ``configs/_base_/models/efficientvit_<arch>.py`` (``backbone.*`` keeps timm's names;
    ``head.in_conv`` → ``backbone.head_in_conv``; ``head.classifier`` → ``head.classifier``)."""
    if arch not in TIMM_MODELS:
        raise ValueError(f'convert_timm: unknown arch {arch!r}; valid: {", ".join(TIMM_MODELS)}')
    out = {}
    for k, v in state_dict.items():
        if k.startswith('head.in_conv.'):
            out['backbone.head_in_conv.' + k[len('head.in_conv.'):]] = v
        elif k.startswith('head.classifier.'):
            out[k] = v
        elif re.match(r'^(stem|stages)\.', k):
            out['backbone.' + k] = v
        else:
            raise KeyError(f'convert_timm({arch}): unexpected timm key {k!r}')
    return out
