"""What ``tools/train.py`` and ``tools/test.py`` share: config loading, picking the task from the
config's ``default_scope``, pre-flight checks with clear errors, CPU/DDP set-up, building the
runner.

One ``tools/train.py`` serves mmpretrain, mmdet and mmseg configs: they all train through
mmengine's ``Runner``; what differs is which package registers the config's unprefixed types.
"""
import argparse
import difflib
import fnmatch
import functools
import importlib
import importlib.util
import inspect
import math
import os
import os.path as osp
import re
import shutil
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator, List, Optional, Tuple

from mmengine.config import DictAction

from mmdcs.checks import MAX_BATCH, MAX_IMAGE_SIDE, MAX_SEED, cpu_count, expected, fits
from mmdcs.peers.ofb.arch import ArchFileError
from mmdcs.selection import SubnetError
from mmdcs.selection.budget import BudgetError
from mmdcs.utils import ConfigError, InputError, register_all_modules
from mmdcs.utils.checkpoint import PARTIAL_KEY, TRUST_FLAG, TRUST_KEY, CheckpointError, \
    trust_checkpoints, trust_scope

#: default_scope -> (python package, pip requirement) of the task
TASK_PACKAGES = {
    'mmpretrain': ('mmpretrain', 'mmpretrain==1.2.0'),
    'mmdet': ('mmdet', 'mmdet==3.3.0'),
    'mmseg': ('mmseg', 'mmsegmentation==1.2.2'),
    'mmdcs': ('mmpretrain', 'mmpretrain==1.2.0'),
}


class UserError(Exception):
    """A problem with the user's input (config, paths, arguments): reported in one message."""


# ----------------------------------------------------------------------------- arguments
class ToolParser(argparse.ArgumentParser):
    """The tools' argument parser: a bad argument is one line on stderr, ``error: argument
    --shape: ...`` (with a pointer to ``--help``), exit code 2 — the same form as every other
    refused input (:func:`user_errors`), instead of argparse's usage block."""

    def error(self, message: str):
        print(f'error: {message} (see {self.prog} --help)', file=sys.stderr)
        sys.exit(2)


def _number(text: str, kind: type, what: str):
    """``text`` as an int or float; argparse's one-line refusal of an empty or non-numeric
    value (``not a number``), naming what is expected."""
    if not str(text).strip():
        raise argparse.ArgumentTypeError(f'the value is empty; expected {what}')
    try:
        value = kind(text)
    except ValueError:
        try:
            float(text)
            problem = 'is not an integer'
        except ValueError:
            problem = 'is not a number'
        raise argparse.ArgumentTypeError(f'{text!r} {problem}; expected {what}') from None
    if value != value:  # nan
        raise argparse.ArgumentTypeError(f'{text!r} is not a number; expected {what}')
    return value


def number_type(kind: type, name: str, low=None, high=None, why: str = '', **bounds):
    """An argparse type (named ``name``): ``kind`` (int or float) finite and in the range,
    with :func:`mmdcs.checks.check_number`'s bounds (``high`` may be a function, called when a
    value is parsed: the CPU count); a refusal says what is expected (``must be an integer in
    [1, 1024], got 5000``) and ``why`` where the bound needs a reason."""
    def parse(text: str):
        top = high() if callable(high) else high
        what = expected(low, top, integer=kind is int, **bounds)
        value = _number(text, kind, what)
        if not fits(value, low, top, integer=kind is int, **bounds):
            raise argparse.ArgumentTypeError(f'must be {what}{why}, got {text}')
        return value

    parse.__name__ = name
    return parse


#: argparse type of a count (repeats, epochs, rounds): an integer ≥ 1
positive_int = number_type(int, 'positive_int', 1)
#: argparse type of a count that may be 0 (warm-up rounds, validated subnets, refinements)
non_negative_int = number_type(int, 'non_negative_int', 0)
#: argparse type of every ``--shape H [W]`` / ``--size N``: an image side in pixels, at most
#: :data:`~mmdcs.checks.MAX_IMAGE_SIDE`
positive_size = number_type(int, 'positive_size', 1, MAX_IMAGE_SIDE,
                            ' (an image side in pixels)')
#: argparse type of every ``--batch`` / ``--batch-size``: images per call, at most
#: :data:`~mmdcs.checks.MAX_BATCH`
batch_size = number_type(int, 'batch_size', 1, MAX_BATCH, ' (images per call)')
#: argparse type of every ``--threads``: at most the CPU cores of this machine
thread_count = number_type(int, 'thread_count', 1, cpu_count,
                           ' (at most the CPU cores of this machine)')
#: ``--threads`` where 0 means all cores
thread_count_or_all = number_type(int, 'thread_count_or_all', 0, cpu_count,
                                  ' (0: all cores; at most the CPU cores of this machine)')
#: argparse type of every ``--seed``: what numpy's and torch's generators take
seed = number_type(int, 'seed', 0, MAX_SEED)
#: argparse type of a scale or tolerance: a finite number > 0
positive_float = number_type(float, 'positive_float', 0, low_open=True)
#: argparse type of a tolerance that may be 0: a finite number ≥ 0
non_negative_float = number_type(float, 'non_negative_float', 0)
#: argparse type of a kept ratio: a number in (0, 1]
unit_ratio = number_type(float, 'unit_ratio', 0, 1, low_open=True)
#: argparse type of a budget or target below the baseline: a ratio in (0, 1)
open_ratio = number_type(float, 'open_ratio', 0, 1, low_open=True, high_open=True)


class ConfigOptions(DictAction):
    """``--cfg-options KEY=VALUE ...`` of every tool: mmengine's ``DictAction`` (the same value
    parsing: numbers, booleans, lists, tuples), refusing in one line, exit 2, an item without
    ``=`` or without a key (``--cfg-options ""``) instead of a traceback. An empty value
    (``model.backbone.tau=``) stays the empty string; where a number is expected,
    :func:`user_errors` says so."""

    def __call__(self, parser, namespace, values, option_string=None):
        for item in values:
            key, sep, _ = item.partition('=')
            if not sep or not key.strip() or any(c.isspace() for c in key.strip('. ')):
                parser.error(f'argument {option_string or "--cfg-options"}: {item!r} is not '
                             'KEY=VALUE (e.g. train_cfg.max_epochs=2; quote a value with '
                             'spaces or brackets)')
        super().__call__(parser, namespace, values, option_string)


def add_cfg_options(parser) -> None:
    """The ``--cfg-options`` argument (:class:`ConfigOptions`)."""
    parser.add_argument('--cfg-options', nargs='+', action=ConfigOptions, metavar='KEY=VALUE',
                        help='override settings of the config, key=value (e.g. '
                        'train_cfg.max_epochs=2)')


def add_prior_argument(parser, when: str = 'with a target') -> None:
    """``--prior NAME``: how the export's ranking weighs the units
    (:func:`~mmdcs.selection.budget.build_prior`; default None: the budget's own)."""
    parser.add_argument('--prior', default=None, metavar='NAME',
                        help=f'{when}: how the ranking weighs the units: flops (by the FLOPs an '
                        'element does), cost (by the budget\'s own average cost per element), '
                        'params, or none; default: flops for a latency target, cost for an '
                        'exact one (docs/budgets.md)')


