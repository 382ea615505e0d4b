"""Parameters and FLOPs (``mmengine.analysis``, multiply-accumulates) of mmdcs models.

The table of every model (method.md §9): baseline, DCS/KCR supernet, and subnets pruned to the
given kept ratios (each paper's variant: DCS for MobileViT / EfficientViT, KCR for ViT / Swin),
whole classifiers at the nominal input size (224; 256 for MobileViT), beside the papers' numbers:

    python tools/analysis/complexity.py --table [--ratios 0.9 0.7]
        [--models vit-s16 vit-b16 swin-t swin-b mobilevit-xs mobilevit-s efficientvit-b1]
        [--size N] [--backbone-only] [--no-attention-flops] [--out table.md]

The DCS paper's mobile models with hidden-unit selection at the paper's own FLOPs ratio (ours
beside the paper's params and FLOPs, as ratios to each one's baseline):

    python tools/analysis/complexity.py --paper-budget [--models mobilevit-xs ...] [--out t.md]

One config's model (the backbone; for a classifier also the whole model in 'tensor' mode), at
the config's input size or --shape, optionally pruned to an exported subnet:

    python tools/analysis/complexity.py CONFIG [--subnet subnet.json] [--shape H [W]]
        [--whole] [--cfg-options k=v ...]
"""
import os.path as osp
import sys
import time

try:
    import mmdcs  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from mmdcs.apis.launch import (ConfigOptions, ToolParser, UserError, positive_size, run_program,
                               seed, unit_ratio, user_errors)
from mmdcs.apis.outputs import add_force_argument, check_output_file, refuse_overwrite, write_text


def parse_args(argv=None):
    parser = ToolParser(description='Params and FLOPs of mmdcs models')
    parser.add_argument('config', nargs='?', help='a config (omit with --table)')
    parser.add_argument('--table', action='store_true',
                        help='the table of every model: baseline, supernet, subnets')
    parser.add_argument('--models', nargs='+', default=None,
                        help='archs of the table (default: the seven of method.md §9)')
    parser.add_argument('--ratios', type=unit_ratio, nargs='+', default=[0.9, 0.7],
                        help='kept ratios of the table\'s subnets')
    parser.add_argument('--size', type=positive_size, default=None,
                        help='one input size for every table row (default: each model\'s '
                        'nominal size, 224 or 256)')
    parser.add_argument('--seed', type=seed, default=0, help='seed of the random subnets')
    parser.add_argument('--backbone-only', action='store_true',
                        help='table: count the backbones, not the whole classifiers')
    parser.add_argument('--no-attention-flops', action='store_true',
                        help='mmengine\'s own count, without the attention products of '
                        'scaled_dot_product_attention')
    parser.add_argument('--paper-budget', action='store_true',
                        help='table of the DCS paper\'s mobile models with hidden-unit '
                        'selection at the paper\'s own FLOPs ratio: params and FLOPs ratios, '
                        'ours beside the paper\'s')
    parser.add_argument('--out', help='also write the table (markdown) to this file')
    parser.add_argument('--subnet', help='config mode: build the backbone from this subnet.json')
    parser.add_argument('--shape', type=positive_size, nargs='+', metavar='N',
                        help='config mode: input size H [W] (default: the config\'s)')
    parser.add_argument('--whole', action='store_true',
                        help='config mode: also count the whole model of a detection or '
                        'segmentation config (classifiers: always)')
    parser.add_argument('--cfg-options', nargs='+', action=ConfigOptions,
                        help='config mode: override settings of the config, key=value')
    add_force_argument(parser)
    args = parser.parse_args(argv)
    if bool(args.table or args.paper_budget) == bool(args.config):
        parser.error('give either a CONFIG or --table / --paper-budget')
    return args


def run_paper_budget(args) -> str:
    from mmdcs.analysis.complexity import (PAPER_BUDGET_MODELS, backbone_class,
                                           format_paper_budget_table, paper_budget_table)
    models = args.models or list(PAPER_BUDGET_MODELS)
    t0 = time.perf_counter()
    try:
        for m in models:
            backbone_class(m)
        rows = paper_budget_table(models, seed=args.seed,
                                  count_attention=not args.no_attention_flops)
    except ValueError as e:
        raise UserError(str(e)) from e
    text = format_paper_budget_table(rows)
    print(text)
    print(f'\n({len(rows)} rows in {time.perf_counter() - t0:.0f} s)')
    if args.out:
        write_text(args.out, text + '\n', force=args.force)
    return text


