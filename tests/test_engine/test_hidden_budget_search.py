"""A budget search with hidden-unit selection and a low-rank Linear_θ: the hidden gates enter the
exact count bilinearly (E[D̃]·E[H̃]), the search meets the target, and the export to a budget
ranks channels and hidden units jointly to meet it."""
import pytest
import torch
from mmengine.registry import DefaultScope

from mmdcs.analysis.complexity import calibrate_cost, count_flops
from mmdcs.registry import MODELS
from mmdcs.selection import hidden_selectors
from mmdcs.selection.budget import alpha_scores, budget_subnet
from _mm_batches import alternate, search_loop  # noqa: E402 (tests/ is on sys.path)


def _classifier(target, **backbone):
    cfg = dict(type='mmdcs.ChannelSelectionClassifier',
               backbone=dict(type='mmdcs.ViT', arch='deit-tiny', variant='dcs', img_size=16,
                             select_hidden=True, theta_rank=8, **backbone),
               head=dict(type='LinearClsHead', num_classes=10, in_channels=192,
                         loss=dict(type='CrossEntropyLoss')),
               data_preprocessor=dict(type='ClsDataPreprocessor', num_classes=10),
               cost=dict(target=target))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(cfg)


def test_calibrated_count_is_bilinear_and_exact():
    model = _classifier(dict(flops=0.7))
    lin = model._budget
    assert len(lin.pair) == 12 and len(lin.hidden_dims) == 12
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for s in list(model._selectors.values()) + list(model._hidden_selectors.values()):
            s.alpha.copy_(torch.randn(s.alpha.shape, generator=g))
    spec = model.backbone.export_subnet()
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        pruned = MODELS.build(dict(type='ImageClassifier',
                                   backbone=dict(type='mmdcs.ViT', arch='deit-tiny',
                                                 img_size=16, subnet=spec.to_dict()),
                                   head=dict(type='LinearClsHead', num_classes=10,
                                             in_channels=192)))
    kept = {b.name: b.kept for b in spec.blocks}
    hidden = {b.name: b.kept for b in spec.hidden}
    assert lin.at(kept, hidden) == pytest.approx(count_flops(pruned, (1, 3, 16, 16)), rel=1e-9)
    params = calibrate_cost(model, 'params')
    from mmdcs.analysis.complexity import count_params
    assert params.at(kept, hidden) == count_params(pruned)


def test_search_with_hidden_gates_meets_the_flops_target():
    torch.manual_seed(0)
    model = _classifier(dict(flops=0.6))
    loop = search_loop(model, 'test_hidden', 300)
    model.train()
    g = torch.Generator().manual_seed(0)
    alternate(loop, 150, g)
    # the search aimed at the target (the expected count), and ends on it (the projection)
    assert float(model.budget_terms(update=False)['cost_ratio']) == pytest.approx(0.6, abs=0.05)
    loop.end_search()
    lin = model._budget
    kept = {n: int((s.alpha > 0).sum()) for n, s in model._selectors.items()}
    hidden = {k: int((s.alpha > 0).sum()) for k, s in model._hidden_selectors.items()}
    assert lin.ratio(lin.at(kept, hidden)) == pytest.approx(0.6, abs=0.012)
    assert sum(hidden.values()) < 12 * 768  # the hidden gates were searched
    # Linear_θ at rank 8 was trained by the weight steps
    theta = model.backbone.blocks[0].attn.qk_select
    assert theta.theta_down.weight.shape == (8, 192)
    # the export to a budget: channels and hidden units ranked jointly (sigmoid(α), sigmoid(β)
    # per unit of marginal cost) to the target
    backbone = model.backbone
    spec = budget_subnet(backbone, 'vit', 'deit-tiny', 'dcs', alpha_scores(backbone),
                         calibrate_cost(model, 'flops'), 0.55, multiple_of=8)
    assert spec.meta['budget']['ranked'] == 'channels and hidden units'
    assert all(b.kept % 8 == 0 for b in spec.hidden + spec.blocks)
    assert spec.meta['budget']['achieved_ratio'] == pytest.approx(0.55, abs=0.01)
    assert set(hidden_selectors(backbone)) == {b.name for b in spec.hidden}
    assert spec.meta['theta_rank'] == 8  # the pruned network rebuilds the low-rank θ
