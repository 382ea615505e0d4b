# Mask R-CNN + FPN (COCO, 1x) with the searched DCS-EfficientViT-B1 (DCS paper, Table 2: 34.8 box /
# 33.2 mask mAP).
#   --cfg-options model.backbone.subnet=work_dirs/.../subnet.json \
#                 model.backbone.init_cfg.checkpoint=work_dirs/.../epoch_300.pth
_base_ = './mask-rcnn_efficientvit-b1_fpn_1x_coco.py'

subnet = 'work_dirs/dcs-efficientvit-b1_search_in100/subnet.json'
pretrained = 'work_dirs/dcs-efficientvit-b1_retrain_in1k/epoch_300.pth'

model = dict(backbone=dict(variant='dcs', subnet=subnet, init_cfg=dict(checkpoint=pretrained)))
