"""The Fashion-MNIST protocol of the method comparison (mmdcs.apis.compare, --dataset
fashion-mnist): one trained baseline pruned by every method and seed, the equal-training rule (a
search's epochs count against its method), the 95 % t intervals of the paired differences, a
missing data set refused in one line, a baseline read from a tools/train.py work dir. No
training and no timing: stub runners and fake work dirs."""
import json
import math
import os
import os.path as osp
import sys

import pytest
import torch

from mmdcs.apis.compare import (Protocol, Runner, check_equal_training, compare, eta,
                                noise_floor, paired_differences, read_baseline,
                                summary_markdown, t975, training_epochs)
from mmdcs.apis.launch import UserError
from _tools import assert_close_scaled, run_main

#: Student t's 0.975 quantiles (two-sided 95 %) of any statistics table
KNOWN_T = {1: 12.7062, 2: 4.3027, 4: 2.7764, 9: 2.2622, 30: 2.0423}
#: the paired differences of the fake results: dcs − magnitude per seed
DIFFS = {0: -2., 1: -1., 2: 3.}


def _rows():
    mag = {0: 60., 1: 62., 2: 64.}
    return [dict(regime='pretrained', model='deit-tiny', method=m, budget=0.7, seed=s,
                 top1=v + (DIFFS[s] if m == 'dcs' else 0.), images_seen=30000,
                 latency_ratio=0.7, latency_within=(m, s) != ('dcs', 2),
                 widths={'layers.0.mlp': [96, 192]})
            for m in ('magnitude', 'dcs') for s, v in mag.items()]


# ----------------------------------------------------------------------------- equal training
def test_a_search_counts_against_its_method():
    # DCS / KCR: search 1 + fine-tune 2; the ablation arms fine-tune DCS's search; pruners 3
    assert [training_epochs(m, 2, 1, 3) for m in ('dcs', 'kcr', 'dcs-ce', 'magnitude')] == [
        3, 3, 3, 3]
    assert check_equal_training(['dcs', 'kcr', 'magnitude', 'taylor', 'uniform', 'dcs-kcr'],
                                2, 1, 3) == 3
    with pytest.raises(UserError, match=r'dcs 3, magnitude 2'):
        check_equal_training(['dcs', 'magnitude'], 2, 1, 2)


def _fake_run(run):
    return dict(top1=80. + run['seed'], latency_ratio=None, widths={})


def test_a_row_outside_the_latency_tolerance_is_said_in_its_progress_line(tmp_path):
    lines = []

    def run_one(run):
        return dict(top1=80., latency_ratio=0.75, widths={},
                    latency_within=(run['method'], run['seed']) != ('magnitude', 1))
    compare(['deit-tiny'], ['magnitude'], [0.7], [0, 1], str(tmp_path / 'g'), 3, 0,
            pretrained=True, latency=False, run_one=run_one, log=lines.append)
    said = [line for line in lines if 'outside ±0.03' in line]
    assert len(said) == 1 and 'magnitude budget 0.7 seed 1' in said[0] and '0.750' in said[0]


def test_fashion_grid_refuses_unequal_training_and_records_images_seen(tmp_path):
    out = str(tmp_path / 'grid')
    kw = dict(pretrained=True, latency=False, run_one=_fake_run, log=lambda s: None,
              protocol=Protocol.of('fashion-mnist'), search_epochs=1)
    with pytest.raises(UserError, match='equal training'):
        compare(['deit-tiny'], ['dcs', 'magnitude'], [0.7], [0, 1], out, 2, 10000,
                pruner_epochs=2, **kw)
    assert not osp.exists(out)  # refused before anything is created
    rows = compare(['deit-tiny'], ['dcs', 'magnitude'], [0.7], [0, 1], out, 2, 10000,
                   pruner_epochs=3, **kw)
    # one shared baseline (seed 0, 12 epochs), every method row 3 epochs of 10,000 images
    assert [(r['method'], r['seed'], r['images_seen']) for r in rows] == [
        ('baseline', 0, 120000), ('dcs', 0, 30000), ('magnitude', 0, 30000),
        ('dcs', 1, 30000), ('magnitude', 1, 30000)]


