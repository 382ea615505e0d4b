# Mask R-CNN + FPN (COCO, 1x) with the plain EfficientViT-B1 (DCS paper, Table 2: 33.5 box / 31.9
# mask mAP). Recipe: configs/_base_/det/mask-rcnn_fpn_adamw-cos-1x_coco.py (AdamW 1e-3, cosine).
# FPN on the four stage outputs (out_indices 1-4: strides 4-32, 32/64/128/256 channels). The
# backbone's BatchNorm statistics stay frozen (norm_eval) at 2 images per GPU, as mmdet's BN
# backbones; their affine parameters train.
# ImageNet weights (timm's efficientvit_b1 converted, or an mmdcs-trained classifier):
#   --cfg-options model.backbone.init_cfg.checkpoint=PATH
_base_ = '../_base_/det/mask-rcnn_fpn_adamw-cos-1x_coco.py'

pretrained = 'checkpoints/efficientvit-b1_in1k.pth'

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmdcs.EfficientViT',
        arch='efficientvit-b1',
        variant='baseline',
        out_indices=(1, 2, 3, 4),
        norm_eval=True,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained, prefix='backbone.')),
    neck=dict(in_channels=[32, 64, 128, 256]))
