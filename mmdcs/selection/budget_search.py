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

The cost is any object with the interface of :class:`BudgetCost` (``mmdcs.selection.budget.
LinearCost`` today: exact FLOPs or parameters; a latency table can be another implementation):
the ranking only asks for the count at given widths (and uses the linear/bilinear structure of a
``LinearCost`` for speed when it is one).

Framework-free: plain PyTorch.
"""
import math
from typing import Dict, Optional, Protocol, Tuple

import torch
from torch import Tensor


class BudgetCost(Protocol):
    """What the search and its projection need of a budget's cost model."""
    #: the baseline network's count (what a target ratio multiplies)
    baseline: float
    #: block name → D (channels); hidden selector path → H (hidden units)
    dims: Dict[str, int]
    hidden_dims: Dict[str, int]

    def at(self, kept: Dict[str, float],
           hidden_kept: Optional[Dict[str, float]] = None) -> float:
        """The count of the network with these widths."""

    def expected(self, selectors, expectation: str = 'gate', hidden=None) -> Tensor:
        """The differentiable expected count of the stochastic supernet."""


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


def _marginal(cost, kind: str, name: str, kept: Dict[str, int], hidden: Dict[str, int],
              users: Dict[str, list]) -> float:
    """What removing one unit (a channel of block ``name``, or a hidden unit of module
    ``name``) saves at the widths ``kept`` / ``hidden``."""
    if hasattr(cost, 'coef') and hasattr(cost, 'pair'):  # LinearCost: closed form
        if kind == 'channel':
            saving = cost.coef[name]
            if name in cost.pair:
                saving += cost.pair[name] * hidden[cost.pair_hidden[name]]
            return float(saving)
        saving = cost.hidden_coef.get(name, 0.)
        return float(saving + sum(cost.pair[n] * kept[n] for n in users.get(name, ())))
    before = cost.at(kept, hidden)
    if kind == 'channel':
        after = cost.at(dict(kept, **{name: kept[name] - 1}), hidden)
    else:
        after = cost.at(kept, dict(hidden, **{name: hidden[name] - 1}))
    return float(before - after)


