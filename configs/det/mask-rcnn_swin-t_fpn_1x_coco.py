# Mask R-CNN + FPN (COCO, 1x) with the plain Swin-T: mmdet's Swin-T recipe
# (mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py: AdamW 1e-4, weight decay 0.05, none on norms
# and relative position tables, lr x0.1 at epochs 8 and 11, drop path 0.2) with the backbone
# replaced by the mmdcs Swin (FPN on its four stages, 96-768 channels).
# The KCR paper's Table 3 calls its COCO results "Mask R-CNN", but its text (4.4) and numbers
# (Swin-T 50.5 / 43.7) are Cascade Mask R-CNN 3x: see cascade-mask-rcnn_swin-*_fpn_ms-3x_coco.py.
# ImageNet weights (timm's swin_tiny_patch4_window7_224 converted by
# tools/convert/timm_to_mmdcs.py, or an mmdcs-trained classifier):
#   --cfg-options model.backbone.init_cfg.checkpoint=PATH
_base_ = 'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'

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
