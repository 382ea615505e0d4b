"""Ranking methods of the export to a budget (method.md §11, docs/budgets.md): a small registry
of *scorers*, each a name → a function giving every prunable channel and hidden unit a score.

A scorer is ``fn(backbone, **ctx) -> (channel_scores, hidden_scores)``:

* ``backbone`` — the supernet backbone (channel selectors on every prunable block, hidden
  selectors with ``select_hidden``), holding the checkpoint's weights;
* ``ctx`` — keyword context: always ``model`` (the whole model, e.g. the classifier, for
  scorers that run a forward pass); ``batches`` (an iterable of data batches, or a callable
  returning one) for a scorer registered with ``needs_data=True``; ignore what you do not use
  (take ``**ctx``);
* returns ``channel_scores``: block name (:func:`~mmdcs.selection.prunable_modules`) → one
  score per channel, higher is kept first; ``hidden_scores``: hidden selector path
  (:func:`~mmdcs.selection.hidden_selectors`) → one score per hidden unit (``{}`` when the
  backbone has no hidden selection).

Registration records how the export treats the scores:

* ``normalize`` — :func:`~mmdcs.selection.budget.normalize_scores` before the joint ranking
  (``'mean'``: each block's / module's scores relative to their mean, for scores on
  different scales such as weight norms; ``None`` for probabilities);
* ``baseline`` — the scorer reads a plain *baseline* checkpoint (the export turns the config's
  backbone into the MLP-channel-selection supernet ``dcs-arch2`` with its α unset, loads the
  baseline's weights into it and needs a budget); ``False``: a searched supernet checkpoint;
* ``needs_data`` — the export passes ``batches`` (e.g. a Taylor scorer's gradients).

* ``widths`` — a scorer that fixes the kept widths itself (``widths(cost, budget, multiple_of,
  **ctx) -> (kept channels per block, kept hidden units per module)``); its scores then only
  order the channels inside each block (:func:`widths_subnet`) instead of being ranked jointly.

Registered: ``'alpha'`` (σ(α), σ(β): the search's probabilities), ``'magnitude'`` (L2 norms of
each channel's and hidden unit's weights, the standard criterion), ``'taylor'`` (first-order
Taylor importance ``Σ |w·∂L/∂w|`` over the same weights, the gradients accumulated over a few
batches: Torch-Pruning's TaylorImportance; normalised per block like magnitude), ``'uniform'``
(the same kept ratio in every block, the largest meeting the budget; the largest weight norms
kept) and ``'random'`` (seeded random channels, ``ctx['seed']``, at given widths,
``ctx['widths']``, e.g. a searched subnet's; else the uniform widths): the baselines a searched
subnet is compared with (``tools/analysis/compare_methods.py``). Add one with::

    @register_scorer('taylor', normalize='mean', baseline=True, needs_data=True)
    def taylor_scores(backbone, *, model, batches, **ctx):
        ...
        return channel_scores, hidden_scores

Framework-free: plain PyTorch.
"""
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .budget import (NORMALIZATIONS, BudgetError, ResourceCost, alpha_scores, budget_subnet,
                     head_alpha_scores, head_magnitude_scores, hidden_alpha_scores,
                     hidden_magnitude_scores, human, magnitude_scores)
from .subnet import (BlockSelection, SubnetSpec, hidden_prunable_modules, hidden_selectors,
                     prunable_modules)

Scores = Tuple[Dict[str, Tensor], Dict[str, Tensor]]


@dataclass(frozen=True)
class Scorer:
    """A registered ranking method (see the module's documentation)."""
    name: str
    fn: Callable[..., Scores]
    normalize: Optional[str] = None
    baseline: bool = False
    needs_data: bool = False
    help: str = ''
    widths: Optional[Callable[..., Tuple[Dict[str, int], Dict[str, int]]]] = None
    #: ``fn(backbone) -> attention path → a score per head`` (``select_heads``); None: the
    #: scorer does not rank heads (every head kept)
    heads: Optional[Callable[[nn.Module], Dict[str, Tensor]]] = None

    def __call__(self, backbone: nn.Module, **ctx) -> Scores:
        channel, hidden = self.fn(backbone, **ctx)
        return dict(channel), dict(hidden or {})


#: name → :class:`Scorer`, in registration order
SCORERS: Dict[str, Scorer] = {}


def register_scorer(name: str, *, normalize: Optional[str] = None, baseline: bool = False,
                    needs_data: bool = False, help: str = '', force: bool = False,
                    widths: Optional[Callable] = None, heads: Optional[Callable] = None):
    """Decorator: register ``fn(backbone, **ctx) -> (channel_scores, hidden_scores)`` under
    ``name`` (ValueError if taken, unless ``force``); ``widths``: the scorer fixes the widths
    (see the module's documentation)."""
    if normalize not in NORMALIZATIONS:
        raise ValueError(f'normalize must be one of {NORMALIZATIONS}, got {normalize!r}')

    def wrap(fn):
        if name in SCORERS and not force:
            raise ValueError(f'a scorer named {name!r} is registered already')
        SCORERS[name] = Scorer(name, fn, normalize, bool(baseline), bool(needs_data),
                               help or (fn.__doc__ or '').strip().split('\n')[0], widths,
                               heads)
        return fn

    return wrap


