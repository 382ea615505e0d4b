# Demo of DynamicViT on the digits set (64x64: 16 patch tokens): DeiT-tiny with keep ratio
# rho = 0.7 at blocks 3, 6, 9, i.e. [rho, rho^2, rho^3] = [0.7, 0.49, 0.343] -> at inference exactly
# ceil(ratio * 16) = 12, 8, 6 patch tokens after each pruning location. The public recipe at demo
# scale: the teacher is the plain deit-tiny of configs/demo/deit-tiny_digits-cls.py (the student
# starts from its weights), losses CE + 2.0 keep-ratio MSE + 0.5 KL + 0.5 token distillation,
# backbone lr x0.01 and frozen for the first epoch (public: 5 of 30), predictors at the full lr;
# 4 epochs of the demo schedule. Sequence (from the repository root):
#   python tools/data/build_digits.py --out data/digits        # once, if data/digits is missing
#   python tools/train.py configs/demo/deit-tiny_digits-cls.py      # teacher, 4 epochs
#       -> work_dirs/deit-tiny_digits-cls/epoch_4.pth
#   python tools/train.py configs/demo/dynamicvit-deit-tiny_digits.py
#       -> work_dirs/dynamicvit-deit-tiny_digits/epoch_4.pth (+ best_*.pth, logs with loss_cls,
#          loss_ratio, loss_kl, loss_distill and the kept fractions keep_s1..keep_s3)
#   python tools/test.py configs/demo/dynamicvit-deit-tiny_digits.py \
#       work_dirs/dynamicvit-deit-tiny_digits/epoch_4.pth           # pruned inference accuracy
# Another teacher: --cfg-options model.teacher_checkpoint=PATH
_base_ = ['./deit-tiny_digits-cls.py']

teacher_checkpoint = 'work_dirs/deit-tiny_digits-cls/epoch_4.pth'

model = dict(
    _delete_=True,
    type='mmdcs.DynamicViTClassifier',
    backbone=dict(
        type='mmdcs.DynamicViT',
        arch='deit-tiny',
        img_size=64,
        keep_ratio=0.7,
        pruning_loc=(3, 6, 9),
        out_type='cls_token',
        drop_path_rate=0.1),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=192,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        topk=(1, )),
    teacher={{_base_.model}},
    teacher_checkpoint=teacher_checkpoint,
    ratio_weight=2.0,
    kl_weight=0.5,
    distill_weight=0.5)

optim_wrapper = dict(
    constructor='mmdcs.DynamicViTOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=2e-3, weight_decay=0.05),
    backbone_lr_scale=0.01,
    clip_grad=None)
custom_hooks = [dict(type='mmdcs.DynamicViTFreezeHook', fix_step=1)]
# the demo schedule with the floor relative to each group's rate (the backbone runs at 1/100)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=20),
    dict(type='CosineAnnealingLR', by_epoch=True, begin=0, eta_min_ratio=1e-3,
         convert_to_iter_based=True),
]
