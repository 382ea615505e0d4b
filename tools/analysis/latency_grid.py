"""A paper model's latency target with its table built two ways (docs/budgets.md, "Why ViT-S/16
missed"): every unit at its k-th grid point (aligned, unpooled: how tables were built before) and
rotated grids with identical units pooled (the default now); each table's export at the target
measured against the baseline, beside what a smooth surface through the table's entries predicts
for that export (``mmdcs.analysis.latency_grid``):

    python tools/analysis/latency_grid.py [--model vit-s16] [--size 112] [--target 0.7]
        [--select-hidden] [--threads 1] [--rounds 5] [--repeats 21] [--json rows.json] [--force]

Random weights (the export ranks by weight magnitude; which channels go does not change the
time). Two table builds: 163-209 s each for ViT-S/16 at 112x112 on a loaded 2-core Xeon
(docs/benchmarks.md).
"""
import os.path as osp
import sys

try:
    import mmdcs  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from mmdcs.apis.launch import (ToolParser, UserError, open_ratio, positive_int, positive_size,
                               run_program, thread_count, user_errors)
from mmdcs.apis.outputs import (add_force_argument, check_output_file, refuse_overwrite,
                                write_json)


def parse_args(argv=None):
    p = ToolParser(description='A latency target with the table built aligned and rotated')
    p.add_argument('--model', default='vit-s16', help='a paper model (default vit-s16)')
    p.add_argument('--size', type=positive_size, default=None,
                   help='input size N (NxN; default the model\'s)')
    p.add_argument('--target', type=open_ratio, default=0.7,
                   help='latency ratio to the baseline (default 0.7)')
    p.add_argument('--select-hidden', action='store_true',
                   help='hidden-unit selection (the MLPs over channels x hidden units)')
    p.add_argument('--threads', type=thread_count, default=1)
    p.add_argument('--rounds', type=positive_int, default=5,
                   help='interleaved rounds per grid point (default 5)')
    p.add_argument('--repeats', type=positive_int, default=21,
                   help='interleaved rounds of the measurement (default 21)')
    p.add_argument('--json', help='write the rows (with the subnets) here')
    add_force_argument(p)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    with user_errors():
        if args.json:
            check_output_file(args.json, '--json')
            refuse_overwrite([args.json], args.force)
        from mmdcs.analysis.complexity import backbone_class
        from mmdcs.analysis.latency import keep_freed_memory
        from mmdcs.analysis.latency_grid import compare_grid_orders, format_grid_orders
        try:
            backbone_class(args.model)
        except ValueError as e:
            raise UserError(str(e)) from e
        if not 0 < args.target < 1:
            raise UserError(f'--target {args.target:g}: a latency ratio in (0, 1)')
        keep_freed_memory()
        rows = compare_grid_orders(
            args.model, args.target, args.size, args.select_hidden, threads=args.threads,
            rounds=args.rounds, repeats=args.repeats,
            progress=lambda line: print(line, flush=True)
            if line.rsplit('/', 1)[0].endswith('0') else None)
        print(format_grid_orders(rows))
        if args.json:
            write_json(args.json, rows, force=args.force)
            print(f'wrote {args.json}')


if __name__ == '__main__':
    run_program(main)
