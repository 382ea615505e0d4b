"""The registries of mmdcs.

Each registry is a child of mmengine's root registry of the same kind, with the scope ``mmdcs``
and ``locations`` that are imported the first time the registry is searched. So from a config of
any OpenMMLab scope (``default_scope='mmpretrain'``, ``'mmdet'`` or ``'mmseg'``) a
``type='mmdcs.X'`` resolves without ``custom_imports``: mmengine imports ``mmdcs.registry``, finds
the child named ``mmdcs`` under its root, and that child imports its locations.
"""
from mmengine.registry import DATA_SAMPLERS as MMENGINE_DATA_SAMPLERS
from mmengine.registry import DATASETS as MMENGINE_DATASETS
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.registry import LOOPS as MMENGINE_LOOPS
from mmengine.registry import MODEL_WRAPPERS as MMENGINE_MODEL_WRAPPERS
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import \
    OPTIM_WRAPPER_CONSTRUCTORS as MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS
from mmengine.registry import OPTIM_WRAPPERS as MMENGINE_OPTIM_WRAPPERS
from mmengine.registry import PARAM_SCHEDULERS as MMENGINE_PARAM_SCHEDULERS
from mmengine.registry import RUNNERS as MMENGINE_RUNNERS
from mmengine.registry import TRANSFORMS as MMENGINE_TRANSFORMS
from mmengine.registry import Registry

__all__ = [
    'MODELS', 'MODEL_WRAPPERS', 'HOOKS', 'LOOPS', 'RUNNERS', 'OPTIM_WRAPPERS',
    'OPTIM_WRAPPER_CONSTRUCTORS', 'PARAM_SCHEDULERS', 'DATASETS', 'DATA_SAMPLERS',
    'TRANSFORMS'
]

#: backbones, classifiers, losses
MODELS = Registry('model', parent=MMENGINE_MODELS, scope='mmdcs', locations=['mmdcs.models'])
#: DDP wrappers for the alternating search step
MODEL_WRAPPERS = Registry(
    'model_wrapper', parent=MMENGINE_MODEL_WRAPPERS, scope='mmdcs', locations=['mmdcs.engine'])
#: temperature, IB and KCR state hooks
HOOKS = Registry('hook', parent=MMENGINE_HOOKS, scope='mmdcs', locations=['mmdcs.engine'])
#: training loops of the search
LOOPS = Registry('loop', parent=MMENGINE_LOOPS, scope='mmdcs', locations=['mmdcs.engine'])
RUNNERS = Registry('runner', parent=MMENGINE_RUNNERS, scope='mmdcs', locations=['mmdcs.engine'])
OPTIM_WRAPPERS = Registry(
    'optim_wrapper', parent=MMENGINE_OPTIM_WRAPPERS, scope='mmdcs', locations=['mmdcs.engine'])
#: separate optimizers for the weights and the architecture parameters
OPTIM_WRAPPER_CONSTRUCTORS = Registry(
    'optimizer wrapper constructor',
    parent=MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS,
    scope='mmdcs',
    locations=['mmdcs.engine'])
PARAM_SCHEDULERS = Registry(
    'parameter scheduler', parent=MMENGINE_PARAM_SCHEDULERS, scope='mmdcs',
    locations=['mmdcs.engine'])
#: the embedded digit datasets
DATASETS = Registry('dataset', parent=MMENGINE_DATASETS, scope='mmdcs', locations=['mmdcs.datasets'])
DATA_SAMPLERS = Registry(
    'data sampler', parent=MMENGINE_DATA_SAMPLERS, scope='mmdcs', locations=['mmdcs.datasets'])
TRANSFORMS = Registry(
    'transform', parent=MMENGINE_TRANSFORMS, scope='mmdcs', locations=['mmdcs.datasets'])


# torch >= 2.6 vs mmengine 0.10.7 checkpoint loading, mmdet 3.3's SSDHead: fixed here, once
# (see mmdcs.utils.compat)
from .utils.compat import patch_mmdet_ssd_head, patch_mmengine_checkpoint_loading  # noqa: E402

patch_mmengine_checkpoint_loading()
patch_mmdet_ssd_head()
