"""Swin Transformer for Once-for-Both (OFB): the searchable supernet and the compact dense network
built from an exported arch file. The public OFB code has no Swin; the paper reports Swin-T
(supplementary C: PMIM masks the 32-pixel "downsampled patches", 100 search epochs).

Parameter names are :class:`mmdcs.Swin`'s (timm's layout: ``patch_embed.proj/norm``,
``layers.{i}.downsample`` at the start of stages 1..3, ``layers.{i}.blocks.{j}.{norm1,
attn.qkv, attn.proj, attn.relative_position_bias_table, norm2, mlp.fc1, mlp.fc2}``,
``norm{i}``), so weights converted by :func:`mmdcs.models.backbones.swin.convert_timm` load.

Search space (``search_space``), the ViT one applied per block and per stage:

* ``'attn'`` — per block, heads {2, 4, …, H} × qkv channels per head {d/4, …, d};
* ``'mlp'`` — per block, hidden widths {h/4, …, h};
* ``'embed'`` — per stage, the width of its residual stream {C/2, …, C} (the stage's input
  projection — the patch embedding or the patch merging — writes only the kept channels, the
  next patch merging reads them).

The stage's embedding mask multiplies the stage input; every LayerNorm normalises the support
only. PMIM replaces the patch embeddings of the masked 32×32 cells by a mask token; the decoder
reconstructs the image from the last stage's map (``Conv2d(C, 32²·3, 1)`` + ``PixelShuffle(32)``).
"""
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn.bricks import DropPath
from mmengine.model import BaseModule
from torch import Tensor

from mmdcs.checks import check_numbers
from mmdcs.peers.ofb import (BiMask, OFBAttention, OFBMlp, compress_group_, embed_choices,
                             masked_layer_norm, slice_param_, sync_layer_attrs_)
from mmdcs.peers.ofb.arch import (ARCH_FORMAT, ArchFileError, check_blocks, check_family,
                                  check_width, load_arch)
from mmdcs.peers.ofb.compress import Optimizers
from mmdcs.peers.ofb.cost import attention_macs, layer_norm_macs, linear_macs
from mmdcs.peers.ofb.supernet import OFBSupernetMixin
from mmdcs.registry import MODELS
from mmdcs.utils.errors import InputError

from .base import NUMERIC_ARGUMENTS, check_choice, drop_path_rates, normalize_out_indices
from .swin import PatchEmbed, PatchMerging, RelativePositionBiasMixin, SwinBlock

Size = Tuple[int, int]


class OFBWindowAttention(RelativePositionBiasMixin, OFBAttention):
    """Window attention with relative position bias and a (heads × head_dim) bi-mask."""

    def __init__(self, dim: int, num_heads: int, head_dim: int, window_size: Size,
                 search: bool, scale: float, qkv_bias: bool = True, attn_drop: float = 0.,
                 proj_drop: float = 0.):
        super().__init__(dim, num_heads, head_dim, qkv_bias, attn_drop, proj_drop, search, scale)
        self.init_relative_position_bias(window_size, num_heads)

    def forward(self, x: Tensor, window: Size = None, mask: Optional[Tensor] = None) -> Tensor:
        """x: (B·nW, N, C) windowed tokens; mask: (nW, N, N) shifted-window mask or None."""
        return super().forward(x, attn_bias=self.window_attn_bias(x, window, mask))

    def slice_heads_(self, heads: Tensor, optimizers: Optimizers = None) -> None:
        slice_param_(self.relative_position_bias_table, heads, 1, optimizers)


