"""The export's other pruners (method.md §11): baselines that a searched subnet is compared with
at the same budget (``tools/analysis/compare_methods.py``).

* ``'uniform'`` — :func:`uniform_widths`: the same kept ratio in every block (and every
  hidden-selected module), widths rounded, the largest ratio whose exact count meets the budget;
  inside a block the channels of largest score (e.g. weight norm) are kept.
* ``'random'`` — :func:`random_scores`: seeded random channels at given widths (e.g. the
  searched widths of another subnet, :func:`widths_of`), or at the uniform widths.
* ``'taylor'`` — :func:`taylor_scores`: first-order Taylor importance, ``Σ |w·∂L/∂w|`` over the
  weights of each channel / hidden unit (the same weights as its magnitude score: an MLP
  channel's fc1 column and fc2 row), the gradients accumulated over a few batches
  (Torch-Pruning's ``TaylorImportance``); normalised per block like the magnitude score.

:func:`widths_subnet` turns widths and scores into a :class:`SubnetSpec` with the budget's
record, as :func:`~mmdcs.selection.budget.budget_subnet` does for a joint ranking.

Framework-free: plain PyTorch.
"""
import math
from contextlib import contextmanager
from typing import Callable, Dict, Iterable, List, Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from .budget import BudgetError, LinearCost, budget_subnet, human
from .subnet import (BlockSelection, SubnetSpec, hidden_prunable_modules, hidden_selectors,
                     prunable_modules)

#: the pruners of this module (the export's ``--method``)
WIDTH_METHODS = ('uniform', 'random', 'taylor')


def _rounded(ratio: float, dim: int, multiple_of: int) -> int:
    """``ratio·dim`` rounded to the nearest multiple of ``multiple_of``, within [one group,
    dim]."""
    m = max(1, int(multiple_of))
    w = int(round(ratio * dim / m)) * m
    return max(min(m, dim), min(dim, w))


def uniform_widths(cost: LinearCost, budget: float, multiple_of: int = 1,
                   steps: int = 60) -> Tuple[Dict[str, int], Dict[str, int], float]:
    """(kept channels per block, kept hidden units per hidden-selected module, ratio): the
    largest ratio r (bisection on [0, 1]) whose widths ``round(r·D)`` (multiples of
    ``multiple_of``, at least one group) give ``cost`` at most ``budget``.

    :class:`BudgetError` when even one group per unit exceeds the budget."""
    def widths(r):
        return ({n: _rounded(r, d, multiple_of) for n, d in cost.dims.items()},
                {k: _rounded(r, h, multiple_of) for k, h in cost.hidden_dims.items()})

    lo, hi = 0., 1.
    if cost.at(*widths(lo)) > budget:
        raise BudgetError(f'uniform widths: one group per block exceeds the budget '
                          f'{human(budget)} ({cost.resource})')
    if cost.at(*widths(hi)) <= budget:
        return (*widths(hi), 1.)
    for _ in range(steps):
        mid = (lo + hi) / 2
        if cost.at(*widths(mid)) <= budget:
            lo = mid
        else:
            hi = mid
    return (*widths(lo), lo)


def widths_of(spec: dict) -> Tuple[Dict[str, int], Dict[str, int]]:
    """(kept channels per block, kept hidden units per module) of a subnet (its dict, as in
    subnet.json)."""
    return ({b['name']: int(b['kept']) for b in spec.get('blocks', [])},
            {b['name']: int(b['kept']) for b in spec.get('hidden', [])})


def random_scores(dims: Dict[str, int], seed: int) -> Dict[str, Tensor]:
    """Unit name → a seeded random permutation as scores (the random pruner: which channels
    are kept is chance; the widths come from elsewhere)."""
    g = torch.Generator().manual_seed(int(seed))
    return {n: torch.randperm(int(d), generator=g).double() for n, d in sorted(dims.items())}


@contextmanager
def _weights_replaced(module: nn.Module, values: Dict[str, Tensor]):
    """Temporarily give the parameters of ``module`` (by name) other values."""
    params = dict(module.named_parameters())
    saved = {n: params[n].data for n in values}
    try:
        for n, v in values.items():
            params[n].data = v.to(params[n].dtype)
        yield module
    finally:
        for n, v in saved.items():
            params[n].data = v


