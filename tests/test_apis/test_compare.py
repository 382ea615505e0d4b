"""The method comparison (mmdcs.apis.compare): its statistics on fixed fake results, resuming a
grid without running a row twice, refusing a results file of other settings."""
import json
import math
import os.path as osp

import pytest

from mmdcs.apis.compare import (Results, Runner, aggregate, compare, mean_std, run_key,
                                paired_differences, plan, run_grid, summary_markdown)
from mmdcs.apis.launch import UserError

# top-1 of three seeds: magnitude 60, 62, 64; dcs 58, 61, 67; uniform 59, 63 (seed 2 missing)
FAKE = {('magnitude', 0): 60., ('magnitude', 1): 62., ('magnitude', 2): 64.,
        ('dcs', 0): 58., ('dcs', 1): 61., ('dcs', 2): 67.,
        ('uniform', 0): 59., ('uniform', 1): 63.}


def _rows():
    return [dict(regime='scratch', model='deit-tiny', method=m, budget=0.7, seed=s, top1=v,
                 flops_ratio=0.69 + 0.001 * s, params_ratio=0.8, latency_ratio=None,
                 widths={'layers.0.mlp': [100 + s, 192]})
            for (m, s), v in FAKE.items()]


def test_mean_and_sample_std():
    assert mean_std([60., 62., 64.]) == (62., 2.)
    m, s = mean_std([1.])
    assert m == 1. and math.isnan(s)
    assert all(math.isnan(v) for v in mean_std([]))


def test_aggregate_on_fixed_results():
    agg = aggregate(_rows())
    mag = agg[('scratch', 'deit-tiny', 'magnitude', 0.7)]
    assert (mag['n'], mag['seeds'], mag['top1'], mag['top1_std']) == (3, [0, 1, 2], 62., 2.)
    dcs = agg[('scratch', 'deit-tiny', 'dcs', 0.7)]
    assert dcs['top1'] == pytest.approx(62.) and dcs['top1_std'] == pytest.approx(
        math.sqrt(((58 - 62) ** 2 + (61 - 62) ** 2 + (67 - 62) ** 2) / 2))
    assert dcs['flops_ratio'] == pytest.approx(0.691) and dcs['latency_ratio'] is None
    uni = agg[('scratch', 'deit-tiny', 'uniform', 0.7)]
    assert uni['n'] == 2 and uni['top1'] == 61. and uni['top1_std'] == pytest.approx(
        math.sqrt(8.))
    # the order of the table: searches first, then the pruners
    assert [k[2] for k in agg] == ['dcs', 'magnitude', 'uniform']


def test_paired_differences_use_the_seeds_both_have():
    d = paired_differences(_rows())
    dcs = d[('scratch', 'deit-tiny', 'dcs', 0.7)]
    assert dcs['diffs'] == {0: -2., 1: -1., 2: 3.}
    assert dcs['mean'] == pytest.approx(0.) and dcs['std'] == pytest.approx(
        math.sqrt((4 + 1 + 9) / 2))
    assert dcs['wins'] == 1 and dcs['n'] == 3
    uni = d[('scratch', 'deit-tiny', 'uniform', 0.7)]
    assert uni['diffs'] == {0: -1., 1: 1.} and uni['n'] == 2 and uni['mean'] == 0.
    assert ('scratch', 'deit-tiny', 'magnitude', 0.7) not in d
    # another model or budget is not paired with this magnitude
    other = dict(_rows()[3], model='mobilevit-xs')
    assert ('scratch', 'mobilevit-xs', 'dcs', 0.7) not in paired_differences(_rows() + [other])


def test_summary_states_the_regime_and_the_numbers():
    text = summary_markdown(_rows(), dict(epochs=4))
    assert '## scratch' in text and 'width allocation' in text
    assert '| DeiT-Tiny | magnitude | 0.7 | 62.00 ± 2.00 | 3 |' in text
    assert '| DeiT-Tiny | dcs | 0.7 | 62.00 ± 4.58 | 3 |' in text and '0.00 ± 2.65 (1/3)' in text
    assert '## pretrained' not in text


