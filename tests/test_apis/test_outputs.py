"""The tools never overwrite a user's result file silently (one line, exit 2, unless --force)
and write it atomically (temporary file + rename: an interrupted tool leaves the earlier files
untouched and no half file)."""
import os
import os.path as osp

import pytest

from mmdcs.apis.launch import UserError, user_errors
from mmdcs.apis.outputs import (atomic_outputs, check_output_dir, check_output_file,
                                refuse_overwrite, staged_directory, write_json, write_text,
                                write_texts)

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
    with pytest.raises(UserError, match='already exists'):  # no --force: refused at the end
        with atomic_outputs(str(a), str(b)) as (ta, tb):
            for t in (ta, tb):
                with open(t, 'w') as f:
                    f.write('new')
    assert a.read_text() == 'old a' and b.read_text() == 'old b'
    with atomic_outputs(str(a), str(b), force=True) as (ta, tb):
        # the temporary files keep their names, in a private directory beside the results
        assert osp.dirname(osp.dirname(ta)) == str(tmp_path) and osp.basename(ta) == a.name
        assert os.stat(osp.dirname(ta)).st_mode & 0o777 == 0o700
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


def test_write_texts_all_or_none(tmp_path):
    """A table and its JSON (latency, ib_kc_report): both or neither."""
    (tmp_path / 'r.json').write_text('earlier')
    with pytest.raises(UserError, match='r.json already exists'):
        write_texts({str(tmp_path / 't.md'): 'table', str(tmp_path / 'r.json'): '{}',
                     None: 'skipped'})
    assert _files(tmp_path) == ['r.json']
    write_texts({str(tmp_path / 't.md'): 'table', str(tmp_path / 'r.json'): '{}'}, force=True)
    assert (tmp_path / 't.md').read_text() == 'table' and (tmp_path / 'r.json').read_text() == '{}'


def test_never_written_through_a_symlink(tmp_path):
    """A symlink planted under a result's name: refused without --force (even dangling); with
    --force the link itself is replaced by the result, what it points to is untouched."""
    victim = tmp_path / 'victim.txt'
    victim.write_text('not yours')
    link = tmp_path / 'rows.json'
    link.symlink_to(victim)
    with pytest.raises(UserError, match='rows.json already exists'):
        write_json(str(link), {'x': 1})
    dangling = tmp_path / 'dangling.json'
    dangling.symlink_to(tmp_path / 'nowhere')
    with pytest.raises(UserError, match='dangling.json already exists'):
        write_json(str(dangling), {'x': 1})
    assert not (tmp_path / 'nowhere').exists()
    write_json(str(link), {'x': 2}, force=True)
    assert victim.read_text() == 'not yours'
    assert not link.is_symlink() and '"x": 2' in link.read_text()
    assert _files(tmp_path) == ['dangling.json', 'rows.json', 'victim.txt']


@pytest.mark.parametrize('umask', [0o022, 0o027, 0o077])
def test_results_keep_the_users_umask(umask, tmp_path):
    """The result files get 0o666 & ~umask (mkstemp-style temporary files are 0600)."""
    old = os.umask(umask)
    try:
        write_text(str(tmp_path / 'table.md'), 'x\n')
        with atomic_outputs(str(tmp_path / 'a.bin'), force=False) as (tmp, ):
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o600)  # as mkstemp would
            os.close(fd)
        with staged_directory(str(tmp_path / 'figs')) as stage:
            with open(osp.join(stage, 'f.png'), 'w') as f:
                f.write('png')
    finally:
        os.umask(old)
    for p in (tmp_path / 'table.md', tmp_path / 'a.bin', tmp_path / 'figs' / 'f.png'):
        assert p.stat().st_mode & 0o777 == 0o666 & ~umask, p


def test_onnx_export_keeps_the_umask_and_refuses_overwrite(tmp_path):
    """pytorch2onnx/benchmark_onnx write their models through export_and_check: mode
    0o666 & ~umask (was 0600), an existing file refused without force."""
    pytest.importorskip('onnxruntime')
    import torch
    import torch.nn as nn

    from mmdcs.apis.deploy import ExportWrapper, export_and_check
    out = tmp_path / 'm.onnx'
    net = nn.Sequential(nn.Conv2d(3, 4, 3)).eval()
    old = os.umask(0o022)
    try:
        export_and_check(ExportWrapper(net, 'backbone'), torch.randn(1, 3, 8, 8), str(out),
                         force=False)
        assert out.stat().st_mode & 0o777 == 0o644
        with pytest.raises(UserError, match='already exists'):
            export_and_check(ExportWrapper(net, 'backbone'), torch.randn(1, 3, 8, 8),
                             str(out), force=False)
    finally:
        os.umask(old)
    assert _files(tmp_path) == ['m.onnx']


