"""ViT / DeiT for Once-for-Both (OFB): the searchable supernet and the compact dense network
built from an exported arch file.

Parameter names are timm's (and :class:`mmdcs.ViT`'s): ``patch_embed.proj``, ``cls_token``,
``pos_embed``, ``blocks.{i}.{norm1,attn.qkv,attn.proj,norm2,mlp.fc1,mlp.fc2}``, ``norm``, so a
timm / DeiT checkpoint converted by :func:`mmdcs.models.backbones.vit.convert_timm` loads into the
supernet (the search state ``*.bimask.*``, ``embed_bimask.*`` and ``mask_token`` keep their init)
and a compact checkpoint written by ``tools/ofb_export.py`` into the compact network.

Supernet (``arch_file=None``), the public code's search space (``search_space``):

* ``'attn'`` — per block, heads {2, 4, …, H} × qkv channels per head {d/4, …, d};
* ``'mlp'`` — per block, hidden widths {h/4, …, h};
* ``'embed'`` — one embedding width {E/2, …, E} for the whole residual stream.

The embedding mask multiplies the tokens (patch embeddings or mask tokens, class token, position
embedding) before the first block; LayerNorms normalise the embedding support only. During the
search the patches hidden by PMIM are replaced by ``mask_token`` before the position embedding is
added (SimMIM's order; the public code adds it after, so its mask tokens carry no position).
"""
import math
from typing import Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn.bricks import DropPath
from mmengine.model import BaseModule
from torch import Tensor

from mmdcs.checks import check_numbers
from mmdcs.peers.ofb import (BiMask, OFBAttention, OFBMlp, compress_group_, embed_choices,
                             masked_layer_norm, slice_param_, sync_layer_attrs_, vit_macs)
from mmdcs.peers.ofb.arch import (ARCH_FORMAT, ArchFileError, check_blocks, check_family,
                                  check_width, load_arch)
from mmdcs.peers.ofb.compress import Optimizers
from mmdcs.peers.ofb.cost import layer_norm_macs
from mmdcs.peers.ofb.supernet import OFBSupernetMixin
from mmdcs.registry import MODELS

from .base import NUMERIC_ARGUMENTS, check_choice, drop_path_rates, normalize_out_indices
from .vit import OUT_TYPES, PatchEmbed, _pair, init_timm_vit_, resample_pos_embed


class OFBBlock(nn.Module):
    """Pre-norm block with a searchable (or compact) attention and MLP."""

    def __init__(self, dim: int, num_heads: int, head_dim: int, hidden: int,
                 search_attn: bool, search_mlp: bool, scale: float, drop: float = 0.,
                 attn_drop: float = 0., drop_path: float = 0., eps: float = 1e-6):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = OFBAttention(dim, num_heads, head_dim, qkv_bias=True, attn_drop=attn_drop,
                                 proj_drop=drop, search=search_attn, scale=scale)
        self.drop_path1 = DropPath(drop_path) if drop_path > 0. else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = OFBMlp(dim, hidden, drop=drop, search=search_mlp)
        self.drop_path2 = DropPath(drop_path) if drop_path > 0. else nn.Identity()

    def forward(self, x: Tensor, embed_index: Optional[Tensor] = None) -> Tensor:
        x = x + self.drop_path1(self.attn(masked_layer_norm(x, self.norm1, embed_index)))
        return x + self.drop_path2(self.mlp(masked_layer_norm(x, self.norm2, embed_index)))


