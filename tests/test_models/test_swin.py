"""Swin family: timm equivalence (224 and a non-square size), official-checkpoint conversion,
supernet = baseline, pruned = supernet, padded windows = mmdet's, dense outputs, cost terms,
registries, bad input."""
import functools
import os.path as osp
import re

import pytest
import torch

from mmdcs.models.backbones.base import count_params
from mmdcs.models.backbones.swin import (TIMM_MODELS, Swin, SwinBlock, convert_official_swin,
                                         convert_timm, shifted_window_mask)
from mmdcs.selection import (SubnetError, SubnetSpec, arch_parameters, prunable_modules,
                             prune_state_dict)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
ARCHS = list(TIMM_MODELS)
DIMS = {'swin-t': 768, 'swin-s': 768, 'swin-b': 1024}


@functools.lru_cache(maxsize=None)
def _timm_model(arch):
    timm = pytest.importorskip('timm')
    torch.manual_seed(0)
    return timm.create_model(TIMM_MODELS[arch], pretrained=False).eval()


@functools.lru_cache(maxsize=None)
def _converted(arch):
    return convert_timm(_timm_model(arch).state_dict(), arch)


def _backbone_state(arch):
    return {k[len('backbone.'):]: v for k, v in _converted(arch).items()
            if k.startswith('backbone.')}


def _classifier(arch, **backbone):
    from mmengine.config import Config
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS
    cfg = Config.fromfile(osp.join(ROOT, f'configs/_base_/models/swin_{arch}.py'))
    cfg.model.backbone.update(backbone)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(cfg.model)


def _swin_t(variant='baseline', **kwargs):
    """A Swin-T backbone with the converted timm weights (the norms of stages 0..2, which a
    classification checkpoint does not have, keep the same init: torch.manual_seed)."""
    torch.manual_seed(0)
    m = Swin('swin-t', variant, **kwargs)
    missing, unexpected = m.load_converted(_backbone_state('swin-t'), strict=False)
    assert not unexpected and all(re.fullmatch(r'norm[012]\.(weight|bias)', k) for k in missing)
    return m.eval()


# ------------------------------------------------------------------ 1-2: timm equivalence
@pytest.mark.parametrize('arch', ARCHS)
def test_baseline_parameter_count_equals_timm(arch):
    d = DIMS[arch]
    ours = count_params(Swin(arch, 'baseline')) + d * 1000 + 1000  # + LinearClsHead
    assert ours == count_params(_timm_model(arch))


@pytest.mark.parametrize('arch', ['swin-t', 'swin-b'])
def test_converted_classifier_gives_timm_logits(arch):
    timm_model = _timm_model(arch)
    clf = _classifier(arch).eval()
    clf.load_state_dict(_converted(arch), strict=True)
    torch.manual_seed(1)
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        ref = timm_model(x)
        out = clf(x, mode='tensor')
    assert out.shape == ref.shape == (1, 1000)
    assert torch.allclose(out, ref, atol=1e-4), (out - ref).abs().max()


def test_non_square_size_matches_timm_built_for_it():
    """timm built for 224×448 (same weights): the last stage (7×14) has window (7, 7) and a shift
    along W only; ours picks the same windows from the input size."""
    import timm
    ref_model = timm.create_model(TIMM_MODELS['swin-t'], pretrained=False,
                                  img_size=(224, 448)).eval()
    ref_model.load_state_dict(_timm_model('swin-t').state_dict())
    assert ref_model.layers[3].blocks[1].shift_size == (0, 3)
    clf = _classifier('swin-t').eval()
    clf.load_state_dict(_converted('swin-t'))
    torch.manual_seed(2)
    x = torch.randn(1, 3, 224, 448)
    with torch.no_grad():
        out, ref = clf(x, mode='tensor'), ref_model(x)
    assert torch.allclose(out, ref, atol=1e-4), (out - ref).abs().max()


def test_official_checkpoint_layout_converts_like_timm():
    """The Microsoft layout, made from timm's: PatchMerging at the end of the previous stage,
    ``head.*``, and the persistent buffers (dropped by the converter)."""
    official = {}
    for k, v in _timm_model('swin-t').state_dict().items():
        k = re.sub(r'^layers\.(\d+)\.downsample',
                   lambda m: f'layers.{int(m.group(1)) - 1}.downsample', k)
        official[k.replace('head.fc.', 'head.')] = v
        if k.endswith('attn.relative_position_bias_table'):
            official[k.replace('bias_table', 'index')] = torch.zeros(49, 49, dtype=torch.long)
            official[k.replace('attn.relative_position_bias_table', 'attn_mask')] = \
                torch.zeros(4, 49, 49)
    assert 'layers.0.downsample.reduction.weight' in official
    out = convert_official_swin({'model': official}, 'swin-t')
    ref = _converted('swin-t')
    assert out.keys() == ref.keys()
    assert all(torch.equal(out[k], ref[k]) for k in ref)


