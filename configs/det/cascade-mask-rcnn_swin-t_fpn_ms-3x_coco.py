# Cascade Mask R-CNN + FPN (COCO, 3x, multi-scale 480-800) with the plain Swin-T (KCR paper, Table 3:
# 50.5 box / 43.7 mask mAP). Recipe: configs/_base_/det/cascade-mask-rcnn_fpn_ms-3x_coco.py (Swin's:
# AdamW 1e-4, weight decay 0.05, 36 epochs); drop path 0.2 as Swin's Swin-T recipe.
# ImageNet weights (timm's swin_tiny_patch4_window7_224 converted by
# tools/convert/timm_to_mmdcs.py, or an mmdcs-trained classifier):
#   --cfg-options model.backbone.init_cfg.checkpoint=PATH
_base_ = '../_base_/det/cascade-mask-rcnn_fpn_ms-3x_coco.py'

pretrained = 'checkpoints/swin-t_in1k.pth'

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmdcs.Swin',
        arch='swin-t',
        variant='baseline',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.2,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained, prefix='backbone.')),
    neck=dict(in_channels=[96, 192, 384, 768]))
