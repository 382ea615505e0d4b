# ImageNet-1k at 224x224 for the retraining of the DCS / KCR subnets and of their baselines.
# Augmentation as the papers (DCS paper A.2, KCR paper A.1, "following EfficientViT"): random
# scaling + cropping (RandomResizedCrop) and random horizontal flip; no RandAugment, mixup,
# cutmix or random erasing. Test: short side 256, centre crop 224. Bicubic (PIL), as timm.
# 64 images per GPU x 8 GPUs = the papers' batch of 512 (they used 4 GPUs x 128: set
# train_dataloader.batch_size=128 on 4 GPUs; the schedules set auto_scale_lr = 512).
# Layout (mmpretrain's): data/imagenet/{train,val}/ and, if present, meta/{train,val}.txt.
dataset_type = 'ImageNet'
data_root = 'data/imagenet'

data_preprocessor = dict(
    num_classes=1000,
    mean=[123.675, 116.28, 103.53],
    std=[58.395, 57.12, 57.375],
    to_rgb=True,
)

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=224, backend='pillow', interpolation='bicubic'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=256, edge='short', backend='pillow', interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=224),
    dict(type='PackInputs'),
]

train_dataloader = dict(
    batch_size=64,
    num_workers=8,
    persistent_workers=True,
    dataset=dict(type=dataset_type, data_root=data_root, split='train', pipeline=train_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=True),
)
val_dataloader = dict(
    batch_size=64,
    num_workers=8,
    persistent_workers=True,
    dataset=dict(type=dataset_type, data_root=data_root, split='val', pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False),
)
val_evaluator = dict(type='Accuracy', topk=(1, 5))
test_dataloader = val_dataloader
test_evaluator = val_evaluator
