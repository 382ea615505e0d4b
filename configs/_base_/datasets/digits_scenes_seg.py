# DCS-Digits scenes for semantic segmentation (mmseg BaseSegDataset): 128x128 canvases with 1-5
# real handwritten digits (sklearn load_digits scans); each map labels the digit strokes with
# their class, 0 = background, 1..10 = '0'..'9' (255 never occurs). Built by
#   python tools/data/build_digits.py --out data/digits
# Layout: data/digits/scenes/{images,seg_maps}/{train,val}/<id>.png. Another location:
#   --cfg-options train_dataloader.dataset.data_root=D val_dataloader.dataset.data_root=D \
#       test_dataloader.dataset.data_root=D
dataset_type = 'BaseSegDataset'
data_root = 'data/digits/scenes'
image_size = 128
crop_size = (image_size, image_size)
classes = ('background', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9')
palette = [[0, 0, 0], [31, 119, 180], [255, 127, 14], [44, 160, 44], [214, 39, 40],
           [148, 103, 189], [140, 86, 75], [227, 119, 194], [127, 127, 127], [188, 189, 34],
           [23, 190, 207]]
metainfo = dict(classes=classes, palette=palette)

# No flip (a flipped digit is another glyph) and no rescaling: the canvas is the input size.
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='PackSegInputs'),
]

train_dataloader = dict(
    batch_size=8,
    num_workers=1,
    persistent_workers=True,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        metainfo=metainfo,
        data_prefix=dict(img_path='images/train', seg_map_path='seg_maps/train'),
        img_suffix='.png',
        seg_map_suffix='.png',
        reduce_zero_label=False,
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=8,
    num_workers=1,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        metainfo=metainfo,
        data_prefix=dict(img_path='images/val', seg_map_path='seg_maps/val'),
        img_suffix='.png',
        seg_map_suffix='.png',
        reduce_zero_label=False,
        pipeline=test_pipeline))
test_dataloader = val_dataloader

val_evaluator = dict(type='IoUMetric', iou_metrics=['mIoU'])
test_evaluator = val_evaluator
