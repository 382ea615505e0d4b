# Pruning a pretrained ViT-S/16: timm's ImageNet-1k weights converted once with
#   python tools/convert/timm_to_mmdcs.py vit vit-s16 vit_small_patch16_224.pth \
#       checkpoints/vit-s16_in1k.pth
# (nothing is downloaded at run time) initialise the DCS supernet (gates open: gate_init 3.0;
# Linear_θ's weight 0, so the supernet starts as the pretrained network), searched for a few
# epochs on ImageNet-1k at 0.7 of the baseline FLOPs with a low weight lr; then
#   python tools/export_subnet.py THIS_CONFIG work_dirs/.../epoch_10.pth --out DIR
#       --target-flops 0.7        (DIR/pruned.pth: the inherited weights)
# and fine-tune with dcs-vit-s16_finetune_in1k.py. The papers' schedule is 200 search + 300
# retraining epochs from scratch; this is 10 + 30 from pretrained weights.
_base_ = [
    '../_base_/models/vit_vit-s16.py',
    '../_base_/datasets/imagenet_bs64_224.py',
    '../_base_/schedules/search_200e.py',
    '../_base_/default_runtime.py',
]
search_epochs = 10
load_from = 'checkpoints/vit-s16_in1k.pth'

model = dict(
    type='mmdcs.ChannelSelectionClassifier',
    backbone=dict(variant='dcs', gate_init=3.0),
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
