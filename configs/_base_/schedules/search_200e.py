# The alternating search of DCS / KCR at full scale (DCS paper 4.1 and Alg. 1, KCR paper 4.1;
# method.md §4, §5), on the 100-class subset (../datasets/imagenet100_search*.py):
# * every epoch a fixed, seeded 70% of the training images update the weights W (cross-entropy)
#   and the other 30% the architecture parameters α (cross-entropy + λ·log cost(α));
# * W and α have their own AdamW (β 0.9, 0.999), lr 1e-3 -> 1e-4 cosine over 200 epochs;
# * τ0 = 4.5, τ <- 0.95·τ every epoch; λ = 0.2 (the per-model configs set
#   `model.cost = _base_.search_cost`).
# Choices where the papers are silent (method.md: "where it chooses, it says so"):
# * α: the same AdamW and schedule as W, without weight decay (a decay would pull every α, i.e.
#   every gate, towards P(open) = 0.5);
# * W: weight decay 0.01 (the retraining's), none on norms, biases, position embeddings, class
#   token and relative position bias tables (timm's and mmpretrain's practice); gradient
#   clipping at norm 5 (a guard for the from-scratch transformers);
# * batch: 64 per GPU x 8 GPUs = 512 (the retraining's); `--auto-scale-lr` rescales both lrs
#   for another total batch.
# The schedulers step once per epoch (by_epoch, not converted to iterations: an epoch of the
# search loop has weight and architecture iterations, and both schedulers see every one).
max_epochs = 200

no_decay = dict(
    norm_decay_mult=0.,
    bias_decay_mult=0.,
    flat_decay_mult=0.,
    custom_keys={
        '.pos_embed': dict(decay_mult=0.),
        '.cls_token': dict(decay_mult=0.),
        '.relative_position_bias_table': dict(decay_mult=0.),
    })
optim_wrapper = dict(
    constructor='mmdcs.SearchOptimWrapperConstructor',
    weight=dict(
        type='OptimWrapper',
        optimizer=dict(type='AdamW', lr=1e-3, betas=(0.9, 0.999), weight_decay=0.01),
        paramwise_cfg=no_decay,
        clip_grad=dict(max_norm=5.0)),
    arch=dict(
        type='OptimWrapper',
        optimizer=dict(type='AdamW', lr=1e-3, betas=(0.9, 0.999), weight_decay=0.)),
)
param_scheduler = dict(
    weight=[
        dict(type='CosineAnnealingLR', T_max=max_epochs, eta_min=1e-4, by_epoch=True, begin=0,
             end=max_epochs)
    ],
    arch=[
        dict(type='CosineAnnealingLR', T_max=max_epochs, eta_min=1e-4, by_epoch=True, begin=0,
             end=max_epochs)
    ],
)
train_cfg = dict(type='mmdcs.AlternatingSearchLoop', max_epochs=max_epochs, arch_ratio=0.3,
                 split_seed=0, val_interval=1)
val_cfg = dict()
test_cfg = dict()
auto_scale_lr = dict(base_batch_size=512)

# the search objective: λ·log cost(α) with the papers' cost formulas (method.md §3);
# `mode='flops'` for the exact FLOPs, `entropy_weight` > 0 for the optional gate-entropy term
search_cost = dict(mode='paper', weight=0.2)
custom_hooks = [dict(type='mmdcs.TemperatureHook', start=4.5, factor=0.95, by='epoch')]
