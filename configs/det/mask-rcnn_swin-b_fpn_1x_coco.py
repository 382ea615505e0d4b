# Mask R-CNN + FPN (COCO, 1x) with the plain Swin-B: the Swin-T config (mmdet's Swin recipe) with
# the Swin-B backbone (FPN on 128-1024 channels) and drop path 0.3 (the Swin recipe's value for B).
# ImageNet weights: --cfg-options model.backbone.init_cfg.checkpoint=PATH
_base_ = './mask-rcnn_swin-t_fpn_1x_coco.py'

pretrained = 'checkpoints/swin-b_in1k.pth'

model = dict(
    backbone=dict(arch='swin-b', drop_path_rate=0.3, init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[128, 256, 512, 1024]))
