# Mask R-CNN (FPN, 1x, COCO) with an mmdcs Swin-T KCR supernet: mmdet's Swin-T recipe (AdamW
# 1e-4, wd 0.05, no decay on norms and relative position tables, 12 epochs) with the backbone
# replaced. For the searched subnet set `model.backbone.subnet=<subnet.json>` (the variant is
# read from it), e.g. `--cfg-options model.backbone.subnet=work_dirs/search/subnet.json`.
# ImageNet weights: a checkpoint converted from timm (mmdcs.models.backbones.swin.convert_timm)
# loads with init_cfg=dict(type='Pretrained', checkpoint=..., prefix='backbone.').
_base_ = 'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmdcs.Swin',
        arch='swin-t',
        variant='kcr',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.2,
        init_cfg=None),
    neck=dict(in_channels=[96, 192, 384, 768]))
