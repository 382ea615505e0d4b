"""DCS-Digits: a small, real, deterministic demo dataset built offline.

The source images are scikit-learn's bundled handwritten digits
(:func:`sklearn.datasets.load_digits`: 1,797 real 8x8 scans of the digits
0-9, intensities 0..16). They ship inside the scikit-learn package, so the
build needs no network. From them two datasets are rendered:

**Classification** (mmpretrain ``CustomDataset`` layout)::

    OUT/cls/classes.txt                 '0'..'9', one per line
    OUT/cls/train/<digit>/<index>.png   RGB, size x size, dark ink on light paper
    OUT/cls/val/<digit>/<index>.png
    OUT/cls/meta/train.txt              '<digit>/<index>.png <label>' (relative to train/)
    OUT/cls/meta/val.txt                '<digit>/<index>.png <label>' (relative to val/)

``<index>`` is the 4-digit, zero-padded index of the scan in ``load_digits``.
Each 8x8 scan is upsampled with a bicubic filter and drawn as dark ink
(0 = full ink) on a white background (255). The split is stratified per
class and seeded; by default every one of the 1,797 scans is used once.

**Detection / segmentation scenes** (COCO + mmseg layout)::

    OUT/scenes/images/{train,val}/<id:06d>.png        RGB canvas x canvas
    OUT/scenes/seg_maps/{train,val}/<id:06d>.png      'L', 0 = background, 1..10 = '0'..'9'
    OUT/scenes/annotations/instances_{train,val}.json COCO, RLE masks

Every scene is a light, smoothly textured background with 1..``max_digits``
tinted digits pasted without box overlap. Train scenes draw digits only from
the train split of the classification set, val scenes only from its val split
(each annotation records its scan as ``"source_index"``). An instance mask is
the stroke itself (upsampled ink above :data:`MASK_THRESHOLD`), its box the
tight box of the mask, and the semantic map labels mask pixels with the
category id (so class ``i`` of :data:`SEG_CLASSES` is category id ``i``;
255 is never used).

:func:`build_all` writes ``OUT/build_info.json`` (arguments and summary) last,
so its presence marks a complete build and records what it was built with.
A build already in ``OUT`` made with other arguments (or one without that
record) is refused (:class:`DataBuildError`) unless ``force``: rebuilding
replaces ``OUT/cls`` and ``OUT/scenes``. The same arguments give
byte-identical files (for a given numpy/Pillow/pycocotools).

This module uses numpy, Pillow, scikit-learn and pycocotools only.
"""
import functools
import json
import os
import os.path as osp
import shutil
from numbers import Integral, Real

import numpy as np
from PIL import Image

from mmdcs.utils.files import atomic_write

__all__ = [
    'DIGIT_CLASSES', 'SEG_CLASSES', 'SEG_PALETTE', 'NUM_SOURCE_IMAGES',
    'MASK_THRESHOLD', 'load_source_digits', 'split_indices', 'render_digit',
    'default_digit_size', 'build_classification', 'build_scenes', 'build_all',
    'read_build_info', 'build_args', 'check_build', 'DataBuildError'
]

#: Class names of the classification set and of the COCO categories
#: (category id = class index + 1).
DIGIT_CLASSES = tuple(str(i) for i in range(10))
#: Class names of the semantic maps: pixel value ``i`` is ``SEG_CLASSES[i]``.
SEG_CLASSES = ('background', ) + DIGIT_CLASSES
#: One RGB colour per entry of :data:`SEG_CLASSES`.
SEG_PALETTE = [
    [0, 0, 0],
    [31, 119, 180],
    [255, 127, 14],
    [44, 160, 44],
    [214, 39, 40],
    [148, 103, 189],
    [140, 86, 75],
    [227, 119, 194],
    [127, 127, 127],
    [188, 189, 34],
    [23, 190, 207],
]

#: Number of scans in ``sklearn.datasets.load_digits``.
NUM_SOURCE_IMAGES = 1797
#: Upsampled ink (0..1) above this value belongs to a digit's instance mask.
MASK_THRESHOLD = 0.5

BUILD_INFO = 'build_info.json'
FORMAT_VERSION = 1

# scene rendering constants
_DIGIT_SIZE_AT_128 = (20, 48)  # default digit size range for a 128 canvas
_MIN_DIGIT_SIZE = 4
_PLACE_TRIES = 50  # random positions tried per digit before skipping it
_BOX_GAP = 1  # minimum gap in pixels between two digits' boxes
_MAX_TINT = 140  # tint channels are drawn in [0, _MAX_TINT): dark ink


