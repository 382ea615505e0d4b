"""Tests of the DCS-Digits builder (mmdcs/datasets/digits.py) and its CLI."""
import hashlib
import json
import os
import os.path as osp
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from mmdcs.datasets.digits import (DIGIT_CLASSES, MASK_THRESHOLD,
                                   NUM_SOURCE_IMAGES, SEG_CLASSES,
                                   SEG_PALETTE, DataBuildError, build_all,
                                   build_classification, build_scenes,
                                   default_digit_size, load_source_digits,
                                   render_digit, split_indices)

REPO_ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CLI = osp.join(REPO_ROOT, 'tools', 'data', 'build_digits.py')

# a small build shared by the scene / loader tests
SMALL = dict(
    size=16,
    max_per_class=12,
    canvas=128,
    scenes_train=16,
    scenes_val=6,
    seed=3)


def _hashes(root):
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = osp.join(dirpath, name)
            with open(path, 'rb') as f:
                out[osp.relpath(path, root)] = hashlib.sha256(
                    f.read()).hexdigest()
    return out


def _decode(segm):
    from pycocotools import mask as mask_utils
    rle = dict(size=segm['size'], counts=segm['counts'].encode('ascii'))
    return mask_utils.decode(rle).astype(bool)


@pytest.fixture(scope='module')
def full_cls(tmp_path_factory):
    """Classification set from all 1,797 scans (small images for speed)."""
    out = tmp_path_factory.mktemp('full_cls')
    summary = build_classification(out, size=16, val_ratio=0.2, seed=0)
    return out, summary


@pytest.fixture(scope='module')
def small(tmp_path_factory):
    out = tmp_path_factory.mktemp('small')
    summary = build_all(out, **SMALL)
    return out, summary


def _read_coco(out, split):
    with open(osp.join(out, 'scenes', 'annotations',
                       f'instances_{split}.json')) as f:
        return json.load(f)


# --------------------------------------------------------------------------
# constants, split, rendering
# --------------------------------------------------------------------------
def test_constants():
    assert DIGIT_CLASSES == tuple('0123456789')
    assert SEG_CLASSES == ('background', ) + DIGIT_CLASSES
    assert len(SEG_PALETTE) == len(SEG_CLASSES) == 11
    assert all(
        len(c) == 3 and all(0 <= v <= 255 for v in c) for c in SEG_PALETTE)
    assert len({tuple(c) for c in SEG_PALETTE}) == 11
    assert default_digit_size(128) == (20, 48)
    assert default_digit_size(256) == (40, 96)


def test_source_digits_are_real_scans():
    ink, targets = load_source_digits()
    assert ink.shape == (NUM_SOURCE_IMAGES, 8, 8)
    assert ink.min() == 0.0 and ink.max() == 1.0
    assert np.bincount(targets).tolist() == [
        178, 182, 177, 183, 181, 182, 181, 179, 174, 180
    ]


def test_split_stratified_and_seeded():
    _, targets = load_source_digits()
    train, val = split_indices(val_ratio=0.2, seed=0)
    assert len(np.intersect1d(train, val)) == 0
    assert len(train) + len(val) == NUM_SOURCE_IMAGES
    assert np.array_equal(
        np.union1d(train, val), np.arange(NUM_SOURCE_IMAGES))
    per_class = np.bincount(targets)
    val_per_class = np.bincount(targets[val], minlength=10)
    assert np.all(val_per_class > 0)
    assert np.all(np.bincount(targets[train], minlength=10) > 0)
    assert np.all(np.abs(val_per_class - 0.2 * per_class) <= 0.5)
    # deterministic; another seed gives another split
    train2, val2 = split_indices(val_ratio=0.2, seed=0)
    assert np.array_equal(train, train2) and np.array_equal(val, val2)
    _, val_other = split_indices(val_ratio=0.2, seed=1)
    assert not np.array_equal(val, val_other)
    # max_per_class cuts every class
    train_s, val_s = split_indices(val_ratio=0.25, seed=0, max_per_class=4)
    assert np.bincount(targets[train_s]).tolist() == [3] * 10
    assert np.bincount(targets[val_s]).tolist() == [1] * 10


