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


def search_loop(model, name, max_iters, arch_lr=0.2, visualizer=None):
    """mmdcs's alternating search loop over ``model`` without a Runner: the search's two optim
    wrappers (AdamW, weights at lr 1e-3, architecture at ``arch_lr``), the message hub ``name``,
    a visualizer that drops the scalars unless one is given, the loop's progress at 0 of
    ``max_iters`` (what the temperature and the scheduled target read)."""
    import types

    from mmengine.logging import MessageHub

    from mmdcs.engine import AlternatingSearchLoop, SearchOptimWrapperConstructor
    optim = SearchOptimWrapperConstructor(dict(
        weight=dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=1e-3)),
        arch=dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=arch_lr))))(model)
    loop = AlternatingSearchLoop.__new__(AlternatingSearchLoop)
    loop._runner = types.SimpleNamespace(
        model=model, optim_wrapper=optim, message_hub=MessageHub.get_instance(name),
        visualizer=types.SimpleNamespace(add_scalars=lambda *a, **k: None)
        if visualizer is None else visualizer)
    loop._iter, loop._max_iters = 0, max_iters
    return loop


def alternate(loop, steps, g, size=16):
    """``steps`` pairs of (weight, architecture) steps of ``loop`` on :func:`cls_batch` batches
    of ``size``×``size`` images from the generator ``g``, the progress counted as the loop's
    ``run`` counts it (two steps per pair). Returns the first and the last architecture step's
    logs."""
    first = out = None
    for _ in range(steps):
        loop.train_step(cls_batch(g, size=size), 'weight')
        loop._iter += 1
        out = loop.train_step(cls_batch(g, size=size), 'arch')
        loop._iter += 1
        first = first or out
    return first, out