#: the configs of this repository (when it is a checkout)
REPO_CONFIGS = osp.join(osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))), 'configs')

#: the config the tool loaded last (:func:`load_config`): where :func:`user_errors` looks up
#: the key of a part of the config whose construction failed
_LOADED_CONFIG: List[Any] = [None]


def load_config(path: str, cfg_options: Optional[dict] = None):
    """Load a config file (:func:`read_config`), failing with a clear message when the path is
    wrong."""
    if not osp.isfile(path):
        here = osp.abspath(path)
        hint = ''
        name = osp.basename(path)
        if osp.isdir(REPO_CONFIGS):
            matches = [osp.relpath(osp.join(d, f)) for d, _, fs in os.walk(REPO_CONFIGS)
                       for f in fs if f == name]
            if matches:
                hint = f' Did you mean: {", ".join(matches[:3])}?'
        raise UserError(f'config file not found: {path} (looked at {here}). mmdcs configs are '
                        f'under configs/, e.g. configs/demo/.{hint}')
    cfg = read_config(path)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    _LOADED_CONFIG[0] = cfg
    return cfg


def read_config(path: str):
    """mmengine's ``Config.fromfile(path)`` (a Python, JSON or YAML config and its bases): the
    one reader of config files. A file it cannot read — a syntax error, broken JSON or YAML,
    bytes that are not UTF-8, a Python config that fails when run — is one :class:`UserError`
    line naming the file (a missing base file: ``FileNotFoundError``, one line too)."""
    from mmengine.config import Config
    try:
        return Config.fromfile(path)
    except (FileNotFoundError, KeyboardInterrupt, SystemExit):
        raise
    except Exception as e:  # noqa: BLE001  (SyntaxError, JSONDecodeError, YAMLError, ...)
        if _debugging():
            raise
        text = ' '.join(str(e).split()) or type(e).__name__
        raise UserError(f'{path}: not a config mmengine can read ({type(e).__name__}: '
                        f'{text[:300]})') from None


def prepare_task(cfg) -> str:
    """Import and register the package of the config's task; returns the default scope."""
    scope = cfg.get('default_scope', None) or 'mmdcs'
    if scope not in TASK_PACKAGES:
        raise UserError(f"unsupported default_scope='{scope}' in the config; mmdcs tools run "
                        f"configs of the scopes {sorted(TASK_PACKAGES)}")
    package, requirement = TASK_PACKAGES[scope]
    try:
        module = importlib.import_module(f'{package}.utils')
    except ModuleNotFoundError as e:
        raise UserError(f"this config (default_scope='{scope}') needs the package '{package}', "
                        f"which is not importable ({e}). Install it with "
                        f"`pip install {requirement}` or run `make setup`.") from e
    module.register_all_modules(init_default_scope=False)
    register_all_modules(init_default_scope=False)
    return scope


def _iter_datasets(cfg_dataset, key: str) -> Iterator[Tuple[str, dict]]:
    """Yield (config key, dataset dict) for a dataset config and the datasets it wraps."""
    if not isinstance(cfg_dataset, dict):
        return
    yield key, cfg_dataset
    if isinstance(cfg_dataset.get('dataset'), dict):
        yield from _iter_datasets(cfg_dataset['dataset'], f'{key}.dataset')
    for i, sub in enumerate(cfg_dataset.get('datasets', None) or []):
        yield from _iter_datasets(sub, f'{key}.datasets.{i}')


def _data_hint(path: str) -> str:
    if 'fashion' in path.lower():
        return (f'place Fashion-MNIST there with `python tools/data/fashion_mnist.py --out '
                f'{path}` (from Debian\'s dataset-fashion-mnist package, a folder of the idx '
                'files, or a download)')
    if 'digit' in path:
        return ('build the embedded demo data with `python tools/data/build_digits.py '
                '--out data/digits` (the README commands do this for you)')
    return ('download the dataset to that place (see the README, "Data"), or point the config '
            'at it with --cfg-options')


#: file extensions counted as images by the pre-flight check (mmpretrain's IMG_EXTENSIONS and
#: mmseg's usual suffixes)
IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.ppm', '.bmp', '.pgm', '.tif', '.tiff', '.webp')
#: mmpretrain's dataset types that read four idx files, uncompressed, from their folder
#: (``data_root`` / ``data_prefix``) unless they may download them (``download=True``)
IDX_DATASETS = ('MNIST', 'FashionMNIST')
IDX_FILES = ('train-images-idx3-ubyte', 'train-labels-idx1-ubyte', 't10k-images-idx3-ubyte',
             't10k-labels-idx1-ubyte')
#: dataset types that read their classes from the sub-folders of the image folder when no
#: ann_file is given (mmpretrain)
FOLDER_DATASETS = ('CustomDataset', 'ImageNet', 'ImageNet21k')


def _first_image(folder: str, suffixes: Tuple[str, ...], depth: int = 8) -> Optional[str]:
    """The first image file under ``folder`` (recursively, stopping at the first), or None."""
    base = folder.rstrip(os.sep).count(os.sep)
    for here, dirs, files in os.walk(folder, followlinks=True):
        dirs.sort()
        for f in sorted(files):
            if f.lower().endswith(suffixes):
                return osp.join(here, f)
        if here.count(os.sep) - base >= depth:
            dirs[:] = []
    return None


def _image_folders(ds: dict, root: Optional[str]) -> List[Tuple[str, str, Tuple[str, ...]]]:
    """(config key, folder, suffixes) of the folders a dataset without ann_file scans for its
    images (and segmentation maps): mmpretrain's folder datasets (:data:`FOLDER_DATASETS`) and
    segmentation sets (``data_prefix.seg_map_path``). Other types (CIFAR-10, MNIST, a custom
    format ...) may read anything from ``data_root``: not scanned."""
    prefix = ds.get('data_prefix', None)
    kind = str(ds.get('type', '')).rpartition('.')[2]
    segmentation = isinstance(prefix, dict) and isinstance(prefix.get('seg_map_path'), str)
    if kind not in FOLDER_DATASETS and not segmentation:
        return []
    join = (lambda p: p if (osp.isabs(p) or not root) else osp.join(root, p))
    img_suffix = ds.get('img_suffix', None)
    img_suffixes = (img_suffix.lower(), ) if isinstance(img_suffix, str) and img_suffix \
        else IMAGE_EXTENSIONS
    out = []
    if isinstance(prefix, str) and prefix:
        out.append(('data_prefix', join(prefix), img_suffixes))
    elif isinstance(prefix, dict):
        for name in ('img_path', 'img'):
            if isinstance(prefix.get(name), str):
                out.append((f'data_prefix.{name}', join(prefix[name]), img_suffixes))
                break
        seg = prefix.get('seg_map_path', None)
        if isinstance(seg, str) and seg:
            suffix = ds.get('seg_map_suffix', None)
            out.append(('data_prefix.seg_map_path', join(seg),
                        (suffix.lower(), ) if isinstance(suffix, str) and suffix else
                        IMAGE_EXTENSIONS))
    if not out and root:
        out.append(('data_root', root, img_suffixes))
    return out


