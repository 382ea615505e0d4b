# Ablation (tools/analysis/compare_methods.py --no-theta-masks): the searched DCS-mobilevit-xs
# subnet retrained without its Linear_θ Q/K masks — the same kept MLP channels in a network of
# variant dcs-arch2 (subnet_no-theta.json) — with the IB term and schedule of
# dcs-mobilevit-xs_retrain_digits.py. Without the masks there are no Gumbel gates, so no temperature
# hook (TemperatureHook refuses a network without gates).
_base_ = ['./dcs-mobilevit-xs_retrain_digits.py']

custom_hooks = _base_.kcr_retrain_hooks
