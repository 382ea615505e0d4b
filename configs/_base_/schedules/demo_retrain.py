# Retraining of an exported subnet on a CPU-sized budget (method.md §4 in miniature): AdamW,
# linear warm-up then cosine, CE for t_warm epochs then CE + η·(IB or KCR), EMA weights for
# evaluation. The Q/K gates of a DCS subnet keep training (τ schedule as in the search).
_base_ = ['./demo_adamw.py']

max_epochs = 4
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=1)
# EMA over ~20 iterations: the demo's 4 epochs are ~180 iterations, a longer average would
# still be dominated by the random initialisation when it is evaluated
ema_hook = dict(type='EMAHook', momentum=0.05, priority='ABOVE_NORMAL')
# KCR subnets (no gates left); DCS subnets add the temperature hook of their gates
kcr_retrain_hooks = [dict(type='mmdcs.RegularizerHook'), ema_hook]
dcs_retrain_hooks = [
    dict(type='mmdcs.TemperatureHook', start=4.5, factor=0.95, by='epoch'),
    dict(type='mmdcs.RegularizerHook'),
    ema_hook,
]
custom_hooks = kcr_retrain_hooks
