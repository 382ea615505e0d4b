"""Per-epoch curves of mmengine JSON logs, for one or several runs (legend = run name):
IB / IBB (DCS paper, Fig. 8), TNN / KC (KCR paper, Fig. 1), loss and accuracy.

    python tools/analysis/plot_logs.py WORK_DIR_OR_JSON [WORK_DIR_OR_JSON ...]
        [--names baseline dcs ...] [--out-dir DIR] [--figures ib kc training]
        [--keys SCALAR ...] [--prefix NAME_]

A run is a work dir (every <timestamp>/vis_data/scalars.json under it, oldest first) or one
scalars.json / <timestamp>.json file. The legend names default to the work dirs' names.
Writes <out-dir>/<prefix>{ib,kc,training}.png (the figures the logs have data for; --keys adds
custom.png with one panel per scalar) and prints the last value of the main scalars per run.
"""
import os.path as osp
import sys

try:
    import mmdcs  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from mmdcs.apis.launch import ToolParser, UserError, run_program, user_errors
from mmdcs.apis.outputs import (add_force_argument, check_output_dir, refuse_overwrite,
                                staged_directory)


def parse_args(argv=None):
    p = ToolParser(description='Plot IB/IBB, TNN/KC, loss and accuracy per epoch '
                                'from mmengine JSON logs')
    p.add_argument('runs', nargs='+', help='work dirs or scalars.json files')
    p.add_argument('--names', nargs='+', help='legend names, one per run')
    p.add_argument('--out-dir', default='work_dirs/plots', help='where the PNGs go')
    p.add_argument('--figures', nargs='+', default=['ib', 'kc', 'training'],
                   choices=['ib', 'kc', 'training'])
    p.add_argument('--keys', nargs='+', help='also plot these scalars (custom.png)')
    p.add_argument('--prefix', default='', help='prefix of the PNG names')
    add_force_argument(p)
    args = p.parse_args(argv)
    if args.names and len(args.names) != len(args.runs):
        p.error(f'--names: {len(args.names)} names for {len(args.runs)} runs')
    return args


def _name(path: str) -> str:
    path = osp.abspath(path)
    if osp.isfile(path):  # .../<work_dir>/<timestamp>/vis_data/scalars.json
        parts = path.split(osp.sep)
        return parts[-4] if len(parts) >= 4 else osp.basename(path)
    return osp.basename(path.rstrip(osp.sep))


def main(argv=None):
    args = parse_args(argv)
    with user_errors():
        from mmdcs.analysis.plots import plot_logs, summary_table
        names = args.names or [_name(r) for r in args.runs]
        if len(set(names)) != len(names):
            names = [f'{n} ({i + 1})' for i, n in enumerate(names)]
        runs = dict(zip(names, args.runs))
        pngs = list(args.figures) + (['custom'] if args.keys else [])
        check_output_dir(args.out_dir, '--out-dir')
        refuse_overwrite([osp.join(args.out_dir, f'{args.prefix}{f}.png') for f in pngs],
                         args.force)
        with staged_directory(args.out_dir, args.force) as stage:
            try:
                written = plot_logs(runs, stage, args.figures, args.keys, args.prefix)
            except (FileNotFoundError, ValueError) as e:
                raise UserError(str(e)) from e
        written = {k: osp.join(args.out_dir, osp.basename(v)) for k, v in written.items()}
        print(summary_table(runs))
        if not written:
            print('\nnothing to plot: the logs have none of the scalars of the figures '
                  f'{", ".join(args.figures)}', file=sys.stderr)
        for fig, path in written.items():
            print(f'{fig}: {path}')
        return written


if __name__ == '__main__':
    run_program(main)
