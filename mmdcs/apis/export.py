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
import shutil
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn

import mmdcs
from mmdcs.analysis.complexity import count_flops, count_params
from mmdcs.analysis.latency import TIMED, build_runtime
from mmdcs.analysis.target import Candidate, Met, TargetMissed, meet_target
from mmdcs.selection import (architecture_state_keys, file_sha256, in_search_state,
                             prunable_modules, search_state_keys)
from mmdcs.selection.budget import (REFINE_TOLERANCE, BudgetError, Measure, build_cost,
                                    build_prior, check_prior_name, counted_resources,
                                    resource_names, resource_options)
from mmdcs.selection.importance import Ranking, get_scorer, scorer_names
from .launch import UserError
from .loading import dataset_batches
from .outputs import atomic_outputs, check_output_dir, refuse_overwrite
from .subnet_io import (backbone_cfg_of, backbone_prefix, block_summary, build_model,
                        complexity_lines, config_input_size, export_meta, human,
                        load_model_checkpoint, load_task_config, mmdcs_backbone,
                        pruned_model_state, require_checkpoint, require_supernet,
                        runner_model_cfg,
                        save_pruned_checkpoint, shape_arg, usage_lines, with_subnet)

#: file formats of the pruned weights
FORMATS = ('pth', 'safetensors')


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
        raise UserError(f'--method {method} needs a budget: '
                        + ' or '.join(f'--target-{r} R' for r in counted_resources()))
    return None, None


def _built_cost(counted: nn.Module, resource: str, shape, options: dict):
    """A budget's :class:`~mmdcs.selection.budget.ResourceCost` built by name
    (:func:`~mmdcs.selection.budget.build_cost`); a cost that cannot be built (a table that does
    not fit, a missing option) is one line (:class:`UserError`)."""
    try:
        return build_cost(resource, counted, shape, **options)
    except BudgetError as e:
        flags = ', '.join(f'--{o.replace("_", "-")}' for o in resource_options(resource))
        raise UserError(f'--target-{resource}: {e}' + (f' ({flags})' if flags and not any(
            f'--{o.replace("_", "-")}' in str(e) for o in resource_options(resource)) else '')
                        ) from e
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


def _check_arguments(method: str, fmt: str, multiple_of) -> None:
    if multiple_of is not None and (isinstance(multiple_of, bool)
                                    or not isinstance(multiple_of, int) or multiple_of < 1):
        raise UserError(f'--multiple-of must be a positive integer, got {multiple_of}')
    if method not in scorer_names():
        raise UserError(f'--method {method!r} is not a ranking method; known: '
                        f'{", ".join(scorer_names())}')
    if fmt not in FORMATS:
        raise UserError(f'--format must be one of {", ".join(FORMATS)}, got {fmt!r}')


@dataclass
class _Source:
    """The loaded supernet of an export: config, model, backbone, checkpoint and sizes."""
    config: str
    checkpoint: str
    cfg: Any
    scope: str
    model: nn.Module
    backbone: nn.Module
    ckpt: dict
    sha: str
    shape: tuple
    source: str
    classifier: bool

    @property
    def counted(self) -> nn.Module:
        """What the exact counts count: the whole classifier, else the backbone."""
        return self.model if self.classifier else self.backbone

    @property
    def full_shape(self) -> tuple:
        return (1, in_channels(self.backbone)) + tuple(self.shape)

    def build(self, spec) -> Candidate:
        """The whole model with the backbone pruned to ``spec``, built from the spec alone and
        loaded with the pruned weights (an internal error if they do not fit)."""
        state = pruned_model_state(self.model, spec, backbone_cfg_of(self.cfg.model))
        pruned = build_model(with_subnet(self.cfg.model, spec.to_dict()), self.scope)
        missing, unexpected = pruned.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise UserError(f'internal: the pruned weights do not fit the model built from the '
                            f'subnet (missing {missing[:5]}, unexpected {unexpected[:5]})')
        pruned.eval()
        backbone = require_pruned(pruned)
        return Candidate(spec, pruned if self.classifier else backbone, backbone, state)


def _load(config, checkpoint, cfg_options, shape, scorer) -> _Source:
    require_checkpoint(config, checkpoint)
    cfg, scope = load_task_config(config, cfg_options)
    if scorer.baseline:
        magnitude_supernet_cfg(cfg.model)
    model = build_model(runner_model_cfg(cfg), scope)
    backbone = require_supernet(model, config)
    ckpt = (load_baseline_checkpoint if scorer.baseline else load_model_checkpoint)(
        model, checkpoint)
    model.eval()
    source = '--shape'
    if shape is None:
        shape, source = config_input_size(cfg, backbone)
    classifier = scope in ('mmpretrain', 'mmdcs') and hasattr(model, 'head')
    return _Source(config, checkpoint, cfg, scope, model, backbone, ckpt,
                   file_sha256(checkpoint), tuple(shape), source, classifier)


