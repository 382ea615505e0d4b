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
from _tools import assert_close_scaled, load_tool, run_main  # noqa: E402

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
    assert b['prior'] == 'flops'  # a latency budget's: an element is worth its FLOPs
    # --prior cost: the units weighed by their time per element, recorded
    load_tool('tools/export_subnet.py').main(
        [setup['baseline']['config'], setup['baseline']['ckpt'], '--out', out + '2', '--method',
         'magnitude', '--target-latency', '0.7', '--latency-table', table, '--no-measure',
         '--prior', 'cost', '--cfg-options', 'model.backbone.select_hidden=True'])
    with open(osp.join(out + '2', 'subnet.json')) as f:
        b = json.load(f)['meta']['budget']
    assert b['achieved_ratio'] == pytest.approx(0.7, abs=0.01) and b['prior'] == 'cost'


def test_the_measurement_is_recorded_beside_the_prediction(setup, tmp_path):
    """measure=True with a latency target: the exported model timed against the baseline
    (a synthetic meter here: time ∝ the model's FLOPs), both ratios in subnet.json; a table
    measured with another thread count than the measurement's is a warning naming both."""
    from mmdcs.apis.export import export_subnet

    out = str(tmp_path / 'out')
    res = export_subnet(setup['dcs']['config'], setup['dcs']['ckpt'], out,
                        target=('latency', 0.7), cost_options=dict(latency_table=setup['table']),
                        multiple_of=8, measure=True,
                        measure_options=dict(meter=flops_meter(), threads=2),
                        latency_tolerance=None)  # FLOPs are not the table's time: a miss
    with open(osp.join(out, 'subnet.json')) as f:
        b = json.load(f)['meta']['budget']
    assert b['measured']['latency']['ratio'] == pytest.approx(res.latency['ratio'])
    # the synthetic meter counts FLOPs: of the pruned backbone vs the baseline backbone
    base = flops_meter.seen['baseline']
    assert flops_meter.seen['pruned'] == res.rows[1][2]
    assert res.latency['ratio'] == pytest.approx(res.rows[1][2] / base)
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
    assert '--prior weighs the ranking of a target' in _bad(setup, tmp_path, capsys,
                                                            ['--prior', 'flops'])
    assert "prior 'latency': one of cost, none" in _bad(
        setup, tmp_path, capsys, ['--target-latency', '0.7', '--latency-table', table,
                                  '--prior', 'latency', '--no-measure'])
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


def flops_meter(skew=1.0):
    """A synthetic meter (no timing): a backbone's seconds per call are its FLOPs at 32×32 /
    1e9, a pruned one's ``skew`` times that (a table that under-predicts the subnets for
    skew > 1); what it counted is kept in ``flops_meter.seen`` (baseline, pruned)."""
    import weakref

    from mmdcs.analysis.complexity import count_flops
    counted = weakref.WeakKeyDictionary()

    def meter(fn, module):
        if module not in counted:
            counted[module] = count_flops(module, (1, 3, 32, 32))
        pruned = module.variant != 'baseline'
        flops_meter.seen['pruned' if pruned else 'baseline'] = counted[module]
        return counted[module] / 1e9 * (skew if pruned else 1.)
    return meter


flops_meter.seen = {}


def _export(setup, out, **kw):
    from mmdcs.apis.export import export_subnet
    return export_subnet(setup['dcs']['config'], setup['dcs']['ckpt'], str(out),
                         target=('latency', 0.7),
                         cost_options=dict(latency_table=setup['table']), multiple_of=8,
                         measure=True, **kw)


