# Retraining (or, from configs/pretrained/, fine-tuning) of a searched DCS-MobileViT-XS subnet on
# Fashion-MNIST with the IB bound (η = 1 after t_warm = 2 of 4 epochs, EMA), as
# dcs-mobilevit-xs_retrain_digits.py; the subnet file comes from tools/export_subnet.py
# (--cfg-options model.backbone.subnet=DIR/subnet.json).
_base_ = [
    '../_base_/datasets/fashion_mnist_cls.py',
    '../_base_/schedules/demo_retrain.py',
    '../_base_/default_runtime.py',
]
subnet = 'work_dirs/fashion/dcs_subnet/subnet.json'

model = dict(
    type='mmdcs.ChannelSelectionClassifier',
    backbone=dict(type='mmdcs.MobileViT', arch='mobilevit-xs', subnet=subnet),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=384,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        topk=(1, )),
    regularizer=dict(type='ib', eta=1., t_warm=2),
)
custom_hooks = _base_.dcs_retrain_hooks
