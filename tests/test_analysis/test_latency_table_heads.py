"""The latency table of a select_heads supernet with a synthetic timer (no timing assertions):
every head-selected attention a unit timed over its head counts, the block around it timed whole
with the attention's time subtracted for its MLP unit, the exact synthetic entries, validation,
and the export's joint ranking of channels, hidden units and heads on a predicted latency
budget."""
import random

import pytest
import torch
import torch.nn as nn

from mmdcs.analysis.latency_table import (build_table, head_grid, nested_modules,
                                          pruned_copy, random_widths, timed_modules, validate,
                                          width_grid)
from mmdcs.models.backbones.vit import ViT
from mmdcs.selection import DCSAttention
from mmdcs.selection.budget import (CHANNELS, HEADS, HIDDEN, budget_subnet,
                                    head_magnitude_scores, hidden_magnitude_scores,
                                    magnitude_scores)
from mmdcs.selection.latency_cost import LatencyCost
from _tools import assert_close_scaled  # noqa: E402 (tests/ is on sys.path)
from test_latency_table import A0, C, f_mlp, synthetic_ms  # noqa: E402


def f_attn(a):
    """Synthetic ms of an attention with ``a`` heads (a head costs about 20 channels)."""
    return 0.02 + 0.3 * a + 0.01 * a * a


#: ms of the baseline network (about the supernet's at full width: 2 + 12 · 4.585)
BH = 58.


def heads_ms(module: nn.Module) -> float:
    """synthetic_ms plus every attention's time; the baseline network: BH."""
    if getattr(module, 'variant', None) == 'baseline':
        return BH
    return synthetic_ms(module) + sum(f_attn(m.num_heads) for m in module.modules()
                      if isinstance(m, DCSAttention))


def heads_timer(fn, module):
    return heads_ms(module) / 1e3


def _vit():
    sup = ViT('deit-tiny', variant='kcr', img_size=32, select_hidden=True,
              select_heads=True).eval()
    base = ViT('deit-tiny', variant='baseline', img_size=32).eval()
    return sup, base


def test_head_grid():
    assert head_grid(3) == [1, 2, 3]
    assert head_grid(12) == list(range(1, 13))
    assert head_grid(32) == list(range(1, 17)) + [20, 25, 31, 32]
    assert head_grid(1) == [1]


def test_the_block_around_an_attention_is_timed_whole_minus_it():
    sup, _ = _vit()
    net = pruned_copy(sup, {}, torch.device('cpu'), torch.float32)
    units = [f'blocks.{i}.mlp' for i in range(12)] + [f'blocks.{i}.attn' for i in range(12)]
    blocks = timed_modules(net, units, torch.zeros(1, 3, 32, 32))
    assert blocks['blocks.3.attn'] == 'blocks.3.attn'
    assert blocks['blocks.3.mlp'] == 'blocks.3'
    nested = nested_modules(blocks)
    assert nested['blocks.3.mlp'] == ['blocks.3.attn'] and nested['blocks.3.attn'] == []
    # at a head count, the pruned copy's attentions are narrower
    net = pruned_copy(sup, {(HEADS, 'blocks.0.attn'): 1}, torch.device('cpu'), torch.float32)
    assert net.blocks[0].attn.num_heads == 1 and net.blocks[1].attn.num_heads == 3


def test_builder_records_head_units_and_the_exact_synthetic_costs():
    sup, base = _vit()
    table = build_table(sup, base, (32, 32), rounds=2, warmup=0, multiple_of=64,
                        meter=heads_timer)
    assert table['format'] == 'mmdcs.latency_table/2'
    assert table['selection']['select_heads'] is True
    assert table['baseline_ms'] == BH
    assert_close_scaled(table['const_ms'], C, 1e-9)
    heads = [u for u in table['units'] if 'heads' in u]
    mlps = [u for u in table['units'] if 'heads' not in u]
    assert len(heads) == 12 and len(mlps) == 12
    for u in heads:
        assert u['timed'] == u['path'] and u['grid_heads'] == [1, 2, 3] and u['heads'] == 3
        for a, t in zip(u['grid_heads'], u['ms']):
            assert_close_scaled(t, f_attn(a), 1e-9)
    for u in mlps:
        assert u['timed'] == u['path'].rsplit('.', 1)[0]
        assert u['minus'] == [u['timed'] + '.attn']
        assert u['grid_channels'] == width_grid(192, 64)
        for i, d in enumerate(u['grid_channels']):
            for j, h in enumerate(u['grid_hidden']):
                assert_close_scaled(u['ms'][i][j], A0 + f_mlp(d, h), 1e-9)
    # the predictor at random widths and head counts: the synthetic network's time
    cost = LatencyCost.from_table(table, sup)
    assert cost.head_dims == {f'blocks.{i}.attn': 3 for i in range(12)}
    rng = random.Random(0)
    for _ in range(5):
        widths = random_widths(cost, rng, 8)
        net = pruned_copy(sup, widths, torch.device('cpu'), torch.float32)
        assert_close_scaled(cost.count(widths), heads_ms(net), 1e-9)
    v = validate(table, sup, base, k=4, rounds=1, warmup=0, meter=heads_timer)
    assert v['mean_abs_error'] < 1e-9
    assert any(r['kept_heads'] < 36 for r in v['rows'])  # heads were varied


