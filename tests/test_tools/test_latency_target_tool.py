"""tools/analysis/latency.py --target-latency with synthetic meters (the table builder's and the
measurement's replaced; no assertion on any time): the table measured once and kept in --tables,
read back on the next run; the printed row and the JSON agree; bad input is one line, exit 2."""
import json

import pytest

from _resource_costs import synthetic_meters  # noqa: E402 (tests/ is on sys.path)
from _tools import load_tool, run_main  # noqa: E402
from mmdcs.models.backbones.base import SelectableBackbone
from mmdcs.selection.mlp import PrunedMLP

TOOL = 'tools/analysis/latency.py'
ARGS = ['--models', 'deit-tiny', '--size', '32', '--select-hidden', '--batch', '1',
        '--devices', 'cpu', '--repeats', '3', '--warmup', '0']


def synthetic_ms(module):
    """ms of a call: 9 for the baseline; 2 + bilinear MLP costs for a (pruned) network."""
    if isinstance(module, SelectableBackbone) and module.variant == 'baseline':
        return 9.
    total = 2. if isinstance(module, SelectableBackbone) else 0.
    for m in module.modules():
        if isinstance(m, PrunedMLP):
            total += 0.01 + 0.001 * m.kept + 0.0005 * m.hidden_features + \
                2e-5 * m.kept * m.hidden_features
    return total


@pytest.fixture
def synthetic(monkeypatch):
    return synthetic_meters(monkeypatch, synthetic_ms)


def test_table_kept_and_read_back(synthetic, tmp_path, monkeypatch, capsys):
    tables = tmp_path / 'tables'
    rows = load_tool(TOOL).main(ARGS + ['--target-latency', '0.7', '--tables', str(tables),
                                        '--json', str(tmp_path / 'rows.json')])
    out = capsys.readouterr().out
    (name, ) = [p.name for p in tables.iterdir()]
    assert name == 'deit-tiny_kcr-hidden_32x32_b1_t1_cpu_fp32.json'
    (row, ) = rows
    assert row['table_built'] and abs(row['predicted_ratio'] - 0.7) <= 0.01
    assert f'| {row["predicted_ratio"]:.3f} | {row["measured_ratio"]:.3f} | ' \
           f'{row["measured_ratio_clock"]:.3f} (thread) | {row["flops_ratio"]:.3f} | ' \
           f'{row["params_ratio"]:.3f} |' in out
    (saved, ) = json.loads((tmp_path / 'rows.json').read_text())['rows']
    assert saved['measured_ratio'] == row['measured_ratio'] and 'table' not in saved

    synthetic_meters(monkeypatch, synthetic_ms, table=False)
    (again, ) = load_tool(TOOL).main(ARGS + ['--target-latency', '0.8', '--tables',
                                             str(tables)])
    assert not again['table_built'] and again['table_file'] == str(tables / name)
    assert abs(again['predicted_ratio'] - 0.8) <= 0.01
    # --validate: the predictor's error on random subnets, in the row, the table and the JSON
    synthetic_meters(monkeypatch, synthetic_ms)
    (checked, ) = load_tool(TOOL).main(ARGS + ['--target-latency', '0.8', '--tables',
                                               str(tables), '--validate', '2', '--json',
                                               str(tmp_path / 'checked.json')])
    out = capsys.readouterr().out
    assert checked['validation']['k'] == 2 and 0 <= checked['predictor_error'] <= \
        checked['predictor_error_max']
    assert f'{checked["predictor_error"]:.1%} ({checked["predictor_error_max"]:.1%}), 2 subnets' \
        in out and 'Predictor error: 2 random subnets' in out
    (saved, ) = json.loads((tmp_path / 'checked.json').read_text())['rows']
    assert saved['predictor_error'] == checked['predictor_error']
    # below the table's floor: one line naming it, exit 2
    code, err = run_main(TOOL, ARGS + ['--target-latency', '0.05', '--tables', str(tables)],
                         capsys, cwd=None)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and 'cannot be met' in lines[0], err
    assert 'floor' in lines[0]


