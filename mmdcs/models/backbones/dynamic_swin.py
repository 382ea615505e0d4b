"""DynamicSwin (Rao et al., T-PAMI extension of DynamicViT; public ``models/dyswin.py``).

:class:`DynamicSwin` is :class:`~mmdcs.models.backbones.swin.Swin` (same parameter names, so a
timm / official Swin checkpoint converted by ``swin.convert_timm`` / ``convert_official_swin`` or an
mmdcs Swin classifier loads) with, as the public code, sparsification in one stage only (the third,
``sparse_stage=2``: 14×14 tokens at 224). Windowed attention needs every position, so **no token is
removed**: from the first pruning location on, each block of that stage sends the tokens its latest
decision selects through its MLP and the others through a cheap fast path
(:class:`~mmdcs.peers.dynamicvit.FastMLP`, LayerNorm → Linear C→C, ``blocks.{j}.fastmlp``). The
predictors (``layers.{stage}.score_predictor.{s}``) see all tokens of the stage (plain mean as the
global feature); each decision is made afresh, not multiplied with the previous one.

* **training** (public ``AdaSwinTransformerBlock``): a hard Gumbel decision m per pruning location;
  two token streams x₁ (MLP) and x₂ (fast path) are carried through the stage, a block's input is
  ``m·x₁ + (1−m)·x₂`` and its outputs ``x₁ = x + MLP(LN(m·x + (1−m)·x₁))``,
  ``x₂ = x + Fast((1−m)·x + m·x₂)`` with x the attention output; the stage returns
  ``m·x₁ + (1−m)·x₂``. In the forward values every token gets
  ``x + m·MLP(LN(x)) + (1−m)·Fast(x)``; the streams only shape the gradients, as in the public code.
* **inference**: after attention, exactly ``⌈ρ_s·N⌉`` tokens (argsort of the keep score; N the
  tokens of the stage) are gathered through the MLP and the rest through the fast path, then
  scattered back: every stage output stays a dense map (mmdet / mmseg necks need nothing else),
  and FLOP counters see the MLP on the selected tokens only.

Keep ratios ``[ρ, ρ−0.2, ρ−0.4]`` at blocks (1, 2, 3) of the stage for Swin-T and (2, 4, 6) for
Swin-S/B (public main.py); ratios are fractions of all tokens of the stage, not cumulative. With
every ratio 1 the network is exactly :class:`Swin` in inference.

In training ``last_decisions`` (one (B, N) decision per pruning location), ``last_mask`` (None:
the token distillation uses every token, as the public ``swin_token`` loss) and ``last_tokens``
(the normalised tokens of the last stage (B, H·W, C), needs the last stage in ``out_indices``) are
kept for :class:`DynamicViTClassifier`.
"""
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from mmdcs.peers.dynamicvit import (FastMLP, TokenPredictor, batch_index_fill,
                                    batch_index_select, gumbel_keep_mask, keep_count)
from mmdcs.peers.dynamicvit.predictor import KEEP
from mmdcs.registry import MODELS
from .dynamic_vit import TokenPruningMixin, check_pruning_loc, resolve_keep_ratios
from .swin import Swin, SwinBlock

#: public pruning locations inside the sparse stage
DEFAULT_PRUNING_LOC = {'swin-t': (1, 2, 3), 'swin-s': (2, 4, 6), 'swin-b': (2, 4, 6)}


def _block_attention(blk: SwinBlock, x: Tensor) -> Tensor:
    """``x + drop_path(attn(norm1(x)))`` of a Swin block, x (B, H, W, C)."""
    return x + blk.drop_path1(blk._attn(blk.norm1(x)))


