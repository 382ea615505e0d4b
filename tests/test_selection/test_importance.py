"""The export's pruners besides α and magnitude (mmdcs.selection.importance): uniform widths,
random channels at given widths, first-order Taylor importance, as registered scorers; each
meets the budget within ±1 % (uniform at or below it)."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from mmdcs.selection import BudgetError, GatedMLP, LinearCost, magnitude_scores
from mmdcs.selection.budget import budget_subnet
from mmdcs.selection.importance import (get_scorer, random_scores, taylor_scores,
                                        uniform_widths, widths_of, widths_subnet)
from _tools import assert_close_scaled  # noqa: E402 (tests/ is on sys.path)


class Toy(nn.Module):
    """Two residual gated MLPs of widths 96 and 64 and a linear head."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.inp = nn.Linear(5, 96)
        self.a = GatedMLP(96, 32)
        self.mid = nn.Linear(96, 64)
        self.b = GatedMLP(64, 40)
        self.head = nn.Linear(64, 3)

    def forward(self, x):
        h = self.inp(x)
        h = h + self.a(h)
        h = self.mid(h)
        return self.head(h + self.b(h))


def method_subnet(method, model, family, arch, variant, cost, target, **ctx):
    """The subnet of a registered scorer, as mmdcs.apis.export.export_subnet makes it."""
    scorer = get_scorer(method)
    scores, hidden = scorer(model, model=model, **ctx)
    if scorer.widths is not None:
        budget = cost.check_target(target, 'x')
        kept, hidden_kept = scorer.widths(cost, budget, 1, model=model, **ctx)
        spec = widths_subnet(model, family, arch, variant, cost, target, kept, hidden_kept,
                             scores, hidden, method)
        if method == 'random':
            spec.meta['seed'] = ctx.get('seed', 0)
        return spec
    return budget_subnet(model, family, arch, variant, scores, cost, target, 1,
                         hidden_scores=hidden, normalize=scorer.normalize, method=method)


def _loss(model, batch):
    return F.cross_entropy(model(batch[0]), batch[1])


def _cost():
    # a channel of a costs 2·32 (fc1 column + fc2 row), of b 2·40; the rest 500
    return LinearCost('params', baseline=500. + 64 * 96 + 80 * 64, const=500.,
                      coef=dict(a=64., b=80.), dims=dict(a=96, b=64))


@pytest.mark.parametrize('target', [0.9, 0.7, 0.5])
def test_uniform_widths_keep_one_ratio_and_meet_the_budget(target):
    cost = _cost()
    budget = cost.check_target(target, 'x')
    kept, hidden, r = uniform_widths(cost, budget)
    assert hidden == {}
    assert kept == {n: max(1, round(r * d)) for n, d in cost.dims.items()}
    achieved = cost.at(kept)
    assert achieved <= budget and budget - achieved <= 0.01 * cost.baseline
    # the ratio is the largest one: the next width of either block is over the budget
    assert all(cost.at(dict(kept, **{n: kept[n] + 1})) > budget for n in kept)


def test_uniform_subnet_keeps_the_largest_norms_within_one_ratio():
    model, cost = Toy(), _cost()
    spec = method_subnet('uniform', model, 'toy', 'x', 'dcs', cost, 0.7)
    norms = magnitude_scores(model)
    for b in spec.blocks:
        top = norms[b.name].argsort(descending=True)[:b.kept].sort().values.tolist()
        assert b.keep == top
    kept, _, _ = uniform_widths(cost, cost.check_target(0.7, 'x'))
    assert [b.kept for b in spec.blocks] == [kept['a'], kept['b']]
    assert abs(kept['a'] / 96 - kept['b'] / 64) <= 1 / 64
    assert spec.meta['method'] == 'uniform'
    assert spec.meta['budget']['achieved_ratio'] == pytest.approx(0.7, abs=0.01)
    assert spec.meta['budget']['achieved_ratio'] <= 0.7


