"""LatencyCost: the predictor of a latency table (interpolation, marginals, the differentiable
expected latency, targets) on synthetic tables; no timing here."""
import copy
import math

import pytest
import torch

from mmdcs.selection.budget import CHANNELS, HIDDEN, BudgetError
from mmdcs.selection.latency_cost import (LATENCY_TABLE_FORMAT, LatencyCost, LatencyTableError,
                                          selection_options)
from mmdcs.selection.selectors import ChannelSelector
from _tools import assert_close_scaled  # noqa: E402 (tests/ is on sys.path)


def f_chan(d):  # a synthetic channel-only unit: time per width, nonlinear
    return 0.05 + 0.01 * d + 0.0004 * d * d


def f_pair(d, h):
    return 0.1 + 0.002 * d + 0.001 * h + 0.00003 * d * h + 0.00001 * h * h


def f_hid(h):
    return 0.02 + 0.003 * h


def synthetic_table(d=48, h=96, hh=64):
    gd = [8, 16, 24, 32, 48]
    gh = [8, 32, 64, 96]
    ghh = [8, 16, 40, 64]
    return dict(
        format=LATENCY_TABLE_FORMAT, arch='toy', variant='kcr',
        selection=dict(qk_select=None, mlp_select=True, select_hidden=True, theta_rank=None),
        input_shape=[32, 32], batch=1, threads=1, dtype='fp32', device='cpu',
        device_name='Test CPU', baseline_ms=5.5, const_ms=3.0,
        units=[
            dict(path='a', channels=d, hidden=None, grid_channels=gd,
                 ms=[f_chan(x) for x in gd]),
            dict(path='b', channels=d, hidden=h, grid_channels=gd, grid_hidden=gh,
                 ms=[[f_pair(x, y) for y in gh] for x in gd]),
            dict(path='c', channels=None, hidden=hh, grid_hidden=ghh,
                 ms=[f_hid(y) for y in ghh]),
        ])


def lerp(grid, f, w):
    for a, b in zip(grid, grid[1:]):
        if a <= w <= b:
            return f(a) + (w - a) * (f(b) - f(a)) / (b - a)
    raise AssertionError


def test_predictor_is_the_sum_of_the_entries_at_grid_points():
    cost = LatencyCost(synthetic_table())
    assert cost.resource == 'latency' and cost.baseline == 5.5
    assert cost.unit_dims() == {(CHANNELS, 'a'): 48, (CHANNELS, 'b'): 48, (HIDDEN, 'b'): 96,
                                (HIDDEN, 'c'): 64}
    for da, db, hb, hc in [(48, 48, 96, 64), (8, 16, 32, 16), (24, 32, 8, 40)]:
        want = 3.0 + f_chan(da) + f_pair(db, hb) + f_hid(hc)
        got = cost.count({(CHANNELS, 'a'): da, (CHANNELS, 'b'): db, (HIDDEN, 'b'): hb,
                          (HIDDEN, 'c'): hc})
        assert_close_scaled(got, want, 1e-12)
        assert_close_scaled(cost.at({'a': da, 'b': db}, {'b': hb, 'c': hc}), want, 1e-12)
    assert_close_scaled(cost.ceiling, 3.0 + f_chan(48) + f_pair(48, 96) + f_hid(64), 1e-12)


def test_interpolates_between_grid_points():
    cost = LatencyCost(synthetic_table())
    gd, gh = [8, 16, 24, 32, 48], [8, 32, 64, 96]
    # channel-only and hidden-only: piecewise linear
    got = cost.count({(CHANNELS, 'a'): 40, (HIDDEN, 'c'): 30})
    want = (3.0 + lerp(gd, f_chan, 40) + f_pair(48, 96) + lerp([8, 16, 40, 64], f_hid, 30))
    assert_close_scaled(got, want, 1e-12)
    # bilinear inside a cell: (d, h) = (20, 50) in [16, 24] x [32, 64]
    s, t = (20 - 16) / 8, (50 - 32) / 32
    want_b = ((1 - s) * (1 - t) * f_pair(16, 32) + s * (1 - t) * f_pair(24, 32)
              + (1 - s) * t * f_pair(16, 64) + s * t * f_pair(24, 64))
    got = cost.count({(CHANNELS, 'b'): 20, (HIDDEN, 'b'): 50})
    assert_close_scaled(got - (3.0 + f_chan(48) + f_hid(64)), want_b, 1e-12)
    # between two grid points the value lies between them (monotone synthetic entries)
    lo = cost.count({(CHANNELS, 'a'): 32})
    hi = cost.count({(CHANNELS, 'a'): 48})
    assert lo < cost.count({(CHANNELS, 'a'): 37}) < hi
    # below the grid: the first segment extended, never negative
    assert cost.floor < cost.floor_at(8) and cost.floor > 0


