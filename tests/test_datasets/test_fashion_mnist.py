"""Fashion-MNIST: the placement of its idx files (mmdcs/datasets/fashion_mnist.py,
tools/data/fashion_mnist.py) and the dataset config that reads them through mmpretrain's
FashionMNIST (configs/_base_/datasets/fashion_mnist_cls.py). The idx files are tiny fixtures
written here; nothing is downloaded."""
import gzip
import hashlib
import os
import os.path as osp
import shutil
import struct
import subprocess

import numpy as np
import pytest
from _tools import load_tool

from mmdcs.datasets import fashion_mnist as fm

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIG = osp.join(ROOT, 'configs', 'demo', 'deit-tiny_fashion-cls.py')
TRAIN_LABELS = [3, 0, 9, 5, 1, 7]
TEST_LABELS = [2, 8, 4]


def _idx(array: np.ndarray) -> bytes:
    """An idx file of uint8 ``array`` (magic 0x08 = unsigned byte, then its rank)."""
    header = struct.pack('>BBBB', 0, 0, 0x08, array.ndim)
    header += b''.join(struct.pack('>I', d) for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def _fixture_files():
    """name -> bytes: image i of a split is filled with 10·i + 5 + 100·(test split)."""
    files = {}
    for split, labels, offset in (('train', TRAIN_LABELS, 0), ('t10k', TEST_LABELS, 100)):
        images = np.stack([np.full((28, 28), 10 * i + 5 + offset) for i in range(len(labels))])
        files[f'{split}-images-idx3-ubyte'] = _idx(images)
        files[f'{split}-labels-idx1-ubyte'] = _idx(np.array(labels))
    return files


FIXTURE = _fixture_files()
SUMS = {n: hashlib.sha256(b).hexdigest() for n, b in FIXTURE.items()}


def _write(folder, gz: bool = False, names=None):
    os.makedirs(folder, exist_ok=True)
    for name in names or FIXTURE:
        data = FIXTURE[name]
        if gz:
            with gzip.open(osp.join(folder, name + '.gz'), 'wb') as f:
                f.write(data)
        else:
            with open(osp.join(folder, name), 'wb') as f:
                f.write(data)
    return str(folder)


@pytest.fixture
def fixture_sums(monkeypatch):
    """The module checks the fixture's checksums instead of the release's."""
    monkeypatch.setattr(fm, 'FILES', dict(SUMS))


def _placed_names(out):
    return sorted(n for n in os.listdir(out))


# ----------------------------------------------------------------------------- the config
def test_config_reads_idx_files_through_mmpretrain(tmp_path):
    from mmengine.config import Config
    from mmpretrain.registry import DATASETS, MODELS
    from mmdcs.apis.launch import UserError, check_data_paths
    root = _write(tmp_path / 'fashion')
    cfg = Config.fromfile(CONFIG)
    for key in ('train_dataloader', 'val_dataloader'):
        cfg[key].dataset.data_root = root
    check_data_paths(cfg, ('train_dataloader', 'val_dataloader'))
    train = DATASETS.build(cfg.train_dataloader.dataset)
    val = DATASETS.build(cfg.val_dataloader.dataset)
    assert type(train).__name__ == 'FashionMNIST'
    assert (len(train), len(val)) == (len(TRAIN_LABELS), len(TEST_LABELS))
    side = cfg.model.backbone.img_size
    sample = val[1]
    assert tuple(sample['inputs'].shape) == (1, side, side)
    assert int(sample['data_samples'].gt_label) == TEST_LABELS[1]
    assert int(sample['inputs'].min()) == int(sample['inputs'].max()) == 115  # image 1, t10k
    # the grey channel reaches the RGB backbone as three identical normalised channels
    pre = MODELS.build(dict(cfg.data_preprocessor, type='ClsDataPreprocessor'))
    batch = pre(dict(inputs=[sample['inputs'], val[0]['inputs']],
                     data_samples=[sample['data_samples'], val[0]['data_samples']]))
    x = batch['inputs']
    assert tuple(x.shape) == (2, 3, side, side)
    assert np.allclose(x[0].numpy(), (115 - 72.94) / 90.02, atol=1e-5)
    # a missing idx file (both splits read all four): one line naming it and the placement tool
    os.remove(osp.join(root, 't10k-labels-idx1-ubyte'))
    with pytest.raises(UserError) as e:
        check_data_paths(cfg, ('val_dataloader', ))
    msg = str(e.value)
    assert 'val_dataloader.dataset: no t10k-labels-idx1-ubyte in' in msg and root in msg
    assert 'tools/data/fashion_mnist.py' in msg and '\n' not in msg


# ----------------------------------------------------------------------------- the placement
@pytest.mark.parametrize('gz', [False, True])
def test_from_user_folder_then_reused(tmp_path, fixture_sums, gz):
    src = _write(tmp_path / 'src', gz=gz)
    out = str(tmp_path / 'out')
    result = fm.place_fashion_mnist(out, source=src, apt=False, download=False)
    assert not result['skipped'] and result['source'] == src
    assert _placed_names(out) == sorted(list(FIXTURE) + [fm.MARKER])
    for name, data in FIXTURE.items():
        with open(osp.join(out, name), 'rb') as f:
            assert f.read() == data
    assert fm.placed(out)['files'] == SUMS
    # a complete, verified placement is reused: no source needed
    again = fm.place_fashion_mnist(out, apt=False, download=False)
    assert again['skipped'] and again['source'] == src


def _build_deb(tmp_path) -> str:
    """A tiny Debian package holding the fixture, gzipped, where the real one has its files."""
    pkg = tmp_path / 'pkg'
    _write(pkg / 'usr' / 'share' / 'datasets' / 'fashion-mnist', gz=True)
    (pkg / 'DEBIAN').mkdir()
    (pkg / 'DEBIAN' / 'control').write_text(
        f'Package: {fm.DEBIAN_PACKAGE}\nVersion: 0.0-1\nArchitecture: all\n'
        'Maintainer: test <test@example.org>\nDescription: test fixture\n')
    deb = str(tmp_path / f'{fm.DEBIAN_PACKAGE}_0.0-1_all.deb')
    subprocess.run(['dpkg-deb', '--root-owner-group', '-b', str(pkg), deb], check=True,
                   capture_output=True)
    return deb


def test_from_debian_package(tmp_path, fixture_sums, monkeypatch):
    if not shutil.which('dpkg-deb'):
        pytest.skip('dpkg-deb is not available')
    deb = _build_deb(tmp_path)
    calls = []

    def fake_download(work):  # apt-get download of the package: a copy of the test's .deb
        calls.append(work)
        return shutil.copy(deb, work)

    monkeypatch.setattr(fm, 'installed_files', lambda: [])
    monkeypatch.setattr(fm, 'apt_get_download', fake_download)
    monkeypatch.setattr(fm, 'from_download', pytest.fail)  # never reached
    out = str(tmp_path / 'out')
    result = fm.place_fashion_mnist(out)
    assert len(calls) == 1 and result['source'] == f'Debian package {osp.basename(deb)}'
    assert fm.placed(out) is not None
    # the download's temporary folder is gone: only the files and the marker
    assert _placed_names(out) == sorted(list(FIXTURE) + [fm.MARKER])


def test_download_way_takes_what_mmpretrain_placed(tmp_path):
    """mmpretrain's FashionMNIST is called as its signature wants (no download: the archives
    are there already, as after a download) and the files it extracted are found."""
    work = _write(tmp_path / 'work', gz=True)
    _write(work)  # mmpretrain extracts each archive beside it
    found, origin = fm.from_download(work, list(FIXTURE))
    assert found == {n: osp.join(work, n) for n in FIXTURE} and "mmpretrain's" in origin


def test_none_works_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    main = load_tool('tools/data/fashion_mnist.py').main
    monkeypatch.setattr(fm, 'installed_files', lambda: [])
    monkeypatch.setattr(fm, 'apt_get_download', lambda work: (_ for _ in ()).throw(
        fm.FashionMNISTError('apt-get not found')))
    monkeypatch.setattr(fm, 'from_download', lambda work, names: (_ for _ in ()).throw(
        fm.FashionMNISTError('URLError: no network')))
    out = tmp_path / 'out'
    with pytest.raises(SystemExit) as e:
        main(['--out', str(out)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith('error: Fashion-MNIST not found')
    for way in ('--from DIR', fm.DEBIAN_PACKAGE, "mmpretrain's download", 'apt-get not found',
                'no network'):
        assert way in err[0]
    assert not out.exists() or not os.listdir(out)


def test_checksum_mismatch_refused(tmp_path, monkeypatch, capsys):
    """The release's checksums (FILES as shipped): the fixture is not the release."""
    main = load_tool('tools/data/fashion_mnist.py').main
    src = _write(tmp_path / 'src', gz=True)
    out = tmp_path / 'out'
    with pytest.raises(SystemExit) as e:
        main(['--out', str(out), '--from', src])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'is not the Fashion-MNIST file' in err[0]
    assert not out.exists() or not os.listdir(out)  # nothing placed, no temporary file left


def test_partial_placement_not_reused(tmp_path, fixture_sums, monkeypatch):
    src = _write(tmp_path / 'src')
    out = str(tmp_path / 'out')
    # interrupted after two of the four files: no marker
    placed_files, real_place = [], fm.place

    def place_two(tmp, path):
        if len(placed_files) == 2:
            raise KeyboardInterrupt
        placed_files.append(path)
        real_place(tmp, path)

    monkeypatch.setattr(fm, 'place', place_two)
    with pytest.raises(KeyboardInterrupt):
        fm.place_fashion_mnist(out, source=src)
    monkeypatch.setattr(fm, 'place', real_place)
    # two files, no temporary file left, no marker: not a placement
    assert len(os.listdir(out)) == 2 and fm.placed(out) is None
    with pytest.raises(fm.FashionMNISTError, match='not found'):
        fm.place_fashion_mnist(out, apt=False, download=False)
    assert fm.place_fashion_mnist(out, source=src)['skipped'] is False
    assert fm.placed(out) is not None
    # a marker whose files are not all there is no placement either
    os.remove(osp.join(out, 'train-labels-idx1-ubyte'))
    assert fm.placed(out) is None
    # four verified files without the marker are complete: the marker is written, no source
    os.remove(osp.join(out, fm.MARKER))
    _write(out, names=['train-labels-idx1-ubyte'])
    assert fm.place_fashion_mnist(out, apt=False, download=False)['skipped'] is False
    assert fm.placed(out) is not None


def test_other_content_in_out_never_replaced(tmp_path, fixture_sums):
    src = _write(tmp_path / 'src')
    out = tmp_path / 'out'
    out.mkdir()
    (out / 't10k-images-idx3-ubyte').write_bytes(b'mine')
    with pytest.raises(fm.FashionMNISTError, match='refusing to replace'):
        fm.place_fashion_mnist(str(out), source=src)
    assert (out / 't10k-images-idx3-ubyte').read_bytes() == b'mine'
    assert sorted(os.listdir(out)) == ['t10k-images-idx3-ubyte']
