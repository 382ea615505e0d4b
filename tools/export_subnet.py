"""Export the subnet of a searched DCS / KCR supernet (method.md §4): the deterministic gates
(α > 0) become ``DIR/subnet.json``, and the weights of the whole model with its backbone pruned
become ``DIR/pruned.pth`` (an mmengine checkpoint of plain data: weights and ``meta``) or, with
``--format safetensors``, ``DIR/pruned.safetensors``.

    python tools/export_subnet.py CONFIG CHECKPOINT --out DIR [--shape H W]
                                  [--multiple-of 8] [--cfg-options k=v ...] [--no-verify]
                                  [--format pth|safetensors] [--trust-checkpoint] [--force]
                                  [--target-flops R | --target-params R] [--method magnitude]

CONFIG is the config the supernet was trained with (any task whose backbone is an mmdcs
supernet); CHECKPOINT its weights. The tool prints the backbone's params and FLOPs
(``mmengine.analysis``, multiply-accumulates) before and after at the config's input size (or
--shape), every block's D → D̃, checks that the pruned model gives the supernet's eval output,
and prints how to use the subnet in a config.

With ``--target-flops R`` (or ``--target-params R``) the export meets a budget instead: R times
the baseline network's count (the same arch without selection, at the same input size; the
whole classifier, or the backbone of other tasks), counted exactly at that input size. The
channels of every block and, with hidden-unit selection (``select_hidden``), the hidden units of
every hidden-selected module are ranked jointly by sigmoid(α) / sigmoid(β) per unit of marginal
cost and removed greedily from full width until the budget is met (method.md §11; within ±1 %
of the baseline, or one line and exit 2 with nothing written). ``--method magnitude`` is the
baseline to beat: the same budget from a plain baseline checkpoint (CONFIG a baseline or
supernet config; ``--cfg-options model.backbone.select_hidden=True`` ranks hidden units too),
channels and hidden units ranked by the L2 norm of their weights (an MLP channel's fc1 column
and fc2 row; a hidden unit's fc1 row and fc2 column), each relative to its block's / module's
mean, per unit of cost. subnet.json records the target and the achieved params/FLOPs.
"""
import os.path as osp
import sys

try:
    import mmdcs  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))

from mmdcs.apis.launch import (ConfigOptions, ToolParser, UserError, add_trust_flag, positive_int,
                               positive_size, set_checkpoint_trust, user_errors)
from mmdcs.apis.outputs import (add_force_argument, atomic_outputs, check_output_dir,
                                refuse_overwrite)
from mmdcs.selection.importance import WIDTH_METHODS


def parse_args(argv=None):
    parser = ToolParser(
        description='Export the subnet (subnet.json + pruned checkpoint) of a DCS/KCR supernet')
    parser.add_argument('config', help='the config the supernet was trained with')
    parser.add_argument('checkpoint', help='the supernet checkpoint')
    parser.add_argument('--out', required=True, help='output directory')
    parser.add_argument('--shape', type=positive_size, nargs='+', metavar='N',
                        help='input size H [W] for the FLOPs (default: the config\'s input '
                        'size, else the backbone\'s nominal size)')
    parser.add_argument('--multiple-of', type=positive_int, default=1, metavar='N',
                        help='round every kept width D̃ up to a multiple of N (e.g. 8: faster '
                        'matrix multiplies); the added channels start with zero weights, so the '
                        'pruned model still gives the supernet\'s output')
    parser.add_argument('--no-verify', action='store_true',
                        help='skip the check that the pruned model gives the supernet\'s output')
    budget = parser.add_mutually_exclusive_group()
    for what in ('flops', 'params'):
        budget.add_argument(f'--target-{what}', type=float, metavar='R',
                            help=f'export to a budget: R (in (0, 1)) times the baseline\'s {what}')
    parser.add_argument('--method', choices=('alpha', 'magnitude', 'uniform', 'random', 'taylor'),
                        default='alpha',
                        help='rank channels by the searched α (default), or prune a baseline '
                        'checkpoint (needs a target): by weight magnitude, uniform (the same '
                        'kept ratio in every block, the largest norms kept), random (seeded '
                        'random channels at --widths-from\'s widths, else the uniform ones) or '
                        'taylor (Σ|w·∂L/∂w| per channel over --taylor-batches training batches)')
    parser.add_argument('--seed', type=int, default=0,
                        help='--method random: the seed of the channels drawn; taylor: of the '
                        'batches (default: %(default)s)')
    parser.add_argument('--widths-from', metavar='SUBNET',
                        help='--method random: keep as many channels per block as this '
                        'subnet.json (e.g. a searched subnet at the same budget)')
    parser.add_argument('--taylor-batches', type=positive_int, default=4, metavar='N',
                        help='--method taylor: training batches of 32 whose gradients are '
                        'accumulated (default: %(default)s)')
    parser.add_argument(
        '--cfg-options', nargs='+', action=ConfigOptions,
        help='override settings of the config, key=value')
    parser.add_argument('--format', choices=('pth', 'safetensors'), default='pth',
                        help='file format of the pruned weights (DIR/pruned.FORMAT)')
    add_trust_flag(parser)
    add_force_argument(parser)
    return parser.parse_args(argv)


