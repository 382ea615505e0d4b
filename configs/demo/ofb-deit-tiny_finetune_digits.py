# Demo fine-tuning of the compact network of the OFB search on the digits set (64x64): the dense
# DeiT-Tiny with the searched widths (arch.json), initialised from the fused search weights
# (compact.pth), 4 epochs with the demo AdamW schedule (../_base_/schedules/demo_adamw.py) at the
# DeiT-Tiny demos' lr 5e-4 and weight decay 0.05 and EMA weights for evaluation, as the DCS/KCR
# DeiT-Tiny demo retraining, plus the public fine-tuning's layer-wise lr decay 0.95 (no mixup /
# cutmix: the OFB supplementary reports they hurt its retraining). Full-scale: configs/ofb/.
#
# After the search and the export (see configs/demo/ofb-deit-tiny_search_digits.py):
#   python tools/train.py configs/demo/ofb-deit-tiny_finetune_digits.py
#       -> work_dirs/ofb-deit-tiny_finetune_digits/epoch_4.pth (+ logs, best_*.pth)
# Another export directory:
#   --cfg-options model.backbone.arch_file=DIR/arch.json load_from=DIR/compact.pth
# (the variable `export_dir` is read when the file is parsed; overriding it alone changes
# nothing). Params / FLOPs of the compact classifier:
#   python tools/analysis/complexity.py configs/demo/ofb-deit-tiny_finetune_digits.py \
#       --shape 64 64
_base_ = [
    '../_base_/datasets/digits_cls.py',
    '../_base_/schedules/demo_adamw.py',
    '../_base_/default_runtime.py',
]
export_dir = 'work_dirs/ofb-deit-tiny_search_digits/export'

model = dict(
    type='mmdcs.OFBClassifier',
    # a compact backbone: the head's in_channels follows the searched embedding width
    backbone=dict(type='mmdcs.OFBViT', arch='deit-tiny', img_size=64, drop_path_rate=0.1,
                  arch_file=f'{export_dir}/arch.json'),
    neck=None,
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=192,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        topk=(1, )),
)
load_from = f'{export_dir}/compact.pth'

optim_wrapper = dict(
    constructor='LearningRateDecayOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=5e-4, betas=(0.9, 0.999), weight_decay=0.05),
    paramwise_cfg=dict(
        layer_decay_rate=0.95,
        norm_decay_mult=0.,
        bias_decay_mult=0.,
        custom_keys={
            '.pos_embed': dict(decay_mult=0.),
            '.cls_token': dict(decay_mult=0.),
        }),
)
custom_hooks = [dict(type='EMAHook', momentum=0.01, priority='ABOVE_NORMAL')]
