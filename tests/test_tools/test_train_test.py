"""tools/train.py, tools/test.py and tools/dist_train.sh on the digits data, and their errors
(mmdcs.apis.launch.user_errors itself: tests/test_apis/test_launch.py). Each tool runs as a user
runs it (a process: its exit code, its one error line) where that is the point; the other
refusals call the same ``main`` in this process (``_tools.run_main``)."""
import json
import os
import os.path as osp

import pytest
from _tools import (CXX_ABORT, ROOT, digits_opts,  # noqa: E402 (tests/ is on sys.path)
                    load_tool, run_dist_train, run_main)


CFG = 'configs/demo/mobilevit-xs_digits-cls.py'


def run_main_ok(rel, argv):
    """The tool's ``main(argv)`` in this process, from the repository root; it must return."""
    before = os.getcwd()
    os.chdir(ROOT)
    try:
        load_tool(rel).main(list(argv))
    finally:
        os.chdir(before)


@pytest.mark.xdist_group('train')
def test_train_test_and_resume(tiny_digits, tmp_path, run_tool):
    """A first epoch trained in this process (``main``), then train.py and test.py as a user runs
    them: resume from the work dir's latest checkpoint for one more epoch, evaluate it."""
    work = str(tmp_path / 'work')
    run_main_ok('tools/train.py', [CFG, '--work-dir', work, '--cfg-options'] +
                digits_opts(tiny_digits, epochs=1))
    assert osp.isfile(osp.join(work, 'epoch_1.pth'))

    # resume from the latest checkpoint in the work dir and train one more epoch
    proc = run_tool(['tools/train.py', CFG, '--work-dir', work, '--resume', '--cfg-options'] +
                    digits_opts(tiny_digits, epochs=2))
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stdout + proc.stderr
    assert 'resumed epoch: 1' in log, log[-3000:]
    assert osp.isfile(osp.join(work, 'epoch_2.pth'))

    metrics = str(tmp_path / 'metrics.json')
    proc = run_tool(['tools/test.py', CFG, osp.join(work, 'epoch_2.pth'), '--work-dir', work,
                     '--metrics-out', metrics, '--cfg-options'] + digits_opts(tiny_digits))
    assert proc.returncode == 0, proc.stderr[-3000:]
    top1 = json.load(open(metrics))['accuracy/top1']
    assert 0 <= top1 <= 100


@pytest.mark.xdist_group('train')
def test_dist_train_two_processes_gloo(tiny_digits, tmp_path):
    """DDP on the CPU: 2 processes, gloo, through tools/dist_train.sh; the run is a DCS search
    (the alternating loop's weight and arch optimizers, the cost terms logged, under DDP)."""
    from mmdcs.utils.checkpoint import load_checkpoint_file
    work = str(tmp_path / 'ddp')
    args = ['configs/demo/dcs-mobilevit-xs_search_digits.py', '2', '--work-dir', work,
            '--cfg-options'] + digits_opts(tiny_digits, epochs=1) + [
                'train_dataloader.batch_size=16']
    proc = run_dist_train(args, port=29631)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert CXX_ABORT not in log, log[-3000:]
    assert 'Distributed launcher: pytorch' in log or 'distributed: True' in log, log[-3000:]
    assert osp.isfile(osp.join(work, 'epoch_1.pth'))
    assert 'arch_loss_budget' in log and 'arch_cost_mu' in log
    ckpt = load_checkpoint_file(osp.join(work, 'epoch_1.pth'))
    assert set(ckpt['optimizer']) >= {'weight', 'arch'} or 'weight.state' in str(
        list(ckpt['optimizer'])[:4])


def test_missing_data_root_is_one_clear_error(tmp_path, run_tool):
    proc = run_tool(['tools/train.py', CFG, '--work-dir', str(tmp_path), '--cfg-options',
                     'train_dataloader.dataset.data_root=/nonexistent/digits/cls'])
    assert proc.returncode == 2
    assert 'train_dataloader.dataset.data_root' in proc.stderr
    assert 'build_digits.py' in proc.stderr
    assert 'Traceback' not in proc.stderr


def test_unknown_config_path(capsys):
    code, err = run_main('tools/train.py', ['configs/demo/nope.py'], capsys)
    assert code == 2
    assert 'config file not found: configs/demo/nope.py' in err


