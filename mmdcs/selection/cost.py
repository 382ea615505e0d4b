"""Differentiable cost of a supernet (method.md §3): the search loss adds λ·log cost(α).

Every prunable block j contributes through its expected kept width E[D̃_j]. A hard binary Gumbel
gate is open with probability exactly sigmoid(α) at any temperature, so by default
E[D̃_j] = Σ_i sigmoid(α_i) (``expectation='gate'``); the papers' Σ_i sigmoid(α_i / τ)
(``expectation='paper'``) under-counts the open gates while τ > 1 and is kept only to reproduce
the papers. Linear_θ of DCS (the per-token Q/K mask, which stays in the deployed network) is a
constant of the cost (``const``): its size does not depend on α, and it gets no gradient from the
cost. Two ways to count:

* ``'paper'`` — the papers' formulas (DCS paper 3.4, A.1; KCR paper 3.3):
    - an MLP of l layers on D̃ channels: l·(2D̃² + D̃)   (DCS-MobileViT l=2, DCS-EfficientViT and
      KCR l = number of MLP layers)
    - a following convolution that reads the D̃ channels: (1 + D̃)·H·W·C
* ``'flops'`` — exact multiply-accumulates (the convention of ``mmengine.analysis``) of every layer
  whose shape depends on D̃. Each such layer has exactly one dimension equal to D̃, so its count
  is ``coef·D̃``: an MLP over N tokens with hidden width H costs ``2·N·H·D̃``, a 1×1 convolution to
  C channels on H×W costs ``H·W·C·D̃``. Plus ``const``, the FLOPs of the rest of the network, so
  that the cost is the whole network's FLOPs.

Hidden-unit selection (``select_hidden``): a block with a second gate over the H hidden units of
its MLP has E[H̃] = Σ_i sigmoid(β_i) too (the same ``expectation`` as E[D̃]). The two gates
are drawn independently, so the MLP's
exact cost N·(D̃·H̃ + H̃·D̃) has the expectation 2N·E[D̃]·E[H̃] (``flops_per_pair``); a layer that
depends on H̃ only (EfficientViT's MBConv: its 3×3 depthwise conv, and both 1×1 convs, whose
other side is the full residual width) costs ``flops_per_hidden``·H̃. In ``'paper'`` mode the
MLP term l·(2D̃² + D̃) is scaled by H̃/H (the papers have no hidden gate).

A backbone describes its blocks with :class:`CostTerm`; :class:`CostModel` sums them.
"""
from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch
from torch import Tensor

from .selectors import ChannelSelector

COST_MODES = ('paper', 'flops')
#: how E[D̃] is computed from α: 'gate' (exact, sigmoid(α)) or 'paper' (sigmoid(α/τ))
EXPECTATIONS = ('gate', 'paper')


@dataclass
class CostTerm:
    """How one prunable block's cost depends on its kept channels D̃.

    Args:
        selector: the block's channel selector (α); None for a hidden-only term (a module with
            a hidden selector and no channel selection, e.g. a convolutional FFN with
            ``select_hidden='all'``: its cost is ``flops_per_hidden``·H̃ only).
        mlp_layers: l in the paper's l·(2D̃² + D̃); 0 if the paper charges no MLP here.
        conv_hwc: H·W·C of a convolution after the block that reads the D̃ channels, in the
            paper's (1 + D̃)·H·W·C; 0 if none.
        flops_per_channel: exact FLOPs per kept channel (the ``'flops'`` mode), at the full
            hidden width when ``flops_per_pair`` is 0.
        params_per_channel: exact parameters per kept channel (the weights that read or write
            it), for a parameter budget.
        hidden: the block's hidden selector (``select_hidden``), or None (H̃ = ``hidden_dim``).
        hidden_dim: H, the full hidden width.
        flops_per_pair: exact FLOPs per (kept channel, kept hidden unit) pair: D̃·H̃ layers.
        flops_per_hidden: exact FLOPs per kept hidden unit of layers that do not read D̃.
    """
    selector: Optional[ChannelSelector]
    mlp_layers: int = 0
    conv_hwc: float = 0.
    flops_per_channel: float = 0.
    params_per_channel: float = 0.
    hidden: Optional[ChannelSelector] = None
    hidden_dim: float = 0.
    flops_per_pair: float = 0.
    flops_per_hidden: float = 0.

    def paper(self, d: Tensor, h: Optional[Tensor] = None) -> Tensor:
        mlp = 2 * d * d
        if h is not None and self.hidden is not None and self.hidden_dim:
            mlp = mlp * (h / self.hidden_dim)
        cost = self.mlp_layers * (mlp + d)
        if self.conv_hwc:
            cost = cost + (1 + d) * self.conv_hwc
        return cost

    def flops(self, d: Tensor, h: Optional[Tensor] = None) -> Tensor:
        if h is None:
            h = self.hidden_dim
        cost = self.flops_per_channel * d
        if self.flops_per_pair:
            cost = cost + self.flops_per_pair * d * h
        if self.flops_per_hidden:
            cost = cost + self.flops_per_hidden * h
        return cost

    def expected_kept(self, expectation: str = 'gate'):
        """(E[D̃], E[H̃]) of this block (E[H̃] = H without a hidden selector); the two gates
        are drawn independently, so E[D̃·H̃] = E[D̃]·E[H̃]."""
        d = (self.selector.expected_kept(expectation) if self.selector is not None
             else torch.zeros(()))
        h = (self.hidden.expected_kept(expectation) if self.hidden is not None
             else self.hidden_dim)
        return d, h

    @torch.no_grad()
    def kept(self):
        """(D̃, H̃) of the deterministic subnet (α > 0)."""
        d = torch.tensor(float(self.selector.keep_indices().numel())
                         if self.selector is not None else 0.)
        h = (torch.tensor(float(self.hidden.keep_indices().numel()))
             if self.hidden is not None else self.hidden_dim)
        return d, h