@MODELS.register_module()
class DynamicSwin(TokenPruningMixin, Swin):
    """Swin Transformer with DynamicSwin token routing in one stage.

    Args:
        arch: ``'swin-t'``, ``'swin-s'`` or ``'swin-b'``.
        keep_ratio: ρ; the stage's predictors keep ``[ρ, ρ−0.2, ρ−0.4]`` of its tokens.
        keep_ratios: explicit ratios per pruning location (non-increasing), instead.
        pruning_loc: block indices inside ``sparse_stage`` (default: public, per arch).
        sparse_stage: the stage with the predictors and fast paths (public: 2).
        freeze_predictors: keep the predictors fixed (``requires_grad=False``).
        gumbel_tau: temperature of the Gumbel-softmax decision (public 1).
        **kwargs: as :class:`Swin` (``out_indices``, ``drop_path_rate``, ``frozen_stages``,
            ``pad_small_map``, ``init_cfg``, …). Only the baseline variant.
    """
    #: a peer method (baseline only): no head selection
    supports_heads = False

    def __init__(self, arch: str = 'swin-t', keep_ratio: Optional[float] = 0.7,
                 keep_ratios: Optional[Sequence[float]] = None,
                 pruning_loc: Optional[Sequence[int]] = None, sparse_stage: int = 2,
                 freeze_predictors: bool = False, gumbel_tau: float = 1.,
                 variant: Optional[str] = None, **kwargs):
        if variant not in (None, 'baseline') or kwargs.get('subnet') is not None:
            raise ValueError(f'DynamicSwin: only the baseline Swin is supported (got variant='
                             f'{variant!r}, subnet={kwargs.get("subnet")!r})')
        super().__init__(arch, variant='baseline', **kwargs)
        name = type(self).__name__
        if not 0 <= sparse_stage < self.num_stages:
            raise ValueError(f'{name}: sparse_stage must be in [0, {self.num_stages}), got '
                             f'{sparse_stage}')
        self.sparse_stage = sparse_stage
        stage = self.layers[sparse_stage]
        depth = len(stage.blocks)
        if pruning_loc is None:
            pruning_loc = DEFAULT_PRUNING_LOC[arch]
        self.pruning_loc = check_pruning_loc(pruning_loc, depth, f'{name} (stage {sparse_stage} '
                                             f'has {depth} blocks)')
        self.keep_ratios = resolve_keep_ratios(keep_ratio, keep_ratios, len(self.pruning_loc),
                                               'linear', name)
        self.gumbel_tau = float(gumbel_tau)
        self.freeze_predictors = freeze_predictors
        dim = self.num_features[sparse_stage]
        drop = kwargs.get('drop_rate', 0.)
        stage.score_predictor = nn.ModuleList([TokenPredictor(dim) for _ in self.pruning_loc])
        for j in range(self.pruning_loc[0], depth):
            stage.blocks[j].fastmlp = FastMLP(dim, drop)
        for m in self._new_modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=.02)
                nn.init.zeros_(m.bias)
        if freeze_predictors:
            stage.score_predictor.requires_grad_(False)
        self._clear_state()

    def _new_modules(self):
        stage = self.layers[self.sparse_stage]
        yield from stage.score_predictor.modules()
        for j in range(self.pruning_loc[0], len(stage.blocks)):
            yield from stage.blocks[j].fastmlp.modules()

    def keep_counts(self, img_size: Optional[int] = None) -> List[int]:
        """Tokens sent through the MLP after each pruning location at inference (``⌈ρ_s·N⌉``, N
        the tokens of the sparse stage at the nominal input size unless given)."""
        n = self.stage_tokens(img_size)[self.sparse_stage]
        return [keep_count(r, n) for r in self.keep_ratios]

    # ----------------------------------------------------------------- forward
    def forward(self, x: Tensor) -> Tuple[Tensor, ...]:
        self._clear_state()
        x = self.patch_embed(x)
        outs = []
        for i, stage in enumerate(self.layers):
            x = self._sparse_stage(stage, x) if i == self.sparse_stage else stage(x)
            if i in self.out_indices:
                outs.append(getattr(self, f'norm{i}')(x))
        if self.training and self.num_stages - 1 in self.out_indices:
            self.last_tokens = outs[-1].flatten(1, 2)
        return tuple(o.permute(0, 3, 1, 2).contiguous() for o in outs)

    def _sparse_stage(self, stage, x: Tensor) -> Tensor:
        x = stage.downsample(x)
        blocks = stage.blocks
        first = self.pruning_loc[0]
        for j in range(first):
            x = blocks[j](x)
        if self.training:
            return self._route_train(stage, x)
        return self._route_infer(stage, x)

    def _route_train(self, stage, x: Tensor) -> Tensor:
        B, H, W, C = x.shape
        x1 = x2 = x
        mask = None
        decisions = []
        for j in range(self.pruning_loc[0], len(stage.blocks)):
            if j in self.pruning_loc:
                s = self.pruning_loc.index(j)
                inp = x1 if mask is None else x1 * mask + x2 * (1 - mask)
                log_probs = stage.score_predictor[s](inp.reshape(B, H * W, C))
                decision = gumbel_keep_mask(log_probs, tau=self.gumbel_tau)
                decisions.append(decision)
                mask = decision.reshape(B, H, W, 1)
            blk = stage.blocks[j]
            x = _block_attention(blk, x1 * mask + x2 * (1 - mask))
            s1 = x * mask + x1 * (1 - mask)
            s2 = x * (1 - mask) + x2 * mask
            x1 = x + blk.drop_path2(blk.mlp(blk.norm2(s1)))
            x2 = x + blk.drop_path2(blk.fastmlp(s2))
        self.last_decisions = decisions
        return x1 * mask + x2 * (1 - mask)

    def _route_infer(self, stage, x: Tensor) -> Tensor:
        B, H, W, C = x.shape
        N = H * W
        keep_idx = rest_idx = None
        for j in range(self.pruning_loc[0], len(stage.blocks)):
            if j in self.pruning_loc:
                s = self.pruning_loc.index(j)
                k = keep_count(self.keep_ratios[s], N)
                if k < N:
                    log_probs = stage.score_predictor[s](x.reshape(B, N, C))
                    order = torch.argsort(log_probs[..., KEEP], dim=1, descending=True)
                    keep_idx, rest_idx = order[:, :k], order[:, k:]
                else:
                    keep_idx = rest_idx = None
            blk = stage.blocks[j]
            x = _block_attention(blk, x)
            if keep_idx is None:
                x = x + blk.drop_path2(blk.mlp(blk.norm2(x)))
                continue
            t = x.reshape(B, N, C)
            slow = blk.mlp(blk.norm2(batch_index_select(t, keep_idx)))
            fast = blk.fastmlp(batch_index_select(t, rest_idx))
            delta = batch_index_fill(batch_index_fill(torch.zeros_like(t), slow, keep_idx), fast,
                                     rest_idx)
            x = (t + blk.drop_path2(delta)).reshape(B, H, W, C)
        return x
