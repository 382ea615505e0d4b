"""Compatibility of the pinned OpenMMLab stack with torch >= 2.6, applied in one place.

torch >= 2.6 loads with ``weights_only=True`` by default, and mmengine 0.10.7 (the newest release)
calls ``torch.load`` without the argument when it reads a local checkpoint (``--resume``,
``load_from``, ``init_cfg=dict(type='Pretrained')``). Its checkpoints hold Python objects
(``HistoryBuffer``, numpy arrays) that torch's default allowlist refuses. Instead of loading
every file with ``weights_only=False`` (which lets a downloaded file run code), we register
:func:`mmdcs.utils.checkpoint.load_checkpoint_file` for local paths: weights-only loading with
an allowlist of the exact data types mmengine checkpoints hold, safetensors files, and one-line
errors for a refused or unreadable file (see that module). Every other scheme mmengine's
``CheckpointLoader`` knows is re-registered (:data:`SCHEMES`): URLs (``http(s)://``, and
``torchvision://``, ``open-mmlab://``, ``mmcls://``, which resolve to one or, for open-mmlab, to a
local file under ``$MMENGINE_HOME``) are downloaded as before and then loaded the same way;
``pavi://``, ``s3://`` / ``petrel://`` and a scheme registered by anything else are refused in one
line (their loaders would unpickle the file without the checks). The message hub's
``HistoryBuffer`` is made to pickle its data only (:func:`patch_history_buffer_pickling`), so
that the training checkpoints mmdcs writes load weights-only.

Two more patches of mmengine's checkpoint handling, for every Runner (mmdcs's tools and mmdet's /
mmseg's own): its ``load_state_dict`` (every load of a checkpoint into a module: ``load_from``,
``--resume``, ``tools/test.py``, ``init_cfg`` Pretrained) refuses, in one line, a load that fills
few of the weights it is meant to fill or fills them with tensors of another shape
(:func:`mmdcs.utils.checkpoint.check_loaded`), where mmengine only logs a warning; its
``save_checkpoint`` and ``CheckpointHook``'s ``last_checkpoint`` write atomically and never through
a symlink (:mod:`mmdcs.utils.files`), and each checkpoint's tag is recorded in the directory's
manifest (:func:`mmdcs.utils.checkpoint.record_checkpoint`), which train.py's ``--resume`` trusts;
the Runner's other files never go through a planted link either (:func:`patch_mmengine_run_files`:
the config dump, the run's log directory).
A resumed run's optimizer state must be this run's (:mod:`mmdcs.utils.optim_state`): another
optimizer type or model is one line, not a failure at the first step.

mmdet 3.3.0's ``SSDHead`` cannot predict (``BaseDenseHead`` reads ``self.loss_cls``, which
``SSDHead`` never sets: open-mmlab/mmdetection#11780, fix #11524 unmerged), so SSDLite validation
and testing crash; :func:`patch_mmdet_ssd_head` sets ``SSDHead.loss_cls = None``, which selects the
softmax branch SSD had before mmdet 3.3.

All are applied in one place, :func:`apply_compat_patches`, which :mod:`mmdcs.registry` calls
when it is imported (i.e. whenever an mmdcs module is built or an mmdcs tool runs). The SSDHead
patch does not depend on the order of imports: if mmdet's ``ssd_head`` module is not imported
yet, an import hook patches it the moment it is.
"""
import importlib.abc
import os
import os.path as osp
import sys

from mmdcs.selection.jsonio import (read_json)
from mmdcs.selection.utils import (search_state_keys)
from .checkpoint import (UnreadableCheckpointError, check_loaded, load_checkpoint_file,
                         record_checkpoint)
from .files import (atomic_write, new_run_dir, replacing)
from .optim_state import (patch_optimizer_state_check)

_PATCHED = False


def _load_from_local(filename, map_location=None):
    return load_checkpoint_file(filename, map_location)


def _load_from_http(filename, map_location=None, model_dir=None):
    """A URL: downloaded into torch.hub's cache as mmengine does (rank 0 first), then loaded
    through the same safe path as a local file (mmengine's loader passes
    ``weights_only=False``)."""
    from urllib.parse import urlparse

    import torch
    import torch.hub
    from mmengine.dist import get_dist_info
    model_dir = model_dir or osp.join(torch.hub.get_dir(), 'checkpoints')
    cached = osp.join(model_dir, osp.basename(urlparse(filename).path))
    rank, world_size = get_dist_info()
    for turn in (0, 1):
        if (rank == 0) == (turn == 0) and not osp.exists(cached):
            os.makedirs(model_dir, exist_ok=True)
            torch.hub.download_url_to_file(filename, cached, None, progress=rank == 0)
        if world_size > 1 and turn == 0:
            torch.distributed.barrier()
    return _load_from_local(cached, map_location)


