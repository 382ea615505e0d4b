"""The export as one API call (mmdcs.apis.export.export_subnet): the tool is a parser over it and
prints its report; ranking methods are scorers of a registry (mmdcs.selection.importance), so a
new one (here a test scorer that needs data) is usable by name with no change to the export; a
budget's cost is any ResourceCost, passed in or built by name; the post-measurement times the
exported model against the baseline with an injected timer."""
import json
import os.path as osp

import pytest
import torch

from mmdcs.selection import hidden_selectors, prunable_modules
from mmdcs.selection import importance
from mmdcs.selection.importance import register_scorer, scorer_names
from _tools import load_tool  # noqa: E402 (tests/ is on sys.path)

CONFIG = """default_scope = 'mmpretrain'
model = dict(
    type='ImageClassifier',
    backbone=dict(type='mmdcs.ViT', arch='deit-tiny', variant='{variant}', img_size=32,
                  select_hidden={hidden}),
    neck=None,
    head=dict(type='LinearClsHead', num_classes=10, in_channels=192))
"""


@pytest.fixture(scope='module')
def supernet(tmp_path_factory):
    """A DCS-DeiT-Tiny classifier at 32×32 with hidden-unit selection and random α, β."""
    from mmengine.config import Config

    from mmdcs.apis.subnet_io import build_model
    import mmpretrain.utils
    mmpretrain.utils.register_all_modules(init_default_scope=False)
    root = tmp_path_factory.mktemp('export_api')
    path = osp.join(str(root), 'dcs.py')
    with open(path, 'w') as f:
        f.write(CONFIG.format(variant='dcs', hidden=True))
    torch.manual_seed(0)
    model = build_model(Config.fromfile(path).model, 'mmpretrain')
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith('select.alpha'):
                p.copy_(torch.randn(p.shape, generator=g))
    ckpt = osp.join(str(root), 'dcs.pth')
    torch.save({'state_dict': model.state_dict()}, ckpt)
    return dict(config=path, ckpt=ckpt, model=model, root=root)


def test_the_method_choices_are_the_registry(supernet):
    """--method offers the registered scorers; 'alpha' and 'magnitude' are there, with the
    treatment the export gives them (magnitude: normalised, from a baseline checkpoint)."""
    assert {'alpha', 'magnitude'} <= set(scorer_names())
    assert importance.get_scorer('magnitude').normalize == 'mean'
    assert importance.get_scorer('magnitude').baseline
    assert not importance.get_scorer('alpha').baseline
    tool = load_tool('tools/export_subnet.py')
    for name in scorer_names():
        assert tool.parse_args([supernet['config'], 'x.pth', '--out', 'o', '--method',
                                name]).method == name
    with pytest.raises(KeyError, match='known: alpha'):
        importance.get_scorer('no-such-method')
    with pytest.raises(ValueError, match='registered already'):
        register_scorer('alpha')(lambda backbone, **ctx: ({}, {}))
    # the alpha scorer is σ(α), σ(β) of the backbone
    backbone = supernet['model'].backbone
    ch, hid = importance.get_scorer('alpha')(backbone, model=supernet['model'])
    name, m = next(iter(prunable_modules(backbone).items()))
    assert torch.equal(ch[name], torch.sigmoid(m.select.alpha.detach().float()))
    assert set(hid) == set(hidden_selectors(backbone))


def test_a_new_scorer_that_needs_data_is_usable_by_name(supernet, tmp_path, monkeypatch):
    """A scorer registered with needs_data gets the batches the API is given, and its ranking is
    what the budget keeps: scores that favour the channels with the lowest index keep exactly
    the first D̃ channels of every block."""
    from mmdcs.apis.export import export_subnet
    from mmdcs.apis.launch import UserError
    seen = {}

    def by_index(backbone, *, model, batches, **ctx):
        seen['batches'] = list(batches)
        seen['model'] = model
        ch = {n: -torch.arange(m.select.dim, dtype=torch.float64)
              for n, m in prunable_modules(backbone).items()}
        hid = {k: -torch.arange(s.dim, dtype=torch.float64)
               for k, s in hidden_selectors(backbone).items()}
        return ch, hid

    monkeypatch.setitem(importance.SCORERS, 'by-index', importance.Scorer(
        'by-index', by_index, normalize='mean', needs_data=True))
    with pytest.raises(UserError, match='needs data batches'):
        export_subnet(supernet['config'], supernet['ckpt'], str(tmp_path / 'none'),
                      method='by-index', target=('flops', 0.7))
    assert not (tmp_path / 'none').exists()
    out = str(tmp_path / 'out')
    res = export_subnet(supernet['config'], supernet['ckpt'], out, method='by-index',
                        target=('flops', 0.7), batches=[torch.zeros(1)], verify=False)
    assert len(seen['batches']) == 1 and hasattr(seen['model'], 'head')
    for b in list(res.spec.blocks) + list(res.spec.hidden):
        assert b.keep == list(range(b.kept))
    assert res.budget['achieved_ratio'] == pytest.approx(0.7, abs=0.01)
    assert res.budget['normalize'] == 'mean'
    with open(osp.join(out, 'subnet.json')) as f:
        assert json.load(f)['meta']['method'] == 'by-index'