def scorer_names() -> Tuple[str, ...]:
    """The registered scorers' names (the export's ``--method`` choices)."""
    return tuple(SCORERS)


def get_scorer(name: str) -> Scorer:
    """The scorer registered as ``name``; KeyError naming the known ones otherwise."""
    try:
        return SCORERS[name]
    except KeyError:
        raise KeyError(f'unknown ranking method {name!r}; known: '
                       f'{", ".join(SCORERS)}') from None


@register_scorer('alpha', help='the searched probabilities σ(α) and σ(β)',
                 heads=head_alpha_scores)
def searched_scores(backbone: nn.Module, **ctx) -> Scores:
    """σ(α) of every channel and σ(β) of every hidden unit: the search's probabilities."""
    return alpha_scores(backbone), hidden_alpha_scores(backbone)


@register_scorer('magnitude', normalize='mean', baseline=True,
                 help='L2 norms of the weights, relative to their block\'s / module\'s mean',
                 heads=head_magnitude_scores)
def weight_norm_scores(backbone: nn.Module, **ctx) -> Scores:
    """The L2 norm of every channel's and hidden unit's weights (the magnitude pruner)."""
    return magnitude_scores(backbone), hidden_magnitude_scores(backbone)


def _rounded(ratio: float, dim: int, multiple_of: int) -> int:
    """``ratio·dim`` rounded to the nearest multiple of ``multiple_of``, within [one group,
    dim]."""
    m = max(1, int(multiple_of))
    w = int(round(ratio * dim / m)) * m
    return max(min(m, dim), min(dim, w))


