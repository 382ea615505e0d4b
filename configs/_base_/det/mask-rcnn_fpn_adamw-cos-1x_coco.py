# Mask R-CNN + FPN, 1x schedule (12 epochs), COCO instance segmentation, as DCS-Transformer
# fine-tunes DCS-EfficientViT-B1 and its baseline (DCS paper, 4.2): mmdet's Mask R-CNN 1x recipe
# (data, batch 16 = 8 GPUs x 2, 500-iteration linear warm-up) with AdamW, lr 1e-3, decayed by a
# cosine schedule. The paper gives neither the weight decay nor the final lr: 0.05 (the usual AdamW
# value of mmdet's transformer-backbone recipes) and a decay to 0.
# The per-backbone configs (configs/det/mask-rcnn_efficientvit-*.py) replace model.backbone and the
# FPN input channels.
_base_ = 'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'

max_epochs = 12
train_cfg = dict(max_epochs=max_epochs)

param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=500),
    dict(
        type='CosineAnnealingLR',
        begin=0,
        T_max=max_epochs,
        end=max_epochs,
        by_epoch=True,
        eta_min=0.)
]

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(
        _delete_=True, type='AdamW', lr=1e-3, betas=(0.9, 0.999), weight_decay=0.05))
