# KCR-ViT-B/16: search of the supernet on the 100-class ImageNet subset at 224x224, to
# find the subnet that configs/kcr/kcr-vit-b16_retrain_in1k.py retrains.
# KCR: MLP channel selection (attention outputs).
# Paper (KCR paper Table 1): 86.5 M -> 69.5 M params, 17.6 G -> 14.5 G FLOPs, top-1 83.7 -> 84.6.
# 200 epochs, 70/30 split, AdamW 1e-3 -> 1e-4 cosine for W and α, τ0 = 4.5 x 0.95 per epoch,
# λ = 0.2 with the paper's cost (../_base_/schedules/search_200e.py). The supernet starts from
# scratch with every gate open (gate_init 3.0: P(open) = sigmoid(3) = 0.95).
#   python tools/data/imagenet_subset.py --imagenet data/imagenet --out data/imagenet100
#   bash tools/dist_train.sh configs/kcr/kcr-vit-b16_search_in100.py 8
#   python tools/export_subnet.py configs/kcr/kcr-vit-b16_search_in100.py \
#       work_dirs/kcr-vit-b16_search_in100/epoch_200.pth \
#       --out work_dirs/kcr-vit-b16_search_in100
_base_ = [
    '../_base_/models/vit_vit-b16.py',
    '../_base_/datasets/imagenet100_search.py',
    '../_base_/schedules/search_200e.py',
    '../_base_/default_runtime.py',
]

model = dict(
    type='mmdcs.ChannelSelectionClassifier',
    backbone=dict(variant='kcr'),
    head=dict(num_classes=100),
    cost=_base_.search_cost,
)
