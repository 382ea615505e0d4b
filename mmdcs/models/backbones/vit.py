"""ViT / DeiT (Dosovitskiy et al. 2021; Touvron et al. 2021) with DCS / KCR blocks.

Layout and parameter names are timm's ``VisionTransformer`` (``patch_embed.proj``, ``cls_token``,
``pos_embed``, ``blocks.{i}.{norm1,attn.qkv,attn.proj,norm2,mlp.fc1,mlp.fc2}``, ``norm``), so a
timm checkpoint converts by renaming the classifier only (:func:`convert_timm`). The arch presets
are timm's ``deit_tiny_patch16_224``, ``vit_small_patch16_224`` and ``vit_base_patch16_224``:
16×16 patch embedding, class token, learned absolute position embedding that includes the class
token position, pre-norm blocks (LayerNorm, eps 1e-6), qkv bias, GELU MLP of ratio 4, final norm,
class-token pooling, no pre-logits layer.

Every block is (method.md §2)::

    x = x + drop_path(attn(norm1(x)))      # DCSAttention: per-token Q/K mask M = gate(Linear_θ)
    x = x + drop_path(mlp(norm2(x)))       # GatedMLP: x + g ⊙ MLP(g ⊙ LN(x)), g = gate(α)

The Q/K mask is computed for every token, the class token included (it is a token of the
sequence like the patches; its query and key are masked by its own M row). The output format
follows mmpretrain's ``VisionTransformer`` (``out_type``, ``out_indices``, final norm applied to
the last block's output only), so the backbone works under mmpretrain's ``ImageClassifier`` and,
with ``out_type='featmap'``, as an mmdet / mmseg backbone at any input size (the position
embedding is resampled to the actual patch grid; a size that 16 does not divide is zero-padded
at the right and bottom, as mmseg's ViT does: ``dynamic_img_pad``).
"""
import math
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn.bricks import DropPath
from torch import Tensor

from mmdcs.registry import MODELS
from mmdcs.utils.errors import InputError
from mmdcs.selection import DEFAULT_GATE_INIT, CostTerm, DCSAttention, GatedMLP, SubnetSpec
from mmdcs.selection import QKChannelSelector, mlp_residual, prunable_modules
from mmdcs.selection.cost import mlp_cost_term
from .base import (AttentionLayout, SelectableBackbone, check_choice, drop_path_rates,
                   feature_to_bchw, normalize_out_indices, query_cell)

#: arch -> timm model name (for conversion and the equivalence tests)
TIMM_MODELS = {
    'deit-tiny': 'deit_tiny_patch16_224',
    'vit-s16': 'vit_small_patch16_224',
    'vit-b16': 'vit_base_patch16_224',
}

OUT_TYPES = ('raw', 'cls_token', 'featmap', 'avg_featmap')


def _pair(v: Union[int, Sequence[int]]) -> Tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(i) for i in v)
    if len(v) != 2:
        raise ValueError(f'expected an int or a pair, got {v}')
    return v


def resample_pos_embed(pos_embed: Tensor, src_hw: Sequence[int], dst_hw: Sequence[int],
                       mode: str = 'bicubic', num_prefix_tokens: int = 1) -> Tensor:
    """Resample a (1, prefix + H·W, C) position embedding to another patch grid.

    The prefix (class token) entries are kept; the grid part is interpolated as timm's
    ``resample_abs_pos_embed`` does it (float32, ``antialias=True``), so a model evaluated at
    another input size gives the same result as timm with ``dynamic_img_size=True``.
    """
    src_hw, dst_hw = tuple(src_hw), tuple(dst_hw)
    if src_hw == dst_hw:
        return pos_embed
    _, length, dim = pos_embed.shape
    if length != src_hw[0] * src_hw[1] + num_prefix_tokens:
        raise ValueError(f'a position embedding of {length} tokens does not fit a '
                         f'{src_hw[0]}x{src_hw[1]} grid + {num_prefix_tokens} prefix tokens')
    prefix, grid = pos_embed[:, :num_prefix_tokens], pos_embed[:, num_prefix_tokens:]
    grid = grid.float().reshape(1, src_hw[0], src_hw[1], dim).permute(0, 3, 1, 2)
    antialias = mode in ('bilinear', 'bicubic')
    grid = F.interpolate(grid, size=dst_hw, mode=mode, antialias=antialias,
                         align_corners=False if mode in ('bilinear', 'bicubic') else None)
    grid = grid.permute(0, 2, 3, 1).reshape(1, -1, dim).to(pos_embed.dtype)
    return torch.cat([prefix, grid], dim=1)


