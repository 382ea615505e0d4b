"""A paper model at a latency target (docs/budgets.md): its latency table on this device
(:func:`mmdcs.analysis.latency_table.build_table`, or a table given), the budget subnet that the
table predicts at the target, measured against the baseline, corrected and kept as
:func:`mmdcs.analysis.target.meet_target` does for every target (channels and, with
hidden-unit selection, hidden units, with head selection (``select_heads``) attention heads
too, ranked jointly per unit of predicted latency, widths in groups of ``multiple_of``, heads
one at a time), beside its FLOPs and parameter ratios.

The supernet has random weights and is ranked by a registered scorer (default ``'magnitude'``:
the L2 norm of every channel's and hidden unit's weights, :mod:`mmdcs.selection.importance`):
which channels go does not change the time, only how many do, so a random supernet is a
latency benchmark of the export, not of accuracy.

* :func:`latency_target_row` — one model, one batch size: the row.
* :func:`latency_budget_spec` — its subnet only (table and budget, nothing timed).
* :func:`format_latency_target` — rows as a markdown table.
"""
import time
from typing import Callable, Optional, Sequence, Union

import torch

from mmdcs.selection import SubnetSpec
from mmdcs.selection.budget import (LATENCY_TOLERANCE, REFINE_TOLERANCE, Measure, build_prior,
                                    check_prior_name)
from mmdcs.selection.importance import Ranking
from mmdcs.selection.latency_cost import LatencyCost
from .complexity import (PAPER_VARIANT, backbone_class, build_backbone, count_flops,
                         count_params)
from .latency import DTYPES, TorchRuntime, _size, device_name, time_models
from .latency_table import build_table
from .latency_table import validate as validate_table
from .target import Candidate, meet_target

#: the columns of :func:`format_latency_target`
COLUMNS = ('model', 'variant', 'input', 'device', 'dtype', 'batch', 'threads', 'target',
           'predicted_ratio', 'measured_ratio', 'measured_ratio_clock', 'flops_ratio',
           'params_ratio', 'baseline_ms', 'pruned_ms')


def supernet_pair(arch: str, variant: Optional[str] = None,
                  input_size: Union[None, int, Sequence[int]] = None,
                  select_hidden: Union[bool, str] = False, seed: int = 0,
                  select_heads: bool = False):
    """(supernet, baseline, (H, W), variant) of ``arch``: the paper's variant of the family
    unless ``variant`` is given, ``select_hidden`` and ``select_heads`` passed to the supernet
    (a family without head selection refuses ``select_heads``: ValueError), random weights
    (``seed``), eval mode, both at ``input_size`` (default: the arch's nominal size)."""
    cls = backbone_class(arch)
    size = _size(input_size, arch)
    variant = variant or PAPER_VARIANT[cls.family]
    torch.manual_seed(seed)
    kwargs = cls.size_kwargs(size)
    if select_hidden:
        kwargs['select_hidden'] = select_hidden
    if select_heads:
        kwargs['select_heads'] = True
    sup = cls(arch, variant=variant, **kwargs).eval()
    base = build_backbone(arch, 'baseline', None, size).eval()
    return sup, base, size, variant


def latency_budget(arch: str, batch: int = 1, threads: Optional[int] = 1,
                   device: str = 'cpu', dtype: str = 'fp32', *,
                   variant: Optional[str] = None,
                   input_size: Union[None, int, Sequence[int]] = None,
                   select_hidden: Union[bool, str] = False, method: str = 'magnitude',
                   multiple_of: int = 8, table: Optional[dict] = None,
                   table_rounds: int = 5, table_meter: Optional[Callable] = None,
                   seed: int = 0, progress: Optional[Callable[[str], None]] = None,
                   on_table: Optional[Callable[[dict], None]] = None,
                   select_heads: bool = False, runtime=None, prior: Optional[str] = None):
    """A paper model's latency budget on this device, before any target: the supernet, its
    table (built here unless given, in ``runtime``: default PyTorch eager) and the scorer's
    scores, made once; ``prior``: how the ranking weighs the units
    (:func:`~mmdcs.selection.budget.build_prior`: None, the latency cost's, ``'flops'``: an
    element is worth the FLOPs it does; ``'cost'``; ``'none'``). Returns ``(at, table, built,
    supernet, baseline, (H, W), variant, cost)``: ``at(ratio)`` is the budget subnet the table
    predicts at ``ratio``
    (:meth:`~mmdcs.selection.importance.Ranking.at`; ``BudgetError`` outside the table's floor
    and ceiling), ``built`` whether the table was measured here. Arguments: those of
    :func:`latency_target_row`."""
    sup, base, size, variant = supernet_pair(arch, variant, input_size, select_hidden, seed,
                                             select_heads)
    check_prior_name(prior)  # a prior not known: refused before any timing
    built = table is None
    if built:
        table = build_table(sup, base, size, batch, threads, dtype, device, table_rounds,
                            multiple_of=multiple_of, meter=table_meter, seed=seed,
                            progress=progress, runtime=runtime)
        if on_table is not None:
            on_table(table)
    cost = LatencyCost.from_table(table, sup, size)
    ranking = Ranking(sup, method, model=sup)
    weigh = build_prior(prior, sup, size, cost)

    def at(ratio: float):
        return ranking.at(cost, ratio, multiple_of, prior=weigh)
    return at, table, built, sup, base, size, variant, cost