def _measure(cost, measure, options: dict, runtime: Optional[str]):
    """The :class:`~mmdcs.selection.budget.Measure` of the export's measurement: a measured
    resource's own (where its prediction was made; ``threads``, ``batch``, ``repeats`` and
    ``warmup`` of ``options`` replace its own), else with ``measure`` a PyTorch (or
    ``runtime``) measurement at one thread and batch 1 unless told; None: not measured."""
    changes = dict(threads=options.get('threads'), batch=options.get('batch'),
                   rounds=options.get('repeats'), warmup=options.get('warmup'))
    try:
        own = cost.measure(runtime=runtime, **changes) if cost is not None else None
    except (BudgetError, ValueError) as e:
        raise UserError(f'--runtime {runtime}: {e}') from e
    if measure is False or (own is None and not measure):
        return None
    return own or Measure(runtime=runtime or 'torch').replace(
        **dict(changes, threads=changes['threads'] or 1, batch=changes['batch'] or 1))


def export_subnet(config: str, checkpoint: str, out_dir: str, *, method: str = 'alpha',
                  target: Optional[Tuple[str, float]] = None, cost=None,
                  cost_options: Optional[dict] = None, multiple_of: Optional[int] = None,
                  shape: Union[None, Sequence[int]] = None, cfg_options: Optional[dict] = None,
                  verify: bool = True, fmt: str = 'pth', force: bool = False,
                  measure: Optional[bool] = None, measure_options: Optional[dict] = None,
                  batches: Union[None, Sequence, Callable] = None,
                  scorer_options: Optional[dict] = None, refine: int = 0,
                  refine_tolerance: float = REFINE_TOLERANCE,
                  latency_tolerance: Union[None, float, str] = 'resource',
                  runtime: Optional[str] = None, prior: Optional[str] = None) -> ExportResult:
    """Export the subnet of ``checkpoint`` (a supernet's, or a baseline's for a scorer that
    reads one) to ``out_dir``; with a target, :func:`mmdcs.analysis.target.meet_target` meets
    it (rank, build, check or measure, correct, refuse).

    Args:
        config: the config the checkpoint was trained with.
        checkpoint: its weights.
        out_dir: where ``subnet.json`` and ``pruned.FMT`` go (and, measured in onnxruntime,
            ``pruned_backbone.onnx``: the file timed).
        method: a registered scorer (:func:`mmdcs.selection.importance.scorer_names`).
        target: ``(resource, ratio)``: meet ``ratio`` × the baseline's count of a registered
            resource (:func:`~mmdcs.selection.budget.resource_names`: ``'flops'``,
            ``'params'``, ``'latency'``, ...); None: keep {α > 0}.
        cost: the budget's :class:`~mmdcs.selection.budget.ResourceCost` for ``target``;
            default: built by name (:func:`~mmdcs.selection.budget.build_cost`).
        cost_options: options of the resource's builder (``latency_table=PATH`` for latency).
        multiple_of: every kept width a multiple of it (or the full width); None: the cost's
            own (1 for an exact count, a latency table's grid step).
        shape: input size H [W] of the counts (default: the config's input size).
        cfg_options: overrides of the config.
        verify: check that the pruned model gives the supernet's eval output (without a
            target).
        fmt: ``'pth'`` or ``'safetensors'``.
        force: replace existing results.
        measure: time the exported backbone against the baseline backbone (interleaved
            rounds, medians: :func:`mmdcs.analysis.latency.measure_pair`); None: where the
            target's resource is measured (latency). ``measure_options``: ``repeats``,
            ``warmup``, ``threads`` and ``batch`` (default: the latency table's, else 1),
            ``seed``, ``meter`` (a synthetic meter, tests).
        batches: data for a scorer that needs it (an iterable of batches, or a callable
            ``batches(cfg, model, scope)`` returning one, e.g. :func:`train_batches`).
        scorer_options: more context of the scorer (``seed`` and ``widths`` of ``'random'``).
        refine: a measured target: at most this many measured corrections
            (:func:`~mmdcs.selection.budget.refine_to_target`; ``meta['budget']``:
            ``asked_ratio`` and every try in ``refine``).
        latency_tolerance: a measured target: a subnet measured further than this from it is
            refused (one line, nothing written); ``'resource'``: the resource's own (0.03 for
            latency); None: exported whatever was measured.
        runtime: the runtime of the measurement (``'torch'``, ``'onnxruntime'``; default: the
            latency table's, else PyTorch); a table of another runtime is refused in one line.
        prior: how the ranking weighs the units (:func:`~mmdcs.selection.budget.build_prior`):
            ``'cost'``, the budget's own cost per element; ``'flops'``, the FLOPs an element
            does; ``'params'``; ``'none'``; None: the budget's (``'flops'`` for latency,
            ``'cost'`` for an exact count).
    """
    _check_arguments(method, fmt, multiple_of)
    scorer = get_scorer(method)
    subnet_path = osp.join(out_dir, 'subnet.json')
    ckpt_path = osp.join(out_dir, f'pruned.{fmt}')
    check_output_dir(out_dir, '--out')
    refuse_overwrite((subnet_path, ckpt_path), force)
    resource, ratio = _target(target, method)
    check_prior_name(prior)  # before the checkpoint is read or a channel scored
    if prior is not None and resource is None:
        raise UserError('--prior weighs the ranking of a target: give --target-'
                        + ' R or --target-'.join(resource_names()) + ' R')
    if scorer.needs_data and resource is not None and batches is None:
        raise UserError(f'--method {method} needs data batches to score the channels')
    src = _load(config, checkpoint, cfg_options, shape_arg(shape), scorer)
    if resource is None:
        return _write(src, _gates(src, multiple_of or 1), out_dir, subnet_path, ckpt_path, fmt,
                      force, method, verify)
    budget_cost = cost or (None if resource in counted_resources() else _built_cost(
        src.counted, resource, src.shape, dict(cost_options or {})))
    if budget_cost is not None:  # a target outside (floor, ceiling): refused at once
        budget_cost.check_target(ratio, f'--target-{resource}',
                                 multiple_of or budget_cost.multiple_of)
    m_options = dict(measure_options or {})
    how = _measure(budget_cost, measure, m_options, runtime)
    try:  # the runtime lives until the files are written (it keeps the ONNX files measured)
        rt = build_runtime(how, keep_files=True) if how else None
    except ValueError as e:  # a runtime that cannot run here
        raise UserError(f'--runtime {how.runtime}: {e}') from e
    onnx_path = osp.join(out_dir, ONNX_FILE) if rt is not None and rt.writes_files else None
    refuse_overwrite([p for p in (onnx_path, ) if p], force)
    # the exact counts are calibrated in any case: every subnet is counted in them
    costs = {r: build_cost(r, src.counted, src.shape) for r in counted_resources()}
    budget_cost = budget_cost or costs[resource]
    costs.setdefault(resource, budget_cost)
    ctx = dict(scorer_options or {}, model=src.model)
    if scorer.needs_data:
        ctx['batches'] = batches(src.cfg, src.model, src.scope) if callable(batches) else batches
    ranking = Ranking(src.backbone, method, **ctx)
    weigh = build_prior(prior, src.backbone, src.shape, budget_cost)
    m = multiple_of or budget_cost.multiple_of
    meta = export_meta(config, checkpoint, src.sha)
    try:
        met = meet_target(
            budget_cost, ratio, lambda r: ranking.at(budget_cost, r, m, weigh, **meta), src.build,
            measure=how, baseline=how and baseline_backbone(src.cfg, src.scope,
                                                            m_options.get('seed', 0)),
            size=src.shape, seed=m_options.get('seed', 0), refine=refine,
            refine_tolerance=refine_tolerance, tolerance=latency_tolerance,
            meter=m_options.get('meter'), runtime=rt, name=f'--target-{resource}')
    except TargetMissed as e:  # measured beyond the tolerance: nothing written
        raise UserError(str(e)) from e
    result = _write(src, met, out_dir, subnet_path, ckpt_path, fmt, force, method, verify,
                    costs, budget_cost, (resource, ratio), onnx_path)
    del rt  # its temporary files go with it
    return result


