"""IB and kernel-complexity report of classifiers over a dataset split (DCS paper, Table 4:
IB(W); KCR paper, Table 4 / Fig. 1: TNN, KC, KCR bounds). Works for any mmpretrain classifier
(baseline, DCS or KCR): give several CONFIG CHECKPOINT pairs to compare them side by side
(the same images, the same input centroids).

    python tools/analysis/ib_kc_report.py CONFIG CHECKPOINT [CONFIG CHECKPOINT ...]
        [--names baseline dcs ...] [--split val|train|test] [--max-images N]
        [--batch-size 32] [--s 1.0] [--gamma 0.1] [--kcr-lr ETA] [--kcr-steps 100]
        [--seed 0] [--json report.json] [--out report.md] [--cfg-options k=v ...]

Per model, over the split's images (a seeded random subset of --max-images; the train split
uses the test pipeline, no augmentation): the pre-logit features X̃
(model.head.pre_logits(model.extract_feat(x))), the input representations X (8×8 area
average, L2-normalised) and the labels Y give

* IB(W) = I(X̃;X) − I(X̃;Y) exactly, with C = classes centroids from seeded k-means on this set,
  the paper's IBB (eq. 2, optimal Q of eq. 7) with its constant term, the corrected Theorem 3.1
  bound IBB + (1/n)Σ_i H(φ(X_i,·)) ≤ IBB + log C (always ≥ IB), the Lemma D.1 slack, and whether
  IB ≤ IBB (Theorem 3.1 as printed, which can fail) and the corrected bounds hold;
* S = X̃ᵀX̃/n: TNN ‖K‖_r (r = ⌈γ·min(n, d)⌉), KC(K), and the KCR lower/upper bounds from the
  residual of t gradient-descent steps of step η on the last linear layer (default
  η = 1/λ̂_1, t = 100).

CHECKPOINT may be `none` (random weights, for a smoke test).
"""
import json
import os.path as osp
import sys
import time

try:
    import mmdcs  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from mmdcs.apis.launch import (ConfigOptions, ToolParser, UserError, add_trust_flag, batch_size,
                               positive_float, positive_int, run_program, seed,
                               set_checkpoint_trust, unit_ratio, user_errors)
from mmdcs.apis.outputs import (add_force_argument, check_output_file, refuse_overwrite,
                                write_texts)


def parse_args(argv=None):
    p = ToolParser(description='IB and kernel-complexity report of classifiers')
    p.add_argument('models', nargs='+', metavar='CONFIG CHECKPOINT',
                   help='pairs of a config and its checkpoint (`none`: random weights)')
    p.add_argument('--names', nargs='+', help='one column name per model')
    p.add_argument('--split', default='val', choices=['train', 'val', 'test'],
                   help='the config\'s dataloader to read (default val)')
    p.add_argument('--max-images', type=positive_int, default=None,
                   help='a seeded random subset of this many images (default: all)')
    p.add_argument('--batch-size', type=batch_size, default=32)
    p.add_argument('--s', type=positive_float, default=1.0, help='scale of the soft assignments φ')
    p.add_argument('--kmeans-iters', type=positive_int, default=50)
    p.add_argument('--gamma', type=unit_ratio, default=0.1, help='TNN rank ratio γ')
    p.add_argument('--kcr-lr', type=positive_float, default=None,
                   help='η of the KCR bounds\' gradient descent (default 1/λ̂_1)')
    p.add_argument('--kcr-steps', type=positive_int, default=100, help='t of the KCR bounds')
    p.add_argument('--seed', type=seed, default=0)
    p.add_argument('--device', default='cpu')
    p.add_argument('--json', help='write the reports (name → values) as JSON here')
    p.add_argument('--out', help='write the markdown table here')
    p.add_argument('--cfg-options', nargs='+', action=ConfigOptions,
                   help='override settings of every config, key=value')
    add_trust_flag(p)
    add_force_argument(p)
    args = p.parse_args(argv)
    if len(args.models) % 2:
        p.error('give CONFIG CHECKPOINT pairs (an even number of arguments)')
    n = len(args.models) // 2
    if args.names and len(args.names) != n:
        p.error(f'--names: {len(args.names)} names for {n} models')
    if args.max_images is not None and args.max_images < 1:
        p.error('--max-images must be >= 1')
    if not 0 < args.gamma <= 1:
        p.error('--gamma must be in (0, 1]')
    return args


def main(argv=None):
    args = parse_args(argv)
    with user_errors():
        set_checkpoint_trust(args)
        check_output_file(args.out, '--out')
        check_output_file(args.json, '--json')
        refuse_overwrite([args.out, args.json], args.force)
        from mmdcs.analysis.reports import classifier_report, format_report
        from mmdcs.apis.loading import dataset_batches, load_classifier
        pairs = [(args.models[i], args.models[i + 1]) for i in range(0, len(args.models), 2)]
        names = args.names or [osp.splitext(osp.basename(c))[0] for c, _ in pairs]
        if len(set(names)) != len(names):
            names = [f'{n} ({i + 1})' for i, n in enumerate(names)]
        reports = {}
        for name, (config, ckpt) in zip(names, pairs):
            t0 = time.perf_counter()
            model, cfg, scope = load_classifier(config, ckpt, args.cfg_options, args.device)
            if not hasattr(model, 'head') or not hasattr(model.head, 'pre_logits'):
                raise UserError(f'{config}: not a classifier with a head (pre_logits)')
            try:
                batches = dataset_batches(cfg, model, scope, args.split, args.max_images,
                                          args.batch_size, args.seed)
                reports[name] = classifier_report(
                    model, batches, s=args.s, gamma=args.gamma,
                    kmeans_iters=args.kmeans_iters, seed=args.seed, kcr_lr=args.kcr_lr,
                    kcr_steps=args.kcr_steps)
            except ValueError as e:
                raise UserError(f'{name}: {e}') from e
            reports[name]['config'] = config
            reports[name]['checkpoint'] = ckpt
            reports[name]['split'] = args.split
            print(f'{name}: {int(reports[name]["ib/n"])} images of the {args.split} split in '
                  f'{time.perf_counter() - t0:.0f} s', flush=True)
        text = format_report(reports)
        print('\n' + text)
        write_texts({args.out: text + '\n', args.json: json.dumps(reports, indent=1) + '\n'},
                    args.force)
        return reports


if __name__ == '__main__':
    run_program(main)
