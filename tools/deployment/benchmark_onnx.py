"""onnxruntime CPU latency of a pruned ONNX model against its baseline, interleaved in one run,
next to the FLOPs ratio.

    # two exported files (tools/deployment/pytorch2onnx.py ... --dynamic-batch)
    python tools/deployment/benchmark_onnx.py BASELINE.onnx PRUNED.onnx
    # or an arch: baseline and a random subnet keeping --ratio of every block (the paper's
    # variant), both exported here (and timed in PyTorch too, for the same settings)
    python tools/deployment/benchmark_onnx.py --arch vit-s16 --ratio 0.7 [--shape 224 224]
        [--multiple-of 8]

    common options: [--batch 1 16] [--threads 1 0] [--repeats 20] [--warmup 3]
                    [--work-dir DIR] [--json out.json] [--force]

Timing: one onnxruntime CPU session per model and thread count (``intra_op_num_threads``; 0 =
onnxruntime's default, all cores; graph optimisation ORT_ENABLE_ALL); the same random input
for both models; ``warmup`` untimed runs each, then ``repeats`` rounds alternating the two
models (and their order) so that a load change on a shared machine hits both alike; the median
round, in ms per image. The FLOPs ratio is the ratio of the graphs' multiply-accumulates
(MatMul, Gemm, Conv: :func:`mmdcs.apis.deploy.onnx_macs`), i.e. of what onnxruntime computes;
with --arch the PyTorch count (mmengine) is printed beside it.
"""
import os
import os.path as osp
import statistics
import sys
import tempfile
import time

try:
    import mmdcs  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from mmdcs.apis.launch import (ToolParser, UserError, batch_size, non_negative_int, positive_int,
                               positive_size, run_program, seed, thread_count_or_all, unit_ratio,
                               user_errors)
from mmdcs.apis.outputs import (add_force_argument, check_output_dir, check_output_file,
                                refuse_overwrite, write_json)


def parse_args(argv=None):
    p = ToolParser(description='onnxruntime CPU latency: pruned vs baseline')
    p.add_argument('baseline', nargs='?', help='baseline .onnx')
    p.add_argument('pruned', nargs='?', help='pruned .onnx')
    p.add_argument('--arch', help='instead of files: export the baseline and a random subnet '
                   'of this arch (e.g. vit-s16, swin-t, mobilevit-xs, efficientvit-b1)')
    p.add_argument('--ratio', type=unit_ratio, default=0.7, help='kept ratio of the random subnet')
    p.add_argument('--subnet', help='with --arch: this subnet file instead of a random one')
    p.add_argument('--multiple-of', type=positive_int, default=1, metavar='N',
                   help='with --arch: round the random subnet\'s widths up to a multiple of N')
    p.add_argument('--shape', type=positive_size, nargs='+', metavar='N', help='input size H [W] '
                   '(--arch; default: the backbone\'s nominal size)')
    p.add_argument('--batch', type=batch_size, nargs='+', default=[1, 16])
    p.add_argument('--threads', type=thread_count_or_all, nargs='+', default=[1, 0],
                   help='intra-op threads; 0 = all cores (onnxruntime\'s default)')
    p.add_argument('--repeats', type=positive_int, default=20)
    p.add_argument('--warmup', type=non_negative_int, default=3)
    p.add_argument('--no-pytorch', action='store_true',
                   help='with --arch: do not time the PyTorch models')
    p.add_argument('--work-dir', help='with --arch: keep the exported files here')
    p.add_argument('--json', help='write the rows to this JSON file')
    p.add_argument('--seed', type=seed, default=0)
    add_force_argument(p)
    return p.parse_args(argv)


def time_sessions(sessions: dict, x, warmup: int, repeats: int) -> dict:
    """name → list of per-batch ms of ``repeats`` interleaved rounds (the one timing loop,
    :func:`mmdcs.analysis.latency.time_interleaved`, on the wall clock)."""
    from mmdcs.analysis.latency import Meter, time_interleaved
    feeds = {n: {s.get_inputs()[0].name: x} for n, s in sessions.items()}
    items = {n: (lambda s=s, f=feeds[n]: s.run(None, f), None) for n, s in sessions.items()}
    t = time_interleaved(items, repeats, warmup, Meter(('wall', )))
    return {n: v['wall'] for n, v in t.items()}


