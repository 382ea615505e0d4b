# Pruning the trained Fashion-MNIST baseline, step 1 of 3: the DCS supernet starts from the
# baseline's weights (load_from; gate_init 3.0 opens every gate and Linear_θ starts at 0, so the
# supernet starts as the baseline), searches at the budget with a lower weight lr, then
# tools/export_subnet.py writes the subnet and pruned.pth with the inherited weights; fine-tune:
# dcs-deit-tiny_finetune_fashion.py. As dcs-deit-tiny_search-from-baseline_digits.py.
_base_ = ['../demo/dcs-deit-tiny_search_fashion.py']
load_from = 'work_dirs/fashion/baseline/epoch_4.pth'  # the trained baseline (a cfg-option)

model = dict(backbone=dict(gate_init=3.0))
optim_wrapper = dict(weight=dict(optimizer=dict(lr=1e-4)))
param_scheduler = dict(weight=[dict(type='CosineAnnealingLR', by_epoch=True, begin=0,
                                    eta_min=1e-5)])
