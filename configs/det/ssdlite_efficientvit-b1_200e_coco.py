# SSDLite 320 (COCO, 200 epochs) with the plain EfficientViT-B1 (DCS paper, Table 3: 28.4 mAP).
# Recipe: configs/_base_/det/ssdlite_adamw-200e_coco.py. The backbone gives the outputs of its
# last two stages (out_indices 3, 4: strides 16 and 32, 128 and 256 channels).
# ImageNet weights (timm's efficientvit_b1 converted, or an mmdcs-trained classifier):
#   --cfg-options model.backbone.init_cfg.checkpoint=PATH
_base_ = '../_base_/det/ssdlite_adamw-200e_coco.py'

pretrained = 'checkpoints/efficientvit-b1_in1k.pth'
backbone_channels = (128, 256)
ssd_channels = backbone_channels + (512, 256, 256, 128)

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmdcs.EfficientViT',
        arch='efficientvit-b1',
        variant='baseline',
        out_indices=(3, 4),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained, prefix='backbone.')),
    neck=dict(in_channels=backbone_channels, out_channels=ssd_channels),
    bbox_head=dict(in_channels=ssd_channels))
