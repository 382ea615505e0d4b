"""Compatibility of the pinned OpenMMLab stack with torch >= 2.6, applied in one place.

torch >= 2.6 loads with ``weights_only=True`` by default, and mmengine 0.10.7 (the newest release)
calls ``torch.load`` without the argument when it reads a local checkpoint (``--resume``,
``load_from``, ``init_cfg=dict(type='Pretrained')``). Its checkpoints hold Python objects
(``HistoryBuffer``, numpy arrays, the config) that the safe loader refuses. mmengine fixed this on
its main branch by passing ``weights_only=False`` (open-mmlab/mmengine#1670, unreleased); we
register the same loader for local paths. Set ``MMDCS_WEIGHTS_ONLY=1`` to keep torch's safe
default (then only plain state dicts load).

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

_PATCHED = False


def _load_from_local(filename, map_location):
    import torch
    filename = osp.expanduser(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'{filename} can not be found.')
    weights_only = os.environ.get('MMDCS_WEIGHTS_ONLY', '0') == '1'
    return torch.load(filename, map_location=map_location, weights_only=weights_only)


def patch_mmengine_checkpoint_loading() -> None:
    """Make mmengine's loader of local checkpoints work with torch >= 2.6 (idempotent)."""
    global _PATCHED
    if _PATCHED:
        return
    from mmengine.runner.checkpoint import CheckpointLoader
    CheckpointLoader.register_scheme(prefixes='', loader=_load_from_local, force=True)
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
