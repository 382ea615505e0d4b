"""tools/demo.py with budgets: the demo's targets, the magnitude retraining configs, the one-line
progress display of a running step."""
import os.path as osp

import pytest
import torch
from _tools import load_tool  # noqa: E402 (tests/ is on sys.path)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _demo():
    return load_tool('tools/demo.py')


def test_demo_searches_aim_at_budgets_that_the_networks_can_meet():
    demo = _demo()
    assert demo.Demo.target('configs/demo/dcs-mobilevit-xs_search_digits.py') == 0.92
    assert demo.Demo.target('configs/demo/kcr-mobilevit-xs_search_digits.py') == 0.92
    assert demo.Demo.target('configs/demo/dcs-deit-tiny_search_digits.py') == 0.7
    assert demo.Demo.target('configs/demo/kcr-deit-tiny_search_digits.py') == 0.7


@pytest.mark.parametrize('arch, base', [('mobilevit-xs', 'mobilevit-xs_digits-cls.py'),
                                        ('deit-tiny', 'deit-tiny_digits-cls.py')])
def test_magnitude_retrain_configs_build_the_pruned_network_without_a_regulariser(
        arch, base, tmp_path):
    from mmengine.config import Config

    from mmdcs.analysis.complexity import random_subnet
    from mmdcs.apis.subnet_io import build_model, load_task_config
    kw = dict(img_size=64) if arch == 'deit-tiny' else {}
    spec = random_subnet('vit' if arch == 'deit-tiny' else 'mobilevit', arch, 'dcs-arch2', 0.5,
                         **kw)
    path = str(tmp_path / 'subnet.json')
    spec.save(path)
    config = osp.join(ROOT, f'configs/demo/magnitude-{arch}_retrain_digits.py')
    cfg, scope = load_task_config(config, {'model.backbone.subnet': path})
    model = build_model(cfg.model, scope).eval()
    assert model.regularizer is None and model.cost_cfg is None
    assert model.backbone.subnet_spec is not None and model.backbone.variant == 'dcs-arch2'
    assert [h['type'] for h in cfg.custom_hooks] == ['EMAHook']
    # the same schedule as the DCS retraining of that arch
    dcs = Config.fromfile(osp.join(ROOT, f'configs/demo/dcs-{arch}_retrain_digits.py'))
    assert cfg.optim_wrapper == dcs.optim_wrapper and cfg.param_scheduler == dcs.param_scheduler
    assert cfg.train_cfg == dcs.train_cfg
    with torch.no_grad():
        assert model(torch.randn(1, 3, 64, 64), mode='tensor').shape == (1, 10)
    assert osp.isfile(osp.join(ROOT, 'configs/demo', base))


def test_progress_line_follows_the_log(tmp_path, capsys):
    demo = _demo()
    log = tmp_path / 'x.log'
    log.write_text('loading...\n')
    p = demo.Progress(str(log), epochs=4, every=0.)
    p.tty = False
    p.update(3.)
    assert capsys.readouterr().out.strip() == '.. starting | 0:03 elapsed'
    with open(log, 'a') as f:
        f.write('11/24 20:57:38 - mmengine - INFO - Epoch(train) [2][20/45]  lr: 1.2e-03  '
                'eta: 0:01:37  time: 1.4400  loss: 1.8\n')
        f.write('11/24 20:57:39 - mmengine - INFO - Epoch(train) [2][30/4')  # partial line
    p.update(65.)
    line = capsys.readouterr().out.strip()
    assert line.startswith('.. epoch 2/4, iter 20/45 | 1:05 elapsed | ETA 1:3'), line
    with open(log, 'a') as f:
        f.write('5]  lr: 1e-3  eta: 0:01:20  time: 1.4\n'
                '11/24 20:58:00 - mmengine - INFO - Epoch(val) [2][3/6]    eta: 0:00:02\n')
    p.update(80.)
    line = capsys.readouterr().out.strip()
    assert line.startswith('.. epoch 2/4, validating 3/6 | 1:20 elapsed | ETA 1:'), line
    with open(log, 'a') as f:
        f.write('11/24 - mmengine - INFO - Iter(train) [ 40/300]  eta: 1 day, 0:00:10\n')
    p.update(90.)
    assert '.. iter 40/300 | 1:30 elapsed | ETA 1440:' in capsys.readouterr().out


class _Cost:
    """A latency cost's bounds (ms; baseline 10 ms)."""
    baseline = 10.

    def __init__(self, floor, full):
        self.floor_ratio, self.ceiling = floor, full * 10.

    def floor_at(self, multiple_of):
        return self.floor_ratio * 10.

    def ratio(self, count):
        return count / 10.


class _Tables:
    multiple_of, clock = 8, 'thread'

    def __init__(self, bounds):
        self.bounds = bounds

    def get(self, arch, kind):
        return osp.join(ROOT, f'{kind}.json'), _Cost(*self.bounds[kind])


@pytest.mark.parametrize('dcs_floor, asked, expected', [
    (0.892, 0.95, 0.95),  # the tables of 2026-11-26: 0.95 is above every floor
    (0.94, 0.95, 0.96),   # a slower DCS: raised to its floor + 0.02
    (0.9411, 0.95, 0.97),  # ... rounded up to the next hundredth
    (0.892, 0.85, 0.92),  # asked below DCS's floor
])
def test_demo_latency_target_is_above_every_methods_floor(tmp_path, dcs_floor, asked, expected,
                                                          capsys):
    demo = _demo()
    args = demo.argparse.Namespace(work_dir=str(tmp_path), data='data/digits', epochs=1,
                                   train_images=0, target_latency=asked)
    d = demo.Demo(args)
    bounds = dict(dcs=(dcs_floor, 1.14), kcr=(0.844, 1.006), pruned=(0.844, 1.006))
    d.latency_tables(tables=_Tables(bounds))
    assert d.latency_target == pytest.approx(expected)
    assert d.budget('configs/demo/dcs-mobilevit-xs_search_digits.py') == d.latency_target
    out = capsys.readouterr().out
    assert f'every method aims at {d.latency_target}' in out
    assert ('instead' in out) == (expected != asked)


def test_demo_refuses_when_no_latency_target_fits(tmp_path):
    demo = _demo()
    args = demo.argparse.Namespace(work_dir=str(tmp_path), data='data/digits', epochs=1,
                                   train_images=0, target_latency=0.95)
    d = demo.Demo(args)
    bounds = dict(dcs=(0.99, 1.14), kcr=(0.844, 1.006), pruned=(0.844, 0.99))
    with pytest.raises(SystemExit, match='no latency target fits every method'):
        d.latency_tables(tables=_Tables(bounds))
