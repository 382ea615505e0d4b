# The embedded digits classification set (real scans from scikit-learn, 10 classes), built by
#   python tools/data/build_digits.py --out data/digits
dataset_type = 'CustomDataset'
data_root = 'data/digits/cls'
image_size = 64
classes = ('0', '1', '2', '3', '4', '5', '6', '7', '8', '9')

data_preprocessor = dict(
    num_classes=10,
    mean=[127.5, 127.5, 127.5],
    std=[127.5, 127.5, 127.5],
    to_rgb=True,
)

train_pipeline = [
    dict(type='LoadImageFromFile'),
    # digits must not be flipped; a mild crop is the only augmentation
    dict(type='RandomResizedCrop', scale=image_size, crop_ratio_range=(0.8, 1.0)),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='PackInputs'),
]

train_dataloader = dict(
    batch_size=32,
    num_workers=2,
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        ann_file='meta/train.txt',
        data_prefix='train',
        classes=classes,
        pipeline=train_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=True),
)
val_dataloader = dict(
    batch_size=64,
    num_workers=2,
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        ann_file='meta/val.txt',
        data_prefix='val',
        classes=classes,
        pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False),
)
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_dataloader = val_dataloader
test_evaluator = val_evaluator