def test_marginal_is_the_exact_saving_of_a_group_inside_a_segment():
    cost = LatencyCost(synthetic_table())
    widths = {(CHANNELS, 'a'): 48, (CHANNELS, 'b'): 40, (HIDDEN, 'b'): 64, (HIDDEN, 'c'): 40}
    for unit in widths:
        w = widths[unit]
        lower = dict(widths)
        lower[unit] = w - 8
        saved = cost.count(widths) - cost.count(lower)
        assert_close_scaled(8 * cost.marginal(unit, widths), saved, 1e-10, what=str(unit))
    # the channels of b cost per kept hidden unit and the reverse (bilinear)
    w2 = dict(widths)
    w2[(HIDDEN, 'b')] = 32
    assert cost.marginal((CHANNELS, 'b'), w2) != cost.marginal((CHANNELS, 'b'), widths)
    assert cost.marginal((CHANNELS, 'a'), w2) == cost.marginal((CHANNELS, 'a'), widths)
    with pytest.raises(KeyError):
        cost.marginal(('heads', 'a'), widths)


def _selectors(seed=0):
    g = torch.Generator().manual_seed(seed)
    sel = {n: ChannelSelector(48) for n in ('a', 'b')}
    hid = {k: ChannelSelector(d) for k, d in (('b', 96), ('c', 64))}
    for s in list(sel.values()) + list(hid.values()):
        s.double()
        with torch.no_grad():
            s.alpha.copy_(torch.randn(s.alpha.shape, generator=g, dtype=torch.float64))
    return sel, hid


def test_expected_latency_gradient_matches_finite_differences():
    cost = LatencyCost(synthetic_table())
    sel, hid = _selectors()
    params = [s.alpha for s in list(sel.values()) + list(hid.values())]
    value = cost.expected(sel, 'gate', hid)
    assert value.dtype == torch.float64
    # the value is the predictor at the expected widths
    e = {n: float(s.expected_kept().detach()) for n, s in sel.items()}
    eh = {k: float(s.expected_kept().detach()) for k, s in hid.items()}
    assert_close_scaled(float(value.detach()), cost.at(e, eh), 1e-12)
    grads = torch.autograd.grad(value, params)
    eps = 1e-6
    for p, g in zip(params, grads):
        for i in range(0, p.numel(), 7):
            with torch.no_grad():
                p[i] += eps
                up = float(cost.expected(sel, 'gate', hid))
                p[i] -= 2 * eps
                down = float(cost.expected(sel, 'gate', hid))
                p[i] += eps
            assert_close_scaled(float(g[i]), (up - down) / (2 * eps), 1e-5)
    assert all(float(g.abs().sum()) > 0 for g in grads)
    # without hidden selectors the hidden widths are full
    v_full = cost.expected(sel, 'gate')
    assert_close_scaled(float(v_full), cost.at(e), 1e-12)


def test_targets_outside_floor_and_ceiling_name_them():
    cost = LatencyCost(synthetic_table())
    budget = cost.check_target(0.7, '--target-latency')
    assert_close_scaled(budget, 0.7 * 5.5, 1e-12)
    floor = cost.ratio(cost.floor_at(8))
    for bad in (0, -0.5, 1, 1.5, floor * 0.99):
        with pytest.raises(BudgetError, match='floor .*ceiling'):
            cost.check_target(bad, '--target-latency', multiple_of=8)
    with pytest.raises(BudgetError, match=f'floor {floor:.4f}'):
        cost.check_target(floor * 0.99, '--target-latency', multiple_of=8)
    for bad in ('x', '', True, None):
        with pytest.raises(BudgetError, match='not a number|is empty'):
            cost.check_target(bad, 'latency')