#: the file an export measured in a runtime that runs files writes (onnxruntime: the ONNX file
#: of the pruned backbone, what was timed)
ONNX_FILE = 'pruned_backbone.onnx'


def _gates(src: _Source, multiple_of: int) -> Met:
    """The deterministic gates {α > 0} (no target), built."""
    spec = src.backbone.export_subnet(multiple_of=multiple_of,
                                      **export_meta(src.config, src.checkpoint, src.sha))
    return Met(src.build(spec), None)


def _budget_record(src: _Source, met: Met, costs: dict, budget_cost):
    """``meta['budget']['measured']``: every exact count of the built model beside its
    baseline's, and the measurement (under the measured resource's name, else under
    :data:`~mmdcs.analysis.latency.TIMED`); returns (the warnings of a cost used elsewhere than
    it was made — a latency table of another machine, thread count or batch —, the
    measurement's record)."""
    b = met.spec.meta['budget']
    b['measured'] = {}
    for r, c in costs.items():
        pruned = c.count_model(met.candidate.model)
        if pruned is not None:
            b['measured'][r] = dict(baseline=c.baseline, pruned=pruned,
                                    ratio=pruned / c.baseline)
    if met.measured is None:
        return [], None
    t = met.measured
    key = budget_cost.resource if budget_cost.measure() is not None else TIMED
    b['measured'][key] = {k: v for k, v in t.items() if k != 'files'}
    if (t.get('files') or {}).get('pruned'):  # the file measured, written beside subnet.json
        b['measured'][key]['file'] = ONNX_FILE
    return budget_cost.context_warnings(device_name=t['device_name'], threads=t['threads'],
                                        batch=t['batch'], dtype='fp32',
                                        warn=False), b['measured'][key]


