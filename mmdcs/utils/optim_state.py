"""The optimizer state a resumed training loads (``Runner.resume``, ``--resume``) must be this
run's: the same optimizers (one, or the same named ones of a search), the same parameter groups
holding as many parameters, and the hyper-parameters of the same optimizer type. Otherwise
mmengine fails deep inside (an assertion of ``OptimWrapperDict``) or, worse, torch loads it and
the first step fails (``KeyError: 'momentum'``: AdamW's state in an SGD). Checked before the
state is loaded, as one :class:`~mmdcs.utils.errors.ConfigError` line
(:func:`patch_optimizer_state_check`, one of :func:`mmdcs.utils.compat.apply_compat_patches`).
"""
import functools
from typing import Dict, List

from mmengine.optim import BaseOptimWrapper, OptimWrapperDict

from .errors import ConfigError

#: what the refusal tells the user to do instead
_INSTEAD = ('resume a checkpoint of this config, or start from its weights alone with '
            '--cfg-options load_from=FILE (without --resume)')


def _groups(state) -> List[dict]:
    groups = state.get('param_groups') if isinstance(state, dict) else None
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        return []
    return groups


@functools.lru_cache(maxsize=None)
def _filled_on_load(kind: type) -> frozenset:
    """The hyper-parameters that ``kind``'s ``__setstate__`` gives a loaded group that lacks
    them (options newer than a checkpoint: ``foreach``, ``maximize`` ...): not required."""
    probe = object.__new__(kind)
    try:
        kind.__setstate__(probe, dict(defaults={}, state={}, param_groups=[dict(params=[])]))
    except Exception:  # an optimizer whose __setstate__ needs more: require nothing extra
        return frozenset()
    return frozenset(probe.param_groups[0]) - {'params'}


def check_optimizer_state(optimizer, state, name: str = '') -> None:
    """``state`` (a torch optimizer's ``state_dict()``) fits ``optimizer``: as many parameter
    groups, as many parameters in each, and every hyper-parameter of ``optimizer``'s type that
    loading does not fill in (:func:`_filled_on_load`). A :class:`ConfigError` otherwise."""
    what = f'the optimizer state{f" of {name!r}" if name else ""}'
    groups = _groups(state)
    if not groups:
        held = f'the states of the optimizers {sorted(state)}' if isinstance(state, dict) \
            else f'a {type(state).__name__} as its optimizer state'
        raise ConfigError(f'resume: the checkpoint holds {held}; this run has one '
                          f'{type(optimizer).__name__}: {_INSTEAD}')
    saved = [len(g.get('params', ())) for g in groups]
    mine = [len(g['params']) for g in optimizer.param_groups]
    if saved != mine:
        raise ConfigError(f'resume: the checkpoint holds {what} of another model or parameter '
                          f'grouping ({len(saved)} groups of {saved} parameters; this run has '
                          f'{len(mine)} of {mine}): {_INSTEAD}')
    kind = type(optimizer)
    needed = set(optimizer.defaults) - _filled_on_load(kind)
    missing = sorted(needed - set().union(*(set(g) for g in groups)))
    if missing:
        raise ConfigError(f'resume: the checkpoint holds {what} of another optimizer type (it '
                          f'lacks {", ".join(missing)}, which {kind.__name__} needs): {_INSTEAD}')


def check_wrapper_state(wrapper, state) -> None:
    """``state`` fits an mmengine optimizer wrapper: the named wrappers of an
    ``OptimWrapperDict`` (a search's ``weight`` and ``arch``), or one wrapper's optimizer."""
    if isinstance(wrapper, OptimWrapperDict):
        names: Dict[str, object] = dict(wrapper.optim_wrappers)
        if not isinstance(state, dict) or set(state) != set(names):
            held = f'the states of the optimizers {sorted(state)}' if _groups(state) == [] \
                and isinstance(state, dict) else "one optimizer's state"
            raise ConfigError(f'resume: the checkpoint holds {held}; this run has the '
                              f'optimizers {sorted(names)}: {_INSTEAD}')
        return  # each wrapper checks its own state when it loads it
    check_optimizer_state(wrapper.optimizer, state)


def _checked(load):
    @functools.wraps(load)
    def load_state_dict(self, state_dict):
        check_wrapper_state(self, state_dict)
        return load(self, state_dict)

    load_state_dict._mmdcs_checked = True
    return load_state_dict


def patch_optimizer_state_check() -> None:
    """Every mmengine optimizer wrapper class (``OptimWrapper``, ``AmpOptimWrapper``,
    ``OptimWrapperDict`` ...) checks a state before loading it (:func:`check_wrapper_state`).
    Idempotent."""
    todo = [BaseOptimWrapper]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        own = cls.__dict__.get('load_state_dict')
        if own is not None and not getattr(own, '_mmdcs_checked', False):
            cls.load_state_dict = _checked(own)
