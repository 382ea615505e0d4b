"""What ``tools/train.py`` and ``tools/test.py`` share: config loading, picking the task from the
config's ``default_scope``, pre-flight checks with clear errors, CPU/DDP set-up, building the
runner.

One ``tools/train.py`` serves mmpretrain, mmdet and mmseg configs: they all train through
mmengine's ``Runner``; what differs is which package registers the config's unprefixed types.
"""
import difflib
import importlib
import os
import os.path as osp
import sys
from contextlib import contextmanager
from typing import Iterator, List, Optional, Tuple

from mmdcs.peers.ofb.arch import ArchFileError
from mmdcs.selection import SubnetError
from mmdcs.selection.budget import BudgetError
from mmdcs.utils import register_all_modules
from mmdcs.utils.compat import patch_mmdet_ssd_head

#: default_scope -> (python package, pip requirement) of the task
TASK_PACKAGES = {
    'mmpretrain': ('mmpretrain', 'mmpretrain==1.2.0'),
    'mmdet': ('mmdet', 'mmdet==3.3.0'),
    'mmseg': ('mmseg', 'mmsegmentation==1.2.2'),
    'mmdcs': ('mmpretrain', 'mmpretrain==1.2.0'),
}


class UserError(Exception):
    """A problem with the user's input (config, paths, arguments): reported in one message."""


def load_config(path: str, cfg_options: Optional[dict] = None):
    """Load a config file, failing with a clear message when the path is wrong."""
    from mmengine.config import Config
    if not osp.isfile(path):
        here = osp.abspath(path)
        hint = ''
        repo_configs = osp.join(osp.dirname(osp.dirname(osp.dirname(__file__))), 'configs')
        name = osp.basename(path)
        if osp.isdir(repo_configs):
            matches = [osp.relpath(osp.join(d, f)) for d, _, fs in os.walk(repo_configs)
                       for f in fs if f == name]
            if matches:
                hint = f' Did you mean: {", ".join(matches[:3])}?'
        raise UserError(f'config file not found: {path} (looked at {here}). mmdcs configs are '
                        f'under configs/, e.g. configs/demo/.{hint}')
    cfg = Config.fromfile(path)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    return cfg


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
    if scope == 'mmdet':
        patch_mmdet_ssd_head(import_if_needed=True)
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
    if 'digit' in path:
        return ('build the embedded demo data with `python tools/data/build_digits.py '
                '--out data/digits` (the README commands do this for you)')
    return ('download the dataset to that place (see the README, "Data"), or point the config '
            'at it with --cfg-options')


def check_data_paths(cfg, dataloaders=('train_dataloader', 'val_dataloader',
                                       'test_dataloader')) -> None:
    """Fail early, and clearly, when a dataset root, annotation file or image folder is
    missing (instead of an error deep inside a dataset class)."""
    problems: List[str] = []
    for loader_key in dataloaders:
        loader = cfg.get(loader_key, None)
        if not isinstance(loader, dict):
            continue
        for key, ds in _iter_datasets(loader.get('dataset'), f'{loader_key}.dataset'):
            root = ds.get('data_root', None)
            if root and not osp.isdir(root):
                problems.append(f'{key}.data_root = {root!r} does not exist; {_data_hint(root)}')
                continue
            ann = ds.get('ann_file', None)
            if isinstance(ann, str) and ann:
                path = ann if (osp.isabs(ann) or not root) else osp.join(root, ann)
                if not osp.exists(path):
                    problems.append(f'{key}.ann_file: {path!r} does not exist; {_data_hint(path)}')
    if problems:
        raise UserError('missing data:\n  ' + '\n  '.join(dict.fromkeys(problems)))


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


def build_runner(cfg):
    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner
    if 'runner_type' not in cfg:
        return Runner.from_cfg(cfg)
    return RUNNERS.build(cfg)


def _registry_hint(message: str) -> str:
    """Suggest close names for mmengine's "X is not in the <scope>::<name> registry"."""
    from mmengine.registry import Registry
    import mmengine.registry as roots
    try:
        key = message.split(' is not in the ')[0].strip("'\" ")
        where = message.split(' is not in the ')[1].split(' registry')[0]
        reg_name = where.split('::')[1]
    except IndexError:
        return ''
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
    """The exception types of mmdcs's own inputs: a subnet description that cannot be
    read or does not fit (``SubnetError``), an OFB arch file likewise (``ArchFileError``), a
    budget that cannot be met (``BudgetError``: the target, the floor and the ceiling)."""
    return (SubnetError, ArchFileError, BudgetError)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn input errors into one clear line on stderr and exit code 2 (no traceback): a
    :class:`UserError`, a bad subnet or arch file (:func:`input_file_errors`, also when met
    while the runner builds the model), a missing file, an unknown registry type."""
    try:
        yield
    except UserError as e:
        print(f'error: {e}', file=sys.stderr)
        sys.exit(2)
    except ValueError as e:
        if not isinstance(e, input_file_errors()):
            raise
        print(f'error: {e}', file=sys.stderr)
        sys.exit(2)
    except FileNotFoundError as e:
        # a file the config or the command line names (a checkpoint, an arch/subnet file, a
        # teacher); the message names it
        msg = str(e) if not e.filename else f'file not found: {e.filename}'
        print(f'error: {msg}', file=sys.stderr)
        sys.exit(2)
    except KeyError as e:
        msg = str(e.args[0]) if e.args else str(e)
        if ' is not in the ' in msg and ' registry' in msg:
            print(f'error: unknown type: {msg.split(". Please")[0]}.{_registry_hint(msg)} '
                  "Use type='mmdcs.Name' for mmdcs modules.", file=sys.stderr)
            sys.exit(2)
        raise
