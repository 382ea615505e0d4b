# ImageNet-1k at 224x224 with the DeiT / Swin augmentation (mmpretrain's imagenet_bs64_swin_224:
# RandomResizedCrop, flip, RandAugment rand-m9-mstd0.5-inc1, random erasing 0.25; test: short
# side 256, centre crop 224), 128 images per GPU: the OFB search and fine-tuning recipes
# (HankYe/Once-for-Both: DeiT's augmentation, effective batch 1024 = 8 GPUs x 128, or fewer GPUs
# with optim_wrapper.accumulative_counts). Layout: data/imagenet/{train,val}/ (+ meta/*.txt).
_base_ = 'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py'

data_root = 'data/imagenet'
train_dataloader = dict(
    batch_size=128,
    num_workers=8,
    persistent_workers=True,
    dataset=dict(data_root=data_root, split='train'),
)
val_dataloader = dict(
    batch_size=128,
    num_workers=8,
    persistent_workers=True,
    dataset=dict(data_root=data_root, split='val'),
)
test_dataloader = val_dataloader
