"""A budget in the search (method.md §11, docs/budgets.md): the scheduled target and the
projection that ends the search on the budget.

The search with ``cost.target`` constrains the *expected* count of the stochastic supernet
(E[D̃] = Σ σ(α)) by a Lagrange multiplier; two pieces of maths live here:

* :func:`scheduled_ratio` — the target seen at a point of the search: from the supernet's start
  (every channel kept) down to the target over the first ``ramp`` of the search (as HALP and
  OFB do), then the target;
* :func:`rank_to_budget` / :func:`project_to_budget` — the end of the search: the channels (and
  hidden units, with ``select_hidden``) are ranked *jointly* by score per unit of marginal cost
  and the least valuable are dropped until the count meets the budget; α is then moved (only
  the α whose side of 0 changes, to ±``margin``) so that the deployed set {α > 0} is exactly the
  ranked one. The deployed network is then within one unit's cost below the budget, whatever the
  search's dynamics did, and whatever its length.

The cost is any :class:`~mmdcs.selection.budget.ResourceCost` (``LinearCost``: exact FLOPs or
parameters; ``LatencyCost``: a latency table): the ranking asks for the count at given widths
and the marginal cost of a unit (an object with ``at()`` alone is served by finite
differences).

Framework-free: plain PyTorch.
"""
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from mmdcs.checks import check_number

from .budget import (CHANNELS, HEADS, HIDDEN, ResourceCost, prior_count, select_nested,
                     select_units_to_budget)


#: what the search and its projection need of a budget's cost model: the one interface of
#: :class:`~mmdcs.selection.budget.ResourceCost` (kept under its former name)
BudgetCost = ResourceCost


def scheduled_ratio(target: float, start: float, progress: Optional[float],
                    ramp: float) -> float:
    """The target ratio at ``progress`` ∈ [0, 1] of the search: linear from ``start`` (the
    supernet's ratio with every channel kept) to ``target`` over the first ``ramp`` of the
    search, then ``target``; ``progress`` None (outside a search loop) or ``ramp`` 0: the
    target."""
    if progress is None or ramp <= 0:
        return float(target)
    frac = min(1., max(0., float(progress)) / ramp)
    return float(start) + (float(target) - float(start)) * frac


def _unit_cost(cost):
    """(unit dims, count(widths), marginal(unit, widths)) of a budget's cost over the units
    ``(CHANNELS, block)`` and ``(HIDDEN, path)``: the closed forms of a ``LinearCost``; for any
    other :class:`BudgetCost` (only ``at()``), from ``at()`` (a marginal is the count of one
    element less)."""
    if all(hasattr(cost, a) for a in ('unit_dims', 'count', 'marginal')):
        return cost.unit_dims(), cost.count, cost.marginal
    dims = {(CHANNELS, n): int(d) for n, d in cost.dims.items()}
    dims.update(((HIDDEN, k), int(h)) for k, h in cost.hidden_dims.items())

    def count(widths):
        kept = {n: widths.get((CHANNELS, n), d) for (kind, n), d in dims.items()
                if kind == CHANNELS}
        hidden = {n: widths.get((HIDDEN, n), d) for (kind, n), d in dims.items()
                  if kind == HIDDEN}
        return float(cost.at(kept, hidden))

    def marginal(unit, widths):
        w = dict(dims)
        w.update(widths)
        less = dict(w)
        less[unit] = w[unit] - 1
        return count(w) - count(less)

    return dims, count, marginal


