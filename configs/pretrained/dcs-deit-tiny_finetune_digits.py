# Pruning a pretrained model (step 3 of 3): fine-tune the exported subnet from the weights
# it inherited (pruned.pth of tools/export_subnet.py) with the DCS retraining terms, at a lower lr
# than retraining from scratch.
_base_ = ['../demo/dcs-deit-tiny_retrain_digits.py']
load_from = 'work_dirs/compare/dcs_subnet/pruned.pth'  # a cfg-option

optim_wrapper = dict(optimizer=dict(lr=1e-4))
