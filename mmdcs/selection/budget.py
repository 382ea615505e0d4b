"""Budgets (method.md §11): a target FLOPs or parameter count, as a ratio of the baseline
network's, that the search and the export meet.

* :class:`LinearCost` — the exact count of a supernet's pruned networks as a function of the
  kept widths: ``count(D̃) = const + Σ_j coef_j · D̃_j``. Every layer whose size depends on a
  selected width has exactly one dimension equal to it, so the count is linear in every D̃_j; the
  constant and the coefficients are calibrated against ``mmengine.analysis`` counts of the whole
  model (:func:`mmdcs.analysis.complexity.calibrate_cost`), so the ratio to the baseline is what
  ``tools/analysis/complexity.py`` measures.
* :func:`select_to_budget` — the export to a budget: channels ranked globally by a score per
  unit of cost (the search's sigmoid(α), or a magnitude), kept greedily until the budget is met.
* :func:`magnitude_scores` — the magnitude pruner's score: the L2 norm of each selected channel's
  weights (an MLP channel's fc1 column and fc2 row).
* :func:`budget_subnet` — a :class:`SubnetSpec` at a budget from any of these scores.

Framework-free: plain PyTorch.
"""
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
import torch.nn as nn
from torch import Tensor

from .subnet import BlockSelection, SubnetSpec, _selection, hidden_selectors, prunable_modules

#: what a budget can count
RESOURCES = ('flops', 'params')


class BudgetError(ValueError):
    """A budget that cannot be met (or is not a ratio in (0, 1)): one line naming the target,
    the floor and the ceiling."""