def rank_to_budget(cost, scores: Dict[str, Tensor], budget: float,
                   hidden_scores: Optional[Dict[str, Tensor]] = None,
                   head_scores: Optional[Dict[str, Tensor]] = None,
                   nested: Optional[Dict[str, Tensor]] = None, prior: Optional[str] = 'cost'
                   ) -> Tuple[Dict[str, Tensor], Dict[str, Tensor], float]:
    """The kept channels (and hidden units) that meet ``budget`` from below, ranked jointly:
    the export's greedy (:func:`~mmdcs.selection.budget.select_units_to_budget`, one element
    at a time) on any :class:`BudgetCost`.

    Starting from every unit kept, the element with the lowest score per unit of marginal cost
    (score / what removing it saves, at the current widths: with hidden selection a channel
    saves ``coef + pair·H̃`` and a hidden unit ``hidden_coef + pair·D̃``, so the two kinds trade
    against each other as the widths shrink) is dropped until the count is at most ``budget``;
    every block keeps at least one channel and every hidden-selected module one hidden unit
    (near the budget, a removal that would end more than 0.1 % of the baseline below it gives
    way to a finer one); the dropped elements that still fit are then taken back, best score
    per unit of cost first.
    Ties go by the units' order, then index, so the result is deterministic (identical on every
    DDP rank).

    Args:
        cost: a :class:`BudgetCost` (e.g. ``LinearCost``).
        scores: block name → a positive score per channel (higher: keep first), e.g. σ(α).
        budget: the absolute budget.
        hidden_scores: hidden selector path → a score per hidden unit (``select_hidden``).
        head_scores: attention path → a score per head (``select_heads``; a ``LinearCost``
            with ``head_dims``); the kept heads are returned in ``head_scores``' place
            (see :func:`project_to_budget`) as ``keep_c[(HEADS, path)]``.
        nested: path → owning head of each channel, for the modules whose channels lie inside
            their heads (:func:`~mmdcs.selection.budget.nested_channels`, EfficientViT): the
            heads are ranked with their channels first (:func:`~mmdcs.selection.budget.
            select_nested`), so no kept channel belongs to a pruned head.
        prior: how the units are weighed against each other (``'cost'``: each unit's scores
            by its average cost per element; None; or an exact cost over the same units, e.g.
            the FLOPs of a latency budget's: :func:`~mmdcs.selection.budget.build_prior`).

    Returns:
        (block name → kept channel indices, path → kept hidden indices, the count).
    """
    if nested and head_scores:
        keep, hidden_keep, head_keep = select_nested(
            nested, scores, hidden_scores or {}, head_scores, cost, budget, 1, None, prior)
        keep_c = {n: torch.as_tensor(keep[n], dtype=torch.long) for n in scores}
        keep_h = {k: torch.as_tensor(hidden_keep[k], dtype=torch.long)
                  for k in (hidden_scores or {})}
        keep_c.update(((HEADS, k), torch.as_tensor(head_keep[k], dtype=torch.long))
                      for k in head_scores)
        return keep_c, keep_h, float(cost.at(
            {n: len(k) for n, k in keep.items()}, {k: len(v) for k, v in hidden_keep.items()},
            {k: len(v) for k, v in head_keep.items()}))
    dims, count, marginal = _unit_cost(cost)
    units = {(CHANNELS, n): torch.as_tensor(s, dtype=torch.float64).flatten()
             for n, s in scores.items()}
    units.update(((HIDDEN, k), torch.as_tensor(s, dtype=torch.float64).flatten())
                 for k, s in (hidden_scores or {}).items())
    units.update(((HEADS, k), torch.as_tensor(s, dtype=torch.float64).flatten())
                 for k, s in (head_scores or {}).items())
    # as the export: a last removal may end up to 0.1 % of the baseline below the budget before
    # the greedy looks for a finer one
    keep = select_units_to_budget(units, dims, count, marginal, budget,
                                  tolerance=1e-3 * abs(float(cost.baseline)),
                                  prior=prior_count(prior))
    widths = {u: len(k) for u, k in keep.items()}
    keep_c = {n: torch.as_tensor(keep[(CHANNELS, n)], dtype=torch.long) for n in scores}
    keep_h = {k: torch.as_tensor(keep[(HIDDEN, k)], dtype=torch.long)
              for k in (hidden_scores or {})}
    keep_c.update(((HEADS, k), torch.as_tensor(keep[(HEADS, k)], dtype=torch.long))
                  for k in (head_scores or {}))
    return keep_c, keep_h, float(count(widths))