def test_malformed_tables_are_refused_by_name():
    good = synthetic_table()
    LatencyCost(good)
    cases = [
        (lambda t: t.update(format='x'), 'not an mmdcs latency table'),
        (lambda t: t.pop('baseline_ms'), 'baseline_ms'),
        (lambda t: t.update(baseline_ms=-1.), 'positive'),
        (lambda t: t.update(units=[]), 'units'),
        (lambda t: t['units'][0].update(grid_channels=[8, 16]), 'full width'),
        (lambda t: t['units'][0].update(grid_channels=[16, 8, 48]), 'increasing'),
        (lambda t: t['units'][0]['ms'].pop(), 'list of 5 times'),
        (lambda t: t['units'][1]['ms'][0].pop(), 'ms row 0'),
        (lambda t: t['units'][2].update(ms=['a'] * 4), 'finite number'),
        (lambda t: t['units'].append(copy.deepcopy(t['units'][0])), 'listed twice'),
    ]
    for change, match in cases:
        t = copy.deepcopy(good)
        change(t)
        with pytest.raises(LatencyTableError, match=match):
            LatencyCost(t)


class _Toy(torch.nn.Module):
    """What from_table reads of a backbone: arch, variant, selection options, units."""
    arch, variant, qk_select, mlp_select, select_hidden, theta_rank = (
        'toy', 'kcr', None, True, True, None)

    def __init__(self):
        super().__init__()
        from mmdcs.selection import GatedMLP
        self.a = GatedMLP(48, 96, select=True)
        self.b = GatedMLP(48, 96, select=True, select_hidden=True)
        self.c = torch.nn.Module()
        self.c.hidden_select = ChannelSelector(64)
        self.c.hidden_features = 64
        self.c.prune_hidden_ = lambda keep, pad=(): None


def test_from_table_checks_the_backbone():
    toy = _Toy()
    assert selection_options(toy)['select_hidden'] is True
    LatencyCost.from_table(synthetic_table(), toy)
    for key, val, match in (('arch', 'vit-s16', 'arch'), ('variant', 'dcs', 'variant'),
                            ('selection', dict(qk_select=None, mlp_select=True,
                                               select_hidden=False, theta_rank=None),
                             'select_hidden')):
        t = synthetic_table()
        t[key] = val
        with pytest.raises(LatencyTableError, match=match):
            LatencyCost.from_table(t, toy)
    t = synthetic_table()
    t['units'][0]['path'] = 'z'
    with pytest.raises(LatencyTableError, match='not in the table: a'):
        LatencyCost.from_table(t, toy)
    with pytest.raises(LatencyTableError, match='input 32x32.*64x64'):
        LatencyCost.from_table(synthetic_table(), toy, input_size=(64, 64))
    big = _Toy()
    big.a = type(big.a)(56, 96, select=True)
    with pytest.raises(LatencyTableError, match='unit a: .*48.*56'):
        LatencyCost.from_table(synthetic_table(), big)


def test_context_warning_names_both():
    cost = LatencyCost(synthetic_table())
    assert cost.context_warnings('Test CPU', 1, 1, 'fp32', warn=False) == []
    with pytest.warns(UserWarning) as record:
        msgs = cost.context_warnings('Other CPU', 4, 16)
    assert [str(r.message) for r in record] == msgs and len(msgs) == 3
    assert any("'Test CPU'" in m and "'Other CPU'" in m for m in msgs)
    assert any('threads = 1' in m and 'threads = 4' in m for m in msgs)
    assert any('batch = 1' in m and 'batch = 16' in m for m in msgs)
    assert not math.isnan(cost.floor)


def test_the_step_of_the_first_channel_group_makes_the_ranking_prune_hidden_units_only():
    """A block that keeps every channel has no gather / scatter: a table that measured one
    group below the full width shows the step, and the joint ranking then keeps every channel
    and meets the target with hidden units alone (the peer's network: Torch-Pruning's hidden
    units); without the step in the table (time linear from full width) it prunes channels
    too."""
    from mmdcs.selection.budget import select_jointly
    gd, gh = [8, 16, 24, 32, 40, 48], [8, 32, 64, 88, 96]

    def table(step):
        def f(d, h):
            return 0.1 + 0.004 * d + 0.001 * h + 0.00003 * d * h + (step if d < 48 else 0.)
        units = [dict(path=p, channels=48, hidden=96, grid_channels=gd, grid_hidden=gh,
                      ms=[[f(x, y) for y in gh] for x in gd]) for p in ('b1', 'b2')]
        return dict(synthetic_table(), units=units, const_ms=0.2, baseline_ms=2 * f(48, 96) + 0.2)

    ones = {p: torch.ones(n) for p, n in (('b1', 48), ('b2', 48))}
    hidden = {p: torch.ones(96) for p in ('b1', 'b2')}
    for step, channels_kept in ((0.1, True), (0., False)):
        cost = LatencyCost(table(step))
        budget = cost.check_target(0.8, '--target-latency', 8)
        keep, hidden_keep = select_jointly(ones, hidden, cost, budget, 8, 'mean')
        assert all((len(k) == 48) == channels_kept for k in keep.values()), (step, keep)
        assert any(len(h) < 96 for h in hidden_keep.values())
        kept = cost.at({p: len(k) for p, k in keep.items()},
                       {p: len(h) for p, h in hidden_keep.items()})
        assert abs(cost.ratio(kept) - 0.8) <= 0.01


