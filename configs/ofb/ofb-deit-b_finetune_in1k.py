# Fine-tuning of the compact network of the OFB DeiT-B search
# (configs/ofb/ofb-deit-b_search_in1k.py), as configs/ofb/ofb-deit-s_finetune_in1k.py.
#   bash tools/dist_train.sh configs/ofb/ofb-deit-b_finetune_in1k.py 8
_base_ = [
    '../_base_/models/vit_vit-b16.py',
    '../_base_/datasets/imagenet_bs128_deit_224_repeat-aug.py',
    '../_base_/schedules/ofb_finetune_300e.py',
    '../_base_/default_runtime.py',
]
export_dir = 'work_dirs/ofb-deit-b_search_in1k/export'

model = dict(
    type='mmdcs.OFBClassifier',
    backbone=dict(_delete_=True, type='mmdcs.OFBViT', arch='deit-b', img_size=224,
                  drop_path_rate=0.1, arch_file=f'{export_dir}/arch.json'),
    head=dict(loss=_base_.ofb_loss),
)
load_from = f'{export_dir}/compact.pth'
