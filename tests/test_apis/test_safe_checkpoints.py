"""Safe checkpoint loading (mmdcs/utils/checkpoint.py): a checkpoint whose unpickling would run
code is refused by every entry point with one line and exit code 2, without running it; a
corrupt checkpoint is one line too; every checkpoint mmdcs writes (training, export, conversion)
loads through the safe, weights-only path; --trust-checkpoint (``trust_checkpoint = True``) and
the checkpoints a run recorded in its work dir's digest manifest are the only ways to the unsafe
loader; training writes its checkpoints atomically, never through a symlink; outside mmdcs's
tools (mmdet's own tools/train.py) the refusal names the config key."""
import builtins
import hashlib
import hmac
import os
import os.path as osp
import pickle
import shutil
import stat
import time

import numpy as np
import pytest
import torch

import mmdcs.registry  # noqa: F401  (registers the loaders)
from mmdcs.utils.checkpoint import (MANIFEST, MismatchedCheckpointError,
                                    UnreadableCheckpointError, UnsafeCheckpointError,
                                    load_checkpoint_file, pickle_globals, record_checkpoint,
                                    save_weights, trust_checkpoints, trust_scope)
from mmdcs.utils import checkpoint as ckpt_module
from _tools import digits_opts, load_tool, run_main  # noqa: E402 (tests/ is on sys.path)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CLS_CFG = 'configs/demo/mobilevit-xs_digits-cls.py'
OFB_CFG = 'configs/demo/ofb-deit-tiny_search_digits.py'
DYN_CFG = 'configs/demo/dynamicvit-deit-tiny_digits.py'
SUPERNET_CFG = """default_scope = 'mmpretrain'
model = dict(
    type='ImageClassifier',
    backbone=dict(type='mmdcs.ViT', arch='deit-tiny', variant='dcs', img_size=32),
    neck=None,
    head=dict(type='LinearClsHead', num_classes=10, in_channels=192))
"""


