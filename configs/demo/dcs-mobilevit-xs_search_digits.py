# Demo search: DCS-MobileViT-XS supernet on the digits set (64x64), aimed at 0.92 of the baseline
# classifier's FLOPs at 64x64 (method.md §11: a Lagrange multiplier instead of λ, the target
# lowered from 1 over the first half of the search, and a projection onto the budget after its
# last step, so the last checkpoint's {α > 0} is on the budget; the floor of MobileViT-XS, one MLP
# channel per block, is 0.87 for DCS and 0.83 for KCR, its MLPs being a small share of its FLOPs). The papers' λ·log cost: cost=dict(mode='paper', weight=0.2).
#   python tools/train.py configs/demo/dcs-mobilevit-xs_search_digits.py
#   python tools/export_subnet.py configs/demo/dcs-mobilevit-xs_search_digits.py \
#       work_dirs/dcs-mobilevit-xs_search_digits/epoch_4.pth --out work_dirs/demo_subnets/dcs
_base_ = [
    '../_base_/datasets/digits_cls.py',
    '../_base_/schedules/demo_search.py',
    '../_base_/default_runtime.py',
]

model = dict(
    type='mmdcs.ChannelSelectionClassifier',
    # gates start at P(open) = sigmoid(1) = 0.73 (the default 3.0, "all kept", is for starting
    # from a baseline checkpoint)
    backbone=dict(type='mmdcs.MobileViT', arch='mobilevit-xs', variant='dcs', gate_init=1.0),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=384,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        topk=(1, )),
    cost=dict(target=dict(flops=0.92, input_size=64)),
)
