# Pruning a pretrained model without a search: a trained baseline pruned by
# tools/export_subnet.py --method magnitude|taylor|uniform|random (pruned.pth: the weights it
# keeps), fine-tuned with cross-entropy only on the schedule of the DCS/KCR fine-tuning.
_base_ = ['../demo/magnitude-mobilevit-xs_retrain_digits.py']
load_from = 'work_dirs/compare/magnitude_subnet/pruned.pth'  # a cfg-option

optim_wrapper = dict(optimizer=dict(lr=2e-4))
