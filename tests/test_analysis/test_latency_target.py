"""A model at a latency target (mmdcs.analysis.latency_target) with synthetic meters (no timing
assertions): the table built with a synthetic meter, the budget subnet it predicts within ±1 % of
the target, the measured columns taken from the injected meter (both clocks), the FLOPs and
params ratios those of the built subnet; a table given is used (not rebuilt) and one of another
supernet refused."""
import pytest

from mmdcs.analysis.complexity import build_backbone, count_flops, count_params
from mmdcs.models.backbones.base import SelectableBackbone
from mmdcs.analysis.latency_target import format_latency_target, latency_target_row
from mmdcs.selection import SubnetSpec
from mmdcs.selection.latency_cost import LatencyTableError
from _tools import assert_close_scaled  # noqa: E402 (tests/ is on sys.path)
from test_latency_table import synthetic_ms, synthetic_timer  # noqa: E402

SIZE = (32, 32)


def fake_meter(fn, module):
    """A synthetic meter of both clocks: the table's clock (the thread's CPU time) reads the
    synthetic model of the table's meter, the wall clock twice that for the pruned network, so
    that the two measured ratios differ."""
    calls.append(module)
    s = synthetic_timer(fn, module)
    pruned = not (isinstance(module, SelectableBackbone) and module.variant == 'baseline')
    return dict(thread=s, wall=s * (2. if pruned else 1.))


calls = []


@pytest.fixture(scope='module')
def table():
    """deit-tiny KCR with hidden units at 32x32, batch 2, measured with the synthetic timer."""
    row = latency_target_row('deit-tiny', 0.7, batch=2, threads=1, input_size=SIZE,
                             select_hidden=True, table_rounds=1, table_meter=synthetic_timer,
                             repeats=1, warmup=0, meter=fake_meter)
    assert row['table_built'] and row['table']['batch'] == 2
    return row['table']


@pytest.mark.parametrize('target', [0.6, 0.8])
def test_row_fields_are_consistent(target, table):
    calls.clear()
    row = latency_target_row('deit-tiny', target, batch=2, threads=1, input_size=SIZE,
                             select_hidden=True, table=table, repeats=3, warmup=0,
                             meter=fake_meter)
    # predicted within ±1 % (of the baseline) of the target, in groups of 8
    assert abs(row['predicted_ratio'] - target) <= 0.01
    assert not row['table_built']
    spec = SubnetSpec.coerce(row['spec'])
    assert spec.meta['budget']['resource'] == 'latency' and spec.hidden  # hidden units ranked
    assert all(b.kept % 8 == 0 or b.kept == b.dim for b in spec.blocks)
    # the measured column is the meter's wall clock: the pruned backbone's synthetic ms (x2)
    # over the baseline's, timed once (3 rounds of both) at the batch and threads asked for
    pruned = build_backbone('deit-tiny', spec.variant, spec, SIZE).eval()
    base = build_backbone('deit-tiny', 'baseline', None, SIZE).eval()
    assert len(calls) == 2 * 3 and (row['batch'], row['rounds'], row['threads']) == (2, 3, 1)
    assert_close_scaled(row['measured_ratio'], 2 * synthetic_ms(pruned) / synthetic_ms(base))
    assert_close_scaled(row['baseline_ms'], synthetic_ms(base))
    # the table's clock (the synthetic meter's thread clock): the synthetic ratio itself
    assert_close_scaled(row['measured_ratio_clock'], synthetic_ms(pruned) / synthetic_ms(base))
    # the synthetic table's prediction is the synthetic model of the built subnet
    assert_close_scaled(row['predicted_ratio'], synthetic_ms(pruned) / synthetic_ms(base),
                        rel=1e-6)
    assert_close_scaled(row['flops_ratio'], count_flops(pruned, SIZE) / count_flops(base, SIZE))
    assert_close_scaled(row['params_ratio'], count_params(pruned) / count_params(base))
    assert row['flops_ratio'] < 1 and row['params_ratio'] < 1
    text = format_latency_target([row])
    assert f'| {row["predicted_ratio"]:.3f} | {row["measured_ratio"]:.3f} | ' \
           f'{row["measured_ratio_clock"]:.3f} ({row["clock"]}) |' in text


def test_a_given_table_is_used_and_another_supernets_refused(table):
    def no_build(*a, **k):
        raise AssertionError('the table given must be used')
    row = latency_target_row('deit-tiny', 0.7, batch=2, input_size=SIZE, select_hidden=True,
                             table=table, table_meter=no_build, repeats=1, warmup=0,
                             meter=fake_meter)
    assert not row['table_built'] and row['table'] is table
    with pytest.raises(LatencyTableError):  # the table is for select_hidden=True
        latency_target_row('deit-tiny', 0.7, input_size=SIZE, table=table, repeats=1,
                           warmup=0, meter=fake_meter)