def time_torch(models: dict, x, warmup: int, repeats: int, threads: int) -> dict:
    from mmdcs.analysis.latency import time_models
    t = time_models(models, x, warmup, repeats, 1, threads or os.cpu_count())
    return {n: v['rounds'] for n, v in t.items()}


def input_shape(path: str):
    """The shape of the model's input (None for a dynamic dimension): an image batch
    (N, C, H, W) with fixed C, H, W, else one line."""
    from mmdcs.apis.deploy import read_onnx
    dims = read_onnx(path).graph.input[0].type.tensor_type.shape.dim
    shape = [d.dim_value if d.HasField('dim_value') else None for d in dims]
    if len(shape) != 4 or None in shape[1:]:
        raise UserError(f'{path}: its input has the shape {shape}, not an image batch '
                        '(N, C, H, W) with a fixed C, H, W')
    return shape


def _check_batchable(shape, path: str, batches) -> None:
    if shape[0] is not None and any(b != shape[0] for b in batches):
        raise UserError(f'{path} has a fixed batch of {shape[0]}; export it with '
                        f'--dynamic-batch to time batches {list(batches)}')


def export_pair(args, work_dir: str) -> dict:
    """--arch: baseline and subnet backbones exported (dynamic batch, parity checked)."""
    import torch

    from mmdcs.analysis.complexity import count_flops
    from mmdcs.analysis.latency import build_pair
    from mmdcs.apis.deploy import ExportWrapper, export_and_check, set_export_mode_
    from mmdcs.apis.subnet_io import shape_arg
    size = shape_arg(args.shape)
    try:
        base, sub, spec = build_pair(args.arch, args.ratio, subnet=args.subnet,
                                     input_size=size, seed=args.seed,
                                     multiple_of=args.multiple_of)
    except (KeyError, ValueError) as e:
        raise UserError(f'--arch {args.arch}: {e}') from e
    from mmdcs.analysis.latency import _size
    size = _size(size, args.arch)
    out = {}
    for name, m in (('baseline', base), ('pruned', sub)):
        set_export_mode_(m)
        g = torch.Generator().manual_seed(args.seed)
        x = torch.randn((1, 3) + tuple(size), generator=g)
        path = osp.join(work_dir, f'{args.arch}_{name}.onnx')
        res = export_and_check(ExportWrapper(m, 'backbone'), x, path, dynamic_batch=True,
                               check_inputs=torch.cat([x, x.flip(0) * .5]),
                               force=args.force)
        worst = max(r['rel'] for r in res['parity'])
        print(f'exported {name}: {path} ({res["summary"]["nodes"]} nodes, parity: max '
              f'relative diff {worst:.1e})')
        out[name] = dict(path=path, model=m, torch_flops=count_flops(m, size),
                         parity_rel=worst)
    out['size'] = size
    out['kept_ratio'] = spec.kept_ratio
    return out


def run(args) -> list:
    if args.arch is None and (args.baseline is None or args.pruned is None):
        raise UserError('give BASELINE.onnx PRUNED.onnx, or --arch ARCH')
    if args.arch is not None and args.baseline is not None:
        raise UserError('give either two .onnx files or --arch, not both')
    # pre-flight of what the run writes: nothing is computed for a refused output
    check_output_file(args.json, '--json')
    if args.arch is not None and args.work_dir:
        check_output_dir(args.work_dir, '--work-dir')
        refuse_overwrite([args.json] + [osp.join(args.work_dir, f'{args.arch}_{n}.onnx')
                                        for n in ('baseline', 'pruned')], args.force)
    else:
        refuse_overwrite([args.json], args.force)
    if args.arch is not None and not args.work_dir:
        # the exported files live as long as the run, whatever ends it
        with tempfile.TemporaryDirectory(prefix='mmdcs_bench_onnx_') as tmp:
            return _run(args, tmp)
    return _run(args, args.work_dir)