def _fake_run(calls):
    def run_one(run):
        calls.append((run['method'], run['budget'], run['seed']))
        return dict(top1=50. + run['seed'] + (run['method'] == 'dcs'), flops_ratio=run['budget'],
                    params_ratio=run['budget'], latency_ratio=None, widths={})
    return run_one


def test_grid_resumes_and_refuses_other_settings(tmp_path):
    path = str(tmp_path / 'results.json')
    runs = plan(['deit-tiny'], ['magnitude', 'dcs'], [0.7], [0, 1], 'scratch')
    # per seed: the baseline, then the searches before the pruners (random takes their widths)
    assert [(r['method'], r['seed']) for r in runs] == [
        ('baseline', 0), ('dcs', 0), ('magnitude', 0), ('baseline', 1), ('dcs', 1),
        ('magnitude', 1)]
    calls, lines = [], []
    settings = dict(epochs=2, train_images=0)
    # the first attempt stops after three runs (e.g. interrupted)
    res = Results(path, settings)

    def stop_after_three(run):
        if len(calls) == 3:
            raise KeyboardInterrupt
        return _fake_run(calls)(run)
    with pytest.raises(KeyboardInterrupt):
        run_grid(runs, res, stop_after_three, lines.append)
    with open(path) as f:
        assert len(json.load(f)['rows']) == 3
    # resumed: only the three missing runs, each once; progress lines say so
    calls.clear()
    rows = run_grid(runs, Results(path, settings), _fake_run(calls), lines.append)
    assert calls == [('baseline', 1.0, 1), ('dcs', 0.7, 1), ('magnitude', 0.7, 1)]
    assert len(rows) == 6 and len({(r['method'], r['seed']) for r in rows}) == 6
    assert any('3 of 6 runs already' in ln for ln in lines)
    assert any(ln.startswith('[6/6] deit-tiny magnitude budget 0.7 seed 1') and 'ETA' in ln
               for ln in lines)
    # a third call runs nothing
    calls.clear()
    run_grid(runs, Results(path, settings), _fake_run(calls), lines.append)
    assert calls == []
    # other settings: refused, the file untouched
    before = open(path).read()
    with pytest.raises(UserError, match='other settings'):
        Results(path, dict(epochs=3, train_images=0))
    assert open(path).read() == before
    with open(path, 'w') as f:
        f.write('[1, 2]')
    with pytest.raises(UserError, match='not a results file'):
        Results(path, settings)


def test_compare_writes_reports_and_refuses_bad_input(tmp_path):
    out = str(tmp_path / 'cmp')
    calls = []
    rows = compare(['deit-tiny'], ['magnitude', 'uniform'], [0.7], [0, 1], out, 2, 0,
                   run_one=_fake_run(calls), log=lambda s: None)
    assert len(rows) == 6 and len(calls) == 6
    for name in ('results.json', 'summary.md', 'accuracy_vs_cost.png', 'widths.png'):
        assert osp.getsize(osp.join(out, name)) > 0
    with pytest.raises(UserError, match='--no-latency with --resource latency'):
        compare(['deit-tiny'], ['dcs'], [0.7], [0], out, 2, 0, resource='latency',
                latency=False, run_one=_fake_run(calls))
    with pytest.raises(UserError, match='not a ratio'):
        compare(['deit-tiny'], ['dcs'], [1.5], [0], out, 2, 0, run_one=_fake_run(calls))
    with pytest.raises(UserError, match='unknown'):
        compare(['resnet'], ['dcs'], [0.7], [0], out, 2, 0, run_one=_fake_run(calls))


