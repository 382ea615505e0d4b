"""The method comparison at equal latency (``compare_methods.py --resource latency``) and the
α-lr ablation (``--arch-lr``): no training and no timing. The latency tables are built with a
synthetic meter (a module's time is its parameter count), the export's measurement a synthetic
meter too, and the training runs are a stub that builds the config's model with
the run's --cfg-options (so the search's latency target, its table and the retraining of a subnet
with pruned hidden units are checked by building them) and saves its initial weights; the
exports are the real ones (:func:`mmdcs.apis.export.export_subnet`)."""
import json
import os
import os.path as osp

import pytest
import torch

from mmdcs.analysis.latency_table import build_table
from mmdcs.apis.compare import (ARCH_LR_ETA_MIN_SHARE, LatencyTables, Runner, compare,
                                same_network, search_config)
from mmdcs.apis.launch import UserError
from mmdcs.apis.subnet_io import build_model, load_task_config
from mmdcs.models.backbones.vit import ViT

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
BASE_MS = 2.0  # synthetic: ms of everything outside the parameters


def _ms(module) -> float:
    """Synthetic time of a module: proportional to its parameters (what pruning removes)."""
    return 1e-5 * sum(p.numel() for p in module.parameters())


def synthetic_timer(fn, module):
    return _ms(module) / 1e3  # seconds per call


def synthetic_meter(fn, module):
    """The export's measurement, synthetic: seconds per call of a backbone."""
    return (BASE_MS + _ms(module)) / 1e3


def _builder(calls):
    def builder(sup, base, size):
        calls.append(sup.variant)
        return build_table(sup, base, size, threads=1, rounds=1, warmup=0, multiple_of=8,
                           meter=synthetic_timer)
    return builder