def _run(args, work_dir) -> list:
    import numpy as np

    from mmdcs.apis.deploy import onnx_macs, ort_session
    pair = None
    if args.arch is not None:
        pair = export_pair(args, work_dir)
        paths = dict(baseline=pair['baseline']['path'], pruned=pair['pruned']['path'])
    else:
        paths = dict(baseline=args.baseline, pruned=args.pruned)
    shapes = {n: input_shape(p) for n, p in paths.items()}
    for n, p in paths.items():
        _check_batchable(shapes[n], p, args.batch)
    if shapes['baseline'][1:] != shapes['pruned'][1:]:
        raise UserError(f'the two models take different inputs: {shapes["baseline"]} vs '
                        f'{shapes["pruned"]}')
    macs = {n: onnx_macs(p)['total'] for n, p in paths.items()}
    flops_ratio = macs['pruned'] / macs['baseline']
    print(f'graph MACs per image: baseline {macs["baseline"] / 1e9:.3f} G, pruned '
          f'{macs["pruned"] / 1e9:.3f} G, ratio {flops_ratio:.3f}')
    if pair is not None:
        tr = pair['pruned']['torch_flops'] / pair['baseline']['torch_flops']
        print(f'PyTorch FLOPs (mmengine): baseline {pair["baseline"]["torch_flops"] / 1e9:.3f} '
              f'G, pruned {pair["pruned"]["torch_flops"] / 1e9:.3f} G, ratio {tr:.3f}')
    rows = []
    rng = np.random.default_rng(args.seed)
    chw = [int(d) for d in shapes['baseline'][1:]]
    for threads in args.threads:
        sessions = {n: ort_session(p, threads or None) for n, p in paths.items()}
        for b in args.batch:
            x = rng.standard_normal([b] + chw).astype(np.float32)
            t = time_sessions(sessions, x, args.warmup, args.repeats)
            row = dict(runtime='onnxruntime', threads=threads or os.cpu_count(), batch=b,
                       base_ms=statistics.median(t['baseline']) / b,
                       pruned_ms=statistics.median(t['pruned']) / b)
            if pair is not None and not args.no_pytorch:
                import torch
                tt = time_torch({'baseline': pair['baseline']['model'],
                                 'pruned': pair['pruned']['model']}, torch.from_numpy(x),
                                args.warmup, args.repeats, threads)
                row.update(torch_base_ms=statistics.median(tt['baseline']) / b,
                           torch_pruned_ms=statistics.median(tt['pruned']) / b)
            row['latency_ratio'] = row['pruned_ms'] / row['base_ms']
            row['flops_ratio'] = flops_ratio
            rows.append(row)
    print(format_rows(rows, paths, args))
    if args.json:
        write_json(args.json, dict(paths=paths, macs=macs, rows=rows, repeats=args.repeats,
                                   date=time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())),
                   force=args.force)
    return rows


def format_rows(rows, paths, args) -> str:
    torch_cols = any('torch_base_ms' in r for r in rows)
    head = '| threads | batch | ORT baseline ms/img | ORT pruned ms/img | ORT ratio |'
    sep = '|---|---|---|---|---|'
    if torch_cols:
        head += ' PyTorch baseline ms/img | PyTorch pruned ms/img | PyTorch ratio |'
        sep += '---|---|---|'
    head += ' FLOPs ratio |'
    sep += '---|'
    lines = [f'{paths["baseline"]} vs {paths["pruned"]} (median of {args.repeats} interleaved '
             'rounds)', head, sep]
    for r in rows:
        line = (f"| {r['threads']} | {r['batch']} | {r['base_ms']:.2f} | {r['pruned_ms']:.2f} | "
                f"{r['latency_ratio']:.3f} |")
        if torch_cols:
            line += (f" {r['torch_base_ms']:.2f} | {r['torch_pruned_ms']:.2f} | "
                     f"{r['torch_pruned_ms'] / r['torch_base_ms']:.3f} |")
        line += f" {r['flops_ratio']:.3f} |"
        lines.append(line)
    return '\n'.join(lines)


def main(argv=None):
    with user_errors():
        return run(parse_args(argv))


if __name__ == '__main__':
    run_program(main)
