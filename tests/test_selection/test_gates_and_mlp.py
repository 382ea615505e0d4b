"""The method core: gates, selectors, gated/pruned MLP, DCS attention, subnet, cost."""
import json

import pytest
import torch
import torch.nn as nn

from mmdcs.selection import (BinaryGumbelGate, ChannelSelector, CostModel, CostTerm,
                             DCSAttention, GatedMLP, PrunedMLP, QKChannelSelector, SubnetError,
                             SubnetSpec, apply_subnet_, arch_parameters, export_subnet,
                             prune_state_dict, selector_layout, set_temperature)
from _tools import assert_close_scaled  # noqa: E402 (tests/ is on sys.path)


def test_gate_forward_is_exactly_binary_and_gradient_reaches_logits():
    torch.manual_seed(0)
    gate = BinaryGumbelGate(tau=4.5).train()
    logits = torch.randn(64, 33, requires_grad=True)
    out = gate(logits)
    assert set(out.unique().tolist()) <= {0.0, 1.0}
    assert ((out == 0) | (out == 1)).all()
    (out * torch.randn_like(out)).sum().backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0


def test_gate_eval_is_deterministic_sign():
    gate = BinaryGumbelGate().eval()
    logits = torch.tensor([-2., -1e-6, 0., 1e-6, 3.])
    assert gate(logits).tolist() == [0., 0., 0., 1., 1.]
    assert torch.equal(gate(logits), gate(logits))


def test_gate_open_probability_is_sigmoid_of_logit_whatever_tau():
    torch.manual_seed(0)
    for tau in (0.5, 4.5):
        gate = BinaryGumbelGate(tau).train()
        logits = torch.full((200000, ), 1.0)
        p = gate(logits).mean().item()
        assert abs(p - torch.sigmoid(torch.tensor(1.0)).item()) < 0.01


def test_gate_rejects_bad_tau():
    with pytest.raises(ValueError, match='temperature'):
        BinaryGumbelGate(0.)
    g = BinaryGumbelGate()
    with pytest.raises(ValueError):
        g.set_tau(-1)


def test_set_temperature_reaches_every_gate_and_is_in_state_dict():
    m = nn.Sequential(GatedMLP(8, 16), DCSAttention(8, 2, qk_select='shared'))
    assert set_temperature(m, 1.25) == 2
    sd = m.state_dict()
    taus = [v for k, v in sd.items() if k.endswith('gate.tau')]
    assert len(taus) == 2 and all(float(t) == 1.25 for t in taus)


def test_gated_mlp_without_selector_is_plain_mlp():
    torch.manual_seed(0)
    m = GatedMLP(8, 16, select=False).eval()
    x = torch.randn(2, 5, 8)
    ref = m.fc2(m.act(m.fc1(x)))
    assert torch.allclose(m(x), ref)


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_pruned_mlp_equals_gated_mlp_in_eval(seed):
    torch.manual_seed(seed)
    m = GatedMLP(32, 64).eval()
    with torch.no_grad():
        m.select.alpha.normal_()
    keep = m.select.keep_indices()
    assert 0 < keep.numel() < 32
    p = m.pruned(keep).eval()
    x = torch.randn(3, 7, 32)
    assert_close_scaled(m(x), p(x), 1e-5)
    # the update is zero outside the kept channels
    mask = torch.ones(32, dtype=torch.bool)
    mask[keep] = False
    assert p(x)[..., mask].abs().max() == 0
    assert sum(t.numel() for t in p.parameters()) < sum(t.numel() for t in m.parameters())


def test_pruned_mlp_refuses_empty_keep():
    with pytest.raises(ValueError, match='at least one'):
        PrunedMLP(8, 16, [])


def test_qk_selector_starts_open_and_trains():
    sel = QKChannelSelector(8, 12, separate=True).eval()
    mq, mk = sel(torch.randn(2, 5, 8) * 100)
    assert mq.shape == (2, 5, 12) and mk.shape == (2, 5, 12)
    assert mq.min() == 1 and mk.min() == 1