def test_convert_refuses_another_arch():
    with pytest.raises(ValueError, match='embed dims 96'):
        convert_timm(_timm_model('swin-t').state_dict(), 'swin-b')
    with pytest.raises(ValueError, match='stage 2'):
        convert_timm(_timm_model('swin-t').state_dict(), 'swin-s')
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
    assert torch.allclose(out, expected, atol=1e-5), (out - expected).abs().max()


def test_small_map_windows_and_mask_cache():
    block = SwinBlock(32, 2, shift=True)
    assert block.window_and_shift(56, 56) == ((7, 7), (3, 3))
    assert block.window_and_shift(7, 7) == ((7, 7), (0, 0))
    assert block.window_and_shift(4, 10) == ((4, 7), (0, 3))
    block.eval()
    with torch.no_grad():
        block(torch.randn(1, 10, 13, 32))
        block(torch.randn(1, 10, 13, 32))
    assert len(block._masks) == 1


# ------------------------------------------------------------------ 3: supernet = baseline
def test_dcs_and_kcr_supernets_with_open_gates_equal_baseline():
    torch.manual_seed(3)
    x = torch.randn(1, 3, 160, 192)  # stage maps 40×48 .. 5×6: padding and small maps
    with torch.no_grad():
        ref = _swin_t('baseline', out_indices=(0, 1, 2, 3))(x)
        for variant in ('dcs', 'kcr'):
            m = _swin_t(variant, out_indices=(0, 1, 2, 3))
            assert m.is_supernet
            out = m(x)
            assert all(torch.allclose(o, r, atol=1e-5) for o, r in zip(out, ref)), variant


def test_converted_checkpoint_loads_through_init_cfg(tmp_path):
    """What the det/seg configs say: a converted classifier checkpoint, ``Pretrained`` with
    ``prefix='backbone.'``, initialises a KCR supernet (selection params keep their init)."""
    path = tmp_path / 'swin-t_timm.pth'
    torch.save({'state_dict': _converted('swin-t')}, str(path))
    m = Swin('swin-t', 'kcr', out_indices=(0, 1, 2, 3),
             init_cfg=dict(type='Pretrained', checkpoint=str(path), prefix='backbone.'))
    m.init_weights()
    ref = _backbone_state('swin-t')
    state = m.state_dict()
    assert all(torch.equal(state[k], v) for k, v in ref.items())
    assert (m.layers[0].blocks[0].mlp.select.alpha > 0).all()


def test_load_converted_reports_foreign_keys():
    state = dict(_backbone_state('swin-t'))
    state['layers.0.blocks.0.extra'] = torch.zeros(1)
    with pytest.raises(KeyError, match='extra'):
        Swin('swin-t', 'kcr').load_converted(state)


# ------------------------------------------------------------------ 4: subnet = supernet
def _randomize(model, seed, alpha_shift=0.):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in arch_parameters(model):
            p.copy_(torch.randn(p.shape, generator=g) + alpha_shift)
        for name, p in model.named_parameters():
            if '.qk_select.theta.' in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)


def test_random_gate_subnet_equals_supernet(tmp_path):
    sup = _swin_t('dcs', out_indices=(0, 1, 2, 3))
    _randomize(sup, 0)
    spec = sup.export_subnet(note='test')
    path = tmp_path / 'subnet.json'
    spec.save(str(path))
    sub = Swin('swin-t', subnet=str(path), out_indices=(0, 1, 2, 3)).eval()
    assert sub.variant == 'dcs' and not sub.is_supernet
    state = prune_state_dict(sup.state_dict(), spec,
                             lambda: Swin('swin-t', 'dcs', out_indices=(0, 1, 2, 3)))
    sub.load_state_dict(state, strict=True)
    torch.manual_seed(4)
    x = torch.randn(1, 3, 96, 120)
    with torch.no_grad():
        for o, r in zip(sub(x), sup(x)):
            assert torch.allclose(o, r, atol=1e-4), (o - r).abs().max()
    # the Q/K masks are really partial, so the test sees the per-window masking
    theta = sup.layers[0].blocks[0].attn.qk_select.theta
    assert 0 < (theta(torch.randn(10, 96)) > 0).float().mean() < 1


def _flops(model, size=64):
    from mmengine.analysis import get_model_complexity_info
    x = torch.randn(1, 3, size, size)
    return get_model_complexity_info(model, inputs=(x, ), show_table=False,
                                     show_arch=False)['flops']


