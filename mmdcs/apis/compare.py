"""The method comparison of ``tools/analysis/compare_methods.py``: methods × seeds × budgets on
the digits or Fashion-MNIST (DeiT-Tiny and MobileViT-XS at 64×64), every method retrained (or,
with ``pretrained``, fine-tuned) on the same schedule.

Regimes (say which one a table compares):

* ``scratch`` — every pruned network is retrained from random weights. A network trained from
  scratch is symmetric in its channels, so *which* channels a method keeps cannot matter, only
  each block's kept width: the methods differ by their width allocation (and DCS / KCR also by
  their retraining terms, the IB / KCR regulariser, unless ``retrain='ce-only'``).
* ``pretrained`` — one baseline per seed is trained first; magnitude, uniform, random and
  Taylor prune *its* weights and the pruned network is fine-tuned from them (``pruned.pth``);
  DCS / KCR start their supernet from it (``load_from``: the gates open, α at ``gate_init``),
  search for ``search_epochs``, export with the weights they inherit and fine-tune. Here the
  choice of channels counts too.

One row per run in ``DIR/results.json`` (model, method, budget, seed, regime, top-1, params /
FLOPs / latency ratios to the baseline classifier, kept widths per block). A row already there
is not run again (resumable); results of other settings in the same file are refused, never
overwritten. :func:`aggregate` and :func:`paired_differences` are the statistics of
``DIR/summary.md``.
"""
import contextlib
import json
import math
import os
import os.path as osp
import subprocess
import sys
import time
from collections import OrderedDict, defaultdict
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from mmdcs.analysis.complexity import count_flops, count_params
from mmdcs.analysis.latency import keep_freed_memory, time_models
from mmdcs.analysis.latency_table import _units, default_clock, load_table, pruned_copy
from mmdcs.analysis.plots import epoch_series, last_validation, load_records
from mmdcs.checks import check_timing
from mmdcs.datasets.fashion_mnist import FILES
from mmdcs.models.counting import distinct_halves
from mmdcs.selection import SubnetSpec, file_sha256
from mmdcs.selection.budget import (CHANNELS, HIDDEN, LATENCY_TOLERANCE, BudgetError,
                                    resource_options)
from mmdcs.selection.importance import widths_of
from mmdcs.selection.jsonio import read_json
from mmdcs.selection.latency_cost import LatencyCost, selection_options
from mmdcs.utils.checkpoint import load_checkpoint_file, trust_checkpoints, trust_scope
from mmdcs.utils.files import open_log
from .export import export_subnet, train_batches
from .launch import UserError, check_data_paths, load_config
from .latency_io import config_backbones, measure_table, table_file_name
from .outputs import write_json, write_texts
from .subnet_io import build_model, load_task_config

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))

#: model → the demo configs (configs/demo/) of its baseline, searches and retraining
MODELS = {
    'deit-tiny': dict(label='DeiT-Tiny', baseline='configs/demo/deit-tiny_digits-cls.py'),
    'mobilevit-xs': dict(label='MobileViT-XS',
                         baseline='configs/demo/mobilevit-xs_digits-cls.py'),
}
SEARCHED = ('dcs', 'kcr')
PRUNERS = ('magnitude', 'uniform', 'random', 'taylor')
#: the ablation at DCS's searched widths (pretrained regime): DCS's exported subnet and weights
#: fine-tuned with cross-entropy only, or with the KCR term instead of DCS's IB term (DCS's own
#: row is + IB); the network, its Q/K gates and their temperature schedule are DCS's
ABLATIONS = ('dcs-ce', 'dcs-kcr')
METHODS = SEARCHED + PRUNERS + ABLATIONS
REGIMES = ('scratch', 'pretrained')
#: what a comparison's budgets are ratios of: the baseline's FLOPs, or the latency of each
#: network predicted by its own table (a resource whose budget takes a table:
#: :func:`needs_tables`)
RESOURCES = ('flops', 'latency')
RETRAIN = ('default', 'ce-only')
#: the methods that rank attention heads (``select_heads``): the searches' gates per head and
#: the magnitude pruner's norms per head; uniform / random (given widths) and Taylor keep every
#: head
HEAD_METHODS = ('dcs', 'kcr', 'magnitude')
#: the reference of the paired differences
REFERENCE = 'magnitude'
RESULTS_VERSION = 1
#: the architecture optimiser's lr of the demo search configs (configs/_base_/schedules/
#: demo_search.py) and its cosine schedule's floor as a share of it (eta_min = lr / 10)
ARCH_LR_ETA_MIN_SHARE = 0.1


def search_config(model: str, method: str, pretrained: bool = False) -> str:
    """The demo search config; from a trained baseline: configs/pretrained/'s (gates open,
    lower weight lr)."""
    if pretrained:
        return f'configs/pretrained/{method}-{model}_search-from-baseline_digits.py'
    return f'configs/demo/{method}-{model}_search_digits.py'


def retrain_config(model: str, method: str, retrain: str = 'default',
                   pretrained: bool = False, theta_masks: bool = True) -> str:
    """DCS / KCR retrain with their regulariser (``default``); every other method, and DCS /
    KCR with ``ce-only``, with cross-entropy only (the magnitude retrain config: the same
    schedule, EMA, no regulariser). ``pretrained``: the fine-tuning configs of
    configs/pretrained/ (the same, at a lower lr). DCS without its Linear_θ Q/K masks
    (``theta_masks=False``, the ablation): its ``*-no-theta_digits.py`` configs, the IB term
    without the temperature hook (the network has no Gumbel gates)."""
    kind = method if method in SEARCHED and retrain == 'default' else 'magnitude'
    if kind == 'dcs' and not theta_masks:  # no Q/K masks: no Gumbel gates, no temperature hook
        return (f'configs/pretrained/dcs-{model}_finetune-no-theta_digits.py' if pretrained
                else f'configs/demo/dcs-{model}_retrain-no-theta_digits.py')
    if pretrained:
        return f'configs/pretrained/{kind}-{model}_finetune_digits.py'
    return f'configs/demo/{kind}-{model}_retrain_digits.py'


def ablation_config(model: str, method: str, dataset: str = 'digits') -> str:
    """The fine-tuning config of an ablation arm at DCS's widths (:data:`ABLATIONS`): DCS's
    fine-tuning config with cross-entropy only (``dcs-ce``) or with the KCR term in place of
    the IB term (``dcs-kcr``), DCS's temperature hook kept in both."""
    arm = method.split('-', 1)[1]
    return for_dataset(f'configs/pretrained/dcs-{model}_finetune-{arm}_digits.py', dataset)


#: the data sets of a comparison: where the runs read them, the defaults of their protocol.
#: Fashion-MNIST's protocol (docs/benchmarks_fashion_plan.md): one baseline (seed 0) trained
#: for ``baseline_epochs`` on the first ``train_images`` images and validated every epoch, which
#: every method and seed prunes; every method trains the same number of images after it (a
#: search's epochs counted, :func:`training_epochs`); every run validated once, after its last
#: epoch; latency tables at batch ``latency_batch`` and every export corrected by measurement
#: (``refine`` tries) to within :data:`~mmdcs.selection.budget.LATENCY_TOLERANCE`
DATASETS = {
    'digits': dict(data='data/digits', label='the digits val set', test_images=None,
                   place='python tools/data/build_digits.py --out {data}'),
    'fashion-mnist': dict(data='data/fashion-mnist', label='the Fashion-MNIST test set',
                          test_images=10000, train_size=60000, train_images=10000,
                          baseline_epochs=12, latency_batch=16, refine=3,
                          place='python tools/data/fashion_mnist.py --out {data}'),
}


def for_dataset(config: str, dataset: str) -> str:
    """The config of ``dataset`` named as the digits' ``config`` (``*_digits*.py`` →
    ``*_fashion*.py``, the same model and schedule on the other data)."""
    if dataset == 'digits':
        return config
    return osp.join(osp.dirname(config), osp.basename(config).replace('_digits', '_fashion'))


def training_epochs(method: str, epochs: int, search_epochs: int, pruner_epochs: int,
                    pretrained: bool = True) -> int:
    """The epochs over the training images a method's row trains after the baseline: a search
    and its fine-tuning (DCS, KCR, and the ablation arms fine-tuned from DCS's search), or a
    pruner's fine-tuning (``pruner_epochs``; from scratch ``epochs``)."""
    if method in SEARCHED + ABLATIONS:
        return search_epochs + epochs
    return pruner_epochs if pretrained else epochs


def check_equal_training(methods: Sequence[str], epochs: int, search_epochs: int,
                         pruner_epochs: int) -> int:
    """The epochs every method trains after the baseline (:func:`training_epochs`), or one
    :class:`UserError` line naming each method's when they differ."""
    got = {m: training_epochs(m, epochs, search_epochs, pruner_epochs) for m in methods}
    if len(set(got.values())) > 1:
        raise UserError('equal training: the methods would train different numbers of epochs '
                        f'after the baseline ({", ".join(f"{m} {e}" for m, e in got.items())}; '
                        'a search\'s epochs count: --search-epochs + --epochs must equal '
                        '--pruner-epochs)')
    return next(iter(got.values()), 0)


def _print(line: str) -> None:
    print(line, flush=True)


