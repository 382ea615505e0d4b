# A short AdamW + cosine schedule for the demo runs on the digits set (CPU-sized).
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=2e-3, weight_decay=0.01),
    clip_grad=dict(max_norm=5.0),
)
max_epochs = 4
param_scheduler = [
    # warm-up over the first iterations, then cosine over all epochs (whatever max_epochs is)
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=20),
    dict(type='CosineAnnealingLR', by_epoch=True, begin=0, eta_min=1e-5,
         convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=1)
val_cfg = dict()
test_cfg = dict()
auto_scale_lr = dict(base_batch_size=32)