def test_a_step_within_its_noise_is_none_so_two_noisy_builds_give_one_subnet():
    """The step point one group below full width is left out where its mean deviation from the
    line through its neighbours, over the lines of its axis, is within their noise (ms ·
    spread, over √lines). Two builds of a table whose time is linear, with noise of either sign
    on the first channel group's entries in one and on the first hidden group's in the other
    (each positive at the other axis's full width, so each blocks one unit type's first
    group), then rank to the same subnet; without the recorded spread they do not. A step that
    every line shows stays."""
    from mmdcs.selection.budget import select_jointly
    from mmdcs.selection.latency_cost import step_is_noise
    gd, gh = [8, 16, 24, 32, 40, 48], [8, 32, 64, 88, 96]
    d_noise = dict(zip(gh, (-1, 1, -1, 1, 1)))      # along the channel step's row
    h_noise = dict(zip(gd, (-1, 1, -1, 1, -1, 1)))  # along the hidden step's column

    def f(d, h):
        return 0.1 + 0.004 * d + 0.001 * h + 0.00003 * d * h

    def table(bump_d, bump_h, spread, every=False):
        ms = [[f(x, y) + (bump_d * (1 if every else d_noise[y]) if x == 40 else 0.)
               + (bump_h * h_noise[x] if y == 88 else 0.) for y in gh] for x in gd]
        units = [dict(path=p, channels=48, hidden=96, grid_channels=gd, grid_hidden=gh, ms=ms,
                      spread=[[spread] * len(gh) for _ in gd]) for p in ('b1', 'b2')]
        return dict(synthetic_table(), units=units, const_ms=0.2, baseline_ms=2 * f(48, 96) + 0.2)

    def ranked(t, with_spread=True):
        t = copy.deepcopy(t)
        if not with_spread:
            for u in t['units']:
                u.pop('spread')
        cost = LatencyCost(t)
        ones = {p: torch.ones(48) for p in ('b1', 'b2')}
        hidden = {p: torch.ones(96) for p in ('b1', 'b2')}
        keep, hidden_keep = select_jointly(ones, hidden, cost, cost.check_target(
            0.8, '--target-latency', 8), 8, 'mean')
        return ({p: len(k) for p, k in keep.items()}, {p: len(h) for p, h in hidden_keep.items()})

    # noise of ±0.06 ms on entries of 0.3-0.6 ms whose rounds spread 25 %
    first, second = table(0.06, 0., 0.25), table(0., 0.06, 0.25)
    assert ranked(first, False) != ranked(second, False)
    assert ranked(first) == ranked(second)
    # +0.06 ms on every line, rounds that spread 1 %: a step, kept (every channel kept)
    keep, hidden_keep = ranked(table(0.06, 0., 0.01, every=True))
    assert all(k == 48 for k in keep.values()) and any(h < 96 for h in hidden_keep.values())
    # a curve: the point one group below full (8) is tested, one further below is not a step
    assert step_is_noise([8, 16, 24], [[1., 2.05, 3.]], [[0.05, 0.05, 0.05]], 8)
    assert not step_is_noise([8, 16, 24], [[1., 2.2, 3.]], [[0.05, 0.05, 0.05]], 8)
    assert not step_is_noise([8, 12, 24], [[1., 1.5, 3.]], [[0.05, 0.05, 0.05]], 8)
    bad = table(0., 0., 0.1)
    bad['units'][0]['spread'] = [0.1] * len(gd)
    with pytest.raises(LatencyTableError, match='spread'):
        LatencyCost(bad)