# ----------------------------------------------------------------------------- latency tables
#: a latency comparison's hidden-unit selection per model, the same for every method (DCS's
#: and KCR's search, the pruners' ranking): with MLP channels alone DCS's predicted latency
#: floor at 64×64 on the 2-core Xeon of 2026-11-26 is 0.83 (DeiT-Tiny: with Linear_θ and the
#: Q/K masks its full-width network measured 1.14× the baseline) and 1.09 (MobileViT-XS: every
#: target below 1 refused); with these 0.89 (MobileViT-XS, DCS) — docs/budgets.md
LATENCY_SELECT_HIDDEN = {'deit-tiny': True, 'mobilevit-xs': 'all'}
#: a FLOPs comparison's hidden-unit selection per model, the same for every method (the
#: searches' supernet, the pruners' ranking): MobileViT-XS's transformer MLPs hold a small share
#: of its FLOPs, so with MLP channels alone the floor at 64×64 is 0.87 (DCS) / 0.83 (KCR) of the
#: baseline and budgets 0.7 / 0.5 cannot be met; with its MV2 blocks' expanded channels and the
#: MLPs' hidden units (``'all'``) it is 0.42 / 0.38. DeiT-Tiny keeps the papers' selection (MLP
#: channels; floor 0.45 for DCS, with Linear_θ). Recorded in the rows of such a model.
FLOPS_SELECT_HIDDEN = {'mobilevit-xs': 'all'}
#: where a latency comparison's tables are measured and its subnets timed: the digits' input
#: size, batch 1, one CPU thread, fp32
LATENCY_SHAPE = (64, 64)
#: the network each method exports, by the table it aims with: DCS's supernet, KCR's, and the
#: baseline ranked by a pruner (variant dcs-arch2: MLP channel selection only)
TABLE_VARIANTS = {'dcs': 'dcs', 'kcr': 'kcr', 'pruned': 'dcs-arch2'}


def needs_tables(resource: str) -> bool:
    """Whether a comparison aimed at ``resource`` measures a table per network first (its
    budget takes one: :func:`~mmdcs.selection.budget.resource_options`)."""
    return bool(resource_options(resource))


def table_kind(method: str) -> str:
    """The latency table a method aims with: its own supernet's (DCS, KCR) or the pruners'."""
    return method if method in SEARCHED else 'pruned'


#: modules that compute nothing in eval mode (the identity): equal for :func:`same_network`
_EVAL_IDENTITY = ('Identity', 'DropPath', 'Dropout', 'Dropout1d', 'Dropout2d')


def _signature(net) -> list:
    """Module names, types and parameter / buffer shapes of a network (what its time depends
    on; a drop-path or dropout, the identity in eval mode, counts as the identity)."""
    return [(n, 'Identity' if type(m).__name__ in _EVAL_IDENTITY else type(m).__name__,
             [tuple(p.shape) for p in m.parameters(recurse=False)],
             [tuple(b.shape) for b in m.buffers(recurse=False)]) for n, m in net.named_modules()]


def same_network(a, b) -> bool:
    """Whether two supernets of one arch prune to the same network (the same modules, types
    and shapes at full width and at a probe width distinct per unit, the same selection
    options): then one latency table times both (KCR and the pruners' dcs-arch2 share their
    structure, models/backbones/base.py's VARIANTS)."""
    if (getattr(a, 'arch', None) != getattr(b, 'arch', None)
            or selection_options(a) != selection_options(b)):
        return False
    try:
        dims, hdims = _units(a)
        if (dims, hdims) != _units(b):
            return False
    except ValueError:
        return False
    probe = dict([((CHANNELS, n), w) for n, w in distinct_halves(dims).items()]
                 + [((HIDDEN, k), w) for k, w in distinct_halves(hdims).items()])
    cpu = torch.device('cpu')
    return all(_signature(pruned_copy(a, w, cpu, torch.float32))
               == _signature(pruned_copy(b, w, cpu, torch.float32)) for w in ({}, probe))


def budget_options(budget: float, tables: Optional['LatencyTables'] = None,
                   model: Optional[str] = None, method: Optional[str] = None) -> List[str]:
    """--cfg-options that aim a demo search config (DCS or KCR) at ``budget``: of the
    baseline's FLOPs (with ``model``'s :data:`FLOPS_SELECT_HIDDEN`), or with ``tables`` of its
    latency predicted by ``model``'s table for ``method`` (the config's FLOPs target set to
    None, the table, the model's hidden-unit selection)."""
    if tables is None:
        hidden = FLOPS_SELECT_HIDDEN.get(model, False)
        return [f'model.cost.target.flops={float(budget)!r}'] + (
            [f'model.backbone.select_hidden={hidden}'] if hidden else [])
    path, _ = tables.get(model, table_kind(method))
    return ['model.cost.target.flops=None', f'model.cost.target.latency={float(budget)!r}',
            f'model.cost.latency_table={path}'] + [
        f'{k}={v}' for k, v in tables.options(model, method).items()]


class LatencyTables:
    """The latency tables of a latency comparison: per model, one per network the methods
    export (DCS's supernet, KCR's, the pruners' dcs-arch2), each with the model's hidden-unit
    selection (:data:`LATENCY_SELECT_HIDDEN`), at 64×64, batch 1, one thread, on this CPU
    (:func:`mmdcs.apis.latency_io.measure_table`), written to ``folder`` and read back on a
    resumed run (checked against the supernet). The pruners' table is KCR's when the two
    networks are the same (:func:`same_network`; recorded under ``measured_as``). A table that
    cannot be built or read, or a budget outside a table's (predicted floor, ceiling), is one
    :class:`UserError` line.

    ``builder(supernet, baseline, (H, W)) -> table`` replaces the measurement (tests: a
    synthetic timer)."""

    def __init__(self, folder: str, select_hidden: Optional[dict] = None, batch: int = 1,
                 threads: int = 1, rounds: int = 5, multiple_of: int = 8,
                 builder: Optional[Callable] = None, log: Callable[[str], None] = _print):
        try:  # measured here: a batch of at most MAX_BATCH images, the cores of this machine
            check_timing(batch, threads)
        except ValueError as e:
            raise UserError(f'latency tables: {e}') from None
        self.folder = folder
        self.select_hidden = dict(LATENCY_SELECT_HIDDEN, **(select_hidden or {}))
        self.batch, self.threads, self.rounds = int(batch), int(threads), int(rounds)
        self.multiple_of, self.shape = int(multiple_of), LATENCY_SHAPE
        #: the clock of the tables and of the subnets' measurement
        self.clock = default_clock('cpu', self.threads)
        self.builder, self.log = builder, log
        self._got: Dict[Tuple[str, str], Tuple[str, object]] = {}
        self.shared: Dict[str, str] = {}  # model -> the table the pruners share

    def settings(self) -> dict:
        """What every row of one results.json shares about its latency tables."""
        return dict(input_shape=list(self.shape), batch=self.batch, threads=self.threads,
                    multiple_of=self.multiple_of, device='cpu', dtype='fp32', clock=self.clock,
                    select_hidden=dict(sorted(self.select_hidden.items())))

    def options(self, model: str, kind: str) -> Dict[str, object]:
        """``--cfg-options`` of the network of ``kind`` (with :meth:`config`)."""
        opts: Dict[str, object] = {}
        if kind == 'pruned':
            opts['model.backbone.variant'] = TABLE_VARIANTS['pruned']
        hidden = self.select_hidden.get(model, False)
        if hidden:
            opts['model.backbone.select_hidden'] = hidden
        return opts

    @staticmethod
    def config(model: str, kind: str) -> str:
        return MODELS[model]['baseline'] if kind == 'pruned' else search_config(model, kind)

    def path(self, model: str, kind: str) -> str:
        return osp.abspath(osp.join(self.folder, table_file_name(
            model, TABLE_VARIANTS[kind], self.shape, self.batch, self.threads, 'cpu', 'fp32',
            self.select_hidden.get(model, False))))

    def _measure(self, sup, base, size) -> dict:
        if self.builder is not None:
            return self.builder(sup, base, size)
        keep_freed_memory()  # as tools/analysis/latency_table.py (process-wide)
        return measure_table(sup, base, size, self.batch, self.threads, 'fp32', 'cpu',
                             self.rounds, self.multiple_of, 0, progress=self.log)

    def get(self, model: str, kind: str):
        """(path, :class:`~mmdcs.selection.latency_cost.LatencyCost`) of the table of
        ``kind`` for ``model``: read back, shared, or measured and written."""
        if (model, kind) in self._got:
            return self._got[(model, kind)]
        path = self.path(model, kind)
        hidden = self.select_hidden.get(model, False)
        what = (f'the latency table of {model} ({TABLE_VARIANTS[kind]}'
                f'{f", select_hidden={hidden}" if hidden else ""}, '
                f'{self.shape[0]}x{self.shape[1]}, batch {self.batch}, {self.threads} thread(s))')
        try:
            sup, base, size, _ = config_backbones(osp.join(ROOT, self.config(model, kind)),
                                                  self.shape, self.options(model, kind))
            if osp.exists(path):
                table = load_table(path)
                self.log(f'{model}: {what}: {path}')
            else:
                table = None
                if kind == 'pruned' and (model, 'kcr') in self._got:
                    kcr_path, kcr_cost = self._got[(model, 'kcr')]
                    kcr_sup = config_backbones(osp.join(ROOT, self.config(model, 'kcr')),
                                               self.shape, self.options(model, 'kcr'))[0]
                    if same_network(sup, kcr_sup):
                        table = dict(kcr_cost.table, variant=TABLE_VARIANTS['pruned'],
                                     measured_as=dict(
                                         variant='kcr', file=osp.basename(kcr_path),
                                         sha256=file_sha256(kcr_path),
                                         note='the same network as the kcr supernet\'s (module '
                                              'types and shapes at full and probe widths): '
                                              'its table, relabelled'))
                        self.log(f'{model}: {what}: the kcr table (the same network)')
                if table is None:
                    self.log(f'{model}: measuring {what} ...')
                    table = self._measure(sup, base, size)
                    table['config'] = self.config(model, kind)
                    table['cfg_options'] = self.options(model, kind)
                os.makedirs(self.folder, exist_ok=True)
                write_json(path, table)
            cost = LatencyCost.from_table(table, sup, size)
        except UserError as e:
            raise UserError(f'--resource latency: {what}: {e}') from e
        except (ValueError, KeyError, RuntimeError, OSError, TypeError) as e:
            raise UserError(f'--resource latency: cannot build or read {what} ({path}): '
                            f'{e}') from e
        if table.get('measured_as'):
            self.shared[model] = table['measured_as']['variant']
        self._got[(model, kind)] = (path, cost)
        return path, cost

    def identity(self, model: str, kind: str) -> dict:
        """A row's record of its table: the file (relative to ``folder``'s parent), its
        sha256, the table's CPU and baseline."""
        path, cost = self.get(model, kind)
        t = cost.table
        return dict(file=osp.relpath(path, osp.dirname(osp.abspath(self.folder))),
                    sha256=file_sha256(path), variant=t.get('variant'),
                    measured_as=(t.get('measured_as') or {}).get('variant'),
                    device_name=t.get('device_name'), baseline_ms=t.get('baseline_ms'))

    def prepare(self, models: Sequence[str], methods: Sequence[str],
                budgets: Sequence[float]) -> None:
        """Every table the grid needs (DCS's, KCR's, then the pruners': they may share KCR's),
        and every budget checked against each table's (predicted floor, ceiling) before any
        training: one line naming the model, the network and the bounds."""
        kinds = [k for k in ('dcs', 'kcr', 'pruned')
                 if any(table_kind(m) == k for m in methods)]
        for model in models:
            for kind in kinds:
                _, cost = self.get(model, kind)
                for b in budgets:
                    try:
                        cost.check_target(float(b), '--budgets', self.multiple_of)
                    except BudgetError as e:
                        raise UserError(f'--resource latency: {model} ({TABLE_VARIANTS[kind]}): '
                                        f'{e}') from e