def init_timm_vit_(backbone: nn.Module) -> None:
    """timm's ViT init of ``backbone`` (``pos_embed`` / ``cls_token`` attributes): every Linear
    trunc normal std .02 with zero bias, ``pos_embed`` trunc normal .02, ``cls_token`` normal
    1e-6."""
    nn.init.trunc_normal_(backbone.pos_embed, std=.02)
    nn.init.normal_(backbone.cls_token, std=1e-6)
    for m in backbone.modules():
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class PatchEmbed(nn.Module):
    """Image → (B, H/p·W/p, C) tokens by a p×p, stride p convolution (timm's ``PatchEmbed``).

    An input size that p does not divide is zero-padded at the right and bottom to the next
    multiple (mmseg's / mmpretrain's ``padding='corner'``, timm's ``dynamic_img_pad``) when
    ``pad`` is True, and refused with an :class:`~mmdcs.utils.InputError` otherwise."""

    def __init__(self, patch_size: int, in_channels: int, embed_dim: int, pad: bool = False):
        super().__init__()
        self.patch_size = patch_size
        self.pad = pad
        self.proj = nn.Conv2d(in_channels, embed_dim, patch_size, stride=patch_size)

    def forward(self, x: Tensor) -> Tuple[Tensor, Tuple[int, int]]:
        H, W = x.shape[-2:]
        p = self.patch_size
        if H % p or W % p:
            if not self.pad:
                raise InputError(f'ViT: the input size {H}x{W} is not divisible by the patch '
                                 f'size {p}: resize or pad the images in the pipeline (e.g. '
                                 f'size_divisor={p}), or set the backbone\'s '
                                 'dynamic_img_pad=True')
            x = F.pad(x, (0, (-W) % p, 0, (-H) % p))
        x = self.proj(x)
        hw = (x.shape[-2], x.shape[-1])
        return x.flatten(2).transpose(1, 2), hw


