# Retraining of a searched DCS-DeiT-Tiny subnet on Fashion-MNIST at 64x64 with the IB bound, as
# dcs-mobilevit-xs_retrain_fashion.py, at the DeiT-Tiny demos' rate and weight decay.
_base_ = ['./dcs-mobilevit-xs_retrain_fashion.py']
subnet = 'work_dirs/fashion/dcs-deit-tiny_subnet/subnet.json'

model = dict(
    backbone=dict(_delete_=True, type='mmdcs.ViT', arch='deit-tiny', subnet=subnet, img_size=64,
                  out_type='cls_token', drop_path_rate=0.1),
    neck=None,
    head=dict(in_channels=192))
optim_wrapper = dict(optimizer=dict(lr=5e-4, weight_decay=0.05))