def _zoo_url(filename: str, urls: dict, listed_in: str) -> str:
    """The URL (or path) a model-zoo name (``SCHEME://NAME``) stands for, one line if none."""
    name = filename.split('://', 1)[1]
    url = urls.get(name)
    if not isinstance(url, str) or not url:
        raise UnreadableCheckpointError(f'{filename}: no model named {name!r} in {listed_in}')
    return url


def _load_from_torchvision(filename, map_location=None):
    """``torchvision://NAME`` (``modelzoo://NAME``): torchvision's URL of NAME, downloaded and
    loaded safely (:func:`_load_from_http`)."""
    from mmengine.runner.checkpoint import get_torchvision_models
    url = _zoo_url(filename, get_torchvision_models(), "torchvision's model list")
    return _load_from_http(url, map_location)


def _load_from_openmmlab(filename, map_location=None):
    """``open-mmlab://NAME`` (``openmmlab://NAME``): the URL or the file (under mmengine's home,
    ``$MMENGINE_HOME``) that mmengine's list of OpenMMLab models, or the user's
    ``$MMENGINE_HOME/open_mmlab.json``, gives NAME, loaded safely (mmengine's own loader calls
    ``torch.load`` on a local one)."""
    import mmengine
    from mmengine.runner.checkpoint import _get_mmengine_home
    home = _get_mmengine_home()
    urls = read_json(osp.join(mmengine.__path__[0], 'hub', 'openmmlab.json'),
                     UnreadableCheckpointError, 'model list')
    deprecated = read_json(osp.join(mmengine.__path__[0], 'hub', 'deprecated.json'),
                           UnreadableCheckpointError, 'model list')
    user_list = osp.join(home, 'open_mmlab.json')
    if osp.exists(user_list):
        urls.update(read_json(user_list, UnreadableCheckpointError, 'model list'))
    scheme, name = filename.split('://', 1)
    if isinstance(deprecated.get(name), str):  # an old name of the model
        name = deprecated[name]
    url = _zoo_url(f'{scheme}://{name}', urls, f'the OpenMMLab model list (and {user_list})')
    if url.startswith(('http://', 'https://')):
        return _load_from_http(url, map_location)
    return load_checkpoint_file(osp.join(home, url), map_location)


def _load_from_mmcls(filename, map_location=None):
    """``mmcls://NAME``: mmengine's URL of the mmcls model, downloaded and loaded safely, its
    backbone's weights kept (as mmengine does)."""
    import mmengine
    from mmengine.runner.checkpoint import _process_mmcls_checkpoint
    urls = read_json(osp.join(mmengine.__path__[0], 'hub', 'mmcls.json'),
                     UnreadableCheckpointError, 'model list')
    return _process_mmcls_checkpoint(
        _load_from_http(_zoo_url(filename, urls, "mmengine's mmcls model list"), map_location))


def _load_from_refused(filename, map_location=None):
    """A source no safe loader reads (``pavi://``, the ``s3://`` / ``petrel://`` storage
    backends, a scheme registered by another package): one line."""
    raise UnreadableCheckpointError(
        f'{filename}: checkpoints from {filename.split("://", 1)[0]}:// are not read (mmdcs reads '
        'local files and http(s):// downloads safely, and the model zoos that resolve to '
        'them: torchvision://, open-mmlab://, mmcls://); copy the file to a local path')


#: prefix → mmdcs's loader, for every scheme mmengine 0.10.7's CheckpointLoader knows
#: (mmengine/runner/checkpoint.py); a scheme without one here is refused
#: (:func:`_checkpoint_loader`)
SCHEMES = {'': _load_from_local, 'http://': _load_from_http, 'https://': _load_from_http,
           'torchvision://': _load_from_torchvision, 'modelzoo://': _load_from_torchvision,
           'open-mmlab://': _load_from_openmmlab, 'openmmlab://': _load_from_openmmlab,
           'mmcls://': _load_from_mmcls, 'pavi://': _load_from_refused,
           r'(\S+\:)?s3://': _load_from_refused, r'(\S+\:)?petrel://': _load_from_refused}


def _checkpoint_loader(cls, path):
    """``CheckpointLoader._get_checkpoint_loader``: the loader of ``path``'s scheme, which is one
    of :data:`SCHEMES`'s (a scheme registered by anything else is refused: its loader would
    unpickle the file without the checks)."""
    loader = _ORIGINAL['get_checkpoint_loader'].__func__(cls, path)
    safe = set(SCHEMES.values())
    return loader if loader in safe else _load_from_refused


