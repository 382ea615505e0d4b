# The searched DCS-MobileViT-XS subnet retrained without its Linear_θ Q/K masks (variant
# dcs-arch2, subnet_no-theta.json; tools/analysis/compare_methods.py --no-theta-masks), the IB
# term and schedule of dcs-mobilevit-xs_retrain_fashion.py, no temperature hook (no gates).
_base_ = ['./dcs-mobilevit-xs_retrain_fashion.py']

custom_hooks = _base_.kcr_retrain_hooks