@MODELS.register_module()
class OFBViT(OFBSupernetMixin, BaseModule):
    """ViT / DeiT backbone of OFB: searchable supernet, or compact network from an arch file.

    Args:
        arch: ``'deit-tiny'``, ``'deit-s'`` (= ``'vit-s16'``) or ``'deit-b'`` (= ``'vit-b16'``):
            timm's ``deit_tiny/small/base_patch16_224`` (ViT-S/B at 16×16 patches).
        arch_file: path (or dict) of an arch file from ``tools/ofb_export.py``: build the
            compact dense network it describes.
        search_space: the searched unit groups of the supernet, a subset of ``('attn', 'mlp',
            'embed')`` (default all three; ``()`` gives the plain dense ViT). Not with
            ``arch_file``.
        img_size: nominal input size (position-embedding grid, FLOPs of the search). Other
            sizes divisible by 16 run (the position embedding is resampled).
        patch_size, in_channels: as timm (patch size fixed by the arch).
        out_type, out_indices, final_norm, drop_rate, attn_drop_rate, drop_path_rate,
        interpolate_mode: as :class:`mmdcs.ViT`.
        init_cfg: mmengine init config (e.g. ``Pretrained`` with ``prefix='backbone.'``).
    """
    family = 'vit'
    arch_zoo: Dict[str, dict] = {
        'deit-tiny': dict(embed_dim=192, depth=12, num_heads=3, mlp_ratio=4., patch_size=16),
        'deit-s': dict(embed_dim=384, depth=12, num_heads=6, mlp_ratio=4., patch_size=16),
        'deit-b': dict(embed_dim=768, depth=12, num_heads=12, mlp_ratio=4., patch_size=16),
    }
    aliases = {'vit-s16': 'deit-s', 'vit-b16': 'deit-b'}
    num_prefix_tokens = 1

    def __init__(self, arch: str = 'deit-s', arch_file: Union[None, str, dict] = None,
                 search_space: Optional[Sequence[str]] = None,
                 img_size: Union[int, Sequence[int]] = 224, patch_size: int = 16,
                 in_channels: int = 3, out_type: str = 'cls_token',
                 out_indices: Union[int, Sequence[int]] = -1, final_norm: bool = True,
                 drop_rate: float = 0., attn_drop_rate: float = 0., drop_path_rate: float = 0.,
                 interpolate_mode: str = 'bicubic', init_cfg=None):
        name = type(self).__name__
        check_numbers(locals(), NUMERIC_ARGUMENTS, name)  # the arguments, as every backbone's
        super().__init__(init_cfg=init_cfg)
        arch = self.aliases.get(arch, arch)
        check_choice('arch', arch, list(self.arch_zoo) + list(self.aliases), name)
        check_choice('out_type', out_type, OUT_TYPES, name)
        s = self.arch_zoo[arch]
        if patch_size != s['patch_size']:
            raise ValueError(f'{name}({arch}): patch_size is fixed by the arch to '
                             f'{s["patch_size"]}, got {patch_size}')
        self.arch = arch
        self.depth = s['depth']
        self.full_embed_dim = s['embed_dim']
        self.full_heads = s['num_heads']
        self.full_head_dim = s['embed_dim'] // s['num_heads']
        self.full_hidden = int(s['embed_dim'] * s['mlp_ratio'])
        self.patch_size = patch_size
        self.in_channels = in_channels
        self.img_size = _pair(img_size)
        if self.img_size[0] % patch_size or self.img_size[1] % patch_size:
            raise ValueError(f'{name}: img_size {self.img_size} is not divisible by the patch '
                             f'size {patch_size}')
        self.grid_size = (self.img_size[0] // patch_size, self.img_size[1] // patch_size)
        self.out_type = out_type
        self.out_indices = normalize_out_indices(out_indices, self.depth, name)
        self.final_norm = final_norm
        self.interpolate_mode = interpolate_mode

        self.arch_spec, search_space = self._arch_or_search_space(arch_file, search_space)
        if self.arch_spec is not None:
            embed_dim = self.arch_spec['embed_dim']
            blocks = self.arch_spec['blocks']
        else:
            embed_dim = self.full_embed_dim
            blocks = [dict(num_heads=self.full_heads, head_dim=self.full_head_dim,
                           mlp_hidden=self.full_hidden)] * self.depth
        self.search_space = search_space

        self.patch_embed = PatchEmbed(patch_size, in_channels, embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(
            1, self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1], embed_dim))
        self.pos_drop = nn.Dropout(drop_rate)
        dpr = drop_path_rates(drop_path_rate, self.depth)
        scale = self.full_head_dim**-0.5
        self.blocks = nn.ModuleList([
            OFBBlock(embed_dim, b['num_heads'], b['head_dim'], b['mlp_hidden'],
                     search_attn='attn' in search_space, search_mlp='mlp' in search_space,
                     scale=scale, drop=drop_rate, attn_drop=attn_drop_rate, drop_path=dpr[i])
            for i, b in enumerate(blocks)
        ])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6) if final_norm else nn.Identity()
        if out_type == 'avg_featmap':
            self.fc_norm = nn.LayerNorm(embed_dim, eps=1e-6)
        if search_space:
            # PMIM's mask token (the search only)
            self.mask_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
            nn.init.trunc_normal_(self.mask_token, std=.02)
        else:
            self.mask_token = None
        self.embed_bimask = BiMask((embed_dim, ), (embed_choices(embed_dim), )) \
            if 'embed' in search_space else None

    def _read_arch(self, arch_file) -> dict:
        where = f'{type(self).__name__}({self.arch})'
        try:
            spec = load_arch(arch_file)
            check_family(spec, self.family, self.arch, where)
            embed = check_width(spec.get('embed_dim'), self.full_embed_dim, f'{where} embed_dim')
            blocks = check_blocks(spec.get('blocks'), self.depth,
                                  dict(num_heads=self.full_heads, head_dim=self.full_head_dim,
                                       mlp_hidden=self.full_hidden), where)
        except ArchFileError as e:
            src = arch_file if isinstance(arch_file, str) else 'the arch dict'
            raise ArchFileError(f'{e} ({src})') from None
        return dict(spec, embed_dim=embed, blocks=blocks)

    # ----------------------------------------------------------------- sizes
    @property
    def plain_arch(self) -> str:
        """The arch of the plain ViT this one is timed against (``'deit-s'`` → ``'vit-s16'``)."""
        return {v: k for k, v in self.aliases.items()}.get(self.arch, self.arch)

    @property
    def embed_dim(self) -> int:
        return self.cls_token.shape[-1]

    @property
    def num_features(self) -> int:
        """Width of the output features (the classifier head's input)."""
        return self.embed_dim

    @property
    def num_patches(self) -> int:
        return self.grid_size[0] * self.grid_size[1]

    @property
    def output_tokens(self) -> int:
        """Patch tokens at ``img_size`` (what a pooling neck averages with ``out_type=
        'featmap'``)."""
        return self.num_patches

    @property
    def mim_scale(self) -> int:
        """Pixels per feature-map cell of :meth:`forward_search`'s map (the PMIM decoder's)."""
        return self.patch_size

    def mim_grid(self, inputs: Tensor) -> Tuple[int, int]:
        """The patch grid PMIM masks for ``inputs``."""
        return inputs.shape[-2] // self.patch_size, inputs.shape[-1] // self.patch_size

    # ----------------------------------------------------------------- init / checkpoints
    def init_weights(self) -> None:
        """timm's init (Linear trunc normal .02 and zero bias, pos_embed trunc normal .02,
        cls_token normal 1e-6) unless a Pretrained ``init_cfg`` loads weights; the bi-masks keep
        their own init."""
        cfgs = self.init_cfg if isinstance(self.init_cfg, list) else [self.init_cfg]
        pretrained = any(isinstance(c, dict) and c.get('type') == 'Pretrained' for c in cfgs)
        if not pretrained and not self._is_init:
            init_timm_vit_(self)
        super().init_weights()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        """A searched checkpoint: take its (sliced) shapes first. Another grid: resample the
        checkpoint's position embedding (square source grid assumed), as :class:`mmdcs.ViT`."""
        self._adopt_search_shapes(state_dict, prefix, skip=('pos_embed', ))
        name = prefix + 'pos_embed'
        if name in state_dict:
            ckpt = state_dict[name]
            if (self.is_supernet and ckpt.dim() == 3 and ckpt.shape[-1] < self.pos_embed.shape[-1]
                    and ckpt.shape[-1] == self.embed_dim):
                # the embedding was sliced (the class token already has the new width)
                self.pos_embed.data = self.pos_embed.data[..., :ckpt.shape[-1]].clone()
            side = math.isqrt(max(ckpt.shape[1] - self.num_prefix_tokens, 0))
            if (ckpt.dim() == 3 and ckpt.shape[1] != self.pos_embed.shape[1]
                    and ckpt.shape[-1] == self.embed_dim
                    and side * side == ckpt.shape[1] - self.num_prefix_tokens):
                state_dict[name] = resample_pos_embed(ckpt, (side, side), self.grid_size,
                                                      self.interpolate_mode,
                                                      self.num_prefix_tokens)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def get_layer_depth(self, param_name: str, prefix: str = '') -> Tuple[int, int]:
        """Layer id for layer-wise lr decay (mmpretrain's convention): embeddings 0, block i
        i + 1, the rest (final norm, head) depth + 1."""
        num_layers = self.depth + 2
        if not param_name.startswith(prefix):
            return num_layers - 1, num_layers
        name = param_name[len(prefix):]
        if name in ('cls_token', 'pos_embed', 'mask_token') or name.startswith(
                ('patch_embed', 'embed_bimask')):
            return 0, num_layers
        if name.startswith('blocks.'):
            return int(name.split('.')[1]) + 1, num_layers
        return num_layers - 1, num_layers

    # ----------------------------------------------------------------- forward
    def _embed_mask(self) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        """(embedding mask or None, the support's channel index if it is not all channels)."""
        bm = self.embed_bimask
        if bm is None:
            return None, None
        mask = bm()
        index = None
        if not bm.is_finished and bm.extent() != bm.units:
            index = torch.nonzero(bm.support()).flatten()
        return mask, index

    def _forward(self, x: Tensor, patch_mask: Optional[Tensor] = None):
        B = x.shape[0]
        x, hw = self.patch_embed(x)
        if patch_mask is not None:
            if self.mask_token is None:
                raise ValueError(f'{type(self).__name__}: patch masking needs the supernet '
                                 '(a compact network has no mask token)')
            if patch_mask.shape != x.shape[:2]:
                raise ValueError(f'patch_mask {tuple(patch_mask.shape)} does not fit '
                                 f'{tuple(x.shape[:2])} patches')
            m = patch_mask.to(x.dtype).unsqueeze(-1)
            x = x * (1 - m) + self.mask_token.to(x.dtype) * m
        x = torch.cat([self.cls_token.expand(B, -1, -1), x], dim=1)
        x = x + resample_pos_embed(self.pos_embed, self.grid_size, hw, self.interpolate_mode,
                                   self.num_prefix_tokens)
        emb_mask, emb_index = self._embed_mask()
        if emb_mask is not None:
            x = x * emb_mask.to(x.dtype)
        x = self.pos_drop(x)
        outs = []
        last = len(self.blocks) - 1
        for i, blk in enumerate(self.blocks):
            x = blk(x, emb_index)
            if i == last and self.final_norm:
                x = masked_layer_norm(x, self.norm, emb_index)
            if i in self.out_indices:
                outs.append(self._format_output(x, hw, emb_index))
        return tuple(outs), x, hw

    def _format_output(self, x: Tensor, hw: Tuple[int, int], emb_index=None) -> Tensor:
        if self.out_type == 'raw':
            return x
        if self.out_type == 'cls_token':
            return x[:, 0]
        patches = x[:, self.num_prefix_tokens:]
        if self.out_type == 'featmap':
            return patches.reshape(x.shape[0], hw[0], hw[1], -1).permute(0, 3, 1, 2).contiguous()
        return masked_layer_norm(patches.mean(dim=1), self.fc_norm, emb_index)

    def forward(self, x: Tensor) -> Tuple[Tensor, ...]:
        return self._forward(x)[0]

    def forward_search(self, x: Tensor, patch_mask: Optional[Tensor] = None
                       ) -> Tuple[Tuple[Tensor, ...], Tensor]:
        """The outputs of :meth:`forward` with the patches of ``patch_mask`` (B, L) (1 =
        masked) replaced by the mask token, and the final patch-token map (B, C, h, w) for the
        PMIM decoder."""
        outs, x, hw = self._forward(x, patch_mask)
        fmap = x[:, self.num_prefix_tokens:].transpose(1, 2).reshape(x.shape[0], -1, *hw)
        return outs, fmap

    # ----------------------------------------------------------------- FLOPs
    def _macs(self, embed, qkv, hidden, num_patches: Optional[int] = None):
        total = vit_macs(num_patches or self.num_patches, self.patch_size, self.in_channels,
                         embed, qkv, hidden, self.num_prefix_tokens, self.final_norm)
        if self.out_type == 'avg_featmap':
            total = total + layer_norm_macs(1, embed)
        return total

    def expected_macs(self) -> Tensor:
        """MACs of the backbone at ``img_size`` as a function of the expected widths (α)."""
        ref = self.cls_token
        embed = self.embed_bimask.expected_size() if self.embed_bimask is not None else \
            ref.new_tensor(float(self.embed_dim))
        qkv, hidden = [], []
        for blk in self.blocks:
            a, m = blk.attn, blk.mlp
            qkv.append(a.bimask.expected_size() if a.bimask is not None else
                       ref.new_tensor(float(a.num_heads * a.head_dim)))
            hidden.append(m.bimask.expected_size() if m.bimask is not None else
                          ref.new_tensor(float(m.hidden)))
        return self._macs(embed, qkv, hidden)

    def expected_width(self) -> Tensor:
        """E_p[output width] (the head's input)."""
        if self.embed_bimask is not None:
            return self.embed_bimask.expected_size()
        return self.cls_token.new_tensor(float(self.embed_dim))

    def full_macs(self) -> float:
        """MACs of the unpruned backbone at ``img_size``."""
        return float(self._macs(self.full_embed_dim,
                                [self.full_heads * self.full_head_dim] * self.depth,
                                [self.full_hidden] * self.depth))

    # ----------------------------------------------------------------- compression
    def compress_(self, threshold: float = 0.2, optimizers: Optimizers = None) -> dict:
        """One OFB pruning step: drop the cells with p ≤ threshold/n of every group, slice the
        weights (and their optimizer state) to what the remaining cells can keep, finish the
        groups with one cell left. Returns ``changed`` (bool) and ``out_keep`` (the kept
        output channels, for the head / decoder, or None)."""
        changed = False
        for blk in self.blocks:
            changed |= blk.attn.compress_(threshold, optimizers)
            changed |= blk.mlp.compress_(threshold, optimizers)
        out_keep = None
        bm = self.embed_bimask
        if bm is not None and not bm.is_finished:

            def slice_embed(keep):
                nonlocal out_keep
                out_keep = keep
                self.slice_embed_(keep, optimizers)

            changed |= compress_group_(bm, threshold, slice_embed, optimizers)
        return dict(changed=changed, out_keep=out_keep)

    def slice_embed_(self, keep: Tensor, optimizers: Optimizers = None) -> None:
        """Keep the residual-stream channels ``keep`` everywhere they appear."""
        keep = keep.to(self.cls_token.device)
        proj = self.patch_embed.proj
        slice_param_(proj.weight, keep, 0, optimizers)
        slice_param_(proj.bias, keep, 0, optimizers)
        for p in (self.cls_token, self.pos_embed, self.mask_token):
            if p is not None:
                slice_param_(p, keep, 2, optimizers)
        norms = [self.norm] + ([self.fc_norm] if hasattr(self, 'fc_norm') else [])
        for blk in self.blocks:
            norms += [blk.norm1, blk.norm2]
            slice_param_(blk.attn.qkv.weight, keep, 1, optimizers)
            slice_param_(blk.attn.proj.weight, keep, 0, optimizers)
            slice_param_(blk.attn.proj.bias, keep, 0, optimizers)
            slice_param_(blk.mlp.fc1.weight, keep, 1, optimizers)
            slice_param_(blk.mlp.fc2.weight, keep, 0, optimizers)
            slice_param_(blk.mlp.fc2.bias, keep, 0, optimizers)
        for n in norms:
            if isinstance(n, nn.LayerNorm):
                slice_param_(n.weight, keep, 0, optimizers)
                slice_param_(n.bias, keep, 0, optimizers)
        if self.embed_bimask is not None:
            slice_param_(self.embed_bimask.score, keep, 0, optimizers)
        sync_layer_attrs_(self)

    def _fuse_embed_(self) -> None:
        bm = self.embed_bimask
        if bm is None or bm.is_fused:
            return
        with torch.no_grad():
            m = bm.score.detach()
            self.patch_embed.proj.weight.mul_(m[:, None, None, None])
            self.patch_embed.proj.bias.mul_(m)
            for p in (self.cls_token, self.pos_embed, self.mask_token):
                if p is not None:
                    p.mul_(m)
        bm.mark_fused_()

    # ----------------------------------------------------------------- export
    def export_arch(self, **meta) -> dict:
        """The arch file of the finished search (``discretize_`` and compress an unfinished
        one first)."""
        if not self.search_finished:
            raise RuntimeError(f'{type(self).__name__}.export_arch: the search is not '
                               'finished; discretize_() and compress_() first')
        blocks = [dict(num_heads=b.attn.num_heads, head_dim=b.attn.head_dim,
                       mlp_hidden=b.mlp.hidden) for b in self.blocks]
        return dict(format=ARCH_FORMAT, family=self.family, arch=self.arch,
                    embed_dim=self.embed_dim, blocks=blocks, meta=meta)

    def compact_state_dict(self) -> Dict[str, Tensor]:
        """The weights of the compact network (fused supernet without the search state)."""
        if not self.fused:
            raise RuntimeError(f'{type(self).__name__}.compact_state_dict: fuse_() first')
        return {k: v for k, v in self.state_dict().items()
                if 'bimask.' not in k and not k.startswith('mask_token')}
