# Pruning the trained Fashion-MNIST baseline, step 3 of 3: the exported KCR subnet fine-tuned from
# the weights it inherited (pruned.pth) with the KCR retraining terms, at a lower lr than
# retraining from scratch.
_base_ = ['../demo/kcr-deit-tiny_retrain_fashion.py']
load_from = 'work_dirs/fashion/kcr_subnet/pruned.pth'  # a cfg-option

optim_wrapper = dict(optimizer=dict(lr=1e-4))
