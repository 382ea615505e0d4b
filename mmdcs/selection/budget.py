"""Budgets (method.md §11): a target FLOPs or parameter count, as a ratio of the baseline
network's, that the search and the export meet.

* :class:`LinearCost` — the exact count of a supernet's pruned networks as a function of the
  kept widths: ``count = const + Σ_j coef_j·D̃_j + Σ_j pair_j·D̃_j·H̃_j + Σ_k hidden_coef_k·H̃_k``
  (linear in every width taken alone: every layer whose size depends on a selected width has
  one dimension equal to it, an MLP with hidden-unit selection two). The coefficients are
  measured with ``mmengine.analysis`` at the input size asked for
  (:func:`mmdcs.analysis.complexity.calibrate_cost`), so the ratio to the baseline is what
  ``tools/analysis/complexity.py`` measures.
* :func:`select_units_to_budget` — the export to a budget: channels of every block and hidden
  units of every hidden-selected module ranked *jointly* by score per unit of marginal cost,
  removed greedily from full width until the budget is met (:func:`select_jointly`;
  :func:`select_to_budget`: channels alone).
* :func:`magnitude_scores`, :func:`hidden_magnitude_scores` — the magnitude pruner's scores: the
  L2 norm of each selected channel's weights (an MLP channel's fc1 column and fc2 row) and of
  each hidden unit's (an fc1 row and fc2 column; an expanded channel of a conv FFN).
* :func:`budget_subnet` — a :class:`SubnetSpec` at a budget from any of these scores.

* :class:`ResourceCost` — the one interface of a budget's cost (FLOPs, parameters, latency):
  what the search, its projection, the export and the analysis tools ask of it;
  :class:`LinearCost` is the exact count (FLOPs, parameters); a latency table is another
  implementation. :func:`register_resource` / :func:`build_cost` — the resources by name (the
  ``flops`` and ``params`` builders are registered by ``mmdcs.models.counting``, where the
  calibration lives).

Framework-free: plain PyTorch.
"""
import dataclasses
import heapq
import math
from dataclasses import dataclass, field
from typing import (Any, Callable, Dict, Hashable, List, Optional, Protocol, Sequence, Tuple,
                    Union, runtime_checkable)

import torch
import torch.nn as nn
from torch import Tensor

from .subnet import (BlockSelection, SubnetSpec, head_prunable_modules, head_selectors,
                     hidden_prunable_modules, hidden_selectors, prunable_modules)

#: the kinds of prunable units a budget ranks: a block's channels (D̃) and a module's hidden
#: units (H̃); a unit is ``(kind, path)``
CHANNELS, HIDDEN = 'channels', 'hidden'
#: an attention's heads (``select_heads=True``, method.md §2.7); a unit is ``(HEADS, path)``
HEADS = 'heads'
#: how scores of different units are made comparable (:func:`normalize_scores`)
NORMALIZATIONS = (None, 'mean')


class BudgetError(ValueError):
    """A budget that cannot be met (or is not a ratio in (0, 1)): one line naming the target,
    the floor and the ceiling."""


Unit = Tuple[str, str]


