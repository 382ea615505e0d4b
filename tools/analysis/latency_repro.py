"""Do two latency-table builds give the same subnet? The rows of two runs of
``tools/analysis/latency.py --target-latency R --json`` (each with its own ``--tables`` directory:
two table builds on one machine) side by side: for every model and batch in both, the two
exported subnets and the baseline timed in one run (interleaved, medians: the machine's drift
hits them alike), their FLOPs and measured latency ratios and the differences, against
``--within`` (0.01):

    python tools/analysis/latency_repro.py A.json B.json [--runtime torch|onnxruntime]
        [--threads 1] [--repeats 41] [--json out.json] [--force]
"""
import json
import os.path as osp
import sys

try:
    import mmdcs  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from mmdcs.apis.launch import (ToolParser, UserError, non_negative_float, positive_int,
                               user_errors)
from mmdcs.apis.outputs import add_force_argument, check_output_file, refuse_overwrite, write_json


def parse_args(argv=None):
    p = ToolParser(description='Two table builds: the same subnet?')
    p.add_argument('rows', nargs=2, metavar='ROWS', help='two --json files of '
                   'tools/analysis/latency.py --target-latency')
    p.add_argument('--runtime', default='torch', metavar='NAME',
                   help='what the subnets are timed in (default torch)')
    p.add_argument('--threads', type=positive_int, default=1)
    p.add_argument('--repeats', type=positive_int, default=41,
                   help='interleaved rounds (medians; default 41)')
    p.add_argument('--within', type=non_negative_float, default=0.01,
                   help='the largest difference of FLOPs and latency ratios (default 0.01)')
    p.add_argument('--json', help='also write the comparison here')
    add_force_argument(p)
    return p.parse_args(argv)


def _rows(path):
    try:
        with open(path) as f:
            return {(r['model'], r['batch']): r for r in json.load(f)['rows']}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f'{path}: not the --json of tools/analysis/latency.py '
                        f'--target-latency ({e})') from e


def main(argv=None):
    args = parse_args(argv)
    with user_errors():
        check_output_file(args.json, '--json')
        refuse_overwrite([args.json], args.force)
        from mmdcs.analysis.latency import keep_freed_memory
        from mmdcs.analysis.latency_target import compare_subnets
        from mmdcs.apis.latency_io import make_runtime
        a, b = (_rows(p) for p in args.rows)
        both = [k for k in a if k in b]
        if not both:
            raise UserError('the two files have no model and batch in common')
        keep_freed_memory()
        out = []
        print('| model | batch | FLOPs A | FLOPs B | latency A | latency B | |ΔFLOPs| | '
              '|Δlatency| | within |\n|' + '---|' * 9)
        for model, batch in both:
            rt = make_runtime(args.runtime, threads=args.threads)
            got = compare_subnets(model, dict(A=a[(model, batch)]['spec'],
                                              B=b[(model, batch)]['spec']),
                                  tuple(int(v) for v in a[(model, batch)]['input'].split('x')),
                                  batch, args.threads, rt, args.repeats)
            d_f = abs(got['A']['flops_ratio'] - got['B']['flops_ratio'])
            d_l = abs(got['A']['measured_ratio'] - got['B']['measured_ratio'])
            ok = d_f <= args.within and d_l <= args.within
            out.append(dict(model=model, batch=batch, runtime=args.runtime, **got,
                            flops_difference=d_f, latency_difference=d_l, within=ok))
            print(f'| {model} | {batch} | {got["A"]["flops_ratio"]:.3f} | '
                  f'{got["B"]["flops_ratio"]:.3f} | {got["A"]["measured_ratio"]:.3f} | '
                  f'{got["B"]["measured_ratio"]:.3f} | {d_f:.3f} | {d_l:.3f} | '
                  f'{"yes" if ok else "NO"} |', flush=True)
        if args.json:
            write_json(args.json, out, force=args.force)
        return out


if __name__ == '__main__':
    main()
