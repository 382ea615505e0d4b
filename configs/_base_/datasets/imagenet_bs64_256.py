# ImageNet-1k at 256x256 for MobileViT (its nominal resolution; DCS paper 4.1). Inputs are RGB
# scaled to [0, 1] without mean/std, the convention of MobileViT's weights (timm, ml-cvnets) and
# of configs/det/ssdlite_mobilevit-*. Test: short side 288, centre crop 256 (mmpretrain's
# MobileViT configs). The same block is in ./imagenet100_search_256.py (a test keeps them equal).
_base_ = './imagenet_bs64_224.py'

data_preprocessor = dict(mean=[0., 0., 0.], std=[255., 255., 255.], to_rgb=True)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=256, backend='pillow', interpolation='bicubic'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=288, edge='short', backend='pillow', interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=256),
    dict(type='PackInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
