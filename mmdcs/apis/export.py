"""The export of a searched (or, for the magnitude pruner, a baseline) network's subnet, as one
call (method.md §4, §11; docs/budgets.md): :func:`export_subnet` writes ``OUT/subnet.json`` and
the pruned whole model's weights, and returns an :class:`ExportResult` whose ``lines`` are the
report ``tools/export_subnet.py`` prints. ``tools/export_subnet.py``, ``tools/demo.py`` and the
analysis tools call it.

Without a target the subnet is the deterministic gates {α > 0} (and {β > 0}). With a target
``(resource, ratio)`` the channels of every block and, with hidden-unit selection, the hidden
units of every hidden-selected module are ranked jointly by a registered scorer
(:mod:`mmdcs.selection.importance`: ``'alpha'``, ``'magnitude'``, ...) per unit of marginal cost
of the budget's :class:`~mmdcs.selection.budget.ResourceCost` and removed greedily until the
budget is met (:func:`mmdcs.selection.budget.budget_subnet`).

Bad input raises :class:`~mmdcs.apis.launch.UserError` (one line; the tools exit 2) before
anything is written; both files are written or neither (:mod:`mmdcs.apis.outputs`).
"""
import copy
import os.path as osp
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn

import mmdcs
from mmdcs.analysis import complexity
from mmdcs.analysis.complexity import count_flops, count_params
from mmdcs.analysis.latency import time_models
from mmdcs.analysis.latency_table import CLOCKS, clock_timer, device_name
from mmdcs.selection import (architecture_state_keys, file_sha256, in_search_state,
                             prunable_modules, search_state_keys)
from mmdcs.selection.budget import (LATENCY_TOLERANCE, REFINE_TOLERANCE, BudgetError,
                                    budget_subnet, build_cost, refine_to_target)
from mmdcs.selection.importance import get_scorer, scorer_names, widths_subnet
from .launch import UserError
from .loading import dataset_batches
from .outputs import atomic_outputs, check_output_dir, refuse_overwrite
from .subnet_io import (backbone_cfg_of, backbone_prefix, block_summary, build_model,
                        complexity_lines, config_input_size, export_meta, human,
                        load_model_checkpoint, load_task_config, mmdcs_backbone,
                        pruned_model_state, require_checkpoint, require_supernet,
                        save_pruned_checkpoint, shape_arg, usage_lines, with_subnet)

#: file formats of the pruned weights
FORMATS = ('pth', 'safetensors')
#: what the exported model is measured by (mmengine.analysis) besides the budget's resource
COUNTED = ('flops', 'params')


@dataclass
class ExportResult:
    """What :func:`export_subnet` did.

    Attributes:
        spec: the exported :class:`~mmdcs.selection.SubnetSpec` (also in ``subnet``).
        subnet: path of ``subnet.json``; checkpoint: path of the pruned weights.
        rows: (what, params, FLOPs) of the backbone (and whole model) before and after.
        max_diff: max |pruned − supernet| of the eval outputs (None when not verified).
        budget: ``spec.meta['budget']`` (None without a target): target, achieved and measured.
        latency: the measured latency (``measure=True``): dict(baseline_ms, pruned_ms, ratio,
            rounds, threads, batch, device), else None.
        empty: blocks without any α > 0 (they keep their best channel).
        lines: the report, to print on stdout; warnings: lines for stderr.
    """
    spec: Any
    subnet: str
    checkpoint: str
    rows: List[Tuple[str, int, int]]
    max_diff: Optional[float] = None
    budget: Optional[dict] = None
    latency: Optional[dict] = None
    empty: List[str] = field(default_factory=list)
    lines: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        """The dict ``tools/export_subnet.py``'s ``export()`` returned before this API."""
        return dict(spec=self.spec, rows=self.rows, max_diff=self.max_diff,
                    subnet=self.subnet, checkpoint=self.checkpoint, latency=self.latency)


