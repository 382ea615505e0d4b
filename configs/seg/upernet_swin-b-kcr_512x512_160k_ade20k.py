# UperNet (ADE20K, 512×512, 160k iterations) with the searched KCR-Swin-B (KCR paper, Table 2:
# 52.4 mIoU, multi-scale test); otherwise upernet_swin-b_512x512_160k_ade20k.py.
#   --cfg-options model.backbone.subnet=work_dirs/.../subnet.json \
#                 model.backbone.init_cfg.checkpoint=work_dirs/.../epoch_300.pth
_base_ = './upernet_swin-b_512x512_160k_ade20k.py'

subnet = 'work_dirs/kcr-swin-b_search_in100/subnet.json'
pretrained = 'work_dirs/kcr-swin-b_retrain_in1k/epoch_300.pth'

model = dict(backbone=dict(variant='kcr', subnet=subnet, init_cfg=dict(checkpoint=pretrained)))
