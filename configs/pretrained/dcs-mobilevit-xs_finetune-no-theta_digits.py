# Ablation (tools/analysis/compare_methods.py --pretrained --no-theta-masks): the DCS
# subnet fine-tuned from its inherited weights without its Linear_θ Q/K masks (variant dcs-arch2,
# subnet_no-theta.json); the fine-tuning of dcs-mobilevit-xs_finetune_digits.py without the temperature
# hook (no Gumbel gates without the masks).
_base_ = ['./dcs-mobilevit-xs_finetune_digits.py']

custom_hooks = _base_.kcr_retrain_hooks