def test_render_digit_smooth_upsampling():
    ink, _ = load_source_digits()
    big = render_digit(ink[0], 64)
    assert big.shape == (64, 64) and big.dtype == np.float32
    assert 0.0 <= big.min() and big.max() <= 1.0
    # smooth: many distinct levels, and block means follow the scan
    assert len(np.unique(big)) > 100
    blocks = big.reshape(8, 8, 8, 8).mean(axis=(1, 3))
    assert np.corrcoef(blocks.ravel(), ink[0].ravel())[0, 1] > 0.95


@pytest.mark.parametrize('kwargs, name', [
    (dict(size=60), 'size'),
    (dict(size=0), 'size'),
    (dict(size=-8), 'size'),
    (dict(size=64.0), 'size'),
    (dict(val_ratio=0.0), 'val_ratio'),
    (dict(val_ratio=1.0), 'val_ratio'),
    (dict(val_ratio=-0.1), 'val_ratio'),
    (dict(seed=-1), 'seed'),
    (dict(max_per_class=1), 'max_per_class'),
    (dict(canvas=100), 'canvas'),
    (dict(scenes_train=0), 'scenes_train'),
    (dict(scenes_val=-1), 'scenes_val'),
    (dict(min_digits=0), 'min_digits'),
    (dict(min_digits=3, max_digits=2), 'max_digits'),
    (dict(digit_size=(30, 20)), 'digit_size'),
    (dict(digit_size=(20, 200)), 'digit_size'),
    (dict(digit_size=(2, 20)), 'digit_size'),
    (dict(digit_size=20), 'digit_size'),
])
def test_invalid_arguments(tmp_path, kwargs, name):
    with pytest.raises(ValueError, match=name):
        build_all(tmp_path / 'out', **kwargs)
    assert not (tmp_path / 'out').exists()  # nothing written


# --------------------------------------------------------------------------
# classification set
# --------------------------------------------------------------------------
def test_full_classification_counts(full_cls):
    out, summary = full_cls
    _, targets = load_source_digits()
    root = out / 'cls'
    assert summary['num_train'] + summary['num_val'] == NUM_SOURCE_IMAGES
    seen = set()
    for split in ('train', 'val'):
        assert sorted(os.listdir(root / split)) == list(DIGIT_CLASSES)
        n = 0
        for name in DIGIT_CLASSES:
            files = os.listdir(root / split / name)
            assert len(files) > 0  # every class in both splits
            for f in files:
                index = int(f[:-4])
                assert targets[index] == int(name)
                seen.add(index)
            n += len(files)
        assert n == summary[f'num_{split}']
        assert sum(summary[f'{split}_per_class']) == n
        # ann file lists the same files, paths relative to the split dir
        lines = (root / 'meta' / f'{split}.txt').read_text().splitlines()
        assert len(lines) == n
        for line in lines:
            rel, label = line.rsplit(' ', 1)
            assert (root / split / rel).is_file()
            assert rel.split('/')[0] == DIGIT_CLASSES[int(label)]
    assert seen == set(range(NUM_SOURCE_IMAGES))  # each scan used once
    assert (root / 'classes.txt').read_text().split() == list(DIGIT_CLASSES)
    assert summary['num_val'] == pytest.approx(0.2 * NUM_SOURCE_IMAGES, abs=5)


def test_classification_images(tmp_path):
    summary = build_classification(tmp_path, max_per_class=2, seed=0)
    assert summary['size'] == 64
    ink, _ = load_source_digits()
    files = sorted((tmp_path / 'cls').glob('*/*/*.png'))
    assert len(files) == 20
    for path in files:
        img = Image.open(path)
        assert img.mode == 'RGB' and img.size == (64, 64)
        arr = np.asarray(img)
        assert np.array_equal(arr[..., 0], arr[..., 1])
        # dark ink on light paper, following the source scan
        index = int(path.stem)
        gray = arr[..., 0].astype(np.float32)
        blocks = gray.reshape(8, 8, 8, 8).mean(axis=(1, 3))
        assert np.corrcoef(blocks.ravel(),
                           ink[index].ravel())[0, 1] < -0.95
        assert gray.max() >= 250 and gray.min() <= 60
        assert gray[0, 0] >= 200  # corners are background
    build_classification(tmp_path, size=24, max_per_class=2)
    img = Image.open(next((tmp_path / 'cls' / 'train').glob('*/*.png')))
    assert img.size == (24, 24)
    assert len(list((tmp_path / 'cls').glob('*/*/*.png'))) == 20  # replaced