@pytest.mark.parametrize('extra, match', [
    (['--target-latency', '1.5'], 'target-latency'),
    (['--target-latency', '0.7', '--target-flops', '0.7'], '--target-latency goes with'),
    (['--tables', 'x'], '--tables, --dtype, --validate and --refine go with --target-latency'),
    (['--validate', '3'], '--tables, --dtype, --validate and --refine go with --target-latency'),
    (['--target-latency', '0.7', '--validate', '-1'], 'argument --validate: must be an integer '
     '≥ 0, got -1'),
    (['--refine', '2'], '--validate and --refine go with --target-latency'),
])
def test_bad_input_is_one_line(extra, match, synthetic, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, err = run_main(TOOL, ARGS + extra, capsys, cwd=None)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and match in lines[0], err


def test_a_corrupt_kept_table_is_one_line(synthetic, tmp_path, capsys):
    tables = tmp_path / 'tables'
    tables.mkdir()
    bad = tables / 'deit-tiny_kcr-hidden_32x32_b1_t1_cpu_fp32.json'
    bad.write_text('{"arch": "deit-tiny", ')
    code, err = run_main(TOOL, ARGS + ['--target-latency', '0.7', '--tables', str(tables)],
                         capsys, cwd=None)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and str(bad) in lines[0], err
    assert bad.read_text() == '{"arch": "deit-tiny", '  # not overwritten


def test_two_table_builds_compared_by_their_subnets(synthetic, tmp_path, capsys):
    """tools/analysis/latency_repro.py: the subnets two runs exported (their --json rows),
    timed against the baseline in one run (synthetic meters), their FLOPs and latency ratios
    and differences against --within; a file that is not such rows is one line."""
    from mmdcs.analysis.complexity import backbone_class, random_subnet
    cls = backbone_class('deit-tiny')
    paths = []
    for name, ratio in (('a', 0.5), ('b', 0.75)):
        spec = random_subnet(cls, 'deit-tiny', 'kcr', ratio, 0, 8, img_size=32)
        path = tmp_path / f'{name}.json'
        path.write_text(json.dumps(dict(rows=[dict(model='deit-tiny', batch=1, input='32x32',
                                                   spec=spec.to_dict())])))
        paths.append(str(path))
    (row, ) = load_tool('tools/analysis/latency_repro.py').main(
        paths + ['--repeats', '2', '--within', '0.5', '--json', str(tmp_path / 'out.json')])
    out = capsys.readouterr().out
    assert row['A']['flops_ratio'] < row['B']['flops_ratio'] < 1
    assert row['A']['measured_ratio'] < row['B']['measured_ratio']  # synthetic: MLP costs
    assert row['flops_difference'] == pytest.approx(row['B']['flops_ratio']
                                                    - row['A']['flops_ratio'])
    assert row['within'] == (row['flops_difference'] <= 0.5 and row['latency_difference'] <= 0.5)
    assert f'| deit-tiny | 1 | {row["A"]["flops_ratio"]:.3f} |' in out
    assert json.loads((tmp_path / 'out.json').read_text())[0]['within'] == row['within']
    bad = tmp_path / 'bad.json'
    bad.write_text('{"rows": [1]}')
    code, err = run_main('tools/analysis/latency_repro.py', [paths[0], str(bad)], capsys,
                         cwd=None)
    assert code == 2 and 'bad.json' in err and len(err.strip().splitlines()) == 1, err


def test_variant_is_the_supernets(synthetic, tmp_path, capsys):
    """--variant names the supernet at --target-latency too (it used to be the random
    subnets' only, and the paper's variant was timed whatever was asked); one not known is
    refused in one line."""
    tables = tmp_path / 'tables'
    (row, ) = load_tool(TOOL).main(ARGS + ['--target-latency', '0.7', '--tables', str(tables),
                                          '--variant', 'dcs'])
    assert row['variant'] == 'dcs' and row['spec']['variant'] == 'dcs'
    assert [p.name for p in tables.iterdir()] == ['deit-tiny_dcs-hidden_32x32_b1_t1_cpu_fp32.json']
    code, err = run_main(TOOL, ARGS + ['--target-latency', '0.7', '--variant', 'baseline'],
                         capsys, cwd=None)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and '--variant' in lines[0], err


def test_prior(synthetic, tmp_path, capsys):
    """The units are weighed by the FLOPs an element does unless --prior says otherwise
    (recorded in the subnet); a prior that is no counted resource is one line before anything
    is timed; --prior goes with --target-latency."""
    tables = str(tmp_path / 'tables')  # the table measured once, read back by the next runs
    for argv, prior in (([], 'flops'), (['--prior', 'cost'], 'cost'), (['--prior', 'none'], None)):
        (row, ) = load_tool(TOOL).main(ARGS + ['--target-latency', '0.7', '--tables', tables]
                                       + argv)
        assert row['spec']['meta']['budget']['prior'] == prior
        assert abs(row['predicted_ratio'] - 0.7) <= 0.01
    for argv, match in ((['--target-latency', '0.7', '--prior', 'latency'],
                         "prior 'latency': one of cost, none"),
                        (['--prior', 'flops'], '--prior goes with --target-latency')):
        code, err = run_main(TOOL, ARGS + argv, capsys, cwd=None)
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1 and match in lines[0], err
