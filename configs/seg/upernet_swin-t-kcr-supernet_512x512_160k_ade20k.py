# UperNet (ADE20K, 512x512, 160k iterations) with an mmdcs Swin-T KCR supernet: mmseg's Swin-T
# recipe (AdamW 6e-5, wd 0.01, no decay on norms and relative position tables, poly schedule)
# with the backbone replaced; drop_path_rate 0.3 as mmseg's Swin-T UperNet. For the searched
# subnet set `model.backbone.subnet=<subnet.json>` (the variant is read from it).
# ImageNet weights: a checkpoint converted from timm (mmdcs.models.backbones.swin.convert_timm)
# loads with init_cfg=dict(type='Pretrained', checkpoint=..., prefix='backbone.').
_base_ = 'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmdcs.Swin',
        arch='swin-t',
        variant='kcr',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.3,
        init_cfg=None),
    decode_head=dict(in_channels=[96, 192, 384, 768]),
    auxiliary_head=dict(in_channels=384))