def _check_images(key: str, ds: dict, root: Optional[str]) -> List[str]:
    """Problems of a dataset that lists its images by scanning folders (no ann_file): a
    missing or empty image / segmentation-map folder, an mmpretrain folder dataset without
    class sub-folders holding images."""
    problems = []
    kind = str(ds.get('type', '')).rpartition('.')[2]
    for what, folder, suffixes in _image_folders(ds, root):
        if not osp.isdir(folder):
            problems.append(f'{key}.{what}: the folder {folder!r} does not exist; '
                            f'{_data_hint(folder)}')
            continue
        if _first_image(folder, suffixes) is None:
            problems.append(f'{key}.{what}: no images ({", ".join(suffixes)}) under {folder!r}; '
                            f'{_data_hint(folder)}')
            continue
        if kind in FOLDER_DATASETS and what != 'data_prefix.seg_map_path' \
                and ds.get('with_label', True):
            classes = [d for d in sorted(os.listdir(folder)) if osp.isdir(osp.join(folder, d))]
            if not any(_first_image(osp.join(folder, d), suffixes) for d in classes):
                problems.append(f'{key}.{what}: {folder!r} has no class sub-folders with images '
                                f'({kind} without ann_file reads one sub-folder per class); '
                                f'{_data_hint(folder)}')
    return problems


def _check_idx_files(key: str, ds: dict, root: Optional[str]) -> List[str]:
    """A missing idx file of an MNIST-type dataset that may not download it."""
    if ds.get('download', True):
        return []
    prefix = ds.get('data_prefix', '')
    folder = osp.join(root or '', prefix) if isinstance(prefix, str) and prefix else root or '.'
    missing = [f for f in IDX_FILES if not osp.isfile(osp.join(folder, f))]
    if not missing:
        return []
    return [f'{key}: no {", ".join(missing)} in {folder!r}; {_data_hint(folder)}']


def check_data_paths(cfg, dataloaders=('train_dataloader', 'val_dataloader',
                                       'test_dataloader')) -> None:
    """Fail early, and clearly, when a dataset root, annotation file or image folder is
    missing or empty (instead of an error deep inside a dataset class or the first batch):
    ``data_root`` must exist; an ``ann_file`` must exist and not be empty; a dataset without
    ann_file (a folder-based classification set, an ADE-style segmentation set) must find
    images in its image folder (``data_prefix``; for mmpretrain's folder datasets in class
    sub-folders) and segmentation maps in ``data_prefix.seg_map_path``; an MNIST-type dataset
    that may not download (:data:`IDX_DATASETS`, ``download=False``) its four idx files."""
    problems: List[str] = []
    for loader_key in dataloaders:
        loader = cfg.get(loader_key, None)
        if not isinstance(loader, dict):
            continue
        for key, ds in _iter_datasets(loader.get('dataset'), f'{loader_key}.dataset'):
            if 'dataset' in ds or 'datasets' in ds:  # a wrapper: its datasets are checked
                continue
            root = ds.get('data_root', None)
            if root and not osp.isdir(root):
                problems.append(f'{key}.data_root = {root!r} does not exist; {_data_hint(root)}')
                continue
            ann = ds.get('ann_file', None)
            if isinstance(ann, str) and ann:
                path = ann if (osp.isabs(ann) or not root) else osp.join(root, ann)
                if not osp.exists(path):
                    problems.append(f'{key}.ann_file: {path!r} does not exist; {_data_hint(path)}')
                elif osp.isfile(path) and osp.getsize(path) == 0:
                    problems.append(f'{key}.ann_file: {path!r} is empty; {_data_hint(path)}')
            elif str(ds.get('type', '')).rpartition('.')[2] in IDX_DATASETS:
                problems += _check_idx_files(key, ds, root)
            elif ds.get('type', None) is not None:
                problems += _check_images(key, ds, root)
    if problems:  # one line, every problem
        raise UserError('missing data: ' + ' | '.join(dict.fromkeys(problems)))


def check_schedule(cfg) -> None:
    """Pre-flight of a retraining with a regulariser (``model.regularizer``): its warm-up
    ``t_warm`` must be below ``train_cfg.max_epochs``, else the term would never be used —
    refused before the runner is built (no work dir, no environment dump), naming the two
    options to change. (:class:`~mmdcs.engine.RegularizerHook` checks it again when training
    starts, for a runner built otherwise.)"""
    model = cfg.get('model', None)
    reg = model.get('regularizer', None) if isinstance(model, dict) else None
    train_cfg = cfg.get('train_cfg', None) or {}
    if not isinstance(reg, dict) or not isinstance(train_cfg, dict):
        return
    t_warm, max_epochs = reg.get('t_warm', 0), train_cfg.get('max_epochs', None)
    if isinstance(t_warm, bool) or not isinstance(t_warm, int) or isinstance(
            max_epochs, bool) or not isinstance(max_epochs, int) or t_warm < 0:
        return  # not epochs, or a bad value: the constructors say what is wrong
    if t_warm >= max_epochs:
        kind = reg.get('type', 'regularizer')
        raise UserError(
            f'model.regularizer.t_warm = {t_warm} is not below train_cfg.max_epochs = '
            f'{max_epochs}: the {kind} term would never be used. Set a shorter warm-up '
            f'(--cfg-options model.regularizer.t_warm={max(max_epochs - 1, 0)}) or more epochs '
            f'(--cfg-options train_cfg.max_epochs={t_warm + 2}); the term is computed from the '
            'state refreshed at the end of an epoch, so it acts from the second epoch on')


