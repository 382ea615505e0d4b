"""A paper model at a latency target (issue 23 item 6; docs/budgets.md): its latency table on
this device (:func:`mmdcs.analysis.latency_table.build_table`, or a table given), the budget
subnet that the table predicts at the target (:func:`mmdcs.selection.budget.budget_subnet`:
channels and, with hidden-unit selection, hidden units, with head selection (``select_heads``)
attention heads too, ranked jointly per unit of predicted latency, widths in groups of
``multiple_of``, heads one at a time), then that subnet **measured** against the baseline
(interleaved rounds, medians: :func:`mmdcs.analysis.latency.time_models`), beside its FLOPs and
parameter ratios.

The supernet has random weights and is ranked by a registered scorer (default ``'magnitude'``:
the L2 norm of every channel's and hidden unit's weights, :mod:`mmdcs.selection.importance`):
which channels go does not change the time, only how many do, so a random supernet is a
latency benchmark of the export, not of accuracy.

* :func:`latency_target_row` — one model, one batch size: the row.
* :func:`latency_budget_spec` — its subnet only (table and budget, nothing timed).
* :func:`format_latency_target` — rows as a markdown table.
"""
import statistics
import time
from typing import Callable, Optional, Sequence, Union

import torch

from mmdcs.selection.importance import get_scorer
from mmdcs.selection.budget import (LATENCY_TOLERANCE, REFINE_TOLERANCE, budget_subnet,
                                    refine_to_target)
from mmdcs.selection.latency_cost import LatencyCost
from .complexity import (PAPER_VARIANT, backbone_class, build_backbone, count_flops,
                         count_params)
from .latency import _size, num_threads, time_models
from .latency_table import (CLOCKS, DTYPES, WallTimer, _rounds, build_table, default_clock,
                            device_name)
from .latency_table import validate as validate_table

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
                   table_rounds: int = 5, table_timer: Optional[Callable] = None,
                   seed: int = 0, progress: Optional[Callable[[str], None]] = None,
                   on_table: Optional[Callable[[dict], None]] = None,
                   select_heads: bool = False):
    """A paper model's latency budget on this device, before any target: the supernet, its
    table (built here unless given) and the scorer's scores, made once. Returns ``(at, table,
    built, supernet, baseline, (H, W), variant)``: ``at(ratio)`` is the budget subnet the table
    predicts at ``ratio`` (:func:`~mmdcs.selection.budget.budget_subnet`; ``BudgetError``
    outside the table's floor and ceiling), ``built`` whether the table was measured here.
    Arguments: those of :func:`latency_target_row`."""
    sup, base, size, variant = supernet_pair(arch, variant, input_size, select_hidden, seed,
                                             select_heads)
    built = table is None
    if built:
        table = build_table(sup, base, size, batch, threads, dtype, device, table_rounds,
                            multiple_of=multiple_of, timer=table_timer, seed=seed,
                            progress=progress)
        if on_table is not None:
            on_table(table)
    cost = LatencyCost.from_table(table, sup, size)
    scorer = get_scorer(method)
    scores, hidden_scores = scorer(sup, model=sup)
    # heads ranked with channels and hidden units (a table with head units: checked above)
    head_scores = (scorer.heads(sup) or None) if select_heads and scorer.heads else None

    def at(ratio: float):
        return budget_subnet(sup, sup.family, arch, variant, scores, cost, ratio, multiple_of,
                             hidden_scores=hidden_scores, normalize=scorer.normalize,
                             method=method, head_scores=head_scores)
    return at, table, built, sup, base, size, variant


def latency_budget_spec(arch: str, target: float, batch: int = 1, threads: Optional[int] = 1,
                        device: str = 'cpu', dtype: str = 'fp32', **kwargs):
    """The budget subnet of a paper model at a latency target, not yet measured: the first half
    of :func:`latency_target_row` (same arguments), for the benchmarks that time it beside other
    models. Returns ``(spec, table, built, baseline, (H, W), variant)``: the
    :class:`~mmdcs.selection.SubnetSpec` (its ``meta['budget']`` has the predicted ratio), the
    table used, whether it was measured here, the baseline backbone (eval mode)."""
    at, table, built, _, base, size, variant = latency_budget(arch, batch, threads, device,
                                                              dtype, **kwargs)
    return at(target), table, built, base, size, variant


