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
    """Lightweight multi-scale ReLU linear attention, with the two DCS channel selections.

    Args:
        in_channels, out_channels: C in and out.
        dim: channels per head (heads = in_channels // dim).
        scales: kernel sizes of the multi-scale aggregation branches.
        eps: of the linear attention's normaliser.
        qk_select: ``None``, ``'shared'`` (one mask M for q and k) or ``'separate'``.
        select: add α over the concatenated branch outputs (the supernet).
        keep: the kept channels of the concatenated outputs (the pruned, deployed form).
        gate_init, tau: initial gate logits and temperature.
    """

    def __init__(self, in_channels: int, out_channels: int, dim: int = 8,
                 scales: Sequence[int] = (5, ), eps: float = 1e-5,
                 norm_layer: Type[nn.Module] = nn.BatchNorm2d, qk_select: Optional[str] = None,
                 select: bool = False, keep: Union[None, Tensor, Sequence[int]] = None,
                 gate_init: float = DEFAULT_GATE_INIT, tau: float = 4.5,
                 theta_rank: Optional[int] = None):
        super().__init__()
        if qk_select not in (None, 'shared', 'separate'):
            raise ValueError(f'qk_select must be None, "shared" or "separate", got {qk_select!r}')
        heads = in_channels // dim
        total_dim = heads * dim
        self._args = dict(in_channels=in_channels, out_channels=out_channels, dim=dim,
                          scales=tuple(scales), eps=eps, norm_layer=norm_layer,
                          qk_select=qk_select, gate_init=gate_init, tau=tau,
                          theta_rank=theta_rank)
        self.eps = eps
        self.dim = dim
        self.heads = heads
        self.total_dim = total_dim
        self.num_branches = 1 + len(scales)
        #: channels of the concatenated branch outputs (D of the α selection)
        self.cat_dim = total_dim * self.num_branches
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
        self.select = ChannelSelector(self.cat_dim, gate_init, tau) if (
            select and keep is None) else None
        self.proj = ConvNormAct(self.cat_dim if keep is None else keep.numel(), out_channels, 1,
                                norm_layer=norm_layer, act_layer=None)

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
        out = out.transpose(-1, -2).reshape(B, -1, H, W)
        if self.keep is not None:
            out = out.index_select(1, self.keep)
        elif self.select is not None:
            out = out * self.select().to(out.dtype).view(1, -1, 1, 1)
        return self.proj(out)

    @torch.no_grad()
    def pruned(self, keep: Union[Tensor, Sequence[int]], pad: Sequence[int] = ()) -> 'LiteMLA':
        """The deployed LiteMLA for these kept channels (``proj``'s input sliced to them; the
        ``pad`` channels read with zero weights)."""
        keep = torch.as_tensor(keep, dtype=torch.long, device=self.proj.conv.weight.device)
        out = LiteMLA(**self._args, keep=keep.cpu())
        state = {k: v for k, v in self.state_dict().items() if not k.startswith('select.')}
        state['proj.conv.weight'] = state['proj.conv.weight'][:, keep].clone()
        state['proj.conv.weight'][:, zero_positions(keep, pad)] = 0
        state['keep'] = keep
        out.load_state_dict(state)
        return out.to(self.proj.conv.weight.device).train(self.training)

    def channel_norms(self) -> Tensor:
        """L2 norm of the ``proj`` weights that read each selected channel (the magnitude
        pruner's score, :mod:`mmdcs.selection.budget`)."""
        return self.proj.conv.weight.detach().float().pow(2).sum(dim=(0, 2, 3)).sqrt()

    @property
    def kept(self) -> int:
        return self.cat_dim if self.keep is None else self.keep.numel()

    def extra_repr(self) -> str:
        return f'heads={self.heads}, dim={self.dim}, kept={self.kept}/{self.cat_dim}'


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

    def __init__(self, arch: str = 'efficientvit-b1', variant: Optional[str] = None,
                 subnet=None, qk_mask: str = 'shared', gate_init: float = DEFAULT_GATE_INIT,
                 tau: float = 4.5, in_channels: int = 3,
                 out_indices: Union[int, Sequence[int]] = (5, ), frozen_stages: int = -1,
                 norm_eval: bool = False, expand_ratio: float = 4, init_cfg=None,
                 select_hidden: bool = False, theta_rank: Optional[int] = None):
        super().__init__(arch, variant, subnet, qk_mask, gate_init, tau, init_cfg,
                         select_hidden=select_hidden, theta_rank=theta_rank)
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
                             theta_rank=self.theta_rank, select_hidden=self.select_hidden)
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
