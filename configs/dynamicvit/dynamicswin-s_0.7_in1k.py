# DynamicSwin-S/0.7 on ImageNet-1k, the public recipe (README "Swin-S": 8 GPUs x 128 x update_freq
# 4 = 4096 per step, 120 epochs, base_rate 0.7, lr 4e-3, drop path 0.2, lr_scale 0.2; main.py
# 'swin-s': pruning_loc [2, 4, 6]; the rest as DynamicSwin-T, dynamicswin-t_0.7_in1k.py): keep
# ratios [0.7, 0.5, 0.3] at blocks 2, 4, 6 of the third stage (18 blocks, 14x14 tokens at 224 ->
# 138, 98, 59 through the MLP, the rest through the fast path).
# Public result: 83.21 top-1, 6.9 GFLOPs.
#   python tools/convert/timm_to_mmdcs.py swin swin-s \
#       swin_small_patch4_window7_224.pth checkpoints/swin-s_in1k.pth --layout official
#   bash tools/dist_train.sh configs/dynamicvit/dynamicswin-s_0.7_in1k.py 8
_base_ = [
    '../_base_/models/swin_swin-s.py',
    '../_base_/datasets/imagenet_bs128_deit_224.py',
    '../_base_/schedules/dynamicvit_30e.py',
    '../_base_/default_runtime.py',
]

teacher_checkpoint = 'checkpoints/swin-s_in1k.pth'
max_epochs = 120
warmup_epochs = 20
lr = 4e-3

model = dict(
    _delete_=True,
    type='mmdcs.DynamicViTClassifier',
    backbone=dict(
        type='mmdcs.DynamicSwin',
        arch='swin-s',
        img_size=224,
        keep_ratio=0.7,
        pruning_loc=(2, 4, 6),
        out_indices=(3, ),
        drop_path_rate=0.2),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=1000,
        in_channels=768,
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
        topk=(1, 5)),
    train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]),
    teacher={{_base_.model}},
    teacher_checkpoint=teacher_checkpoint,
    ratio_weight=10.0,
    kl_weight=0.5,
    distill_weight=0.5)

# 4 accumulated steps of 8 x 128 = the public 4096 per update
optim_wrapper = dict(optimizer=dict(lr=lr), backbone_lr_scale=0.2, accumulative_counts=4)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, end_factor=1.0, by_epoch=True, begin=0,
         end=warmup_epochs, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', T_max=max_epochs - warmup_epochs, eta_min_ratio=1e-6 / lr,
         by_epoch=True, begin=warmup_epochs, end=max_epochs, convert_to_iter_based=True),
]
train_cfg = dict(max_epochs=max_epochs)
# mmengine's --auto-scale-lr counts GPUs x batch_size (1024 here), not the accumulated steps
auto_scale_lr = dict(base_batch_size=1024)
