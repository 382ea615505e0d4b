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
import os.path as osp
import sys

try:
    import mmdcs  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))

from mmdcs.apis.launch import (ConfigOptions, ToolParser, UserError, add_prior_argument,
                               add_trust_flag, non_negative_float, non_negative_int, positive_int,
                               positive_size, run_program, seed, set_checkpoint_trust,
                               thread_count, user_errors)
from mmdcs.apis.outputs import add_force_argument
import mmdcs.models.counting  # noqa: F401  (registers the budget resources)
from mmdcs.selection.budget import (LATENCY_REFINE, LATENCY_TOLERANCE, resource_help,
                                    resource_names, resource_options)
from mmdcs.selection.importance import SCORERS, widths_of


def _flag(option: str) -> str:
    """A resource option's command-line flag: ``latency_table`` → ``--latency-table``."""
    return '--' + option.replace('_', '-')


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
                        'matrix multiplies; default 1, a latency table\'s grid step (8) with '
                        '--target-latency); the added channels start with zero weights, so the '
                        'pruned model still gives the supernet\'s output')
    parser.add_argument('--no-verify', action='store_true',
                        help='skip the check that the pruned model gives the supernet\'s output')
    budget = parser.add_mutually_exclusive_group()
    for what in resource_names():  # every registered budget resource
        options = ', '.join(_flag(o) for o in resource_options(what))
        budget.add_argument(f'--target-{what}', type=float, metavar='R',
                            help=f'export to a budget: R (in (0, 1)) times the baseline\'s '
                            f'{what} ({resource_help(what)})'
                            + (f'; with {options}' if options else ''))
    for what in resource_names():
        for option in resource_options(what):
            parser.add_argument(_flag(option), metavar=option.split('_')[-1].upper(),
                                help=f'the {option.replace("_", " ")} of --target-{what}'
                                + (' (JSON, tools/analysis/latency_table.py)'
                                   if option.endswith('table') else ''))
    parser.add_argument('--runtime', default=None, metavar='NAME',
                        help='the runtime the export is measured and corrected in: torch '
                        '(PyTorch eager) or onnxruntime (the exported ONNX file, written as '
                        'DIR/pruned_backbone.onnx, timed against the baseline\'s; tensorrt: '
                        'onnxruntime\'s TensorRT provider, on a GPU); default: the latency '
                        'table\'s (a table of another runtime is refused)')
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
    add_prior_argument(parser)
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
    options = _resource_options(args, target)
    set_checkpoint_trust(args)
    scorer_options = dict(seed=getattr(args, 'seed', 0))
    widths_from = getattr(args, 'widths_from', None)
    if widths_from:
        if args.method != 'random':
            raise UserError('--widths-from is for --method random')
        scorer_options['widths'] = widths_of(widths_from)  # a bad file: one line (SubnetError)
    result = export_subnet(
        args.config, args.checkpoint, args.out, method=args.method, target=target,
        cost_options=options or None, multiple_of=args.multiple_of, shape=args.shape,
        cfg_options=args.cfg_options, verify=not args.no_verify,
        fmt=getattr(args, 'format', 'pth'), force=getattr(args, 'force', False),
        measure=getattr(args, 'measure', None),
        measure_options=dict(repeats=getattr(args, 'measure_rounds', 21),
                             threads=getattr(args, 'threads', None)),
        batches=train_batches(getattr(args, 'taylor_batches', 4), seed=scorer_options['seed']),
        scorer_options=scorer_options, refine=getattr(args, 'refine', LATENCY_REFINE),
        latency_tolerance=_or_resource(getattr(args, 'latency_tolerance', None)),
        runtime=getattr(args, 'runtime', None), prior=getattr(args, 'prior', None))
    for line in result.lines:
        print(line)
    for line in result.warnings:
        print(line, file=sys.stderr)
    return result.as_dict()


def _or_resource(value):
    """A measured target's tolerance: the one given, else the resource's own."""
    return 'resource' if value is None else value


def _target(args):
    """(resource, ratio) of the ``--target-<resource>`` given, or None."""
    for resource in resource_names():
        value = getattr(args, f'target_{resource}', None)
        if value is not None:
            return resource, value
    return None


def _resource_options(args, target) -> dict:
    """The target resource's options from their flags (``--latency-table`` of
    ``--target-latency``): every one it takes is needed, and no other resource's is given
    (one line otherwise)."""
    resource = target[0] if target else None
    for other in resource_names():
        for option in resource_options(other):
            if other != resource and getattr(args, option, None) is not None:
                raise UserError(f'{_flag(option)} is an option of --target-{other}; give '
                                f'--target-{other} R')
    options = {o: getattr(args, o, None) for o in resource_options(resource)}
    missing = [o for o, v in options.items() if not v]
    if missing:
        raise UserError(f'--target-{resource} needs {", ".join(_flag(o) for o in missing)} '
                        f'({"; ".join(resource_help(resource).split("; ")[:1])}; see --help)')
    return options


def main(argv=None):
    args = parse_args(argv)
    with user_errors():
        export(args)


if __name__ == '__main__':
    run_program(main)