@dataclass(frozen=True)
class Measure:
    """How a measured resource's prediction is checked on the device
    (:meth:`ResourceCost.measure`): the runtime that runs the network (``'torch'``: PyTorch
    eager; ``'onnxruntime'``: the exported ONNX file; the runtimes of
    ``mmdcs.analysis.latency``), where, with how many threads, at what batch and dtype, by
    which clock (``'thread'``: the calling thread's CPU time, for one CPU thread; ``'wall'``),
    in how many interleaved rounds (medians) after how many untimed calls."""
    runtime: str = 'torch'
    device: str = 'cpu'
    threads: Optional[int] = 1
    batch: int = 1
    dtype: str = 'fp32'
    clock: str = 'wall'
    rounds: int = 21
    warmup: int = 3

    def replace(self, **changes) -> 'Measure':
        """This measure with the changes that are not None."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


@runtime_checkable
class ResourceCost(Protocol):
    """What a resource (FLOPs, parameters, latency) costs as a function of the kept widths of a
    supernet's prunable units, and how a target of it is met: the one interface every budget
    consumer uses (the search's multiplier and projection, ``mmdcs.selection.budget_search``;
    the export, :func:`budget_subnet`; the one function that meets a target,
    ``mmdcs.analysis.target.meet_target``; the analysis tools).

    A *unit* is ``(CHANNELS, block)`` (a block's D̃ channels), ``(HIDDEN, path)`` (a
    hidden-selected module's H̃ hidden units) or ``(HEADS, attention)`` (its kept heads);
    ``dims`` / ``hidden_dims`` / ``head_dims`` give their full widths (``{}``: none).
    Counts are in the resource's own unit (multiply-accumulates, parameters, milliseconds);
    a target is a ratio of ``baseline``. An *exact* resource's count of a built network is
    :meth:`count_model` and nothing is measured (``measure()`` is None); a *measured* one's
    prediction is checked on the device as :meth:`measure` says, corrected by measurement and
    refused beyond ``tolerance``. Implementations: :class:`LinearCost` (exact, linear in each
    width), ``mmdcs.selection.latency_cost.LatencyCost`` (a measured table: const + Σ
    interpolated unit times).
    """
    #: the resource's name (``'flops'``, ``'params'``, ``'latency'``)
    resource: str
    #: the baseline network's count (no selection at all, same input size): what a ratio
    #: multiplies
    baseline: float
    #: block name → D; hidden selector path → H; head-selected attention path → heads
    dims: Dict[str, int]
    hidden_dims: Dict[str, int]
    head_dims: Dict[str, int]
    #: (H, W) the cost was made for (None: not size-dependent)
    input_size: Optional[tuple]
    #: facts about the cost; for a measured one (not an exact count) the export records them
    #: (e.g. a latency table's identity: device, threads, batch, file and sha256)
    meta: dict
    #: how far a measured ratio may be from its target (an exact count: 0)
    tolerance: float
    #: the group size of kept widths unless told otherwise (a table's grid step)
    multiple_of: int
    # optional: ``prior``, what the ranking weighs the units by unless told (:func:`build_prior`):
    # ``'cost'`` (this cost's own average per element; also where a cost has none) or an exact
    # resource's name (a latency budget: ``'flops'``, an element is worth the FLOPs it does)

    def at(self, kept: Dict[str, float],
           hidden_kept: Optional[Dict[str, float]] = None,
           heads_kept: Optional[Dict[str, float]] = None) -> float:
        """The count with ``kept[block]`` channels, ``hidden_kept[path]`` hidden units and
        ``heads_kept[path]`` heads (missing: full)."""

    def unit_dims(self) -> Dict[Unit, int]:
        """Every unit → its full width."""

    def count(self, widths: Dict[Unit, float]) -> float:
        """The count at the units' widths (missing: full width)."""

    def marginal(self, unit: Unit, widths: Dict[Unit, float]) -> float:
        """What one element of ``unit`` costs at ``widths`` (≥ 0; the greedy ranks by score per
        unit of it)."""

    def expected(self, selectors: Dict[str, nn.Module], expectation: str = 'gate',
                 hidden: Optional[Dict[str, nn.Module]] = None,
                 heads: Optional[Dict[str, nn.Module]] = None) -> Tensor:
        """The differentiable expected count of the stochastic supernet (a scalar with
        gradients to every α, and β of ``hidden`` and ``heads``)."""

    @property
    def ceiling(self) -> float:
        """The count with every unit at full width."""

    @property
    def floor(self) -> float:
        """The count with one element kept in every unit."""

    def floor_at(self, multiple_of: int = 1) -> float:
        """The count with one group of ``multiple_of`` kept in every unit."""

    def ratio(self, count: float) -> float:
        """``count`` as a ratio of the baseline."""

    def check_target(self, ratio: Any, name: str, multiple_of: int = 1) -> float:
        """The absolute budget of a target ratio; :class:`BudgetError` (one line naming the
        target, the floor and the ceiling) unless floor < ratio < ceiling."""

    def measure(self, **changes) -> Optional[Measure]:
        """How a prediction is checked on the device (a :class:`Measure`, with the ``changes``
        that are not None: e.g. ``threads``, ``rounds``; a runtime other than the one the
        prediction was made for is :class:`BudgetError`, one line); None for an exact count."""

    def count_model(self, model: nn.Module) -> Optional[float]:
        """The exact count of a built network (the kind of model the cost was made for); None
        where the resource is measured, not counted."""

    def context_warnings(self, device_name: Optional[str] = None,
                         threads: Optional[int] = None, batch: Optional[int] = None,
                         dtype: Optional[str] = None, warn: bool = True) -> List[str]:
        """Where a measured cost is used elsewhere than it was made (another device, thread
        count, batch or dtype): one message per difference (``[]`` for an exact count)."""


#: resource name → (builder(model, input_size=None, **options) → ResourceCost, option names,
#: help)
_RESOURCES: Dict[str, Tuple[Callable[..., ResourceCost], Tuple[str, ...], str]] = {}
#: the resources a model is counted in whatever the target (what the export reports)
_COUNTED: List[str] = []


def register_resource(name: str, builder: Callable[..., ResourceCost],
                      options: Sequence[str] = (), help: str = '',
                      counted: bool = False) -> None:
    """Make ``name`` a budget resource: ``builder(model, input_size=None, **options)`` returns
    its :class:`ResourceCost` for ``model`` (a classifier or a supernet backbone); ``options``
    are the keyword arguments it takes from a config's ``model.cost`` and from the export
    (e.g. ``latency_table``: ``--latency-table``); ``counted``: an exact count the builder
    makes from the model alone, which the export reports for every subnet (FLOPs,
    parameters). Registering a name again replaces it."""
    _RESOURCES[name] = (builder, tuple(options), help)
    if counted and name not in _COUNTED:
        _COUNTED.append(name)
    elif not counted and name in _COUNTED:
        _COUNTED.remove(name)


def resource_names() -> Tuple[str, ...]:
    """The registered budget resources (``flops`` and ``params`` once ``mmdcs.models`` is
    imported; ``latency`` where a latency cost is available)."""
    return tuple(_RESOURCES)


def counted_resources() -> Tuple[str, ...]:
    """The registered resources every exported subnet is counted in (``counted=True``)."""
    return tuple(r for r in _COUNTED if r in _RESOURCES)


def resource_options(name: str) -> Tuple[str, ...]:
    """The options a resource's builder takes."""
    return _RESOURCES[name][1] if name in _RESOURCES else ()


def resource_help(name: str) -> str:
    """What a resource counts, in a few words (the tools' help)."""
    return _RESOURCES[name][2] if name in _RESOURCES else ''


def build_cost(resource: str, model: nn.Module, input_size: Optional[tuple] = None,
               **options) -> ResourceCost:
    """The :class:`ResourceCost` of ``resource`` for ``model``; :class:`BudgetError` (one line)
    for an unknown resource or an option it does not take."""
    if resource not in _RESOURCES:
        known = ', '.join(_RESOURCES) or 'none registered'
        raise BudgetError(f'{resource!r} is not a budget resource here (known: {known})')
    builder, names = _RESOURCES[resource][:2]
    extra = sorted(set(options) - set(names))
    if extra:
        raise BudgetError(f'the {resource} budget takes no option {", ".join(extra)}'
                          + (f' (it takes {", ".join(names)})' if names else ''))
    return builder(model, input_size, **options)


class CostBounds:
    """What every :class:`ResourceCost` derives from its counts alone: the ceiling, the floor,
    ratios and the check of a target against them (one implementation for FLOPs, params and
    latency). A subclass provides ``at``, ``floor_at``, ``baseline``, ``resource``, ``dims``,
    ``hidden_dims``, and how its baseline is named in a refusal (:meth:`_baseline_phrase`)."""
    #: what a target of this resource is a ratio of, in the "is not a number" refusal
    _ratio_of = 'count'
    #: the name of the floor in a refusal (a measured cost's floor is predicted)
    _floor_name = 'floor'
    #: an exact count: a measured ratio must equal the prediction
    tolerance = 0.
    #: widths in groups of 1 unless told otherwise
    multiple_of = 1
    #: the ranking weighs each unit by this cost's own average per element (:func:`build_prior`)
    prior = 'cost'

    def measure(self, **changes) -> Optional[Measure]:
        """An exact count is not measured: None."""
        return None

    def count_model(self, model: nn.Module) -> Optional[float]:
        """Not counted here (see :class:`LinearCost`): None."""
        return None

    def context_warnings(self, device_name=None, threads=None, batch=None, dtype=None,
                         warn: bool = True) -> List[str]:
        """An exact count holds everywhere: no warning."""
        return []

    def _baseline_phrase(self) -> str:
        """The baseline named in a refusal, e.g. ``flops (1.2G at 64x64)``."""
        size = ' at ' + 'x'.join(map(str, self.input_size)) if self.input_size else ''
        return f'{self.resource} ({human(self.baseline)}{size})'

    @property
    def ceiling(self) -> float:
        """Every unit kept at full width (the supernet's deterministic network)."""
        return self.at(self.dims)

    @property
    def floor(self) -> float:
        """One channel kept in every prunable block (and one hidden unit in every
        hidden-selected module)."""
        return self.floor_at(1)

    def ratio(self, count: float) -> float:
        return count / self.baseline

    def check_target(self, ratio, name: str, multiple_of: int = 1) -> float:
        """The absolute budget of a target ratio; :class:`BudgetError` unless
        floor < ratio < ceiling (ratios of the baseline; the ceiling is 1, or the count at
        full width where that is lower)."""
        m = max(1, int(multiple_of))
        floor = self.ratio(self.floor_at(m))
        full = self.ratio(self.ceiling)
        ceiling = 1. if full >= 1. - 1e-9 else full
        given = ratio
        try:
            ratio = float(ratio)
        except (TypeError, ValueError):
            ratio = float('nan')
        if isinstance(given, bool) or math.isnan(ratio):
            what = 'is empty' if isinstance(given, str) and not given.strip() else \
                'is not a number'
            raise BudgetError(f'{name} = {given!r} {what}: a {self.resource} target is a ratio '
                              f'of the baseline network\'s {self._ratio_of} (e.g. 0.7)')
        if not (floor < ratio < ceiling):
            hidden = ' and hidden-selected module' if self.hidden_dims else ''
            group = ('one channel' + (' or hidden unit' if self.hidden_dims else '')
                     if m == 1 else f'one group of {m} (--multiple-of)')
            if ceiling == 1.:
                top = (f'the ceiling 1 (the baseline; every channel kept: {full:.4f})')
            else:
                top = f'the ceiling {ceiling:.4f} (every channel kept)'
            raise BudgetError(
                f'{name} = {ratio:g} cannot be met: a {self.resource} target is a ratio of the '
                f'baseline network\'s {self._baseline_phrase()} between the {self._floor_name} '
                f'{floor:.4f} ({group} kept in every prunable block{hidden}) and {top}')
        return ratio * self.baseline


@dataclass
class LinearCost(CostBounds):
    """The exact count of the pruned networks of a supernet: ``const + Σ_j coef[j]·D̃_j``
    (+ the bilinear and hidden terms below); a :class:`ResourceCost`.

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
        head_coef: head-selected attention path → count per kept head (its rows of q, k, v and
            of Linear_θ, its columns of proj, its share of q·kᵀ and attn·v): linear in the kept
            heads, independent of the other widths (measured, :func:`calibrate_cost`).
        head_dims: head-selected attention path → number of heads.
        counter: ``model → count``, the exact count of a built network of the kind the cost
            was calibrated on (:meth:`count_model`; set by the calibration).
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
    head_coef: Dict[str, float] = field(default_factory=dict)
    head_dims: Dict[str, int] = field(default_factory=dict)
    counter: Optional[Callable[[nn.Module], float]] = field(default=None, repr=False,
                                                            compare=False)

    def count_model(self, model: nn.Module) -> Optional[float]:
        """The exact count of a built network (``counter``; None without one)."""
        return None if self.counter is None else float(self.counter(model))

    def at(self, kept: Dict[str, float],
           hidden_kept: Optional[Dict[str, float]] = None,
           heads_kept: Optional[Dict[str, float]] = None) -> float:
        """The count with ``kept[name]`` channels in every block (and ``hidden_kept[path]``
        hidden units in every hidden-selected module, ``heads_kept[path]`` heads in every
        head-selected attention; default: all)."""
        a = dict(self.head_dims, **(heads_kept or {}))
        return self._at(kept, hidden_kept) + sum(c * float(a[k])
                                                 for k, c in self.head_coef.items())

    def _at(self, kept: Dict[str, float],
            hidden_kept: Optional[Dict[str, float]] = None) -> float:
        h = dict(self.hidden_dims, **(hidden_kept or {}))
        total = self.const + sum(self.coef[n] * float(kept[n]) for n in self.coef)
        total += sum(c * float(kept[n]) * float(h[self.pair_hidden[n]])
                     for n, c in self.pair.items())
        return total + sum(c * float(h[k]) for k, c in self.hidden_coef.items())

    def given_hidden(self, hidden_kept: Dict[str, float]) -> 'LinearCost':
        """The count as a function of the channels alone, the hidden widths fixed (what the
        export to a budget ranked before it ranked hidden units too; kept for callers that fix
        the hidden widths)."""
        h = dict(self.hidden_dims, **hidden_kept)
        coef = {n: c + self.pair.get(n, 0.) * float(h[self.pair_hidden[n]]) if n in self.pair
                else c for n, c in self.coef.items()}
        const = self.const + sum(c * float(h[k]) for k, c in self.hidden_coef.items())
        return LinearCost(self.resource, self.baseline, const, coef, dict(self.dims),
                          self.input_size, dict(self.meta, hidden_kept=dict(hidden_kept)),
                          head_coef=dict(self.head_coef), head_dims=dict(self.head_dims))

    # ------------------------------------------------------------------ units
    def unit_dims(self) -> Dict[Tuple[str, str], int]:
        """Every prunable unit, ``(CHANNELS, block)`` and ``(HIDDEN, path)``, → its full
        width."""
        out = {(CHANNELS, n): int(d) for n, d in self.dims.items()}
        out.update(((HIDDEN, k), int(h)) for k, h in self.hidden_dims.items())
        out.update(((HEADS, k), int(h)) for k, h in self.head_dims.items())
        return out

    def count(self, widths: Dict[Tuple[str, str], float]) -> float:
        """The count at the widths of :meth:`unit_dims`' units (missing: full width)."""
        kept = {n: widths.get((CHANNELS, n), d) for n, d in self.dims.items()}
        hidden = {k: widths.get((HIDDEN, k), h) for k, h in self.hidden_dims.items()}
        heads = {k: widths.get((HEADS, k), h) for k, h in self.head_dims.items()}
        return self.at(kept, hidden, heads)

    def marginal(self, unit: Tuple[str, str], widths: Dict[Tuple[str, str], float]) -> float:
        """d count / d width of ``unit`` at ``widths`` (exact: the count is linear in each
        width taken alone): a channel of block n costs ``coef_n + pair_n·H̃``, a hidden unit
        of module k ``hidden_coef_k + Σ pair_n·D̃_n`` over the blocks n it pairs with."""
        kind, name = unit
        if kind == CHANNELS:
            c = self.coef[name]
            if name in self.pair:
                k = self.pair_hidden[name]
                c += self.pair[name] * float(widths.get((HIDDEN, k), self.hidden_dims[k]))
            return c
        if kind == HIDDEN:
            c = self.hidden_coef.get(name, 0.)
            for n, k in self.pair_hidden.items():
                if k == name:
                    c += self.pair[n] * float(widths.get((CHANNELS, n), self.dims[n]))
            return c
        if kind == HEADS:
            return self.head_coef[name]
        raise KeyError(f'unknown unit kind {kind!r}')

    def floor_at(self, multiple_of: int = 1) -> float:
        """Every block and hidden-selected module down to one group of ``multiple_of``
        channels / hidden units (its full width if that is smaller)."""
        m = max(1, int(multiple_of))
        return self.at({n: min(m, d) for n, d in self.dims.items()},
                       {k: min(m, h) for k, h in self.hidden_dims.items()},
                       {k: 1 for k in self.head_dims})  # heads: never rounded up

    def expected(self, selectors: Dict[str, nn.Module], expectation: str = 'gate',
                 hidden: Optional[Dict[str, nn.Module]] = None,
                 heads: Optional[Dict[str, nn.Module]] = None) -> Tensor:
        """The differentiable expected count, E[D̃_j] from each block's selector (and E[H̃_k]
        from each hidden selector in ``hidden``, E[kept heads] = Σ sigmoid(α) from each head
        selector in ``heads``, path → selector; an attention not given: all heads)."""
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
        for k, c in self.head_coef.items():
            total = total + c * (heads[k].expected_kept(expectation) if heads and k in heads
                                 else float(self.head_dims[k]))
        return total + self.const


def human(n: float) -> str:
    for unit, div in (('G', 1e9), ('M', 1e6), ('K', 1e3)):
        if abs(n) >= div:
            return f'{n / div:.3f}{unit}'
    return f'{n:.0f}'


def _removal_sizes(dim: int, m: int) -> List[int]:
    """The sizes of the groups a unit of width ``dim`` loses, from full width down to one group
    (``min(m, dim)``): first ``dim mod m`` (when not 0), then ``m`` each, so that every width on
    the way is a multiple of ``m`` (or ``dim``)."""
    if dim <= m:
        return []
    sizes = [dim % m] if dim % m else []
    return sizes + [m] * ((dim - (dim % m)) // m - 1)


def normalize_scores(scores: Dict[Hashable, Tensor],
                     normalize: Optional[str] = None) -> Dict[Hashable, Tensor]:
    """Scores of different units made comparable: ``'mean'`` divides each unit's scores by
    their mean (Torch-Pruning's group normalisation), so a block's channels and a module's
    hidden units, whose weight norms live on different scales, are ranked by their importance
    relative to their own unit; ``None`` keeps them (sigmoid(α) is a probability already)."""
    if normalize not in NORMALIZATIONS:
        raise ValueError(f'normalize must be one of {NORMALIZATIONS}, got {normalize!r}')
    out = {}
    for key, s in scores.items():
        s = torch.as_tensor(s, dtype=torch.float64)
        if normalize == 'mean':
            mean = float(s.mean()) if s.numel() else 0.
            s = s / mean if mean > 0 else torch.ones_like(s)
        out[key] = s
    return out


def _is_heads(unit) -> bool:
    return isinstance(unit, tuple) and len(unit) == 2 and unit[0] == HEADS


#: how the greedy weighs the units against each other (:func:`select_units_to_budget`): by
#: the budget's own average cost per element, or not at all; or (:func:`prior_count`) by the
#: prices of another, exact resource over the same units (e.g. the FLOPs an element does)
PRIORS = ('cost', None)


def check_prior(prior):
    """``prior`` if it is one of :data:`PRIORS` or a cost with a ``count`` (an exact
    :class:`ResourceCost` over the budget's units); ValueError otherwise."""
    if prior in PRIORS or (not isinstance(prior, str)
                           and callable(getattr(prior, 'count', None))):
        return prior
    raise ValueError(f'prior must be one of {PRIORS} or a resource cost, got {prior!r}')


def prior_count(prior, widths: Callable = lambda w: w):
    """What :func:`select_units_to_budget` takes for ``prior``: ``'cost'`` or None as they
    are, a resource cost as its count at ``widths(w)`` (a caller's widths mapped to the
    cost's units, e.g. nested channels tied to their heads)."""
    check_prior(prior)
    return prior if prior in PRIORS else (lambda w: prior.count(widths(w)))


def check_prior_name(name: Optional[str]) -> None:
    """A prior's name (the tools' ``--prior``) is None, ``'cost'``, ``'none'`` or a counted
    resource's (:func:`counted_resources`: ``'flops'``, ``'params'``); :class:`BudgetError`
    (one line) otherwise."""
    if name not in (None, 'cost', 'none') + counted_resources():
        raise BudgetError(f'prior {name!r}: one of cost, none, '
                          + ', '.join(counted_resources()))


def build_prior(name: Optional[str], model: nn.Module, input_size: Optional[tuple] = None,
                cost: Optional['ResourceCost'] = None):
    """The prior called ``name`` (the tools' ``--prior``) for a budget of ``cost``: None, that
    cost's own (:attr:`ResourceCost.prior`; ``'cost'`` without one); ``'cost'`` as it is;
    ``'none'`` as None (the scores as given); a counted resource's name as its exact cost of
    ``model`` at ``input_size``. :class:`BudgetError` (one line) for another name."""
    check_prior_name(name)
    if name is None:
        name = getattr(cost, 'prior', 'cost')  # optional in the interface: 'cost' by default
    if name in PRIORS or name == 'none':
        return None if name == 'none' else name
    return build_cost(name, model, input_size)


def prior_name(prior) -> Optional[str]:
    """How a subnet's ``meta['budget']['prior']`` records ``prior``: ``'cost'``, None or
    the other resource's name."""
    return prior if prior in PRIORS else prior.resource


def unit_prices(dims: Dict[Hashable, int], count: Callable[[Dict[Hashable, int]], float],
                units: Sequence[Hashable]) -> Dict[Hashable, float]:
    """Each unit's average cost per element over its range, the other units at full width:
    ``(count(full) − count(unit at width 1)) / (dim − 1)`` (for a linear count, its marginal
    at full width; for a measured one, the mean slope of its curve). A unit of width 1, or
    whose average is not positive (a measured curve that does not rise), gets the smallest
    positive price of the others (1 if none)."""
    full = {u: int(d) for u, d in dims.items()}
    base = float(count(full))
    out = {}
    for u in units:
        if full[u] > 1:
            one = dict(full)
            one[u] = 1
            out[u] = (base - float(count(one))) / (full[u] - 1)
    positive = [p for p in out.values() if p > 0 and math.isfinite(p)]
    fallback = min(positive) if positive else 1.
    return {u: out[u] if out.get(u, 0.) > 0 and math.isfinite(out[u]) else fallback
            for u in units}


def select_units_to_budget(scores: Dict[Hashable, Tensor], dims: Dict[Hashable, int],
                           count: Callable[[Dict[Hashable, int]], float],
                           marginal: Callable[[Hashable, Dict[Hashable, int]], float],
                           budget: float, multiple_of: int = 1,
                           tolerance: float = 0., prior: Union[None, str, Callable] = 'cost'
                           ) -> Dict[Hashable, List[int]]:
    """Kept indices of every unit (a block's channels, a module's hidden units, or any width
    a count is linear in) so that ``count`` is at most ``budget`` and as close to it as the
    greedy gets.

    Backward elimination from full width: each unit loses its groups of ``multiple_of``
    (:func:`_removal_sizes`) in its own score order, lowest first; among the units' next
    groups the one with the lowest score per unit of *marginal* cost saved (its summed score
    over ``size·marginal(unit, widths)``, which depends on the other units' current widths: an
    MLP's channel costs in proportion to its kept hidden units and the reverse) goes first, until
    the count is within the budget. (Until 2026-11-27 a group's *mean* score was divided by its
    whole cost, which favoured removing large groups: with ``multiple_of=8`` a group of 8
    channels looked 8× cheaper per score than a head, removed one at a time.) Then the removed
    groups are added back, best score per unit of marginal cost first, while they fit (a group
    that does not fit is skipped, a cheaper one may still fit). A group whose removal saves
    nothing (a measured step: a block's first channels bring in a gather) is never removed on
    its own: where it blocks a unit, the fewest
    groups that together save time are one move, taken after every single group, by score per
    unit of the cost it saves. Near the end, a group whose removal would leave the count more than
    ``tolerance`` below the budget (a coarse, expensive one) gives way to the best group that
    does not, or else to the cheapest group (cheaper groups of other units fill the budget more
    closely). Every unit keeps at least one group.

    ``prior='cost'`` (the default since 2026-11-27) first weighs each unit's scores by its
    average cost per element (:func:`unit_prices`): the neutral prior that a unit's elements
    are worth what they cost. Without it (``prior=None``, the ranking before) scores that
    average alike in every unit (``normalize='mean'``, or probabilities) rank the units whose
    elements cost most first, whatever their importance: an attention head, which costs as
    much as ~33 MLP channels of DeiT-Tiny at 17 tokens, went before any channel, and a
    MobileViT-XS's first expanded channels (full resolution) went to one (docs/budgets.md).
    With it, the score per unit of cost at full width is the score itself: units lose the
    elements whose scores are lowest relative to their unit, and the marginal cost moves the
    ranking only as it departs from the unit's average (a paired unit whose partner shrank
    becomes cheaper; a measured curve's bends).

    Args:
        scores: unit → one score per element (higher: keep first); units without scores are
            not pruned.
        dims: unit → full width.
        count: the exact count at given widths (unit → width).
        marginal: the count of one element of a unit at given widths.
        budget: the absolute budget.
        multiple_of: group size.
        tolerance: how far below the budget a removal may take the count without looking for
            a finer one.
        prior: ``'cost'`` (scores weighed by :func:`unit_prices` of ``count``), None (as
            given) or another count over the same units (scores weighed by its prices; e.g.
            the FLOPs of an element for a latency budget: :func:`prior_count`).
    """
    if prior not in PRIORS and not callable(prior):
        raise ValueError(f'prior must be one of {PRIORS} or a count, got {prior!r}')
    g = _Greedy(scores, dims, count, marginal, max(1, int(multiple_of)), prior)
    g.eliminate(budget, tolerance)
    g.add_back(budget)
    return {u: sorted(g.order[u][:g.widths[u]].tolist()) if u in g.order else list(range(d))
            for u, d in dims.items()}


class _Greedy:
    """The state of :func:`select_units_to_budget`: every unit's scores in its removal order
    (cumulated), its group sizes, its current width and how many groups it has lost, and the
    heap of the units' next groups by score per unit of the cost they save."""

    def __init__(self, scores, dims, count, marginal, m: int, prior):
        self.count, self.marginal = count, marginal
        self.units = [u for u in dims if u in scores]
        priced = count if prior == 'cost' else prior  # None: the scores as given
        prices = unit_prices(dims, priced, self.units) if priced is not None else {}
        self.order, self.cum, self.sizes = {}, {}, {}
        for u in self.units:
            s = torch.as_tensor(scores[u], dtype=torch.float64).flatten()
            if s.numel() != dims[u]:
                raise ValueError(f'{u}: {s.numel()} scores for a width of {dims[u]}')
            if priced is not None:
                s = s * prices[u]
            self.order[u] = s.argsort(descending=True, stable=True)
            self.cum[u] = torch.cat([s.new_zeros(1), s[self.order[u]].cumsum(0)]).tolist()
            # heads are whole units: removed one at a time whatever multiple_of
            self.sizes[u] = _removal_sizes(int(dims[u]), 1 if _is_heads(u) else m)
        self.rank = {u: i for i, u in enumerate(self.units)}
        self.widths = {u: int(d) for u, d in dims.items()}
        self.partners = {u: [v for v in self.units
                             if v != u and _paired(u, v, marginal, self.widths)]
                         for u in self.units}
        self.removed = {u: 0 for u in self.units}  # how many of its groups each unit lost
        # marginal costs change with the paired units' widths: the heap holds versioned
        # entries and stale ones are skipped
        self.version = {u: 0 for u in self.units}
        self.heap: list = []

    def group(self, u, back: bool):
        """(size, mean score) of the next group to remove (back=True: to add back)."""
        size = self.sizes[u][self.removed[u] - 1 if back else self.removed[u]]
        w = self.widths[u] + (size if back else 0)
        return size, (self.cum[u][w] - self.cum[u][w - size]) / size

    def move(self, u):
        """(summed score per unit of the cost it saves, that cost, groups) of ``u``'s next
        removal: its next group; where that saves nothing (a measured step: a block's first
        channels bring in a gather / scatter), the fewest next groups that together save time,
        as one move; ``(inf, 0, 0)`` where no number of them does. A group of 8 channels and a
        single head compare per element."""
        size, score = self.group(u, back=False)
        cost = size * self.marginal(u, self.widths)
        if cost > 0:
            return score * size / cost, cost, 1
        widths, total = dict(self.widths), self.count(self.widths)
        summed, k = 0., self.removed[u]
        for j, size in enumerate(self.sizes[u][k:], 1):
            w = widths[u]
            summed += self.cum[u][w] - self.cum[u][w - size]
            widths[u] = w - size
            saved = total - self.count(widths)
            if saved > 0:
                return summed / saved, saved, j
        return math.inf, 0., 0

    def push(self, u):
        """Queue ``u``'s next move: single groups that save time by their score per unit of
        cost; moves across a step (several groups, :meth:`move`) after every single group, by
        theirs (they once went in the units' order, whatever their scores); a unit none of whose
        removals saves time waits for its partners."""
        self.version[u] += 1
        if self.removed[u] < len(self.sizes[u]):
            r, _cost, groups = self.move(u)
            if groups:
                heapq.heappush(self.heap, (groups > 1, r, self.rank[u], self.version[u], u))

    def finer(self, u, move, total: float, budget: float, tolerance: float):
        """A removal that would end far below the budget gives way to the best single group
        that does not, if any, else to the cheapest (a coarse, expensive group of one unit is
        not the last word when cheaper groups of others can fill the budget): (unit, move)."""
        options = [(m[0], m[1], self.rank[v], v, m) for v in self.units
                   if self.removed[v] < len(self.sizes[v]) for m in [self.move(v)] if m[2] == 1]
        if not options:
            return u, move
        within = [o for o in options if total - o[1] >= budget - tolerance]
        best = min(within) if within else min(options, key=lambda o: (o[1], o[0], o[2]))
        if best[3] != u and best[1] < move[1]:
            self.push(u)
            return best[3], best[4]
        return u, move

    def eliminate(self, budget: float, tolerance: float) -> None:
        """Remove the groups of lowest score per unit of cost until the count is within the
        budget; a removal that saves no time is never made on its own (only as part of a
        move that does: :meth:`move`)."""
        for u in self.units:
            self.push(u)
        total = self.count(self.widths)
        while total > budget and self.heap:
            _, _, _, ver, u = heapq.heappop(self.heap)
            if ver != self.version[u]:
                continue
            move = self.move(u)
            if not move[2]:
                continue
            if total - move[1] < budget - tolerance:
                u, move = self.finer(u, move, total, budget, tolerance)
            for _ in range(move[2]):
                self.widths[u] -= self.sizes[u][self.removed[u]]
                self.removed[u] += 1
            total = self.count(self.widths)
            for v in [u] + self.partners[u]:
                self.push(v)

    def add_back(self, budget: float) -> None:
        """Add back the removed groups that fit, best score per unit of cost first."""
        total = self.count(self.widths)
        while total <= budget:
            best = None
            for u in self.units:
                if self.removed[u]:
                    # what the group adds, counted: a measured cost's slope above a width is
                    # not the one below it (the marginal), so an estimate could overshoot
                    size, score = self.group(u, back=True)
                    self.widths[u] += size
                    extra = self.count(self.widths) - total
                    self.widths[u] -= size
                    r = score * size / extra if extra > 0 else math.inf
                    if total + extra <= budget and (best is None or r > best[0]):
                        best = (r, u)
            if best is None:
                break
            u = best[1]
            self.widths[u] += self.sizes[u][self.removed[u] - 1]
            self.removed[u] -= 1
            total = self.count(self.widths)


def _paired(u, v, marginal, widths) -> bool:
    """Whether the marginal cost of ``u`` depends on the width of ``v`` (probed once)."""
    probe = dict(widths)
    probe[v] = widths[v] - 1 if widths[v] > 1 else widths[v] + 1
    return marginal(u, probe) != marginal(u, widths)


def select_jointly(scores: Dict[str, Tensor], hidden_scores: Dict[str, Tensor],
                   cost: ResourceCost, budget: float, multiple_of: int = 1,
                   normalize: Optional[str] = None, tolerance: Optional[float] = None,
                   head_scores: Optional[Dict[str, Tensor]] = None,
                   prior: Union[None, str, 'ResourceCost'] = 'cost'
                   ) -> Tuple[Dict[str, List[int]], Dict[str, List[int]]]:
    """(kept channels per block, kept hidden units per hidden-selected module) at ``budget``:
    channels and hidden units ranked jointly by score per unit of marginal cost
    (:func:`select_units_to_budget` on ``cost``). ``normalize``: :func:`normalize_scores`;
    ``tolerance``: how far below the budget the count may end before the greedy tries to get
    closer (default 0.1 % of the baseline). ``head_scores`` (attention path → a score per
    head; ``select_heads``): the heads are ranked with them, one head at a time, and a third
    dict is returned (attention path → kept heads). ``prior``: how the units are weighed
    against each other (:func:`select_units_to_budget`)."""
    units = {(CHANNELS, n): s for n, s in scores.items() if n in cost.dims}
    units.update(((HIDDEN, k), s) for k, s in (hidden_scores or {}).items()
                 if k in cost.hidden_dims)
    units.update(((HEADS, k), s) for k, s in (head_scores or {}).items()
                 if k in cost.head_dims)
    units = normalize_scores(units, normalize)
    if tolerance is None:
        tolerance = 1e-3 * abs(cost.baseline)
    keep = select_units_to_budget(units, cost.unit_dims(), cost.count, cost.marginal, budget,
                                  multiple_of, tolerance, prior_count(prior))
    out = ({n: keep[(CHANNELS, n)] for n in cost.dims},
           {k: keep[(HIDDEN, k)] for k in cost.hidden_dims})
    if head_scores is not None:
        return out + ({k: keep[(HEADS, k)] for k in cost.head_dims}, )
    return out


def select_to_budget(scores: Dict[str, Tensor], cost: ResourceCost, budget: float,
                     multiple_of: int = 1, prior: Union[None, str, 'ResourceCost'] = 'cost'
                     ) -> Dict[str, List[int]]:
    """Kept channels of every block so that ``cost`` is as close to ``budget`` as the greedy
    allows, from below (hidden widths, if any, at full width): :func:`select_jointly` without
    hidden units.

    Every block keeps its best ``multiple_of`` channels (one group; a block cannot be empty);
    every D̃ is a multiple of ``multiple_of`` (or D).

    Args:
        scores: block name → one score per channel (higher: keep first).
        cost: the exact count as a function of the kept widths.
        budget: the absolute budget (e.g. ``cost.check_target(0.7, ...)``).
        multiple_of: group size.
    """
    return select_jointly(scores, {}, cost, budget, multiple_of, prior=prior)[0]


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


def hidden_magnitude_scores(model: nn.Module) -> Dict[str, Tensor]:
    """Hidden-selected module path → L2 norm of each hidden unit's weights (``hidden_norms()``:
    an MLP unit's fc1 row and fc2 column; an expanded channel of a conv FFN: its expand-conv
    filter, depthwise filter and project-conv column)."""
    out = {}
    modules = hidden_prunable_modules(model)
    for name in hidden_selectors(model):
        norms = getattr(modules[name], 'hidden_norms', None)
        if norms is None:
            raise BudgetError(f'magnitude pruning: {type(modules[name]).__name__} ({name}) has '
                              'no hidden_norms()')
        out[name] = norms()
    return out


def head_magnitude_scores(model: nn.Module) -> Dict[str, Tensor]:
    """Head-selected attention path → L2 norm of each head's weights (``head_norms()``: its
    q, k, v rows and proj columns), the magnitude pruner's score of a head."""
    attentions = head_prunable_modules(model)
    return {name: attentions[name].head_norms() for name in head_selectors(model)}


def head_alpha_scores(model: nn.Module) -> Dict[str, Tensor]:
    """Head-selected attention path → sigmoid(α) of each head."""
    return {name: torch.sigmoid(sel.alpha.detach().float())
            for name, sel in head_selectors(model).items()}


def alpha_scores(model: nn.Module) -> Dict[str, Tensor]:
    """Block name → sigmoid(α) (the searched probability that each channel is open)."""
    return {name: torch.sigmoid(m.select.alpha.detach().float())
            for name, m in prunable_modules(model).items()}


def hidden_alpha_scores(model: nn.Module) -> Dict[str, Tensor]:
    """Hidden-selected module path → sigmoid(β) (the searched probability that each hidden
    unit is open)."""
    return {name: torch.sigmoid(sel.alpha.detach().float())
            for name, sel in hidden_selectors(model).items()}


def nested_channels(model: nn.Module, heads: Sequence[str]) -> Dict[str, Tensor]:
    """Path → owning head of each selected channel, for the prunable modules whose channels
    lie inside their own heads (``channel_heads()``: EfficientViT's LiteMLA, whose ``proj``
    reads a kept channel of a pruned head as zero), among the attentions ``heads``."""
    modules = prunable_modules(model)
    return {n: modules[n].channel_heads() for n in heads
            if callable(getattr(modules.get(n), 'channel_heads', None))}


def select_nested(nested: Dict[str, Tensor], scores, hidden_scores, head_scores,
                   cost: ResourceCost, budget: float, multiple_of: int,
                   normalize: Optional[str], prior: Union[None, str, 'ResourceCost'] = 'cost'):
    """:func:`select_jointly` (channels, hidden units, heads) where some modules' channels lie
    inside their heads (:func:`nested_channels`): a channel of a pruned head computes nothing
    but still costs ``proj``'s reading it, so the heads and the channels are ranked in two
    passes. First the heads, each with its channels (its marginal cost is its own plus its
    channels'; a nested module's channels follow its kept heads), beside the other units;
    then, the kept heads fixed, the channels and hidden units again, a pruned head's channels
    scoring below every other (first out) and each kept head's best channel kept outside the
    ranking (no kept head is left without a channel); any pruned head's channels left at the
    budget are dropped. The count stays exact (each width's count is linear). ``prior``:
    :func:`select_units_to_budget` (in both passes)."""
    units = {(CHANNELS, n): s for n, s in scores.items() if n in cost.dims}
    units.update(((HIDDEN, k), s) for k, s in hidden_scores.items() if k in cost.hidden_dims)
    units.update(((HEADS, k), s) for k, s in head_scores.items() if k in cost.head_dims)
    units = normalize_scores(units, normalize)
    tolerance = 1e-3 * abs(cost.baseline)
    per_head = {n: len(owner) // cost.head_dims[n] for n, owner in nested.items()}

    def tied(w):  # a nested module keeps the channels of its kept heads
        return {**w, **{(CHANNELS, n): w[(HEADS, n)] * per_head[n] for n in nested}}

    def marginal(u, w):
        m = cost.marginal(u, tied(w))
        if _is_heads(u) and u[1] in nested:
            m += per_head[u[1]] * cost.marginal((CHANNELS, u[1]), tied(w))
        return m

    first = {u: s for u, s in units.items() if not (u[0] == CHANNELS and u[1] in nested)}
    chosen = select_units_to_budget(first, cost.unit_dims(), lambda w: cost.count(tied(w)),
                                    marginal, budget, multiple_of, tolerance,
                                    prior_count(prior, tied))
    head_keep = {k: chosen[(HEADS, k)] for k in cost.head_dims}
    fixed = {(HEADS, k): len(v) for k, v in head_keep.items()}
    second = {u: s for u, s in units.items() if not _is_heads(u)}
    dims = {u: d for u, d in cost.unit_dims().items() if not _is_heads(u)}
    dead, protected, rest = {}, {}, {}
    for n, owner in nested.items():
        if (CHANNELS, n) not in second:
            continue
        s = torch.as_tensor(second[(CHANNELS, n)], dtype=torch.float64).flatten().clone()
        owner_c = owner.cpu()
        dead[n] = ~torch.isin(owner_c, torch.as_tensor(head_keep[n], dtype=torch.long))
        lo = float(s[~dead[n]].min())
        s[dead[n]] = lo - 1. - abs(lo)
        # each kept head's best channel is kept outside the ranking: no kept head is empty
        protected[n] = [int(mine[s[mine].argmax()]) for h in head_keep[n]
                        for mine in [(owner_c == int(h)).nonzero().flatten()]]
        rest[n] = [c for c in range(s.numel()) if c not in set(protected[n])]
        if rest[n]:
            second[(CHANNELS, n)] = s[rest[n]]
        else:
            del second[(CHANNELS, n)]
        dims[(CHANNELS, n)] = len(rest[n])

    def widened(w):  # the protected channels back into their module's width
        return {**w, **fixed, **{(CHANNELS, n): w.get((CHANNELS, n), len(rest[n]))
                                 + len(p) for n, p in protected.items()}}

    chosen = select_units_to_budget(second, dims, lambda w: cost.count(widened(w)),
                                    lambda u, w: cost.marginal(u, widened(w)), budget,
                                    multiple_of, tolerance, prior_count(prior, widened))
    keep = {n: chosen[(CHANNELS, n)] for n in cost.dims}
    for n, is_dead in dead.items():
        live = sorted(protected[n] + [rest[n][i] for i in keep[n]
                                      if not bool(is_dead[rest[n][i]])])
        keep[n] = live
    return keep, {k: chosen[(HIDDEN, k)] for k in cost.hidden_dims}, head_keep


def budget_subnet(model: nn.Module, family: str, arch: str, variant: str,
                  scores: Dict[str, Tensor], cost: ResourceCost, target: float,
                  multiple_of: int = 1, hidden_scores: Optional[Dict[str, Tensor]] = None,
                  normalize: Optional[str] = None,
                  head_scores: Optional[Dict[str, Tensor]] = None,
                  prior: Union[None, str, 'ResourceCost'] = 'cost', **meta) -> SubnetSpec:
    """The subnet of ``model`` (a supernet) at ``target`` (a ratio of the baseline's count).

    Channels (``scores``) and, with hidden-unit selection, hidden units (``hidden_scores``;
    default sigmoid(β) of the hidden selectors) are ranked jointly by
    :func:`select_jointly`. :class:`BudgetError` (one line) when the target is outside
    (floor, ceiling) or the greedy cannot get within ±1 % of the baseline of it (groups of
    ``multiple_of`` too coarse). ``meta`` records the target and what was achieved (absolute
    and ratio). ``head_scores`` (attention path → a score per head; ``select_heads``): the
    heads are ranked with them, one head at a time (at least one kept); without them every
    head is kept. ``prior``: how the units are weighed against each other
    (:func:`select_units_to_budget`; recorded in ``meta['budget']['prior']``)."""
    name = f'--target-{cost.resource}'
    budget = cost.check_target(target, name, multiple_of)
    if cost.hidden_dims and hidden_scores is None:
        hidden_scores = hidden_alpha_scores(model)
    head_dims = cost.head_dims
    nested = nested_channels(model, [k for k in head_dims if k in (head_scores or {})])
    if nested:  # channels inside heads (EfficientViT): heads first, then channels
        keep, hidden_keep, head_keep = select_nested(
            nested, scores, hidden_scores or {}, head_scores, cost, budget, multiple_of,
            normalize, prior)
    else:
        selected = select_jointly(scores, hidden_scores or {}, cost, budget, multiple_of,
                                  normalize, head_scores=head_scores if head_dims else None,
                                  prior=prior)
        keep, hidden_keep = selected[:2]
        head_keep = selected[2] if len(selected) > 2 else {}
    kept = {n: len(k) for n, k in keep.items()}
    hidden_kept = {k: len(v) for k, v in hidden_keep.items()}
    achieved = cost.at(kept, hidden_kept, {k: len(v) for k, v in head_keep.items()})
    if abs(achieved - budget) > 0.01 * cost.baseline:
        raise BudgetError(
            f'{name} = {float(target):g} cannot be met within ±1 % of the baseline: the nearest '
            f'count below it in groups of {max(1, int(multiple_of))} (--multiple-of) is '
            f'{cost.ratio(achieved):.4f}; use a smaller --multiple-of')
    blocks = [BlockSelection(n, cost.dims[n], keep[n]) for n in prunable_modules(model)]
    hidden = [BlockSelection(k, cost.hidden_dims[k], hidden_keep[k]) for k in cost.hidden_dims]
    heads = [BlockSelection(k, head_dims[k], sorted(int(i) for i in v))
             for k, v in head_keep.items()]
    meta = dict(meta)
    if getattr(model, 'theta_rank', None) is not None and getattr(model, 'qk_select', None):
        meta.setdefault('theta_rank', int(model.theta_rank))  # the pruned network rebuilds it
    meta['budget'] = dict(resource=cost.resource, target_ratio=float(target),
                          target=float(budget), achieved=float(achieved),
                          achieved_ratio=cost.ratio(achieved), baseline=float(cost.baseline),
                          input_size=list(cost.input_size) if cost.input_size else None,
                          ranked='channels and hidden units' if hidden and any(
                              k in cost.hidden_dims for k in hidden_scores or {}) else 'channels')
    if heads:
        meta['budget']['ranked'] += ' and heads'
    if normalize:
        meta['budget']['normalize'] = normalize
    meta['budget']['prior'] = prior_name(prior)
    if cost.measure() is not None and cost.meta:
        # what a measured cost was made from (a latency table: device, threads, batch, file)
        meta['budget']['cost'] = {k: v for k, v in cost.meta.items()
                                  if v is None or isinstance(v, (str, int, float, bool, list))}
    if multiple_of > 1:
        meta.setdefault('multiple_of', int(multiple_of))
    return SubnetSpec(family, arch, variant, blocks, meta, hidden, heads)


#: how close a measured ratio must come to its target before the corrections stop
#: (:func:`refine_to_target`)
REFINE_TOLERANCE = 0.01
#: how far a latency target's measured ratio may be from the target: the promise of
#: docs/budgets.md (0.70 asked, 0.70 ± 0.03 measured); the export refuses a larger miss
LATENCY_TOLERANCE = 0.03
#: measured corrections of an export to a latency target unless told (tools/export_subnet.py
#: --refine, the demo)
LATENCY_REFINE = 2


@dataclass
class Try:
    """One try of :func:`refine_to_target`: the ratio the predictor was asked for, its answer
    and what was measured of it."""
    asked: float
    answer: Any
    measured: Any


def refine_to_target(answer: Any, measure: Callable[[Any], Any],
                     ask: Callable[[float], Any], target: float, tries: int,
                     tolerance: float = REFINE_TOLERANCE,
                     ratio: Callable[[Any], float] = float) -> Tuple[List[Try], int]:
    """Measured corrections of a predicted budget (docs/budgets.md): a predictor (a latency
    table) answered ``answer`` for ``target``; while the answer measured closest to the target
    is more than ``tolerance`` from it, the predictor is asked for ``asked · target /
    measured`` (the last try's measurement: where it under-predicts the region the greedy
    picks, ask for less), at most ``tries`` times. A request the predictor cannot meet
    (:class:`BudgetError`: below its floor) ends the corrections.

    Args:
        answer: the predictor's answer at ``target``.
        measure: answer → measurement; ``ratio(measurement)`` is the measured ratio.
        ask: ratio → the predictor's answer at that ratio.

    Returns:
        (every try, the index of the one measured closest to ``target``; the first on a tie).
    """
    if isinstance(tries, bool) or int(tries) != tries or tries < 0:
        raise ValueError(f'tries must be a non-negative integer, got {tries!r}')
    target = float(target)
    out = [Try(target, answer, measure(answer))]
    best = 0

    def miss(t: Try) -> float:
        return abs(float(ratio(t.measured)) - target)

    for _ in range(int(tries)):
        if miss(out[best]) <= tolerance:
            break
        asked = out[-1].asked * target / float(ratio(out[-1].measured))
        try:
            answer = ask(asked)
        except BudgetError:
            break
        out.append(Try(asked, answer, measure(answer)))
        if miss(out[-1]) < miss(out[best]):
            best = len(out) - 1
    return out, best
