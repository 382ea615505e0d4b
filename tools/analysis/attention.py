"""Attention analysis of DCS models (DCS paper, supplementary): entropy of the rows of the
affinity matrices per head and block (Fig. 4 histograms, average-entropy table), the attention
map of one query on the image (Fig. 5/6), and the numerical rank of (Q⊙M)(K⊙M)ᵀ vs QKᵀ per head
and block (Table 6).

Trained classifiers (e.g. a baseline and a DCS model, compared on the same images):

    python tools/analysis/attention.py --model CONFIG CHECKPOINT [--model CONFIG CHECKPOINT]
        [--names baseline dcs] --images data/digits/cls/val [--num-images 100] ...

Backbones built from an arch with random weights (every variant gets the baseline's weights;
--random-gates draws random Q/K selectors so that the masks do something):

    python tools/analysis/attention.py --arch mobilevit-xs --variants baseline dcs
        [--random-gates] [--images DIR | --random 8] [--size 256] ...

Options: --block (index among the attention modules, negative from the end, or a name; default
-1 = last) for the histogram and the map, --head (map head, default 0 = first; -1: mean of
heads), --query auto|cls|centre|Y,X (auto: class token for ViT, centre token otherwise; Y,X as
fractions of the image), --map-image (which image's map), --rank-images (images whose Q/K
products are ranked), --rank-rtol. Writes to --out-dir: entropy_hist.png, attention_map.png,
attention.md (the tables) and attention.json.

Swin attention is windowed: entropies are over the rows of every (shifted) window (≤ log 49),
a query's map covers its window only. MobileViT attends over the patches of each of the 4 pixel
positions of a 2×2 patch; maps average them. EfficientViT (ReLU linear attention, no softmax
matrix) is not supported. CHECKPOINT may be `none` (random weights).
"""
import json
import os.path as osp
import sys
import time

try:
    import mmdcs  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from mmdcs.apis.launch import (ConfigOptions, ToolParser, UserError, add_trust_flag, batch_size,
                               non_negative_int, number_type, positive_float, positive_int,
                               positive_size, run_program, seed, set_checkpoint_trust, user_errors)
from mmdcs.apis.outputs import (add_force_argument, check_output_dir, refuse_overwrite,
                                staged_directory)


#: the files written to --out-dir
OUTPUT_FILES = ('attention.md', 'entropy_hist.png', 'attention_map.png', 'attention.json')

#: argparse type of --head: a head index from 0, or -1 (the heads' mean); the block's head
#: count is checked once the attention is collected (before anything is written)
map_head = number_type(int, 'map_head', -1)