# ----------------------------------------------------------------------------- config pre-flight
#: the parts of a config a run builds, by the dotted path of the dict (``*``: one key or list
#: index, ``**``: any number of them), and the mmengine registry their ``type`` must resolve in
#: (first match wins); where ``modes`` of :func:`check_config` use them
CONFIG_TYPES: List[Tuple[str, str, Tuple[str, ...]]] = [
    ('model', 'MODELS', ('train', 'test')),
    ('model_wrapper_cfg', 'MODEL_WRAPPERS', ('train', 'test')),
    ('optim_wrapper', 'OPTIM_WRAPPERS', ('train', )),
    ('optim_wrapper.optimizer', 'OPTIMIZERS', ('train', )),
    ('optim_wrapper.*.optimizer', 'OPTIMIZERS', ('train', )),
    ('optim_wrapper.*', 'OPTIM_WRAPPERS', ('train', )),
    ('param_scheduler', 'PARAM_SCHEDULERS', ('train', )),
    ('param_scheduler.*', 'PARAM_SCHEDULERS', ('train', )),
    ('param_scheduler.*.*', 'PARAM_SCHEDULERS', ('train', )),
    ('train_cfg', 'LOOPS', ('train', )), ('val_cfg', 'LOOPS', ('train', )),
    ('test_cfg', 'LOOPS', ('test', )),
    ('train_dataloader.**.dataset', 'DATASETS', ('train', )),
    ('val_dataloader.**.dataset', 'DATASETS', ('train', )),
    ('test_dataloader.**.dataset', 'DATASETS', ('test', )),
    ('train_dataloader.**.datasets.*', 'DATASETS', ('train', )),
    ('val_dataloader.**.datasets.*', 'DATASETS', ('train', )),
    ('test_dataloader.**.datasets.*', 'DATASETS', ('test', )),
    ('train_dataloader.**.pipeline.*', 'TRANSFORMS', ('train', )),
    ('val_dataloader.**.pipeline.*', 'TRANSFORMS', ('train', )),
    ('test_dataloader.**.pipeline.*', 'TRANSFORMS', ('test', )),
    ('train_dataloader.*sampler', 'DATA_SAMPLERS', ('train', )),
    ('val_dataloader.*sampler', 'DATA_SAMPLERS', ('train', )),
    ('test_dataloader.*sampler', 'DATA_SAMPLERS', ('test', )),
    ('val_evaluator', 'METRICS|EVALUATOR', ('train', )),
    ('val_evaluator.*', 'METRICS', ('train', )),
    ('test_evaluator', 'METRICS|EVALUATOR', ('test', )),
    ('test_evaluator.*', 'METRICS', ('test', )),
    ('default_hooks.*', 'HOOKS', ('train', 'test')),
    ('custom_hooks.*', 'HOOKS', ('train', 'test')),
    ('visualizer', 'VISUALIZERS', ('train', 'test')),
    ('visualizer.vis_backends.*', 'VISBACKENDS', ('train', 'test')),
    ('log_processor', 'LOG_PROCESSORS', ('train', 'test')),
]
#: types named by a string alone, by the path of the string (as :data:`CONFIG_TYPES`)
CONFIG_TYPE_NAMES: List[Tuple[str, str, Tuple[str, ...]]] = [
    ('optim_wrapper.constructor', 'OPTIM_WRAPPER_CONSTRUCTORS', ('train', )),
    ('runner_type', 'RUNNERS', ('train', 'test')),
]
#: the numbers of the runner's settings that a run uses, by dotted path (as
#: :data:`CONFIG_TYPES`) and mode: their type and range (:func:`mmdcs.checks.check_number`)
CONFIG_NUMBERS: List[Tuple[str, dict, Tuple[str, ...]]] = [
    ('train_cfg.max_epochs', dict(low=1, integer=True), ('train', )),
    ('train_cfg.max_iters', dict(low=1, integer=True), ('train', )),
    ('train_cfg.val_interval', dict(low=1, integer=True), ('train', )),
    ('train_cfg.val_begin', dict(low=0, integer=True), ('train', )),
    ('train_dataloader.batch_size', dict(low=1, integer=True), ('train', )),
    ('val_dataloader.batch_size', dict(low=1, integer=True), ('train', )),
    ('test_dataloader.batch_size', dict(low=1, integer=True), ('test', )),
    ('train_dataloader.num_workers', dict(low=0, integer=True), ('train', )),
    ('val_dataloader.num_workers', dict(low=0, integer=True), ('train', )),
    ('test_dataloader.num_workers', dict(low=0, integer=True), ('test', )),
    ('optim_wrapper.**.optimizer.lr', dict(low=0), ('train', )),
    ('optim_wrapper.**.optimizer.weight_decay', dict(low=0), ('train', )),
    ('optim_wrapper.**.optimizer.momentum', dict(low=0, high=1), ('train', )),
    ('optim_wrapper.**.optimizer.eps', dict(low=0), ('train', )),
    ('optim_wrapper.**.optimizer.betas.*', dict(low=0, high=1, high_open=True), ('train', )),
    ('optim_wrapper.**.accumulative_counts', dict(low=1, integer=True), ('train', )),
    ('optim_wrapper.**.clip_grad.max_norm', dict(low=0, low_open=True), ('train', )),
    ('param_scheduler.**.begin', dict(low=0, integer=True), ('train', )),
    ('param_scheduler.**.end', dict(low=1, integer=True), ('train', )),
    ('param_scheduler.**.T_max', dict(low=0, low_open=True), ('train', )),
    ('param_scheduler.**.eta_min', dict(low=0), ('train', )),
    ('auto_scale_lr.base_batch_size', dict(low=1, integer=True), ('train', )),
    ('default_hooks.logger.interval', dict(low=1, integer=True), ('train', 'test')),
    ('default_hooks.checkpoint.max_keep_ckpts', dict(low=-1, integer=True), ('train', )),
    ('randomness.seed', dict(low=0, high=MAX_SEED, integer=True, none=True), ('train', 'test')),
]


def _items(node, path: Tuple[str, ...] = ()) -> Iterator[Tuple[Tuple[str, ...], Any]]:
    """(path, value) of every value of a config, depth first (list items by index)."""
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _items(v, path + (str(k), ))
    elif isinstance(node, (list, tuple)):
        for i, v in enumerate(node):
            yield from _items(v, path + (str(i), ))


def _matches(pattern: str, path: Tuple[str, ...]) -> bool:
    """Whether ``path`` fits ``pattern`` (``*`` one part, with fnmatch wildcards inside a
    part; ``**`` any number of parts)."""
    parts = pattern.split('.')
    if parts[0] == '**':
        rest = '.'.join(parts[1:])
        return any(_matches(rest, path[i:]) for i in range(len(path) + 1))
    return bool(path) and fnmatch.fnmatchcase(path[0], parts[0]) and (
        _matches('.'.join(parts[1:]), path[1:]) if len(parts) > 1 else len(path) == 1)


def _shown(path: Tuple[str, ...], value) -> str:
    return f'{".".join(path)} = {value!r}'


def _number_problems(cfg, modes: Tuple[str, ...]) -> List[str]:
    """NaN or an infinity anywhere in the config; the runner's numbers out of type or range
    (:data:`CONFIG_NUMBERS`) for the run's ``modes``."""
    problems = []
    for path, value in _items(cfg):
        if isinstance(value, float) and not math.isfinite(value):
            problems.append(f'{_shown(path, value)}: not a finite number')
            continue
        rule = next((r for p, r, m in CONFIG_NUMBERS if set(m) & set(modes) and
                     _matches(p, path)), None)
        if rule is not None and not fits(value, **rule):
            problems.append(f'{_shown(path, value)}: must be {expected(**rule)}')
    return problems


