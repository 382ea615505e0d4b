# ViT vit-b16 = timm vit_base_patch16_224 as an mmpretrain ImageClassifier: the deit-tiny classifier
# (class token after the final norm, linear head) at this width.
_base_ = ['./vit_deit-tiny.py']

model = dict(backbone=dict(arch='vit-b16'), head=dict(in_channels=768))