# --------------------------------------------------------------------------
# argument checks
# --------------------------------------------------------------------------
def _check_int(name, value, minimum=None, multiple_of=None):
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f'{name} must be an integer, got {value!r}')
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f'{name} must be >= {minimum}, got {value}')
    if multiple_of is not None and (value <= 0 or value % multiple_of):
        raise ValueError(
            f'{name} must be a positive multiple of {multiple_of}, '
            f'got {value}')
    return value


def _check_val_ratio(val_ratio):
    if isinstance(val_ratio, bool) or not isinstance(val_ratio, Real) \
            or not 0.0 < float(val_ratio) < 1.0:
        raise ValueError(
            f'val_ratio must be a number in (0, 1), got {val_ratio!r}')
    return float(val_ratio)


def _check_max_per_class(max_per_class):
    if max_per_class is None:
        return None
    # at least one image per class in each split
    return _check_int('max_per_class', max_per_class, minimum=2)


def default_digit_size(canvas):
    """Default (min, max) digit side for a canvas: 20..48 px scaled from 128."""
    canvas = _check_int('canvas', canvas, multiple_of=32)
    lo, hi = (max(_MIN_DIGIT_SIZE, int(round(s * canvas / 128)))
              for s in _DIGIT_SIZE_AT_128)
    return lo, hi


def _check_digit_size(digit_size, canvas):
    if digit_size is None:
        return default_digit_size(canvas)
    try:
        lo, hi = digit_size
    except (TypeError, ValueError):
        raise ValueError('digit_size must be a (min, max) pair of integers, '
                         f'got {digit_size!r}') from None
    lo = _check_int('digit_size min', lo, minimum=_MIN_DIGIT_SIZE)
    hi = _check_int('digit_size max', hi, minimum=_MIN_DIGIT_SIZE)
    if lo > hi or hi > canvas:
        raise ValueError(
            f'digit_size must satisfy {_MIN_DIGIT_SIZE} <= min <= max <= '
            f'canvas ({canvas}), got ({lo}, {hi})')
    return lo, hi


# --------------------------------------------------------------------------
# source digits, split and rendering
# --------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _load_source_digits():
    from sklearn.datasets import load_digits
    data = load_digits()
    images = np.asarray(data.images, dtype=np.float32) / 16.0
    targets = np.asarray(data.target, dtype=np.int64)
    assert images.shape == (NUM_SOURCE_IMAGES, 8, 8), images.shape
    images.setflags(write=False)
    targets.setflags(write=False)
    return images, targets


def load_source_digits():
    """Return ``(ink, targets)``: the scans as float32 ink in [0, 1], shape
    (1797, 8, 8), and their int64 labels 0..9 (read-only arrays)."""
    return _load_source_digits()


def split_indices(val_ratio=0.2, seed=0, max_per_class=None):
    """Seeded, per-class stratified split of the source scans.

    For each class the indices of its scans are shuffled (one RNG seeded by
    ``seed`` for all classes), optionally cut to the first ``max_per_class``,
    and the first ``round(n * val_ratio)`` (at least 1 and at most ``n - 1``)
    go to val, the rest to train.

    Returns:
        tuple[np.ndarray, np.ndarray]: sorted source indices of train and val.
    """
    val_ratio = _check_val_ratio(val_ratio)
    seed = _check_int('seed', seed, minimum=0)
    max_per_class = _check_max_per_class(max_per_class)
    _, targets = load_source_digits()
    rng = np.random.default_rng([seed, 0])
    train, val = [], []
    for label in range(len(DIGIT_CLASSES)):
        idx = rng.permutation(np.flatnonzero(targets == label))
        if max_per_class is not None:
            idx = idx[:max_per_class]
        n_val = int(np.floor(len(idx) * val_ratio + 0.5))
        n_val = min(max(n_val, 1), len(idx) - 1)
        val.append(idx[:n_val])
        train.append(idx[n_val:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(val))


def render_digit(ink8, size):
    """Upsample an 8x8 ink image (values in [0, 1]) to ``size`` x ``size``
    with a bicubic filter; returns float32 ink clipped to [0, 1]."""
    img = Image.fromarray(np.ascontiguousarray(ink8, dtype=np.float32))
    img = img.resize((size, size), Image.Resampling.BICUBIC)
    return np.clip(np.asarray(img, dtype=np.float32), 0.0, 1.0)


def _save_png(array, path):
    Image.fromarray(array).save(path, format='PNG', compress_level=1)


def _invalidate_build_info(out_dir):
    """A part rebuilt alone: the record of a complete build no longer holds
    (the record of a build in progress, :func:`build_all`'s, stays)."""
    info = read_build_info(out_dir)
    if isinstance(info, dict) and 'counts' in info:
        os.remove(osp.join(out_dir, BUILD_INFO))


def _write_build_info(out_dir, info):
    """``OUT/build_info.json``, atomically and never through a planted link."""
    atomic_write(osp.join(out_dir, BUILD_INFO), json.dumps(info, indent=2))


def _fresh_dir(path):
    if osp.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)


