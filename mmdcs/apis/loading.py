"""What the analysis tools (``tools/analysis/ib_kc_report.py``, ``attention.py``,
``vis_cam.py``) load: a config's classifier with its checkpoint, the config's test pipeline, image
files or random images as the model sees them, and preprocessed (inputs, labels) batches of a
config's dataset split. Bad input (a missing config, checkpoint, image or dataset) raises
:class:`~mmdcs.apis.launch.UserError` or ``FileNotFoundError`` with the path, which
:func:`~mmdcs.apis.launch.user_errors` reports in one line.
"""
import copy
import os
import os.path as osp
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from torch import Tensor

from .launch import UserError
from .subnet_io import build_model, load_model_checkpoint, load_task_config, runner_model_cfg

IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.bmp', '.ppm', '.pgm', '.tif', '.tiff', '.webp')
#: ImageNet mean/std (0-255), used when no config gives a data preprocessor
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)


# ----------------------------------------------------------------------------- loading
def load_classifier(config: str, checkpoint: Optional[str] = None,
                    cfg_options: Optional[dict] = None, device: str = 'cpu'):
    """(model in eval mode, cfg, scope) of a config, with ``checkpoint`` loaded (strict).

    The config's top-level ``data_preprocessor`` is set into the model as mmengine's runner does
    (mean/std normalisation of the inputs).

    ``checkpoint`` None or ``'none'``: random initialisation (``init_weights``), for smoke
    tests. Raises :class:`~mmdcs.apis.launch.UserError` with a clear message when the config or
    checkpoint is missing or does not fit.
    """
    cfg, scope = load_task_config(config, cfg_options)
    model = build_model(runner_model_cfg(cfg), scope)
    if checkpoint in (None, '', 'none', 'None'):
        if hasattr(model, 'init_weights'):
            model.init_weights()
    else:
        load_model_checkpoint(model, checkpoint)
    return model.to(device).eval(), cfg, scope


def _walk_dataset(ds):
    while isinstance(ds, dict) and 'pipeline' not in ds and isinstance(ds.get('dataset'), dict):
        ds = ds['dataset']
    return ds


def dataloader_cfg(cfg, split: str = 'val'):
    """The config's ``<split>_dataloader`` (``test`` falls back to ``val`` and vice versa)."""
    order = {'val': ('val', 'test'), 'test': ('test', 'val'), 'train': ('train', )}
    if split not in order:
        raise ValueError(f'split must be train, val or test, got {split!r}')
    for s in order[split]:
        dl = cfg.get(f'{s}_dataloader', None)
        if isinstance(dl, dict) and isinstance(dl.get('dataset'), dict):
            return dl
    raise ValueError(f'the config has no {split}_dataloader with a dataset')


def test_pipeline_cfg(cfg) -> list:
    """The test (or val) pipeline of a config (the transforms of a deterministic view)."""
    for s in ('test', 'val'):
        dl = cfg.get(f'{s}_dataloader', None)
        ds = _walk_dataset(dl.get('dataset')) if isinstance(dl, dict) else None
        if isinstance(ds, dict) and ds.get('pipeline'):
            return list(ds['pipeline'])
    return []


def build_pipeline(pipeline_cfg: list, scope: str = 'mmpretrain'):
    """An mmengine ``Compose`` of the transforms, built under the task's default scope."""
    from mmengine.dataset import Compose
    from mmengine.registry import DefaultScope
    scope = 'mmpretrain' if scope == 'mmdcs' else scope
    with DefaultScope.overwrite_default_scope(scope):
        return Compose(pipeline_cfg)


def list_images(root: str, limit: Optional[int] = None) -> List[str]:
    """Image files under ``root`` (recursively, sorted), or ``root`` itself if it is a file."""
    if osp.isfile(root):
        return [root]
    if not osp.isdir(root):
        raise FileNotFoundError(f'no such image file or folder: {root}')
    out = []
    for d, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            if f.lower().endswith(IMAGE_EXTENSIONS):
                out.append(osp.join(d, f))
    if not out:
        raise FileNotFoundError(f'no image files ({", ".join(IMAGE_EXTENSIONS)}) under {root}')
    return out[:limit] if limit else out


def _to_display(chw: Tensor, bgr: bool) -> Tensor:
    """(C, H, W) uint8 image → (H, W, 3) uint8 RGB for display."""
    img = chw.detach().cpu()
    if img.dtype != torch.uint8:
        img = img.float()
        lo, hi = float(img.min()), float(img.max())
        img = ((img - lo) / max(hi - lo, 1e-6) * 255).round().to(torch.uint8)
    if img.shape[0] == 1:
        img = img.expand(3, -1, -1)
    elif bgr and img.shape[0] == 3:
        img = img.flip(0)
    return img.permute(1, 2, 0).contiguous()


