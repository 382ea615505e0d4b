# The DCS subnet of the Fashion-MNIST baseline fine-tuned from its inherited weights without its
# Linear_θ Q/K masks (variant dcs-arch2, subnet_no-theta.json): dcs-deit-tiny_finetune_fashion.py
# without the temperature hook (no Gumbel gates without the masks).
_base_ = ['./dcs-deit-tiny_finetune_fashion.py']

custom_hooks = _base_.kcr_retrain_hooks