# --------------------------------------------------------------------------
# classification set
# --------------------------------------------------------------------------
def build_classification(out_dir,
                         size=64,
                         val_ratio=0.2,
                         seed=0,
                         max_per_class=None):
    """Write the classification set under ``out_dir/cls`` (replacing it).

    Args:
        out_dir (str): Output root ``OUT``.
        size (int): Image side in pixels, a positive multiple of 8.
        val_ratio (float): Fraction of each class that goes to val, in (0, 1).
        seed (int): Seed of the split.
        max_per_class (int, optional): Use at most this many scans per class
            (for small test builds). Defaults to all.

    Returns:
        dict: ``root``, ``size``, ``num_train``, ``num_val`` and the per-class
        counts ``train_per_class`` / ``val_per_class``.
    """
    size = _check_int('size', size, multiple_of=8)
    train_idx, val_idx = split_indices(val_ratio, seed, max_per_class)
    ink, targets = load_source_digits()

    out_dir = osp.abspath(out_dir)
    _invalidate_build_info(out_dir)
    root = osp.join(out_dir, 'cls')
    _fresh_dir(root)
    os.makedirs(osp.join(root, 'meta'))
    with open(osp.join(root, 'classes.txt'), 'w') as f:
        f.write(''.join(c + '\n' for c in DIGIT_CLASSES))

    summary = dict(root=root, size=size)
    for split, indices in (('train', train_idx), ('val', val_idx)):
        for name in DIGIT_CLASSES:
            os.makedirs(osp.join(root, split, name))
        lines = []
        for index in indices:
            label = int(targets[index])
            rel = f'{DIGIT_CLASSES[label]}/{index:04d}.png'
            gray = np.round(255.0 * (1.0 - render_digit(ink[index], size)))
            rgb = np.repeat(gray.astype(np.uint8)[..., None], 3, axis=2)
            _save_png(rgb, osp.join(root, split, rel))
            lines.append(f'{rel} {label}\n')
        with open(osp.join(root, 'meta', f'{split}.txt'), 'w') as f:
            f.write(''.join(lines))
        summary[f'num_{split}'] = int(len(indices))
        summary[f'{split}_per_class'] = np.bincount(
            targets[indices], minlength=len(DIGIT_CLASSES)).tolist()
    return summary


# --------------------------------------------------------------------------
# scenes
# --------------------------------------------------------------------------
def _background(rng, canvas):
    """Light RGB paper with smooth two-octave low-frequency noise."""
    base = rng.uniform(215.0, 240.0) + rng.uniform(-8.0, 8.0, size=3)
    out = np.empty((canvas, canvas, 3), np.float32)
    for c in range(3):
        chan = np.full((canvas, canvas), base[c], np.float32)
        for grid, amp in ((3, 14.0), (9, 5.0)):
            coarse = rng.uniform(-amp, amp, size=(grid, grid))
            img = Image.fromarray(coarse.astype(np.float32))
            img = img.resize((canvas, canvas), Image.Resampling.BICUBIC)
            chan += np.asarray(img, dtype=np.float32)
        out[..., c] = chan
    return np.clip(out, 0.0, 255.0)


def _boxes_overlap(a, b, gap=_BOX_GAP):
    """``a``/``b`` are (x0, y0, x1, y1) with exclusive x1/y1."""
    return (a[0] < b[2] + gap and b[0] < a[2] + gap and a[1] < b[3] + gap
            and b[1] < a[3] + gap)


