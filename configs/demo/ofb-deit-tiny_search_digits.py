# Demo OFB search (Once-for-Both, CVPR 2024) of a DeiT-Tiny supernet on the digits set (64x64),
# from scratch, CPU-sized: 4 epochs with the schedule of the DCS/KCR demos
# (../_base_/schedules/demo_adamw.py: warm-up, cosine) and the DeiT-Tiny demos' weight lr, target
# 40% of the unpruned FLOPs. The bi-masks search the heads x qkv channels and the MLP width of
# every block and the embedding width; three times per epoch (DeltaT = iterations // 3) the cells
# with p <= 0.2/n are dropped and the weights sliced; PMIM masks 5% -> 25% of the patches.
# Full-scale settings: configs/ofb/.
#
# The whole demo (outputs under work_dirs/):
#   python tools/data/build_digits.py --out data/digits          # once, ~3 s
#   python tools/train.py configs/demo/ofb-deit-tiny_search_digits.py
#       -> work_dirs/ofb-deit-tiny_search_digits/epoch_4.pth (+ logs, best_*.pth)
#   python tools/ofb_export.py configs/demo/ofb-deit-tiny_search_digits.py \
#       work_dirs/ofb-deit-tiny_search_digits/epoch_4.pth \
#       --out work_dirs/ofb-deit-tiny_search_digits/export
#       -> .../export/arch.json (the compact architecture) and .../export/compact.pth (fused
#          weights); checks compact == masked supernet in eval, prints params / FLOPs
#   python tools/train.py configs/demo/ofb-deit-tiny_finetune_digits.py
#       -> work_dirs/ofb-deit-tiny_finetune_digits/ (reads the two files above)
#   python tools/test.py configs/demo/ofb-deit-tiny_finetune_digits.py \
#       work_dirs/ofb-deit-tiny_finetune_digits/epoch_4.pth
#   python tools/analysis/complexity.py configs/demo/ofb-deit-tiny_finetune_digits.py --shape 64 64
_base_ = [
    '../_base_/datasets/digits_cls.py',
    '../_base_/schedules/demo_adamw.py',
    '../_base_/default_runtime.py',
]

model = dict(
    type='mmdcs.OFBClassifier',
    backbone=dict(type='mmdcs.OFBViT', arch='deit-tiny', img_size=64, drop_path_rate=0.1),
    neck=None,
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=192,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        topk=(1, )),
    # the public code's weights; the target as a share of the unpruned classifier's FLOPs at
    # 64x64 (94 M multiply-accumulates; a uniform alpha starts near 48%)
    search=dict(target_ratio=0.4, w_head=0.5, w_mlp=0.5, w_embed=0.5, w_flops=5.,
                pmim=dict(window=47)),
)

# one AdamW, three kinds of groups stepped on the same batch: the weights (the DeiT-Tiny demos'
# lr 5e-4 and weight decay 0.05, see configs/demo/deit-tiny_digits-cls.py), alpha (beta1 0.5,
# weight decay 1e-3, the public code's) and the PMIM decoder (as the weights). alpha moves much
# faster than in the paper (lr 1e-3 for 100 ImageNet epochs) so that 4 epochs of 45 iterations
# finish the search (the DCS demos' alpha lr is 0.2 too); no gradient clipping (the public
# code's: one norm over all groups would let the steep one-hot terms scale the weights' steps).
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    constructor='mmdcs.OFBOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=5e-4, betas=(0.9, 0.999), weight_decay=0.05),
    paramwise_cfg=dict(
        norm_decay_mult=0.,
        bias_decay_mult=0.,
        custom_keys={
            '.pos_embed': dict(decay_mult=0.),
            '.cls_token': dict(decay_mult=0.),
            '.mask_token': dict(decay_mult=0.),
        },
        arch=dict(lr=0.2, betas=(0.5, 0.999), weight_decay=1e-3)),
)
# w_p 0.99 -> 0.1 and the PMIM kept share 0.95 -> 0.75 over the first 2 of 4 epochs (the paper:
# 20 of 100)
custom_hooks = [dict(type='mmdcs.OFBSearchHook', warmup_epochs=2, interval='auto', threshold=0.2)]
