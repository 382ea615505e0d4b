# OFB (Once-for-Both, CVPR 2024) search on DeiT-S / ViT-S/16 at 224x224, ImageNet-1k: the
# supernet starts from the pretrained DeiT-S and prunes heads x qkv channels and the MLP width of
# every block and the embedding width, to the public code's default target of 1.0 GFLOPs
# (exp_sh/run_exp.sh; the README's OFB-DeiT-B/C rows: 1.1 / 1.7 G, 76.1 / 78.0 top-1 after
# fine-tuning). FLOPs here are mmengine multiply-accumulates of the whole classifier at 224
# (the unpruned DeiT-S: 4.61 G), the count tools/analysis/complexity.py reports.
# 100 epochs, the public defaults (../_base_/schedules/ofb_search_100e.py), 8 GPUs x 128.
#   python tools/convert/timm_to_mmdcs.py vit vit-s16 deit_small_patch16_224.pth \
#       work_dirs/pretrained/deit-s_in1k.pth                 # the timm / DeiT weights
#   bash tools/dist_train.sh configs/ofb/ofb-deit-s_search_in1k.py 8
#   python tools/ofb_export.py configs/ofb/ofb-deit-s_search_in1k.py \
#       work_dirs/ofb-deit-s_search_in1k/epoch_100.pth \
#       --out work_dirs/ofb-deit-s_search_in1k/export
#   bash tools/dist_train.sh configs/ofb/ofb-deit-s_finetune_in1k.py 8
# Multi-GPU: the hook re-wraps the model after every pruning step (the DDP reducer holds the old
# parameter sizes), which needs model_wrapper_cfg=dict(type='MMDistributedDataParallel',
# find_unused_parameters=True) (the finished groups' alpha gets no gradient).
_base_ = [
    '../_base_/models/vit_vit-s16.py',
    '../_base_/datasets/imagenet_bs128_deit_224_repeat-aug.py',
    '../_base_/schedules/ofb_search_100e.py',
    '../_base_/default_runtime.py',
]

model = dict(
    type='mmdcs.OFBClassifier',
    backbone=dict(_delete_=True, type='mmdcs.OFBViT', arch='deit-s', img_size=224,
                  drop_path_rate=0.1),
    head=dict(loss=_base_.ofb_loss),
    search=dict(_base_.ofb_search, target_flops=1.0),
)
load_from = 'work_dirs/pretrained/deit-s_in1k.pth'
model_wrapper_cfg = dict(type='MMDistributedDataParallel', find_unused_parameters=True)