def test_the_tool_prints_the_api_report(supernet, tmp_path, capsys):
    """tools/export_subnet.py prints the lines of the API's result and returns its dict; the
    same export through the API gives the same subnet."""
    from mmdcs.apis.export import export_subnet
    tool = load_tool('tools/export_subnet.py')
    out = str(tmp_path / 'tool')
    res = tool.export(tool.parse_args([supernet['config'], supernet['ckpt'], '--out', out,
                                       '--target-params', '0.8']))
    printed = capsys.readouterr().out
    api = export_subnet(supernet['config'], supernet['ckpt'], str(tmp_path / 'api'),
                        target=('params', 0.8))
    assert res['spec'].blocks == api.spec.blocks and res['spec'].hidden == api.spec.hidden
    assert 'budget (alpha): params target 0.8' in printed
    # the same report, but for the output directory and the time it was written
    report = '\n'.join(api.lines).replace(str(tmp_path / 'api'), out)
    assert report in printed


def test_a_cost_passed_in_is_the_one_the_budget_uses(supernet, tmp_path):
    """Any ResourceCost can be handed to the export: here the calibrated FLOPs count with every
    hidden unit made free, so the budget is met by channels alone (the hidden units all kept)."""
    from mmdcs.analysis.complexity import calibrate_cost
    from mmdcs.apis.export import export_subnet
    from mmdcs.selection.budget import ResourceCost
    cost = calibrate_cost(supernet['model'], 'flops', (32, 32))
    assert isinstance(cost, ResourceCost)
    cost.const += sum(c * cost.hidden_dims[k] for k, c in cost.hidden_coef.items())
    cost.hidden_coef = {k: 0. for k in cost.hidden_coef}
    cost.coef = {n: c + cost.pair.get(n, 0.) * cost.hidden_dims[cost.pair_hidden[n]]
                 if n in cost.pair else c for n, c in cost.coef.items()}
    cost.pair, cost.pair_hidden = {}, {}
    res = export_subnet(supernet['config'], supernet['ckpt'], str(tmp_path / 'out'),
                        target=('flops', 0.7), cost=cost, verify=False)
    assert all(h.kept == h.dim for h in res.spec.hidden)
    assert res.budget['measured']['flops']['ratio'] == pytest.approx(0.7, abs=0.01)


def test_measure_times_pruned_against_baseline_with_an_injected_timer(supernet, tmp_path):
    """measure=True times the exported model against the baseline network interleaved (here a
    synthetic meter: milliseconds = parameters / 1e6) and records medians and their ratio in
    the result and in subnet.json."""
    from mmdcs.analysis.complexity import count_params
    from mmdcs.apis.export import export_subnet
    calls = []

    def meter(fn, module):
        calls.append(module)
        return count_params(module) / 1e9  # seconds per call

    out = str(tmp_path / 'out')
    res = export_subnet(supernet['config'], supernet['ckpt'], out, target=('params', 0.75),
                        measure=True, measure_options=dict(meter=meter, repeats=5))
    # 5 interleaved rounds of the baseline and the pruned network, after 3 untimed calls
    params = sorted({count_params(m) for m in calls})
    assert len(calls) == 2 * 5 and len(params) == 2
    # backbones are timed, as a latency table times them: the baseline's and the pruned one's
    assert {type(m).__name__ for m in calls} == {'ViT'}
    assert params[0] == res.rows[1][1]
    assert res.latency['ratio'] == pytest.approx(params[0] / params[1])
    assert res.latency['ratio'] < 1
    t = res.latency
    assert (t['rounds'], t['threads'], t['batch'], t['runtime']['name']) == (5, 1, 1, 'torch')
    with open(osp.join(out, 'subnet.json')) as f:
        saved = json.load(f)['meta']['budget']['measured']['latency']
    assert saved['ratio'] == pytest.approx(res.latency['ratio'])
    assert any('latency, measured' in line for line in res.lines)


