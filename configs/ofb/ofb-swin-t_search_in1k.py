# OFB search on Swin-T at 224x224, ImageNet-1k (the public code has no Swin; the supplementary's
# section C: 100 epochs, PMIM on the 32x32 "downsampled patches"): per block heads x qkv
# channels and MLP width, per stage the embedding width; target 2.6 GFLOPs (the public README's
# commented-out OFB-Swin-B row: 2.6 G, 16.4 M params, 79.9 top-1). The unpruned Swin-T: 4.51 G in
# this count. Schedule and augmentation as the DeiT searches
# (../_base_/schedules/ofb_search_100e.py); drop path 0.2 (Swin-T's recipe).
#   python tools/convert/timm_to_mmdcs.py swin swin-t swin_tiny_patch4_window7_224.pth \
#       work_dirs/pretrained/swin-t_in1k.pth
#   bash tools/dist_train.sh configs/ofb/ofb-swin-t_search_in1k.py 8
#   python tools/ofb_export.py configs/ofb/ofb-swin-t_search_in1k.py \
#       work_dirs/ofb-swin-t_search_in1k/epoch_100.pth \
#       --out work_dirs/ofb-swin-t_search_in1k/export
#   bash tools/dist_train.sh configs/ofb/ofb-swin-t_finetune_in1k.py 8
_base_ = [
    '../_base_/models/swin_swin-t.py',
    '../_base_/datasets/imagenet_bs128_deit_224_repeat-aug.py',
    '../_base_/schedules/ofb_search_100e.py',
    '../_base_/default_runtime.py',
]

model = dict(
    type='mmdcs.OFBClassifier',
    backbone=dict(_delete_=True, type='mmdcs.OFBSwin', arch='swin-t', img_size=224,
                  drop_path_rate=0.2, out_indices=(3, )),
    head=dict(loss=_base_.ofb_loss),
    search=dict(_base_.ofb_search, target_flops=2.6),
)
load_from = 'work_dirs/pretrained/swin-t_in1k.pth'
model_wrapper_cfg = dict(type='MMDistributedDataParallel', find_unused_parameters=True)