class Block(nn.Module):
    """Pre-norm transformer block with DCS attention and a (gated) MLP."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4., qkv_bias: bool = True,
                 drop: float = 0., attn_drop: float = 0., drop_path: float = 0.,
                 qk_select: Optional[str] = None, mlp_select: bool = False,
                 gate_init: float = DEFAULT_GATE_INIT, tau: float = 4.5, eps: float = 1e-6,
                 select_hidden: bool = False, theta_rank: Optional[int] = None,
                 select_heads: bool = False):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = DCSAttention(dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop,
                                 proj_drop=drop, qk_select=qk_select, gate_init=gate_init,
                                 tau=tau, theta_rank=theta_rank, select_heads=select_heads)
        self.drop_path1 = DropPath(drop_path) if drop_path > 0. else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = GatedMLP(dim, int(dim * mlp_ratio), act_layer=nn.GELU, drop=drop,
                            select=mlp_select, gate_init=gate_init, tau=tau,
                            select_hidden=select_hidden)
        self.drop_path2 = DropPath(drop_path) if drop_path > 0. else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.drop_path1(self.attn(self.norm1(x)))
        # x is this block's own tensor: a pruned MLP may add its update into it in place
        return mlp_residual(self.mlp, x, self.norm2(x), self.drop_path2, inplace=True)


class TokenLayout(AttentionLayout):
    """ViT: one sequence per image, ``prefix`` tokens (the class token) then the h·w patches."""
    class_token = True

    def __init__(self, patch_size: int, prefix: int = 1):
        self.patch_size = patch_size
        self.prefix = prefix

    def query_map(self, attn, image, query, image_hw):
        heads = attn.shape[1]
        gh, gw = image_hw[0] // self.patch_size, image_hw[1] // self.patch_size
        if query == 'cls':
            row, cell = 0, (-1, -1)
        else:
            r, c = query_cell(query, gh, gw)
            row, cell = self.prefix + r * gw + c, (r, c)
        return attn[image, :, row, self.prefix:].reshape(heads, gh, gw), (gh, gw), cell


@MODELS.register_module()
class ViT(SelectableBackbone):
    """Vision Transformer / DeiT backbone, baseline or DCS / KCR supernet or pruned subnet.

    Every block is a DCS (or KCR) block; the DCS Q/K mask is per token, the class token
    included. Prunable modules are ``blocks.{i}.mlp`` (D̃ of the residual width D per block).

    Args:
        arch: ``'deit-tiny'``, ``'vit-s16'`` or ``'vit-b16'`` (timm's ``deit_tiny_patch16_224``,
            ``vit_small_patch16_224``, ``vit_base_patch16_224``).
        variant, subnet, qk_mask, gate_init, tau, init_cfg: see :class:`SelectableBackbone`.
        img_size: the nominal input size (int or (H, W)); it sets the stored position-embedding
            grid and the cost model's token count. Other sizes work at run time (see
            ``dynamic_img_pad`` for sizes that 16 does not divide).
        patch_size: must be the arch's (16).
        in_channels: image channels.
        out_type: ``'cls_token'`` (B, C), ``'featmap'`` (B, C, H/16, W/16) from the patch tokens,
            ``'avg_featmap'`` (B, C) the mean patch token followed by its own LayerNorm
            (``fc_norm``), or ``'raw'`` (B, 1 + H·W/256, C), as mmpretrain's VisionTransformer.
        out_indices: the blocks whose outputs are returned (negative: from the end).
        final_norm: LayerNorm (``norm``) on the last block's output (so only an output of the
            last block is normalised, as mmpretrain does).
        drop_rate: dropout after the position embedding and in the attention / MLP projections.
        attn_drop_rate: dropout on the attention weights.
        drop_path_rate: stochastic depth, linear over the blocks.
        interpolate_mode: resampling of the position embedding to another patch grid.
        frozen_stages: -1 nothing; 0 the patch embedding, class token and position embedding;
            k >= 1 also blocks 0..k-1 (and ``norm`` / ``fc_norm`` with the last block), as
            mmpretrain's VisionTransformer (see :class:`SelectableBackbone`).
        select_heads: a gate per attention head (α of heads beside α of channels, searched
            by the same loop; method.md §2.7); the subnet's ``heads`` list the kept heads and
            the pruned attentions are narrower. Off by default (the papers).
        dynamic_img_pad: zero-pad an input size that 16 does not divide at the right and
            bottom (as mmseg's and mmpretrain's ViT, timm's ``dynamic_img_pad=True``). Default
            (None): padded for ``out_type='featmap'`` (detection / segmentation, whose pipelines
            do not guarantee multiples of 16), refused with one clear error otherwise (a
            classifier's pipeline gives a fixed size; timm refuses too).
    """
    family = 'vit'
    takes_img_size = True
    #: KCR's ViT-S/B (method.md §9)
    paper_variant = 'kcr'
    #: the first norm of the last block: its output feeds the last attention (the last block's
    #: own output reaches the prediction through the class token only, so its patch tokens get
    #: no gradient), as mmpretrain's vis_cam does
    cam_layer = 'blocks.-1.norm1'
    timm_models = TIMM_MODELS
    arch_zoo: Dict[str, dict] = {
        'deit-tiny': dict(embed_dim=192, depth=12, num_heads=3, mlp_ratio=4., patch_size=16),
        'vit-s16': dict(embed_dim=384, depth=12, num_heads=6, mlp_ratio=4., patch_size=16),
        'vit-b16': dict(embed_dim=768, depth=12, num_heads=12, mlp_ratio=4., patch_size=16),
    }
    num_prefix_tokens = 1
    #: a gate per head (``select_heads=True``) and a subnet's kept heads (method.md §2.7)
    supports_heads = True

    def __init__(self, arch: str = 'deit-tiny', variant: Optional[str] = None,
                 subnet: Union[None, str, dict, SubnetSpec] = None, qk_mask: str = 'shared',
                 gate_init: float = DEFAULT_GATE_INIT, tau: float = 4.5,
                 img_size: Union[int, Sequence[int]] = 224, patch_size: int = 16,
                 in_channels: int = 3, out_type: str = 'cls_token',
                 out_indices: Union[int, Sequence[int]] = -1, final_norm: bool = True,
                 drop_rate: float = 0., attn_drop_rate: float = 0., drop_path_rate: float = 0.,
                 interpolate_mode: str = 'bicubic', frozen_stages: int = -1,
                 dynamic_img_pad: Optional[bool] = None, init_cfg=None,
                 select_hidden: bool = False, theta_rank: Optional[int] = None,
                 select_heads: bool = False):
        super().__init__(arch, variant, subnet, qk_mask, gate_init, tau, init_cfg,
                         select_hidden=select_hidden, theta_rank=theta_rank,
                         select_heads=select_heads)
        s = self.arch_settings
        if patch_size != s['patch_size']:
            raise ValueError(f'ViT({arch}): patch_size is fixed by the arch to '
                             f'{s["patch_size"]}, got {patch_size}')
        if out_type not in OUT_TYPES:
            raise ValueError(f'ViT: unknown out_type {out_type!r}; valid: {", ".join(OUT_TYPES)}')
        self.embed_dim = dim = s['embed_dim']
        self.depth = self.num_stages = s['depth']
        self.num_heads = s['num_heads']
        self.mlp_hidden = int(dim * s['mlp_ratio'])
        self.patch_size = patch_size
        self.img_size = _pair(img_size)
        if self.img_size[0] % patch_size or self.img_size[1] % patch_size:
            raise ValueError(f'ViT: img_size {self.img_size} is not divisible by the patch size '
                             f'{patch_size}')
        self.grid_size = (self.img_size[0] // patch_size, self.img_size[1] // patch_size)
        self.out_type = out_type
        self.out_indices = normalize_out_indices(out_indices, self.depth, 'ViT')
        self.final_norm = final_norm
        self.interpolate_mode = interpolate_mode

        self.dynamic_img_pad = out_type == 'featmap' if dynamic_img_pad is None \
            else bool(dynamic_img_pad)
        self.patch_embed = PatchEmbed(patch_size, in_channels, dim, pad=self.dynamic_img_pad)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(
            torch.zeros(1, self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1], dim))
        self.pos_drop = nn.Dropout(drop_rate)
        dpr = drop_path_rates(drop_path_rate, self.depth)
        self.blocks = nn.ModuleList([
            Block(dim, self.num_heads, s['mlp_ratio'], qkv_bias=True, drop=drop_rate,
                  attn_drop=attn_drop_rate, drop_path=dpr[i], qk_select=self.qk_select,
                  mlp_select=self.mlp_select, gate_init=self.gate_init, tau=self.init_tau,
                  select_hidden=self.select_hidden, theta_rank=self.theta_rank,
                  select_heads=self.select_heads)
            for i in range(self.depth)
        ])
        self.norm = nn.LayerNorm(dim, eps=1e-6) if final_norm else nn.Identity()
        if out_type == 'avg_featmap':
            self.fc_norm = nn.LayerNorm(dim, eps=1e-6)
        self._set_frozen_stages(frozen_stages)

    # ----------------------------------------------------------------- contract
    def stem_parts(self) -> list:
        return [self.patch_embed, self.cls_token, self.pos_embed, self.pos_drop]

    def stage_parts(self, i: int) -> list:
        parts = [self.blocks[i]]
        if i == self.depth - 1:
            parts += [self.norm] + ([self.fc_norm] if hasattr(self, 'fc_norm') else [])
        return parts

    def attention_layout(self, name: str) -> 'TokenLayout':
        return TokenLayout(self.patch_size, self.num_prefix_tokens)

    def final_token_norm(self) -> Tuple[nn.Module, bool]:
        """The module whose output is the final normalised token map (B, 1 + h·w, C), and that
        it starts with the class token (DynamicViT's token distillation)."""
        return self.norm, True

    def tokens_to_bchw(self, act: Tensor, image_hw: Tuple[int, int]) -> Tensor:
        """Tokens (B, prefix + h·w, C) → the patch grid of ``image_hw`` (B, C, h, w)."""
        if act.dim() != 3:
            return feature_to_bchw(act)
        gh, gw = image_hw[0] // self.patch_size, image_hw[1] // self.patch_size
        tokens = act[:, self.num_prefix_tokens:]
        return tokens.reshape(act.shape[0], gh, gw, -1).permute(0, 3, 1, 2)

    @classmethod
    def convert_checkpoint(cls, state_dict: Dict[str, Tensor], arch: str,
                           layout: str = 'timm') -> Dict[str, Tensor]:
        check_choice('layout', layout, cls.checkpoint_layouts, cls.__name__)
        return convert_timm(state_dict, arch)

    # ----------------------------------------------------------------- init / checkpoints
    def init_weights(self) -> None:
        """timm's init (Linear: trunc normal std .02, bias 0; pos_embed: trunc normal .02;
        cls_token: normal 1e-6), unless ``init_cfg`` loads a Pretrained checkpoint. The selection
        parameters keep their "all kept" initialisation. Another ``init_cfg`` (e.g. Kaiming)
        is applied after this by ``BaseModule.init_weights``."""
        cfgs = self.init_cfg if isinstance(self.init_cfg, list) else [self.init_cfg]
        pretrained = any(isinstance(c, dict) and c.get('type') == 'Pretrained' for c in cfgs)
        if not pretrained and not self._is_init:
            init_timm_vit_(self)
            for m in self.modules():
                if isinstance(m, QKChannelSelector):
                    m.reset_parameters()
        super().init_weights()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        """Resample a checkpoint's position embedding made for another grid (another
        ``img_size``), as mmpretrain's ``_prepare_pos_embed`` (square source grid assumed)."""
        name = prefix + 'pos_embed'
        if name in state_dict and state_dict[name].shape != self.pos_embed.shape:
            ckpt = state_dict[name]
            side = math.isqrt(ckpt.shape[1] - self.num_prefix_tokens)
            if (ckpt.ndim == 3 and ckpt.shape[-1] == self.embed_dim
                    and side * side == ckpt.shape[1] - self.num_prefix_tokens):
                state_dict[name] = resample_pos_embed(ckpt, (side, side), self.grid_size,
                                                      self.interpolate_mode,
                                                      self.num_prefix_tokens)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # ----------------------------------------------------------------- forward
    def _embed(self, x: Tensor) -> Tuple[Tensor, Tuple[int, int]]:
        """Images → (tokens (B, 1 + h·w, C): class token and patches with the position
        embedding of the (h, w) grid, after its dropout; (h, w))."""
        x, hw = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = x + resample_pos_embed(self.pos_embed, self.grid_size, hw, self.interpolate_mode,
                                   self.num_prefix_tokens)
        return self.pos_drop(x), hw

    def forward(self, x: Tensor) -> Tuple[Tensor, ...]:
        x, hw = self._embed(x)
        outs = []
        last = len(self.blocks) - 1
        for i, blk in enumerate(self.blocks):
            x = blk(x)
            if i == last:
                x = self.norm(x)
            if i in self.out_indices:
                outs.append(self._format_output(x, hw))
        return tuple(outs)

    def _format_output(self, x: Tensor, hw: Tuple[int, int]) -> Tensor:
        if self.out_type == 'raw':
            return x
        if self.out_type == 'cls_token':
            return x[:, 0]
        patches = x[:, self.num_prefix_tokens:]
        if self.out_type == 'featmap':
            return patches.reshape(x.shape[0], hw[0], hw[1], -1).permute(0, 3, 1, 2).contiguous()
        return self.fc_norm(patches.mean(dim=1))

    # ----------------------------------------------------------------- cost
    @property
    def num_tokens(self) -> int:
        """N at the nominal ``img_size``, class token included."""
        return self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]

    def cost_terms(self) -> List[CostTerm]:
        """Per block MLP: paper l = 2 (l·(2D̃² + D̃)); exact: fc1 N·D̃·hidden + fc2 N·hidden·D̃
        multiply-accumulates, i.e. 2·N per (kept channel, kept hidden unit) pair (N at the
        nominal img_size; H̃ = hidden without hidden-unit selection)."""
        return [
            mlp_cost_term(m.select, m.hidden_select, m.hidden_features, 2. * self.num_tokens,
                          mlp_layers=2, params_per_channel=float(m.params_per_channel))
            for m in prunable_modules(self).values()
        ]


def convert_timm(state_dict: Dict[str, Tensor], arch: str) -> Dict[str, Tensor]:
    """A timm ``VisionTransformer`` state dict → the state dict of the mmpretrain
    ``ImageClassifier`` of ``configs/_base_/models/vit_<arch>.py`` (``backbone.*`` and
    ``head.fc.*``). timm's pooling for these archs is the class token after ``norm``, with no
    ``fc_norm`` parameters and no pre-logits layer; anything else is refused."""
    if arch not in TIMM_MODELS:
        raise ValueError(f'convert_timm: unknown arch {arch!r}; valid: {", ".join(TIMM_MODELS)}')
    dim = ViT.arch_zoo[arch]['embed_dim']
    out = {}
    for k, v in state_dict.items():
        if k.startswith('head.'):
            out['head.fc.' + k[len('head.'):]] = v
        elif k.startswith(('fc_norm.', 'norm_pre.', 'reg_token', 'attn_pool.', 'dist_token',
                           'head_dist.', 'pre_logits.')):
            raise KeyError(f'convert_timm({arch}): {k} has no place in mmdcs.ViT (is this '
                           f'{TIMM_MODELS[arch]}?)')
        else:
            out['backbone.' + k] = v
    pe = out.get('backbone.pos_embed')
    if pe is None or pe.shape[-1] != dim:
        raise ValueError(f'convert_timm({arch}): the state dict is not a {TIMM_MODELS[arch]} '
                         f'(pos_embed {None if pe is None else tuple(pe.shape)}, expected '
                         f'width {dim})')
    return out
