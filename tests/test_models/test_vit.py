"""ViT / DeiT family: what is particular to it (the family contract, timm equivalence
included, is tests/test_models/test_backbone_contract.py): timm conversion errors, the exact
FLOPs of pruned subnets, cost terms, output types, position-embedding resampling, init, gradients,
ViT-only arguments."""
import pytest
import torch
import torch.nn as nn

from _backbones import flops, randn_input, random_gates_, timm_model
from mmdcs.models.backbones.base import count_params
from mmdcs.models.backbones.vit import ViT, convert_timm
from _tools import assert_close_scaled  # noqa: E402 (tests/ is on sys.path)


# ------------------------------------------------------------------ timm conversion
def test_convert_timm_refuses_unknown_arch_and_foreign_keys():
    sd = timm_model('deit-tiny').state_dict()
    with pytest.raises(ValueError, match='deit-tiny'):
        convert_timm(sd, 'vit-l16')
    with pytest.raises(KeyError, match='fc_norm'):
        convert_timm(dict(sd, **{'fc_norm.weight': torch.ones(192)}), 'deit-tiny')
    with pytest.raises(ValueError, match='width 384'):
        convert_timm(sd, 'vit-s16')


# ------------------------------------------------------------------ pruned subnets: exact FLOPs
def test_pruned_subnet_flops_and_params_shrink_as_the_cost_model_says():
    """Two random-gate subnets (pruned = supernet is the contract suite's): the FLOPs saved are
    exactly the cost model's, parameters and FLOPs fall as D̃ falls."""
    x224 = randn_input(1, 3, 224, 224, seed=4)
    base = ViT('deit-tiny', 'baseline').eval()
    sizes = [(count_params(base), flops(base, x224), 192 * 12)]
    for i, shift in enumerate((0.7, -0.3)):
        sup = random_gates_(ViT('deit-tiny', 'dcs').eval(), seed=10 + i, alpha_shift=shift,
                            theta_bias_std=None)
        spec = sup.export_subnet()
        assert 0 < spec.kept_ratio < 1
        pruned = ViT('deit-tiny', subnet=spec).eval()
        n_flops = flops(pruned, x224)
        kept = sum(b.kept for b in spec.blocks)
        # exact: the MLPs are the only layers whose shape depends on D̃ (2·N·hidden per channel)
        # the Linear_θ of the pruned DCS model are counted on top of the baseline
        theta_flops = 12 * 197 * 192 * 192
        per_channel = sup.cost_terms()[0].flops_per_channel
        assert per_channel == 2 * 197 * 768
        assert n_flops == sizes[0][1] + theta_flops - per_channel * (192 * 12 - kept)
        assert sup.cost_model('flops').at_kept() == per_channel * kept
        sizes.append((count_params(pruned), n_flops, kept))
    params, n_flops, kept = zip(*sizes)
    assert kept[0] > kept[1] > kept[2]
    # parameters and FLOPs fall as D̃ falls (beyond the Linear_θ the DCS model adds)
    assert params[1] > params[2] and n_flops[1] > n_flops[2]
    assert params[0] > params[2] and n_flops[0] > n_flops[2]


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


# ------------------------------------------------------------------ outputs, pos embed
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
        assert_close_scaled(normed.norm(r[1]), n[1], 1e-5)
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
        assert_close_scaled(m160(x)[-1], m224(x)[-1], 1e-5)
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


# ------------------------------------------------------------------ bad input
def test_bad_vit_arguments():
    """ViT's own arguments (arch, variant, out_indices: the contract suite)."""
    with pytest.raises(ValueError, match='out_type'):
        ViT('deit-tiny', out_type='tokens')
    with pytest.raises(ValueError, match='patch_size'):
        ViT('deit-tiny', patch_size=14)
    with pytest.raises(ValueError, match='not divisible'):
        ViT('deit-tiny')(torch.randn(1, 3, 100, 112))
