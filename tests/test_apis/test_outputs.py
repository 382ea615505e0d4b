"""The tools never overwrite a user's result file silently (one line, exit 2, unless --force)
and write it atomically (temporary file + rename: an interrupted tool leaves the earlier files
untouched and no half file)."""
import os
import os.path as osp

import pytest

from mmdcs.apis.launch import UserError
from mmdcs.apis.outputs import atomic_outputs, refuse_overwrite, staged_directory, write_json

SEARCH = 'configs/demo/dcs-mobilevit-xs_search_digits.py'


def _files(folder):
    return sorted(os.listdir(folder))


def test_refuse_overwrite_names_the_file_unless_force(tmp_path):
    old = tmp_path / 'subnet.json'
    old.write_text('earlier result')
    with pytest.raises(UserError, match=r'subnet\.json already exists.*--force'):
        refuse_overwrite([str(tmp_path / 'new.pth'), str(old)], force=False)
    refuse_overwrite([str(old)], force=True)
    refuse_overwrite([str(tmp_path / 'new.pth'), None], force=False)


def test_atomic_outputs_all_or_nothing(tmp_path):
    a, b = tmp_path / 'subnet.json', tmp_path / 'pruned.pth'
    a.write_text('old a')
    b.write_text('old b')
    with pytest.raises(RuntimeError):
        with atomic_outputs(str(a), str(b)) as (ta, tb):
            with open(ta, 'w') as f:
                f.write('new a')
            with open(tb, 'w') as f:
                f.write('half')
            raise RuntimeError('interrupted')
    assert a.read_text() == 'old a' and b.read_text() == 'old b'
    assert _files(tmp_path) == ['pruned.pth', 'subnet.json']  # no temporary file left
    with atomic_outputs(str(a), str(b)) as (ta, tb):
        assert osp.dirname(ta) == str(tmp_path) and ta.endswith('.json')
        for t, text in ((ta, 'new a'), (tb, 'new b')):
            with open(t, 'w') as f:
                f.write(text)
    assert a.read_text() == 'new a' and b.read_text() == 'new b'
    assert _files(tmp_path) == ['pruned.pth', 'subnet.json']


def test_staged_directory_refuses_before_moving_anything(tmp_path):
    (tmp_path / 'b.png').write_text('old')
    with pytest.raises(UserError, match='b.png already exists'):
        with staged_directory(str(tmp_path)) as stage:
            for name in ('a.png', 'b.png'):
                with open(osp.join(stage, name), 'w') as f:
                    f.write('new')
    assert _files(tmp_path) == ['b.png'] and (tmp_path / 'b.png').read_text() == 'old'
    with staged_directory(str(tmp_path), force=True) as stage:
        write_json(osp.join(stage, 'b.png'), {'x': 1})
    assert _files(tmp_path) == ['b.png'] and '"x": 1' in (tmp_path / 'b.png').read_text()


def _refused(proc, path):
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith('error')]
    assert len(lines) == 1 and 'Traceback' not in proc.stderr, proc.stderr[-3000:]
    assert f'{path} already exists' in lines[0] and '--force' in lines[0], lines[0]


@pytest.fixture(scope='module')
def search_checkpoint(tmp_path_factory):
    """A (not trained) DCS-MobileViT-XS search checkpoint of the demo config."""
    import torch
    from mmdcs.apis.subnet_io import build_model, load_task_config
    import os.path as osp_
    root = osp_.dirname(osp_.dirname(osp_.dirname(osp_.abspath(__file__))))
    cfg, scope = load_task_config(osp_.join(root, SEARCH))
    torch.manual_seed(0)
    model = build_model(cfg.model, scope)
    path = str(tmp_path_factory.mktemp('search') / 'epoch_1.pth')
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, path)
    return path


def test_export_subnet_refuses_to_overwrite_then_force_replaces(search_checkpoint, tmp_path,
                                                                  run_tool):
    out = tmp_path / 'export'
    out.mkdir()
    (out / 'subnet.json').write_text('a user\'s earlier search result')
    proc = run_tool(['tools/export_subnet.py', SEARCH, search_checkpoint, '--out', str(out),
                     '--no-verify'])
    _refused(proc, osp.join(str(out), 'subnet.json'))
    assert _files(out) == ['subnet.json']
    assert (out / 'subnet.json').read_text() == 'a user\'s earlier search result'
    proc = run_tool(['tools/export_subnet.py', SEARCH, search_checkpoint, '--out', str(out),
                     '--no-verify', '--force'])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _files(out) == ['pruned.pth', 'subnet.json']  # no temporary file left
    assert (out / 'subnet.json').read_text().lstrip().startswith('{')


def test_convert_refuses_to_overwrite(tmp_path, run_tool):
    pytest.importorskip('timm')
    dst = tmp_path / 'deit.pth'
    dst.write_bytes(b'earlier')
    args = ['tools/convert/timm_to_mmdcs.py', 'vit', 'deit-tiny', '--random-init', str(dst)]
    _refused(run_tool(args), str(dst))
    assert dst.read_bytes() == b'earlier'
    proc = run_tool(args + ['--force'])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert dst.stat().st_size > 1000 and _files(tmp_path) == ['deit.pth']


@pytest.mark.parametrize('tool, option', [
    (['tools/test.py', SEARCH, 'missing.pth'], '--metrics-out'),
    (['tools/test.py', SEARCH, 'missing.pth'], '--out'),
    (['tools/analysis/complexity.py', SEARCH], '--out'),
    (['tools/analysis/ib_kc_report.py', SEARCH, 'missing.pth'], '--json'),
])
def test_other_tools_refuse_before_any_work(tool, option, tmp_path, run_tool):
    path = tmp_path / ('result.pkl' if option == '--out' and 'test.py' in tool[0] else
                       'result.json')
    path.write_text('earlier')
    _refused(run_tool(tool + [option, str(path)]), str(path))
    assert path.read_text() == 'earlier'
