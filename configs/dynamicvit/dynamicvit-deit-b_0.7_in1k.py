# DynamicViT-DeiT-B/0.7 on ImageNet-1k, the public recipe (README "DeiT-B": as DeiT-S with
# --drop_path 0.2 --ratio_weight 5.0). Public result: 81.43 top-1, 11.4 GFLOPs (the maintainers
# note ViT-B with ratio <= 0.7 can be unstable: resume or change the seed, DynamicViT#27).
#   python tools/convert/timm_to_mmdcs.py vit vit-b16 deit_base_patch16_224-b5f2ef4d.pth \
#       checkpoints/deit-b_in1k.pth
#   bash tools/dist_train.sh configs/dynamicvit/dynamicvit-deit-b_0.7_in1k.py 8
_base_ = ['./dynamicvit-deit-s_0.7_in1k.py']

teacher_checkpoint = 'checkpoints/deit-b_in1k.pth'

model = dict(
    backbone=dict(arch='deit-b', drop_path_rate=0.2),
    head=dict(in_channels=768),
    teacher=dict(backbone=dict(arch='vit-b16'), head=dict(in_channels=768)),
    teacher_checkpoint=teacher_checkpoint,
    ratio_weight=5.0)
