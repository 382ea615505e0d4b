# Retraining of a searched KCR-MobileViT-XS subnet on Fashion-MNIST with the KCR loss (η = 1,
# γ = 0.1, exact route, after t_warm = 2 of 4 epochs); a KCR subnet has no gates, so no τ hook.
_base_ = ['./dcs-mobilevit-xs_retrain_fashion.py']
subnet = 'work_dirs/fashion/kcr_subnet/subnet.json'

model = dict(
    backbone=dict(subnet=subnet),
    regularizer=dict(_delete_=True, type='kcr', eta=1., t_warm=2, gamma=0.1, route='exact'))
custom_hooks = _base_.kcr_retrain_hooks