class _Marker:
    """Unpickling this creates the file ``path`` (what a crafted checkpoint could do)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (builtins.open, (self.path, 'w'))


@pytest.fixture
def evil(tmp_path):
    """(checkpoint, marker): a checkpoint with weights and an object whose unpickling creates
    ``marker``."""
    marker = str(tmp_path / 'MARKER')
    path = str(tmp_path / 'downloaded.pth')
    torch.save({'state_dict': {'backbone.w': torch.ones(2)},
                'meta': {'note': _Marker(marker)}}, path)
    return path, marker


@pytest.fixture
def corrupt(tmp_path):
    """name → a file that is no checkpoint: random bytes, a truncated torch.save file."""
    rand = str(tmp_path / 'random.pth')
    with open(rand, 'wb') as f:
        f.write(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    full = str(tmp_path / 'full.pth')
    torch.save({'state_dict': {'w': torch.randn(64, 64)}}, full)
    trunc = str(tmp_path / 'truncated.pth')
    with open(full, 'rb') as f:
        data = f.read()
    with open(trunc, 'wb') as f:
        f.write(data[:len(data) // 2])
    return {'random': rand, 'truncated': trunc}


@pytest.fixture(autouse=True)
def _fresh_trust():
    with trust_scope():
        trust_checkpoints(all=False, partial=False, complete=False)
        yield


def _tool(rel):
    return load_tool(rel)


def _one_error_line(err):
    lines = [ln for ln in err.splitlines() if ln.startswith('error:')]
    assert len(lines) == 1 and 'Traceback' not in err, err[-3000:]
    return lines[0]


def _assert_refused(code, err, path, marker):
    line = _one_error_line(err)
    assert code == 2, err[-3000:]
    assert path in line and 'objects other than weights' in line, line
    assert '--trust-checkpoint' in line, line
    assert not osp.exists(marker), 'the checkpoint ran code'
    return line


# ----------------------------------------------------------------------------- the loader
def test_crafted_checkpoint_is_refused_without_running_it(evil, tmp_path):
    path, marker = evil
    legacy = str(tmp_path / 'legacy.pth')
    torch.save({'x': _Marker(marker)}, legacy, _use_new_zipfile_serialization=False)
    proto4 = str(tmp_path / 'proto4.pkl')
    with open(proto4, 'wb') as f:
        pickle.dump({'x': _Marker(marker)}, f, protocol=4)
    for p in (path, legacy, proto4):
        with pytest.raises(UnsafeCheckpointError) as e:
            load_checkpoint_file(p)
        msg = str(e.value)
        # no mmdcs tool in charge here: the config key (a tool names its flag: tests below)
        assert p in msg and 'io.open' in msg and 'set `trust_checkpoint = True` in the config' \
            in msg
        assert '\n' not in msg
    assert not osp.exists(marker)
    # what the diagnosis sees, without unpickling
    with open(proto4, 'rb') as f:
        assert 'io.open' in pickle_globals(f.read())


def test_trust_flag_and_the_runs_own_checkpoints_are_the_only_way_to_the_unsafe_loader(
        evil, tmp_path):
    """A resumed run trusts a file in its work dir only when its tag is the one recorded in
    the work dir's manifest when the file was saved (what this run wrote), not any file lying
    there."""
    path, marker = evil
    work = tmp_path / 'work'
    work.mkdir()
    inside = str(work / 'epoch_1.pth')
    shutil.copy(path, inside)
    trust_checkpoints(dirs=[str(work)])
    for p in (path, inside):  # outside the work dir, or planted in it: refused
        with pytest.raises(UnsafeCheckpointError, match='only when this run wrote it') as e:
            load_checkpoint_file(p)
        assert osp.join(osp.realpath(str(work)), MANIFEST) in str(e.value)
    assert not osp.exists(marker)
    record_checkpoint(inside)               # as the run records what it saves
    with open(str(work / MANIFEST)) as f:
        assert f.read() == f'{_tag(inside)}  epoch_1.pth\n'
    load_checkpoint_file(inside)            # recorded: the full unpickler (it does run the code)
    assert osp.exists(marker)
    os.remove(marker)
    with open(inside, 'ab') as f:           # changed since it was recorded: refused
        f.write(b'\0')
    with pytest.raises(UnsafeCheckpointError):
        load_checkpoint_file(inside)
    assert not osp.exists(marker)
    with trust_scope():
        trust_checkpoints(all=True)
        assert torch.equal(load_checkpoint_file(path)['state_dict']['backbone.w'], torch.ones(2))
    assert osp.exists(marker)


def test_corrupt_files_are_not_readable_checkpoints(corrupt, tmp_path):
    empty = str(tmp_path / 'empty.pth')
    open(empty, 'wb').close()
    bad_st = str(tmp_path / 'bad.safetensors')
    with open(bad_st, 'wb') as f:
        f.write(b'\x10\x00\x00\x00\x00\x00\x00\x00{"a": 1')
    # pickles of plain data, but not the structure of a checkpoint (mmengine's loading failed
    # deep inside on them): a state_dict that is a list, a bare tensor, integer names
    shapes = {'list.pth': {'state_dict': [torch.ones(1)]}, 'tensor.pth': torch.ones(3),
              'int-keys.pth': {'state_dict': {1: torch.ones(1)}}, 'int-top.pth': {1: torch.ones(1)},
              'not-tensors.pth': {'state_dict': {'w': 'text'}}}
    for name, obj in shapes.items():
        torch.save(obj, str(tmp_path / name))
    for p in list(corrupt.values()) + [empty, bad_st] + [str(tmp_path / n) for n in shapes]:
        with pytest.raises(UnreadableCheckpointError, match='is not a readable checkpoint') as e:
            load_checkpoint_file(p)
        assert p in str(e.value) and '\n' not in str(e.value)


def test_mmengine_data_types_load_weights_only(tmp_path):
    """The message hub's HistoryBuffer pickles its data only (no getattr of its statistics
    functions) and numeric numpy values are allowed; an object array is not."""
    from mmengine.logging import HistoryBuffer
    buf = HistoryBuffer([1.0, 3.0], [1, 1])
    path = str(tmp_path / 'ckpt.pth')
    torch.save({'state_dict': {'w': torch.ones(2)}, 'message_hub': {'log_scalars': {'l': buf}},
                'meta': {'seed': np.int64(3), 'eta': np.float64(2.5),
                         'hist': np.arange(3, dtype=np.float32)}}, path)
    ckpt = load_checkpoint_file(path)
    loaded = ckpt['message_hub']['log_scalars']['l']
    assert loaded.mean() == 2.0 and loaded.statistics('max') == 3.0
    loaded.update(5.0)
    assert loaded.current() == 5.0
    assert ckpt['meta']['seed'] == 3 and ckpt['meta']['hist'].tolist() == [0, 1, 2]
    # its pickle names the class alone, and a file cannot replace the class's statistics
    assert pickle_globals(pickle.dumps(buf, protocol=2)) == [
        'mmengine.logging.history_buffer.HistoryBuffer']
    HistoryBuffer.__new__(HistoryBuffer).__setstate__(
        {'statistics_methods': {'max': 1}, 'max_length': 3, '_log_history': [1.0],
         '_count_history': [1]})
    assert HistoryBuffer([2.0], [1]).statistics('max') == 2.0
    obj = str(tmp_path / 'object.pth')
    torch.save({'a': np.array([{'x': 1}], dtype=object)}, obj)
    with pytest.raises(UnsafeCheckpointError):
        load_checkpoint_file(obj)


def test_url_checkpoints_load_through_the_safe_path(evil, tmp_path, monkeypatch):
    import torch.hub
    from mmengine.runner.checkpoint import _load_checkpoint
    path, marker = evil
    good = str(tmp_path / 'good.pth')
    torch.save({'state_dict': {'w': torch.ones(3)}}, good)
    sources = {'https://example.org/a/evil.pth': path, 'https://example.org/a/good.pth': good}
    monkeypatch.setattr(torch.hub, 'get_dir', lambda: str(tmp_path / 'hub'))
    monkeypatch.setattr(torch.hub, 'download_url_to_file',
                        lambda url, dst, *a, **k: shutil.copy(sources[url], dst))
    assert torch.equal(_load_checkpoint('https://example.org/a/good.pth')['state_dict']['w'],
                       torch.ones(3))
    with pytest.raises(UnsafeCheckpointError, match='evil.pth holds objects other than weights'):
        _load_checkpoint('https://example.org/a/evil.pth')
    assert not osp.exists(marker)


def test_every_checkpoint_scheme_goes_through_the_safe_loader(evil, tmp_path, monkeypatch):
    """Every source mmengine's CheckpointLoader knows is read by mmdcs's safe loader or refused
    in one line, with torch's TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 set (which makes mmengine's own
    loaders unpickle anything): ``open-mmlab://NAME`` mapped to a crafted local file by
    ``$MMENGINE_HOME/open_mmlab.json`` (mmengine's loader calls torch.load on it),
    ``torchvision://``; ``pavi://``, ``s3://`` and a scheme registered by another package are
    refused."""
    import mmengine.runner.checkpoint as mc
    import torch.hub
    from mmengine.runner.checkpoint import CheckpointLoader, _load_checkpoint
    path, marker = evil
    monkeypatch.setenv('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD', '1')
    monkeypatch.setenv('MMENGINE_HOME', str(tmp_path / 'home'))
    os.makedirs(str(tmp_path / 'home'))
    with open(str(tmp_path / 'home' / 'open_mmlab.json'), 'w') as f:
        f.write(f'{{"crafted": "{path}", "relative": "w/downloaded.pth"}}')
    os.makedirs(str(tmp_path / 'home' / 'w'))
    shutil.copy(path, str(tmp_path / 'home' / 'w' / 'downloaded.pth'))
    monkeypatch.setattr(mc, 'get_torchvision_models',
                        lambda: {'crafted': 'https://example.org/crafted.pth'})
    monkeypatch.setattr(torch.hub, 'get_dir', lambda: str(tmp_path / 'hub'))
    monkeypatch.setattr(torch.hub, 'download_url_to_file',
                        lambda url, dst, *a, **k: shutil.copy(path, dst))
    for source in ('open-mmlab://crafted', 'openmmlab://crafted', 'open-mmlab://relative',
                   'torchvision://crafted', 'modelzoo://crafted'):
        with pytest.raises(UnsafeCheckpointError, match='holds objects other than weights'):
            _load_checkpoint(source)
    assert not osp.exists(marker), 'a checkpoint named by a model-zoo scheme ran its code'
    CheckpointLoader.register_scheme('other://', loader=lambda f, m=None: torch.load(
        f[len('other://'):], map_location=m), force=True)
    try:
        for source in ('pavi://a/b.pth', 's3://bucket/a.pth', 'open-mmlab:s3://b/a.pth',
                       f'other://{path}', 'open-mmlab://no-such-model'):
            with pytest.raises(UnreadableCheckpointError) as e:
                _load_checkpoint(source)
            assert source in str(e.value) and '\n' not in str(e.value), str(e.value)
    finally:
        del CheckpointLoader._schemes['other://']
    assert not osp.exists(marker)
    # every scheme mmengine registered has mmdcs's loader
    from mmdcs.utils.compat import SCHEMES
    assert set(CheckpointLoader._schemes.values()) <= set(SCHEMES.values())


def test_safetensors_weights_load_everywhere_weights_are_read(tmp_path):
    """save_weights(.safetensors) → load_checkpoint_file, mmengine's load_checkpoint and a
    Pretrained init_cfg with a prefix read it (tensors and the meta)."""
    from mmengine.registry import DefaultScope
    from mmengine.runner import load_checkpoint

    from mmdcs.registry import MODELS
    cfg = dict(type='ImageClassifier', head=dict(type='LinearClsHead', num_classes=10,
                                                 in_channels=192),
               backbone=dict(type='mmdcs.ViT', arch='deit-tiny', img_size=32))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        torch.manual_seed(0)
        src = MODELS.build(cfg)
        path = str(tmp_path / 'w.safetensors')
        save_weights(path, src.state_dict(), {'classes': ('a', 'b'), 'n': np.int64(2)})
        ckpt = load_checkpoint_file(path)
        assert ckpt['meta'] == {'classes': ['a', 'b'], 'n': 2}
        dst = MODELS.build(cfg)
        load_checkpoint(dst, path, map_location='cpu', strict=True)
        init = dict(cfg, backbone=dict(cfg['backbone'], init_cfg=dict(
            type='Pretrained', checkpoint=path, prefix='backbone.')))
        pre = MODELS.build(init)
        pre.backbone.init_weights()
    for (k, a), b in zip(src.state_dict().items(), dst.state_dict().values()):
        assert torch.equal(a, b), k
    for k, v in pre.backbone.state_dict().items():
        assert torch.equal(v, src.backbone.state_dict()[k]), k


# ----------------------------------------------------------------------------- entry points
def test_test_tool_refuses_crafted_and_corrupt_checkpoints(evil, corrupt, tiny_digits, tmp_path,
                                                           run_tool, capsys):
    path, marker = evil
    proc = run_tool(['tools/test.py', CLS_CFG, path, '--work-dir', str(tmp_path / 'w'),
                     '--cfg-options'] + digits_opts(tiny_digits))
    line = _assert_refused(proc.returncode, proc.stderr, path, marker)
    assert 'trust_checkpoint=True in the config' in line
    for name, p in corrupt.items():
        code, err = run_main('tools/test.py', [CLS_CFG, p, '--work-dir', str(tmp_path / 'w'),
                                            '--cfg-options'] + digits_opts(tiny_digits), capsys)
        line = _one_error_line(err)
        assert code == 2 and p in line and 'is not a readable checkpoint' in line, (name, line)


@pytest.mark.parametrize('how', ['load_from', 'init_cfg', 'resume', 'teacher'])
def test_train_tool_refuses_crafted_and_corrupt_checkpoints(how, evil, corrupt, tiny_digits,
                                                            tmp_path, capsys):
    path, marker = evil
    work = str(tmp_path / 'work')

    def argv(ckpt):
        if how == 'teacher':
            return [DYN_CFG, '--work-dir', work, '--cfg-options'] + digits_opts(tiny_digits) + [
                f'model.teacher_checkpoint={ckpt}']
        extra = {'load_from': [f'load_from={ckpt}'],
                 'init_cfg': ['model.backbone.init_cfg.type=Pretrained',
                              f'model.backbone.init_cfg.checkpoint={ckpt}',
                              'model.backbone.init_cfg.prefix=backbone.'],
                 'resume': []}[how]
        resume = ['--resume', ckpt] if how == 'resume' else []
        return [CLS_CFG, '--work-dir', work] + resume + ['--cfg-options'] + digits_opts(
            tiny_digits) + extra

    code, err = run_main('tools/train.py', argv(path), capsys)
    line = _assert_refused(code, err, path, marker)
    if how == 'resume':
        assert f"only when this run wrote it: its tag under your key recorded in " \
            f"{osp.join(osp.realpath(work), MANIFEST)}" in line
    if how in ('resume', 'init_cfg'):
        code, err = run_main('tools/train.py', argv(corrupt['truncated']), capsys)
        line = _one_error_line(err)
        assert code == 2 and 'truncated.pth is not a readable checkpoint' in line


def test_export_convert_and_analysis_tools_refuse_a_crafted_checkpoint(evil, corrupt,
                                                                         tiny_digits, tmp_path,
                                                                         capsys):
    path, marker = evil
    supernet = str(tmp_path / 'supernet.py')
    with open(supernet, 'w') as f:
        f.write(SUPERNET_CFG)
    images = osp.join(tiny_digits, 'cls')
    out = str(tmp_path / 'out')
    calls = {
        'tools/export_subnet.py': [supernet, path, '--out', out],
        'tools/ofb_export.py': [OFB_CFG, path, '--out', out, '--cfg-options',
                                'model.backbone.img_size=32'],
        'tools/convert/timm_to_mmdcs.py': ['vit', 'deit-tiny', path, str(tmp_path / 'c.pth')],
        'tools/analysis/attention.py': ['--model', CLS_CFG, path, '--random', '2',
                                        '--out-dir', out],
        'tools/analysis/ib_kc_report.py': [CLS_CFG, path],
        'tools/analysis/vis_cam.py': ['--model', CLS_CFG, path, '--images', images,
                                      '--num-images', '1', '--out', osp.join(out, 'c.png')],
        # the deployment tools read checkpoints too: their refusal names their own flag
        'tools/deployment/pytorch2onnx.py': [CLS_CFG, path, '--out', osp.join(out, 'm.onnx')],
        'tools/deployment/test_onnx.py': [CLS_CFG, path, path, '--cfg-options',
                                          f'test_dataloader.dataset.data_root={images}'],
    }
    for tool, args in calls.items():
        code, err = run_main(tool, args, capsys)
        _assert_refused(code, err, path, marker)
    assert not osp.exists(out) or not os.listdir(out)
    assert not osp.exists(str(tmp_path / 'c.pth'))
    for name, p in corrupt.items():
        code, err = run_main('tools/export_subnet.py', [supernet, p, '--out', out], capsys)
        line = _one_error_line(err)
        assert code == 2 and f'{p} is not a readable checkpoint' in line, (name, line)


# ----------------------------------------------------------------------------- what mmdcs writes
@pytest.mark.xdist_group('train')
def test_training_checkpoints_load_and_resume_through_the_safe_path(tiny_digits, tmp_path,
                                                                   capsys):
    """tools/train.py's checkpoint (weights, optimizer, schedulers, message hub) is plain data
    for the weights-only loader: it loads untrusted, and a copy outside the work dir resumes
    without --trust-checkpoint."""
    work = str(tmp_path / 'work')
    train = _tool('tools/train.py')
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        train.main([CLS_CFG, '--work-dir', work, '--cfg-options'] + digits_opts(tiny_digits))
        ckpt = load_checkpoint_file(osp.join(work, 'epoch_1.pth'))
        assert {'state_dict', 'optimizer', 'message_hub', 'meta'} <= set(ckpt)
        assert ckpt['message_hub']['log_scalars']
        elsewhere = str(tmp_path / 'shared' / 'epoch_1.pth')
        os.makedirs(osp.dirname(elsewhere))
        shutil.copy(osp.join(work, 'epoch_1.pth'), elsewhere)
        train.main([CLS_CFG, '--work-dir', str(tmp_path / 'work2'), '--resume', elsewhere,
                    '--cfg-options'] + digits_opts(tiny_digits, epochs=2))
    finally:
        os.chdir(cwd)
    assert 'resumed epoch: 1' in capsys.readouterr().out
    assert osp.isfile(str(tmp_path / 'work2' / 'epoch_2.pth'))


def test_exported_and_converted_weights_load_through_the_safe_path(tmp_path, capsys):
    """export_subnet.py / ofb_export.py (pth and --format safetensors) and the converter write
    files the weights-only loader reads; a pruned safetensors file initialises a backbone."""
    from mmengine.config import Config
    from mmengine.registry import DefaultScope

    from mmdcs.registry import MODELS
    supernet = str(tmp_path / 'supernet.py')
    with open(supernet, 'w') as f:
        f.write(SUPERNET_CFG)
    cfg = Config.fromfile(supernet)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        import mmpretrain.utils
        mmpretrain.utils.register_all_modules(init_default_scope=False)
        torch.manual_seed(0)
        model = MODELS.build(cfg.model)
    ckpt = str(tmp_path / 'supernet.pth')
    torch.save({'state_dict': model.state_dict(),
                'meta': {'dataset_meta': {'classes': ('a', 'b')}, 'seed': np.int64(1)}}, ckpt)
    export = _tool('tools/export_subnet.py')
    for fmt in ('pth', 'safetensors'):
        res = export.export(export.parse_args([supernet, ckpt, '--out', str(tmp_path / fmt),
                                               '--format', fmt, '--no-verify']))
        assert res['checkpoint'].endswith(f'pruned.{fmt}')
        loaded = load_checkpoint_file(res['checkpoint'])
        assert loaded['meta']['dataset_meta']['classes'] in (('a', 'b'), ['a', 'b'])
        assert loaded['meta']['subnet'] == res['spec'].to_dict()
    st = load_checkpoint_file(str(tmp_path / 'safetensors' / 'pruned.safetensors'))
    pt = load_checkpoint_file(str(tmp_path / 'pth' / 'pruned.pth'))
    assert st['state_dict'].keys() == pt['state_dict'].keys()
    assert all(torch.equal(st['state_dict'][k], v) for k, v in pt['state_dict'].items())
    assert 'pruned.safetensors' in capsys.readouterr().out

    ofb = _tool('tools/ofb_export.py')
    ofb_cfg = Config.fromfile(osp.join(ROOT, OFB_CFG))
    ofb_cfg.model.backbone.img_size = 32
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        search = MODELS.build(ofb_cfg.model)
    search_ckpt = str(tmp_path / 'search.pth')
    torch.save({'state_dict': search.state_dict(), 'meta': {}}, search_ckpt)
    res = ofb.export(ofb.parse_args([osp.join(ROOT, OFB_CFG), search_ckpt, '--out',
                                     str(tmp_path / 'ofb'), '--format', 'safetensors',
                                     '--cfg-options', 'model.backbone.img_size=32']))
    assert res['ok'] and res['checkpoint'].endswith('compact.safetensors')
    assert load_checkpoint_file(res['checkpoint'])['meta']['ofb_arch'] == res['arch']

    convert = _tool('tools/convert/timm_to_mmdcs.py')
    for dst in ('conv.pth', 'conv.safetensors'):
        convert.main(['vit', 'deit-tiny', '--random-init', str(tmp_path / dst)])
        out = load_checkpoint_file(str(tmp_path / dst))
        assert out['meta']['arch'] == 'deit-tiny' and 'backbone.cls_token' in out['state_dict']


# ----------------------------------------------------------------------------- the run's own files
@pytest.mark.parametrize('how', ['path', 'auto'])
def test_resume_refuses_a_crafted_file_planted_in_the_work_dir(how, evil, tiny_digits, tmp_path,
                                                               capsys):
    """``--resume WORK_DIR/epoch_1.pth`` (or ``--resume`` finding it through last_checkpoint)
    used to trust any file inside the work dir: now only one whose tag the run recorded."""
    path, marker = evil
    work = tmp_path / 'work'
    work.mkdir()
    planted = str(work / 'epoch_1.pth')
    shutil.copy(path, planted)
    with open(str(work / 'last_checkpoint'), 'w') as f:
        f.write(planted)
    with open(str(work / MANIFEST), 'w') as f:  # a digest, but of another file
        f.write(f'{"0" * 64}  epoch_1.pth\n')
    resume = ['--resume', planted] if how == 'path' else ['--resume']
    code, err = run_main('tools/train.py', [CLS_CFG, '--work-dir', str(work)] + resume + [
        '--cfg-options'] + digits_opts(tiny_digits), capsys)
    line = _assert_refused(code, err, planted, marker)
    assert osp.join(osp.realpath(str(work)), MANIFEST) in line


def test_only_train_resume_trusts_only_the_work_dirs_own_keyed_manifest(evil, tmp_path):
    """The manifest makes a file trusted only (1) lying directly in the work dir of the run
    ``tools/train.py`` resumes — not in a directory below it with a manifest of its own — (2)
    with a line its user's key made: a sha256 line forged by whoever can write the work dir is
    not; (3) under train.py's resume: tools/test.py, pytorch2onnx.py ... with ``resume=True``
    in their config trust nothing; (4) the key is private (0600), else nothing is trusted and
    the refusal says why."""
    import argparse

    from mmengine.config import Config

    from mmdcs.apis.launch import set_checkpoint_trust
    path, marker = evil
    work = tmp_path / 'work'
    (work / 'sub').mkdir(parents=True)
    planted = str(work / 'epoch_1.pth')
    nested = str(work / 'sub' / 'epoch_1.pth')
    for p in (planted, nested):
        shutil.copy(path, p)
    record_checkpoint(nested)  # a manifest of its own, even with a valid line: not the work dir's
    with open(str(work / MANIFEST), 'w') as f:  # a line forged with the file's plain digest
        f.write(f'{hashlib.sha256(open(planted, "rb").read()).hexdigest()}  epoch_1.pth\n')
    args = argparse.Namespace(trust_checkpoint=False)
    cfg = Config(dict(work_dir=str(work), resume=True))
    for how in ({}, {'resume': True}):  # as test.py, pytorch2onnx.py ...; as train.py
        with trust_scope():
            set_checkpoint_trust(args, cfg, **how)
            for p in (planted, nested):
                with pytest.raises(UnsafeCheckpointError):
                    load_checkpoint_file(p)
    assert not osp.exists(marker), 'a forged or nested manifest was trusted'
    record_checkpoint(planted)  # what a run of this user records: trusted, by train.py only
    with trust_scope():
        set_checkpoint_trust(args, cfg)
        with pytest.raises(UnsafeCheckpointError):
            load_checkpoint_file(planted)
    key = ckpt_module.key_path()
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    with trust_scope():
        set_checkpoint_trust(args, cfg, resume=True)
        os.chmod(key, 0o644)  # a key others can read is no key
        try:
            with pytest.raises(UnsafeCheckpointError, match='not a private file of this user'):
                load_checkpoint_file(planted)
        finally:
            os.chmod(key, 0o600)
        assert not osp.exists(marker)
        load_checkpoint_file(planted)
    assert osp.exists(marker)


def _manifest(work):
    with open(osp.join(work, MANIFEST)) as f:
        return {n: d for d, n in (ln.rstrip('\n').split('  ', 1) for ln in f)}


def _tag(path):
    """The manifest's record of a file: HMAC-SHA256 under the user's key (made on first use,
    in the test session's MMDCS_CONFIG_DIR)."""
    key, problem = ckpt_module.manifest_key(create=True)
    assert key is not None, problem
    with open(path, 'rb') as f:
        return hmac.new(key, f.read(), hashlib.sha256).hexdigest()


@pytest.mark.xdist_group('train')
def test_training_writes_checkpoints_atomically_never_through_a_symlink(tiny_digits, tmp_path,
                                                                       capsys):
    """``epoch_1.pth`` and ``last_checkpoint`` planted in the work dir as symlinks: training
    replaces the links, never writes their targets; the files get the user's umask; the digest
    manifest records each checkpoint; a resumed run rewrites its own epoch_2.pth (and its
    digest) and leaves no temporary file."""
    work = str(tmp_path / 'work')
    os.makedirs(work)
    victims = {}
    for name in ('epoch_1.pth', 'last_checkpoint', MANIFEST):
        victims[name] = str(tmp_path / f'victim-{name}')
        with open(victims[name], 'w') as f:
            f.write('precious\n')
        os.symlink(victims[name], osp.join(work, name))
    train = _tool('tools/train.py')
    cwd, umask = os.getcwd(), os.umask(0o027)
    os.chdir(ROOT)
    try:
        train.main([CLS_CFG, '--work-dir', work, '--cfg-options'] + digits_opts(tiny_digits,
                                                                               epochs=2))
        with open(osp.join(work, MANIFEST)) as f:
            first = f.read()
        train.main([CLS_CFG, '--work-dir', work, '--resume', osp.join(work, 'epoch_1.pth'),
                    '--cfg-options'] + digits_opts(tiny_digits, epochs=2))
    finally:
        os.chdir(cwd)
        os.umask(umask)
    for name, victim in victims.items():
        with open(victim, 'rb') as f:
            assert f.read() == b'precious\n', f'{name}: written through the symlink'
    for name in ('epoch_1.pth', 'epoch_2.pth', 'last_checkpoint', MANIFEST):
        p = osp.join(work, name)
        assert not osp.islink(p) and osp.isfile(p), name
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o640, (name, oct(os.stat(p).st_mode))
    with open(osp.join(work, 'last_checkpoint')) as f:
        assert f.read() == osp.join(work, 'epoch_2.pth')
    second = _manifest(work)  # every checkpoint there (best_*.pth too), no removed one
    assert {n for n in os.listdir(work) if n.endswith('.pth')} == set(second) >= {
        'epoch_1.pth', 'epoch_2.pth'}
    assert all(second[n] == _tag(osp.join(work, n)) for n in second)
    assert f"{second['epoch_1.pth']}  epoch_1.pth\n" in first
    assert not [n for n in os.listdir(work) if '.tmp-' in n]
    assert 'resumed epoch: 1' in capsys.readouterr().out


def test_a_run_writes_nothing_through_links_planted_in_the_work_dir(tmp_path, monkeypatch):
    """Besides its checkpoints, a Runner (tools/train.py's and tools/test.py's, mmdet's own)
    writes the config dump ``WORK_DIR/<config name>.py`` and, in ``WORK_DIR/<timestamp>/``, its
    log, ``vis_data/`` (scalars.json, the config, the JSON log) and a test's images. A link
    planted under the config's name is replaced, its target untouched; one planted under the
    run's timestamp is refused (not followed); the directory the run makes is its own, and a
    second run of the same second uses it."""
    import types

    import torch.nn as nn
    from mmengine.config import Config
    from mmengine.runner import Runner
    import mmengine.runner.runner as runner_module
    cfg_path = tmp_path / 'tiny.py'
    cfg_path.write_text("default_scope = 'mmengine'\n")
    cfg = Config.fromfile(str(cfg_path))
    work = tmp_path / 'work'
    work.mkdir()
    victim = tmp_path / 'victim.txt'
    victim.write_text('precious\n')
    (work / 'tiny.py').symlink_to(victim)
    now = 1.8e9  # the second the run starts: the timestamp it names its directory after
    stamp = time.strftime('%Y%m%d_%H%M%S', time.localtime(now))
    monkeypatch.setattr(runner_module, 'time', types.SimpleNamespace(
        time=lambda: now, strftime=time.strftime, localtime=time.localtime))
    victim_dir = tmp_path / 'victim_dir'
    victim_dir.mkdir()
    (work / stamp).symlink_to(victim_dir, target_is_directory=True)

    def run():
        return Runner(model=nn.Linear(2, 2), work_dir=str(work), cfg=cfg,
                      default_scope='mmengine', experiment_name=f'planted-{id(work)}')

    with pytest.raises(FileExistsError) as e:
        run()
    assert e.value.filename == str(work / stamp) and 'not followed' in e.value.strerror
    assert os.listdir(victim_dir) == [] and victim.read_text() == 'precious\n'
    os.remove(str(work / stamp))
    runner = run()
    runner.visualizer.add_scalars({'loss': 1.0}, step=1)
    runner.logger.info('a line of the log')
    assert os.listdir(victim_dir) == [] and victim.read_text() == 'precious\n'
    assert not osp.islink(str(work / 'tiny.py'))
    assert 'default_scope' in (work / 'tiny.py').read_text()
    assert osp.isdir(str(work / stamp)) and not osp.islink(str(work / stamp))
    assert osp.isfile(str(work / stamp / 'vis_data' / 'scalars.json'))
    run()  # the same second again: its own directory, used as it is


def test_atomic_write_replaces_a_link_keeps_the_old_file_on_failure_and_the_umask(tmp_path,
                                                                                  monkeypatch):
    """mmdcs/utils/files.py, under the checkpoint saving: a symlink at the name is replaced (its
    target untouched); a failed write leaves the earlier file and no temporary file; the mode
    is 0o666 less the umask."""
    from mmdcs.utils.files import atomic_write
    victim, link = str(tmp_path / 'victim'), str(tmp_path / 'out.pth')
    with open(victim, 'w') as f:
        f.write('precious')
    os.symlink(victim, link)
    umask = os.umask(0o077)
    try:
        atomic_write(link, b'new')
    finally:
        os.umask(umask)
    assert not osp.islink(link) and open(link, 'rb').read() == b'new'
    assert open(victim).read() == 'precious'
    assert stat.S_IMODE(os.stat(link).st_mode) == 0o600

    def fail(*args):
        raise OSError('disk full')

    monkeypatch.setattr(os, 'replace', fail)
    with pytest.raises(OSError, match='disk full'):
        atomic_write(link, b'newer')
    assert open(link, 'rb').read() == b'new' and sorted(os.listdir(tmp_path)) == [
        'out.pth', 'victim']


# ----------------------------------------------------------------------------- other tools
def test_outside_mmdcs_tools_the_refusal_names_the_config_key(evil, tmp_path):
    """mmdet's own tools/train.py has no --trust-checkpoint: a crafted init_cfg checkpoint of an
    mmdet config's backbone, initialised outside mmdcs's tools, is refused with the config key
    (``trust_checkpoint = True``), which works there: a Runner whose config sets it loads the
    file (and ``allow_partial_checkpoint`` lets its one tensor go in)."""
    from mmengine.config import Config
    from mmengine.registry import DefaultScope
    from mmengine.runner import Runner

    import mmdet.utils
    from mmdet.registry import MODELS
    path, marker = evil
    mmdet.utils.register_all_modules(init_default_scope=False)
    cfg = Config.fromfile(osp.join(ROOT, 'configs/det/ssdlite_mobilevit-xs_200e_coco.py'))
    cfg.model.backbone.init_cfg = dict(type='Pretrained', checkpoint=path, prefix='backbone.')
    with DefaultScope.overwrite_default_scope('mmdet'):
        model = MODELS.build(cfg.model)
    with pytest.raises(UnsafeCheckpointError) as e:
        model.init_weights()
    msg = str(e.value)
    assert '\n' not in msg and path in msg and 'objects other than weights' in msg
    assert 'If you trust its source, set `trust_checkpoint = True` in the config' in msg, msg
    assert '--trust-checkpoint' not in msg
    assert not osp.exists(marker)

    def runner(**keys):
        return Runner(model=model, work_dir=str(tmp_path / 'runner'),
                      cfg=dict(default_scope='mmdet', **keys))

    with pytest.raises(MismatchedCheckpointError, match='set `allow_partial_checkpoint = True`'):
        runner(trust_checkpoint=True)._init_model_weights()
    assert osp.exists(marker)   # trusted through the runner's config: unpickled
    os.remove(marker)
    model._is_init = False
    runner(trust_checkpoint=True, allow_partial_checkpoint=True)._init_model_weights()
    assert osp.exists(marker)


def test_a_checkpoint_mmdcs_writes_loads_safely_whatever_its_meta_holds(tmp_path):
    """The meta of an export carries the runtime's identity (``torch.__version__`` is a
    ``TorchVersion``, a str subclass) and numpy numbers: save_weights writes them as built-in
    types, so the weights-only loader reads the file back instead of refusing it."""
    import torch

    from mmdcs.utils.checkpoint import load_checkpoint_file, save_weights
    meta = dict(runtime=dict(version=torch.__version__), ratio=np.float64(0.7),
                kept=np.int64(3), within=np.bool_(True), tries=[(0.7, np.float32(0.71))])
    path = str(tmp_path / 'pruned.pth')
    save_weights(path, {'w': torch.ones(2)}, meta)
    got = load_checkpoint_file(path)['meta']
    assert got['runtime']['version'] == str(torch.__version__)
    assert type(got['runtime']['version']) is str and type(got['kept']) is int
    assert got['within'] is True and abs(got['tries'][0][1] - 0.71) < 1e-6
