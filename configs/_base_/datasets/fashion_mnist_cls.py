# Fashion-MNIST (Zalando's 70,000 grey 28x28 article images, 10 classes: 60,000 train, 10,000
# test), read by mmpretrain's FashionMNIST from the four idx files that
#   python tools/data/fashion_mnist.py --out data/fashion-mnist
# places (nothing is downloaded at run time: download=False). The 10,000 test images are the
# validation set: one run's binomial standard error is about 0.3 points at 90 % top-1.
#
# Size: the images are resized to 64x64, the demo models' size on the digits: DeiT-Tiny's patch
# is 16 (fixed by the arch), so 64x64 gives 4x4 = 16 patch tokens (+ the class token), each
# token one 7x7 square of the original image, as a patch-7 ViT on 28x28; MobileViT-XS needs a
# side of at least 64 (its three MobileViT blocks attend over 8x8, 4x4 and 2x2 maps; at 32 the
# last two are down to one patch). Measured training throughput and the choice against
# 112x112 (49 tokens): docs/benchmarks_fashion_plan.md.
#
# Channels: the backbones stay RGB (in_channels=3, as every table, export and latency
# measurement assumes). The grey image is packed as one channel (B, 1, H, W); the data
# preprocessor's three-entry mean and std broadcast it to three identical normalised channels.
# Mean and std: the training set's pixel mean and standard deviation (0.2860 and 0.3530 of 255).
dataset_type = 'FashionMNIST'
data_root = 'data/fashion-mnist'
image_size = 64

data_preprocessor = dict(
    num_classes=10,
    mean=[72.94, 72.94, 72.94],
    std=[90.02, 90.02, 90.02],
    to_rgb=False,
)

train_pipeline = [
    dict(type='Resize', scale=image_size),
    # garments are left-right symmetric: a horizontal flip is the only augmentation
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='Resize', scale=image_size),
    dict(type='PackInputs'),
]

train_dataloader = dict(
    batch_size=32,
    num_workers=0,
    dataset=dict(type=dataset_type, data_root=data_root, split='train', test_mode=False,
                 download=False, pipeline=train_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=True),
)
val_dataloader = dict(
    batch_size=64,
    num_workers=0,
    dataset=dict(type=dataset_type, data_root=data_root, split='test', test_mode=True,
                 download=False, pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False),
)
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_dataloader = val_dataloader
test_evaluator = val_evaluator
