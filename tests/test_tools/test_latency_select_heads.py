"""tools/analysis/latency.py --select-heads (issue 24 item 5) with synthetic meters (the table
builder's and the measurement's replaced; no assertion on any time): the
supernet selects heads, its latency table has head units and a file name of its own, a kept
table without head units is refused (not used, not overwritten), the subnet meets the budget
within ±1 % and lists its kept heads, every row carries the kept heads; bad input is one line,
exit 2."""
import json
import shutil

import pytest
import torch.nn as nn

import mmdcs.analysis.latency as latency
import mmdcs.analysis.latency_target as latency_target
from _resource_costs import synthetic_meters  # noqa: E402 (tests/ is on sys.path)
from _tools import load_tool, run_main  # noqa: E402
from mmdcs.apis.latency_io import table_file_name
from mmdcs.models.backbones.base import SelectableBackbone
from mmdcs.models.backbones.vit import ViT
from mmdcs.selection import SubnetSpec
from mmdcs.selection.mlp import PrunedMLP

TOOL = 'tools/analysis/latency.py'
ARGS = ['--models', 'deit-tiny', '--size', '32', '--batch', '1', '--devices', 'cpu',
        '--repeats', '3', '--warmup', '0', '--system-malloc']
NO_HEADS = 'deit-tiny_kcr-hidden_32x32_b1_t1_cpu_fp32.json'
HEADS = 'deit-tiny_kcr-hidden-heads_32x32_b1_t1_cpu_fp32.json'
#: ms of the baseline network: about the supernet's at full width (2 + 12 · (3.535 + 0.93))
BASE_MS = 56.


def synthetic_ms(module: nn.Module) -> float:
    """ms of a call: BASE_MS for the baseline; for a (pruned) network or a part of it, 2 (the
    network's constant) + bilinear MLP costs + an attention's cost linear in its heads."""
    if isinstance(module, SelectableBackbone) and module.variant == 'baseline':
        return BASE_MS
    total = 2. if isinstance(module, SelectableBackbone) else 0.
    for m in module.modules():
        if isinstance(m, PrunedMLP):
            total += 0.01 + 0.001 * m.kept + 0.0005 * m.hidden_features + \
                2e-5 * m.kept * m.hidden_features
        elif callable(getattr(m, 'prune_heads_', None)) and hasattr(m, 'num_heads'):
            total += 0.03 + 0.3 * m.num_heads
    return total


@pytest.fixture
def synthetic(monkeypatch):
    """Every timing of the tool synthetic (the harness's meters): the table's, and the
    measurement's on both clocks (latency target: the pruned network's wall time x1.1) and
    latency_pair's (FLOPs target)."""
    return synthetic_meters(monkeypatch, synthetic_ms)


def _one_line(code, err, match):
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and match in lines[0], err
    return lines[0]


def test_table_file_names_differ_with_heads():
    assert table_file_name('deit-tiny', 'kcr', (32, 32), 1, 1, 'cpu', 'fp32', True) == NO_HEADS
    assert table_file_name('deit-tiny', 'kcr', (32, 32), 1, 1, 'cpu', 'fp32', True,
                           select_heads=True) == HEADS
    assert table_file_name('vit-s16', 'kcr', (224, 224), 1, 1, 'cpu', 'fp32',
                           select_heads=True) == 'vit-s16_kcr-heads_224x224_b1_t1_cpu_fp32.json'


