# KCR search of a DeiT-Tiny supernet (MLP channel selection only) on Fashion-MNIST.
_base_ = ['./dcs-deit-tiny_search_fashion.py']

model = dict(backbone=dict(variant='kcr'))
