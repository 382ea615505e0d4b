# Ablation at DCS's searched widths (a trained baseline pruned by DCS, the digits): the exported
# DCS subnet fine-tuned exactly as dcs-mobilevit-xs_finetune_digits.py — the same network, Q/K
# gates, temperature schedule, EMA and regulariser hook — with KCR's term in place of the IB term
# (KCR's fine-tuning settings: η = 1, γ = 0.1, exact route): only the term differs from DCS's own
# row (method.md §4.4). The comparison's method dcs-kcr.
_base_ = ['./dcs-mobilevit-xs_finetune_digits.py']

model = dict(
    regularizer=dict(_delete_=True, type='kcr', eta=1., t_warm=2, gamma=0.1, route='exact'))