# ----------------------------------------------------------------------------- statistics
def mean_std(values: Sequence[float]) -> Tuple[float, float]:
    """(mean, sample standard deviation, n − 1 in the denominator; NaN for one value)."""
    values = [float(v) for v in values]
    if not values:
        return math.nan, math.nan
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, math.nan
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


#: t's 0.975 quantile (two-sided 95 %) for 1 to 30 degrees of freedom, where scipy is absent
T975 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004,
        2.262157, 2.228139, 2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905,
        2.109816, 2.100922, 2.093024, 2.085963, 2.079614, 2.073873, 2.068658, 2.063899,
        2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272)


def t975(df: int) -> float:
    """Student's t 0.975 quantile with ``df`` degrees of freedom (scipy's where installed,
    else :data:`T975`; above 30 its 30's, slightly wide)."""
    try:
        from scipy.stats import t
    except ImportError:
        return T975[min(int(df), len(T975)) - 1]
    return float(t.ppf(0.975, int(df)))


def t_interval(values: Sequence[float]) -> Tuple[float, float]:
    """The 95 % t interval of the mean of ``values`` (mean ± t975(n − 1)·s/√n; NaNs for fewer
    than two values)."""
    m, s = mean_std(values)
    if len(values) < 2:
        return math.nan, math.nan
    h = t975(len(values) - 1) * s / math.sqrt(len(values))
    return m - h, m + h


def noise_floor(top1: float, images: int) -> float:
    """One run's binomial standard error (points) at ``top1`` % on ``images`` test images."""
    p = float(top1) / 100.
    return 100. * math.sqrt(p * (1. - p) / int(images))


def _group_key(row: dict) -> tuple:
    return (row['regime'], row['model'], row['method'], float(row['budget']))


def aggregate(rows: Iterable[dict]) -> Dict[tuple, dict]:
    """(regime, model, method, budget) → n, seeds, mean / std of top-1 and of the params,
    FLOPs and latency ratios (None where a ratio was not measured)."""
    groups = defaultdict(list)
    for r in rows:
        groups[_group_key(r)].append(r)
    out = OrderedDict()
    for key in sorted(groups, key=lambda k: (k[0], k[1], -k[3], _order(k[2]))):
        rs = sorted(groups[key], key=lambda r: r['seed'])
        entry = dict(n=len(rs), seeds=[r['seed'] for r in rs])
        entry['top1'], entry['top1_std'] = mean_std([r['top1'] for r in rs])
        entry['outside'] = sum(r.get('latency_within') is False for r in rs)
        for ratio in ('params_ratio', 'flops_ratio', 'latency_ratio', 'predicted_latency_ratio'):
            vals = [r.get(ratio) for r in rs if r.get(ratio) is not None]
            entry[ratio], entry[ratio + '_std'] = mean_std(vals) if vals else (None, None)
        out[key] = entry
    return out


def paired_differences(rows: Iterable[dict], reference: str = REFERENCE) -> Dict[tuple, dict]:
    """(regime, model, method, budget) → the top-1 difference (method − reference) over the
    seeds both have, each seed's pair, their mean, sample std and 95 % t interval
    (:func:`t_interval`; the paired comparison: the seed's shared data order and
    initialisation cancel)."""
    by = {}
    for r in rows:
        by[_group_key(r) + (r['seed'], )] = float(r['top1'])
    out = OrderedDict()
    keys = sorted({k[:4] for k in by}, key=lambda k: (k[0], k[1], -k[3], _order(k[2])))
    for key in keys:
        regime, model, method, budget = key
        if method == reference:
            continue
        diffs = {}
        for (rg, md, mt, b, seed), v in by.items():
            if (rg, md, mt, b) == key:
                ref = by.get((regime, model, reference, budget, seed))
                if ref is not None:
                    diffs[seed] = v - ref
        if diffs:
            vals = [diffs[k] for k in sorted(diffs)]
            m, s = mean_std(vals)
            out[key] = dict(n=len(diffs), diffs={k: diffs[k] for k in sorted(diffs)}, mean=m,
                            std=s, ci95=list(t_interval(vals)),
                            wins=sum(d > 0 for d in diffs.values()))
    return out


def _order(method: str) -> int:
    order = ('baseline', ) + METHODS
    return order.index(method) if method in order else len(order)


def _pm(mean, std, digits=2) -> str:
    if mean is None:
        return '—'
    if std is None or (isinstance(std, float) and math.isnan(std)):
        return f'{mean:.{digits}f}'
    return f'{mean:.{digits}f} ± {std:.{digits}f}'


REGIME_NOTES = {
    'scratch': ('retrained from scratch: which channels are kept cannot matter (a network trained '
                'from scratch is symmetric in its channels), only the kept width of each block; '
                'the methods differ by their width allocation (and DCS/KCR by their retraining '
                'terms unless retrained with cross-entropy only)'),
    'pretrained': ('fine-tuned from a trained baseline\'s weights (pruned.pth): the choice of the '
                   'channels counts as well as their number'),
}


def _ci(d: dict) -> str:
    lo, hi = d.get('ci95') or (math.nan, math.nan)
    return '—' if math.isnan(lo) else f'[{lo:+.2f}, {hi:+.2f}]'


def protocol_lines(rows: List[dict], settings: dict) -> List[str]:
    """What a shared baseline's protocol adds to the summary: the baseline's top-1 after every
    epoch, the test set's noise floor at its accuracy, the images every method trained after
    it, and whether every row's measured latency is within the tolerance of its budget."""
    base = [r for r in rows if r['method'] == 'baseline' and r.get('curve')]
    if not base:
        return []
    lines = []
    images = settings.get('val_images') or DATASETS[settings['dataset']]['test_images']
    for b in base:
        curve = ', '.join(f'{v:.2f}' for v in b['curve'])
        lines.append(f"Baseline {MODELS.get(b['model'], {}).get('label', b['model'])} (seed "
                     f"{b['seed']}, {len(b['curve'])} epoch{'s' * (len(b['curve']) != 1)}, "
                     f"{b.get('images_seen', '?')} "
                     f"images seen): val top-1 after each epoch {curve}; noise floor: one "
                     f"run's binomial standard error at {b['top1']:.2f} % on {images} test "
                     f"images is {noise_floor(b['top1'], images):.2f} points.")
    seen = sorted({r.get('images_seen') for r in rows if r['method'] != 'baseline'},
                  key=str)
    lines.append(f'Training images seen after the baseline by every row: '
                 f'{", ".join(map(str, seen))} (a search\'s epochs counted against its method).')
    if settings.get('latency'):
        out = [r for r in rows if r.get('latency_within') is False]
        lines.append(f'Measured latency within ±{LATENCY_TOLERANCE:g} of its budget: '
                     f'{"every row" if not out else f"all but {len(out)} rows (marked ✗)"}.')
    return [line for x in lines for line in (x, '')]


