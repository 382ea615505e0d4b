"""Head selection on MobileViT (``select_heads=True``, method.md §2.7): the transformer layers'
attentions are DCSAttentions (4 heads of D/4 channels), so a gate per head beside the channel
gates; the exported subnet lists the kept heads (format 3; format 2 still loads); the pruned
attention is physically narrower and computes what the supernet computes in eval at non-square
sizes (one that the 2×2 patch does not divide at some stage: the fold's interpolation); its
FLOPs and parameters drop by exactly a head's share (mmengine's count); the exact cost prices
heads; the export to a FLOPs budget with heads lands within ±1 %; magnitude head scores; ONNX
parity; bad input is one line naming the block and the key."""
import copy

import pytest
import torch

from _backbones import random_gates_, randomize_weights_
from _tools import assert_close_scaled
from mmdcs.models.backbones.mobilevit import MobileViT
from mmdcs.models.counting import calibrate_cost, count_flops, count_params
from mmdcs.selection import (SUBNET_FORMAT, BlockSelection, ChannelSelector, SubnetError,
                             SubnetSpec, apply_subnet_, arch_parameters, head_selectors,
                             prune_state_dict)

ARCH = 'mobilevit-xs'
SIZE = 64
#: the attentions of mobilevit-xs: (block, layers, D) per stage with a MobileViT block
STAGES = (('stages.2.1', 2, 96), ('stages.3.1', 4, 120), ('stages.4.1', 3, 144))
ATTNS = [f'{b}.transformer.{j}.attn' for b, n, _ in STAGES for j in range(n)]


def _supernet(seed=0, qk_mask='shared', alpha_shift=0.):
    """A MobileViT-XS DCS supernet with head selection, non-trivial weights, random α (some
    heads and channels closed) and random Linear_θ (masks that vary per token); in
    ``stages.3.1.transformer.2`` every head's α is ≤ 0."""
    torch.manual_seed(seed)
    m = MobileViT(ARCH, variant='dcs', select_heads=True, qk_mask=qk_mask)
    randomize_weights_(m, seed)
    random_gates_(m, seed + 1, alpha_shift)
    with torch.no_grad():
        m.get_submodule('stages.3.1.transformer.2.attn').head_select.alpha.copy_(
            torch.tensor([-3., -.5, -2., -1.]))
    return m.eval()


def _pruned(supernet, spec, qk_mask='shared'):
    """The pruned network of ``spec`` built from the file's data, with the supernet's weights
    sliced (prune_state_dict)."""
    state = prune_state_dict(supernet.state_dict(), spec, lambda: copy.deepcopy(supernet))
    p = MobileViT(ARCH, subnet=spec.to_dict(), qk_mask=qk_mask)
    p.load_state_dict(state, strict=True)
    return p.eval()


