"""mmdcs.analysis.complexity and tools/analysis/complexity.py: parameter and FLOP counts of
baselines, supernets and subnets (small models at reduced input sizes, to stay fast)."""
import importlib.util
import os.path as osp

import pytest
import torch

from mmdcs.analysis import (PAPER_NUMBERS, complexity_table, count_flops, count_params,
                            format_table, random_subnet, set_random_keep_)
from mmdcs.models.backbones.vit import ViT
from mmdcs.selection import DCSAttention, SubnetSpec

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _tool():
    path = osp.join(ROOT, 'tools', 'analysis', 'complexity.py')
    spec = importlib.util.spec_from_file_location('mmdcs_tool_complexity', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_attention_products_are_counted_as_the_explicit_matmuls():
    """The SDPA handle counts Q·Kᵀ and W·V: the fused path counts what the explicit one does,
    and mmengine's own count lacks exactly those products."""
    torch.manual_seed(0)
    attn = DCSAttention(32, num_heads=4, qk_select='shared').eval()
    B, N = 2, 10
    x = torch.randn(B, N, 32)
    fused = count_flops(attn, inputs=x)
    raw = count_flops(attn, inputs=x, count_attention=False)
    attn.record_attn = True
    explicit = count_flops(attn, inputs=x, count_attention=False)
    assert fused - raw == B * 4 * N * N * (8 + 8)
    assert explicit == fused


def test_random_subnet_keeps_the_stated_ratio_seeded():
    spec = random_subnet(ViT, 'deit-tiny', 'kcr', 0.7, seed=1, img_size=32)
    assert isinstance(spec, SubnetSpec) and spec.family == 'vit' and spec.variant == 'kcr'
    assert len(spec.blocks) == 12
    assert all(b.dim == 192 and b.kept == round(0.7 * 192) for b in spec.blocks)
    again = random_subnet('mmdcs.ViT', 'deit-tiny', 'kcr', 0.7, seed=1, img_size=32)
    other = random_subnet('vit', 'deit-tiny', 'kcr', 0.7, seed=2, img_size=32)
    assert again.keep_map() == spec.keep_map()
    assert other.keep_map() != spec.keep_map()
    tiny = random_subnet(ViT, 'deit-tiny', 'dcs', 1e-4, img_size=32)
    assert all(b.kept == 1 for b in tiny.blocks)  # a block keeps at least one channel
    with pytest.raises(ValueError, match='keep_ratio'):
        random_subnet(ViT, 'deit-tiny', 'kcr', 0., img_size=32)
    with pytest.raises(ValueError, match='no architecture parameters'):
        set_random_keep_(ViT('deit-tiny', 'baseline', img_size=32), 0.5)


def test_flops_drop_exactly_by_the_cost_model():
    """Backbone FLOPs of a KCR subnet = supernet FLOPs − Σ flops_per_channel·(D − D̃): the
    counter and the exact cost model (method.md §3, mode 'flops') agree."""
    size = 64
    sup = ViT('deit-tiny', 'kcr', img_size=size).eval()
    full = count_flops(sup, size)
    assert full == count_flops(ViT('deit-tiny', 'baseline', img_size=size), size)
    set_random_keep_(sup, 0.6, seed=3)
    spec = sup.export_subnet()
    per_channel = [t.flops_per_channel for t in sup.cost_terms()]
    sub = ViT('deit-tiny', subnet=spec, img_size=size).eval()
    saved = sum(p * (b.dim - b.kept) for p, b in zip(per_channel, spec.blocks))
    assert count_flops(sub, size) == full - saved
    assert count_params(sub) < count_params(sup)


def test_table_small_subset():
    rows = complexity_table(['deit-tiny', 'mobilevit-xs'], ratios=(0.9, 0.5),
                            input_sizes={'deit-tiny': 64, 'mobilevit-xs': 64})
    assert [(r['model'], r['role']) for r in rows] == [
        (m, role) for m in ('deit-tiny', 'mobilevit-xs')
        for role in ('baseline', 'supernet', 'subnet', 'subnet')]
    by = {}
    for r in rows:
        by.setdefault(r['model'], []).append(r)
    # each paper's variant: KCR for ViT, DCS for MobileViT
    assert {r['variant'] for r in by['deit-tiny'][1:]} == {'kcr'}
    assert {r['variant'] for r in by['mobilevit-xs'][1:]} == {'dcs'}
    for model, (base, sup, r90, r50) in by.items():
        assert base['input'] == '64x64'
        assert sup['flops_g'] > r90['flops_g'] > r50['flops_g']
        assert sup['params_m'] > r90['params_m'] > r50['params_m']
        assert r90['kept_ratio'] == pytest.approx(0.9, abs=0.01)
        assert r50['kept_ratio'] == pytest.approx(0.5, abs=0.01)
        # whole classifiers: the head is counted on top of the backbone
        assert base['params_m'] > base['backbone_params_m']
    # KCR adds no FLOPs (α only); DCS adds Linear_θ (the Q/K selector) in every attention
    t_base, t_sup = by['deit-tiny'][:2]
    assert t_sup['flops_g'] == t_base['flops_g']
    m_base, m_sup = by['mobilevit-xs'][:2]
    assert m_sup['flops_g'] > m_base['flops_g'] and m_sup['params_m'] > m_base['params_m']
    # the paper's numbers beside the baseline and the compact model
    assert m_base['paper_params_m'] == PAPER_NUMBERS[('mobilevit-xs', 'baseline')]['params']
    assert by['mobilevit-xs'][2]['paper_flops_g'] == PAPER_NUMBERS[('mobilevit-xs',
                                                                     'dcs')]['flops']
    assert m_sup['paper_params_m'] is None and t_base['paper_params_m'] is None
    text = format_table(rows)
    assert text.startswith('| model | variant |') and text.count('\n| deit-tiny |') == 4
    assert 'FLOPs conventions differ' in text and 'Linear_θ' in text


def test_cli_table_and_config(tmp_path, capsys):
    tool = _tool()
    out = tmp_path / 'table.md'
    tool.main(['--table', '--models', 'deit-tiny', '--ratios', '0.5', '--size', '32',
               '--backbone-only', '--out', str(out)])
    printed = capsys.readouterr().out
    assert '| deit-tiny | kcr | subnet | 0.50 | 32x32 |' in printed
    assert 'FLOPs conventions differ' in out.read_text()

    # config mode: a classifier config (whole model in 'tensor' mode) at another input size
    tool.main(['configs/demo/mobilevit-xs_digits-cls.py', '--shape', '64', '96'])
    printed = capsys.readouterr().out
    assert 'input 64x96 (--shape)' in printed
    assert '| backbone MobileViT(mobilevit-xs, baseline) |' in printed
    assert "whole model ImageClassifier ('tensor' mode)" in printed

    with pytest.raises(SystemExit) as e:
        tool.main(['--table', '--models', 'vit-xxl'])
    assert e.value.code == 2
    assert "unknown arch 'vit-xxl'" in capsys.readouterr().err


def test_shape_option_of_the_tools(capsys):
    """``--shape H [W]`` of complexity / export_subnet / ofb_export: one parser, one error."""
    from mmdcs.apis.launch import UserError
    from mmdcs.apis.subnet_io import shape_arg
    assert shape_arg(None) is None and shape_arg([]) is None
    assert shape_arg([64]) == (64, 64) and shape_arg([64, 96]) == (64, 96)
    with pytest.raises(UserError, match=r'--shape takes H or H W, got \[1, 2, 3\]'):
        shape_arg([1, 2, 3])
    with pytest.raises(SystemExit) as e:
        _tool().main(['configs/demo/mobilevit-xs_digits-cls.py', '--shape', '64', '96', '32'])
    assert e.value.code == 2
    assert '--shape takes H or H W, got [64, 96, 32]' in capsys.readouterr().err
