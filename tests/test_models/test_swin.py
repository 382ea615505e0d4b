"""Swin family: what is particular to it (the family contract, timm equivalence included, is
tests/test_models/test_backbone_contract.py): official-checkpoint conversion, conversion errors,
shifted windows, padded windows = mmdet's, converted checkpoints through init_cfg, exact FLOPs of
subnets, per-output norms, gradients, cost terms, subnets of another depth."""
import re

import pytest
import torch

from _backbones import backbone_state, converted, flops, randn_input, random_gates_, timm_model
from mmdcs.models.backbones.base import count_params
from mmdcs.models.backbones.swin import (Swin, SwinBlock, convert_official_swin, convert_timm,
                                         shifted_window_mask, window_order,
                                         window_partition)
from mmdcs.selection import SubnetError, arch_parameters, prunable_modules
from _tools import assert_close_scaled  # noqa: E402 (tests/ is on sys.path)


# ------------------------------------------------------------------ conversion
def test_official_checkpoint_layout_converts_like_timm():
    """The Microsoft layout, made from timm's: PatchMerging at the end of the previous stage,
    ``head.*``, and the persistent buffers (dropped by the converter)."""
    official = {}
    for k, v in timm_model('swin-t').state_dict().items():
        k = re.sub(r'^layers\.(\d+)\.downsample',
                   lambda m: f'layers.{int(m.group(1)) - 1}.downsample', k)
        official[k.replace('head.fc.', 'head.')] = v
        if k.endswith('attn.relative_position_bias_table'):
            official[k.replace('bias_table', 'index')] = torch.zeros(49, 49, dtype=torch.long)
            official[k.replace('attn.relative_position_bias_table', 'attn_mask')] = \
                torch.zeros(4, 49, 49)
    assert 'layers.0.downsample.reduction.weight' in official
    out = convert_official_swin({'model': official}, 'swin-t')
    ref = converted('swin-t')
    assert out.keys() == ref.keys()
    assert all(torch.equal(out[k], ref[k]) for k in ref)


def test_convert_refuses_another_arch():
    with pytest.raises(ValueError, match='embed dims 96'):
        convert_timm(timm_model('swin-t').state_dict(), 'swin-b')
    with pytest.raises(ValueError, match='stage 2'):
        convert_timm(timm_model('swin-t').state_dict(), 'swin-s')
    with pytest.raises(ValueError, match='valid: swin-t'):
        convert_timm({}, 'swin-x')


# ------------------------------------------------------------------ windows and padding
def test_shifted_window_mask_regions():
    mask = shifted_window_mask((14, 14), (7, 7), (3, 3))
    assert mask.shape == (4, 49, 49)
    assert (mask[0] == 0).all()  # the top-left window is one region
    assert set(mask.unique().tolist()) == {0., -100.}
    assert (shifted_window_mask((7, 14), (7, 7), (0, 3))[0] == 0).all()


def _mmdet_block(ours: SwinBlock):
    """mmdet's SwinBlock with the weights of ours (same timm-style relative position index)."""
    from mmdet.models.backbones.swin import SwinBlock as MMDetBlock
    dim = ours.norm1.normalized_shape[0]
    ref = MMDetBlock(dim, ours.attn.num_heads, ours.mlp.hidden_features,
                     window_size=ours.window_size, shift=ours.shift_size > 0).eval()
    a, w = ours.attn, ref.attn.w_msa
    mapping = {
        ref.norm1: ours.norm1, ref.norm2: ours.norm2, w.qkv: a.qkv, w.proj: a.proj,
        ref.ffn.layers[0][0]: ours.mlp.fc1, ref.ffn.layers[1]: ours.mlp.fc2}
    with torch.no_grad():
        for dst, src in mapping.items():
            dst.weight.copy_(src.weight)
            dst.bias.copy_(src.bias)
        w.relative_position_bias_table.copy_(a.relative_position_bias_table)
        assert torch.equal(w.relative_position_index, a.relative_position_index)
    return ref


@pytest.mark.parametrize('shift', [False, True])
@pytest.mark.parametrize('hw', [(10, 13), (7, 7), (5, 9)])
def test_padded_windows_equal_mmdet_block(shift, hw):
    """With ``pad_small_map`` (always 7×7 windows, zero padding, shift) a block equals mmdet's."""
    torch.manual_seed(0)
    ours = SwinBlock(32, 2, shift=shift, pad_small_map=True).eval()
    ref = _mmdet_block(ours)
    H, W = hw
    x = torch.randn(2, H, W, 32)
    with torch.no_grad():
        out = ours(x)
        expected = ref(x.flatten(1, 2), (H, W)).view(2, H, W, 32)
    assert_close_scaled(out, expected, 1e-5)


def test_small_map_windows_and_mask_cache():
    block = SwinBlock(32, 2, shift=True)
    assert block.window_and_shift(56, 56) == ((7, 7), (3, 3))
    assert block.window_and_shift(7, 7) == ((7, 7), (0, 0))
    assert block.window_and_shift(4, 10) == ((4, 7), (0, 3))
    block.eval()
    with torch.no_grad():
        block(torch.randn(1, 10, 13, 32))
        block(torch.randn(1, 10, 13, 32))
    # built once for the two calls: the shifted-window mask and the window order
    assert sorted(k[0] == 'order' for k in block._masks) == [False, True]