def rank_to_budget(cost, scores: Dict[str, Tensor], budget: float,
                   hidden_scores: Optional[Dict[str, Tensor]] = None
                   ) -> Tuple[Dict[str, Tensor], Dict[str, Tensor], float]:
    """The kept channels (and hidden units) that meet ``budget`` from below, ranked jointly.

    Starting from every unit kept, the unit with the lowest score per unit of marginal cost
    (score / what removing it saves, at the current widths: with hidden selection a channel
    saves ``coef + pair·H̃`` and a hidden unit ``hidden_coef + pair·D̃``, so the two kinds trade
    against each other as the widths shrink) is dropped, one at a time, until the count is at
    most ``budget``; every block keeps at least one channel and every hidden-selected module one
    hidden unit. The last unit dropped may have saved more than needed: the dropped units that
    still fit are then taken back, best score per unit of cost first, so the count ends below
    the budget by less than the cost of any unit that could be taken back. Within a block the
    units go in score order (lowest first); ties go by name, then index, so the result is
    deterministic (identical on every DDP rank).

    Args:
        cost: a :class:`BudgetCost` (e.g. ``LinearCost``).
        scores: block name → a positive score per channel (higher: keep first), e.g. σ(α).
        budget: the absolute budget.
        hidden_scores: hidden selector path → a score per hidden unit (``select_hidden``).

    Returns:
        (block name → kept channel indices, path → kept hidden indices, the count).
    """
    hidden_scores = hidden_scores or {}
    orders, kept, hidden = {}, {}, {}
    for kind, table, widths in (('channel', scores, kept), ('hidden', hidden_scores, hidden)):
        for name, s in table.items():
            s = torch.as_tensor(s, dtype=torch.float64).flatten()
            order = s.argsort(stable=True)  # ascending: the first is dropped first
            orders[kind, name] = (order, s[order])
            widths[name] = int(s.numel())
    # fixed hidden widths of modules without a hidden selector
    full_hidden = dict(getattr(cost, 'hidden_dims', {}) or {})
    full_hidden.update(hidden)
    users: Dict[str, list] = {}
    for n, k in (getattr(cost, 'pair_hidden', {}) or {}).items():
        users.setdefault(k, []).append(n)
    count = cost.at(kept, full_hidden)
    dropped = {key: 0 for key in orders}
    while count > budget:
        best = None
        for (kind, name), (_, sorted_scores) in orders.items():
            widths = kept if kind == 'channel' else full_hidden
            if widths[name] <= 1:
                continue
            saving = _marginal(cost, kind, name, kept, full_hidden, users)
            if saving <= 0:
                continue
            value = float(sorted_scores[dropped[kind, name]]) / saving
            key = (value, kind, name)
            if best is None or key < best[0]:
                best = (key, kind, name, saving)
        if best is None:  # nothing left to drop: the floor is above the budget
            break
        _, kind, name, saving = best
        dropped[kind, name] += 1
        (kept if kind == 'channel' else full_hidden)[name] -= 1
        count = cost.at(kept, full_hidden) if not hasattr(cost, 'coef') else count - saving
    # the last unit dropped may have saved more than needed: take back, best score per unit of
    # cost first, the dropped units that still fit (each block's best dropped one at a time)
    while True:
        best = None
        for (kind, name), (_, sorted_scores) in orders.items():
            if dropped[kind, name] == 0:
                continue
            widths = dict(kept) if kind == 'channel' else dict(full_hidden)
            widths[name] += 1
            extra = _marginal(cost, kind, name, *((widths, full_hidden) if kind == 'channel'
                                                  else (kept, widths)), users)
            if count + extra > budget:
                continue
            key = (-float(sorted_scores[dropped[kind, name] - 1]) / max(extra, 1e-300), kind,
                   name)
            if best is None or key < best[0]:
                best = (key, kind, name, extra)
        if best is None:
            break
        _, kind, name, extra = best
        dropped[kind, name] -= 1
        (kept if kind == 'channel' else full_hidden)[name] += 1
        count = cost.at(kept, full_hidden) if not hasattr(cost, 'coef') else count + extra
    count = float(cost.at(kept, full_hidden))
    keep_c = {n: orders['channel', n][0][dropped['channel', n]:].sort().values for n in scores}
    keep_h = {n: orders['hidden', n][0][dropped['hidden', n]:].sort().values
              for n in hidden_scores}
    return keep_c, keep_h, count


@torch.no_grad()
def project_to_budget(cost, selectors: Dict[str, torch.nn.Module], budget: float,
                      hidden_selectors: Optional[Dict[str, torch.nn.Module]] = None,
                      margin: float = 1e-3) -> dict:
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

    Returns:
        dict(before=the count of {α > 0} before, after=the count after, flipped=number of α
        moved, kept=block → D̃, hidden_kept=path → H̃).
    """
    hidden_selectors = hidden_selectors or {}
    if not margin > 0 or not math.isfinite(margin):
        raise ValueError(f'margin must be a positive number, got {margin}')

    def deployed():
        h = dict(getattr(cost, 'hidden_dims', {}) or {})
        h.update({k: int((s.alpha > 0).sum()) for k, s in hidden_selectors.items()})
        return float(cost.at({n: int((s.alpha > 0).sum()) for n, s in selectors.items()}, h))

    before = deployed()
    keep_c, keep_h, _ = rank_to_budget(
        cost, {n: torch.sigmoid(s.alpha.double()) for n, s in selectors.items()}, budget,
        {k: torch.sigmoid(s.alpha.double()) for k, s in hidden_selectors.items()})
    flipped = 0
    for table, keep in ((selectors, keep_c), (hidden_selectors, keep_h)):
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
                hidden_kept={k: int((s.alpha > 0).sum()) for k, s in hidden_selectors.items()})
