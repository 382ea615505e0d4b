# Demo retraining of the magnitude-pruned DeiT-Tiny, the baseline to beat at equal FLOPs
# (method.md §11), on the schedule of the DCS/KCR-DeiT-Tiny retraining, cross-entropy only:
#   python tools/export_subnet.py configs/demo/deit-tiny_digits-cls.py \
#       work_dirs/demo/deit-tiny_baseline/epoch_4.pth --method magnitude --target-flops 0.7 \
#       --out work_dirs/demo/magnitude-deit-tiny_subnet
_base_ = ['./dcs-deit-tiny_retrain_digits.py']
subnet = 'work_dirs/demo/magnitude-deit-tiny_subnet/subnet.json'

model = dict(backbone=dict(subnet=subnet), regularizer=None)
custom_hooks = [_base_.ema_hook]
