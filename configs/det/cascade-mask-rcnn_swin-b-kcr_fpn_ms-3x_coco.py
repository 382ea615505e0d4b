# Cascade Mask R-CNN + FPN (COCO, 3x, multi-scale) with the searched KCR-Swin-B (KCR paper, Table 3:
# 52.5 box / 45.6 mask mAP); otherwise cascade-mask-rcnn_swin-b_fpn_ms-3x_coco.py.
#   --cfg-options model.backbone.subnet=work_dirs/.../subnet.json \
#                 model.backbone.init_cfg.checkpoint=work_dirs/.../epoch_300.pth
_base_ = './cascade-mask-rcnn_swin-b_fpn_ms-3x_coco.py'

subnet = 'work_dirs/kcr-swin-b_search_in100/subnet.json'
pretrained = 'work_dirs/kcr-swin-b_retrain_in1k/epoch_300.pth'

model = dict(backbone=dict(variant='kcr', subnet=subnet, init_cfg=dict(checkpoint=pretrained)))
