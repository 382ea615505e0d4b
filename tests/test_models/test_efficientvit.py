"""EfficientViT (MIT) family: timm equivalence, supernet = baseline, pruned = supernet, the Q/K
mask on every scale branch, cost terms, dense outputs, fp32 linear attention, registries, bad
input."""
import copy
import functools
import os.path as osp

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from mmdcs.models.backbones.base import count_params
from mmdcs.models.backbones.efficientvit import (TIMM_MODELS, EfficientViT, LiteMLA,
                                                 convert_timm)
from mmdcs.selection import SubnetError, SubnetSpec, prune_state_dict

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
ARCHS = list(TIMM_MODELS)
HEAD_WIDTHS = {'efficientvit-b0': (1024, 1280), 'efficientvit-b1': (1536, 1600),
               'efficientvit-b2': (2304, 2560), 'efficientvit-b3': (2304, 2560)}


@functools.lru_cache(maxsize=None)
def _timm_model(arch):
    timm = pytest.importorskip('timm')
    torch.manual_seed(0)
    model = timm.create_model(TIMM_MODELS[arch], pretrained=False).eval()
    # non-trivial BatchNorm statistics, so that eval-mode BN is really checked
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)
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
    cfg = Config.fromfile(osp.join(ROOT, f'configs/_base_/models/efficientvit_{arch}.py'))
    cfg.model.backbone.update(backbone)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(cfg.model)


def _flops(model, x):
    from mmengine.analysis import FlopAnalyzer
    fa = FlopAnalyzer(model, (x, ))
    fa.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    return fa.total()


def _attns(model):
    return [m for m in model.modules() if isinstance(m, LiteMLA)]


# ------------------------------------------------------------------ 1-2: timm equivalence
@pytest.mark.parametrize('arch', ARCHS)
def test_baseline_parameter_count_equals_timm(arch):
    from mmdcs.models.backbones.efficientvit import EfficientViTClsHead
    w0, w1 = HEAD_WIDTHS[arch]
    head = EfficientViTClsHead(num_classes=1000, in_channels=w0, mid_channels=w1)
    ours = count_params(EfficientViT(arch, 'baseline')) + count_params(head)
    assert ours == count_params(_timm_model(arch))
    # the head is timm's classifier MLP: Linear (no bias), LayerNorm, Linear
    assert count_params(head) == w0 * w1 + 2 * w1 + w1 * 1000 + 1000


@pytest.mark.parametrize('arch', ARCHS)
def test_converted_classifier_gives_timm_logits(arch):
    timm_model = _timm_model(arch)
    clf = _classifier(arch).eval()
    clf.load_state_dict(_converted(arch), strict=True)
    torch.manual_seed(1)
    x = torch.randn(1, 3, 96, 128)
    with torch.no_grad():
        ref = timm_model(x)
        out = clf(x, mode='tensor')
        # the head's pre-logits are timm's
        pre = clf.head.pre_logits(clf.neck(clf.backbone(x)))
        assert torch.allclose(pre, timm_model.forward_head(timm_model.forward_features(x),
                                                           pre_logits=True), atol=1e-4)
    assert out.shape == ref.shape == (1, 1000)
    assert torch.allclose(out, ref, atol=1e-4), (out - ref).abs().max()


