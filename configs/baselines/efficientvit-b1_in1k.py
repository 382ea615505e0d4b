# EfficientViT-B1 baseline on ImageNet-1k at 224x224, with the retraining recipe of the DCS
# subnets (../_base_/schedules/retrain_300e.py: 300 epochs, AdamW wd 0.01, lr 2e-4 -> 2e-3 -> 2e-4,
# batch 512, EMA), without the method: compare like with like. The papers' baseline
# (DCS paper Table 1): params 9.1 M, FLOPs 0.52 G, top-1 79.4.
#   bash tools/dist_train.sh configs/baselines/efficientvit-b1_in1k.py 8
_base_ = [
    '../_base_/models/efficientvit_efficientvit-b1.py',
    '../_base_/datasets/imagenet_bs64_224.py',
    '../_base_/schedules/retrain_300e.py',
    '../_base_/default_runtime.py',
]
