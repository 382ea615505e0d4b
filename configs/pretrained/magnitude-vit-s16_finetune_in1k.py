# A pretrained vit-s16 (timm's ImageNet-1k weights converted with tools/convert/timm_to_mmdcs.py)
# pruned without a search:
#   python tools/export_subnet.py configs/_base_/models/vit_vit-s16.py \
#       checkpoints/vit-s16_in1k.pth --out DIR --target-flops 0.7 --method magnitude
#       (or taylor, uniform, random)
# then fine-tuned from DIR/pruned.pth with cross-entropy only, on the schedule of the DCS/KCR
# fine-tuning (30 epochs).
_base_ = [
    '../_base_/models/vit_vit-s16.py',
    '../_base_/datasets/imagenet_bs64_224.py',
    '../_base_/schedules/retrain_300e.py',
    '../_base_/default_runtime.py',
]
finetune_epochs = 30
subnet = 'work_dirs/magnitude-vit-s16_in1k/subnet.json'
load_from = 'work_dirs/magnitude-vit-s16_in1k/pruned.pth'

model = dict(backbone=dict(subnet=subnet))
optim_wrapper = dict(optimizer=dict(lr=1e-4))
param_scheduler = [
    dict(type='CosineAnnealingLR', T_max=finetune_epochs, eta_min=1e-6, by_epoch=True, begin=0,
         end=finetune_epochs, convert_to_iter_based=True)
]
train_cfg = dict(max_epochs=finetune_epochs)
