"""mmdcs at a latency target side by side with Torch-Pruning (docs/benchmarks.md, "Side by
side with Torch-Pruning").

Per model, in one process: mmdcs's budget subnet at --target-latency (the paper's variant with
hidden-unit selection, its latency table of --runtime read from --tables DIR or measured
there; with --match latency or --refine N measured and corrected as the export does), and
timm's model of the same arch pruned by Torch-Pruning's MagnitudePruner (MLP /
inverted-bottleneck hidden units only, and hidden units + whole heads where the model has
them; --round-to 8) to the FLOPs ratio mmdcs's subnet reached (--match flops) or to the
latency ratio it measured in --runtime (--match latency: the peer's ratio bisected over
measurements, its FLOPs beside), within --tol; all timed interleaved against their baselines,
CPU, --batch, --threads 1, medians of --repeats rounds, wall clock and thread CPU time, in
--runtime and in every runtime of --also-runtimes (e.g. onnxruntime: each network's ONNX
file). torch-pruning is an optional extra (pip install torch-pruning==1.6.1, or
pip install -e ".[bench]"):

    python tools/analysis/benchmark_peer.py [--models vit-s16 swin-t efficientvit-b1]
        [--target-latency 0.7] [--tables DIR] [--select-hidden all|true] [--variant dcs|kcr]
        [--batch 1]
        [--runtime torch|onnxruntime] [--also-runtimes onnxruntime] [--match flops|latency]
        [--refine 2] [--peers hidden hidden+heads] [--repeats 21] [--out table.md]
        [--json rows.json]
"""
import json
import os.path as osp
import sys
import time

try:
    import mmdcs  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from mmdcs.apis.launch import (ToolParser, add_prior_argument, non_negative_int, positive_int,
                               positive_size, run_program, seed, thread_count, unit_ratio,
                               user_errors)
from mmdcs.apis.outputs import (add_force_argument, check_output_file, refuse_overwrite,
                                write_texts)

DEFAULT_MODELS = ('vit-s16', 'swin-t', 'efficientvit-b1')


def parse_args(argv=None):
    p = ToolParser(description='mmdcs at a latency target vs Torch-Pruning at the same FLOPs')
    p.add_argument('--models', nargs='+', default=list(DEFAULT_MODELS),
                   help=f'archs with a timm model (default: {" ".join(DEFAULT_MODELS)})')
    p.add_argument('--target-latency', type=unit_ratio, default=0.7, metavar='R',
                   help="mmdcs's latency target, predicted by its table (default 0.7)")
    p.add_argument('--tables', metavar='DIR', default=None,
                   help='read the latency tables from DIR (measured and written there when '
                        'missing; the files tools/analysis/latency.py --target-latency keeps)')
    p.add_argument('--select-hidden', choices=('all', 'true'), default='all',
                   help="mmdcs's hidden-unit selection (default all: every MLP's and inverted "
                        "bottleneck's hidden units)")
    p.add_argument('--variant', choices=('dcs', 'kcr'), default=None,
                   help="mmdcs's variant (default: the paper's per family: kcr for vit/swin, "
                        'dcs for mobilevit/efficientvit)')
    p.add_argument('--peers', nargs='+', choices=('hidden', 'hidden+heads'),
                   default=['hidden', 'hidden+heads'], help="Torch-Pruning's rows")
    p.add_argument('--round-to', type=positive_int, default=8,
                   help="Torch-Pruning's round_to (default 8, as mmdcs's groups of 8)")
    p.add_argument('--tol', type=unit_ratio, default=0.01,
                   help='relative tolerance of the FLOPs match (default 0.01)')
    p.add_argument('--size', type=positive_size, default=None,
                   help="input size (default: each model's nominal size)")
    p.add_argument('--threads', type=thread_count, default=1,
                   help='CPU intra-op threads (default 1; thread CPU time only with 1)')
    p.add_argument('--batch', type=positive_int, default=1, help='images per call (default 1)')
    p.add_argument('--runtime', default='torch', metavar='NAME',
                   help="mmdcs's table, its corrections and a latency match are measured in "
                        'it: torch (PyTorch eager, default) or onnxruntime')
    p.add_argument('--also-runtimes', nargs='+', default=[], metavar='NAME',
                   help='also time every model in these runtimes (a column each)')
    p.add_argument('--match', choices=('flops', 'latency'), default='flops',
                   help="the peer pruned to mmdcs's FLOPs ratio (default) or to its measured "
                        'latency ratio (hidden units only: bisected over measurements)')
    p.add_argument('--refine', type=non_negative_int, default=0, metavar='N',
                   help="mmdcs's measured corrections (as tools/export_subnet.py --refine)")
    add_prior_argument(p, "mmdcs's export")
    p.add_argument('--repeats', type=positive_int, default=21, help='timed rounds (medians)')
    p.add_argument('--table-rounds', type=positive_int, default=5,
                   help="interleaved rounds per grid point of a table measured here (default 5, "
                        'as tools/analysis/latency_table.py --rounds)')
    p.add_argument('--warmup', type=non_negative_int, default=3)
    p.add_argument('--seed', type=seed, default=0)
    p.add_argument('--system-malloc', action='store_true',
                   help="leave glibc's allocator as it is (default: keep freed memory, as "
                        'tools/analysis/latency.py)')
    p.add_argument('--out', help='also write the markdown table here')
    p.add_argument('--json', help='also write the rows as JSON here')
    add_force_argument(p)
    args = p.parse_args(argv)
    args.select_hidden = True if args.select_hidden == 'true' else 'all'
    return args


