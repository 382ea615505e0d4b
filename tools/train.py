"""Train an mmpretrain, mmdet or mmseg config (with mmdcs modules registered).

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT]] [--amp] [--auto-scale-lr]
                          [--cfg-options k=v ...] [--launcher none|pytorch|slurm|mpi]

The task is read from the config's ``default_scope``; everything trains through mmengine's
Runner, as in mmpretrain's and mmdet's ``tools/train.py`` (same arguments).
"""
import os
import os.path as osp
import sys
from copy import deepcopy

try:
    import mmdcs  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))

from mmengine.config import ConfigDict

from mmdcs.apis.launch import (ToolParser, UserError, add_cfg_options, add_trust_flag, build_runner,
                               check_config, check_data_paths, check_schedule, enable_amp,
                               load_config, non_negative_int, prepare_task, process_group_scope,
                               run_program, set_checkpoint_trust, set_work_dir,
                               setup_cpu_distributed, user_errors, watch_new_paths)
from mmdcs.apis.outputs import check_output_dir


def parse_args(argv=None):
    parser = ToolParser(description='Train a model (mmpretrain/mmdet/mmseg config)')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument(
        '--resume', nargs='?', type=str, const='auto',
        help='resume from this checkpoint; without a path, resume from the latest checkpoint '
        'in the work directory')
    parser.add_argument('--amp', action='store_true', help='automatic mixed precision (CUDA)')
    parser.add_argument('--no-validate', action='store_true',
                        help='do not evaluate checkpoints during training')
    parser.add_argument('--auto-scale-lr', action='store_true',
                        help='scale the lr by (actual batch size / auto_scale_lr.base_batch_size)')
    parser.add_argument('--no-pin-memory', action='store_true',
                        help='disable pin_memory in the dataloaders')
    parser.add_argument('--no-persistent-workers', action='store_true',
                        help='disable persistent_workers in the dataloaders')
    add_cfg_options(parser)
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=non_negative_int, default=0)
    add_trust_flag(parser)
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def merge_args(cfg, args):
    """Apply the command line to the config (mmpretrain's rules)."""
    if args.no_validate:
        cfg.val_cfg = None
        cfg.val_dataloader = None
        cfg.val_evaluator = None
    cfg.launcher = args.launcher
    set_work_dir(cfg, args.config, args.work_dir)
    if args.amp:
        enable_amp(cfg)
    if args.resume == 'auto':
        cfg.resume = True
        cfg.load_from = None
    elif args.resume is not None:
        if not osp.isfile(args.resume):
            raise UserError(f'--resume: checkpoint not found: {args.resume}')
        cfg.resume = True
        cfg.load_from = args.resume
    if args.auto_scale_lr:
        if 'auto_scale_lr' not in cfg or 'base_batch_size' not in cfg.auto_scale_lr:
            raise UserError('--auto-scale-lr needs `auto_scale_lr = dict(base_batch_size=N)` '
                            'in the config')
        cfg.auto_scale_lr.enable = True

    default_loader = ConfigDict(pin_memory=True, persistent_workers=True)
    for field in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        if cfg.get(field, None) is None:
            continue
        loader = deepcopy(default_loader)
        loader.update(cfg[field])
        if args.no_pin_memory:
            loader['pin_memory'] = False
        if args.no_persistent_workers:
            loader['persistent_workers'] = False
        cfg[field] = loader
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    for field in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        # torch refuses persistent workers without workers (e.g. num_workers=0 on the CLI)
        if cfg.get(field, None) is not None and cfg[field].get('num_workers', 0) == 0:
            cfg[field]['persistent_workers'] = False
    return cfg


def main(argv=None):
    args = parse_args(argv)
    with user_errors():
        cfg = load_config(args.config)
        scope = prepare_task(cfg)
        cfg = merge_args(cfg, args)
        set_checkpoint_trust(args, cfg, resume=True)
        # pre-flight: nothing is created before these pass, and a run refused later (a value
        # a constructor refuses, a checkpoint) removes the work dir / log it created
        check_config(cfg, scope, 'train')
        check_output_dir(cfg.work_dir, 'work_dir (--work-dir or the config\'s work_dir)')
        check_data_paths(cfg, ('train_dataloader', 'val_dataloader'))
        check_schedule(cfg)
        watch_new_paths(cfg.work_dir)
        with process_group_scope():  # destroyed at the end, also after an error
            setup_cpu_distributed(cfg)
            runner = build_runner(cfg)
            runner.train()


if __name__ == '__main__':
    run_program(main)
