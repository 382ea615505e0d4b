"""Retraining with the IB / KCR terms: RegularizerHook, checkpoints, resume, input checks."""
import os.path as osp

import pytest
import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.registry import DefaultScope

from mmdcs.engine.hooks import CHECKPOINT_KEY
from mmdcs.registry import MODELS
from mmdcs.utils.checkpoint import load_checkpoint_file

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _write_subnet(path, variant, seed=0):
    """A subnet of MobileViT-XS with random α (what tools/export_subnet.py would write)."""
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        sup = MODELS.build(dict(type='mmdcs.MobileViT', arch='mobilevit-xs', variant=variant))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in sup.parameters():
            pass
        from mmdcs.selection import arch_parameters
        for a in arch_parameters(sup):
            a.copy_(torch.randn(a.shape, generator=g) + 1.0)
    sup.export_subnet().save(path)
    return path


def _retrain_cfg(kind, data_root, work_dir, subnet, epochs=2, **extra):
    cfg = Config.fromfile(osp.join(ROOT, f'configs/demo/{kind}-mobilevit-xs_retrain_digits.py'))
    cls = osp.join(data_root, 'cls')
    cfg.merge_from_dict({
        'work_dir': work_dir, 'train_cfg.max_epochs': epochs, 'model.backbone.subnet': subnet,
        'model.regularizer.t_warm': 1,
        'train_dataloader.dataset.data_root': cls, 'val_dataloader.dataset.data_root': cls,
        'train_dataloader.num_workers': 0, 'train_dataloader.persistent_workers': False,
        'val_dataloader.num_workers': 0, 'val_dataloader.persistent_workers': False,
        # 48 images: 3 steps an epoch
        'train_dataloader.batch_size': 16, 'train_dataloader.dataset.indices': 48,
        'default_hooks.logger.interval': 1,
        'default_hooks.checkpoint.save_best': None, 'default_hooks.checkpoint.max_keep_ckpts': -1,
    })
    cfg.merge_from_dict(extra)
    return cfg


class _CaptureState(Hook):
    priority = 'VERY_LOW'

    def __init__(self):
        self.state = None

    def before_train(self, runner):
        self.state = runner.model.regularizer.state_dict()


@pytest.mark.xdist_group('train')
@pytest.mark.parametrize('kind', ['dcs', 'kcr'])
def test_retrain_logs_reports_checkpoints_and_resumes_the_state(kind, tiny_digits, tmp_path):
    from mmengine.runner import Runner
    subnet = _write_subnet(str(tmp_path / 'subnet.json'), kind)
    cfg = _retrain_cfg(kind, tiny_digits, str(tmp_path / 'run'), subnet, epochs=2)
    runner = Runner.from_cfg(cfg)
    runner.train()
    assert runner.model.reg_active  # epoch 1 ≥ t_warm = 1
    saved = load_checkpoint_file(osp.join(str(tmp_path / 'run'), 'epoch_2.pth'))
    reg = saved[CHECKPOINT_KEY]
    assert reg['type'] == ('ib' if kind == 'dcs' else 'kcr')
    log = open(osp.join(runner.log_dir, f'{runner.timestamp}.log')).read()
    if kind == 'dcs':
        assert 'ib state refreshed' in log and 'ib: ' in log and 'loss_ib' in log
    else:
        assert 'kcr state refreshed' in log and 'tnn: ' in log and 'kc: ' in log
        assert 'loss_kcr' in log

    # resume from epoch 1: the state is restored exactly before training goes on
    ckpt1 = osp.join(str(tmp_path / 'run'), 'epoch_1.pth')
    expected = load_checkpoint_file(ckpt1)[CHECKPOINT_KEY]['state']
    cfg2 = _retrain_cfg(kind, tiny_digits, str(tmp_path / 'resumed'), subnet, epochs=2,
                        resume=True, load_from=ckpt1)
    runner2 = Runner.from_cfg(cfg2)
    capture = _CaptureState()
    runner2.register_hook(capture)
    runner2.train()
    assert capture.state.keys() == expected.keys()
    for k in expected:
        assert torch.equal(capture.state[k].cpu(), expected[k]), k


