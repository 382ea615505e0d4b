"""The latency table builder with a synthetic timer (no timing assertions): the units it finds,
the exact synthetic unit costs it records, the constant, the round trip through a file, the
validation, and the refusal of corrupt, truncated or mismatched tables."""
import json
import random

import pytest
import torch
import torch.nn as nn

from mmdcs.analysis.latency import Meter
from mmdcs.analysis.latency_table import (_units, build_table, default_clock, extra_modules,
                                          load_table, pruned_copy, random_widths, timed_modules,
                                          validate, width_grid)
from mmdcs.models.backbones.base import SelectableBackbone
from mmdcs.models.backbones.mobilevit import MobileViT
from mmdcs.models.backbones.vit import ViT, Block
from mmdcs.selection.budget import (CHANNELS, HIDDEN, budget_subnet, hidden_magnitude_scores,
                                    magnitude_scores)
from mmdcs.selection.latency_cost import LatencyCost, LatencyTableError
from mmdcs.selection.mlp import PrunedMLP
from _tools import assert_close_scaled  # noqa: E402 (tests/ is on sys.path)

C, B, A0 = 2.0, 9.0, 0.05  # ms: the network's constant, the baseline, a block without its MLP


def f_mlp(d, h):
    """Synthetic ms of a pruned MLP: bilinear in (kept channels, hidden units), so that the
    table's bilinear interpolation is exact between grid points too."""
    return 0.01 + 0.001 * d + 0.0005 * h + 0.00002 * d * h


def synthetic_ms(module: nn.Module) -> float:
    if isinstance(module, SelectableBackbone) and module.variant == 'baseline':
        return B
    total = C if isinstance(module, SelectableBackbone) else 0.
    for m in module.modules():
        if isinstance(m, PrunedMLP):
            total += f_mlp(m.kept, m.hidden_features)
        elif isinstance(m, Block):
            total += A0
    return total


def synthetic_timer(fn, module):
    return synthetic_ms(module) / 1e3  # seconds per call


def _vit(select_hidden=True):
    sup = ViT('deit-tiny', variant='kcr', img_size=32, select_hidden=select_hidden).eval()
    base = ViT('deit-tiny', variant='baseline', img_size=32).eval()
    return sup, base


def test_width_grid():
    # one group below the full width too: the step when a block's first group goes
    assert width_grid(384) == [8, 16, 24, 32, 48, 72, 104, 152, 224, 336, 376, 384]
    assert width_grid(96) == [8, 16, 24, 32, 48, 72, 88, 96]
    assert width_grid(100) == [8, 16, 24, 32, 48, 72, 96, 100]
    assert width_grid(6) == [6]
    g = width_grid(1536)
    assert g[-1] == 1536 and g[-2] == 1528 and all(w % 8 == 0 for w in g) and g == sorted(set(g))


STEP = 1.0  # ms: the gather / scatter of a pruned MLP that keeps fewer than all its channels


def stepped_ms(module: nn.Module) -> float:
    """synthetic_ms with a step: a block whose MLP lost a channel pays the gather / scatter
    (a full-width MLP has none), and the time is not linear in the width above 96 (a kink)."""
    total = synthetic_ms(module)
    for m in module.modules():
        if isinstance(m, PrunedMLP):
            total += (0. if m.full else STEP) + 0.01 * max(0, m.kept - 96)
    return total


def test_the_table_sees_the_step_and_where_time_is_not_linear():
    """One group below the full width is measured (the step of the gather / scatter is in the
    table: removing the first group costs time), and where the time bends between two grid
    points the segments around the bend are measured at their middles (refine)."""
    sup, base = _vit(select_hidden=False)
    table = build_table(sup, base, (32, 32), rounds=1, warmup=0, multiple_of=16,
                        meter=lambda f, m: stepped_ms(m) / 1e3)
    u = table['units'][0]
    assert u['grid_channels'][-2:] == [176, 192]
    assert {80, 112} <= set(u['grid_channels'])  # around the kink at 96 (64 ... 144)
    for d, t in zip(u['grid_channels'], u['ms']):
        want = A0 + f_mlp(d, 768) + (0. if d == 192 else STEP) + 0.01 * max(0, d - 96)
        assert_close_scaled(t, want, 1e-9)
    assert table['refine'] == 1 and len(u['spread']) == len(u['ms'])
    cost = LatencyCost.from_table(table, sup)
    first = (CHANNELS, u['path'])
    # the first group of channels adds time (the step), the next ones save it
    assert cost.marginal(first, {first: 192}) < 0 < cost.marginal(first, {first: 176})
    flat = build_table(sup, base, (32, 32), rounds=1, warmup=0, multiple_of=16, refine=0,
                       meter=lambda f, m: stepped_ms(m) / 1e3)
    assert not {80, 112} & set(flat['units'][0]['grid_channels'])


