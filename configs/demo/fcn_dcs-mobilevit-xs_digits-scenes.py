# Demo semantic segmentation: the searched + retrained DCS-MobileViT-XS subnet with a light
# Semantic-FPN decoder (mmseg FPN neck + FPNHead: 64-channel FPN over the stride 4/8/16/32 maps,
# fused at stride 4) on the DCS-Digits scenes (128x128, 11 classes: background + '0'..'9').
# CPU-sized: a few minutes on 2 cores. The pruned backbone is built from the exported subnet
# file and initialised from the retrained digits classifier (whose data preprocessing this
# config repeats):
#   python tools/train.py configs/demo/fcn_dcs-mobilevit-xs_digits-scenes.py \
#       --cfg-options model.backbone.subnet=work_dirs/demo/dcs_subnet/subnet.json \
#                     model.backbone.init_cfg.checkpoint=work_dirs/demo/dcs_retrain/last.pth
#   python tools/test.py configs/demo/fcn_dcs-mobilevit-xs_digits-scenes.py \
#       work_dirs/fcn_dcs-mobilevit-xs_digits-scenes/iter_300.pth --metrics-out metrics.json
# (`subnet` and `pretrained` below are read when the file is parsed: override the model keys as
# above, not the variables.) From scratch: --cfg-options model.backbone.init_cfg=None.
_base_ = [
    'mmseg::_base_/default_runtime.py',
    '../_base_/datasets/digits_scenes_seg.py',
    '../_base_/schedules/demo_scenes_300it.py',
]
default_scope = 'mmseg'

subnet = 'work_dirs/demo/dcs_subnet/subnet.json'
pretrained = 'work_dirs/demo/dcs_retrain/last.pth'
norm_cfg = dict(type='BN', requires_grad=True)
num_classes = 11

model = dict(
    type='EncoderDecoder',
    # the digits classifier's normalisation (configs/_base_/datasets/digits_cls.py)
    data_preprocessor=dict(
        type='SegDataPreProcessor',
        mean=[127.5, 127.5, 127.5],
        std=[127.5, 127.5, 127.5],
        bgr_to_rgb=True,
        pad_val=0,
        seg_pad_val=255,
        size=(128, 128)),
    backbone=dict(
        type='mmdcs.MobileViT',
        arch='mobilevit-xs',
        subnet=subnet,
        # strides 4, 8, 16, 32 (the last after final_conv)
        out_indices=(1, 2, 3, 4),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained, prefix='backbone.')),
    neck=dict(
        type='FPN',
        in_channels=[48, 64, 80, 384],
        out_channels=64,
        num_outs=4),
    decode_head=dict(
        type='FPNHead',
        in_channels=[64, 64, 64, 64],
        in_index=[0, 1, 2, 3],
        feature_strides=[4, 8, 16, 32],
        channels=64,
        dropout_ratio=0.1,
        num_classes=num_classes,
        norm_cfg=norm_cfg,
        align_corners=False,
        # ~92% of the pixels are background: down-weighted, or the head first settles on
        # "all background" and stays there for many iterations
        loss_decode=dict(
            type='CrossEntropyLoss',
            use_sigmoid=False,
            loss_weight=1.0,
            class_weight=[0.1] + [1.0] * 10)),
    train_cfg=dict(),
    test_cfg=dict(mode='whole'))

# schedule and hooks: configs/_base_/schedules/demo_scenes_300it.py
env_cfg = dict(cudnn_benchmark=False)