@torch.no_grad()
def project_to_budget(cost, selectors: Dict[str, torch.nn.Module], budget: float,
                      hidden_selectors: Optional[Dict[str, torch.nn.Module]] = None,
                      margin: float = 1e-3,
                      head_selectors: Optional[Dict[str, torch.nn.Module]] = None,
                      nested: Optional[Dict[str, torch.Tensor]] = None,
                      prior='cost') -> dict:
    """End a search on the budget: rank by σ(α) (:func:`rank_to_budget`) and move α so that
    the deployed set {α > 0} is the ranked one. Only the α whose side of 0 changes move: a kept
    one to ``max(α, margin)``, a dropped one to ``min(α, -margin)``; the order of the α within
    a selector is kept, so a later export by σ(α) ranks them as here.

    Args:
        cost: the budget's cost model.
        selectors: block name → channel selector (``.alpha``).
        budget: the absolute budget.
        hidden_selectors: hidden selector path → selector (``select_hidden``).
        margin: how far past 0 a moved α is put.
        head_selectors: attention path → head selector (``select_heads``): the heads are
            ranked with the channels and hidden units, by σ(α) per unit of marginal cost.
        nested: channels inside heads (:func:`rank_to_budget`).
        prior: how the units are weighed (:func:`rank_to_budget`; the export's:
            :func:`~mmdcs.selection.budget.build_prior`).

    Returns:
        dict(before=the count of {α > 0} before, after=the count after, flipped=number of α
        moved, kept=block → D̃, hidden_kept=path → H̃).
    """
    hidden_selectors = hidden_selectors or {}
    head_selectors = head_selectors or {}
    check_number(margin, 'margin', 0, low_open=True)

    def deployed():
        h = dict(cost.hidden_dims)
        h.update({k: int((s.alpha > 0).sum()) for k, s in hidden_selectors.items()})
        kept = {n: int((s.alpha > 0).sum()) for n, s in selectors.items()}
        if head_selectors:
            # the deployed heads: {α > 0}, at least the one of largest α
            heads = {k: max(1, int((s.alpha > 0).sum())) for k, s in head_selectors.items()}
            return float(cost.at(kept, h, heads))
        return float(cost.at(kept, h))

    before = deployed()
    keep_c, keep_h, _ = rank_to_budget(
        cost, {n: torch.sigmoid(s.alpha.double()) for n, s in selectors.items()}, budget,
        {k: torch.sigmoid(s.alpha.double()) for k, s in hidden_selectors.items()},
        {k: torch.sigmoid(s.alpha.double()) for k, s in head_selectors.items()}, nested, prior)
    keep_a = {k: keep_c.pop((HEADS, k)) for k in head_selectors}
    flipped = 0
    for table, keep in ((selectors, keep_c), (hidden_selectors, keep_h),
                        (head_selectors, keep_a)):
        for name, sel in table.items():
            alpha = sel.alpha
            mask = torch.zeros(alpha.numel(), dtype=torch.bool, device=alpha.device)
            mask[keep[name].to(alpha.device)] = True
            mask = mask.view_as(alpha)
            new = torch.where(mask, alpha.clamp(min=margin), alpha.clamp(max=-margin))
            flipped += int(((new > 0) != (alpha > 0)).sum())
            alpha.copy_(new)
    return dict(before=before, after=deployed(), flipped=flipped,
                kept={n: int((s.alpha > 0).sum()) for n, s in selectors.items()},
                hidden_kept={k: int((s.alpha > 0).sum()) for k, s in hidden_selectors.items()},
                heads_kept={k: int((s.alpha > 0).sum()) for k, s in head_selectors.items()})