def test_noisy_entries_are_measured_again():
    """An entry whose rounds spread more than ``noisy`` is visited once more (and its spread
    recorded); without ``noisy`` it is not."""
    sup, base = _vit(select_hidden=False)
    calls = {}

    def meter(fn, module):  # every MLP at 96 channels: rounds alternately 1x and 1.5x
        if isinstance(module, Block) and module.mlp.kept == 96:
            calls[id(module)] = calls.get(id(module), 0) + 1
            return synthetic_ms(module) * (1.5 if calls[id(module)] % 2 else 1.) / 1e3
        return synthetic_ms(module) / 1e3
    quiet = build_table(sup, base, (32, 32), rounds=2, warmup=0, multiple_of=96, noisy=None,
                        meter=meter)
    noisy = build_table(sup, base, (32, 32), rounds=2, warmup=0, multiple_of=96, meter=meter)
    assert noisy['grid_points'] == quiet['grid_points'] + 1
    u = noisy['units'][0]
    assert u['grid_channels'] == [96, 192] and u['spread'][0] > 0.05 and u['spread'][1] == 0


def test_clock_choice():
    assert default_clock('cpu', 1) == 'thread'  # one thread: the calling thread's CPU time
    assert default_clock('cpu', 2) == 'wall' and default_clock('cpu', None) == 'wall'
    with pytest.raises(ValueError, match='clock'):
        Meter(['cycles'])
    calls = []
    for clock in ('wall', 'thread'):
        t = Meter([clock], min_time=0.)(lambda: calls.append(1), nn.Identity())
        assert t[clock] >= 0.
    assert len(calls) == 2  # min_time 0: one call each


def test_builder_records_the_exact_synthetic_unit_costs(tmp_path):
    sup, base = _vit()
    lines = []
    table = build_table(sup, base, (32, 32), threads=1, rounds=3, warmup=0, multiple_of=32,
                        meter=synthetic_timer, progress=lines.append)
    assert lines and 'grid point' in lines[-1]
    assert table['baseline_ms'] == B and table['arch'] == 'deit-tiny'
    assert table['clock'] == 'injected'
    assert table['selection']['select_hidden'] is True
    assert table['input_shape'] == [32, 32] and table['batch'] == 1 and table['threads'] == 1
    assert table['device_name'] and table['torch'] and table['dispersion']['unit_spread_max'] == 0
    assert_close_scaled(table['const_ms'], C, 1e-9)
    assert len(table['units']) == 12
    for u in table['units']:
        assert u['timed'] == u['path'].rsplit('.', 1)[0]  # blocks.i around blocks.i.mlp
        assert u['grid_channels'] == width_grid(192, 32)
        assert u['grid_hidden'] == width_grid(768, 32)
        for i, d in enumerate(u['grid_channels']):
            for j, h in enumerate(u['grid_hidden']):
                assert_close_scaled(u['ms'][i][j], A0 + f_mlp(d, h), 1e-9)
    # the predictor: constant + units, at the grid and (bilinear units) between
    cost = LatencyCost.from_table(table, sup)
    rng = random.Random(1)
    for _ in range(5):
        widths = random_widths(cost, rng, 8)
        want = C + sum(A0 + f_mlp(widths[(CHANNELS, p)], widths[(HIDDEN, p)])
                       for p in cost.dims)
        assert_close_scaled(cost.count(widths), want, 1e-9)
    # the file round-trips
    path = tmp_path / 't.json'
    path.write_text(json.dumps(table))
    again = load_table(str(path))
    assert again == json.loads(json.dumps(table))
    assert LatencyCost(again).count({}) == cost.count({})
    # validation with the same timer: the measured ratio is the synthetic one
    v = validate(table, sup, base, k=3, rounds=2, warmup=0, meter=synthetic_timer)
    assert v['k'] == 3 and len(v['rows']) == 3
    for r in v['rows']:
        assert_close_scaled(r['measured_ratio'], r['predicted_ratio'], 1e-9)
    assert v['mean_abs_error'] < 1e-9


