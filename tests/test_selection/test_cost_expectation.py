"""The expected cost of hard binary Gumbel gates (method.md §3): P(open) = sigmoid(α) at any τ,
the papers' sigmoid(α/τ) only as an explicit option, Linear_θ of DCS a constant of the cost."""
import pytest
import torch

from mmdcs.selection import (BinaryGumbelGate, ChannelSelector, CostModel, CostTerm,
                             QKChannelSelector)


def test_monte_carlo_of_hard_gates_matches_the_expectation_at_tau_4_5():
    torch.manual_seed(0)
    sel = ChannelSelector(64, gate_init=3.0, tau=4.5).train()
    draws = torch.stack([sel().detach() for _ in range(2000)])  # exact 0/1, (2000, 64)
    assert set(draws.unique().tolist()) <= {0., 1.}
    kept = float(draws.mean())
    # sigmoid(3) = 0.953; the papers' sigmoid(3/4.5) = 0.661
    assert kept == pytest.approx(0.953, abs=0.005)
    assert float(sel.expected_kept().detach()) / 64 == pytest.approx(kept, abs=0.005)
    assert float(sel.expected_kept('paper')) / 64 == pytest.approx(0.661, abs=0.001)


@pytest.mark.parametrize('tau', [0.5, 1.0, 4.5])
def test_open_probability_is_sigmoid_alpha_at_any_tau(tau):
    torch.manual_seed(1)
    gate = BinaryGumbelGate(tau).train()
    logits = torch.tensor([-2., -0.5, 0., 1., 3.]).repeat(4000, 1)
    freq = gate(logits).mean(0)
    assert torch.allclose(freq, torch.sigmoid(logits[0]), atol=0.02)
    assert torch.allclose(gate.probs(logits[0]), torch.sigmoid(logits[0]))
    with pytest.raises(ValueError, match='expectation'):
        gate.probs(logits[0], 'mean')


def test_cost_model_default_is_the_gate_expectation_paper_only_on_request():
    sel = ChannelSelector(8, gate_init=2.0, tau=4.5)
    exact = CostModel([CostTerm(sel, flops_per_channel=5.)], 'flops')
    paper = CostModel([CostTerm(sel, flops_per_channel=5.)], 'flops', expectation='paper')
    assert float(exact.expected()) == pytest.approx(5 * 8 * float(torch.sigmoid(torch.tensor(2.))))
    assert float(paper.expected()) == pytest.approx(
        5 * 8 * float(torch.sigmoid(torch.tensor(2. / 4.5))))
    with pytest.raises(ValueError, match='expectation'):
        CostModel([CostTerm(sel)], 'flops', expectation='soft')


def test_const_is_added_in_both_modes_and_gets_no_gradient():
    sel = ChannelSelector(4, gate_init=0.)
    for mode in ('paper', 'flops'):
        a = CostModel([CostTerm(sel, mlp_layers=1, flops_per_channel=1.)], mode)
        b = CostModel([CostTerm(sel, mlp_layers=1, flops_per_channel=1.)], mode, const=7.)
        assert float(b.expected() - a.expected()) == pytest.approx(7.)


def test_classifier_counts_linear_theta_as_a_constant():
    """A DCS supernet's search cost includes Linear_θ (params in 'paper' mode, FLOPs in 'flops'
    mode), which gets no gradient from the cost; a KCR supernet (no Linear_θ) adds nothing."""
    from mmengine.registry import DefaultScope

    from mmdcs.registry import MODELS

    def build(variant, mode, expectation='gate'):
        cfg = dict(type='mmdcs.ChannelSelectionClassifier',
                   backbone=dict(type='mmdcs.ViT', arch='deit-tiny', variant=variant,
                                 img_size=32),
                   head=dict(type='LinearClsHead', num_classes=10, in_channels=192,
                             loss=dict(type='CrossEntropyLoss')),
                   cost=dict(mode=mode, weight=0.2, expectation=expectation))
        with DefaultScope.overwrite_default_scope('mmpretrain'):
            return MODELS.build(cfg)

    dcs, kcr = build('dcs', 'paper'), build('kcr', 'paper')
    thetas = [m.theta for m in dcs.backbone.modules() if isinstance(m, QKChannelSelector)]
    assert len(thetas) == 12
    theta_params = sum(p.numel() for t in thetas for p in t.parameters())
    assert theta_params == 12 * (192 * 192 + 192)
    # same α (all 3.0) on both: the difference is Linear_θ
    diff = float(dcs._cost_model.expected() - kcr._cost_model.expected())
    assert diff == pytest.approx(theta_params, rel=1e-6)
    # the expectation: sigmoid(3) of the 192 channels of each of the 12 MLPs
    d = 192 * torch.sigmoid(torch.tensor(3.))
    assert float(kcr._cost_model.expected()) == pytest.approx(float(12 * 2 * (2 * d * d + d)),
                                                              rel=1e-5)
    d_paper = 192 * torch.sigmoid(torch.tensor(3. / 4.5))
    assert float(build('kcr', 'paper', 'paper')._cost_model.expected()) == pytest.approx(
        float(12 * 2 * (2 * d_paper * d_paper + d_paper)), rel=1e-5)
    # flops mode: N·in·out per Linear_θ, N = 1 + (32/16)² = 5 tokens
    fl_dcs, fl_kcr = build('dcs', 'flops'), build('kcr', 'flops')
    diff = float(fl_dcs._cost_model.expected() - fl_kcr._cost_model.expected())
    assert diff == pytest.approx(12 * 5 * 192 * 192, rel=1e-6)
    dcs.train()
    dcs.zero_grad()
    dcs.search_terms()['loss_cost'].backward()
    assert all(t.weight.grad is None and t.bias.grad is None for t in thetas)
    assert all(p.grad is not None for p in dcs.arch_parameters())