def test_output_paths_of_the_wrong_kind(tmp_path):
    (tmp_path / 'd').mkdir()
    (tmp_path / 'f').write_text('x')
    with pytest.raises(UserError, match='is a directory'):
        check_output_file(str(tmp_path / 'd'), '--json')
    with pytest.raises(UserError, match='is a file, not a directory'):
        check_output_dir(str(tmp_path / 'f'), '--out')
    with pytest.raises(UserError, match=f'{tmp_path}/f is not a directory'):
        check_output_file(str(tmp_path / 'f' / 'sub' / 'r.json'), '--json')
    check_output_file(str(tmp_path / 'new' / 'deeper' / 'r.json'))  # created when written
    check_output_dir(str(tmp_path / 'd'))
    assert _files(tmp_path) == ['d', 'f']


def test_an_oserror_on_writing_is_one_line(tmp_path, monkeypatch, capsys):
    """A result that cannot be placed (read-only, no space ...): one line naming the result
    (simulated: permission bits do not stop root)."""
    def denied(src, dst, *args, **kwargs):
        raise PermissionError(13, 'Permission denied', dst)

    monkeypatch.setattr(os, 'link', denied)
    with pytest.raises(SystemExit) as e:
        with user_errors():
            write_json(str(tmp_path / 'r.json'), {'x': 1})
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.strip() == f'error: cannot write {tmp_path}/r.json: ' \
        'Permission denied', err
    assert _files(tmp_path) == []
    with pytest.raises(SystemExit):  # any OSError naming a path (e.g. a directory written)
        with user_errors():
            open(str(tmp_path), 'w')
    assert capsys.readouterr().err.strip() == f'error: {tmp_path}: Is a directory'


