# SSDLite 320×320 on COCO with the MobileViT detection recipe, as DCS-Transformer fine-tunes its
# backbones (DCS paper, 4.3: "AdamW for 200 epochs following the same settings in MobileViT ...
# cosine, 0.0009 -> 1.6e-6"; the rest from Apple's ml-cvnets
# config/detection/ssd_mobilevit_*_320.yaml): AdamW with weight decay 0.01, 500 iterations of
# linear warm-up from 0.1x, cosine decay per epoch, batch 128 (4 GPUs x 32), an EMA of the weights
# (momentum 5e-4) used for validation.
# Everything else is mmdet's SSDLite: depthwise SSDNeck/SSDHead, anchors, smooth-L1 + hard-negative
# cross-entropy losses, Expand / MinIoURandomCrop / flip / photometric augmentation, 320×320 input.
# The per-backbone configs (configs/det/ssdlite_*.py) replace model.backbone and the channels of
# the two backbone maps (strides 16 and 32) in the neck and the head.
# Note: mmdet 3.3.0's SSDHead cannot predict (validation, tools/test.py) as released: its
# BaseDenseHead reads `self.loss_cls`, which SSDHead never sets (open-mmlab/mmdetection#11780);
# `SSDHead.loss_cls = None` restores the pre-3.3 behaviour (see
# tests/test_configs/test_det_configs.py::test_ssd_head_can_predict).
_base_ = 'mmdet::ssd/ssdlite_mobilenetv2-scratch_8xb24-600e_coco.py'

# An epoch is one pass over COCO train2017: mmdet's recipe repeats the set 5 times
# (RepeatDataset) for 120 "epochs" = 600; the paper counts 200 plain epochs.
train_dataloader = dict(
    batch_size=32,
    dataset=dict(_delete_=True, **_base_.train_dataloader.dataset.dataset))

max_epochs = 200
train_cfg = dict(max_epochs=max_epochs, val_interval=10)
default_hooks = dict(checkpoint=dict(interval=10, max_keep_ckpts=3))

param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=500),
    dict(
        type='CosineAnnealingLR',
        begin=0,
        T_max=max_epochs,
        end=max_epochs,
        by_epoch=True,
        eta_min=1.6e-6)
]

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(
        _delete_=True, type='AdamW', lr=9e-4, betas=(0.9, 0.999), weight_decay=0.01))

custom_hooks = [
    dict(type='NumClassCheckHook'),
    dict(type='CheckInvalidLossHook', interval=50, priority='VERY_LOW'),
    dict(
        type='EMAHook',
        ema_type='ExponentialMovingAverage',
        momentum=0.0005,
        update_buffers=True,
        priority=49)
]

# base_batch_size = (4 GPUs) x (32 samples per GPU); --auto-scale-lr rescales lr for other sizes
auto_scale_lr = dict(base_batch_size=128)
