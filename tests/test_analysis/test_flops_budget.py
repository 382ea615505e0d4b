"""Subnets at a FLOPs budget without a search (flops_budget_subnet) and the latency tool's
--target-flops / --select-hidden."""
import os.path as osp

import pytest

from mmdcs.analysis.complexity import build_backbone, count_flops, flops_budget_subnet
from mmdcs.analysis.latency import build_pair, format_latency_table, latency_pair
from _tools import load_tool  # noqa: E402 (tests/ is on sys.path)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


@pytest.mark.parametrize('select_hidden,prune_channels', [(True, True), (True, False),
                                                           (False, True)])
def test_budget_subnet_meets_the_target(select_hidden, prune_channels):
    spec = flops_budget_subnet('vit', 'deit-tiny', 'kcr', 0.7, select_hidden=select_hidden,
                               prune_channels=prune_channels, img_size=32)
    base = build_backbone('deit-tiny', 'baseline', None, (32, 32))
    sub = build_backbone('deit-tiny', 'kcr', spec, (32, 32))
    ratio = count_flops(sub, 32) / count_flops(base, 32)
    assert ratio == pytest.approx(spec.meta['predicted_flops_ratio'], abs=1e-4)
    assert abs(ratio - 0.7) <= 0.01 and spec.meta['budget_reached']
    assert bool(spec.hidden) == select_hidden
    if select_hidden:
        assert all(b.kept % 8 == 0 for b in spec.hidden)
    assert (spec.kept_ratio < 1) == prune_channels


def test_budget_below_the_floor_gives_the_floor():
    # transformer MLPs only: MobileViT cannot reach 0.3 of its FLOPs
    spec = flops_budget_subnet('mobilevit', 'mobilevit-xs', 'dcs', 0.3, select_hidden=True)
    assert not spec.meta['budget_reached'] and spec.meta['predicted_flops_ratio'] > 0.8
    with pytest.raises(ValueError, match='FLOPs target'):
        flops_budget_subnet('vit', 'deit-tiny', 'kcr', 1.5, img_size=32)


def test_latency_pair_at_a_budget_and_the_cli(capsys):
    base, sub, spec = build_pair('deit-tiny', input_size=32, target_flops=0.7,
                                 select_hidden=True, multiple_of=8)
    rows = latency_pair('deit-tiny', input_size=32, batch_sizes=(1, ), devices=('cpu', ),
                        warmup=1, repeats=2, models=(base, sub))
    assert abs(rows[0]['flops_ratio'] - 0.7) <= 0.01
    assert rows[0]['hidden_kept_ratio'] == spec.hidden_kept_ratio < 1
    assert ', hidden ' in format_latency_table(rows)
    tool = load_tool('tools/analysis/latency.py')
    args = tool.parse_args(['--target-flops', '0.7', '--select-hidden', 'all'])
    assert args.select_hidden == 'all' and args.multiple_of == 8
    assert tool.parse_args(['--target-flops', '0.7', '--select-hidden']).select_hidden is True
    assert tool.parse_args([]).multiple_of == 1
    with pytest.raises(SystemExit) as e:
        tool.parse_args(['--select-hidden'])
    assert e.value.code == 2
    assert '--select-hidden goes with --target-flops or --target-latency' in capsys.readouterr().err


def test_paper_budget_table_refuses_a_model_without_paper_numbers(capsys):
    from mmdcs.analysis.complexity import PAPER_BUDGET_MODELS, paper_budget_table
    assert PAPER_BUDGET_MODELS == ('mobilevit-xs', 'mobilevit-s', 'efficientvit-b1')
    with pytest.raises(ValueError, match='no paper numbers for deit-tiny'):
        paper_budget_table(['deit-tiny'])
    tool = load_tool('tools/analysis/complexity.py')
    assert tool.parse_args(['--paper-budget']).paper_budget
    with pytest.raises(SystemExit) as e:
        tool.main(['--paper-budget', '--models', 'deit-tiny'])
    assert e.value.code == 2
    assert 'no paper numbers for deit-tiny' in capsys.readouterr().err


@pytest.mark.parametrize('prior,expect_all', [('cost', True), (None, False)])
def test_the_ranked_export_does_not_cut_the_dearest_units_first(monkeypatch, prior, expect_all):
    """The export's ranking weighs a unit's scores by its cost per element (``prior='cost'``,
    docs/budgets.md): on DeiT-Tiny at 0.7 FLOPs with heads, magnitude on random weights no
    longer drops two of the three heads of every block (a head costs ~33 MLP channels at 17
    tokens, and its mean-normalised score is no higher), which the ranking as given did
    (``prior=None``: 12 of 36)."""
    from mmdcs.analysis.complexity import flops_ranked_subnet
    from mmdcs.selection import budget
    real = budget.select_units_to_budget
    monkeypatch.setattr(budget, 'select_units_to_budget',
                        lambda *a, **k: real(*a[:7], **{**k, 'prior': prior}))
    spec = flops_ranked_subnet('vit', 'deit-tiny', 'kcr', 0.7, select_heads=True, img_size=64)
    assert abs(spec.meta['budget']['achieved_ratio'] - 0.7) <= 0.01
    kept = sum(h.kept for h in spec.heads)
    assert sum(h.dim for h in spec.heads) == 36
    if expect_all:
        assert kept > 24 and spec.kept_ratio < 0.8
    else:
        assert kept == 12
