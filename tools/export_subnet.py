"""Export the subnet of a searched DCS / KCR supernet (method.md §4): the deterministic gates
(α > 0) become ``DIR/subnet.json``, and the weights of the whole model with its backbone pruned
become ``DIR/pruned.pth`` (an mmengine checkpoint of plain data: weights and ``meta``) or, with
``--format safetensors``, ``DIR/pruned.safetensors``.

    python tools/export_subnet.py CONFIG CHECKPOINT --out DIR [--shape H W]
                                  [--multiple-of 8] [--cfg-options k=v ...] [--no-verify]
                                  [--format pth|safetensors] [--trust-checkpoint] [--force]
                                  [--target-flops R | --target-params R |
                                   --target-latency R --latency-table TABLE]
                                  [--method alpha|magnitude|...] [--measure | --no-measure]
                                  [--refine N] [--latency-tolerance T]

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

``--target-latency R --latency-table TABLE`` aims at R times the baseline's latency predicted
by the table (widths in groups of ``--multiple-of``, 8 by default), then times the exported
model against the baseline on this machine with the table's clock (``--no-measure`` skips it);
while it measures more than 0.01 from R the table is asked for ``asked x R / measured`` and
that subnet measured, at most ``--refine`` times (2 by default), and the closest is exported;
one measured further than ``--latency-tolerance`` (0.03) from R is refused (one line, exit 2,
nothing written). Predicted and measured ratios (every try) go into subnet.json with the
table's identity. The ranking methods (``--method``) are the scorers of
``mmdcs.selection.importance``.

This script only parses and prints: the export is one call,
:func:`mmdcs.apis.export.export_subnet`.
"""
import json
import os.path as osp
import sys

try:
    import mmdcs  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))

from mmdcs.apis.launch import (ConfigOptions, ToolParser, UserError, add_trust_flag,
                               non_negative_float, non_negative_int, positive_int, positive_size,
                               seed, set_checkpoint_trust, thread_count, user_errors)
from mmdcs.apis.outputs import add_force_argument
from mmdcs.selection.budget import LATENCY_REFINE, LATENCY_TOLERANCE
from mmdcs.selection.importance import SCORERS, widths_of

#: the budgets the tool can aim at: --target-flops, --target-params, --target-latency
TARGETS = ('flops', 'params', 'latency')


def parse_args(argv=None):
    parser = ToolParser(
        description='Export the subnet (subnet.json + pruned checkpoint) of a DCS/KCR supernet')
    parser.add_argument('config', help='the config the supernet was trained with')
    parser.add_argument('checkpoint', help='the supernet checkpoint')
    parser.add_argument('--out', required=True, help='output directory')
    parser.add_argument('--shape', type=positive_size, nargs='+', metavar='N',
                        help='input size H [W] for the FLOPs (default: the config\'s input '
                        'size, else the backbone\'s nominal size)')
    parser.add_argument('--multiple-of', type=positive_int, default=None, metavar='N',
                        help='round every kept width D̃ up to a multiple of N (e.g. 8: faster '
                        'matrix multiplies; default 1, 8 with --target-latency); the added '
                        'channels start with zero weights, so the pruned model still gives the '
                        'supernet\'s output')
    parser.add_argument('--no-verify', action='store_true',
                        help='skip the check that the pruned model gives the supernet\'s output')
    budget = parser.add_mutually_exclusive_group()
    for what in TARGETS:
        budget.add_argument(f'--target-{what}', type=float, metavar='R',
                            help=f'export to a budget: R (in (0, 1)) times the baseline\'s {what}'
                            + (' predicted by --latency-table' if what == 'latency' else ''))
    parser.add_argument('--latency-table', metavar='TABLE',
                        help='the latency table (JSON, tools/analysis/latency_table.py) of '
                        '--target-latency')
    measure = parser.add_mutually_exclusive_group()
    measure.add_argument('--measure', dest='measure', action='store_true', default=None,
                         help='time the exported model against the baseline (interleaved, '
                         'medians; the default with --target-latency)')
    measure.add_argument('--no-measure', dest='measure', action='store_false',
                         help='skip that measurement')
    parser.add_argument('--measure-rounds', type=positive_int, default=21, metavar='N',
                        help='interleaved timing rounds of the measurement (default 21)')
    parser.add_argument('--refine', type=non_negative_int, default=LATENCY_REFINE, metavar='N',
                        help='with --target-latency, measured: while the subnet measured '
                        'closest to the target is more than 0.01 from it, ask the table for '
                        'asked x target / measured and measure that subnet, at most N times; the '
                        'closest is exported (default %(default)s; 0: the table\'s subnet as it '
                        'is)')
    parser.add_argument('--latency-tolerance', type=non_negative_float,
                        default=LATENCY_TOLERANCE,
                        metavar='T',
                        help='with --target-latency, measured: refuse (exit 2, nothing written) a '
                        'subnet measured more than T from the target (default %(default)s; '
                        '1 accepts any)')
    parser.add_argument('--threads', type=thread_count, default=None, metavar='N',
                        help='CPU threads of the measurement (default: the latency table\'s, '
                        'else 1)')
    parser.add_argument('--method', choices=tuple(SCORERS), default='alpha',
                        help='how channels are ranked: ' + '; '.join(
                            f'{s.name}: {s.help}' + (' (a baseline checkpoint; needs a target)'
                                                      if s.baseline else '')
                            for s in SCORERS.values()))
    parser.add_argument('--seed', type=seed, default=0,
                        help='--method random: the seed of the channels drawn; taylor: of the '
                        'training images (default: %(default)s)')
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