def latency_budget_spec(arch: str, target: float, batch: int = 1, threads: Optional[int] = 1,
                        device: str = 'cpu', dtype: str = 'fp32', **kwargs):
    """The budget subnet of a paper model at a latency target, not yet measured: the first half
    of :func:`latency_target_row` (same arguments), for the benchmarks that time it beside other
    models. Returns ``(spec, table, built, baseline, (H, W), variant)``: the
    :class:`~mmdcs.selection.SubnetSpec` (its ``meta['budget']`` has the predicted ratio), the
    table used, whether it was measured here, the baseline backbone (eval mode)."""
    at, table, built, _, base, size, variant, _c = latency_budget(arch, batch, threads, device,
                                                                  dtype, **kwargs)
    return at(target), table, built, base, size, variant


def latency_target_row(arch: str, target: float, batch: int = 1, threads: Optional[int] = 1,
                       device: str = 'cpu', dtype: str = 'fp32', *,
                       variant: Optional[str] = None,
                       input_size: Union[None, int, Sequence[int]] = None,
                       select_hidden: Union[bool, str] = False, method: str = 'magnitude',
                       multiple_of: int = 8, table: Optional[dict] = None,
                       table_rounds: int = 5, table_meter: Optional[Callable] = None,
                       repeats: int = 21, warmup: int = 3, meter: Optional[Callable] = None,
                       seed: int = 0, progress: Optional[Callable[[str], None]] = None,
                       on_table: Optional[Callable[[dict], None]] = None,
                       select_heads: bool = False, validate: int = 0,
                       validate_rounds: int = 15, validate_meter: Optional[Callable] = None,
                       refine: int = 0, refine_tolerance: float = REFINE_TOLERANCE,
                       runtime=None, prior: Optional[str] = None) -> dict:
    """One paper model at a latency target on this device.

    Args:
        arch: e.g. ``'mobilevit-xs'``; variant, input_size, select_hidden, select_heads, seed:
            the supernet (:func:`supernet_pair`); with ``select_heads`` its table has head units
            (format 2) and the heads are ranked with the channels and hidden units (the
            scorer's head scores).
        target: the latency ratio to the baseline asked for, in (floor, ceiling) of the table
            (:class:`~mmdcs.selection.budget.BudgetError` otherwise, one line).
        batch, threads, device, dtype: where the table is measured and the subnet timed;
            ``runtime``: in what (default PyTorch eager; a table of another runtime is refused
            in one line).
        method: the registered scorer the channels are ranked by; ``prior``: how the ranking
            weighs the units (:func:`latency_budget`).
        multiple_of: kept widths in groups of it (and the table's grid step).
        table: a table measured before for this supernet (checked against it,
            :meth:`LatencyCost.from_table`); None: built here (``table_rounds`` rounds per grid
            point, ``table_meter``: :func:`build_table`'s ``meter``).
        repeats, warmup: the measurement's interleaved rounds (medians) and untimed calls;
            ``meter``: a synthetic meter (tests). Both clocks are read around the same calls:
            ``measured_ratio`` is the wall clock's (what a user waits), ``measured_ratio_clock``
            the table's (the calling thread's CPU time for one CPU thread: what the table
            predicts, without the time a shared machine's scheduler gives others).
        progress: called with the table builder's progress lines; ``on_table``: with a table
            built here, before the budget (which may refuse the target), e.g. to keep it.
        refine: at most this many measured corrections (:func:`~mmdcs.analysis.target.
            meet_target`: while the subnet's measured ratio on the table's clock is more than
            ``refine_tolerance`` from ``target``, the table is asked for ``asked · target /
            measured``); the measured subnet closest to the target is kept (``asked_ratio``;
            every try in ``refine_steps``). 0: the table's subnet as it is.
        validate: the predictor's error on this many random subnets of the table's supernet
            (:func:`~mmdcs.analysis.latency_table.validate`: each timed beside the baseline,
            ``validate_rounds`` interleaved rounds, medians, ``validate_meter``: its meter);
            0: not measured.

    Returns:
        dict with the :data:`COLUMNS` (``*_ratio`` of the pruned backbone to the baseline's;
        ``baseline_ms``/``pruned_ms``: measured medians per call on the table's clock),
        ``predicted_ms``, ``rounds``, ``device_name``, ``runtime`` (name, version, options),
        ``spec`` (the subnet, a dict), ``table`` (the table used), ``table_built`` (whether it
        was measured here) and ``seconds``; with ``select_heads`` also ``heads_kept`` and
        ``heads_total`` (summed over the attentions); ``asked_ratio`` (what the table was asked
        for: ``target`` unless ``refine`` moved it) and ``refine_steps`` (each try: asked,
        predicted, measured); with ``validate``: ``predictor_error`` / ``predictor_error_max``
        (mean and largest absolute error of the predicted latency ratio, in fractions of the
        baseline latency) and ``validation`` (its rows).
    """
    if dtype not in DTYPES:
        raise ValueError(f'dtype must be one of {", ".join(DTYPES)}, got {dtype!r}')
    t0 = time.perf_counter()
    runtime = runtime or TorchRuntime(device, threads, dtype)
    at, table, built, sup, base, size, variant, cost = latency_budget(
        arch, batch, threads, device, dtype, variant=variant, input_size=input_size,
        select_hidden=select_hidden, method=method, multiple_of=multiple_of, table=table,
        table_rounds=table_rounds, table_meter=table_meter, seed=seed, progress=progress,
        on_table=on_table, select_heads=select_heads, runtime=runtime, prior=prior)
    measure = cost.measure(runtime=runtime.name, rounds=repeats, warmup=warmup)
    base_flops, base_params = count_flops(base, size), count_params(base)

    def build(spec) -> Candidate:
        torch.manual_seed(seed)
        pruned = build_backbone(arch, spec.variant, spec, size).eval()
        return Candidate(spec, pruned, pruned)

    met = meet_target(cost, target, at, build, measure=measure, baseline=base, size=size,
                      seed=seed, refine=refine, refine_tolerance=refine_tolerance,
                      tolerance=None, meter=meter, runtime=runtime)
    t, spec = met.measured, met.spec
    extra = heads_kept(spec) if select_heads else {}
    if validate:  # the table's own supernet, as the budget ranked it
        v = validate_table(table, sup, base, k=validate, rounds=validate_rounds,
                           multiple_of=multiple_of, meter=validate_meter, seed=seed,
                           progress=progress, runtime=runtime)
        extra.update(predictor_error=float(v['mean_abs_error']),
                     predictor_error_max=float(v['max_abs_error']), validation=v)
    steps = [dict(asked=float(x.asked),
                  predicted_ratio=float(x.answer.spec.meta['budget']['achieved_ratio']),
                  measured_ratio=float(x.measured['ratio_wall']),
                  measured_ratio_clock=float(x.measured['ratio'])) for x in met.tries]
    b = spec.meta['budget']
    return dict(model=arch, variant=variant, input=f'{size[0]}x{size[1]}', device=device,
                device_name=device_name(device), dtype=dtype, batch=int(batch), threads=threads,
                target=float(target), predicted_ratio=float(b['achieved_ratio']),
                predicted_ms=float(b['achieved']), measured_ratio=float(t['ratio_wall']),
                measured_ratio_clock=float(t['ratio']), clock=t['clock'],
                flops_ratio=count_flops(met.candidate.backbone, size) / base_flops,
                params_ratio=count_params(met.candidate.backbone) / base_params,
                baseline_ms=t['baseline_ms'], pruned_ms=t['pruned_ms'], rounds=int(repeats),
                method=method, spec=spec.to_dict(), table=table, table_built=built,
                runtime=t['runtime'], seconds=time.perf_counter() - t0,
                asked_ratio=float(met.tries[met.best].asked), refine_steps=steps, **extra)