def summary_markdown(rows: List[dict], settings: dict) -> str:
    """DIR/summary.md: mean ± std top-1 per model × method × budget, the cost ratios, the
    paired differences against magnitude over seeds, per regime."""
    agg = aggregate(rows)
    diffs = paired_differences(rows)
    latency = settings.get('latency') is not None  # a comparison on latency tables
    if latency:
        t = settings.get('latency', {})
        cost = ('budgets are **latency** ratios of the baseline backbone predicted by a latency '
                'table of the network each method exports (DCS\'s supernet, KCR\'s, the '
                'pruners\' dcs-arch2; '
                f"{'x'.join(map(str, t.get('input_shape', [])))}, batch {t.get('batch')}, "
                f"{t.get('threads')} thread(s), hidden-unit selection "
                f"{t.get('select_hidden')}); \"latency\": the exported backbone measured "
                'against the baseline backbone on this CPU (the table\'s batch and threads, '
                f"interleaved rounds, medians, {t.get('clock', 'wall')} clock"
                + (': the thread\'s CPU time, as the table\'s' if t.get('clock') == 'thread'
                   else '') + '), '
                '"predicted": the table\'s ratio; FLOPs and params of the classifier counted '
                'by mmengine.analysis at 64×64')
    else:
        cost = ('ratios to the baseline classifier (FLOPs and params counted by '
                'mmengine.analysis at 64×64, latency measured on this CPU, batch 16, 1 thread: '
                'noisy on a shared machine)')
    dataset = DATASETS.get(settings.get('dataset', 'digits'), DATASETS['digits'])
    lines = ['# Method comparison', '',
             f"Settings: {json.dumps(settings, sort_keys=True)}", '',
             f"Top-1 on {dataset['label']} (%), mean ± sample std over seeds; {cost}; "
             f'"vs {REFERENCE}": the paired top-1 difference over the seeds both have '
             '(mean ± std, seeds where the method is higher / seeds), "95 % t": its 95 % '
             'Student-t interval over those seeds (mean ± t(n − 1)·std/√n).', '']
    lines += protocol_lines(rows, settings)
    for regime in REGIMES:
        keys = [k for k in agg if k[0] == regime]
        if not keys:
            continue
        head = ('| model | method | budget | top-1 | seeds | latency ratio | predicted latency '
                f'| FLOPs ratio | params ratio | vs {REFERENCE} | 95 % t |' if latency else
                '| model | method | budget | top-1 | seeds | FLOPs ratio | params ratio | '
                f'latency ratio | vs {REFERENCE} | 95 % t |')
        lines += [f'## {regime}', '', REGIME_NOTES[regime] + '.', '', head,
                  '|---|---|---|---|---|---|---|---|---|---|' + ('---|' if latency else '')]
        for k in keys:
            a = agg[k]
            d = diffs.get(k)
            vs = (f"{_pm(d['mean'], d['std'])} ({d['wins']}/{d['n']}) | {_ci(d)}" if d
                  else '— | —')
            first = (f"| {MODELS.get(k[1], {}).get('label', k[1])} | {k[2]} | {k[3]:g} | "
                     f"{_pm(a['top1'], a['top1_std'])} | {a['n']} | ")
            lat = _pm(a['latency_ratio'], a['latency_ratio_std'], 3 if latency else 2) + (
                f" ✗ {a['outside']} outside ±{LATENCY_TOLERANCE:g}" if a.get('outside') else '')
            counts = f"{_pm(a['flops_ratio'], None, 3)} | {_pm(a['params_ratio'], None, 3)}"
            if latency:
                lines.append(first + f"{lat} | {_pm(a['predicted_latency_ratio'], None, 3)} | "
                             f'{counts} | {vs} |')
            else:
                lines.append(first + f'{counts} | {lat} | {vs} |')
        lines.append('')
    return '\n'.join(lines) + '\n'


# ----------------------------------------------------------------------------- plots
def _plt():
    import matplotlib  # lazy import: matplotlib only for the figures
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


def plot_accuracy_vs_cost(rows: List[dict], path: str, cost: str = 'flops_ratio') -> None:
    """One point per method and budget (mean top-1 over seeds, error bars: sample std), per
    model and regime a panel; x the cost ratio (``flops_ratio`` or ``latency_ratio``)."""
    plt = _plt()
    agg = aggregate(rows)
    panels = sorted({(k[0], k[1]) for k in agg})
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(5.5 * max(1, len(panels)), 4),
                             squeeze=False)
    for ax, (regime, model) in zip(axes[0], panels):
        methods = sorted({k[2] for k in agg if k[:2] == (regime, model)}, key=_order)
        for method in methods:
            ks = sorted((k for k in agg if k[:3] == (regime, model, method)),
                        key=lambda k: k[3])
            xs = [agg[k][cost] if agg[k][cost] is not None else k[3] for k in ks]
            ys = [agg[k]['top1'] for k in ks]
            es = [0. if math.isnan(agg[k]['top1_std']) else agg[k]['top1_std'] for k in ks]
            ax.errorbar(xs, ys, yerr=es, marker='o', capsize=3, label=method)
        ax.set_title(f"{MODELS.get(model, {}).get('label', model)} ({regime})")
        ax.set_xlabel(cost.replace('_', ' ') + ' of the baseline')
        ax.set_ylabel('val top-1 (%)')
        ax.grid(alpha=.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_widths(rows: List[dict], path: str) -> None:
    """Per-block kept fraction (mean over seeds) of every method, one panel per model, regime
    and budget: what each method allocates differently (a unit's hidden units, where they
    are pruned, as '<name> hidden' beside its channels)."""
    plt = _plt()
    acc = defaultdict(lambda: defaultdict(list))
    for r in rows:
        units = width_units(r)
        if not units:
            continue
        key = (r['regime'], r['model'], float(r['budget']))
        for block, (kept, dim) in units.items():
            acc[key + (r['method'], )][block].append(kept / dim)
    panels = sorted({k[:3] for k in acc})
    fig, axes = plt.subplots(max(1, len(panels)), 1, figsize=(10, 3 * max(1, len(panels))),
                             squeeze=False)
    for ax, panel in zip(axes[:, 0], panels):
        methods = sorted({k[3] for k in acc if k[:3] == panel}, key=_order)
        blocks = sorted({b for k in acc if k[:3] == panel for b in acc[k]},
                        key=_block_order)
        width = 0.8 / max(1, len(methods))
        for i, method in enumerate(methods):
            vals = [sum(acc[panel + (method, )][b]) / len(acc[panel + (method, )][b])
                    if acc[panel + (method, )][b] else 0. for b in blocks]
            ax.bar([j + i * width for j in range(len(blocks))], vals, width, label=method)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(blocks))])
        ax.set_xticklabels([_short(b) for b in blocks], rotation=60, fontsize=7)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel('kept fraction')
        ax.set_title(f"{MODELS.get(panel[1], {}).get('label', panel[1])}, budget {panel[2]:g} "
                     f'({panel[0]})')
        ax.legend(fontsize=7, ncol=len(methods))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def width_units(row: dict) -> Dict[str, List[int]]:
    """A row's kept widths, label → [kept, full]: its channels under the block's name, its
    hidden units (where pruned) as '<name> hidden'."""
    return dict([(b, list(w)) for b, w in (row.get('widths') or {}).items()] + [
        (f'{b} hidden', list(w)) for b, w in (row.get('hidden_widths') or {}).items()])


def _block_order(name: str):
    return [int(p) if p.isdigit() else p for p in name.replace('.', ' ').split()]


def _short(name: str) -> str:
    return name.replace('layers.', 'L').replace('.mlp', '').replace('.ffn', '')


# ----------------------------------------------------------------------------- results file
def run_key(row: dict) -> tuple:
    return (row['regime'], row['model'], row['method'], float(row['budget']), int(row['seed']))


def read_results(path: str, what: str = '') -> dict:
    """The content of a results.json (a dict of this :data:`RESULTS_VERSION`); anything else
    is one :class:`UserError` line (prefixed with ``what``)."""
    try:
        data = read_json(path, what='results')
    except (OSError, ValueError) as e:
        raise UserError(f'{what}{path} is not a results file of compare_methods.py: {e}')
    if not isinstance(data, dict) or data.get('version') != RESULTS_VERSION:
        raise UserError(f'{what}{path} is not a results file of compare_methods.py '
                        f'(version {RESULTS_VERSION})')
    return data


class Results:
    """DIR/results.json: the settings and one row per finished run, rewritten atomically after
    each run. A file of other settings is refused (one line), never overwritten."""

    def __init__(self, path: str, settings: dict):
        self.path, self.settings = path, settings
        self.rows: List[dict] = []
        if osp.exists(path):
            data = read_results(path)
            if data.get('settings') != settings:
                raise UserError(
                    f'{path} holds results of other settings ({json.dumps(data.get("settings"))}'
                    f' vs {json.dumps(settings)}): use another --out, or the same settings to '
                    'resume')
            self.rows = list(data.get('rows', []))
        self.done = {run_key(r) for r in self.rows}

    def add(self, row: dict) -> None:
        if run_key(row) in self.done:
            raise UserError(f'internal: run {run_key(row)} is in {self.path} already')
        self.rows.append(row)
        self.done.add(run_key(row))
        self.save()

    def save(self) -> None:
        write_json(self.path, dict(version=RESULTS_VERSION, settings=self.settings,
                                   rows=self.rows), force=True)


