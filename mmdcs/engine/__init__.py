"""Runner-side code: the search loop, its optimizer constructor, and the hooks that move state
between the mmengine runner and the method's modules (DCS/KCR, and the peer methods OFB and
DynamicViT)."""
from .dynamicvit_hooks import DynamicViTFreezeHook, DynamicViTOptimWrapperConstructor
from .hooks import RegularizerHook, TemperatureHook
from .ofb_hooks import OFBOptimWrapperConstructor, OFBSearchHook
from .optimizers import SearchOptimWrapperConstructor
from .search_loop import AlternatingSearchLoop, interleave, split_indices

__all__ = ['AlternatingSearchLoop', 'SearchOptimWrapperConstructor', 'TemperatureHook',
           'RegularizerHook', 'interleave', 'split_indices', 'DynamicViTFreezeHook',
           'DynamicViTOptimWrapperConstructor', 'OFBOptimWrapperConstructor', 'OFBSearchHook']