class StubRunner(Runner):
    """Training replaced: the model of ``config`` with the run's options is built and its
    initial weights saved as the run's checkpoint; top-1 is a fixed fake number."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.trained = []

    def train(self, config, work_dir, epochs, seed, extra=()):
        opts = self._as_dict([o for o in extra if not o.startswith('load_from=')])
        cfg, scope = load_task_config(osp.join(ROOT, config), opts)
        torch.manual_seed(seed)
        model = build_model(cfg.model, scope)
        os.makedirs(work_dir, exist_ok=True)
        ckpt = osp.join(work_dir, 'epoch_1.pth')
        torch.save(dict(state_dict=model.state_dict(), meta={}), ckpt)
        self.trained.append((config, list(extra), cfg))
        return ckpt

    @staticmethod
    def top1(work_dir, epochs):
        return 50. + len(osp.basename(work_dir)) % 7


def _tables(folder, calls, lines=None):
    # DeiT-Tiny with MLP channels only: nine grid points per table, fast
    return LatencyTables(folder, select_hidden={'deit-tiny': False}, builder=_builder(calls),
                         log=(lines.append if lines is not None else lambda s: None))


def test_kcr_and_the_pruners_share_one_network():
    kcr = ViT('deit-tiny', variant='kcr', img_size=64).eval()
    arch2 = ViT('deit-tiny', variant='dcs-arch2', img_size=64).eval()
    dcs = ViT('deit-tiny', variant='dcs', img_size=64).eval()
    assert same_network(kcr, arch2)
    assert not same_network(kcr, dcs)  # Q/K masks, Linear_θ
    assert not same_network(kcr, ViT('deit-tiny', variant='kcr', img_size=64,
                                     select_hidden=True).eval())


@pytest.mark.xdist_group('train')
def test_latency_comparison_rows_and_resume(tmp_path):
    out = str(tmp_path / 'cmp')
    calls, lines = [], []
    tables = _tables(osp.join(out, 'tables'), calls, lines)
    runner = StubRunner(osp.join(out, 'runs'), 'data/digits', 1, 0, 'scratch', tables=tables,
                        measure_options=dict(meter=synthetic_meter), arch_lr=0.05)
    methods = ['dcs', 'kcr', 'magnitude', 'uniform', 'random']
    rows = compare(['deit-tiny'], methods, [0.9], [0], out, 1, 0, resource='latency',
                   run_one=runner, log=lines.append, arch_lr=0.05, tables=tables)
    # three networks, two tables measured: the pruners' dcs-arch2 is KCR's network
    assert calls == ['dcs', 'kcr']
    assert tables.shared == {'deit-tiny': 'kcr'}
    files = sorted(os.listdir(osp.join(out, 'tables')))
    assert len(files) == 3 and any('dcs-arch2' in f for f in files)
    pruned_table = json.load(open(tables.path('deit-tiny', 'pruned')))
    assert pruned_table['variant'] == 'dcs-arch2'
    assert pruned_table['measured_as']['variant'] == 'kcr'

    assert [r['method'] for r in rows] == ['baseline'] + methods
    base = rows[0]
    assert base['latency_ratio'] == 1. and base['predicted_latency_ratio'] == 1.
    for r in rows[1:]:
        # every method on the same latency target, within the export's ±1 % below it
        assert 0.89 <= r['predicted_latency_ratio'] <= 0.9 + 1e-9, r['method']
        # measured by the (synthetic) timer: the table's prediction of a time linear in the
        # parameters holds to the interpolation
        assert abs(r['latency_ratio'] - r['predicted_latency_ratio']) < 0.02, r['method']
        assert 0 < r['flops_ratio'] <= 1.2 and 0 < r['params_ratio'] <= 1.2
        ident = r['latency_table']
        assert ident['sha256'] and osp.exists(osp.join(out, ident['file']))
        assert ident['variant'] == {'dcs': 'dcs', 'kcr': 'kcr'}.get(r['method'], 'dcs-arch2')
    by = {r['method']: r for r in rows}
    assert by['magnitude']['latency_table']['measured_as'] == 'kcr'
    uni = by['uniform']['widths']
    assert len({round(k / d, 2) for k, d in uni.values()}) == 1  # one ratio in every block
    assert by['random']['widths_from'] == 'kcr'
    assert by['random']['widths'] == by['kcr']['widths']

    # the searches got the latency target, its table, and the architecture lr
    searches = [(c, e) for c, e, _ in runner.trained if '_search_' in c]
    assert [c for c, _ in searches] == [search_config('deit-tiny', 'dcs'),
                                        search_config('deit-tiny', 'kcr')]
    for (config, extra), method in zip(searches, ('dcs', 'kcr')):
        assert 'model.cost.target.flops=None' in extra
        assert 'model.cost.target.latency=0.9' in extra
        assert f"model.cost.latency_table={tables.path('deit-tiny', method)}" in extra
    search_cfgs = [cfg for c, _, cfg in runner.trained if '_search_' in c]
    for cfg in search_cfgs:
        assert cfg.model.cost.target.get('flops') is None
        assert cfg.model.cost.target.latency == 0.9
        assert cfg.optim_wrapper.arch.optimizer.lr == 0.05
        assert cfg.param_scheduler.arch[0].eta_min == pytest.approx(0.05 * ARCH_LR_ETA_MIN_SHARE)

    with open(osp.join(out, 'results.json')) as f:
        saved = json.load(f)
    assert saved['settings']['resource'] == 'latency' and saved['settings']['arch_lr'] == 0.05
    assert saved['settings']['latency']['threads'] == 1
    summary = open(osp.join(out, 'summary.md')).read()
    assert 'predicted latency' in summary and 'latency** ratios' in summary

    # resumed: the tables read back (not measured again), no run done twice
    calls2, lines2 = [], []
    runner2 = StubRunner(osp.join(out, 'runs'), 'data/digits', 1, 0, 'scratch',
                         tables=_tables(osp.join(out, 'tables'), calls2),
                         measure_options=dict(meter=synthetic_meter), arch_lr=0.05)
    again = compare(['deit-tiny'], methods, [0.9], [0], out, 1, 0, resource='latency',
                    run_one=runner2, log=lines2.append, arch_lr=0.05,
                    tables=runner2.tables)
    assert calls2 == [] and runner2.trained == [] and again == rows
    # other settings in the same DIR: refused, nothing run
    for kw in (dict(resource='flops', arch_lr=0.05), dict(resource='latency', arch_lr=0.1)):
        with pytest.raises(UserError, match='other settings'):
            compare(['deit-tiny'], methods, [0.9], [0], out, 1, 0, run_one=runner2,
                    log=lines2.append, tables=_tables(osp.join(out, 'tables'), calls2), **kw)
    assert runner2.trained == []


def test_latency_comparison_refuses_cleanly(tmp_path):
    out = str(tmp_path / 'cmp')

    def broken(sup, base, size):
        raise RuntimeError('no module around unit layers.0.mlp runs on its own')
    tables = LatencyTables(osp.join(out, 'tables'), select_hidden={'deit-tiny': False},
                           builder=broken, log=lambda s: None)
    ran = []
    with pytest.raises(UserError, match='cannot build or read the latency table of deit-tiny'):
        compare(['deit-tiny'], ['kcr', 'magnitude'], [0.9], [0], out, 1, 0,
                resource='latency', run_one=ran.append, log=lambda s: None, tables=tables)
    assert ran == [] and not osp.exists(osp.join(out, 'results.json'))
    # a corrupt table file: one line naming it
    os.makedirs(osp.join(out, 'tables'))
    path = tables.path('deit-tiny', 'kcr')
    with open(path, 'w') as f:
        f.write('{"format": "mmdcs.latency_ta')
    with pytest.raises(UserError, match='not a valid latency table'):
        compare(['deit-tiny'], ['kcr'], [0.9], [0], out, 1, 0, resource='latency',
                run_one=ran.append, log=lambda s: None, tables=tables)
    os.remove(path)
    # a budget below a table's predicted floor: refused before any training
    calls = []
    with pytest.raises(UserError, match=r'deit-tiny \(dcs\).*floor'):
        compare(['deit-tiny'], ['dcs'], [0.05], [0], out, 1, 0, resource='latency',
                run_one=ran.append, log=lambda s: None,
                tables=_tables(osp.join(out, 'tables'), calls))
    assert ran == [] and not osp.exists(osp.join(out, 'results.json'))
    # combinations that cannot hold
    for kw, msg in ((dict(latency=False), '--no-latency'),
                    (dict(theta_masks=False), '--no-theta-masks'),
                    (dict(arch_lr=-1.), '--arch-lr')):
        with pytest.raises(UserError, match=msg):
            compare(['deit-tiny'], ['dcs'], [0.9], [0], out, 1, 0,
                    resource='latency' if 'arch_lr' not in kw else 'flops',
                    run_one=ran.append, **kw)


def test_arch_lr_reaches_the_search_config(tmp_path):
    """--arch-lr: the α optimiser's lr and its schedule's floor in the search's config (FLOPs
    budget here; the pretrained search config inherits the demo schedule)."""
    from mmengine.config import Config
    for pretrained in (False, True):
        runner = Runner(str(tmp_path), 'data/digits', 1, 0,
                        'pretrained' if pretrained else 'scratch', arch_lr=0.03)
        run = dict(regime=runner.regime, model='mobilevit-xs', method='kcr', budget=0.92,
                   seed=0)
        opts = runner.search_options(run, 'base.pth' if pretrained else None)
        assert 'model.cost.target.flops=0.92' in opts
        cfg = Config.fromfile(osp.join(ROOT, search_config('mobilevit-xs', 'kcr', pretrained)))
        default_lr = cfg.optim_wrapper.arch.optimizer.lr
        cfg.merge_from_dict(runner._as_dict(opts))
        assert cfg.optim_wrapper.arch.optimizer.lr == 0.03 != default_lr
        assert cfg.param_scheduler.arch[0].eta_min == pytest.approx(0.003)
        assert cfg.param_scheduler.arch[0].type == 'CosineAnnealingLR'
        assert (cfg.get('load_from') == 'base.pth') == pretrained
    # without it the config's own lr, and no arch option at all
    opts = Runner(str(tmp_path), 'data/digits', 1, 0, 'scratch').search_options(run)
    assert not any(o.startswith(('optim_wrapper', 'param_scheduler')) for o in opts)


def test_tool_takes_arch_lr(tmp_path, capsys):
    from _tools import run_main
    code, err = run_main('tools/analysis/compare_methods.py',
                         ['--arch-lr', '0', '--out', str(tmp_path / 'out')], capsys)
    assert code == 2 and '--arch-lr' in err