def test_measured_corrections_export_the_subnet_measured_closest(setup, tmp_path):
    """refine=N: with subnets measuring 1.25× their FLOPs ratio, the table's subnet misses the
    target; each try asks the table for asked · target / measured of the try before, and the
    subnet exported (widths, prediction, measurement, weights) is the try measured closest.
    subnet.json keeps the target asked by the user, the request that gave the subnet and every
    try."""
    from mmdcs.selection import SubnetSpec
    meter = flops_meter(1.25)
    plain = _export(setup, tmp_path / 'plain', measure_options=dict(meter=meter), refine=0,
                    latency_tolerance=None)
    first = plain.latency['ratio']
    assert abs(first - 0.7) > 0.02  # a miss to correct
    assert 'refine' not in plain.budget and plain.budget['asked_ratio'] == 0.7
    res = _export(setup, tmp_path / 'out', measure_options=dict(meter=meter), refine=3,
                  latency_tolerance=None)
    with open(osp.join(str(tmp_path / 'out'), 'subnet.json')) as f:
        b = json.load(f)['meta']['budget']
    tries = b['refine']
    assert 2 <= len(tries) <= 4 and tries[0]['asked'] == 0.7
    assert_close_scaled(tries[0]['measured'], first)
    for prev, nxt in zip(tries, tries[1:]):
        assert_close_scaled(nxt['asked'], prev['asked'] * 0.7 / prev['measured'])
    best = min(tries, key=lambda t: abs(t['measured'] - 0.7))
    assert abs(best['measured'] - 0.7) < abs(first - 0.7)
    assert b['target_ratio'] == 0.7 and b['asked_ratio'] == best['asked']
    assert b['achieved_ratio'] == best['predicted']
    assert_close_scaled(b['measured']['latency']['ratio'], best['measured'])
    assert_close_scaled(res.latency['ratio'], best['measured'])
    # the files are the closest try's: its widths predict what was recorded, and the weights
    # are of those widths
    s = SubnetSpec.load(osp.join(str(tmp_path / 'out'), 'subnet.json'))
    spec_d = dict(blocks=s.blocks, hidden=[dict(name=h.name, kept=h.kept) for h in s.hidden])
    assert_close_scaled(_predicted(setup, spec_d), best['predicted'])
    assert res.rows[1][2] < plain.rows[1][2]  # the pruned backbone counted is the closest's
    assert any(line.startswith('measured corrections') for line in res.lines)


def test_a_measured_miss_beyond_the_tolerance_is_refused(setup, tmp_path):
    """latency_tolerance: a subnet measured further than it from the target is one line
    naming the target, the measured and predicted ratios and the remedies; nothing written.
    Within it, the same export is written."""
    from mmdcs.apis.launch import UserError
    meter = flops_meter(1.25)
    first = _export(setup, tmp_path / 'a', measure_options=dict(meter=meter), refine=0,
                    latency_tolerance=None).latency['ratio']
    miss = abs(first - 0.7)
    with pytest.raises(UserError) as e:
        _export(setup, tmp_path / 'b', measure_options=dict(meter=meter), refine=0,
                latency_tolerance=miss / 2)
    line = str(e.value)
    assert '\n' not in line and f'measured {first:.3f}' in line and '0.7' in line
    assert 'nothing written' in line and '--refine' in line and 'predicted' in line
    assert not (tmp_path / 'b').exists()
    res = _export(setup, tmp_path / 'c', measure_options=dict(meter=meter), refine=0,
                  latency_tolerance=miss * 1.01)
    assert osp.exists(res.subnet) and osp.exists(res.checkpoint)


