# Demo retraining of the searched DCS-DeiT-Tiny subnet with the IB bound (as the DCS-MobileViT-XS
# demo: η = 1 after t_warm = 2 of 4 epochs, EMA). The subnet file comes from
# tools/export_subnet.py (see dcs-deit-tiny_search_digits.py).
_base_ = ['./dcs-mobilevit-xs_retrain_digits.py']
subnet = 'work_dirs/demo/dcs-deit-tiny_subnet/subnet.json'

model = dict(
    backbone=dict(_delete_=True, type='mmdcs.ViT', arch='deit-tiny', subnet=subnet, img_size=64,
                  out_type='cls_token', drop_path_rate=0.1),
    neck=None,
    head=dict(in_channels=192))
# the weight rate of the DeiT-Tiny demos (see configs/demo/deit-tiny_digits-cls.py)
optim_wrapper = dict(optimizer=dict(lr=5e-4, weight_decay=0.05))