def test_latency_target_with_heads(synthetic, tmp_path, monkeypatch, capsys):
    tables = tmp_path / 'tables'
    # without heads first: its table under its own name, rows without a heads column
    (plain, ) = load_tool(TOOL).main(ARGS + ['--select-hidden', '--target-latency', '0.7',
                                             '--tables', str(tables)])
    out = capsys.readouterr().out
    assert 'heads_kept' not in plain and 'heads kept' not in out
    assert [p.name for p in tables.iterdir()] == [NO_HEADS]
    plain_text = (tables / NO_HEADS).read_text()

    (row, ) = load_tool(TOOL).main(ARGS + ['--select-hidden', '--select-heads',
                                           '--target-latency', '0.7', '--tables', str(tables),
                                           '--json', str(tmp_path / 'rows.json')])
    out = capsys.readouterr().out
    # the heads supernet measured its own table (head units), beside the one without heads
    assert row['table_built'] and row['table_file'] == str(tables / HEADS)
    assert sorted(p.name for p in tables.iterdir()) == sorted([NO_HEADS, HEADS])
    assert (tables / NO_HEADS).read_text() == plain_text
    table = json.loads((tables / HEADS).read_text())
    assert table['format'] == 'mmdcs.latency_table/2' and table['selection']['select_heads']
    head_units = [u for u in table['units'] if 'heads' in u]
    assert len(head_units) == 12 and all(u['heads'] == 3 for u in head_units)
    # the subnet: within ±1 % of the target, heads ranked with channels and hidden units
    assert abs(row['predicted_ratio'] - 0.7) <= 0.01
    spec = SubnetSpec.coerce(row['spec'])
    assert spec.meta['budget']['ranked'] == 'channels and hidden units and heads'
    assert len(spec.heads) == 12 and all(1 <= b.kept <= 3 for b in spec.heads)
    assert row['heads_kept'] == sum(b.kept for b in spec.heads) and row['heads_total'] == 36
    # the synthetic prediction is the synthetic time of the built subnet (heads included)
    pruned = latency_target.build_backbone('deit-tiny', spec.variant, spec, (32, 32)).eval()
    assert row['predicted_ratio'] == pytest.approx(synthetic_ms(pruned) / BASE_MS, rel=1e-6)
    assert sum(m.num_heads for m in pruned.modules() if hasattr(m, 'prune_heads_')) == \
        row['heads_kept']
    # the heads count in the printed table and in the JSON rows
    assert '| heads kept |' in out and f'| {row["heads_kept"]}/36 |' in out
    (saved, ) = json.loads((tmp_path / 'rows.json').read_text())['rows']
    assert saved['heads_kept'] == row['heads_kept'] and saved['heads_total'] == 36

    # read back on the next run (not measured again)
    synthetic_meters(monkeypatch, synthetic_ms, table=False)
    (again, ) = load_tool(TOOL).main(ARGS + ['--select-hidden', '--select-heads',
                                             '--target-latency', '0.8', '--tables',
                                             str(tables)])
    assert not again['table_built'] and again['table_file'] == str(tables / HEADS)
    assert abs(again['predicted_ratio'] - 0.8) <= 0.01 and 'heads_kept' in again


def test_a_kept_table_without_heads_is_refused_for_heads(synthetic, tmp_path, capsys):
    """A table without head units under the heads name (copied or renamed by hand) is refused
    in one line naming the file, and left as it is: measuring over it would overwrite a file
    the user put there, using it would price every head at nothing."""
    tables = tmp_path / 'tables'
    load_tool(TOOL).main(ARGS + ['--select-hidden', '--target-latency', '0.7', '--tables',
                                 str(tables)])
    capsys.readouterr()
    shutil.copy(tables / NO_HEADS, tables / HEADS)
    before = (tables / HEADS).read_text()
    code, err = run_main(TOOL, ARGS + ['--select-hidden', '--select-heads', '--target-latency',
                                       '0.7', '--tables', str(tables)], capsys, cwd=None)
    line = _one_line(code, err, str(tables / HEADS))
    assert 'no head units' in line
    assert (tables / HEADS).read_text() == before
    # and a heads table is not used for a run without heads (other selection options)
    shutil.copy(tables / HEADS, tables / 'plain.json')
    load_tool(TOOL).main(ARGS + ['--select-hidden', '--select-heads', '--target-latency',
                                 '0.7', '--tables', str(tables), '--force'])
    capsys.readouterr()
    shutil.copy(tables / HEADS, tables / NO_HEADS)
    code, err = run_main(TOOL, ARGS + ['--select-hidden', '--target-latency', '0.7',
                                       '--tables', str(tables)], capsys, cwd=None)
    line = _one_line(code, err, str(tables / NO_HEADS))
    assert 'select_heads' in line or 'head' in line


