"""mmdcs backbones: one file per family, each with baseline / DCS / KCR variants, as a
searchable supernet or a pruned subnet."""
import importlib
import pkgutil

from .base import VARIANTS, SelectableBackbone

# every family module registers itself in mmdcs.registry.MODELS on import
for _info in pkgutil.iter_modules(__path__):
    if _info.name != 'base':
        importlib.import_module(f'{__name__}.{_info.name}')

__all__ = ['SelectableBackbone', 'VARIANTS']