def test_a_third_resource_registered_by_a_test_is_exported_to(supernet, tmp_path, monkeypatch,
                                                              capsys):
    """A resource is one builder and one register_resource call: 'memory' (the bytes of the
    weights in fp32, an exact count) registered here is a target of the export API and of the
    tool (--target-memory), ranked, counted on the built model, checked and recorded like
    FLOPs and parameters, with nothing else told about it."""
    import dataclasses

    from mmdcs.analysis.complexity import calibrate_cost, count_params
    from mmdcs.apis.export import export_subnet
    from mmdcs.selection import budget as budget_mod

    def memory(model, input_size=None):
        c = calibrate_cost(model, 'params', input_size)
        return dataclasses.replace(
            c, resource='memory', baseline=4 * c.baseline, const=4 * c.const,
            coef={k: 4 * v for k, v in c.coef.items()},
            pair={k: 4 * v for k, v in c.pair.items()},
            hidden_coef={k: 4 * v for k, v in c.hidden_coef.items()},
            head_coef={k: 4 * v for k, v in c.head_coef.items()},
            counter=lambda m: 4 * count_params(m))

    monkeypatch.setattr(budget_mod, '_RESOURCES', dict(budget_mod._RESOURCES))
    monkeypatch.setattr(budget_mod, '_COUNTED', list(budget_mod._COUNTED))
    budget_mod.register_resource('memory', memory, help='bytes of the fp32 weights')
    res = export_subnet(supernet['config'], supernet['ckpt'], str(tmp_path / 'api'),
                        target=('memory', 0.7), verify=False)
    b = res.budget
    assert b['resource'] == 'memory' and abs(b['achieved_ratio'] - 0.7) <= 0.01
    # counted on the built model beside the exact counts every export reports
    assert set(b['measured']) == {'flops', 'params', 'memory'}
    assert b['measured']['memory']['pruned'] == 4 * b['measured']['params']['pruned']
    assert b['measured']['memory']['ratio'] == pytest.approx(b['achieved_ratio'], rel=1e-9)
    assert any('budget (alpha): memory target 0.7' in line for line in res.lines)
    # the tool offers it: --target-memory, the same export
    out = str(tmp_path / 'tool')
    tool = load_tool('tools/export_subnet.py')
    tool.main([supernet['config'], supernet['ckpt'], '--out', out, '--target-memory', '0.7',
               '--no-verify'])
    with open(osp.join(out, 'subnet.json')) as f:
        spec = json.load(f)
    assert spec['meta']['budget']['resource'] == 'memory'
    assert [blk['kept'] for blk in spec['blocks']] == [blk.kept for blk in res.spec.blocks]
    capsys.readouterr()
    with pytest.raises(SystemExit):
        tool.parse_args(['--help'])
    assert 'bytes of the fp32 weights' in ' '.join(capsys.readouterr().out.split())


def test_the_export_builds_the_model_as_the_runner_does(tmp_path, monkeypatch):
    """A config's top-level data_preprocessor (Fashion-MNIST's: one grey channel broadcast to
    three by a three-entry mean and std) goes into the model the export builds, as mmengine's
    Runner puts it there: without it a data-driven scorer (Taylor) fed one-channel images to a
    three-channel patch embedding."""
    import mmdcs.apis.export as export
    from mmdcs.apis.subnet_io import load_task_config, runner_model_cfg
    from _tools import ROOT
    config = osp.join(ROOT, 'configs/demo/deit-tiny_fashion-cls.py')
    cfg, _ = load_task_config(config)
    assert runner_model_cfg(cfg)['data_preprocessor']['mean'] == cfg.data_preprocessor['mean']
    seen = []

    def fake_build(model_cfg, scope):
        seen.append(model_cfg)
        raise RuntimeError('built')
    monkeypatch.setattr(export, 'build_model', fake_build)
    ckpt = tmp_path / 'baseline.pth'
    ckpt.write_bytes(b'')
    with pytest.raises(RuntimeError, match='built'):
        export.export_subnet(config, str(ckpt), str(tmp_path / 'out'), method='taylor',
                             target=('flops', 0.7), batches=[])
    assert len(seen) == 1 and len(seen[0]['data_preprocessor']['mean']) == 3
