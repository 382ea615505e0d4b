# UperNet on ADE20K, 512×512 crops, 160k iterations: the Swin Transformer segmentation recipe that
# KCR-Transformer follows (KCR paper, 4.3), which is mmseg's Swin UperNet config: AdamW lr 6e-5,
# weight decay 0.01 (none on norms and relative position tables), batch 16 (8 GPUs x 2), linear
# warm-up over 1,500 iterations then linear decay (poly, power 1) to 0, random rescale 0.5-2.0 +
# crop + flip + photometric distortion, auxiliary FCN head on stage 3.
# Multi-scale test (`tools/test.py ... --tta`): scales 0.5-1.75 of the 2048×512 test scale, each with
# and without flip, as Swin's (mmseg 0.x) protocol. mmseg 1.x's ADE20K tta_pipeline rescales the
# *original* image by those ratios (Resize(scale_factor=r)), which is not the same for images whose
# short side is not 512, hence the pipeline below.
# The per-backbone configs (configs/seg/upernet_swin-*.py) replace model.backbone and the head
# channels.
_base_ = 'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'

test_scale = (2048, 512)
img_ratios = [0.5, 0.75, 1.0, 1.25, 1.5, 1.75]
tta_pipeline = [
    dict(type='LoadImageFromFile', backend_args=None),
    dict(
        type='TestTimeAug',
        transforms=[
            [
                dict(type='Resize', scale=(int(test_scale[0] * r), int(test_scale[1] * r)),
                     keep_ratio=True) for r in img_ratios
            ],
            [
                dict(type='RandomFlip', prob=0., direction='horizontal'),
                dict(type='RandomFlip', prob=1., direction='horizontal')
            ],
            [dict(type='LoadAnnotations')],
            [dict(type='PackSegInputs')],
        ])
]
