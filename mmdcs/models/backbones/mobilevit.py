"""MobileViT (Mehta & Rastegari, ICLR 2022) with DCS / KCR transformer layers.

Layout, numerics and parameter names are timm's ``mobilevit_xs`` / ``mobilevit_s`` (a ByobNet,
``timm/models/mobilevit.py`` + ``byobnet.py``), so a timm checkpoint converts by adding the
``backbone.`` prefix (:func:`convert_timm`):

* ``stem``: 3×3 conv, stride 2, 16 channels, BatchNorm (eps 1e-5), SiLU (``stem.conv``,
  ``stem.bn``);
* ``stages.0``, ``stages.1``: MobileNetV2 inverted residuals (timm's ``BottleneckBlock`` with
  ``bottle_in=True, linear_out=True``, group size 1): 1×1 expand ×4 + BN + SiLU, 3×3 depthwise
  (stride) + BN + SiLU, 1×1 project + BN; identity shortcut only when shape is kept;
* ``stages.2..4``: one inverted residual (stride 2) and one MobileViT block each;
* ``final_conv``: 1×1 conv + BN + SiLU to 384 (XS) / 640 (S) channels, applied to the last stage.

MobileViT block (``stages.i.1``)::

    y = conv_1x1(conv_kxk(x))                  # local: 3×3 conv-BN-SiLU, 1×1 conv to D (no bias)
    t = unfold(y)                              # (B·P, N, D): P = 2×2 pixel positions of a patch,
                                               # N patches; attention runs over the N patches of
                                               # each of the P pixel positions
    t = layers(t); t = norm(t)                 # L pre-norm transformer layers, 4 heads,
                                               # qkv bias, SiLU MLP of ratio 2; final LayerNorm
    t = t ⊙ g_L                                # projection rule (below)
    z = conv_proj(fold(t))                     # 1×1 conv-BN-SiLU, D → C
    out = conv_fusion(cat(x, z))               # 3×3 conv-BN-SiLU, 2C → C

A feature map whose size is not a multiple of the 2×2 patch is resized (bilinear) to the next
multiple before unfolding and back after folding, as timm does; so any input size works
(stage outputs at strides 2, 4, 8, 16, 32, each ``ceil``-halved by the stride-2 convs).

DCS (method.md §2 "MobileViT"): every transformer layer is a DCS layer,
``x = x + Attn_M(LN(x)); x = x + g ⊙ MLP(g ⊙ LN(x))`` with the per-token Q/K mask
``M = gate(Linear_θ(LN(x)))`` (:class:`~mmdcs.selection.DCSAttention`) and ``g = gate(α)``
(:class:`~mmdcs.selection.GatedMLP`). KCR and the ablations drop one of the two selections.

**Projection rule.** The paper charges the 1×1 projection conv after the transformer as
``(1 + D̃)·H·W·C``, i.e. it reads D̃ channels. So the transformer's output, after its final
LayerNorm and before folding, is multiplied by the **last** layer's gate ``g_L`` (the very sample
that layer's MLP used, not a new draw) before ``conv_proj``. In the pruned network the kept
channels of that last layer are gathered instead and ``conv_proj.conv`` reads only those D̃
input channels (weights sliced, :meth:`MobileViTBlock.prune_projection`, called from
:meth:`MobileViT._after_subnet`). With all gates open this is exactly the baseline.

Deviation from timm (training only): timm's ``BottleneckBlock`` applies drop-path to the main
branch even of blocks without a shortcut (dropping a whole sample's output); here drop-path acts
on residual branches only. Eval outputs are identical.
"""
import math
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn.bricks import DropPath
from torch import Tensor

from mmdcs.registry import MODELS
from mmdcs.selection import (DEFAULT_GATE_INIT, ChannelSelector, CostTerm, DCSAttention,
                             GatedMLP, QKChannelSelector, SubnetSpec, mlp_residual)
from mmdcs.selection.cost import mlp_cost_term
from mmdcs.selection.mlp import (inverted_bottleneck_norms, narrow_inverted_bottleneck_,
                                 zero_positions)
from .base import (AttentionLayout, SelectableBackbone, check_choice, drop_path_rates,
                   enclosing_module, feature_to_bchw, normalize_out_indices, query_cell)

#: arch -> timm model name (for conversion and the equivalence tests)
TIMM_MODELS = {
    'mobilevit-xs': 'mobilevit_xs',
    'mobilevit-s': 'mobilevit_s',
}


