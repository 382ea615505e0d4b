# Pruning a pretrained Swin-T with KCR: timm's ImageNet-1k weights converted once with
#   python tools/convert/timm_to_mmdcs.py swin swin-t swin_tiny_patch4_window7_224.pth \
#       checkpoints/swin-t_in1k.pth
# initialise the KCR supernet (gates open), searched for 10 epochs on ImageNet-1k at 0.7 of the
# baseline FLOPs, exported with tools/export_subnet.py (pruned.pth), fine-tuned with
# kcr-swin-t_finetune_in1k.py (the papers: 200 + 300 epochs from scratch).
_base_ = [
    '../_base_/models/swin_swin-t.py',
    '../_base_/datasets/imagenet_bs64_224.py',
    '../_base_/schedules/search_200e.py',
    '../_base_/default_runtime.py',
]
search_epochs = 10
load_from = 'checkpoints/swin-t_in1k.pth'

model = dict(
    type='mmdcs.ChannelSelectionClassifier',
    backbone=dict(variant='kcr', gate_init=3.0),
    head=dict(num_classes=1000),
    # a budget (the exact count, a multiplier) instead of the papers' λ·log cost
    cost=dict(target=dict(flops=0.7, input_size=224)),
)
optim_wrapper = dict(weight=dict(optimizer=dict(lr=5e-5)))
param_scheduler = dict(
    weight=[dict(type='CosineAnnealingLR', T_max=search_epochs, eta_min=1e-6, by_epoch=True,
                 begin=0, end=search_epochs)],
    arch=[dict(type='CosineAnnealingLR', T_max=search_epochs, eta_min=1e-4, by_epoch=True,
               begin=0, end=search_epochs)])
train_cfg = dict(max_epochs=search_epochs)
