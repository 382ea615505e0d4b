"""The framework-free budget core (method.md §11): the linear exact count, the greedy selection
by score per unit of cost, the magnitude scores."""
import pytest
import torch

from mmdcs.selection import BudgetError, GatedMLP, LinearCost, magnitude_scores, select_to_budget
from mmdcs.selection.budget import budget_subnet


def _cost():
    # block a: 10 per channel, D = 8; block b: 40 per channel, D = 4; const 100; baseline 400
    return LinearCost('flops', baseline=400., const=100., coef=dict(a=10., b=40.),
                      dims=dict(a=8, b=4))


def test_linear_cost_floor_ceiling_and_check():
    c = _cost()
    assert c.ceiling == 100 + 80 + 160 and c.floor == 100 + 10 + 40
    assert c.check_target(0.5, 'x') == 200.
    for bad in (0.3, 1.0, 0., -1., 'a'):
        with pytest.raises(BudgetError, match=r'floor 0\.3750.*ceiling 1'):
            c.check_target(bad, 'cost.target.flops')


def test_greedy_fills_the_budget_by_score_per_unit_cost():
    c = _cost()
    scores = dict(a=torch.tensor([.9, .8, .7, .6, .5, .4, .3, .2]),
                  b=torch.tensor([.95, .94, .93, .1]))
    # floor 150 (a0, b0); then by score per unit cost: a1..a6 (.08 ... .03), b1 (.94/40 =
    # .0235), b2 (.02325), a7 (.02), b3 (.0025)
    keep = select_to_budget(scores, c, 250.)
    assert keep['a'] == list(range(7)) and keep['b'] == [0, 1]
    assert c.at({k: len(v) for k, v in keep.items()}) == 250
    keep = select_to_budget(scores, c, 299.)  # a7 does not fit after b2; nothing smaller
    assert keep['a'] == list(range(7)) and keep['b'] == [0, 1, 2]
    keep = select_to_budget(scores, c, 300.)
    assert keep['a'] == list(range(8)) and keep['b'] == [0, 1, 2]
    # the order inside a block follows the scores
    keep = select_to_budget(dict(a=torch.arange(8.), b=torch.arange(4.)), c, 180.)
    assert keep['a'] == [4, 5, 6, 7] and keep['b'] == [3]


def test_greedy_in_groups_of_multiple_of():
    c = _cost()
    scores = dict(a=torch.rand(8), b=torch.rand(4))
    keep = select_to_budget(scores, c, 330., multiple_of=4)
    assert all(len(v) % 4 == 0 for v in keep.values())
    assert c.at({k: len(v) for k, v in keep.items()}) <= 330


def test_magnitude_scores_are_the_l2_norm_of_fc1_column_and_fc2_row():
    torch.manual_seed(0)
    mlp = GatedMLP(6, 12)
    norms = mlp.channel_norms()
    i = 4
    expect = torch.cat([mlp.fc1.weight[:, i], mlp.fc2.weight[i]]).norm()
    assert torch.isclose(norms[i], expect)
    assert mlp.params_per_channel == 12 + 12 + 1

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = mlp
    assert torch.equal(magnitude_scores(Net())['mlp'], norms)
    c = LinearCost('params', baseline=1000., const=500., coef=dict(mlp=25.), dims=dict(mlp=6))
    spec = budget_subnet(Net(), 'f', 'a', 'dcs-arch2', magnitude_scores(Net()), c, 0.6,
                         method='magnitude')
    assert spec.blocks[0].keep == sorted(norms.argsort(descending=True)[:4].tolist())
    assert spec.meta['budget']['achieved'] == 600. and spec.meta['method'] == 'magnitude'
