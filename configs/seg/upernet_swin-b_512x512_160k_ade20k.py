# UperNet (ADE20K, 512×512, 160k iterations) with the plain Swin-B (KCR paper, Table 2: 51.6 mIoU,
# multi-scale test): the Swin-T config with the Swin-B backbone (heads on 128-1024 channels,
# auxiliary head on stage 3's 512); drop path 0.2 as the paper states.
# ImageNet weights: --cfg-options model.backbone.init_cfg.checkpoint=PATH
_base_ = './upernet_swin-t_512x512_160k_ade20k.py'

pretrained = 'checkpoints/swin-b_in1k.pth'

model = dict(
    backbone=dict(arch='swin-b', init_cfg=dict(checkpoint=pretrained)),
    decode_head=dict(in_channels=[128, 256, 512, 1024]),
    auxiliary_head=dict(in_channels=512))
