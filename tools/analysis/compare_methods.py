"""Compare DCS, KCR and the plain pruners at equal FLOPs or equal latency on the digits or
Fashion-MNIST, over seeds (docs/user_guide/compare.md).

    python tools/analysis/compare_methods.py --models deit-tiny mobilevit-xs \\
        --methods dcs kcr magnitude uniform random taylor --budgets 0.9 0.7 0.5 \\
        --seeds 0 1 2 [--epochs N] [--train-images N] [--pretrained] [--search-epochs N] \\
        [--retrain default|ce-only] [--no-theta-masks] [--resource flops|latency] \\
        [--arch-lr LR] [--no-latency] --out DIR

Every method runs on the same schedule: from scratch (default) each pruned network is retrained
from random weights (only the width allocation differs between the methods, and DCS/KCR's
retraining terms); with --pretrained a baseline is trained per seed and every method prunes it
and fine-tunes from the inherited weights (the choice of channels counts too). DIR/results.json
(one row per run; rows already there are skipped: resumable), DIR/summary.md (mean ± std
top-1, ratios, paired differences against magnitude), DIR/accuracy_vs_cost.png and
DIR/widths.png (per-block kept widths of each method). Logs and checkpoints under DIR/runs/.
Grids run apart (one process per model or per seed, each with its own --out and the same
settings; on 2 cores two one-thread processes train faster than one) are joined with
``--merge SRC [SRC ...] --out DIR``: their rows in DIR/results.json and DIR's reports.

``--resource latency``: the budgets are latency ratios of the baseline backbone, predicted by a
latency table of the network each method exports (DCS's supernet, KCR's, the pruners' baseline
with MLP channel selection), measured on this CPU at 64x64, batch 1, one thread before the first
run and kept in DIR/tables/ (read back when resumed); every model prunes hidden units too
(DeiT-Tiny its MLPs', MobileViT-XS also its MV2 blocks'). DCS and KCR search at the latency
target, magnitude / Taylor rank per unit of predicted latency, uniform takes the largest single
kept ratio whose predicted latency meets it, random the widths of KCR (or magnitude). Each row
has the predicted and the measured latency ratio, FLOPs and params beside; the plot's x-axis is
the measured ratio. A budget below a table's predicted floor is refused before any training.
``--dataset fashion-mnist`` (with ``--pretrained``): one baseline trained for
``--baseline-epochs`` (or read with ``--baseline-from WORK_DIR``) that every method and seed
prunes, every method trained as many images after it (a search's epochs counted), the ablation
arms ``dcs-ce`` / ``dcs-kcr`` at DCS's widths, latency tables at batch 16 and every export
corrected by measurement; ``summary.md`` adds the baseline's curve, the noise floor and 95 % t
intervals (docs/user_guide/compare.md). ``--tables DIR --tables-only``: measure the latency
tables (shared by grids run apart) and check the budgets, then stop.
``--arch-lr LR``: the architecture optimiser's lr of the searches (the alpha-lr ablation; its
cosine floor stays at a tenth of it).
"""
import os.path as osp
import sys
import warnings

# setuptools' notice about mmengine importing pkg_resources is not for the user of this tool
warnings.filterwarnings('ignore', message='pkg_resources is deprecated')

try:
    import mmdcs  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from mmdcs.apis.compare import (DATASETS, METHODS, MODELS, RESOURCES, RETRAIN,  # noqa: E402
                                Protocol, compare, merge)
from mmdcs.apis.launch import (ToolParser, non_negative_int, open_ratio, positive_float,
                               positive_int, run_program, seed, user_errors)  # noqa: E402
from mmdcs.apis.outputs import check_output_dir  # noqa: E402


