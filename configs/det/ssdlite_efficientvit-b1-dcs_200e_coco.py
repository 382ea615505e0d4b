# SSDLite 320 (COCO, 200 epochs) with the searched DCS-EfficientViT-B1 (seed 000, Table 3: 29.0 mAP).
#   --cfg-options model.backbone.subnet=work_dirs/.../subnet.json \
#                 model.backbone.init_cfg.checkpoint=work_dirs/.../best.pth
_base_ = './ssdlite_efficientvit-b1_200e_coco.py'

subnet = 'work_dirs/search/dcs-efficientvit-b1/subnet.json'
pretrained = 'work_dirs/retrain/dcs-efficientvit-b1/best.pth'

model = dict(backbone=dict(variant='dcs', subnet=subnet, init_cfg=dict(checkpoint=pretrained)))
