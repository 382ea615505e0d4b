# Mask R-CNN + FPN (COCO, 1x) with DynamicSwin-T/0.7 (DynamicViT's T-PAMI extension; the public
# code has no detection configs, DynamicViT#34): ../det/mask-rcnn_swin-t_fpn_1x_coco.py (mmdet's
# Swin-T recipe) with the backbone replaced by mmdcs.DynamicSwin, initialised from the DynamicSwin
# classifier of dynamicswin-t_0.7_in1k.py. Every stage map stays dense (the unselected tokens of
# stage 3 go through the fast path, none is removed), so the FPN is unchanged. The predictors are
# kept as trained on ImageNet (freeze_predictors: no keep-ratio loss here); at inference each
# pruning location sends ceil(rho_s * N) of the stage-3 tokens of the actual input through the MLP.
#   bash tools/dist_train.sh configs/dynamicvit/mask-rcnn_dynamicswin-t_fpn_1x_coco.py 8 \
#       --cfg-options model.backbone.init_cfg.checkpoint=PATH
_base_ = '../det/mask-rcnn_swin-t_fpn_1x_coco.py'

pretrained = 'work_dirs/dynamicswin-t_0.7_in1k/epoch_120.pth'

model = dict(
    backbone=dict(
        type='mmdcs.DynamicSwin',
        keep_ratio=0.7,
        pruning_loc=(1, 2, 3),
        freeze_predictors=True,
        init_cfg=dict(checkpoint=pretrained)))