# --------------------------------------------------------------------------
# scenes
# --------------------------------------------------------------------------
# pycocotools' mask decoding warns under numpy 2 (not our code)
@pytest.mark.filterwarnings('ignore:__array__ implementation:DeprecationWarning')
def test_scenes_coco_masks_and_seg_maps(small):
    from pycocotools.coco import COCO
    out, summary = small
    scenes = out / 'scenes'
    lo, hi = default_digit_size(SMALL['canvas'])
    for split in ('train', 'val'):
        coco = COCO(str(scenes / 'annotations' / f'instances_{split}.json'))
        assert len(coco.getImgIds()) == SMALL[f'scenes_{split}']
        assert len(coco.getAnnIds()) == summary['scenes'][
            f'num_{split}_instances']
        cats = coco.loadCats(coco.getCatIds())
        assert [c['id'] for c in cats] == list(range(1, 11))
        assert [c['name'] for c in cats] == list(DIGIT_CLASSES)
        for img_id in coco.getImgIds():
            info = coco.loadImgs(img_id)[0]
            assert info['file_name'] == f'{img_id:06d}.png'
            img = Image.open(scenes / 'images' / split / info['file_name'])
            assert img.mode == 'RGB'
            assert img.size == (info['width'], info['height']) == (128, 128)
            seg = Image.open(scenes / 'seg_maps' / split / info['file_name'])
            assert seg.mode == 'L' and seg.size == img.size
            seg = np.asarray(seg)
            anns = coco.loadAnns(coco.getAnnIds(imgIds=img_id))
            assert 1 <= len(anns) <= 5
            expected = np.zeros_like(seg)
            boxes = []
            for ann in anns:
                mask = _decode(ann['segmentation'])
                assert np.array_equal(mask, coco.annToMask(ann) > 0)
                ys, xs = np.nonzero(mask)
                tight = [
                    xs.min(), ys.min(),
                    xs.max() - xs.min() + 1,
                    ys.max() - ys.min() + 1
                ]
                assert ann['bbox'] == [int(v) for v in tight]
                assert ann['area'] == int(mask.sum()) > 0
                assert ann['iscrowd'] == 0
                assert max(ann['bbox'][2:]) <= hi
                assert not expected[mask].any()  # instances do not overlap
                expected[mask] = ann['category_id']
                boxes.append(ann['bbox'])
            assert np.array_equal(seg, expected)
            for i, a in enumerate(boxes):  # boxes do not overlap
                for b in boxes[i + 1:]:
                    assert (a[0] + a[2] <= b[0] or b[0] + b[2] <= a[0]
                            or a[1] + a[3] <= b[1] or b[1] + b[3] <= a[1])
            # digits are visible: ink pixels differ from the background
            arr = np.asarray(img).astype(np.float32).mean(axis=2)
            assert arr[expected > 0].mean() < arr[expected == 0].mean() - 40


def test_scene_pixels_and_background(small):
    out, _ = small
    img = np.asarray(
        Image.open(out / 'scenes' / 'images' / 'train' / '000001.png'))
    seg = np.asarray(
        Image.open(out / 'scenes' / 'seg_maps' / 'train' / '000001.png'))
    bg = img[seg == 0].astype(np.float32)
    assert bg.mean() > 180  # light paper
    assert bg.std() > 1.0  # textured, not flat
    assert 255 not in np.unique(seg)


def test_scenes_no_leakage(small):
    _, targets = load_source_digits()
    out, _ = small
    train, val = split_indices(
        val_ratio=0.2, seed=SMALL['seed'], max_per_class=SMALL['max_per_class'])
    # the classification set holds the same split
    for split, pool in (('train', train), ('val', val)):
        files = (out / 'cls').glob(f'{split}/*/*.png')
        assert sorted(int(p.stem) for p in files) == pool.tolist()
    used = {}
    for split, pool in (('train', train), ('val', val)):
        anns = _read_coco(out, split)['annotations']
        used[split] = {a['source_index'] for a in anns}
        assert used[split] <= set(pool.tolist())
        for a in anns:
            assert a['category_id'] == targets[a['source_index']] + 1
    assert not used['train'] & used['val']


