"""How hard the IB / KCR retraining term pulls against the cross-entropy (method.md §4.3).

    python tools/analysis/regularizer_grad.py CONFIG CHECKPOINT [--batches 8]
        [--fill-images 1438] [--batch-size 32] [--eta ETA] [--normalize both|true|false]
        [--json out.json] [--cfg-options k=v ...]

CONFIG is a retraining config with ``model.regularizer`` (e.g.
configs/demo/kcr-deit-tiny_retrain_digits.py); CHECKPOINT its weights at the switch-on (the
epoch ``t_warm`` checkpoint of a run). The regulariser's statistics are refreshed from one pass
over the training split (the test pipeline: no augmentation) with the checkpoint's weights, as
the hook does at the end of the last warm-up epoch; then, on --batches batches, the gradients of
CE and of η·term on the same parameters: norms, ratio, cosine, and the share of the CE gradient
left after the config's gradient clipping. ``--normalize both`` measures the term on the raw
features (the papers') and on the L2-normalised ones (the mmdcs default).
"""
import json
import os.path as osp
import sys

try:
    import mmdcs  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from mmdcs.apis.launch import (ConfigOptions, ToolParser, UserError, add_trust_flag, batch_size,
                               positive_float, positive_int, run_program, seed,
                               set_checkpoint_trust, user_errors)
from mmdcs.apis.outputs import add_force_argument, check_output_file, refuse_overwrite, write_texts


def parse_args(argv=None):
    p = ToolParser(description='gradient of the IB / KCR term against the cross-entropy')
    p.add_argument('config')
    p.add_argument('checkpoint', help='weights at the switch-on (`none`: random weights)')
    p.add_argument('--batches', type=positive_int, default=8, help='batches measured')
    p.add_argument('--fill-images', type=positive_int, default=None,
                   help='training images of the refresh pass (default: all)')
    p.add_argument('--batch-size', type=batch_size, default=32)
    p.add_argument('--eta', type=positive_float, default=None, help='η (default: the config\'s)')
    p.add_argument('--normalize', default='both', choices=['both', 'true', 'false'])
    p.add_argument('--seed', type=seed, default=0)
    p.add_argument('--json', help='write the results here')
    p.add_argument('--cfg-options', nargs='+', action=ConfigOptions,
                   help='override settings of the config, key=value')
    add_trust_flag(p)
    add_force_argument(p)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    with user_errors():
        set_checkpoint_trust(args)
        check_output_file(args.json, '--json')
        refuse_overwrite([args.json], args.force)
        from mmdcs.analysis.regularizer_grad import fill_state, gradient_shares
        from mmdcs.apis.loading import dataset_batches, load_classifier
        from mmdcs.regularizers import build_regularizer
        model, cfg, scope = load_classifier(args.config, args.checkpoint, args.cfg_options)
        if getattr(model, 'regularizer', None) is None:
            raise UserError(f'{args.config}: the model has no regularizer (model.regularizer)')
        reg_cfg = dict(cfg.model.regularizer)
        for key in ('eta', 't_warm', 'ramp', '_delete_'):
            reg_cfg.pop(key, None)
        eta = args.eta if args.eta is not None else model.reg_cfg['eta']
        clip = (cfg.get('optim_wrapper', {}).get('clip_grad') or {}).get('max_norm')
        choices = {'both': (False, True), 'true': (True, ), 'false': (False, )}[args.normalize]
        results = {}
        for normalize in choices:
            reg = build_regularizer(dict(reg_cfg, normalize=normalize), model._feature_dim(),
                                    getattr(model.head, 'num_classes', None))

            def batches(limit=None, split='train'):
                it = dataset_batches(cfg, model, scope, split, args.fill_images,
                                     args.batch_size, args.seed)
                for i, b in enumerate(it):
                    if limit is not None and i >= limit:
                        return
                    yield b

            report = fill_state(model, reg, batches())
            shares = gradient_shares(model, reg, batches(args.batches), eta, clip, args.seed)
            key = f'normalize={normalize}'
            results[key] = dict(shares, eta=eta, clip=clip, refresh={
                k: v for k, v in report.items() if isinstance(v, float)})
            print(f'{key:>16}: CE {shares["ce"]:.3f}  term {shares["term"]:.4g}  '
                  f'‖∇CE‖ {shares["grad_ce"]:.3g}  ‖η∇term‖ {shares["grad_reg"]:.3g}  '
                  f'ratio {shares["ratio"]:.3g} (head {shares["ratio_head"]:.3g}, backbone '
                  f'{shares["ratio_backbone"]:.3g})  cos {shares["cos"]:+.2f}'
                  + (f'  CE kept after clip {shares["ce_kept_after_clip"]:.2f} (CE alone '
                     f'{shares["ce_kept_without_term"]:.2f})' if clip else ''), flush=True)
        write_texts({args.json: json.dumps(dict(config=args.config, checkpoint=args.checkpoint,
                                                results=results), indent=1) + '\n'},
                    args.force)
        return results


if __name__ == '__main__':
    run_program(main)
