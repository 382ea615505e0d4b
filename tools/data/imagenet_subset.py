"""Write the annotation files of the seeded ImageNet class subset used by the search
(method.md §4; logic in mmdcs/datasets/imagenet_subset.py).

    python tools/data/imagenet_subset.py --imagenet data/imagenet --out data/imagenet100 \
        --classes 100 --seed 0

Reads ImageNet in mmpretrain's layout (meta/train.txt + meta/val.txt if both exist, else
train/<wnid>/* and val/<wnid>/*), picks the classes with random.Random(seed).sample over the
sorted wnids, and writes OUT/meta/train.txt, OUT/meta/val.txt (labels 0..K-1 in sorted-wnid
order, paths relative to IMAGENET/train/ and IMAGENET/val/), OUT/classes.txt and
OUT/subset_info.json. No image is copied: configs/_base_/datasets/imagenet100_search.py reads
the images from data/imagenet and the annotations from data/imagenet100.
"""
import os.path as osp
import sys
import time

try:
    import mmdcs  # noqa: F401
except ImportError:  # not installed: use the checkout this script lives in
    sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from mmdcs.apis.launch import (ToolParser, positive_int, run_program, seed)  # noqa: E402
from mmdcs.datasets.imagenet_subset import build_imagenet_subset  # noqa: E402


def parse_args(argv=None):
    parser = ToolParser(
        description='Write the annotation files of a seeded ImageNet class subset (the search '
        'set of DCS/KCR); the images are not copied.')
    parser.add_argument('--imagenet', default='data/imagenet',
                        help='ImageNet folder, mmpretrain layout (default: %(default)s)')
    parser.add_argument('--out', default='data/imagenet100',
                        help='output folder (default: %(default)s)')
    parser.add_argument('--classes', type=positive_int, default=100,
                        help='number of classes (default: %(default)s)')
    parser.add_argument('--seed', type=seed, default=0, help='(default: %(default)s)')
    return parser, parser.parse_args(argv)


def main(argv=None):
    parser, args = parse_args(argv)
    start = time.perf_counter()
    try:
        s = build_imagenet_subset(args.imagenet, args.out, num_classes=args.classes,
                                  seed=args.seed)
    except (OSError, ValueError) as e:
        parser.error(str(e))
    seconds = time.perf_counter() - start
    print(f'ImageNet subset written in {seconds:.2f} s: {s["out"]}')
    print(f'  {s["num_classes"]} of {s["num_imagenet_classes"]} classes (seed {s["seed"]}, '
          f'read from {s["source"]}): {s["num_train"]} train + {s["num_val"]} val images')
    print(f'  images stay in {s["imagenet"]}; a dataset reads the subset with '
          f'ann_file={osp.join(args.out, "meta", "train.txt")} '
          f'data_prefix={osp.join(args.imagenet, "train")} '
          f'classes={osp.join(args.out, "classes.txt")} (and the same for val)')


if __name__ == '__main__':
    run_program(main)