def test_channel_only_units_are_curves():
    sup, base = _vit(select_hidden=False)
    table = build_table(sup, base, (32, 32), rounds=1, warmup=0, multiple_of=64,
                        meter=synthetic_timer)
    u = table['units'][0]
    assert u['hidden'] is None and u['grid_hidden'] is None
    assert u['grid_channels'] == [64, 128, 192]
    for d, t in zip(u['grid_channels'], u['ms']):
        assert_close_scaled(t, A0 + f_mlp(d, 768), 1e-9)


def test_mobilevit_projection_is_charged_to_the_last_layer():
    sup = MobileViT('mobilevit-xs', variant='dcs').eval()
    x = torch.zeros(1, 3, 64, 64)
    dims, _ = _units(sup)
    net = pruned_copy(sup, {}, torch.device('cpu'), torch.float32)
    blocks = timed_modules(net, list(dims), x)
    assert blocks['stages.2.1.transformer.0.mlp'] == 'stages.2.1.transformer.0'
    extra = extra_modules(sup, blocks)
    assert extra == {(CHANNELS, f'stages.{s}.1.transformer.{n - 1}.mlp'):
                     [f'stages.{s}.1.conv_proj.conv'] for s, n in ((2, 2), (3, 4), (4, 3))}


def _table_file(tmp_path):
    sup, base = _vit(select_hidden=False)
    table = build_table(sup, base, (32, 32), rounds=1, warmup=0, multiple_of=96,
                        meter=synthetic_timer)
    path = tmp_path / 'table.json'
    text = json.dumps(table)
    path.write_text(text)
    return sup, table, path, text


def test_corrupt_truncated_and_mismatched_tables_are_refused(tmp_path):
    sup, table, path, text = _table_file(tmp_path)
    load_table(str(path))
    bad = tmp_path / 'bad.json'
    for content, match in ((text[:len(text) // 2], 'corrupt or truncated'),
                           ('\x00\x01garbage', 'corrupt or truncated'),
                           ('[1, 2]', 'must be a JSON object'),
                           (json.dumps(dict(table, format='other')), 'not an mmdcs'),
                           (json.dumps({k: v for k, v in table.items() if k != 'threads'}),
                            'missing threads'),
                           (json.dumps(dict(table, input_shape=[32])), 'input_shape')):
        bad.write_text(content)
        with pytest.raises(LatencyTableError, match='bad.json: not a valid latency table'):
            load_table(str(bad))
        with pytest.raises(LatencyTableError, match=match):
            load_table(str(bad))
    with pytest.raises(LatencyTableError, match='not found'):
        load_table(str(tmp_path / 'missing.json'))
    # another arch, variant, selection or input size
    with pytest.raises(LatencyTableError, match='arch'):
        LatencyCost.from_table(table, ViT('vit-s16', variant='kcr', img_size=32))
    with pytest.raises(LatencyTableError, match='variant'):
        LatencyCost.from_table(table, ViT('deit-tiny', variant='dcs', img_size=32))
    with pytest.raises(LatencyTableError, match='select_hidden'):
        LatencyCost.from_table(table, ViT('deit-tiny', variant='kcr', img_size=32,
                                          select_hidden=True))
    with pytest.raises(LatencyTableError, match='input 32x32.*64x64'):
        LatencyCost.from_table(table, ViT('deit-tiny', variant='kcr', img_size=64))
    LatencyCost.from_table(table, sup)


def test_the_export_greedy_meets_a_predicted_latency_budget():
    """LatencyCost has LinearCost's interface: the joint ranking of the export
    (budget_subnet) runs on it unchanged and lands within 1 % of the baseline below a
    predicted latency target."""
    sup, base = _vit()
    table = build_table(sup, base, (32, 32), rounds=1, warmup=0, multiple_of=32,
                        meter=synthetic_timer)
    cost = LatencyCost.from_table(table, sup)
    for target in (0.8, 0.6):
        spec = budget_subnet(sup, 'vit', 'deit-tiny', 'kcr', magnitude_scores(sup), cost,
                             target, multiple_of=8, hidden_scores=hidden_magnitude_scores(sup))
        b = spec.meta['budget']
        assert b['resource'] == 'latency' and b['ranked'] == 'channels and hidden units'
        assert abs(b['achieved_ratio'] - target) <= 0.01
        widths = {(CHANNELS, blk.name): blk.kept for blk in spec.blocks}
        widths.update({(HIDDEN, h.name): h.kept for h in spec.hidden})
        assert all(w % 8 == 0 for w in widths.values())
        assert_close_scaled(cost.count(widths), b['achieved'], 1e-12)