def patch_history_buffer_pickling() -> None:
    """mmengine's ``HistoryBuffer`` (the message hub's logged scalars, saved in every training
    checkpoint) pickles its class's statistics functions with it (``getattr(HistoryBuffer,
    'min')`` ...), which a weights-only load must refuse. Pickle only its data instead: the
    maximum length and the value / count histories as lists of numbers; the functions are the
    class's anyway (idempotent)."""
    import numpy as np
    from mmengine.logging.history_buffer import HistoryBuffer
    if getattr(HistoryBuffer, '_mmdcs_plain_state', False):
        return
    keys = ('max_length', '_log_history', '_count_history')

    def __getstate__(self) -> dict:
        return dict(max_length=self.max_length, _log_history=self._log_history.tolist(),
                    _count_history=self._count_history.tolist())

    def __setstate__(self, state: dict) -> None:
        # only the data: mmengine's own __setstate__ would merge saved functions into the
        # class's statistics methods (a file could replace them); an older file's are dropped
        self._set_default_statistics()
        self.max_length = int(state.get('max_length', 1000000))
        for key in keys[1:]:
            self.__dict__[key] = np.array(state.get(key, []))

    HistoryBuffer.__getstate__ = __getstate__
    HistoryBuffer.__setstate__ = __setstate__
    HistoryBuffer._mmdcs_plain_state = True


def _load_state_dict(module, state_dict, strict=False, logger=None):
    """mmengine 0.10.7's ``load_state_dict`` (the one every load of a checkpoint into a module
    goes through: ``load_from``, ``--resume``, ``tools/test.py``, ``init_cfg`` Pretrained), plus
    :func:`mmdcs.utils.checkpoint.check_loaded`: a non-strict load that fills few of the weights
    it is meant to fill, or fills some with tensors of another shape (in a complete load: leaves
    one out, or brings another network's), is refused in one line instead of a warning in the
    log, the state the model's kind keeps of a search aside
    (:func:`mmdcs.selection.search_state_keys`). ``strict=True`` raises mmengine's
    ``RuntimeError`` as before."""
    import logging

    from mmengine.dist import get_dist_info
    from mmengine.logging import print_log
    from mmengine.model import BaseModel, BaseTTAModel, is_model_wrapper
    unexpected_keys, missing_keys, err_msg = [], [], []
    metadata = getattr(state_dict, '_metadata', None)
    state_dict = state_dict.copy()
    if metadata is not None:
        state_dict._metadata = metadata
    target = module
    while is_model_wrapper(target) or isinstance(target, BaseTTAModel):
        target = target.module
    numel = {k: v.numel() for k, v in target.state_dict().items()
             if 'num_batches_tracked' not in k}
    loaded_keys = list(state_dict.keys())

    def load(module, local_state_dict, prefix=''):
        if is_model_wrapper(module) or isinstance(module, BaseTTAModel):
            module = module.module
        local_metadata = {} if metadata is None else metadata.get(prefix[:-1], {})
        module._load_from_state_dict(local_state_dict, prefix, local_metadata, True,
                                     missing_keys, unexpected_keys, err_msg)
        for name, child in module._modules.items():
            if child is not None:
                child_prefix = prefix + name + '.'
                child_state_dict = {k: v for k, v in local_state_dict.items()
                                    if k.startswith(child_prefix)}
                load(child, child_state_dict, child_prefix)
        incompatible_keys = _IncompatibleKeys(missing_keys, unexpected_keys)
        for hook in getattr(module, '_load_state_dict_post_hooks', {}).values():
            out = hook(module, incompatible_keys)
            assert out is None, ('Hooks registered with ``register_load_state_dict_post_hook`` '
                                 'are not expected to return new values')

    load(module, state_dict)
    load = None  # break load->load reference cycle
    missing_keys = [key for key in missing_keys if 'num_batches_tracked' not in key]
    size_errors = list(err_msg)
    if not strict:  # a refused load is one line, without mmengine's list of every key first
        check_loaded(type(target).__name__ if not isinstance(target, BaseModel) else
                     f'the model ({type(target).__name__})', numel, loaded_keys, missing_keys,
                     unexpected_keys, size_errors, whole_model=isinstance(target, BaseModel),
                     search_state=search_state_keys(target))
    if unexpected_keys:
        err_msg.append(f'unexpected key in source state_dict: {", ".join(unexpected_keys)}\n')
    if missing_keys:
        err_msg.append(f'missing keys in source state_dict: {", ".join(missing_keys)}\n')
    rank, _ = get_dist_info()
    if len(err_msg) > 0 and rank == 0:
        err_msg.insert(0, 'The model and loaded state dict do not match exactly\n')
        text = '\n'.join(err_msg)
        if strict:
            raise RuntimeError(text)
        print_log(text, logger=logger, level=logging.WARNING)
    if strict and err_msg:  # the other ranks
        raise RuntimeError('\n'.join(err_msg))


