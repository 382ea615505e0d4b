"""A fixed, seeded subset of ImageNet classes for the search (method.md §4; DCS paper 4.1, KCR paper
4.1: "we sample 100 classes from ImageNet").

The subset is written as annotation files only; the images stay where they are::

    OUT/classes.txt          the chosen wnids, one per line, in label order (= sorted)
    OUT/meta/train.txt       '<path> <label>', <path> relative to IMAGENET/train/
    OUT/meta/val.txt         '<path> <label>', <path> relative to IMAGENET/val/
    OUT/subset_info.json     the arguments, the ImageNet root and the counts (provenance)

Labels are 0..K-1 in sorted-wnid order. The paths are those of mmpretrain's own
``meta/{train,val}.txt`` (``n01440764/n01440764_10026.JPEG``; for a flat ``val/``,
``ILSVRC2012_val_00000001.JPEG``), so a dataset reads the subset with::

    dict(type='CustomDataset', ann_file='OUT/meta/train.txt',
         data_prefix='IMAGENET/train', classes='OUT/classes.txt')

(no ``data_root``: all three paths are relative to the working directory, like ``work_dirs``;
see ``configs/_base_/datasets/imagenet100_search.py``).

The ImageNet folder is read in mmpretrain's layout: ``meta/train.txt`` and ``meta/val.txt``
when both exist (their labels are the standard 0..999 indices; the wnid of a label is read from
the train paths), otherwise the folders ``train/<wnid>/*`` and ``val/<wnid>/*``. The classes are
``random.Random(seed).sample(sorted(wnids), K)``: the same arguments give the same files.

This module uses the standard library only.
"""
import json
import os
import os.path as osp
import random
from typing import Dict, List, Optional, Sequence, Tuple

from mmdcs.utils.files import atomic_write

__all__ = [
    'IMG_EXTENSIONS', 'SPLITS', 'imagenet_classes', 'choose_classes', 'collect_split',
    'build_imagenet_subset'
]

#: image file extensions of a class folder (case-insensitive; ImageNet's are '.JPEG')
IMG_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.ppm', '.bmp', '.pgm', '.tif', '.tiff', '.webp')
SPLITS = ('train', 'val')

Item = Tuple[str, int]  # (path relative to IMAGENET/<split>/, ImageNet label or -1)


def _read_meta(path: str) -> List[Item]:
    items = []
    with open(path, encoding='utf-8') as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            parts = line.rsplit(maxsplit=1)
            if len(parts) != 2 or not parts[1].lstrip('-').isdigit():
                raise ValueError(f'{path}:{n}: expected "<relative path> <label>", got {line!r}')
            items.append((parts[0], int(parts[1])))
    if not items:
        raise ValueError(f'{path} lists no images')
    return items


def _meta_files(root: str) -> Optional[Dict[str, str]]:
    files = {s: osp.join(root, 'meta', f'{s}.txt') for s in SPLITS}
    return files if all(osp.isfile(p) for p in files.values()) else None


def _check_root(root: str) -> None:
    if not osp.isdir(root):
        raise FileNotFoundError(f'ImageNet folder not found: {root!r} (expected mmpretrain\'s '
                                'layout: train/<wnid>/*.JPEG and val/<wnid>/*.JPEG, or '
                                'meta/train.txt + meta/val.txt)')


def _wnid_labels(train_items: Sequence[Item], path: str) -> Dict[str, int]:
    """wnid -> ImageNet label, from the train annotation paths ('<wnid>/<file>')."""
    labels: Dict[str, int] = {}
    for rel, label in train_items:
        wnid = rel.replace('\\', '/').split('/')[0]
        if wnid == rel:
            raise ValueError(f'{path}: train path {rel!r} is not "<wnid>/<file>"')
        if labels.setdefault(wnid, label) != label:
            raise ValueError(f'{path}: class {wnid} has two labels, {labels[wnid]} and {label}')
    by_label: Dict[int, str] = {}
    for wnid, label in labels.items():
        if by_label.setdefault(label, wnid) != wnid:
            raise ValueError(f'{path}: label {label} is used by {by_label[label]} and {wnid}')
    return labels


def imagenet_classes(root: str) -> List[str]:
    """The sorted wnids of an ImageNet folder (from ``meta/train.txt`` when both meta files
    exist, else the sub-folders of ``train/``)."""
    _check_root(root)
    meta = _meta_files(root)
    if meta is not None:
        return sorted(_wnid_labels(_read_meta(meta['train']), meta['train']))
    train = osp.join(root, 'train')
    if not osp.isdir(train):
        raise FileNotFoundError(f'{root!r} has neither meta/train.txt + meta/val.txt nor a '
                                'train/ folder: not an ImageNet folder in mmpretrain\'s layout')
    wnids = sorted(e.name for e in os.scandir(train) if e.is_dir())
    if not wnids:
        raise FileNotFoundError(f'{train!r} has no class folders (train/<wnid>/)')
    return wnids


