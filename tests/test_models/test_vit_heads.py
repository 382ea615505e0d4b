"""Head selection on ViT (``select_heads=True``, method.md §2.7): a gate per head beside the
channel gates; the exported subnet lists the kept heads (format 3; formats 1 and 2 still load);
the pruned attention is physically narrower (rows of q, k, v and of Linear_θ, columns of proj)
and computes what the supernet computes in eval, at non-square and padded sizes; its FLOPs
and parameters drop by exactly a head's share (mmengine's count); ONNX parity; bad input is
one line naming the block and the key."""
import copy
import json

import pytest
import torch

from _tools import assert_close_scaled
from mmdcs.models.backbones.vit import ViT
from mmdcs.models.counting import count_flops, count_params
from mmdcs.selection import (SUBNET_FORMAT, BlockSelection, ChannelSelector, DCSAttention,
                             SubnetError, SubnetSpec, apply_subnet_, arch_parameters,
                             head_selectors, prune_state_dict)

IMG = 64


def _supernet(seed=0, qk_mask='shared', out_type='cls_token', **kw):
    """A DeiT-Tiny DCS supernet with head selection, random α (some heads and channels closed,
    some blocks with every head α ≤ 0) and random Linear_θ (masks that vary per token)."""
    torch.manual_seed(seed)
    m = ViT('deit-tiny', variant='dcs', select_heads=True, img_size=IMG, qk_mask=qk_mask,
            out_type=out_type, **kw)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith('alpha') or 'theta' in name:
                p.copy_(torch.randn(p.shape, generator=g) * 2)
    return m.eval()


def _pruned(supernet, spec, qk_mask='shared'):
    """The pruned network of ``spec`` built from the file's data, with the supernet's weights
    sliced (prune_state_dict)."""
    state = prune_state_dict(supernet.state_dict(), spec, lambda: copy.deepcopy(supernet))
    p = ViT('deit-tiny', subnet=spec.to_dict(), img_size=IMG, out_type=supernet.out_type,
            qk_mask=qk_mask)
    p.load_state_dict(state, strict=True)
    return p.eval()


