"""The Fashion-MNIST configs (configs/demo/*_fashion*.py, configs/pretrained/*_fashion.py): one
for every config the method comparison picks on the digits, named the same with ``fashion`` for
``digits``, and each the digits config's model, optimiser, schedule and hooks on
configs/_base_/datasets/fashion_mnist_cls.py (so the digits configs' build and step tests, and
the latency tables at 64x64, hold for them). The data itself: test_datasets/test_fashion_mnist.py.
"""
import glob
import os.path as osp

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
FASHION = sorted(
    osp.relpath(p, ROOT) for d in ('demo', 'pretrained')
    for p in glob.glob(osp.join(ROOT, 'configs', d, '*_fashion*.py')))
#: what a config may set apart from its digits twin: the data, and the default paths of the
#: files a run reads (the comparison passes them as --cfg-options)
SAME = ('model', 'optim_wrapper', 'param_scheduler', 'train_cfg', 'custom_hooks',
        'val_evaluator', 'default_hooks', 'randomness')


def _twin(rel: str) -> str:
    return rel.replace('_fashion-cls.py', '_digits-cls.py').replace('_fashion.py', '_digits.py')


def _comparison_configs() -> set:
    """Every config the comparison (mmdcs/apis/compare.py) picks for the digits."""
    from mmdcs.apis.compare import (ABLATIONS, MODELS, SEARCHED, ablation_config,
                                    retrain_config, search_config)
    picked = set()
    for model, entry in MODELS.items():
        picked.add(entry['baseline'])
        picked.update(ablation_config(model, m) for m in ABLATIONS)
        for pretrained in (False, True):
            picked.update(search_config(model, m, pretrained) for m in SEARCHED)
            picked.update(retrain_config(model, m, 'default', pretrained)
                          for m in SEARCHED + ('magnitude', ))
            picked.add(retrain_config(model, 'dcs', 'default', pretrained, theta_masks=False))
    return picked


def _without_paths(cfg: dict) -> dict:
    model = cfg.get('model')
    if model and model.get('backbone', {}).get('subnet'):
        model.backbone.subnet = None
    return {k: cfg.get(k) for k in SAME}


def test_a_fashion_config_for_every_config_of_the_comparison():
    assert {_twin(rel) for rel in FASHION} == _comparison_configs()


def test_fashion_configs_are_the_digits_configs_on_fashion_mnist():
    from mmengine.config import Config
    for rel in FASHION:
        cfg, twin = (Config.fromfile(osp.join(ROOT, r)) for r in (rel, _twin(rel)))
        assert _without_paths(cfg) == _without_paths(twin), rel
        assert 'fashion' in str(cfg.get('load_from') or 'fashion'), rel
        size = cfg.model.get('cost', {}).get('target', {}).get('input_size', 64)
        assert cfg.model.backbone.get('img_size', 64) == size == 64, rel
        for key, test in (('train_dataloader', False), ('val_dataloader', True),
                          ('test_dataloader', True)):
            ds = cfg[key].dataset
            assert (ds.type, ds.data_root, ds.download, ds.test_mode, ds.split) == (
                'FashionMNIST', 'data/fashion-mnist', False, test, 'test' if test else 'train')
            assert ds.pipeline[0] == dict(type='Resize', scale=64), (rel, key)