def magnitude_supernet_cfg(model_cfg) -> None:
    """For a scorer that reads a baseline checkpoint (the magnitude pruner): a baseline
    backbone config becomes the supernet with MLP channel selection only (variant
    'dcs-arch2': the baseline's layers and names, plus α), so that a baseline checkpoint loads
    into it and its subnet is built as usual."""
    b = backbone_cfg_of(model_cfg)
    if b.get('variant', 'baseline') in (None, 'baseline'):
        b['variant'] = 'dcs-arch2'
    b.pop('subnet', None)
    if isinstance(model_cfg, dict) and 'cost' in model_cfg:
        model_cfg.pop('cost')


def load_baseline_checkpoint(model: nn.Module, checkpoint: str) -> dict:
    """Load a baseline (or supernet) checkpoint into a supernet (a scorer that reads weights,
    e.g. magnitude): the architecture parameters a baseline lacks may be missing, the state a
    search keeps beside its network (a search checkpoint's ``cost_mu``) may be there — both
    found from the model's kind (:func:`~mmdcs.selection.architecture_state_keys`,
    :func:`~mmdcs.selection.search_state_keys`); any other missing or unexpected tensor (a
    checkpoint of another model) is refused in one line."""
    from mmengine.runner.checkpoint import _load_checkpoint
    ckpt = _load_checkpoint(checkpoint, map_location='cpu')
    state = ckpt.get('state_dict', ckpt)
    state = {k[7:] if k.startswith('module.') else k: v for k, v in state.items()}
    searched = search_state_keys(model)
    state = {k: v for k, v in state.items() if not in_search_state(k, searched)}
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as e:  # torch: tensors of another shape
        shape = next((ln.strip() for ln in str(e).splitlines() if 'size mismatch' in ln), str(e))
        raise UserError(f'{checkpoint} does not fit the config\'s model: {shape[:300]}') \
            from None
    optional = architecture_state_keys(model)
    missing = [k for k in missing if k not in optional and not in_search_state(k, searched)]
    if missing or unexpected:
        raise UserError(f'{checkpoint} does not fit the config\'s model: missing keys '
                        f'{missing[:5]}, unexpected keys {unexpected[:5]}')
    return ckpt


def require_pruned(model: nn.Module):
    """The pruned mmdcs backbone of a model built from a subnet (an internal error if none)."""
    b = mmdcs_backbone(model)
    if b is None or b.subnet_spec is None:
        raise UserError('internal: the model built from the subnet has no pruned mmdcs backbone')
    return b


def in_channels(backbone: nn.Module) -> int:
    """The input channels of a backbone (its first convolution's; 3 without one)."""
    for m in backbone.modules():
        if isinstance(m, nn.Conv2d):
            return m.in_channels
    return 3


def _outputs(model, x, classifier):
    with torch.no_grad():
        out = model(x, mode='tensor') if classifier else model.backbone(x) if hasattr(
            model, 'backbone') else model(x)
    return out if isinstance(out, (tuple, list)) else (out, )


def _target(target, method: str):
    """(resource, ratio) or (None, None); a scorer that reads a baseline needs a target."""
    if target is not None:
        resource, ratio = target
        return resource, ratio
    if get_scorer(method).baseline:
        raise UserError(f'--method {method} needs a budget: --target-flops R or '
                        '--target-params R')
    return None, None


def _cost(counted: nn.Module, resource: str, shape, cost, options: dict, costs: Dict[str, Any]):
    """The budget's :class:`~mmdcs.selection.budget.ResourceCost`: ``cost`` itself, or built by
    name (:func:`~mmdcs.selection.budget.build_cost`: the calibrated exact count for FLOPs and
    parameters, a latency table for latency, with ``options`` such as ``latency_table``); a
    table that cannot be used is one line (:class:`UserError`)."""
    if cost is not None:
        return cost
    if resource in costs and not options:
        return costs[resource]
    try:
        return build_cost(resource, counted, shape, **options)
    except BudgetError:
        raise
    except (ValueError, KeyError, OSError) as e:
        what = str(next(iter(options.values()), resource))
        raise UserError(str(e) if what in str(e) else f'{what}: {e}') from e


def train_batches(n: int = 4, batch_size: int = 32, seed: int = 0) -> Callable:
    """``batches(cfg, model, scope)`` for :func:`export_subnet`: ``n`` batches of a seeded
    random subset of the config's training set (the test pipeline: no augmentation),
    preprocessed by the model's data preprocessor, as ``(inputs, labels)``."""
    def batches(cfg, model, scope):
        if not hasattr(model, 'head'):
            raise UserError('this ranking method needs a classifier config (its loss on the '
                            'training data)')
        return dataset_batches(cfg, model, scope, 'train', max_images=n * batch_size,
                               batch_size=batch_size, seed=seed)
    return batches


