"""The search loop's progress and mid-epoch resume: an epoch is every step of both kinds (the
log's denominator, ``end_of_epoch``, the runner's ``max_iters``), and resuming from a checkpoint
taken in the middle of an epoch runs only the steps still due, with the batches of the
uninterrupted run."""
import os.path as osp

import pytest
import torch
from mmengine.config import Config

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


@pytest.fixture(scope='module')
def small_digits(tmp_path_factory):
    """6 images per class (a few dozen training images: 7 steps of batch 8 per epoch)."""
    from mmdcs.datasets.digits import build_classification
    out = tmp_path_factory.mktemp('digits_small')
    build_classification(str(out), size=64, seed=0, max_per_class=6)
    return str(out)


def _cfg(data_root, work_dir, **extra):
    cfg = Config.fromfile(osp.join(ROOT, 'configs/demo/dcs-mobilevit-xs_search_digits.py'))
    cls = osp.join(data_root, 'cls')
    cfg.merge_from_dict({
        'work_dir': work_dir, 'train_cfg.max_epochs': 1,
        'train_dataloader.dataset.data_root': cls, 'train_dataloader.num_workers': 0,
        'train_dataloader.persistent_workers': False, 'train_dataloader.batch_size': 8,
        'default_hooks.logger.interval': 1, 'log_level': 'WARNING',
        'default_hooks.checkpoint.save_best': None, 'default_hooks.checkpoint.max_keep_ckpts': -1,
    })
    cfg.val_dataloader = cfg.val_cfg = cfg.val_evaluator = None
    cfg.test_dataloader = cfg.test_cfg = cfg.test_evaluator = None
    cfg.merge_from_dict(extra)
    return cfg


class _Record:
    """Per training step: batch index, global iteration, the log line's [k/N], the labels."""

    def __init__(self):
        self.steps = []

    def hook(self):
        from mmengine.hooks import Hook
        rec = self

        class _H(Hook):
            priority = 'VERY_LOW'

            def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
                _, line = runner.log_processor.get_log_after_iter(runner, batch_idx, 'train')
                labels = tuple(int(ds.gt_label) for ds in data_batch['data_samples'])
                rec.steps.append(dict(
                    idx=batch_idx, iter=runner.iter, line=line, labels=labels,
                    kind=runner.train_loop.model.step_kind or outputs and (
                        'arch' if any(k.startswith('arch_') for k in outputs) else 'weight'),
                    epoch_end=self.end_of_epoch(runner.train_dataloader, batch_idx),
                    max_iters=runner.max_iters, loader_len=len(runner.train_dataloader)))
        return _H()


def _run(cfg, record):
    from mmengine.runner import Runner
    runner = Runner.from_cfg(cfg)
    runner.register_hook(record.hook())
    runner.train()
    return runner


@pytest.mark.xdist_group('train')
def test_progress_counts_both_kinds_of_steps(small_digits, tmp_path):
    rec = _Record()
    runner = _run(_cfg(small_digits, str(tmp_path)), rec)
    loop = runner.train_loop
    weight_loader = getattr(loop, 'weight_dataloader', loop.dataloader)
    steps = len(weight_loader) + len(loop.arch_dataloader)
    assert loop.steps_per_epoch == steps
    assert len(weight_loader) > len(loop.arch_dataloader) > 0
    assert [s['idx'] for s in rec.steps] == list(range(steps))
    assert {s['loader_len'] for s in rec.steps} == {steps}
    assert {s['max_iters'] for s in rec.steps} == {steps}
    # the log line's denominator is the epoch's steps: [1/7] ... [7/7], never [7/5]
    assert all(f'[{i + 1}/{steps}]' in s['line'] for i, s in enumerate(rec.steps)), \
        [s['line'][:40] for s in rec.steps]
    assert [s['epoch_end'] for s in rec.steps] == [False] * (steps - 1) + [True]
    n_arch = len(loop.arch_dataloader)
    assert sorted(s['kind'] for s in rec.steps) == ['arch'] * n_arch + ['weight'] * (steps - n_arch)


@pytest.mark.xdist_group('train')
def test_resume_mid_epoch_continues_where_it_stopped(small_digits, tmp_path):
    ckpt_hook = dict(type='CheckpointHook', interval=4, by_epoch=False, max_keep_ckpts=-1,
                     save_last=False)
    full = _Record()
    _run(_cfg(small_digits, str(tmp_path / 'full'), **{'default_hooks.checkpoint': ckpt_hook}),
         full)
    ckpt = str(tmp_path / 'full' / 'iter_4.pth')
    assert osp.isfile(ckpt)
    assert torch.load(ckpt, map_location='cpu', weights_only=False)['meta']['iter'] == 4

    resumed = _Record()
    runner = _run(_cfg(small_digits, str(tmp_path / 'resumed'), resume=True, load_from=ckpt,
                       **{'default_hooks.checkpoint': ckpt_hook}), resumed)
    steps = runner.train_loop.steps_per_epoch
    assert steps == len(full.steps) > 5
    # the steps still due (4 were done), not the whole epoch again
    assert [s['idx'] for s in resumed.steps] == list(range(4, steps))
    assert runner.iter == steps and runner.epoch == 1
    # ... with the batches (and kinds) the uninterrupted run had at those steps
    assert [(s['labels'], s['kind']) for s in resumed.steps] == \
        [(s['labels'], s['kind']) for s in full.steps[4:]]
