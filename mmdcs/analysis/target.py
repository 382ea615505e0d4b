"""A budget target's life, for any resource (docs/budgets.md, *One owner for a target*): the
subnet ranked at the target, built, checked where the resource is exact or measured where it
is measured, corrected by measurement, and refused beyond the resource's tolerance — one
function, :func:`meet_target`, which the export (:func:`mmdcs.apis.export.export_subnet`: hence
``tools/export_subnet.py``, the method comparison and the demo) and the paper models at a
latency target (``tools/analysis/latency.py``) call.

What a resource is, how its target is checked and how far a measurement may miss it, its
:class:`~mmdcs.selection.budget.ResourceCost` says (``measure()``, ``count_model()``,
``tolerance``); what the network is, the caller's two steps say: ``rank(ratio)`` → a subnet
spec (:meth:`mmdcs.selection.importance.Ranking.at`) and ``build(spec)`` → a
:class:`Candidate`. Nothing here names a resource.
"""
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Union

import torch
import torch.nn as nn

from mmdcs.selection import SubnetSpec
from mmdcs.selection.budget import (REFINE_TOLERANCE, BudgetError, Measure, ResourceCost, Try,
                                    refine_to_target)
from .latency import build_runtime, measure_pair


@dataclass
class Candidate:
    """A built subnet: its spec, the pruned model an exact count counts (the kind of model the
    cost was made for: a classifier or a backbone), the pruned backbone a measurement times
    against the baseline backbone, and whatever the caller keeps with it (the export: the
    pruned weights)."""
    spec: SubnetSpec
    model: nn.Module
    backbone: nn.Module
    state: Any = None


@dataclass
class Met:
    """What :func:`meet_target` did: the candidate kept, its measurement (None: not measured;
    a dict of :func:`~mmdcs.analysis.latency.measure_pair`), every try (:class:`Try`: asked,
    answer — a :class:`Candidate` —, measured) and the index of the one kept."""
    candidate: Candidate
    measured: Optional[dict]
    tries: List[Try] = field(default_factory=list)
    best: int = 0

    @property
    def spec(self) -> SubnetSpec:
        return self.candidate.spec


class TargetMissed(BudgetError):
    """A measured subnet further from its target than the resource's tolerance: one line."""


def example_input(backbone: nn.Module, size, batch: int = 1, seed: int = 0) -> torch.Tensor:
    """A seeded random batch of ``backbone``'s input (its first convolution's channels, 3
    without one) at ``size`` (H, W)."""
    in_ch = next((m.in_channels for m in backbone.modules() if isinstance(m, nn.Conv2d)), 3)
    g = torch.Generator().manual_seed(seed)
    return torch.randn((int(batch), in_ch) + tuple(int(s) for s in size), generator=g)


