# UperNet (ADE20K, 512×512, 160k iterations) with the plain Swin-T. Recipe:
# configs/_base_/seg/upernet_swin_512x512_160k_ade20k.py (mmseg's Swin UperNet, as KCR paper, 4.3)
# with the backbone replaced by the mmdcs Swin; drop path 0.2 as the paper states (mmseg's Swin-T
# config uses 0.3). The papers report no Swin-T UperNet number.
# ImageNet weights (timm's swin_tiny_patch4_window7_224 converted by
# tools/convert/timm_to_mmdcs.py, or an mmdcs-trained classifier):
#   --cfg-options model.backbone.init_cfg.checkpoint=PATH
# (the `pretrained` variable below is read when the file is parsed; overriding it alone changes
# nothing).
_base_ = '../_base_/seg/upernet_swin_512x512_160k_ade20k.py'

pretrained = 'checkpoints/swin-t_in1k.pth'

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmdcs.Swin',
        arch='swin-t',
        variant='baseline',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.2,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained, prefix='backbone.')),
    decode_head=dict(in_channels=[96, 192, 384, 768]),
    auxiliary_head=dict(in_channels=384))