def test_random_channels_are_seeded_at_the_given_widths():
    model, cost = Toy(), _cost()
    ref = method_subnet('uniform', model, 'toy', 'x', 'dcs', cost, 0.7)
    widths = widths_of(ref.to_dict())
    s0 = method_subnet('random', model, 'toy', 'x', 'dcs', cost, 0.7, widths=widths, seed=0)
    s0b = method_subnet('random', model, 'toy', 'x', 'dcs', cost, 0.7, widths=widths, seed=0)
    s1 = method_subnet('random', model, 'toy', 'x', 'dcs', cost, 0.7, widths=widths, seed=1)
    assert [b.kept for b in s0.blocks] == [b.kept for b in ref.blocks]
    assert [b.keep for b in s0.blocks] == [b.keep for b in s0b.blocks]
    assert [b.keep for b in s0.blocks] != [b.keep for b in s1.blocks]
    assert s0.meta['seed'] == 0 and s0.meta['method'] == 'random'
    # a random permutation per block, reproducible
    r = random_scores(dict(a=96), 3)['a']
    assert sorted(r.tolist()) == list(range(96)) and torch.equal(r, random_scores(dict(a=96),
                                                                                  3)['a'])
    # other widths: searched ones at the same budget
    skewed = dict(a=80, b=int((0.7 * cost.baseline - 500 - 64 * 80) // 80))
    s = method_subnet('random', model, 'toy', 'x', 'dcs', cost, 0.7, widths=(skewed, {}),
                      seed=0)
    assert [b.kept for b in s.blocks] == [skewed['a'], skewed['b']]


def test_widths_off_the_budget_are_refused():
    model, cost = Toy(), _cost()
    with pytest.raises(BudgetError, match='not within'):
        widths_subnet(model, 'toy', 'x', 'dcs', cost, 0.5, dict(a=96, b=64))
    with pytest.raises(BudgetError, match='not within'):  # far below the budget
        widths_subnet(model, 'toy', 'x', 'dcs', cost, 0.9, dict(a=2, b=2))
    with pytest.raises(BudgetError, match='keeps 100 of 96'):
        widths_subnet(model, 'toy', 'x', 'dcs', cost, 0.9, dict(a=100, b=2))
    # another export's widths a little above the budget (within ±1 %, as budget_subnet may
    # end): accepted; 2 % above: refused
    kept, _, _ = uniform_widths(cost, cost.check_target(0.7, 'x'))
    ratio = cost.ratio(cost.at(kept))
    above = dict(kept, a=kept['a'] + 1)  # one channel of a: 64 of 11,772
    assert 0.7 < cost.ratio(cost.at(above)) <= 0.71
    widths_subnet(model, 'toy', 'x', 'dcs', cost, 0.7, above)
    with pytest.raises(BudgetError, match='not within ±1 %'):
        widths_subnet(model, 'toy', 'x', 'dcs', cost, ratio - 0.02, kept)


def test_taylor_scores_are_the_sum_of_abs_weight_times_gradient():
    model = Toy().eval()
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(8, 5, generator=g), torch.randint(0, 3, (8, ), generator=g))
               for _ in range(3)]

    def loss_fn(b):
        return F.cross_entropy(model(b[0]), b[1])

    channels, hidden = taylor_scores(model, batches, loss_fn)
    assert hidden == {}
    # by hand: the gradients of the three losses accumulated, |w·g| over fc1 columns + fc2 rows
    model.zero_grad()
    for b in batches:
        loss_fn(b).backward()
    for name in ('a', 'b'):
        m = getattr(model, name)
        t1 = (m.fc1.weight * m.fc1.weight.grad).abs().sum(0)
        t2 = (m.fc2.weight * m.fc2.weight.grad).abs().sum(1)
        assert_close_scaled(channels[name], (t1 + t2).detach(), 1e-6, name)
    # the weights are back and the gradients cleared by taylor_scores
    model.zero_grad(set_to_none=True)
    channels2, _ = taylor_scores(model, batches, loss_fn)
    assert all(p.grad is None for p in model.parameters())
    for name in channels:
        assert torch.equal(channels[name], channels2[name])


def test_taylor_subnet_meets_the_budget_and_keeps_high_scores():
    model, cost = Toy().eval(), _cost()
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 5, generator=g), torch.randint(0, 3, (8, ), generator=g))]
    scores = taylor_scores(model, batches, lambda b: F.cross_entropy(model(b[0]), b[1]))
    spec = method_subnet('taylor', model, 'toy', 'x', 'dcs', cost, 0.6, batches=batches,
                         loss_fn=_loss)
    assert spec.meta['method'] == 'taylor'
    achieved = spec.meta['budget']['achieved_ratio']
    assert achieved <= 0.6 and 0.6 - achieved <= 0.01
    for b in spec.blocks:  # within a block, the kept channels are the highest-scored
        s = scores[0][b.name]
        dropped = sorted(set(range(b.dim)) - set(b.keep))
        if dropped:
            assert float(s[b.keep].min()) >= float(s[dropped].max())
    assert spec.meta['budget']['normalize'] == 'mean'
    assert get_scorer('taylor').needs_data and get_scorer('taylor').baseline


def test_uniform_widths_of_channels_and_hidden_units_named_alike():
    """A block's MLP searched over channels × hidden units names both units by its path (the
    latency table's pairs, select_hidden=True): each width is checked against its own unit,
    a hidden width above the channel width is not refused."""
    model = Toy()
    # pairs: a channel × hidden unit of a costs 2 (fc1 and fc2), of b 2; hidden widths above
    # the channel widths (32 → 128 and 40 → 160 hidden units)
    cost = LinearCost('params', baseline=500. + 2 * (96 * 128 + 64 * 160), const=500.,
                      coef=dict(a=0., b=0.), dims=dict(a=96, b=64),
                      pair=dict(a=2., b=2.), pair_hidden=dict(a='a', b='b'),
                      hidden_dims=dict(a=128, b=160))
    budget = cost.check_target(0.7, 'x')
    kept, hidden, r = uniform_widths(cost, budget)
    assert hidden['b'] > cost.dims['b']  # a hidden width larger than the block's channels
    spec = widths_subnet(model, 'toy', 'x', 'dcs', cost, 0.7, kept, hidden, method='uniform')
    assert [b.kept for b in spec.blocks] == [kept['a'], kept['b']]
    assert {h.name: h.kept for h in spec.hidden} == hidden
    with pytest.raises(BudgetError, match='b keeps 161 of 160 hidden units'):
        widths_subnet(model, 'toy', 'x', 'dcs', cost, 0.7, kept, dict(hidden, b=161),
                      method='uniform')