def test_the_tool_corrects_and_refuses_by_its_options(setup, tmp_path, capsys, monkeypatch):
    """tools/export_subnet.py: measured as the table says (a table measured with the thread
    clock is timed with it, at its batch and threads, in its runtime), 2 corrections by
    default, --refine 0 and --latency-tolerance reach the export; a miss is one line, exit 2,
    nothing written."""
    import mmdcs.analysis.latency as lat
    clocks = []

    class Meter:  # the harness's meter, replaced: records the clocks asked for
        def __init__(self, names, **kw):
            clocks.append(list(names))
            self.meter = flops_meter(1.25)

        def __call__(self, fn, module):
            return self.meter(fn, module)
    monkeypatch.setattr(lat, 'Meter', Meter)
    from mmdcs.analysis.latency import device_name
    table = str(tmp_path / 'thread.json')  # measured here (no warning of another device)
    with open(table, 'w') as f:
        json.dump(dict(setup['table_dict'], clock='thread',
                       device_name=device_name(torch.device('cpu'))), f)
    base = [setup['dcs']['config'], setup['dcs']['ckpt'], '--target-latency', '0.7',
            '--latency-table', table, '--measure-rounds', '5']
    out = tmp_path / 'default'
    load_tool('tools/export_subnet.py').main(base + ['--out', str(out),
                                                     '--latency-tolerance', '1'])
    assert clocks and all(c[0] == 'thread' for c in clocks)  # the table's clock first
    with open(osp.join(str(out), 'subnet.json')) as f:
        b = json.load(f)['meta']['budget']
    t = b['measured']['latency']
    assert (t['rounds'], t['threads'], t['batch'], t['clock']) == (5, 1, 1, 'thread')
    assert t['runtime']['name'] == 'torch'
    assert 2 <= len(b['refine']) <= 3  # the default --refine 2
    out = tmp_path / 'refused'
    code, err = run_main('tools/export_subnet.py', base + ['--out', str(out), '--refine', '0',
                                                         '--latency-tolerance', '0.001'],
                         capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert 'outside ±0.001' in err and 'nothing written' in err
    assert not out.exists()
    # a table of another runtime is refused in one line, before anything is measured
    code, err = run_main('tools/export_subnet.py', base + ['--out', str(out), '--runtime',
                                                         'onnxruntime'], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert 'torch runtime, not onnxruntime' in err and not out.exists()


def test_measured_in_onnxruntime_the_onnx_file_is_written_and_recorded(setup, tmp_path):
    """A table measured in onnxruntime: the export writes the pruned backbone's ONNX file (the
    one timed, against the baseline's, here with a synthetic meter), records the runtime, its
    version and session options in subnet.json, and the file runs in onnxruntime with the
    pruned backbone's output."""
    import onnxruntime as ort

    from mmdcs.apis.export import export_subnet
    from mmdcs.selection import SubnetSpec
    table = str(tmp_path / 'ort.json')
    with open(table, 'w') as f:
        json.dump(dict(setup['table_dict'], runtime='onnxruntime'), f)
    out = tmp_path / 'out'
    res = export_subnet(setup['dcs']['config'], setup['dcs']['ckpt'], str(out),
                        target=('latency', 0.7), cost_options=dict(latency_table=table),
                        measure_options=dict(meter=flops_meter(), repeats=1, warmup=0),
                        latency_tolerance=None)
    with open(out / 'subnet.json') as f:
        t = json.load(f)['meta']['budget']['measured']['latency']
    assert t['file'] == 'pruned_backbone.onnx' and (out / t['file']).is_file()
    assert t['runtime']['name'] == 'onnxruntime' and t['runtime']['version'] == ort.__version__
    assert t['runtime']['options']['intra_op_num_threads'] == 1
    assert t['runtime']['options']['inter_op_num_threads'] == 1
    assert res.latency['ratio'] == pytest.approx(res.rows[1][2] / flops_meter.seen['baseline'])
    # the file is the exported pruned backbone, with its weights: its output is PyTorch's
    from mmengine.config import Config

    from mmdcs.apis.subnet_io import build_model, with_subnet
    spec = SubnetSpec.load(str(out / 'subnet.json'))
    pruned = build_model(with_subnet(Config.fromfile(setup['dcs']['config']).model,
                                     spec.to_dict()), 'mmpretrain').eval()
    pruned.load_state_dict(torch.load(str(out / 'pruned.pth'))['state_dict'])
    x = torch.randn(1, 3, 32, 32)
    session = ort.InferenceSession(str(out / t['file']), providers=['CPUExecutionProvider'])
    got = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])
    with torch.no_grad():
        want = pruned.backbone(x)[0]
    assert_close_scaled(got, want, 1e-4)
    assert any('pruned_backbone.onnx' in line for line in res.lines)


def test_a_runtime_that_cannot_run_here_is_one_line():
    """onnxruntime on a GPU where it has no CUDA provider, TensorRT without its provider, a
    dtype it does not time: one ValueError line each (the tools print it, exit 2)."""
    import onnxruntime as ort

    from mmdcs.apis.ort_runtime import OrtRuntime, TensorRTRuntime
    if 'CUDAExecutionProvider' not in ort.get_available_providers():
        with pytest.raises(ValueError, match='no CUDAExecutionProvider'):
            OrtRuntime(device='cuda')
    with pytest.raises(ValueError, match='device must be one of cuda'):
        TensorRTRuntime(device='cpu')
    with pytest.raises(ValueError, match='fp32'):
        OrtRuntime(dtype='fp16')


def test_onnxruntime_keeps_a_bounded_number_of_sessions_and_exports_each_key_once(monkeypatch):
    """A table of many distinct blocks asks for a session per block and shape: only the
    LIVE_SESSIONS used last stay open (each holds its graph and memory arena), an evicted key is
    opened again from its file, never exported twice, and gives the same output."""
    import mmdcs.apis.ort_runtime as ortr
    monkeypatch.setattr(ortr, 'LIVE_SESSIONS', 2)
    exports = []
    real = ortr.export_onnx
    monkeypatch.setattr(ortr, 'export_onnx', lambda *a, **k: (exports.append(a[2]),
                                                               real(*a, **k))[1])
    rt = ortr.OrtRuntime(threads=1)
    torch.manual_seed(0)
    mods = [torch.nn.Linear(4, 3) for _ in range(4)]
    x = torch.randn(2, 4)
    first = [rt.prepare(m, (x, ), key=f'k{i}')()[0] for i, m in enumerate(mods)]
    assert len(rt._live) == 2 and list(rt._live) == ['k2', 'k3'] and len(exports) == 4
    again = rt.prepare(mods[0], (x, ), key='k0')
    assert len(exports) == 4 and list(rt._live) == ['k3', 'k0']
    assert_close_scaled(torch.from_numpy(again()[0]), torch.from_numpy(first[0]), 1e-6)
    assert rt.prepare(mods[3], (x, ), key='k3') is rt._live['k3']