def export(args):
    """Export as the parsed arguments say (:func:`mmdcs.apis.export.export_subnet`); prints the
    report and returns the :class:`~mmdcs.apis.export.ExportResult`'s dict."""
    from mmdcs.apis.export import export_subnet, train_batches
    target = _target(args)
    latency = target is not None and target[0] == 'latency'
    table = getattr(args, 'latency_table', None)
    if latency and not table:
        raise UserError('--target-latency needs --latency-table TABLE (a latency table of this '
                        'model on this device: tools/analysis/latency_table.py)')
    if table and not latency:
        raise UserError('--latency-table is the table of --target-latency; give '
                        '--target-latency R')
    multiple_of = args.multiple_of if args.multiple_of is not None else 8 if latency else 1
    measure = getattr(args, 'measure', None)
    set_checkpoint_trust(args)
    options = dict(seed=getattr(args, 'seed', 0))
    widths_from = getattr(args, 'widths_from', None)
    if widths_from:
        if args.method != 'random':
            raise UserError('--widths-from is for --method random')
        try:
            with open(widths_from) as f:
                options['widths'] = widths_of(json.load(f))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise UserError(f'--widths-from {widths_from}: not a readable subnet.json ({e})')
    result = export_subnet(
        args.config, args.checkpoint, args.out, method=args.method, target=target,
        cost_options=dict(latency_table=table) if latency else None,
        multiple_of=multiple_of, shape=args.shape, cfg_options=args.cfg_options,
        verify=not args.no_verify, fmt=getattr(args, 'format', 'pth'),
        force=getattr(args, 'force', False), measure=latency if measure is None else measure,
        measure_options=dict(repeats=getattr(args, 'measure_rounds', 21),
                             threads=getattr(args, 'threads', None)),
        batches=train_batches(getattr(args, 'taylor_batches', 4), seed=options['seed']),
        scorer_options=options, refine=getattr(args, 'refine', LATENCY_REFINE),
        latency_tolerance=getattr(args, 'latency_tolerance', LATENCY_TOLERANCE))
    for line in result.lines:
        print(line)
    for line in result.warnings:
        print(line, file=sys.stderr)
    return result.as_dict()


def _target(args):
    """(resource, ratio) of --target-flops / --target-params / --target-latency, or None."""
    for resource in TARGETS:
        value = getattr(args, f'target_{resource}', None)
        if value is not None:
            return resource, value
    return None


def main(argv=None):
    args = parse_args(argv)
    with user_errors():
        export(args)


if __name__ == '__main__':
    main()
