# Mask R-CNN + FPN (COCO, 1x) with the searched KCR-Swin-B; otherwise mask-rcnn_swin-b_fpn_1x_coco.py.
#   --cfg-options model.backbone.subnet=work_dirs/.../subnet.json \
#                 model.backbone.init_cfg.checkpoint=work_dirs/.../epoch_300.pth
_base_ = './mask-rcnn_swin-b_fpn_1x_coco.py'

subnet = 'work_dirs/kcr-swin-b_search_in100/subnet.json'
pretrained = 'work_dirs/kcr-swin-b_retrain_in1k/epoch_300.pth'

model = dict(backbone=dict(variant='kcr', subnet=subnet, init_cfg=dict(checkpoint=pretrained)))
