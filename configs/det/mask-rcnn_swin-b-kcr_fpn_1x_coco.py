# Mask R-CNN + FPN (COCO, 1x) with the searched KCR-Swin-B; otherwise mask-rcnn_swin-b_fpn_1x_coco.py.
#   --cfg-options model.backbone.subnet=work_dirs/.../subnet.json \
#                 model.backbone.init_cfg.checkpoint=work_dirs/.../best.pth
_base_ = './mask-rcnn_swin-b_fpn_1x_coco.py'

subnet = 'work_dirs/search/kcr-swin-b/subnet.json'
pretrained = 'work_dirs/retrain/kcr-swin-b/best.pth'

model = dict(backbone=dict(variant='kcr', subnet=subnet, init_cfg=dict(checkpoint=pretrained)))
