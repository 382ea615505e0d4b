"""The maths of a budget in the search (mmdcs/selection/budget_search.py): the scheduled target,
the joint ranking of channels and hidden units per unit of marginal cost, and the projection of α
that ends a search on the budget."""
import itertools

import pytest
import torch

from mmdcs.selection import ChannelSelector, LinearCost
from mmdcs.selection.budget_search import project_to_budget, rank_to_budget, scheduled_ratio


def _linear():
    # two blocks of different cost per channel, const 100: baseline 100 + 8·10 + 4·30 = 300
    return LinearCost('flops', 300., 100., dict(a=10., b=30.), dict(a=8, b=4))


def _bilinear():
    # block a (8 channels) pairs with hidden module ha (6 units): a·h·2 + 1 per hidden unit;
    # block b (4 channels) without hidden selection
    return LinearCost('flops', 400., 50., dict(a=1., b=20.), dict(a=8, b=4),
                      pair=dict(a=2.), pair_hidden=dict(a='ha'), hidden_coef=dict(ha=3.),
                      hidden_dims=dict(ha=6))


class _OnlyAt:
    """A cost with nothing but the interface (``at``, ``dims``, ``hidden_dims``, ``baseline``):
    what a latency model would provide."""

    def __init__(self, lin):
        self.lin, self.baseline = lin, lin.baseline
        self.dims, self.hidden_dims = lin.dims, lin.hidden_dims

    def at(self, kept, hidden_kept=None):
        return self.lin.at(kept, hidden_kept)


def test_scheduled_ratio_ramps_then_holds():
    assert scheduled_ratio(0.6, 1., 0., 0.5) == 1.
    assert scheduled_ratio(0.6, 1., 0.25, 0.5) == pytest.approx(0.8)
    assert scheduled_ratio(0.6, 1., 0.5, 0.5) == pytest.approx(0.6)
    assert scheduled_ratio(0.6, 1., 0.9, 0.5) == pytest.approx(0.6)
    assert scheduled_ratio(0.6, 1., None, 0.5) == 0.6  # outside a search loop
    assert scheduled_ratio(0.6, 1., 0.1, 0.) == 0.6  # no ramp


@pytest.mark.parametrize('budget', [150., 200., 222., 255., 299.])
def test_ranking_meets_the_budget_within_one_unit_by_score_per_cost(budget):
    lin = _linear()
    g = torch.Generator().manual_seed(1)
    scores = dict(a=torch.rand(8, generator=g), b=torch.rand(4, generator=g))
    keep, _, count = rank_to_budget(lin, scores, budget)
    kept = {n: len(k) for n, k in keep.items()}
    assert count == lin.at(kept) <= budget
    # within the cost of one unit that could still have been dropped... or added back
    assert count > budget - max(lin.coef.values())
    assert all(v >= 1 for v in kept.values())
    # each block keeps its best channels
    for n, k in keep.items():
        assert set(k.tolist()) == set(scores[n].argsort(descending=True)[:len(k)].tolist())
    # what was dropped is worth less per unit of cost than what was kept, across blocks (a
    # block's last channel is kept whatever it is worth), or does not fit any more
    kept_density = min((float(scores[n][k].min()) / lin.coef[n] for n, k in keep.items()
                        if len(k) > 1), default=float('inf'))
    for n, k in keep.items():
        for i in set(range(lin.dims[n])) - set(k.tolist()):
            assert (float(scores[n][i]) / lin.coef[n] <= kept_density
                    or count + lin.coef[n] > budget)
        if len(k) < lin.dims[n]:  # nothing that still fits was left out
            assert count + lin.coef[n] > budget

