# Retraining of a DeiT-Tiny pruned without a search (tools/export_subnet.py --method
# magnitude|taylor|uniform|random) on Fashion-MNIST, the schedule of the DCS/KCR-DeiT-Tiny
# retraining with cross-entropy only (also the searched widths' ce-only ablation).
_base_ = ['./dcs-deit-tiny_retrain_fashion.py']
subnet = 'work_dirs/fashion/magnitude-deit-tiny_subnet/subnet.json'

model = dict(backbone=dict(subnet=subnet), regularizer=None)
custom_hooks = [_base_.ema_hook]
