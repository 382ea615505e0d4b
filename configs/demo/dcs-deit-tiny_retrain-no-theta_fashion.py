# The searched DCS-DeiT-Tiny subnet retrained without its Linear_θ Q/K masks (variant dcs-arch2,
# subnet_no-theta.json), the IB term and schedule of dcs-deit-tiny_retrain_fashion.py, no
# temperature hook (no gates).
_base_ = ['./dcs-deit-tiny_retrain_fashion.py']

custom_hooks = _base_.kcr_retrain_hooks