def uniform_widths(cost, budget: float, multiple_of: int = 1,
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


def widths_of(spec) -> Tuple[Dict[str, int], Dict[str, int]]:
    """(kept channels per block, kept hidden units per module) of a subnet (a
    :class:`~mmdcs.selection.SubnetSpec`, its dict, or the path of its subnet.json, read and
    checked by :meth:`SubnetSpec.coerce`)."""
    spec = SubnetSpec.coerce(spec)
    return ({b.name: b.kept for b in spec.blocks}, {b.name: b.kept for b in spec.hidden})


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


def widths_subnet(model: nn.Module, family: str, arch: str, variant: str, cost,
                  target: float, kept: Dict[str, int],
                  hidden_kept: Optional[Dict[str, int]] = None,
                  scores: Optional[Dict[str, Tensor]] = None,
                  hidden_scores: Optional[Dict[str, Tensor]] = None, method: str = 'uniform',
                  multiple_of: int = 1, **meta) -> SubnetSpec:
    """The subnet of ``model`` (a supernet) with ``kept[block]`` channels in every block (and
    ``hidden_kept[module]`` hidden units; default: all), the channels of largest score kept
    (default: the first ones). :class:`BudgetError` (one line) when the widths do not fit the
    model or their count is not within ±1 % of the baseline of ``target`` (a ratio of the
    baseline's count; :func:`uniform_widths` keeps it at or below); ``meta['budget']``
    records target and achieved like :func:`~mmdcs.selection.budget.budget_subnet`."""
    name = f'--target-{cost.resource}'
    budget = cost.check_target(target, name, multiple_of)
    hidden_kept = dict(hidden_kept or {})
    if set(kept) != set(cost.dims) or not set(hidden_kept) <= set(cost.hidden_dims):
        raise BudgetError(f'{method}: the widths name blocks {sorted(kept)[:3]}... and modules '
                          f'{sorted(hidden_kept)[:3]}...; the model has {sorted(cost.dims)[:3]}'
                          f'... and {sorted(cost.hidden_dims)[:3]}...')
    # a block's MLP selected over channels × hidden units names both units by its path: each
    # width against its own unit's full width
    for what, widths, dims in (('channels', kept, cost.dims),
                               ('hidden units', hidden_kept, cost.hidden_dims)):
        for n, w in widths.items():
            if not 1 <= int(w) <= dims[n]:
                raise BudgetError(f'{method}: {n} keeps {w} of {dims[n]} {what}')
    full_hidden = dict(cost.hidden_dims, **hidden_kept)
    achieved = cost.at(kept, full_hidden)
    # within ±1 % of the baseline of the budget: what budget_subnet holds an export to, so the
    # widths of another export at the same budget (random's --widths-from) are accepted as
    # they are (a greedy on a latency table's interpolated times may end a little above)
    if abs(achieved - budget) > 0.01 * cost.baseline:
        raise BudgetError(f'{method}: the widths count {cost.ratio(achieved):.4f} of the '
                          f'baseline {cost.resource}, not within ±1 % of {name} = '
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


class Ranking:
    """A supernet's units scored once by a registered scorer (``method``, with its context
    ``ctx``: ``model``, ``batches``, ``seed``, ``widths``), ranked at any ratio of any cost:
    :meth:`at` is the rank step of a target (``mmdcs.analysis.target.meet_target``)."""

    def __init__(self, backbone: nn.Module, method: str, **ctx):
        self.backbone, self.method, self.ctx = backbone, method, ctx
        self.scorer = get_scorer(method)
        self.scores, self.hidden_scores = self.scorer(backbone, **ctx)
        heads = self.scorer.heads(backbone) if self.scorer.heads is not None else None
        self.head_scores = heads or None

    def at(self, cost: ResourceCost, ratio: float, multiple_of: int = 1, prior='cost',
           **meta) -> SubnetSpec:
        """The subnet at ``ratio`` of ``cost``'s baseline: channels, hidden units and (with
        head scores) heads ranked jointly per unit of marginal cost
        (:func:`~mmdcs.selection.budget.budget_subnet`; ``prior``: how the units are weighed,
        :func:`~mmdcs.selection.budget.build_prior`), or at the widths the scorer fixes
        (:func:`widths_subnet`, no prior). :class:`BudgetError` (one line) when it cannot be
        met."""
        b = self.backbone
        if self.scorer.widths is None:
            return budget_subnet(b, b.family, b.arch, b.variant, self.scores, cost, ratio,
                                 multiple_of, hidden_scores=self.hidden_scores,
                                 normalize=self.scorer.normalize,
                                 head_scores=self.head_scores, method=self.method,
                                 prior=prior, **meta)
        budget = cost.check_target(ratio, f'--target-{cost.resource}', multiple_of)
        kept, hidden_kept = self.scorer.widths(cost, budget, multiple_of, **self.ctx)
        spec = widths_subnet(b, b.family, b.arch, b.variant, cost, ratio, kept, hidden_kept,
                             self.scores, self.hidden_scores, self.method, multiple_of, **meta)
        if 'seed' in self.ctx and self.method == 'random':
            spec.meta['seed'] = int(self.ctx['seed'])
        return spec


# ----------------------------------------------------------------------------- the pruners
def _classifier_loss(model: nn.Module, batch) -> Tensor:
    """Cross-entropy of a classifier (``model(x, mode='tensor')`` gives logits, as mmpretrain's)
    on an ``(inputs, labels)`` batch."""
    x, y = batch
    return F.cross_entropy(model(x, mode='tensor'), y)


@register_scorer('taylor', normalize='mean', baseline=True, needs_data=True,
                 help='first-order Taylor importance Σ|w·∂L/∂w| on a few training batches, '
                 'relative to the block\'s mean (Torch-Pruning\'s TaylorImportance)')
def taylor_scorer(backbone: nn.Module, *, model: nn.Module, batches, loss_fn=None,
                  **ctx) -> Scores:
    """:func:`taylor_scores` of ``backbone`` with the loss of ``model`` (default: a classifier's
    cross-entropy) on ``batches`` (``(inputs, labels)`` pairs)."""
    loss_fn = loss_fn or _classifier_loss
    return taylor_scores(backbone, batches, lambda b: loss_fn(model, b),
                         params=model.parameters())


def _uniform(cost, budget: float, multiple_of: int = 1, **ctx):
    return uniform_widths(cost, budget, multiple_of)[:2]


def _given_or_uniform(cost, budget: float, multiple_of: int = 1, widths=None, **ctx):
    if widths is None:
        return _uniform(cost, budget, multiple_of)
    return widths


@register_scorer('uniform', normalize='mean', baseline=True, widths=_uniform,
                 help='the same kept ratio in every block (the largest meeting the budget), the '
                 'largest weight norms kept')
def uniform_scorer(backbone: nn.Module, **ctx) -> Scores:
    """Weight norms, to choose the channels inside each block at the uniform widths."""
    return magnitude_scores(backbone), hidden_magnitude_scores(backbone)


@register_scorer('random', baseline=True, widths=_given_or_uniform,
                 help='seeded random channels at given widths (e.g. a searched subnet\'s), '
                 'else at the uniform widths')
def random_scorer(backbone: nn.Module, seed: int = 0, **ctx) -> Scores:
    """A seeded random order of every block's channels and module's hidden units."""
    from_dims = {n: m.select.dim for n, m in prunable_modules(backbone).items()}
    hidden = {n: s.dim for n, s in hidden_selectors(backbone).items()}
    return random_scores(from_dims, seed), random_scores(hidden, int(seed) + 1)
