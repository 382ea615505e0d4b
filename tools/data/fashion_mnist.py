"""Place Fashion-MNIST where mmpretrain's FashionMNIST reads it (logic in
mmdcs/datasets/fashion_mnist.py).

    python tools/data/fashion_mnist.py                      # data/fashion-mnist
    python tools/data/fashion_mnist.py --from DIR           # the four idx files (.gz or not)
    python tools/data/fashion_mnist.py --out DIR --no-download

Writes OUT/train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
t10k-labels-idx1-ubyte (uncompressed, each checked against the release's sha256) and, last,
OUT/placement.json. Sources, in this order: --from DIR (then the only one); Debian's
dataset-fashion-mnist package (the installed one, else apt-get download + dpkg-deb -x, no root
needed); mmpretrain's download (needs the internet). A complete placement is reused as it is; a
file of another content in OUT is refused, never replaced. None of the ways: one line, exit 2.
"""
import os.path as osp
import sys
import time

try:
    import mmdcs  # noqa: F401
except ImportError:  # not installed: use the checkout this script lives in
    sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from mmdcs.apis.launch import ToolParser, UserError, user_errors  # noqa: E402
from mmdcs.datasets.fashion_mnist import FashionMNISTError, place_fashion_mnist  # noqa: E402


def parse_args(argv=None):
    parser = ToolParser(
        description="Place Fashion-MNIST's four idx files where mmpretrain's FashionMNIST "
        'reads them, checksums verified.')
    parser.add_argument('--out', default='data/fashion-mnist',
                        help='the dataset folder (default: %(default)s)')
    parser.add_argument('--from', dest='source', metavar='DIR',
                        help='a folder holding the four idx files, gzipped or not (then the '
                        'only source tried)')
    parser.add_argument('--no-apt', action='store_true',
                        help="do not try Debian's dataset-fashion-mnist package")
    parser.add_argument('--no-download', action='store_true',
                        help="do not try mmpretrain's download (the internet)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    start = time.perf_counter()
    with user_errors():
        try:
            result = place_fashion_mnist(
                args.out, source=args.source, apt=not args.no_apt,
                download=not args.no_download,
                log=lambda line: print(f'  not from the {line}', flush=True))
        except FashionMNISTError as e:
            raise UserError(str(e)) from e
    state = 'up to date, kept' if result['skipped'] else 'placed'
    print(f'Fashion-MNIST {state} in {time.perf_counter() - start:.1f} s: {result["out_dir"]} '
          f'(from {result["source"]})')
    print('  60,000 train + 10,000 test images, 28x28 grey, 10 classes; read by mmpretrain\'s '
          'FashionMNIST (configs/_base_/datasets/fashion_mnist_cls.py)')


if __name__ == '__main__':
    main()