def _outputs(model, x, classifier):
    import torch
    with torch.no_grad():
        out = model(x, mode='tensor') if classifier else model.backbone(x) if hasattr(
            model, 'backbone') else model(x)
    return out if isinstance(out, (tuple, list)) else (out, )


def export(args) -> dict:
    import torch

    import mmdcs

    from mmdcs.analysis.complexity import count_flops, count_params
    from mmdcs.selection import file_sha256
    from mmdcs.apis.subnet_io import (backbone_cfg_of, backbone_prefix, block_summary,
                                       build_model, complexity_lines, config_input_size,
                                       export_meta, human, load_model_checkpoint,
                                       load_task_config, pruned_model_state, require_checkpoint,
                                       require_supernet, save_pruned_checkpoint, shape_arg,
                                       usage_lines, with_subnet)
    shape = shape_arg(args.shape)
    set_checkpoint_trust(args)
    if args.multiple_of < 1:
        raise UserError(f'--multiple-of must be a positive integer, got {args.multiple_of}')
    subnet_path = osp.join(args.out, 'subnet.json')
    ckpt_path = osp.join(args.out, f'pruned.{getattr(args, "format", "pth")}')
    check_output_dir(args.out, '--out')
    refuse_overwrite((subnet_path, ckpt_path), getattr(args, 'force', False))
    require_checkpoint(args.config, args.checkpoint)
    cfg, scope = load_task_config(args.config, args.cfg_options)
    resource, target = _target(args)
    magnitude = args.method in ('magnitude', ) + WIDTH_METHODS  # from a baseline checkpoint
    if magnitude:
        magnitude_supernet_cfg(cfg.model)
    model = build_model(cfg.model, scope)
    backbone = require_supernet(model, args.config)
    ckpt = (load_baseline_checkpoint if magnitude else load_model_checkpoint)(
        model, args.checkpoint)
    model.eval()

    sha = file_sha256(args.checkpoint)
    if shape is None:
        shape, source = config_input_size(cfg, backbone)
    else:
        source = '--shape'
    classifier = scope in ('mmpretrain', 'mmdcs') and hasattr(model, 'head')
    meta = export_meta(args.config, args.checkpoint, sha)
    costs = None
    if target is None:
        spec = backbone.export_subnet(multiple_of=args.multiple_of, **meta)
        empty = [name for name, m in _prunable(backbone).items()
                 if not bool((m.select.alpha > 0).any())]
    else:
        from mmdcs.analysis.complexity import calibrate_cost
        from mmdcs.selection.budget import (alpha_scores, budget_subnet, hidden_alpha_scores,
                                            hidden_magnitude_scores, magnitude_scores)
        counted = model if classifier else backbone
        costs = {r: calibrate_cost(counted, r, shape) for r in ('flops', 'params')}
        if magnitude:  # weight norms, each block's / module's relative to its own mean
            scores, hidden_scores = (magnitude_scores(backbone),
                                     hidden_magnitude_scores(backbone))
        else:
            scores, hidden_scores = alpha_scores(backbone), hidden_alpha_scores(backbone)
        if args.method in WIDTH_METHODS:
            spec = _method_subnet(args, cfg, scope, model, backbone, costs[resource], target,
                                  scores, hidden_scores, meta)
        else:
            # channels and hidden units ranked jointly (BudgetError: one line, nothing written)
            spec = budget_subnet(backbone, backbone.family, backbone.arch, backbone.variant,
                                 scores, costs[resource], target, args.multiple_of,
                                 hidden_scores=hidden_scores,
                                 normalize='mean' if magnitude else None, method=args.method,
                                 **meta)
        empty = []

    # the whole model with the backbone pruned, then the pruned model built from the spec alone
    state = pruned_model_state(model, spec, backbone_cfg_of(cfg.model))
    pruned = build_model(with_subnet(cfg.model, spec.to_dict()), scope)
    missing, unexpected = pruned.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise UserError(f'internal: the pruned weights do not fit the model built from the '
                        f'subnet (missing {missing[:5]}, unexpected {unexpected[:5]})')
    pruned.eval()
    pruned_backbone = require_pruned(pruned)

    in_channels = _in_channels(backbone)
    full_shape = (1, in_channels) + tuple(shape)
    rows = [('backbone, supernet', count_params(backbone), count_flops(backbone, full_shape)),
            ('backbone, pruned', count_params(pruned_backbone),
             count_flops(pruned_backbone, full_shape))]
    if classifier:
        rows += [('whole model, supernet', count_params(model), count_flops(model, full_shape)),
                 ('whole model, pruned', count_params(pruned), count_flops(pruned, full_shape))]

    if costs is not None:  # what the budget achieved, measured on the built pruned model
        counted = rows[3] if classifier else rows[1]
        spec.meta['budget']['measured'] = {
            r: dict(baseline=costs[r].baseline, pruned=counted[2 if r == 'flops' else 1],
                    ratio=counted[2 if r == 'flops' else 1] / costs[r].baseline)
            for r in ('flops', 'params')}
        measured = spec.meta['budget']['measured'][resource]['pruned']
        predicted = spec.meta['budget']['achieved']
        if abs(measured - predicted) > 1e-6 * max(1., abs(predicted)):
            raise UserError(f'internal: the built pruned model counts {measured:.0f} '
                            f'{resource} where the budget\'s count predicts {predicted:.0f}; '
                            'nothing written (please report this)')
    max_diff = None
    if not args.no_verify and costs is None:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(full_shape, generator=g)
        ref = _outputs(model, x, classifier)
        out = _outputs(pruned, x, classifier)
        max_diff = max(float((a - b).abs().max()) for a, b in zip(ref, out))

    src_meta = ckpt.get('meta', None) or {}
    meta = dict(
        mmdcs_version=mmdcs.__version__, subnet=spec.to_dict(),
        input_shape=list(full_shape),
        params=dict(backbone_supernet=rows[0][1], backbone_pruned=rows[1][1]),
        flops=dict(backbone_supernet=rows[0][2], backbone_pruned=rows[1][2]),
        **{k: v for k, v in spec.meta.items()})
    if isinstance(src_meta, dict) and 'dataset_meta' in src_meta:
        meta['dataset_meta'] = src_meta['dataset_meta']
    # both files or neither, never a half-written one (temporary files renamed at the end)
    with atomic_outputs(subnet_path, ckpt_path, force=getattr(args, 'force', False)) as (
            subnet_tmp, ckpt_tmp):
        spec.save(subnet_tmp)
        save_pruned_checkpoint(ckpt_tmp, state, meta)

    # ------------------------------------------------------------------ report
    print(f'\nSubnet of {type(backbone).__name__}({spec.arch}, {spec.variant}) from '
          f'{args.checkpoint} (sha256 {sha[:16]}...)')
    print(f'kept channels: {sum(b.kept for b in spec.blocks)} of '
          f'{sum(b.dim for b in spec.blocks)} ({spec.kept_ratio:.1%}) over '
          f'{len(spec.blocks)} blocks\n')
    print(block_summary(spec))
    if empty:
        print(f'\nWARNING: {len(empty)} block(s) had no α > 0 and keep their largest channel '
              f'(a block cannot be empty): {", ".join(empty[:6])}'
              f'{" ..." if len(empty) > 6 else ""}')
    print(f'\nParams and FLOPs (mmengine.analysis, multiply-accumulates) at input '
          f'{shape[0]}x{shape[1]} ({source}):\n')
    print(complexity_lines(rows, full_shape))
    b0, b1 = rows[0][2], rows[1][2]
    print(f'\nbackbone FLOPs: {human(b0)} -> {human(b1)} ({(b1 - b0) / max(b0, 1):+.1%}); '
          f'params: {human(rows[0][1])} -> {human(rows[1][1])} '
          f'({(rows[1][1] - rows[0][1]) / max(rows[0][1], 1):+.1%})')
    if costs is not None:
        m = spec.meta['budget']['measured']
        print(f'budget ({args.method}): {resource} target {target:g} of the baseline '
              f'{"classifier" if classifier else "backbone"}; achieved FLOPs '
              f'{human(m["flops"]["pruned"])} = {m["flops"]["ratio"]:.4f}, params '
              f'{human(m["params"]["pruned"])} = {m["params"]["ratio"]:.4f} of the baseline '
              f'({human(m["flops"]["baseline"])} FLOPs, {human(m["params"]["baseline"])} params)')
    if max_diff is not None:
        ok = max_diff <= 1e-4 * max(1., max(float(t.abs().max()) for t in ref))
        what = 'logits' if classifier else 'backbone outputs'
        print(f'check: pruned vs supernet eval {what}, max |diff| = {max_diff:.3g} '
              f'({"equal" if ok else "NOT EQUAL"})')
        if not ok and not empty:
            print('WARNING: the pruned model does not reproduce the supernet; please report '
                  'this', file=sys.stderr)
    print(f'\nwrote {subnet_path}\nwrote {ckpt_path}\n')
    print('\n'.join(usage_lines(args.config, args.out, spec.variant,
                                backbone_prefix(model) or '', osp.basename(ckpt_path))))
    return dict(spec=spec, rows=rows, max_diff=max_diff, subnet=subnet_path, checkpoint=ckpt_path)


