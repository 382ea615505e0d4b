# The MobileViT-XS baseline of the Fashion-MNIST comparison: the mmdcs MobileViT-XS trained from
# scratch at 64x64 (see ../_base_/datasets/fashion_mnist_cls.py) until its top-1 on the 10,000
# test images has plateaued: the trained model every method then prunes.
#   python tools/train.py configs/demo/mobilevit-xs_fashion-cls.py
_base_ = [
    '../_base_/models/mobilevit_mobilevit-xs.py',
    '../_base_/datasets/fashion_mnist_cls.py',
    '../_base_/schedules/demo_adamw.py',
    '../_base_/default_runtime.py',
]

model = dict(head=dict(num_classes=10, topk=(1, )))