# ----------------------------------------------------------------------------- the grid
def plan(models: Sequence[str], methods: Sequence[str], budgets: Sequence[float],
         seeds: Sequence[int], regime: str, shared: bool = False) -> List[dict]:
    """Every run, in the order they are done: per model and seed, the baseline (``shared``:
    one, seed 0, before every seed), then per budget the searches before the pruners (random
    takes KCR's or magnitude's widths) and the ablations (DCS's export)."""
    runs = []
    for model in models:
        if shared:
            runs.append(dict(regime=regime, model=model, method='baseline', budget=1.0, seed=0))
        for seed in seeds:
            if not shared:
                runs.append(dict(regime=regime, model=model, method='baseline', budget=1.0,
                                 seed=seed))
            for budget in budgets:
                for method in sorted(methods, key=_order):
                    runs.append(dict(regime=regime, model=model, method=method,
                                     budget=float(budget), seed=seed))
    return runs


def run_grid(runs: List[dict], results: Results, run_one: Callable[[dict], dict],
             log: Callable[[str], None] = _print, clock: Callable[[], float] = time.time
             ) -> List[dict]:
    """Run every run not in ``results`` (``run_one(run)`` → the row's measurements), adding
    each row as it finishes; one progress line per run (done / total, elapsed, ETA from the
    times of the runs done in this call: :func:`eta`)."""
    todo = [r for r in runs if run_key(r) not in results.done]
    skipped = len(runs) - len(todo)
    if skipped:
        log(f'{skipped} of {len(runs)} runs already in {results.path}: skipped')
    t0, took = clock(), []
    for i, run in enumerate(todo):
        what = (f"{run['model']} {run['method']} budget {run['budget']:g} seed {run['seed']} "
                f"({run['regime']})")
        log(f'[{skipped + i + 1}/{len(runs)}] {what} ...')
        start = clock()
        row = dict(run)
        row.update(run_one(run))
        results.add(row)
        took.append((run['method'], clock() - start))
        miss = (f" | measured latency {row['latency_ratio']:.3f}: outside ±"
                f'{LATENCY_TOLERANCE:g} of the budget (marked)'
                if row.get('latency_within') is False else '')
        log(f"[{skipped + i + 1}/{len(runs)}] {what}: top-1 {row['top1']:.2f}{miss} | "
            f'{_clock(clock() - t0)} elapsed | ETA {_clock(eta(took, todo[i + 1:]))}')
    return results.rows


def eta(took: Sequence[Tuple[str, float]], todo: Sequence[dict]) -> float:
    """Seconds the runs ``todo`` will take, from the measured times of finished runs
    (``took``: (method, seconds)): each at its method's mean, a method not yet timed at the
    mean of the finished runs other than the baseline (one long training, not a row's), or of
    all of them."""
    per = defaultdict(list)
    for method, seconds in took:
        per[method].append(seconds)
    rows = [s for m, s in took if m != 'baseline'] or [s for _, s in took]
    fallback = sum(rows) / len(rows) if rows else 0.
    return sum(sum(per[r['method']]) / len(per[r['method']]) if per[r['method']] else fallback
               for r in todo)


def _clock(seconds: float) -> str:
    s = int(max(0, seconds))
    return f'{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}'


@dataclass
class Protocol:
    """What a comparison's data set sets (:data:`DATASETS`): ``shared``: one baseline (seed 0,
    ``baseline_epochs``, validated every epoch) that every method and seed prunes, read from
    ``baseline_from`` (a work dir of tools/train.py) when given; ``val_images``: validate on the
    first N test images (0: all); ``refine``: measured corrections of a latency export;
    ``final_val``: validate each pruned network once, after its last epoch."""
    dataset: str = 'digits'
    shared: bool = False
    baseline_epochs: Optional[int] = None
    baseline_from: Optional[str] = None
    val_images: int = 0
    refine: int = 0
    final_val: bool = False

    @classmethod
    def of(cls, dataset: str = 'digits', baseline_epochs: Optional[int] = None,
           baseline_from: Optional[str] = None, val_images: int = 0) -> 'Protocol':
        d = DATASETS[dataset]
        fashion = dataset != 'digits'
        return cls(dataset, fashion or bool(baseline_from),
                   baseline_epochs or d.get('baseline_epochs'),
                   osp.abspath(baseline_from) if baseline_from else None,
                   int(val_images or 0), int(d.get('refine', 0)), fashion)

    def settings(self) -> dict:
        """What a results.json records of it (nothing for the digits' defaults: their files
        resume as before)."""
        if self == Protocol():
            return {}
        out = dict(dataset=self.dataset, shared_baseline=self.shared,
                   baseline_epochs=self.baseline_epochs, val_images=self.val_images,
                   refine=self.refine)
        if self.baseline_from:
            out['baseline_from'] = self.baseline_from
        return out


def read_baseline(work_dir: str, epochs: int) -> dict:
    """A baseline trained by tools/train.py into ``work_dir``: its last checkpoint (read
    through the safe checkpoint loader, trusted as a checkpoint that run wrote) and its val
    top-1 after every epoch (mmengine's ``vis_data/scalars.json``); one :class:`UserError`
    line when it is not a finished run of ``epochs`` epochs validated every epoch."""
    what = f'--baseline-from {work_dir}'
    try:
        with open(osp.join(work_dir, 'last_checkpoint')) as f:
            ckpt = f.read().strip()
        curve = epoch_series(load_records(work_dir)).get('accuracy/top1', {})
    except (OSError, FileNotFoundError) as e:
        raise UserError(f'{what}: not a finished training run of tools/train.py ({e})') from e
    if not osp.isabs(ckpt):
        ckpt = osp.join(work_dir, ckpt)
    if sorted(curve) != list(range(1, epochs + 1)):
        raise UserError(f'{what}: validated after epochs {sorted(curve)}, not after each of '
                        f'the {epochs} epochs (--baseline-epochs)')
    try:
        with trust_scope():
            trust_checkpoints(dirs=[work_dir])
            load_checkpoint_file(ckpt, map_location='cpu')
    except (OSError, ValueError) as e:
        raise UserError(f'{what}: its last checkpoint is not readable: {e}') from e
    return dict(checkpoint=ckpt, curve=[round(curve[e], 4) for e in range(1, epochs + 1)])


