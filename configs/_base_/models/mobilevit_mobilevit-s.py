# MobileViT-S = timm mobilevit_s as an mmpretrain ImageClassifier:
# global average pooling of final_conv's 640 channels, linear head (timm's head: avg pool + fc,
# no dropout, no pre-logits). Weights converted from timm by
# mmdcs.models.backbones.mobilevit.convert_timm load into it.
# Input normalisation of the timm weights: RGB in [0, 1] (mean 0, std 255 in a
# ClsDataPreprocessor with to_rgb=True); nominal size 256.
model = dict(
    type='ImageClassifier',
    backbone=dict(type='mmdcs.MobileViT', arch='mobilevit-s', variant='baseline'),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=1000,
        in_channels=640,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        topk=(1, 5)))