def test_window_order_is_roll_then_partition():
    """One gather with window_order = torch.roll + window_partition; its inverse undoes both
    (shifted or not, square or not)."""
    for size, window, shift in (((14, 21), (7, 7), (3, 3)), ((8, 8), (4, 4), (0, 0)),
                                ((7, 14), (7, 7), (0, 3))):
        x = torch.randn(2, *size, 5)
        order, inverse = window_order(size, window, shift)
        ref = window_partition(torch.roll(x, (-shift[0], -shift[1]), (1, 2)), window)
        got = x.reshape(2, -1, 5).index_select(1, order).view(ref.shape)
        assert torch.equal(got, ref)
        back = got.reshape(2, -1, 5).index_select(1, inverse).view(x.shape)
        assert torch.equal(back, x)


# ------------------------------------------------------------------ converted checkpoints
def test_converted_checkpoint_loads_through_init_cfg(tmp_path):
    """What the det/seg configs say: a converted classifier checkpoint, ``Pretrained`` with
    ``prefix='backbone.'``, initialises a KCR supernet (selection params keep their init)."""
    path = tmp_path / 'swin-t_timm.pth'
    torch.save({'state_dict': converted('swin-t')}, str(path))
    m = Swin('swin-t', 'kcr', out_indices=(0, 1, 2, 3),
             init_cfg=dict(type='Pretrained', checkpoint=str(path), prefix='backbone.'))
    m.init_weights()
    ref = backbone_state('swin-t')
    state = m.state_dict()
    assert all(torch.equal(state[k], v) for k, v in ref.items())
    assert (m.layers[0].blocks[0].mlp.select.alpha > 0).all()


def test_load_converted_reports_foreign_keys():
    state = dict(backbone_state('swin-t'))
    state['layers.0.blocks.0.extra'] = torch.zeros(1)
    with pytest.raises(KeyError, match='extra'):
        Swin('swin-t', 'kcr').load_converted(state)


# ------------------------------------------------------------------ subnets: exact FLOPs
def test_params_and_flops_drop_with_kept_channels():
    """Two subnets (≈ 31% and 69% kept) against the supernet; the FLOPs saved are exactly the
    cost model's flops_per_channel × dropped channels (cost terms at the same size, 64)."""
    x = randn_input(1, 3, 64, 64)
    sup = Swin('swin-t', 'kcr', img_size=64).eval()
    full_params, full_flops = count_params(Swin('swin-t', 'baseline')), flops(sup, x)
    kept, params, n_flops = [], [], []
    for shift in (-0.5, 0.5):
        random_gates_(sup, seed=1, alpha_shift=shift)
        spec = sup.export_subnet()
        sub = Swin('swin-t', subnet=spec, img_size=64).eval()
        kept.append(spec.kept_ratio)
        params.append(count_params(sub))
        n_flops.append(flops(sub, x))
        predicted = sum(t.flops_per_channel * (t.selector.dim - t.selector.keep_indices().numel())
                        for t in sup.cost_terms())
        assert full_flops - n_flops[-1] == pytest.approx(predicted, rel=1e-6)
    assert 0 < kept[0] < kept[1] < 1
    assert params[0] < params[1] < full_params
    assert n_flops[0] < n_flops[1] < full_flops


# ------------------------------------------------------------------ dense outputs
def test_norm_per_output_and_padded_small_maps():
    """One LayerNorm per requested output (``norm{i}``); with ``pad_small_map`` the feature maps
    are those of the default windows' shapes (every map and index: the contract suite)."""
    m = Swin('swin-t', 'kcr', out_indices=(0, 1, 2, 3), pad_small_map=True).eval()
    assert [n for n, _ in m.named_children() if n.startswith('norm')] == \
        ['norm0', 'norm1', 'norm2', 'norm3']
    with torch.no_grad():
        outs = m(torch.randn(2, 3, 100, 138))  # patch padding, odd merges, padded windows
    assert [tuple(o.shape) for o in outs] == [(2, 96, 25, 35), (2, 192, 13, 18),
                                              (2, 384, 7, 9), (2, 768, 4, 5)]
    m2 = Swin('swin-t', out_indices=(1, -1))
    assert m2.out_indices == (1, 3) and not hasattr(m2, 'norm0')


def test_training_step_reaches_alpha_and_theta():
    torch.manual_seed(5)
    m = Swin('swin-t', 'dcs', out_indices=(2, 3), drop_path_rate=0.2).train()
    out = m(torch.randn(2, 3, 64, 64))
    sum(o.pow(2).mean() for o in out).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in arch_parameters(m))
    assert m.layers[3].blocks[1].attn.qk_select.theta.weight.grad.abs().sum() > 0


# ------------------------------------------------------------------ cost terms
def test_cost_terms_follow_stage_tokens():
    m = Swin('swin-t', 'kcr')
    terms = m.cost_terms()
    assert len(terms) == sum(m.arch_settings['depths']) == len(prunable_modules(m))
    assert m.stage_tokens() == [56 * 56, 28 * 28, 14 * 14, 7 * 7]
    assert [t.mlp_layers for t in terms] == [2] * len(terms)
    assert terms[0].flops_per_channel == 2 * 56 * 56 * 384
    assert terms[-1].flops_per_channel == 2 * 7 * 7 * 3072
    assert Swin('swin-t', 'dcs-arch1').cost_terms() == []
    assert m.cost_model('paper').expected().item() > 0


# ------------------------------------------------------------------ bad input
def test_subnet_of_swin_s_refused_by_swin_t_depth():
    m = Swin('swin-s', 'kcr')
    spec = m.export_subnet().to_dict()
    spec['arch'] = 'swin-t'
    with pytest.raises(SubnetError, match='layers.2.blocks.6.mlp'):
        Swin('swin-t', subnet=spec)
