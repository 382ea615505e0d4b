# Retraining on ImageNet-1k (DCS paper A.2, KCR paper A.1; method.md §4), shared by the DCS / KCR
# subnets and by their baselines (configs/baselines/, the same recipe without the method):
# 300 epochs, AdamW (β 0.9, 0.999), weight decay 0.01, lr 2e-4 -> 2e-3 linearly over the first
# 5 epochs then cosine to 2e-4 at epoch 300, batch 512 (64 per GPU x 8 GPUs; `--auto-scale-lr`
# for another total), evaluation on the EMA weights, no distillation.
# Choices where the papers are silent: no weight decay on norms, biases, position embeddings,
# class token and relative position bias tables; gradient clipping at norm 5; EMA decay 0.9998
# (momentum 2e-4, EfficientViT's recipe that the papers follow); the schedule steps per
# iteration.
max_epochs = 300
warmup_epochs = 5

optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=2e-3, betas=(0.9, 0.999), weight_decay=0.01),
    paramwise_cfg=dict(
        norm_decay_mult=0.,
        bias_decay_mult=0.,
        flat_decay_mult=0.,
        custom_keys={
            '.pos_embed': dict(decay_mult=0.),
            '.cls_token': dict(decay_mult=0.),
            '.relative_position_bias_table': dict(decay_mult=0.),
        }),
    clip_grad=dict(max_norm=5.0),
)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, end_factor=1.0, by_epoch=True, begin=0,
         end=warmup_epochs, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', T_max=max_epochs - warmup_epochs, eta_min=2e-4,
         by_epoch=True, begin=warmup_epochs, end=max_epochs, convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=1)
val_cfg = dict()
test_cfg = dict()
auto_scale_lr = dict(base_batch_size=512)

# The methods' terms (method.md §6, §7), used by the configs of configs/dcs and configs/kcr as
# `model.regularizer` (ChannelSelectionClassifier): cross-entropy alone for the first
# t_warm = 90 epochs, then + η·IBB (DCS, η = 50, s = 1) or + η·KCR (KCR, η = 1, γ = 0.1; the
# exact route, `route='nystrom'` for the paper's Nyström approximation).
t_warm = 90
ib_regularizer = dict(type='ib', eta=50., t_warm=t_warm, s=1.)
kcr_regularizer = dict(type='kcr', eta=1., t_warm=t_warm, gamma=0.1, route='exact')

ema_hook = dict(type='EMAHook', momentum=2e-4, priority='ABOVE_NORMAL')
# baselines: EMA only
custom_hooks = [ema_hook]
# DCS subnets: their Q/K gates keep training, τ follows the search's schedule (τ0 = 4.5, x0.95
# per epoch); RegularizerHook drives the IB state and switches the term on at t_warm
dcs_retrain_hooks = [
    dict(type='mmdcs.TemperatureHook', start=4.5, factor=0.95, by='epoch'),
    dict(type='mmdcs.RegularizerHook'),
    ema_hook,
]
# KCR subnets have no gate left (α is gone with the pruning): no τ
kcr_retrain_hooks = [dict(type='mmdcs.RegularizerHook'), ema_hook]