def heads_kept(spec) -> dict:
    """``heads_kept`` / ``heads_total``: the kept heads of a subnet's head-selected attentions
    and their number, summed (``{}`` when it lists none: every head kept)."""
    if not spec.heads:
        return {}
    return dict(heads_kept=sum(b.kept for b in spec.heads),
                heads_total=sum(b.dim for b in spec.heads))


def heads_text(row: dict) -> str:
    """A row's kept heads as ``kept/total`` (``all`` without head selection)."""
    if row.get('heads_kept') is None:
        return 'all'
    return f'{row["heads_kept"]}/{row["heads_total"]}'


def error_text(row: dict) -> str:
    """A row's predictor error as ``mean % (max %), K subnets`` (``—`` when not validated)."""
    if row.get('predictor_error') is None:
        return '—'
    return (f'{row["predictor_error"]:.1%} ({row["predictor_error_max"]:.1%}), '
            f'{row["validation"]["k"]} subnets')


def within_target(row: dict, tolerance: float = LATENCY_TOLERANCE) -> bool:
    """Whether a row's subnet measured (the table's clock) within ``tolerance`` of its target."""
    return abs(row['measured_ratio_clock'] - row['target']) <= tolerance


def format_latency_target(rows: Sequence[dict], tolerance: float = LATENCY_TOLERANCE) -> str:
    """Markdown table of :func:`latency_target_row` rows (a "heads kept" column when a row has
    head selection; the predictor's error when a row was validated; last, whether the subnet
    measured within ``tolerance`` of the target on the table's clock)."""
    with_heads = any('heads_kept' in r for r in rows)
    with_error = any('predictor_error' in r for r in rows)
    with_refine = any(len(r.get('refine_steps') or ()) > 1 for r in rows)
    lines = ['| model | variant | input | device | dtype | batch | threads | target | '
             + ('asked of the table (tries) | ' if with_refine else '') + 'predicted '
             '| measured (wall) | measured (table\'s clock) | FLOPs ratio | params ratio | '
             'baseline ms | pruned ms |' + (' heads kept |' if with_heads else '')
             + (' predictor error, mean abs. (max) |' if with_error else '')
             + f' within ±{tolerance:g} (table\'s clock) |',
             '|' + '---|' * (16 + with_refine + with_heads + with_error)]
    for r in rows:
        lines.append(
            f'| {r["model"]} | {r["variant"]} | {r["input"]} | {r["device"]} | {r["dtype"]} | '
            f'{r["batch"]} | {r["threads"]} | {r["target"]:.2f} | '
            + (f'{r.get("asked_ratio", r["target"]):.3f} ({len(r.get("refine_steps") or [1])}) | '
               if with_refine else '')
            + f'{r["predicted_ratio"]:.3f} '
            f'| {r["measured_ratio"]:.3f} | {r["measured_ratio_clock"]:.3f} ({r["clock"]}) '
            f'| {r["flops_ratio"]:.3f} | {r["params_ratio"]:.3f} '
            f'| {r["baseline_ms"]:.2f} | {r["pruned_ms"]:.2f} |'
            + (f' {heads_text(r)} |' if with_heads else '')
            + (f' {error_text(r)} |' if with_error else '')
            + (' yes |' if within_target(r, tolerance) else ' NO |'))
    return '\n'.join(lines)


