"""tools/analysis/benchmark_peer.py: without torch-pruning it is one line and exit 2 (nothing
measured, nothing written); bad input is one line and exit 2; a run (the benchmark itself
replaced by a stub, no timing) reads the kept table of --tables, prints the rows and writes
--out / --json."""
import json
import sys

import pytest

import mmdcs.apis.latency_io as latency_io
from _tools import load_tool, run_main  # noqa: E402 (tests/ is on sys.path)

TOOL = 'tools/analysis/benchmark_peer.py'
ARGS = ['--models', 'deit-tiny', '--size', '32', '--repeats', '2', '--warmup', '0']


def _lines(err):
    return [line for line in err.splitlines() if line.strip()]


@pytest.fixture
def no_benchmark(monkeypatch):
    """Fails the test if the benchmark starts."""
    def boom(*a, **k):
        raise AssertionError('nothing may be measured')
    monkeypatch.setattr(latency_io, 'peer_benchmark', boom)


def test_without_torch_pruning_one_line_exit_2(monkeypatch, no_benchmark, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, 'torch_pruning', None)  # import raises ImportError
    out = tmp_path / 'table.md'
    code, err = run_main(TOOL, ARGS + ['--out', str(out)], capsys, cwd=None)
    lines = _lines(err)
    assert code == 2 and len(lines) == 1, err
    assert 'torch-pruning is not installed' in lines[0] and 'pip install' in lines[0]
    assert not out.exists()


@pytest.mark.parametrize('extra, match', [
    (['--models', 'nope'], 'nope'),
    (['--target-latency', '1.5'], 'target-latency'),
    (['--tol', '0'], 'tol'),
    (['--variant', 'baseline'], 'variant'),
])
def test_bad_input_is_one_line(extra, match, monkeypatch, no_benchmark, capsys):
    monkeypatch.setitem(sys.modules, 'torch_pruning', sys.modules.get('torch_pruning') or
                        type(sys)('torch_pruning'))  # present (or a stand-in): the checks after
    code, err = run_main(TOOL, ARGS + extra, capsys, cwd=None)
    lines = _lines(err)
    assert code == 2 and len(lines) == 1 and match in lines[0], err


def test_a_corrupt_kept_table_is_one_line(monkeypatch, no_benchmark, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, 'torch_pruning', sys.modules.get('torch_pruning') or
                        type(sys)('torch_pruning'))
    tables = tmp_path / 'tables'
    tables.mkdir()
    bad = tables / 'deit-tiny_kcr-hidden-all_32x32_b1_t1_cpu_fp32.json'
    bad.write_text('{"arch": "deit-tiny", ')
    code, err = run_main(TOOL, ARGS + ['--tables', str(tables)], capsys, cwd=None)
    lines = _lines(err)
    assert code == 2 and len(lines) == 1 and str(bad) in lines[0], err
    assert bad.read_text() == '{"arch": "deit-tiny", '  # not overwritten


def _stubbed_run(monkeypatch, tmp_path, table_name):
    """torch_pruning present (or a stand-in), a kept table ``table_name`` in tmp_path/tables
    (read back as {'read': path}), the benchmark a stub with one row: (tables dir, kept path,
    what the stub was called with)."""
    monkeypatch.setitem(sys.modules, 'torch_pruning', sys.modules.get('torch_pruning') or
                        type(sys)('torch_pruning'))
    tables = tmp_path / 'tables'
    tables.mkdir()
    kept = tables / table_name
    kept.write_text('{"version": 1}')
    monkeypatch.setattr(latency_io, 'load_table', lambda path: {'read': path})
    seen = {}

    def stub(arch, target, table=None, **kw):
        seen.update(arch=arch, target=target, table=table, **kw)
        row = dict(model=arch, method='Torch-Pruning hidden', flops_ratio=0.7,
                   params_ratio=0.68, latency_ratio=0.72, latency_ratio_thread=0.71,
                   baseline_ms=10., pruned_ms=7.2)
        return dict(rows=[row], skipped={'hidden+heads': 'a reason'}, table=table,
                    table_built=False)

    monkeypatch.setattr(latency_io, 'peer_benchmark', stub)
    return tables, kept, seen


def test_a_run_reads_the_kept_table_and_writes_the_rows(monkeypatch, tmp_path, capsys):
    tables, kept, seen = _stubbed_run(monkeypatch, tmp_path,
                                      'deit-tiny_kcr-hidden-all_32x32_b1_t1_cpu_fp32.json')
    out, js = tmp_path / 'table.md', tmp_path / 'rows.json'
    load_tool(TOOL).main(ARGS + ['--tables', str(tables), '--target-latency', '0.8',
                                 '--out', str(out), '--json', str(js)])
    printed = capsys.readouterr().out
    assert seen['arch'] == 'deit-tiny' and seen['target'] == 0.8
    assert seen['table'] == {'read': str(kept)} and seen['select_hidden'] == 'all'
    assert seen['input_size'] == (32, 32) and seen['threads'] == 1 and seen['batch'] == 1
    assert seen['runtime'].name == 'torch' and seen['match'] == 'flops'
    assert seen['peers'] == ['hidden', 'hidden+heads'] and seen['round_to'] == 8
    assert seen['table_rounds'] == 5
    line = ('| deit-tiny | 1 | Torch-Pruning hidden | 0.700 | 0.680 | 0.720 | 0.710 | 10.00 | '
            '7.20 |')
    assert line in printed and line in out.read_text()
    assert 'deit-tiny: Torch-Pruning hidden+heads: a reason' in printed
    (saved, ) = json.loads(js.read_text())['results']
    assert saved['rows'][0]['latency_ratio'] == 0.72 and 'table' not in saved
    assert saved['table_file'] == str(kept)


def test_variant_names_the_table_and_reaches_the_benchmark(monkeypatch, tmp_path):
    """--variant dcs on a model whose paper variant is kcr: the DCS table of --tables is read
    and the benchmark gets the variant."""
    tables, kept, seen = _stubbed_run(monkeypatch, tmp_path,
                                      'deit-tiny_dcs-hidden-all_32x32_b1_t1_cpu_fp32.json')
    load_tool(TOOL).main(ARGS + ['--tables', str(tables), '--variant', 'dcs',
                                 '--table-rounds', '3'])
    assert seen['variant'] == 'dcs' and seen['table'] == {'read': str(kept)}
    assert seen['table_rounds'] == 3