@pytest.mark.xdist_group('train')
def test_tiny_end_to_end_grid(tiny_digits, tmp_path):
    """One model, two methods (magnitude, uniform), one budget, one seed, 1 epoch on 32 images
    of the tiny digits set (one step), through tools/train.py and tools/export_subnet.py: rows
    with the subnets' measured ratios and widths; a second call runs nothing."""
    from mmdcs.apis.compare import Runner
    out = str(tmp_path / 'cmp')
    quiet = ['train_dataloader.num_workers=0', 'val_dataloader.num_workers=0',
             'test_dataloader.num_workers=0', 'train_dataloader.persistent_workers=False',
             'val_dataloader.persistent_workers=False']
    runner = Runner(osp.join(out, 'runs'), tiny_digits, 1, 32, 'scratch', latency=False,
                    extra=quiet)
    lines = []
    rows = compare(['deit-tiny'], ['magnitude', 'uniform'], [0.7], [0], out, 1, 32,
                   run_one=runner, log=lines.append)
    assert [r['method'] for r in rows] == ['baseline', 'magnitude', 'uniform']
    for r in rows[1:]:
        assert 0.69 <= r['flops_ratio'] <= 0.7 and 0 <= r['top1'] <= 100
        assert r['widths'] and all(0 < k <= d for k, d in r['widths'].values())
    uni = rows[2]['widths']
    assert len({round(k / d, 2) for k, d in uni.values()}) == 1  # one ratio in every block
    calls = []
    again = compare(['deit-tiny'], ['magnitude', 'uniform'], [0.7], [0], out, 1, 32,
                    run_one=_fake_run(calls), log=lines.append)
    assert calls == [] and again == rows


@pytest.mark.parametrize('argv, message', [
    (['--epochs', '0'], '--epochs'),
    (['--methods', 'l1'], '--methods'),
    (['--resource', 'latency', '--no-latency'], '--no-latency with --resource latency'),
    (['--resource', 'latency', '--no-theta-masks'], '--no-theta-masks with --resource'),
    (['--budgets', '1.2'], 'argument --budgets: must be a finite number in (0, 1), got 1.2'),
    (['--merge', 'no/such/grid'], '--merge: no/such/grid/results.json is not a results file'),
])
def test_tool_refuses_bad_input_in_one_line(tmp_path, capsys, argv, message):
    from _tools import run_main
    code, err = run_main('tools/analysis/compare_methods.py',
                         argv + ['--out', str(tmp_path / 'out')], capsys)
    assert code == 2 and message in err
    assert not osp.exists(tmp_path / 'out' / 'results.json')


