"""mmdcs.analysis.latency and tools/analysis/latency.py: baseline vs subnet timing beside the
FLOPs ratio (a tiny DeiT at 32 px, 1 warm-up + 2 timed rounds, to stay fast)."""
import importlib.util
import json
import os.path as osp
import subprocess
import sys

import pytest
import torch

from mmdcs.analysis.complexity import random_subnet
from mmdcs.analysis.latency import (OP_GROUPS, SCALING_PARTS, build_pair, format_latency_table,
                                    format_module_scaling, format_op_groups, latency_pair,
                                    format_theta_fusion, module_scaling, num_threads,
                                    op_groups, profile_ops, theta_fusion_timing, time_models)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _tool():
    path = osp.join(ROOT, 'tools', 'analysis', 'latency.py')
    spec = importlib.util.spec_from_file_location('mmdcs_tool_latency', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope='module')
def tiny_pair():
    torch.manual_seed(0)
    return build_pair('deit-tiny', 0.5, 'kcr', input_size=32, seed=0)


def test_latency_pair_times_and_ratios(tiny_pair):
    base, sub, spec = tiny_pair
    assert spec.variant == 'kcr' and abs(spec.kept_ratio - 0.5) < 1e-9
    rows = latency_pair('deit-tiny', 0.5, input_size=32, batch_sizes=(1, 2), devices=('cpu', ),
                        threads=1, warmup=1, repeats=2, models=(base, sub))
    assert [r['batch'] for r in rows] == [1, 2]
    for r in rows:
        assert r['base_ms'] > 0 and r['sub_ms'] > 0
        assert r['latency_ratio'] > 0 and r['latency_ratio_min'] > 0
        assert 0 < r['flops_ratio'] < 1  # KCR prunes the MLPs: fewer FLOPs
        assert r['within'] == (abs(r['latency_ratio'] - r['flops_ratio']) <= r['tolerance'])
        assert r['threads'] == 1 and r['device'] == 'cpu'
    table = format_latency_table(rows)
    assert 'deit-tiny' in table and 'FLOPs ratio' in table


def test_time_models_interleaves_and_restores_threads():
    calls = []

    class Probe(torch.nn.Module):

        def __init__(self, name):
            super().__init__()
            self.name = name

        def forward(self, x):
            calls.append(self.name)
            return x

    before = torch.get_num_threads()
    out = time_models({'a': Probe('a'), 'b': Probe('b')}, torch.zeros(4, 3), warmup=1,
                      repeats=3, threads=1)
    assert torch.get_num_threads() == before
    # warm-up a b, then rounds a b / b a / a b
    assert calls == ['a', 'b', 'a', 'b', 'b', 'a', 'a', 'b']
    assert out['a']['batch'] == 4 and len(out['a']['rounds']) == 3
    assert out['a']['ms_per_image'] == pytest.approx(out['a']['median_ms'] / 4)
    with pytest.raises(ValueError):
        time_models({'a': Probe('a')}, torch.zeros(1), repeats=0)
    with pytest.raises(ValueError):
        with num_threads(0):
            pass


def test_profile_ops_groups(tiny_pair):
    base, sub, _ = tiny_pair
    x = torch.randn(1, 3, 32, 32)
    prof = profile_ops({'baseline': base, 'subnet': sub}, x, repeats=1, top=None, threads=1,
                       rounds=1)
    assert set(prof) == {'baseline', 'subnet'}
    sub_ops = {r['op'] for r in prof['subnet']}
    assert 'aten::index_select' in sub_ops  # the pruned MLP gathers its kept channels
    groups = {k: op_groups(v) for k, v in prof.items()}
    for g in groups.values():
        assert g['total'] > 0 and g['GEMM/conv'] > 0
        assert sum(v for k, v in g.items() if k != 'total') == pytest.approx(g['total'])
    # more gather / scatter ops in the subnet: counted by calls per forward, not compared by
    # time (a time comparison of two models would depend on the machine's load)
    gather = dict(OP_GROUPS)['gather/scatter']
    calls = {k: sum(r['calls'] for r in v if any(g in r['op'] for g in gather))
             for k, v in prof.items()}
    assert calls['subnet'] > calls['baseline'], calls
    assert 'gather/scatter' in format_op_groups(groups)


