"""EfficientViT (MIT) family: what is particular to it (the family contract, timm equivalence
included, is tests/test_models/test_backbone_contract.py): timm's classifier head, conversion
errors, the Q/K mask on every scale branch, exact FLOPs and parameters of subnets, cost terms,
per-arch outputs, loading a classification checkpoint into a detection backbone, fp32 linear
attention, subnets of another depth."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from _backbones import backbone_state, classifier, converted, flops, randn_input, \
    random_gates_, timm_model
from mmdcs.models.backbones.base import count_params
from mmdcs.models.backbones.efficientvit import (TIMM_MODELS, EfficientViT, LiteMLA,
                                                 convert_timm)
from mmdcs.selection import SubnetError
from _tools import assert_close_scaled  # noqa: E402 (tests/ is on sys.path)

HEAD_WIDTHS = {'efficientvit-b0': (1024, 1280), 'efficientvit-b1': (1536, 1600),
               'efficientvit-b2': (2304, 2560), 'efficientvit-b3': (2304, 2560)}


def _attns(model):
    return [m for m in model.modules() if isinstance(m, LiteMLA)]


# ------------------------------------------------------------------ timm's head, conversion
@pytest.mark.parametrize('arch', list(TIMM_MODELS))
def test_cls_head_is_timms_classifier_mlp(arch):
    """EfficientViTClsHead: Linear (no bias), LayerNorm, Linear, as timm's classifier (the whole
    classifier = timm's model: the contract suite)."""
    from mmdcs.models.backbones.efficientvit import EfficientViTClsHead
    w0, w1 = HEAD_WIDTHS[arch]
    head = EfficientViTClsHead(num_classes=1000, in_channels=w0, mid_channels=w1)
    assert count_params(head) == w0 * w1 + 2 * w1 + w1 * 1000 + 1000


def test_cls_head_pre_logits_are_timms():
    timm_model_ = timm_model('efficientvit-b0')
    clf = classifier('efficientvit-b0').eval()
    clf.load_state_dict(converted('efficientvit-b0'), strict=True)
    x = randn_input(1, 3, 96, 128, seed=1)
    with torch.no_grad():
        pre = clf.head.pre_logits(clf.neck(clf.backbone(x)))
        ref = timm_model_.forward_head(timm_model_.forward_features(x), pre_logits=True)
    assert pre.shape == ref.shape == (1, 1280)
    assert_close_scaled(pre, ref, 1e-4)


def test_convert_timm_refuses_unknown_arch_and_foreign_keys():
    sd = timm_model('efficientvit-b0').state_dict()
    with pytest.raises(ValueError, match='efficientvit-b0.*efficientvit-b3'):
        convert_timm(sd, 'efficientvit-l1')
    with pytest.raises(KeyError, match='fc_norm'):
        convert_timm(dict(sd, **{'fc_norm.weight': torch.ones(3)}), 'efficientvit-b0')


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
        assert_close_scaled(m(x), ref, 1e-5)
        assert m.cat_dim == 32 * 3 and m.select.dim == 96


def test_supernet_trains_alpha_and_theta_get_gradients():
    torch.manual_seed(5)
    model = EfficientViT('efficientvit-b0', 'dcs', out_indices=(4, )).train()
    model(torch.randn(2, 3, 64, 64))[-1].pow(2).mean().backward()
    attn = _attns(model)[0]
    assert attn.select.alpha.grad.abs().sum() > 0
    assert attn.qk_select.theta.weight.grad.abs().sum() > 0


