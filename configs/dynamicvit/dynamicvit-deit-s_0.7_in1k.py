# DynamicViT-DeiT-S/0.7 on ImageNet-1k, the public recipe (README "DeiT-S": 8 GPUs x 128, 30
# epochs, base_rate 0.7, lr 1e-3, warm-up 5; ratio weight 2.0, KL and token distillation 0.5 each):
# keep ratios [0.7, 0.49, 0.343] before blocks 3, 6, 9 -> 138, 97, 68 of the 196 patch tokens at
# inference (public int(): 137, 96, 67). Public result: 79.32 top-1, 2.9 GFLOPs.
# The teacher and the student's starting point is DeiT-S (timm deit_small_patch16_224 =
# the vit-s16 layout), converted once:
#   python tools/convert/timm_to_mmdcs.py vit vit-s16 deit_small_patch16_224-cd65a155.pth \
#       checkpoints/deit-s_in1k.pth
#   bash tools/dist_train.sh configs/dynamicvit/dynamicvit-deit-s_0.7_in1k.py 8
#   (another teacher: --cfg-options model.teacher_checkpoint=PATH)
_base_ = [
    '../_base_/models/vit_vit-s16.py',
    '../_base_/datasets/imagenet_bs128_deit_224.py',
    '../_base_/schedules/dynamicvit_30e.py',
    '../_base_/default_runtime.py',
]

teacher_checkpoint = 'checkpoints/deit-s_in1k.pth'

model = dict(
    _delete_=True,
    type='mmdcs.DynamicViTClassifier',
    backbone=dict(
        type='mmdcs.DynamicViT',
        arch='deit-s',
        img_size=224,
        keep_ratio=0.7,
        pruning_loc=(3, 6, 9),
        out_type='cls_token',
        drop_path_rate=0.),
    neck=None,
    head=dict(
        type='LinearClsHead',
        num_classes=1000,
        in_channels=384,
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
        topk=(1, 5)),
    train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]),
    teacher={{_base_.model}},
    teacher_checkpoint=teacher_checkpoint,
    ratio_weight=2.0,
    kl_weight=0.5,
    distill_weight=0.5)