def _taylor(module: nn.Module, norms: Callable[[nn.Module], Tensor]) -> Tensor:
    """Σ |w·∂L/∂w| over the weights of each channel that ``norms`` (a sum-of-squares norm over
    the channel's weights, e.g. ``channel_norms``) groups: the norm of √|w·g| squared."""
    values = {n: (p.detach() * p.grad.detach()).abs().sqrt()
              for n, p in module.named_parameters() if p.grad is not None}
    with _weights_replaced(module, values):
        out = norms(module).double().pow(2)
    return out


def taylor_scores(model: nn.Module, batches: Iterable, loss_fn: Callable[[object], Tensor],
                  params: Optional[Iterable[nn.Parameter]] = None
                  ) -> Tuple[Dict[str, Tensor], Dict[str, Tensor]]:
    """(block name → score per channel, hidden-selected module path → score per hidden unit):
    first-order Taylor importance ``Σ |w·∂L/∂w|`` over the weights of each channel (the weights
    its magnitude score groups: ``channel_norms()`` / ``hidden_norms()``), with ∂L/∂w the
    gradient of ``loss_fn(batch)`` accumulated over ``batches`` (Torch-Pruning's
    TaylorImportance). ``model`` is the module whose prunable modules are scored (a backbone);
    ``loss_fn`` may run a larger model around it. The gradients of ``params`` (default: the
    model's) are zeroed before and after; the model's train/eval mode is left as it is (call
    ``eval()`` first for deterministic gates and no dropout)."""
    params = list(model.parameters() if params is None else params)
    for p in params:
        p.grad = None
    n = 0
    with torch.enable_grad():
        for batch in batches:
            loss = loss_fn(batch)
            loss.backward()
            n += 1
    if n == 0:
        raise ValueError('taylor_scores needs at least one batch')
    channels, hidden = {}, {}
    for name, m in prunable_modules(model).items():
        if getattr(m, 'channel_norms', None) is None:
            raise BudgetError(f'Taylor pruning: {type(m).__name__} ({name}) has no '
                              'channel_norms()')
        channels[name] = _taylor(m, lambda mod: mod.channel_norms())
    modules = hidden_prunable_modules(model)
    for name in hidden_selectors(model):
        if getattr(modules[name], 'hidden_norms', None) is None:
            raise BudgetError(f'Taylor pruning: {type(modules[name]).__name__} ({name}) has '
                              'no hidden_norms()')
        hidden[name] = _taylor(modules[name], lambda mod: mod.hidden_norms())
    for p in params:
        p.grad = None
    return channels, hidden


def _top(scores: Optional[Tensor], dim: int, width: int) -> List[int]:
    """The ``width`` indices of largest score (ties: the lower index), sorted; the first
    ``width`` without scores."""
    if scores is None:
        return list(range(width))
    s = torch.as_tensor(scores, dtype=torch.float64).flatten()
    if s.numel() != dim:
        raise ValueError(f'{s.numel()} scores for a width of {dim}')
    return sorted(s.argsort(descending=True, stable=True)[:width].tolist())


