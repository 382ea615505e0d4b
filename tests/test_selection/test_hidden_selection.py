"""Hidden-unit selection of the MLP (``select_hidden``), the subnet format 2 that records it, the
cost of two gates, the in-place residual update of the pruned MLP, and a low-rank Linear_θ."""
import json
import os.path as osp

import pytest
import torch
import torch.nn as nn

from mmdcs.selection import (SUBNET_FORMAT, ChannelSelector, CostModel, CostTerm, GatedMLP,
                             PrunedMLP, QKChannelSelector, SubnetError, SubnetSpec,
                             arch_parameters, export_subnet, hidden_layout, hidden_selectors,
                             mlp_residual, set_temperature)
from _tools import assert_close_scaled  # noqa: E402 (tests/ is on sys.path)

DATA = osp.join(osp.dirname(osp.dirname(__file__)), 'data')


def _random_(selector: ChannelSelector, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        selector.alpha.copy_(torch.randn(selector.alpha.shape, generator=g))


class _Net(nn.Module):
    """Two gated MLPs in a residual stream (what a backbone looks like to the export)."""

    def __init__(self, hidden=True):
        super().__init__()
        self.a = GatedMLP(16, 40, select=True, select_hidden=hidden)
        self.b = GatedMLP(16, 24, select=True, select_hidden=hidden)

    def forward(self, x):
        return mlp_residual(self.b, mlp_residual(self.a, x, x, nn.Identity()), x, nn.Identity())


def test_hidden_gate_is_an_architecture_parameter_and_gets_gradients():
    torch.manual_seed(0)
    mlp = GatedMLP(16, 40, select=True, select_hidden=True).train()
    assert mlp.hidden_select.dim == 40
    assert any(p is mlp.hidden_select.alpha for p in arch_parameters(mlp))
    assert set_temperature(mlp, 2.0) == 2  # the channel gate and the hidden gate
    mlp(torch.randn(3, 5, 16)).pow(2).sum().backward()
    assert mlp.hidden_select.alpha.grad.abs().sum() > 0
    assert mlp.select.alpha.grad.abs().sum() > 0
    # off by default: exactly the MLP of before (no extra parameter)
    assert GatedMLP(16, 40).hidden_select is None


@pytest.mark.parametrize('pad', [False, True])
def test_hidden_pruned_mlp_is_narrower_and_equals_the_supernet(pad):
    torch.manual_seed(0)
    net = _Net().eval()
    for i, m in enumerate((net.a, net.b)):
        _random_(m.select, 2 * i)
        _random_(m.hidden_select, 2 * i + 1)
    x = torch.randn(2, 7, 16)
    with torch.no_grad():
        ref = net(x)
    spec = export_subnet(net, 'toy', 'toy', 'dcs', multiple_of=8 if pad else 1)
    assert [b.name for b in spec.hidden] == ['a', 'b']
    for b in spec.hidden:
        m = getattr(net, b.name)
        want = set(m.hidden_select.keep_indices().tolist())
        assert want <= set(b.keep) and set(b.keep) - want == set(b.pad)
        assert bool(b.pad) == (pad and len(want) % 8 != 0)
    from mmdcs.selection import apply_subnet_
    apply_subnet_(net, spec)
    for b in spec.hidden:
        m = getattr(net, b.name)
        assert isinstance(m, PrunedMLP)
        assert m.fc1.weight.shape == (b.kept, m.kept) and m.fc2.weight.shape == (m.kept, b.kept)
        assert m.hidden_features == b.kept < b.dim
    with torch.no_grad():
        out = net(x)
    assert_close_scaled(out, ref, 1e-5)


def test_pruned_residual_adds_in_place_and_matches_the_plain_sum():
    torch.manual_seed(0)
    mlp = GatedMLP(12, 20).eval()
    for keep in ([0, 3, 4, 9], list(range(12))):
        p = mlp.pruned(keep)
        assert p.full == (len(keep) == 12)
        x, h = torch.randn(2, 5, 12), torch.randn(2, 5, 12)
        with torch.no_grad():
            ref = x + p(h)
            out = p.residual(x.clone(), h, nn.Identity())
            assert_close_scaled(out, ref, 1e-5)
            y = x.clone()
            out = p.residual(y, h, nn.Identity(), inplace=True)
            assert_close_scaled(out, ref, 1e-5)
            if not p.full:
                assert out.data_ptr() == y.data_ptr()  # written into the residual stream
        # with gradients: never in place, and the gradient flows to x and the weights
        xg = x.clone().requires_grad_()
        out = p.residual(xg, h, nn.Identity(), inplace=True)
        assert_close_scaled(out, ref, 1e-5)
        out.sum().backward()
        assert torch.equal(xg.grad, torch.ones_like(x))
        assert p.fc1.weight.grad.abs().sum() > 0


def test_cost_of_two_gates_is_the_product_of_the_expected_widths():
    torch.manual_seed(0)
    net = _Net()
    _random_(net.a.select, 0)
    _random_(net.a.hidden_select, 1)
    terms = [CostTerm(net.a.select, hidden=net.a.hidden_select, hidden_dim=40.,
                      flops_per_pair=10.),
             CostTerm(net.b.select, hidden=None, hidden_dim=24., flops_per_pair=10.,
                      flops_per_channel=3.)]
    cm = CostModel(terms, 'flops')
    d_a, h_a = net.a.select.expected_kept(), net.a.hidden_select.expected_kept()
    d_b = net.b.select.expected_kept()
    want = 10. * d_a * h_a + 10. * d_b * 24. + 3. * d_b
    assert torch.allclose(cm.expected(), want)
    cm.expected().backward()
    assert net.a.hidden_select.alpha.grad.abs().sum() > 0
    # the deterministic subnet: exact widths
    da, ha = len(net.a.select.keep_indices()), len(net.a.hidden_select.keep_indices())
    assert cm.at_kept() == pytest.approx(10. * da * ha + 10. * 16 * 24 + 3. * 16)
    assert ha < 40
    # paper mode: the paper's MLP term scaled by H̃/H
    paper = CostModel([CostTerm(net.a.select, mlp_layers=2, hidden=net.a.hidden_select,
                                hidden_dim=40.)], 'paper')
    assert paper.at_kept() == pytest.approx(2 * (2 * da * da * ha / 40 + da))


def test_subnet_format_2_round_trip(tmp_path):
    torch.manual_seed(0)
    net = _Net()
    _random_(net.a.hidden_select, 1)
    spec = export_subnet(net, 'toy', 'toy', 'dcs', multiple_of=4, note='x')
    path = str(tmp_path / 'subnet.json')
    spec.save(path)
    d = json.load(open(path))
    assert d['format'] == SUBNET_FORMAT == 'mmdcs.subnet/3'
    assert [h['name'] for h in d['hidden']] == ['a', 'b']
    loaded = SubnetSpec.load(path)
    assert loaded.to_dict() == spec.to_dict()
    assert loaded.hidden_kept_ratio == spec.hidden_kept_ratio < 1
    # the layout check refuses a hidden entry that does not fit
    layout = {'a': 16, 'b': 16}
    loaded.check('toy', 'toy', layout, hidden_layout=hidden_layout(net))
    with pytest.raises(SubnetError, match='H = 40'):
        loaded.check('toy', 'toy', layout, hidden_layout={'a': 41, 'b': 24})
    with pytest.raises(SubnetError, match='no module with prunable hidden units'):
        loaded.check('toy', 'toy', layout, hidden_layout={'b': 24})
    d['hidden'][0]['keep'] = [0, 99]
    d['hidden'][0].pop('kept')
    d['hidden'][0].pop('pad', None)
    with pytest.raises(SubnetError, match='out of range'):
        SubnetSpec.from_dict(d).check('toy', 'toy', layout, hidden_layout=hidden_layout(net))
    d['hidden'] = [{'name': 'a'}]
    with pytest.raises(SubnetError, match='hidden entry #0 is malformed'):
        SubnetSpec.from_dict(d)


def test_a_format_1_file_still_loads():
    """tests/data/subnet_v1_deit_tiny.json was written by the export of format 1 (before this
    change): it loads, has no hidden entries, and builds its pruned ViT."""
    path = osp.join(DATA, 'subnet_v1_deit_tiny.json')
    assert json.load(open(path))['format'] == 'mmdcs.subnet/1'
    spec = SubnetSpec.load(path)
    assert spec.hidden == [] and spec.hidden_kept_ratio is None
    assert 'hidden' not in spec.to_dict()
    from mmdcs.models.backbones.vit import ViT
    from mmdcs.selection import prunable_modules, prune_state_dict
    torch.manual_seed(0)
    sup = ViT('deit-tiny', 'dcs', img_size=32).eval()
    with torch.no_grad():  # the supernet this file describes (pad channels gated off)
        for b in spec.blocks:
            alpha = torch.full((b.dim, ), -1.)
            alpha[sorted(set(b.keep) - set(b.pad))] = 1.
            prunable_modules(sup)[b.name].select.alpha.copy_(alpha)
    pruned = ViT('deit-tiny', subnet=path, img_size=32).eval()
    pruned.load_state_dict(prune_state_dict(sup.state_dict(), spec,
                                            lambda: ViT('deit-tiny', 'dcs', img_size=32)))
    assert pruned.blocks[0].mlp.kept == spec.blocks[0].kept
    assert pruned.blocks[0].mlp.hidden_features == 768  # all hidden units
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert_close_scaled(sup(x)[0], pruned(x)[0], 1e-4)


def test_low_rank_theta():
    torch.manual_seed(0)
    full = QKChannelSelector(32, 32)
    low = QKChannelSelector(32, 32, theta_rank=4)
    assert low.theta_down.weight.shape == (4, 32) and low.theta.weight.shape == (32, 4)
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert n(low) == 32 * 4 + 4 * 32 + 32 < n(full) == 32 * 32 + 32
    # every gate starts open, and the output layer gets a gradient (the input layer is random)
    x = torch.randn(2, 5, 32)
    mq, mk = low.eval()(x)
    assert bool((mq == 1).all()) and mq is mk
    low.train()
    mq, _ = low(x)
    (mq * torch.randn_like(mq)).sum().backward()
    assert low.theta.weight.grad.abs().sum() > 0
    # separate masks: the output layer writes both
    sep = QKChannelSelector(32, 16, separate=True, theta_rank=4)
    assert sep.theta.weight.shape == (32, 4)
    # a rank that saves nothing is the full layer; a bad rank is refused
    assert QKChannelSelector(8, 8, theta_rank=8).theta_down is None
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match='theta_rank'):
            QKChannelSelector(32, 32, theta_rank=bad)


def test_hidden_selectors_and_layout_of_a_model():
    net = _Net()
    assert list(hidden_selectors(net)) == ['a', 'b']
    assert hidden_layout(net) == {'a': 40, 'b': 24}
    assert hidden_selectors(_Net(hidden=False)) == {}
