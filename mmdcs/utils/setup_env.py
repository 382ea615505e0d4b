"""Registration helpers, in the style of mmdet/mmpretrain ``register_all_modules``."""
import datetime
import importlib
import warnings

from mmengine import DefaultScope

import mmdcs.registry  # noqa: F401  (the registries, and the compatibility patches they apply)

#: the sub-packages whose modules register themselves into :mod:`mmdcs.registry`
MMDCS_MODULES = ('mmdcs.models', 'mmdcs.engine')


def register_all_modules(init_default_scope: bool = True) -> None:
    """Import every mmdcs module so that it is registered.

    Configs normally need none of this: ``type='mmdcs.X'`` imports the registry's locations
    lazily. Tools call it so that unprefixed names work under ``default_scope='mmdcs'``.

    Args:
        init_default_scope: make ``mmdcs`` the current default scope if none is set (the
            behaviour of mmdet's and mmpretrain's functions of the same name).
    """
    for name in MMDCS_MODULES:
        importlib.import_module(name)
    if init_default_scope:
        never_created = (DefaultScope.get_current_instance() is None
                         or not DefaultScope.check_instance_created('mmdcs'))
        if never_created:
            DefaultScope.get_instance('mmdcs', scope_name='mmdcs')
            return
        current_scope = DefaultScope.get_current_instance()
        if current_scope.scope_name != 'mmdcs':
            warnings.warn('The current default scope '
                          f'"{current_scope.scope_name}" is not "mmdcs", '
                          '`register_all_modules` will force the current'
                          'default scope to be "mmdcs". If this is not '
                          'expected, please set `init_default_scope=False`.')
            new_instance_name = f'mmdcs-{datetime.datetime.now()}'
            DefaultScope.get_instance(new_instance_name, scope_name='mmdcs')
