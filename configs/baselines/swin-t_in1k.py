# Swin-T baseline on ImageNet-1k at 224x224, with the retraining recipe of the DCS and KCR
# subnets (../_base_/schedules/retrain_300e.py: 300 epochs, AdamW wd 0.01, lr 2e-4 -> 2e-3 -> 2e-4,
# batch 512, EMA), without the method: compare like with like. The papers' baseline
# (DCS paper Table 1): params 29.0 M, FLOPs 4.5 G, top-1 81.3.
#   bash tools/dist_train.sh configs/baselines/swin-t_in1k.py 8
_base_ = [
    '../_base_/models/swin_swin-t.py',
    '../_base_/datasets/imagenet_bs64_224.py',
    '../_base_/schedules/retrain_300e.py',
    '../_base_/default_runtime.py',
]