class _TrainRecorder(Runner):
    """A Runner whose trainings and exports only record what they would run."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.trained = []

    def train(self, config, work_dir, epochs, seed, extra=()):
        self.trained.append((osp.basename(config), osp.relpath(work_dir, self.work), epochs,
                             seed, tuple(o for o in extra if 'val_interval' in o)))
        os.makedirs(work_dir, exist_ok=True)
        return 'ckpt.pth'

    def export(self, config, checkpoint, out, *a, **kw):
        os.makedirs(out, exist_ok=True)
        with open(osp.join(out, 'subnet.json'), 'w') as f:
            f.write('{}')
        return {}

    def _row(self, work_dir, epochs, cfg, opts, spec, run=None):
        return dict(top1=0.)


def test_every_seed_prunes_one_baseline_with_the_search_counted(tmp_path, monkeypatch):
    monkeypatch.setattr('mmdcs.apis.compare.SubnetSpec.load',
                        lambda p: type('S', (), {'to_dict': lambda self: {}})())
    runner = _TrainRecorder(str(tmp_path / 'runs'), 'data/fashion-mnist', 2, 10000,
                            'pretrained', search_epochs=1, latency=False, pruner_epochs=3,
                            protocol=Protocol.of('fashion-mnist'))
    for seed in (0, 1):
        for method in ('dcs', 'magnitude', 'dcs-ce'):
            runner(dict(model='deit-tiny', method=method, budget=0.7, seed=seed,
                        regime='pretrained'))
    base = ('deit-tiny_fashion-cls.py', 'pretrained/deit-tiny/baseline', 12, 0, ())
    assert runner.trained[:4] == [
        base,
        ('dcs-deit-tiny_search-from-baseline_fashion.py',
         'pretrained/deit-tiny/seed0/dcs_0.7_search', 1, 0, ()),
        ('dcs-deit-tiny_finetune_fashion.py', 'pretrained/deit-tiny/seed0/dcs_0.7_finetune',
         2, 0, ('train_cfg.val_interval=2', )),
        base]
    assert ('magnitude-deit-tiny_finetune_fashion.py',
            'pretrained/deit-tiny/seed1/magnitude_0.7_finetune', 3, 1,
            ('train_cfg.val_interval=3', )) in runner.trained
    assert ('dcs-deit-tiny_finetune-ce_fashion.py',
            'pretrained/deit-tiny/seed1/dcs-ce_0.7_finetune', 2, 1,
            ('train_cfg.val_interval=2', )) in runner.trained
    # the one baseline, seed 0, whatever the seed pruning it
    assert {t for t in runner.trained if t[0] == base[0]} == {base}


# ----------------------------------------------------------------------------- statistics
def test_t_quantiles_and_the_table_without_scipy(monkeypatch):
    for df, t in KNOWN_T.items():
        assert_close_scaled(t975(df), t, rel=2e-5, what=f'df {df}')
    monkeypatch.setitem(sys.modules, 'scipy.stats', None)  # import fails: the table
    for df, t in KNOWN_T.items():
        assert_close_scaled(t975(df), t, rel=2e-5, what=f'table, df {df}')


def test_paired_t_interval_on_fixed_results():
    d = paired_differences(_rows())[('pretrained', 'deit-tiny', 'dcs', 0.7)]
    assert d['diffs'] == DIFFS and d['wins'] == 1
    # mean 0, sample std √7, n 3: ± 4.3027 · √7 / √3
    half = 4.302653 * math.sqrt(7.) / math.sqrt(3.)
    assert_close_scaled(d['ci95'], [-half, half], rel=1e-6)
    assert_close_scaled(noise_floor(80., 10000), 0.4, rel=1e-9)


def test_summary_has_the_curve_noise_floor_intervals_and_latency_marks():
    base = dict(regime='pretrained', model='deit-tiny', method='baseline', budget=1.0, seed=0,
                top1=83.19, curve=[66.23, 83.19], images_seen=120000, latency_ratio=1.,
                widths={})
    text = summary_markdown(_rows() + [base], dict(dataset='fashion-mnist', val_images=0,
                                                   latency=dict(batch=16)))
    assert 'Top-1 on the Fashion-MNIST test set' in text
    assert 'after each epoch 66.23, 83.19' in text and 'on 10000 test images is 0.37' in text
    assert '| 0.00 ± 2.65 (1/3) | [-6.57, +6.57] |' in text
    assert 'all but 1 rows (marked ✗)' in text and '✗ 1 outside ±0.03' in text
    assert 'seen after the baseline by every row: 30000' in text


# ----------------------------------------------------------------------------- input
def test_missing_fashion_data_is_one_line_before_anything_is_created(tmp_path, capsys):
    out = tmp_path / 'out'
    code, err = run_main('tools/analysis/compare_methods.py', [
        '--dataset', 'fashion-mnist', '--pretrained', '--methods', 'magnitude',
        '--epochs', '3', '--data', str(tmp_path / 'nothing'), '--out', str(out)], capsys)
    assert code == 2 and 'tools/data/fashion_mnist.py' in err
    assert len(err.strip().splitlines()) == 1
    assert not osp.exists(out)


def _work_dir(path, epochs, checkpoint=True):
    """A fake tools/train.py work dir: iteration and per-epoch val lines, a checkpoint."""
    logs = osp.join(path, '20260101_000000', 'vis_data')
    os.makedirs(logs)
    with open(osp.join(logs, 'scalars.json'), 'w') as f:
        for e in range(1, epochs + 1):
            f.write(json.dumps(dict(loss=1. / e, epoch=e, iter=e * 10, step=e * 10)) + '\n')
            f.write(json.dumps({'accuracy/top1': 60. + e, 'step': e}) + '\n')
    ckpt = osp.join(path, f'epoch_{epochs}.pth')
    if checkpoint:
        torch.save(dict(state_dict={'w': torch.zeros(2)}), ckpt)
    with open(osp.join(path, 'last_checkpoint'), 'w') as f:
        f.write(ckpt)
    return str(path)


def test_baseline_from_reads_a_work_dirs_curve_and_checkpoint(tmp_path):
    wd = _work_dir(tmp_path / 'wd', 3)
    got = read_baseline(wd, 3)
    assert got == dict(checkpoint=osp.join(wd, 'epoch_3.pth'), curve=[61., 62., 63.])
    with pytest.raises(UserError, match='not after each of the 4 epochs'):
        read_baseline(wd, 4)
    with pytest.raises(UserError, match='epoch_2.pth can not be found'):
        read_baseline(_work_dir(tmp_path / 'nockpt', 2, checkpoint=False), 2)
    runner = Runner(str(tmp_path / 'runs'), 'data/fashion-mnist', 2, 0, 'pretrained',
                    latency=False, protocol=Protocol.of('fashion-mnist', 3, wd))
    row = runner(dict(model='deit-tiny', method='baseline', budget=1.0, seed=0,
                      regime='pretrained'))
    assert row['top1'] == 63. and row['curve'] == [61., 62., 63.]


def test_eta_from_each_methods_measured_time():
    took = [('baseline', 100.), ('dcs', 10.), ('magnitude', 4.), ('magnitude', 6.)]
    todo = [dict(method=m) for m in ('dcs', 'magnitude', 'kcr')]
    # dcs 10, magnitude 5, kcr (not timed yet) the mean of the rows other than the baseline
    assert eta(took, todo) == pytest.approx(10. + 5. + 20. / 3.)
    assert eta([('baseline', 100.)], todo) == pytest.approx(300.)


class _Tables:
    """The latency tables of a comparison, as far as an export and a row read them."""
    multiple_of = 8

    def get(self, model, kind):
        return f'{kind}.json', None

    def identity(self, model, kind):
        return dict(file=f'{kind}.json')


def test_latency_exports_are_refined_and_rows_outside_the_tolerance_marked(
        tmp_path, monkeypatch):
    asked = {}

    def export_subnet(*a, **kw):
        asked.update(kw)
        raise SystemExit  # what it was asked is all this test reads

    monkeypatch.setattr('mmdcs.apis.compare.export_subnet', export_subnet)
    monkeypatch.setattr(Runner, 'top1', staticmethod(lambda work_dir, epochs: 80.))
    runner = Runner(str(tmp_path / 'runs'), 'data/fashion-mnist', 2, 0, 'pretrained',
                    tables=_Tables(), protocol=Protocol.of('fashion-mnist'))
    with pytest.raises(SystemExit):
        runner.export('c.py', 'k.pth', str(tmp_path / 'x'), 0.7, 'magnitude', model='deit-tiny')
    # measured corrections (the one target-meeting function), never refused mid-grid
    assert asked['refine'] == 3 and asked['measure'] and asked['latency_tolerance'] is None
    run = dict(model='deit-tiny', method='magnitude', budget=0.7)
    for measured, within in ((0.72, True), (0.68, True), (0.74, False)):
        spec = dict(blocks=[], meta=dict(budget=dict(achieved_ratio=0.7, measured=dict(
            params=dict(ratio=0.8), flops=dict(ratio=0.7), latency=dict(ratio=measured)))))
        row = runner._row(str(tmp_path), 2, 'c.py', [], spec, run)
        assert (row['latency_ratio'], row['latency_within']) == (measured, within)


def test_tables_only_checks_the_budgets_before_the_baseline_exists(tmp_path):
    prepared = []

    class Tables(_Tables):
        folder = str(tmp_path / 'tables')

        def settings(self):
            return dict(batch=16)

        def prepare(self, models, methods, budgets):
            prepared.append((list(models), list(budgets)))

    out = str(tmp_path / 'grid')
    # the baseline is still training (make compare-fashion): its work dir is not read yet
    rows = compare(['deit-tiny'], ['dcs', 'magnitude'], [0.7, 0.5], [0], out, 2, 10000,
                   pretrained=True, resource='latency', search_epochs=1, pruner_epochs=3,
                   run_one=_fake_run, log=lambda s: None, tables=Tables(), tables_only=True,
                   protocol=Protocol.of('fashion-mnist', baseline_from=str(tmp_path / 'b')))
    assert rows == [] and prepared == [(['deit-tiny'], [0.7, 0.5])]
    assert not osp.exists(osp.join(out, 'results.json'))
