# SSDLite 320 (COCO, 200 epochs) with the searched DCS-MobileViT-XS (DCS paper, Table 3: 25.8 mAP).
# Same as the baseline config but the backbone is the pruned subnet exported by the search and
# initialised from its retrained ImageNet classifier:
#   --cfg-options model.backbone.subnet=work_dirs/.../subnet.json \
#                 model.backbone.init_cfg.checkpoint=work_dirs/.../epoch_300.pth
# (the variables below are read when the file is parsed; overriding them alone changes nothing).
# The neck reads the stage outputs, whose channels pruning leaves unchanged.
_base_ = './ssdlite_mobilevit-xs_200e_coco.py'

subnet = 'work_dirs/dcs-mobilevit-xs_search_in100/subnet.json'
pretrained = 'work_dirs/dcs-mobilevit-xs_retrain_in1k/epoch_300.pth'

model = dict(backbone=dict(variant='dcs', subnet=subnet, init_cfg=dict(checkpoint=pretrained)))
