"""Compatibility of the pinned OpenMMLab stack with torch >= 2.6, applied in one place.

torch >= 2.6 loads with ``weights_only=True`` by default, and mmengine 0.10.7 (the newest release)
calls ``torch.load`` without the argument when it reads a local checkpoint (``--resume``,
``load_from``, ``init_cfg=dict(type='Pretrained')``). Its checkpoints hold Python objects
(``HistoryBuffer``, numpy arrays) that torch's default allowlist refuses. Instead of loading
every file with ``weights_only=False`` (which lets a downloaded file run code), we register
:func:`mmdcs.utils.checkpoint.load_checkpoint_file` for local paths: weights-only loading with
an allowlist of the exact data types mmengine checkpoints hold, safetensors files, and one-line
errors for a refused or unreadable file (see that module). URLs (``http(s)://``, and
``torchvision://`` etc., which resolve to one) are downloaded as before and then loaded the same
way. The message hub's ``HistoryBuffer`` is made to pickle its data only
(:func:`patch_history_buffer_pickling`), so that the training checkpoints mmdcs writes load
weights-only.

mmdet 3.3.0's ``SSDHead`` cannot predict (``BaseDenseHead`` reads ``self.loss_cls``, which
``SSDHead`` never sets: open-mmlab/mmdetection#11780, fix #11524 unmerged), so SSDLite validation
and testing crash; :func:`patch_mmdet_ssd_head` sets ``SSDHead.loss_cls = None``, which selects the
softmax branch SSD had before mmdet 3.3.

Both are applied in one place, :func:`apply_compat_patches`, which :mod:`mmdcs.registry` calls
when it is imported (i.e. whenever an mmdcs module is built or an mmdcs tool runs). The SSDHead
patch does not depend on the order of imports: if mmdet's ``ssd_head`` module is not imported
yet, an import hook patches it the moment it is.
"""
import importlib.abc
import os
import os.path as osp
import sys

from .checkpoint import load_checkpoint_file

_PATCHED = False


def _load_from_local(filename, map_location):
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


def patch_mmengine_checkpoint_loading() -> None:
    """Make mmengine's loader of local checkpoints safe and work with torch >= 2.6
    (idempotent)."""
    global _PATCHED
    if _PATCHED:
        return
    import mmengine.runner.checkpoint as mmengine_checkpoint
    from mmengine.runner.checkpoint import CheckpointLoader
    CheckpointLoader.register_scheme(prefixes='', loader=_load_from_local, force=True)
    CheckpointLoader.register_scheme(prefixes=('http://', 'https://'), loader=_load_from_http,
                                     force=True)
    # torchvision://, open-mmlab://, mmcls:// call load_from_http by its module-level name
    mmengine_checkpoint.load_from_http = _load_from_http
    patch_history_buffer_pickling()
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
    patch_on_import(SSD_HEAD_MODULE, patch_mmdet_ssd_head)
