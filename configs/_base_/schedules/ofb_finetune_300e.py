# Fine-tuning of the compact network of an OFB search (the public finetune.py defaults and the
# supplementary's section C): 300 epochs, AdamW (eps 1e-8) weight decay 0.05, blr 1.5e-4 x
# effective batch / 256 = 6e-4 for 1024 (the supplementary's lr), 5 warm-up epochs from 1e-6,
# cosine to 1e-5 per iteration, layer-wise lr decay 0.95, label smoothing 0.1, EMA 0.99996 for
# evaluation, DeiT's augmentation without mixup / cutmix (the supplementary: they impair the
# retraining), no gradient clipping.
max_epochs = 300
warmup_epochs = 5
base_lr = 1.5e-4 * 1024 / 256

optim_wrapper = dict(
    type='OptimWrapper',
    constructor='LearningRateDecayOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=base_lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05),
    paramwise_cfg=dict(
        layer_decay_rate=0.95,
        norm_decay_mult=0.,
        bias_decay_mult=0.,
        flat_decay_mult=0.,
        custom_keys={
            '.pos_embed': dict(decay_mult=0.),
            '.cls_token': dict(decay_mult=0.),
            '.relative_position_bias_table': dict(decay_mult=0.),
        }),
)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6 / base_lr, end_factor=1.0, by_epoch=True, begin=0,
         end=warmup_epochs, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', T_max=max_epochs - warmup_epochs, eta_min=1e-5,
         by_epoch=True, begin=warmup_epochs, end=max_epochs, convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=1)
val_cfg = dict()
test_cfg = dict()
auto_scale_lr = dict(base_batch_size=1024)
custom_hooks = [dict(type='EMAHook', momentum=4e-5, priority='ABOVE_NORMAL')]
ofb_loss = dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original')
