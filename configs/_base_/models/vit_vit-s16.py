# ViT vit-s16 = timm vit_small_patch16_224 as an mmpretrain ImageClassifier:
# the class token after the final norm, linear head (timm's global_pool='token').
# Weights converted from timm by mmdcs.models.backbones.vit.convert_timm load into it.
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='mmdcs.ViT',
        arch='vit-s16',
        variant='baseline',
        img_size=224,
        out_type='cls_token',
        drop_path_rate=0.1),
    neck=None,
    head=dict(
        type='LinearClsHead',
        num_classes=1000,
        in_channels=384,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        topk=(1, 5),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02)))
