# UperNet (ADE20K, 512x512, 160k iterations) with DynamicSwin-T/0.7:
# ../seg/upernet_swin-t_512x512_160k_ade20k.py with the backbone replaced by mmdcs.DynamicSwin,
# initialised from the DynamicSwin classifier of dynamicswin-t_0.7_in1k.py (dense stage maps,
# predictors kept as trained on ImageNet; see mask-rcnn_dynamicswin-t_fpn_1x_coco.py).
#   bash tools/dist_train.sh configs/dynamicvit/upernet_dynamicswin-t_512x512_160k_ade20k.py 8 \
#       --cfg-options model.backbone.init_cfg.checkpoint=PATH
_base_ = '../seg/upernet_swin-t_512x512_160k_ade20k.py'

pretrained = 'work_dirs/dynamicswin-t_0.7_in1k/epoch_120.pth'

model = dict(
    backbone=dict(
        type='mmdcs.DynamicSwin',
        keep_ratio=0.7,
        pruning_loc=(1, 2, 3),
        freeze_predictors=True,
        init_cfg=dict(checkpoint=pretrained)))
