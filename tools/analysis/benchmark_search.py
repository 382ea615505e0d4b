"""Overheads of the search and of the IB/KCR terms, measured in one run on the CPU.

    python tools/analysis/benchmark_search.py [--arch mobilevit-xs] [--size 64] [--batch 32]
                                              [--repeats 5] [--steps 6] [--threads 2]
                                              [--target-flops 0.92] [--variant dcs|kcr]

Prints, each against its baseline measured in the same run (median of ``--repeats``):

* the search: a weight step and an architecture step of the alternating search
  (``AlternatingSearchLoop.train_step``) vs a plain training step (one optimizer, cross-entropy)
  of the same supernet, and the epoch average (70% weight, 30% architecture steps);
  target ≤ 1.3×; with ``--target-flops R`` also the architecture step and the epoch average
  of a search aimed at R of the baseline FLOPs (``cost.target``, method.md §11);
* the retraining terms: a step of the pruned subnet with the IB (DCS) or KCR term active
  (statistics streamed, bound in the loss) vs the same step without it; target ≤ 1.05×;
* memory: the bytes of the IB/KCR state after streaming n and 10·n samples (it must not grow).
"""
import argparse
import os.path as osp
import statistics
import sys
import time
import types

try:
    import mmdcs  # noqa: F401
except ImportError:
    sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

import torch
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope

from mmdcs.analysis.complexity import backbone_class
from mmdcs.apis.launch import (ToolParser, UserError, batch_size, positive_int, positive_size,
                               run_program, thread_count, unit_ratio, user_errors)
from mmdcs.engine import AlternatingSearchLoop, SearchOptimWrapperConstructor
from mmdcs.models.backbones import VARIANTS
from mmdcs.registry import MODELS


def family_of(arch):
    """(backbone type for the registry, the backbone class) of an arch of a registered family."""
    try:
        cls = backbone_class(arch)
    except ValueError as e:
        raise UserError(str(e)) from e
    return f'mmdcs.{cls.__name__}', cls


def classifier(arch, variant, size, num_classes=10, **kw):
    btype, cls = family_of(arch)
    backbone = dict(type=btype, arch=arch, variant=variant, **cls.size_kwargs((size, size)))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        probe = MODELS.build(dict(backbone, variant='baseline'))
        with torch.no_grad():
            feat = probe(torch.zeros(1, 3, size, size))[-1]
        in_ch = feat.shape[1]
        neck = dict(type='GlobalAveragePooling') if feat.dim() == 4 else None
        return MODELS.build(dict(
            type='mmdcs.ChannelSelectionClassifier', backbone=backbone, neck=neck,
            head=dict(type='LinearClsHead', num_classes=num_classes, in_channels=in_ch,
                      loss=dict(type='CrossEntropyLoss')),
            data_preprocessor=dict(type='ClsDataPreprocessor', num_classes=num_classes), **kw))


def batch(n, size, seed):
    from mmpretrain.structures import DataSample
    g = torch.Generator().manual_seed(seed)
    return dict(inputs=[torch.randint(0, 255, (3, size, size), generator=g, dtype=torch.uint8)
                        for _ in range(n)],
                data_samples=[DataSample().set_gt_label(i % 10) for i in range(n)])


