# Retraining of a MobileViT-XS pruned without a search (tools/export_subnet.py --method
# magnitude|taylor|uniform|random) on Fashion-MNIST, on the schedule of the DCS/KCR retraining
# (AdamW, warm-up, cosine, EMA) with cross-entropy only; also the searched widths' retraining
# without the IB / KCR term (the comparison's ce-only ablation).
_base_ = ['./dcs-mobilevit-xs_retrain_fashion.py']
subnet = 'work_dirs/fashion/magnitude_subnet/subnet.json'

model = dict(backbone=dict(subnet=subnet), regularizer=None)
custom_hooks = [_base_.ema_hook]
