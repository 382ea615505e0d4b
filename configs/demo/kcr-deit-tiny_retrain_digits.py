# Demo retraining of the searched KCR-DeiT-Tiny subnet with the KCR loss (as the KCR-MobileViT-XS
# demo: η = 1, γ = 0.1, exact route, after t_warm = 2 of 4 epochs, EMA; no gates, no τ hook).
_base_ = ['./dcs-deit-tiny_retrain_digits.py']
subnet = 'work_dirs/demo/kcr-deit-tiny_subnet/subnet.json'

model = dict(
    backbone=dict(subnet=subnet),
    regularizer=dict(_delete_=True, type='kcr', eta=1., t_warm=2, gamma=0.1, route='exact'))
custom_hooks = _base_.kcr_retrain_hooks