def run_table(args) -> str:
    from mmdcs.analysis.complexity import (TABLE_MODELS, backbone_class, complexity_table,
                                           format_table)
    models = args.models or list(TABLE_MODELS)
    for m in models:
        try:
            backbone_class(m)
        except ValueError as e:
            raise UserError(str(e)) from e
    for r in args.ratios:
        if not 0 < r <= 1:
            raise UserError(f'--ratios must be in (0, 1], got {r}')
    t0 = time.perf_counter()
    rows = complexity_table(models, args.ratios, input_sizes=args.size,
                            whole_model=not args.backbone_only, seed=args.seed,
                            count_attention=not args.no_attention_flops)
    text = format_table(rows, count_attention=not args.no_attention_flops,
                        whole_model=not args.backbone_only)
    print(text)
    print(f'\n({len(rows)} rows in {time.perf_counter() - t0:.0f} s)')
    if args.out:
        write_text(args.out, text + '\n', force=args.force)
    return text


def run_config(args) -> list:
    from mmdcs.analysis.complexity import count_flops, count_params
    from mmdcs.selection import SubnetSpec
    from mmdcs.apis.subnet_io import (build_model, complexity_lines, config_input_size,
                                       load_task_config, mmdcs_backbone, shape_arg,
                                       with_subnet)
    cfg, scope = load_task_config(args.config, args.cfg_options)
    model_cfg = cfg.model
    if args.subnet:
        spec = SubnetSpec.coerce(args.subnet)  # clear SubnetError when missing or malformed
        model_cfg = with_subnet(model_cfg, args.subnet)
    model = build_model(model_cfg, scope).eval()
    backbone = getattr(model, 'backbone', model)
    if args.subnet and mmdcs_backbone(model) is None:
        raise UserError(f'--subnet: the backbone ({type(backbone).__name__}) is not an mmdcs '
                        'backbone')
    shape, source = shape_arg(args.shape), '--shape'
    if shape is None:
        shape, source = config_input_size(cfg, backbone)
    import torch.nn as nn
    in_ch = next((m.in_channels for m in backbone.modules() if isinstance(m, nn.Conv2d)), 3)
    full_shape = (1, in_ch) + tuple(shape)
    mine = mmdcs_backbone(model)
    name = type(backbone).__name__
    if mine is not None:
        if mine.subnet_spec is not None:
            name = (f'{name}({mine.arch}, {mine.variant} subnet, kept '
                    f'{mine.subnet_spec.kept_ratio:.1%})')
        else:
            name = f'{name}({mine.arch}, {mine.variant}' + (
                ' supernet)' if mine.is_supernet else ')')
    rows = [(f'backbone {name}', count_params(backbone), count_flops(backbone, full_shape))]
    whole = backbone is not model and (args.whole or (
        scope in ('mmpretrain', 'mmdcs') and hasattr(model, 'head')))
    if whole:
        try:
            rows.append((f'whole model {type(model).__name__} (\'tensor\' mode)',
                         count_params(model), count_flops(model, full_shape)))
        except Exception as e:  # a detector whose tensor mode needs data samples, ...
            print(f'note: the whole model could not be traced in \'tensor\' mode '
                  f'({type(e).__name__}: {str(e)[:200]}); backbone only', file=sys.stderr)
    print(f'{args.config}: input {shape[0]}x{shape[1]} ({source})\n')
    print(complexity_lines(rows, full_shape))
    if mine is not None and mine.qk_select is not None:
        print('\nnote: a DCS backbone keeps Linear_θ (the Q/K selector) in every attention, '
              'in the supernet and in the deployed subnet: it is counted above.')
    print('\nFLOPs: multiply-accumulates as mmengine.analysis counts them (attention products '
          'of scaled_dot_product_attention included by mmdcs); element-wise ops count 0.')
    return rows


def main(argv=None):
    args = parse_args(argv)
    with user_errors():
        check_output_file(args.out, '--out')
        refuse_overwrite([args.out], args.force)
        if args.paper_budget:
            run_paper_budget(args)
        elif args.table:
            run_table(args)
        else:
            run_config(args)


if __name__ == '__main__':
    run_program(main)
