"""ViT / DeiT family: timm equivalence, supernet = baseline, pruned = supernet, dense outputs,
position-embedding resampling, registries, bad input."""
import copy
import functools
import os.path as osp

import pytest
import torch
import torch.nn as nn

from mmdcs.models.backbones.base import count_params
from mmdcs.models.backbones.vit import TIMM_MODELS, ViT, convert_timm
from mmdcs.selection import SubnetError, SubnetSpec, prune_state_dict

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
ARCHS = list(TIMM_MODELS)
DIMS = {'deit-tiny': 192, 'vit-s16': 384, 'vit-b16': 768}


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
    cfg = Config.fromfile(osp.join(ROOT, f'configs/_base_/models/vit_{arch}.py'))
    cfg.model.backbone.update(backbone)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(cfg.model)


# ------------------------------------------------------------------ 1-2: timm equivalence
@pytest.mark.parametrize('arch', ARCHS)
def test_baseline_parameter_count_equals_timm(arch):
    d = DIMS[arch]
    ours = count_params(ViT(arch, 'baseline')) + d * 1000 + 1000  # + LinearClsHead
    assert ours == count_params(_timm_model(arch))


@pytest.mark.parametrize('arch', ARCHS)
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


def test_other_input_size_matches_timm_dynamic_img_size():
    """At a non-square size the resampled position embedding is timm's (dynamic_img_size)."""
    import timm
    ref_model = timm.create_model(TIMM_MODELS['deit-tiny'], pretrained=False,
                                  dynamic_img_size=True).eval()
    ref_model.load_state_dict(_timm_model('deit-tiny').state_dict())
    clf = _classifier('deit-tiny').eval()
    clf.load_state_dict(_converted('deit-tiny'))
    torch.manual_seed(2)
    x = torch.randn(1, 3, 160, 224)
    with torch.no_grad():
        assert torch.allclose(clf(x, mode='tensor'), ref_model(x), atol=1e-4)


def test_convert_timm_refuses_unknown_arch_and_foreign_keys():
    sd = _timm_model('deit-tiny').state_dict()
    with pytest.raises(ValueError, match='deit-tiny'):
        convert_timm(sd, 'vit-l16')
    with pytest.raises(KeyError, match='fc_norm'):
        convert_timm(dict(sd, **{'fc_norm.weight': torch.ones(192)}), 'deit-tiny')
    with pytest.raises(ValueError, match='width 384'):
        convert_timm(sd, 'vit-s16')


# ------------------------------------------------------------------ 3: supernets = baseline
@pytest.mark.parametrize('variant, qk_mask', [('dcs', 'shared'), ('dcs', 'separate'),
                                              ('kcr', 'shared')])
def test_open_supernet_with_converted_weights_equals_baseline(variant, qk_mask):
    state = _backbone_state('deit-tiny')
    base = ViT('deit-tiny', 'baseline').eval()
    base.load_converted(state)
    sup = ViT('deit-tiny', variant, qk_mask=qk_mask).eval()
    missing, unexpected = sup.load_converted(state)
    assert not missing and not unexpected
    assert sup.is_supernet and not base.is_supernet
    torch.manual_seed(3)
    x = torch.randn(2, 3, 96, 128)
    with torch.no_grad():
        assert torch.allclose(sup(x)[-1], base(x)[-1], atol=1e-5)