def compare_subnets(arch: str, specs: dict, input_size, batch: int = 1,
                    threads: Optional[int] = 1, runtime='torch', repeats: int = 41,
                    warmup: int = 3, seed: int = 0, meter: Optional[Callable] = None) -> dict:
    """Several subnets of one paper model (name → spec, e.g. the exports of two table builds)
    timed against the baseline in one run of the harness (interleaved, medians: the machine's
    drift hits them alike), in ``runtime`` (a name or a runtime object); returns name →
    dict(flops_ratio, params_ratio, measured_ratio (the thread's CPU time for one thread, else
    the wall clock), measured_ratio_wall)."""
    size = _size(input_size, arch)
    torch.manual_seed(seed)
    base = build_backbone(arch, 'baseline', None, size).eval()
    nets = {n: build_backbone(arch, SubnetSpec.coerce(s).variant, SubnetSpec.coerce(s),
                              size).eval() for n, s in specs.items()}
    clock = 'thread' if threads == 1 else 'wall'
    name = runtime if isinstance(runtime, str) else runtime.name
    measure = Measure(runtime=name, threads=threads, batch=int(batch), rounds=repeats,
                      warmup=warmup, clock=clock)
    x = torch.randn((int(batch), 3) + tuple(size), generator=torch.Generator().manual_seed(seed))
    t = time_models(dict(nets, **{'[baseline]': base}), x, measure=measure, meter=meter,
                    runtime=None if isinstance(runtime, str) else runtime)
    b = t['[baseline]']['clocks']
    flops, params = count_flops(base, size), count_params(base)
    return {n: dict(flops_ratio=count_flops(net, size) / flops,
                    params_ratio=count_params(net) / params,
                    measured_ratio=t[n]['clocks'][clock] / b[clock],
                    measured_ratio_wall=t[n]['clocks']['wall'] / b['wall'])
            for n, net in nets.items()}
