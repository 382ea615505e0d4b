# SSDLite 320 (COCO, 200 epochs) with the plain MobileViT-S (DCS paper, Table 3: 27.7 mAP): the
# MobileViT-XS config with the S backbone (stride-16 map 128 ch, stride-32 map 640 ch).
# ImageNet weights: --cfg-options model.backbone.init_cfg.checkpoint=PATH
_base_ = './ssdlite_mobilevit-xs_200e_coco.py'

pretrained = 'checkpoints/mobilevit-s_in1k.pth'
backbone_channels = (128, 640)
ssd_channels = backbone_channels + (512, 256, 256, 128)

model = dict(
    backbone=dict(arch='mobilevit-s', init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=backbone_channels, out_channels=ssd_channels),
    bbox_head=dict(in_channels=ssd_channels))
