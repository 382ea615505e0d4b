"""One cost interface for every budget (mmdcs.selection.budget.ResourceCost): LinearCost is one
implementation, a non-linear per-unit table (tests/_resource_costs.TableCost, the shape of a
latency table) another; the export's joint ranking, the search's projection and the resource
registry take either."""
import pytest
import torch

from mmdcs.selection import ChannelSelector, LinearCost
from mmdcs.selection import budget as budget_mod
from mmdcs.selection.budget import (BudgetError, ResourceCost, build_cost, register_resource,
                                    resource_names, resource_options, select_jointly)
from mmdcs.selection.budget_search import BudgetCost, project_to_budget
from _resource_costs import TableCost  # noqa: E402 (tests/ is on sys.path)


def _table():
    return TableCost(dict(a=48, b=32), dict(ha=96), const=2.)


def test_linear_and_table_costs_are_resource_costs():
    lin = LinearCost('flops', 400., 100., dict(a=10., b=40.), dict(a=4, b=8))
    assert isinstance(lin, ResourceCost) and isinstance(_table(), ResourceCost)
    assert BudgetCost is ResourceCost  # the search's former name of the same interface
    assert not isinstance(object(), ResourceCost)


def test_the_joint_ranking_meets_a_non_linear_budget():
    """select_jointly on the table cost: the kept widths' count is at most the budget and within
    1 % of the baseline of it by single elements (within one group's cost, about 3.5 % here, in
    groups of 8, every width then a multiple of 8 or full), and the ranking follows the scores
    (lowest first within a unit)."""
    cost = _table()
    g = torch.Generator().manual_seed(0)
    scores = {n: torch.rand(d, generator=g) for n, d in cost.dims.items()}
    hidden = {k: torch.rand(h, generator=g) for k, h in cost.hidden_dims.items()}
    for ratio in (0.4, 0.6, 0.8):
        for m, tol in ((1, 0.01), (8, 0.035)):
            budget = cost.check_target(ratio, 'target', m)
            keep, hkeep = select_jointly(scores, hidden, cost, budget, multiple_of=m)
            kept = {n: len(v) for n, v in keep.items()}
            hkept = {k: len(v) for k, v in hkeep.items()}
            got = cost.ratio(cost.at(kept, hkept))
            assert got <= ratio + 1e-12
            assert got == pytest.approx(ratio, abs=tol), (ratio, m, kept, hkept)
            for n, v in keep.items():
                assert len(v) % m == 0 or len(v) == cost.dims[n]
                dropped = set(range(cost.dims[n])) - set(v)
                if dropped and v:
                    assert max(float(scores[n][i]) for i in dropped) <= min(
                        float(scores[n][i]) for i in v)
    with pytest.raises(BudgetError, match='floor'):
        cost.check_target(0.01, 'target', 8)


def test_the_search_projection_ends_on_a_non_linear_budget():
    """project_to_budget with the table cost: {α > 0} afterwards meets the budget from below,
    within 2 % of the baseline, and only α whose side of 0 changed moved (or a kept one nearer
    to 0 than the margin, 1e-3)."""
    cost = _table()
    torch.manual_seed(0)
    sels = {n: ChannelSelector(d) for n, d in cost.dims.items()}
    hsel = {k: ChannelSelector(h) for k, h in cost.hidden_dims.items()}
    with torch.no_grad():
        for s in list(sels.values()) + list(hsel.values()):
            s.alpha.copy_(torch.randn(s.alpha.shape))
    before = {n: s.alpha.clone() for n, s in {**sels, **hsel}.items()}
    budget = cost.check_target(0.55, 'target')
    rep = project_to_budget(cost, sels, budget, hsel)
    assert rep['after'] <= budget + 1e-9
    assert cost.ratio(rep['after']) == pytest.approx(0.55, abs=0.02)
    for n, s in {**sels, **hsel}.items():
        same_side = (s.alpha > 0) == (before[n] > 0)
        assert float((s.alpha[same_side] - before[n][same_side]).abs().max().detach()) <= 1e-3


def test_the_expected_cost_is_differentiable_and_matches_finite_differences():
    """The table cost's expectation has a gradient in α; d E[count] / d α_i equals the
    finite difference (the interface's contract for the search's multiplier)."""
    cost = _table()
    sels = {n: ChannelSelector(d).double() for n, d in cost.dims.items()}
    with torch.no_grad():
        sels['a'].alpha.copy_(torch.linspace(-2, 1.5, 48))  # E[D̃] between grid points
    e = cost.expected(sels)
    e.backward()
    grad = sels['a'].alpha.grad[5].item()
    eps = 1e-3
    with torch.no_grad():
        sels['a'].alpha[5] += eps
        up = float(cost.expected(sels))
        sels['a'].alpha[5] -= 2 * eps
        down = float(cost.expected(sels))
    assert grad == pytest.approx((up - down) / (2 * eps), rel=1e-4)


def test_resources_are_built_by_name(monkeypatch):
    """The registry: flops and params (mmdcs.models.counting registers them) and any other;
    an unknown resource or an option the resource does not take is one line."""
    import mmdcs.models.counting  # noqa: F401
    assert {'flops', 'params'} <= set(resource_names())
    monkeypatch.setattr(budget_mod, '_RESOURCES', dict(budget_mod._RESOURCES))
    built = {}

    def toy(model, input_size=None, table=None):
        built.update(model=model, input_size=input_size, table=table)
        return _table()

    register_resource('toy', toy, options=('table',))
    assert resource_options('toy') == ('table', )
    cost = build_cost('toy', 'MODEL', (16, 16), table='t.json')
    assert isinstance(cost, TableCost)
    assert built == dict(model='MODEL', input_size=(16, 16), table='t.json')
    with pytest.raises(BudgetError, match='takes no option other'):
        build_cost('toy', 'MODEL', other=1)
    with pytest.raises(BudgetError, match="'nope' is not a budget resource"):
        build_cost('nope', 'MODEL')