def mlp_cost_term(selector: ChannelSelector, hidden: Optional[ChannelSelector],
                  hidden_dim: float, flops_per_pair: float, **kwargs) -> CostTerm:
    """The term of an MLP whose layers cost ``flops_per_pair``·D̃·H̃ (fc1 + fc2 over N tokens:
    2N). Without a hidden selector H̃ = H is fixed and folded into ``flops_per_channel`` (the
    per-channel cost of the papers' setting); with one, the pair term stays (E[D̃]·E[H̃])."""
    if hidden is None:
        kwargs['flops_per_channel'] = (kwargs.get('flops_per_channel', 0.)
                                       + flops_per_pair * hidden_dim)
        return CostTerm(selector, hidden_dim=float(hidden_dim), **kwargs)
    return CostTerm(selector, hidden=hidden, hidden_dim=float(hidden_dim),
                    flops_per_pair=float(flops_per_pair), **kwargs)


class CostModel:
    """Σ_j cost_j(E[D̃_j]) over a backbone's prunable blocks.

    Args:
        terms: one per prunable block.
        mode: ``'paper'`` or ``'flops'``.
        const_flops: FLOPs that do not depend on any D̃ (``'flops'`` mode only).
        expectation: ``'gate'`` (E[D̃] = Σ sigmoid(α), the default) or ``'paper'``
            (Σ sigmoid(α/τ)).
        const: a constant added in either mode, in that mode's unit (e.g. Linear_θ of DCS:
            its parameters in ``'paper'`` mode, its FLOPs in ``'flops'`` mode).
    """

    def __init__(self, terms: Sequence[CostTerm], mode: str = 'paper', const_flops: float = 0.,
                 expectation: str = 'gate', const: float = 0.):
        if mode not in COST_MODES:
            raise ValueError(f'cost mode must be one of {COST_MODES}, got {mode!r}')
        if expectation not in EXPECTATIONS:
            raise ValueError(f'cost expectation must be one of {EXPECTATIONS}, got '
                             f'{expectation!r}')
        if not terms:
            raise ValueError('a cost model needs at least one prunable block')
        self.terms: List[CostTerm] = list(terms)
        self.mode = mode
        self.expectation = expectation
        self.const_flops = (float(const_flops) if mode == 'flops' else 0.) + float(const)

    def expected(self) -> Tensor:
        """The differentiable cost at E[D̃] (a scalar tensor with gradients to every α)."""
        total = sum(getattr(t, self.mode)(*t.expected_kept(self.expectation))
                    for t in self.terms)
        return total + self.const_flops

    @torch.no_grad()
    def at_kept(self) -> float:
        """The cost of the deterministic subnet (D̃ = |{α > 0}|), for logs."""
        total = 0.
        for t in self.terms:
            total += float(getattr(t, self.mode)(*t.kept()))
        return total + self.const_flops

    def log_cost(self) -> Tensor:
        return torch.log(self.expected())
