# DynamicSwin-B/0.7 on ImageNet-1k, the public recipe (README "Swin-B": 8 GPUs x 128 x update_freq
# 4 = 4096 per step, 120 epochs, base_rate 0.7, lr 4e-3, drop path 0.5, lr_scale 0.2; main.py
# 'swin-b': pruning_loc [2, 4, 6]; the rest as DynamicSwin-T, dynamicswin-t_0.7_in1k.py): keep
# ratios [0.7, 0.5, 0.3] at blocks 2, 4, 6 of the third stage (18 blocks, 14x14 tokens at 224 ->
# 138, 98, 59 through the MLP, the rest through the fast path).
# Public result: 83.43 top-1, 12.1 GFLOPs.
#   python tools/convert/timm_to_mmdcs.py swin swin-b \
#       swin_base_patch4_window7_224.pth checkpoints/swin-b_in1k.pth --layout official
#   bash tools/dist_train.sh configs/dynamicvit/dynamicswin-b_0.7_in1k.py 8
_base_ = ['./dynamicswin-t_0.7_in1k.py']

teacher_checkpoint = 'checkpoints/swin-b_in1k.pth'

model = dict(
    backbone=dict(arch='swin-b', pruning_loc=(2, 4, 6), drop_path_rate=0.5),
    head=dict(in_channels=1024),
    # the plain Swin-B of ../_base_/models/swin_swin-b.py (drop path: unused, it runs in eval)
    teacher=dict(backbone=dict(arch='swin-b', drop_path_rate=0.5), head=dict(in_channels=1024)),
    teacher_checkpoint=teacher_checkpoint)
