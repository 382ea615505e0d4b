"""The pre-flight data check (``mmdcs.apis.launch.check_data_paths``): empty data directories
are one clear line, exit 2, before training — a folder-based classification set without images
or class sub-folders, an ADE-style segmentation set without images or maps, an empty
annotation file — instead of 'need at least one array to concatenate' or 'The number of
subfolders (0)' deep inside the dataset classes."""
import os
import os.path as osp

import pytest
from mmengine.config import Config

from mmdcs.apis.launch import UserError, check_data_paths

CLS = 'configs/demo/mobilevit-xs_digits-cls.py'


def _png(path):
    import numpy as np
    from PIL import Image
    os.makedirs(osp.dirname(path), exist_ok=True)
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(path)


def _cfg(**dataset):
    return Config(dict(train_dataloader=dict(dataset=dataset)))


def _problem(cfg):
    with pytest.raises(UserError) as e:
        check_data_paths(cfg, ('train_dataloader', ))
    msg = str(e.value)
    assert '\n' not in msg
    return msg


def test_folder_classification_set_without_images(tmp_path):
    root = tmp_path / 'imagenet'
    (root / 'train').mkdir(parents=True)
    cfg = _cfg(type='CustomDataset', data_root=str(root), data_prefix='train')
    msg = _problem(cfg)
    assert 'train_dataloader.dataset.data_prefix' in msg and 'no images' in msg
    assert str(root / 'train') in msg
    # images, but not in class sub-folders (CustomDataset without ann_file needs them)
    _png(str(root / 'train' / 'a.png'))
    (root / 'train' / 'n01').mkdir()
    msg = _problem(cfg)
    assert 'class sub-folders' in msg
    _png(str(root / 'train' / 'n01' / 'x.JPEG'.lower()))
    check_data_paths(cfg, ('train_dataloader', ))
    # a missing image folder
    msg = _problem(_cfg(type='ImageNet', data_root=str(root), data_prefix='val'))
    assert 'does not exist' in msg and 'data_prefix' in msg


def test_ade_style_segmentation_set_without_images_or_maps(tmp_path):
    root = tmp_path / 'ade'
    (root / 'images' / 'training').mkdir(parents=True)
    (root / 'annotations' / 'training').mkdir(parents=True)
    cfg = _cfg(type='ADE20KDataset', data_root=str(root),
               data_prefix=dict(img_path='images/training',
                                seg_map_path='annotations/training'))
    msg = _problem(cfg)
    assert 'data_prefix.img_path' in msg and 'data_prefix.seg_map_path' in msg
    _png(str(root / 'images' / 'training' / 'a.jpg'))
    msg = _problem(cfg)
    assert 'data_prefix.img_path' not in msg and 'data_prefix.seg_map_path' in msg
    _png(str(root / 'annotations' / 'training' / 'a.png'))
    check_data_paths(cfg, ('train_dataloader', ))


def test_empty_annotation_file(tmp_path):
    (tmp_path / 'meta').mkdir()
    (tmp_path / 'meta' / 'train.txt').write_text('')
    msg = _problem(_cfg(type='CustomDataset', data_root=str(tmp_path),
                        ann_file='meta/train.txt', data_prefix='train'))
    assert 'ann_file' in msg and 'is empty' in msg


def test_wrapped_datasets_are_checked(tmp_path):
    (tmp_path / 'train').mkdir()
    cfg = Config(dict(train_dataloader=dict(dataset=dict(
        type='RepeatDataset', times=2,
        dataset=dict(type='CustomDataset', data_root=str(tmp_path), data_prefix='train')))))
    msg = _problem(cfg)
    assert 'train_dataloader.dataset.dataset.data_prefix' in msg


@pytest.mark.parametrize('config, options', [
    (CLS, ['train_dataloader.dataset.ann_file=', 'val_dataloader.dataset.ann_file=']),
    ('configs/demo/fcn_dcs-mobilevit-xs_digits-scenes.py', []),
])
def test_train_py_stops_before_training(config, options, tmp_path, capsys, repo_root):
    """tools/train.py's ``main`` in this process (its refusals as a process: test_tools)."""
    from _tools import run_main
    if not osp.isfile(osp.join(repo_root, config)):
        pytest.skip(f'{config} not in this checkout')
    empty = tmp_path / 'empty'
    for sub in ('train', 'val', 'images/train', 'images/val', 'seg_maps/train', 'seg_maps/val'):
        (empty / sub).mkdir(parents=True, exist_ok=True)
    roots = [f'{k}.dataset.data_root={empty}' for k in ('train_dataloader', 'val_dataloader')]
    code, err = run_main('tools/train.py', [config, '--work-dir', str(tmp_path / 'wd'),
                                            '--cfg-options'] + roots + options, capsys)
    assert code == 2, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith('error')]
    assert len(lines) == 1 and 'Traceback' not in err, err[-3000:]
    assert 'missing data: train_dataloader.dataset' in lines[0] and 'no images' in lines[0]
    assert not osp.exists(str(tmp_path / 'wd')) or not any(
        f.endswith('.pth') for f in os.listdir(str(tmp_path / 'wd')))


def test_other_dataset_types_are_not_scanned(tmp_path):
    """A type that reads another format from data_root (CIFAR-10's pickled batches) is left
    alone."""
    (tmp_path / 'cifar-10-batches-py').mkdir()
    (tmp_path / 'cifar-10-batches-py' / 'data_batch_1').write_bytes(b'x')
    check_data_paths(_cfg(type='CIFAR10', data_root=str(tmp_path), split='train'),
                     ('train_dataloader', ))
