# Ablation: the searched KCR-DeiT-Tiny subnet retrained on the same schedule as
# kcr-deit-tiny_retrain_digits.py with the cross-entropy only (no KCR term), to separate the
# widths the search chose from what the retraining term does (method.md §4.4).
_base_ = ['./kcr-deit-tiny_retrain_digits.py']

model = dict(regularizer=None)
custom_hooks = [_base_.ema_hook]
