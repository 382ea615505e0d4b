"""The seeded ImageNet class subset of the search (tools/data/imagenet_subset.py,
mmdcs/datasets/imagenet_subset.py) on a fake ImageNet of tiny JPEGs, in both of mmpretrain's
layouts (class folders; meta/*.txt with a flat val/), and read back by mmpretrain through the
search config's own dataset settings."""
import json
import os
import os.path as osp
import random

import pytest

from mmdcs.datasets.imagenet_subset import build_imagenet_subset, choose_classes

NUM_CLASSES, TRAIN_PER_CLASS, VAL_PER_CLASS, SUBSET = 12, 3, 2, 5
WNIDS = [f'n{1440764 + 97 * i:08d}' for i in range(NUM_CLASSES)]


def _jpeg(path, value):
    from PIL import Image
    os.makedirs(osp.dirname(path), exist_ok=True)
    Image.new('RGB', (12, 10), (value, 255 - value, 7)).save(path, 'JPEG')


def _fake_imagenet(root, layout='folders'):
    """``folders``: train/<wnid>/*.JPEG, val/<wnid>/*.JPEG. ``meta``: train/<wnid>/*.JPEG, a flat
    val/ and meta/{train,val}.txt with the standard labels (position in the sorted wnids)."""
    train_lines, val_lines = [], []
    for label, wnid in enumerate(WNIDS):
        for k in range(TRAIN_PER_CLASS):
            name = f'{wnid}/{wnid}_{k}.JPEG'
            _jpeg(osp.join(root, 'train', name), 20 * label % 256)
            train_lines.append(f'{name} {label}')
        for k in range(VAL_PER_CLASS):
            index = label * VAL_PER_CLASS + k + 1
            name = (f'{wnid}/ILSVRC2012_val_{index:08d}.JPEG' if layout == 'folders' else
                    f'ILSVRC2012_val_{index:08d}.JPEG')
            _jpeg(osp.join(root, 'val', name), 20 * label % 256)
            val_lines.append(f'{name} {label}')
    if layout == 'meta':
        os.makedirs(osp.join(root, 'meta'))
        random.Random(1).shuffle(val_lines)  # the real val.txt is not sorted by class
        for split, lines in (('train', train_lines), ('val', val_lines)):
            with open(osp.join(root, 'meta', f'{split}.txt'), 'w') as f:
                f.write('\n'.join(lines) + '\n')
    # noise the scan must ignore
    open(osp.join(root, 'train', WNIDS[0], 'notes.txt'), 'w').close()
    return str(root)


def _read(path):
    with open(path) as f:
        return f.read().splitlines()


def _ann(out, split):
    return [(line.rsplit(' ', 1)[0], int(line.rsplit(' ', 1)[1]))
            for line in _read(osp.join(out, 'meta', f'{split}.txt'))]


@pytest.fixture(scope='module')
def imagenet(tmp_path_factory):
    return _fake_imagenet(tmp_path_factory.mktemp('imagenet'))


def test_subset_files(imagenet, tmp_path):
    out = str(tmp_path / 'imagenet100')
    summary = build_imagenet_subset(imagenet, out, num_classes=SUBSET, seed=0)
    chosen = sorted(random.Random(0).sample(sorted(WNIDS), SUBSET))
    assert _read(osp.join(out, 'classes.txt')) == chosen == summary['classes']
    for split, per_class in (('train', TRAIN_PER_CLASS), ('val', VAL_PER_CLASS)):
        ann = _ann(out, split)
        assert len(ann) == SUBSET * per_class
        # labels 0..K-1 in sorted-wnid order; every path is the original image, relative to
        # IMAGENET/<split>/
        assert sorted({y for _, y in ann}) == list(range(SUBSET))
        for path, label in ann:
            assert path.split('/')[0] == chosen[label]
            assert osp.isfile(osp.join(imagenet, split, path))
        assert ann == sorted(ann)
    info = json.load(open(osp.join(out, 'subset_info.json')))
    assert (info['seed'], info['num_classes'], info['num_imagenet_classes']) == (0, 5, 12)
    assert (info['num_train'], info['num_val'], info['source']) == (15, 10, 'folders')
    assert info['imagenet'] == osp.abspath(imagenet)


def test_deterministic_and_seeded(imagenet, tmp_path):
    files = ('classes.txt', 'meta/train.txt', 'meta/val.txt')
    build_imagenet_subset(imagenet, str(tmp_path / 'a'), SUBSET, seed=0)
    build_imagenet_subset(imagenet, str(tmp_path / 'b'), SUBSET, seed=0)
    build_imagenet_subset(imagenet, str(tmp_path / 'c'), SUBSET, seed=3)
    for f in files:
        assert _read(tmp_path / 'a' / f) == _read(tmp_path / 'b' / f)
    assert _read(tmp_path / 'c' / 'classes.txt') != _read(tmp_path / 'a' / 'classes.txt')
    assert _read(tmp_path / 'c' / 'classes.txt') == choose_classes(WNIDS, SUBSET, 3)
    # the draw depends on the set of classes only, not on the order they are listed in
    assert choose_classes(WNIDS[::-1], SUBSET, 3) == choose_classes(WNIDS, SUBSET, 3)