def _IncompatibleKeys(missing, unexpected):
    from torch.nn.modules.module import _IncompatibleKeys as keys
    return keys(missing, unexpected)


def _save_checkpoint(checkpoint, filename, file_client_args=None, backend_args=None):
    """mmengine's ``save_checkpoint`` for a local file: written atomically, never through a
    symlink (:func:`mmdcs.utils.files.atomic_write`), and its tag recorded in the directory's
    manifest (:func:`mmdcs.utils.checkpoint.record_checkpoint`), which a later ``--resume`` of
    the file trusts. Other destinations (``s3://`` ..., custom backends) as mmengine does."""
    import io

    import torch
    filename = str(filename)
    if file_client_args is not None or backend_args is not None or '://' in filename:
        return _ORIGINAL['save_checkpoint'](checkpoint, filename,
                                            file_client_args=file_client_args,
                                            backend_args=backend_args)
    with io.BytesIO() as f:
        torch.save(checkpoint, f)
        data = f.getvalue()
    atomic_write(filename, data)
    record_checkpoint(filename, data)


def _save_checkpoint_with_step(self, runner, step, meta):
    """mmengine 0.10.7's ``CheckpointHook._save_checkpoint_with_step``, with ``last_checkpoint``
    written atomically and never through a symlink (mmengine opens it for writing, which writes
    through a link planted in the work dir); the checkpoint itself goes through
    :func:`_save_checkpoint`."""
    from mmengine.dist import is_main_process
    if self.max_keep_ckpts > 0:
        if len(self.keep_ckpt_ids) > 0 and self.keep_ckpt_ids[-1] == step:
            pass
        else:
            if len(self.keep_ckpt_ids) == self.max_keep_ckpts:
                _step = self.keep_ckpt_ids.popleft()
                if is_main_process():
                    ckpt_path = self.file_backend.join_path(self.out_dir,
                                                            self.filename_tmpl.format(_step))
                    if self.file_backend.isfile(ckpt_path):
                        self.file_backend.remove(ckpt_path)
                    elif self.file_backend.isdir(ckpt_path):
                        self.file_backend.rmtree(ckpt_path)
            self.keep_ckpt_ids.append(step)
            runner.message_hub.update_info('keep_ckpt_ids', list(self.keep_ckpt_ids))
    ckpt_filename = self.filename_tmpl.format(step)
    self.last_ckpt = self.file_backend.join_path(self.out_dir, ckpt_filename)
    runner.message_hub.update_info('last_ckpt', self.last_ckpt)
    runner.save_checkpoint(self.out_dir, ckpt_filename, self.file_client_args,
                           save_optimizer=self.save_optimizer,
                           save_param_scheduler=self.save_param_scheduler, meta=meta,
                           by_epoch=self.by_epoch, backend_args=self.backend_args, **self.args)
    if not is_main_process():
        return
    atomic_write(osp.join(runner.work_dir, 'last_checkpoint'), str(self.last_ckpt))


def _dump_config(self) -> None:
    """mmengine 0.10.7's ``Runner.dump_config`` (the config into the work dir, by the main
    process), written through :func:`mmdcs.utils.files.replacing`: a link planted under the
    config's name in the work dir is replaced, its target never written."""
    from mmengine.dist import is_main_process
    if not is_main_process():
        return
    name = osp.basename(self.cfg.filename) if self.cfg.filename is not None else \
        f'{self.timestamp}.py'
    with replacing(osp.join(self.work_dir, name)) as tmp:
        self.cfg.dump(tmp)


def _setup_env(self, env_cfg) -> None:
    """mmengine's ``Runner.setup_env`` (which picks the run's timestamp), then the run's log
    directory ``WORK_DIR/TIMESTAMP`` made new (:func:`mmdcs.utils.files.new_run_dir`) before
    mmengine makes it with ``exist_ok``: everything mmengine writes there (the log, ``vis_data/``
    with its ``scalars.json``, the config copy and the JSON log, a test's painted images) lands
    in a directory nothing was planted in; a link planted under that name is refused."""
    _ORIGINAL['setup_env'](self, env_cfg)
    new_run_dir(osp.join(self._work_dir, self._timestamp))