def test_dense_outputs_are_timm_intermediates():
    """Outputs 1-4 are timm's ``forward_intermediates`` (features_only indices 0-3)."""
    timm_model = _timm_model('efficientvit-b0')
    model = EfficientViT('efficientvit-b0', out_indices=(0, 1, 2, 3, 4)).eval()
    model.load_converted(_backbone_state('efficientvit-b0'))
    x = torch.randn(1, 3, 160, 96, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = timm_model.forward_intermediates(x, indices=[0, 1, 2, 3], intermediates_only=True)
        outs = model(x)
        assert torch.allclose(outs[0], timm_model.stem(x), atol=1e-5)
    for o, r in zip(outs[1:], ref):
        assert o.shape == r.shape and torch.allclose(o, r, atol=1e-4)


def test_convert_timm_refuses_unknown_arch_and_foreign_keys():
    sd = _timm_model('efficientvit-b0').state_dict()
    with pytest.raises(ValueError, match='efficientvit-b0.*efficientvit-b3'):
        convert_timm(sd, 'efficientvit-l1')
    with pytest.raises(KeyError, match='fc_norm'):
        convert_timm(dict(sd, **{'fc_norm.weight': torch.ones(3)}), 'efficientvit-b0')


# ------------------------------------------------------------------ 3: supernets = baseline
@pytest.mark.parametrize('variant, qk_mask', [('dcs', 'shared'), ('dcs', 'separate'),
                                              ('kcr', 'shared'), ('dcs-arch1', 'shared')])
def test_open_supernet_with_converted_weights_equals_baseline(variant, qk_mask):
    state = _backbone_state('efficientvit-b1')
    base = EfficientViT('efficientvit-b1', 'baseline').eval()
    base.load_converted(state)
    sup = EfficientViT('efficientvit-b1', variant, qk_mask=qk_mask).eval()
    missing, unexpected = sup.load_converted(state)
    assert not unexpected
    assert all('qk_select' in k or 'select' in k for k in missing)
    assert sup.is_supernet == (variant != 'dcs-arch1') and not base.is_supernet
    assert all((m.qk_select is not None) == variant.startswith('dcs') for m in _attns(sup))
    torch.manual_seed(3)
    x = torch.randn(2, 3, 96, 64)
    with torch.no_grad():
        assert torch.allclose(sup(x)[-1], base(x)[-1], atol=1e-5)


# ------------------------------------------------------------------ Q/K mask semantics
def _lite_mla_reference(m: LiteMLA, x, mq, mk):
    """LiteMLA written out per branch and head: q, k of head h in every branch are multiplied by
    the channels h·dim … (h+1)·dim of the masks, then ReLU; v is not masked."""
    B, _, H, W = x.shape
    qkv = m.qkv(x)
    outs = []
    for branch in [qkv] + [op(qkv) for op in m.aggreg]:
        for h in range(m.heads):
            c = branch[:, h * 3 * m.dim:(h + 1) * 3 * m.dim].flatten(2)  # (B, 3·dim, HW)
            q, k, v = c[:, :m.dim], c[:, m.dim:2 * m.dim], c[:, 2 * m.dim:]
            sl = slice(h * m.dim, (h + 1) * m.dim)
            q = F.relu(q * mq[:, sl].flatten(2))
            k = F.relu(k * mk[:, sl].flatten(2))
            num = torch.einsum('bdn,bdm,bem->ben', q, k, v)  # Σ_m (q_n·k_m) v_m
            den = torch.einsum('bdn,bdm->bn', q, k).unsqueeze(1)
            outs.append((num / (den + m.eps)).reshape(B, m.dim, H, W))
    out = torch.cat(outs, 1)
    if m.select is not None:
        out = out * (m.select.alpha > 0).float().view(1, -1, 1, 1)
    return m.proj(out)


@pytest.mark.parametrize('qk_mask', ['shared', 'separate'])
def test_qk_mask_is_applied_to_every_branch_before_the_kernel(qk_mask):
    torch.manual_seed(4)
    m = LiteMLA(32, 32, dim=8, scales=(3, 5), qk_select=qk_mask, select=True).eval()
    with torch.no_grad():
        m.qk_select.theta.weight.normal_()
        m.qk_select.theta.bias.zero_()
        m.select.alpha.normal_()
    x = torch.randn(2, 32, 6, 5)
    with torch.no_grad():
        theta = m.qk_select.theta(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        masks = (theta > 0).float()
        mq, mk = (masks, masks) if qk_mask == 'shared' else masks.chunk(2, dim=1)
        assert 0.2 < mq.mean() < 0.8 and (qk_mask == 'shared' or not torch.equal(mq, mk))
        ref = _lite_mla_reference(m, x, mq, mk)
        assert torch.allclose(m(x), ref, atol=1e-5)
        assert m.cat_dim == 32 * 3 and m.select.dim == 96


def test_supernet_trains_alpha_and_theta_get_gradients():
    torch.manual_seed(5)
    model = EfficientViT('efficientvit-b0', 'dcs', out_indices=(4, )).train()
    model(torch.randn(2, 3, 64, 64))[-1].pow(2).mean().backward()
    attn = _attns(model)[0]
    assert attn.select.alpha.grad.abs().sum() > 0
    assert attn.qk_select.theta.weight.grad.abs().sum() > 0


# ------------------------------------------------------------------ 4: pruned subnet
def _random_gates_(model, alpha_shift, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in _attns(model):
            m.select.alpha.copy_(torch.randn(m.select.alpha.shape, generator=g) + alpha_shift)
            th = m.qk_select.theta
            th.weight.copy_(torch.randn(th.weight.shape, generator=g) * 0.2)
            th.bias.copy_(torch.randn(th.bias.shape, generator=g) * 0.5)


def test_pruned_subnet_equals_supernet_and_shrinks(tmp_path):
    arch = 'efficientvit-b0'
    state = _backbone_state(arch)
    x224 = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(6))
    x = torch.randn(2, 3, 96, 64, generator=torch.Generator().manual_seed(7))
    base = EfficientViT(arch, 'baseline', out_indices=(4, )).eval()
    base.load_converted(state)
    sizes = [(count_params(base), _flops(base, x224), None)]
    sup_full = None
    for i, shift in enumerate((0.5, -0.5)):
        sup = EfficientViT(arch, 'dcs', out_indices=(4, )).eval()
        sup.load_converted(state)
        _random_gates_(sup, shift, seed=10 + i)
        spec = sup.export_subnet(note='test')
        path = str(tmp_path / f'subnet{i}.json')
        spec.save(path)
        assert [b.name for b in spec.blocks] == [
            'stages.2.blocks.1.context_module.main', 'stages.2.blocks.2.context_module.main',
            'stages.3.blocks.1.context_module.main', 'stages.3.blocks.2.context_module.main']
        assert all(b.dim == d for b, d in zip(spec.blocks, (128, 128, 256, 256)))
        assert 0 < spec.kept_ratio < 1
        # the pruned backbone from the file alone, its weights from the supernet's
        pruned = EfficientViT(arch=arch, subnet=path, out_indices=(4, )).eval()
        assert pruned.variant == 'dcs' and not pruned.is_supernet
        pruned.load_state_dict(
            prune_state_dict(sup.state_dict(), spec,
                             lambda: EfficientViT(arch, 'dcs', out_indices=(4, ))))
        assert [a.kept for a in _attns(pruned)] == [b.kept for b in spec.blocks]
        assert count_params(EfficientViT(arch, subnet=spec.to_dict(),
                                         out_indices=(4, ))) == count_params(pruned)
        # the Q/K masks are really active (neither all open nor all closed)
        attn0, seen = _attns(sup)[0], []
        handle = attn0.qk_select.register_forward_hook(lambda m, i, o: seen.append(o[0]))
        with torch.no_grad():
            ref = sup(x)[-1]
        handle.remove()
        assert 0.2 < float(seen[0].mean()) < 0.8
        with torch.no_grad():
            assert torch.allclose(pruned(x)[-1], ref, atol=1e-4), (pruned(x)[-1] - ref).abs().max()
            # the gates did something: the open baseline differs
            assert not torch.allclose(base(x)[-1], ref, atol=1e-3)
        if sup_full is None:  # the same network with every channel kept, for exact FLOPs
            full = copy.deepcopy(spec)
            for b in full.blocks:
                b.keep = list(range(b.dim))
            sup_full = EfficientViT(arch, subnet=full, out_indices=(4, )).eval()
            sizes.append((count_params(sup_full), _flops(sup_full, x224),
                          sum(b.dim for b in spec.blocks)))
        flops = _flops(pruned, x224)
        kept = sum(b.kept for b in spec.blocks)
        # exact: only proj's input depends on D̃ (H·W·C_out MACs per kept channel)
        drop = sum(t.flops_per_channel * (b.dim - b.kept)
                   for t, b in zip(sup.cost_terms(), spec.blocks))
        assert flops == sizes[1][1] - drop
        assert count_params(pruned) == sizes[1][0] - sum(
            a.proj.conv.out_channels * (a.cat_dim - a.kept) for a in _attns(pruned))
        assert sup.cost_model('flops').at_kept() == sum(
            t.flops_per_channel * b.kept for t, b in zip(sup.cost_terms(), spec.blocks))
        sizes.append((count_params(pruned), flops, kept))
    params, flops, kept = zip(*sizes)
    assert kept[1] > kept[2] > kept[3]
    assert params[1] > params[2] > params[3] and flops[1] > flops[2] > flops[3]
    # the DCS network adds its Linear_θ (kept in the deployed network) to the baseline
    theta = sum(count_params(a.qk_select) for a in _attns(sup))
    assert params[1] == params[0] + theta


def test_cost_terms_b1():
    sup = EfficientViT('efficientvit-b1', 'dcs')
    terms = sup.cost_terms()
    # stage 3 (14×14, C = 128): 3 blocks; stage 4 (7×7, C = 256): 4 blocks; MBConv expand 4
    assert len(terms) == 7
    assert [t.selector.dim for t in terms] == [256] * 3 + [512] * 4
    assert all(t.mlp_layers == 1 for t in terms)
    assert [t.conv_hwc for t in terms] == [14 * 14 * 512] * 3 + [7 * 7 * 1024] * 4
    assert [t.flops_per_channel for t in terms] == [14 * 14 * 128] * 3 + [7 * 7 * 256] * 4
    assert terms[0].selector is sup.stages[2].blocks[1].context_module.main.select
    assert EfficientViT('efficientvit-b1', 'baseline').cost_terms() == []
    tau = float(terms[0].selector.gate.tau)
    p = torch.sigmoid(torch.tensor(3.0 / tau))
    expect = sum(float((2 * (d * p)**2 + d * p) + (1 + d * p) * t.conv_hwc)
                 for d, t in zip([256] * 3 + [512] * 4, terms))
    assert float(sup.cost_model('paper').expected().detach()) == pytest.approx(expect, rel=1e-5)


# ------------------------------------------------------------------ 5: dense outputs
@pytest.mark.parametrize('variant', ['baseline', 'dcs'])
def test_dense_outputs_at_another_input_size(variant):
    model = EfficientViT('efficientvit-b1', variant, out_indices=(0, 1, 2, 3, 4)).eval()
    assert model.head_in_conv is None and model.out_channels == (16, 32, 64, 128, 256)
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 320, 256))
    assert [tuple(o.shape) for o in outs] == [(1, c, 320 // s, 256 // s) for c, s in zip(
        (16, 32, 64, 128, 256), (2, 4, 8, 16, 32))]
    # SSDLite uses strides 16 and 32; negative indices count from the end (5 = head_in_conv)
    ssd = EfficientViT('efficientvit-b1', variant, out_indices=(3, 4)).eval()
    with torch.no_grad():
        outs = ssd(torch.randn(1, 3, 320, 320))
    assert [tuple(o.shape) for o in outs] == [(1, 128, 20, 20), (1, 256, 10, 10)]
    cls = EfficientViT('efficientvit-b1', variant, out_indices=-1)
    assert cls.out_indices == (5, ) and cls.out_channels == (1536, )


