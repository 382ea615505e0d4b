"""Every registry of mmdcs has members: a registry nothing fills is not kept."""
import pytest

from mmdcs import registry
from mmdcs.utils import register_all_modules


@pytest.mark.parametrize('name', registry.__all__)
def test_every_registry_has_members(name):
    register_all_modules(init_default_scope=False)
    assert getattr(registry, name).module_dict, f'mmdcs.registry.{name} is empty'


def test_only_filled_kinds_have_a_registry():
    from mmengine.registry import Registry
    found = {n for n, v in vars(registry).items()
             if isinstance(v, Registry) and v.scope == 'mmdcs'}
    assert found == set(registry.__all__)
