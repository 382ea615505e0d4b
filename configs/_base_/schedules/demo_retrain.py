# Retraining of an exported subnet on a CPU-sized budget (METHOD §4 in miniature): AdamW,
# linear warm-up then cosine, CE for t_warm epochs then CE + η·(IB or KCR), EMA weights for
# evaluation. The Q/K gates of a DCS subnet keep training (τ schedule as in the search).
_base_ = ['./demo_adamw.py']

max_epochs = 4
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=1)
custom_hooks = [
    dict(type='mmdcs.RegularizerHook'),
    dict(type='EMAHook', momentum=0.01, priority='ABOVE_NORMAL'),
]