def test_params_and_flops_drop_with_kept_channels():
    """Two subnets (≈ 31% and 69% kept) against the supernet; the FLOPs saved are exactly the
    cost model's flops_per_channel × dropped channels (cost terms at the same size, 64)."""
    sup = Swin('swin-t', 'kcr', img_size=64).eval()
    full_params, full_flops = count_params(Swin('swin-t', 'baseline')), _flops(sup)
    kept, params, flops = [], [], []
    for shift in (-0.5, 0.5):
        _randomize(sup, 1, shift)
        spec = sup.export_subnet()
        sub = Swin('swin-t', subnet=spec, img_size=64).eval()
        kept.append(spec.kept_ratio)
        params.append(count_params(sub))
        flops.append(_flops(sub))
        predicted = sum(t.flops_per_channel * (t.selector.dim - t.selector.keep_indices().numel())
                        for t in sup.cost_terms())
        assert full_flops - flops[-1] == pytest.approx(predicted, rel=1e-6)
    assert 0 < kept[0] < kept[1] < 1
    assert params[0] < params[1] < full_params
    assert flops[0] < flops[1] < full_flops


# ------------------------------------------------------------------ 5: dense outputs
@pytest.mark.parametrize('pad_small_map', [False, True])
def test_out_indices_feature_maps_at_another_size(pad_small_map):
    m = Swin('swin-t', 'kcr', out_indices=(0, 1, 2, 3), pad_small_map=pad_small_map).eval()
    assert [n for n, _ in m.named_children() if n.startswith('norm')] == \
        ['norm0', 'norm1', 'norm2', 'norm3']
    with torch.no_grad():
        outs = m(torch.randn(2, 3, 100, 138))  # patch padding, odd merges, padded windows
    assert [tuple(o.shape) for o in outs] == [(2, 96, 25, 35), (2, 192, 13, 18),
                                              (2, 384, 7, 9), (2, 768, 4, 5)]
    m2 = Swin('swin-t', out_indices=(1, -1))
    assert m2.out_indices == (1, 3) and not hasattr(m2, 'norm0')


def test_training_step_reaches_alpha_theta_and_frozen_stages():
    torch.manual_seed(5)
    m = Swin('swin-t', 'dcs', out_indices=(2, 3), drop_path_rate=0.2, frozen_stages=1).train()
    assert not m.patch_embed.training and not m.layers[0].training and m.layers[1].training
    assert not any(p.requires_grad for p in m.layers[0].parameters())
    out = m(torch.randn(2, 3, 64, 64))
    sum(o.pow(2).mean() for o in out).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0
               for p in arch_parameters(m) if p.requires_grad)
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


# ------------------------------------------------------------------ 6: registries
@pytest.mark.parametrize('scope', ['mmdet', 'mmseg', 'mmpretrain'])
def test_registered_in_downstream_scopes(scope):
    import importlib
    from mmengine.registry import DefaultScope
    registry = importlib.import_module(f'{scope}.registry').MODELS
    with DefaultScope.overwrite_default_scope(scope):
        m = registry.build(dict(type='mmdcs.Swin', arch='swin-t', variant='kcr',
                                out_indices=(0, 1, 2, 3)))
    assert isinstance(m, Swin) and m.is_supernet


# ------------------------------------------------------------------ 7: bad input
def test_unknown_arch_and_variant_list_valid_ones():
    with pytest.raises(ValueError, match='swin-t, swin-s, swin-b'):
        Swin('swin-x')
    with pytest.raises(ValueError, match='baseline'):
        Swin('swin-t', 'dcs2')
    with pytest.raises(ValueError, match='out_indices 4'):
        Swin('swin-t', out_indices=(4, ))


@functools.lru_cache(maxsize=None)
def _spec_dict():
    m = Swin('swin-t', 'kcr')
    _randomize(m, 2)
    return m.export_subnet().to_dict()


@pytest.mark.parametrize('mutate, message', [
    (lambda d: d.update(family='vit'), "'vit' family"),
    (lambda d: d.update(arch='swin-b'), "arch 'swin-b'"),
    (lambda d: d['blocks'].pop(), 'missing in the subnet: layers.3.blocks.1.mlp'),
    (lambda d: d['blocks'][3].update(keep=[0, 192], kept=2),
     'block layers.1.blocks.1.mlp: channel index 192'),
    (lambda d: d['blocks'][0].update(keep=[], kept=0), 'block layers.0.blocks.0.mlp: D̃ = 0'),
    (lambda d: d['blocks'][5].update(dim=96), 'block layers.2.blocks.1.mlp: the subnet says D'),
])
def test_subnet_that_does_not_fit_is_refused(mutate, message):
    import copy
    d = copy.deepcopy(_spec_dict())
    mutate(d)
    with pytest.raises(SubnetError, match=message):
        Swin('swin-t', subnet=d)


def test_subnet_of_swin_s_refused_by_swin_t_depth():
    m = Swin('swin-s', 'kcr')
    spec = m.export_subnet().to_dict()
    spec['arch'] = 'swin-t'
    with pytest.raises(SubnetError, match='layers.2.blocks.6.mlp'):
        Swin('swin-t', subnet=spec)
    with pytest.raises(SubnetError):
        Swin('swin-t', 'baseline', subnet=SubnetSpec.from_dict(_spec_dict()))