def test_detection_backbone_loads_classification_weights_and_freezes():
    model = EfficientViT('efficientvit-b1', 'kcr', out_indices=(1, 2, 3, 4), frozen_stages=1,
                         norm_eval=True)
    missing, unexpected = model.load_converted(_backbone_state('efficientvit-b1'))
    assert not unexpected
    model.train()
    assert not any(p.requires_grad for p in model.stem.parameters())
    assert not any(p.requires_grad for p in model.stages[0].parameters())
    assert all(p.requires_grad for p in model.stages[1].parameters())
    assert not any(m.training for m in model.modules() if isinstance(m, nn.BatchNorm2d))
    assert model.stages[2].training


# ------------------------------------------------------------------ fp32 linear attention
def test_linear_attention_is_stable_large_input_and_bf16_autocast():
    torch.manual_seed(8)
    model = EfficientViT('efficientvit-b0', 'dcs', out_indices=(3, 4)).eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 512, 512) * 3)
        assert all(torch.isfinite(o).all() for o in outs)
        x = torch.randn(1, 3, 128, 96)
        ref = model(x)
        with torch.autocast('cpu', dtype=torch.bfloat16):
            low = model(x)
    assert all(o.dtype == torch.bfloat16 and torch.isfinite(o).all() for o in low)
    # LiteMLA's attention itself runs in fp32 under autocast
    seen = []
    attn = _attns(model)[0]
    handle = attn.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    orig = attn._attn
    attn._attn = lambda q, k, v: (seen.append((q.dtype, torch.is_autocast_enabled('cpu')))
                                  or orig(q, k, v))
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        model(x)
    handle.remove()
    assert seen[0] == (torch.bfloat16, False)
    rel = (low[-1].float() - ref[-1]).norm() / ref[-1].norm()
    assert rel < 0.1