def parse_args(argv=None):
    p = ToolParser(description='Attention entropy, maps and Q/K ranks of DCS models')
    src = p.add_argument_group('models (one of)')
    src.add_argument('--model', nargs=2, action='append', metavar=('CONFIG', 'CHECKPOINT'),
                     help='a classifier config and checkpoint (repeat to compare)')
    src.add_argument('--arch', help='build backbones of this arch with random weights')
    src.add_argument('--variants', nargs='+', default=['baseline', 'dcs'],
                     help='--arch mode: variants (all share the baseline\'s weights)')
    src.add_argument('--random-gates', action='store_true',
                     help='--arch mode: random Linear_θ of the Q/K selectors (masks not all 1)')
    p.add_argument('--names', nargs='+', help='one name per model')
    p.add_argument('--images', help='an image file or a folder of images (recursive)')
    p.add_argument('--random', type=positive_int, default=None, metavar='N',
                   help='N random smooth inputs instead of images')
    p.add_argument('--num-images', type=positive_int, default=16, help='images used (the first N)')
    p.add_argument('--size', type=positive_size, default=None,
                   help='input size (default: the config\'s pipeline; --arch: nominal)')
    p.add_argument('--batch-size', type=batch_size, default=8)
    p.add_argument('--block', default='-1', help='attention block of the histogram and map')
    p.add_argument('--head', type=map_head, default=0,
                   help='map head, from 0 (-1: mean of the heads)')
    p.add_argument('--query', default='auto', help='auto | cls | centre | Y,X (fractions)')
    p.add_argument('--map-image', type=non_negative_int, default=0,
                   help='index of the image of the map')
    p.add_argument('--rank-images', type=non_negative_int, default=2,
                   help='images whose Q/K products are ranked (0: no rank)')
    p.add_argument('--rank-rtol', type=positive_float, default=1e-7,
                   help='relative tolerance of the numerical rank (float64 SVD)')
    p.add_argument('--bins', type=positive_int, default=40)
    p.add_argument('--seed', type=seed, default=0)
    p.add_argument('--out-dir', default='work_dirs/attention')
    p.add_argument('--cfg-options', nargs='+', action=ConfigOptions,
                   help='override settings of every config, key=value')
    add_trust_flag(p)
    add_force_argument(p)
    args = p.parse_args(argv)
    if bool(args.model) == bool(args.arch):
        p.error('give --model CONFIG CHECKPOINT (one or more) or --arch')
    if bool(args.images) == (args.random is not None):
        p.error('give --images DIR or --random N')
    n_models = len(args.model) if args.model else len(args.variants)
    if args.names and len(args.names) != n_models:
        p.error(f'--names: {len(args.names)} names for {n_models} models')
    if args.query not in ('auto', 'cls', 'centre', 'center'):
        try:
            y, x = (float(v) for v in args.query.split(','))
            args.query = (y, x)
        except ValueError:
            p.error('--query must be auto, cls, centre or Y,X fractions (e.g. 0.5,0.25)')
    return args


def _arch_models(args):
    import torch
    from mmdcs.analysis.complexity import backbone_class
    from mmdcs.models.backbones.base import VARIANTS
    from mmdcs.selection import QKChannelSelector
    try:
        cls = backbone_class(args.arch)
    except ValueError as e:
        raise UserError(str(e)) from e
    bad = [v for v in args.variants if v not in VARIANTS]
    if bad:
        raise UserError(f'unknown variant {bad[0]!r}; valid: {", ".join(VARIANTS)}')
    kwargs = cls.size_kwargs((args.size, args.size) if args.size else None)
    torch.manual_seed(args.seed)
    base = cls(arch=args.arch, variant='baseline', **kwargs)
    if hasattr(base, 'init_weights'):
        base.init_weights()
    state = base.state_dict()
    models = {}
    g = torch.Generator().manual_seed(args.seed + 1)
    for v in args.variants:
        m = base if v == 'baseline' else cls(arch=args.arch, variant=v, **kwargs)
        if m is not base:
            m.load_converted(state)
            if args.random_gates:
                with torch.no_grad():
                    for sel in m.modules():
                        if isinstance(sel, QKChannelSelector):
                            w = sel.theta.weight
                            w.copy_(torch.randn(w.shape, generator=g) / w.shape[1] ** 0.5)
                            sel.theta.bias.zero_()
        models[v] = m.eval()
    return models


