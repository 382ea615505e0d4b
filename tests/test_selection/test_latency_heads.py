"""Heads as a unit of a latency table (format 2, method.md §2.7 and §11): the predictor's head
term (piecewise linear in the kept heads), its marginal, its gradient in the head α, the
refusals (head units in a format-1 table, a table without head units for a select_heads
backbone), and the one reader of table files. Synthetic tables: no timing here."""
import copy
import json

import pytest
import torch

from mmdcs.models.backbones.vit import ViT
from mmdcs.selection.budget import CHANNELS, HEADS, HIDDEN
from mmdcs.selection.latency_cost import (LATENCY_TABLE_FORMAT, LATENCY_TABLE_FORMATS,
                                          LatencyCost, LatencyTableError, read_table)
from mmdcs.selection.selectors import ChannelSelector
from _resource_costs import synthetic_latency_table  # noqa: E402 (tests/ is on sys.path)
from _tools import assert_close_scaled  # noqa: E402
from test_latency_cost import f_chan, f_hid, f_pair, lerp, synthetic_table  # noqa: E402


def f_head(a, k=0):
    """Synthetic ms of an attention with ``a`` kept heads: a fixed part and a convex part."""
    return 0.3 + 0.05 * (1 + k) * a + 0.004 * a * a


GRID_X = [1, 2, 3, 4, 5, 6, 9, 12]  # every count up to 6, then coarser (12 heads)
GRID_Y = [1, 2, 3]


def heads_table():
    t = synthetic_table()
    t['units'] += [dict(path='x', heads=12, grid_heads=GRID_X, ms=[f_head(a) for a in GRID_X]),
                   dict(path='y', heads=3, grid_heads=GRID_Y,
                        ms=[f_head(a, 1) for a in GRID_Y])]
    return t


def test_format_2_and_format_1_tables():
    assert LATENCY_TABLE_FORMAT == 'mmdcs.latency_table/2' and LATENCY_TABLE_FORMATS[0] == \
        'mmdcs.latency_table/1'
    old = dict(synthetic_table(), format='mmdcs.latency_table/1')
    assert LatencyCost(old).head_dims == {}  # a table of the first format still loads
    with pytest.raises(LatencyTableError, match='head units need format'):
        LatencyCost(dict(heads_table(), format='mmdcs.latency_table/1'))


def test_predictor_with_heads_is_the_sum_of_the_entries_at_grid_points():
    cost = LatencyCost(heads_table())
    assert cost.head_dims == {'x': 12, 'y': 3}
    dims = cost.unit_dims()
    assert dims[(HEADS, 'x')] == 12 and dims[(HEADS, 'y')] == 3 and len(dims) == 6
    for ax, ay in [(12, 3), (1, 1), (4, 2), (9, 3)]:
        widths = {(CHANNELS, 'a'): 16, (CHANNELS, 'b'): 24, (HIDDEN, 'b'): 32,
                  (HIDDEN, 'c'): 40, (HEADS, 'x'): ax, (HEADS, 'y'): ay}
        want = 3.0 + f_chan(16) + f_pair(24, 32) + f_hid(40) + f_head(ax) + f_head(ay, 1)
        assert_close_scaled(cost.count(widths), want, 1e-12)
        assert_close_scaled(cost.at({'a': 16, 'b': 24}, {'b': 32, 'c': 40},
                                    {'x': ax, 'y': ay}), want, 1e-12)
    # heads not given: all kept
    assert_close_scaled(cost.ceiling, 3.0 + f_chan(48) + f_pair(48, 96) + f_hid(64)
                        + f_head(12) + f_head(3, 1), 1e-12)
    # the floor keeps one head per attention, whatever the group size of the widths
    assert_close_scaled(cost.floor_at(8),
                        3.0 + f_chan(8) + f_pair(8, 8) + f_hid(8) + f_head(1) + f_head(1, 1),
                        1e-12)


def test_heads_interpolate_and_their_marginal_is_the_saving_of_one_head():
    cost = LatencyCost(heads_table())
    rest = cost.count({(HEADS, 'x'): 12}) - f_head(12)
    for a in (7, 8, 10.5, 11):  # between the coarse grid points 6, 9, 12
        assert_close_scaled(cost.count({(HEADS, 'x'): a}) - rest, lerp(GRID_X, f_head, a),
                            1e-12)
    assert f_head(7) < lerp(GRID_X, f_head, 7)  # a chord above the convex curve: interpolated
    full = {u: d for u, d in cost.unit_dims().items()}
    for a in (12, 9, 5, 2):
        w = {**full, (HEADS, 'x'): a}
        less = {**w, (HEADS, 'x'): a - 1}
        assert_close_scaled(cost.marginal((HEADS, 'x'), w), cost.count(w) - cost.count(less),
                            1e-10, what=f'{a} heads')
    # a head's time does not depend on the MLP widths
    narrow = {**full, (CHANNELS, 'b'): 8, (HIDDEN, 'b'): 8}
    assert cost.marginal((HEADS, 'y'), narrow) == cost.marginal((HEADS, 'y'), full)


def _selectors(seed=0):
    g = torch.Generator().manual_seed(seed)
    sel = {n: ChannelSelector(48) for n in ('a', 'b')}
    hid = {k: ChannelSelector(d) for k, d in (('b', 96), ('c', 64))}
    heads = {'x': ChannelSelector(12), 'y': ChannelSelector(3)}
    for s in list(sel.values()) + list(hid.values()) + list(heads.values()):
        s.double()
        with torch.no_grad():
            s.alpha.copy_(torch.randn(s.alpha.shape, generator=g, dtype=torch.float64))
    return sel, hid, heads


