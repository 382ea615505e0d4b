# Cascade Mask R-CNN + FPN (COCO, 3x, multi-scale) with the plain Swin-B (KCR paper, Table 3: 51.9
# box / 45.0 mask mAP): the Swin-T config with the Swin-B backbone (FPN on 128-1024 channels) and
# drop path 0.3 (Swin's Swin-B detection recipe).
# ImageNet weights: --cfg-options model.backbone.init_cfg.checkpoint=PATH
_base_ = './cascade-mask-rcnn_swin-t_fpn_ms-3x_coco.py'

pretrained = 'checkpoints/swin-b_in1k.pth'

model = dict(
    backbone=dict(arch='swin-b', drop_path_rate=0.3, init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[128, 256, 512, 1024]))