def timed(fn, steps, repeats):
    """Median over ``repeats`` of the mean time of ``steps`` calls (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        times.append((time.perf_counter() - t0) / steps)
    return statistics.median(times)


def _loss(model, data):
    """The parsed training loss of one batch (what a plain training step back-propagates)."""
    d = model.data_preprocessor(data, True)
    losses = model(**d, mode='loss')
    return model.parse_losses(losses)[0]


def search_benchmark(args):
    model = classifier(args.arch, args.variant, args.size, cost=dict(mode='paper', weight=0.2))
    data = batch(args.batch, args.size, 0)
    plain = build_optim_wrapper(model, dict(optimizer=dict(type='AdamW', lr=1e-4)))

    def plain_fn():
        model.train()
        plain.update_params(_loss(model, data))

    optim = SearchOptimWrapperConstructor(dict(
        weight=dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=1e-4)),
        arch=dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=1e-4))))(model)
    loop = AlternatingSearchLoop.__new__(AlternatingSearchLoop)
    loop._runner = types.SimpleNamespace(model=model, optim_wrapper=optim)
    t_plain = timed(plain_fn, args.steps, args.repeats)
    t_weight = timed(lambda: loop.train_step(data, 'weight'), args.steps, args.repeats)
    t_arch = timed(lambda: loop.train_step(data, 'arch'), args.steps, args.repeats)
    t_epoch = 0.7 * t_weight + 0.3 * t_arch
    print(f'search, {args.arch} {args.variant} supernet, batch {args.batch} at {args.size}px '
          f'(median of {args.repeats} × {args.steps} steps):')
    print(f'  plain training step      {t_plain * 1e3:8.1f} ms   1.00×')
    print(f'  search weight step       {t_weight * 1e3:8.1f} ms   {t_weight / t_plain:.2f}×')
    print(f'  search arch step         {t_arch * 1e3:8.1f} ms   {t_arch / t_plain:.2f}×')
    print(f'  search epoch average     {t_epoch * 1e3:8.1f} ms   {t_epoch / t_plain:.2f}×'
          '   (target ≤ 1.3×)')
    if args.target_flops:
        budget = classifier(args.arch, args.variant, args.size,
                            cost=dict(target=dict(flops=args.target_flops,
                                                  input_size=args.size)))
        budget.load_state_dict(model.state_dict(), strict=False)
        optim = SearchOptimWrapperConstructor(dict(
            weight=dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=1e-4)),
            arch=dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=1e-4))))(budget)
        loop._runner = types.SimpleNamespace(model=budget, optim_wrapper=optim)
        t_budget = timed(lambda: loop.train_step(data, 'arch'), args.steps, args.repeats)
        t_epoch = 0.7 * t_weight + 0.3 * t_budget
        print(f'  arch step, FLOPs target  {t_budget * 1e3:8.1f} ms   {t_budget / t_plain:.2f}×'
              f'   (cost.target flops={args.target_flops})')
        print(f'  epoch average, target    {t_epoch * 1e3:8.1f} ms   {t_epoch / t_plain:.2f}×')


def regularizer_benchmark(args):
    from mmdcs.analysis.complexity import random_subnet
    btype, cls = family_of(args.arch)
    size_kw = cls.size_kwargs((args.size, args.size))
    spec = random_subnet(btype, args.arch, args.variant, args.keep_ratio, **size_kw)
    print(f'retraining terms, pruned {args.arch} ({spec.kept_ratio:.2f} of MLP channels kept):')
    for kind, reg in (('IB', dict(type='ib', eta=50., t_warm=0)),
                      ('KCR', dict(type='kcr', eta=1., t_warm=0, gamma=0.1))):
        model = classifier(args.arch, spec.variant, args.size, regularizer=reg)
        # the pruned subnet as backbone
        with DefaultScope.overwrite_default_scope('mmpretrain'):
            kw = dict(type=btype, arch=args.arch, subnet=spec.to_dict(), **size_kw)
            model.backbone = MODELS.build(kw)
        data = batch(args.batch, args.size, 1)
        optim = build_optim_wrapper(model, dict(optimizer=dict(type='AdamW', lr=1e-4)))
        # fill the statistics once (centroids / V_r exist after a refresh)
        model.regularizer.begin_epoch()
        for s in range(3):
            model.train()
            _loss(model, batch(args.batch, args.size, 10 + s))
        model.regularizer.end_epoch()
        model.regularizer.begin_epoch()

        def step(active):
            def fn():
                model.train()
                model.reg_active = active
                optim.update_params(_loss(model, data))
            return fn

        state, model.regularizer = model.regularizer, None
        t_off = timed(step(False), args.steps, args.repeats)
        model.regularizer = state
        t_on = timed(step(True), args.steps, args.repeats)
        print(f'  step without the term    {t_off * 1e3:8.1f} ms   1.00×')
        print(f'  step with the {kind:<3} term   {t_on * 1e3:8.1f} ms   {t_on / t_off:.3f}×'
              '   (target ≤ 1.05×)')


def memory_benchmark(args):
    from mmdcs.regularizers import IBState, KCRState, input_representation
    print('state memory vs number of streamed samples (bytes of every state tensor):')
    dim, C = 384, 100
    for name, make in (('IBState', lambda: IBState(C, dim)), ('KCRState', lambda: KCRState(dim))):
        sizes = []
        for n in (2000, 20000):
            st = make()
            st.begin_epoch()
            g = torch.Generator().manual_seed(0)
            for start in range(0, n, 500):
                f = torch.randn(500, dim, generator=g)
                y = torch.randint(0, C, (500, ), generator=g)
                if name == 'IBState':
                    st.update(f, y, input_representation(torch.randn(500, 3, 16, 16, generator=g)))
                else:
                    st.update(f, y)
            st.end_epoch()
            sizes.append(sum(t.numel() * t.element_size() for _, t in st.named_tensors()))
        print(f'  {name:<9} n = 2,000: {sizes[0] / 1024:8.1f} KiB   n = 20,000: '
              f'{sizes[1] / 1024:8.1f} KiB   ratio {sizes[1] / sizes[0]:.2f}')


def parse_args(argv=None):
    parser = ToolParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--arch', default='mobilevit-xs')
    parser.add_argument('--size', type=positive_size, default=64)
    parser.add_argument('--batch', type=batch_size, default=32)
    parser.add_argument('--steps', type=positive_int, default=4)
    parser.add_argument('--repeats', type=positive_int, default=5)
    parser.add_argument('--threads', type=thread_count, default=2)
    parser.add_argument('--target-flops', type=unit_ratio, default=None, metavar='R',
                        help='also time the architecture step of a search aimed at R of the '
                        'baseline FLOPs')
    parser.add_argument('--keep-ratio', type=unit_ratio, default=0.7,
                        help='kept channels of the pruned subnet of the retraining benchmark')
    parser.add_argument('--variant', default=None,
                        help="the searched variant (default: the family's paper_variant, the "
                        "variant the papers apply to it: dcs for MobileViT / EfficientViT, kcr "
                        "for ViT / Swin)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    with user_errors():
        variants = [v for v in VARIANTS if v != 'baseline']
        if args.variant is None:
            args.variant = family_of(args.arch)[1].paper_variant
        elif args.variant not in variants:
            raise UserError(f'--variant {args.variant!r}: one of {", ".join(variants)}')
        torch.manual_seed(0)
        torch.set_num_threads(args.threads)
        print(f'torch {torch.__version__}, {args.threads} threads, CPU')
        search_benchmark(args)
        regularizer_benchmark(args)
        memory_benchmark(args)

if __name__ == '__main__':
    run_program(main)