def test_scene_size_and_digit_count_options(tmp_path):
    summary = build_scenes(
        tmp_path,
        canvas=64,
        scenes_train=4,
        scenes_val=2,
        min_digits=1,
        max_digits=1,
        digit_size=(16, 16),
        max_per_class=3)
    assert summary['num_train_instances'] == 4
    assert summary['num_val_instances'] == 2
    coco = _read_coco(tmp_path, 'train')
    assert all(i['width'] == i['height'] == 64 for i in coco['images'])
    assert all(max(a['bbox'][2:]) <= 16 for a in coco['annotations'])
    img = Image.open(tmp_path / 'scenes' / 'images' / 'val' / '000002.png')
    assert img.size == (64, 64)
    # crowded scenes still keep every scene non-empty and boxes disjoint
    summary = build_scenes(
        tmp_path,
        canvas=32,
        scenes_train=8,
        scenes_val=1,
        min_digits=6,
        max_digits=6,
        digit_size=(20, 32))
    coco = _read_coco(tmp_path, 'train')
    per_image = np.bincount([a['image_id'] for a in coco['annotations']],
                            minlength=9)[1:]
    assert per_image.min() >= 1 and per_image.max() < 6


def test_mask_threshold_matches_rendering():
    ink, _ = load_source_digits()
    alpha = render_digit(ink[5], 30)
    mask = alpha > MASK_THRESHOLD
    assert 0 < mask.sum() < mask.size // 2  # strokes, not the box


# --------------------------------------------------------------------------
# determinism, build_info, CLI
# --------------------------------------------------------------------------
def test_deterministic_bytes(tmp_path):
    kw = dict(
        size=16, max_per_class=4, canvas=64, scenes_train=5, scenes_val=3)
    build_all(tmp_path / 'a', seed=7, **kw)
    build_all(tmp_path / 'b', seed=7, **kw)
    build_all(tmp_path / 'c', seed=8, **kw)
    a, b, c = (_hashes(tmp_path / n) for n in 'abc')
    assert 'build_info.json' in a
    assert len(a) == 3 + 40 + 2 * (5 + 3) + 2 + 1
    assert a == b
    assert set(a) != set(c)  # another seed picks other scans
    common = set(a) & set(c)
    assert any(a[k] != c[k] for k in common if k.startswith('scenes'))


def test_skip_existing(tmp_path):
    kw = dict(
        size=8, max_per_class=2, canvas=32, scenes_train=2, scenes_val=1)
    first = build_all(tmp_path, **kw)
    assert not first['skipped']
    info = json.loads((tmp_path / 'build_info.json').read_text())
    assert info['args']['canvas'] == 32 and info['args']['max_per_class'] == 2
    marker = tmp_path / 'scenes' / 'images' / 'train' / '000001.png'
    mtime = marker.stat().st_mtime_ns
    again = build_all(tmp_path, skip_existing=True, **kw)
    assert again['skipped']
    assert again['cls'] == first['cls']
    assert again['scenes'] == first['scenes']
    assert marker.stat().st_mtime_ns == mtime
    # a build with other arguments is refused before anything is written (it would replace
    # the data a run was made with), with or without skip_existing; force replaces it
    for skip in (True, False):
        with pytest.raises(DataBuildError, match=r'other arguments \(seed=0 there, 1 asked\)'):
            build_all(tmp_path, skip_existing=skip, seed=1, **kw)
    assert marker.stat().st_mtime_ns == mtime
    assert not build_all(tmp_path, skip_existing=True, seed=1, force=True, **kw)['skipped']
    # an incomplete build with the same arguments is rebuilt
    os.remove(tmp_path / 'scenes' / 'annotations' / 'instances_val.json')
    assert not build_all(tmp_path, skip_existing=True, seed=1, **kw)['skipped']
    # a partial rebuild invalidates the marker; folders without the record of their build are
    # then not replaced without force
    build_scenes(tmp_path, canvas=32, scenes_train=1, scenes_val=1)
    assert not (tmp_path / 'build_info.json').exists()
    with pytest.raises(DataBuildError, match='cls and scenes without a record'):
        build_all(tmp_path, seed=1, **kw)


