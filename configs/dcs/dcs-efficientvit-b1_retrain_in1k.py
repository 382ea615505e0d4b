# DCS-EfficientViT-B1: retraining of the searched subnet on ImageNet-1k at 224x224.
# Paper (DCS paper Table 1): 9.1 M -> 8.2 M params, 0.52 G -> 0.46 G FLOPs, top-1 79.4 -> 80.8.
# From scratch, 300 epochs, AdamW wd 0.01, lr 2e-4 -> 2e-3 (5 warm-up epochs) -> cosine
# 2e-4, batch 512, EMA;
# cross-entropy for t_warm = 90 epochs, then + the IB bound (η = 50);
# the Q/K gates keep training (TemperatureHook).
# The subnet is the file tools/export_subnet.py wrote after the search
# (configs/dcs/dcs-efficientvit-b1_search_in100.py); another one with
#   --cfg-options model.backbone.subnet=PATH/subnet.json
# (the variable `subnet` is read when the file is parsed; overriding it alone changes nothing).
# To fine-tune from the supernet's weights instead (method.md §4, option; the 100-class head of
# the search is not loaded):
#   --cfg-options load_from=work_dirs/dcs-efficientvit-b1_search_in100/pruned.pth
#   bash tools/dist_train.sh configs/dcs/dcs-efficientvit-b1_retrain_in1k.py 8
_base_ = [
    '../_base_/models/efficientvit_efficientvit-b1.py',
    '../_base_/datasets/imagenet_bs64_224.py',
    '../_base_/schedules/retrain_300e.py',
    '../_base_/default_runtime.py',
]
subnet = 'work_dirs/dcs-efficientvit-b1_search_in100/subnet.json'

model = dict(
    type='mmdcs.ChannelSelectionClassifier',
    backbone=dict(variant='dcs', subnet=subnet),
    regularizer=_base_.ib_regularizer,
)
custom_hooks = _base_.dcs_retrain_hooks