class Runner:
    """Runs one row of the grid with the repository's tools (tools/train.py,
    tools/export_subnet.py) in subprocesses, each with its log under ``work``."""

    def __init__(self, work: str, data: str, epochs: int, train_images: int, regime: str,
                 search_epochs: Optional[int] = None, retrain: str = 'default',
                 latency: bool = True, python: str = sys.executable,
                 extra: Sequence[str] = (), theta_masks: bool = True,
                 arch_lr: Optional[float] = None, tables: Optional[LatencyTables] = None,
                 measure_options: Optional[dict] = None, pruner_epochs: Optional[int] = None,
                 select_heads: bool = False, protocol: Optional[Protocol] = None):
        self.work, self.data, self.epochs = work, data, epochs
        self.protocol = protocol or Protocol()
        #: every method that ranks heads (:data:`HEAD_METHODS`) prunes attention heads too
        self.select_heads = bool(select_heads)
        #: the pruners' fine-tuning epochs in the pretrained regime (default ``epochs``;
        #: ``epochs + search_epochs`` trains them as long as a search plus its fine-tuning)
        self.pruner_epochs = pruner_epochs or epochs
        self.extra = list(extra)  # more --cfg-options of every training run
        self.theta_masks = theta_masks
        self.train_images, self.regime, self.retrain = train_images, regime, retrain
        self.search_epochs = search_epochs or epochs
        self.latency, self.py = latency, python
        self.arch_lr = arch_lr
        #: a latency comparison's tables (None: the budgets are FLOPs budgets)
        self.tables = tables
        #: options of the export's latency measurement (``meter``: tests); the measurement is
        #: the table's own (its clock, batch and threads: one thread, the thread's CPU time)
        self.measure_options = dict(measure_options or {})
        self._base_cost = {}

    # -- helpers
    def _dir(self, run: dict, *parts: str) -> str:
        return osp.join(self.work, run['regime'], run['model'], f"seed{run['seed']}", *parts)

    def _data_opts(self, epochs: int, seed: int) -> List[str]:
        p = self.protocol
        root = self.data if p.dataset != 'digits' else osp.join(self.data, 'cls')
        return [f'{s}_dataloader.dataset.data_root={root}' for s in ('train', 'val', 'test')] + [
            f'train_cfg.max_epochs={epochs}', f'randomness.seed={seed}'] + (
            [f'train_dataloader.dataset.indices={self.train_images}']
            if self.train_images else []) + (
            [f'{s}_dataloader.dataset.indices={p.val_images}' for s in ('val', 'test')]
            if p.val_images else []) + self.extra

    def cfg(self, config: str) -> str:
        """``config`` (a digits config) for the comparison's data set (:func:`for_dataset`)."""
        return for_dataset(config, self.protocol.dataset)

    def baseline(self, run: dict) -> Tuple[str, str, int]:
        """(work dir, checkpoint, epochs) of the baseline ``run`` prunes: its seed's (trained
        for ``epochs``), or the protocol's one shared baseline (seed 0, read from
        ``baseline_from`` or trained once for ``baseline_epochs``)."""
        p, cfg = self.protocol, self.cfg(MODELS[run['model']]['baseline'])
        if not p.shared:
            return self._dir(run, 'baseline'), self.train(
                cfg, self._dir(run, 'baseline'), self.epochs, run['seed']), self.epochs
        epochs = p.baseline_epochs or self.epochs
        if p.baseline_from:
            return p.baseline_from, read_baseline(p.baseline_from, epochs)['checkpoint'], epochs
        work_dir = osp.join(self.work, run['regime'], run['model'], 'baseline')
        return work_dir, self.train(cfg, work_dir, epochs, 0), epochs

    def _call(self, cmd: List[str], log_path: str) -> None:
        with open_log(log_path) as log:
            proc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            with open(log_path) as f:
                tail = f.read()[-3000:]
            raise UserError(f'a run failed (exit {proc.returncode}): {" ".join(cmd)}\n'
                            f'--- last lines of {log_path} ---\n{tail}')

    def train(self, config: str, work_dir: str, epochs: int, seed: int,
              extra: Sequence[str] = ()) -> str:
        """Train unless ``work_dir`` holds a finished run; returns its last checkpoint."""
        done = osp.join(work_dir, 'last_checkpoint')
        if not (osp.exists(done) and _last_top1(work_dir, epochs) is not None):
            self._call([self.py, 'tools/train.py', config, '--work-dir', work_dir,
                        '--cfg-options'] + self._data_opts(epochs, seed) + list(extra),
                       work_dir + '.log')
        with open(done) as f:
            return f.read().strip()

    def export(self, config: str, checkpoint: str, out: str, budget: float, method: str,
               seed: int = 0, widths_from: Optional[str] = None, model: Optional[str] = None,
               cfg_options: Optional[dict] = None, kind: Optional[str] = None) -> dict:
        """OUT/subnet.json and pruned.pth at ``budget`` (:func:`mmdcs.apis.export.
        export_subnet` in this process, its report in OUT.log), unless there already. A latency
        comparison aims at the predicted latency of ``model``'s table ``kind`` (default: the
        table of ``method``, :func:`table_kind`)
        (widths in groups of the tables' ``multiple_of``; ``uniform``: any width, see
        :meth:`uniform_multiple_of`) and times the subnet against the baseline (the table's
        batch and threads)."""
        subnet = osp.join(out, 'subnet.json')
        if not osp.exists(subnet):
            options: Dict[str, object] = dict(seed=int(seed))
            if widths_from:
                options['widths'] = widths_of(widths_from)
            kw: Dict[str, object] = dict(target=('flops', float(budget)))
            if self.tables is not None:
                path, _ = self.tables.get(model, kind or table_kind(method))
                # every method at the table's prediction, as the table ranks it (the digits'
                # protocol: no correction), or corrected by measurement (the protocol's
                # ``refine``); never refused here, which would stop the grid: a row measured
                # outside the tolerance is marked (``latency_within``)
                kw = dict(target=('latency', float(budget)),
                          cost_options=dict(latency_table=path), measure=True,
                          measure_options=dict(self.measure_options),
                          refine=self.protocol.refine,
                          latency_tolerance=None,
                          multiple_of=(self.uniform_multiple_of() if method == 'uniform'
                                       else self.tables.multiple_of))
            with open_log(out + '.log') as log, contextlib.redirect_stdout(log):
                result = export_subnet(osp.join(ROOT, config), osp.join(ROOT, checkpoint), out,
                                       method=method, cfg_options=cfg_options,
                                       batches=train_batches(4, seed=int(seed)),
                                       scorer_options=options, **kw)
                log.write('\n'.join(result.lines + result.warnings) + '\n')
        return SubnetSpec.load(subnet).to_dict()

    @staticmethod
    def uniform_multiple_of() -> int:
        """Uniform pruning aims at a latency with any width (widths round(r·D), the largest r
        whose predicted latency meets the budget): in groups of 8 the same step in every block
        of DeiT-Tiny (12 × 192 channels) moves the latency by ~1.5 %, outside the ±1 % every
        export holds to."""
        return 1

    def search_options(self, run: dict, base_ckpt: Optional[str] = None) -> List[str]:
        """--cfg-options of a DCS / KCR search: its budget (``model.cost.target.flops``, or
        for a latency comparison the latency target with its table and the model's hidden-unit
        selection), the architecture optimiser's lr (``arch_lr``: its cosine floor kept at
        :data:`ARCH_LR_ETA_MIN_SHARE` of it), the baseline it starts from (pretrained)."""
        opts = budget_options(float(run['budget']), self.tables, run['model'], run['method'])
        if self.arch_lr is not None:
            lr = float(self.arch_lr)
            opts += [f'optim_wrapper.arch.optimizer.lr={lr!r}',
                     f'param_scheduler.arch.0.eta_min={lr * ARCH_LR_ETA_MIN_SHARE!r}']
        if self.select_heads:
            opts.append('model.backbone.select_heads=True')
        if base_ckpt is not None:
            opts.append(f'load_from={base_ckpt}')
        return opts

    @staticmethod
    def _as_dict(opts: Sequence[str]) -> dict:
        from mmengine.config import DictAction
        return {k: DictAction._parse_iterable(v) for k, v in (o.split('=', 1) for o in opts)}

    # -- one row
    def __call__(self, run: dict) -> dict:
        model, method, budget, seed = run['model'], run['method'], run['budget'], run['seed']
        base_cfg = self.cfg(MODELS[model]['baseline'])
        base_dir, base_ckpt, base_epochs = self.baseline(run)
        if method == 'baseline':
            row = self._row(base_dir, base_epochs, base_cfg, [], None)
            if self.protocol.shared:  # its val top-1 after every epoch: the curve it learnt
                row['curve'] = read_baseline(base_dir, base_epochs)['curve']
            return row
        if method in ABLATIONS:
            return self.ablation(run)
        tag = f'{method}_{budget:g}'
        spec_dir = self._dir(run, f'{tag}_subnet')
        pretrained = self.regime == 'pretrained'
        if method in SEARCHED:
            search_cfg = self.cfg(search_config(model, method, pretrained))
            opts = self.search_options(run, base_ckpt if pretrained else None)
            # search_epochs (default: epochs) in both regimes: the search-length ablation
            ckpt = self.train(search_cfg, self._dir(run, f'{tag}_search'), self.search_epochs,
                              seed, opts)
            # the export builds the supernet the search trained (its selection, its budget)
            spec = self.export(search_cfg, ckpt, spec_dir, budget, 'alpha', model=model,
                               cfg_options=self._as_dict(o for o in opts
                                                         if o.startswith('model.')),
                               kind=method)
        else:
            source, widths_from = None, None
            if method == 'random':
                source = self._widths_source(run)
                if source:
                    widths_from = self._dir(run, f'{source}_{budget:g}_subnet', 'subnet.json')
            hidden = self.select_hidden(model)
            options = {'model.backbone.select_hidden': hidden} if hidden else {}
            if self.select_heads:
                options['model.backbone.select_heads'] = True
            spec = self.export(base_cfg, base_ckpt, spec_dir, budget, method, seed,
                               widths_from, model, options or None)
        cfg = self.cfg(retrain_config(model, method, self.retrain, pretrained,
                                      self.theta_masks))
        subnet = osp.join(spec_dir, 'subnet.json')
        if method == 'dcs' and not self.theta_masks:
            subnet = self._without_theta(spec, spec_dir)
        opts = [f'model.backbone.subnet={subnet}']
        if method in SEARCHED and self.retrain == 'default':
            # CE alone for the first half of the epochs, then CE + η·(IB or KCR), as make demo
            opts.append(f'model.regularizer.t_warm={self.epochs // 2}')
        if pretrained:
            opts.append(f"load_from={osp.join(spec_dir, 'pruned.pth')}")
        out_dir = self._dir(run, f'{tag}_{"finetune" if pretrained else "retrain"}')
        epochs = self.pruner_epochs if pretrained and method not in SEARCHED else self.epochs
        self.train(cfg, out_dir, epochs, seed, opts + self._val_opts(epochs))
        row = self._row(out_dir, epochs, cfg, opts, spec, run)
        if method == 'dcs' and not self.theta_masks:  # without Linear_θ: counted again
            row.update(self._ratios(cfg, opts), theta_masks=False)
        if method == 'random':
            row['widths_from'] = source or 'uniform'
        if self.select_hidden(model):
            row['select_hidden'] = self.select_hidden(model)
        return row

    def _val_opts(self, epochs: int) -> List[str]:
        """A pruned network validated once, after its last epoch (the protocol's
        ``final_val``), else after every epoch as its config does."""
        return [f'train_cfg.val_interval={epochs}'] if self.protocol.final_val else []

    def ablation(self, run: dict) -> dict:
        """An ablation arm at DCS's searched widths (:data:`ABLATIONS`): DCS's export at the
        same budget and seed (its subnet and pruned.pth) fine-tuned for ``epochs`` as DCS's own
        fine-tuning, with the arm's term (:func:`ablation_config`)."""
        spec_dir = self._dir(run, f"dcs_{run['budget']:g}_subnet")
        if not osp.exists(osp.join(spec_dir, 'subnet.json')):
            raise UserError(f"{run['method']}: no DCS export at budget {run['budget']:g}, seed "
                            f"{run['seed']} ({spec_dir}): the ablation runs after dcs")
        cfg = ablation_config(run['model'], run['method'], self.protocol.dataset)
        opts = [f"model.backbone.subnet={osp.join(spec_dir, 'subnet.json')}",
                f"load_from={osp.join(spec_dir, 'pruned.pth')}"]
        if run['method'] == 'dcs-kcr':
            opts.append(f'model.regularizer.t_warm={self.epochs // 2}')
        out_dir = self._dir(run, f"{run['method']}_{run['budget']:g}_finetune")
        self.train(cfg, out_dir, self.epochs, run['seed'], opts + self._val_opts(self.epochs))
        row = self._row(out_dir, self.epochs, cfg, opts,
                        SubnetSpec.load(osp.join(spec_dir, 'subnet.json')).to_dict(),
                        dict(run, method='dcs'))
        if self.select_hidden(run['model']):
            row['select_hidden'] = self.select_hidden(run['model'])
        return row

    def select_hidden(self, model: str):
        """The hidden-unit selection every method of ``model`` prunes with: the latency
        tables' (:data:`LATENCY_SELECT_HIDDEN`) or, at equal FLOPs,
        :data:`FLOPS_SELECT_HIDDEN` (False: MLP channels only)."""
        if self.tables is not None:
            return self.tables.select_hidden.get(model, False)
        return FLOPS_SELECT_HIDDEN.get(model, False)

    @staticmethod
    def top1(work_dir: str, epochs: int) -> Optional[float]:
        """The run's val top-1 after epoch ``epochs`` (None if it has none)."""
        return _last_top1(work_dir, epochs)

    @staticmethod
    def _without_theta(spec: dict, spec_dir: str) -> str:
        """The DCS subnet retrained without its Linear_θ Q/K masks (the ablation): the same
        kept MLP channels in the network of variant 'dcs-arch2' (channel selection of the MLPs
        only), written beside subnet.json."""
        path = osp.join(spec_dir, 'subnet_no-theta.json')
        if not osp.exists(path):
            spec = dict(spec, variant='dcs-arch2')
            spec['meta'] = {k: v for k, v in spec.get('meta', {}).items() if k != 'theta_rank'}
            write_json(path, spec)
        return path

    def _widths_source(self, run: dict) -> Optional[str]:
        """Whose widths the random pruner takes: KCR's searched subnet at the same budget and
        seed (the network without Linear_θ, so its widths cost the same in the pruned
        baseline), else magnitude's (then random vs magnitude differ only in which channels are
        kept), else none (the uniform widths). DCS's widths are not used: its FLOPs include
        Linear_θ, so the same widths without it land below the budget."""
        sources = ('kcr', 'magnitude')
        if self.tables is not None and self.tables.shared.get(run['model']) != 'kcr':
            sources = ('magnitude', )  # KCR's widths are predicted by another table
        for source in sources:
            if osp.exists(self._dir(run, f"{source}_{run['budget']:g}_subnet", 'subnet.json')):
                return source
        return None

    def _row(self, work_dir: str, epochs: int, cfg: str, opts: List[str],
             spec: Optional[dict], run: Optional[dict] = None) -> dict:
        top1 = self.top1(work_dir, epochs)
        if top1 is None:
            raise UserError(f'{work_dir}: no validation top-1 after epoch {epochs}')
        row = dict(top1=float(top1), work_dir=osp.relpath(work_dir, self.work))
        if spec is None:
            row.update(params_ratio=1., flops_ratio=1., widths={})
        else:
            m = spec['meta']['budget']['measured']
            # channels and hidden units apart: a block's MLP has both under one name
            row.update(params_ratio=m['params']['ratio'], flops_ratio=m['flops']['ratio'],
                       widths={b['name']: [b['kept'], b['dim']] for b in spec['blocks']})
            if spec.get('hidden'):
                row['hidden_widths'] = {b['name']: [b['kept'], b['dim']]
                                        for b in spec['hidden']}
            if spec.get('heads'):
                row['heads'] = {b['name']: [b['kept'], b['dim']] for b in spec['heads']}
        if self.tables is not None:  # predicted by the table, measured by the export
            if spec is None:
                row.update(latency_ratio=1., predicted_latency_ratio=1.)
            else:
                b = spec['meta']['budget']
                measured = float(b['measured']['latency']['ratio'])
                row.update(latency_ratio=measured,
                           latency_within=abs(measured - float(run['budget']))
                           <= LATENCY_TOLERANCE,
                           predicted_latency_ratio=float(b['achieved_ratio']),
                           latency_table=self.tables.identity(run['model'],
                                                              table_kind(run['method'])))
            return row
        row['latency_ratio'] = self._latency(cfg, opts) if self.latency and spec else (
            1. if self.latency else None)
        return row

    def _latency(self, cfg: str, opts: List[str]) -> float:
        """ms/image of the pruned classifier over the baseline's (batch 16 at 64×64, 1 thread,
        interleaved rounds, median)."""
        built = dict(pruned=self._build(cfg, opts),
                     baseline=self._build(self._baseline_of(cfg), []))
        x = torch.randn(16, 3, 64, 64, generator=torch.Generator().manual_seed(0))
        times = time_models(built, x, warmup=2, repeats=7, threads=1)
        return times['pruned']['ms_per_image'] / times['baseline']['ms_per_image']

    def _build(self, cfg: str, opts: Sequence[str]):
        c, scope = load_task_config(osp.join(ROOT, cfg), dict(
            x.split('=', 1) for x in opts if x.startswith('model.backbone.subnet=')))
        return build_model(c.model, scope).eval()

    def _ratios(self, cfg: str, opts: Sequence[str]) -> dict:
        """params_ratio and flops_ratio of the pruned classifier to the baseline's (mmengine
        .analysis at 64×64)."""
        pruned, base = self._build(cfg, opts), self._build(self._baseline_of(cfg), [])
        shape = (1, 3, 64, 64)
        return dict(params_ratio=count_params(pruned) / count_params(base),
                    flops_ratio=count_flops(pruned, shape) / count_flops(base, shape))

    @staticmethod
    def _baseline_of(cfg: str) -> str:
        for k, v in MODELS.items():
            if f'-{k}_' in osp.basename(cfg):
                return v['baseline']
        raise UserError(f'internal: no baseline for {cfg}')



