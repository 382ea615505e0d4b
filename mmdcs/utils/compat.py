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

These patches are applied when :mod:`mmdcs.registry` is imported, i.e. whenever an mmdcs module is
built or an mmdcs tool runs (the SSD one only if mmdet is already imported; the tools import it
for mmdet configs).
"""
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


def patch_mmdet_ssd_head(import_if_needed: bool = False) -> None:
    """``SSDHead.loss_cls = None`` on mmdet versions whose SSDHead lacks it (idempotent)."""
    name = 'mmdet.models.dense_heads.ssd_head'
    module = sys.modules.get(name)
    if module is None and import_if_needed:
        try:
            import importlib
            module = importlib.import_module(name)
        except ImportError:
            return
    if module is not None and not hasattr(module.SSDHead, 'loss_cls'):
        module.SSDHead.loss_cls = None