@dataclass
class LinearCost:
    """The exact count of the pruned networks of a supernet: ``const + Σ_j coef[j]·D̃_j``.

    Args:
        resource: ``'flops'`` or ``'params'``.
        baseline: the count of the baseline network (no selection at all) of the same arch and
            input size: what a target ratio multiplies.
        const: the part that does not depend on any selected width (Linear_θ of DCS included).
        coef: prunable block name → count per kept channel.
        dims: prunable block name → D.
        input_size: (H, W) of the FLOPs.
        pair: block name → count per (kept channel, kept hidden unit) pair of its MLP, for the
            blocks searched with hidden-unit selection (``select_hidden``): the count is then
            bilinear, ``pair·D̃·H̃`` (E[D̃·H̃] = E[D̃]·E[H̃], independent gates).
        pair_hidden: block name → the path of its hidden selector (for ``pair``).
        hidden_coef: hidden selector path → count per kept hidden unit (its own weights).
        hidden_dims: hidden selector path → H.
    """
    resource: str
    baseline: float
    const: float
    coef: Dict[str, float]
    dims: Dict[str, int]
    input_size: Optional[tuple] = None
    meta: dict = field(default_factory=dict)
    pair: Dict[str, float] = field(default_factory=dict)
    pair_hidden: Dict[str, str] = field(default_factory=dict)
    hidden_coef: Dict[str, float] = field(default_factory=dict)
    hidden_dims: Dict[str, int] = field(default_factory=dict)

    def at(self, kept: Dict[str, float],
           hidden_kept: Optional[Dict[str, float]] = None) -> float:
        """The count with ``kept[name]`` channels in every block (and ``hidden_kept[path]``
        hidden units in every hidden-selected module; default: all)."""
        h = dict(self.hidden_dims, **(hidden_kept or {}))
        total = self.const + sum(self.coef[n] * float(kept[n]) for n in self.coef)
        total += sum(c * float(kept[n]) * float(h[self.pair_hidden[n]])
                     for n, c in self.pair.items())
        return total + sum(c * float(h[k]) for k, c in self.hidden_coef.items())

    def given_hidden(self, hidden_kept: Dict[str, float]) -> 'LinearCost':
        """The count as a function of the channels alone, the hidden widths fixed (the export
        to a budget keeps the searched hidden units and ranks the channels)."""
        h = dict(self.hidden_dims, **hidden_kept)
        coef = {n: c + self.pair.get(n, 0.) * float(h[self.pair_hidden[n]]) if n in self.pair
                else c for n, c in self.coef.items()}
        const = self.const + sum(c * float(h[k]) for k, c in self.hidden_coef.items())
        return LinearCost(self.resource, self.baseline, const, coef, dict(self.dims),
                          self.input_size, dict(self.meta, hidden_kept=dict(hidden_kept)))

    @property
    def ceiling(self) -> float:
        """Every channel kept (the supernet's deterministic network at full width)."""
        return self.at(self.dims)

    @property
    def floor(self) -> float:
        """One channel kept in every prunable block (and one hidden unit in every
        hidden-selected module)."""
        return self.at({n: 1 for n in self.dims}, {k: 1 for k in self.hidden_dims})

    def ratio(self, count: float) -> float:
        return count / self.baseline

    def check_target(self, ratio, name: str) -> float:
        """The absolute budget of a target ratio; :class:`BudgetError` unless
        floor < ratio < 1 (ratios of the baseline)."""
        floor = self.ratio(self.floor)
        given = ratio
        try:
            ratio = float(ratio)
        except (TypeError, ValueError):
            ratio = float('nan')
        if isinstance(given, bool) or math.isnan(ratio):
            what = 'is empty' if isinstance(given, str) and not given.strip() else \
                'is not a number'
            raise BudgetError(f'{name} = {given!r} {what}: a {self.resource} target is a ratio '
                              'of the baseline network\'s count (e.g. 0.7)')
        if not (floor < ratio < 1):
            raise BudgetError(
                f'{name} = {ratio:g} cannot be met: a {self.resource} target is a ratio of the '
                f'baseline network\'s {self.resource} ({human(self.baseline)}'
                f'{" at " + "x".join(map(str, self.input_size)) if self.input_size else ""}) '
                f'between the floor {floor:.4f} (one channel kept per prunable block) and the '
                f'ceiling 1 (the baseline; every channel kept: {self.ratio(self.ceiling):.4f})')
        return ratio * self.baseline

    def expected(self, selectors: Dict[str, nn.Module], expectation: str = 'gate',
                 hidden: Optional[Dict[str, nn.Module]] = None) -> Tensor:
        """The differentiable expected count, E[D̃_j] from each block's selector (and E[H̃_k]
        from each hidden selector in ``hidden``, path → selector)."""
        d = {n: selectors[n].expected_kept(expectation) for n in self.coef}
        h = {k: (hidden[k].expected_kept(expectation) if hidden and k in hidden
                 else float(self.hidden_dims[k])) for k in self.hidden_dims}
        total = None
        for n, c in self.coef.items():
            term = c * d[n]
            if n in self.pair:
                term = term + self.pair[n] * d[n] * h[self.pair_hidden[n]]
            total = term if total is None else total + term
        for k, c in self.hidden_coef.items():
            total = total + c * h[k]
        return total + self.const


def human(n: float) -> str:
    for unit, div in (('G', 1e9), ('M', 1e6), ('K', 1e3)):
        if abs(n) >= div:
            return f'{n / div:.3f}{unit}'
    return f'{n:.0f}'


