# UperNet (ADE20K, 512×512, 160k iterations) with the Swin-T KCR *supernet* (every block with its
# MLP channel gate, all gates open at the start): upernet_swin-t-kcr_512x512_160k_ade20k.py without
# a subnet, for experiments with the unpruned KCR blocks (not a setting of the papers). It
# initialises from a plain Swin-T classifier (converted from timm; the gates keep their
# "all kept" init):
#   --cfg-options model.backbone.init_cfg.checkpoint=PATH
# For the searched subnet use upernet_swin-t-kcr_512x512_160k_ade20k.py (or set
# model.backbone.subnet).
_base_ = './upernet_swin-t-kcr_512x512_160k_ade20k.py'

pretrained = 'checkpoints/swin-t_in1k.pth'

model = dict(backbone=dict(subnet=None, init_cfg=dict(checkpoint=pretrained)))
