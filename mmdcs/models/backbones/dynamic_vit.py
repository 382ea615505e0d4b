"""DynamicViT (Rao et al., NeurIPS 2021) on ViT / DeiT: dynamic token sparsification.

:class:`DynamicViT` is :class:`~mmdcs.models.backbones.vit.ViT` (same parameter names, so a DeiT /
timm checkpoint converted by ``vit.convert_timm`` or an mmdcs ViT classifier loads) plus one
prediction module per pruning location (``score_predictor.{s}``, the public layout). Before the
blocks ``pruning_loc`` (default 3, 6, 9) the predictor scores the patch tokens:

* **training**: a hard Gumbel keep mask (straight-through), cumulative over the stages; dropped
  tokens stay in the sequence but no other token attends to them (attention masking,
  :func:`~mmdcs.peers.dynamicvit.softmax_with_policy`); the class token is always kept;
* **inference**: exactly ``⌈ρ_s·N⌉`` patch tokens (N = patch tokens of the input, ρ_s the keep ratio
  of stage s: ``[ρ, ρ², ρ³]`` by default) are gathered by ``argsort`` of the keep score; the
  blocks after it see only them, so FLOP counters and timers measure the pruned network.

Outputs follow :class:`ViT` (``out_type``, ``out_indices``). For ``'featmap'`` the dropped tokens
are restored at their positions with the features they had when they were dropped (in training
and in inference alike), so mmdet / mmseg necks get full maps at any input size;
``'avg_featmap'`` averages the kept tokens; ``'raw'`` returns the (pruned) sequence.

In training the backbone keeps what the loss needs (:class:`DynamicViTClassifier` reads it):
``last_decisions`` (the cumulative decision (B, N) of every stage), ``last_mask`` (the final one,
detached) and ``last_tokens`` (the final normalised patch tokens (B, N, C)).

With every keep ratio 1 the network is exactly :class:`ViT` in inference (no gather, predictors not
run).
"""
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from mmdcs.peers.dynamicvit import (POLICY_EPS, TokenPredictor, batch_index_select,
                                    check_keep_ratios, gumbel_keep_mask, keep_count,
                                    keep_ratios, policy_attention, restore_tokens,
                                    topk_keep_indices)
from mmdcs.registry import MODELS
from .vit import Block, ViT

#: public DeiT / LV-ViT setting
DEFAULT_PRUNING_LOC = (3, 6, 9)
#: extra parameters a plain ViT / Swin checkpoint cannot have
PREDICTOR_KEYS = ('score_predictor.', 'fastmlp.')


def check_pruning_loc(pruning_loc: Sequence[int], depth: int, owner: str) -> Tuple[int, ...]:
    """Strictly increasing block indices in [0, depth)."""
    loc = tuple(int(i) for i in pruning_loc)
    if not loc:
        raise ValueError(f'{owner}: pruning_loc is empty')
    if any(b <= a for a, b in zip(loc, loc[1:])) or loc[0] < 0 or loc[-1] >= depth:
        raise ValueError(f'{owner}: pruning_loc must be strictly increasing block indices in '
                         f'[0, {depth}), got {list(loc)}')
    return loc


def resolve_keep_ratios(keep_ratio: Optional[float], ratios: Optional[Sequence[float]],
                        num_stages: int, schedule: str, owner: str) -> List[float]:
    """Explicit ``keep_ratios`` (one per pruning location), or the public schedule of ρ."""
    if ratios is not None:
        ratios = check_keep_ratios(ratios, f'{owner}.keep_ratios')
        if len(ratios) != num_stages:
            raise ValueError(f'{owner}: {len(ratios)} keep_ratios for {num_stages} pruning '
                             'locations')
        return ratios
    if keep_ratio is None:
        raise ValueError(f'{owner}: give keep_ratio (ρ) or keep_ratios')
    try:
        return keep_ratios(float(keep_ratio), num_stages, schedule)
    except ValueError as e:
        raise ValueError(f'{owner}: keep_ratio {keep_ratio} with the {schedule!r} schedule: {e}; '
                         'give keep_ratios explicitly') from None


