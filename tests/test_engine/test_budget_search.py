"""A budget in the search objective (method.md §11): cost=dict(target=dict(flops=R)) is met by a
Lagrange multiplier μ (dual ascent), μ is state, bad targets are one line with exit 2."""
import types

import pytest
import torch
from mmengine.registry import DefaultScope

from mmdcs.engine import AlternatingSearchLoop, SearchOptimWrapperConstructor
from mmdcs.registry import MODELS
from mmdcs.selection import BudgetError
from _mm_batches import cls_batch  # noqa: E402 (tests/ is on sys.path)


def _classifier(target, img_size=16, **kw):
    cfg = dict(type='mmdcs.ChannelSelectionClassifier',
               backbone=dict(type='mmdcs.ViT', arch='deit-tiny', variant='dcs',
                             img_size=img_size),
               head=dict(type='LinearClsHead', num_classes=10, in_channels=192,
                         loss=dict(type='CrossEntropyLoss')),
               data_preprocessor=dict(type='ClsDataPreprocessor', num_classes=10),
               cost=dict(target=target, **kw))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(cfg)


def test_search_with_a_flops_target_ends_within_2_percent():
    """150 alternating steps of a DCS-DeiT-Tiny supernet (16×16 input) with target 0.7 of the
    baseline classifier's FLOPs: the deployed network ({α > 0}) and the expected one end within
    ±2 % of the target, without any λ."""
    torch.manual_seed(0)
    model = _classifier(dict(flops=0.7))
    target = model.cost_cfg['target']
    # the ratio is of the baseline classifier's mmengine count at this input size
    from mmdcs.analysis.complexity import count_flops
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        base = MODELS.build(dict(type='ImageClassifier',
                                 backbone=dict(type='mmdcs.ViT', arch='deit-tiny', img_size=16),
                                 head=dict(type='LinearClsHead', num_classes=10,
                                           in_channels=192)))
    assert model._budget.baseline == count_flops(base, (1, 3, 16, 16))
    assert target['budget'] == pytest.approx(0.7 * model._budget.baseline)
    optim = SearchOptimWrapperConstructor(dict(
        weight=dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=1e-3)),
        arch=dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=0.2))))(model)
    loop = AlternatingSearchLoop.__new__(AlternatingSearchLoop)
    loop._runner = types.SimpleNamespace(model=model, optim_wrapper=optim)
    model.train()
    g = torch.Generator().manual_seed(0)
    first = None
    for _ in range(150):
        loop.train_step(cls_batch(g), 'weight')
        out = loop.train_step(cls_batch(g), 'arch')
        first = first or out
    assert float(first['arch_cost_ratio_kept']) > 1.0  # all open, plus Linear_θ
    assert {'arch_loss_budget', 'arch_cost_ratio', 'arch_cost_mu'} <= set(out)
    lin = model._budget
    kept = {n: int((s.alpha > 0).sum()) for n, s in model._selectors.items()}
    assert lin.ratio(lin.at(kept)) == pytest.approx(0.7, abs=0.014)
    assert float(out['arch_cost_ratio']) == pytest.approx(0.7, abs=0.1)
    # μ is state: in the state dict (checkpoints), and restored from it
    state = model.state_dict()
    assert float(state['cost_mu']) == float(model.cost_mu) != 0
    fresh = _classifier(dict(flops=0.7))
    fresh.load_state_dict(state)
    assert float(fresh.cost_mu) == float(model.cost_mu)


def test_the_multiplier_rises_over_budget_and_falls_under():
    model = _classifier(dict(params=0.8, rho=0.5, penalty=0.))
    model.train()
    terms = model.budget_terms()  # all kept: over budget
    assert float(terms['cost_mu']) == 0 and float(model.cost_mu) > 0
    with torch.no_grad():
        for s in model._selectors.values():
            s.alpha.fill_(-3.)
    mu = float(model.cost_mu)
    model.budget_terms()  # one channel... none kept: far under budget
    assert float(model.cost_mu) < mu
    # the gradient of the budget term reaches α only
    model.zero_grad()
    model.cost_mu.fill_(1.)
    model.budget_terms()['loss_budget'].backward()
    assert all(p.grad is not None for p in model.arch_parameters())
    assert all(p.grad is None for p in model.weight_parameters())


@pytest.mark.parametrize('target, match', [
    (dict(flops=0.2), r'cost.target.flops = 0.2 cannot be met.*floor 0\.\d+.*ceiling 1'),
    (dict(flops=1.0), r'cost.target.flops = 1 cannot be met'),
    (dict(params=0.), r'cost.target.params = 0 cannot be met'),
    (dict(params=-0.5), r'cost.target.params = -0.5 cannot be met'),
])
def test_unreachable_targets_name_the_floor_and_ceiling(target, match):
    with pytest.raises(BudgetError, match=match):
        _classifier(target)


def test_target_config_errors():
    with pytest.raises(ValueError, match='exactly one of'):
        _classifier(dict(flops=0.7, params=0.7))
    with pytest.raises(ValueError, match='replaces λ·log cost'):
        _classifier(dict(flops=0.7), weight=0.2)


def test_train_tool_refuses_an_unreachable_target_in_one_line(run_tool, tiny_digits, tmp_path):
    cls = f'{tiny_digits}/cls'
    r = run_tool(['tools/train.py', 'configs/demo/dcs-mobilevit-xs_search_digits.py',
                  '--work-dir', str(tmp_path), '--cfg-options',
                  'model.cost.target.flops=0.3', f'train_dataloader.dataset.data_root={cls}',
                  f'val_dataloader.dataset.data_root={cls}'])
    assert r.returncode == 2, r.stderr[-2000:]
    err = [line for line in r.stderr.splitlines() if line.startswith('error:')]
    assert len(err) == 1 and 'cost.target.flops = 0.3 cannot be met' in err[0]
    assert 'floor' in err[0] and 'ceiling' in err[0]
    assert 'Traceback' not in r.stderr
