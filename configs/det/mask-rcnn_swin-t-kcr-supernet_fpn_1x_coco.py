# Mask R-CNN + FPN (COCO, 1x) with the Swin-T KCR *supernet* (every block with its MLP channel
# gate, all gates open at the start): mask-rcnn_swin-t-kcr_fpn_1x_coco.py without a subnet, for
# experiments with the unpruned KCR blocks (not a setting of the papers). It initialises from a
# plain Swin-T classifier (converted from timm; the gates keep their "all kept" init):
#   --cfg-options model.backbone.init_cfg.checkpoint=PATH
# For the searched subnet use mask-rcnn_swin-t-kcr_fpn_1x_coco.py (or set model.backbone.subnet).
_base_ = './mask-rcnn_swin-t-kcr_fpn_1x_coco.py'

pretrained = 'checkpoints/swin-t_in1k.pth'

model = dict(backbone=dict(subnet=None, init_cfg=dict(checkpoint=pretrained)))