class OFBSwinBlock(nn.Module):
    """(Shifted-)window block with a searchable (or compact) attention and MLP; the window,
    shift, padding and mask logic is :class:`mmdcs.Swin`'s."""
    window_and_shift = SwinBlock.window_and_shift
    _mask = SwinBlock._mask
    _order = SwinBlock._order
    _attn = SwinBlock._attn

    def __init__(self, dim: int, num_heads: int, head_dim: int, hidden: int, scale: float,
                 search_attn: bool, search_mlp: bool, window_size: int = 7, shift: bool = False,
                 qkv_bias: bool = True, drop: float = 0., attn_drop: float = 0.,
                 drop_path: float = 0., pad_small_map: bool = False):
        super().__init__()
        self.window_size = window_size
        self.shift_size = window_size // 2 if shift else 0
        self.pad_small_map = pad_small_map
        self.norm1 = nn.LayerNorm(dim)
        self.attn = OFBWindowAttention(dim, num_heads, head_dim, (window_size, window_size),
                                       search_attn, scale, qkv_bias, attn_drop, drop)
        self.drop_path1 = DropPath(drop_path) if drop_path > 0. else nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = OFBMlp(dim, hidden, drop=drop, search=search_mlp)
        self.drop_path2 = DropPath(drop_path) if drop_path > 0. else nn.Identity()
        self._masks: Dict[tuple, Any] = {}  # shifted-window masks and window orders

    def padded(self, H: int, W: int) -> Tuple[Size, Size]:
        """(window, padded size) of an H×W map."""
        window, _ = self.window_and_shift(H, W)
        return window, (H + (-H) % window[0], W + (-W) % window[1])

    def forward(self, x: Tensor, embed_index: Optional[Tensor] = None) -> Tensor:
        """x: (B, H, W, C)."""
        x = x + self.drop_path1(self._attn(masked_layer_norm(x, self.norm1, embed_index)))
        return x + self.drop_path2(self.mlp(masked_layer_norm(x, self.norm2, embed_index)))


