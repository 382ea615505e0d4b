# What the downstream demos on the DCS-Digits scenes share (configs/demo/*_digits-scenes.py, 8
# scenes per iteration): AdamW with gradient-norm clipping. demo_scenes_12e.py (detection, by
# epoch) and demo_scenes_300it.py (segmentation, by iteration) add the loop and the learning-rate
# schedule: a 20-iteration linear warm-up, then cosine to ~0.
optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=3e-3, betas=(0.9, 0.999), weight_decay=0.01),
    clip_grad=dict(max_norm=10.0))
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
randomness = dict(seed=0)