def _write(src: _Source, met: Met, out_dir, subnet_path, ckpt_path, fmt, force, method, verify,
           costs=None, budget_cost=None, target=(None, None), onnx_path=None) -> ExportResult:
    """Count, check, write both files (and the ONNX file) or none, and report."""
    spec, c = met.spec, met.candidate
    notes, latency = _budget_record(src, met, costs, budget_cost) if costs is not None else (
        [], None)
    rows = _rows(src, c)
    max_diff = ref = None
    if verify and costs is None:
        x = torch.randn(src.full_shape, generator=torch.Generator().manual_seed(0))
        ref = _outputs(src.model, x, src.classifier)
        out = _outputs(c.model if src.classifier else c.backbone, x, src.classifier)
        max_diff = max(float((a - b).abs().max()) for a, b in zip(ref, out))
    src_meta = src.ckpt.get('meta', None) or {}
    ckpt_meta = dict(
        mmdcs_version=mmdcs.__version__, subnet=spec.to_dict(),
        input_shape=list(src.full_shape),
        params=dict(backbone_supernet=rows[0][1], backbone_pruned=rows[1][1]),
        flops=dict(backbone_supernet=rows[0][2], backbone_pruned=rows[1][2]),
        **{k: v for k, v in spec.meta.items()})
    if isinstance(src_meta, dict) and 'dataset_meta' in src_meta:
        ckpt_meta['dataset_meta'] = src_meta['dataset_meta']
    onnx = (met.measured or {}).get('files', {}).get('pruned') if onnx_path else None
    paths = (subnet_path, ckpt_path) + ((onnx_path, ) if onnx else ())
    # every file or none, never a half-written one (temporary files renamed at the end)
    with atomic_outputs(*paths, force=force) as tmps:
        spec.save(tmps[0])
        save_pruned_checkpoint(tmps[1], c.state, ckpt_meta)
        if onnx:
            shutil.copyfile(onnx, tmps[2])
    empty = [] if costs is not None else [
        name for name, mod in prunable_modules(src.backbone).items()
        if not bool((mod.select.alpha > 0).any())]
    result = ExportResult(spec, subnet_path, ckpt_path, rows, max_diff,
                          spec.meta.get('budget') if costs is not None else None, latency, empty,
                          warnings=[f'WARNING: {n}' for n in notes])
    _report(result, src, method, target[0], target[1], ref, out_dir,
            budget_cost.measure() is not None if budget_cost is not None else False)
    return result


def _rows(src: _Source, c: Candidate) -> List[Tuple[str, int, int]]:
    """(what, params, FLOPs) of the backbone (and whole model) before and after."""
    s = src.full_shape
    rows = [('backbone, supernet', count_params(src.backbone), count_flops(src.backbone, s)),
            ('backbone, pruned', count_params(c.backbone), count_flops(c.backbone, s))]
    if src.classifier:
        rows += [('whole model, supernet', count_params(src.model), count_flops(src.model, s)),
                 ('whole model, pruned', count_params(c.model), count_flops(c.model, s))]
    return rows


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


