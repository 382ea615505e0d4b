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
    # every channel kept counts 0.85 of the baseline: the ceiling (0.9 would be undershot)
    for bad in (0.3, 0.9, 1.0, 0., -1.):
        with pytest.raises(BudgetError, match=r'floor 0\.3750.*ceiling 0\.8500'):
            c.check_target(bad, 'cost.target.flops')
    for bad, what in (('a', 'is not a number'), ('', 'is empty')):
        with pytest.raises(BudgetError, match=what):
            c.check_target(bad, 'cost.target.flops')
    c.baseline = 340.
    with pytest.raises(BudgetError, match=r'floor 0\.4412.*ceiling 1 \(the baseline'):
        c.check_target(1.0, 'cost.target.flops')


def test_greedy_fills_the_budget_by_score_per_unit_cost():
    """The greedy itself, on the scores as given (``prior=None``)."""
    c = _cost()
    scores = dict(a=torch.tensor([.9, .8, .7, .6, .5, .4, .3, .2]),
                  b=torch.tensor([.95, .94, .93, .1]))
    # floor 150 (a0, b0); then by score per unit cost: a1..a6 (.08 ... .03), b1 (.94/40 =
    # .0235), b2 (.02325), a7 (.02), b3 (.0025)
    keep = select_to_budget(scores, c, 250., prior=None)
    assert keep['a'] == list(range(7)) and keep['b'] == [0, 1]
    assert c.at({k: len(v) for k, v in keep.items()}) == 250
    keep = select_to_budget(scores, c, 299., prior=None)  # a7 does not fit after b2
    assert keep['a'] == list(range(7)) and keep['b'] == [0, 1, 2]
    keep = select_to_budget(scores, c, 300., prior=None)
    assert keep['a'] == list(range(8)) and keep['b'] == [0, 1, 2]
    # the order inside a block follows the scores
    keep = select_to_budget(dict(a=torch.arange(8.), b=torch.arange(4.)), c, 180., prior=None)
    assert keep['a'] == [4, 5, 6, 7] and keep['b'] == [3]


def test_the_cost_prior_weighs_a_unit_by_its_cost_per_element():
    """``prior='cost'`` (the default): a unit's scores count per element in proportion to what
    an element costs, so units whose scores are alike lose alike fractions whatever their
    cost per element; without it the dearer unit is cut to its last element first."""
    c = _cost()  # a: 8 channels of 10 each, b: 4 of 40 each (const 100)
    scores = dict(a=torch.tensor([.9, .8, .7, .6, .5, .4, .3, .2]),
                  b=torch.tensor([.95, .75, .55, .35]))
    # 340 → 260: by score alone, a .2, a .3, b .35, a .4, a .5
    keep = select_to_budget(scores, c, 260.)
    assert keep['a'] == [0, 1, 2, 3] and keep['b'] == [0, 1, 2]
    # as given: b's elements cost 4× more for scores as high: b .35, b .55 (a untouched)
    old = select_to_budget(scores, c, 260., prior=None)
    assert old['a'] == list(range(8)) and old['b'] == [0, 1]
    # the prices: a linear count's marginal at full width
    from mmdcs.selection.budget import unit_prices
    prices = unit_prices(dict(a=8, b=4), lambda w: c.at(w), ['a', 'b'])
    assert prices == pytest.approx(dict(a=10., b=40.))
    # a unit of width 1, or one whose cost does not rise with its width: the smallest
    # positive price of the others
    flat = unit_prices(dict(a=8, b=4, z=1), lambda w: 10. * w['a'], ['a', 'b', 'z'])
    assert flat == pytest.approx(dict(a=10., b=10., z=10.))
    with pytest.raises(ValueError, match='prior'):
        select_to_budget(scores, c, 260., prior='flops')