def main(argv=None):
    args = parse_args(argv)
    with user_errors():
        set_checkpoint_trust(args)
        import torch
        from mmdcs.analysis.attention import (AttentionNotSupported, check_map_head,
                                              collect_attention, entropy_table,
                                              plot_attention_maps, plot_entropy_histograms,
                                              rank_table, resolve_block)
        from mmdcs.apis.loading import list_images, load_classifier, load_images, random_images
        t0 = time.perf_counter()
        check_output_dir(args.out_dir, '--out-dir')
        refuse_overwrite([osp.join(args.out_dir, n) for n in OUTPUT_FILES], args.force)
        if args.model:
            names = args.names or [osp.splitext(osp.basename(c))[0] for c, _ in args.model]
            loaded = {}
            for n, (config, ckpt) in zip(names, args.model):
                loaded[n] = load_classifier(config, ckpt, args.cfg_options)
        else:
            models = _arch_models(args)
            names = args.names or list(models)
            loaded = {n: (m, None, None) for n, m in zip(names, models.values())}
        if len(set(loaded)) != len(loaded):
            raise UserError('model names must differ (use --names)')

        paths = None
        if args.images:
            try:
                paths = list_images(args.images, args.num_images)
            except FileNotFoundError as e:
                raise UserError(str(e)) from e
        stats, shows = {}, None
        for name, (model, cfg, scope) in loaded.items():
            backbone = getattr(model, 'backbone', model)
            if paths is not None:
                size = args.size
                if cfg is None and size is None:
                    from mmdcs.analysis.complexity import nominal_input_size
                    size = nominal_input_size(backbone)
                inputs, show = load_images(paths, model if cfg is not None else None, cfg,
                                           scope or 'mmpretrain', size)
            else:
                from mmdcs.analysis.complexity import nominal_input_size
                size = args.size or nominal_input_size(backbone)
                inputs, show = random_images(args.random, size, args.seed)
            if shows is None:
                shows = show
            batches = list(inputs.split(args.batch_size))
            try:
                stats[name] = collect_attention(model, batches, rank_images=args.rank_images,
                                                rank_rtol=args.rank_rtol,
                                                map_image=args.map_image, query=args.query)
            except AttentionNotSupported as e:
                raise UserError(f'{name}: {e}') from e
            except ValueError as e:
                raise UserError(f'{name}: {e}') from e
            st = stats[name]
            qk = ', Q/K selection' if st.qk_select else ''
            print(f'{name}: {st.images} images, {len(st.blocks)} attention blocks '
                  f'({st.family}{qk})', flush=True)
        first = next(iter(stats.values()))
        block_arg = args.block
        try:
            block = resolve_block(first, block_arg)
        except ValueError as e:
            raise UserError(str(e)) from e
        blocks = [block] if len(first.blocks) > 24 else None
        text = '## Average row entropy per head (nats)\n\n' + entropy_table(stats, blocks)
        text += ('\n\n## Numerical rank of (Q⊙M)(K⊙M)ᵀ and QKᵀ per head (mean over the '
                 f'sequences of the first {args.rank_images} images; rtol {args.rank_rtol:g})'
                 '\n\n' + rank_table(stats, blocks) + '\n\nmin(N, c): the bound of the '
                 'masked rank, c = channels that some token keeps in Q and in K. Per-token '
                 'masks can exceed the unmasked rank when QKᵀ is rank-deficient.')
        print('\n' + text)
        maps = {n: s.maps[block] for n, s in stats.items() if block in s.maps}
        if not maps:
            raise UserError(f'--map-image {args.map_image}: only {first.images} images')
        head = None if args.head < 0 else args.head
        try:
            check_map_head(maps, head)
        except ValueError as e:
            raise UserError(f'--head {args.head}: {e}') from e
        img_i = min(args.map_image, len(shows) - 1)
        with staged_directory(args.out_dir, args.force) as stage:
            with open(osp.join(stage, 'attention.md'), 'w') as f:
                f.write(text + '\n')
            plot_entropy_histograms(stats, osp.join(stage, 'entropy_hist.png'), block,
                                    bins=args.bins)
            plot_attention_maps(
                shows[img_i], maps, osp.join(stage, 'attention_map.png'),
                first.query_cell.get(block), head=head,
                title=f'attention of one query, block {block}, image {img_i}')
            with open(osp.join(stage, 'attention.json'), 'w') as f:
                json.dump({n: s.to_dict() for n, s in stats.items()}, f, indent=1)
        hist = osp.join(args.out_dir, 'entropy_hist.png')
        amap = osp.join(args.out_dir, 'attention_map.png')
        print(f'\nhistogram: {hist}\nattention map: {amap}\ntables: '
              f'{osp.join(args.out_dir, "attention.md")}\n({time.perf_counter() - t0:.0f} s)')
        return stats


if __name__ == '__main__':
    run_program(main)
