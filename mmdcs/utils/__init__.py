from .compat import patch_mmengine_checkpoint_loading
from .errors import ConfigError, InputError
from .scope import build_model_part
from .setup_env import register_all_modules

__all__ = ['patch_mmengine_checkpoint_loading', 'register_all_modules', 'build_model_part',
           'InputError', 'ConfigError']