def test_another_resource_as_the_prior_weighs_by_its_prices():
    """A prior of another, exact resource (a latency budget's units weighed by the FLOPs an
    element does, ``--prior flops``): the scores are weighed by that resource's prices while
    the budget is still the budget's cost; the budget's own cost as the prior is the default;
    ``build_prior`` names it, and a name that is no counted resource is one line."""
    from mmdcs.selection.budget import build_prior, prior_name
    c = _cost()  # the budget: a 10 per element, b 40
    scores = dict(a=torch.tensor([.9, .8, .7, .6, .5, .4, .3, .2]),
                  b=torch.tensor([.95, .75, .55, .35]))
    assert select_to_budget(scores, c, 260., prior=_cost()) == select_to_budget(scores, c, 260.)
    # a's elements worth 4x b's: b loses .35 and .55 (its score per unit of worth per unit of
    # time is a quarter of a's), a is untouched; with the budget's prices a lost four
    worth = LinearCost('flops', baseline=400., const=100., coef=dict(a=40., b=10.),
                       dims=dict(a=8, b=4))
    keep = select_to_budget(scores, c, 260., prior=worth)
    assert keep['a'] == list(range(8)) and keep['b'] == [0, 1]
    assert prior_name(worth) == 'flops' and prior_name('cost') == 'cost' and \
        prior_name(None) is None
    assert build_prior('none', None) is None and build_prior('cost', None) == 'cost'
    with pytest.raises(BudgetError, match="prior 'latency': one of cost, none"):
        build_prior('latency', None)


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


def test_magnitude_scores_of_efficientvit_are_the_proj_column_norms():
    from mmdcs.models.backbones.efficientvit import EfficientViT
    model = EfficientViT('efficientvit-b0', 'dcs-arch2')
    scores = magnitude_scores(model)
    assert scores and len(scores) == len([t for t in model.cost_terms()])
    name, s = next(iter(scores.items()))
    w = model.get_submodule(name).proj.conv.weight
    assert torch.allclose(s, w.detach().flatten(1).t().norm(dim=1))


# ----------------------------------------------------------------- joint ranking (issue 22)
def _bilinear_cost(hidden=128):
    """Two MLP blocks (D = 32, H = 128): 2 per channel, 1 per (channel, hidden unit) pair, 0.5
    per hidden unit, const 100; the baseline is the full width."""
    c = LinearCost('flops', baseline=0., const=100., coef=dict(a=2., b=2.),
                   dims=dict(a=32, b=32), pair=dict(a=1., b=1.),
                   pair_hidden=dict(a='a', b='b'), hidden_coef=dict(a=.5, b=.5),
                   hidden_dims=dict(a=hidden, b=hidden))
    c.baseline = c.ceiling
    return c


def test_marginal_cost_of_a_bilinear_count():
    from mmdcs.selection.budget import CHANNELS, HIDDEN
    c = _bilinear_cost()
    w = {(CHANNELS, 'a'): 10, (HIDDEN, 'a'): 40}
    assert c.marginal((CHANNELS, 'a'), w) == 2 + 40 and c.marginal((HIDDEN, 'a'), w) == .5 + 10
    assert c.marginal((CHANNELS, 'b'), w) == 2 + 128
    # the count is linear in each width: one more channel adds exactly its marginal cost
    w2 = dict(w)
    w2[(CHANNELS, 'a')] = 11
    assert c.count(w2) - c.count(w) == c.marginal((CHANNELS, 'a'), w)


@pytest.mark.parametrize('multiple_of', [1, 4])
def test_joint_ranking_meets_every_target_between_floor_and_1(multiple_of):
    from mmdcs.selection.budget import select_jointly
    # a group of 4 hidden units costs 0.4 % of the baseline (of 128: 1.5 %, too coarse for
    # ±1 % near full width, where it is refused: test_targets_outside...)
    c = _bilinear_cost(512)
    g = torch.Generator().manual_seed(0)
    floor = c.ratio(c.floor_at(multiple_of))
    for i in range(1, 20):
        target = floor + (1 - floor) * i / 20
        budget = c.check_target(target, 'x', multiple_of)
        keep, hidden = select_jointly(dict(a=torch.rand(32, generator=g),
                                           b=torch.rand(32, generator=g)),
                                      dict(a=torch.rand(512, generator=g),
                                           b=torch.rand(512, generator=g)),
                                      c, budget, multiple_of)
        kept = {n: len(k) for n, k in keep.items()}
        hkept = {n: len(k) for n, k in hidden.items()}
        achieved = c.at(kept, hkept)
        assert budget - 0.01 * c.baseline <= achieved <= budget, (target, kept, hkept)
        for width, dim in list(zip(kept.values(), (32, 32))) + list(
                zip(hkept.values(), (512, 512))):
            assert width >= min(multiple_of, dim)
            assert width % multiple_of == 0 or width == dim


