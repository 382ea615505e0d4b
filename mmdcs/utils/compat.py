"""Compatibility of the pinned OpenMMLab stack with torch >= 2.6, applied in one place.

torch >= 2.6 loads with ``weights_only=True`` by default, and mmengine 0.10.7 (the newest release)
calls ``torch.load`` without the argument when it reads a local checkpoint (``--resume``,
``load_from``, ``init_cfg=dict(type='Pretrained')``). Its checkpoints hold Python objects
(``HistoryBuffer``, numpy arrays, the config) that the safe loader refuses. mmengine fixed this on
its main branch by passing ``weights_only=False`` (open-mmlab/mmengine#1670, unreleased); we
register the same loader for local paths. Set ``MMDCS_WEIGHTS_ONLY=1`` to keep torch's safe
default (then only plain state dicts load).

This module is applied when :mod:`mmdcs.registry` is imported, i.e. whenever an mmdcs module is
built or an mmdcs tool runs.
"""
import os
import os.path as osp

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