@pytest.mark.parametrize('target', [0.8, 0.6])
def test_the_export_ranks_heads_on_a_predicted_latency_budget(target):
    """budget_subnet on the table's cost with head scores: channels, hidden units and heads
    ranked jointly per unit of predicted latency, within ±1 % of the baseline below the
    target; the built network's synthetic time is the predicted one. Head 0 of every block
    scores a tenth of its weight norm (the random heads' norms are alike, and each unit's
    scores are weighed by its cost: untouched, every head would be kept): the heads pruned
    are head 0s."""
    sup, base = _vit()
    table = build_table(sup, base, (32, 32), rounds=1, warmup=0, multiple_of=64,
                        meter=heads_timer)
    cost = LatencyCost.from_table(table, sup)
    torch.manual_seed(0)
    heads = head_magnitude_scores(sup)
    for s in heads.values():
        s[0] *= 0.1
    spec = budget_subnet(sup, 'vit', 'deit-tiny', 'kcr', magnitude_scores(sup), cost, target,
                         multiple_of=8, hidden_scores=hidden_magnitude_scores(sup),
                         head_scores=heads, normalize='mean')
    b = spec.meta['budget']
    assert b['resource'] == 'latency' and b['ranked'] == 'channels and hidden units and heads'
    assert target - 0.01 <= b['achieved_ratio'] <= target + 1e-12
    assert len(spec.heads) == 12 and sum(h.kept for h in spec.heads) < 36  # heads pruned
    assert all(h.keep in ([0, 1, 2], [1, 2]) for h in spec.heads)  # the weak ones
    widths = {(CHANNELS, blk.name): blk.kept for blk in spec.blocks}
    widths.update({(HIDDEN, h.name): h.kept for h in spec.hidden})
    widths.update({(HEADS, h.name): h.kept for h in spec.heads})
    assert all(w % 8 == 0 for (kind, _), w in widths.items() if kind != HEADS)
    assert_close_scaled(cost.count(widths), b['achieved'], 1e-12)
    built = ViT('deit-tiny', img_size=32, subnet=spec.to_dict()).eval()
    assert_close_scaled(cost.count(widths), heads_ms(built), 1e-9)


@pytest.mark.parametrize('method', ['alpha', 'magnitude'])
def test_export_api_to_a_latency_target_with_heads(tmp_path, method):
    """mmdcs.apis.export.export_subnet on a select_heads config with --target-latency and a
    table with head units (synthetic, of the config's supernet): the heads are ranked with the
    channels per unit of predicted latency, the subnet (format 3) lists the kept heads, and the
    predicted ratio of what was written is within ±1 % of the baseline below the target."""
    import json

    import mmpretrain.utils
    from mmengine.config import Config

    from mmdcs.apis.export import export_subnet
    from mmdcs.apis.subnet_io import build_model
    from _resource_costs import synthetic_latency_table  # noqa: E402
    mmpretrain.utils.register_all_modules(init_default_scope=False)
    path = str(tmp_path / 'heads.py')
    with open(path, 'w') as f:
        f.write("default_scope = 'mmpretrain'\nmodel = dict(type='ImageClassifier', "
                "backbone=dict(type='mmdcs.ViT', arch='deit-tiny', variant='dcs', img_size=32, "
                "select_heads=True), neck=None, head=dict(type='LinearClsHead', "
                "num_classes=10, in_channels=192))\n")
    torch.manual_seed(0)
    model = build_model(Config.fromfile(path).model, 'mmpretrain')
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith('alpha'):
                p.copy_(torch.randn(p.shape, generator=g).abs() + 0.1)
    ckpt = str(tmp_path / 'heads.pth')
    torch.save({'state_dict': model.state_dict()}, ckpt)
    table = synthetic_latency_table(model.backbone, [32, 32])
    table_path = str(tmp_path / 'table.json')
    with open(table_path, 'w') as f:
        json.dump(table, f)
    res = export_subnet(path, ckpt, str(tmp_path / 'out'), method=method,
                        target=('latency', 0.7), cost_options=dict(latency_table=table_path),
                        multiple_of=8, measure=False)
    with open(res.subnet) as f:
        data = json.load(f)
    b = data['meta']['budget']
    assert data['format'] == 'mmdcs.subnet/3' and len(data['heads']) == 12
    assert b['resource'] == 'latency' and b['ranked'].endswith('and heads')
    assert sum(h['kept'] for h in data['heads']) < 36
    assert 0.69 <= b['achieved_ratio'] <= 0.7 + 1e-12
    cost = LatencyCost.from_file(table_path, model.backbone)
    widths = {(CHANNELS, blk['name']): blk['kept'] for blk in data['blocks']}
    widths.update({(HEADS, h['name']): h['kept'] for h in data['heads']})
    assert_close_scaled(cost.ratio(cost.count(widths)), b['achieved_ratio'], 1e-9)