def test_cli_help_and_subnet_file(tmp_path, capsys):
    tool = _tool()
    with pytest.raises(SystemExit) as e:
        tool.main(['--help'])
    assert e.value.code == 0
    assert '--ratio' in capsys.readouterr().out
    spec = random_subnet('vit', 'deit-tiny', 'kcr', 0.5, seed=0, img_size=32)
    path = str(tmp_path / 'subnet.json')
    spec.save(path)
    out_json = str(tmp_path / 'rows.json')
    proc = subprocess.run(
        [sys.executable, 'tools/analysis/latency.py', '--subnet', path, '--size', '32',
         '--batch-sizes', '1', '--warmup', '1', '--repeats', '2', '--devices', 'cpu',
         '--json', out_json, '--modules'], cwd=ROOT, capture_output=True, text=True,
        timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert 'latency ratio' in proc.stdout and 'FLOPs ratio' in proc.stdout
    # a separate process: the tool sets glibc to keep freed memory and says so under the table
    if sys.platform.startswith('linux'):
        assert 'allocator: glibc keeping freed memory' in proc.stdout
    assert 'deit-tiny: time by module' in proc.stdout and '| narrowed |' in proc.stdout
    out = json.load(open(out_json))
    rows = out['rows']
    assert len(rows) == 1 and rows[0]['model'] == 'deit-tiny' and rows[0]['flops_ratio'] < 1
    assert out['profiles']['deit-tiny']['modules']['expected_ratio'] > 0


def test_cli_bad_input(capsys):
    tool = _tool()
    with pytest.raises(SystemExit) as e:
        tool.main(['--models', 'no-such-arch', '--repeats', '1'])
    assert e.value.code == 2
    assert 'unknown arch' in capsys.readouterr().err


def test_cli_peer_method_config_against_the_plain_backbone(tmp_path, capsys):
    """A DynamicViT config is timed against the plain ViT of its arch (no teacher needed)."""
    tool = _tool()
    out_json = str(tmp_path / 'rows.json')
    # --system-malloc: this test runs in the test process, whose allocator stays as it is
    rows = tool.main(['--config', osp.join(ROOT, 'configs/demo/dynamicvit-deit-tiny_digits.py'),
                      '--batch-sizes', '1', '--warmup', '1', '--repeats', '2', '--devices',
                      'cpu', '--json', out_json, '--system-malloc'])
    assert len(rows) == 1
    r = rows[0]
    assert r['model'] == 'deit-tiny' and r['variant'] == 'DynamicViT' and r['input'] == '64x64'
    assert abs(r['kept_ratio'] - 0.7) < 1e-9
    # tokens dropped at 3 stages: clearly fewer FLOPs than the plain DeiT-Tiny
    assert 0.5 < r['flops_ratio'] < 0.85
    assert '| deit-tiny | DynamicViT | 0.70 | 64x64 |' in format_latency_table(rows)
    with pytest.raises(SystemExit) as e:  # --subnet is for DCS/KCR backbones
        tool.main(['--config', osp.join(ROOT, 'configs/demo/dynamicvit-deit-tiny_digits.py'),
                   '--subnet', str(tmp_path / 'subnet.json'), '--repeats', '1'])
    assert e.value.code == 2
    assert '--subnet is for DCS/KCR backbones' in capsys.readouterr().err


def _part(report, name):
    return next(p for p in report['parts'] if p['part'] == name)


def test_module_scaling_parts_add_up(tiny_pair):
    """KCR prunes the MLPs: their linears and activations are the narrowed part (FLOPs as the
    subnet's), attention and norms are unchanged, the attention products are outside the leaf
    modules, nothing is added; the parts add up to the totals."""
    base, sub, _ = tiny_pair
    x = torch.randn(1, 3, 32, 32)
    rep = module_scaling(base, sub, x, rounds=2, threads=1)
    assert [p['part'] for p in rep['parts']] == list(SCALING_PARTS)
    nar, unc = _part(rep, 'narrowed'), _part(rep, 'unchanged')
    added, out = _part(rep, 'added'), _part(rep, 'outside modules')
    assert 0 < nar['sub_mflops'] < nar['base_mflops']
    assert unc['sub_mflops'] == pytest.approx(unc['base_mflops']) and unc['base_mflops'] > 0
    assert added['sub_ms'] == 0 and added['sub_mflops'] == 0
    assert out['base_mflops'] > 0  # the attention products, counted in the attention module
    for k in ('base', 'sub'):
        assert sum(p[f'{k}_ms'] for p in rep['parts']) == pytest.approx(rep[f'{k}_ms'])
    total_flops = sum(p['base_mflops'] for p in rep['parts']) * 1e6
    assert rep['flops_ratio'] == pytest.approx(
        sum(p['sub_mflops'] for p in rep['parts']) * 1e6 / total_flops)
    assert rep['narrowed_flops_share'] == pytest.approx(nar['base_mflops'] * 1e6 / total_flops)
    assert 0 < rep['narrowed_time_share'] < 1
    # the expected ratio: narrowed time scaled by the FLOPs, the rest as measured in the baseline
    assert rep['expected_ratio'] < 1
    text = format_module_scaling(rep, 'title')
    assert text.startswith('title') and '| outside modules |' in text and 'expected' in text


def test_module_scaling_counts_what_dcs_adds():
    """A DCS subnet keeps Linear_θ and the Q/K gates: they are the added part, with the FLOPs
    of Linear_θ."""
    torch.manual_seed(0)
    base, sub, _ = build_pair('deit-tiny', 0.5, 'dcs', input_size=32, seed=0)
    rep = module_scaling(base, sub, torch.randn(2, 3, 32, 32), rounds=1)
    added = _part(rep, 'added')
    assert added['base_ms'] == 0 and added['sub_ms'] > 0
    # Linear_θ: one D × D layer per block on every token (DeiT-Tiny at 32 px: 4 patches + cls)
    d, depth, tokens = 192, 12, 5
    assert added['sub_mflops'] * 1e6 == pytest.approx(depth * tokens * d * d, rel=0.01)


def test_build_pair_low_rank_theta(capsys):
    """--theta-rank: the random DCS subnet's Linear_θ is D→r→D, recorded in its spec; the
    budget subnet keeps more channels for the same FLOPs than at full rank."""
    full = build_pair('deit-tiny', variant='dcs', input_size=32, target_flops=0.8,
                      select_hidden=True, multiple_of=8)
    low = build_pair('deit-tiny', variant='dcs', input_size=32, target_flops=0.8,
                     select_hidden=True, multiple_of=8, theta_rank=4)
    assert low[2].meta['theta_rank'] == 4 and 'theta_rank' not in full[2].meta
    selector = low[1].blocks[0].attn.qk_select
    assert selector.theta_down.out_features == 4
    assert full[1].blocks[0].attn.qk_select.theta_down is None
    assert low[2].meta['keep_ratio'] > full[2].meta['keep_ratio']
    with pytest.raises(SystemExit) as e:
        _tool().main(['--theta-rank', '0', '--models', 'deit-tiny'])
    assert e.value.code == 2 and '--theta-rank' in capsys.readouterr().err


def test_theta_fusion_timing_covers_every_full_rank_theta(tiny_pair):
    """One row per DCS attention with a full-rank Linear_θ, at the shapes the model feeds it;
    a KCR subnet (no Linear_θ) and a low-rank θ give none."""
    torch.manual_seed(0)
    _, dcs, _ = build_pair('deit-tiny', 0.5, 'dcs', input_size=32, seed=0)
    x = torch.randn(2, 3, 32, 32)
    rows = theta_fusion_timing(dcs, x, rounds=1, number=1, threads=1)
    assert [r['name'] for r in rows] == [f'blocks.{i}.attn' for i in range(12)]
    r = rows[0]
    assert (r['tokens'], r['in_dim'], r['out_qkv'], r['out_theta']) == (2 * 5, 192, 576, 192)
    assert r['separate_us'] > 0 and r['fused_us'] > 0
    assert r['saving'] == pytest.approx(1 - r['fused_us'] / r['separate_us'])
    assert '| total |' in format_theta_fusion(rows)
    assert theta_fusion_timing(tiny_pair[1], x, rounds=1, number=1) == []
    _, low, _ = build_pair('deit-tiny', 0.5, 'dcs', input_size=32, seed=0, theta_rank=4)
    assert theta_fusion_timing(low, x, rounds=1, number=1) == []
