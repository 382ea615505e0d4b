"""Two optimizers for the search: one for the network weights W, one for the architecture
parameters α (method.md §4: "weights and α have separate optimizers; the step for one must not
move the other").

Config::

    optim_wrapper = dict(
        constructor='mmdcs.SearchOptimWrapperConstructor',
        weight=dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=1e-3, betas=(0.9, 0.999),
                    weight_decay=0.01), paramwise_cfg=dict(norm_decay_mult=0.)),
        arch=dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=1e-3, betas=(0.9, 0.999),
                  weight_decay=0.)))
    param_scheduler = dict(weight=[...], arch=[...])

The result is an ``OptimWrapperDict(weight=..., arch=...)``; ``paramwise_cfg`` inside each entry
works as in mmengine's default constructor.
"""
from typing import Optional

import torch.nn as nn
from mmengine.optim import DefaultOptimWrapperConstructor, OptimWrapperDict

from mmdcs.registry import OPTIM_WRAPPER_CONSTRUCTORS
from mmdcs.selection import ChannelSelector
from mmdcs.utils.errors import ConfigError
from .utils import unwrap_model

STEP_KINDS = ('weight', 'arch')


class _ArchParams(nn.Module):
    """The channel selectors of a model (whose only parameters are the α), gathered so that
    mmengine's default constructor (and its ``paramwise_cfg``) can be used on them alone."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.selectors = nn.ModuleList(
            [m for m in model.modules() if isinstance(m, ChannelSelector)])


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class SearchOptimWrapperConstructor:
    """Builds ``OptimWrapperDict(weight=..., arch=...)``: α in the ``arch`` optimizer, every
    other parameter in the ``weight`` optimizer."""

    def __init__(self, optim_wrapper_cfg: dict, paramwise_cfg: Optional[dict] = None):
        cfg = dict(optim_wrapper_cfg)
        unknown = set(cfg) - set(STEP_KINDS)
        missing = set(STEP_KINDS) - set(cfg)
        if unknown or missing:
            raise ValueError('SearchOptimWrapperConstructor: optim_wrapper needs exactly the keys '
                             f"'weight' and 'arch'; missing {sorted(missing)}, unknown "
                             f'{sorted(unknown)}')
        if paramwise_cfg:
            raise ValueError('SearchOptimWrapperConstructor: put paramwise_cfg inside the '
                             "'weight' or 'arch' entry")
        self.cfgs = {k: dict(cfg[k]) for k in STEP_KINDS}
        for k, c in self.cfgs.items():
            if 'optimizer' not in c:
                raise ValueError(f"optim_wrapper.{k} needs an 'optimizer'")

    def __call__(self, model: nn.Module) -> OptimWrapperDict:
        module = unwrap_model(model)
        arch = _ArchParams(module)
        if len(arch.selectors) == 0:
            raise ConfigError('the search optimizer found no architecture parameters (α) in '
                             f'{type(module).__name__}: use a DCS or KCR supernet backbone')
        arch_ids = {id(sel.alpha) for sel in arch.selectors}

        def build(kind: str, target: nn.Module):
            cfg = dict(self.cfgs[kind])
            paramwise = cfg.pop('paramwise_cfg', None)
            return DefaultOptimWrapperConstructor(cfg, paramwise)(target)

        weight = build('weight', module)
        # drop α from the weight optimizer: it is only ever moved by the arch optimizer
        for group in weight.optimizer.param_groups:
            group['params'] = [p for p in group['params'] if id(p) not in arch_ids]
        return OptimWrapperDict(weight=weight, arch=build('arch', arch))
