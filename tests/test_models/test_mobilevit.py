"""MobileViT family: timm equivalence, supernet = baseline, pruned = supernet (projection rule),
cost terms, dense outputs at other sizes, registries, bad input."""
import copy
import functools
import os.path as osp

import pytest
import torch
import torch.nn as nn

from mmdcs.models.backbones.base import count_params
from mmdcs.models.backbones.mobilevit import (TIMM_MODELS, MobileViT, MobileViTBlock,
                                              convert_timm)
from mmdcs.selection import SubnetError, SubnetSpec, prune_state_dict

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
ARCHS = list(TIMM_MODELS)
NUM_FEATURES = {'mobilevit-xs': 384, 'mobilevit-s': 640}
#: the last transformer layer of each MobileViT block (its gate also masks the projection)
LAST_LAYERS = ('stages.2.1.transformer.1.mlp', 'stages.3.1.transformer.3.mlp',
               'stages.4.1.transformer.2.mlp')


@torch.no_grad()
def _randomize_(model, seed):
    """Non-trivial weights and BN statistics (timm's init zeroes some BN weights and gives the
    transformer tiny Linear weights, which would hide mistakes)."""
    g = torch.Generator().manual_seed(seed)

    def rand(t, lo, hi):
        t.copy_(torch.rand(t.shape, generator=g) * (hi - lo) + lo)

    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            rand(m.weight, 0.5, 1.2)
            rand(m.bias, -0.1, 0.1)
            rand(m.running_mean, -0.1, 0.1)
            rand(m.running_var, 0.8, 1.5)
        elif isinstance(m, nn.LayerNorm):
            rand(m.weight, 0.5, 1.5)
            rand(m.bias, -0.1, 0.1)
        elif isinstance(m, nn.Linear):
            m.weight.copy_(torch.randn(m.weight.shape, generator=g) / m.in_features**0.5)
            rand(m.bias, -0.05, 0.05)


@functools.lru_cache(maxsize=None)
def _timm_model(arch):
    timm = pytest.importorskip('timm')
    torch.manual_seed(0)
    model = timm.create_model(TIMM_MODELS[arch], pretrained=False).eval()
    _randomize_(model, seed=1)
    return model


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
    cfg = Config.fromfile(osp.join(ROOT, f'configs/_base_/models/mobilevit_{arch}.py'))
    cfg.model.backbone.update(backbone)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(cfg.model)


def _x(*shape, seed=0):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------ 1-2: timm equivalence
@pytest.mark.parametrize('arch', ARCHS)
def test_baseline_parameter_count_equals_timm(arch):
    c = NUM_FEATURES[arch]
    ours = count_params(MobileViT(arch, 'baseline')) + c * 1000 + 1000  # + LinearClsHead
    assert ours == count_params(_timm_model(arch))
    # and exactly timm's parameter names and shapes
    timm_shapes = {k: v.shape for k, v in _timm_model(arch).state_dict().items()
                   if not k.startswith('head.')}
    assert {k: v.shape for k, v in MobileViT(arch).state_dict().items()} == timm_shapes


# 224 for S: the 7×7 map of the last MobileViT block is resized to 8×8 and back (timm's path)
@pytest.mark.parametrize('arch, size', [('mobilevit-xs', 256), ('mobilevit-s', 224)])
def test_converted_classifier_gives_timm_logits(arch, size):
    timm_model = _timm_model(arch)
    clf = _classifier(arch).eval()
    clf.load_state_dict(_converted(arch), strict=True)
    x = _x(1, 3, size, size, seed=1)
    with torch.no_grad():
        ref = timm_model(x)
        out = clf(x, mode='tensor')
    assert out.shape == ref.shape == (1, 1000)
    assert ref.std() > 0.1  # the random weights give informative logits
    assert torch.allclose(out, ref, atol=1e-4), (out - ref).abs().max()