def _type_problems(cfg, scope: str, modes: Tuple[str, ...]) -> List[str]:
    """Every ``type`` of the parts of :data:`CONFIG_TYPES` a run of ``modes`` builds resolves
    in its registry, as mmengine resolves it (the default scope, ``scope.Name``, a dict's
    ``_scope_``): an unknown name is refused with the close ones, before anything is built."""
    import mmengine.registry as registries
    problems = []
    for path, part in _items(cfg):
        if isinstance(part, dict) and isinstance(part.get('type'), str):
            rules, kind, key = CONFIG_TYPES, part['type'], path + ('type', )
            part_scope = part.get('_scope_', None) or scope
        elif isinstance(part, str):  # a type given by name alone (``constructor=...``)
            rules, kind, key, part_scope = CONFIG_TYPE_NAMES, part, path, scope
        else:
            continue
        names = next((r for p, r, m in rules if set(m) & set(modes) and _matches(p, path)),
                     None)
        if names is None:
            continue
        regs = [getattr(registries, n) for n in names.split('|')]
        found = False
        for reg in regs:
            with reg.switch_scope_and_registry(part_scope) as r:
                found = found or r.get(kind) is not None
        if not found:
            problems.append(f'{_shown(key, kind)}: not a registered {regs[0].name} (default '
                            f'scope {part_scope}).{_type_hint(kind, regs[0].name)}')
    return problems


@functools.lru_cache(maxsize=None)
def known_config_keys() -> frozenset:
    """The top-level keys a config may have: the arguments of mmengine's ``Runner`` and
    ``FlexibleRunner``, the keys the runner's module reads from a config (``cfg.get('...')``),
    mmdcs's own (the checkpoint trust options), and the names every config of the installed
    task packages (mmpretrain, mmdet, mmseg) and of this repository's ``configs/`` defines at
    its top level (their own settings and helper variables: ``train_pipeline``,
    ``dataset_type`` ...)."""
    import ast
    import glob

    from mmengine.runner import FlexibleRunner, Runner
    from mmengine.runner import runner as runner_module
    keys = set()
    for cls in (Runner, FlexibleRunner):
        keys.update(inspect.signature(cls.__init__).parameters)
    keys.update(re.findall(r"""cfg(?:\.get\(|\[)['"](\w+)['"]""",
                           inspect.getsource(runner_module)))
    keys.update({TRUST_KEY, PARTIAL_KEY, 'runner_type', 'model_wrapper_cfg', 'tta_model',
                 'tta_pipeline', '_base_'})
    folders = [REPO_CONFIGS]
    for package, _ in set(TASK_PACKAGES.values()):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.origin:
            here = osp.dirname(spec.origin)
            folders += [osp.join(here, '.mim', 'configs'), osp.join(here, 'configs')]
    for folder in folders:
        for path in glob.glob(osp.join(folder, '**', '*.py'), recursive=True):
            try:
                with open(path, encoding='utf-8') as f:
                    tree = ast.parse(f.read())
            except (OSError, SyntaxError, ValueError):
                continue
            for node in tree.body:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                    if isinstance(node, ast.AnnAssign) else []
                keys.update(t.id for t in targets if isinstance(t, ast.Name))
    keys.discard('self')
    return frozenset(keys)


