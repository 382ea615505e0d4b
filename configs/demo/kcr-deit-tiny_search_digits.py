# Demo search: KCR-DeiT-Tiny supernet (MLP channel selection only) on the digits set.
_base_ = ['./dcs-deit-tiny_search_digits.py']

model = dict(backbone=dict(variant='kcr'))