def export_subnet(config: str, checkpoint: str, out_dir: str, *, method: str = 'alpha',
                  target: Optional[Tuple[str, float]] = None, cost=None,
                  cost_options: Optional[dict] = None, multiple_of: int = 1,
                  shape: Union[None, Sequence[int]] = None, cfg_options: Optional[dict] = None,
                  verify: bool = True, fmt: str = 'pth', force: bool = False,
                  measure: bool = False, measure_options: Optional[dict] = None,
                  batches: Union[None, Sequence, Callable] = None,
                  scorer_options: Optional[dict] = None, refine: int = 0,
                  refine_tolerance: float = REFINE_TOLERANCE,
                  latency_tolerance: Optional[float] = LATENCY_TOLERANCE) -> ExportResult:
    """Export the subnet of ``checkpoint`` (a supernet's, or a baseline's for a scorer that
    reads one) to ``out_dir``.

    Args:
        config: the config the checkpoint was trained with.
        checkpoint: its weights.
        out_dir: where ``subnet.json`` and ``pruned.FMT`` go.
        method: a registered scorer (:func:`mmdcs.selection.importance.scorer_names`).
        target: ``(resource, ratio)``: meet ``ratio`` × the baseline's count of ``resource``
            (``'flops'``, ``'params'``, or another resource of ``cost``); None: keep {α > 0}.
        cost: the budget's :class:`~mmdcs.selection.budget.ResourceCost` for ``target``;
            default: built by name (:func:`~mmdcs.selection.budget.build_cost`: the exact
            count calibrated with mmengine at ``shape`` for FLOPs and parameters).
        cost_options: options of the resource's builder (``latency_table=PATH`` for latency).
        multiple_of: every kept width a multiple of it (or the full width).
        shape: input size H [W] of the counts (default: the config's input size).
        cfg_options: overrides of the config.
        verify: check that the pruned model gives the supernet's eval output (without a
            target).
        fmt: ``'pth'`` or ``'safetensors'``.
        force: replace existing results.
        measure: time the exported model against the baseline (interleaved, medians:
            :func:`mmdcs.analysis.latency.time_models`, or with a latency target the table's
            clock, :func:`~mmdcs.analysis.latency_table.clock_timer`); ``measure_options``: its
            keyword arguments (``repeats``, ``warmup``, ``threads`` and ``batch``: by default
            the latency table's, else 1; ``timer``: a replacement of ``time_models`` with its
            signature).
        batches: data for a scorer that needs it (an iterable of batches, or a callable
            ``batches(cfg, model, scope)`` returning one, called with the config and the model
            loaded here: e.g. :func:`train_batches`).
        scorer_options: more context of the scorer (``seed`` and ``widths`` of ``'random'``).
        refine: with a latency target and ``measure``: at most this many measured corrections
            (:func:`~mmdcs.selection.budget.refine_to_target`): while the subnet measured
            closest to the target is more than ``refine_tolerance`` from it, the table is asked
            for ``asked · target / measured`` and that subnet built and measured; the closest is
            exported (``meta['budget']``: ``asked_ratio`` and every try in ``refine``).
        latency_tolerance: with a latency target and ``measure``: a subnet measured further than
            this from the target is refused (:class:`UserError`, one line, nothing written);
            None: exported whatever was measured.
    """
    shape = shape_arg(shape)
    if isinstance(multiple_of, bool) or not isinstance(multiple_of, int) or multiple_of < 1:
        raise UserError(f'--multiple-of must be a positive integer, got {multiple_of}')
    if method not in scorer_names():
        raise UserError(f'--method {method!r} is not a ranking method; known: '
                        f'{", ".join(scorer_names())}')
    if fmt not in FORMATS:
        raise UserError(f'--format must be one of {", ".join(FORMATS)}, got {fmt!r}')
    scorer = get_scorer(method)
    subnet_path = osp.join(out_dir, 'subnet.json')
    ckpt_path = osp.join(out_dir, f'pruned.{fmt}')
    check_output_dir(out_dir, '--out')
    refuse_overwrite((subnet_path, ckpt_path), force)
    require_checkpoint(config, checkpoint)
    cfg, scope = load_task_config(config, cfg_options)
    resource, ratio = _target(target, method)
    if scorer.needs_data and resource is not None and batches is None:
        raise UserError(f'--method {method} needs data batches to score the channels')
    if scorer.baseline:
        magnitude_supernet_cfg(cfg.model)
    model = build_model(cfg.model, scope)
    backbone = require_supernet(model, config)
    ckpt = (load_baseline_checkpoint if scorer.baseline else load_model_checkpoint)(
        model, checkpoint)
    model.eval()

    sha = file_sha256(checkpoint)
    if shape is None:
        shape, source = config_input_size(cfg, backbone)
    else:
        source = '--shape'
    classifier = scope in ('mmpretrain', 'mmdcs') and hasattr(model, 'head')
    counted_model = model if classifier else backbone
    meta = export_meta(config, checkpoint, sha)
    costs: Optional[Dict[str, Any]] = None
    if resource is None:
        spec = backbone.export_subnet(multiple_of=multiple_of, **meta)
        empty = [name for name, m in prunable_modules(backbone).items()
                 if not bool((m.select.alpha > 0).any())]
    else:
        options = dict(cost_options or {})
        # another resource's cost (a latency table) first: a table that does not fit is refused
        # before the calibrations
        budget_cost = (None if resource in COUNTED else
                       _cost(counted_model, resource, shape, cost, options, {}))
        if budget_cost is not None:  # a target outside (floor, ceiling): refused at once
            budget_cost.check_target(ratio, f'--target-{resource}', multiple_of)
        # the exact counts are calibrated in any case: the built model is checked against them
        costs = {r: complexity.calibrate_cost(counted_model, r, shape) for r in COUNTED}
        if budget_cost is None:
            budget_cost = _cost(counted_model, resource, shape, cost, options, costs)
        ctx = dict(scorer_options or {}, model=model)
        if scorer.needs_data:
            ctx['batches'] = batches(cfg, model, scope) if callable(batches) else batches
        scores, hidden_scores = scorer(backbone, **ctx)
        head_scores = (scorer.heads(backbone) or None) if scorer.heads is not None else None

        def spec_at(r: float):
            """The subnet the budget's cost gives at ratio ``r`` (``BudgetError``: one line)."""
            if scorer.widths is not None:  # the scorer's own widths, its scores inside blocks
                budget = budget_cost.check_target(r, f'--target-{resource}', multiple_of)
                kept, hidden_kept = scorer.widths(budget_cost, budget, multiple_of, **ctx)
                s = widths_subnet(backbone, backbone.family, backbone.arch, backbone.variant,
                                  budget_cost, r, kept, hidden_kept, scores, hidden_scores,
                                  method, multiple_of, **meta)
                if 'seed' in ctx and method == 'random':
                    s.meta['seed'] = int(ctx['seed'])
                return s
            # channels and hidden units ranked jointly (BudgetError: nothing written)
            return budget_subnet(backbone, backbone.family, backbone.arch, backbone.variant,
                                 scores, budget_cost, r, multiple_of,
                                 hidden_scores=hidden_scores, normalize=scorer.normalize,
                                 head_scores=head_scores, method=method, **meta)
        spec = spec_at(ratio)
        costs.setdefault(resource, budget_cost)
        empty = []

    def build(spec):
        """(state, pruned model, its backbone): the whole model with the backbone pruned, then
        the pruned model built from the spec alone, loaded with that state."""
        state = pruned_model_state(model, spec, backbone_cfg_of(cfg.model))
        pruned = build_model(with_subnet(cfg.model, spec.to_dict()), scope)
        missing, unexpected = pruned.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise UserError(f'internal: the pruned weights do not fit the model built from the '
                            f'subnet (missing {missing[:5]}, unexpected {unexpected[:5]})')
        pruned.eval()
        return state, pruned, require_pruned(pruned)

    state, pruned, pruned_backbone = build(spec)
    full_shape = (1, in_channels(backbone)) + tuple(shape)
    latency, notes, tries = None, [], None
    aimed = measure and costs is not None and resource not in COUNTED
    if measure:
        options = dict(measure_options or {})
        table = getattr(costs.get(resource), 'table', None) if costs else None
        if isinstance(table, dict):  # measure where the table was measured, unless told
            for key in ('threads', 'batch'):
                if options.get(key) is None and isinstance(table.get(key), int):
                    options[key] = table[key]
            if options.get('timer') is None and table.get('clock') in CLOCKS:
                options['timer'] = clock_timer(table['clock'])  # the clock it predicts

        base = baseline_backbone(cfg, scope, options.get('seed', 0))  # once for every try

        def timed(built):
            return measure_latency(cfg, scope, built[2], classifier, full_shape, base=base,
                                   **options)

        def candidate(r: float):
            s_ = spec_at(r)
            return (s_, ) + build(s_)

        if aimed:  # measured corrections while the table misses (refine_to_target)
            tries, best = refine_to_target((spec, state, pruned, pruned_backbone), timed,
                                           candidate, ratio, refine, refine_tolerance,
                                           ratio=lambda t: t['ratio'])
            (spec, state, pruned, pruned_backbone), latency = tries[best].answer, \
                tries[best].measured
            b = spec.meta['budget']
            b.update(target_ratio=float(ratio), target=float(ratio) * b['baseline'],
                     asked_ratio=float(tries[best].asked))
            if refine:
                b['refine'] = [dict(asked=float(t.asked),
                                    predicted=float(t.answer[0].meta['budget']['achieved_ratio']),
                                    measured=float(t.measured['ratio'])) for t in tries]
        else:
            latency = timed((spec, state, pruned, pruned_backbone))
        check = getattr(costs.get(resource), 'context_warnings', None) if costs else None
        if check is not None:  # a table measured elsewhere: a warning naming both
            notes = check(device_name=latency['device_name'], threads=latency['threads'],
                          batch=latency['batch'], dtype='fp32', warn=False)
        if aimed and latency_tolerance is not None and \
                abs(latency['ratio'] - ratio) > latency_tolerance:
            b = spec.meta['budget']
            raise UserError(
                f'--target-latency {ratio:g}: the exported subnet measured {latency["ratio"]:.3f} '
                f'of the baseline\'s latency here ({latency["pruned_ms"]:.2f} / '
                f'{latency["baseline_ms"]:.2f} ms; predicted {b["achieved_ratio"]:.3f} by '
                f'{(b.get("cost") or {}).get("table") or "the table"}'
                + (f', the closest of {len(tries)} tries measured ' + ', '.join(
                    f'{t.measured["ratio"]:.3f}' for t in tries)
                   + ' (table asked for ' + ', '.join(f'{t.asked:.3f}' for t in tries) + ')'
                   if tries and len(tries) > 1 else '')
                + f'), outside ±{latency_tolerance:g}; nothing written. --refine N corrects '
                'with measurements, a table measured again on a quiet machine predicts better, '
                '--latency-tolerance T accepts a wider miss, --no-measure exports the '
                'prediction unmeasured')
    rows = [('backbone, supernet', count_params(backbone), count_flops(backbone, full_shape)),
            ('backbone, pruned', count_params(pruned_backbone),
             count_flops(pruned_backbone, full_shape))]
    if classifier:
        rows += [('whole model, supernet', count_params(model), count_flops(model, full_shape)),
                 ('whole model, pruned', count_params(pruned), count_flops(pruned, full_shape))]

    if costs is not None:  # what the budget achieved, measured on the built pruned model
        counted = rows[3] if classifier else rows[1]
        spec.meta['budget']['measured'] = {
            r: dict(baseline=costs[r].baseline, pruned=counted[2 if r == 'flops' else 1],
                    ratio=counted[2 if r == 'flops' else 1] / costs[r].baseline)
            for r in COUNTED}
        if resource in COUNTED:
            measured = spec.meta['budget']['measured'][resource]['pruned']
            predicted = spec.meta['budget']['achieved']
            if abs(measured - predicted) > 1e-6 * max(1., abs(predicted)):
                raise UserError(f'internal: the built pruned model counts {measured:.0f} '
                                f'{resource} where the budget\'s count predicts {predicted:.0f}; '
                                'nothing written (please report this)')
    if latency is not None and costs is not None:
        spec.meta['budget']['measured']['latency'] = dict(latency)
    max_diff = ref = None
    if verify and costs is None:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(full_shape, generator=g)
        ref = _outputs(model, x, classifier)
        out = _outputs(pruned, x, classifier)
        max_diff = max(float((a - b).abs().max()) for a, b in zip(ref, out))

    src_meta = ckpt.get('meta', None) or {}
    ckpt_meta = dict(
        mmdcs_version=mmdcs.__version__, subnet=spec.to_dict(),
        input_shape=list(full_shape),
        params=dict(backbone_supernet=rows[0][1], backbone_pruned=rows[1][1]),
        flops=dict(backbone_supernet=rows[0][2], backbone_pruned=rows[1][2]),
        **{k: v for k, v in spec.meta.items()})
    if isinstance(src_meta, dict) and 'dataset_meta' in src_meta:
        ckpt_meta['dataset_meta'] = src_meta['dataset_meta']
    # both files or neither, never a half-written one (temporary files renamed at the end)
    with atomic_outputs(subnet_path, ckpt_path, force=force) as (subnet_tmp, ckpt_tmp):
        spec.save(subnet_tmp)
        save_pruned_checkpoint(ckpt_tmp, state, ckpt_meta)

    result = ExportResult(spec, subnet_path, ckpt_path, rows, max_diff,
                          spec.meta.get('budget') if costs is not None else None, latency, empty,
                          warnings=[f'WARNING: {n}' for n in notes])
    _report(result, config, checkpoint, sha, backbone, model, shape, source, full_shape,
            classifier, method, resource, ratio, ref, out_dir)
    return result