class _EpochsRunner(Runner):
    """A Runner whose trainings, exports and rows only record the epochs each run gets."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.trained = []

    def train(self, config, work_dir, epochs, seed, extra=()):
        self.trained.append((osp.basename(work_dir), epochs))
        return 'ckpt.pth'

    def export(self, *a, **kw):
        return {}

    def _row(self, work_dir, epochs, cfg, opts, spec, run=None):
        return dict(run or {}, top1=0., epochs=epochs)


@pytest.mark.parametrize('regime,pruner_epochs,expected', [
    ('pretrained', 6, {'baseline': 4, 'kcr_0.7_search': 2, 'kcr_0.7_finetune': 4,
                       'magnitude_0.7_finetune': 6}),
    ('pretrained', None, {'baseline': 4, 'kcr_0.7_search': 2, 'kcr_0.7_finetune': 4,
                          'magnitude_0.7_finetune': 4}),
    # from scratch too the search trains --search-epochs (it ran --epochs, the option ignored)
    ('scratch', None, {'baseline': 4, 'kcr_0.7_search': 2, 'kcr_0.7_retrain': 4,
                       'magnitude_0.7_retrain': 4}),
])
def test_pruner_epochs_trains_only_the_pruners_longer(tmp_path, regime, pruner_epochs,
                                                      expected):
    runner = _EpochsRunner(str(tmp_path / 'runs'), 'data/digits', 4, 0, regime,
                           search_epochs=2, latency=False, pruner_epochs=pruner_epochs)
    for method in ('kcr', 'magnitude'):
        runner(dict(model='deit-tiny', method=method, budget=0.7, seed=0, regime=regime))
    assert dict(runner.trained) == expected


def test_pruner_epochs_is_a_setting_and_needs_pretrained(tmp_path):
    calls = []
    out = str(tmp_path / 'eq')
    compare(['deit-tiny'], ['magnitude'], [0.7], [0], out, 4, 0, pretrained=True,
            latency=False, run_one=_fake_run(calls), log=lambda s: None, pruner_epochs=6)
    with open(osp.join(out, 'results.json')) as f:
        assert json.load(f)['settings']['pruner_epochs'] == 6
    with pytest.raises(UserError, match='--pruner-epochs goes with --pretrained'):
        compare(['deit-tiny'], ['magnitude'], [0.7], [0], str(tmp_path / 'x'), 4, 0,
                latency=False, run_one=_fake_run(calls), pruner_epochs=6)


class _OptionsRunner(_EpochsRunner):
    """A Runner recording the --cfg-options of its trainings and exports."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.options = {}

    def train(self, config, work_dir, epochs, seed, extra=()):
        self.options[osp.basename(work_dir)] = list(extra)
        return 'ckpt.pth'

    def export(self, config, checkpoint, out, budget, method, seed=0, widths_from=None,
               model=None, cfg_options=None, kind=None):
        self.options[osp.basename(out)] = dict(cfg_options or {})
        return {}


@pytest.mark.parametrize('model,hidden', [('mobilevit-xs', 'all'), ('deit-tiny', None)])
def test_flops_comparison_prunes_each_models_hidden_units(tmp_path, model, hidden):
    """At equal FLOPs every method of a model prunes with its FLOPS_SELECT_HIDDEN: the
    searches' supernet and export, and the pruners' ranking; rows record it."""
    runner = _OptionsRunner(str(tmp_path / 'runs'), 'data/digits', 4, 0, 'scratch',
                            latency=False)
    rows = {m: runner(dict(model=model, method=m, budget=0.5, seed=0, regime='scratch'))
            for m in ('kcr', 'magnitude')}
    opt = f'model.backbone.select_hidden={hidden}'
    assert (opt in runner.options['kcr_0.5_search']) == bool(hidden)
    for export in ('kcr_0.5_subnet', 'magnitude_0.5_subnet'):
        assert runner.options[export].get('model.backbone.select_hidden') == hidden
    for row in rows.values():
        assert row.get('select_hidden') == hidden
    assert 'model.cost.target.flops=0.5' in runner.options['kcr_0.5_search']


def test_flops_select_hidden_reaches_the_grids_budgets():
    """Why MobileViT-XS prunes hidden units at equal FLOPs: with MLP channels alone its
    FLOPs floor at 64×64 is above 0.7; with FLOPS_SELECT_HIDDEN every method's network
    (DCS's and KCR's supernets, the pruners' dcs-arch2) reaches 0.5 in groups of 8."""
    from mmdcs.apis.compare import (FLOPS_SELECT_HIDDEN, MODELS, ROOT, TABLE_VARIANTS,
                                    search_config)
    from mmdcs.apis.subnet_io import build_model, load_task_config
    from mmdcs.selection.budget import build_cost

    def floor(config, options):
        cfg, scope = load_task_config(osp.join(ROOT, config), options)
        cost = build_cost('flops', build_model(cfg.model, scope), input_size=(64, 64))
        return cost.ratio(cost.floor_at(8))

    model = 'mobilevit-xs'
    nets = [(search_config(model, 'dcs'), {}), (search_config(model, 'kcr'), {}),
            (MODELS[model]['baseline'], {'model.backbone.variant': TABLE_VARIANTS['pruned']})]
    for config, options in nets:
        assert floor(config, options) > 0.7, config
        assert floor(config, dict(options, **{
            'model.backbone.select_hidden': FLOPS_SELECT_HIDDEN[model]})) < 0.5, config


