"""The registries of mmdcs.

Each registry is a child of mmengine's root registry of the same kind, with the scope ``mmdcs``
and ``locations`` that are imported the first time the registry is searched. So from a config of
any OpenMMLab scope (``default_scope='mmpretrain'``, ``'mmdet'`` or ``'mmseg'``) a
``type='mmdcs.X'`` resolves without ``custom_imports``: mmengine imports ``mmdcs.registry``, finds
the child named ``mmdcs`` under its root, and that child imports its locations.

Only the kinds mmdcs registers something in have a registry here (a new kind of module gets its
registry together with its first member); every other type of a config (datasets, transforms,
schedulers, ...) comes from the task's package or mmengine.
"""
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.registry import LOOPS as MMENGINE_LOOPS
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import \
    OPTIM_WRAPPER_CONSTRUCTORS as MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS
from mmengine.registry import Registry

__all__ = ['MODELS', 'HOOKS', 'LOOPS', 'OPTIM_WRAPPER_CONSTRUCTORS']

#: backbones, heads, classifiers
MODELS = Registry('model', parent=MMENGINE_MODELS, scope='mmdcs', locations=['mmdcs.models'])
#: temperature, regulariser-state, OFB and DynamicViT hooks
HOOKS = Registry('hook', parent=MMENGINE_HOOKS, scope='mmdcs', locations=['mmdcs.engine'])
#: training loops of the search
LOOPS = Registry('loop', parent=MMENGINE_LOOPS, scope='mmdcs', locations=['mmdcs.engine'])
#: separate optimizers for the weights and the architecture parameters
OPTIM_WRAPPER_CONSTRUCTORS = Registry(
    'optimizer wrapper constructor',
    parent=MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS,
    scope='mmdcs',
    locations=['mmdcs.engine'])


# torch >= 2.6 vs mmengine 0.10.7 checkpoint loading, mmdet 3.3's SSDHead: applied here, once
# (mmdcs.utils.compat); at the end, as mmdcs.utils imports the registries above
from .utils.compat import apply_compat_patches  # noqa: E402

apply_compat_patches()
