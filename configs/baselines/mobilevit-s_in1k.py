# MobileViT-S baseline on ImageNet-1k at 256x256, with the retraining recipe of the DCS
# subnets (../_base_/schedules/retrain_300e.py: 300 epochs, AdamW wd 0.01, lr 2e-4 -> 2e-3 -> 2e-4,
# batch 512, EMA), without the method: compare like with like. The papers' baseline
# (DCS paper Table 1): params 5.6 M, FLOPs 1.4 G, top-1 78.4.
#   bash tools/dist_train.sh configs/baselines/mobilevit-s_in1k.py 8
_base_ = [
    '../_base_/models/mobilevit_mobilevit-s.py',
    '../_base_/datasets/imagenet_bs64_256.py',
    '../_base_/schedules/retrain_300e.py',
    '../_base_/default_runtime.py',
]