def _in_process(argv, capsys):
    """``main(argv[1:])`` of the tool ``argv[0]`` in this process, from the repository root, as
    ``_refused`` reads a finished process (each tool here also runs as a process in the suite);
    a ``main`` that returns is exit code 0."""
    import types

    from _tools import ROOT, load_tool
    before = os.getcwd()
    os.chdir(ROOT)
    try:
        load_tool(argv[0]).main(list(argv[1:]))
        code = 0
    except SystemExit as e:
        code = e.code
    finally:
        os.chdir(before)
    return types.SimpleNamespace(returncode=code, stderr=capsys.readouterr().err)


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
                                                                  run_tool, capsys):
    out = tmp_path / 'export'
    out.mkdir()
    (out / 'subnet.json').write_text('a user\'s earlier search result')
    proc = run_tool(['tools/export_subnet.py', SEARCH, search_checkpoint, '--out', str(out),
                     '--no-verify'])
    _refused(proc, osp.join(str(out), 'subnet.json'))
    assert _files(out) == ['subnet.json']
    assert (out / 'subnet.json').read_text() == 'a user\'s earlier search result'
    proc = _in_process(['tools/export_subnet.py', SEARCH, search_checkpoint, '--out', str(out),
                        '--no-verify', '--force'], capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _files(out) == ['pruned.pth', 'subnet.json']  # no temporary file left
    assert (out / 'subnet.json').read_text().lstrip().startswith('{')


def test_convert_refuses_to_overwrite(tmp_path, run_tool, capsys):
    pytest.importorskip('timm')
    dst = tmp_path / 'deit.pth'
    dst.write_bytes(b'earlier')
    args = ['tools/convert/timm_to_mmdcs.py', 'vit', 'deit-tiny', '--random-init', str(dst)]
    _refused(run_tool(args), str(dst))
    assert dst.read_bytes() == b'earlier'
    proc = _in_process(args + ['--force'], capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert dst.stat().st_size > 1000 and _files(tmp_path) == ['deit.pth']


@pytest.mark.parametrize('tool, option', [
    (['tools/test.py', SEARCH, 'missing.pth'], '--metrics-out'),
    (['tools/test.py', SEARCH, 'missing.pth'], '--out'),
    (['tools/analysis/complexity.py', SEARCH], '--out'),
    (['tools/analysis/ib_kc_report.py', SEARCH, 'missing.pth'], '--json'),
])
def test_other_tools_refuse_before_any_work(tool, option, tmp_path, capsys):
    path = tmp_path / ('result.pkl' if option == '--out' and 'test.py' in tool[0] else
                       'result.json')
    path.write_text('earlier')
    _refused(_in_process(tool + [option, str(path)], capsys), str(path))
    assert path.read_text() == 'earlier'


TERMINATED = """import os, signal, sys, time
from mmdcs.apis.launch import run_program
from mmdcs.apis.outputs import atomic_outputs


def main():
    with atomic_outputs(os.path.join(sys.argv[1], 'subnet.json'),
                        os.path.join(sys.argv[1], 'pruned.pth')) as (subnet, pruned):
        with open(subnet, 'w') as f:
            f.write('{"partial": ')
        print('writing', flush=True)
        os.kill(os.getpid(), signal.SIGTERM)  # as kill, a scheduler or torchrun would
        time.sleep(60)


run_program(main)
"""


def test_sigterm_ends_a_tool_as_ctrl_c_does_without_partial_files(tmp_path, run_tool):
    """A tool stopped by SIGTERM (``kill``, a batch scheduler, torchrun) left its hidden
    temporary directory with a partial subnet.json (the export's, pytorch2onnx's): every tool
    runs through ``run_program``, which makes SIGTERM end it through its clean-ups (exit code
    143, as a shell reports a SIGTERM), as Ctrl-C does."""
    script = tmp_path / 'tool.py'
    script.write_text(TERMINATED)
    out = tmp_path / 'out'
    out.mkdir()
    proc = run_tool([str(script), str(out)], timeout=120)
    assert 'writing' in proc.stdout, proc.stderr[-2000:]
    assert proc.returncode == 143, (proc.returncode, proc.stderr[-2000:])
    assert os.listdir(str(out)) == []


def test_temporaries_of_a_killed_process_are_swept(tmp_path):
    """What no handler can clean (SIGKILL, a power cut): the next temporary the primitive makes
    in a directory removes the ones of its own pattern there whose process is gone (same host,
    this user): a training's .epoch_2.tmp-PID@HOST-*.pth, an export's temporary directory;
    a running process's, another host's, a link or any other name are left alone."""
    from mmdcs.utils import files
    with open('/proc/sys/kernel/pid_max') as f:
        gone = int(f.read()) + 1  # no process can have it
    host = files._host()
    other = '0' * 8 if host != '0' * 8 else '1' * 8
    stale_file = f'.epoch_2.tmp-{gone}@{host}-0badc0de.pth'
    stale_dir = f'.mmdcs.tmp-{gone}@{host}-0badc0de'
    kept = [f'.epoch_2.tmp-{os.getpid()}@{host}-0badc0de.pth',
            f'.epoch_2.tmp-{gone}@{other}-0badc0de.pth', 'epoch_1.pth', f'.tmp-{gone}']
    for name in [stale_file] + kept:
        (tmp_path / name).write_text('partial')
    (tmp_path / stale_dir).mkdir()
    (tmp_path / stale_dir / 'subnet.json').write_text('{"partial": ')
    link = f'.link.tmp-{gone}@{host}-0badc0de'
    os.symlink(str(tmp_path / 'epoch_1.pth'), str(tmp_path / link))
    files.atomic_write(str(tmp_path / 'epoch_3.pth'), b'weights')
    assert _files(tmp_path) == sorted(kept + [link, 'epoch_3.pth'])
    with files.replacing(str(tmp_path / 'config.py')) as tmp:  # a writer that needs a path
        assert osp.dirname(tmp) == str(tmp_path) and osp.basename(tmp).startswith('.config.tmp-')
        with open(tmp, 'w') as f:
            f.write('x = 1\n')
    assert (tmp_path / 'config.py').read_text() == 'x = 1\n'


def test_logs_and_annotation_files_are_not_written_through_a_link(tmp_path):
    """The comparison's run logs (``open_log``) and the ImageNet subset's annotation files
    were opened for writing by name: a link planted there had its target written."""
    from mmdcs.datasets.imagenet_subset import _write_lines
    victim = tmp_path / 'victim'
    victim.write_text('precious')
    for name in ('run.log', 'train.txt', 'train.txt.tmp'):
        os.symlink(str(victim), str(tmp_path / name))
    _write_lines(str(tmp_path / 'train.txt'), ['a/1.JPEG 0'])
    assert victim.read_text() == 'precious'
    assert not osp.islink(str(tmp_path / 'train.txt'))
    from mmdcs.utils.files import open_log
    with pytest.raises(FileExistsError, match='not followed'):
        open_log(str(tmp_path / 'run.log'))
    assert victim.read_text() == 'precious'
    with open_log(str(tmp_path / 'logs' / 'new.log')) as f:
        f.write('line\n')
    assert (tmp_path / 'logs' / 'new.log').read_text() == 'line\n'