def latency_target_row(arch: str, target: float, batch: int = 1, threads: Optional[int] = 1,
                       device: str = 'cpu', dtype: str = 'fp32', *,
                       variant: Optional[str] = None,
                       input_size: Union[None, int, Sequence[int]] = None,
                       select_hidden: Union[bool, str] = False, method: str = 'magnitude',
                       multiple_of: int = 8, table: Optional[dict] = None,
                       table_rounds: int = 5, table_timer: Optional[Callable] = None,
                       repeats: int = 21, warmup: int = 3, timer: Optional[Callable] = None,
                       clock_timer: Optional[Callable] = None, seed: int = 0,
                       progress: Optional[Callable[[str], None]] = None,
                       on_table: Optional[Callable[[dict], None]] = None,
                       select_heads: bool = False, validate: int = 0,
                       validate_rounds: int = 15,
                       validate_timer: Optional[Callable] = None, refine: int = 0,
                       refine_tolerance: float = REFINE_TOLERANCE) -> dict:
    """One paper model at a latency target on this device.

    Args:
        arch: e.g. ``'mobilevit-xs'``; variant, input_size, select_hidden, select_heads, seed:
            the supernet (:func:`supernet_pair`); with ``select_heads`` its table has head units
            (format 2) and the heads are ranked with the channels and hidden units (the
            scorer's head scores).
        target: the latency ratio to the baseline asked for, in (floor, ceiling) of the table
            (:class:`~mmdcs.selection.budget.BudgetError` otherwise, one line).
        batch, threads, device, dtype: where the table is measured and the subnet timed.
        method: the registered scorer the channels are ranked by.
        multiple_of: kept widths in groups of it (and the table's grid step).
        table: a table measured before for this supernet (checked against it,
            :meth:`LatencyCost.from_table`); None: built here (``table_rounds`` rounds per grid
            point, ``table_timer``: :func:`build_table`'s ``timer``).
        repeats, warmup: the measurement's interleaved rounds (medians) and untimed calls;
            ``timer``: a replacement of :func:`~mmdcs.analysis.latency.time_models` with its
            signature (e.g. a synthetic one in tests); it reads the wall clock (what a user
            waits). ``measured_ratio_clock``: the same rounds timed with the table's clock
            (the calling thread's CPU time for one CPU thread: what the table predicts, without
            the time a shared machine's scheduler gives others; ``clock_timer``: a
            :class:`~mmdcs.analysis.latency_table.WallTimer` replacement), the wall-clock ratio
            again where the table's clock is the wall clock.
        progress: called with the table builder's progress lines; ``on_table``: with a table
            built here, before the budget (which may refuse the target), e.g. to keep it.
        refine: at most this many measured corrections: while the subnet's measured ratio
            (the table's clock) is more than ``refine_tolerance`` from ``target``, the table is
            asked for ``asked · target / measured`` and the subnet exported and measured again
            (where the table under-predicts the region the export picks, as a greedy on a
            predictor's errors tends to); the measured subnet closest to the target is kept
            (``asked_ratio``; every try in ``refine_steps``). 0: the table's subnet as it is.
        validate: the predictor's error on this many random subnets of the table's supernet
            (:func:`~mmdcs.analysis.latency_table.validate`: each timed beside the baseline,
            ``validate_rounds`` interleaved rounds, medians, ``validate_timer``: its timer);
            0: not measured.

    Returns:
        dict with the :data:`COLUMNS` (``*_ratio`` of the pruned backbone to the baseline's;
        ``baseline_ms``/``pruned_ms``: measured medians per call), ``predicted_ms``,
        ``rounds``, ``device_name``, ``spec`` (the subnet, a dict), ``table`` (the table used),
        ``table_built`` (whether it was measured here) and ``seconds``; with
        ``select_heads`` also ``heads_kept`` and ``heads_total`` (summed over the attentions);
        ``asked_ratio`` (what the table was asked for: ``target`` unless ``refine`` moved it)
        and ``refine_steps`` (each try: asked, predicted, measured);
        with ``validate``: ``predictor_error`` / ``predictor_error_max`` (mean and largest
        absolute error of the predicted latency ratio, in fractions of the baseline latency)
        and ``validation`` (its rows).
    """
    if dtype not in DTYPES:
        raise ValueError(f'dtype must be one of {", ".join(DTYPES)}, got {dtype!r}')
    t0 = time.perf_counter()
    at, table, built, sup, base, size, variant = latency_budget(
        arch, batch, threads, device, dtype, variant=variant, input_size=input_size,
        select_hidden=select_hidden, method=method, multiple_of=multiple_of, table=table,
        table_rounds=table_rounds, table_timer=table_timer, seed=seed, progress=progress,
        on_table=on_table, select_heads=select_heads)
    spec = at(target)
    dev, tdtype = torch.device(device), DTYPES[dtype]
    in_ch = next((m.in_channels for m in base.modules() if isinstance(m, torch.nn.Conv2d)), 3)
    x = torch.randn((int(batch), in_ch) + tuple(size),
                    generator=torch.Generator().manual_seed(seed)).to(dev, tdtype)
    base_flops, base_params = count_flops(base, size), count_params(base)  # before any .to()
    base = base.to(dev, tdtype)
    clock = table.get('clock')
    if clock not in CLOCKS:  # not recorded, or a table built with an injected timer
        clock = default_clock(device, threads)

    def measure(spec):
        """(FLOPs and params ratios, baseline ms, pruned ms, ratio with the table's clock)."""
        torch.manual_seed(seed)
        pruned = build_backbone(arch, spec.variant, spec, size).eval()
        counts = (count_flops(pruned, size) / base_flops, count_params(pruned) / base_params)
        models = dict(baseline=base, pruned=pruned.to(dev, tdtype))
        t = (timer or time_models)(models, x, warmup=warmup, repeats=repeats,
                                   threads=threads if dev.type == 'cpu' else None)
        b_ms, p_ms = float(t['baseline']['median_ms']), float(t['pruned']['median_ms'])
        ratio_clock = p_ms / b_ms
        if clock != 'wall' or clock_timer is not None:
            ct = clock_timer or WallTimer(device=dev, clock=clock)
            fns = {k: ((lambda m=m: m(x)), m) for k, m in models.items()}
            with num_threads(threads if dev.type == 'cpu' else None):
                r = _rounds(fns, repeats, warmup, ct)
            ratio_clock = statistics.median(r['pruned']) / statistics.median(r['baseline'])
        return counts, b_ms, p_ms, ratio_clock

    # measured corrections: the table under- or over-predicts the region the export picks
    tries, best = refine_to_target(spec, measure, at, target, refine, refine_tolerance,
                                   ratio=lambda m: m[3])
    steps = [dict(asked=float(t.asked),
                  predicted_ratio=float(t.answer.meta['budget']['achieved_ratio']),
                  measured_ratio=t.measured[2] / t.measured[1],
                  measured_ratio_clock=t.measured[3]) for t in tries]
    spec, asked = tries[best].answer, tries[best].asked
    (flops_ratio, params_ratio), b_ms, p_ms, ratio_clock = tries[best].measured
    b = spec.meta['budget']
    extra = heads_kept(spec) if select_heads else {}
    if validate:  # the table's own supernet, as the budget ranked it
        v = validate_table(table, sup, base, k=validate, rounds=validate_rounds,
                           multiple_of=multiple_of, timer=validate_timer, seed=seed,
                           progress=progress)
        extra.update(predictor_error=float(v['mean_abs_error']),
                     predictor_error_max=float(v['max_abs_error']), validation=v)
    return dict(model=arch, variant=variant, input=f'{size[0]}x{size[1]}', device=device,
                device_name=device_name(dev), dtype=dtype, batch=int(batch), threads=threads,
                target=float(target), predicted_ratio=float(b['achieved_ratio']),
                predicted_ms=float(b['achieved']), measured_ratio=p_ms / b_ms,
                measured_ratio_clock=ratio_clock, clock=clock,
                flops_ratio=flops_ratio, params_ratio=params_ratio, baseline_ms=b_ms,
                pruned_ms=p_ms, rounds=int(repeats), method=method, spec=spec.to_dict(),
                table=table, table_built=built, seconds=time.perf_counter() - t0,
                asked_ratio=asked, refine_steps=steps, **extra)


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
