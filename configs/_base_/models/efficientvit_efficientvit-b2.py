# EfficientViT-B2 (MIT), timm's efficientvit_b2, as an mmpretrain ImageClassifier.
# The backbone's default out_indices=(5, ) returns timm's head.in_conv feature (1x1 conv + BN +
# Hardswish to 2304 channels); EfficientViTClsHead is timm's head.classifier on the pooled feature
# (Linear 2304->2560 without bias, LayerNorm, Hardswish, Dropout, Linear 2560->classes).
# Weights from timm: mmdcs.models.backbones.efficientvit.convert_timm.
model = dict(
    type='ImageClassifier',
    backbone=dict(type='mmdcs.EfficientViT', arch='efficientvit-b2', variant='baseline'),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='mmdcs.EfficientViTClsHead',
        num_classes=1000,
        in_channels=2304,
        mid_channels=2560,
        dropout_rate=0.0,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        topk=(1, 5),
    ))
