"""tools/export_subnet.py to a latency budget (issue 23 item 4): --target-latency R
--latency-table T ranks channels and hidden units per unit of *predicted* latency and meets R
within ±1 % of the baseline latency, widths in groups of 8 by default; subnet.json records the
predicted ratio and the table's identity; the measurement (here with a synthetic timer) goes
into it too; bad input is one line, exit 2, nothing written; a table measured with another
thread count is a warning naming both. The tables are synthetic (no timing in tests)."""
import json
import os.path as osp

import pytest
import torch

from _resource_costs import synthetic_latency_table  # noqa: E402 (tests/ is on sys.path)
from _tools import load_tool, run_main  # noqa: E402

CONFIG = """default_scope = 'mmpretrain'
model = dict(
    type='ImageClassifier',
    backbone=dict(type='mmdcs.ViT', arch='deit-tiny', variant='{variant}', img_size=32,
                  select_hidden={hidden}),
    neck=None,
    head=dict(type='LinearClsHead', num_classes=10, in_channels=192))
"""


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
    """A DCS-DeiT-Tiny classifier at 32×32 with hidden selection and random α, β, its
    checkpoint, a baseline checkpoint (for --method magnitude) and a synthetic table."""
    from mmengine.config import Config

    from mmdcs.apis.subnet_io import build_model
    import mmpretrain.utils
    mmpretrain.utils.register_all_modules(init_default_scope=False)
    root = tmp_path_factory.mktemp('latency')
    out = dict(root=root)
    for variant in ('dcs', 'baseline'):
        path = osp.join(str(root), f'{variant}.py')
        with open(path, 'w') as f:
            f.write(CONFIG.format(variant=variant, hidden=variant != 'baseline'))
        torch.manual_seed(0)
        model = build_model(Config.fromfile(path).model, 'mmpretrain')
        g = torch.Generator().manual_seed(5)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith('select.alpha'):
                    p.copy_(torch.randn(p.shape, generator=g))
        ckpt = osp.join(str(root), f'{variant}.pth')
        torch.save({'state_dict': model.state_dict()}, ckpt)
        out[variant] = dict(config=path, ckpt=ckpt, model=model)
    table = synthetic_latency_table(out['dcs']['model'].backbone, [32, 32])
    out['table_dict'] = table
    out['table'] = osp.join(str(root), 'table.json')
    with open(out['table'], 'w') as f:
        json.dump(table, f)
    return out


def _predicted(setup, spec):
    from mmdcs.models.counting import latency_cost
    cost = latency_cost(setup['dcs']['model'], (32, 32), setup['table'])
    kept = {b.name: b.kept for b in spec['blocks']}
    hidden = {h['name']: h['kept'] for h in spec.get('hidden', [])}
    return cost.ratio(cost.at(kept, hidden))


@pytest.mark.parametrize('target', [0.5, 0.7, 0.85])
def test_export_meets_a_predicted_latency_budget_within_1_percent(setup, tmp_path, target,
                                                                  capsys):
    out = str(tmp_path / 'out')
    load_tool('tools/export_subnet.py').main(
        [setup['dcs']['config'], setup['dcs']['ckpt'], '--out', out, '--target-latency',
         str(target), '--latency-table', setup['table'], '--no-measure'])
    printed = capsys.readouterr().out
    with open(osp.join(out, 'subnet.json')) as f:
        spec = json.load(f)
    b = spec['meta']['budget']
    assert b['resource'] == 'latency' and b['target_ratio'] == target
    assert b['achieved_ratio'] <= target + 1e-12
    assert b['achieved_ratio'] == pytest.approx(target, abs=0.01)
    # the recorded prediction is the table's prediction of the widths written
    from mmdcs.selection import SubnetSpec
    s = SubnetSpec.load(osp.join(out, 'subnet.json'))
    spec_d = dict(blocks=s.blocks, hidden=[dict(name=h.name, kept=h.kept) for h in s.hidden])
    assert _predicted(setup, spec_d) == pytest.approx(b['achieved_ratio'], rel=1e-9)
    # widths in groups of 8 by default with a latency target
    assert all(x.kept % 8 == 0 or x.kept == x.dim for x in list(s.blocks) + list(s.hidden))
    assert spec['meta']['multiple_of'] == 8
    # the table's identity
    assert b['cost']['table'] == osp.abspath(setup['table'])
    from mmdcs.selection import file_sha256
    assert b['cost']['table_sha256'] == file_sha256(setup['table'])
    assert b['cost']['device_name'] == 'Synthetic CPU' and b['cost']['threads'] == 1
    assert 'measured' in b and 'latency' not in b['measured']  # --no-measure
    assert f'latency: predicted' in printed and f'(target {target:g})' in printed


