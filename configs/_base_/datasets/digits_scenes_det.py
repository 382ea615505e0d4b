# DCS-Digits scenes for detection / instance segmentation (mmdet CocoDataset): 128x128 canvases
# with 1-5 real handwritten digits (sklearn load_digits scans, 20-48 px), 10 categories '0'..'9',
# COCO boxes and RLE masks. Built by
#   python tools/data/build_digits.py --out data/digits
# Layout: data/digits/scenes/{images/{train,val}/*.png, annotations/instances_{train,val}.json}.
# Another location: override the dataloaders' data_root AND the evaluators' ann_file, e.g.
#   --cfg-options train_dataloader.dataset.data_root=D val_dataloader.dataset.data_root=D \
#       test_dataloader.dataset.data_root=D \
#       val_evaluator.ann_file=D/annotations/instances_val.json \
#       test_evaluator.ann_file=D/annotations/instances_val.json
# (the evaluators' paths are fixed when this file is parsed).
# The pipelines load boxes only; a config that needs masks (Mask R-CNN) sets with_mask=True
# (see configs/demo/mask-rcnn_dcs-mobilevit-xs_digits-scenes.py).
dataset_type = 'CocoDataset'
data_root = 'data/digits/scenes'
image_size = 128
classes = ('0', '1', '2', '3', '4', '5', '6', '7', '8', '9')
metainfo = dict(classes=classes)
backend_args = None

# No flip (a flipped digit is another glyph) and no rescaling: the canvas is the input size.
# The Resize is a no-op on 128x128 scenes; it records scale_factor for the predictions.
train_pipeline = [
    dict(type='LoadImageFromFile', backend_args=backend_args),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale=(image_size, image_size), keep_ratio=True),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile', backend_args=backend_args),
    dict(type='Resize', scale=(image_size, image_size), keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(
        type='PackDetInputs',
        meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
]

train_dataloader = dict(
    batch_size=8,
    num_workers=1,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    batch_sampler=dict(type='AspectRatioBatchSampler'),
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        metainfo=metainfo,
        ann_file='annotations/instances_train.json',
        data_prefix=dict(img='images/train/'),
        filter_cfg=dict(filter_empty_gt=True, min_size=4),
        pipeline=train_pipeline,
        backend_args=backend_args))
val_dataloader = dict(
    batch_size=8,
    num_workers=1,
    persistent_workers=True,
    drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        metainfo=metainfo,
        ann_file='annotations/instances_val.json',
        data_prefix=dict(img='images/val/'),
        test_mode=True,
        pipeline=test_pipeline,
        backend_args=backend_args))
test_dataloader = val_dataloader

val_evaluator = dict(
    type='CocoMetric',
    ann_file=data_root + '/annotations/instances_val.json',
    metric='bbox',
    format_only=False,
    backend_args=backend_args)
test_evaluator = val_evaluator
