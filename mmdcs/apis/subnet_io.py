"""What the export (:mod:`mmdcs.apis.export`), ``tools/ofb_export.py``,
``tools/analysis/complexity.py`` and their tests share: building a config's model, finding its
mmdcs backbone, the input size of a config (or of a ``--shape`` option), pruning a whole model's
state dict to a subnet, the pruned checkpoint, and the printed summaries.

Only mmengine config and model-building pieces are imported (no runner).
"""
import copy
import os.path as osp
import time
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from mmdcs.analysis.complexity import nominal_input_size
from mmdcs.models.backbones import SelectableBackbone
from mmdcs.selection import (SubnetSpec, in_search_state, prune_state_dict, search_state_keys)
from mmdcs.utils.checkpoint import (complete_loads, save_weights)
from .launch import (UserError, check_config, load_config, prepare_task)

Size = Tuple[int, int]

#: the message for a model without architecture parameters
NOT_A_SUPERNET = ('has no architecture parameters: a baseline or an already pruned backbone '
                  '(export needs a DCS or KCR supernet, e.g. variant=\'dcs\' or \'kcr\')')


# ----------------------------------------------------------------------------- building
def load_task_config(config: str, cfg_options: Optional[dict] = None):
    """(cfg, scope): the config loaded (clear error when missing) and its task registered."""
    cfg = load_config(config, cfg_options)
    if not isinstance(cfg.get('model', None), dict):
        raise UserError(f'{config}: the config has no `model` dict')
    scope = prepare_task(cfg)
    check_config(cfg, scope)  # no NaN, no misspelt top-level key
    return cfg, scope


def build_model(model_cfg, scope: str) -> nn.Module:
    """``MODELS.build(model_cfg)`` under the config's default scope (mmpretrain, mmdet,
    mmseg), as the runner does."""
    from mmengine.registry import MODELS, DefaultScope
    with DefaultScope.overwrite_default_scope(scope):
        return MODELS.build(model_cfg)


def runner_model_cfg(cfg):
    """A copy of ``cfg.model`` as mmengine's Runner builds it: the config's top-level
    ``data_preprocessor`` (mean/std, channel broadcast) set into the model where the model has
    none. Every model mmdcs builds from a config goes through it."""
    model_cfg = copy.deepcopy(cfg.model)
    if cfg.get('data_preprocessor', None) is not None and isinstance(model_cfg, dict):
        model_cfg.setdefault('data_preprocessor', copy.deepcopy(cfg.data_preprocessor))
    return model_cfg


def mmdcs_backbone(model: nn.Module):
    """The mmdcs backbone of a model (``model.backbone``, or the model itself), or None."""
    if isinstance(model, SelectableBackbone):
        return model
    backbone = getattr(model, 'backbone', None)
    return backbone if isinstance(backbone, SelectableBackbone) else None


def require_supernet(model: nn.Module, what: str = 'the model'):
    """The mmdcs supernet backbone of ``model``; a clear :class:`UserError` otherwise."""
    backbone = mmdcs_backbone(model)
    if backbone is None:
        found = type(getattr(model, 'backbone', model)).__name__
        raise UserError(f'{what}: the backbone ({found}) is not an mmdcs backbone '
                        "(type='mmdcs.ViT', 'mmdcs.Swin', 'mmdcs.MobileViT' or "
                        "'mmdcs.EfficientViT')")
    if not backbone.is_supernet:
        state = 'pruned subnet' if backbone.subnet_spec is not None else backbone.variant
        raise UserError(f'{what}: the backbone {type(backbone).__name__}({backbone.arch}, '
                        f'{state}) {NOT_A_SUPERNET}')
    return backbone


def backbone_cfg_of(model_cfg):
    """The backbone's config dict inside a model config (``model.backbone`` or the model)."""
    return model_cfg['backbone'] if 'backbone' in model_cfg else model_cfg


def backbone_prefix(model: nn.Module) -> str:
    """The state-dict prefix of the backbone inside the model (``'backbone.'`` or '')."""
    return '' if mmdcs_backbone(model) is model else 'backbone.'


def with_subnet(model_cfg, subnet):
    """A copy of a model config whose backbone is built from ``subnet`` (path, dict or spec);
    its ``variant`` follows the subnet's."""
    import copy
    spec = SubnetSpec.coerce(subnet)
    cfg = copy.deepcopy(model_cfg)
    b = backbone_cfg_of(cfg)
    b['subnet'] = subnet if isinstance(subnet, str) else spec.to_dict()
    b['variant'] = spec.variant
    b.pop('init_cfg', None)  # the supernet's pretrained weights do not fit the subnet
    # the search objective needs architecture parameters; a subnet has none
    if isinstance(cfg, dict) and 'cost' in cfg:
        cfg.pop('cost')
    return cfg


