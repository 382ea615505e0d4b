"""The DeiT-Tiny demo configs of the DCS/KCR side of `tools/demo.py --peers` build and share the
DeiT-Tiny baseline's schedule (the OFB and DynamicViT ones are tested in tests/test_peers)."""
import os.path as osp

import pytest
import torch

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _cfg(name, **options):
    from mmengine.config import Config
    cfg = Config.fromfile(osp.join(ROOT, 'configs/demo', name))
    cfg.merge_from_dict(options)
    return cfg


def _build(cfg):
    from mmdcs.apis.subnet_io import build_model
    return build_model(cfg.model, 'mmpretrain').eval()


@pytest.mark.parametrize('kind', ['dcs', 'kcr'])
def test_deit_tiny_search_and_retrain_configs_build(kind, tmp_path):
    from mmdcs.analysis.complexity import random_subnet
    from mmdcs.models.backbones.vit import ViT
    search = _cfg(f'{kind}-deit-tiny_search_digits.py')
    model = _build(search)
    assert isinstance(model.backbone, ViT) and model.backbone.variant == kind
    assert model.backbone.is_supernet and model.backbone.img_size == (64, 64)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert model(x, mode='tensor').shape == (2, 10)
    spec = random_subnet(ViT, 'deit-tiny', kind, 0.6, img_size=64)
    path = str(tmp_path / 'subnet.json')
    spec.save(path)
    retrain = _cfg(f'{kind}-deit-tiny_retrain_digits.py', **{'model.backbone.subnet': path})
    pruned = _build(retrain)
    assert not pruned.backbone.is_supernet
    with torch.no_grad():
        assert pruned(x, mode='tensor').shape == (2, 10)
    assert retrain.model.regularizer.type == ('ib' if kind == 'dcs' else 'kcr')


def test_deit_tiny_demos_share_the_weight_schedule():
    base = _cfg('deit-tiny_digits-cls.py')
    lr, wd = base.optim_wrapper.optimizer.lr, base.optim_wrapper.optimizer.weight_decay
    for kind in ('dcs', 'kcr'):
        search = _cfg(f'{kind}-deit-tiny_search_digits.py')
        assert (search.optim_wrapper.weight.optimizer.lr,
                search.optim_wrapper.weight.optimizer.weight_decay) == (lr, wd)
        retrain = _cfg(f'{kind}-deit-tiny_retrain_digits.py')
        assert (retrain.optim_wrapper.optimizer.lr,
                retrain.optim_wrapper.optimizer.weight_decay) == (lr, wd)
        assert search.train_cfg.max_epochs == retrain.train_cfg.max_epochs == base.max_epochs