def patch_mmengine_run_files() -> None:
    """The files a Runner writes outside its checkpoints never go through a planted link:
    ``Runner.dump_config`` and ``Runner.setup_env`` are replaced (idempotent). (Checkpoints,
    ``last_checkpoint`` and the manifest: :func:`patch_mmengine_checkpoint_saving`.)"""
    from mmengine.runner import Runner
    _ORIGINAL.setdefault('setup_env', Runner.setup_env)
    Runner.setup_env = _setup_env
    Runner.dump_config = _dump_config


_ORIGINAL = {}


def patch_mmengine_checkpoint_saving() -> None:
    """Checkpoints, ``last_checkpoint`` and the digest manifest are written atomically and
    never through a symlink, by every Runner (mmdcs's tools and mmdet's / mmseg's own):
    mmengine's ``save_checkpoint`` (the module-level function that ``Runner.save_checkpoint``,
    the best-checkpoint and publishing code call) and ``CheckpointHook._save_checkpoint_with_step``
    are replaced (idempotent)."""
    import mmengine.runner as runner_pkg
    import mmengine.runner.checkpoint as mmengine_checkpoint
    import mmengine.runner.runner as runner_module
    from mmengine.hooks import CheckpointHook
    if 'save_checkpoint' not in _ORIGINAL:
        _ORIGINAL['save_checkpoint'] = mmengine_checkpoint.save_checkpoint
    for module in (mmengine_checkpoint, runner_module, runner_pkg):
        module.save_checkpoint = _save_checkpoint
    CheckpointHook._save_checkpoint_with_step = _save_checkpoint_with_step


def patch_mmengine_checkpoint_loading() -> None:
    """Make mmengine's loader of local checkpoints safe and work with torch >= 2.6
    (idempotent)."""
    global _PATCHED
    if _PATCHED:
        return
    import mmengine.runner.checkpoint as mmengine_checkpoint
    from mmengine.runner.checkpoint import CheckpointLoader
    for prefix, loader in SCHEMES.items():
        CheckpointLoader.register_scheme(prefixes=prefix, loader=loader, force=True)
    _ORIGINAL.setdefault('get_checkpoint_loader', CheckpointLoader.__dict__[
        '_get_checkpoint_loader'])
    CheckpointLoader._get_checkpoint_loader = classmethod(_checkpoint_loader)
    # for code that calls mmengine's loaders by their module-level names
    mmengine_checkpoint.load_from_http = _load_from_http
    mmengine_checkpoint.load_from_local = _load_from_local
    # _load_checkpoint_to_model (load_from, --resume, test.py) calls it by its module-level
    # name, PretrainedInit imports it when it runs
    mmengine_checkpoint.load_state_dict = _load_state_dict
    import mmengine.runner as runner_pkg
    runner_pkg.load_state_dict = _load_state_dict
    patch_history_buffer_pickling()
    patch_mmengine_checkpoint_saving()
    patch_mmengine_run_files()
    _PATCHED = True


SSD_HEAD_MODULE = 'mmdet.models.dense_heads.ssd_head'


def patch_mmdet_ssd_head(module) -> None:
    """``SSDHead.loss_cls = None`` on mmdet versions whose SSDHead lacks it (idempotent)."""
    if not hasattr(module.SSDHead, 'loss_cls'):
        module.SSDHead.loss_cls = None


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Runs ``patch(module)`` right after the module ``name`` is first imported."""

    def __init__(self, name: str, patch):
        self.name = name
        self.patch = patch

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, 'find_spec'):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, self.patch)
                return spec
        return None


class _PatchingLoader(importlib.abc.Loader):

    def __init__(self, loader, patch):
        self.loader = loader
        self.patch = patch

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.patch(module)

    def __getattr__(self, name):  # get_source, get_filename, ... of the real loader
        return getattr(self.loader, name)


def patch_on_import(name: str, patch) -> None:
    """``patch(module)`` now if ``name`` is imported, else right after it is (idempotent)."""
    module = sys.modules.get(name)
    if module is not None:
        patch(module)
        return
    if not any(isinstance(f, _PatchOnImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport(name, patch))


def apply_compat_patches() -> None:
    """Every compatibility patch of mmdcs (called once, by :mod:`mmdcs.registry`)."""
    patch_mmengine_checkpoint_loading()
    patch_optimizer_state_check()
    patch_on_import(SSD_HEAD_MODULE, patch_mmdet_ssd_head)
