"""mmdcs.analysis.reports / plots and tools/analysis/{ib_kc_report,plot_logs}.py: the IB and
kernel-complexity report (checked against the loss modules called directly, on synthetic
features of known structure and on a tiny classifier) and the log plots."""
import importlib.util
import json
import math
import os.path as osp
import subprocess
import sys

import pytest
import torch

from mmdcs.analysis.plots import epoch_series, load_records, plot_logs, summary_table
from mmdcs.analysis.reports import classifier_report, format_report, ib_report, kc_report
from mmdcs.regularizers import (ib_exact, ibb_full, kernel_complexity, kmeans, optimal_q,
                                 soft_assign, tnn_exact)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _tool(name):
    path = osp.join(ROOT, 'tools', 'analysis', f'{name}.py')
    spec = importlib.util.spec_from_file_location(f'mmdcs_tool_{name}', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _synthetic(n_per_class=30, classes=3, d=8, sep=6.0, seed=0):
    """Features clustered by class (well separated), input representations, labels."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(classes).repeat_interleave(n_per_class)
    means = torch.zeros(classes, d, dtype=torch.float64)
    for c in range(classes):
        means[c, c] = sep
    feats = means[labels] + 0.1 * torch.randn(len(labels), d, generator=g, dtype=torch.float64)
    reps = torch.nn.functional.normalize(torch.rand(len(labels), 192, generator=g,
                                                    dtype=torch.float64), dim=1)
    return feats, reps, labels


def test_ib_report_matches_the_loss_module():
    f, x, y = _synthetic()
    rep = ib_report(f, x, y, 3, s=1.0, kmeans_iters=30, seed=0)
    cf = kmeans(f, 3, 30, torch.Generator().manual_seed(1))
    cx = kmeans(x, 3, 30, torch.Generator().manual_seed(0))
    pf, px = soft_assign(f, cf), soft_assign(x, cx)
    terms = ib_exact(pf, px, y, 3)
    ibb = ibb_full(pf, px, y, optimal_q(pf, y, 3))
    assert rep['ib'] == pytest.approx(float(terms.ib), abs=1e-12)
    assert rep['i_feat_input'] == pytest.approx(float(terms.i_feat_input), abs=1e-12)
    assert rep['ibb'] == pytest.approx(float(ibb.ibb), abs=1e-12)
    assert rep['ibb_constant'] == pytest.approx(float(ibb.constant), abs=1e-12)
    # known structure: the features identify the class (hard clusters) -> I(X̃;Y) = log 3
    assert rep['i_feat_label'] == pytest.approx(math.log(3), abs=1e-3)
    assert rep['corrected_bound_holds'] and rep['n'] == 90
    with pytest.raises(ValueError, match='at least as many images'):
        ib_report(f[:2], x[:2], y[:2], 3)


def test_kc_report_matches_the_loss_module():
    f, _, y = _synthetic()
    rep = kc_report(f, y, 3, gamma=0.25, steps=50)
    assert rep['tnn'] == pytest.approx(float(tnn_exact(f, 0.25)), rel=1e-9)
    s = f.t() @ f / len(f)
    kc, h = kernel_complexity(torch.linalg.eigvalsh(s), len(f))
    assert rep['kc'] == pytest.approx(float(kc), rel=1e-9) and rep['kc_h'] == h
    assert rep['rank'] == 2 and rep['trace'] == pytest.approx(float(s.trace()), rel=1e-9)
    assert rep['kcr_lower'] < rep['residual'] < rep['kcr_upper']
    assert rep['lr'] == pytest.approx(1 / float(torch.linalg.eigvalsh(s).max()), rel=1e-9)
    # exactly rank-1 features: nothing beyond the top eigenvalue (r = 1)
    u = torch.randn(60, 1, dtype=torch.float64)
    low = u @ torch.randn(1, 8, dtype=torch.float64)
    assert kc_report(low, gamma=0.1)['tnn'] == pytest.approx(0., abs=1e-9)


def test_classifier_report_on_a_tiny_classifier():
    from mmdcs.analysis.complexity import build_classifier
    torch.manual_seed(0)
    model = build_classifier('deit-tiny', 'baseline', img_size=(32, 32))
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(10, 3, 32, 32, generator=g), torch.randint(0, 4, (10, ),
                                                                        generator=g))
               for _ in range(2)]
    model.head.num_classes = 4  # 20 images of 4 classes (the head's logits are not used)
    rep = classifier_report(model, batches, gamma=0.1)
    assert rep['ib/n'] == 20 and rep['kc/d'] == 192 and rep['kc/rank'] == 2
    for k in ('ib/ib', 'ib/ibb', 'kc/tnn', 'kc/kc', 'kc/kcr_upper', 'accuracy'):
        assert math.isfinite(rep[k])
    text = format_report({'tiny': rep, 'again': rep})
    assert 'IB(W)' in text and 'KC(K)' in text and '| tiny | again |' in text


def _tiny_cls_config(tmp_path):
    from PIL import Image
    img_dir = tmp_path / 'imgs'
    for c in ('a', 'b'):
        (img_dir / c).mkdir(parents=True)
        for i in range(5):
            arr = (torch.rand(40, 40, 3) * 255).to(torch.uint8).numpy()
            Image.fromarray(arr).save(img_dir / c / f'{i}.png')
    cfg = tmp_path / 'tiny_cls.py'
    cfg.write_text(f'''
default_scope = 'mmpretrain'
model = dict(type='ImageClassifier',
             backbone=dict(type='mmdcs.ViT', arch='deit-tiny', variant='baseline', img_size=32),
             head=dict(type='LinearClsHead', num_classes=2, in_channels=192,
                       loss=dict(type='CrossEntropyLoss')))
data_preprocessor = dict(num_classes=2, mean=[127.5] * 3, std=[127.5] * 3, to_rgb=True)
test_pipeline = [dict(type='LoadImageFromFile'), dict(type='Resize', scale=32),
                 dict(type='PackInputs')]
val_dataloader = dict(batch_size=4, num_workers=0,
                      dataset=dict(type='CustomDataset', data_root='{img_dir}', data_prefix='',
                                   pipeline=test_pipeline),
                      sampler=dict(type='DefaultSampler', shuffle=False))
test_dataloader = val_dataloader
''')
    return str(cfg)


def test_ib_kc_report_cli(tmp_path, capsys):
    tool = _tool('ib_kc_report')
    with pytest.raises(SystemExit) as e:
        tool.main(['--help'])
    assert e.value.code == 0 and '--max-images' in capsys.readouterr().out
    cfg = _tiny_cls_config(tmp_path)
    out = tmp_path / 'report.json'
    proc = subprocess.run(
        [sys.executable, 'tools/analysis/ib_kc_report.py', cfg, 'none', cfg, 'none',
         '--names', 'one', 'two', '--max-images', '8', '--json', str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert '| quantity | one | two |' in proc.stdout
    rep = json.load(open(out))
    assert set(rep) == {'one', 'two'} and rep['one']['ib/n'] == 8
    with pytest.raises(SystemExit) as e:
        tool.main([cfg])
    assert e.value.code == 2  # not a CONFIG CHECKPOINT pair


SCALARS = [
    {'lr': 1e-3, 'loss': 2.0, 'epoch': 1, 'iter': 5, 'step': 5},
    {'lr': 1e-3, 'loss': 1.0, 'epoch': 1, 'iter': 10, 'step': 10},
    {'accuracy/top1': 40.0, 'step': 1},
    {'ib_ib': 1.5, 'ib_i_feat_input': 1.8, 'ib_i_feat_label': 0.3, 'kcr_tnn': 9.0,
     'kcr_kc': 0.8, 'step': 1},
    # the logger repeats hook scalars (smoothed) in later iteration lines: not used
    {'loss': 0.8, 'ibb': 2.2, 'loss_ib': 60.0, 'ib_ib': 99.0, 'epoch': 2, 'iter': 15,
     'step': 15},
    {'loss': 0.6, 'ibb': 2.0, 'loss_ib': 50.0, 'epoch': 2, 'iter': 20, 'step': 20},
    {'accuracy/top1': 60.0, 'step': 2},
    {'ib_ib': 1.2, 'ib_i_feat_input': 1.6, 'ib_i_feat_label': 0.4, 'kcr_tnn': 7.0,
     'kcr_kc': 0.7, 'step': 2},
    {'loss': 0.5, 'ibb': 1.9, 'loss_ib': 45.0, 'epoch': 3, 'iter': 25, 'step': 25},
    {'accuracy/top1': 70.0, 'step': 3},
    {'ib_ib': 1.0, 'ib_i_feat_input': 1.5, 'ib_i_feat_label': 0.5, 'kcr_tnn': 6.0,
     'kcr_kc': 0.6, 'step': 3},
]


def _work_dir(tmp_path, name, scale=1.0):
    d = tmp_path / name / '20260101_000000' / 'vis_data'
    d.mkdir(parents=True)
    with open(d / 'scalars.json', 'w') as f:
        for rec in SCALARS:
            f.write(json.dumps({k: (v * scale if k not in ('epoch', 'iter', 'step') else v)
                                for k, v in rec.items()}) + '\n')
        f.write('not json\n')
    return str(tmp_path / name)


def test_epoch_series_and_plots(tmp_path):
    wd = _work_dir(tmp_path, 'dcs')
    s = epoch_series(load_records(wd))
    assert s['loss'] == {1: 1.5, 2: 0.7, 3: 0.5}  # iteration lines averaged per epoch
    assert s['ib_ib'] == {1: 1.5, 2: 1.2, 3: 1.0}  # epoch-end lines only
    assert s['accuracy/top1'][3] == 70.0 and 'lr' in s
    runs = {'dcs': wd, 'baseline': _work_dir(tmp_path, 'base', 1.3)}
    out = plot_logs(runs, str(tmp_path / 'plots'), keys=['lr'])
    assert set(out) == {'ib', 'kc', 'training', 'custom'}
    for p in out.values():
        assert osp.getsize(p) > 10_000
    assert '| dcs | 3 |' in summary_table(runs)
    with pytest.raises(ValueError, match='no scalar'):
        plot_logs(runs, str(tmp_path / 'plots'), figures=(), keys=['nope'])


def test_plot_logs_cli(tmp_path, capsys):
    tool = _tool('plot_logs')
    with pytest.raises(SystemExit) as e:
        tool.main(['--help'])
    assert e.value.code == 0 and '--figures' in capsys.readouterr().out
    wd = _work_dir(tmp_path, 'kcr')
    log = osp.join(wd, '20260101_000000', 'vis_data', 'scalars.json')
    out = tmp_path / 'figs'
    proc = subprocess.run(
        [sys.executable, 'tools/analysis/plot_logs.py', wd, log, '--names', 'kcr', 'file',
         '--out-dir', str(out), '--figures', 'kc', 'training'],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert osp.getsize(out / 'kc.png') > 20_000 and osp.getsize(out / 'training.png') > 20_000
    assert not (out / 'ib.png').exists()
    with pytest.raises(SystemExit) as e:
        tool.main([str(tmp_path / 'missing')])
    assert e.value.code == 2
