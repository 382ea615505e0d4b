"""Side by side with Torch-Pruning (mmdcs.analysis.peer_benchmark), no assertion on any time:
the FLOPs-matching loop on a fake pruner and counter (widths rounded to 8, whole heads) ends
within ±1 % or says why not; the harness reads injected clocks; and, where
torch-pruning and timm are installed, a real DeiT-Tiny run at 32×32 whose rows have the
structure promised (the peer's FLOPs within 1 % of mmdcs's, widths in groups of 8, a head
left in every attention)."""
import importlib.util
import math

import pytest
import torch
import torch.nn as nn

import mmdcs.analysis.peer_benchmark as pb
from mmdcs.analysis.complexity import build_backbone, count_flops, flops_budget_subnet
from mmdcs.analysis.latency import Meter
from mmdcs.analysis.peer_benchmark import (format_peer_benchmark, match_flops, match_ratio,
                                           time_all)
from mmdcs.models.backbones.base import backbone_class


class FakeNet:
    """A fake pruner and counter: ``blocks`` MLPs of hidden width ``hidden`` (round_to 8 as
    Torch-Pruning rounds: down to a multiple of 8 of the kept width) and attentions of ``heads``
    heads (ceil(ratio·heads) pruned, one kept), over a constant; the FLOPs ratio of a ratio."""

    def __init__(self, blocks=12, hidden=1536, heads=6, const=0.3, head_share=0.25):
        self.blocks, self.hidden, self.heads = blocks, hidden, heads
        self.const, self.head_share = const, head_share
        self.calls = 0

    def kept_hidden(self, r):
        kept = self.hidden - int(r * self.hidden)
        return max(8, kept - kept % 8)

    def kept_heads(self, h):
        return self.heads - min(math.ceil(h * self.heads - 1e-9), self.heads - 1)

    def flops(self, r, h=None):
        """hidden units at r, heads at h (None: no head pruned)"""
        self.calls += 1
        mlp = (1 - self.const - self.head_share) * self.kept_hidden(r) / self.hidden
        att = self.head_share * (self.kept_heads(h) / self.heads if h is not None else 1.)
        return self.const + mlp + att

    def joint(self, r, h=None):
        """match_flops's protocol with heads: heads at r unless h is given"""
        return self.flops(r, r if h is None else h)


@pytest.mark.parametrize('target', [0.95, 0.85, 0.7, 0.62])
def test_matching_hidden_units_converges_within_one_percent(target):
    net = FakeNet()
    m, h = match_flops(net.flops, target, 0.01)
    assert m.converged and h is None
    assert abs(m.value - target) <= 0.01 * target
    assert m.value == net.flops(m.ratio)  # the value reported is the ratio's
    assert len(m.evaluations) <= 12  # a secant, not a scan


@pytest.mark.parametrize('target', [0.9, 0.7, 0.62, 0.5])
def test_matching_with_whole_heads_converges_within_one_percent(target):
    """Heads come in sixths of a quarter of the FLOPs: where a head's step jumps over the
    target, the heads stay below it and the hidden units alone are matched."""
    net = FakeNet()
    m, h = match_flops(net.joint, target, 0.01, heads=True)
    assert m.converged, m
    assert abs(net.flops(m.ratio, h) - target) <= 0.01 * target
    assert h <= m.ratio + 1e-12


def test_a_head_step_over_the_target_keeps_the_heads_below_it():
    """Two heads holding half the FLOPs: removing the first drops them from 1.0 to at most
    0.75 at once, so no joint ratio gives 0.90; the heads stay whole (the ratio below the step)
    and the hidden units alone reach it."""
    net = FakeNet(hidden=64, heads=2, const=0.1, head_share=0.5)
    joint = match_ratio(net.joint, 0.9, 0.01, value_lo=1.0)
    assert not joint.converged and joint.hi - joint.lo < 1e-3
    m, h = match_flops(net.joint, 0.9, 0.01, heads=True)
    assert m.converged and h == joint.lo and net.kept_heads(h) == 2
    assert abs(net.flops(m.ratio, h) - 0.9) <= 0.01 * 0.9
    assert len(m.evaluations) > len(joint.evaluations)  # both stages reported