def baseline_backbone(cfg, scope: str, seed: int = 0) -> nn.Module:
    """The config's backbone with ``variant='baseline'`` (no selection, no subnet, random
    weights: time depends only on the shapes), eval mode."""
    base_cfg = copy.deepcopy(cfg.model)
    b = backbone_cfg_of(base_cfg)
    b['variant'] = 'baseline'
    for k in ('subnet', 'init_cfg', 'select_hidden'):
        b.pop(k, None)
    if isinstance(base_cfg, dict):
        base_cfg.pop('cost', None)
    torch.manual_seed(seed)
    base = build_model(base_cfg, scope).eval()
    return mmdcs_backbone(base) or base


def measure_latency(cfg, scope: str, pruned: nn.Module, classifier: bool, full_shape,
                    repeats: int = 21, warmup: int = 3, threads: Optional[int] = None,
                    batch: Optional[int] = None, timer: Optional[Callable] = None,
                    seed: int = 0, base: Optional[nn.Module] = None) -> dict:
    """The exported backbone's latency against the baseline backbone's (``base``, default
    :func:`baseline_backbone`), timed interleaved round by round, medians
    (:func:`mmdcs.analysis.latency.time_models`; ``timer``: a replacement with its signature,
    e.g. a synthetic one in tests). Backbones, as a latency table measures them (a classifier's
    head is the same in both)."""
    timer = timer or time_models
    threads, batch = threads or 1, batch or 1
    base = baseline_backbone(cfg, scope, seed) if base is None else base
    pruned = require_pruned(pruned)
    x = torch.randn((int(batch), ) + tuple(full_shape[1:]),
                    generator=torch.Generator().manual_seed(seed))
    t = timer(dict(baseline=base, pruned=pruned), x, warmup=warmup, repeats=repeats,
              threads=threads)
    b_ms, p_ms = float(t['baseline']['median_ms']), float(t['pruned']['median_ms'])
    return dict(baseline_ms=b_ms, pruned_ms=p_ms, ratio=p_ms / b_ms, rounds=int(repeats),
                clock=str(t['pruned'].get('clock', 'wall')),
                threads=t['pruned'].get('threads', threads), batch=int(batch),
                device=str(t['pruned'].get('device', x.device)),
                device_name=device_name(x.device))


