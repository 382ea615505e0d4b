"""Differentiable cost of a supernet (METHOD §3): the search loss adds λ·log cost(α).

Every prunable block j contributes through its expected kept width E[D̃_j]. A hard binary Gumbel
gate is open with probability exactly sigmoid(α) at any temperature, so by default
E[D̃_j] = Σ_i sigmoid(α_i) (``expectation='gate'``); the papers' Σ_i sigmoid(α_i / τ)
(``expectation='paper'``) under-counts the open gates while τ > 1 and is kept only to reproduce
the papers. Linear_θ of DCS (the per-token Q/K mask, which stays in the deployed network) is a
constant of the cost (``const``): its size does not depend on α, and it gets no gradient from the
cost. Two ways to count:

* ``'paper'`` — the papers' formulas (seed 000 3.4, A.1; seed 001 3.3):
    - an MLP of l layers on D̃ channels: l·(2D̃² + D̃)   (DCS-MobileViT l=2, DCS-EfficientViT and
      KCR l = number of MLP layers)
    - a following convolution that reads the D̃ channels: (1 + D̃)·H·W·C
* ``'flops'`` — exact multiply-accumulates (the convention of ``mmengine.analysis``) of every layer
  whose shape depends on D̃. Each such layer has exactly one dimension equal to D̃, so its count
  is ``coef·D̃``: an MLP over N tokens with hidden width H costs ``2·N·H·D̃``, a 1×1 convolution to
  C channels on H×W costs ``H·W·C·D̃``. Plus ``const``, the FLOPs of the rest of the network, so
  that the cost is the whole network's FLOPs.

A backbone describes its blocks with :class:`CostTerm`; :class:`CostModel` sums them.
"""
from dataclasses import dataclass
from typing import List, Sequence

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
        selector: the block's channel selector (α).
        mlp_layers: l in the paper's l·(2D̃² + D̃); 0 if the paper charges no MLP here.
        conv_hwc: H·W·C of a convolution after the block that reads the D̃ channels, in the
            paper's (1 + D̃)·H·W·C; 0 if none.
        flops_per_channel: exact FLOPs per kept channel (the ``'flops'`` mode).
        params_per_channel: exact parameters per kept channel (the weights that read or write
            it), for a parameter budget.
    """
    selector: ChannelSelector
    mlp_layers: int = 0
    conv_hwc: float = 0.
    flops_per_channel: float = 0.
    params_per_channel: float = 0.

    def paper(self, d: Tensor) -> Tensor:
        cost = self.mlp_layers * (2 * d * d + d)
        if self.conv_hwc:
            cost = cost + (1 + d) * self.conv_hwc
        return cost

    def flops(self, d: Tensor) -> Tensor:
        return self.flops_per_channel * d


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
        total = sum(getattr(t, self.mode)(t.selector.expected_kept(self.expectation))
                    for t in self.terms)
        return total + self.const_flops

    @torch.no_grad()
    def at_kept(self) -> float:
        """The cost of the deterministic subnet (D̃ = |{α > 0}|), for logs."""
        total = 0.
        for t in self.terms:
            d = torch.tensor(float(t.selector.keep_indices().numel()))
            total += float(getattr(t, self.mode)(d))
        return total + self.const_flops

    def log_cost(self) -> Tensor:
        return torch.log(self.expected())
