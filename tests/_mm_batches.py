"""Batches for the mmpretrain / mmseg train steps of several test modules (``tests/`` is on ``sys.path``:
the directory of the root ``conftest.py``)."""
import torch


def seg_batch(batch_size=2, size=64):
    """``batch_size`` seeded uint8 images and ADE20K-style (150-class) label maps; two images by
    default (a decode head's BatchNorm cannot train on one)."""
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    g = torch.Generator().manual_seed(0)
    inputs, samples = [], []
    for _ in range(batch_size):
        inputs.append(torch.randint(0, 256, (3, size, size), dtype=torch.uint8, generator=g))
        sample = SegDataSample(metainfo=dict(img_shape=(size, size), ori_shape=(size, size),
                                             pad_shape=(size, size), scale_factor=(1., 1.)))
        sample.gt_sem_seg = PixelData(data=torch.randint(0, 150, (1, size, size), generator=g))
        samples.append(sample)
    return dict(inputs=inputs, data_samples=samples)


def cls_batch(g, n=4, size=16, num_classes=10):
    """``n`` uint8 images from the generator ``g`` with labels 0, 1, ... (mod ``num_classes``),
    as mmpretrain's data loader gives them."""
    from mmpretrain.structures import DataSample
    imgs = [torch.randint(0, 255, (3, size, size), generator=g, dtype=torch.uint8)
            for _ in range(n)]
    return dict(inputs=imgs,
                data_samples=[DataSample().set_gt_label(i % num_classes) for i in range(n)])