# ------------------------------------------------------------------ pruned subnets
def test_pruned_subnet_layout_flops_and_params():
    """Two random-gate subnets (pruned = supernet: the contract suite): the prunable blocks, the
    kept channels of every LiteMLA, and the exact FLOPs and parameters saved."""
    arch = 'efficientvit-b0'
    x224 = randn_input(1, 3, 224, 224, seed=6)
    base = EfficientViT(arch, 'baseline', out_indices=(4, )).eval()
    sizes = [(count_params(base), flops(base, x224), None)]
    sup_full = None
    for i, shift in enumerate((0.5, -0.5)):
        sup = random_gates_(EfficientViT(arch, 'dcs', out_indices=(4, )).eval(), seed=10 + i,
                            alpha_shift=shift)
        spec = sup.export_subnet()
        assert [b.name for b in spec.blocks] == [
            'stages.2.blocks.1.context_module.main', 'stages.2.blocks.2.context_module.main',
            'stages.3.blocks.1.context_module.main', 'stages.3.blocks.2.context_module.main']
        assert all(b.dim == d for b, d in zip(spec.blocks, (128, 128, 256, 256)))
        assert 0 < spec.kept_ratio < 1
        pruned = EfficientViT(arch=arch, subnet=spec, out_indices=(4, )).eval()
        assert [a.kept for a in _attns(pruned)] == [b.kept for b in spec.blocks]
        if sup_full is None:  # the same network with every channel kept, for exact FLOPs
            full = copy.deepcopy(spec)
            for b in full.blocks:
                b.keep = list(range(b.dim))
            sup_full = EfficientViT(arch, subnet=full, out_indices=(4, )).eval()
            sizes.append((count_params(sup_full), flops(sup_full, x224),
                          sum(b.dim for b in spec.blocks)))
        n_flops = flops(pruned, x224)
        kept = sum(b.kept for b in spec.blocks)
        # exact: only proj's input depends on D̃ (H·W·C_out MACs per kept channel)
        drop = sum(t.flops_per_channel * (b.dim - b.kept)
                   for t, b in zip(sup.cost_terms(), spec.blocks))
        assert n_flops == sizes[1][1] - drop
        assert count_params(pruned) == sizes[1][0] - sum(
            a.proj.conv.out_channels * (a.cat_dim - a.kept) for a in _attns(pruned))
        assert sup.cost_model('flops').at_kept() == sum(
            t.flops_per_channel * b.kept for t, b in zip(sup.cost_terms(), spec.blocks))
        sizes.append((count_params(pruned), n_flops, kept))
    params, n_flops, kept = zip(*sizes)
    assert kept[1] > kept[2] > kept[3]
    assert params[1] > params[2] > params[3] and n_flops[1] > n_flops[2] > n_flops[3]
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


# ------------------------------------------------------------------ outputs
def test_b1_outputs_at_detection_sizes():
    """B1's channels and strides, the SSDLite setting (every index and shape at odd sizes: the
    contract suite); ``head_in_conv`` is built only when its output is asked for."""
    model = EfficientViT('efficientvit-b1', out_indices=(0, 1, 2, 3, 4)).eval()
    assert model.head_in_conv is None and model.out_channels == (16, 32, 64, 128, 256)
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 320, 256))
    assert [tuple(o.shape) for o in outs] == [(1, c, 320 // s, 256 // s) for c, s in zip(
        (16, 32, 64, 128, 256), (2, 4, 8, 16, 32))]
    # SSDLite uses strides 16 and 32; negative indices count from the end (5 = head_in_conv)
    ssd = EfficientViT('efficientvit-b1', out_indices=(3, 4)).eval()
    with torch.no_grad():
        outs = ssd(torch.randn(1, 3, 320, 320))
    assert [tuple(o.shape) for o in outs] == [(1, 128, 20, 20), (1, 256, 10, 10)]
    cls = EfficientViT('efficientvit-b1', out_indices=-1)
    assert cls.out_indices == (5, ) and cls.out_channels == (1536, )


def test_detection_backbone_loads_classification_weights_with_norm_eval():
    """Without ``head_in_conv`` the classification checkpoint still loads (frozen_stages: the
    contract suite)."""
    model = EfficientViT('efficientvit-b1', 'kcr', out_indices=(1, 2, 3, 4), frozen_stages=1,
                         norm_eval=True)
    missing, unexpected = model.load_converted(backbone_state('efficientvit-b1'))
    assert not unexpected
    model.train()
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


# ------------------------------------------------------------------ bad input
def _spec(arch='efficientvit-b0'):
    return random_gates_(EfficientViT(arch, 'kcr'), seed=0).export_subnet().to_dict()


def test_subnet_of_another_depth_is_refused():
    """A B1 subnet (7 blocks) on a B0 (4 blocks), with the arch name forced to match."""
    d = _spec('efficientvit-b1')
    d['arch'] = 'efficientvit-b0'
    with pytest.raises(SubnetError, match=r'not in the backbone: stages\.2\.blocks\.3'):
        EfficientViT('efficientvit-b0', subnet=d)


def test_lite_mla_needs_a_kept_channel():
    with pytest.raises(ValueError, match='at least one'):
        LiteMLA(16, 16, dim=8, keep=[])