def widths_subnet(model: nn.Module, family: str, arch: str, variant: str, cost: LinearCost,
                  target: float, kept: Dict[str, int],
                  hidden_kept: Optional[Dict[str, int]] = None,
                  scores: Optional[Dict[str, Tensor]] = None,
                  hidden_scores: Optional[Dict[str, Tensor]] = None, method: str = 'uniform',
                  multiple_of: int = 1, **meta) -> SubnetSpec:
    """The subnet of ``model`` (a supernet) with ``kept[block]`` channels in every block (and
    ``hidden_kept[module]`` hidden units; default: all), the channels of largest score kept
    (default: the first ones). :class:`BudgetError` (one line) when the widths do not fit the
    model or their count is not within ±1 % of the baseline below ``target`` (a ratio of the
    baseline's count); ``meta['budget']`` records target and achieved like
    :func:`~mmdcs.selection.budget.budget_subnet`."""
    name = f'--target-{cost.resource}'
    budget = cost.check_target(target, name, multiple_of)
    hidden_kept = dict(hidden_kept or {})
    if set(kept) != set(cost.dims) or not set(hidden_kept) <= set(cost.hidden_dims):
        raise BudgetError(f'{method}: the widths name blocks {sorted(kept)[:3]}... and modules '
                          f'{sorted(hidden_kept)[:3]}...; the model has {sorted(cost.dims)[:3]}'
                          f'... and {sorted(cost.hidden_dims)[:3]}...')
    for n, w in list(kept.items()) + list(hidden_kept.items()):
        dim = cost.dims.get(n, cost.hidden_dims.get(n))
        if not 1 <= int(w) <= dim:
            raise BudgetError(f'{method}: {n} keeps {w} of {dim}')
    full_hidden = dict(cost.hidden_dims, **hidden_kept)
    achieved = cost.at(kept, full_hidden)
    if achieved > budget * (1 + 1e-9) or budget - achieved > 0.01 * cost.baseline:
        raise BudgetError(f'{method}: the widths count {cost.ratio(achieved):.4f} of the '
                          f'baseline {cost.resource}, not within ±1 % below {name} = '
                          f'{float(target):g}')
    scores, hidden_scores = scores or {}, hidden_scores or {}
    blocks = [BlockSelection(n, cost.dims[n], _top(scores.get(n), cost.dims[n], int(kept[n])))
              for n in prunable_modules(model)]
    hidden = [BlockSelection(k, cost.hidden_dims[k],
                             _top(hidden_scores.get(k), cost.hidden_dims[k], int(full_hidden[k])))
              for k in cost.hidden_dims if k in hidden_kept]
    meta = dict(meta)
    if getattr(model, 'theta_rank', None) is not None and getattr(model, 'qk_select', None):
        meta.setdefault('theta_rank', int(model.theta_rank))
    meta['budget'] = dict(resource=cost.resource, target_ratio=float(target),
                          target=float(budget), achieved=float(achieved),
                          achieved_ratio=cost.ratio(achieved), baseline=float(cost.baseline),
                          input_size=list(cost.input_size) if cost.input_size else None,
                          ranked=f'{method}: widths given, channels by score within a block')
    meta['method'] = method
    if multiple_of > 1:
        meta.setdefault('multiple_of', int(multiple_of))
    return SubnetSpec(family, arch, variant, blocks, meta, hidden)


def method_subnet(method: str, model: nn.Module, family: str, arch: str, variant: str,
                  cost: LinearCost, target: float, multiple_of: int = 1,
                  magnitude: Optional[Dict[str, Tensor]] = None,
                  hidden_magnitude: Optional[Dict[str, Tensor]] = None,
                  taylor: Optional[Tuple[Dict[str, Tensor], Dict[str, Tensor]]] = None,
                  widths: Optional[Tuple[Dict[str, int], Dict[str, int]]] = None,
                  seed: int = 0, **meta) -> SubnetSpec:
    """The subnet of one of :data:`WIDTH_METHODS` at ``target``:

    * ``'uniform'``: :func:`uniform_widths`, the channels of largest ``magnitude`` (weight norm)
      kept in each block (the first ones without);
    * ``'random'``: ``widths`` (e.g. :func:`widths_of` another subnet; default the uniform
      widths), the channels drawn by :func:`random_scores` with ``seed``;
    * ``'taylor'``: the ``taylor`` scores (:func:`taylor_scores`) ranked jointly per unit of
      cost, each block's relative to its mean (the magnitude pruner's greedy).
    """
    if method not in WIDTH_METHODS:
        raise ValueError(f'method must be one of {WIDTH_METHODS}, got {method!r}')
    meta.pop('method', None)
    if method == 'taylor':
        if taylor is None:
            raise ValueError("method 'taylor' needs the taylor scores")
        channels, hidden = taylor
        return budget_subnet(model, family, arch, variant, channels, cost, target, multiple_of,
                             hidden_scores=hidden, normalize='mean', method='taylor', **meta)
    budget = cost.check_target(target, f'--target-{cost.resource}', multiple_of)
    ratio = None
    if method == 'random' and widths is not None:
        kept, hidden_kept = widths
    else:
        kept, hidden_kept, ratio = uniform_widths(cost, budget, multiple_of)
    if method == 'random':
        scores = random_scores(cost.dims, seed)
        hidden_scores = random_scores(cost.hidden_dims, seed + 1)
        meta = dict(meta, seed=int(seed))
    else:
        scores, hidden_scores = magnitude, hidden_magnitude
    spec = widths_subnet(model, family, arch, variant, cost, target, kept, hidden_kept, scores,
                         hidden_scores, method, multiple_of, **meta)
    if ratio is not None and not math.isnan(ratio):
        spec.meta['budget']['uniform_ratio'] = float(ratio)
    return spec