def test_an_unreachable_target_is_reported_not_converged():
    net = FakeNet()
    floor = net.flops(0.9)
    m = match_ratio(net.flops, floor * 0.8, 0.01, value_lo=1.0)
    assert not m.converged and m.ratio == 0.9 and m.value == floor
    m = match_ratio(net.flops, 1.2, 0.01, value_lo=1.0)
    assert not m.converged and m.ratio == 0.


def test_match_ratio_refuses_bad_arguments():
    with pytest.raises(ValueError):
        match_ratio(lambda r: 1 - r, 0., 0.01)
    with pytest.raises(ValueError):
        match_ratio(lambda r: 1 - r, 0.5, 0.01, lo=0.5, hi=0.5)


class Ticker(nn.Module):
    """Advances a shared fake clock by ``cost`` per call (and records the call order)."""

    def __init__(self, name, cost, clock, order):
        super().__init__()
        self.name, self.cost, self.clock, self.order = name, cost, clock, order

    def forward(self, x):
        self.clock[0] += self.cost
        self.order.append(self.name)
        return x


def test_time_all_reads_every_clock_around_the_same_call():
    clock, order = [0.], []
    models = {n: Ticker(n, c, clock, order) for n, c in (('a', 2e-3), ('b', 5e-3), ('c', 1e-3))}
    def slow_clock():  # a second clock at half the rate
        return clock[0] / 2

    out = time_all(models, torch.zeros(1), rounds=4, warmup=1, threads=1,
                   meter=Meter(dict(wall=lambda: clock[0], thread=slow_clock)))
    assert out['a']['wall'] == pytest.approx(2.) and out['b']['wall'] == pytest.approx(5.)
    assert out['c']['thread'] == pytest.approx(0.5)
    # warm-up once each, then every round rotated by one
    assert order == list('abc') + list('abc') + list('bca') + list('cab') + list('abc')


def test_format_peer_benchmark():
    row = dict(model='vit-s16', method='Torch-Pruning hidden', flops_ratio=0.7, params_ratio=0.69,
               latency_ratio=0.71, latency_ratio_thread=None, baseline_ms=60., pruned_ms=42.6)
    text = format_peer_benchmark([row])
    assert '| vit-s16 | 1 | Torch-Pruning hidden | 0.700 | 0.690 | 0.710 | — | 60.00 | 42.60 |' \
        in text


needs_peer = pytest.mark.skipif(
    importlib.util.find_spec('torch_pruning') is None or importlib.util.find_spec('timm') is None,
    reason='torch-pruning (the optional benchmark extra) or timm not installed')

SIZE = (32, 32)