def make_divisible(v: float, divisor: int = 8, round_limit: float = .9) -> int:
    """timm's channel rounding (``timm.layers.make_divisible``)."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < round_limit * v:
        new_v += divisor
    return new_v


# ---------------------------------------------------------------------------------- layers
class ConvNormAct(nn.Module):
    """Conv (no bias) + BatchNorm (eps 1e-5) + optional SiLU, timm's ``ConvNormAct`` (the
    activation lives inside timm's ``bn``; it has no parameters, so the names match)."""

    def __init__(self, in_chs: int, out_chs: int, kernel_size: int = 1, stride: int = 1,
                 groups: int = 1, act: bool = True):
        super().__init__()
        # timm's symmetric padding: ((stride - 1) + (k - 1)) // 2
        padding = ((stride - 1) + (kernel_size - 1)) // 2
        self.conv = nn.Conv2d(in_chs, out_chs, kernel_size, stride, padding, groups=groups,
                              bias=False)
        self.bn = nn.BatchNorm2d(out_chs)
        self.act = nn.SiLU() if act else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.bn(self.conv(x)))


class InvertedResidual(nn.Module):
    """MobileNetV2 block, timm's ``BottleneckBlock(bottle_in=True, linear_out=True, gs=1)``."""

    def __init__(self, in_chs: int, out_chs: int, stride: int = 1, expand_ratio: float = 4.,
                 drop_path: float = 0., select_hidden: bool = False,
                 gate_init: float = DEFAULT_GATE_INIT, tau: float = 4.5):
        super().__init__()
        mid = make_divisible(in_chs * expand_ratio)
        self.conv1_1x1 = ConvNormAct(in_chs, mid, 1)
        self.conv2_kxk = ConvNormAct(mid, mid, 3, stride=stride, groups=mid)
        self.conv3_1x1 = ConvNormAct(mid, out_chs, 1, act=False)
        self.has_shortcut = in_chs == out_chs and stride == 1
        self.drop_path = DropPath(drop_path) if drop_path > 0 and self.has_shortcut \
            else nn.Identity()
        #: the expanded width (hidden-prunable module, ``select_hidden='all'``)
        self.hidden_features = mid
        self.hidden_select = ChannelSelector(mid, gate_init, tau) if select_hidden else None

    def forward(self, x: Tensor) -> Tensor:
        h = self.conv2_kxk(self.conv1_1x1(x))
        if self.hidden_select is not None:
            h = h * self.hidden_select().to(h.dtype).view(1, -1, 1, 1)
        out = self.conv3_1x1(h)
        if self.has_shortcut:
            out = x + self.drop_path(out)
        return out

    def hidden_norms(self) -> Tensor:
        """L2 norm of each expanded channel's weights (the magnitude pruner's score)."""
        return inverted_bottleneck_norms(self.conv1_1x1, self.conv2_kxk, self.conv3_1x1)

    @torch.no_grad()
    def prune_hidden_(self, keep: Union[Tensor, Sequence[int]], pad: Sequence[int] = ()) -> None:
        """Keep the ``keep`` expanded channels, in place (the ``pad`` ones with zero weights)."""
        self.hidden_features = narrow_inverted_bottleneck_(
            self.conv1_1x1, self.conv2_kxk, self.conv3_1x1, keep, pad)
        self.hidden_select = None


