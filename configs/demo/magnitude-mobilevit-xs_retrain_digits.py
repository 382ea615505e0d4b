# Demo retraining of the magnitude-pruned MobileViT-XS: the baseline to beat at equal FLOPs
# (method.md §11). The subnet comes from the trained baseline classifier, its MLP channels ranked
# by the L2 norm of their weights per unit of FLOPs and kept up to the budget:
#   python tools/export_subnet.py configs/demo/mobilevit-xs_digits-cls.py \
#       work_dirs/demo/baseline/epoch_4.pth --method magnitude --target-flops 0.92 \
#       --out work_dirs/demo/magnitude_subnet
# The schedule of the DCS/KCR retraining (AdamW, warm-up, cosine, EMA), cross-entropy only.
_base_ = ['./dcs-mobilevit-xs_retrain_digits.py']
subnet = 'work_dirs/demo/magnitude_subnet/subnet.json'

model = dict(backbone=dict(subnet=subnet), regularizer=None)
custom_hooks = [_base_.ema_hook]
