"""mmdcs/models/heads: the family heads live apart from the backbones and register in MODELS."""
import torch
from mmengine.registry import DefaultScope

from mmdcs.models.heads import EfficientViTClsHead
from mmdcs.registry import MODELS


def test_efficientvit_head_is_its_own_module_and_registered():
    assert EfficientViTClsHead.__module__ == 'mmdcs.models.heads.efficientvit_head'
    assert MODELS.get('EfficientViTClsHead') is EfficientViTClsHead
    # under mmdcs's scope (an earlier test may have left another scope current, whose registry
    # would be searched instead)
    with DefaultScope.overwrite_default_scope('mmdcs'):
        head = MODELS.build(dict(type='EfficientViTClsHead', num_classes=3, in_channels=8,
                                 mid_channels=4))
    assert head((torch.randn(2, 8), )).shape == (2, 3)
    assert head.pre_logits((torch.randn(2, 8), )).shape == (2, 4)
