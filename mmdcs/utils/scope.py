"""Build the parts of a model that belong to another OpenMMLab package under mmdcs's scope.

mmdcs modules subclass mmpretrain ones whose ``__init__`` builds unprefixed types
(``CrossEntropyLoss``, ``ClsDataPreprocessor``, ``LinearClsHead``...). Under the task scope our
configs use (``default_scope='mmpretrain'``) that just works. Under ``default_scope='mmdcs'``
(what :func:`mmdcs.utils.register_all_modules` sets) those names would be looked up in mmdcs's
own registry only and not be found. :func:`build_model_part` resolves an unprefixed name in
mmdcs first and then in the task package, so both scopes build the same model.
"""
from typing import Optional, Union

import torch.nn as nn
from mmengine.registry import MODELS as ROOT_MODELS
from mmengine.registry import DefaultScope

from mmdcs.registry import MODELS


def _under_mmdcs_scope() -> bool:
    current = DefaultScope.get_current_instance()
    return current is None or current.scope_name == 'mmdcs'


def build_model_part(cfg: Optional[Union[dict, nn.Module]], task_scope: str = 'mmpretrain'):
    """Build ``cfg`` from the MODELS registries; modules and ``None`` pass through unchanged.

    Under a task scope other than mmdcs the normal registry rules apply (the current scope's
    registry, then its parent). Under mmdcs (or no scope) an unprefixed type is taken from
    mmdcs's registry if registered there and from ``task_scope``'s otherwise.
    """
    if cfg is None or isinstance(cfg, nn.Module):
        return cfg
    if not _under_mmdcs_scope():
        return MODELS.build(cfg)
    obj_type = cfg.get('type')
    if isinstance(obj_type, str) and '.' not in obj_type:
        MODELS.import_from_location()
        if obj_type not in MODELS.module_dict:
            with DefaultScope.overwrite_default_scope(task_scope):
                return ROOT_MODELS.build(cfg)
    return MODELS.build(cfg)


def cls_data_preprocessor(data_preprocessor: Optional[Union[dict, nn.Module]],
                          train_cfg: Optional[dict] = None):
    """The data preprocessor of an mmdcs classifier, defaulted as mmpretrain's
    ``ImageClassifier`` does (``ClsDataPreprocessor`` with ``train_cfg``'s batch augments) and
    built with :func:`build_model_part`."""
    if isinstance(data_preprocessor, dict) or data_preprocessor is None:
        data_preprocessor = dict(data_preprocessor or {})
        data_preprocessor.setdefault('type', 'ClsDataPreprocessor')
        data_preprocessor.setdefault('batch_augments', train_cfg)
    return build_model_part(data_preprocessor)
