# UperNet + multi-level neck (ADE20K, 512x512, 160k iterations) with DynamicViT-DeiT-S/0.7: mmseg's
# DeiT-S recipe (mmseg::vit/vit_deit-s16_mln_upernet_8xb2-160k_ade20k-512x512.py: blocks 3, 6, 9, 12
# without final norm, rescaled x4, x2, x1, x0.5) with the backbone replaced by mmdcs.DynamicViT,
# initialised from the classifier of dynamicvit-deit-s_0.7_in1k.py (its 14x14 position embedding
# resampled to 32x32). The maps are dense: a dropped token keeps, at its position, the features
# it had when it was dropped. The predictors are kept as trained on ImageNet (freeze_predictors: no
# keep-ratio loss here); inference keeps ceil(rho_s * N) tokens.
#   bash tools/dist_train.sh \
#       configs/dynamicvit/upernet_dynamicvit-deit-s_mln_512x512_160k_ade20k.py 8 \
#       --cfg-options model.backbone.init_cfg.checkpoint=PATH
_base_ = 'mmseg::vit/vit_deit-s16_mln_upernet_8xb2-160k_ade20k-512x512.py'

pretrained = 'work_dirs/dynamicvit-deit-s_0.7_in1k/epoch_30.pth'

model = dict(
    pretrained=None,
    backbone=dict(
        _delete_=True,
        type='mmdcs.DynamicViT',
        arch='deit-s',
        img_size=512,
        keep_ratio=0.7,
        pruning_loc=(3, 6, 9),
        freeze_predictors=True,
        out_type='featmap',
        out_indices=(2, 5, 8, 11),
        final_norm=False,
        drop_path_rate=0.1,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained, prefix='backbone.')))
