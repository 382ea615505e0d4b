"""Measure a supernet's latency table on this device (the latency model a latency target is
predicted with; ``mmdcs.analysis.latency_table``):

    python tools/analysis/latency_table.py CONFIG --out table.json [--device cpu|cuda]
        [--runtime torch|onnxruntime|tensorrt] [--threads 1] [--batch 1] [--shape H [W]]
        [--dtype fp32|fp16|bf16] [--validate K] [--rounds 5] [--multiple-of 8]
        [--cfg-options k=v ...] [--force]

Every prunable unit of the config's backbone (a DCS or KCR supernet: its MLP channels, with
``select_hidden`` its MLP's channels × hidden units, its convolutional FFNs' expanded channels)
is timed in the real network on a grid of widths, plus the time no width changes and the
baseline network (the same backbone, ``variant='baseline'``); a progress line per grid point,
the cost of the build at the end. ``--validate K`` times K random subnets end to end against the
baseline (interleaved, medians) and prints and keeps the predictor's error. ``--runtime
onnxruntime`` measures the table in onnxruntime (each unit's module exported as an ONNX graph
of its own, the whole network at a few points; docs/user_guide/latency.md): the table of the
file users deploy. A table is valid for
the device, thread count, batch and dtype it was measured with: build it on the machine it is
for. While timing, glibc keeps freed memory for reuse (as ``tools/analysis/latency.py``).
"""
import os.path as osp
import sys

try:
    import mmdcs  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from mmdcs.apis.launch import (ConfigOptions, ToolParser, batch_size, non_negative_int,
                               positive_int, positive_size, run_program, thread_count, user_errors)
from mmdcs.apis.outputs import (add_force_argument, check_output_file, refuse_overwrite,
                                write_json)


def parse_args(argv=None):
    p = ToolParser(description='Measure the latency table of a config\'s supernet')
    p.add_argument('config', help='a DCS or KCR supernet config')
    p.add_argument('--out', required=True, help='the table (JSON)')
    p.add_argument('--device', choices=('cpu', 'cuda'), default='cpu')
    p.add_argument('--runtime', default='torch', metavar='NAME',
                   help='what the networks run in: torch (PyTorch eager, the default), '
                   'onnxruntime (their ONNX files, thread options set explicitly), tensorrt '
                   '(onnxruntime\'s TensorRT provider, --device cuda)')
    p.add_argument('--threads', type=thread_count, default=1,
                   help='CPU intra-op threads while timing (default 1)')
    p.add_argument('--batch', type=batch_size, default=1, help='images per call (default 1)')
    p.add_argument('--shape', type=positive_size, nargs='+', metavar='N',
                   help='input size H [W] (default: the config\'s)')
    p.add_argument('--dtype', choices=('fp32', 'fp16', 'bf16'), default='fp32')
    p.add_argument('--validate', type=non_negative_int, default=0, metavar='K',
                   help='time K random subnets end to end and report the predictor\'s error')
    p.add_argument('--rounds', type=positive_int, default=5,
                   help='interleaved timed rounds per grid point (medians; default 5)')
    p.add_argument('--validate-rounds', type=positive_int, default=15,
                   help='interleaved rounds per validated subnet (default 15)')
    p.add_argument('--multiple-of', type=positive_int, default=8,
                   help='grid step: widths are multiples of this (default 8)')
    p.add_argument('--cfg-options', nargs='+', action=ConfigOptions,
                   help='override settings of the config, key=value')
    add_force_argument(p)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    with user_errors():
        check_output_file(args.out, '--out')
        refuse_overwrite([args.out], args.force)
        from mmdcs.analysis.latency import keep_freed_memory
        from mmdcs.apis.latency_io import (check_device, config_backbones, make_runtime,
                                           measure_table, summary)
        from mmdcs.apis.subnet_io import shape_arg
        check_device(args.device, args.dtype)
        make_runtime(args.runtime, args.device, args.threads, args.dtype)  # runs here?
        shape = shape_arg(args.shape)
        sup, base, size, source = config_backbones(args.config, shape, args.cfg_options)
        print(f'{args.config}: input {size[0]}x{size[1]} ({source})', flush=True)
        keep_freed_memory()
        table = measure_table(sup, base, size, args.batch, args.threads, args.dtype,
                              args.device, args.rounds, args.multiple_of, args.validate,
                              args.validate_rounds,
                              progress=lambda line: print(line, flush=True),
                              runtime=args.runtime)
        table['config'] = args.config
        write_json(args.out, table, force=args.force)
        print()
        print(summary(table))
        print(f'\nwrote {args.out}')


if __name__ == '__main__':
    run_program(main)
