# The DeiT-Tiny baseline of the Fashion-MNIST comparison: the plain mmdcs ViT deit-tiny trained
# from scratch at 64x64 (4x4 = 16 patch tokens + the class token; the size is explained in
# ../_base_/datasets/fashion_mnist_cls.py) until its top-1 on the 10,000 test images has
# plateaued: the trained model every method then prunes to the same measured latency.
#   python tools/data/fashion_mnist.py --out data/fashion-mnist     # once
#   python tools/train.py configs/demo/deit-tiny_fashion-cls.py
_base_ = [
    '../_base_/models/vit_deit-tiny.py',
    '../_base_/datasets/fashion_mnist_cls.py',
    '../_base_/schedules/demo_adamw.py',
    '../_base_/default_runtime.py',
]

model = dict(
    backbone=dict(img_size=64, drop_path_rate=0.),
    head=dict(num_classes=10, topk=(1, )))
# the DeiT-Tiny demos' rate and DeiT's weight decay (configs/demo/deit-tiny_digits-cls.py)
optim_wrapper = dict(optimizer=dict(lr=5e-4, weight_decay=0.05))