def test_features_match_timm_at_odd_non_square_size():
    """Stage outputs equal timm's intermediates where a MobileViT map is not even (25×17)."""
    timm_model = _timm_model('mobilevit-xs')
    model = MobileViT('mobilevit-xs', out_indices=(0, 1, 2, 3, 4)).eval()
    model.load_converted(_backbone_state('mobilevit-xs'))
    x = _x(1, 3, 200, 136, seed=2)
    with torch.no_grad():
        ours = model(x)
        ref = timm_model.forward_intermediates(x, intermediates_only=True)
    assert [tuple(o.shape[1:]) for o in ours] == [
        (32, 100, 68), (48, 50, 34), (64, 25, 17), (80, 13, 9), (384, 7, 5)]
    assert len(ref) == 5  # timm's taps: the 5 stage ends, the last after final_conv
    for o, r in zip(ours, ref):
        assert o.shape == r.shape and torch.allclose(o, r, atol=1e-4), (o - r).abs().max()


def test_convert_timm_refuses_unknown_arch_and_foreign_keys():
    sd = _timm_model('mobilevit-xs').state_dict()
    with pytest.raises(ValueError, match='mobilevit-xs.*mobilevit-s'):
        convert_timm(sd, 'mobilevit-xxs')
    with pytest.raises(KeyError, match='head.norm'):
        convert_timm(dict(sd, **{'head.norm.weight': torch.ones(384)}), 'mobilevit-xs')
    with pytest.raises(ValueError, match='not a mobilevit_s'):
        convert_timm(sd, 'mobilevit-s')


# ------------------------------------------------------------------ 3: supernets = baseline
@pytest.mark.parametrize('variant, qk_mask', [('dcs', 'shared'), ('dcs', 'separate'),
                                              ('kcr', 'shared')])
def test_open_supernet_with_converted_weights_equals_baseline(variant, qk_mask):
    state = _backbone_state('mobilevit-xs')
    base = MobileViT('mobilevit-xs', 'baseline').eval()
    base.load_converted(state)
    sup = MobileViT('mobilevit-xs', variant, qk_mask=qk_mask).eval()
    missing, unexpected = sup.load_converted(state)
    assert not missing and not unexpected
    assert sup.is_supernet and not base.is_supernet
    x = _x(2, 3, 128, 96, seed=3)
    with torch.no_grad():
        assert torch.allclose(sup(x)[-1], base(x)[-1], atol=1e-5)


# ------------------------------------------------------------------ 4: pruned subnet
def _layers(model):
    return [layer for blk in model.mobilevit_blocks().values() for layer in blk.transformer]


