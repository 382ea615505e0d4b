# Fine-tuning of the compact network of the OFB Swin-T search
# (configs/ofb/ofb-swin-t_search_in1k.py), with the public DeiT fine-tuning defaults
# (../_base_/schedules/ofb_finetune_300e.py) and Swin-T's drop path 0.2.
#   bash tools/dist_train.sh configs/ofb/ofb-swin-t_finetune_in1k.py 8
_base_ = [
    '../_base_/models/swin_swin-t.py',
    '../_base_/datasets/imagenet_bs128_deit_224_repeat-aug.py',
    '../_base_/schedules/ofb_finetune_300e.py',
    '../_base_/default_runtime.py',
]
export_dir = 'work_dirs/ofb-swin-t_search_in1k/export'

model = dict(
    type='mmdcs.OFBClassifier',
    backbone=dict(_delete_=True, type='mmdcs.OFBSwin', arch='swin-t', img_size=224,
                  drop_path_rate=0.2, out_indices=(3, ), arch_file=f'{export_dir}/arch.json'),
    head=dict(loss=_base_.ofb_loss),
)
load_from = f'{export_dir}/compact.pth'
