"""Bad arguments of every tool: one ``error:`` line on stderr, exit code 2, no traceback —
non-positive or non-numeric sizes and counts (one shared set of argparse types,
``mmdcs.apis.launch.positive_size`` ...), malformed ``--cfg-options``, output paths of the wrong
kind or that exist already (``mmdcs.apis.outputs``), refused before any work. The tools run
in this process (``tests/_tools.run_main``): each refusal takes milliseconds."""
import os
import os.path as osp

import pytest
from _tools import ROOT, run_main  # noqa: E402 (tests/ is on sys.path)

CLS = osp.join(ROOT, 'configs/demo/mobilevit-xs_digits-cls.py')
SEARCH = osp.join(ROOT, 'configs/demo/dcs-mobilevit-xs_search_digits.py')


def _refused(capsys, tool: str, argv, tmp_path=None):
    """Run ``tool``'s main(argv) in this process: exit code 2, one ``error:`` line."""
    code, err = run_main(tool, argv, capsys, cwd=None)
    assert code == 2, err
    assert 'Traceback' not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith('error: '), err
    return lines[0]


#: (tool, the arguments before the bad option) of every tool with a size/shape option
SHAPE_TOOLS = [
    ('tools/deployment/pytorch2onnx.py', [CLS, '--out', 'x.onnx']),
    ('tools/analysis/complexity.py', [CLS]),
    ('tools/export_subnet.py', [SEARCH, 'none.pth', '--out', 'dir']),
    ('tools/ofb_export.py', [SEARCH, 'none.pth', '--out', 'dir']),
    ('tools/deployment/benchmark_onnx.py', ['--arch', 'deit-tiny']),
]