def test_expected_latency_gradient_in_the_head_alpha_matches_finite_differences():
    cost = LatencyCost(heads_table())
    sel, hid, heads = _selectors()
    value = cost.expected(sel, 'gate', hid, heads)
    assert value.dtype == torch.float64
    e = {n: float(s.expected_kept().detach()) for n, s in sel.items()}
    eh = {k: float(s.expected_kept().detach()) for k, s in hid.items()}
    ea = {k: float(s.expected_kept().detach()) for k, s in heads.items()}
    assert all(abs(v - round(v)) > 1e-6 for v in ea.values())  # between two head counts
    assert_close_scaled(float(value.detach()), cost.at(e, eh, ea), 1e-12)
    params = [s.alpha for s in heads.values()] + [sel['a'].alpha]
    grads = torch.autograd.grad(value, params)
    eps = 1e-6
    for p, g in zip(params, grads):
        for i in range(p.numel()):
            with torch.no_grad():
                p[i] += eps
                up = float(cost.expected(sel, 'gate', hid, heads).detach())
                p[i] -= 2 * eps
                down = float(cost.expected(sel, 'gate', hid, heads).detach())
                p[i] += eps
            assert_close_scaled(float(g[i]), (up - down) / (2 * eps), 1e-5)
        assert float(g.abs().sum()) > 0
    # dE[latency]/dα_i of a head = the slope of its attention's curve at E[A] times σ'(α_i)
    ax = heads['x'].alpha.detach()
    slope = cost.marginal((HEADS, 'x'), {(HEADS, 'x'): ea['x']})
    assert_close_scaled(grads[0], slope * torch.sigmoid(ax) * (1 - torch.sigmoid(ax)), 1e-9)
    # without head selectors every head is kept
    assert_close_scaled(float(cost.expected(sel, 'gate', hid).detach()),
                        cost.at(e, eh), 1e-12)


def test_a_table_without_head_units_is_refused_for_a_select_heads_backbone(tmp_path):
    heads = ViT('deit-tiny', variant='kcr', img_size=32, select_heads=True)
    plain = ViT('deit-tiny', variant='kcr', img_size=32)
    old = synthetic_latency_table(plain, [32, 32])
    assert not any('heads' in u for u in old['units'])
    with pytest.raises(LatencyTableError) as e:
        LatencyCost.from_table(old, heads)
    assert str(e.value) == ('the latency table has no head units (measured without '
                            'select_heads) and this backbone selects heads: measure its table '
                            'with tools/analysis/latency_table.py')
    # the same as a format-1 file, read by the one reader: one line naming the file
    path = tmp_path / 'old.json'
    path.write_text(json.dumps(dict(old, format='mmdcs.latency_table/1')))
    with pytest.raises(LatencyTableError, match=r'^.*old\.json: the latency table has no head'):
        LatencyCost.from_file(str(path), heads)
    assert LatencyCost.from_file(str(path), plain).head_dims == {}  # fine without heads
    # a table with head units fits the select_heads backbone, not the plain one
    new = synthetic_latency_table(heads, [32, 32])
    cost = LatencyCost.from_table(new, heads)
    assert cost.head_dims == {f'blocks.{i}.attn': 3 for i in range(12)}
    with pytest.raises(LatencyTableError, match='select_heads=True .table. vs False'):
        LatencyCost.from_table(new, plain)
    wrong = copy.deepcopy(new)
    next(u for u in wrong['units'] if 'heads' in u)['path'] = 'blocks.0.nothing'
    with pytest.raises(LatencyTableError, match="head units do not match"):
        LatencyCost.from_table(wrong, heads)


def test_one_reader_of_table_files(tmp_path):
    """read_table is what the budget resource, the tools and the analysis read a file with:
    every check of a table's content in one place."""
    import importlib
    latency_table = importlib.import_module('mmdcs.analysis.latency_table')
    counting = importlib.import_module('mmdcs.models.counting')
    assert latency_table.load_table is read_table
    assert not hasattr(counting, 'read_latency_table')
    table = synthetic_latency_table(ViT('deit-tiny', variant='kcr', img_size=32), [32, 32])
    path = tmp_path / 't.json'
    path.write_text(json.dumps(table))
    assert read_table(str(path)) == table
    path.write_text(json.dumps({k: v for k, v in table.items() if k != 'device_name'}))
    with pytest.raises(LatencyTableError, match='t.json: not a valid latency table .missing '
                                                'device_name'):
        LatencyCost.from_file(str(path))


@pytest.mark.parametrize('target', [0.5, 0.6, 0.7, 0.8])
def test_the_export_greedy_adds_back_only_what_fits_on_a_curved_table(target):
    """A measured curve's slope above a width is not the one below it: the greedy's add-back
    counts what a group adds rather than estimating it with the marginal below (which went
    to 0.512 at a 0.5 target on this channel-only table, over the budget)."""
    from mmdcs.selection.budget import alpha_scores, budget_subnet
    torch.manual_seed(0)
    sup = ViT('deit-tiny', variant='dcs', img_size=32)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in sup.named_parameters():
            if name.endswith('alpha'):
                p.copy_(torch.randn(p.shape, generator=g).abs() + 0.1)
    cost = LatencyCost.from_table(synthetic_latency_table(sup, [32, 32]), sup)
    spec = budget_subnet(sup, 'vit', 'deit-tiny', 'dcs', alpha_scores(sup), cost, target,
                         multiple_of=8)
    achieved = spec.meta['budget']['achieved_ratio']
    assert target - 0.01 <= achieved <= target + 1e-12