def _method_subnet(args, cfg, scope, model, backbone, cost, target, norms, hidden_norms, meta):
    """The subnet of --method uniform / random / taylor (mmdcs.selection.importance)."""
    import json

    import torch.nn.functional as F

    from mmdcs.apis.loading import dataset_batches
    from mmdcs.selection.importance import method_subnet, taylor_scores, widths_of
    widths = taylor = None
    if args.widths_from:
        if args.method != 'random':
            raise UserError('--widths-from is for --method random')
        try:
            with open(args.widths_from) as f:
                widths = widths_of(json.load(f))
        except (OSError, ValueError) as e:
            raise UserError(f'--widths-from {args.widths_from}: {e}') from e
    if args.method == 'taylor':
        if not hasattr(model, 'head'):
            raise UserError('--method taylor needs a classifier config (its loss on the '
                            'training data)')
        n = args.taylor_batches
        batches = dataset_batches(cfg, model, scope, 'train', max_images=32 * n,
                                  batch_size=32, seed=args.seed)
        taylor = taylor_scores(backbone, batches,
                               lambda b: F.cross_entropy(model(b[0], mode='tensor'), b[1]),
                               params=model.parameters())
    return method_subnet(args.method, backbone, backbone.family, backbone.arch, backbone.variant,
                         cost, target, args.multiple_of, magnitude=norms,
                         hidden_magnitude=hidden_norms, taylor=taylor, widths=widths,
                         seed=args.seed, **meta)


