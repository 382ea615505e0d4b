# Demo classifier: the plain mmdcs ViT deit-tiny (timm's deit_tiny_patch16_224 layout) trained from
# scratch on the embedded digits set at 64x64 (4x4 = 16 patch tokens + the class token), 4 epochs.
# It is the unpruned teacher (and the starting point) of
# configs/demo/dynamicvit-deit-tiny_digits.py.
#   python tools/data/build_digits.py --out data/digits        # once, if data/digits is missing
#   python tools/train.py configs/demo/deit-tiny_digits-cls.py
#   -> work_dirs/deit-tiny_digits-cls/epoch_4.pth (+ best_accuracy_top1_epoch_*.pth, logs)
_base_ = [
    '../_base_/models/vit_deit-tiny.py',
    '../_base_/datasets/digits_cls.py',
    '../_base_/schedules/demo_adamw.py',
    '../_base_/default_runtime.py',
]

model = dict(
    backbone=dict(img_size=64, drop_path_rate=0.),
    head=dict(num_classes=10, topk=(1, )))
# a ViT trained from scratch on 1.4k images needs a lower rate than the demo's 2e-3 (which leaves
# it at chance after 4 epochs); weight decay as DeiT
optim_wrapper = dict(optimizer=dict(lr=5e-4, weight_decay=0.05))