# ------------------------------------------------------------------ 6: registries
@pytest.mark.parametrize('scope', ['mmdet', 'mmseg', 'mmpretrain'])
def test_builds_through_downstream_registries(scope):
    import importlib

    from mmengine.registry import DefaultScope
    registry = importlib.import_module(f'{scope}.registry').MODELS
    cfg = dict(type='mmdcs.EfficientViT', arch='efficientvit-b0', variant='dcs',
               out_indices=(1, 2, 3, 4))
    with DefaultScope.overwrite_default_scope(scope):
        model = registry.build(copy.deepcopy(cfg))
    assert type(model) is EfficientViT and model.out_indices == (1, 2, 3, 4)


# ------------------------------------------------------------------ 7: bad input
def test_bad_arch_variant_and_arguments():
    with pytest.raises(ValueError, match='efficientvit-b0.*efficientvit-b3'):
        EfficientViT('efficientvit-l1')
    with pytest.raises(ValueError, match='baseline'):
        EfficientViT('efficientvit-b0', 'dcss')
    with pytest.raises(ValueError, match='qk_mask'):
        EfficientViT('efficientvit-b0', 'dcs', qk_mask='both')
    with pytest.raises(ValueError, match='out_indices 6'):
        EfficientViT('efficientvit-b0', out_indices=6)
    with pytest.raises(ValueError, match='frozen_stages'):
        EfficientViT('efficientvit-b0', frozen_stages=5)