def parse_args(argv=None):
    p = ToolParser(description='Compare DCS/KCR with magnitude, uniform, random and Taylor '
                   'pruning at equal FLOPs or latency over seeds (digits or Fashion-MNIST, 64x64)')
    p.add_argument('--models', nargs='+', choices=tuple(MODELS), default=['deit-tiny'])
    p.add_argument('--methods', nargs='+', choices=METHODS,
                   default=['dcs', 'kcr', 'magnitude', 'uniform'])
    p.add_argument('--budgets', nargs='+', type=open_ratio, default=[0.9, 0.7], metavar='R',
                   help='budgets, ratios of the baseline classifier\'s FLOPs (or, with '
                   '--resource latency, of the baseline backbone\'s latency; default: 0.9 0.7)')
    p.add_argument('--seeds', nargs='+', type=seed, default=[0, 1, 2])
    p.add_argument('--epochs', type=positive_int, default=4,
                   help='epochs of every training run (default: %(default)s)')
    p.add_argument('--dataset', choices=tuple(DATASETS), default='digits',
                   help='the data set and its protocol (fashion-mnist: one trained baseline '
                   'that every method and seed prunes, equal training, latency met as '
                   'measured; default: %(default)s)')
    p.add_argument('--train-images', type=non_negative_int, default=None, metavar='N',
                   help='train on the first N training images (0: all; default: all for the '
                   'digits, 10000 for fashion-mnist)')
    p.add_argument('--val-images', type=non_negative_int, default=0, metavar='N',
                   help='validate on the first N test images (0: all; default: %(default)s)')
    p.add_argument('--baseline-epochs', type=positive_int, default=None, metavar='N',
                   help='epochs of the shared baseline (default: 12 for fashion-mnist, '
                   'else --epochs)')
    p.add_argument('--baseline-from', default=None, metavar='WORK_DIR',
                   help='prune the baseline tools/train.py trained into WORK_DIR (its last '
                   'checkpoint, validated after each of its --baseline-epochs) instead of '
                   'training one')
    p.add_argument('--pretrained', action='store_true',
                   help='prune a trained baseline per seed and fine-tune from its weights')
    p.add_argument('--search-epochs', type=positive_int, default=None, metavar='N',
                   help='epochs of the DCS/KCR search (default: --epochs)')
    p.add_argument('--pruner-epochs', type=positive_int, default=None, metavar='N',
                   help='with --pretrained: fine-tuning epochs of magnitude, uniform, random '
                   'and Taylor (default: --epochs; --epochs + --search-epochs trains them as '
                   'long as a search and its fine-tuning)')
    p.add_argument('--retrain', choices=RETRAIN, default='default',
                   help='DCS/KCR retraining: with their regulariser (default) or cross-entropy '
                   'only (the ablation)')
    p.add_argument('--no-theta-masks', action='store_true',
                   help='retrain the DCS subnets without their Linear_θ Q/K masks (the same kept '
                   'MLP channels; the ablation: their FLOPs ratio is counted again)')
    p.add_argument('--resource', choices=RESOURCES, default='flops',
                   help='what the budgets are ratios of: FLOPs, or latency predicted by a table '
                   'measured here (DIR/tables; default: %(default)s)')
    p.add_argument('--arch-lr', type=positive_float, default=None, metavar='LR',
                   help='lr of the DCS/KCR architecture optimiser (default: the search '
                   'config\'s, 0.2)')
    p.add_argument('--select-heads', action='store_true',
                   help='DCS, KCR and magnitude prune attention heads too (a gate per head in '
                   'the searches; the head-selection ablation, at equal FLOPs)')
    p.add_argument('--no-latency', action='store_true',
                   help='do not measure the latency ratio of each pruned model')
    p.add_argument('--data', default=None,
                   help='the data set\'s folder (default: data/digits, built by '
                   'tools/data/build_digits.py; data/fashion-mnist, placed by '
                   'tools/data/fashion_mnist.py)')
    p.add_argument('--tables', default=None, metavar='DIR',
                   help='with --resource latency: the latency tables\' folder (default: '
                   'OUT/tables; grids run apart share one)')
    p.add_argument('--tables-only', action='store_true',
                   help='measure (or read) the latency tables, check the budgets, run nothing')
    p.add_argument('--merge', nargs='+', default=None, metavar='SRC',
                   help='merge the results of grids run apart (e.g. one process per model or '
                   'seed, each with its own --out and the same settings) into --out and write '
                   'its reports; runs nothing')
    p.add_argument('--out', required=True, help='output directory (resumed if it holds '
                   'results.json of the same settings)')
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    with user_errors():
        check_output_dir(args.out, '--out')
        if args.merge:
            merge(args.merge, args.out)
            return
        dataset = DATASETS[args.dataset]
        train_images = (dataset.get('train_images', 0) if args.train_images is None
                        else args.train_images)
        protocol = Protocol.of(args.dataset, args.baseline_epochs, args.baseline_from,
                               args.val_images)
        compare(args.models, args.methods, args.budgets, args.seeds, args.out, args.epochs,
                train_images, args.pretrained, args.resource, args.data or dataset['data'],
                args.search_epochs, args.retrain, not args.no_latency,
                not args.no_theta_masks, arch_lr=args.arch_lr,
                pruner_epochs=args.pruner_epochs, select_heads=args.select_heads,
                protocol=protocol, tables_only=args.tables_only, tables_dir=args.tables)


if __name__ == '__main__':
    run_program(main)
