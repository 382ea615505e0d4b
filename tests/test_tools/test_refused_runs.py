"""A run that ``tools/train.py`` or ``tools/test.py`` refuses (exit 2) leaves nothing behind: the
pre-flight checks (work dir, data, the retraining's warm-up) run before anything is created, and
a refusal met while the runner is built or the checkpoint is loaded removes the work dir and log
that run created (``mmdcs.apis.launch.watch_new_paths``). Also: what the regulariser term does
before its state was refreshed (the hook's warning). The tools run in this process."""
import logging
import os
import os.path as osp
import types

import pytest
import torch
from _tools import ROOT, digits_opts, run_main  # noqa: E402 (tests/ is on sys.path)

SEARCH = osp.join(ROOT, 'configs/demo/dcs-mobilevit-xs_search_digits.py')
RETRAIN = osp.join(ROOT, 'configs/demo/dcs-mobilevit-xs_retrain_digits.py')


def _refused(capsys, tool, argv):
    code, err = run_main(tool, argv, capsys, cwd=None)
    assert code == 2, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith('error')]
    assert len(lines) == 1 and 'Traceback' not in err, err[-3000:]
    return lines[0]


@pytest.mark.xdist_group('train')
def test_refused_training_leaves_no_work_dir(tiny_digits, tmp_path, monkeypatch, capsys):
    """A value the backbone refuses while the runner is built: without --work-dir
    (./work_dirs/<config> in the current directory) nothing is left; in an existing work dir
    the earlier files stay and nothing is added."""
    cwd = tmp_path / 'cwd'
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    opts = ['--cfg-options', 'model.backbone.tau=-1'] + digits_opts(tiny_digits)
    line = _refused(capsys, 'tools/train.py', [SEARCH] + opts)
    assert line.startswith('error: model.backbone.tau = -1: '), line
    assert os.listdir(cwd) == []
    work = tmp_path / 'work'
    work.mkdir()
    (work / 'earlier.log').write_text('keep')
    _refused(capsys, 'tools/train.py', [SEARCH, '--work-dir', str(work)] + opts)
    assert os.listdir(work) == ['earlier.log']


@pytest.mark.xdist_group('train')
def test_a_refused_run_forgets_the_logger_of_the_directory_it_removed(tiny_digits, tmp_path,
                                                                      monkeypatch, capsys):
    """mmengine names a run's logger and visualizer after the config and the second it starts,
    and binds them to its log directory. A refusal removes that directory: a second run of the
    same config in the same second (frozen here) must not get them back and write into it."""
    import time
    bad = tmp_path / 'truncated.pth'
    bad.write_bytes(b'PK\x03\x04 not a checkpoint')
    monkeypatch.setattr(time, 'time', lambda: 1.7e9)  # both runs start in the same second
    argv = [SEARCH, '--work-dir', str(tmp_path / 'w'), '--cfg-options'] + digits_opts(
        tiny_digits) + [f'load_from={bad}']
    for _ in range(2):
        line = _refused(capsys, 'tools/train.py', argv)
        assert 'is not a readable checkpoint' in line, line
    assert not osp.exists(tmp_path / 'w')


@pytest.mark.xdist_group('train')
def test_refused_test_leaves_no_work_dir(tiny_digits, tmp_path, monkeypatch, capsys):
    """tools/test.py without --work-dir, with a file that is no checkpoint (refused when the
    runner loads it): no ./work_dirs/<config> in the current directory."""
    cwd = tmp_path / 'cwd'
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    ckpt = tmp_path / 'random.pth'
    ckpt.write_bytes(os.urandom(256))
    cfg = osp.join(ROOT, 'configs/demo/mobilevit-xs_digits-cls.py')
    line = _refused(capsys, 'tools/test.py', [cfg, str(ckpt), '--cfg-options'] +
                    digits_opts(tiny_digits))
    assert str(ckpt) in line, line
    assert os.listdir(cwd) == []


def test_short_retraining_is_refused_before_the_runner(tiny_digits, tmp_path, monkeypatch,
                                                       capsys):
    """t_warm ≥ max_epochs: refused in the pre-flight (no runner, no environment dump, no work
    dir), naming the options to set."""
    monkeypatch.chdir(tmp_path)
    import mmengine.runner
    monkeypatch.setattr(mmengine.runner.Runner, '__init__', lambda *a, **k: pytest.fail(
        'the runner was built for a refused run'))
    line = _refused(capsys, 'tools/train.py', [RETRAIN, '--cfg-options'] +
                    digits_opts(tiny_digits, epochs=1))
    assert line == (
        'error: model.regularizer.t_warm = 2 is not below train_cfg.max_epochs = 1: the ib term '
        'would never be used. Set a shorter warm-up (--cfg-options model.regularizer.t_warm=0) '
        'or more epochs (--cfg-options train_cfg.max_epochs=4); the term is computed from the '
        'state refreshed at the end of an epoch, so it acts from the second epoch on'), line
    assert os.listdir(tmp_path) == []


def test_work_dir_naming_a_file_is_one_line(tiny_digits, tmp_path, capsys):
    path = tmp_path / 'not_a_dir'
    path.write_text('x')
    line = _refused(capsys, 'tools/train.py', [SEARCH, '--work-dir', str(path),
                                                '--cfg-options'] + digits_opts(tiny_digits))
    assert f'{path} is a file, not a directory' in line, line


@pytest.mark.parametrize('kind', ['ib', 'kcr'])
def test_the_term_needs_a_refreshed_state_and_the_hook_says_so(kind, caplog):
    """Before the first end of epoch the term has no gradient (IB: Q(a|y) is uniform, so the
    term is the constant log C once the centroids exist; KCR: no V_r, 0); the hook warns once
    when the term is on in such an epoch (t_warm = 0), and not once the state is refreshed."""
    from mmdcs.engine.hooks import RegularizerHook
    from mmdcs.regularizers import build_regularizer
    torch.manual_seed(0)
    reg = build_regularizer(dict(type=kind), feat_dim=8, num_classes=3)
    feats, labels = torch.randn(300, 8, dtype=torch.float64), torch.arange(300) % 3
    feats[:, 0] += labels.double() * 3  # classes that differ

    def gradient():
        f = feats[:30].clone().requires_grad_(True)
        loss = reg.batch_loss(f, labels[:30])['loss']
        if not loss.requires_grad:  # a constant (KCR before V_r exists)
            return 0.0
        loss.backward()
        return f.grad.abs().max().item()

    logger = logging.getLogger('mmdcs-test-regularizer-hook')
    model = types.SimpleNamespace(regularizer=reg, reg_cfg=dict(type=kind, t_warm=0),
                                  reg_active=False)
    runner = types.SimpleNamespace(model=model, epoch=0, logger=logger)
    hook = RegularizerHook()
    with caplog.at_level(logging.WARNING, logger=logger.name):
        hook.before_train_epoch(runner)
        for i in range(0, 300, 30):
            reg.update(feats[i:i + 30], labels[i:i + 30])
        assert model.reg_active and gradient() < 1e-12  # 0 up to rounding
        reg.end_epoch()
        runner.epoch = 1
        hook.before_train_epoch(runner)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f'the {kind} term is on from epoch 1 (model.regularizer.t_warm = 0), but its state ' \
        'is refreshed only at the end of an epoch' in warnings[0]
    for i in range(0, 300, 30):
        reg.update(feats[i:i + 30], labels[i:i + 30])
    assert gradient() > 1e-6 * feats.abs().max().item()  # refreshed: the term trains