def choose_classes(wnids: Sequence[str], num_classes: int, seed: int) -> List[str]:
    """``num_classes`` of ``wnids`` drawn by ``random.Random(seed).sample`` from the sorted list;
    returned sorted (label order)."""
    wnids = sorted(set(wnids))
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f'classes must be a positive integer, got {num_classes!r}')
    if num_classes > len(wnids):
        raise ValueError(f'classes: asked for {num_classes} classes but the ImageNet folder has '
                         f'only {len(wnids)}')
    return sorted(random.Random(seed).sample(wnids, num_classes))


def _scan_class(folder: str) -> List[str]:
    files = []
    for dirpath, _, names in os.walk(folder, followlinks=True):
        for name in names:
            if name.lower().endswith(IMG_EXTENSIONS):
                files.append(osp.relpath(osp.join(dirpath, name), folder).replace('\\', '/'))
    return files


def collect_split(root: str, split: str, chosen: Sequence[str]) -> List[Tuple[str, int]]:
    """``(path relative to root/<split>/, new label)`` of every image of the chosen classes,
    sorted by path. New labels are the positions in ``sorted(chosen)``."""
    if split not in SPLITS:
        raise ValueError(f'split must be one of {SPLITS}, got {split!r}')
    _check_root(root)
    new_label = {w: i for i, w in enumerate(sorted(chosen))}
    out: List[Tuple[str, int]] = []
    meta = _meta_files(root)
    if meta is not None:
        old_label = _wnid_labels(_read_meta(meta['train']), meta['train'])
        missing = sorted(set(chosen) - set(old_label))
        if missing:
            raise ValueError(f'{meta["train"]} has no images of {missing[:5]}')
        old_to_new = {old_label[w]: new_label[w] for w in chosen}
        items = _read_meta(meta[split])
        out = [(rel, old_to_new[label]) for rel, label in items if label in old_to_new]
        found = {label for _, label in out}
    else:
        split_dir = osp.join(root, split)
        if not osp.isdir(split_dir):
            raise FileNotFoundError(f'{split_dir!r} not found (and no meta/train.txt + '
                                    'meta/val.txt to read instead)')
        for wnid in sorted(chosen):
            folder = osp.join(split_dir, wnid)
            if not osp.isdir(folder):
                hint = (' (a flat val/ needs meta/val.txt and meta/train.txt)'
                        if split == 'val' else '')
                raise FileNotFoundError(f'class folder {folder!r} not found{hint}')
            out.extend((f'{wnid}/{rel}', new_label[wnid]) for rel in _scan_class(folder))
        found = {label for _, label in out}
    empty = [w for w in sorted(chosen) if new_label[w] not in found]
    if empty:
        raise ValueError(f'ImageNet {split}: no images of the classes {empty[:5]}'
                         f'{" ..." if len(empty) > 5 else ""}')
    return sorted(out)


def _write_lines(path: str, lines: Sequence[str]) -> None:
    atomic_write(path, ''.join(f'{line}\n' for line in lines))


def build_imagenet_subset(imagenet: str, out: str, num_classes: int = 100,
                          seed: int = 0) -> dict:
    """Write the annotation files of a ``num_classes``-class subset of ``imagenet`` into ``out``
    (see the module docstring); returns a summary (also written to ``out/subset_info.json``)."""
    _check_root(imagenet)
    if osp.realpath(out) == osp.realpath(imagenet):
        raise ValueError(f'out must not be the ImageNet folder itself ({imagenet!r}): its '
                         'meta/train.txt and meta/val.txt would be overwritten')
    source = 'meta' if _meta_files(imagenet) is not None else 'folders'
    wnids = imagenet_classes(imagenet)
    chosen = choose_classes(wnids, num_classes, seed)
    splits = {s: collect_split(imagenet, s, chosen) for s in SPLITS}

    os.makedirs(osp.join(out, 'meta'), exist_ok=True)
    for split, items in splits.items():
        _write_lines(osp.join(out, 'meta', f'{split}.txt'), [f'{p} {y}' for p, y in items])
    _write_lines(osp.join(out, 'classes.txt'), chosen)
    summary = dict(
        imagenet=osp.abspath(imagenet),
        out=osp.abspath(out),
        source=source,
        seed=seed,
        num_classes=num_classes,
        num_imagenet_classes=len(wnids),
        num_train=len(splits['train']),
        num_val=len(splits['val']),
        classes=chosen,
    )
    atomic_write(osp.join(out, 'subset_info.json'), json.dumps(summary, indent=1) + '\n')
    return summary
