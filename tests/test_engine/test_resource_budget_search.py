"""The search's budget takes any resource of the registry (mmdcs.selection.budget.build_cost): a
non-linear per-unit table registered as a resource (the shape of a latency table) is aimed at
with the same multiplier and projection as FLOPs, named in the config with its option, and
logged as ``<resource>_ratio_kept``."""
import copy

import pytest

from mmdcs.selection import budget as budget_mod
from mmdcs.selection import hidden_selectors, prunable_modules
from mmdcs.selection.budget import register_resource
from _resource_costs import TableCost  # noqa: E402 (tests/ is on sys.path)
from test_budget_search import _classifier, _search  # noqa: E402


@pytest.fixture
def toy_resource(monkeypatch):
    monkeypatch.setattr(budget_mod, '_RESOURCES', dict(budget_mod._RESOURCES))
    seen = {}

    def build(model, input_size=None, toy_table=None):
        seen['table'] = toy_table
        backbone = model.backbone
        return TableCost({n: m.select.dim for n, m in prunable_modules(backbone).items()},
                         {k: s.dim for k, s in hidden_selectors(backbone).items()},
                         const=40., input_size=input_size)

    register_resource('toy', build, options=('toy_table', ))
    return seen


def _deployed_ratio(model):
    cost = model._budget
    kept = {n: int((s.alpha > 0).sum()) for n, s in model._selectors.items()}
    hidden = {k: int((s.alpha > 0).sum()) for k, s in model._hidden_selectors.items()}
    return cost.ratio(cost.at(kept, hidden))


def test_a_search_with_a_table_resource_ends_within_2_percent(toy_resource):
    base = _classifier(dict(toy=0.6), gate_init=1.0, toy_table='synthetic.json')
    assert toy_resource['table'] == 'synthetic.json'
    assert isinstance(base._budget, TableCost)
    model = copy.deepcopy(base)
    first, out, logged = _search(model, 30)
    assert float(first['arch_cost_target']) > 0.6
    assert float(out['arch_cost_target']) == pytest.approx(0.6)
    assert _deployed_ratio(model) == pytest.approx(0.6, abs=0.02)
    assert _deployed_ratio(model) <= 0.6 + 1e-9
    assert logged['arch_cost_ratio_kept'] == pytest.approx(_deployed_ratio(model))
    assert float(out['arch_toy_ratio_kept']) == pytest.approx(float(out['arch_cost_ratio_kept']))


def test_options_of_a_resource_are_checked(toy_resource):
    with pytest.raises(ValueError, match='toy_table is not an option of a flops target'):
        _classifier(dict(flops=0.6), toy_table='x.json')
    with pytest.raises(ValueError, match='unknown keys'):
        _classifier(dict(toy=0.6), other_table='x.json')


def test_a_search_with_a_latency_target_ends_within_2_percent_predicted(tmp_path):
    """model.cost = dict(target=dict(latency=0.6), latency_table=T) on a synthetic table of the
    supernet: the search's deployed network ends within ±2 % of the baseline latency predicted
    by the table, from below, and the log has the predicted ratio (latency_ratio_kept)."""
    import json

    from mmdcs.models.backbones.vit import ViT
    from _resource_costs import synthetic_latency_table  # noqa: E402
    table = synthetic_latency_table(ViT(arch='deit-tiny', variant='dcs', img_size=16),
                                    [16, 16])
    path = str(tmp_path / 'table.json')
    with open(path, 'w') as f:
        json.dump(table, f)
    model = _classifier(dict(latency=0.6), gate_init=1.0, latency_table=path)
    assert model._budget.resource == 'latency'
    assert model._budget.meta['table_sha256']
    first, out, logged = _search(model, 30)
    assert float(out['arch_cost_target']) == pytest.approx(0.6)
    assert _deployed_ratio(model) == pytest.approx(0.6, abs=0.02)
    assert _deployed_ratio(model) <= 0.6 + 1e-9
    assert logged['arch_cost_ratio_kept'] == pytest.approx(_deployed_ratio(model))
    assert float(out['arch_latency_ratio_kept']) == pytest.approx(
        float(out['arch_cost_ratio_kept']))


def test_a_latency_target_without_a_usable_table_is_refused(tmp_path):
    from mmdcs.selection import BudgetError
    from mmdcs.selection.latency_cost import LatencyTableError
    with pytest.raises(BudgetError, match='needs a latency table'):
        _classifier(dict(latency=0.6))
    with pytest.raises(LatencyTableError, match='not found'):
        _classifier(dict(latency=0.6), latency_table=str(tmp_path / 'none.json'))
