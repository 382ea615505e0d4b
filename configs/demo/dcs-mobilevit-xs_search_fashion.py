# DCS search of a MobileViT-XS supernet on Fashion-MNIST at 64x64 (the digits demo's search,
# dcs-mobilevit-xs_search_digits.py, on ../_base_/datasets/fashion_mnist_cls.py). The default
# budget, 0.92 of the baseline classifier's FLOPs, is above the floor of MLP channels alone
# (0.87); the method comparison sets its own budget and hidden-unit selection by --cfg-options.
# From a trained baseline: configs/pretrained/dcs-mobilevit-xs_search-from-baseline_fashion.py.
_base_ = [
    '../_base_/datasets/fashion_mnist_cls.py',
    '../_base_/schedules/demo_search.py',
    '../_base_/default_runtime.py',
]

model = dict(
    type='mmdcs.ChannelSelectionClassifier',
    backbone=dict(type='mmdcs.MobileViT', arch='mobilevit-xs', variant='dcs', gate_init=1.0),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=384,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        topk=(1, )),
    cost=dict(target=dict(flops=0.92, input_size=64)),
)
