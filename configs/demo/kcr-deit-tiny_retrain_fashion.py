# Retraining of a searched KCR-DeiT-Tiny subnet on Fashion-MNIST with the KCR loss (as
# kcr-mobilevit-xs_retrain_fashion.py: η = 1, γ = 0.1, exact route, no τ hook).
_base_ = ['./dcs-deit-tiny_retrain_fashion.py']
subnet = 'work_dirs/fashion/kcr-deit-tiny_subnet/subnet.json'

model = dict(
    backbone=dict(subnet=subnet),
    regularizer=dict(_delete_=True, type='kcr', eta=1., t_warm=2, gamma=0.1, route='exact'))
custom_hooks = _base_.kcr_retrain_hooks