def _attn_ref(attn: DCSAttention, x, mask=None):
    """Attention written out by hand (softmax((Q⊙M)(K⊙M)ᵀ/sqrt(d))·V)."""
    B, N, _ = x.shape
    q, k, v = attn.qkv(x).chunk(3, dim=-1)
    if mask is not None:
        q, k = q * mask, k * mask
    h, d = attn.num_heads, attn.head_dim
    q, k, v = (t.reshape(B, N, h, d).transpose(1, 2) for t in (q, k, v))
    w = ((q @ k.transpose(-2, -1)) / d**0.5).softmax(-1)
    return attn.proj((w @ v).transpose(1, 2).reshape(B, N, h * d))


def test_dcs_attention_masks_q_and_k_per_token():
    torch.manual_seed(0)
    attn = DCSAttention(16, 4, qk_select='shared').eval()
    with torch.no_grad():
        attn.qk_select.theta.weight.normal_()
        attn.qk_select.theta.bias.zero_()
    x = torch.randn(2, 6, 16)
    mask = (attn.qk_select.theta(x) > 0).float()
    assert 0 < mask.mean() < 1
    assert_close_scaled(attn(x), _attn_ref(attn, x, mask), 1e-5)
    # record_attn gives the same output and rows that sum to one
    attn.record_attn = True
    assert_close_scaled(attn(x), _attn_ref(attn, x, mask), 1e-5)
    assert torch.allclose(attn.last_attn.sum(-1), torch.ones(2, 4, 6), atol=1e-5)


def test_dcs_attention_open_gates_equal_plain_attention():
    torch.manual_seed(0)
    plain = DCSAttention(16, 4).eval()
    dcs = DCSAttention(16, 4, qk_select='shared').eval()
    dcs.load_state_dict(plain.state_dict(), strict=False)
    x = torch.randn(2, 6, 16)
    assert_close_scaled(plain(x), dcs(x), 1e-5)
    assert_close_scaled(plain(x), _attn_ref(plain, x), 1e-5)


def test_dcs_attention_bad_mode():
    with pytest.raises(ValueError, match='qk_select'):
        DCSAttention(16, 4, qk_select='both')


class _Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([GatedMLP(16, 32) for _ in range(3)])
        self.attn = DCSAttention(16, 4, qk_select='shared')

    def forward(self, x):
        x = x + self.attn(x)
        for b in self.blocks:
            x = x + b(x)
        return x


