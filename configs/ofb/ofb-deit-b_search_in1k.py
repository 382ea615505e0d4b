# OFB search on DeiT-B / ViT-B/16 at 224x224, ImageNet-1k: 200 epochs (the supplementary's
# section C; 20 of warm-up), target 3.6 GFLOPs (the supplementary's DeiT-B_3.6BFLOPs; the
# README's OFB-DeiT-D row: 3.6 G, 17.6 M params, 80.3 top-1), otherwise as
# configs/ofb/ofb-deit-s_search_in1k.py (unpruned DeiT-B: 17.58 G in this count).
#   python tools/convert/timm_to_mmdcs.py vit vit-b16 deit_base_patch16_224.pth \
#       work_dirs/pretrained/deit-b_in1k.pth
#   bash tools/dist_train.sh configs/ofb/ofb-deit-b_search_in1k.py 8
#   python tools/ofb_export.py configs/ofb/ofb-deit-b_search_in1k.py \
#       work_dirs/ofb-deit-b_search_in1k/epoch_200.pth \
#       --out work_dirs/ofb-deit-b_search_in1k/export
#   bash tools/dist_train.sh configs/ofb/ofb-deit-b_finetune_in1k.py 8
_base_ = [
    '../_base_/models/vit_vit-b16.py',
    '../_base_/datasets/imagenet_bs128_deit_224_repeat-aug.py',
    '../_base_/schedules/ofb_search_100e.py',
    '../_base_/default_runtime.py',
]
max_epochs = 200

model = dict(
    type='mmdcs.OFBClassifier',
    backbone=dict(_delete_=True, type='mmdcs.OFBViT', arch='deit-b', img_size=224,
                  drop_path_rate=0.1),
    head=dict(loss=_base_.ofb_loss),
    search=dict(_base_.ofb_search, target_flops=3.6),
)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6 / _base_.base_lr, end_factor=1.0, by_epoch=True,
         begin=0, end=_base_.warmup_epochs, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', T_max=max_epochs - _base_.warmup_epochs, eta_min=1e-5,
         by_epoch=True, begin=_base_.warmup_epochs, end=max_epochs, convert_to_iter_based=True),
]
train_cfg = dict(max_epochs=max_epochs)
load_from = 'work_dirs/pretrained/deit-b_in1k.pth'
model_wrapper_cfg = dict(type='MMDistributedDataParallel', find_unused_parameters=True)