def test_t_warm_beyond_max_epochs_and_class_mismatch_are_refused(tiny_digits, tmp_path):
    from mmengine.runner import Runner
    subnet = _write_subnet(str(tmp_path / 'subnet.json'), 'kcr')
    cfg = _retrain_cfg('kcr', tiny_digits, str(tmp_path / 'a'), subnet, epochs=2,
                       **{'model.regularizer.t_warm': 2})
    with pytest.raises(ValueError, match='t_warm = 2 is not below max_epochs = 2'):
        Runner.from_cfg(cfg).train()
    cfg = _retrain_cfg('kcr', tiny_digits, str(tmp_path / 'b'), subnet, epochs=2,
                       **{'model.head.num_classes': 7})
    with pytest.raises(ValueError, match='num_classes = 7 but the training set has 10'):
        Runner.from_cfg(cfg).train()


# a search under DDP (2 gloo processes, tools/dist_train.sh): one run with the other DDP checks,
# tests/test_tools/test_train_test.py::test_dist_train_two_processes_gloo


def test_hook_ramps_eta_by_iteration_and_the_loss_uses_it():
    """RegularizerHook sets model.reg_scale = eta_ramp(iteration) before every iteration (a
    function of runner.iter, so a resumed run gets the same value) and logs η in force; the
    classifier's loss_kcr is η·reg_scale·KCR_j (method.md §4.3)."""
    import types
    from mmdcs.engine.hooks import RegularizerHook
    from mmdcs.regularizers import eta_ramp
    from mmpretrain.structures import DataSample
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(dict(
            type='mmdcs.ChannelSelectionClassifier',
            backbone=dict(type='mmdcs.ViT', arch='deit-tiny', img_size=32),
            head=dict(type='LinearClsHead', num_classes=10, in_channels=192,
                      loss=dict(type='CrossEntropyLoss')),
            data_preprocessor=dict(type='ClsDataPreprocessor', num_classes=10),
            regularizer=dict(type='kcr', eta=2., t_warm=1, ramp=2.)))
    assert model.reg_cfg == dict(type='kcr', eta=2., t_warm=1, ramp=2.)
    logged = {}
    hub = types.SimpleNamespace(update_scalar=lambda k, v: logged.__setitem__(k, v))
    loop = types.SimpleNamespace(dataloader=[None] * 5)
    runner = types.SimpleNamespace(model=model, train_loop=loop, message_hub=hub, iter=0)
    hook = RegularizerHook()
    for it in range(20):
        runner.iter = it
        hook.before_train_iter(runner, it % 5)
        assert model.reg_scale == eta_ramp(it, 5, 1, 2.)
        assert logged['train/reg_eta'] == pytest.approx(2. * model.reg_scale)
    assert [eta_ramp(i, 5, 1, 2.) for i in (4, 5, 9, 14)] == [0, 0.1, 0.5, 1]

    g = torch.Generator().manual_seed(0)
    imgs = [torch.randint(0, 255, (3, 32, 32), generator=g, dtype=torch.uint8)
            for _ in range(8)]
    data = model.data_preprocessor(dict(
        inputs=imgs, data_samples=[DataSample().set_gt_label(i % 10) for i in range(8)]), True)
    model.train()
    with torch.no_grad():  # one epoch of statistics, then the term with a known weight
        model.regularizer.begin_epoch()
        model(**data, mode='loss')
        model.regularizer.end_epoch()
        model.reg_active = True
        feats = model.head.pre_logits(model.extract_feat(data['inputs']))
        labels = torch.arange(8) % 10
        for scale in (0.3, 1.0):
            model.reg_scale = scale
            torch.manual_seed(1)
            got = model(**data, mode='loss')['loss_kcr']
            torch.manual_seed(1)
            feats = model.head.pre_logits(model.extract_feat(data['inputs']))
            term = model.regularizer.batch_loss(feats, labels)['loss']
            assert float(got) == pytest.approx(2. * scale * float(term), rel=1e-5)