@pytest.mark.parametrize('qk_mask', ['shared', 'separate'])
def test_head_pruned_equals_supernet_in_eval(qk_mask):
    m = _supernet(1, qk_mask)
    spec = m.export_subnet()
    kept = {b.name: b.kept for b in spec.heads}
    assert set(kept) == set(ATTNS) and min(kept.values()) >= 1
    assert sum(kept.values()) < 4 * len(ATTNS)  # some heads pruned
    assert kept['stages.3.1.transformer.2.attn'] == 1  # every α ≤ 0: the largest stays
    p = _pruned(m, spec, qk_mask)
    for (block, _, D) in STAGES:
        for name in (n for n in kept if n.startswith(block)):
            attn, d = p.get_submodule(name), D // 4
            assert attn.num_heads == kept[name] and attn.head_select is None
            assert attn.qkv.weight.shape == (3 * d * kept[name], D)
            assert attn.proj.weight.shape == (D, d * kept[name])
            rows = d * kept[name] * (2 if qk_mask == 'separate' else 1)
            assert attn.qk_select.theta.weight.shape == (rows, D)
    # non-square; 72x104 is 9x13 at stride 8: the 2x2 patch needs the fold's interpolation
    for size in ((64, 96), (72, 104)):
        x = torch.randn((2, 3) + size, generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            ref, got = m(x)[0], p(x)[0]
        assert_close_scaled(got, ref, 1e-5, f'{qk_mask} {size}')
    # a closed head matters: opening every head changes the supernet's output
    with torch.no_grad():
        for sel in head_selectors(m).values():
            sel.alpha.abs_()
        assert (m(x)[0] - ref).abs().max() > 1e-3 * ref.abs().max()


def test_head_alpha_is_an_architecture_parameter_with_a_gradient():
    m = _supernet(0).train()
    sels = head_selectors(m)
    assert list(sels) == ATTNS and all(isinstance(s, ChannelSelector) and s.dim == 4
                                       for s in sels.values())
    arch = {id(p) for p in arch_parameters(m)}
    assert all(id(s.alpha) in arch for s in sels.values())
    m(torch.randn(2, 3, SIZE, SIZE))[0].square().sum().backward()
    assert all(s.alpha.grad is not None and s.alpha.grad.abs().sum() > 0 for s in sels.values())


def test_default_is_the_papers_network():
    m = MobileViT(ARCH, variant='dcs')
    assert not head_selectors(m)
    spec = m.export_subnet()
    assert spec.heads == [] and 'heads' not in spec.to_dict()
    with pytest.raises(ValueError, match='select_heads needs a variant with channel selection'):
        MobileViT(ARCH, variant='baseline', select_heads=True)


def test_flops_and_params_drop_by_exactly_the_pruned_heads():
    """mmengine's count of the head-pruned network (channels all kept) = the full network's
    minus, per pruned head of a block with an h×w map (T = h·w tokens in P = 4 sequences of
    N = T/4 patches), width D and head width d = D/4: qkv 3·T·D·d, the products 2·P·N²·d,
    proj T·d·D, Linear_θ T·D·d MACs; and 3·d·(D+1) + d·D + d·(D+1) parameters."""
    m = _supernet(3)
    full = m.export_subnet()
    blocks = [BlockSelection(b.name, b.dim, list(range(b.dim))) for b in full.blocks]
    heads = [BlockSelection(a, 4, [0, 2] if i % 2 else [1, 2, 3]) for i, a in enumerate(ATTNS)]
    spec = SubnetSpec('mobilevit', ARCH, 'dcs', blocks, {}, [], heads)
    allheads = SubnetSpec('mobilevit', ARCH, 'dcs', blocks, {}, [], [])
    p, ref = _pruned(m, spec), _pruned(m, allheads)
    macs = params = 0
    for i, a in enumerate(ATTNS):
        block, _, D = next(s for s in STAGES if a.startswith(s[0]))
        side = SIZE // {'stages.2.1': 8, 'stages.3.1': 16, 'stages.4.1': 32}[block]
        T, P, d = side * side, 4, D // 4
        N = T // P
        pruned = 4 - heads[i].kept
        macs += pruned * (3 * T * D * d + 2 * P * N * N * d + T * d * D + T * D * d)
        params += pruned * (3 * d * (D + 1) + d * D + d * (D + 1))
    assert count_flops(ref, SIZE) - count_flops(p, SIZE) == macs
    assert count_params(ref) - count_params(p) == params


@pytest.mark.parametrize('resource', ['flops', 'params'])
def test_calibrated_cost_prices_heads_exactly(resource):
    """calibrate_cost's count of exported subnets (heads and MLP channels pruned together, the
    projection conv reading the last layer's kept channels) is mmengine's count of the pruned
    network, exactly; E[kept heads] enters the expected count with a gradient."""
    from mmdcs.selection.budget import CHANNELS, HEADS
    m = _supernet(4)
    cost = calibrate_cost(m, resource, (SIZE, SIZE))
    assert list(cost.head_dims) == ATTNS and set(cost.head_dims.values()) == {4}
    # a head of stages.2.1 (8x8 map, D = 96, d = 24): its closed form
    T, N, D, d = 64, 16, 96, 24
    per_head = (3 * T * D * d + 2 * 4 * N * N * d + T * d * D + T * D * d
                if resource == 'flops' else 3 * d * (D + 1) + d * D + d * (D + 1))
    assert cost.head_coef['stages.2.1.transformer.0.attn'] == per_head
    assert cost.unit_dims()[(HEADS, ATTNS[0])] == 4
    for seed in (4, 5):
        m = _supernet(seed)
        spec = m.export_subnet()
        p = copy.deepcopy(m)
        apply_subnet_(p, spec)
        widths = {(CHANNELS, b.name): b.kept for b in spec.blocks}
        widths.update(((HEADS, h.name), h.kept) for h in spec.heads)
        got = count_flops(p, SIZE) if resource == 'flops' else count_params(p)
        assert cost.count(widths) == got
    sels = {n: mod.select for n, mod in m.named_modules() if hasattr(mod, 'pruned')}
    heads = head_selectors(m)
    e = cost.expected(sels, 'gate', heads=heads)
    e.backward()
    manual = cost.at({n: float(s.expected_kept().detach()) for n, s in sels.items()}, {},
                     {k: float(s.expected_kept().detach()) for k, s in heads.items()})
    assert_close_scaled(e.detach(), torch.tensor(manual), 1e-6)
    assert all(s.alpha.grad is not None for s in heads.values())


def test_subnet_round_trip_and_older_formats(tmp_path):
    m = _supernet(1)
    spec = m.export_subnet(multiple_of=8)
    d = spec.to_dict()
    assert d['format'] == SUBNET_FORMAT == 'mmdcs.subnet/3'
    assert [h['name'] for h in d['heads']] == ATTNS
    assert all('pad' not in h for h in d['heads'])  # heads are never rounded up
    path = str(tmp_path / 'subnet.json')
    spec.save(path)
    assert SubnetSpec.load(path).to_dict() == d
    p = MobileViT(ARCH, subnet=path)
    assert [p.get_submodule(h.name).num_heads for h in spec.heads] == [h.kept for h in
                                                                      spec.heads]
    # a format-2 file (no heads) still loads and builds every head
    old = dict(d, format='mmdcs.subnet/2')
    old.pop('heads')
    p = MobileViT(ARCH, subnet=old)
    assert all(p.get_submodule(a).num_heads == 4 for a in ATTNS)


@pytest.mark.parametrize('edit,message', [
    (lambda h: h.__setitem__('keep', [0, 4]), 'heads entry stages.3.1.transformer.1.attn: head '
     'index 4 is out of range [0, 4)'),
    (lambda h: h.__setitem__('keep', []), 'heads entry stages.3.1.transformer.1.attn: no head '
     'kept'),
    (lambda h: h.__setitem__('keep', [1, 1]), 'heads entry stages.3.1.transformer.1.attn: '
     'repeated head'),
    # a head count that the block's width (D = 120) does not divide: not this block's
    (lambda h: h.__setitem__('dim', 7), 'heads entry stages.3.1.transformer.1.attn: the subnet '
     'says heads = 7, the backbone has heads = 4'),
    (lambda h: h.__setitem__('name', 'stages.3.1.transformer.1.mlp'), 'heads entry '
     'stages.3.1.transformer.1.mlp: the backbone has no attention with prunable heads there'),
])
def test_bad_heads_are_one_line_naming_the_block_and_the_key(edit, message):
    d = _supernet(1).export_subnet().to_dict()
    entry = next(h for h in d['heads'] if h['name'] == 'stages.3.1.transformer.1.attn')
    edit(entry)
    entry.pop('kept')
    with pytest.raises(SubnetError) as e:
        MobileViT(ARCH, subnet=d)
    assert message in str(e.value) and '\n' not in str(e.value)


def test_magnitude_scores_of_heads():
    """A head's magnitude score is the L2 norm of its q, k, v rows (and biases) and proj
    columns, computed here by hand from the slices."""
    from mmdcs.selection.budget import head_magnitude_scores
    m = _supernet(2)
    scores = head_magnitude_scores(m)
    assert list(scores) == ATTNS
    attn, D, d = m.get_submodule('stages.4.1.transformer.1.attn'), 144, 36
    for h in range(4):
        rows = [part * D + h * d + j for part in range(3) for j in range(d)]
        cols = list(range(h * d, (h + 1) * d))
        ref = (attn.qkv.weight.detach()[rows].pow(2).sum()
               + attn.qkv.bias.detach()[rows].pow(2).sum()
               + attn.proj.weight.detach()[:, cols].pow(2).sum()).sqrt()
        assert_close_scaled(scores['stages.4.1.transformer.1.attn'][h], ref, 1e-6, f'head {h}')
    with torch.no_grad():
        attn.proj.weight[:, 2 * d:3 * d] *= 10
    assert int(head_magnitude_scores(m)['stages.4.1.transformer.1.attn'].argmax()) == 2


@pytest.mark.parametrize('method', ['alpha', 'magnitude'])
def test_export_to_a_flops_budget_ranks_heads_within_one_percent(method):
    """budget_subnet with the scorer's head scores: heads pruned with channels, the built
    network's mmengine FLOPs within ±1 % of the target (at 64×64 the transformer layers are a
    third of MobileViT-XS's count: the floor is 0.72, the target 0.8)."""
    from mmdcs.selection import budget_subnet
    from mmdcs.selection.importance import get_scorer
    m = _supernet(7, alpha_shift=1.)
    cost = calibrate_cost(m, 'flops', (SIZE, SIZE))
    scorer = get_scorer(method)
    scores, hidden = scorer(m)
    spec = budget_subnet(m, 'mobilevit', ARCH, 'dcs', scores, cost, 0.8,
                         hidden_scores=hidden, normalize=scorer.normalize,
                         head_scores=scorer.heads(m))
    assert spec.heads and sum(h.kept for h in spec.heads) < 4 * len(ATTNS)
    assert 'heads' in spec.meta['budget']['ranked']
    p = _pruned(m, spec)
    flops = count_flops(p, SIZE)
    assert flops == spec.meta['budget']['achieved']
    assert abs(flops / cost.baseline - 0.8) <= 0.01


def test_onnx_parity_of_a_head_pruned_subnet(tmp_path):
    pytest.importorskip('onnxruntime')
    pytest.importorskip('onnxscript')
    import onnx

    from mmdcs.apis.deploy import ExportWrapper, OrtModel, export_and_check, set_export_mode_
    m = _supernet(1)
    spec = m.export_subnet()
    p = set_export_mode_(_pruned(m, spec))
    x = torch.randn(1, 3, 64, 96, generator=torch.Generator().manual_seed(3))
    out = str(tmp_path / 'heads.onnx')
    res = export_and_check(ExportWrapper(p, 'backbone'), x, out)
    assert all(r['ok'] for r in res['parity'])
    with torch.no_grad():
        ref = p(x)
    assert_close_scaled(OrtModel(out)(x)[0], ref[0], 1e-4)
    # the graph's attentions are narrow (the biases keep their names)
    shapes = {i.name: tuple(i.dims) for i in onnx.load(out).graph.initializer}
    for h in spec.heads:
        D = next(s[2] for s in STAGES if h.name.startswith(s[0]))
        assert shapes[f'net.{h.name}.qkv.bias'] == (3 * D // 4 * h.kept, )
        assert shapes[f'net.{h.name}.qk_select.theta.bias'] == (D // 4 * h.kept, )
    assert sum(h.kept for h in spec.heads) < 4 * len(ATTNS)


def test_a_search_classifier_costs_the_heads():
    """A DCS-MobileViT classifier with select_heads and a FLOPs target: the budget has a head
    unit per attention (the classifier refuses a budget that does not cost heads)."""
    from mmengine.registry import DefaultScope

    from mmdcs.registry import MODELS
    cfg = dict(type='mmdcs.ChannelSelectionClassifier',
               backbone=dict(type='mmdcs.MobileViT', arch=ARCH, variant='dcs',
                             select_heads=True),
               neck=dict(type='GlobalAveragePooling'),
               head=dict(type='LinearClsHead', num_classes=10, in_channels=384,
                         loss=dict(type='CrossEntropyLoss')),
               data_preprocessor=dict(type='ClsDataPreprocessor', num_classes=10),
               cost=dict(target=dict(flops=0.85, input_size=SIZE)))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(cfg)
    assert list(model._head_selectors) == ATTNS
    assert list(model._budget.head_dims) == ATTNS
    assert all(c > 0 for c in model._budget.head_coef.values())


def test_a_baseline_checkpoint_loads_into_a_supernet_with_head_gates():
    """The head gates' α are selection parameters a baseline (timm) checkpoint cannot have:
    load_converted keeps them at "all open" and refuses nothing else."""
    base = MobileViT(ARCH, variant='baseline')
    m = MobileViT(ARCH, variant='dcs', select_heads=True)
    missing, unexpected = m.load_converted(base.state_dict())
    assert unexpected == [] and missing == []
    assert all(bool((s.alpha > 0).all()) for s in head_selectors(m).values())
    with pytest.raises(KeyError, match='checkpoint does not fit'):
        m.load_converted({k: v for k, v in base.state_dict().items() if 'attn.proj' not in k})
