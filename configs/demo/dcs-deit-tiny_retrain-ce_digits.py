# Ablation: the searched DCS-DeiT-Tiny subnet retrained on the same schedule as
# dcs-deit-tiny_retrain_digits.py — the Q/K gates (Linear_θ) and their temperature kept — with
# the cross-entropy only (no IB term), to separate the widths the search chose from what the
# retraining term does (method.md §4.4).
_base_ = ['./dcs-deit-tiny_retrain_digits.py']

model = dict(regularizer=None)
custom_hooks = [_base_.dcs_retrain_hooks[0], _base_.ema_hook]
