# Runtime shared by mmdcs classification configs (mmpretrain's, with the plugin's defaults).
_base_ = 'mmpretrain::_base_/default_runtime.py'

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=10),
    # keep the best and the last checkpoints only
    checkpoint=dict(type='CheckpointHook', interval=1, max_keep_ckpts=2, save_best='auto'),
)
randomness = dict(seed=0, deterministic=False)