def _report(r: ExportResult, src: _Source, method, resource, ratio, ref, out_dir,
            measured_target: bool) -> None:
    """The printed report (``r.lines``, ``r.warnings``)."""
    spec, rows, empty, lines = r.spec, r.rows, r.empty, r.lines
    lines.append(f'\nSubnet of {type(src.backbone).__name__}({spec.arch}, {spec.variant}) from '
                 f'{src.checkpoint} (sha256 {src.sha[:16]}...)')
    lines.append(f'kept channels: {sum(b.kept for b in spec.blocks)} of '
                 f'{sum(b.dim for b in spec.blocks)} ({spec.kept_ratio:.1%}) over '
                 f'{len(spec.blocks)} blocks\n')
    lines.append(block_summary(spec))
    if empty:
        lines.append(f'\nWARNING: {len(empty)} block(s) had no α > 0 and keep their largest '
                     f'channel (a block cannot be empty): {", ".join(empty[:6])}'
                     f'{" ..." if len(empty) > 6 else ""}')
    lines.append(f'\nParams and FLOPs (mmengine.analysis, multiply-accumulates) at input '
                 f'{src.shape[0]}x{src.shape[1]} ({src.source}):\n')
    lines.append(complexity_lines(rows, src.full_shape))
    b0, b1 = rows[0][2], rows[1][2]
    lines.append(f'\nbackbone FLOPs: {human(b0)} -> {human(b1)} ({(b1 - b0) / max(b0, 1):+.1%}); '
                 f'params: {human(rows[0][1])} -> {human(rows[1][1])} '
                 f'({(rows[1][1] - rows[0][1]) / max(rows[0][1], 1):+.1%})')
    if r.budget is not None:
        lines += _budget_lines(r.budget, method, resource, ratio, src.classifier,
                               measured_target)
    if r.latency is not None:
        t = r.latency
        lines.append(f'latency, measured (batch {t["batch"]}, {t["threads"]} thread(s), '
                     f'{t["device_name"]}, {t["runtime"]["name"]} {t["runtime"]["version"]}, '
                     f'{t.get("clock", "wall")} clock, median of {t["rounds"]} interleaved '
                     f'rounds): baseline {t["baseline_ms"]:.2f} ms, pruned {t["pruned_ms"]:.2f} '
                     f'ms = {t["ratio"]:.4f} of the baseline')
    if r.budget is not None and len(r.budget.get('refine') or ()) > 1:
        lines.append('measured corrections (the table asked for asked x target / measured): '
                     + ', '.join(f'asked {t["asked"]:.3f} -> predicted {t["predicted"]:.3f}, '
                                 f'measured {t["measured"]:.3f}' for t in r.budget['refine'])
                     + f'; exported: asked {r.budget["asked_ratio"]:.3f}')
    if r.max_diff is not None:
        ok = r.max_diff <= 1e-4 * max(1., max(float(t.abs().max()) for t in ref))
        what = 'logits' if src.classifier else 'backbone outputs'
        lines.append(f'check: pruned vs supernet eval {what}, max |diff| = {r.max_diff:.3g} '
                     f'({"equal" if ok else "NOT EQUAL"})')
        if not ok and not empty:
            r.warnings.append('WARNING: the pruned model does not reproduce the supernet; '
                              'please report this')
    written = [r.subnet, r.checkpoint] + ([osp.join(out_dir, ONNX_FILE)] if (
        r.latency or {}).get('file') else [])
    lines.append('\n' + '\n'.join(f'wrote {p}' for p in written) + '\n')
    lines.extend(usage_lines(src.config, out_dir, spec.variant,
                             backbone_prefix(src.model) or '', osp.basename(r.checkpoint)))


def _budget_lines(b: dict, method, resource, ratio, classifier, measured_target) -> List[str]:
    """The budget's lines: what it achieved in every exact count, and a measured resource's
    prediction."""
    m = b['measured']
    counts = ', '.join(f'{r} {human(v["pruned"])} = {v["ratio"]:.4f}'
                       for r, v in m.items() if 'pruned' in v)
    bases = ', '.join(f'{human(v["baseline"])} {r}' for r, v in m.items() if 'pruned' in v)
    out = [f'budget ({method}): {resource} target {ratio:g} of the baseline '
           f'{"backbone" if measured_target or not classifier else "classifier"}; achieved '
           f'{counts} of the baseline ({bases})']
    if measured_target:
        source = (b.get('cost') or {}).get('table')
        out.append(f'{resource}: predicted {b["achieved"]:.4g} of the baseline\'s '
                   f'{b["baseline"]:.4g} = {b["achieved_ratio"]:.4f} (target {ratio:g})'
                   + (f' by {source}' if source else ''))
    return out
