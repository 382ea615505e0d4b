"""Pruning a pretrained model (configs/pretrained/): the DCS / KCR supernet initialised from a
baseline checkpoint computes the baseline's eval output at the start (gates open, Linear_θ's
weight 0); the fine-tuning configs and the ImageNet-scale ones (timm weights converted with
tools/convert/timm_to_mmdcs.py) parse and build."""
import os.path as osp

import pytest
import torch

from _tools import assert_close_scaled  # noqa: E402 (tests/ is on sys.path)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
SELECTION = ('.qk_select.', '.select.', '.hidden_select.', 'gate.tau', 'cost')


def _cfg(rel, **options):
    from mmengine.config import Config
    cfg = Config.fromfile(osp.join(ROOT, rel))
    cfg.merge_from_dict(options)
    return cfg


def _build(cfg):
    from mmdcs.apis.subnet_io import build_model
    return build_model(cfg.model, 'mmpretrain')


@pytest.mark.parametrize('model', ['deit-tiny', 'mobilevit-xs'])
@pytest.mark.parametrize('kind', ['dcs', 'kcr'])
def test_supernet_from_a_baseline_starts_as_the_baseline(model, kind):
    from mmengine.runner.checkpoint import load_state_dict
    torch.manual_seed(0)
    base = _build(_cfg(f'configs/demo/{model}_digits-cls.py'))
    base.init_weights()
    with torch.no_grad():  # a "trained" baseline: weights away from their initialisation
        g = torch.Generator().manual_seed(1)
        for p in base.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    cfg = _cfg(f'configs/pretrained/{kind}-{model}_search-from-baseline_digits.py')
    assert cfg.model.backbone.gate_init == 3.0 and cfg.load_from
    torch.manual_seed(2)
    sup = _build(cfg)
    sup.init_weights()  # as the runner does before load_from
    state = base.state_dict()
    missing = set(sup.state_dict()) - set(state)
    assert missing and all(any(s in f'.{k}' for s in SELECTION) for k in missing), sorted(
        missing)[:5]
    assert not set(state) - set(sup.state_dict())
    load_state_dict(sup, state, strict=False)
    base.eval(), sup.eval()
    x = torch.randn(4, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = base(x, mode='tensor')
        out = sup(x, mode='tensor')
    assert_close_scaled(out, ref, 1e-5, f'{kind}-{model} supernet vs baseline')
    # and not trivially: a closed gate changes the output
    with torch.no_grad():
        name, p = next((n, p) for n, p in sup.named_parameters() if n.endswith('select.alpha'))
        p[:p.numel() // 2] = -1.
        assert float((sup(x, mode='tensor') - ref).abs().max()) > 1e-3 * float(ref.abs().max())


@pytest.mark.parametrize('model', ['deit-tiny', 'mobilevit-xs'])
def test_finetune_configs_build_with_a_subnet(model, tmp_path):
    from mmdcs.analysis.complexity import random_subnet
    from mmdcs.apis.subnet_io import mmdcs_backbone
    for kind in ('dcs', 'kcr', 'magnitude'):
        cfg = _cfg(f'configs/pretrained/{kind}-{model}_finetune_digits.py')
        demo = _cfg(f'configs/demo/{kind}-{model}_retrain_digits.py')
        assert cfg.optim_wrapper.optimizer.lr < demo.optim_wrapper.optimizer.lr
        assert cfg.train_cfg.max_epochs == demo.train_cfg.max_epochs and cfg.load_from
        variant = 'dcs-arch2' if kind == 'magnitude' else kind
        search = _build(_cfg(f'configs/pretrained/dcs-{model}_search-from-baseline_digits.py'))
        backbone = mmdcs_backbone(search)
        spec = random_subnet(type(backbone), backbone.arch, variant, 0.6,
                             **({'img_size': 64} if model == 'deit-tiny' else {}))
        path = str(tmp_path / f'{kind}.json')
        spec.save(path)
        cfg.merge_from_dict({'model.backbone.subnet': path})
        pruned = _build(cfg).eval()
        with torch.no_grad():
            assert pruned(torch.randn(2, 3, 64, 64), mode='tensor').shape == (2, 10)


@pytest.mark.parametrize('name', [
    'dcs-vit-s16_search-from-timm_in1k.py', 'dcs-vit-s16_finetune_in1k.py',
    'kcr-swin-t_search-from-timm_in1k.py', 'kcr-swin-t_finetune_in1k.py',
    'magnitude-vit-s16_finetune_in1k.py', 'magnitude-swin-t_finetune_in1k.py'])
def test_imagenet_pretrained_configs_parse(name):
    cfg = _cfg(f'configs/pretrained/{name}')
    assert cfg.load_from and cfg.train_cfg.max_epochs in (10, 30)
    assert cfg.model.get('head', {}).get('num_classes', 1000) == 1000
    if 'search' in name:
        assert cfg.model.cost.target.flops == 0.7 and cfg.model.backbone.gate_init == 3.0
        assert cfg.param_scheduler.weight[0].T_max == cfg.train_cfg.max_epochs
        # the search supernet builds (no download: the weights come through load_from)
        model = _build(cfg)
        assert model.backbone.is_supernet
    else:
        assert cfg.model.backbone.subnet and cfg.param_scheduler[0].T_max == 30


@pytest.mark.parametrize('model', ['deit-tiny', 'mobilevit-xs'])
def test_ablation_arms_differ_from_dcs_finetuning_by_their_term_only(model):
    """The comparison's dcs-ce / dcs-kcr: DCS's fine-tuning (network, Q/K gates, temperature
    hook, schedule) with cross-entropy only or the KCR term in place of the IB term."""
    dcs = _cfg(f'configs/pretrained/dcs-{model}_finetune_digits.py')
    kcr = _cfg(f'configs/demo/kcr-{model}_retrain_digits.py').model.regularizer
    hooks = [h['type'] for h in dcs.custom_hooks]
    assert hooks[0] == 'mmdcs.TemperatureHook' and 'mmdcs.RegularizerHook' in hooks
    for arm, term, arm_hooks in (('ce', None, [hooks[0], 'EMAHook']), ('kcr', kcr, hooks)):
        cfg = _cfg(f'configs/pretrained/dcs-{model}_finetune-{arm}_digits.py')
        assert cfg.model.regularizer == term, arm
        assert [h['type'] for h in cfg.custom_hooks] == arm_hooks, arm
        for key in ('optim_wrapper', 'param_scheduler', 'train_cfg', 'load_from'):
            assert cfg[key] == dcs[key], (arm, key)
        assert {k: v for k, v in cfg.model.items() if k != 'regularizer'} == {
            k: v for k, v in dcs.model.items() if k != 'regularizer'}, arm
