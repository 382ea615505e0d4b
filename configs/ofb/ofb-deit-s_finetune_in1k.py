# Fine-tuning of the compact network of the OFB DeiT-S search
# (configs/ofb/ofb-deit-s_search_in1k.py) on ImageNet-1k: the dense DeiT-S with the searched widths (arch.json), initialised from the
# fused search weights (compact.pth); 300 epochs, the public fine-tuning defaults
# (../_base_/schedules/ofb_finetune_300e.py: lr 6e-4 for 1024, layer decay 0.95, wd 0.05, EMA,
# label smoothing, no mixup / cutmix), 8 GPUs x 128.
#   bash tools/dist_train.sh configs/ofb/ofb-deit-s_finetune_in1k.py 8
# Another export: --cfg-options model.backbone.arch_file=DIR/arch.json load_from=DIR/compact.pth
_base_ = [
    '../_base_/models/vit_vit-s16.py',
    '../_base_/datasets/imagenet_bs128_deit_224_repeat-aug.py',
    '../_base_/schedules/ofb_finetune_300e.py',
    '../_base_/default_runtime.py',
]
export_dir = 'work_dirs/ofb-deit-s_search_in1k/export'

model = dict(
    type='mmdcs.OFBClassifier',
    # a compact backbone: the head's in_channels follows the searched embedding width
    backbone=dict(_delete_=True, type='mmdcs.OFBViT', arch='deit-s', img_size=224,
                  drop_path_rate=0.1, arch_file=f'{export_dir}/arch.json'),
    head=dict(loss=_base_.ofb_loss),
)
load_from = f'{export_dir}/compact.pth'