def _typos(a: str, b: str) -> int:
    """The typing slips between two keys: characters inserted, deleted, replaced or two
    neighbours swapped (optimal string alignment distance)."""
    d = [[i + j if not i * j else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[-1][-1]


def _key_problems(cfg) -> List[str]:
    """Top-level keys that nothing reads and that are a typo of a key that something does
    (one slip, two in a key of ten characters or more: ``train_cfgg``, ``optim_wraper``,
    ``modle``): the setting would silently stay at its default. A key that is no typo of a
    known one is kept: a config's own helper variable, as OpenMMLab configs define them."""
    known = known_config_keys()
    problems = []
    for key in cfg:
        if key in known or key.startswith('_'):
            continue
        slips = 1 if len(key) < 10 else 2
        close = sorted((_typos(key, k), k) for k in known if abs(len(k) - len(key)) <= slips)
        if close and close[0][0] <= slips:
            problems.append(f'unknown top-level key {key!r}: nothing reads it (did you mean '
                            f'{close[0][1]!r}? a helper variable of your own: give it another '
                            'name)')
    return problems


def check_config(cfg, scope: str, mode: Optional[str] = None) -> None:
    """The config pre-flight, before anything is built or written: no NaN or infinity
    anywhere; no top-level key that is a typo of a known one (:func:`_key_problems`); for
    a run (``mode`` 'train' or 'test', what ``tools/train.py`` / ``tools/test.py`` build) the
    runner's numbers of the right type and range (:data:`CONFIG_NUMBERS`: epochs, batch size,
    workers, lr, ...) and every ``type`` of the parts it builds registered
    (:data:`CONFIG_TYPES`: optimizer, scheduler, dataset, transforms, hooks, ...). Every
    problem in one :class:`UserError` line."""
    cfg = getattr(cfg, '_cfg_dict', cfg)
    modes = (mode, ) if mode else ()
    problems = _key_problems(cfg) + _number_problems(cfg, modes)
    if mode:
        problems += _type_problems(cfg, scope, modes)
    if problems:
        raise UserError('config: ' + ' | '.join(dict.fromkeys(problems)))


def set_work_dir(cfg, config_path: str, work_dir: Optional[str]) -> None:
    """work_dir priority: CLI > config > ./work_dirs/<config name> (as mmpretrain/mmdet)."""
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs', osp.splitext(osp.basename(config_path))[0])


def enable_amp(cfg) -> None:
    """``--amp``: mixed precision for a single optim wrapper or each wrapper of a dict of them
    (the search's weight and architecture optimizers)."""
    import torch
    if not torch.cuda.is_available():
        raise UserError('--amp needs a CUDA device (mmengine\'s AmpOptimWrapper runs on '
                        'CUDA/NPU/MLU only); drop --amp to train on the CPU.')
    ow = cfg.optim_wrapper
    wrappers = [ow] if ('optimizer' in ow or 'type' in ow and 'constructor' not in ow) else [
        v for v in ow.values() if isinstance(v, dict) and 'optimizer' in v]
    if not wrappers:
        raise UserError('--amp: no optimizer found in optim_wrapper to switch to AMP')
    for w in wrappers:
        if w.get('type', 'OptimWrapper') not in ('OptimWrapper', 'AmpOptimWrapper'):
            raise UserError(f"--amp: optim_wrapper type {w['type']!r} cannot be switched to "
                            'AmpOptimWrapper; set it in the config instead')
        w['type'] = 'AmpOptimWrapper'
        w.setdefault('loss_scale', 'dynamic')


def setup_cpu_distributed(cfg) -> None:
    """DDP without a GPU (gloo). Two traps of mmengine 0.10.7 with a CUDA build of torch on a
    machine without a GPU: ``init_dist('pytorch')`` calls ``torch.cuda.set_device`` (so we start
    the gloo process group ourselves, and the runner skips its own), and ``wrap_model`` passes
    ``device_ids=[LOCAL_RANK]``, which DDP rejects for CPU modules."""
    import torch
    import torch.distributed as dist
    if cfg.get('launcher', 'none') == 'none' or torch.cuda.is_available():
        return
    if not dist.is_initialized():
        dist.init_process_group(backend='gloo')
    cfg.setdefault('env_cfg', {}).setdefault('dist_cfg', {})['backend'] = 'gloo'
    wrapper = cfg.get('model_wrapper_cfg', None) or dict(type='MMDistributedDataParallel')
    wrapper.setdefault('broadcast_buffers', False)
    wrapper['device_ids'] = None
    cfg.model_wrapper_cfg = wrapper


#: whether this process ran a process group (set when :func:`process_group_scope` ends one)
_RAN_PROCESS_GROUP = [False]


@contextmanager
def process_group_scope() -> Iterator[None]:
    """Around the set-up and the run of a tool (``tools/train.py``, ``tools/test.py``): when the
    run ends, the default process group (gloo or NCCL, started by :func:`setup_cpu_distributed`
    or by mmengine) is destroyed, after the runner finished its collectives. After an error it
    is left as it is (destroying it waits for this rank's pending collectives, which the other
    ranks may never join: 40 s, as long as the other rank lived, in a 2-rank test), and
    :func:`run_program` ends the rank at once (its peers then fail on the closed connection).
    Either way :func:`run_program` ends such a rank without the interpreter's shutdown (see
    there for why)."""
    import torch.distributed as dist
    try:
        yield
    except BaseException:
        if dist.is_available() and dist.is_initialized():
            _RAN_PROCESS_GROUP[0] = True
        raise
    if dist.is_available() and dist.is_initialized():
        _RAN_PROCESS_GROUP[0] = True
        dist.destroy_process_group()


def run_program(main) -> None:
    """``main()`` of a tool run as a program (``if __name__ == '__main__'``: every tool), with
    SIGTERM ending it as Ctrl-C does, through its clean-ups (:func:`terminate_as_exit`). A
    process that ran a process group (:func:`process_group_scope`) then leaves with
    ``os._exit`` (exit code kept, output flushed, a traceback printed first) instead of the
    interpreter's shutdown.

    Why: a DDP rank on gloo (CPU) ended by the interpreter's shutdown was aborted now and then
    by libstdc++ (``terminate called without an active exception``, exit -6): 2 runs in 10 of
    ``tools/dist_train.sh`` (2 ranks, 1 epoch of the tiny digits set, beside a busy process on 2
    cores), 0 in 10 with this ending. The C++
    backtrace: one of gloo's worker threads (``ProcessGroupGloo::runLoop``) was still destroying
    the last backward's allreduce work, which holds a Python object (the ``contextvars``
    context torch.autograd stashes in the thread-local state during ``backward``); its decref
    waits for the GIL, which a finalizing interpreter never hands out, and the thread is
    unwound through a noexcept destructor. ``destroy_process_group`` does not join these
    threads while a DDP model has used the group (the worker threads outlive it), so no
    Python-level teardown can order it. Nothing is lost by skipping the shutdown: mmengine
    closes its log files and visualizer in ``after_run`` and registers no atexit handler;
    logging and stdio are flushed here."""
    try:
        with terminate_as_exit():
            main()
    except SystemExit as e:
        if not _RAN_PROCESS_GROUP[0]:
            raise
        code = e.code
    except BaseException:
        if not _RAN_PROCESS_GROUP[0]:
            raise
        import traceback
        traceback.print_exc()
        code = 1
    else:
        if not _RAN_PROCESS_GROUP[0]:
            return
        code = 0
    if not isinstance(code, int):  # sys.exit('message') / sys.exit(None)
        if code is not None:
            print(code, file=sys.stderr)
        code = 0 if code is None else 1
    import logging
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def build_runner(cfg):
    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner
    if 'runner_type' not in cfg:
        return Runner.from_cfg(cfg)
    return RUNNERS.build(cfg)


def _registry_hint(message: str) -> str:
    """Suggest close names for mmengine's "X is not in the <scope>::<name> registry"."""
    try:
        key = message.split(' is not in the ')[0].strip("'\" ")
        where = message.split(' is not in the ')[1].split(' registry')[0]
        reg_name = where.split('::')[1]
    except IndexError:
        return ''
    return _type_hint(key, reg_name)


def _type_hint(key: str, reg_name: str) -> str:
    """Close names of the type ``key`` among the registries named ``reg_name`` of every scope
    (only ``mmdcs``'s for ``mmdcs.Name``)."""
    from mmengine.registry import Registry
    import mmengine.registry as roots
    scope, _, name = key.rpartition('.')
    names = set()
    for obj in vars(roots).values():
        if isinstance(obj, Registry) and obj.name == reg_name:
            stack = [obj]
            while stack:
                reg = stack.pop()
                reg.import_from_location()
                if not scope or reg.scope == scope:
                    names.update(f'{reg.scope}.{k}' for k in reg.module_dict)
                stack.extend(reg.children.values())
    close = difflib.get_close_matches(key, sorted(names), n=5, cutoff=0.5)
    hint = f' Close matches: {", ".join(close)}.' if close else ''
    if scope == 'mmdcs' and not close:
        mine = sorted(n for n in names if n.startswith('mmdcs.'))
        hint += f' Registered mmdcs {reg_name}s: {", ".join(mine) or "none"}.'
    return hint


def input_file_errors() -> tuple:
    """The exception types of mmdcs's own input files: a subnet description that cannot be
    read or does not fit (``SubnetError``), an OFB arch file likewise (``ArchFileError``), a
    checkpoint refused as unsafe or not readable (``CheckpointError``), input data a model
    cannot take (``InputError``: e.g. an image size), and a config value found not to work when
    training starts (``ConfigError``: e.g. ``t_warm`` ≥ ``max_epochs``), a budget that cannot
    be met (``BudgetError``: the target, the floor and the ceiling)."""
    return (SubnetError, ArchFileError, CheckpointError, InputError, ConfigError, BudgetError)


def add_trust_flag(parser) -> None:
    """The ``--trust-checkpoint`` flag of every tool that reads checkpoints."""
    parser.add_argument(TRUST_FLAG, action='store_true',
                        help='also load checkpoints that hold objects other than weights '
                        '(unpickling such a file can run code: only for files you trust)')


def set_checkpoint_trust(args, cfg=None, complete: bool = False, resume: bool = False) -> None:
    """Which checkpoints may fall back to the unsafe loader (see mmdcs.utils.checkpoint):
    all of them with ``--trust-checkpoint`` or ``trust_checkpoint = True`` in the config; for
    the run ``tools/train.py`` resumes (``resume=True``, and ``cfg.resume`` set) the
    checkpoints a run of this user recorded in its work dir's manifest when it saved them, and
    only those lying directly in that work dir (no other tool trusts the manifest, whatever
    its config's ``resume`` says). ``allow_partial_checkpoint = True`` in the config lets a load
    fill part of the weights it is meant to fill; ``complete`` (tools/test.py): a checkpoint
    loaded into the whole model must fit all of it. Setting it tells the checkpoint loader
    that an mmdcs tool is in charge: a refusal names the tool's flag (otherwise, e.g. under
    mmdet's own tools/train.py, the config key). Reset when :func:`user_errors` exits."""
    in_cfg = bool(cfg.get(TRUST_KEY, False)) if cfg is not None else False
    hint = f'{TRUST_FLAG} (or {TRUST_KEY}=True in the config)' if cfg is not None else \
        TRUST_FLAG
    resume_dir = cfg.get('work_dir', None) if resume and cfg is not None and cfg.get(
        'resume') else None
    partial = bool(cfg.get(PARTIAL_KEY, False)) if cfg is not None else False
    trust_checkpoints(all=bool(getattr(args, 'trust_checkpoint', False)) or in_cfg,
                      dirs=[resume_dir] if resume_dir else [], hint=hint, partial=partial,
                      complete=complete)


# ----------------------------------------------------------------------------- build errors
#: the exceptions a constructor raises for a bad argument value (checked where the value is
#: used: the backbone, the gate, the hook, ...): turned into one line naming the config key
#: when they are raised while mmengine builds a part of the config
CONSTRUCTION_ERRORS = (ValueError, TypeError, AssertionError)


def _is_build_frame(frame) -> bool:
    code = frame.f_code
    return code.co_name == 'build_from_cfg' and 'mmengine' in code.co_filename


def _traceback_frames(exc: BaseException) -> List[Any]:
    frames, tb = [], exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def _root_config(frames) -> Any:
    """The whole config the failing build belongs to: the runner's (``Runner.cfg``, or the
    ``cfg`` of ``Runner.from_cfg``), else the one :func:`load_config` loaded."""
    def as_dict(cfg):  # mmengine's Config wraps a ConfigDict
        cfg = getattr(cfg, '_cfg_dict', cfg)
        return cfg if isinstance(cfg, dict) else None

    for frame in frames:
        owner = frame.f_locals.get('self', None)
        runner = any(c.__name__ in ('Runner', 'FlexibleRunner') for c in type(owner).__mro__)
        if runner and as_dict(getattr(owner, 'cfg', None)) is not None:
            return as_dict(owner.cfg)
        if frame.f_code.co_name == 'from_cfg' and as_dict(frame.f_locals.get('cfg')) is not None:
            return as_dict(frame.f_locals['cfg'])
    return as_dict(_LOADED_CONFIG[0])


def _find_path(container, target) -> Optional[str]:
    """The dotted key of ``target`` (a dict) inside ``container`` (dicts and lists): by
    equality first, then by its ``type``."""
    def walk(node, path, match):
        items = node.items() if isinstance(node, dict) else enumerate(node) \
            if isinstance(node, (list, tuple)) else ()
        for k, v in items:
            sub = f'{path}.{k}' if path else str(k)
            if isinstance(v, dict) and match(v):
                return sub
            if isinstance(v, (dict, list, tuple)):
                found = walk(v, sub, match)
                if found is not None:
                    return found
        return None

    if not isinstance(container, (dict, list, tuple)):
        return None
    found = walk(container, '', lambda v: v == target)
    kind = target.get('type', None) if isinstance(target, dict) else None
    if found is None and kind is not None:
        found = walk(container, '', lambda v: v.get('type', None) == kind)
    return found


def _leaf_keys(cfg, prefix: str = '') -> List[str]:
    keys = []
    for k, v in cfg.items():
        if not isinstance(k, str) or k in ('type', '_scope_'):
            continue
        keys.append(prefix + k)
        if isinstance(v, dict) and 'type' not in v:
            keys += _leaf_keys(v, f'{prefix}{k}.')
    return keys


def _argument_named(message: str, cfg: dict, obj_cls) -> Optional[str]:
    """The argument of ``cfg`` (a config key, or a parameter of the class being built) that
    the error message names: a dotted key written out in full wins, else the one named
    first."""
    candidates = set(_leaf_keys(cfg))
    try:
        candidates |= {name for name, p in inspect.signature(obj_cls).parameters.items()
                       if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    except (TypeError, ValueError):
        pass
    best = None
    for key in candidates:
        full = re.search(rf'(?<![\w.]){re.escape(key)}(?![\w])', message)
        last = key.rsplit('.', 1)[-1]
        hit = full or re.search(rf'(?<![\w.]){re.escape(last)}(?![\w])', message)
        if hit is None:
            continue
        rank = (0 if full and '.' in key else 1, hit.start(), -len(key))
        if best is None or rank < best[0]:
            best = (rank, key)
    return None if best is None else best[1]


def _string_for_a_number(exc: BaseException, cfg: dict, obj_cls) -> Optional[str]:
    """The argument of ``cfg`` that is a string where the class's default is a number (an
    empty or non-numeric ``--cfg-options`` value), when the message does not name it but says
    a string was computed with (``'>' not supported between instances of 'str' and 'int'``)."""
    if not isinstance(exc, (TypeError, ValueError)) or not re.search(r"\bstr(ing)?\b",
                                                                     str(exc)):
        return None
    try:
        params = inspect.signature(obj_cls).parameters
    except (TypeError, ValueError):
        return None
    found = [k for k, v in cfg.items() if isinstance(v, str) and k in params and isinstance(
        params[k].default, (int, float)) and not isinstance(params[k].default, bool)]
    return found[0] if len(found) == 1 else None


def _lookup(cfg, dotted: str):
    node = cfg
    for part in dotted.split('.'):
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return None
    return node


def config_origin(exc: BaseException) -> Optional[str]:
    """Where in the config an error raised while mmengine built a part of it comes from:
    ``'model.backbone.tau = -1.0'``, ``'custom_hooks.0.start = 0'``, ``'model.backbone
    (mmdcs.Swin)'``; None when it was not raised inside a registry build."""
    return _origin(exc)[0]


def _origin(exc: BaseException) -> Tuple[Optional[str], Any]:
    """(:func:`config_origin`'s answer, the config value it names or None)."""
    frames = _traceback_frames(exc)
    builds = [f for f in frames if _is_build_frame(f)]
    if not builds:
        return None, None
    root = _root_config(frames)
    path, outer = None, root
    for frame in builds:
        cfg = frame.f_locals.get('cfg', None)
        if not isinstance(cfg, dict):
            continue
        sub = _find_path(outer, cfg) if outer is not None else None
        if sub is None and path is None:
            sub = str(cfg.get('type', '?'))
        if sub is not None:
            path = sub if path is None else f'{path}.{sub}'
        outer = cfg
    inner = builds[-1].f_locals
    cfg, obj_cls = inner.get('cfg', None), inner.get('obj_cls', None)
    if not isinstance(cfg, dict):
        return path, None
    arg = _argument_named(str(exc), cfg, obj_cls) or _string_for_a_number(exc, cfg, obj_cls)
    if arg is None:
        kind = cfg.get('type', None)
        return (f'{path} (type={kind!r})' if isinstance(kind, str) else path), None
    value = _lookup(cfg, arg)
    where = f'{path}.{arg}'
    return (where if value is None or isinstance(value, dict) else f'{where} = {value!r}'), value


def _explain(exc: BaseException, value: Any) -> str:
    """The one-line reason of a construction error: a string where the constructor computes
    with a number (an empty or non-numeric ``--cfg-options`` value: ``tau=``, ``tau=abc``) is
    said to be that, with the original message in brackets."""
    text = _one_line(exc)
    if isinstance(value, str) and (re.search(r"\bstr(ing)?\b", text) and re.search(
            r'not supported between|unsupported operand|must be real number|convert string|'
            r"can't multiply|not str\b|must be .*not 'str'|could not convert", text) or
            re.search(r'must be (a finite number|an integer)\b', text)):
        what = 'the value is empty' if not value.strip() else f'{value!r} is not a number'
        return f'{what}; a number is expected here ({text})'
    return text


def _one_line(exc: BaseException) -> str:
    text = ' '.join(str(exc).split())
    return text or f'{type(exc).__name__} (invalid value)'


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn input errors into one clear line on stderr and exit code 2 (no traceback): a
    :class:`UserError`, a bad subnet or arch file (:func:`input_file_errors`, also when met
    while the runner builds the model), a checkpoint refused as unsafe or unreadable, a value a
    constructor refuses while mmengine builds the config (:func:`config_origin` names the config
    key: ``model.backbone.tau``, ``model.cost.weight``, a hook's ``start``, an unknown ``arch``
    ...; a string where a number is expected is said to be empty or not a number), a missing
    file, a path that cannot be written or read (an ``OSError`` naming it: read-only, a file
    where a directory is expected), an unknown registry type. A refused run removes what it
    created in the paths given to :func:`watch_new_paths` (its work dir). The checkpoint trust
    a tool set is undone on exit. ``MMDCS_TRACEBACK=1`` re-raises instead (for debugging)."""
    watched = len(_WATCHED)
    try:
        with trust_scope():
            yield
    except UserError as e:
        _refused(str(e))
    except CONSTRUCTION_ERRORS as e:
        if isinstance(e, input_file_errors()):
            _refused(str(e))
        where, value = _origin(e)
        if where is None or _debugging():
            raise
        _refused(f'{where}: {_explain(e, value)}')
    except FileNotFoundError as e:
        # a file the config or the command line names (a checkpoint, an arch/subnet file, a
        # teacher); the message names it
        _refused(str(e) if not e.filename else f'file not found: {e.filename}')
    except OSError as e:
        # a path the user named that cannot be written or read (a read-only directory, a file
        # where a directory is expected, a full disk): the path and the reason
        if not e.filename or _debugging():
            raise
        other = f' -> {e.filename2}' if getattr(e, 'filename2', None) else ''
        _refused(f'{e.filename}{other}: {e.strerror or e}')
    except KeyError as e:
        msg = str(e.args[0]) if e.args else str(e)
        if ' is not in the ' in msg and ' registry' in msg:
            _refused(f'unknown type: {msg.split(". Please")[0]}.{_registry_hint(msg)} '
                     "Use type='mmdcs.Name' for mmdcs modules.")
        raise
    finally:
        del _WATCHED[watched:]
        if not _WATCHED:
            _MANAGED_BEFORE.clear()


class Terminated(SystemExit):
    """The process received SIGTERM (exit code 128 + 15, as a shell reports it)."""


@contextmanager
def terminate_as_exit() -> Iterator[None]:
    """While the block runs (a tool run as a program: :func:`run_program`), SIGTERM — what
    ``kill``, a batch scheduler or ``torchrun`` send to stop a process — raises
    :class:`Terminated` (a ``SystemExit``) where the program is, so that it ends as Ctrl-C
    ends it: every ``finally`` and clean-up runs (a result's or checkpoint's temporary file or
    directory is removed, :mod:`mmdcs.utils.files`), instead of the process vanishing with its
    partial files. A second SIGTERM ends it at once. The previous handler is restored on exit
    (only the main thread can set one; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise Terminated(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _debugging() -> bool:
    return os.environ.get('MMDCS_TRACEBACK', '') not in ('', '0')


def _refused(message: str) -> None:
    """The end of a refused run: what it created is removed (:func:`watch_new_paths`), one
    line on stderr, exit code 2."""
    _remove_new_paths()
    print(f'error: {message}', file=sys.stderr)
    sys.exit(2)


# ----------------------------------------------------------------------------- refused runs
#: (path, entries that existed, or None when the path itself is new) of :func:`watch_new_paths`
_WATCHED: List[Tuple[str, Optional[set]]] = []
#: the mmengine instances that existed when :func:`watch_new_paths` was called
_MANAGED_BEFORE: List[set] = []
#: files whose presence means that a run produced results: its files are then kept
RESULT_SUFFIXES = ('.pth', '.safetensors', 'last_checkpoint')


def watch_new_paths(path: str) -> None:
    """Remember the state of the directory ``path`` (a work dir) so that a run refused later
    (exit 2, :func:`user_errors`) removes what it created there: the highest missing ancestor
    of ``path`` if it did not exist, else the new entries inside it (mmengine's timestamped log
    directory). Nothing is removed once a checkpoint was written (:data:`RESULT_SUFFIXES`), nor
    for a traceback (kept for debugging). Reset by :func:`user_errors`."""
    path = osp.abspath(path)
    top = path
    while not osp.lexists(osp.dirname(top)) and osp.dirname(top) != top:
        top = osp.dirname(top)
    if not osp.lexists(top):
        _WATCHED.append((top, None))
    elif osp.isdir(path):
        _WATCHED.append((path, set(os.listdir(path))))
    _MANAGED_BEFORE[:] = [_managed_instances()]


def _managed_classes() -> list:
    """mmengine's ``ManagerMixin`` classes (its logger, message hub, visualizers, default
    scope), each with its own instance registry."""
    from mmengine.utils import ManagerMixin
    out, todo = [], [ManagerMixin]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


def _managed_instances() -> set:
    return {(cls, name) for cls in _managed_classes() for name in cls._instance_dict}


def _forget_new_instances() -> None:
    """Drop the mmengine instances (``MMLogger``, visualizers, ...) created since
    :func:`watch_new_paths`: they are named after the run's timestamp and hold its log file and
    ``vis_data`` directory, which the refusal removed; a later run of the same config within
    the same second, in this process, would get them back and write into the removed paths."""
    if not _MANAGED_BEFORE:
        return
    before = _MANAGED_BEFORE.pop()
    for cls in _managed_classes():
        for name in [n for n in cls._instance_dict if (cls, n) not in before]:
            instance = cls._instance_dict.pop(name)
            for handler in list(getattr(instance, 'handlers', [])):  # a logger's files
                handler.close()
                instance.removeHandler(handler)


def _holds_results(paths: List[str]) -> bool:
    for p in paths:
        if osp.isfile(p):
            if p.endswith(RESULT_SUFFIXES):
                return True
            continue
        for _, _, files in os.walk(p):
            if any(f.endswith(RESULT_SUFFIXES) for f in files):
                return True
    return False


def _remove_new_paths() -> None:
    watched, _WATCHED[:] = list(_WATCHED), []
    if watched:
        _forget_new_instances()
    for path, before in watched:
        if before is None:
            new = [path] if osp.lexists(path) else []
        elif osp.isdir(path):
            new = [osp.join(path, n) for n in os.listdir(path) if n not in before]
        else:
            new = []
        if not new or _holds_results(new):
            continue
        for p in new:
            if osp.isdir(p) and not osp.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                try:
                    os.remove(p)
                except OSError:
                    pass
