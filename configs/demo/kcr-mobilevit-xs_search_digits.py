# Demo search: KCR-MobileViT-XS supernet (MLP channel selection only) on the digits set.
_base_ = ['./dcs-mobilevit-xs_search_digits.py']

model = dict(backbone=dict(variant='kcr'))
