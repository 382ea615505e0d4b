# Demo classifier: the mmdcs MobileViT-XS (baseline) trained from scratch on the embedded digits set (64x64).
#   python tools/train.py configs/demo/mobilevit-xs_digits-cls.py
_base_ = [
    '../_base_/datasets/digits_cls.py',
    '../_base_/schedules/demo_adamw.py',
    '../_base_/default_runtime.py',
]

model = dict(
    type='ImageClassifier',
    backbone=dict(type='mmdcs.MobileViT', arch='mobilevit-xs', variant='baseline'),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=384,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        topk=(1, ),
    ))
