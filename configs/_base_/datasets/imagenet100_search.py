# The search set (DCS paper 4.1, KCR paper 4.1; method.md §4): 100 ImageNet classes, a fixed seeded
# subset written by
#   python tools/data/imagenet_subset.py --imagenet data/imagenet --out data/imagenet100 \
#       --classes 100 --seed 0
# which writes annotation files only: the images are read from the ImageNet folder.
# Path scheme: no data_root; every path is relative to the working directory (like work_dirs):
#   ann_file     data/imagenet100/meta/{train,val}.txt  lines '<wnid>/<file>.JPEG <label 0..99>',
#                                                       paths relative to data/imagenet/<split>/
#   data_prefix  data/imagenet/{train,val}              the original images
#   classes      data/imagenet100/classes.txt          the chosen wnids, in label order
# Other locations: override the three keys (e.g. --cfg-options
# train_dataloader.dataset.data_prefix=/datasets/imagenet/train ...); the variables below are
# read when the file is parsed, overriding them alone changes nothing.
# The search loop (mmdcs.AlternatingSearchLoop) splits the train set 70/30 itself; val is the
# subset's 5,000 ImageNet val images (50 per class). Augmentation and batch as
# ./imagenet_bs64_224.py.
_base_ = './imagenet_bs64_224.py'

imagenet_root = 'data/imagenet'
subset_root = 'data/imagenet100'
num_classes = 100

data_preprocessor = dict(num_classes=num_classes)
train_dataloader = dict(
    dataset=dict(
        _delete_=True,
        type='CustomDataset',
        ann_file=f'{subset_root}/meta/train.txt',
        data_prefix=f'{imagenet_root}/train',
        classes=f'{subset_root}/classes.txt',
        pipeline=_base_.train_pipeline))
val_dataloader = dict(
    dataset=dict(
        _delete_=True,
        type='CustomDataset',
        ann_file=f'{subset_root}/meta/val.txt',
        data_prefix=f'{imagenet_root}/val',
        classes=f'{subset_root}/classes.txt',
        pipeline=_base_.test_pipeline))
test_dataloader = val_dataloader
