# imagenet_bs128_deit_224.py with DeiT's repeated augmentation, as the OFB search and fine-tuning
# scripts use it by default (HankYe/Once-for-Both search.py / finetune.py: --repeated-aug on,
# samplers.RASampler): every image of an epoch appears 3 times, the copies on different GPUs, and
# each GPU takes len(dataset) / num_gpus of these per epoch (mmpretrain's RepeatAugSampler; the
# public sampler rounds the epoch down to a multiple of 256 images, this one does not).
_base_ = './imagenet_bs128_deit_224.py'

train_dataloader = dict(sampler=dict(type='RepeatAugSampler', shuffle=True, num_repeats=3))
