# UperNet (ADE20K, 512×512, 160k iterations) with the searched KCR-Swin-T (the subnet exported by
# the KCR search, initialised from its retrained ImageNet classifier); otherwise
# upernet_swin-t_512x512_160k_ade20k.py.
#   --cfg-options model.backbone.subnet=work_dirs/.../subnet.json \
#                 model.backbone.init_cfg.checkpoint=work_dirs/.../best.pth
_base_ = './upernet_swin-t_512x512_160k_ade20k.py'

subnet = 'work_dirs/search/kcr-swin-t/subnet.json'
pretrained = 'work_dirs/retrain/kcr-swin-t/best.pth'

model = dict(backbone=dict(variant='kcr', subnet=subnet, init_cfg=dict(checkpoint=pretrained)))
