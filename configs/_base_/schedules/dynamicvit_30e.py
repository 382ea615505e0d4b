# DynamicViT's public recipe for DeiT (README: --epochs 30 --lr 1e-3 --warmup_epochs 5, total batch
# 1024; main.py/optim_factory.py/engine.py): AdamW (β 0.9, 0.999), weight decay 0.05 (none on 1-D
# parameters and biases), lr 1e-3 for the predictors and 1e-3 x lr_scale (0.01) for the backbone and
# head, linear warm-up from 0 over 5 epochs then cosine to 1e-6 (x lr_scale for the backbone) per
# iteration; the backbone is frozen (lr 0) for the first fix_step = 5 epochs; class token and
# position embedding untrained; no gradient clipping; EMA of the weights (decay 0.9999).
# `--auto-scale-lr` rescales lr for another total batch than 1024.
max_epochs = 30
warmup_epochs = 5
lr = 1e-3

optim_wrapper = dict(
    type='OptimWrapper',
    constructor='mmdcs.DynamicViTOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05),
    backbone_lr_scale=0.01,
)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, end_factor=1.0, by_epoch=True, begin=0,
         end=warmup_epochs, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', T_max=max_epochs - warmup_epochs, eta_min_ratio=1e-6 / lr,
         by_epoch=True, begin=warmup_epochs, end=max_epochs, convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=1)
val_cfg = dict()
test_cfg = dict()
auto_scale_lr = dict(base_batch_size=1024)

custom_hooks = [
    dict(type='mmdcs.DynamicViTFreezeHook', fix_step=5),
    dict(type='EMAHook', momentum=1e-4, priority='ABOVE_NORMAL'),
]