def _random_alpha(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in arch_parameters(model):
            p.copy_(torch.randn(p.shape, generator=g))


def test_export_apply_roundtrip_equals_supernet(tmp_path):
    torch.manual_seed(0)
    model = _Tiny().eval()
    _random_alpha(model)
    x = torch.randn(2, 5, 16)
    ref = model(x)
    spec = export_subnet(model, 'tiny', 'a', 'dcs', note='x')
    path = tmp_path / 'subnet.json'
    spec.save(str(path))
    spec2 = SubnetSpec.load(str(path))
    assert spec2.to_dict() == spec.to_dict()
    assert json.loads(path.read_text())['blocks'][0]['kept'] == spec.blocks[0].kept
    spec2.check('tiny', 'a', selector_layout(model), 'dcs')
    state = prune_state_dict(model.state_dict(), spec2, _Tiny)
    pruned = apply_subnet_(_Tiny(), spec2).eval()
    pruned.load_state_dict(state)
    assert_close_scaled(pruned(x), ref, 1e-5)
    assert not arch_parameters(pruned)


@pytest.mark.parametrize('mutate, message', [
    (lambda d: d.update(family='swin'), "'swin' family"),
    (lambda d: d.update(arch='b'), "arch 'b'"),
    (lambda d: d['blocks'].pop(), 'missing in the subnet: blocks.2'),
    (lambda d: d['blocks'][1].update(keep=[0, 99], kept=2), 'block blocks.1: channel index 99'),
    (lambda d: d['blocks'][0].update(keep=[], kept=0), 'block blocks.0: D̃ = 0'),
    (lambda d: d['blocks'][2].update(dim=8), 'block blocks.2: the subnet says D = 8'),
    (lambda d: d.update(format='x'), 'not an mmdcs subnet'),
    # an index is an integer: 0.7 / 1.2 are refused, never cut to 0 / 1
    (lambda d: d['blocks'][0].update(keep=[0.7] + d['blocks'][0]['keep'][1:]),
     '"keep" must be an integer, got 0.7'),
    (lambda d: d['blocks'][1]['keep'].append(1.2), '"keep" must be an integer, got 1.2'),
])
def test_subnet_check_refuses_what_does_not_fit(mutate, message):
    model = _Tiny()
    _random_alpha(model)
    d = export_subnet(model, 'tiny', 'a', 'dcs').to_dict()
    mutate(d)
    with pytest.raises(SubnetError, match=message.replace('(', r'\(')):
        SubnetSpec.from_dict(d).check('tiny', 'a', selector_layout(model), 'dcs')


def test_malformed_subnet_files_are_one_line(tmp_path):
    """The subnet reader (and every JSON reader: :mod:`mmdcs.selection.jsonio`) refuses in one
    line naming the file what Python's reader accepted or tripped on: 1e400 / Infinity (an
    infinite width), a "meta" or "kept" of another type, 200,000-deep nesting
    (RecursionError), a byte that is not UTF-8."""
    model = _Tiny()
    text = json.dumps(export_subnet(model, 'tiny', 'a', 'dcs').to_dict())
    d = json.loads(text)
    bad = {'huge.json': text.replace('"dim": 16', '"dim": 1e400', 1),
           'infinity.json': text.replace('"dim": 16', '"dim": Infinity', 1),
           'deep.json': '[' * 200000 + ']' * 200000, 'empty.json': ''}
    for name, key, value in (('meta-str', 'meta', 'abc'), ('meta-list', 'meta', [1, 2]),
                             ('kept-str', 'kept', 'abc'), ('kept-null', 'kept', None)):
        mutated = json.loads(text)
        (mutated if key == 'meta' else mutated['blocks'][0])[key] = value
        bad[f'{name}.json'] = json.dumps(mutated)
    for name, content in bad.items():
        (tmp_path / name).write_text(content)
    (tmp_path / 'bytes.json').write_bytes(text.encode()[:30] + b'\xff' + text.encode()[30:])
    for name in list(bad) + ['bytes.json']:
        path = str(tmp_path / name)
        with pytest.raises(SubnetError) as e:
            SubnetSpec.load(path)
        assert str(e.value).startswith(f'{path}: ') and '\n' not in str(e.value), str(e.value)
    assert SubnetSpec.from_dict(d).to_dict() == d


def test_cost_model_paper_and_flops_follow_expected_kept():
    sel = ChannelSelector(8, gate_init=0.)
    tau = float(sel.gate.tau)
    d = 8 * torch.sigmoid(torch.tensor(0.) / tau)
    paper = CostModel([CostTerm(sel, mlp_layers=2, conv_hwc=10.)], 'paper')
    assert torch.isclose(paper.expected(), 2 * (2 * d * d + d) + (1 + d) * 10.)
    flops = CostModel([CostTerm(sel, flops_per_channel=5.)], 'flops', const_flops=100.)
    assert torch.isclose(flops.expected(), 5 * d + 100.)
    flops.log_cost().backward()
    assert sel.alpha.grad is not None and (sel.alpha.grad > 0).all()
    with torch.no_grad():
        sel.alpha[:3] = -1.
        sel.alpha[3:] = 1.
    assert flops.at_kept() == 5 * 5 + 100.
    with pytest.raises(ValueError):
        CostModel([CostTerm(sel)], 'macs')


def test_gradients_alpha_from_loss_theta_from_loss_only():
    """α gets gradients from the task loss (through the gate) and from the cost term; Linear_θ
    only from the task loss (the cost model does not see it)."""
    torch.manual_seed(0)
    model = _Tiny().train()
    x = torch.randn(2, 5, 16)
    model(x).pow(2).mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in arch_parameters(model))
    assert model.attn.qk_select.theta.weight.grad.abs().sum() > 0
    model.zero_grad()
    terms = [CostTerm(b.select, mlp_layers=2) for b in model.blocks]
    CostModel(terms).log_cost().backward()
    assert all(p.grad.abs().sum() > 0 for p in arch_parameters(model))
    assert model.attn.qk_select.theta.weight.grad is None
    assert all(p.grad is None for n, p in model.named_parameters() if 'fc' in n)