def require_checkpoint(config: str, checkpoint: str) -> None:
    """A tool's CHECKPOINT argument, checked before anything slow (the model build): a clear
    :class:`UserError` when missing (after the config's own check, so a bad config is named
    first)."""
    if not osp.isfile(checkpoint):
        load_config(config)
        raise UserError(f'checkpoint not found: {checkpoint}')


def load_model_checkpoint(model: nn.Module, checkpoint: str) -> dict:
    """Load a checkpoint (mmengine's ``load_checkpoint``) into ``model`` as ``tools/test.py``
    loads it: it must fit completely (:func:`mmdcs.utils.checkpoint.complete_loads`: every
    weight, no tensor of another network; a search's own state such as ``cost_mu`` may be
    there or not), else one line naming the file (``MismatchedCheckpointError``). Returns the
    checkpoint dict."""
    from mmengine.runner import load_checkpoint
    if not osp.isfile(checkpoint):
        raise UserError(f'checkpoint not found: {checkpoint}')
    with complete_loads():
        ckpt = load_checkpoint(model, checkpoint, map_location='cpu', strict=False)
    return ckpt if isinstance(ckpt, dict) else {}


# ----------------------------------------------------------------------------- input size
def shape_arg(values: Optional[Sequence[int]], option: str = '--shape') -> Optional[Size]:
    """(H, W) from a tool's ``--shape H [W]`` (None when not given); a clear
    :class:`UserError` for more than two numbers."""
    if not values:
        return None
    if len(values) > 2:
        raise UserError(f'{option} takes H or H W, got {list(values)}')
    return (int(values[0]), int(values[-1]))


def _hw(scale) -> Optional[Size]:
    """(H, W) from an mmcv-style scale: an int, or (w, h) as mmcv/mmdet/mmseg write it."""
    if isinstance(scale, int):
        return (scale, scale)
    if isinstance(scale, (list, tuple)) and len(scale) == 2 and all(
            isinstance(v, int) for v in scale):
        return (int(scale[1]), int(scale[0]))
    return None


def _pipeline_size(pipeline) -> Optional[Tuple[Size, str]]:
    size = None
    for t in pipeline or []:
        if not isinstance(t, dict):
            continue
        kind = str(t.get('type', '')).split('.')[-1]
        if kind in ('CenterCrop', 'RandomCrop') and t.get('crop_size') is not None:
            hw = _hw(t['crop_size'])
            # mmpretrain's crop_size is (h, w) when a pair; mmseg's RandomCrop too
            if isinstance(t['crop_size'], (list, tuple)):
                hw = (int(t['crop_size'][0]), int(t['crop_size'][1]))
            size = (hw, kind) if hw else size
        elif kind in ('RandomResizedCrop', 'Resize', 'ResizeEdge', 'RandomResize'):
            hw = _hw(t.get('scale'))
            size = (hw, kind) if hw else size
    return size


def config_input_size(cfg, backbone: Optional[nn.Module] = None) -> Tuple[Size, str]:
    """The input size (H, W) FLOPs are counted at for a config, and where it comes from:
    the config's ``crop_size`` (mmseg), the test pipeline's last size-setting transform, the
    train pipeline's, or the backbone's nominal size (224; MobileViT 256)."""
    crop = cfg.get('crop_size', None)
    if isinstance(crop, (list, tuple)) and len(crop) == 2:
        return (int(crop[0]), int(crop[1])), 'crop_size of the config'
    for loader, name in (('test_dataloader', 'test pipeline'), ('val_dataloader', 'val pipeline'),
                         ('train_dataloader', 'train pipeline')):
        ds = (cfg.get(loader, None) or {}).get('dataset', None)
        while isinstance(ds, dict) and 'pipeline' not in ds and isinstance(
                ds.get('dataset'), dict):
            ds = ds['dataset']
        found = _pipeline_size(ds.get('pipeline')) if isinstance(ds, dict) else None
        if found:
            return found[0], f'{name} ({found[1]})'
    if backbone is not None:
        return nominal_input_size(backbone), f'nominal size of {type(backbone).__name__}'
    return (224, 224), 'default'


# ----------------------------------------------------------------------------- pruning
def pruned_model_state(model: nn.Module, spec: SubnetSpec,
                       backbone_cfg) -> 'OrderedDict[str, torch.Tensor]':
    """The state dict of the whole model with its backbone pruned to ``spec``.

    The backbone's weights go through :func:`mmdcs.selection.prune_state_dict` with a builder of
    the same backbone (the class of the model's backbone with the arguments of
    ``backbone_cfg``); every other key (neck,
    head, ...) is copied unchanged."""
    backbone = mmdcs_backbone(model)
    prefix = backbone_prefix(model)
    full = model.state_dict()
    own = {k[len(prefix):]: v for k, v in full.items() if k.startswith(prefix)}
    kwargs = {k: v for k, v in dict(backbone_cfg).items()
              if k not in ('type', 'init_cfg', 'subnet')}

    def build():
        return type(backbone)(**kwargs)

    pruned = prune_state_dict(own, spec, build)
    # the search's state (the budget's multiplier μ) is not part of the pruned network
    searched = search_state_keys(model)
    out = OrderedDict((k, v) for k, v in full.items()
                      if not k.startswith(prefix) and not in_search_state(k, searched))
    out.update((prefix + k, v) for k, v in pruned.items())
    return out


