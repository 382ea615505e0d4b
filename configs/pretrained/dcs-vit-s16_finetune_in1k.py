# Pruning a pretrained ViT-S/16, fine-tuning (see dcs-vit-s16_search-from-timm_in1k.py): the
# exported subnet from its inherited weights, 30 epochs with the IB term from epoch 10.
_base_ = ['../dcs/dcs-vit-s16_retrain_in1k.py']
finetune_epochs = 30
subnet = 'work_dirs/dcs-vit-s16_search-from-timm_in1k/subnet/subnet.json'
load_from = 'work_dirs/dcs-vit-s16_search-from-timm_in1k/subnet/pruned.pth'

model = dict(backbone=dict(subnet=subnet), regularizer=dict(t_warm=10))
optim_wrapper = dict(optimizer=dict(lr=1e-4))
param_scheduler = [
    dict(type='CosineAnnealingLR', T_max=finetune_epochs, eta_min=1e-6, by_epoch=True, begin=0,
         end=finetune_epochs, convert_to_iter_based=True)
]
train_cfg = dict(max_epochs=finetune_epochs)