def _results_dir(path, rows, settings=None):
    import os
    os.makedirs(path, exist_ok=True)
    with open(osp.join(path, 'results.json'), 'w') as f:
        json.dump(dict(version=1, settings=settings or dict(epochs=4, train_images=0,
                                                              resource='flops',
                                                              search_epochs=4,
                                                              retrain='default'),
                       rows=rows), f)
    return str(path)


def test_merge_joins_grids_run_apart_and_refuses_conflicts(tmp_path):
    """--merge: the rows of two folders (one per seed) in one results.json with the reports;
    merging again adds nothing; a run with two results, or other settings: one line, the
    merged file unchanged."""
    from mmdcs.apis.compare import merge
    rows = _rows()
    a = _results_dir(tmp_path / 'a', [r for r in rows if r['seed'] != 2])
    b = _results_dir(tmp_path / 'b', [r for r in rows if r['seed'] == 2])
    out = str(tmp_path / 'all')
    lines = []
    merged = merge([a, b], out, log=lines.append)
    assert sorted(map(run_key, merged)) == sorted(map(run_key, rows))
    assert {r['runs'] for r in merged} == {osp.join('..', 'a', 'runs'),
                                          osp.join('..', 'b', 'runs')}
    assert all(osp.exists(osp.join(out, f)) for f in ('summary.md', 'accuracy_vs_cost.png'))
    assert merge([a, b], out, log=lines.append) == merged
    before = open(osp.join(out, 'results.json')).read()
    clash = _results_dir(tmp_path / 'c', [dict(rows[0], top1=1.)])
    with pytest.raises(UserError, match='two results'):
        merge([clash], out, log=lines.append)
    other = _results_dir(tmp_path / 'd', rows[:1], settings=dict(epochs=1))
    with pytest.raises(UserError, match='other settings'):
        merge([a, other], str(tmp_path / 'e'), log=lines.append)
    assert open(osp.join(out, 'results.json')).read() == before
    assert not osp.exists(tmp_path / 'e' / 'results.json')


def test_row_keeps_channels_and_hidden_units_apart(tmp_path):
    """A block's MLP has channels and hidden units under one name: the row keeps both
    (``widths``, ``hidden_widths``) and the widths plot draws both."""
    from mmdcs.apis.compare import plot_widths, width_units

    class Fixed(Runner):
        @staticmethod
        def top1(work_dir, epochs):
            return 60.

    spec = dict(blocks=[dict(name='stages.2.1.transformer.0.mlp', kept=8, dim=96)],
                hidden=[dict(name='stages.2.1.transformer.0.mlp', kept=96, dim=192),
                        dict(name='stages.0.0', kept=16, dim=64)],
                meta=dict(budget=dict(measured=dict(params=dict(ratio=0.9),
                                                    flops=dict(ratio=0.5)))))
    runner = Fixed(str(tmp_path), 'data/digits', 4, 0, 'scratch', latency=False)
    row = runner._row(str(tmp_path / 'w'), 4, 'cfg.py', [], spec)
    assert row['widths'] == {'stages.2.1.transformer.0.mlp': [8, 96]}
    assert row['hidden_widths'] == {'stages.2.1.transformer.0.mlp': [96, 192],
                                    'stages.0.0': [16, 64]}
    assert width_units(row) == {'stages.2.1.transformer.0.mlp': [8, 96],
                                'stages.2.1.transformer.0.mlp hidden': [96, 192],
                                'stages.0.0 hidden': [16, 64]}
    png = str(tmp_path / 'widths.png')
    plot_widths([dict(row, regime='scratch', model='mobilevit-xs', method='kcr', budget=0.5,
                      seed=0)], png)
    assert osp.getsize(png) > 0