def run(args):
    from mmdcs.analysis.latency import environment_note, keep_freed_memory
    from mmdcs.analysis.peer_benchmark import format_peer_benchmark
    from mmdcs.apis.latency_io import peer_benchmark_results
    if not args.system_malloc:
        keep_freed_memory()
    t0 = time.perf_counter()
    results = peer_benchmark_results(
        args.models, args.target_latency, args.tables, args.force, threads=args.threads,
        input_size=args.size, select_hidden=args.select_hidden, variant=args.variant,
        peers=args.peers,
        round_to=args.round_to, tol=args.tol, repeats=args.repeats, warmup=args.warmup,
        seed=args.seed, batch=args.batch, runtime=args.runtime, runtimes=args.also_runtimes,
        match=args.match, refine=args.refine, prior=args.prior, table_rounds=args.table_rounds,
        progress=lambda line: print(line, flush=True))
    rows = [r for res in results for r in res['rows']]
    text = format_peer_benchmark(rows)
    skipped = [f'{res["rows"][0]["model"]}: Torch-Pruning {k}: {v}'
               for res in results for k, v in res['skipped'].items()]
    if skipped:
        text += '\n\nNo row: ' + '; '.join(skipped) + '.'
    text += ('\n\n' + environment_note() + f' Each ratio against its own baseline (mmdcs\'s '
             'backbone; timm\'s forward_features), all models of a row\'s arch timed in one run '
             f'per runtime ({", ".join([args.runtime] + args.also_runtimes)}), batch '
             f'{args.batch}, {args.repeats} interleaved rounds, medians; FLOPs: mmengine '
             'multiply-accumulates with the attention products, one counter for both; the peer '
             'matched at equal ' + (f'measured latency ({args.runtime}).'
                                   if args.match == 'latency' else 'FLOPs.'))
    print('\n' + text)
    print(f'\n({len(rows)} rows in {time.perf_counter() - t0:.0f} s)')
    kept = [{k: v for k, v in res.items() if k != 'table'} for res in results]
    write_texts({args.out: text + '\n',
                 args.json: json.dumps(dict(results=kept), indent=1) + '\n'}, args.force)
    return results


def main(argv=None):
    args = parse_args(argv)
    with user_errors():
        check_output_file(args.out, '--out')
        check_output_file(args.json, '--json')
        refuse_overwrite([args.out, args.json], args.force)
        return run(args)


if __name__ == '__main__':
    run_program(main)