def test_rotated_pooled_grid_spreads_the_error_a_grid_point_shares(monkeypatch):
    """The error of a grid point's rounds that every unit timed there shares (the load of that
    moment; what the baseline beside it does not cancel) falls on one width of every block when
    all units are at their k-th point, so a subnet at that width sums it 12 times and the
    export picks the widths measured low. Rotated grids put the blocks of one pruned network at
    different widths and pooling the 12 identical blocks takes the median over 12 grid points:
    the prediction of uniform-width subnets errs less than a quarter as much (seeded errors)."""
    import itertools

    import importlib
    lt = importlib.import_module('mmdcs.analysis.latency_table')
    from mmdcs.models.backbones.vit import Block
    sup = ViT('deit-tiny', variant='kcr', img_size=32).eval()
    base = ViT('deit-tiny', variant='baseline', img_size=32).eval()
    g = torch.Generator().manual_seed(0)
    err = (0.05 * torch.randn(64, generator=g)).tolist()  # ms, per pruned network
    orig = lt.pruned_copy
    counter = itertools.count()

    def tagged(*args, **kw):
        net = orig(*args, **kw)
        i = next(counter)
        for m in net.modules():
            m._test_point = i
        return net

    def timer(fn, module):
        ms = synthetic_ms(module)
        if isinstance(module, Block):
            ms += err[module._test_point]
        return ms / 1e3

    monkeypatch.setattr(lt, 'pruned_copy', tagged)
    clean = LatencyCost.from_table(build_table(sup, base, (32, 32), rounds=1, warmup=0,
                                               multiple_of=8,
                                               meter=lambda f, m: synthetic_ms(m) / 1e3), sup)
    worst = {}
    for rotate, pool in ((False, False), (True, True)):
        table = build_table(sup, base, (32, 32), rounds=1, warmup=0, multiple_of=8,
                            meter=timer, rotate=rotate, pool=pool, refine=0)
        assert table['grid_order'] == ('rotated' if rotate else 'aligned')
        assert all(u.get('pooled') == (12 if pool else None) for u in table['units'])
        cost = LatencyCost.from_table(table, sup)
        grid = table['units'][0]['grid_channels']
        worst[rotate] = max(abs((cost.count({u: w for u in cost.unit_dims()}) - cost.const)
                                - (clean.count({u: w for u in cost.unit_dims()})
                                   - clean.const)) for w in grid)
    assert worst[False] > 0.3  # about 12 x 0.05 ms: one grid point's error, 12 times
    assert worst[True] < 0.25 * worst[False], worst  # 1.11 -> 0.13 ms with these errors


def test_pooled_signatures():
    """ViT blocks that differ only in their drop-path rate are one signature; MobileViT's last
    transformer layer of a stage (it feeds the projection conv) is not pooled with the others;
    a stride or another input shape is another signature."""
    import importlib
    lt = importlib.import_module('mmdcs.analysis.latency_table')
    from mmdcs.models.backbones.mobilevit import MobileViT
    sup = ViT('deit-tiny', variant='kcr', img_size=32, drop_path_rate=0.1).eval()
    base = ViT('deit-tiny', variant='baseline', img_size=32).eval()
    table = build_table(sup, base, (32, 32), rounds=1, warmup=0, multiple_of=96,
                        meter=lambda f, m: synthetic_ms(m) / 1e3)
    assert all(u['pooled'] == 12 for u in table['units'])
    mv = MobileViT('mobilevit-xs', variant='dcs', select_hidden='all').eval()
    table = build_table(mv, MobileViT('mobilevit-xs', variant='baseline').eval(), (64, 64),
                        rounds=1, warmup=0, multiple_of=64,
                        meter=lambda f, m: synthetic_ms(m) / 1e3)
    pooled = {u['path']: u.get('pooled') for u in table['units']}
    assert pooled['stages.3.1.transformer.0.mlp'] == 3  # layers 0-2 of a stage of 4
    assert pooled['stages.3.1.transformer.3.mlp'] is None  # feeds conv_proj
    assert pooled['stages.1.1'] == pooled['stages.1.2'] == 2  # two stride-1 bottlenecks
    assert pooled['stages.1.0'] is None  # strided
    assert lt._structure(mv, 'stages.1.0') != lt._structure(mv, 'stages.1.1')