class TransformerLayer(nn.Module):
    """Pre-norm transformer layer (timm's ``vision_transformer.Block`` names: ``norm1``, ``attn``,
    ``norm2``, ``mlp``) whose attention and MLP carry the DCS / KCR channel selections."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float, drop: float = 0.,
                 attn_drop: float = 0., drop_path: float = 0., qk_select: Optional[str] = None,
                 mlp_select: bool = False, gate_init: float = DEFAULT_GATE_INIT,
                 tau: float = 4.5, select_hidden: bool = False,
                 theta_rank: Optional[int] = None, select_heads: bool = False):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = DCSAttention(dim, num_heads, qkv_bias=True, attn_drop=attn_drop,
                                 proj_drop=drop, qk_select=qk_select, gate_init=gate_init,
                                 tau=tau, theta_rank=theta_rank, select_heads=select_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = GatedMLP(dim, int(dim * mlp_ratio), act_layer=nn.SiLU, drop=drop,
                            select=mlp_select, gate_init=gate_init, tau=tau,
                            select_hidden=select_hidden)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.drop_path(self.attn(self.norm1(x)))
        # x is this layer's own tensor: a pruned MLP may add its update into it in place
        return mlp_residual(self.mlp, x, self.norm2(x), self.drop_path, inplace=True)


def _keep_gate(selector: nn.Module, args, gate: Tensor) -> None:
    """Forward hook on the last layer's α selector: keep the gate its MLP just used, so that the
    projection is masked by the same sample (in training every call draws new Gumbel noise).
    The block pops it right away, so no graph is kept on the module between forwards."""
    selector.__dict__['last_gate'] = gate


class MobileViTBlock(nn.Module):
    """Local conv → unfold → transformer layers → LayerNorm → (gate) → fold → 1×1 projection →
    3×3 fusion with the block input (timm's ``MobileVitBlock``; see the module docstring)."""

    def __init__(self, in_chs: int, transformer_dim: int, depth: int, num_heads: int = 4,
                 mlp_ratio: float = 2., patch_size: int = 2, drop: float = 0.,
                 attn_drop: float = 0., drop_path: float = 0., qk_select: Optional[str] = None,
                 mlp_select: bool = False, gate_init: float = DEFAULT_GATE_INIT,
                 tau: float = 4.5, select_hidden: bool = False,
                 theta_rank: Optional[int] = None, select_heads: bool = False):
        super().__init__()
        self.transformer_dim = transformer_dim
        self.conv_kxk = ConvNormAct(in_chs, in_chs, 3)
        self.conv_1x1 = nn.Conv2d(in_chs, transformer_dim, 1, bias=False)
        self.transformer = nn.Sequential(*[
            TransformerLayer(transformer_dim, num_heads, mlp_ratio, drop, attn_drop, drop_path,
                             qk_select, mlp_select, gate_init, tau, select_hidden,
                             theta_rank, select_heads) for _ in range(depth)
        ])
        self.norm = nn.LayerNorm(transformer_dim)
        self.conv_proj = ConvNormAct(transformer_dim, in_chs, 1)
        self.conv_fusion = ConvNormAct(2 * in_chs, in_chs, 3)
        self.patch_size = (patch_size, patch_size)
        self.patch_area = patch_size * patch_size
        #: kept channels of the last layer once pruned: conv_proj reads only these
        self.register_buffer('proj_keep', None, persistent=False)
        last = self.transformer[-1].mlp.select
        if last is not None:
            last.register_forward_hook(_keep_gate)

    @property
    def last_mlp(self) -> nn.Module:
        return self.transformer[-1].mlp

    # ------------------------------------------------------------------ unfold / fold
    def _unfold(self, x: Tensor) -> Tuple[Tensor, tuple]:
        """(B, D, H, W) → (B·P, N, D), as timm (resizing to a multiple of the patch first)."""
        ph, pw = self.patch_size
        B, C, H, W = x.shape
        new_h, new_w = math.ceil(H / ph) * ph, math.ceil(W / pw) * pw
        nh, nw = new_h // ph, new_w // pw
        if new_h != H or new_w != W:
            x = F.interpolate(x, size=(new_h, new_w), mode='bilinear', align_corners=False)
        # [B, C, H, W] -> [B * C * n_h, n_w, p_h, p_w] -> [B * P, N, C]
        x = x.reshape(B * C * nh, ph, nw, pw).transpose(1, 2)
        x = x.reshape(B, C, nh * nw, self.patch_area).transpose(1, 3)
        return x.reshape(B * self.patch_area, nh * nw, C), (B, H, W, nh, nw)

    def _fold(self, x: Tensor, shape: tuple) -> Tensor:
        """(B·P, N, C') → (B, C', H, W); C' may be D or the D̃ kept channels."""
        B, H, W, nh, nw = shape
        ph, pw = self.patch_size
        C = x.shape[-1]
        x = x.contiguous().view(B, self.patch_area, nh * nw, C)
        x = x.transpose(1, 3).reshape(B * C * nh, nw, ph, pw)
        x = x.transpose(1, 2).reshape(B, C, nh * ph, nw * pw)
        if nh * ph != H or nw * pw != W:
            x = F.interpolate(x, size=(H, W), mode='bilinear', align_corners=False)
        return x

    def forward(self, x: Tensor) -> Tensor:
        shortcut = x
        x = self.conv_1x1(self.conv_kxk(x))
        x, shape = self._unfold(x)
        x = self.norm(self.transformer(x))
        # projection rule: the projection reads the last layer's kept channels only
        if self.proj_keep is not None:
            x = x.index_select(-1, self.proj_keep)
        elif getattr(self.last_mlp, 'select', None) is not None:
            x = x * self.last_mlp.select.__dict__.pop('last_gate')
        x = self.conv_proj(self._fold(x, shape))
        return self.conv_fusion(torch.cat((shortcut, x), dim=1))

    # ------------------------------------------------------------------ pruning
    @torch.no_grad()
    def prune_projection(self, keep: Union[Tensor, Sequence[int]],
                         pad: Sequence[int] = ()) -> None:
        """Make ``conv_proj.conv`` read only the ``keep`` channels (weights sliced; the ``pad``
        channels, kept for alignment only, read with zero weights)."""
        conv = self.conv_proj.conv
        keep = torch.as_tensor(keep, dtype=torch.long, device=conv.weight.device)
        if self.proj_keep is not None:  # already pruned: only the same selection is a no-op
            if not torch.equal(self.proj_keep, keep):
                raise RuntimeError('this block\'s projection is already pruned to other '
                                   'channels')
            return
        new = nn.Conv2d(keep.numel(), conv.out_channels, 1, bias=False).to(
            conv.weight.device, conv.weight.dtype)
        new.weight.copy_(conv.weight[:, keep])
        new.weight[:, zero_positions(keep, pad)] = 0
        self.conv_proj.conv = new
        self.proj_keep = keep

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        """A pruned block also accepts the full (D-input) projection weight of a supernet
        checkpoint (e.g. from :func:`~mmdcs.selection.prune_state_dict`, which prunes the MLPs
        only) and slices it to the kept channels."""
        name = prefix + 'conv_proj.conv.weight'
        w = state_dict.get(name)
        if (self.proj_keep is not None and w is not None and w.ndim == 4
                and w.shape[1] == self.transformer_dim
                and self.proj_keep.numel() != self.transformer_dim):
            state_dict[name] = w.index_select(1, self.proj_keep.to(w.device))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


# ---------------------------------------------------------------------------------- model
class PatchLayout(AttentionLayout):
    """MobileViT: attention runs over the N = ⌈H/2⌉·⌈W/2⌉ patches of the block's map, one
    sequence per pixel position of a 2×2 patch (P = 4 per image); a query's map is the mean of
    the P positions."""

    def __init__(self, block: 'MobileViTBlock'):
        self.watch = block
        self.block_hw: Optional[Tuple[int, int]] = None

    def observe(self, module, args):
        self.block_hw = (args[0].shape[2], args[0].shape[3])  # (B, C, H, W)

    def query_map(self, attn, image, query, image_hw):
        heads = attn.shape[1]
        H, W = self.block_hw
        ph, pw = self.watch.patch_size
        nh, nw = math.ceil(H / ph), math.ceil(W / pw)
        P = self.watch.patch_area
        r, c = query_cell(query, nh, nw)
        rows = attn[image * P:(image + 1) * P, :, r * nw + c, :]  # (P, heads, N)
        return rows.mean(0).reshape(heads, nh, nw), (nh, nw), (r, c)


@MODELS.register_module()
class MobileViT(SelectableBackbone):
    """MobileViT backbone (timm's ``mobilevit_xs`` / ``mobilevit_s``) with DCS / KCR transformer
    layers.

    Args:
        arch: ``'mobilevit-xs'`` or ``'mobilevit-s'``.
        variant: ``'baseline'``, ``'dcs'``, ``'kcr'``, ``'dcs-arch1'``, ``'dcs-arch2'``.
        subnet: build the pruned network of this subnet (path, dict or SubnetSpec).
        out_indices: which of the 5 stage outputs (strides 2, 4, 8, 16, 32) to return; the last
            one is taken after ``final_conv``. Default ``(4, )`` (classification).
        frozen_stages: -1 nothing; 0 the stem; k >= 1 also stages ``0 .. k - 1`` (``5``: also
            ``final_conv``). See :class:`SelectableBackbone`.
        norm_eval: keep the BatchNorm layers in eval mode while training (detection).
        in_channels: input image channels.
        drop_rate: dropout after the attention projection and in the MLPs (timm's ``drop``).
        attn_drop_rate: attention-weight dropout.
        drop_path_rate: stochastic depth, rising linearly over the 10 blocks as in timm
            (a MobileViT block's transformer layers share its rate).
        qk_mask, gate_init, tau, init_cfg: see :class:`SelectableBackbone`.
        select_heads: a gate per head of every transformer layer's attention (4 heads of
            D/4 channels; α of heads beside α of channels, searched by the same loop;
            method.md §2.7); the subnet's ``heads`` list the kept heads and the pruned
            attentions are narrower. Off by default (the paper).
    """
    family = 'mobilevit'
    #: the input size of the paper's FLOPs (cost terms are counted at it)
    nominal_size = 256
    #: the DCS paper's MobileViT-XS/S (method.md §9)
    paper_variant = 'dcs'
    #: the last stage (a (B, C, h, w) map)
    cam_layer = 'stages.-1'
    timm_models = TIMM_MODELS
    #: a gate per head (``select_heads=True``) and a subnet's kept heads (method.md §2.7): the
    #: transformer layers' attentions are DCSAttentions, as ViT's
    supports_heads = True
    # Per stage: output channels, stride, inverted residual blocks, and (0 if none) the
    # transformer width D and depth L of the stage's MobileViT block.
    arch_zoo = {
        'mobilevit-xs':
        dict(
            stem_channels=16,
            channels=(32, 48, 64, 80, 96),
            strides=(1, 2, 2, 2, 2),
            ir_blocks=(1, 3, 1, 1, 1),
            transformer_dims=(0, 0, 96, 120, 144),
            transformer_depths=(0, 0, 2, 4, 3),
            expand_ratio=4.,
            num_heads=4,
            mlp_ratio=2.,
            patch_size=2,
            num_features=384),
        'mobilevit-s':
        dict(
            stem_channels=16,
            channels=(32, 64, 96, 128, 160),
            strides=(1, 2, 2, 2, 2),
            ir_blocks=(1, 3, 1, 1, 1),
            transformer_dims=(0, 0, 144, 192, 240),
            transformer_depths=(0, 0, 2, 4, 3),
            expand_ratio=4.,
            num_heads=4,
            mlp_ratio=2.,
            patch_size=2,
            num_features=640),
    }

    def __init__(self, arch: str = 'mobilevit-s', variant: Optional[str] = None,
                 subnet: Union[None, str, dict, SubnetSpec] = None,
                 out_indices: Union[int, Sequence[int]] = (4, ), frozen_stages: int = -1,
                 norm_eval: bool = False, in_channels: int = 3, drop_rate: float = 0.,
                 attn_drop_rate: float = 0., drop_path_rate: float = 0.,
                 qk_mask: str = 'shared', gate_init: float = DEFAULT_GATE_INIT, tau: float = 4.5,
                 init_cfg=None, select_hidden: bool = False, theta_rank: Optional[int] = None,
                 select_heads: bool = False):
        super().__init__(arch, variant, subnet, qk_mask, gate_init, tau, init_cfg,
                         select_hidden=select_hidden, theta_rank=theta_rank,
                         select_heads=select_heads)
        s = self.arch_settings
        self.num_stages = num_stages = len(s['channels'])
        self.out_indices = normalize_out_indices(out_indices, num_stages, type(self).__name__)
        self._set_frozen_stages(frozen_stages)
        self.norm_eval = norm_eval

        self.stem = ConvNormAct(in_channels, s['stem_channels'], 3, stride=2)
        num_blocks = sum(n + (1 if d else 0)
                         for n, d in zip(s['ir_blocks'], s['transformer_depths']))
        dpr = iter(drop_path_rates(drop_path_rate, num_blocks))
        stages = []
        prev, stride = s['stem_channels'], 2
        #: (H, W, C) of each MobileViT block's feature map at the nominal input size
        self._block_hwc: Dict[str, Tuple[int, int, int]] = {}
        #: (input side, output side) of each MV2 block at the nominal input size
        self._ir_hw: Dict[str, Tuple[int, int]] = {}
        for i, (c, st, n, dim, depth) in enumerate(
                zip(s['channels'], s['strides'], s['ir_blocks'], s['transformer_dims'],
                    s['transformer_depths'])):
            blocks = []
            for j in range(n):
                blocks.append(InvertedResidual(prev, c, st if j == 0 else 1, s['expand_ratio'],
                                               next(dpr), self.select_hidden == 'all',
                                               gate_init, tau))
                self._ir_hw[f'stages.{i}.{j}'] = (
                    math.ceil(self.nominal_size / (stride if j == 0 else stride * st)),
                    math.ceil(self.nominal_size / (stride * st)))
                prev = c
            stride *= st
            if depth:
                blocks.append(
                    MobileViTBlock(c, dim, depth, s['num_heads'], s['mlp_ratio'],
                                   s['patch_size'], drop_rate, attn_drop_rate, next(dpr),
                                   self.qk_select, self.mlp_select, gate_init, tau,
                                   bool(self.select_hidden), self.theta_rank,
                                   self.select_heads))
                hw = math.ceil(self.nominal_size / stride)
                self._block_hwc[f'stages.{i}.{len(blocks) - 1}'] = (hw, hw, c)
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.num_features = s['num_features']
        self.final_conv = ConvNormAct(prev, self.num_features, 1)
        #: channels of the 5 stage outputs (the last after final_conv)
        self.out_channels = tuple(s['channels'][:-1]) + (self.num_features, )

        self._timm_init()

    # ------------------------------------------------------------------ init
    @torch.no_grad()
    def _timm_init(self) -> None:
        """timm's ByobNet init: conv normal(0, sqrt(2 / fan_out)), Linear normal(0, .01),
        BatchNorm 1 / 0, zero last BN of residual inverted residuals (``zero_init_last``). The
        selection parameters (Linear_θ, α) keep their "all kept" initialisation."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels // m.groups
                m.weight.normal_(0, math.sqrt(2.0 / fan_out))
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=.01)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        for m in self.modules():
            if isinstance(m, QKChannelSelector):
                m.reset_parameters()
            elif isinstance(m, InvertedResidual) and m.has_shortcut:
                nn.init.zeros_(m.conv3_1x1.bn.weight)

    def init_weights(self) -> None:
        """timm's init (:meth:`_timm_init`), unless ``init_cfg`` loads a Pretrained checkpoint;
        another ``init_cfg`` (e.g. Kaiming) is applied after it by ``BaseModule``."""
        cfgs = self.init_cfg if isinstance(self.init_cfg, list) else [self.init_cfg]
        pretrained = any(isinstance(c, dict) and c.get('type') == 'Pretrained' for c in cfgs)
        if not pretrained and not self._is_init:
            self._timm_init()
        super().init_weights()

    # ------------------------------------------------------------------ subnet
    def mobilevit_blocks(self) -> Dict[str, MobileViTBlock]:
        return {n: m for n, m in self.named_modules() if isinstance(m, MobileViTBlock)}

    def _after_subnet(self, spec: SubnetSpec) -> None:
        """Projection rule, pruned form: each block's ``conv_proj`` reads the kept channels of
        its last transformer layer."""
        blocks = {b.name: b for b in spec.blocks}
        for name, block in self.mobilevit_blocks().items():
            last = blocks[f'{name}.transformer.{len(block.transformer) - 1}.mlp']
            block.prune_projection(last.keep, last.pad)

    # ------------------------------------------------------------------ cost
    def cost_terms(self) -> List[CostTerm]:
        """One term per transformer layer (at the nominal 256×256 input; H×W the block's
        feature map, C its channels, hidden = 2·D):

        * paper: ``2·(2D̃² + D̃)`` for every layer, ``+ (1 + D̃)·H·W·C`` for the last layer of a
          block (the projection conv reads its D̃ channels);
        * exact: fc1 + fc2 over all H·W pixels (4 per patch × patches): ``2·H·W`` per (kept
          channel, kept hidden unit) pair (H̃ = hidden without hidden-unit selection), plus
          ``H·W·C`` per kept channel for the projection conv after the last layer.
        """
        terms = []
        # select_hidden='all': the MV2 blocks' expanded channels (1×1 expand at the input side,
        # 3×3 depthwise and 1×1 project at the output side), hidden-only terms ('flops' mode)
        for name, (side_in, side_out) in self._ir_hw.items():
            ir = self.get_submodule(name)
            if getattr(ir, 'hidden_select', None) is None:
                continue
            k = ir.conv2_kxk.conv.kernel_size
            terms.append(CostTerm(None, hidden=ir.hidden_select,
                                  hidden_dim=float(ir.hidden_features),
                                  flops_per_hidden=float(
                                      # convs, + the two BatchNorms (2 per element in eval,
                                      # mmengine's count)
                                      side_in**2 * (ir.conv1_1x1.conv.in_channels + 2)
                                      + side_out**2 * (k[0] * k[1] + 2
                                                       + ir.conv3_1x1.conv.out_channels))))
        for name, block in self.mobilevit_blocks().items():
            h, w, c = self._block_hwc[name]
            depth = len(block.transformer)
            for j, layer in enumerate(block.transformer):
                mlp = layer.mlp
                if not isinstance(mlp, GatedMLP) or mlp.select is None:
                    continue
                last = j == depth - 1
                conv_hwc = h * w * c if last else 0
                proj = block.conv_proj.conv.out_channels if last else 0
                terms.append(
                    mlp_cost_term(mlp.select, mlp.hidden_select, mlp.hidden_features,
                                  float(2 * h * w), mlp_layers=2, conv_hwc=float(conv_hwc),
                                  flops_per_channel=float(conv_hwc),
                                  params_per_channel=float(mlp.params_per_channel + proj)))
        return terms

    # ------------------------------------------------------------------ forward
    def forward(self, x: Tensor) -> Tuple[Tensor, ...]:
        x = self.stem(x)
        outs = []
        last = len(self.stages) - 1
        for i, stage in enumerate(self.stages):
            x = stage(x)
            if i == last:
                x = self.final_conv(x)
            if i in self.out_indices:
                outs.append(x)
        return tuple(outs)

    # ------------------------------------------------------------------ contract
    def stem_parts(self) -> list:
        return [self.stem]

    def stage_parts(self, i: int) -> list:
        return [self.stages[i]] + ([self.final_conv] if i == len(self.stages) - 1 else [])

    def attention_layout(self, name: str) -> 'PatchLayout':
        return PatchLayout(enclosing_module(self, name, MobileViTBlock))

    def tokens_to_bchw(self, act: Tensor, image_hw: Tuple[int, int]) -> Tensor:
        return feature_to_bchw(act)

    @classmethod
    def convert_checkpoint(cls, state_dict: Dict[str, Tensor], arch: str,
                           layout: str = 'timm') -> Dict[str, Tensor]:
        check_choice('layout', layout, cls.checkpoint_layouts, cls.__name__)
        return convert_timm(state_dict, arch)

    def train(self, mode: bool = True) -> 'MobileViT':
        super().train(mode)
        if mode and self.norm_eval:
            for m in self.modules():
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    m.eval()
        return self


def convert_timm(state_dict: Dict[str, Tensor], arch: str) -> Dict[str, Tensor]:
    """A timm ``mobilevit_xs`` / ``mobilevit_s`` state dict → the state dict of the mmpretrain
    ``ImageClassifier`` of ``configs/_base_/models/mobilevit_<arch>.py``.

    Mapping: ``head.fc.*`` → ``head.fc.*`` (``LinearClsHead``; timm's head is global average
    pooling, dropout 0, ``fc``, no pre-logits layer); every other key ``k`` → ``backbone.k``
    (``stem.*``, ``stages.*``, ``final_conv.*`` keep timm's names: ``conv``/``bn`` of ConvNormAct,
    ``conv1_1x1``/``conv2_kxk``/``conv3_1x1`` of the inverted residuals, ``conv_kxk``,
    ``conv_1x1``, ``transformer.{j}.{norm1,attn.qkv,attn.proj,norm2,mlp.fc1,mlp.fc2}``, ``norm``,
    ``conv_proj``, ``conv_fusion`` of the MobileViT blocks).
    """
    check_choice('arch', arch, list(TIMM_MODELS), 'convert_timm')
    settings = MobileViT.arch_zoo[arch]
    out = {}
    for k, v in state_dict.items():
        if k.startswith('head.fc.'):
            out[k] = v
        elif k.startswith(('stem.', 'stages.', 'final_conv.')):
            out['backbone.' + k] = v
        else:
            raise KeyError(f'convert_timm({arch}): {k} has no place in mmdcs.MobileViT (is this '
                           f'{TIMM_MODELS[arch]}?)')
    w = out.get('backbone.final_conv.conv.weight')
    if w is None or w.shape[0] != settings['num_features'] \
            or w.shape[1] != settings['channels'][-1]:
        raise ValueError(f'convert_timm({arch}): the state dict is not a {TIMM_MODELS[arch]} '
                         f'(final_conv {None if w is None else tuple(w.shape[:2])}, expected '
                         f'{(settings["num_features"], settings["channels"][-1])})')
    return out