@pytest.mark.parametrize('qk_mask', ['shared', 'separate'])
@pytest.mark.parametrize('size,out_type', [((48, 80), 'cls_token'), ((40, 72), 'featmap')])
def test_head_pruned_equals_supernet_in_eval(qk_mask, size, out_type):
    m = _supernet(1, qk_mask, out_type)
    spec = m.export_subnet()
    kept = [b.kept for b in spec.heads]
    assert len(spec.heads) == 12 and min(kept) >= 1 and sum(kept) < 36  # some heads pruned
    p = _pruned(m, spec, qk_mask=qk_mask)
    for name, b in ((h.name, h) for h in spec.heads):
        attn = p.get_submodule(name)
        assert attn.num_heads == b.kept and attn.head_select is None
        assert attn.qkv.weight.shape == (3 * 64 * b.kept, 192)
        assert attn.proj.weight.shape == (192, 64 * b.kept)
        rows = 64 * b.kept * (2 if qk_mask == 'separate' else 1)
        assert attn.qk_select.theta.weight.shape == (rows, 192)
    x = torch.randn((2, 3) + size, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref, got = m(x)[0], p(x)[0]
    assert_close_scaled(got, ref, 1e-5, f'{qk_mask} {size}')
    # a closed head matters: opening every head changes the supernet's output
    with torch.no_grad():
        for sel in head_selectors(m).values():
            sel.alpha.abs_()
        assert (m(x)[0] - ref).abs().max() > 1e-3 * ref.abs().max()


def test_every_head_closed_keeps_the_head_of_largest_alpha():
    m = _supernet(0)
    with torch.no_grad():
        m.blocks[4].attn.head_select.alpha.copy_(torch.tensor([-3., -.5, -2.]))
    spec = m.export_subnet()
    assert {b.name: b.keep for b in spec.heads}['blocks.4.attn'] == [1]
    p = _pruned(m, spec)
    x = torch.randn(1, 3, IMG, IMG)
    with torch.no_grad():
        assert_close_scaled(p(x)[0], m(x)[0], 1e-5)


def test_head_alpha_is_an_architecture_parameter_with_a_gradient():
    m = _supernet(0).train()
    sels = head_selectors(m)
    assert len(sels) == 12 and all(isinstance(s, ChannelSelector) and s.dim == 3
                                   for s in sels.values())
    arch = {id(p) for p in arch_parameters(m)}
    assert all(id(s.alpha) in arch for s in sels.values())
    m(torch.randn(2, 3, IMG, IMG))[0].square().sum().backward()
    assert all(s.alpha.grad is not None and s.alpha.grad.abs().sum() > 0 for s in sels.values())
    # E[kept heads] = Σ sigmoid(α)
    s = sels['blocks.0.attn']
    assert_close_scaled(s.expected_kept().detach(), torch.sigmoid(s.alpha.detach()).sum(), 1e-6)


def test_default_is_the_papers_network():
    m = ViT('deit-tiny', variant='dcs', img_size=IMG)
    assert not head_selectors(m)
    assert all(b.attn.head_select is None for b in m.blocks)
    spec = m.export_subnet()
    assert spec.heads == [] and 'heads' not in spec.to_dict()


def test_flops_and_params_drop_by_exactly_the_pruned_heads():
    """mmengine's count of the head-pruned network (MLPs all kept) = the full network's minus,
    per pruned head: qkv 3·N·D·d, the products 2·N²·d, proj N·d·D, Linear_θ N·D·d MACs; and
    3·d·(D+1) + d·D + d·(D+1) parameters (d = 64, D = 192, N = 1 + 16 tokens)."""
    m = _supernet(3)
    full = m.export_subnet()
    blocks = [BlockSelection(b.name, b.dim, list(range(b.dim))) for b in full.blocks]
    heads = [BlockSelection(f'blocks.{i}.attn', 3, [0, 2] if i % 2 else [1]) for i in range(12)]
    pruned_heads = sum(3 - h.kept for h in heads)
    spec = SubnetSpec('vit', 'deit-tiny', 'dcs', blocks, {}, [], heads)
    allheads = SubnetSpec('vit', 'deit-tiny', 'dcs', blocks, {}, [], [])
    p, ref = _pruned(m, spec), _pruned(m, allheads)
    N, D, d = 1 + (IMG // 16)**2, 192, 64
    per_head_macs = 3 * N * D * d + 2 * N * N * d + N * d * D + N * D * d
    assert count_flops(ref, IMG) - count_flops(p, IMG) == pruned_heads * per_head_macs
    per_head_params = 3 * d * (D + 1) + d * D + d * (D + 1)
    assert count_params(ref) - count_params(p) == pruned_heads * per_head_params


def test_subnet_round_trip_and_older_formats(tmp_path):
    m = _supernet(1)
    spec = m.export_subnet(multiple_of=8)
    d = spec.to_dict()
    assert d['format'] == SUBNET_FORMAT == 'mmdcs.subnet/3'
    assert all('pad' not in h for h in d['heads'])  # heads are never rounded up
    path = str(tmp_path / 'subnet.json')
    spec.save(path)
    back = SubnetSpec.load(path)
    assert back.to_dict() == d
    # a format-2 file (no heads) still loads and builds the network with every head
    old = dict(d, format='mmdcs.subnet/2')
    old.pop('heads')
    p = ViT('deit-tiny', subnet=old, img_size=IMG)
    assert all(b.attn.num_heads == 3 for b in p.blocks)
    old1 = dict(old, format='mmdcs.subnet/1')
    assert SubnetSpec.from_dict(old1).heads == []


@pytest.mark.parametrize('edit,message', [
    (lambda h: h.__setitem__('keep', [0, 3]), 'heads entry blocks.2.attn: head index 3 is out '
     'of range [0, 3)'),
    (lambda h: h.__setitem__('keep', []), 'heads entry blocks.2.attn: no head kept'),
    (lambda h: h.__setitem__('keep', [1, 1]), 'heads entry blocks.2.attn: repeated head'),
    (lambda h: h.__setitem__('dim', 4), 'heads entry blocks.2.attn: the subnet says heads = 4'),
    (lambda h: h.__setitem__('name', 'blocks.2.mlp'), 'heads entry blocks.2.mlp: the backbone '
     'has no attention with prunable heads there'),
])
def test_bad_heads_are_one_line_naming_the_block_and_the_key(edit, message):
    d = _supernet(1).export_subnet().to_dict()
    entry = next(h for h in d['heads'] if h['name'] == 'blocks.2.attn')
    edit(entry)
    entry.pop('kept')
    with pytest.raises(SubnetError) as e:
        ViT('deit-tiny', subnet=d, img_size=IMG)
    # "heads entry <attention>": the key of the file and the block
    assert message in str(e.value) and '\n' not in str(e.value)


def test_select_heads_on_a_backbone_without_heads_is_one_line():
    from mmdcs.models.backbones.dynamic_vit import DynamicViT
    with pytest.raises(ValueError) as e:  # a peer method's backbone (supports_heads False)
        DynamicViT('deit-s', select_heads=True)
    assert ("select_heads=True, but DynamicViT (family 'vit') has no head selection"
            in str(e.value))
    assert '\n' not in str(e.value)
    with pytest.raises(ValueError, match='select_heads needs a variant with channel selection'):
        ViT('deit-tiny', variant='baseline', select_heads=True)


def test_heads_of_a_subnet_on_a_family_without_heads_are_refused(monkeypatch):
    from mmdcs.models.backbones.swin import Swin
    sw = Swin('swin-t', variant='kcr', img_size=64)
    spec = sw.export_subnet()
    spec.heads = [BlockSelection('layers.0.blocks.0.attn', 3, [0])]
    # a family that declares no head selection: even a real attention path is refused
    monkeypatch.setattr(Swin, 'supports_heads', False)
    with pytest.raises(SubnetError, match='has no attention with prunable heads there'):
        Swin('swin-t', subnet=spec, img_size=64)


def test_prune_heads_refuses_bad_heads():
    a = DCSAttention(64, 4)
    for bad in ([], [4], [1, 1]):
        with pytest.raises(ValueError, match='prune_heads_: bad heads'):
            copy.deepcopy(a).prune_heads_(bad)


def test_onnx_parity_of_a_head_pruned_subnet(tmp_path):
    pytest.importorskip('onnxruntime')
    pytest.importorskip('onnxscript')
    from mmdcs.apis.deploy import ExportWrapper, OrtModel, export_and_check, set_export_mode_
    m = _supernet(1)
    spec = m.export_subnet()
    p = set_export_mode_(_pruned(m, spec))
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    out = str(tmp_path / 'heads.onnx')
    res = export_and_check(ExportWrapper(p, 'backbone'), x, out)
    assert all(r['ok'] for r in res['parity'])
    with torch.no_grad():
        ref = p(x)
    assert_close_scaled(OrtModel(out)(x)[0], ref[0], 1e-4)
    import onnx
    # the graph's attention is narrow (the exporter folds the weights' transposes into
    # constants of other names; the biases keep theirs)
    shapes = {i.name: tuple(i.dims) for i in onnx.load(out).graph.initializer}
    for h in spec.heads:
        assert shapes[f'net.{h.name}.qkv.bias'] == (3 * 64 * h.kept, )
        assert shapes[f'net.{h.name}.qk_select.theta.bias'] == (64 * h.kept, )
    assert sum(h.kept for h in spec.heads) < 36


@pytest.mark.parametrize('resource', ['flops', 'params'])
def test_calibrated_cost_prices_heads_exactly(resource):
    """calibrate_cost's count of exported subnets (heads and MLP channels pruned together) is
    mmengine's count of the pruned network, exactly; a head's coefficient is its closed form."""
    from mmdcs.models.counting import calibrate_cost
    from mmdcs.selection.budget import CHANNELS, HEADS
    m = _supernet(4)
    cost = calibrate_cost(m, resource, (IMG, IMG))
    assert set(cost.head_dims) == {f'blocks.{i}.attn' for i in range(12)}
    N, D, d = 1 + (IMG // 16)**2, 192, 64
    per_head = (3 * N * D * d + 2 * N * N * d + N * d * D + N * D * d if resource == 'flops'
                else 3 * d * (D + 1) + d * D + d * (D + 1))
    assert all(c == per_head for c in cost.head_coef.values())
    assert cost.unit_dims()[(HEADS, 'blocks.0.attn')] == 3
    assert cost.marginal((HEADS, 'blocks.0.attn'), {}) == per_head
    for seed in (4, 5):
        m = _supernet(seed)
        spec = m.export_subnet()
        p = copy.deepcopy(m)
        apply_subnet_(p, spec)
        widths = {(CHANNELS, b.name): b.kept for b in spec.blocks}
        widths.update(((HEADS, h.name), h.kept) for h in spec.heads)
        got = count_flops(p, IMG) if resource == 'flops' else count_params(p)
        assert cost.count(widths) == got
    # the expected count: E[kept heads] = Σ sigmoid(α) enters linearly, with a gradient
    sels = {n: mod.select for n, mod in m.named_modules() if hasattr(mod, 'pruned')}
    heads = head_selectors(m)
    e = cost.expected(sels, 'gate', heads=heads)
    e.backward()
    manual = cost.at({n: float(s.expected_kept().detach()) for n, s in sels.items()}, {},
                     {k: float(s.expected_kept().detach()) for k, s in heads.items()})
    assert_close_scaled(e.detach(), torch.tensor(manual), 1e-6)  # float32 sums
    assert all(s.alpha.grad is not None for s in heads.values())


def test_projection_to_a_flops_budget_ranks_heads_with_channels():
    """The end of a search (project_to_budget) puts {α > 0} of channels and heads on the
    budget: the exported subnet's mmengine FLOPs within 1 % below the target."""
    from mmdcs.models.counting import calibrate_cost
    from mmdcs.selection.budget_search import project_to_budget
    m = _supernet(6)
    with torch.no_grad():  # start from everything kept
        for p in arch_parameters(m):
            p.abs_()
    cost = calibrate_cost(m, 'flops', (IMG, IMG))
    sels = {n: mod.select for n, mod in m.named_modules() if hasattr(mod, 'pruned')}
    budget = 0.7 * cost.baseline
    rep = project_to_budget(cost, sels, budget, {}, head_selectors=head_selectors(m))
    assert sum(rep['heads_kept'].values()) < 36 and min(rep['heads_kept'].values()) >= 1
    spec = m.export_subnet()
    p = copy.deepcopy(m)
    apply_subnet_(p, spec)
    flops = count_flops(p, IMG)
    assert flops == rep['after']
    assert 0.99 * budget <= flops <= budget


def test_magnitude_scores_of_heads():
    """A head's magnitude score is the L2 norm of its q, k, v rows (and biases) and proj
    columns, computed here by hand from the slices."""
    from mmdcs.selection.budget import head_magnitude_scores
    m = _supernet(2)
    scores = head_magnitude_scores(m)
    assert set(scores) == {f'blocks.{i}.attn' for i in range(12)}
    attn = m.blocks[5].attn
    for h in range(3):
        rows = [part * 192 + h * 64 + j for part in range(3) for j in range(64)]
        cols = list(range(h * 64, (h + 1) * 64))
        ref = (attn.qkv.weight[rows].pow(2).sum() + attn.qkv.bias[rows].pow(2).sum()
               + attn.proj.weight[:, cols].pow(2).sum()).sqrt()
        assert_close_scaled(scores['blocks.5.attn'][h], ref, 1e-6, f'head {h}')
    # a head with larger weights scores higher
    with torch.no_grad():
        attn.proj.weight[:, :64] *= 10
    assert int(head_magnitude_scores(m)['blocks.5.attn'].argmax()) == 0


@pytest.mark.parametrize('method', ['alpha', 'magnitude'])
@pytest.mark.parametrize('target', [0.5, 0.7])
def test_export_to_a_flops_budget_ranks_heads_within_one_percent(method, target):
    """budget_subnet with the scorer's head scores: heads pruned with channels, the built
    network's mmengine FLOPs within ±1 % of the target (of the baseline's)."""
    from mmdcs.models.counting import calibrate_cost
    from mmdcs.selection import budget_subnet
    from mmdcs.selection.importance import get_scorer
    m = _supernet(7)
    cost = calibrate_cost(m, 'flops', (IMG, IMG))
    scorer = get_scorer(method)
    scores, hidden = scorer(m)
    spec = budget_subnet(m, 'vit', 'deit-tiny', 'dcs', scores, cost, target,
                         hidden_scores=hidden, normalize=scorer.normalize,
                         head_scores=scorer.heads(m))
    assert spec.heads and sum(h.kept for h in spec.heads) < 36
    assert 'heads' in spec.meta['budget']['ranked']
    p = _pruned(m, spec)
    flops = count_flops(p, IMG)
    assert flops == spec.meta['budget']['achieved']
    assert abs(flops / cost.baseline - target) <= 0.01


def test_contract_declares_head_selection(monkeypatch):
    """supports_heads is part of the contract: every family declares it (the base's False:
    absent), ViT, Swin, MobileViT and EfficientViT support heads, a non-bool declaration is a
    gap."""
    from mmdcs.models.backbones.base import backbone_classes, contract_gaps
    classes = backbone_classes()
    with_heads = {'vit', 'swin', 'mobilevit', 'efficientvit'}
    assert {f for f, c in classes.items() if c.supports_heads is True} == with_heads
    assert all(c.supports_heads is False for f, c in classes.items() if f not in with_heads)
    assert not any(g.startswith('supports_heads') for g in contract_gaps(ViT))
    monkeypatch.setattr(ViT, 'supports_heads', 'yes')
    assert any(g.startswith('supports_heads:') for g in contract_gaps(ViT))


@pytest.mark.parametrize('method', ['alpha', 'magnitude'])
def test_export_api_writes_the_heads_and_builds_the_narrow_network(tmp_path, method):
    """mmdcs.apis.export.export_subnet on a select_heads config: the subnet file (format 3)
    lists the kept heads, the pruned checkpoint loads into the network built from the file, and
    the measured FLOPs are within ±1 % of the target."""
    import mmpretrain.utils
    from mmengine.config import Config

    from mmdcs.apis.export import export_subnet
    from mmdcs.apis.subnet_io import build_model
    mmpretrain.utils.register_all_modules(init_default_scope=False)
    path = str(tmp_path / 'heads.py')
    with open(path, 'w') as f:
        f.write("default_scope = 'mmpretrain'\nmodel = dict(type='ImageClassifier', "
                "backbone=dict(type='mmdcs.ViT', arch='deit-tiny', variant='dcs', img_size=32, "
                "select_heads=True), neck=None, head=dict(type='LinearClsHead', "
                "num_classes=10, in_channels=192))\n")
    torch.manual_seed(0)
    model = build_model(Config.fromfile(path).model, 'mmpretrain')
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith('alpha'):
                p.copy_(torch.randn(p.shape, generator=g).abs() + 0.1)
    ckpt = str(tmp_path / 'heads.pth')
    torch.save({'state_dict': model.state_dict()}, ckpt)
    res = export_subnet(path, ckpt, str(tmp_path / 'out'), method=method,
                        target=('flops', 0.6))
    with open(res.subnet) as f:
        data = json.load(f)
    assert data['format'] == 'mmdcs.subnet/3' and len(data['heads']) == 12
    assert sum(h['kept'] for h in data['heads']) < 36
    assert res.budget['measured']['flops']['ratio'] == pytest.approx(0.6, abs=0.01)