def test_meta_layout_gives_the_same_subset(imagenet, tmp_path):
    """meta/train.txt + meta/val.txt (flat val/): same classes, same train list, and the val
    images of exactly those classes, relabelled through the wnid of their ImageNet label."""
    meta_root = _fake_imagenet(tmp_path / 'imagenet_meta', layout='meta')
    a = build_imagenet_subset(imagenet, str(tmp_path / 'a'), SUBSET, seed=0)
    b = build_imagenet_subset(meta_root, str(tmp_path / 'b'), SUBSET, seed=0)
    assert (a['source'], b['source']) == ('folders', 'meta')
    assert a['classes'] == b['classes']
    assert _ann(tmp_path / 'a', 'train') == _ann(tmp_path / 'b', 'train')
    val_a = {(osp.basename(p), y) for p, y in _ann(tmp_path / 'a', 'val')}
    val_b = _ann(tmp_path / 'b', 'val')
    assert set(val_b) == val_a and len(val_b) == SUBSET * VAL_PER_CLASS
    for path, _ in val_b:
        assert osp.isfile(osp.join(meta_root, 'val', path))


def test_clear_errors(imagenet, tmp_path):
    with pytest.raises(FileNotFoundError, match='ImageNet folder not found'):
        build_imagenet_subset(str(tmp_path / 'nowhere'), str(tmp_path / 'out'))
    with pytest.raises(ValueError, match='asked for 13 classes but the ImageNet folder has '
                       'only 12'):
        build_imagenet_subset(imagenet, str(tmp_path / 'out'), num_classes=13)
    with pytest.raises(ValueError, match='positive integer'):
        build_imagenet_subset(imagenet, str(tmp_path / 'out'), num_classes=0)
    with pytest.raises(ValueError, match='must not be the ImageNet folder'):
        build_imagenet_subset(imagenet, imagenet, num_classes=2)
    empty = tmp_path / 'empty'
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match='train/ folder'):
        build_imagenet_subset(str(empty), str(tmp_path / 'out'), num_classes=2)
    # a flat val/ without the meta files: the class folder is missing
    flat = _fake_imagenet(tmp_path / 'flat', layout='meta')
    os.remove(osp.join(flat, 'meta', 'val.txt'))
    with pytest.raises(FileNotFoundError, match='a flat val/ needs meta/val.txt'):
        build_imagenet_subset(flat, str(tmp_path / 'out'), num_classes=2)
    assert not osp.exists(tmp_path / 'out' / 'classes.txt')


def test_search_config_reads_the_subset(imagenet, tmp_path, monkeypatch):
    """The tool's default output, read through the datasets of
    configs/_base_/datasets/imagenet100_search*.py unchanged (paths relative to the working
    directory): classes, labels and images are the subset's; the pipelines run."""
    from mmengine.config import Config
    from mmengine.dataset import Compose
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import DATASETS
    from mmpretrain.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    root = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
    cfgs = [Config.fromfile(osp.join(root, 'configs', '_base_', 'datasets', f))
            for f in ('imagenet100_search.py', 'imagenet100_search_256.py')]
    os.makedirs(tmp_path / 'data')
    os.symlink(imagenet, tmp_path / 'data' / 'imagenet')
    monkeypatch.chdir(tmp_path)
    build_imagenet_subset('data/imagenet', 'data/imagenet100', num_classes=SUBSET, seed=0)
    chosen = tuple(sorted(random.Random(0).sample(sorted(WNIDS), SUBSET)))
    for cfg, size in zip(cfgs, (224, 256)):
        assert cfg.data_preprocessor.num_classes == 100
        for split, per_class in (('train', TRAIN_PER_CLASS), ('val', VAL_PER_CLASS)):
            ds_cfg = cfg[f'{split}_dataloader'].dataset
            dataset = DATASETS.build(ds_cfg)
            assert type(dataset).__name__ == 'CustomDataset'
            assert dataset.metainfo['classes'] == chosen
            assert len(dataset) == SUBSET * per_class
            labels = [int(dataset.get_data_info(i)['gt_label']) for i in range(len(dataset))]
            assert sorted(set(labels)) == list(range(SUBSET))
            for i in (0, len(dataset) - 1):
                info = dataset.get_data_info(i)
                wnid = chosen[int(info['gt_label'])]
                assert info['img_path'].startswith(osp.join('data', 'imagenet', split, wnid))
            with DefaultScope.overwrite_default_scope('mmpretrain'):
                out = Compose(ds_cfg.pipeline)(dataset.get_data_info(0))
            assert tuple(out['inputs'].shape) == (3, size, size)


def test_tool_cli(imagenet, tmp_path, run_tool, repo_root, capsys):
    out = str(tmp_path / 'in5')
    r = run_tool([osp.join(repo_root, 'tools', 'data', 'imagenet_subset.py'), '--imagenet',
                  imagenet, '--out', out, '--classes', str(SUBSET), '--seed', '0'], timeout=120)
    assert r.returncode == 0, r.stderr
    assert '5 of 12 classes (seed 0' in r.stdout and '15 train + 10 val images' in r.stdout
    assert _read(osp.join(out, 'classes.txt')) == choose_classes(WNIDS, SUBSET, 0)
    # the refusal: the same main in this process
    from _tools import run_main
    code, err = run_main('tools/data/imagenet_subset.py',
                         ['--imagenet', imagenet, '--out', out, '--classes', '100'], capsys)
    assert code == 2
    assert 'asked for 100 classes but the ImageNet folder has only 12' in err