def _random_gates_(model, alpha_shift, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in _layers(model):
            a = layer.mlp.select.alpha
            a.copy_(torch.randn(a.shape, generator=g) + alpha_shift)
            if layer.attn.qk_select is not None:
                th = layer.attn.qk_select.theta
                th.weight.copy_(torch.randn(th.weight.shape, generator=g) * 0.3)
                th.bias.copy_(torch.randn(th.bias.shape, generator=g) * 0.5)


def _flops(model, x):
    from mmengine.analysis import FlopAnalyzer
    fa = FlopAnalyzer(model, (x, ))
    fa.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    return fa.total()


def test_pruned_subnet_equals_supernet_and_shrinks(tmp_path):
    arch = 'mobilevit-xs'
    state = _backbone_state(arch)
    x256 = _x(1, 3, 256, 256, seed=4)
    base = MobileViT(arch, 'baseline').eval()
    base.load_converted(state)
    full = sum(layer.mlp.in_features for layer in _layers(base))
    sizes = [(count_params(base), _flops(base, x256), full)]
    # Linear_θ of the DCS layers (D×D per pixel), on top of the baseline; at 256: H·W per block
    hwd = [(32 * 32, 96, 2), (16 * 16, 120, 4), (8 * 8, 144, 3)]
    theta_flops = sum(hw * d * d * n for hw, d, n in hwd)
    for i, shift in enumerate((0.7, -0.3)):
        sup = MobileViT(arch, 'dcs').eval()
        sup.load_converted(state)
        _random_gates_(sup, shift, seed=10 + i)
        spec = sup.export_subnet(note='test')
        assert 0 < spec.kept_ratio < 1
        # the last layer of each block really prunes the projection input
        last = [b for b in spec.blocks if b.name in LAST_LAYERS]
        assert len(last) == 3 and all(b.kept < b.dim for b in last)
        path = str(tmp_path / f'subnet{i}.json')
        spec.save(path)
        pruned = MobileViT(arch=arch, subnet=path).eval()  # from the file alone
        assert pruned.variant == 'dcs' and not pruned.is_supernet
        pruned.load_state_dict(
            prune_state_dict(sup.state_dict(), spec, lambda: MobileViT(arch, 'dcs')))
        for b in last:
            blk = pruned.get_submodule(b.name[:-len('.transformer.1.mlp')])
            assert blk.conv_proj.conv.weight.shape[1] == b.kept
        # the pruned model's own state dict round-trips into a model built from the dict
        from_dict = MobileViT(arch, subnet=spec.to_dict()).eval()
        from_dict.load_state_dict(pruned.state_dict())
        assert count_params(from_dict) == count_params(pruned)
        for x in (_x(2, 3, 128, 96, seed=5), _x(1, 3, 200, 136, seed=6)):
            with torch.no_grad():
                ref = sup(x)[-1]
                assert torch.allclose(pruned(x)[-1], ref, atol=1e-4), \
                    (pruned(x)[-1] - ref).abs().max()
                assert torch.allclose(from_dict(x)[-1], ref, atol=1e-4)
                # the open baseline differs: the gates did something
                assert not torch.allclose(base(x)[-1], ref, atol=1e-3)
        flops = _flops(pruned, x256)
        kept = sum(b.kept for b in spec.blocks)
        terms = sup.cost_terms()
        dropped = sum(t.flops_per_channel * (b.dim - b.kept) for t, b in zip(terms, spec.blocks))
        # exact: the MLPs and the projection convs are the only layers whose shape depends on D̃
        assert flops == sizes[0][1] + theta_flops - dropped
        assert sup.cost_model('flops').at_kept() == pytest.approx(
            sum(t.flops_per_channel * b.kept for t, b in zip(terms, spec.blocks)))
        sizes.append((count_params(pruned), flops, kept))
    params, flops, kept = zip(*sizes)
    assert kept[0] > kept[1] > kept[2]
    assert params[0] > params[1] > params[2]
    assert flops[1] > flops[2] and flops[0] > flops[2]


def test_kcr_subnet_equals_supernet():
    sup = MobileViT('mobilevit-s', 'kcr').eval()
    sup.load_converted(_backbone_state('mobilevit-s'))
    _random_gates_(sup, 0.2, seed=20)
    spec = sup.export_subnet()
    pruned = MobileViT('mobilevit-s', subnet=spec).eval()
    pruned.load_state_dict(
        prune_state_dict(sup.state_dict(), spec, lambda: MobileViT('mobilevit-s', 'kcr')))
    x = _x(1, 3, 96, 160, seed=7)
    with torch.no_grad():
        assert torch.allclose(pruned(x)[-1], sup(x)[-1], atol=1e-4)


def test_projection_uses_the_last_layers_own_gate_sample_in_training():
    """Training draws a fresh Gumbel sample per call: the projection must be masked by the very
    gate the last layer's MLP used (zero pattern at conv_proj's input = that gate)."""
    torch.manual_seed(9)
    sup = MobileViT('mobilevit-xs', 'dcs').train()
    blk = sup.stages[4][1]
    sel = blk.transformer[-1].mlp.select
    with torch.no_grad():
        sel.alpha.zero_()  # P(open) = 1/2 per channel and per draw
    seen = {}
    h1 = sel.register_forward_hook(lambda m, a, out: seen.__setitem__('gate', out.detach()))
    h2 = blk.conv_proj.register_forward_pre_hook(
        lambda m, a: seen.__setitem__('proj_in', a[0].detach()))
    for _ in range(3):
        out = sup(_x(2, 3, 64, 64, seed=8))[-1]
        g = seen['gate']
        assert 0 < g.sum() < g.numel()
        used = seen['proj_in'].abs().amax(dim=(0, 2, 3)) > 0
        assert torch.equal(used, g > 0)
        assert 'last_gate' not in sel.__dict__  # nothing left on the module
    h1.remove(), h2.remove()
    out.sum().backward()
    assert sel.alpha.grad is not None and sel.alpha.grad.abs().sum() > 0
    copy.deepcopy(sup)  # no stray graph tensors on the modules (EMA deep-copies the model)


def test_cost_terms():
    sup = MobileViT('mobilevit-xs', 'dcs')
    terms = sup.cost_terms()
    assert len(terms) == 2 + 4 + 3
    assert all(t.mlp_layers == 2 for t in terms)
    hwc = [t.conv_hwc for t in terms]
    assert hwc == [0, 32 * 32 * 64, 0, 0, 0, 16 * 16 * 80, 0, 0, 8 * 8 * 96]
    assert terms[1].selector is sup.stages[2][1].transformer[1].mlp.select
    assert terms[0].flops_per_channel == 2 * 32 * 32 * 192
    assert terms[1].flops_per_channel == 2 * 32 * 32 * 192 + 32 * 32 * 64
    assert terms[8].flops_per_channel == 2 * 8 * 8 * 288 + 8 * 8 * 96
    dims = [96] * 2 + [120] * 4 + [144] * 3
    expected = 0.
    for d0, t in zip(dims, terms):
        d = d0 * torch.sigmoid(torch.tensor(3.0 / 4.5))
        expected += float(2 * (2 * d * d + d) + ((1 + d) * t.conv_hwc if t.conv_hwc else 0))
    assert float(sup.cost_model('paper').expected().detach()) == pytest.approx(expected, rel=1e-5)
    assert MobileViT('mobilevit-xs', 'baseline').cost_terms() == []
    assert MobileViT('mobilevit-xs', 'dcs-arch1').cost_terms() == []


# ------------------------------------------------------------------ 5: dense outputs
@pytest.mark.parametrize('variant', ['baseline', 'dcs'])
def test_out_indices_at_other_input_sizes(variant):
    model = MobileViT('mobilevit-xs', variant, out_indices=(3, 4)).eval()
    model.init_weights()
    with torch.no_grad():
        outs = model(_x(1, 3, 320, 320))  # SSDLite
        assert [o.shape for o in outs] == [(1, 80, 20, 20), (1, 384, 10, 10)]
        model = MobileViT('mobilevit-s', variant, out_indices=(0, 1, 2, 3, 4)).eval()
        outs = model(_x(1, 3, 256, 192))
    assert [tuple(o.shape) for o in outs] == [(1, 32, 128, 96), (1, 64, 64, 48),
                                              (1, 96, 32, 24), (1, 128, 16, 12),
                                              (1, 640, 8, 6)]
    assert model.out_channels == (32, 64, 96, 128, 640)


def test_init_weights_sensible_and_large_input_finite():
    torch.manual_seed(10)
    m = MobileViT('mobilevit-xs', 'dcs')
    m.init_weights()
    assert all(torch.isfinite(p).all() for p in m.parameters())
    layer = m.stages[3][1].transformer[0]
    th = layer.attn.qk_select.theta
    with torch.no_grad():
        assert float(th.weight.abs().max()) == 0 and float(th.bias.min()) == 3.0
        assert float(layer.mlp.select.alpha.min()) == 3.0
        assert abs(float(layer.mlp.fc1.weight.std()) - 0.01) < 0.002  # timm: Linear normal(.01)
        assert float(m.stages[1][1].conv3_1x1.bn.weight.abs().max()) == 0  # zero_init_last
    with torch.no_grad():
        out = m.eval()(_x(1, 3, 512, 512))[-1]
    assert out.shape == (1, 384, 16, 16) and torch.isfinite(out).all() and out.std() > 0
    out = m.train()(_x(2, 3, 96, 96))[-1]
    assert torch.isfinite(out).all()


def test_frozen_stages_and_norm_eval():
    m = MobileViT('mobilevit-xs', 'kcr', frozen_stages=2, norm_eval=True).train()
    assert not any(p.requires_grad for p in m.stem.parameters())
    assert not any(p.requires_grad for p in m.stages[1].parameters())
    assert all(p.requires_grad for p in m.stages[2].parameters())
    assert not any(x.training for x in m.modules() if isinstance(x, nn.BatchNorm2d))
    assert m.stages[3][1].transformer[0].training


# ------------------------------------------------------------------ 6: registries
@pytest.mark.parametrize('scope', ['mmdet', 'mmseg', 'mmpretrain'])
def test_builds_through_downstream_registries(scope):
    import importlib

    from mmengine.registry import DefaultScope
    registry = importlib.import_module(f'{scope}.registry').MODELS
    cfg = dict(type='mmdcs.MobileViT', arch='mobilevit-xs', variant='dcs', out_indices=(3, 4))
    with DefaultScope.overwrite_default_scope(scope):
        model = registry.build(copy.deepcopy(cfg))
    assert type(model) is MobileViT and model.out_indices == (3, 4)


# ------------------------------------------------------------------ 7: bad input
def test_bad_arch_variant_and_arguments():
    with pytest.raises(ValueError, match='mobilevit-xs, mobilevit-s'):
        MobileViT('mobilevit-xxs')
    with pytest.raises(ValueError, match='baseline'):
        MobileViT('mobilevit-xs', 'dcss')
    with pytest.raises(ValueError, match='out_indices 5'):
        MobileViT('mobilevit-xs', out_indices=(2, 5))
    with pytest.raises(ValueError, match='frozen_stages'):
        MobileViT('mobilevit-xs', frozen_stages=6)


def _spec():
    sup = MobileViT('mobilevit-xs', 'kcr')
    _random_gates_(sup, 0., seed=30)
    return sup.export_subnet().to_dict()


@pytest.mark.parametrize('edit, match', [
    (lambda d: d.update(family='vit'), "'vit' family"),
    (lambda d: d.update(arch='mobilevit-s'), "arch 'mobilevit-s'"),
    (lambda d: d['blocks'].pop(), r'missing in the subnet: stages\.4\.1\.transformer\.2\.mlp'),
    (lambda d: d['blocks'].append(dict(d['blocks'][-1], name='stages.4.1.transformer.3.mlp')),
     r'not in the backbone: stages\.4\.1\.transformer\.3\.mlp'),
    (lambda d: d['blocks'][3].update(keep=[0, 120], kept=2),
     r'stages\.3\.1\.transformer\.1\.mlp.*out of range'),
    (lambda d: d['blocks'][1].update(keep=[], kept=0),
     r'stages\.2\.1\.transformer\.1\.mlp.*D̃ = 0'),
    (lambda d: d['blocks'][6].update(dim=96), r'stages\.4\.1\.transformer\.0\.mlp.*D = 96'),
])
def test_bad_subnet_is_refused_naming_the_block(edit, match):
    d = _spec()
    edit(d)
    with pytest.raises(SubnetError, match=match):
        MobileViT('mobilevit-xs', subnet=d)


def test_subnet_needs_selection_variant_and_baseline_cannot_export():
    d = _spec()
    with pytest.raises(SubnetError, match='channel selection'):
        MobileViT('mobilevit-xs', 'baseline', subnet=d)
    with pytest.raises(SubnetError, match='no architecture'):
        MobileViT('mobilevit-xs', 'baseline').export_subnet()
    assert isinstance(SubnetSpec.coerce(d), SubnetSpec)
    assert isinstance(MobileViT('mobilevit-xs', subnet=d).stages[2][1], MobileViTBlock)