def _report(r: ExportResult, config, checkpoint, sha, backbone, model, shape, source,
            full_shape, classifier, method, resource, ratio, ref, out_dir) -> None:
    """The printed report (``r.lines``, ``r.warnings``)."""
    spec, rows, empty, lines = r.spec, r.rows, r.empty, r.lines
    lines.append(f'\nSubnet of {type(backbone).__name__}({spec.arch}, {spec.variant}) from '
                 f'{checkpoint} (sha256 {sha[:16]}...)')
    lines.append(f'kept channels: {sum(b.kept for b in spec.blocks)} of '
                 f'{sum(b.dim for b in spec.blocks)} ({spec.kept_ratio:.1%}) over '
                 f'{len(spec.blocks)} blocks\n')
    lines.append(block_summary(spec))
    if empty:
        lines.append(f'\nWARNING: {len(empty)} block(s) had no α > 0 and keep their largest '
                     f'channel (a block cannot be empty): {", ".join(empty[:6])}'
                     f'{" ..." if len(empty) > 6 else ""}')
    lines.append(f'\nParams and FLOPs (mmengine.analysis, multiply-accumulates) at input '
                 f'{shape[0]}x{shape[1]} ({source}):\n')
    lines.append(complexity_lines(rows, full_shape))
    b0, b1 = rows[0][2], rows[1][2]
    lines.append(f'\nbackbone FLOPs: {human(b0)} -> {human(b1)} ({(b1 - b0) / max(b0, 1):+.1%}); '
                 f'params: {human(rows[0][1])} -> {human(rows[1][1])} '
                 f'({(rows[1][1] - rows[0][1]) / max(rows[0][1], 1):+.1%})')
    if r.budget is not None:
        m = r.budget['measured']
        lines.append(
            f'budget ({method}): {resource} target {ratio:g} of the baseline '
            f'{"classifier" if classifier and resource in COUNTED else "backbone"}; achieved '
            f'FLOPs '
            f'{human(m["flops"]["pruned"])} = {m["flops"]["ratio"]:.4f}, params '
            f'{human(m["params"]["pruned"])} = {m["params"]["ratio"]:.4f} of the baseline '
            f'({human(m["flops"]["baseline"])} FLOPs, {human(m["params"]["baseline"])} params)')
        if resource not in COUNTED:
            b = r.budget
            source = (b.get('cost') or {}).get('table')
            lines.append(f'{resource}: predicted {b["achieved"]:.4g} of the baseline\'s '
                         f'{b["baseline"]:.4g} = {b["achieved_ratio"]:.4f} (target {ratio:g})'
                         + (f' by {source}' if source else ''))
    if r.latency is not None:
        t = r.latency
        lines.append(f'latency, measured (batch {t["batch"]}, {t["threads"]} thread(s), '
                     f'{t["device_name"]}, {t.get("clock", "wall")} clock, median of '
                     f'{t["rounds"]} interleaved rounds): baseline '
                     f'{t["baseline_ms"]:.2f} ms, pruned {t["pruned_ms"]:.2f} ms = '
                     f'{t["ratio"]:.4f} of the baseline')
    if r.budget is not None and len(r.budget.get('refine') or ()) > 1:
        lines.append('measured corrections (the table asked for asked x target / measured): '
                     + ', '.join(f'asked {t["asked"]:.3f} -> predicted {t["predicted"]:.3f}, '
                                 f'measured {t["measured"]:.3f}' for t in r.budget['refine'])
                     + f'; exported: asked {r.budget["asked_ratio"]:.3f}')
    if r.max_diff is not None:
        ok = r.max_diff <= 1e-4 * max(1., max(float(t.abs().max()) for t in ref))
        what = 'logits' if classifier else 'backbone outputs'
        lines.append(f'check: pruned vs supernet eval {what}, max |diff| = {r.max_diff:.3g} '
                     f'({"equal" if ok else "NOT EQUAL"})')
        if not ok and not empty:
            r.warnings.append('WARNING: the pruned model does not reproduce the supernet; '
                              'please report this')
    lines.append(f'\nwrote {r.subnet}\nwrote {r.checkpoint}\n')
    lines.extend(usage_lines(config, out_dir, spec.variant, backbone_prefix(model) or '',
                             osp.basename(r.checkpoint)))

