# SSDLite 320 (COCO, 200 epochs) with the searched DCS-MobileViT-S (DCS paper, Table 3: 28.7 mAP).
#   --cfg-options model.backbone.subnet=work_dirs/.../subnet.json \
#                 model.backbone.init_cfg.checkpoint=work_dirs/.../epoch_300.pth
_base_ = './ssdlite_mobilevit-s_200e_coco.py'

subnet = 'work_dirs/dcs-mobilevit-s_search_in100/subnet.json'
pretrained = 'work_dirs/dcs-mobilevit-s_retrain_in1k/epoch_300.pth'

model = dict(backbone=dict(variant='dcs', subnet=subnet, init_cfg=dict(checkpoint=pretrained)))
