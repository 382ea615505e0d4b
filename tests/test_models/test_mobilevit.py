"""MobileViT family: what is particular to it (the family contract, timm equivalence included,
is tests/test_models/test_backbone_contract.py): conversion errors, the projection rule of pruned
subnets and their exact FLOPs, the projection's gate sample in training, cost terms, SSDLite and
per-arch outputs, init, norm_eval."""
import copy

import pytest
import torch
import torch.nn as nn

from _backbones import flops, rand_input, random_gates_, timm_model
from mmdcs.models.backbones.base import count_params
from mmdcs.models.backbones.mobilevit import MobileViT, MobileViTBlock, convert_timm

#: the last transformer layer of each MobileViT block (its gate also masks the projection)
LAST_LAYERS = ('stages.2.1.transformer.1.mlp', 'stages.3.1.transformer.3.mlp',
               'stages.4.1.transformer.2.mlp')


def _layers(model):
    return [layer for blk in model.mobilevit_blocks().values() for layer in blk.transformer]


# ------------------------------------------------------------------ conversion
def test_convert_timm_refuses_unknown_arch_and_foreign_keys():
    sd = timm_model('mobilevit-xs').state_dict()
    with pytest.raises(ValueError, match='mobilevit-xs.*mobilevit-s'):
        convert_timm(sd, 'mobilevit-xxs')
    with pytest.raises(KeyError, match='head.norm'):
        convert_timm(dict(sd, **{'head.norm.weight': torch.ones(384)}), 'mobilevit-xs')
    with pytest.raises(ValueError, match='not a mobilevit_s'):
        convert_timm(sd, 'mobilevit-s')


# ------------------------------------------------------------------ pruned subnets
def test_pruned_subnet_prunes_the_projection_and_shrinks():
    """The projection rule (each block's ``conv_proj`` reads the kept channels of its last
    layer) and exact FLOPs of two random-gate subnets (pruned = supernet: the contract suite)."""
    arch = 'mobilevit-xs'
    x256 = rand_input(1, 3, 256, 256, seed=4)
    base = MobileViT(arch, 'baseline').eval()
    full = sum(layer.mlp.in_features for layer in _layers(base))
    sizes = [(count_params(base), flops(base, x256), full)]
    # Linear_θ of the DCS layers (D×D per pixel), on top of the baseline; at 256: H·W per block
    hwd = [(32 * 32, 96, 2), (16 * 16, 120, 4), (8 * 8, 144, 3)]
    theta_flops = sum(hw * d * d * n for hw, d, n in hwd)
    for i, shift in enumerate((0.4, -0.3)):
        sup = random_gates_(MobileViT(arch, 'dcs').eval(), seed=10 + i, alpha_shift=shift,
                            theta_std=0.3)
        spec = sup.export_subnet()
        assert 0 < spec.kept_ratio < 1
        # the last layer of each block really prunes the projection input
        last = [b for b in spec.blocks if b.name in LAST_LAYERS]
        assert len(last) == 3 and all(b.kept < b.dim for b in last)
        pruned = MobileViT(arch=arch, subnet=spec).eval()
        assert isinstance(pruned.stages[2][1], MobileViTBlock)
        for b in last:
            blk = pruned.get_submodule(b.name[:-len('.transformer.1.mlp')])
            assert blk.conv_proj.conv.weight.shape[1] == b.kept
        n_flops = flops(pruned, x256)
        kept = sum(b.kept for b in spec.blocks)
        terms = sup.cost_terms()
        dropped = sum(t.flops_per_channel * (b.dim - b.kept) for t, b in zip(terms, spec.blocks))
        # exact: the MLPs and the projection convs are the only layers whose shape depends on D̃
        assert n_flops == sizes[0][1] + theta_flops - dropped
        assert sup.cost_model('flops').at_kept() == pytest.approx(
            sum(t.flops_per_channel * b.kept for t, b in zip(terms, spec.blocks)))
        sizes.append((count_params(pruned), n_flops, kept))
    params, n_flops, kept = zip(*sizes)
    assert kept[0] > kept[1] > kept[2]
    assert params[0] > params[1] > params[2]
    assert n_flops[1] > n_flops[2] and n_flops[0] > n_flops[2]


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
        out = sup(rand_input(2, 3, 64, 64, seed=8))[-1]
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


# ------------------------------------------------------------------ outputs
def test_ssdlite_outputs_and_out_channels_of_each_arch():
    """The SSDLite setting (every index and shape at odd sizes: the contract suite)."""
    model = MobileViT('mobilevit-xs', out_indices=(3, 4)).eval()
    with torch.no_grad():
        outs = model(rand_input(1, 3, 320, 320))
        assert [o.shape for o in outs] == [(1, 80, 20, 20), (1, 384, 10, 10)]
        model = MobileViT('mobilevit-s', out_indices=(0, 1, 2, 3, 4)).eval()
        outs = model(rand_input(1, 3, 256, 192))
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
        out = m.eval()(rand_input(1, 3, 512, 512))[-1]
    assert out.shape == (1, 384, 16, 16) and torch.isfinite(out).all() and out.std() > 0
    out = m.train()(rand_input(2, 3, 96, 96))[-1]
    assert torch.isfinite(out).all()


def test_norm_eval_keeps_batchnorm_in_eval_mode():
    """(frozen_stages: the contract suite.)"""
    m = MobileViT('mobilevit-xs', 'kcr', frozen_stages=2, norm_eval=True).train()
    assert all(p.requires_grad for p in m.stages[2].parameters())
    assert not any(x.training for x in m.modules() if isinstance(x, nn.BatchNorm2d))
    assert m.stages[3][1].transformer[0].training