def _target(args):
    """(resource, ratio) of --target-flops / --target-params, or (None, None)."""
    for resource in ('flops', 'params'):
        value = getattr(args, f'target_{resource}')
        if value is not None:
            return resource, value
    if args.method != 'alpha':
        raise UserError(f'--method {args.method} needs a budget: --target-flops R or '
                        '--target-params R')
    return None, None


def magnitude_supernet_cfg(model_cfg) -> None:
    """For the magnitude pruner: a baseline backbone config becomes the supernet with MLP
    channel selection only (variant 'dcs-arch2': the baseline's layers and names, plus α),
    so that a baseline checkpoint loads into it and its subnet is built as usual."""
    from mmdcs.apis.subnet_io import backbone_cfg_of
    b = backbone_cfg_of(model_cfg)
    if b.get('variant', 'baseline') in (None, 'baseline'):
        b['variant'] = 'dcs-arch2'
    b.pop('subnet', None)
    if isinstance(model_cfg, dict) and 'cost' in model_cfg:
        model_cfg.pop('cost')


def load_baseline_checkpoint(model, checkpoint):
    """Load a baseline (or supernet) checkpoint into a supernet: the selection parameters a
    baseline cannot have (α, Linear_θ, τ) may be missing; nothing else."""
    from mmengine.runner.checkpoint import _load_checkpoint
    ckpt = _load_checkpoint(checkpoint, map_location='cpu')
    state = ckpt.get('state_dict', ckpt) if isinstance(ckpt, dict) else ckpt
    state = {k[7:] if k.startswith('module.') else k: v for k, v in state.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    selection = ('.qk_select.', '.select.', '.hidden_select.', 'gate.tau')
    missing = [k for k in missing if not any(s in f'.{k}' for s in selection)]
    if missing or unexpected:
        raise UserError(f'{checkpoint} does not fit the config\'s model: missing keys '
                        f'{missing[:5]}, unexpected keys {unexpected[:5]}')
    return ckpt if isinstance(ckpt, dict) else {}


def _prunable(backbone):
    from mmdcs.selection import prunable_modules
    return prunable_modules(backbone)


def _in_channels(backbone) -> int:
    import torch.nn as nn
    for m in backbone.modules():
        if isinstance(m, nn.Conv2d):
            return m.in_channels
    return 3


def require_pruned(model):
    from mmdcs.apis.subnet_io import mmdcs_backbone
    b = mmdcs_backbone(model)
    if b is None or b.subnet_spec is None:
        raise UserError('internal: the model built from the subnet has no pruned mmdcs backbone')
    return b


def main(argv=None):
    args = parse_args(argv)
    with user_errors():
        export(args)


if __name__ == '__main__':
    main()
