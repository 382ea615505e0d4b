# Demo instance segmentation: a compact Mask R-CNN (FPN) with the searched + retrained
# DCS-MobileViT-XS subnet as backbone, on the DCS-Digits scenes (128x128, 10 digit classes, boxes
# and stroke masks). Heavier than the SSDLite demo on a CPU (two stages, RoIAlign); the same
# overrides apply:
#   python tools/train.py configs/demo/mask-rcnn_dcs-mobilevit-xs_digits-scenes.py \
#       --cfg-options model.backbone.subnet=work_dirs/demo/dcs_subnet/subnet.json \
#                     model.backbone.init_cfg.checkpoint=work_dirs/demo/dcs_retrain/last.pth
# (`subnet` and `pretrained` below are read when the file is parsed: override the model keys as
# above, not the variables.) From scratch: --cfg-options model.backbone.init_cfg=None.
#
# mmdet's Mask R-CNN R50-FPN, shrunk for 128x128 scenes of 20-48 px digits: the backbone's
# stride-4..32 maps (48, 64, 80, 384 ch) into a 64-channel FPN, RPN anchors of 16..256 px (scale 4
# instead of 8) at strides 4..64, a 256-d two-fc box head, a two-conv 64-channel mask head, and
# fewer sampled anchors / proposals / RoIs per image.
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py',
    'mmdet::_base_/default_runtime.py',
    '../_base_/datasets/digits_scenes_det.py',
    '../_base_/schedules/demo_scenes_12e.py',
]
default_scope = 'mmdet'

subnet = 'work_dirs/demo/dcs_subnet/subnet.json'
pretrained = 'work_dirs/demo/dcs_retrain/last.pth'
fpn_channels = 64

model = dict(
    # the digits classifier's normalisation (configs/_base_/datasets/digits_cls.py)
    data_preprocessor=dict(
        mean=[127.5, 127.5, 127.5], std=[127.5, 127.5, 127.5], bgr_to_rgb=True),
    backbone=dict(
        _delete_=True,
        type='mmdcs.MobileViT',
        arch='mobilevit-xs',
        subnet=subnet,
        out_indices=(1, 2, 3, 4),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained, prefix='backbone.')),
    neck=dict(in_channels=[48, 64, 80, 384], out_channels=fpn_channels, num_outs=5),
    rpn_head=dict(
        in_channels=fpn_channels,
        feat_channels=fpn_channels,
        anchor_generator=dict(scales=[4])),
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=fpn_channels),
        bbox_head=dict(in_channels=fpn_channels, fc_out_channels=256, num_classes=10),
        mask_roi_extractor=dict(out_channels=fpn_channels),
        mask_head=dict(
            num_convs=2, in_channels=fpn_channels, conv_out_channels=fpn_channels,
            num_classes=10)),
    train_cfg=dict(
        rpn=dict(sampler=dict(num=64)),
        rpn_proposal=dict(nms_pre=300, max_per_img=100),
        rcnn=dict(sampler=dict(num=64))),
    test_cfg=dict(rpn=dict(nms_pre=300, max_per_img=100)))

# boxes and masks
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=(128, 128), keep_ratio=True),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(128, 128), keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(
        type='PackDetInputs',
        meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(metric=['bbox', 'segm'])
test_evaluator = val_evaluator

# schedule: configs/_base_/schedules/demo_scenes_12e.py; one checkpoint, at the end
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=10),
    checkpoint=dict(type='CheckpointHook', interval={{_base_.max_epochs}}, max_keep_ckpts=1))
custom_hooks = [dict(type='NumClassCheckHook')]
env_cfg = dict(cudnn_benchmark=False)
