# The alternating search on a CPU-sized budget (method.md §4 with short epochs): weights and
# architecture parameters α have their own AdamW; 70% of the training set updates the weights,
# 30% α; τ0 = 4.5, ×0.95 per epoch. The paper's full-scale values are in configs/dcs|kcr/.
optim_wrapper = dict(
    constructor='mmdcs.SearchOptimWrapperConstructor',
    weight=dict(
        type='OptimWrapper',
        optimizer=dict(type='AdamW', lr=2e-3, betas=(0.9, 0.999), weight_decay=0.01),
        clip_grad=dict(max_norm=5.0)),
    # α moves much faster here than in the paper (lr 1e-3 over 200 epochs), so that a few
    # demo epochs are enough to prune
    arch=dict(
        type='OptimWrapper',
        optimizer=dict(type='AdamW', lr=2e-1, betas=(0.9, 0.999), weight_decay=0.)),
)
max_epochs = 4
param_scheduler = dict(
    weight=[dict(type='CosineAnnealingLR', by_epoch=True, begin=0, eta_min=1e-4)],
    arch=[dict(type='CosineAnnealingLR', by_epoch=True, begin=0, eta_min=2e-2)],
)
train_cfg = dict(type='mmdcs.AlternatingSearchLoop', max_epochs=max_epochs, arch_ratio=0.3,
                 split_seed=0, val_interval=1)
val_cfg = dict()
test_cfg = dict()
custom_hooks = [dict(type='mmdcs.TemperatureHook', start=4.5, factor=0.95, by='epoch')]