def test_select_heads_reaches_every_head_ranking_method(tmp_path):
    """--select-heads: the searches get a gate per head, the magnitude export ranks heads,
    rows list the kept heads; recorded in the settings; refused for the methods that keep
    every head and with latency budgets (one line)."""
    runner = _OptionsRunner(str(tmp_path / 'runs'), 'data/digits', 4, 0, 'scratch',
                            latency=False, select_heads=True)
    for m in ('dcs', 'kcr', 'magnitude'):
        runner(dict(model='deit-tiny', method=m, budget=0.7, seed=0, regime='scratch'))
    for m in ('dcs', 'kcr'):
        assert 'model.backbone.select_heads=True' in runner.options[f'{m}_0.7_search']
        assert runner.options[f'{m}_0.7_subnet']['model.backbone.select_heads'] is True
    assert runner.options['magnitude_0.7_subnet'] == {'model.backbone.select_heads': True}
    plain = _OptionsRunner(str(tmp_path / 'plain'), 'data/digits', 4, 0, 'scratch',
                           latency=False)
    plain(dict(model='deit-tiny', method='kcr', budget=0.7, seed=0, regime='scratch'))
    assert not any('select_heads' in o for o in plain.options['kcr_0.7_search'])

    calls = []
    out = str(tmp_path / 'heads')
    compare(['deit-tiny'], ['kcr', 'magnitude'], [0.7], [0], out, 4, 0, latency=False,
            run_one=_fake_run(calls), log=lambda s: None, select_heads=True)
    with open(osp.join(out, 'results.json')) as f:
        assert json.load(f)['settings']['select_heads'] is True
    for kw, message in ((dict(methods=['kcr', 'uniform']), 'uniform do not rank heads'),
                        (dict(methods=['kcr'], resource='latency'), 'no head units')):
        methods = kw.pop('methods')
        with pytest.raises(UserError, match=message):
            compare(['deit-tiny'], methods, [0.7], [0], str(tmp_path / 'x'), 4, 0,
                    run_one=_fake_run(calls), select_heads=True, **kw)
        assert not osp.exists(tmp_path / 'x' / 'results.json')


@pytest.mark.parametrize('pretrained', [False, True])
@pytest.mark.parametrize('model', ['deit-tiny', 'mobilevit-xs'])
def test_no_theta_retraining_has_no_temperature_hook(model, pretrained, tmp_path):
    """--no-theta-masks retrains DCS's widths in a network without Q/K masks (no Gumbel
    gates): its config keeps the IB term and drops the temperature hook, which refuses a
    network without gates (the runs failed so before); the default DCS retraining keeps it."""
    from mmengine.config import Config

    from mmdcs.apis.compare import ROOT, retrain_config
    from mmdcs.apis.subnet_io import build_model
    from mmdcs.analysis.complexity import random_subnet
    from mmdcs.models.backbones.base import backbone_class
    from mmdcs.selection import gates

    def hooks(cfg):
        return [h['type'] for h in cfg.custom_hooks]

    plain = Config.fromfile(osp.join(ROOT, retrain_config(model, 'dcs', pretrained=pretrained)))
    assert 'mmdcs.TemperatureHook' in hooks(plain)
    path = retrain_config(model, 'dcs', pretrained=pretrained, theta_masks=False)
    cfg = Config.fromfile(osp.join(ROOT, path))
    assert 'mmdcs.TemperatureHook' not in hooks(cfg)
    assert 'mmdcs.RegularizerHook' in hooks(cfg) and cfg.model.regularizer.type == 'ib'
    spec = random_subnet(backbone_class(model), model, 'dcs-arch2', 0.6,
                         **backbone_class(model).size_kwargs((64, 64)))
    subnet = str(tmp_path / 'subnet_no-theta.json')
    spec.save(subnet)
    cfg.model.backbone.subnet = subnet
    net = build_model(cfg.model, 'mmpretrain')
    assert not any(True for _ in gates(net))  # what the temperature hook refuses
