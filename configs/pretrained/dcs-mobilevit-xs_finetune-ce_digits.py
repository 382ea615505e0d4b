# Ablation at DCS's searched widths (a trained baseline pruned by DCS, the digits): the exported
# DCS subnet fine-tuned from its inherited weights exactly as dcs-mobilevit-xs_finetune_digits.py
# — the Linear_θ Q/K gates and their temperature schedule kept — with cross-entropy only (no IB
# term), to separate the widths and weights the search chose from what the term does (method.md
# §4.4). The comparison's method dcs-ce.
_base_ = ['./dcs-mobilevit-xs_finetune_digits.py']

model = dict(regularizer=None)
custom_hooks = [_base_.dcs_retrain_hooks[0], _base_.ema_hook]
