"""Build DCS-Digits, the offline demo dataset (see mmdcs/datasets/digits.py).

    python tools/data/build_digits.py --out data/digits
    python tools/data/build_digits.py --out data/digits --skip-existing

Writes OUT/cls (mmpretrain CustomDataset), OUT/scenes (COCO instances and
mmseg seg maps) and OUT/build_info.json (the arguments, and last the
counts). A build in OUT made with other arguments is refused without
--force. No network is used.
"""
import os.path as osp
import sys
import time

try:
    import mmdcs  # noqa: F401
except ImportError:  # not installed: use the checkout this script lives in
    sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(
        osp.abspath(__file__)))))

from mmdcs.apis.launch import (ToolParser, positive_int, run_program, seed, unit_ratio)  # noqa: E402
from mmdcs.datasets.digits import (DataBuildError, build_all)  # noqa: E402


def parse_args(argv=None):
    parser = ToolParser(
        description='Build the DCS-Digits demo dataset from scikit-learn '
        'handwritten digits (no download).')
    parser.add_argument(
        '--out', default='data/digits', help='output root (default: %(default)s)')
    parser.add_argument(
        '--size',
        type=positive_int,
        default=64,
        help='classification image side, a positive multiple of 8 '
        '(default: %(default)s)')
    parser.add_argument(
        '--val-ratio',
        type=unit_ratio,
        default=0.2,
        help='fraction of each class in val, in (0, 1) (default: %(default)s)')
    parser.add_argument(
        '--max-per-class',
        type=positive_int,
        default=None,
        help='use at most N scans per class (default: all)')
    parser.add_argument(
        '--canvas',
        type=positive_int,
        default=128,
        help='scene side, a positive multiple of 32 (default: %(default)s)')
    parser.add_argument(
        '--scenes-train', type=positive_int, default=200, help='(default: %(default)s)')
    parser.add_argument(
        '--scenes-val', type=positive_int, default=50, help='(default: %(default)s)')
    parser.add_argument(
        '--min-digits', type=positive_int, default=2, help='(default: %(default)s)')
    parser.add_argument(
        '--max-digits', type=positive_int, default=5, help='(default: %(default)s)')
    parser.add_argument(
        '--digit-size',
        type=positive_int,
        nargs=2,
        metavar=('MIN', 'MAX'),
        default=None,
        help='side range of pasted digits (default: 20 48 scaled by '
        'canvas/128)')
    parser.add_argument('--seed', type=seed, default=0, help='(default: 0)')
    parser.add_argument(
        '--skip-existing',
        action='store_true',
        help='do nothing if OUT holds a complete build with the same '
        'arguments')
    parser.add_argument(
        '--force',
        action='store_true',
        help='replace a build in OUT made with other arguments (refused '
        'otherwise)')
    return parser, parser.parse_args(argv)


def main(argv=None):
    parser, args = parse_args(argv)
    start = time.perf_counter()
    try:
        summary = build_all(
            args.out,
            size=args.size,
            val_ratio=args.val_ratio,
            seed=args.seed,
            max_per_class=args.max_per_class,
            canvas=args.canvas,
            scenes_train=args.scenes_train,
            scenes_val=args.scenes_val,
            min_digits=args.min_digits,
            max_digits=args.max_digits,
            digit_size=args.digit_size,
            skip_existing=args.skip_existing,
            force=args.force)
    except DataBuildError as e:  # OUT holds another build
        parser.error(f'--out: {e}')
    except ValueError as e:  # names the offending argument
        parser.error(f'{e} (option --{str(e).split()[0].replace("_", "-")})')
    except OSError as e:  # --out cannot be written (read-only, a file in the way)
        parser.error(f'--out {args.out}: {e.filename or args.out}: {e.strerror or e}')
    seconds = time.perf_counter() - start

    cls, scenes = summary['cls'], summary['scenes']
    state = 'up to date, skipped' if summary['skipped'] else 'built'
    print(f'DCS-Digits {state} in {seconds:.2f} s: {summary["out_dir"]}')
    print(f'  classification {cls["root"]}: {cls["num_train"]} train + '
          f'{cls["num_val"]} val images, {cls["size"]}x{cls["size"]}, '
          '10 classes')
    print(f'  scenes {scenes["root"]}: '
          f'{scenes["num_train_images"]} train images '
          f'({scenes["num_train_instances"]} digits), '
          f'{scenes["num_val_images"]} val images '
          f'({scenes["num_val_instances"]} digits), '
          f'{scenes["canvas"]}x{scenes["canvas"]}')


if __name__ == '__main__':
    run_program(main)
