# Cascade Mask R-CNN + FPN, 3x schedule (36 epochs), multi-scale training, COCO: the Swin
# Transformer detection recipe that KCR-Transformer follows (KCR paper, 4.4): every image resized so
# that its shorter side is in [480, 800] and its longer side at most 1333 (with DETR's random crop
# as the second of two policies, as the Swin recipe), AdamW lr 1e-4, weight decay 0.05 (none on
# norms and relative position tables), batch 16 (8 GPUs x 2), lr x0.1 at epochs 27 and 33.
# mmdet 3.3 has no Swin Cascade Mask R-CNN config: this takes mmdet's ConvNeXt one, which has the
# Swin recipe's heads (4conv1fc bbox heads with SyncBN and GIoU loss) and pipeline, and replaces
# its optimizer (ConvNeXt's layer-wise decay and lr 2e-4) by Swin's. Plain OptimWrapper so that it
# also runs on a CPU; mixed precision with `tools/train.py ... --amp` (the Swin recipe used fp16).
# The per-backbone configs (configs/det/cascade-mask-rcnn_swin-*.py) replace model.backbone and the
# FPN input channels.
_base_ = 'mmdet::convnext/cascade-mask-rcnn_convnext-t-p4-w7_fpn_4conv1fc-giou_amp-ms-crop-3x_coco.py'  # noqa

# ConvNeXt comes from mmpretrain; mmdcs backbones need no custom_imports
custom_imports = None

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.05),
    paramwise_cfg=dict(
        custom_keys={
            'absolute_pos_embed': dict(decay_mult=0.),
            'relative_position_bias_table': dict(decay_mult=0.),
            'norm': dict(decay_mult=0.)
        }))