def test_flops_target_with_heads(synthetic, tmp_path, capsys):
    rows = load_tool(TOOL).main(ARGS + ['--select-hidden', '--select-heads', '--target-flops',
                                        '0.7', '--json', str(tmp_path / 'rows.json')])
    out = capsys.readouterr().out
    (row, ) = rows
    # the FLOPs ratio counted on the built subnet: within ±1 % of the target
    assert abs(row['flops_ratio'] - 0.7) <= 0.01
    assert row['heads_total'] == 36 and 12 <= row['heads_kept'] <= 36
    assert '| heads kept |' in out and f'| {row["heads_kept"]}/36 |' in out
    assert f'heads {row["heads_kept"]}/36' in out  # the progress line
    (saved, ) = json.loads((tmp_path / 'rows.json').read_text())['rows']
    assert saved['heads_kept'] == row['heads_kept']
    # the subnet the row was measured on lists its kept heads and meets the budget
    base, sub, spec = latency.build_pair('deit-tiny', input_size=32, target_flops=0.7,
                                         select_hidden=True, multiple_of=8, select_heads=True)
    assert len(spec.heads) == 12 and sum(b.kept for b in spec.heads) == row['heads_kept']
    assert abs(spec.meta['predicted_flops_ratio'] - 0.7) <= 0.01
    assert spec.meta['budget']['ranked'] == 'channels and hidden units and heads'
    assert spec.meta['select_heads'] is True
    # without --select-heads: the rows as before (no heads column, one kept ratio)
    (plain, ) = load_tool(TOOL).main(ARGS + ['--select-hidden', '--target-flops', '0.7'])
    out = capsys.readouterr().out
    assert 'heads_kept' not in plain and 'heads kept' not in out
    # --ranked: the same export without heads (every head kept), the row to set beside it
    (ranked, ) = load_tool(TOOL).main(ARGS + ['--select-hidden', '--target-flops', '0.7',
                                              '--ranked'])
    assert abs(ranked['flops_ratio'] - 0.7) <= 0.01 and 'heads_kept' not in ranked
    _, sub, spec = latency.build_pair('deit-tiny', input_size=32, target_flops=0.7,
                                      select_hidden=True, multiple_of=8, ranked=True)
    assert spec.meta['budget']['ranked'] == 'channels and hidden units' and not spec.heads
    assert spec.meta['select_heads'] is False
    assert ranked['flops_ratio'] == pytest.approx(spec.meta['budget']['achieved_ratio'],
                                                  rel=1e-6)
    assert all(m.num_heads == 3 for m in sub.modules() if hasattr(m, 'prune_heads_'))


@pytest.mark.parametrize('extra, match', [
    (['--select-heads'], '--select-heads goes with --target-flops or --target-latency'),
    (['--select-heads', '--ratio', '0.5'], '--select-heads goes with'),
    (['--select-heads', '--target-flops', '0.7', '--select-hidden', '--hidden-only'],
     '--select-heads does not go with --hidden-only'),
    (['--ranked', '--target-latency', '0.7'], '--ranked goes with --target-flops'),
])
def test_bad_input_is_one_line(extra, match, synthetic, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, err = run_main(TOOL, ARGS + extra, capsys, cwd=None)
    _one_line(code, err, match)


@pytest.mark.parametrize('target', [['--target-flops', '0.7'], ['--target-latency', '0.7']])
def test_a_family_without_heads_is_one_line(target, synthetic, tmp_path, monkeypatch, capsys):
    """None of the seven paper models lacks head selection; the refusal still holds for one
    that does (supports_heads False), before anything is built or measured."""
    monkeypatch.setattr(ViT, 'supports_heads', False)
    monkeypatch.chdir(tmp_path)
    code, err = run_main(TOOL, ARGS + ['--select-heads'] + target + ['--tables', 't']
                         if 'latency' in target[0] else ARGS + ['--select-heads'] + target,
                         capsys, cwd=None)
    _one_line(code, err, 'deit-tiny (ViT) has no head selection')
    assert not (tmp_path / 't').exists()


def test_heads_a_table_cannot_time_apart_are_one_line(synthetic, tmp_path, monkeypatch,
                                                       capsys):
    """EfficientViT's LiteMLA selects its heads and its channels in one module: its latency
    table cannot be built with heads (the builder refuses it), said in one line before anything
    is measured; at a FLOPs target its heads are counted exactly."""
    monkeypatch.chdir(tmp_path)
    args = ['--models', 'efficientvit-b1', '--size', '64', '--batch', '1', '--devices', 'cpu',
            '--repeats', '1', '--warmup', '0', '--system-malloc', '--select-heads']
    code, err = run_main(TOOL, args + ['--target-latency', '0.7', '--tables', 't'], capsys,
                         cwd=None)
    line = _one_line(code, err, '--select-heads: efficientvit-b1: ')
    assert 'cannot time them apart' in line and not (tmp_path / 't').exists()
    (row, ) = load_tool(TOOL).main(args + ['--target-flops', '0.7', '--select-hidden', 'all'])
    assert abs(row['flops_ratio'] - 0.7) <= 0.01 and 'heads_kept' in row
