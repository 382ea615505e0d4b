# DCS-EfficientViT-B1: search of the supernet on the 100-class ImageNet subset at 224x224, to
# find the subnet that configs/dcs/dcs-efficientvit-b1_retrain_in1k.py retrains.
# DCS: Q/K channel selection (attention weights) + MLP channel selection (attention outputs).
# Paper (DCS paper Table 1): 9.1 M -> 8.2 M params, 0.52 G -> 0.46 G FLOPs, top-1 79.4 -> 80.8.
# 200 epochs, 70/30 split, AdamW 1e-3 -> 1e-4 cosine for W and α, τ0 = 4.5 x 0.95 per epoch,
# λ = 0.2 with the paper's cost (../_base_/schedules/search_200e.py). The supernet starts from
# scratch with every gate open (gate_init 3.0: P(open) = sigmoid(3) = 0.95).
#   python tools/data/imagenet_subset.py --imagenet data/imagenet --out data/imagenet100
#   bash tools/dist_train.sh configs/dcs/dcs-efficientvit-b1_search_in100.py 8
#   python tools/export_subnet.py configs/dcs/dcs-efficientvit-b1_search_in100.py \
#       work_dirs/dcs-efficientvit-b1_search_in100/epoch_200.pth \
#       --out work_dirs/dcs-efficientvit-b1_search_in100
_base_ = [
    '../_base_/models/efficientvit_efficientvit-b1.py',
    '../_base_/datasets/imagenet100_search.py',
    '../_base_/schedules/search_200e.py',
    '../_base_/default_runtime.py',
]

model = dict(
    type='mmdcs.ChannelSelectionClassifier',
    backbone=dict(variant='dcs'),
    head=dict(num_classes=100),
    cost=_base_.search_cost,
)