class OFBPatchMerging(PatchMerging):
    """2×2 patch merging whose LayerNorm can be restricted to the previous stage's support."""

    def forward(self, x: Tensor, index: Optional[Tensor] = None) -> Tensor:
        B, H, W, C = x.shape
        x = F.pad(x, (0, 0, 0, W % 2, 0, H % 2))
        H, W = x.shape[1:3]
        x = x.reshape(B, H // 2, 2, W // 2, 2, C).permute(0, 1, 3, 4, 2, 5).flatten(3)
        if index is not None:
            index = torch.cat([index + k * C for k in range(4)])
        return self.reduction(masked_layer_norm(x, self.norm, index))


class OFBSwinStage(nn.Module):
    """Optional patch merging, the blocks, and the stage's embedding bi-mask (searched)."""

    def __init__(self, in_dim: int, dim: int, blocks: List[dict], downsample: bool,
                 drop_path: Sequence[float], search_embed: bool, **block_kwargs):
        super().__init__()
        self.downsample = OFBPatchMerging(in_dim, dim) if downsample else None
        self.blocks = nn.ModuleList([
            OFBSwinBlock(dim, b['num_heads'], b['head_dim'], b['mlp_hidden'], shift=j % 2 == 1,
                         drop_path=drop_path[j], **block_kwargs)
            for j, b in enumerate(blocks)
        ])
        self.embed_bimask = BiMask((dim, ), (embed_choices(dim), )) if search_embed else None

    @property
    def dim(self) -> int:
        return self.blocks[0].norm1.weight.shape[0]


@MODELS.register_module()
class OFBSwin(OFBSupernetMixin, BaseModule):
    """Swin backbone of OFB: searchable supernet, or compact network from an arch file.

    Args:
        arch: ``'swin-t'``, ``'swin-s'`` or ``'swin-b'``.
        arch_file: path (or dict) of an arch file from ``tools/ofb_export.py``: build the
            compact dense network it describes.
        search_space: searched groups, a subset of ``('attn', 'mlp', 'embed')`` (default all;
            ``()``: the plain dense Swin). Not with ``arch_file``.
        img_size: nominal input size (FLOPs of the search; any size divisible by 32 runs the
            search, any size runs the network).
        patch_size, in_channels, window_size, mlp_ratio, qkv_bias, drop_rate, attn_drop_rate,
        drop_path_rate, out_indices, pad_small_map: as :class:`mmdcs.Swin`. A search needs
            the last stage in ``out_indices`` (its map feeds the PMIM decoder).
        init_cfg: mmengine init config.
    """
    family = 'swin'
    arch_zoo = {
        'swin-t': dict(embed_dims=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24)),
        'swin-s': dict(embed_dims=96, depths=(2, 2, 18, 2), num_heads=(3, 6, 12, 24)),
        'swin-b': dict(embed_dims=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32)),
    }

    def __init__(self, arch: str = 'swin-t', arch_file: Union[None, str, dict] = None,
                 search_space: Optional[Sequence[str]] = None, img_size: int = 224,
                 patch_size: int = 4, in_channels: int = 3, window_size: int = 7,
                 mlp_ratio: float = 4., qkv_bias: bool = True, drop_rate: float = 0.,
                 attn_drop_rate: float = 0., drop_path_rate: float = 0.,
                 out_indices: Union[int, Sequence[int]] = (3, ), pad_small_map: bool = False,
                 init_cfg=None):
        name = type(self).__name__
        check_numbers(locals(), NUMERIC_ARGUMENTS, name)  # the arguments, as every backbone's
        super().__init__(init_cfg=init_cfg)
        check_choice('arch', arch, list(self.arch_zoo), name)
        s = self.arch_zoo[arch]
        self.arch = arch
        self.depths = tuple(s['depths'])
        self.num_stages = len(self.depths)
        self.full_dims = [s['embed_dims'] * 2**i for i in range(self.num_stages)]
        self.full_heads = list(s['num_heads'])
        self.full_head_dims = [d // h for d, h in zip(self.full_dims, self.full_heads)]
        self.full_hidden = [int(d * mlp_ratio) for d in self.full_dims]
        self.img_size = img_size
        self.patch_size = patch_size
        self.in_channels = in_channels
        self.out_indices = normalize_out_indices(out_indices, self.num_stages, name)

        self.arch_spec, search_space = self._arch_or_search_space(arch_file, search_space)
        if self.arch_spec is not None:
            stages = self.arch_spec['stages']
        else:
            stages = [dict(embed_dim=self.full_dims[i],
                           blocks=[dict(num_heads=self.full_heads[i],
                                        head_dim=self.full_head_dims[i],
                                        mlp_hidden=self.full_hidden[i])] * self.depths[i])
                      for i in range(self.num_stages)]
        if search_space and self.num_stages - 1 not in self.out_indices:
            raise ValueError(f'{name}: a supernet needs the last stage in out_indices (the '
                             f'PMIM decoder reads it), got {self.out_indices}')
        self.search_space = search_space

        dims = [st['embed_dim'] for st in stages]
        self.patch_embed = PatchEmbed(patch_size, in_channels, dims[0])
        dpr = drop_path_rates(drop_path_rate, sum(self.depths))
        layers, start = [], 0
        for i, st in enumerate(stages):
            layers.append(OFBSwinStage(
                dims[max(i - 1, 0)], dims[i], st['blocks'], downsample=i > 0,
                drop_path=dpr[start:start + self.depths[i]], search_embed='embed' in search_space,
                scale=self.full_head_dims[i]**-0.5, search_attn='attn' in search_space,
                search_mlp='mlp' in search_space, window_size=window_size, qkv_bias=qkv_bias,
                drop=drop_rate, attn_drop=attn_drop_rate, pad_small_map=pad_small_map))
            start += self.depths[i]
        self.layers = nn.ModuleList(layers)
        for i in self.out_indices:
            self.add_module(f'norm{i}', nn.LayerNorm(dims[i]))
        if search_space:
            self.mask_token = nn.Parameter(torch.zeros(1, 1, 1, dims[0]))
            nn.init.trunc_normal_(self.mask_token, std=.02)
        else:
            self.mask_token = None
        for n, m in self.named_modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def _read_arch(self, arch_file) -> dict:
        where = f'{type(self).__name__}({self.arch})'
        try:
            spec = load_arch(arch_file)
            check_family(spec, self.family, self.arch, where)
            stages = spec.get('stages')
            if not isinstance(stages, list) or len(stages) != self.num_stages:
                raise ArchFileError(f'{where}: the arch file has '
                                    f'{len(stages) if isinstance(stages, list) else 0} stages, '
                                    f'the backbone {self.num_stages}')
            out = []
            for i, st in enumerate(stages):
                if not isinstance(st, dict):
                    raise ArchFileError(f'{where} stage {i}: expected a dict, got {st!r}')
                out.append(dict(
                    embed_dim=check_width(st.get('embed_dim'), self.full_dims[i],
                                          f'{where} stage {i} embed_dim'),
                    blocks=check_blocks(st.get('blocks'), self.depths[i],
                                        dict(num_heads=self.full_heads[i],
                                             head_dim=self.full_head_dims[i],
                                             mlp_hidden=self.full_hidden[i]),
                                        f'{where} stage {i}')))
        except ArchFileError as e:
            src = arch_file if isinstance(arch_file, str) else 'the arch dict'
            raise ArchFileError(f'{e} ({src})') from None
        return dict(spec, stages=out)

    # ----------------------------------------------------------------- sizes
    @property
    def dims(self) -> List[int]:
        return [stage.dim for stage in self.layers]

    @property
    def num_features(self) -> int:
        return self.dims[-1]

    @property
    def full_num_features(self) -> int:
        return self.full_dims[-1]

    @property
    def output_tokens(self) -> int:
        """Cells of the last stage's map at ``img_size`` (what a pooling neck averages)."""
        h, w = self._stage_sizes()[-1]
        return h * w

    @property
    def mim_scale(self) -> int:
        """Pixels per cell of the last stage's map (32): PMIM's masking unit."""
        return self.patch_size * 2**(self.num_stages - 1)

    def mim_grid(self, inputs: Tensor) -> Size:
        H, W = inputs.shape[-2:]
        s = self.mim_scale
        if H % s or W % s:
            raise InputError(f'{type(self).__name__}: the PMIM search needs an input size '
                             f'divisible by {s}, got {H}x{W}')
        return H // s, W // s

    # ----------------------------------------------------------------- checkpoints
    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        self._adopt_search_shapes(state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def get_layer_depth(self, param_name: str, prefix: str = '') -> Tuple[int, int]:
        """Layer id for layer-wise lr decay: the stem 0, block k (over all stages) k + 1, a
        patch merging with the block before it, the rest (norms, head) the last."""
        num_layers = sum(self.depths) + 2
        if not param_name.startswith(prefix):
            return num_layers - 1, num_layers
        name = param_name[len(prefix):]
        if name.startswith(('patch_embed', 'mask_token')):
            return 0, num_layers
        if name.startswith('layers.'):
            parts = name.split('.')
            stage = int(parts[1])
            first = sum(self.depths[:stage])
            if parts[2] == 'blocks':
                return first + int(parts[3]) + 1, num_layers
            return first, num_layers  # downsample / embedding mask: with the previous block
        return num_layers - 1, num_layers

    # ----------------------------------------------------------------- forward
    def _embed_mask(self, stage: int) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        bm = self.layers[stage].embed_bimask
        if bm is None:
            return None, None
        index = None
        if not bm.is_finished and bm.extent() != bm.units:
            index = torch.nonzero(bm.support()).flatten()
        return bm(), index

    def _forward(self, x: Tensor, patch_mask: Optional[Tensor] = None):
        pe = self.patch_embed
        p = pe.patch_size
        H, W = x.shape[-2:]
        if H % p or W % p:
            x = F.pad(x, (0, (p - W % p) % p, 0, (p - H % p) % p))
        mask0, index = self._embed_mask(0)
        x = masked_layer_norm(pe.proj(x).permute(0, 2, 3, 1), pe.norm, index)
        if patch_mask is not None:
            if self.mask_token is None:
                raise ValueError(f'{type(self).__name__}: patch masking needs the supernet')
            B, h, w, _ = x.shape
            f = self.mim_scale // p
            cells = patch_mask.view(B, 1, h // f, w // f)
            m = cells.repeat_interleave(f, 2).repeat_interleave(f, 3)
            m = m[:, 0, :h, :w].unsqueeze(-1).to(x.dtype)
            x = x * (1 - m) + self.mask_token.to(x.dtype) * m
        if mask0 is not None:
            x = x * mask0.to(x.dtype)
        outs = []
        for i, stage in enumerate(self.layers):
            if i > 0:
                prev_index = index
                mask, index = self._embed_mask(i)
                x = stage.downsample(x, prev_index)
                if mask is not None:
                    x = x * mask.to(x.dtype)
            for blk in stage.blocks:
                x = blk(x, index)
            if i in self.out_indices:
                out = masked_layer_norm(x, getattr(self, f'norm{i}'), index)
                outs.append(out.permute(0, 3, 1, 2).contiguous())
        return tuple(outs)

    def forward(self, x: Tensor) -> Tuple[Tensor, ...]:
        return self._forward(x)

    def forward_search(self, x: Tensor, patch_mask: Optional[Tensor] = None
                       ) -> Tuple[Tuple[Tensor, ...], Tensor]:
        """Outputs of :meth:`forward` with the 32×32 cells of ``patch_mask`` (B, h/32·w/32; 1 =
        masked) replaced by the mask token, and the last stage's map for the PMIM decoder."""
        outs = self._forward(x, patch_mask)
        return outs, outs[-1]

    # ----------------------------------------------------------------- FLOPs
    def _stage_sizes(self) -> List[Size]:
        side = (math.ceil(self.img_size / self.patch_size), ) * 2
        sizes = []
        for i in range(self.num_stages):
            if i > 0:
                side = ((side[0] + 1) // 2, (side[1] + 1) // 2)
            sizes.append(side)
        return sizes

    def _macs(self, embeds, qkvs, hiddens):
        """MACs at ``img_size``: ``embeds`` per stage, ``qkvs``/``hiddens`` per stage per block
        (numbers or tensors), counted as the compact network runs (attention on padded
        windows)."""
        sizes = self._stage_sizes()
        n0 = sizes[0][0] * sizes[0][1]
        total = n0 * embeds[0] * self.in_channels * self.patch_size**2 + \
            layer_norm_macs(n0, embeds[0])
        for i, stage in enumerate(self.layers):
            H, W = sizes[i]
            n = H * W
            e = embeds[i]
            if i > 0:
                total = total + layer_norm_macs(n, 4 * embeds[i - 1]) + \
                    linear_macs(n, 4 * embeds[i - 1], e)
            for blk, q, h in zip(stage.blocks, qkvs[i], hiddens[i]):
                window, (Hp, Wp) = blk.padded(H, W)
                npad = Hp * Wp
                total = (total + 2 * layer_norm_macs(n, e) + linear_macs(npad, e, 3 * q)
                         + attention_macs(npad, window[0] * window[1], q)
                         + linear_macs(npad, q, e) + linear_macs(n, e, h) + linear_macs(n, h, e))
            if i in self.out_indices:
                total = total + layer_norm_macs(n, e)
        return total

    def expected_macs(self) -> Tensor:
        ref = self.patch_embed.proj.weight
        embeds, qkvs, hiddens = [], [], []
        for stage in self.layers:
            bm = stage.embed_bimask
            embeds.append(bm.expected_size() if bm is not None else
                          ref.new_tensor(float(stage.dim)))
            qkvs.append([b.attn.bimask.expected_size() if b.attn.bimask is not None else
                         ref.new_tensor(float(b.attn.num_heads * b.attn.head_dim))
                         for b in stage.blocks])
            hiddens.append([b.mlp.bimask.expected_size() if b.mlp.bimask is not None else
                            ref.new_tensor(float(b.mlp.hidden)) for b in stage.blocks])
        return self._macs(embeds, qkvs, hiddens)

    def expected_width(self) -> Tensor:
        bm = self.layers[-1].embed_bimask
        if bm is not None:
            return bm.expected_size()
        return self.patch_embed.proj.weight.new_tensor(float(self.num_features))

    def full_macs(self) -> float:
        return float(self._macs(
            self.full_dims,
            [[h * d] * n for h, d, n in zip(self.full_heads, self.full_head_dims, self.depths)],
            [[h] * n for h, n in zip(self.full_hidden, self.depths)]))

    # ----------------------------------------------------------------- compression
    def compress_(self, threshold: float = 0.2, optimizers: Optimizers = None) -> dict:
        """As :meth:`OFBViT.compress_`, with one embedding group per stage; ``out_keep`` is the
        kept channels of the last stage (read by the head / decoder)."""
        changed = False
        out_keep = None
        for i, stage in enumerate(self.layers):
            for blk in stage.blocks:
                changed |= blk.attn.compress_(threshold, optimizers)
                changed |= blk.mlp.compress_(threshold, optimizers)
            bm = stage.embed_bimask
            if bm is None or bm.is_finished:
                continue

            def slice_embed(keep, i=i):
                nonlocal out_keep
                self.slice_stage_embed_(i, keep, optimizers)
                if i == self.num_stages - 1:
                    out_keep = keep

            changed |= compress_group_(bm, threshold, slice_embed, optimizers)
        return dict(changed=changed, out_keep=out_keep)

    def slice_stage_embed_(self, i: int, keep: Tensor, optimizers: Optimizers = None) -> None:
        """Keep the channels ``keep`` of stage ``i``'s residual stream everywhere."""
        stage = self.layers[i]
        keep = keep.to(self.patch_embed.proj.weight.device)
        width = stage.dim
        if i == 0:
            pe = self.patch_embed
            for t in (pe.proj.weight, pe.proj.bias, pe.norm.weight, pe.norm.bias):
                slice_param_(t, keep, 0, optimizers)
            if self.mask_token is not None:
                slice_param_(self.mask_token, keep, 3, optimizers)
        else:
            slice_param_(stage.downsample.reduction.weight, keep, 0, optimizers)
        for blk in stage.blocks:
            for n in (blk.norm1, blk.norm2):
                slice_param_(n.weight, keep, 0, optimizers)
                slice_param_(n.bias, keep, 0, optimizers)
            slice_param_(blk.attn.qkv.weight, keep, 1, optimizers)
            slice_param_(blk.attn.proj.weight, keep, 0, optimizers)
            slice_param_(blk.attn.proj.bias, keep, 0, optimizers)
            slice_param_(blk.mlp.fc1.weight, keep, 1, optimizers)
            slice_param_(blk.mlp.fc2.weight, keep, 0, optimizers)
            slice_param_(blk.mlp.fc2.bias, keep, 0, optimizers)
        if i in self.out_indices:
            norm = getattr(self, f'norm{i}')
            slice_param_(norm.weight, keep, 0, optimizers)
            slice_param_(norm.bias, keep, 0, optimizers)
        if i + 1 < self.num_stages:
            merge = self.layers[i + 1].downsample
            keep4 = torch.cat([keep + k * width for k in range(4)])
            slice_param_(merge.norm.weight, keep4, 0, optimizers)
            slice_param_(merge.norm.bias, keep4, 0, optimizers)
            slice_param_(merge.reduction.weight, keep4, 1, optimizers)
        slice_param_(stage.embed_bimask.score, keep, 0, optimizers)
        sync_layer_attrs_(self)

    def _fuse_embed_(self) -> None:
        for i, stage in enumerate(self.layers):
            bm = stage.embed_bimask
            if bm is None or bm.is_fused:
                continue
            with torch.no_grad():
                m = bm.score.detach()
                if i == 0:
                    self.patch_embed.norm.weight.mul_(m)
                    self.patch_embed.norm.bias.mul_(m)
                    if self.mask_token is not None:
                        self.mask_token.mul_(m)
                else:
                    stage.downsample.reduction.weight.mul_(m[:, None])
            bm.mark_fused_()

    # ----------------------------------------------------------------- export
    def export_arch(self, **meta) -> dict:
        if not self.search_finished:
            raise RuntimeError(f'{type(self).__name__}.export_arch: the search is not '
                               'finished; discretize_() and compress_() first')
        stages = [dict(embed_dim=stage.dim,
                       blocks=[dict(num_heads=b.attn.num_heads, head_dim=b.attn.head_dim,
                                    mlp_hidden=b.mlp.hidden) for b in stage.blocks])
                  for stage in self.layers]
        return dict(format=ARCH_FORMAT, family=self.family, arch=self.arch, stages=stages,
                    meta=meta)

    def compact_state_dict(self) -> Dict[str, Tensor]:
        if not self.fused:
            raise RuntimeError(f'{type(self).__name__}.compact_state_dict: fuse_() first')
        return {k: v for k, v in self.state_dict().items()
                if 'bimask.' not in k and not k.startswith('mask_token')}