def test_cli_from_other_directory(tmp_path, capsys):
    """The tool as a user runs it, from another directory and without PYTHONPATH; its
    --skip-existing and its refusal of a bad size through the same ``main`` in this process."""
    from _tools import load_tool, run_main
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    args = ['--out', 'digits', '--size', '8', '--max-per-class', '2', '--canvas', '32',
            '--scenes-train', '2', '--scenes-val', '1', '--seed', '5']
    run = subprocess.run(
        [sys.executable, CLI] + args, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert 'built' in run.stdout and '10 train + 10 val' in run.stdout
    info = json.loads((tmp_path / 'digits' / 'build_info.json').read_text())
    assert info['args']['seed'] == 5
    before = os.getcwd()
    os.chdir(tmp_path)
    try:
        load_tool('tools/data/build_digits.py').main(args + ['--skip-existing'])
    finally:
        os.chdir(before)
    assert 'skipped' in capsys.readouterr().out
    code, err = run_main('tools/data/build_digits.py', args[:2] + ['--size', '60'], capsys,
                         cwd=str(tmp_path))
    assert code == 2 and '--size' in err


# --------------------------------------------------------------------------
# OpenMMLab dataset classes read the build
# --------------------------------------------------------------------------
def test_mmpretrain_custom_dataset(small):
    pytest.importorskip('mmpretrain')
    from mmpretrain.datasets import CustomDataset
    out, summary = small
    root = str(out / 'cls')
    by_folder = CustomDataset(
        data_root=root, data_prefix='train', with_label=True, pipeline=[])
    assert by_folder.CLASSES == DIGIT_CLASSES
    assert len(by_folder) == summary['cls']['num_train']
    by_ann = CustomDataset(
        data_root=root,
        data_prefix='val',
        ann_file='meta/val.txt',
        with_label=True,
        metainfo=dict(classes=DIGIT_CLASSES),
        pipeline=[])
    assert len(by_ann) == summary['cls']['num_val']
    for ds in (by_folder, by_ann):
        for i in range(len(ds)):
            info = ds.get_data_info(i)
            assert osp.isfile(info['img_path'])
            folder = osp.basename(osp.dirname(info['img_path']))
            assert DIGIT_CLASSES[info['gt_label']] == folder


def test_mmdet_coco_dataset(small):
    pytest.importorskip('mmdet')
    from mmdet.datasets import CocoDataset
    out, summary = small
    for split in ('train', 'val'):
        ds = CocoDataset(
            data_root=str(out / 'scenes'),
            ann_file=f'annotations/instances_{split}.json',
            data_prefix=dict(img=f'images/{split}/'),
            metainfo=dict(classes=DIGIT_CLASSES),
            filter_cfg=None,
            pipeline=[])
        assert len(ds) == SMALL[f'scenes_{split}']
        num = 0
        for i in range(len(ds)):
            info = ds.get_data_info(i)
            assert osp.isfile(info['img_path'])
            for inst in info['instances']:
                assert inst['ignore_flag'] == 0
                assert 0 <= inst['bbox_label'] < 10
                assert isinstance(inst['mask'], dict)
            num += len(info['instances'])
        assert num == summary['scenes'][f'num_{split}_instances']


def test_mmseg_base_seg_dataset(small):
    pytest.importorskip('mmseg')
    from mmseg.datasets import BaseSegDataset
    out, _ = small
    ds = BaseSegDataset(
        data_root=str(out / 'scenes'),
        data_prefix=dict(
            img_path='images/val', seg_map_path='seg_maps/val'),
        img_suffix='.png',
        seg_map_suffix='.png',
        reduce_zero_label=False,
        metainfo=dict(classes=SEG_CLASSES, palette=SEG_PALETTE),
        pipeline=[])
    assert len(ds) == SMALL['scenes_val']
    assert ds.metainfo['classes'] == SEG_CLASSES
    assert ds.metainfo['label_map'] is None  # classes kept as given
    for i in range(len(ds)):
        info = ds.get_data_info(i)
        assert osp.isfile(info['img_path'])
        assert osp.basename(info['seg_map_path']) == osp.basename(
            info['img_path'])
        seg = np.asarray(Image.open(info['seg_map_path']))
        assert seg.max() <= 10
