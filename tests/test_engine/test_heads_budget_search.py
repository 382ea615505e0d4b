"""A budget search with head selection (method.md §2.7): the head gates enter the exact count
linearly (E[kept heads] = Σ sigmoid(α)), the alternating loop moves their α under the budget,
and the end of the search puts channels and heads together on the target."""
import pytest
import torch
from mmengine.registry import DefaultScope

from mmdcs.analysis.complexity import count_flops
from mmdcs.registry import MODELS
from mmdcs.selection import head_selectors
from _mm_batches import alternate, search_loop  # noqa: E402 (tests/ is on sys.path)


def _classifier(target, **backbone):
    cfg = dict(type='mmdcs.ChannelSelectionClassifier',
               backbone=dict(type='mmdcs.ViT', arch='deit-tiny', variant='dcs', img_size=16,
                             select_heads=True, **backbone),
               head=dict(type='LinearClsHead', num_classes=10, in_channels=192,
                         loss=dict(type='CrossEntropyLoss')),
               data_preprocessor=dict(type='ClsDataPreprocessor', num_classes=10),
               cost=dict(target=target))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(cfg)


def test_search_with_head_gates_ends_on_the_flops_target():
    torch.manual_seed(0)
    model = _classifier(dict(flops=0.6))
    assert len(model._head_selectors) == 12 and len(model._budget.head_dims) == 12
    loop = search_loop(model, 'test_heads', 120)
    heads = head_selectors(model.backbone)
    before = torch.cat([s.alpha.detach().clone() for s in heads.values()])
    model.train()
    g = torch.Generator().manual_seed(0)
    alternate(loop, 60, g)
    after = torch.cat([s.alpha.detach() for s in heads.values()])
    assert (after - before).abs().max() > 0.1  # the arch steps moved the head α
    assert (after < before).float().mean() > 0.5  # the budget pushed most of them down
    loop.end_search()
    lin = model._budget
    kept = {n: int((s.alpha > 0).sum()) for n, s in model._selectors.items()}
    heads_kept = {k: max(1, int((s.alpha > 0).sum())) for k, s in heads.items()}
    assert lin.ratio(lin.at(kept, {}, heads_kept)) == pytest.approx(0.6, abs=0.012)
    # heads were pruned (here, 2026-11-26: all but one per block, 12 of 36, with 1569 of 2304
    # MLP channels kept: a head's cost is ~40 channels', so its budget gradient is ~40x theirs)
    assert sum(heads_kept.values()) < 36
    # the exported, built network is what the budget counts
    spec = model.backbone.export_subnet()
    assert {h.name: h.kept for h in spec.heads} == heads_kept
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        pruned = MODELS.build(dict(type='ImageClassifier',
                                   backbone=dict(type='mmdcs.ViT', arch='deit-tiny',
                                                 img_size=16, subnet=spec.to_dict()),
                                   head=dict(type='LinearClsHead', num_classes=10,
                                             in_channels=192)))
    assert lin.at(kept, {}, heads_kept) == count_flops(pruned, (1, 3, 16, 16))


def test_a_budget_that_does_not_cost_heads_is_refused_in_one_line(monkeypatch):
    """select_heads with a resource whose cost has no head terms is one line naming the
    resource, not a search whose budget ignores the heads."""
    import dataclasses

    from mmdcs.analysis.complexity import calibrate_cost
    from mmdcs.selection import budget as budget_mod
    from mmdcs.selection.budget import BudgetError

    def headless(model, input_size=None):
        return dataclasses.replace(calibrate_cost(model, 'flops', input_size), head_coef={},
                                   head_dims={})

    monkeypatch.setitem(budget_mod._RESOURCES, 'headless', (headless, (), 'test'))
    with pytest.raises(BudgetError) as e:
        _classifier(dict(headless=0.7))
    assert str(e.value) == ('select_heads: the headless budget does not cost heads (the exact '
                            'flops and params and a latency table measured with select_heads '
                            'do)')


def _loop(model, steps, name):
    loop = search_loop(model, name, 2 * steps)
    model.train()
    _, out = alternate(loop, steps, torch.Generator().manual_seed(0))
    loop.end_search()
    return out


def test_search_with_head_gates_ends_on_a_latency_target(tmp_path):
    """model.cost = dict(target=dict(latency=0.6), latency_table=T) with select_heads, on a
    synthetic table with head units: the head α enter the expected latency through their
    attention's curve, and the deployed network (channels and heads together) ends within ±2 %
    of the baseline below the target, as the table predicts it."""
    import json

    from mmdcs.models.backbones.vit import ViT
    from _resource_costs import synthetic_latency_table  # noqa: E402
    table = synthetic_latency_table(ViT(arch='deit-tiny', variant='dcs', img_size=16,
                                        select_heads=True), [16, 16])
    path = str(tmp_path / 'table.json')
    with open(path, 'w') as f:
        json.dump(table, f)
    torch.manual_seed(0)
    model = _classifier_with(dict(latency=0.6), latency_table=path, gate_init=1.0)
    cost = model._budget
    assert cost.resource == 'latency' and len(cost.head_dims) == 12
    heads = head_selectors(model.backbone)
    before = torch.cat([s.alpha.detach().clone() for s in heads.values()])
    out = _loop(model, 30, 'test_heads_latency')
    after = torch.cat([s.alpha.detach() for s in heads.values()])
    assert (after - before).abs().max() > 0.1  # the budget moved the head α
    kept = {n: int((s.alpha > 0).sum()) for n, s in model._selectors.items()}
    heads_kept = {k: max(1, int((s.alpha > 0).sum())) for k, s in heads.items()}
    ratio = cost.ratio(cost.at(kept, {}, heads_kept))
    assert ratio == pytest.approx(0.6, abs=0.02) and ratio <= 0.6 + 1e-9
    assert sum(heads_kept.values()) < 36  # heads were pruned for latency
    assert float(out['arch_latency_ratio_kept']) == pytest.approx(
        float(out['arch_cost_ratio_kept']))


def _classifier_with(target, gate_init=3.0, **cost):
    cfg = dict(type='mmdcs.ChannelSelectionClassifier',
               backbone=dict(type='mmdcs.ViT', arch='deit-tiny', variant='dcs', img_size=16,
                             select_heads=True, gate_init=gate_init),
               head=dict(type='LinearClsHead', num_classes=10, in_channels=192,
                         loss=dict(type='CrossEntropyLoss')),
               data_preprocessor=dict(type='ClsDataPreprocessor', num_classes=10),
               cost=dict(target=target, **cost))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(cfg)