def _spec(arch='efficientvit-b0'):
    sup = EfficientViT(arch, 'kcr')
    with torch.no_grad():
        for m in _attns(sup):
            m.select.alpha.normal_()
    return sup.export_subnet().to_dict()


@pytest.mark.parametrize('edit, match', [
    (lambda d: d.update(family='vit'), "'vit' family"),
    (lambda d: d.update(arch='efficientvit-b1'), "arch 'efficientvit-b1'"),
    (lambda d: d['blocks'].pop(), r'missing in the subnet: stages\.3\.blocks\.2\.context'),
    (lambda d: d['blocks'].append(dict(d['blocks'][0],
                                       name='stages.3.blocks.3.context_module.main')),
     r'not in the backbone: stages\.3\.blocks\.3\.context_module\.main'),
    (lambda d: d['blocks'][1].update(keep=[0, 128], kept=2),
     r'stages\.2\.blocks\.2\.context_module\.main.*out of range'),
    (lambda d: d['blocks'][2].update(keep=[], kept=0),
     r'stages\.3\.blocks\.1\.context_module\.main.*D̃ = 0'),
    (lambda d: d['blocks'][3].update(dim=128), r'stages\.3\.blocks\.2\.context_module.*D = 128'),
])
def test_bad_subnet_is_refused_naming_the_block(edit, match):
    d = _spec()
    edit(d)
    with pytest.raises(SubnetError, match=match):
        EfficientViT('efficientvit-b0', subnet=d)


def test_subnet_of_another_depth_is_refused():
    """A B1 subnet (7 blocks) on a B0 (4 blocks), with the arch name forced to match."""
    d = _spec('efficientvit-b1')
    d['arch'] = 'efficientvit-b0'
    with pytest.raises(SubnetError, match=r'not in the backbone: stages\.2\.blocks\.3'):
        EfficientViT('efficientvit-b0', subnet=d)


def test_subnet_needs_selection_variant_and_baseline_cannot_export():
    d = _spec()
    with pytest.raises(SubnetError, match='channel selection'):
        EfficientViT('efficientvit-b0', 'baseline', subnet=d)
    with pytest.raises(SubnetError, match='no architecture'):
        EfficientViT('efficientvit-b0', 'baseline').export_subnet()
    with pytest.raises(SubnetError, match='no architecture'):
        EfficientViT('efficientvit-b0', 'dcs-arch1').export_subnet()
    assert isinstance(SubnetSpec.coerce(d), SubnetSpec)
    with pytest.raises(ValueError, match='at least one'):
        LiteMLA(16, 16, dim=8, keep=[])