def save_pruned_checkpoint(path: str, state_dict: Dict[str, torch.Tensor], meta: dict) -> None:
    """An mmengine-style checkpoint ``{'meta': ..., 'state_dict': ...}`` of plain data (tensors
    on the CPU; a ``.safetensors`` path: a safetensors file with the meta as JSON), which loads
    through the safe, weights-only path (:mod:`mmdcs.utils.checkpoint`)."""
    save_weights(path, state_dict, meta)


def export_meta(config: str, checkpoint: str, sha256: str) -> dict:
    return dict(source_checkpoint=osp.abspath(checkpoint), source_checkpoint_sha256=sha256,
                config=osp.abspath(config),
                time=time.strftime('%Y-%m-%d %H:%M:%S'))


# ----------------------------------------------------------------------------- printing
def human(n: float, unit: str = '') -> str:
    for div, suffix in ((1e9, 'G'), (1e6, 'M'), (1e3, 'K')):
        if abs(n) >= div:
            return f'{n / div:.3f} {suffix}{unit}'
    return f'{n:.0f} {unit}'.strip()


def block_summary(spec: SubnetSpec) -> str:
    """A compact markdown table of every block's D → D̃ (and the total)."""
    lines = ['| block | D | D̃ | kept |', '|---|---|---|---|']
    for b in spec.blocks:
        lines.append(f'| {b.name} | {b.dim} | {b.kept} | {b.kept / b.dim:.0%} |')
    d = sum(b.dim for b in spec.blocks)
    k = sum(b.kept for b in spec.blocks)
    lines.append(f'| **all {len(spec.blocks)} blocks** | {d} | {k} | {k / max(d, 1):.1%} |')
    return '\n'.join(lines)


def complexity_lines(rows: Sequence[Tuple[str, int, int]], shape: Sequence[int]) -> str:
    """Markdown table of (what, params, FLOPs) rows."""
    shape_s = 'x'.join(str(s) for s in shape)
    lines = [f'| | params | FLOPs (MACs, input {shape_s}) |', '|---|---|---|']
    for what, params, flops in rows:
        lines.append(f'| {what} | {params:,} ({human(params)}) | {flops:,} ({human(flops)}) |')
    return '\n'.join(lines)


def retrain_config_for(config: str) -> Optional[str]:
    """The retraining config that goes with a search config, if it exists
    (``*_search_in100.py`` → ``*_retrain_in1k.py``, ``*_search_digits.py`` →
    ``*_retrain_digits.py``)."""
    for a, b in (('_search_in100', '_retrain_in1k'), ('_search_digits', '_retrain_digits')):
        if a in config and osp.isfile(config.replace(a, b)):
            return config.replace(a, b)
    return None


def usage_lines(config: str, out_dir: str, variant: str, prefix: str = 'backbone.',
                checkpoint: str = 'pruned.pth') -> List[str]:
    """How to use an exported subnet from a config (printed by the export tool)."""
    subnet = osp.join(out_dir, 'subnet.json')
    ckpt = osp.join(out_dir, checkpoint)
    retrain = retrain_config_for(config)
    base = f'model.backbone.subnet={subnet}'
    # the search config itself, without its search objective, evaluates the pruned checkpoint
    evaluate = f'{base} model.backbone.variant={variant} model.cost=None'
    lines = [
        'Build the pruned network in any config (classification, detection, segmentation):',
        f'  model.backbone.subnet={subnet}   (the variant, {variant!r}, is read from it)',
    ]
    if retrain:
        lines += [
            'Retrain it from scratch (the papers):',
            f'  python tools/train.py {retrain} --cfg-options {base}',
            'or fine-tune it from the supernet weights:',
            f'  python tools/train.py {retrain} --cfg-options {base} load_from={ckpt}',
        ]
    else:
        lines += ['Retrain it with a retraining config (configs/dcs|kcr/*_retrain_in1k.py) and',
                  f'  --cfg-options {base} [load_from={ckpt} to fine-tune instead]']
    lines += [
        'Its backbone alone (e.g. in a detection or segmentation config), in model.backbone:',
        f"  subnet='{subnet}', init_cfg=dict(type='Pretrained', checkpoint='{ckpt}', "
        f"prefix='{prefix}')",
        'Evaluate the pruned checkpoint:',
        f'  python tools/test.py {config} {ckpt} --cfg-options {evaluate}',
    ]
    return lines
