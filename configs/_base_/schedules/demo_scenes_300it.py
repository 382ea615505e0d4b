# The segmentation demo on the DCS-Digits scenes: 300 iterations of 8 scenes (12 epochs), AdamW
# (demo_scenes.py), warm-up over 20 iterations, then cosine to ~0; hooks by iteration (as
# mmseg's schedules).
_base_ = ['./demo_scenes.py']

max_iters = 300
train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=20),
    dict(type='CosineAnnealingLR', by_epoch=False, begin=0, T_max=max_iters, end=max_iters,
         eta_min=1e-5),
]
default_hooks = dict(
    timer=dict(type='IterTimerHook'),
    logger=dict(type='LoggerHook', interval=10, log_metric_by_epoch=False),
    param_scheduler=dict(type='ParamSchedulerHook'),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=max_iters, max_keep_ckpts=1),
    sampler_seed=dict(type='DistSamplerSeedHook'),
    visualization=dict(type='SegVisualizationHook'))