def policy_block_forward(blk: Block, x: Tensor, policy: Tensor, eps: float) -> Tensor:
    """A ViT block with attention masking by ``policy`` (B, N): ``blk``'s own parameters, the
    softmax restricted to the kept keys."""
    attn = blk.attn
    h = blk.norm1(x)
    B, N, _ = h.shape
    qkv = attn.qkv(h).reshape(B, N, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    o = policy_attention(q, k, v, policy, attn.scale, eps, attn.attn_drop)
    o = attn.proj_drop(attn.proj(o.transpose(1, 2).reshape(B, N, attn.attn_dim)))
    x = x + blk.drop_path1(o)
    return x + blk.drop_path2(blk.mlp(blk.norm2(x)))


class TokenPruningMixin:
    """What DynamicViT and DynamicSwin share: loading a plain backbone's checkpoint (without the
    modules the method adds, :data:`PREDICTOR_KEYS`) and the state of the last forward."""
    #: a peer method's backbone (the backbone contract, :class:`SelectableBackbone`)
    is_peer = True
    #: the peer's arch names that the plain family spells otherwise (DeiT → ViT)
    plain_archs: Dict[str, str] = {}

    @property
    def plain_arch(self) -> str:
        """The arch of the plain family backbone this one is timed against."""
        return self.plain_archs.get(self.arch, self.arch)

    def load_converted(self, state_dict: dict, strict: bool = True):
        """Load a (converted) ViT / DeiT / Swin state dict; the predictors (and Swin's fast
        paths) may be missing."""
        missing, unexpected = self.load_state_dict(state_dict, strict=False)
        missing = [k for k in missing if not any(p in k for p in PREDICTOR_KEYS)]
        if strict and (missing or unexpected):
            raise KeyError(f'{type(self).__name__}: checkpoint does not fit; missing keys: '
                           f'{missing[:10]}; unexpected keys: {unexpected[:10]}')
        return missing, unexpected

    def _clear_state(self) -> None:
        self.last_decisions: List[Tensor] = []
        self.last_mask: Optional[Tensor] = None
        self.last_tokens: Optional[Tensor] = None


@MODELS.register_module()
class DynamicViT(TokenPruningMixin, ViT):
    """ViT / DeiT with DynamicViT token sparsification.

    Args:
        arch: ``'deit-tiny'``, ``'deit-s'`` (= ``'vit-s16'``), ``'deit-b'`` (= ``'vit-b16'``).
        keep_ratio: ρ; stage s keeps ρ^s of the patch tokens (public ``KEEP_RATE``).
        keep_ratios: explicit ratios per pruning location (relative to the input's patch tokens,
            non-increasing), instead of ``keep_ratio``.
        pruning_loc: the blocks before which a predictor prunes (public: 3, 6, 9).
        policy_eps: the eps of the masked softmax (public 1e-6; 0: dropped tokens have exactly no
            influence).
        freeze_predictors: keep the predictors fixed (``requires_grad=False``), e.g. when the
            backbone is fine-tuned for detection without the keep-ratio loss.
        gumbel_tau: temperature of the Gumbel-softmax decision (public 1).
        **kwargs: as :class:`ViT` (``img_size``, ``out_type``, ``out_indices``, ``final_norm``,
            ``drop_path_rate``, ``init_cfg``, …). Only the baseline variant.
    """
    #: a peer method (baseline only): no head selection
    supports_heads = False
    arch_zoo: Dict[str, dict] = dict(ViT.arch_zoo, **{
        'deit-s': ViT.arch_zoo['vit-s16'],
        'deit-b': ViT.arch_zoo['vit-b16'],
    })
    plain_archs = {'deit-s': 'vit-s16', 'deit-b': 'vit-b16'}

    def __init__(self, arch: str = 'deit-s', keep_ratio: Optional[float] = 0.7,
                 keep_ratios: Optional[Sequence[float]] = None,
                 pruning_loc: Sequence[int] = DEFAULT_PRUNING_LOC,
                 policy_eps: float = POLICY_EPS, freeze_predictors: bool = False,
                 gumbel_tau: float = 1., variant: Optional[str] = None, **kwargs):
        if variant not in (None, 'baseline') or kwargs.get('subnet') is not None:
            raise ValueError(f'DynamicViT: only the baseline ViT is supported (got variant='
                             f'{variant!r}, subnet={kwargs.get("subnet")!r})')
        super().__init__(arch, variant='baseline', **kwargs)
        name = type(self).__name__
        self.pruning_loc = check_pruning_loc(pruning_loc, self.depth, name)
        self.keep_ratios = resolve_keep_ratios(keep_ratio, keep_ratios, len(self.pruning_loc),
                                               'power', name)
        # policy_eps, gumbel_tau: checked with every backbone's numbers (base.NUMERIC_ARGUMENTS)
        self.policy_eps = float(policy_eps)
        self.gumbel_tau = float(gumbel_tau)
        self.freeze_predictors = freeze_predictors
        self.score_predictor = nn.ModuleList(
            [TokenPredictor(self.embed_dim) for _ in self.pruning_loc])
        self._reset_predictors()
        if freeze_predictors:
            self.score_predictor.requires_grad_(False)
        self._clear_state()

    # ----------------------------------------------------------------- init / checkpoints
    def _reset_predictors(self) -> None:
        for m in self.score_predictor.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=.02)
                nn.init.zeros_(m.bias)

    # ----------------------------------------------------------------- counts
    def keep_counts(self, num_patches: Optional[int] = None) -> List[int]:
        """Patch tokens kept by every stage at inference (``⌈ρ_s·N⌉``), N = the patches of the
        nominal ``img_size`` unless given."""
        n = num_patches or self.grid_size[0] * self.grid_size[1]
        return [keep_count(r, n) for r in self.keep_ratios]

    # ----------------------------------------------------------------- forward
    def forward(self, x: Tensor) -> Tuple[Tensor, ...]:
        x, hw = self._embed(x)
        if self.training:
            return self._forward_train(x, hw)
        self._clear_state()
        return self._forward_infer(x, hw)

    def _forward_train(self, x: Tensor, hw: Tuple[int, int]) -> Tuple[Tensor, ...]:
        """All tokens stay; the cumulative Gumbel decision masks the attention."""
        B, N = x.shape[0], hw[0] * hw[1]
        decision: Optional[Tensor] = None  # (B, N), None: nothing pruned yet
        frozen = None  # features of the dropped tokens at their drop stage (featmap only)
        decisions, outs = [], []
        last = self.depth - 1
        for i, blk in enumerate(self.blocks):
            if i in self.pruning_loc:
                s = self.pruning_loc.index(i)
                patches = x[:, 1:]
                prev = decision if decision is not None else x.new_ones(B, N)
                log_probs = self.score_predictor[s](patches, prev)
                decision = gumbel_keep_mask(log_probs, prev, self.gumbel_tau)
                if self.out_type == 'featmap':
                    dropped_now = patches * (prev - decision).unsqueeze(-1)
                    frozen = dropped_now if frozen is None else frozen + dropped_now
                decisions.append(decision)
            if decision is None:
                x = blk(x)
            else:
                policy = torch.cat([decision.new_ones(B, 1), decision], dim=1)
                x = policy_block_forward(blk, x, policy, self.policy_eps)
            normed = self.norm(x) if i == last else x
            if i in self.out_indices:
                if self.out_type == 'featmap':
                    patches = x[:, 1:]
                    if decision is not None:
                        patches = patches * decision.unsqueeze(-1) + frozen
                    outs.append(self._dense_map(patches, hw, i == last))
                elif self.out_type == 'avg_featmap' and decision is not None:
                    w = decision.unsqueeze(-1)
                    mean = (normed[:, 1:] * w).sum(dim=1) / w.sum(dim=1).clamp(min=1.)
                    outs.append(self.fc_norm(mean))
                else:
                    outs.append(self._format_output(normed, hw))
            x = normed
        self.last_decisions = decisions
        self.last_mask = decision.detach() if decision is not None else None
        self.last_tokens = x[:, self.num_prefix_tokens:]
        return tuple(outs)

    def _forward_infer(self, x: Tensor, hw: Tuple[int, int]) -> Tuple[Tensor, ...]:
        """Exactly ⌈ρ_s·N⌉ patch tokens after stage s (gathered)."""
        N = hw[0] * hw[1]
        idx: Optional[Tensor] = None  # (B, n) original positions of the current patch tokens
        dense: Optional[Tensor] = None  # (B, N, C) the dropped tokens at their drop stage
        outs = []
        last = self.depth - 1
        for i, blk in enumerate(self.blocks):
            if i in self.pruning_loc:
                s = self.pruning_loc.index(i)
                k = keep_count(self.keep_ratios[s], N)
                patches = x[:, 1:]
                if k < patches.shape[1]:
                    order = topk_keep_indices(self.score_predictor[s](patches), k)
                    if self.out_type == 'featmap':
                        dense = patches if dense is None else restore_tokens(dense, patches, idx)
                    idx = order if idx is None else batch_index_select(idx, order)
                    x = torch.cat([x[:, :1], batch_index_select(patches, order)], dim=1)
            x = blk(x)
            normed = self.norm(x) if i == last else x
            if i in self.out_indices:
                if self.out_type == 'featmap':
                    patches = x[:, 1:]
                    if idx is not None:
                        patches = restore_tokens(dense, patches, idx)
                    outs.append(self._dense_map(patches, hw, i == last))
                else:
                    outs.append(self._format_output(normed, hw))
            x = normed
        return tuple(outs)

    def _dense_map(self, patches: Tensor, hw: Tuple[int, int], is_last: bool) -> Tensor:
        """(B, N, C) patch tokens (dropped ones restored) → (B, C, H, W); the final norm applies
        to every position of the last block's map (it is per token)."""
        if is_last:
            patches = self.norm(patches)
        B, _, C = patches.shape
        return patches.reshape(B, hw[0], hw[1], C).permute(0, 3, 1, 2).contiguous()
