# Demo detection: SSDLite with the searched + retrained DCS-MobileViT-XS subnet as backbone, on the
# DCS-Digits scenes (128x128, 10 digit classes, 200 train / 50 val scenes). CPU-sized: a few
# minutes on 2 cores. The pruned backbone is built from the exported subnet file and initialised
# from the retrained digits classifier (whose data preprocessing this config repeats):
#   python tools/train.py configs/demo/ssdlite_dcs-mobilevit-xs_digits-scenes.py \
#       --cfg-options model.backbone.subnet=work_dirs/demo/dcs_subnet/subnet.json \
#                     model.backbone.init_cfg.checkpoint=work_dirs/demo/dcs_retrain/last.pth
#   python tools/test.py configs/demo/ssdlite_dcs-mobilevit-xs_digits-scenes.py \
#       work_dirs/ssdlite_dcs-mobilevit-xs_digits-scenes/epoch_12.pth --metrics-out metrics.json
# (`subnet` and `pretrained` below are read when the file is parsed: override the model keys as
# above, not the variables.) From scratch: --cfg-options model.backbone.init_cfg=None.
# (mmdet 3.3.0's SSDHead predicts only with mmdcs' patch `SSDHead.loss_cls = None`,
# mmdetection#11780, applied whenever mmdcs is imported: mmdcs/utils/compat.py.)
#
# SSD at 128x128: the digits' boxes are 20-48 px high and 6-37 px wide, so the detector reads the
# backbone's stride-8 (64 ch, 16x16), stride-16 (80 ch, 8x8) and stride-32 (384 ch, after
# final_conv, 4x4) maps plus ONE SSDNeck level (stride 64, 2x2). On a stride-16 grid more than half
# of the digits have no anchor with IoU >= 0.5 (and the 320-px recipe's 1x1 levels and 48..320 px
# anchors only fit objects far larger than a digit). Anchors per level: min/max size 12/20, 20/32,
# 32/48, 48/80 px, ratios 1, 2, 1/2, 3, 1/3 (tall boxes: a '1' is narrow); an anchor is positive
# from IoU 0.4 (95% of the digits get one; 4.4 per digit on average).
_base_ = [
    'mmdet::_base_/default_runtime.py',
    '../_base_/datasets/digits_scenes_det.py',
    '../_base_/schedules/demo_scenes_12e.py',
]
default_scope = 'mmdet'

subnet = 'work_dirs/demo/dcs_subnet/subnet.json'
pretrained = 'work_dirs/demo/dcs_retrain/last.pth'
backbone_channels = (64, 80, 384)
ssd_channels = backbone_channels + (128, )
norm_cfg = dict(type='BN', eps=0.001, momentum=0.03)

model = dict(
    type='SingleStageDetector',
    # the digits classifier's normalisation (configs/_base_/datasets/digits_cls.py)
    data_preprocessor=dict(
        type='DetDataPreprocessor',
        mean=[127.5, 127.5, 127.5],
        std=[127.5, 127.5, 127.5],
        bgr_to_rgb=True,
        pad_size_divisor=32),
    backbone=dict(
        type='mmdcs.MobileViT',
        arch='mobilevit-xs',
        subnet=subnet,
        out_indices=(2, 3, 4),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained, prefix='backbone.')),
    neck=dict(
        type='SSDNeck',
        in_channels=backbone_channels,
        out_channels=ssd_channels,
        level_strides=(2, ),
        level_paddings=(1, ),
        l2_norm_scale=None,
        use_depthwise=True,
        norm_cfg=norm_cfg,
        act_cfg=dict(type='ReLU6'),
        init_cfg=dict(type='TruncNormal', layer='Conv2d', std=0.03)),
    bbox_head=dict(
        type='SSDHead',
        in_channels=ssd_channels,
        num_classes=10,
        use_depthwise=True,
        norm_cfg=norm_cfg,
        act_cfg=dict(type='ReLU6'),
        init_cfg=dict(type='Normal', layer='Conv2d', std=0.001),
        anchor_generator=dict(
            type='SSDAnchorGenerator',
            scale_major=False,
            strides=[8, 16, 32, 64],
            ratios=[[2, 3], [2, 3], [2, 3], [2, 3]],
            min_sizes=[12, 20, 32, 48],
            max_sizes=[20, 32, 48, 80]),
        bbox_coder=dict(
            type='DeltaXYWHBBoxCoder',
            target_means=[.0, .0, .0, .0],
            target_stds=[0.1, 0.1, 0.2, 0.2])),
    train_cfg=dict(
        assigner=dict(
            type='MaxIoUAssigner',
            pos_iou_thr=0.4,
            neg_iou_thr=0.4,
            min_pos_iou=0.,
            ignore_iof_thr=-1,
            gt_max_assign_all=False),
        sampler=dict(type='PseudoSampler'),
        smoothl1_beta=1.,
        allowed_border=-1,
        pos_weight=-1,
        neg_pos_ratio=3,
        debug=False),
    test_cfg=dict(
        nms_pre=1000,
        nms=dict(type='nms', iou_threshold=0.45),
        min_bbox_size=0,
        score_thr=0.02,
        max_per_img=100))

# schedule: configs/_base_/schedules/demo_scenes_12e.py; one checkpoint, at the end
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=10),
    checkpoint=dict(type='CheckpointHook', interval={{_base_.max_epochs}}, max_keep_ckpts=1))
custom_hooks = [dict(type='NumClassCheckHook')]
env_cfg = dict(cudnn_benchmark=False)