def test_joint_ranking_goes_by_score_per_marginal_cost():
    """Block a's hidden units are worthless (score 0.01), everything else is sure (0.99): they
    go first, in their module's score order, before any channel; once a's hidden units are down
    to one, a's channels are cheap (their pair cost shrank with H̃) and b's go first."""
    from mmdcs.selection.budget import select_jointly
    c = _bilinear_cost()
    ha = torch.full((128, ), .01)
    ha[5] = .02  # the best of a's hidden units: kept last
    scores = dict(a=torch.full((32, ), .99), b=torch.full((32, ), .99))
    hidden = dict(a=ha, b=torch.full((128, ), .99))
    keep, hk = select_jointly(scores, hidden, c, c.at(dict(a=32, b=32), dict(a=1, b=128)), 1)
    assert hk['a'] == [5] and len(hk['b']) == 128 and all(len(k) == 32 for k in keep.values())
    keep, hk = select_jointly(scores, hidden, c,
                              c.at(dict(a=32, b=28), dict(a=1, b=128)), 1)
    assert hk['a'] == [5] and len(keep['a']) == 32 and len(keep['b']) == 28


def test_budget_subnet_ranks_hidden_units_jointly():
    """The searched hidden units ({β > 0}: 32 of 128 per MLP) allow at most ~0.3 of the
    parameters: the export still meets 0.75 by ranking hidden units too (it kept the searched
    ones, kept every channel and 'achieved' ~0.3 silently before issue 22)."""
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m0 = GatedMLP(32, 128, select_hidden=True)
            self.m1 = GatedMLP(32, 128, select_hidden=True)

    net = Net()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in (net.m0, net.m1):
            m.select.alpha.copy_(torch.randn(32, generator=g) + 2)
            beta = torch.randn(128, generator=g) - 3
            beta[:32] = torch.rand(32, generator=g) + 1
            m.hidden_select.alpha.copy_(beta)
    # exact parameters: fc1 (D̃·H̃ + H̃), fc2 (H̃·D̃ + D̃)
    c = LinearCost('params', baseline=2 * (32 * 128 * 2 + 128 + 32), const=0.,
                   coef=dict(m0=1., m1=1.), dims=dict(m0=32, m1=32), pair=dict(m0=2., m1=2.),
                   pair_hidden=dict(m0='m0', m1='m1'), hidden_coef=dict(m0=1., m1=1.),
                   hidden_dims=dict(m0=128, m1=128))
    from mmdcs.selection import alpha_scores
    spec = budget_subnet(net, 'f', 'a', 'kcr', alpha_scores(net), c, 0.75)
    b = spec.meta['budget']
    assert b['achieved_ratio'] == pytest.approx(0.75, abs=0.01) and b['achieved_ratio'] <= 0.75
    assert b['ranked'] == 'channels and hidden units'
    hidden = {h.name: h for h in spec.hidden}
    for name in ('m0', 'm1'):
        assert hidden[name].kept > 32  # more than the searched ones
        beta = getattr(net, name).hidden_select.alpha.detach()
        top = beta.argsort(descending=True)[:hidden[name].kept].sort().values.tolist()
        assert hidden[name].keep == top  # in the module's own score order
    assert c.at({x.name: x.kept for x in spec.blocks},
                {x.name: x.kept for x in spec.hidden}) == b['achieved']