def meet_target(cost: ResourceCost, target: float, rank: Callable[[float], SubnetSpec],
                build: Callable[[SubnetSpec], Candidate], *, measure: Optional[Measure] = None,
                baseline: Optional[nn.Module] = None, size=None, seed: int = 0,
                refine: int = 0, refine_tolerance: float = REFINE_TOLERANCE,
                tolerance: Union[None, float, str] = 'resource', meter: Optional[Callable] = None,
                runtime=None, name: Optional[str] = None) -> Met:
    """Meet ``target`` (a ratio of ``cost``'s baseline): rank, build, then

    * without ``measure``: an exact resource's count of the built model is checked against the
      prediction (:meth:`~ResourceCost.count_model`; a difference is an internal error);
    * with ``measure`` (a :class:`~mmdcs.selection.budget.Measure`: runtime, threads, batch,
      clock, rounds): the built backbone is timed against ``baseline`` at ``size``
      (:func:`~mmdcs.analysis.latency.measure_pair`; ``meter``, ``runtime``: injected). When
      the target's resource is itself measured (``cost.measure()`` is not None) the prediction
      is corrected by measurement (:func:`~mmdcs.selection.budget.refine_to_target`: at most
      ``refine`` tries, while the closest is more than ``refine_tolerance`` away; the tries
      are recorded in the spec's ``meta['budget']``: ``asked_ratio``, ``refine``), and a
      subnet measured further than ``tolerance`` (``'resource'``: the resource's; None: no
      check) from
      the target is :class:`TargetMissed` (one line naming the target, the measured and
      predicted ratios, and the remedies); for an exact resource the measurement is reported
      only.

    ``rank(ratio)`` → spec (:class:`BudgetError` outside the floor and ceiling; a correction
    asked below the floor ends the corrections); ``build(spec)`` → :class:`Candidate`."""
    name = name or f'--target-{cost.resource}'
    first = build(rank(float(target)))
    if measure is None:
        _check_count(cost, first)
        return Met(first, None, [Try(float(target), first, None)], 0)
    runtime = runtime or build_runtime(measure)
    x = example_input(first.backbone, size, measure.batch, seed)

    def timed(c: Candidate) -> dict:
        return measure_pair(baseline, c.backbone, x, measure, runtime, meter)

    predicted = cost.measure() is not None  # a measured resource: its prediction corrected
    tries, best = refine_to_target(first, timed, lambda r: build(rank(r)), float(target),
                                   refine if predicted else 0, refine_tolerance,
                                   ratio=lambda t: t['ratio'])
    met = Met(tries[best].answer, tries[best].measured, tries, best)
    if not predicted:
        _check_count(cost, met.candidate)
        return met
    _record_tries(met, float(target), refine)
    tolerance = cost.tolerance if tolerance == 'resource' else tolerance
    if tolerance is not None and abs(met.measured['ratio'] - target) > tolerance:
        raise TargetMissed(_missed(met, cost, name, float(target), tolerance))
    return met


def _check_count(cost: ResourceCost, c: Candidate) -> None:
    """An exact resource's count of the built model must be its prediction."""
    counted = cost.count_model(c.model)
    predicted = c.spec.meta['budget']['achieved']
    if counted is not None and abs(counted - predicted) > 1e-6 * max(1., abs(predicted)):
        raise BudgetError(f'internal: the built pruned model counts {counted:.0f} '
                          f'{cost.resource} where the budget\'s count predicts {predicted:.0f}; '
                          'nothing written (please report this)')


def _record_tries(met: Met, target: float, refine: int) -> None:
    b = met.spec.meta['budget']
    b.update(target_ratio=target, target=target * b['baseline'],
             asked_ratio=float(met.tries[met.best].asked))
    if refine:
        b['refine'] = [dict(asked=float(t.asked),
                            predicted=float(t.answer.spec.meta['budget']['achieved_ratio']),
                            measured=float(t.measured['ratio'])) for t in met.tries]


def _missed(met: Met, cost: ResourceCost, name: str, target: float, tolerance: float) -> str:
    t, b, tries = met.measured, met.spec.meta['budget'], met.tries
    source = (b.get('cost') or {}).get('table') or f'the {cost.resource} prediction'
    several = len(tries) > 1
    return (f'{name} {target:g}: the exported subnet measured {t["ratio"]:.3f} of the '
            f'baseline\'s {cost.resource} here ({t["pruned_ms"]:.2f} / {t["baseline_ms"]:.2f} '
            f'ms in {t["runtime"]["name"]}; predicted {b["achieved_ratio"]:.3f} by {source}'
            + (f', the closest of {len(tries)} tries measured '
               + ', '.join(f'{x.measured["ratio"]:.3f}' for x in tries)
               + ' (asked for ' + ', '.join(f'{x.asked:.3f}' for x in tries) + ')'
               if several else '')
            + f'), outside ±{tolerance:g}; nothing written. --refine N corrects with '
            'measurements, a table measured again on a quiet machine predicts better, '
            '--latency-tolerance T accepts a wider miss, --no-measure exports the prediction '
            'unmeasured')
