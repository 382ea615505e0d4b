# Demo search: DCS-DeiT-Tiny supernet on the digits set (64x64: 4x4 patches + class token), the
# same schedule as the DCS-MobileViT-XS demo; one of the four methods compared on DeiT-Tiny by
# `python tools/demo.py --peers` (DCS, KCR, OFB, DynamicViT).
#   python tools/train.py configs/demo/dcs-deit-tiny_search_digits.py
#   python tools/export_subnet.py configs/demo/dcs-deit-tiny_search_digits.py \
#       work_dirs/dcs-deit-tiny_search_digits/epoch_4.pth --out work_dirs/demo/dcs-deit-tiny_subnet
_base_ = ['./dcs-mobilevit-xs_search_digits.py']

model = dict(
    backbone=dict(_delete_=True, type='mmdcs.ViT', arch='deit-tiny', variant='dcs', img_size=64,
                  out_type='cls_token', drop_path_rate=0.1, gate_init=1.0),
    neck=None,
    head=dict(in_channels=192),
    # 0.7 of the baseline DeiT-Tiny classifier's FLOPs at 64x64 (the floor is 0.44)
    cost=dict(target=dict(flops=0.7, input_size=64)))
# the weight rate of the DeiT-Tiny demos (configs/demo/deit-tiny_digits-cls.py): a ViT trained
# from scratch on 1.4k images stays at chance with the MobileViT demos' 2e-3; α as the others
optim_wrapper = dict(weight=dict(optimizer=dict(lr=5e-4, weight_decay=0.05)))
param_scheduler = dict(
    weight=[dict(type='CosineAnnealingLR', by_epoch=True, begin=0, eta_min=1e-5)])
