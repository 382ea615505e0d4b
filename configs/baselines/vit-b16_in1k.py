# ViT-B/16 baseline on ImageNet-1k at 224x224, with the retraining recipe of the KCR
# subnets (../_base_/schedules/retrain_300e.py: 300 epochs, AdamW wd 0.01, lr 2e-4 -> 2e-3 -> 2e-4,
# batch 512, EMA), without the method: compare like with like. The papers' baseline
# (KCR paper Table 1): params 86.5 M, FLOPs 17.6 G, top-1 83.7.
#   bash tools/dist_train.sh configs/baselines/vit-b16_in1k.py 8
_base_ = [
    '../_base_/models/vit_vit-b16.py',
    '../_base_/datasets/imagenet_bs64_224.py',
    '../_base_/schedules/retrain_300e.py',
    '../_base_/default_runtime.py',
]
