"""Evaluate a checkpoint with an mmpretrain, mmdet or mmseg config (mmdcs modules registered).

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out results.pkl]
                         [--metrics-out m.json] [--force] [--show-dir DIR] [--tta] [--amp]
                         [--cfg-options k=v ...] [--launcher none|pytorch|slurm|mpi]

An existing --out / --metrics-out file is not overwritten unless --force; both are written
atomically (temporary file + rename).
"""
import os
import os.path as osp
import sys

try:
    import mmdcs  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))

from mmengine.config import ConfigDict

from mmdcs.apis.launch import (ToolParser, UserError, add_cfg_options, add_trust_flag, build_runner,
                               check_config, check_data_paths, load_config, non_negative_int,
                               prepare_task, process_group_scope, run_program,
                               set_checkpoint_trust, set_work_dir, setup_cpu_distributed,
                               user_errors, watch_new_paths)
from mmdcs.apis.outputs import (add_force_argument, atomic_outputs, check_output_dir,
                                check_output_file, refuse_overwrite, write_json)

#: visualization hook of each task, for --show-dir
VIS_HOOKS = {'mmpretrain': 'VisualizationHook', 'mmdcs': 'VisualizationHook',
             'mmdet': 'DetVisualizationHook', 'mmseg': 'SegVisualizationHook'}


def parse_args(argv=None):
    parser = ToolParser(description='Test (evaluate) a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--work-dir', help='the directory to save the metrics file')
    parser.add_argument('--out', help='dump the raw predictions to this pickle file')
    parser.add_argument('--metrics-out', help='write the final metrics to this JSON file')
    parser.add_argument('--show-dir', help='save painted predictions to this directory '
                        '(relative to the run\'s log directory)')
    parser.add_argument('--tta', action='store_true',
                        help='test-time augmentation (needs tta_model and tta_pipeline in the '
                        'config)')
    parser.add_argument('--amp', action='store_true', help='fp16 inference')
    parser.add_argument('--no-pin-memory', action='store_true')
    add_cfg_options(parser)
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=non_negative_int, default=0)
    add_trust_flag(parser)
    add_force_argument(parser)
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def merge_args(cfg, args, scope):
    cfg.launcher = args.launcher
    set_work_dir(cfg, args.config, args.work_dir)
    if not osp.isfile(args.checkpoint):
        raise UserError(f'checkpoint not found: {args.checkpoint}')
    cfg.load_from = args.checkpoint
    cfg.resume = False
    if args.show_dir:
        hook = VIS_HOOKS[scope]
        cfg.default_hooks = cfg.get('default_hooks', ConfigDict())
        vis = cfg.default_hooks.get('visualization', None) or dict(type=hook)
        vis.update(enable=True, out_dir=args.show_dir) if scope in ('mmpretrain', 'mmdcs') \
            else vis.update(draw=True, test_out_dir=args.show_dir)
        cfg.default_hooks.visualization = vis
    if args.tta:
        if 'tta_model' not in cfg or 'tta_pipeline' not in cfg:
            raise UserError('--tta needs `tta_model` and `tta_pipeline` in the config')
        cfg.model = ConfigDict(**cfg.tta_model, module=cfg.model)
        test_ds = cfg.test_dataloader.dataset
        while 'dataset' in test_ds:
            test_ds = test_ds['dataset']
        test_ds.pipeline = cfg.tta_pipeline
    if args.amp:
        cfg.test_cfg = cfg.get('test_cfg', None) or ConfigDict(type='TestLoop')
        cfg.test_cfg.fp16 = True
    if args.no_pin_memory and cfg.get('test_dataloader', None) is not None:
        cfg.test_dataloader.pin_memory = False
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    # CHECKPOINT is what is evaluated, whatever the options say (e.g. the `load_from` of a
    # fine-tuning run's options, reused here: it names the weights training started from), and
    # loaded as weights: a test resumes nothing
    given = (args.cfg_options or {}).get('load_from', None)
    if given is not None and given != args.checkpoint:
        print(f'note: --cfg-options load_from={given} is ignored: tools/test.py evaluates '
              f'{args.checkpoint}', file=sys.stderr)
    if cfg.get('resume', False):
        print('note: resume is ignored: tools/test.py loads the weights of '
              f'{args.checkpoint} and resumes nothing', file=sys.stderr)
    cfg.load_from = args.checkpoint
    cfg.resume = False
    return cfg


def main(argv=None):
    args = parse_args(argv)
    with user_errors():
        if args.out and not args.out.endswith(('.pkl', '.pickle')):
            raise UserError('--out must be a .pkl or .pickle file')
        check_output_file(args.out, '--out')
        check_output_file(args.metrics_out, '--metrics-out')
        refuse_overwrite([args.out, args.metrics_out], args.force)
        cfg = load_config(args.config)
        scope = prepare_task(cfg)
        cfg = merge_args(cfg, args, scope)
        set_checkpoint_trust(args, cfg, complete=True)
        # pre-flight: nothing is created before these pass, and a run refused later (a value
        # a constructor refuses, a checkpoint) removes the work dir / log it created
        check_config(cfg, scope, 'test')
        check_output_dir(cfg.work_dir, 'work_dir (--work-dir or the config\'s work_dir)')
        check_data_paths(cfg, ('test_dataloader', ))
        watch_new_paths(cfg.work_dir)
        with process_group_scope():  # destroyed at the end, also after an error
            setup_cpu_distributed(cfg)
            runner = build_runner(cfg)
            outputs = [args.out] if args.out else []
            with atomic_outputs(*outputs, force=args.force) as temps:
                if args.out:
                    from mmengine.evaluator import DumpResults
                    runner.test_evaluator.metrics.append(DumpResults(out_file_path=temps[0]))
                metrics = runner.test()
        if args.metrics_out and runner.rank == 0:
            write_json(args.metrics_out, {k: float(v) for k, v in metrics.items()},
                       force=args.force)


if __name__ == '__main__':
    run_program(main)