def test_joint_ranking_trades_channels_against_hidden_units():
    lin = _bilinear()
    g = torch.Generator().manual_seed(0)
    scores = dict(a=torch.rand(8, generator=g) + 0.5, b=torch.rand(4, generator=g) + 0.5)
    # the hidden units of ha are worth little: the ranking drops them before the channels
    hidden = dict(ha=torch.full((6, ), 0.05))
    full = lin.at(lin.dims)
    keep, keep_h, count = rank_to_budget(lin, scores, 0.8 * full, hidden)
    assert count == lin.at({n: len(k) for n, k in keep.items()},
                           {k: len(v) for k, v in keep_h.items()}) <= 0.8 * full
    # (near the budget a cheap channel of a may fill it more closely than a third hidden unit)
    assert len(keep_h['ha']) <= 4 and len(keep['a']) >= 6 and len(keep['b']) == 4
    # below what channels alone can reach with every hidden unit kept: joint ranking gets there
    floor_channels = lin.at(dict(a=1, b=1))
    budget = floor_channels - 1
    keep, keep_h, count = rank_to_budget(lin, scores, budget, hidden)
    assert count <= budget and len(keep_h['ha']) < 6
    # the cost of the last unit dropped bounds the gap
    assert count > budget - (20. + 2 * 8 + 3)


@pytest.mark.parametrize('budget', [80., 120., 170., 230.])
def test_a_cost_with_only_at_ranks_as_the_closed_form(budget):
    lin = _bilinear()
    g = torch.Generator().manual_seed(3)
    scores = dict(a=torch.rand(8, generator=g), b=torch.rand(4, generator=g))
    hidden = dict(ha=torch.rand(6, generator=g))
    fast = rank_to_budget(lin, scores, budget, hidden)
    generic = rank_to_budget(_OnlyAt(lin), scores, budget, hidden)
    for x, y in zip(fast[:2], generic[:2]):
        assert {k: v.tolist() for k, v in x.items()} == {k: v.tolist() for k, v in y.items()}
    assert fast[2] == pytest.approx(generic[2], rel=1e-12)


@pytest.mark.parametrize('budget, hidden',
                         list(itertools.product([140., 200., 240.], [False, True])))
def test_projection_moves_only_the_alpha_that_change_side(budget, hidden):
    lin = _bilinear()
    torch.manual_seed(0)
    sels = dict(a=ChannelSelector(8), b=ChannelSelector(4))
    hsels = dict(ha=ChannelSelector(6)) if hidden else {}
    for s in list(sels.values()) + list(hsels.values()):
        with torch.no_grad():
            s.alpha.copy_(torch.randn(s.dim) * 2)
    before = {n: s.alpha.detach().clone() for n, s in itertools.chain(sels.items(), hsels.items())}
    rep = project_to_budget(lin, sels, budget, hsels, margin=1e-3)
    hk = {k: int((s.alpha > 0).sum()) for k, s in hsels.items()}
    count = lin.at({n: int((s.alpha > 0).sum()) for n, s in sels.items()}, hk)
    assert rep['after'] == count <= budget
    assert count > budget - (20. + 2 * 8 + 3)
    moved = 0
    for n, s in itertools.chain(sels.items(), hsels.items()):
        a, b = s.alpha.detach(), before[n]
        same_side = (a > 0) == (b > 0)
        # an α that keeps its side keeps its value (up to the margin around 0)
        assert torch.allclose(a[same_side], b[same_side], atol=1e-3, rtol=0)
        assert (a[~same_side].abs() == 1e-3).all()
        moved += int((~same_side).sum())
        # the order of the α within a selector is kept
        kept = set(torch.nonzero(a > 0).flatten().tolist())
        assert all(b[i] >= b[j] for i in kept for j in range(s.dim) if j not in kept)
    assert rep['flipped'] == moved


def test_projection_is_idempotent_and_deterministic():
    lin = _linear()
    sels = dict(a=ChannelSelector(8, gate_init=0.), b=ChannelSelector(4, gate_init=0.))
    rep = project_to_budget(lin, sels, 200.)
    alphas = {n: s.alpha.detach().clone() for n, s in sels.items()}
    again = project_to_budget(lin, sels, 200.)
    assert again['flipped'] == 0 and again['after'] == rep['after']
    assert all(torch.equal(alphas[n], s.alpha) for n, s in sels.items())