def test_unknown_type_names_it_and_suggests(tiny_digits, tmp_path, capsys):
    code, err = run_main('tools/train.py', [CFG, '--work-dir', str(tmp_path), '--cfg-options',
                                            'model.backbone.type=mmdcs.VIT'] +
                         digits_opts(tiny_digits), capsys)
    assert code == 2, err[-2000:]
    assert "unknown type: mmdcs.VIT" in err.replace("'", '')
    assert 'mmdcs.ViT' in err
    assert 'Traceback' not in err


def test_amp_without_gpu_is_refused(tiny_digits, tmp_path, capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip('a GPU is present')
    code, err = run_main('tools/train.py', [CFG, '--amp', '--work-dir', str(tmp_path),
                                            '--cfg-options'] + digits_opts(tiny_digits), capsys)
    assert code == 2
    assert '--amp needs a CUDA device' in err


def test_missing_task_package_is_named(tmp_path, run_tool):
    cfg = tmp_path / 'cfg.py'
    cfg.write_text("default_scope = 'mmdet'\nmodel = dict(type='X')\n")
    proc = run_tool(['-c', 'import sys, importlib.abc\n'
                     'class Block(importlib.abc.MetaPathFinder):\n'
                     '    def find_spec(self, name, path, target=None):\n'
                     '        if name == "mmdet" or name.startswith("mmdet."):\n'
                     '            raise ModuleNotFoundError(name="mmdet")\n'
                     'sys.meta_path.insert(0, Block())\n'
                     f'sys.argv = ["train.py", {str(cfg)!r}]\n'
                     'import runpy; runpy.run_path("tools/train.py", run_name="__main__")'])
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "needs the package 'mmdet'" in proc.stderr
    assert 'pip install mmdet==3.3.0' in proc.stderr


def test_test_py_evaluates_the_checkpoint_given_whatever_load_from_says(tmp_path, capsys):
    """--cfg-options load_from=... (e.g. reused from a fine-tuning run) must not replace the
    CHECKPOINT argument of tools/test.py."""
    from mmdcs.apis.launch import load_config
    tool = load_tool('tools/test.py')
    ckpt = tmp_path / 'epoch_4.pth'
    ckpt.write_bytes(b'')
    cfg_path = osp.join(ROOT, CFG)
    args = tool.parse_args([cfg_path, str(ckpt), '--work-dir', str(tmp_path), '--cfg-options',
                            'load_from=work_dirs/export/compact.pth'])
    cfg = tool.merge_args(load_config(cfg_path), args, 'mmpretrain')
    assert cfg.load_from == str(ckpt)
    assert 'load_from=work_dirs/export/compact.pth is ignored' in capsys.readouterr().err


def test_missing_teacher_checkpoint_is_one_clear_error_before_training(tiny_digits, tmp_path,
                                                                       capsys):
    """A missing file found while the runner starts (here DynamicViT's teacher, loaded by
    init_weights before the first iteration) is one line and exit code 2, no traceback."""
    code, err = run_main('tools/train.py', [
        'configs/demo/dynamicvit-deit-tiny_digits.py', '--work-dir', str(tmp_path),
        '--cfg-options', 'model.teacher_checkpoint=/nonexistent/teacher.pth'] +
        digits_opts(tiny_digits), capsys)
    assert code == 2, err[-2000:]
    assert "teacher_checkpoint '/nonexistent/teacher.pth' not found" in err
    assert 'Traceback' not in err
    assert not osp.exists(osp.join(str(tmp_path), 'epoch_1.pth'))


@pytest.mark.parametrize('option, message', [
    ('model.backbone.subnet={missing}', 'subnet file not found: {missing}'),
    ('model.backbone.subnet={bad}', 'not an mmdcs subnet description'),
])
def test_bad_subnet_file_is_one_clear_error_in_train_py(tiny_digits, tmp_path, capsys, option,
                                                        message):
    """A subnet file that is missing or not a subnet, met while the runner builds the model, is
    one line and exit code 2 (tools/train.py, as every tool under user_errors). Three epochs:
    the retraining's t_warm = 2 must be below them (else the pre-flight refuses it first)."""
    bad = tmp_path / 'bad.json'
    bad.write_text('{"format": "bogus"}')
    names = dict(missing=str(tmp_path / 'missing.json'), bad=str(bad))
    code, err = run_main('tools/train.py', [
        'configs/demo/dcs-mobilevit-xs_retrain_digits.py', '--work-dir', str(tmp_path / 'wd'),
        '--cfg-options', option.format(**names)] + digits_opts(tiny_digits, epochs=3), capsys)
    assert code == 2, err[-2000:]
    assert message.format(**names) in err
    assert 'Traceback' not in err