def _last_top1(work_dir: str, epochs: int) -> Optional[float]:
    """The val top-1 of the run's last validation, if it was after epoch ``epochs`` (EMA
    weights where the config has EMA)."""
    found = last_validation(work_dir)
    if found is None or found.get('step') != epochs:
        return None
    return float(found['accuracy/top1'])


def _read_results(src: str) -> dict:
    """A merge source's results.json (:func:`read_results`), with its settings and rows."""
    path = osp.join(src, 'results.json')
    data = read_results(path, '--merge: ')
    if not isinstance(data.get('settings'), dict) or not isinstance(data.get('rows'), list):
        raise UserError(f'--merge: {path} is not a results file of compare_methods.py '
                        f'(version {RESULTS_VERSION})')
    return data


def merge(sources: Sequence[str], out: str, log: Callable[[str], None] = _print) -> List[dict]:
    """The rows of grids run apart (one process per model or per seed, each with its own
    ``--out``; the same settings) in ``out``/results.json, then ``out``'s reports. Rows already
    in ``out`` are kept; a run in two places with different results, or a source of other
    settings, is one :class:`UserError` line and nothing is written. A merged row records
    where its logs and checkpoints are (``runs``: its source's runs folder, relative to
    ``out``)."""
    if not sources:
        raise UserError('--merge: no results folder given')
    datas = [(src, _read_results(src)) for src in sources]
    settings = datas[0][1]['settings']
    for src, data in datas[1:]:
        if data['settings'] != settings:
            raise UserError(f'--merge: {src} holds results of other settings '
                            f'({json.dumps(data["settings"])} vs {json.dumps(settings)})')
    results = Results(osp.join(out, 'results.json'), settings)
    found = {run_key(r): r for r in results.rows}
    added = []
    for src, data in datas:
        runs = osp.relpath(osp.join(osp.abspath(src), 'runs'), osp.abspath(out))
        for row in data['rows']:
            row = dict(row, runs=row.get('runs', runs))
            key = run_key(row)
            old = found.get(key)
            if old is not None:
                if old.get('top1') != row.get('top1'):
                    raise UserError(f'--merge: run {key} has two results ({old.get("top1")} and '
                                    f'{row.get("top1")} top-1, the second in {src})')
                continue
            found[key] = row
            added.append(row)
    for row in added:
        results.rows.append(row)
        results.done.add(run_key(row))
    results.save()
    paths = write_reports(out, results.rows, settings, settings.get('resource', 'flops'))
    log(f'{len(added)} rows merged from {len(sources)} folder(s), {len(results.rows)} in all\n'
        f"wrote {results.path}\nwrote {paths['summary']}\nwrote {paths['plot']}\n"
        f"wrote {paths['widths']}")
    return results.rows


def write_reports(out: str, rows: List[dict], settings: dict, resource: str = 'flops') -> dict:
    """DIR/summary.md, DIR/accuracy_vs_cost.png, DIR/widths.png (rewritten: they are derived
    from results.json)."""
    paths = dict(summary=osp.join(out, 'summary.md'),
                 plot=osp.join(out, 'accuracy_vs_cost.png'),
                 widths=osp.join(out, 'widths.png'))
    write_texts({paths['summary']: summary_markdown(rows, settings)}, force=True)
    plot_accuracy_vs_cost(rows, paths['plot'], f'{resource}_ratio')
    plot_widths(rows, paths['widths'])
    return paths


def check_fashion_data(data: str, train_images: int = 0) -> None:
    """The four Fashion-MNIST idx files under ``data`` (relative to the repository, as the runs
    resolve it) and at most its 60,000 training images asked for: one :class:`UserError` line
    naming what is missing and how to place them."""
    root = osp.join(ROOT, data)
    missing = [n for n in FILES if not osp.isfile(osp.join(root, n))]
    if missing:
        raise UserError(f'--data {data}: no Fashion-MNIST there ({", ".join(missing)} missing); '
                        f'place it with `python tools/data/fashion_mnist.py --out {data}`')
    if train_images > DATASETS['fashion-mnist']['train_size']:
        raise UserError(f'--train-images {train_images}: Fashion-MNIST has 60000 training '
                        'images (0: all of them)')


