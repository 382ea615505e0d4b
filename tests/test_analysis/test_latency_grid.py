"""mmdcs.analysis.latency_grid and tools/analysis/latency_grid.py with synthetic meters (no
timing assertions): both grid orders give a row; with exact synthetic unit times the smooth
surface (a quadratic in D̃, H̃ that holds the bilinear synthetic MLP) predicts what the table
predicts; bad input is one line, exit 2."""
import pytest

from mmdcs.analysis.latency_grid import (compare_grid_orders, format_grid_orders, spec_widths,
                                         surface_ratio)
from _tools import assert_close_scaled, run_main  # noqa: E402 (tests/ is on sys.path)
from test_latency_table import synthetic_timer  # noqa: E402
from test_latency_target import fake_meter  # noqa: E402


def test_both_grid_orders_with_exact_synthetic_times():
    rows = compare_grid_orders('deit-tiny', 0.7, 32, select_hidden=True, rounds=1, repeats=1,
                               table_meter=synthetic_timer, meter=fake_meter)
    assert [r['grid'] for r in rows] == ['aligned', 'rotated+pooled']
    for r in rows:
        assert abs(r['predicted_ratio'] - 0.7) <= 0.01
        # exact synthetic entries: the surface through them is the table itself
        assert_close_scaled(r['surface_ratio'], r['predicted_ratio'], 1e-6)
        assert_close_scaled(r['measured_ratio_clock'], r['predicted_ratio'], 1e-6)
    text = format_grid_orders(rows)
    assert text.count('\n') == 3 and 'rotated+pooled' in text


def test_spec_widths_and_surface_of_a_channel_only_table():
    spec = dict(blocks=[dict(name='a', kept=8), dict(name='b', kept=16)],
                hidden=[dict(name='b', kept=32), dict(name='c', kept=4)],
                heads=[dict(name='x', kept=2)])
    assert spec_widths(spec) == {'a': (8, ), 'b': (16, 32), 'c': (4, ), 'x': (2, )}
    grid = [8, 16, 24]
    table = dict(const_ms=1., baseline_ms=10., units=[
        dict(path=p, channels=24, hidden=None, grid_channels=grid,
             ms=[0.5 + 0.01 * w + (0.02 if p == 'a' else -0.02) for w in grid])
        for p in ('a', 'b')])
    # the two units' curves averaged by the fit: the noise of each (±0.02) cancels
    assert_close_scaled(surface_ratio(table, {'a': (16, ), 'b': (16, )}),
                        (1. + 2 * (0.5 + 0.16)) / 10., 1e-9)


@pytest.mark.parametrize('argv, match', [
    (['--model', 'resnet50'], 'resnet50'),
    (['--target', '1.5'], 'target'),
    (['--rounds', '0'], 'rounds'),
])
def test_bad_input_is_one_line(argv, match, capsys):
    code, err = run_main('tools/analysis/latency_grid.py', argv, capsys, cwd=None)
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith('error: ') and match in lines[0], err
