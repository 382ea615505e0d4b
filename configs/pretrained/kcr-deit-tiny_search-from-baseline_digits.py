# Pruning a pretrained model (step 1 of 3): the KCR supernet starts from a trained
# baseline's weights (load_from; the selection parameters a baseline has not, α and Linear_θ,
# keep their initialisation: gate_init 3.0 opens every gate, Linear_θ's weight starts at 0, so the
# supernet at the start computes the baseline's eval output), searches briefly at the budget with a
# lower weight lr (the weights are trained already), then tools/export_subnet.py writes the subnet
# and pruned.pth with the inherited weights; fine-tune: kcr-deit-tiny_finetune_digits.py.
_base_ = ['../demo/kcr-deit-tiny_search_digits.py']
load_from = 'work_dirs/compare/baseline/epoch_4.pth'  # the trained baseline (a cfg-option)

model = dict(backbone=dict(gate_init=3.0))
optim_wrapper = dict(weight=dict(optimizer=dict(lr=1e-4)))
param_scheduler = dict(weight=[dict(type='CosineAnnealingLR', by_epoch=True, begin=0,
                                    eta_min=1e-5)])