# ------------------------------------------------------------------ 4: pruned subnet
def _random_gates_(model, alpha_shift, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for blk in model.blocks:
            blk.mlp.select.alpha.copy_(torch.randn(blk.mlp.select.alpha.shape, generator=g)
                                       + alpha_shift)
            if blk.attn.qk_select is not None:
                th = blk.attn.qk_select.theta
                th.weight.copy_(torch.randn(th.weight.shape, generator=g) * 0.2)


def _flops(model, x):
    from mmengine.analysis import FlopAnalyzer
    fa = FlopAnalyzer(model, (x, ))
    fa.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    return fa.total()


def test_pruned_subnet_equals_supernet_and_shrinks(tmp_path):
    state = _backbone_state('deit-tiny')
    x224 = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(4))
    x = torch.randn(2, 3, 64, 96, generator=torch.Generator().manual_seed(5))
    base = ViT('deit-tiny', 'baseline').eval()
    base.load_converted(state)
    sizes = [(count_params(base), _flops(base, x224), 192 * 12)]
    for i, shift in enumerate((0.7, -0.3)):
        sup = ViT('deit-tiny', 'dcs').eval()
        sup.load_converted(state)
        _random_gates_(sup, shift, seed=10 + i)
        spec = sup.export_subnet(note='test')
        path = str(tmp_path / f'subnet{i}.json')
        spec.save(path)
        # Q/K masks are really active (not all open) and some channels are really pruned
        with torch.no_grad():
            theta = sup.blocks[0].attn.qk_select.theta(sup.blocks[0].norm1(torch.randn(50, 192)))
        assert 0 < (theta > 0).float().mean() < 1
        assert 0 < spec.kept_ratio < 1
        pruned = ViT(arch='deit-tiny', subnet=path).eval()  # from the file alone
        assert pruned.variant == 'dcs' and not pruned.is_supernet
        pruned.load_state_dict(
            prune_state_dict(sup.state_dict(), spec, lambda: ViT('deit-tiny', 'dcs')))
        from_dict = ViT('deit-tiny', subnet=spec.to_dict())
        assert count_params(from_dict) == count_params(pruned)
        with torch.no_grad():
            ref = sup(x)[-1]
            assert torch.allclose(pruned(x)[-1], ref, atol=1e-4)
            # the open baseline differs: the gates did something
            assert not torch.allclose(base(x)[-1], ref, atol=1e-3)
        flops = _flops(pruned, x224)
        kept = sum(b.kept for b in spec.blocks)
        # exact: the MLPs are the only layers whose shape depends on D̃ (2·N·hidden per channel)
        # the Linear_θ of the pruned DCS model are counted on top of the baseline
        theta_flops = 12 * 197 * 192 * 192
        per_channel = sup.cost_terms()[0].flops_per_channel
        assert per_channel == 2 * 197 * 768
        assert flops == sizes[0][1] + theta_flops - per_channel * (192 * 12 - kept)
        assert sup.cost_model('flops').at_kept() == per_channel * kept
        sizes.append((count_params(pruned), flops, kept))
    params, flops, kept = zip(*sizes)
    assert kept[0] > kept[1] > kept[2]
    # parameters and FLOPs fall as D̃ falls (beyond the Linear_θ the DCS model adds)
    assert params[1] > params[2] and flops[1] > flops[2]
    assert params[0] > params[2] and flops[0] > flops[2]


def test_cost_terms():
    sup = ViT('vit-s16', 'kcr', img_size=160)
    terms = sup.cost_terms()
    assert len(terms) == 12
    assert all(t.mlp_layers == 2 and t.flops_per_channel == 2 * 101 * 1536 for t in terms)
    assert terms[3].selector is sup.blocks[3].mlp.select
    assert ViT('vit-s16', 'baseline').cost_terms() == []
    paper = float(sup.cost_model('paper').expected().detach())
    d = 384 * torch.sigmoid(torch.tensor(3.0 / 4.5))
    assert paper == pytest.approx(float(12 * 2 * (2 * d * d + d)), rel=1e-5)


# ------------------------------------------------------------------ 5: dense outputs, pos embed
@pytest.mark.parametrize('variant', ['baseline', 'dcs'])
def test_featmap_outputs_at_another_input_size(variant):
    model = ViT('deit-tiny', variant, out_type='featmap', out_indices=(3, 5, 7, 11)).eval()
    model.init_weights()
    with torch.no_grad():
        outs = model(torch.randn(2, 3, 160, 224))
    assert isinstance(outs, tuple) and len(outs) == 4
    assert all(o.shape == (2, 192, 10, 14) for o in outs)


def test_out_types_and_final_norm_semantics():
    torch.manual_seed(6)
    raw = ViT('deit-tiny', out_type='raw', out_indices=(-2, -1), final_norm=False).eval()
    raw.init_weights()
    normed = ViT('deit-tiny', out_type='raw', out_indices=(10, 11)).eval()
    normed.load_state_dict(raw.state_dict(), strict=False)
    nn.init.normal_(normed.norm.weight)
    x = torch.randn(1, 3, 64, 48)
    with torch.no_grad():
        r, n = raw(x), normed(x)
        # only the last block's output gets the final norm (mmpretrain semantics)
        assert torch.equal(r[0], n[0])
        assert torch.allclose(normed.norm(r[1]), n[1], atol=1e-6)
        assert n[1].shape == (1, 1 + 4 * 3, 192)
        for out_type, shape in (('cls_token', (1, 192)), ('avg_featmap', (1, 192)),
                                ('featmap', (1, 192, 4, 3))):
            m = ViT('deit-tiny', out_type=out_type)
            m.load_state_dict(normed.state_dict(), strict=False)
            out = m.eval()(x)
            assert len(out) == 1 and out[0].shape == shape
            if out_type == 'cls_token':
                assert torch.allclose(out[0], n[1][:, 0])


def test_pos_embed_resampled_when_loading_another_grid(tmp_path):
    torch.manual_seed(7)
    m224 = ViT('deit-tiny', 'kcr').eval()
    m224.init_weights()
    m160 = ViT('deit-tiny', 'kcr', img_size=160).eval()
    m160.load_state_dict(m224.state_dict())
    assert m160.pos_embed.shape == (1, 1 + 10 * 10, 192)
    assert torch.equal(m160.pos_embed[:, 0], m224.pos_embed[:, 0])  # class token position kept
    x = torch.randn(1, 3, 160, 160)
    with torch.no_grad():
        assert torch.allclose(m160(x)[-1], m224(x)[-1], atol=1e-6)
    # the same through init_cfg=Pretrained (mmengine's loader), as a detector would load it
    path = str(tmp_path / 'vit224.pth')
    torch.save(m224.state_dict(), path)
    m = ViT('deit-tiny', 'kcr', img_size=160, init_cfg=dict(type='Pretrained', checkpoint=path))
    m.init_weights()
    assert torch.equal(m.pos_embed, m160.pos_embed)
    assert torch.equal(m.blocks[5].mlp.fc1.weight, m224.blocks[5].mlp.fc1.weight)