def test_magnitude_meets_a_latency_budget_too(setup, tmp_path):
    """--method magnitude from the baseline checkpoint, ranked with hidden units, at a latency
    target: the table is the one of the magnitude pruner's supernet (dcs-arch2)."""
    from mmdcs.models.backbones.vit import ViT
    table = str(tmp_path / 'arch2.json')
    with open(table, 'w') as f:
        json.dump(synthetic_latency_table(
            ViT(arch='deit-tiny', variant='dcs-arch2', img_size=32, select_hidden=True),
            [32, 32]), f)
    out = str(tmp_path / 'out')
    load_tool('tools/export_subnet.py').main(
        [setup['baseline']['config'], setup['baseline']['ckpt'], '--out', out, '--method',
         'magnitude', '--target-latency', '0.7', '--latency-table', table, '--no-measure',
         '--cfg-options', 'model.backbone.select_hidden=True'])
    with open(osp.join(out, 'subnet.json')) as f:
        b = json.load(f)['meta']['budget']
    assert b['achieved_ratio'] == pytest.approx(0.7, abs=0.01) and b['normalize'] == 'mean'


def test_the_measurement_is_recorded_beside_the_prediction(setup, tmp_path):
    """measure=True with a latency target: the exported model timed against the baseline
    (a synthetic timer here: time ∝ the model's FLOPs), both ratios in subnet.json; a table
    measured with another thread count than the measurement's is a warning naming both."""
    from mmdcs.analysis.complexity import count_flops
    from mmdcs.apis.export import export_subnet

    flops = {}

    def timer(models, inputs, warmup=3, repeats=10, threads=None, **kw):
        flops.update({n: count_flops(m, tuple(inputs.shape)) for n, m in models.items()})
        return {n: dict(median_ms=flops[n] / 1e6, threads=threads, device='cpu')
                for n in models}

    out = str(tmp_path / 'out')
    res = export_subnet(setup['dcs']['config'], setup['dcs']['ckpt'], out,
                        target=('latency', 0.7), cost_options=dict(latency_table=setup['table']),
                        multiple_of=8, measure=True,
                        measure_options=dict(timer=timer, threads=2))
    with open(osp.join(out, 'subnet.json')) as f:
        b = json.load(f)['meta']['budget']
    assert b['measured']['latency']['ratio'] == pytest.approx(res.latency['ratio'])
    # the synthetic timer counts FLOPs: of the pruned backbone vs the baseline backbone
    assert flops['pruned'] == res.rows[1][2]
    assert res.latency['ratio'] == pytest.approx(flops['pruned'] / flops['baseline'])
    assert b['achieved_ratio'] == pytest.approx(0.7, abs=0.01)
    assert any('threads = 1' in w and 'threads = 2' in w for w in res.warnings), res.warnings
    # and measured on another machine than this one (the synthetic table's device name)
    assert any("'Synthetic CPU'" in w and res.latency['device_name'] in w
               for w in res.warnings), res.warnings
    assert any(line.startswith('latency, measured') for line in res.lines)


def _bad(setup, tmp_path, capsys, extra, table=None):
    out = tmp_path / 'bad'
    argv = [setup['dcs']['config'], setup['dcs']['ckpt'], '--out', str(out)] + extra
    code, err = run_main('tools/export_subnet.py', argv, capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert not out.exists()
    return lines[0]


def test_bad_latency_input_is_one_line_and_nothing_written(setup, tmp_path, capsys):
    table = setup['table']
    assert '--latency-table' in _bad(setup, tmp_path, capsys, ['--target-latency', '0.7'])
    assert '--target-latency' in _bad(setup, tmp_path, capsys, ['--latency-table', table])
    for target in ('0', '1', '1.5', '-0.2'):
        line = _bad(setup, tmp_path, capsys, ['--target-latency', target, '--latency-table',
                                              table])
        assert 'floor' in line and 'ceiling' in line, line
    line = _bad(setup, tmp_path, capsys, ['--target-latency', '0.01', '--latency-table', table])
    assert 'cannot be met' in line and 'floor' in line
    # another arch, other selection options, another input shape, corrupt, truncated, missing
    for name, change in (('arch', dict(arch='deit-small')),
                         ('selection', dict(selection=dict(setup['table_dict']['selection'],
                                                           select_hidden=False))),
                         ('input', dict(input_shape=[64, 64]))):
        path = str(tmp_path / f'{name}.json')
        with open(path, 'w') as f:
            json.dump(dict(setup['table_dict'], **change), f)
        line = _bad(setup, tmp_path, capsys, ['--target-latency', '0.7', '--latency-table',
                                              path])
        assert path in line and name in line, line
    text = json.dumps(setup['table_dict'])
    for name, content in (('truncated', text[:len(text) // 2]), ('corrupt', 'not json {')):
        path = str(tmp_path / f'{name}.json')
        with open(path, 'w') as f:
            f.write(content)
        line = _bad(setup, tmp_path, capsys, ['--target-latency', '0.7', '--latency-table',
                                              path])
        assert path in line and ('corrupt' in line or 'truncated' in line), line
    line = _bad(setup, tmp_path, capsys, ['--target-latency', '0.7', '--latency-table',
                                          str(tmp_path / 'none.json')])
    assert 'not found' in line
