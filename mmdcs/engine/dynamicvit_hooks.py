"""The engine side of DynamicViT's public recipe (``optim_factory.get_parameter_groups`` and the
``fix_step`` of ``engine.train_one_epoch``).

* :class:`DynamicViTOptimWrapperConstructor` — parameter groups: the new parameters (predictors,
  DynamicSwin's fast paths) at the full learning rate; every other trained parameter (backbone and
  head) at ``lr × backbone_lr_scale`` (public ``--lr_scale``: 0.01 for DeiT, 0.2 for Swin and
  ConvNeXt); no weight decay on 1-D parameters and biases; the class token and the position
  embedding are not trained (the public code leaves them out of the optimizer). The backbone
  groups are marked ``dynamicvit_backbone=True``.
* :class:`DynamicViTFreezeHook` — for the first ``fix_step`` epochs (public 5) the marked groups
  run at learning rate 0, as the public code does (the optimizer statistics still see their
  gradients). The rate is zeroed for the step only and restored before the schedulers and the
  checkpoint see it; whether an epoch is frozen depends on the epoch alone, so a resumed run
  freezes exactly the epochs the uninterrupted one would.
"""
from typing import List, Sequence

import torch.nn as nn
from mmengine.hooks import Hook
from mmengine.optim import DefaultOptimWrapperConstructor, OptimWrapper, OptimWrapperDict
from mmengine.runner import EpochBasedTrainLoop

from mmdcs.checks import check_number
from mmdcs.registry import HOOKS, OPTIM_WRAPPER_CONSTRUCTORS
from mmdcs.utils.errors import ConfigError
from .utils import unwrap_model

#: param-group key marking the backbone (and head) groups
BACKBONE_GROUP_KEY = 'dynamicvit_backbone'
#: names of the parameters DynamicViT adds (public: 'predictor', 'fast')
NEW_PARAM_KEYS = ('score_predictor', 'fastmlp')
#: parameters the public recipe does not train
FROZEN_PARAM_KEYS = ('pos_embed', 'cls_token')


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class DynamicViTOptimWrapperConstructor(DefaultOptimWrapperConstructor):
    """Config::

        optim_wrapper = dict(
            constructor='mmdcs.DynamicViTOptimWrapperConstructor',
            optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05),
            backbone_lr_scale=0.01)

    Optional keys beside ``backbone_lr_scale``: ``new_param_keys`` (substrings of the names
    trained at the full rate) and ``frozen_param_keys`` (substrings of names left out). A
    ``paramwise_cfg`` is refused: the groups are the public recipe's.
    """

    def __init__(self, optim_wrapper_cfg: dict, paramwise_cfg=None):
        cfg = dict(optim_wrapper_cfg)
        self.backbone_lr_scale = check_number(cfg.pop('backbone_lr_scale', 0.01),
                                              'DynamicViTOptimWrapperConstructor: '
                                              'backbone_lr_scale', 0)
        self.new_param_keys = tuple(cfg.pop('new_param_keys', NEW_PARAM_KEYS))
        self.frozen_param_keys = tuple(cfg.pop('frozen_param_keys', FROZEN_PARAM_KEYS))
        if paramwise_cfg:
            raise ValueError('DynamicViTOptimWrapperConstructor: paramwise_cfg is not used (the '
                             'groups follow the public recipe); use backbone_lr_scale, '
                             'new_param_keys, frozen_param_keys')
        super().__init__(cfg, None)
        if self.base_lr is None:
            raise ValueError('DynamicViTOptimWrapperConstructor: optimizer.lr is required')

    def param_groups(self, model: nn.Module) -> List[dict]:
        """At most four groups: (new | backbone) × (decay | no decay)."""
        wd = self.base_wd or 0.
        groups = {}
        found_new = False
        for name, p in model.named_parameters():
            if not p.requires_grad or any(k in name for k in self.frozen_param_keys):
                continue
            new = any(k in name for k in self.new_param_keys)
            found_new |= new
            no_decay = p.ndim <= 1 or name.endswith('.bias')
            key = (new, no_decay)
            if key not in groups:
                groups[key] = {
                    'params': [], 'lr': self.base_lr * (1. if new else self.backbone_lr_scale),
                    'weight_decay': 0. if no_decay else wd, BACKBONE_GROUP_KEY: not new}
            groups[key]['params'].append(p)
        if not found_new:
            raise ConfigError('DynamicViTOptimWrapperConstructor: no parameter matches '
                             f'{self.new_param_keys} (is the backbone a DynamicViT / DynamicSwin '
                             'with trainable predictors?)')
        return [groups[k] for k in sorted(groups)]

    def __call__(self, model: nn.Module) -> OptimWrapper:
        from mmengine.registry import OPTIM_WRAPPERS, OPTIMIZERS
        model = unwrap_model(model)
        optimizer_cfg = dict(self.optimizer_cfg)
        optimizer_cfg['params'] = self.param_groups(model)
        optimizer = OPTIMIZERS.build(optimizer_cfg)
        wrapper_cfg = dict(self.optim_wrapper_cfg)
        wrapper_cfg.setdefault('type', 'OptimWrapper')
        return OPTIM_WRAPPERS.build(wrapper_cfg, default_args=dict(optimizer=optimizer))


def _wrappers(optim_wrapper) -> Sequence[OptimWrapper]:
    if isinstance(optim_wrapper, OptimWrapperDict):
        return list(optim_wrapper.values())
    return [optim_wrapper]


@HOOKS.register_module()
class DynamicViTFreezeHook(Hook):
    """Learning rate 0 for the backbone groups (``dynamicvit_backbone``) during the first
    ``fix_step`` epochs (public ``fix_step=5``).

    Args:
        fix_step: epochs with the backbone frozen (≥ 0; below ``max_epochs``).
    """
    # before ParamSchedulerHook (LOW) and CheckpointHook (VERY_LOW) in after_train_iter
    priority = 'NORMAL'

    def __init__(self, fix_step: int = 5):
        self.fix_step = check_number(fix_step, 'DynamicViTFreezeHook: fix_step', 0, integer=True)
        self._saved: List[tuple] = []

    def _groups(self, runner) -> List[dict]:
        return [g for w in _wrappers(runner.optim_wrapper) for g in w.optimizer.param_groups
                if g.get(BACKBONE_GROUP_KEY)]

    def before_train(self, runner) -> None:
        if not isinstance(runner.train_loop, EpochBasedTrainLoop):
            raise ConfigError('DynamicViTFreezeHook counts epochs: use an EpochBasedTrainLoop '
                             "(train_cfg=dict(by_epoch=True, ...))")
        if self.fix_step >= runner.max_epochs:
            raise ConfigError(f'DynamicViTFreezeHook: fix_step = {self.fix_step} is not below '
                             f'max_epochs = {runner.max_epochs}: the backbone would never train')
        if not self._groups(runner):
            raise ConfigError('DynamicViTFreezeHook: no optimizer group is marked as backbone; '
                             "build the optimizer with constructor="
                             "'mmdcs.DynamicViTOptimWrapperConstructor'")

    def frozen(self, epoch: int) -> bool:
        return epoch < self.fix_step

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        self._restore()
        frozen = self.frozen(runner.epoch)
        runner.message_hub.update_scalar('train/backbone_frozen', float(frozen))
        if frozen:
            for g in self._groups(runner):
                self._saved.append((g, g['lr']))
                g['lr'] = 0.

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        self._restore()

    def _restore(self) -> None:
        for g, lr in self._saved:
            g['lr'] = lr
        self._saved = []
