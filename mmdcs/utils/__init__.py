from .compat import patch_mmengine_checkpoint_loading
from .setup_env import register_all_modules

__all__ = ['patch_mmengine_checkpoint_loading', 'register_all_modules']
