# DCS search of a DeiT-Tiny supernet on Fashion-MNIST at 64x64 (16 patch tokens + the class
# token), the schedule of dcs-mobilevit-xs_search_fashion.py and the DeiT-Tiny demos' weight rate;
# default budget 0.7 of the baseline classifier's FLOPs (the comparison sets its own).
_base_ = ['./dcs-mobilevit-xs_search_fashion.py']

model = dict(
    backbone=dict(_delete_=True, type='mmdcs.ViT', arch='deit-tiny', variant='dcs', img_size=64,
                  out_type='cls_token', drop_path_rate=0.1, gate_init=1.0),
    neck=None,
    head=dict(in_channels=192),
    cost=dict(target=dict(flops=0.7, input_size=64)))
optim_wrapper = dict(weight=dict(optimizer=dict(lr=5e-4, weight_decay=0.05)))
param_scheduler = dict(
    weight=[dict(type='CosineAnnealingLR', by_epoch=True, begin=0, eta_min=1e-5)])
