# The detection demos on the DCS-Digits scenes: 12 epochs of 25 iterations of 8 scenes, AdamW
# (demo_scenes.py), warm-up over 20 iterations, then cosine to ~0 over the epochs (per iteration).
_base_ = ['./demo_scenes.py']

max_epochs = 12
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=max_epochs, val_interval=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=20),
    dict(type='CosineAnnealingLR', by_epoch=True, begin=0, T_max=max_epochs, end=max_epochs,
         eta_min=1e-5, convert_to_iter_based=True),
]
auto_scale_lr = dict(base_batch_size=8)