def test_targets_outside_floor_and_ceiling_and_too_coarse_groups_are_refused():
    c = _bilinear_cost()
    floor4 = c.ratio(c.floor_at(4))
    with pytest.raises(BudgetError, match=rf'floor {floor4:.4f} \(one group of 4'):
        c.check_target(floor4 * 0.99, '--target-flops', 4)
    # a cost whose full width is below the baseline: the ceiling is named
    low = LinearCost('flops', baseline=1000., const=100., coef=dict(a=10.), dims=dict(a=8))
    with pytest.raises(BudgetError, match=r'= 0.5 cannot be met.*ceiling 0\.1800'):
        low.check_target(0.5, '--target-flops')
    # groups of 8 of one 8-wide block: nothing between the floor and the ceiling

    class One(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = GatedMLP(16, 4)
    one = LinearCost('flops', baseline=1000., const=0., coef=dict(mlp=62.5), dims=dict(mlp=16))
    with pytest.raises(BudgetError, match=r'within ±1 %.*--multiple-of'):
        budget_subnet(One(), 'f', 'a', 'kcr', dict(mlp=torch.rand(16)), one, 0.75,
                      multiple_of=8)


def test_magnitude_hidden_norms_and_normalisation():
    from mmdcs.selection.budget import hidden_magnitude_scores, normalize_scores
    torch.manual_seed(0)
    mlp = GatedMLP(6, 12, select_hidden=True)
    i = 7
    expect = torch.cat([mlp.fc1.weight[i], mlp.fc2.weight[:, i]]).norm()
    assert torch.isclose(mlp.hidden_norms()[i], expect)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = mlp
    assert torch.equal(hidden_magnitude_scores(Net())['mlp'], mlp.hidden_norms())
    s = normalize_scores(dict(a=torch.tensor([1., 3.]), b=torch.tensor([10., 30., 20.])), 'mean')
    assert torch.allclose(s['a'], torch.tensor([.5, 1.5], dtype=torch.float64))
    assert torch.allclose(s['b'], torch.tensor([.5, 1.5, 1.], dtype=torch.float64))


def test_magnitude_hidden_norms_of_the_conv_ffns():
    """An expanded channel of MobileViT's MV2 block / EfficientViT's MBConv: its expand filter,
    depthwise filter and project column together."""
    from mmdcs.models.backbones.efficientvit import EfficientViT
    from mmdcs.models.backbones.mobilevit import MobileViT
    from mmdcs.selection.budget import hidden_magnitude_scores
    for model, convs in ((MobileViT('mobilevit-xs', 'dcs', select_hidden='all'),
                          ('conv1_1x1', 'conv2_kxk', 'conv3_1x1')),
                         (EfficientViT('efficientvit-b0', 'dcs', select_hidden='all'),
                          ('inverted_conv', 'depth_conv', 'point_conv'))):
        scores = hidden_magnitude_scores(model)
        name = next(n for n in scores if not hasattr(model.get_submodule(n), 'fc1'))
        m = model.get_submodule(name)
        e, d, p = (getattr(m, c).conv.weight.detach() for c in convs)
        i = 3
        expect = torch.cat([e[i].flatten(), d[i].flatten(), p[:, i].flatten()]).norm()
        assert torch.isclose(scores[name][i], expect)
        assert scores[name].shape == (m.hidden_features, )


def test_select_nested_ranks_a_head_with_its_channels():
    """Channels that lie inside heads (EfficientViT's LiteMLA, ``channel_heads()``): the joint
    ranking alone drops heads (cheap per unit of their own cost) and keeps their channels,
    which then cost without computing anything; select_nested ranks a head with its channels,
    then the channels inside the kept heads, and keeps no channel of a pruned head and no
    head without a kept channel, on the budget (the count is exact: linear in the widths)."""
    from mmdcs.selection.budget import HEADS, select_jointly, select_nested
    # module 'a': 4 heads of 4 channels each; its channels cost 10, a head 100 of its own;
    # 'b' is a plain block of 8 channels of 40
    cost = LinearCost('flops', baseline=1000., const=100., coef=dict(a=10., b=40.),
                      dims=dict(a=16, b=8), head_coef=dict(a=100.), head_dims=dict(a=4))
    owner = torch.arange(16) // 4
    g = torch.Generator().manual_seed(0)
    scores = dict(a=torch.rand(16, generator=g) + .1, b=torch.rand(8, generator=g) + .1)
    heads = dict(a=torch.rand(4, generator=g) + .1)
    budget = 0.6 * cost.at(cost.dims, {}, cost.head_dims)
    # the joint ranking alone: heads dropped, their channels kept (dead)
    keep, _, head_keep = select_jointly(scores, {}, cost, budget, head_scores=heads,
                                        prior=None)
    assert any(int(owner[c]) not in head_keep['a'] for c in keep['a'])
    keep, hidden, head_keep = select_nested(dict(a=owner), scores, {}, heads, cost, budget, 1,
                                            None)
    assert hidden == {} and 1 <= len(head_keep['a']) < 4
    assert {int(owner[c]) for c in keep['a']} == set(head_keep['a'])
    count = cost.at({n: len(k) for n, k in keep.items()}, {}, {'a': len(head_keep['a'])})
    assert budget - 0.01 * cost.baseline <= count <= budget
    assert (HEADS, 'a') in cost.unit_dims()


def test_groups_of_different_sizes_compare_per_element():
    """A group's summed score over the cost it saves: a head (removed one at a time) and a
    group of 8 channels compare per element. A head costing 8 channels and scoring 4 (0.5 per
    channel's cost) goes before 8 channels scoring 1 each; the mean score over the whole cost
    (as before) made the group of 8 look 8× cheaper and removed it."""
    from mmdcs.selection.budget import CHANNELS, HEADS, select_units_to_budget
    a, h = (CHANNELS, 'a'), (HEADS, 'h')
    dims = {a: 16, h: 4}
    price = {a: 1., h: 8.}  # a head costs as much as 8 channels

    def count(w):
        return sum(price[u] * w[u] for u in dims)

    scores = {a: torch.ones(16), h: torch.tensor([4., 10., 10., 10.])}
    keep = select_units_to_budget(scores, dims, count, lambda u, w: price[u], 40.,
                                  multiple_of=8, prior=None)
    assert keep[h] == [1, 2, 3] and keep[a] == list(range(16))
    # weighed by cost per element (the default) the head's 4 is worth 32 channel-scores
    keep = select_units_to_budget(scores, dims, count, lambda u, w: price[u], 40.,
                                  multiple_of=8)
    assert keep[h] == [0, 1, 2, 3] and len(keep[a]) == 8


def test_a_measured_step_is_crossed_by_the_unit_whose_scores_are_lowest():
    """Two units whose first group of 8 costs time to remove (a measured step: 30 ms at full
    width, 31 ms one group below, then 1 ms a channel), one of high and one of low scores, and a
    unit without a step. Once the stepless unit is at its floor, the budget needs one of the two
    stepped units two groups down: the one of low scores goes. (Before, a removal that saved no
    time was made in the units' order: the first unit went, whatever its scores.)"""
    from mmdcs.selection.budget import select_units_to_budget

    def t_step(w):
        return {32: 30., 24: 31.}.get(w, float(w))

    def count(widths):
        return t_step(widths['a1']) + t_step(widths['a2']) + 0.5 * widths['b']

    def marginal(u, widths):
        w = widths[u]
        return 0.5 if u == 'b' else (t_step(w) - t_step(w - 8)) / 8

    dims = dict(a1=32, a2=32, b=32)
    scores = dict(a1=torch.full((32, ), 10.), a2=torch.ones(32), b=torch.full((32, ), 5.))
    keep = select_units_to_budget(scores, dims, count, marginal, 50., multiple_of=8,
                                  prior=None)
    assert {u: len(k) for u, k in keep.items()} == dict(a1=32, a2=16, b=8)