@pytest.mark.parametrize('tool, head', SHAPE_TOOLS)
@pytest.mark.parametrize('shape', [['0', '0'], ['-5', '10'], ['99999999'], ['abc'], ['']])
def test_shape_must_be_positive_integers(tool, head, shape, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = _refused(capsys, tool, head + ['--shape'] + shape)
    assert 'argument --shape' in line, line
    if shape[0] in ('0', '-5', '99999999'):
        assert f'integer in [1, 8192] (an image side in pixels), got {shape[0]}' in line, line
    elif shape[0] == 'abc':
        assert "'abc' is not a number" in line, line
    else:
        assert 'the value is empty' in line, line
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize('tool, argv', [
    ('tools/analysis/complexity.py', ['--table', '--size', '0']),
    ('tools/analysis/latency.py', ['--size', '-1']),
    ('tools/analysis/latency.py', ['--batch-sizes', '1', '0']),
    ('tools/analysis/latency.py', ['--repeats', '0']),
    ('tools/analysis/attention.py', ['--arch', 'deit-tiny', '--size', '0']),
    ('tools/analysis/attention.py', ['--arch', 'deit-tiny', '--batch-size', '0']),
    ('tools/analysis/vis_cam.py', ['--model', CLS, 'x.pth', '--images', 'x', '--size', '0']),
    ('tools/analysis/ib_kc_report.py', [CLS, 'none', '--batch-size', '0']),
    ('tools/analysis/benchmark_search.py', ['--size', '0']),
    ('tools/deployment/pytorch2onnx.py', [CLS, '--out', 'x.onnx', '--batch', '0']),
    ('tools/deployment/benchmark_onnx.py', ['a.onnx', 'b.onnx', '--repeats', '0']),
    ('tools/deployment/benchmark_onnx.py', ['a.onnx', 'b.onnx', '--threads', '-1']),
    ('tools/deployment/test_onnx.py', [CLS, 'x.pth', 'x.onnx', '--max-batches', '0']),
    ('tools/export_subnet.py', [SEARCH, 'x.pth', '--out', 'd', '--multiple-of', '0']),
    ('tools/data/build_digits.py', ['--size', '0']),
    ('tools/data/build_digits.py', ['--scenes-val', '0']),
    ('tools/data/imagenet_subset.py', ['--classes', '0']),
])
def test_sizes_and_counts_must_be_positive(tool, argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = _refused(capsys, tool, argv)
    assert 'got 0' in line or 'got -1' in line, line
    assert os.listdir(tmp_path) == []


TABLE = ('tools/analysis/latency_table.py', [SEARCH, '--out', 't.json'])
CORES = os.cpu_count()


@pytest.mark.parametrize('tool, head, argv, expected', [
    # a latency measurement's batch and threads: positive, at most 1024 images, the cores here
    (*TABLE, ['--batch', '-4'], 'argument --batch: must be an integer in [1, 1024] (images per '
     'call), got -4'),
    (*TABLE, ['--batch', '1000000000'], 'argument --batch: must be an integer in [1, 1024]'),
    (*TABLE, ['--threads', '-3'], f'argument --threads: must be an integer in [1, {CORES}] (at '
     'most the CPU cores of this machine), got -3'),
    (*TABLE, ['--threads', '1000000'], f'argument --threads: must be an integer in [1, {CORES}]'),
    ('tools/analysis/latency.py', [], ['--batch-sizes', '1', '1000000000'], 'argument '
     '--batch-sizes/--batch: must be an integer in [1, 1024]'),
    ('tools/analysis/latency.py', [], ['--threads', str(CORES + 1)], 'argument --threads'),
    ('tools/export_subnet.py', [SEARCH, 'x.pth', '--out', 'd'], ['--threads', '1000000'],
     'argument --threads'),
    ('tools/deployment/benchmark_onnx.py', ['a.onnx', 'b.onnx'], ['--threads', '0', '1000000'],
     f'argument --threads: must be an integer in [0, {CORES}] (0: all cores'),
    ('tools/deployment/pytorch2onnx.py', [CLS, '--out', 'x.onnx'], ['--batch', '5000'],
     'argument --batch'),
    ('tools/analysis/attention.py', ['--arch', 'deit-tiny'], ['--batch-size', '5000'],
     'argument --batch-size'),
    # seeds, ranks, ratios, a map head
    ('tools/analysis/complexity.py', [CLS], ['--seed', '-1'], 'argument --seed: must be an '
     'integer in [0, 4294967295], got -1'),
    ('tools/train.py', [CLS], ['--local_rank', '-1'], 'argument --local_rank/--local-rank: must '
     'be an integer ≥ 0, got -1'),
    ('tools/analysis/compare_methods.py', ['--out', 'o'], ['--budgets', 'nan'], 'argument '
     "--budgets: 'nan' is not a number; expected a finite number in (0, 1)"),
    ('tools/analysis/compare_methods.py', ['--out', 'o'], ['--seeds', '0', '-1'], 'argument '
     '--seeds'),
    ('tools/demo.py', [], ['--target-latency', '2'], 'argument --target-latency: must be a finite '
     'number in (0, 1), got 2'),
    ('tools/analysis/latency_grid.py', [], ['--target', '1.5'], 'argument --target'),
    ('tools/analysis/attention.py', ['--arch', 'deit-tiny'], ['--head', '-2'], 'argument --head: '
     'must be an integer ≥ -1, got -2'),
    ('tools/analysis/vis_cam.py', ['--model', CLS, 'x.pth', '--images', 'x'],
     ['--target-class', '-1'], 'argument --target-class: must be an integer ≥ 0, got -1'),
    # checked before the model is built
    ('tools/deployment/pytorch2onnx.py', [CLS, '--out', 'x.onnx'], ['--opset', '999'],
     'error: --opset 999: the dynamo exporter writes ONNX opsets 7 to'),
])
def test_numbers_are_bounded(tool, head, argv, expected, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = _refused(capsys, tool, head + argv)
    assert expected in line, line
    assert os.listdir(tmp_path) == []


def test_latency_batch_and_threads_are_bounded_in_the_api(tmp_path):
    """The same bounds where a table is built or read, and for the comparison's tables: before
    any model is touched (was: a traceback at -4, OpenMP out of memory at 10⁶ threads)."""
    from mmdcs.analysis.latency_table import build_table
    from mmdcs.apis.compare import LatencyTables
    from mmdcs.apis.launch import UserError
    from mmdcs.selection.latency_cost import (LATENCY_TABLE_FORMAT, LatencyCost,
                                              LatencyTableError)
    for batch, threads in [(-4, 1), (10**9, 1), (1, -3), (1, 10**6)]:
        with pytest.raises(ValueError, match='^(batch|threads) must be an integer in'):
            build_table(None, None, (32, 32), batch=batch, threads=threads)
        with pytest.raises(UserError, match='^latency tables: (batch|threads) must be'):
            LatencyTables(str(tmp_path / 't'), batch=batch, threads=threads)
        with pytest.raises(LatencyTableError, match="^the table's (batch|threads) must be"):
            LatencyCost(dict(format=LATENCY_TABLE_FORMAT, batch=batch,
                             threads=threads if threads > 1 else 10**6))
    assert not os.path.exists(tmp_path / 't')


@pytest.mark.skipif(bool(__import__('torch').cuda.is_available()), reason='a CUDA device here')
def test_latency_devices_cuda_without_a_gpu(capsys, tmp_path, monkeypatch):
    """--devices cuda where there is none: one line (was: exit 0 and an empty table)."""
    monkeypatch.chdir(tmp_path)
    line = _refused(capsys, 'tools/analysis/latency.py', ['--models', 'deit-tiny', '--size', '32',
                                                         '--devices', 'cuda', '--out', 't.md'])
    assert line.startswith('error: --devices cuda: no CUDA device is available here'), line
    assert os.listdir(tmp_path) == []


def test_compare_methods_checks_the_data_before_creating_anything(capsys, tmp_path):
    """Missing data, or fewer training images than --train-images: one line, no --out (was:
    found by the first run, its directories left; all images used without a word)."""
    line = _refused(capsys, 'tools/analysis/compare_methods.py',
                    ['--data', str(tmp_path / 'none'), '--out', str(tmp_path / 'out')])
    assert f'--data {tmp_path / "none"}: {tmp_path / "none" / "cls"} does not exist' in line
    meta = tmp_path / 'few' / 'cls' / 'meta'
    meta.mkdir(parents=True)
    for split in ('train', 'val'):
        (meta / f'{split}.txt').write_text('0/0001.png 0\n1/0002.png 1\n')
    line = _refused(capsys, 'tools/analysis/compare_methods.py',
                    ['--data', str(tmp_path / 'few'), '--train-images', '3', '--out',
                     str(tmp_path / 'out')])
    assert line.endswith(f'--train-images 3: {meta / "train.txt"} lists 2 training images (0: '
                         'all of them)'), line
    assert sorted(os.listdir(tmp_path)) == ['few']


def _a_digits_build(root, **args):
    """A data folder as tools/data/build_digits.py leaves it (its record and folders),
    without the images."""
    import json

    from mmdcs.datasets.digits import FORMAT_VERSION, build_args
    for d in ('cls', 'scenes'):
        (root / d).mkdir(parents=True)
    (root / 'build_info.json').write_text(json.dumps(dict(
        format_version=FORMAT_VERSION, args=build_args(**args), counts={})))


@pytest.mark.parametrize('argv, expected', [
    (['--data', '{other}'], '--data: {other} holds a digits build made with other arguments '
     '(max_per_class=10 there, None asked)'),
    (['--train-images', '5000'], '--train-images 5000: the digits data has 1438 training '
     'images'),
])
def test_the_demo_checks_its_arguments_before_any_step(argv, expected, capsys, tmp_path,
                                                       monkeypatch):
    """Nothing runs, nothing is written (was: --data built with other arguments replaced, 100 →
    1,438 images)."""
    import subprocess

    other = tmp_path / 'other'
    _a_digits_build(other, max_per_class=10)
    monkeypatch.setattr(subprocess, 'Popen', lambda *a, **k: pytest.fail(f'a step ran: {a}'))
    work = tmp_path / 'work'
    line = _refused(capsys, 'tools/demo.py', [a.format(other=other) for a in argv] +
                    ['--work-dir', str(work)])
    assert expected.format(other=other) in line, line
    assert sorted(os.listdir(tmp_path)) == ['other']
    assert sorted(os.listdir(other)) == ['build_info.json', 'cls', 'scenes']


@pytest.mark.parametrize('too_many', [False, True])
def test_dist_train_refuses_a_bad_process_count(too_many, tmp_path):
    """Before torchrun starts (was: its traceback, or as many processes as asked)."""
    import subprocess
    import sys

    import torch
    most = torch.cuda.device_count() or CORES
    gpus = str(most + 1) if too_many else 'abc'
    env = dict(os.environ, PATH=f'{os.path.dirname(sys.executable)}:{os.environ["PATH"]}')
    proc = subprocess.run(['bash', 'tools/dist_train.sh', CLS, gpus, '--work-dir',
                           str(tmp_path / 'w')], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip() == (f'error: GPUS must be an integer from 1 to {most} (the GPUs '
                                   'of this machine; without a GPU, its CPU cores), '
                                   f"got '{gpus}'"), proc.stderr[-2000:]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize('tool, head', [
    ('tools/train.py', [CLS]),
    ('tools/test.py', [CLS, 'x.pth']),
    ('tools/export_subnet.py', [SEARCH, 'x.pth', '--out', 'd']),
    ('tools/ofb_export.py', [SEARCH, 'x.pth', '--out', 'd']),
    ('tools/deployment/pytorch2onnx.py', [CLS, '--out', 'x.onnx']),
    ('tools/deployment/test_onnx.py', [CLS, 'x.pth', 'x.onnx']),
    ('tools/analysis/complexity.py', [CLS]),
    ('tools/analysis/latency.py', []),
    ('tools/analysis/attention.py', ['--arch', 'deit-tiny']),
    ('tools/analysis/ib_kc_report.py', [CLS, 'none']),
])
@pytest.mark.parametrize('item', ['', 'no_equals_sign', '=3'])
def test_malformed_cfg_options(tool, head, item, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = _refused(capsys, tool, head + ['--cfg-options', item])
    assert f"argument --cfg-options: '{item}' is not KEY=VALUE" in line, line
    assert os.listdir(tmp_path) == []


def test_pytorch2onnx_never_replaces_or_follows_out(capsys, tmp_path):
    """--out: an existing file, or a symlink planted there, is refused before any export;
    a directory too."""
    old = tmp_path / 'model.onnx'
    old.write_text('earlier export')
    line = _refused(capsys, 'tools/deployment/pytorch2onnx.py', [CLS, '--out', str(old)])
    assert f'{old} already exists' in line and '--force' in line, line
    target = tmp_path / 'elsewhere.txt'
    target.write_text('not yours')
    link = tmp_path / 'link.onnx'
    link.symlink_to(target)
    line = _refused(capsys, 'tools/deployment/pytorch2onnx.py', [CLS, '--out', str(link)])
    assert 'already exists' in line, line
    (tmp_path / 'adir.onnx').mkdir()
    line = _refused(capsys, 'tools/deployment/pytorch2onnx.py',
                    [CLS, '--out', str(tmp_path / 'adir.onnx'), '--force'])
    assert 'is a directory' in line, line
    assert old.read_text() == 'earlier export' and target.read_text() == 'not yours'


def test_benchmark_onnx_json_never_replaced_or_followed(capsys, tmp_path):
    """--json: an existing file or a symlink is refused before anything is timed; a file in the
    way of its directory is named."""
    target = tmp_path / 'rows.json'
    target.write_text('earlier rows')
    link = tmp_path / 'link.json'
    link.symlink_to(target)
    for out in (target, link):
        line = _refused(capsys, 'tools/deployment/benchmark_onnx.py',
                        ['a.onnx', 'b.onnx', '--json', str(out)])
        assert f'{out} already exists' in line and '--force' in line, line
    line = _refused(capsys, 'tools/deployment/benchmark_onnx.py',
                    ['a.onnx', 'b.onnx', '--json', str(target / 'sub.json')])
    assert f'{target} is not a directory' in line, line
    assert target.read_text() == 'earlier rows'


@pytest.mark.parametrize('tool, argv', [
    ('tools/export_subnet.py', [SEARCH, 'x.pth', '--out', '{file}']),
    ('tools/ofb_export.py', [SEARCH, 'x.pth', '--out', '{file}']),
    ('tools/analysis/attention.py', ['--arch', 'deit-tiny', '--random', '2', '--out-dir',
                                     '{file}']),
    ('tools/analysis/plot_logs.py', ['run', '--out-dir', '{file}']),
    ('tools/train.py', [CLS, '--work-dir', '{file}']),
    ('tools/demo.py', ['--work-dir', '{file}']),
])
def test_a_file_where_a_directory_is_expected(tool, argv, capsys, tmp_path):
    path = tmp_path / 'a_file'
    path.write_text('keep me')
    line = _refused(capsys, tool, [a.format(file=path) for a in argv])
    assert f'{path} is a file, not a directory' in line, line
    assert path.read_text() == 'keep me' and sorted(os.listdir(tmp_path)) == ['a_file']


@pytest.mark.parametrize('tool, argv', [
    ('tools/export_subnet.py', [SEARCH, 'x.pth', '--out', '{ro}/out']),
    ('tools/analysis/complexity.py', [CLS, '--out', '{ro}/table.md']),
    ('tools/deployment/pytorch2onnx.py', [CLS, '--out', '{ro}/m.onnx']),
    ('tools/deployment/benchmark_onnx.py', ['a.onnx', 'b.onnx', '--json', '{ro}/r.json']),
])
def test_a_read_only_directory_is_named(tool, argv, capsys, tmp_path, monkeypatch):
    """An output under a directory that cannot be written: one line naming it before any work
    (a read-only directory; simulated for root, whom permission bits do not stop)."""
    ro = tmp_path / 'ro'
    ro.mkdir()
    ro.chmod(0o555)
    if os.access(str(ro), os.W_OK):  # root: make the check see what a user would
        real = os.access
        monkeypatch.setattr(os, 'access', lambda p, mode, *a, **k: False if osp.abspath(
            str(p)) == str(ro) and mode & os.W_OK else real(p, mode, *a, **k))
    try:
        line = _refused(capsys, tool, [a.format(ro=ro) for a in argv])
    finally:
        ro.chmod(0o755)
    assert f'cannot write into the directory {ro}' in line, line
    assert os.listdir(ro) == []