@needs_peer
def test_a_real_tiny_run_has_the_promised_structure(monkeypatch):
    """DeiT-Tiny at 32×32: mmdcs's subnet (here a FLOPs-budget subnet instead of the latency
    table's, to keep the test short) beside timm's DeiT-Tiny pruned by Torch-Pruning."""
    spec = flops_budget_subnet(backbone_class('deit-tiny'), 'deit-tiny', 'kcr', 0.75)
    spec.meta['budget'] = dict(achieved_ratio=0.7)

    def fake_spec(arch, target, *a, input_size=None, **kw):
        base = build_backbone(arch, 'baseline', None, input_size).eval()
        return spec, {'fake': True}, False, base, tuple(input_size), 'kcr'

    monkeypatch.setattr(pb, 'latency_budget_spec', fake_spec)
    fake = [0.]

    def clock():
        fake[0] += 1e-3
        return fake[0]

    lines = []
    out = pb.peer_benchmark('deit-tiny', 0.7, input_size=SIZE, repeats=2, warmup=0,
                            meter=Meter(dict(wall=clock, thread=clock)), progress=lines.append)
    ours, own_hidden, hidden, heads = out['rows']
    pruned = build_backbone('deit-tiny', spec.variant, spec, SIZE).eval()
    base = build_backbone('deit-tiny', 'baseline', None, SIZE).eval()
    target = count_flops(pruned, SIZE) / count_flops(base, SIZE)
    assert ours['flops_ratio'] == pytest.approx(target)
    assert ours['predicted_ratio'] == 0.7 and ours['method'].startswith('mmdcs kcr')
    # timm's DeiT-Tiny counts as mmdcs's baseline (the same network)
    assert out['baseline_flops']['timm'] == out['baseline_flops']['mmdcs']
    # mmdcs's own network with the hidden units alone pruned, at the same FLOPs
    assert own_hidden['method'].startswith('mmdcs kcr, hidden units only')
    for row in (own_hidden, hidden, heads):
        assert abs(row['flops_ratio'] - target) <= 0.01 * target
        assert 0 < row['params_ratio'] < 1
        assert row['latency_ratio'] > 0 and row['latency_ratio_thread'] > 0
    assert hidden['match'] and heads['match'] and own_hidden['match'] is None
    assert hidden['heads_ratio'] is None and heads['heads_ratio'] is not None
    assert not out['skipped'] and out['table_built'] is False
    assert set(out['timings']['torch']) == {'mmdcs baseline', 'mmdcs', 'mmdcs hidden only',
                                            'timm baseline', 'Torch-Pruning hidden',
                                            'Torch-Pruning hidden+heads'}
    # the peer's widths: hidden units in groups of 8, the residual width untouched, a head left
    tmodel, _ = pb.timm_model('deit-tiny', SIZE)
    x = torch.randn(1, 3, *SIZE)
    net = pb.tp_prune(tmodel, x, heads['pruning_ratio'], heads['heads_ratio'])
    for blk in net.blocks:
        assert blk.mlp.fc1.out_features % 8 == 0 and blk.mlp.fc1.in_features == 192
        assert 1 <= blk.attn.num_heads < 3 and blk.attn.qkv.out_features == \
            3 * blk.attn.num_heads * 64
    assert pb.TimmFeatures(net)(x).shape == pb.TimmFeatures(tmodel)(x).shape
    assert any('Torch-Pruning hidden:' in line for line in lines)
    assert 'Torch-Pruning hidden+heads' in format_peer_benchmark(out['rows'])


@needs_peer
def test_hidden_unit_layers_are_the_mlps_first_layers():
    tmodel, _ = pb.timm_model('deit-tiny', SIZE)
    layers = pb.hidden_unit_layers(tmodel, torch.randn(1, 3, *SIZE))
    assert set(layers) == {blk.mlp.fc1 for blk in tmodel.blocks}


class Widths(nn.Module):
    """A stand-in for a timm model: ``forward_features`` through a hidden layer of ``hidden``
    units (what the peer prunes)."""

    def __init__(self, hidden=256):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, hidden), nn.Linear(hidden, 16)

    def forward_features(self, x):
        return self.fc2(self.fc1(x))


def test_the_peer_is_bisected_to_a_measured_latency():
    """match_latency: the peer's pruning ratio bisected until its network measures the target
    latency ratio against the baseline, as the harness times it (a synthetic meter here: a
    network's time is 1 ms + its parameter count); the ratio found measures within the
    tolerance, every try recorded, each a measurement of the baseline and the pruned network."""
    calls = []

    def meter(fn, module):
        calls.append(module)
        return (1e3 + sum(p.numel() for p in module.parameters())) / 1e6

    def prune(r):
        return Widths(max(1, int(256 * (1 - r))))

    base = pb.TimmFeatures(Widths())
    m = pb.match_latency(Widths(), torch.zeros(1, 16), 0.6, 0.01, 'torch', prune, rounds=1,
                         warmup=0, threads=1, meter=meter)
    assert m.converged and abs(m.value - 0.6) <= 0.01 * 0.6 and len(m.evaluations) >= 2
    net = pb.TimmFeatures(prune(m.ratio))
    assert meter(None, net) / meter(None, base) == pytest.approx(m.value)
    assert len(calls) == 2 * len(m.evaluations) + 2  # each try: the baseline and the peer
