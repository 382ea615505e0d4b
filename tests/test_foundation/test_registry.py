"""The plugin's registries: children of mmengine's roots, reachable as 'mmdcs.X' from any scope."""
import subprocess
import sys
import textwrap

import mmengine.registry as roots
import pytest

from mmdcs import registry


@pytest.mark.parametrize('name', registry.__all__)
def test_registries_are_children_of_mmengine_roots(name):
    reg = getattr(registry, name)
    root = getattr(roots, name)
    assert reg.scope == 'mmdcs'
    assert reg.parent is root
    assert root.children['mmdcs'] is reg
    assert reg._locations, f'{name} has no import locations'


def _build_in_fresh_process(code):
    """Run in a new interpreter, so nothing of mmdcs is imported beforehand."""
    return subprocess.run([sys.executable, '-c', textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize('scope, registry_module', [
    ('mmdet', 'mmdet.registry'),
    ('mmseg', 'mmseg.registry'),
    ('mmpretrain', 'mmpretrain.registry'),
])
def test_mmdcs_type_builds_from_other_scopes_without_custom_imports(scope, registry_module):
    proc = _build_in_fresh_process(f"""
        import sys
        from mmengine.config import Config
        from mmengine.registry import DefaultScope
        from {registry_module} import MODELS
        assert 'mmdcs' not in sys.modules
        cfg = Config(dict(default_scope='{scope}',
                          model=dict(type='mmdcs.ViT', arch='deit-tiny', variant='dcs')))
        with DefaultScope.overwrite_default_scope(cfg.default_scope):
            model = MODELS.build(cfg.model)
        print(type(model).__module__, type(model).__name__)
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'mmdcs.models.backbones.vit ViT' in proc.stdout


def test_register_all_modules_sets_scope():
    from mmengine.registry import DefaultScope

    from mmdcs.registry import MODELS
    from mmdcs.utils import register_all_modules
    register_all_modules(init_default_scope=True)
    assert DefaultScope.get_current_instance().scope_name == 'mmdcs'
    assert 'ViT' in MODELS.module_dict


def test_weights_only_default_is_handled_for_mmengine_checkpoints(tmp_path):
    """torch >= 2.6 refuses mmengine's checkpoints (HistoryBuffer, numpy) unless patched."""
    import numpy as np
    import torch
    from mmengine.logging import HistoryBuffer
    from mmengine.runner.checkpoint import _load_checkpoint

    import mmdcs.registry  # noqa: F401  (applies the patch)
    path = str(tmp_path / 'ckpt.pth')
    torch.save({'state_dict': {'w': torch.ones(2)}, 'message_hub': HistoryBuffer([1.0], [1]),
                'meta': {'seed': np.int64(3)}}, path)
    ckpt = _load_checkpoint(path, map_location='cpu')
    assert torch.equal(ckpt['state_dict']['w'], torch.ones(2))


@pytest.mark.parametrize('scope', ['mmdcs', 'mmpretrain', None])
def test_classifier_builds_the_same_under_mmdcs_and_task_scope(scope, monkeypatch):
    """Under default_scope='mmdcs' (register_all_modules) the mmpretrain parts of an mmdcs
    classifier (preprocessor, neck, head, loss) are still found, and mmdcs names stay mmdcs's
    (mmpretrain also registers a 'MobileViT'); None: no default scope at all."""
    from collections import OrderedDict

    from mmengine.registry import DefaultScope
    if scope is None:  # not the scope an earlier test in this process left current
        monkeypatch.setattr(DefaultScope, '_instance_dict', OrderedDict())

    from mmdcs.models.backbones.efficientvit import EfficientViTClsHead
    from mmdcs.models.backbones.mobilevit import MobileViT
    from mmdcs.registry import MODELS
    prefix = 'mmdcs.' if scope == 'mmpretrain' else ''
    cfg = dict(type=prefix + 'ChannelSelectionClassifier',
               backbone=dict(type=prefix + 'MobileViT', arch='mobilevit-xs'),
               neck=dict(type='GlobalAveragePooling'),
               head=dict(type=prefix + 'EfficientViTClsHead', num_classes=10, in_channels=384,
                         mid_channels=32))
    with DefaultScope.overwrite_default_scope(scope):
        model = MODELS.build(cfg)
    assert isinstance(model.backbone, MobileViT)
    assert isinstance(model.head, EfficientViTClsHead)
    assert type(model.head.loss_module).__name__ == 'CrossEntropyLoss'
    assert type(model.data_preprocessor).__name__ == 'ClsDataPreprocessor'
    assert type(model.neck).__name__ == 'GlobalAveragePooling'
