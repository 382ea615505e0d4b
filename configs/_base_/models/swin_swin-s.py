# Swin swin-s = timm swin_small_patch4_window7_224 as an mmpretrain ImageClassifier:
# the last stage after its LayerNorm (backbone.norm3 = timm's final norm), global average
# pooling, linear head. Weights converted from timm by mmdcs.models.backbones.swin.convert_timm
# (or from the original checkpoints by convert_official_swin) load into it.
# drop_path_rate as mmpretrain's Swin recipe.
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='mmdcs.Swin',
        arch='swin-s',
        variant='baseline',
        img_size=224,
        out_indices=(3, ),
        drop_path_rate=0.3),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=1000,
        in_channels=768,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        topk=(1, 5),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02)))
