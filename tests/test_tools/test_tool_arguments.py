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
@pytest.mark.parametrize('shape', [['0', '0'], ['-5', '10'], ['abc'], ['']])
def test_shape_must_be_positive_integers(tool, head, shape, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = _refused(capsys, tool, head + ['--shape'] + shape)
    assert 'argument --shape' in line, line
    if shape[0] in ('0', '-5'):
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
