# KCR search of a MobileViT-XS supernet (MLP channel selection only) on Fashion-MNIST.
_base_ = ['./dcs-mobilevit-xs_search_fashion.py']

model = dict(backbone=dict(variant='kcr'))