def test_init_weights_timm_style_keeps_gates_open():
    torch.manual_seed(8)
    m = ViT('deit-tiny', 'dcs')
    m.init_weights()
    sd = {k: v.detach() for k, v in m.state_dict().items()}
    assert abs(float(sd['blocks.0.mlp.fc1.weight'].std()) - 0.02) < 0.001
    assert float(sd['blocks.0.mlp.fc1.bias'].abs().max()) == 0
    assert float(sd['blocks.0.attn.qk_select.theta.weight'].abs().max()) == 0
    assert float(sd['blocks.0.attn.qk_select.theta.bias'].min()) == 3.0
    assert float(sd['blocks.0.mlp.select.alpha'].min()) == 3.0
    assert 0 < float(sd['pos_embed'].std()) < 0.03


def test_training_step_reaches_gates_weights_and_pos_embed():
    torch.manual_seed(9)
    m = ViT('deit-tiny', 'dcs', drop_path_rate=0.1, drop_rate=0.1).train()
    m.init_weights()
    m(torch.randn(2, 3, 48, 64))[-1].pow(2).sum().backward()
    blk = m.blocks[5]
    for p in (blk.mlp.select.alpha, blk.attn.qk_select.theta.weight, blk.mlp.fc1.weight,
              m.pos_embed, m.cls_token):
        assert p.grad is not None and p.grad.abs().sum() > 0


# ------------------------------------------------------------------ 6: registries
@pytest.mark.parametrize('scope', ['mmdet', 'mmseg', 'mmpretrain'])
def test_builds_through_downstream_registries(scope):
    import importlib

    from mmengine.registry import DefaultScope
    registry = importlib.import_module(f'{scope}.registry').MODELS
    cfg = dict(type='mmdcs.ViT', arch='deit-tiny', variant='kcr', out_type='featmap',
               out_indices=(3, 5, 7, 11))
    with DefaultScope.overwrite_default_scope(scope):
        model = registry.build(copy.deepcopy(cfg))
    assert type(model) is ViT and model.out_indices == (3, 5, 7, 11)


# ------------------------------------------------------------------ 7: bad input
def test_bad_arch_variant_and_arguments():
    with pytest.raises(ValueError, match='deit-tiny.*vit-s16.*vit-b16'):
        ViT('vit-l16')
    with pytest.raises(ValueError, match='baseline'):
        ViT('deit-tiny', 'dcss')
    with pytest.raises(ValueError, match='out_type'):
        ViT('deit-tiny', out_type='tokens')
    with pytest.raises(ValueError, match='out_indices 12'):
        ViT('deit-tiny', out_indices=12)
    with pytest.raises(ValueError, match='patch_size'):
        ViT('deit-tiny', patch_size=14)
    with pytest.raises(ValueError, match='not divisible'):
        ViT('deit-tiny')(torch.randn(1, 3, 100, 112))


def _spec():
    sup = ViT('deit-tiny', 'kcr')
    with torch.no_grad():
        for blk in sup.blocks:
            blk.mlp.select.alpha.normal_()
    return sup.export_subnet().to_dict()


@pytest.mark.parametrize('edit, match', [
    (lambda d: d.update(family='swin'), "'swin' family"),
    (lambda d: d.update(arch='vit-s16'), "arch 'vit-s16'"),
    (lambda d: d['blocks'].pop(), r'missing in the subnet: blocks\.11\.mlp'),
    (lambda d: d['blocks'].append(dict(d['blocks'][0], name='blocks.12.mlp')),
     r'not in the backbone: blocks\.12\.mlp'),
    (lambda d: d['blocks'][4].update(keep=[0, 192], kept=2), r'blocks\.4\.mlp.*out of range'),
    (lambda d: d['blocks'][2].update(keep=[], kept=0), r'blocks\.2\.mlp.*D̃ = 0'),
    (lambda d: d['blocks'][7].update(dim=384), r'blocks\.7\.mlp.*D = 384'),
])
def test_bad_subnet_is_refused_naming_the_block(edit, match):
    d = _spec()
    edit(d)
    with pytest.raises(SubnetError, match=match):
        ViT('deit-tiny', subnet=d)


def test_subnet_needs_selection_variant_and_baseline_cannot_export():
    d = _spec()
    with pytest.raises(SubnetError, match='channel selection'):
        ViT('deit-tiny', 'baseline', subnet=d)
    with pytest.raises(SubnetError, match='no architecture'):
        ViT('deit-tiny', 'baseline').export_subnet()
    assert isinstance(SubnetSpec.coerce(d), SubnetSpec)
