"""The classification head of EfficientViT (timm's ``head.classifier``), an mmpretrain head.

With mmpretrain's ``GlobalAveragePooling`` on the ``head_in_conv`` output of
:class:`~mmdcs.models.backbones.efficientvit.EfficientViT` (``out_indices=(5, )``) it completes
timm's ``efficientvit_b*`` exactly.
"""
from typing import Tuple

import torch.nn as nn
from mmpretrain.models.heads import ClsHead
from torch import Tensor

from mmdcs.checks import check_number
from mmdcs.registry import MODELS
from mmdcs.utils.scope import build_model_part

__all__ = ['EfficientViTClsHead']


@MODELS.register_module()
class EfficientViTClsHead(ClsHead):
    """timm's EfficientViT classifier MLP on the pooled ``head_in_conv`` feature:
    Linear(in, mid, no bias), LayerNorm, Hardswish, Dropout, Linear(mid, classes).

    Parameter names are timm's (``classifier.0`` … ``classifier.4``). ``pre_logits`` is the
    ``mid_channels`` vector after the activation.
    """

    def __init__(self, num_classes: int, in_channels: int, mid_channels: int,
                 dropout_rate: float = 0., norm_eps: float = 1e-5, **kwargs):
        loss = kwargs.pop('loss', dict(type='CrossEntropyLoss', loss_weight=1.0))
        super().__init__(loss=build_model_part(loss), **kwargs)
        check_number(num_classes, 'num_classes', 1, integer=True)
        check_number(dropout_rate, 'dropout_rate', 0, 1, high_open=True)
        check_number(norm_eps, 'norm_eps', 0, low_open=True)
        self.num_classes = num_classes
        self.in_channels = in_channels
        self.mid_channels = mid_channels
        self.classifier = nn.Sequential(
            nn.Linear(in_channels, mid_channels, bias=False),
            nn.LayerNorm(mid_channels, eps=norm_eps),
            nn.Hardswish(),
            nn.Dropout(dropout_rate),
            nn.Linear(mid_channels, num_classes),
        )

    @property
    def fc(self) -> nn.Linear:
        """The last (class) layer."""
        return self.classifier[4]

    def pre_logits(self, feats: Tuple[Tensor]) -> Tensor:
        x = feats[-1]
        for layer in self.classifier[:4]:
            x = layer(x)
        return x

    def forward(self, feats: Tuple[Tensor]) -> Tensor:
        return self.fc(self.pre_logits(feats))
