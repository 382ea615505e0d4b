# SSDLite 320 (COCO, 200 epochs) with the plain MobileViT-XS (DCS paper, Table 3: 24.8 mAP).
# Recipe: configs/_base_/det/ssdlite_adamw-200e_coco.py. The backbone gives its stride-16 (80 ch)
# and stride-32 (384 ch, after final_conv) maps; SSDNeck adds four more levels.
# ImageNet weights: a checkpoint converted from timm (tools/convert/timm_to_mmdcs.py mobilevit
# mobilevit-xs ...) or an mmdcs-trained classifier; set it with
#   --cfg-options model.backbone.init_cfg.checkpoint=PATH
# (the `pretrained` variable below is read when the file is parsed; overriding it alone changes
# nothing).
_base_ = '../_base_/det/ssdlite_adamw-200e_coco.py'

pretrained = 'checkpoints/mobilevit-xs_in1k.pth'
backbone_channels = (80, 384)
ssd_channels = backbone_channels + (512, 256, 256, 128)

model = dict(
    # the timm MobileViT weights take RGB in [0, 1] (mmdet's Expand still fills with its ImageNet
    # mean: a fill colour only)
    data_preprocessor=dict(mean=[0., 0., 0.], std=[255., 255., 255.], bgr_to_rgb=True),
    backbone=dict(
        _delete_=True,
        type='mmdcs.MobileViT',
        arch='mobilevit-xs',
        variant='baseline',
        out_indices=(3, 4),
        drop_rate=0.1,  # transformer dropout of the ml-cvnets detection recipe
        init_cfg=dict(type='Pretrained', checkpoint=pretrained, prefix='backbone.')),
    neck=dict(in_channels=backbone_channels, out_channels=ssd_channels),
    bbox_head=dict(in_channels=ssd_channels))