def select_to_budget(scores: Dict[str, Tensor], cost: LinearCost, budget: float,
                     multiple_of: int = 1) -> Dict[str, List[int]]:
    """Kept channels of every block so that ``cost`` is as close to ``budget`` as the greedy
    allows, from below.

    Every block keeps its best ``multiple_of`` channels (one group; a block cannot be empty).
    The other channels, in groups of ``multiple_of`` taken in each block's score order, are
    ranked globally by their mean score per unit of cost and kept while the budget allows
    (a group that does not fit is skipped, the smaller ones after it may still fit). Every D̃ is
    a multiple of ``multiple_of`` (or D).

    Args:
        scores: block name → one score per channel (higher: keep first).
        cost: the exact count as a function of the kept widths.
        budget: the absolute budget (e.g. ``cost.check_target(0.7, ...)``).
        multiple_of: group size.
    """
    m = max(1, int(multiple_of))
    order = {n: torch.as_tensor(s, dtype=torch.float64).argsort(descending=True, stable=True)
             for n, s in scores.items()}
    kept = {n: min(m, cost.dims[n]) for n in cost.dims}
    total = cost.at(kept)
    groups = []  # (score per unit cost, name, size)
    for n, s in scores.items():
        s = torch.as_tensor(s, dtype=torch.float64)[order[n]]
        for start in range(kept[n], cost.dims[n], m):
            size = min(m, cost.dims[n] - start)
            per_unit = float(s[start:start + size].mean()) / max(cost.coef[n], 1e-12)
            groups.append((per_unit, n, start, size))
    # within a block the groups are in score order already; the global order keeps them so
    groups.sort(key=lambda g: (-g[0], g[1], g[2]))
    for _, n, start, size in groups:
        if kept[n] != start:  # an earlier group of this block was skipped: keep it contiguous
            continue
        extra = cost.coef[n] * size
        if total + extra <= budget:
            kept[n] += size
            total += extra
    return {n: sorted(order[n][:kept[n]].tolist()) for n in cost.dims}


def magnitude_scores(model: nn.Module) -> Dict[str, Tensor]:
    """Block name → L2 norm of each selected channel's weights (``channel_norms()`` of every
    prunable module: an MLP channel's fc1 column and fc2 row; EfficientViT's ``proj`` column),
    the magnitude pruner's score."""
    out = {}
    for name, m in prunable_modules(model).items():
        norms = getattr(m, 'channel_norms', None)
        if norms is None:
            raise BudgetError(f'magnitude pruning: {type(m).__name__} ({name}) has no '
                              'channel_norms(); it supports the MLPs of ViT, Swin and MobileViT '
                              'and the attention outputs of EfficientViT')
        out[name] = norms()
    return out


def alpha_scores(model: nn.Module) -> Dict[str, Tensor]:
    """Block name → sigmoid(α) (the searched probability that each channel is open)."""
    return {name: torch.sigmoid(m.select.alpha.detach().float())
            for name, m in prunable_modules(model).items()}


def budget_subnet(model: nn.Module, family: str, arch: str, variant: str,
                  scores: Dict[str, Tensor], cost: LinearCost, target: float,
                  multiple_of: int = 1, **meta) -> SubnetSpec:
    """The subnet of ``model`` (a supernet) at ``target`` (a ratio of the baseline's count),
    channels chosen by :func:`select_to_budget`; ``meta`` records the target and what was
    achieved (absolute and ratio)."""
    hidden = []
    full_cost = cost
    if cost.hidden_dims:
        # hidden-unit selection: the searched hidden units ({β > 0}, rounded up to multiple_of)
        # are kept as they are; the channels are ranked to meet the budget given them
        sels = hidden_selectors(model)
        hidden = [_selection(k, sels[k], max(1, int(multiple_of))) for k in cost.hidden_dims]
        cost = cost.given_hidden({b.name: b.kept for b in hidden})
    budget = cost.check_target(target, f'--target-{cost.resource}')
    keep = select_to_budget(scores, cost, budget, multiple_of)
    achieved = cost.at({n: len(k) for n, k in keep.items()})
    assert not hidden or abs(achieved - full_cost.at(
        {n: len(k) for n, k in keep.items()}, {b.name: b.kept for b in hidden})) < 1e-6 * max(
            1., achieved)
    blocks = [BlockSelection(n, cost.dims[n], keep[n]) for n in prunable_modules(model)]
    meta = dict(meta)
    if getattr(model, 'theta_rank', None) is not None and getattr(model, 'qk_select', None):
        meta.setdefault('theta_rank', int(model.theta_rank))  # the pruned network rebuilds it
    meta['budget'] = dict(resource=cost.resource, target_ratio=float(target),
                          target=float(budget), achieved=float(achieved),
                          achieved_ratio=cost.ratio(achieved), baseline=float(cost.baseline),
                          input_size=list(cost.input_size) if cost.input_size else None)
    if multiple_of > 1:
        meta.setdefault('multiple_of', int(multiple_of))
    return SubnetSpec(family, arch, variant, blocks, meta, hidden)