def test_validate_reports_the_predictors_error_on_random_subnets(table):
    """``validate=K``: K random subnets of the table's supernet timed beside the baseline (the
    injected meter), the predicted ratio against the measured one; the row carries the mean
    and largest absolute error and the table shows them. A meter that makes every subnet 10 %
    slower than the table says moves each measured ratio by 10 % and the error with it."""
    from mmdcs.models.backbones.base import SelectableBackbone

    def skewed(fn, module):
        slow = not (isinstance(module, SelectableBackbone) and module.variant == 'baseline')
        return synthetic_timer(fn, module) * (1.1 if slow else 1.)

    rows = {}
    for name, t in (('exact', synthetic_timer), ('skewed', skewed)):
        rows[name] = latency_target_row(
            'deit-tiny', 0.7, batch=2, threads=1, input_size=SIZE, select_hidden=True,
            table=table, repeats=1, warmup=0, meter=fake_meter, validate=4,
            validate_rounds=1, validate_meter=t)
    for row in rows.values():
        v = row['validation']
        assert v['k'] == 4 and len(v['rows']) == 4
        errors = [abs(r['predicted_ratio'] - r['measured_ratio']) for r in v['rows']]
        assert_close_scaled(row['predictor_error'], sum(errors) / 4)
        assert_close_scaled(row['predictor_error_max'], max(errors))
        text = format_latency_target([row])
        assert '| predictor error, mean abs. (max) |' in text
        assert (f'| {row["predictor_error"]:.1%} ({row["predictor_error_max"]:.1%}), '
                '4 subnets |') in text
    # the same random subnets (seeded): predictions equal, measurements 10 % apart
    for a, b in zip(rows['exact']['validation']['rows'], rows['skewed']['validation']['rows']):
        assert_close_scaled(a['predicted_ratio'], b['predicted_ratio'])
        assert_close_scaled(b['measured_ratio'], 1.1 * a['measured_ratio'], rel=1e-9)
    assert rows['skewed']['predictor_error'] > rows['exact']['predictor_error']
    # not validated: no column
    plain = latency_target_row('deit-tiny', 0.7, batch=2, threads=1, input_size=SIZE,
                               select_hidden=True, table=table, repeats=1, warmup=0,
                               meter=fake_meter)
    assert 'predictor_error' not in plain
    assert 'predictor error' not in format_latency_target([plain])


def test_refine_corrects_a_table_that_under_predicts_the_exported_subnet(table):
    """``refine=N``: where the subnets measure 15 % slower than the table predicts (the table's
    clock skewed), the first subnet misses the target by ~0.1; each measured correction asks
    the table for ``asked · target / measured`` until the measured ratio is within 0.01 (or N
    tries), keeping the closest; the row records every try. Without it the miss stands."""
    from mmdcs.models.backbones.base import SelectableBackbone

    def slow_subnets(fn, module):
        base = isinstance(module, SelectableBackbone) and module.variant == 'baseline'
        return synthetic_timer(fn, module) * (1. if base else 1.15)

    kw = dict(batch=2, threads=1, input_size=SIZE, select_hidden=True, table=table, repeats=1,
              warmup=0, meter=slow_subnets)
    plain = latency_target_row('deit-tiny', 0.7, **kw)
    assert len(plain['refine_steps']) == 1 and plain['asked_ratio'] == 0.7
    assert plain['measured_ratio_clock'] - 0.7 > 0.08  # 1.15 × ~0.7
    row = latency_target_row('deit-tiny', 0.7, refine=3, **kw)
    steps = row['refine_steps']
    assert 2 <= len(steps) <= 4 and steps[0] == plain['refine_steps'][0]
    assert abs(row['measured_ratio_clock'] - 0.7) <= 0.015
    assert row['measured_ratio_clock'] == min((s['measured_ratio_clock'] for s in steps),
                                              key=lambda m: abs(m - 0.7))
    # the second try asked the table for what the first missed
    assert_close_scaled(steps[1]['asked'], 0.7 * 0.7 / steps[0]['measured_ratio_clock'])
    assert row['asked_ratio'] < 0.65 and abs(row['predicted_ratio'] - row['asked_ratio']) <= 0.01
    # the subnet kept is the one measured: its FLOPs are below the unrefined one's
    assert row['flops_ratio'] < plain['flops_ratio']
    text = format_latency_target([row])
    assert '| asked of the table (tries) |' in text
    assert f'| 0.70 | {row["asked_ratio"]:.3f} ({len(steps)}) | {row["predicted_ratio"]:.3f} |' \
        in text