def _render_scene(rng, canvas, pool, num_digits, digit_size):
    """Render one scene; returns (rgb uint8, seg uint8, list of instances)."""
    ink_all, targets = load_source_digits()
    image = _background(rng, canvas)
    seg = np.zeros((canvas, canvas), np.uint8)
    instances, boxes = [], []
    attempts = 0
    # place num_digits digits; if all were skipped, keep trying so that
    # every scene has at least one (the first digit on an empty canvas
    # always fits, so this only loops on empty masks)
    while attempts < num_digits or not instances:
        attempts += 1
        if attempts > num_digits + 100:
            raise RuntimeError('could not place any digit in a scene')
        index = int(pool[rng.integers(len(pool))])
        side = int(rng.integers(digit_size[0], digit_size[1] + 1))
        tint = rng.integers(0, _MAX_TINT, size=3).astype(np.float32)
        alpha = render_digit(ink_all[index], side)
        mask = alpha > MASK_THRESHOLD
        if not mask.any():
            continue
        ys, xs = np.nonzero(mask)
        local = (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
        for _ in range(_PLACE_TRIES):
            x = int(rng.integers(canvas - side + 1))
            y = int(rng.integers(canvas - side + 1))
            box = (x + local[0], y + local[1], x + local[2], y + local[3])
            if not any(_boxes_overlap(box, b) for b in boxes):
                break
        else:
            continue  # no free place: skip this digit
        boxes.append(box)
        a = alpha[..., None]
        region = image[y:y + side, x:x + side]
        image[y:y + side, x:x + side] = region * (1.0 - a) + tint * a
        full = np.zeros((canvas, canvas), bool)
        full[y:y + side, x:x + side] = mask
        category_id = int(targets[index]) + 1
        seg[full] = category_id
        instances.append(
            dict(mask=full, category_id=category_id, source_index=index))
    rgb = np.round(np.clip(image, 0.0, 255.0)).astype(np.uint8)
    return rgb, seg, instances


def _coco_annotation(ann_id, image_id, inst):
    from pycocotools import mask as mask_utils
    rle = mask_utils.encode(np.asfortranarray(inst['mask'].astype(np.uint8)))
    ys, xs = np.nonzero(inst['mask'])
    x0, y0 = int(xs.min()), int(ys.min())
    bbox = [x0, y0, int(xs.max()) - x0 + 1, int(ys.max()) - y0 + 1]
    return dict(
        id=ann_id,
        image_id=image_id,
        category_id=inst['category_id'],
        bbox=bbox,
        area=int(inst['mask'].sum()),
        segmentation=dict(
            size=[int(s) for s in rle['size']],
            counts=rle['counts'].decode('ascii')),
        iscrowd=0,
        source_index=inst['source_index'])


def build_scenes(out_dir,
                 canvas=128,
                 scenes_train=200,
                 scenes_val=50,
                 min_digits=2,
                 max_digits=5,
                 seed=0,
                 digit_size=None,
                 val_ratio=0.2,
                 max_per_class=None):
    """Write the detection/segmentation scenes under ``out_dir/scenes``
    (replacing it).

    Args:
        out_dir (str): Output root ``OUT``.
        canvas (int): Scene side in pixels, a positive multiple of 32.
        scenes_train (int): Number of train scenes (>= 1).
        scenes_val (int): Number of val scenes (>= 1).
        min_digits (int): Minimum number of digits tried per scene (>= 1).
        max_digits (int): Maximum number of digits tried per scene.
        seed (int): Seed of the split and of the scenes.
        digit_size (tuple[int, int], optional): (min, max) side of a pasted
            digit. Defaults to 20..48 scaled by ``canvas / 128``.
        val_ratio (float): Split ratio; must match the classification set.
        max_per_class (int, optional): Split cut; must match the
            classification set.

    Returns:
        dict: ``root``, ``canvas``, ``digit_size``, ``num_train_images``,
        ``num_val_images``, ``num_train_instances``, ``num_val_instances``.
    """
    canvas = _check_int('canvas', canvas, multiple_of=32)
    scenes_train = _check_int('scenes_train', scenes_train, minimum=1)
    scenes_val = _check_int('scenes_val', scenes_val, minimum=1)
    min_digits = _check_int('min_digits', min_digits, minimum=1)
    max_digits = _check_int('max_digits', max_digits, minimum=1)
    if max_digits < min_digits:
        raise ValueError(f'max_digits ({max_digits}) must be >= min_digits '
                         f'({min_digits})')
    digit_size = _check_digit_size(digit_size, canvas)
    seed = _check_int('seed', seed, minimum=0)
    pools = dict(
        zip(('train', 'val'), split_indices(val_ratio, seed, max_per_class)))

    out_dir = osp.abspath(out_dir)
    _invalidate_build_info(out_dir)
    root = osp.join(out_dir, 'scenes')
    _fresh_dir(root)
    os.makedirs(osp.join(root, 'annotations'))
    categories = [
        dict(id=i + 1, name=name, supercategory='digit')
        for i, name in enumerate(DIGIT_CLASSES)
    ]

    summary = dict(root=root, canvas=canvas, digit_size=list(digit_size))
    for stream, (split, num_scenes) in enumerate(
        (('train', scenes_train), ('val', scenes_val)), start=1):
        img_dir = osp.join(root, 'images', split)
        seg_dir = osp.join(root, 'seg_maps', split)
        os.makedirs(img_dir)
        os.makedirs(seg_dir)
        rng = np.random.default_rng([seed, stream])
        images, annotations = [], []
        for image_id in range(1, num_scenes + 1):
            num_digits = int(rng.integers(min_digits, max_digits + 1))
            rgb, seg, instances = _render_scene(rng, canvas, pools[split],
                                                num_digits, digit_size)
            file_name = f'{image_id:06d}.png'
            _save_png(rgb, osp.join(img_dir, file_name))
            _save_png(seg, osp.join(seg_dir, file_name))
            images.append(
                dict(
                    id=image_id,
                    file_name=file_name,
                    width=canvas,
                    height=canvas))
            for inst in instances:
                annotations.append(
                    _coco_annotation(
                        len(annotations) + 1, image_id, inst))
        coco = dict(
            info=dict(
                description='DCS-Digits scenes (sklearn load_digits) '
                f'{split} split',
                version=str(FORMAT_VERSION)),
            licenses=[],
            images=images,
            annotations=annotations,
            categories=categories)
        with open(osp.join(root, 'annotations', f'instances_{split}.json'),
                  'w') as f:
            json.dump(coco, f)
        summary[f'num_{split}_images'] = num_scenes
        summary[f'num_{split}_instances'] = len(annotations)
    return summary


# --------------------------------------------------------------------------
# everything
# --------------------------------------------------------------------------
def _expected_files(out_dir):
    return [
        osp.join(out_dir, 'cls', 'classes.txt'),
        osp.join(out_dir, 'cls', 'meta', 'train.txt'),
        osp.join(out_dir, 'cls', 'meta', 'val.txt'),
        osp.join(out_dir, 'scenes', 'annotations', 'instances_train.json'),
        osp.join(out_dir, 'scenes', 'annotations', 'instances_val.json'),
    ]


def read_build_info(out_dir):
    """Return the parsed ``OUT/build_info.json`` or None if absent/broken."""
    try:
        with open(osp.join(out_dir, BUILD_INFO)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class DataBuildError(ValueError):
    """``OUT`` holds a build (or files) that a build with the given arguments
    would replace: the message names the differing arguments."""


def build_args(size=64,
               val_ratio=0.2,
               seed=0,
               max_per_class=None,
               canvas=128,
               scenes_train=200,
               scenes_val=50,
               min_digits=2,
               max_digits=5,
               digit_size=None):
    """The arguments of :func:`build_all`, validated and normalised as
    ``OUT/build_info.json`` records them (a ``ValueError`` naming a bad
    one)."""
    canvas = _check_int('canvas', canvas, multiple_of=32)
    args = dict(
        size=_check_int('size', size, multiple_of=8),
        val_ratio=_check_val_ratio(val_ratio),
        seed=_check_int('seed', seed, minimum=0),
        max_per_class=_check_max_per_class(max_per_class),
        canvas=canvas,
        scenes_train=_check_int('scenes_train', scenes_train, minimum=1),
        scenes_val=_check_int('scenes_val', scenes_val, minimum=1),
        min_digits=_check_int('min_digits', min_digits, minimum=1),
        max_digits=_check_int('max_digits', max_digits, minimum=1),
        digit_size=list(_check_digit_size(digit_size, canvas)))
    if args['max_digits'] < args['min_digits']:
        raise ValueError(f'max_digits ({max_digits}) must be >= min_digits '
                         f'({min_digits})')
    return args


def check_build(out_dir, args, force=False):
    """What ``OUT`` holds for a build with ``args`` (:func:`build_args`):
    ``'complete'`` (a complete build made with them), ``'partial'`` (one
    begun with them, not finished), ``'none'`` (no build). A build made with
    other arguments, or ``cls`` / ``scenes`` folders without the record of
    their build, raise :class:`DataBuildError` naming the difference, unless
    ``force``. Reads only: a tool calls it before any work."""
    info = read_build_info(out_dir)
    ours = isinstance(info, dict) and \
        info.get('format_version') == FORMAT_VERSION
    if ours and info.get('args') == args:
        done = 'counts' in info and all(
            osp.isfile(p) for p in _expected_files(out_dir))
        return 'complete' if done else 'partial'
    present = [n for n in ('cls', 'scenes')
               if osp.lexists(osp.join(out_dir, n))]
    if force or (info is None and not present):
        return 'none'
    if ours and isinstance(info.get('args'), dict):
        old = info['args']
        diff = ', '.join(f'{k}={old.get(k)!r} there, {v!r} asked'
                         for k, v in args.items() if old.get(k) != v)
        what = f'a digits build made with other arguments ({diff})'
    else:
        what = (f'{" and ".join(present) or BUILD_INFO} without a record of '
                f'a digits build it could be checked against')
    raise DataBuildError(
        f'{out_dir} holds {what}: building here would replace it; use '
        'another folder, or replace it (python tools/data/build_digits.py '
        f'--out {out_dir} --force, with the arguments you want)')


def build_all(out_dir,
              size=64,
              val_ratio=0.2,
              seed=0,
              max_per_class=None,
              canvas=128,
              scenes_train=200,
              scenes_val=50,
              min_digits=2,
              max_digits=5,
              digit_size=None,
              skip_existing=False,
              force=False):
    """Build the classification set and the scenes from one split.

    All arguments are validated, and ``OUT`` checked (:func:`check_build`),
    before anything is written: a build there made with other arguments is
    refused unless ``force``. With ``skip_existing=True`` nothing is done
    when ``OUT/build_info.json`` records a complete build with the same
    arguments.

    Returns:
        dict: ``out_dir``, ``skipped`` (bool), ``args``, ``cls`` and
        ``scenes`` (the summaries of :func:`build_classification` and
        :func:`build_scenes`).
    """
    args = build_args(size, val_ratio, seed, max_per_class, canvas,
                      scenes_train, scenes_val, min_digits, max_digits,
                      digit_size)
    out_dir = osp.abspath(out_dir)
    state = check_build(out_dir, args, force)
    if skip_existing and state == 'complete':
        info = read_build_info(out_dir)
        return _full_summary(out_dir, args, info['counts'], skipped=True)

    os.makedirs(out_dir, exist_ok=True)
    # the arguments first (a build in progress: no counts), so that an
    # interrupted build is known as this one's; the counts last
    _write_build_info(out_dir, dict(format_version=FORMAT_VERSION, args=args))
    cls_summary = build_classification(
        out_dir,
        size=args['size'],
        val_ratio=args['val_ratio'],
        seed=args['seed'],
        max_per_class=args['max_per_class'])
    scenes_summary = build_scenes(
        out_dir,
        canvas=args['canvas'],
        scenes_train=args['scenes_train'],
        scenes_val=args['scenes_val'],
        min_digits=args['min_digits'],
        max_digits=args['max_digits'],
        seed=args['seed'],
        digit_size=tuple(args['digit_size']),
        val_ratio=args['val_ratio'],
        max_per_class=args['max_per_class'])
    # no absolute paths in the file, so that it is the same for any OUT
    counts = dict(
        cls={k: v
             for k, v in cls_summary.items() if k != 'root'},
        scenes={k: v
                for k, v in scenes_summary.items() if k != 'root'})
    # written last: its counts mark a complete build (never through a planted link)
    _write_build_info(
        out_dir, dict(format_version=FORMAT_VERSION, args=args, counts=counts))
    return _full_summary(out_dir, args, counts, skipped=False)


def _full_summary(out_dir, args, counts, skipped):
    return dict(
        out_dir=out_dir,
        skipped=skipped,
        args=args,
        cls=dict(counts['cls'], root=osp.join(out_dir, 'cls')),
        scenes=dict(counts['scenes'], root=osp.join(out_dir, 'scenes')))
