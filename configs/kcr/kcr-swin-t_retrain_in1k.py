# KCR-Swin-T: retraining of the searched subnet on ImageNet-1k at 224x224.
# Paper (KCR paper Table 1): 29.0 M -> 24.6 M params, 4.5 G -> 3.9 G FLOPs, top-1 81.3 -> 82.4.
# From scratch, 300 epochs, AdamW wd 0.01, lr 2e-4 -> 2e-3 (5 warm-up epochs) -> cosine
# 2e-4, batch 512, EMA;
# cross-entropy for t_warm = 90 epochs, then + the KCR term (η = 1, γ = 0.1);
# a KCR subnet has no gate left (no TemperatureHook).
# The subnet is the file tools/export_subnet.py wrote after the search
# (configs/kcr/kcr-swin-t_search_in100.py); another one with
#   --cfg-options model.backbone.subnet=PATH/subnet.json
# (the variable `subnet` is read when the file is parsed; overriding it alone changes nothing).
# To fine-tune from the supernet's weights instead (method.md §4, option; the 100-class head of
# the search is not loaded):
#   --cfg-options load_from=work_dirs/kcr-swin-t_search_in100/pruned.pth
#   bash tools/dist_train.sh configs/kcr/kcr-swin-t_retrain_in1k.py 8
_base_ = [
    '../_base_/models/swin_swin-t.py',
    '../_base_/datasets/imagenet_bs64_224.py',
    '../_base_/schedules/retrain_300e.py',
    '../_base_/default_runtime.py',
]
subnet = 'work_dirs/kcr-swin-t_search_in100/subnet.json'

model = dict(
    type='mmdcs.ChannelSelectionClassifier',
    backbone=dict(variant='kcr', subnet=subnet),
    regularizer=_base_.kcr_regularizer,
)
custom_hooks = _base_.kcr_retrain_hooks