def load_images(paths: Sequence[str], model: Optional[nn.Module] = None, cfg=None,
                scope: str = 'mmpretrain', size: Optional[Union[int, Tuple[int, int]]] = None
                ) -> Tuple[Tensor, List[Tensor]]:
    """(inputs (B, C, H, W) float, display images [(H, W, 3) uint8 RGB]) of image files.

    With a config: its test pipeline (``LoadImageFromFile`` and whatever resize/crop it has)
    and the model's ``data_preprocessor`` (mean/std, BGR→RGB), so the inputs are exactly what
    the model sees at test time; ``size`` (if given) resizes after the pipeline. Without one:
    RGB, resized to ``size`` (default 224), ImageNet mean/std.
    """
    import numpy as np
    from PIL import Image
    if cfg is not None and model is not None and hasattr(model, 'data_preprocessor'):
        pipe_cfg = test_pipeline_cfg(cfg) or [dict(type='LoadImageFromFile'),
                                              dict(type='PackInputs')]
        pipeline = build_pipeline(pipe_cfg, scope)
        packed = [pipeline(dict(img_path=p)) for p in paths]
        raw = [d['inputs'] for d in packed]
        if size is not None:
            hw = (size, size) if isinstance(size, int) else tuple(size)
            raw = [torch.nn.functional.interpolate(r[None].float(), size=hw, mode='bilinear',
                                                   align_corners=False)[0].round().clamp(
                                                       0, 255).to(torch.uint8) for r in raw]
        dp = model.data_preprocessor
        device = next(model.parameters()).device
        with torch.no_grad():
            data = dp(dict(inputs=[r.to(device) for r in raw],
                           data_samples=[d['data_samples'] for d in packed]), False)
        bgr = bool(getattr(dp, '_channel_conversion', False))
        return data['inputs'], [_to_display(r, bgr) for r in raw]
    hw = (224, 224) if size is None else ((size, size) if isinstance(size, int) else tuple(size))
    mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(3, 1, 1)
    xs, shows = [], []
    for p in paths:
        img = Image.open(p).convert('RGB').resize((hw[1], hw[0]), Image.BILINEAR)
        t = torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1)
        shows.append(t.permute(1, 2, 0).contiguous())
        xs.append((t.float() - mean) / std)
    return torch.stack(xs), shows


def random_images(n: int, size: Union[int, Tuple[int, int]] = 224, seed: int = 0
                  ) -> Tuple[Tensor, List[Tensor]]:
    """n random normalised inputs (smooth noise, so attention maps are not all flat) and their
    display images."""
    hw = (size, size) if isinstance(size, int) else tuple(size)
    g = torch.Generator().manual_seed(seed)
    low = torch.rand(n, 3, max(2, hw[0] // 16), max(2, hw[1] // 16), generator=g)
    img = torch.nn.functional.interpolate(low, size=hw, mode='bilinear', align_corners=False)
    show = [(im.permute(1, 2, 0) * 255).round().to(torch.uint8) for im in img]
    return (img - 0.5) / 0.25, show


def dataset_batches(cfg, model: nn.Module, scope: str = 'mmpretrain', split: str = 'val',
                    max_images: Optional[int] = None, batch_size: int = 32, seed: int = 0,
                    deterministic_pipeline: bool = True
                    ) -> Iterator[Tuple[Tensor, Tensor]]:
    """(inputs, labels) batches of a config's split, preprocessed by the model's
    ``data_preprocessor`` (as the runner does in eval).

    ``max_images``: a seeded random subset of that many images (all if None or larger).
    ``deterministic_pipeline``: the train split uses the test pipeline (no random
    augmentation), so the report describes the data, not one augmentation draw.
    """
    from mmengine.dataset import pseudo_collate
    from mmengine.registry import DefaultScope
    from torch.utils.data import DataLoader, Subset
    dl = dataloader_cfg(cfg, split)
    ds_cfg = copy.deepcopy(dl['dataset'])
    if split == 'train' and deterministic_pipeline:
        inner = _walk_dataset(ds_cfg)
        pipe = test_pipeline_cfg(cfg)
        if pipe and isinstance(inner, dict):
            inner['pipeline'] = pipe
    task_scope = 'mmpretrain' if scope == 'mmdcs' else scope
    from mmengine.registry import DATASETS
    with DefaultScope.overwrite_default_scope(task_scope):
        try:
            dataset = DATASETS.build(ds_cfg)
        except (FileNotFoundError, OSError) as e:
            raise UserError(f'the {split} dataset of the config cannot be read: {e}') from e
    n = len(dataset)
    if max_images is not None and max_images < n:
        g = torch.Generator().manual_seed(seed)
        idx = torch.randperm(n, generator=g)[:max_images].sort().values.tolist()
        dataset = Subset(dataset, idx)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=0,
                        collate_fn=pseudo_collate)
    dp = model.data_preprocessor
    device = next(model.parameters()).device
    for data in loader:
        with torch.no_grad():
            data = dp(data, False)
        labels = torch.cat([ds.gt_label for ds in data['data_samples']]).long()
        yield data['inputs'], labels