def check_data(models: Sequence[str], data: str, train_images: int = 0) -> None:
    """The digits data the runs of ``models`` read (``DATA/cls``, relative to the repository
    as the runs resolve it), checked as tools/train.py checks it (the baseline configs' data
    loaders pointed there, :func:`~mmdcs.apis.launch.check_data_paths`), and that it has the
    ``train_images`` asked for: one :class:`UserError` line naming what is missing."""
    root = osp.join(ROOT, data, 'cls')
    if not osp.isdir(root):
        raise UserError(f'--data {data}: {root} does not exist; build the digits data with '
                        f'`python tools/data/build_digits.py --out {data}`')
    for model in models:
        cfg = load_config(osp.join(ROOT, MODELS[model]['baseline']), {
            f'{s}_dataloader.dataset.data_root': root for s in ('train', 'val', 'test')})
        check_data_paths(cfg)
        ann = osp.join(root, cfg.train_dataloader.dataset.ann_file)
        with open(ann) as f:
            have = sum(1 for line in f if line.strip())
        if train_images > have:
            raise UserError(f'--train-images {train_images}: {ann} lists {have} training '
                            'images (0: all of them)')


def _check_protocol(protocol: Protocol, methods: Sequence[str], pretrained: bool, epochs: int,
                    search_epochs: Optional[int], pruner_epochs: Optional[int],
                    train_images: int, read: bool = True) -> Optional[dict]:
    """A shared baseline's protocol (Fashion-MNIST, ``--baseline-from``) checked before
    anything is created: it prunes a trained model (``pretrained``), and every method trains
    the same images after it (:func:`check_equal_training`), ``baseline_from`` a finished run
    (unless not ``read``: the tables only). Returns the images each row trains (None without
    a shared baseline)."""
    ablations = [m for m in methods if m in ABLATIONS]
    if ablations and (not pretrained or 'dcs' not in methods):
        raise UserError(f'--methods {" ".join(ablations)}: the ablation at DCS\'s widths '
                        'fine-tunes DCS\'s export: it needs --pretrained and the method dcs')
    if not protocol.shared:
        return None
    if not pretrained:
        raise UserError(f'--dataset {protocol.dataset}' + (
            ' / --baseline-from' if protocol.baseline_from else '') + ': every method prunes '
            'one trained baseline: add --pretrained')
    per = check_equal_training(methods, epochs, search_epochs or epochs,
                               pruner_epochs or epochs)
    if protocol.baseline_from and read:  # a finished run, its checkpoint readable
        read_baseline(protocol.baseline_from, protocol.baseline_epochs or epochs)
    n = train_images or DATASETS[protocol.dataset].get('train_size', 0)
    return dict(baseline=(protocol.baseline_epochs or epochs) * n, method=per * n)


def _counting(run_one: Callable[[dict], dict], seen: Optional[dict]) -> Callable[[dict], dict]:
    """``run_one`` whose rows record the training images the run has seen (``seen``: the
    baseline's and each method's after it; None: not recorded)."""
    if seen is None:
        return run_one

    def run(r: dict) -> dict:
        row = run_one(r)
        row['images_seen'] = seen['baseline' if r['method'] == 'baseline' else 'method']
        return row
    return run


def compare(models: Sequence[str], methods: Sequence[str], budgets: Sequence[float],
            seeds: Sequence[int], out: str, epochs: int, train_images: int,
            pretrained: bool = False, resource: str = 'flops', data: str = 'data/digits',
            search_epochs: Optional[int] = None, retrain: str = 'default',
            latency: bool = True, theta_masks: bool = True,
            run_one: Optional[Callable[[dict], dict]] = None,
            log: Callable[[str], None] = _print, arch_lr: Optional[float] = None,
            tables: Optional[LatencyTables] = None,
            pruner_epochs: Optional[int] = None, select_heads: bool = False,
            protocol: Optional[Protocol] = None, tables_only: bool = False,
            tables_dir: Optional[str] = None) -> List[dict]:
    """The comparison: every run of :func:`plan` not yet in DIR/results.json, then the
    reports.

    ``resource='latency'``: every method aims at a latency ratio predicted by a table of the
    network it exports (``tables``, default :class:`LatencyTables` in DIR/tables: measured
    here before the first run, or read back), and each row carries the predicted and the
    measured ratio (the export times the subnet against the baseline). ``arch_lr``: the DCS /
    KCR searches' architecture optimiser lr (the α-lr ablation; recorded in the settings).
    ``pruner_epochs`` (pretrained regime only): the fine-tuning epochs of the pruners
    (magnitude, uniform, random, Taylor), e.g. ``epochs + search_epochs`` to train them as long
    as a search and its fine-tuning (the equal-training control; recorded in the settings).
    ``select_heads``: DCS, KCR and magnitude prune attention heads too (a gate per head in the
    searches, heads ranked by the norm of their q/k/v rows and proj columns; recorded in the
    settings): the head-selection ablation at equal FLOPs. ``protocol``: the data set and its
    protocol (:class:`Protocol`; default the digits'). ``tables_only``: measure (or read) the
    latency tables and check every budget against them, then stop (grids run apart then share
    them)."""
    protocol = protocol or Protocol()
    for name, given, known in (('--models', models, MODELS), ('--methods', methods, METHODS)):
        bad = [x for x in given if x not in known]
        if bad:
            raise UserError(f'{name}: unknown {bad} (choose from {", ".join(known)})')
    for b in budgets:
        if not 0. < float(b) < 1.:
            raise UserError(f'--budgets: {b} is not a ratio in (0, 1)')
    if resource not in RESOURCES:
        raise UserError(f'--resource must be one of {", ".join(RESOURCES)}, got {resource!r}')
    tabled = needs_tables(resource)
    if tabled and not latency:
        raise UserError('--no-latency with --resource latency: a latency comparison measures '
                        'every subnet\'s latency')
    if tabled and not theta_masks:
        raise UserError('--no-theta-masks with --resource latency: the DCS subnet without its '
                        'Linear_θ masks is another network than the one its latency table '
                        'predicts; use --resource flops for that ablation')
    if arch_lr is not None and not (isinstance(arch_lr, (int, float)) and
                                    math.isfinite(arch_lr) and arch_lr > 0):
        raise UserError(f'--arch-lr must be a positive number, got {arch_lr!r}')
    if retrain not in RETRAIN:
        raise UserError(f'--retrain must be one of {RETRAIN}')
    if select_heads:
        if tabled:
            raise UserError('--select-heads with --resource latency: the comparison\'s latency '
                            'tables have no head units yet; compare heads at equal FLOPs')
        other = [m for m in methods if m not in HEAD_METHODS]
        if other:
            raise UserError(f'--select-heads: {", ".join(other)} do not rank heads (they would '
                            f'keep every head); use --methods among {", ".join(HEAD_METHODS)}')
    if pruner_epochs is not None:
        if not pretrained:
            raise UserError('--pruner-epochs goes with --pretrained (from scratch every method '
                            'retrains for --epochs)')
        if not (isinstance(pruner_epochs, int) and pruner_epochs > 0):
            raise UserError(f'--pruner-epochs must be a positive integer, got {pruner_epochs!r}')
    seen = _check_protocol(protocol, methods, pretrained, epochs, search_epochs,
                           pruner_epochs, train_images, read=not tables_only)
    if run_one is None and protocol.dataset != 'digits':
        check_fashion_data(data, train_images)
    elif run_one is None:  # the runs read DATA: checked before anything is created
        check_data(models, data, train_images)
    regime = 'pretrained' if pretrained else 'scratch'
    # what every row of one results.json shares (both regimes may share it)
    settings = dict(epochs=epochs, train_images=train_images, resource=resource,
                    search_epochs=search_epochs or epochs, retrain=retrain)
    if not theta_masks:
        settings['theta_masks'] = False
    if select_heads:
        settings['select_heads'] = True
    if arch_lr is not None:
        settings['arch_lr'] = float(arch_lr)
    if pruner_epochs is not None and pruner_epochs != epochs:
        settings['pruner_epochs'] = int(pruner_epochs)
    settings.update(protocol.settings())
    if tabled:
        tables = tables or LatencyTables(
            tables_dir or osp.join(out, 'tables'), log=log,
            batch=DATASETS[protocol.dataset].get('latency_batch', 1))
        settings['latency'] = tables.settings()
    else:
        tables = None
    os.makedirs(out, exist_ok=True)
    results = Results(osp.join(out, 'results.json'), settings)
    runs = plan(models, methods, budgets, seeds, regime, protocol.shared)
    if tables is not None:  # every table, every budget checked, before any training
        tables.prepare(models, methods, budgets)
    if tables_only:
        log(f'latency tables in {tables.folder if tables else "(none: not a latency grid)"}')
        return results.rows
    if run_one is None:
        run_one = Runner(osp.join(out, 'runs'), data, epochs, train_images, regime,
                         search_epochs, retrain, latency, theta_masks=theta_masks,
                         arch_lr=arch_lr, tables=tables, pruner_epochs=pruner_epochs,
                         select_heads=select_heads, protocol=protocol)
    rows = run_grid(runs, results, _counting(run_one, seen), log)
    paths = write_reports(out, rows, settings, resource)
    log(f"wrote {results.path}\nwrote {paths['summary']}\nwrote {paths['plot']}\n"
        f"wrote {paths['widths']}")
    return rows
