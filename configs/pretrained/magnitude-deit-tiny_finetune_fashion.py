# Pruning the trained Fashion-MNIST baseline, step 3 of 3: a baseline pruned without a search
# (tools/export_subnet.py --method magnitude|taylor|uniform|random; pruned.pth: the weights it
# keeps), fine-tuned with cross-entropy only, at a lower lr than retraining from scratch.
_base_ = ['../demo/magnitude-deit-tiny_retrain_fashion.py']
load_from = 'work_dirs/fashion/magnitude_subnet/pruned.pth'  # a cfg-option

optim_wrapper = dict(optimizer=dict(lr=1e-4))
