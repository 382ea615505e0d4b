"""Head selection on EfficientViT's LiteMLA (``select_heads=True``, method.md §2.7): heads =
C // head_dim, each pruned in every scale branch together (its q, k, v rows of ``qkv``, its
channels of each scale's depthwise conv and groups of its grouped 1×1 conv, its Linear_θ rows);
``proj`` reads the channels the subnet keeps (a kept channel of a pruned head as zero; the
exports keep none), so the count is linear in the kept channels and the kept heads. Tested like
ViT's and MobileViT's: head-pruned == supernet in eval at non-square sizes, exact FLOPs/params
(mmengine), calibrated cost, subnet format 3, export to a FLOPs budget with heads ±1 %,
magnitude scores, ONNX parity, bad input in one line."""
import copy

import pytest
import torch

from _backbones import random_gates_, randomize_weights_
from _tools import assert_close_scaled
from mmdcs.models.backbones.efficientvit import EfficientViT, LiteMLA
from mmdcs.models.counting import calibrate_cost, count_flops, count_params
from mmdcs.selection import (SUBNET_FORMAT, BlockSelection, ChannelSelector, SubnetError,
                             SubnetSpec, apply_subnet_, arch_parameters, head_selectors,
                             prune_state_dict)

ARCH = 'efficientvit-b1'
SIZE = 64
#: B1's LiteMLAs: (stage, blocks, C) with head_dim 16 (8 and 16 heads), one 5x5 scale
STAGES = ((2, 3, 128), (3, 4, 256))
ATTNS = [f'stages.{s}.blocks.{j}.context_module.main' for s, n, _ in STAGES
         for j in range(1, n + 1)]
HEADS = {a: C // 16 for (s, n, C) in STAGES for a in ATTNS if a.startswith(f'stages.{s}.')}


def _supernet(seed=0, qk_mask='shared', alpha_shift=0.):
    """An EfficientViT-B1 DCS supernet with head selection, non-trivial weights, random α (some
    heads and channels closed) and random Linear_θ; in ``stages.3.blocks.2`` every head's α is
    ≤ 0."""
    torch.manual_seed(seed)
    m = EfficientViT(ARCH, variant='dcs', select_heads=True, qk_mask=qk_mask)
    randomize_weights_(m, seed)
    random_gates_(m, seed + 1, alpha_shift)
    with torch.no_grad():
        sel = m.get_submodule('stages.3.blocks.2.context_module.main').head_select
        sel.alpha.copy_(-torch.rand(16, generator=torch.Generator().manual_seed(seed)) - .1)
    return m.eval()


def _with_dead_channels(spec):
    """``spec`` with 3 more kept channels per LiteMLA, of its pruned heads (a subnet file may
    list them; the pruned proj reads them as zero): the supernet outputs zero there too."""
    heads = {h.name: set(h.keep) for h in spec.heads}
    blocks = []
    for b in spec.blocks:
        dead = [c for c in range(b.dim) if (c // 16) % HEADS[b.name] not in heads[b.name]
                and c not in b.keep][:3]
        blocks.append(BlockSelection(b.name, b.dim, sorted(b.keep + dead)))
    return SubnetSpec(spec.family, spec.arch, spec.variant, blocks, dict(spec.meta),
                      spec.hidden, spec.heads)


def _pruned(supernet, spec, qk_mask='shared'):
    state = prune_state_dict(supernet.state_dict(), spec, lambda: copy.deepcopy(supernet))
    p = EfficientViT(ARCH, subnet=spec.to_dict(), qk_mask=qk_mask)
    p.load_state_dict(state, strict=True)
    return p.eval()


@pytest.mark.parametrize('qk_mask', ['shared', 'separate'])
def test_head_pruned_equals_supernet_in_eval(qk_mask):
    m = _supernet(1, qk_mask)
    spec = m.export_subnet()
    kept = {b.name: b.keep for b in spec.heads}
    assert set(kept) == set(ATTNS) and min(map(len, kept.values())) >= 1
    assert sum(map(len, kept.values())) < sum(HEADS.values())  # some heads pruned
    assert len(kept['stages.3.blocks.2.context_module.main']) == 1  # every α ≤ 0
    channels = {b.name: b.keep for b in spec.blocks}
    # the export keeps no channel of a pruned head (it outputs zero), and every kept head
    # has its channels of α > 0
    for name, heads in kept.items():
        alpha = m.get_submodule(name).select.alpha.detach()
        assert {(c // 16) % HEADS[name] for c in channels[name]} <= set(heads)
        assert set(channels[name]) == {c for c in range(alpha.numel())
                                       if alpha[c] > 0 and (c // 16) % HEADS[name] in heads}
    # a subnet that lists such channels anyway reads them as zero: the same network
    for sp in (spec, _with_dead_channels(spec)):
        p = _pruned(m, sp, qk_mask)
        channels = {b.name: b.keep for b in sp.blocks}
        for name, heads in kept.items():
            a, n, d = p.get_submodule(name), len(heads), 16
            assert a.heads == a.num_heads == n and a.head_select is None
            assert a.qkv.conv.weight.shape[0] == 3 * d * n
            assert a.aggreg[0][0].weight.shape[0] == 3 * d * n
            assert a.aggreg[0][1].groups == 3 * n
            assert a.qk_select.theta.weight.shape[0] == d * n * (2 if qk_mask == 'separate'
                                                                 else 1)
            assert a.proj.conv.weight.shape[1] == len(channels[name])
        assert any(a.read_zero for a in p.attentions().values()) == (sp is not spec)
        for size in ((64, 96), (72, 104)):
            x = torch.randn((2, 3) + size, generator=torch.Generator().manual_seed(2))
            with torch.no_grad():
                ref, got = m(x)[0], p(x)[0]
            assert_close_scaled(got, ref, 1e-5, f'{qk_mask} {size}')
    with torch.no_grad():  # a closed head matters
        for sel in head_selectors(m).values():
            sel.alpha.abs_()
        assert (m(x)[0] - ref).abs().max() > 1e-3 * ref.abs().max()


def test_head_alpha_is_an_architecture_parameter_with_a_gradient():
    m = _supernet(0).train()
    sels = head_selectors(m)
    assert list(sels) == ATTNS and all(isinstance(s, ChannelSelector) and s.dim == HEADS[n]
                                       for n, s in sels.items())
    arch = {id(p) for p in arch_parameters(m)}
    assert all(id(s.alpha) in arch for s in sels.values())
    m(torch.randn(2, 3, SIZE, SIZE))[0].square().sum().backward()
    assert all(s.alpha.grad is not None and s.alpha.grad.abs().sum() > 0 for s in sels.values())


def test_default_is_the_papers_network():
    m = EfficientViT(ARCH, variant='dcs')
    assert not head_selectors(m)
    assert all(a.head_select is None and a.heads == a.full_heads
               for a in m.attentions().values())
    assert m.export_subnet().heads == []
    with pytest.raises(ValueError, match='select_heads needs a variant with channel selection'):
        EfficientViT(ARCH, variant='baseline', select_heads=True)


def _per_head(T, C, d=16, k=5, branches=2, separate=False, resource='flops'):
    """A LiteMLA head's own count (proj excluded: it reads the α-kept channels): qkv 3d·C,
    the depthwise k×k 3d·k², the grouped 1×1 3d·d, Linear_θ d·C (2d·C separate), per pixel;
    the products kᵀ[v 1] and q·(kᵀ[v 1]) 2·T·d·(d+1) per branch. Parameters: the same
    weights, Linear_θ with its bias."""
    theta = (2 if separate else 1) * d
    if resource == 'flops':
        return T * (3 * d * C + 3 * d * k * k + 3 * d * d + theta * C) \
            + branches * 2 * T * d * (d + 1)
    return 3 * d * C + 3 * d * k * k + 3 * d * d + theta * (C + 1)


def test_flops_and_params_drop_by_exactly_the_pruned_heads():
    """mmengine's count of the head-pruned network (channels all kept) = the full network's
    minus each pruned head's closed form (:func:`_per_head`); proj unchanged."""
    m = _supernet(3)
    full = m.export_subnet()
    blocks = [BlockSelection(b.name, b.dim, list(range(b.dim))) for b in full.blocks]
    heads = [BlockSelection(a, HEADS[a], list(range(0, HEADS[a], 1 + i % 3)))
             for i, a in enumerate(ATTNS)]
    spec = SubnetSpec('efficientvit', ARCH, 'dcs', blocks, {}, [], heads)
    allheads = SubnetSpec('efficientvit', ARCH, 'dcs', blocks, {}, [], [])
    p, ref = _pruned(m, spec), _pruned(m, allheads)
    macs = params = 0
    for h in heads:
        stage, C = (2, 128) if h.name.startswith('stages.2.') else (3, 256)
        T = (SIZE // (16 if stage == 2 else 32))**2
        macs += (h.dim - h.kept) * _per_head(T, C)
        params += (h.dim - h.kept) * _per_head(T, C, resource='params')
    assert count_flops(ref, SIZE) - count_flops(p, SIZE) == macs
    assert count_params(ref) - count_params(p) == params


@pytest.mark.parametrize('resource', ['flops', 'params'])
def test_calibrated_cost_prices_heads_exactly(resource):
    """calibrate_cost's count of exported subnets (heads and channels pruned together, kept
    channels of pruned heads included) is mmengine's count of the pruned network, exactly."""
    from mmdcs.selection.budget import CHANNELS, HEADS as HEAD_UNIT
    m = _supernet(4)
    cost = calibrate_cost(m, resource, (SIZE, SIZE))
    assert cost.head_dims == HEADS
    T = (SIZE // 16)**2
    assert cost.head_coef[ATTNS[0]] == _per_head(T, 128, resource=resource)
    assert cost.unit_dims()[(HEAD_UNIT, ATTNS[0])] == 8
    for seed in (4, 5):
        m = _supernet(seed)
        for spec in (m.export_subnet(), _with_dead_channels(m.export_subnet())):
            p = copy.deepcopy(m)
            apply_subnet_(p, spec)
            widths = {(CHANNELS, b.name): b.kept for b in spec.blocks}
            widths.update(((HEAD_UNIT, h.name), h.kept) for h in spec.heads)
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
    assert d['format'] == SUBNET_FORMAT and [h['name'] for h in d['heads']] == ATTNS
    assert all('pad' not in h for h in d['heads'])
    path = str(tmp_path / 'subnet.json')
    spec.save(path)
    assert SubnetSpec.load(path).to_dict() == d
    p = EfficientViT(ARCH, subnet=path)
    assert [p.get_submodule(h.name).heads for h in spec.heads] == [h.kept for h in spec.heads]
    old = dict(d, format='mmdcs.subnet/2')
    old.pop('heads')
    p = EfficientViT(ARCH, subnet=old)
    assert all(p.get_submodule(a).heads == HEADS[a] for a in ATTNS)


NAME = 'stages.2.blocks.2.context_module.main'


@pytest.mark.parametrize('edit,message', [
    (lambda h: h.__setitem__('keep', [0, 8]), f'heads entry {NAME}: head index 8 is out of '
     'range [0, 8)'),
    (lambda h: h.__setitem__('keep', []), f'heads entry {NAME}: no head kept'),
    (lambda h: h.__setitem__('keep', [1, 1]), f'heads entry {NAME}: repeated head'),
    # a head count that the block's width (C = 128, head_dim 16) does not give
    (lambda h: h.__setitem__('dim', 7), f'heads entry {NAME}: the subnet says heads = 7, the '
     'backbone has heads = 8'),
    (lambda h: h.__setitem__('name', 'stages.2.blocks.2.local_module.main'), 'heads entry '
     'stages.2.blocks.2.local_module.main: the backbone has no attention with prunable heads'),
])
def test_bad_heads_are_one_line_naming_the_block_and_the_key(edit, message):
    d = _supernet(1).export_subnet().to_dict()
    entry = next(h for h in d['heads'] if h['name'] == NAME)
    edit(entry)
    entry.pop('kept')
    with pytest.raises(SubnetError) as e:
        EfficientViT(ARCH, subnet=d)
    assert message in str(e.value) and '\n' not in str(e.value)


def test_prune_heads_refuses_bad_heads_and_a_second_pruning():
    a = LiteMLA(64, 64, dim=16, select=True, select_heads=True)
    for bad in ([], [4], [1, 1]):
        with pytest.raises(ValueError, match='prune_heads_: bad heads'):
            copy.deepcopy(a).prune_heads_(bad)
    a.prune_heads_([0, 2])
    with pytest.raises(RuntimeError, match='already pruned'):
        a.prune_heads_([0])


def test_magnitude_scores_of_heads():
    """A head's magnitude score is the L2 norm of its qkv rows, its depthwise and grouped 1×1
    rows, and its proj columns in both branches, computed here by hand from the slices."""
    from mmdcs.selection.budget import head_magnitude_scores
    m = _supernet(2)
    scores = head_magnitude_scores(m)
    assert list(scores) == ATTNS
    a, H, d = m.get_submodule(NAME), 8, 16
    with torch.no_grad():
        for h in range(H):
            rows = list(range(h * 3 * d, (h + 1) * 3 * d))
            cols = [(b * H + h) * d + j for b in range(2) for j in range(d)]
            ref = (a.qkv.conv.weight[rows].pow(2).sum() + a.aggreg[0][0].weight[rows].pow(2).sum()
                   + a.aggreg[0][1].weight[rows].pow(2).sum()
                   + a.proj.conv.weight[:, cols].pow(2).sum()).sqrt()
            assert_close_scaled(scores[NAME][h], ref, 1e-5, f'head {h}')
        a.proj.conv.weight[:, 5 * d:6 * d] *= 10  # head 5's columns in the first branch
    assert int(head_magnitude_scores(m)[NAME].argmax()) == 5


@pytest.mark.parametrize('method', ['alpha', 'magnitude'])
def test_export_to_a_flops_budget_ranks_heads_within_one_percent(method):
    """budget_subnet with the scorer's head scores: heads pruned with channels, the built
    network's mmengine FLOPs within ±1 % of the target (at 64×64 the floor is 0.76, the
    target 0.85; channels alone reach no lower than 0.96 here). The channels lie inside the
    heads: the export ranks a head with its channels, so no kept channel belongs to a pruned
    head (it would be read as zero) and every kept head has a kept channel."""
    from mmdcs.selection import budget_subnet
    from mmdcs.selection.importance import get_scorer
    m = _supernet(7, alpha_shift=1.)
    cost = calibrate_cost(m, 'flops', (SIZE, SIZE))
    scorer = get_scorer(method)
    scores, hidden = scorer(m)
    spec = budget_subnet(m, 'efficientvit', ARCH, 'dcs', scores, cost, 0.85,
                         hidden_scores=hidden, normalize=scorer.normalize,
                         head_scores=scorer.heads(m))
    assert spec.heads and sum(h.kept for h in spec.heads) < sum(HEADS.values())
    assert 'heads' in spec.meta['budget']['ranked']
    heads = {h.name: set(h.keep) for h in spec.heads}
    for b in spec.blocks:
        owners = {(c // 16) % HEADS[b.name] for c in b.keep}
        assert owners == heads[b.name], b.name  # no dead channel, no dead head
    p = _pruned(m, spec)
    flops = count_flops(p, SIZE)
    assert flops == spec.meta['budget']['achieved']
    assert abs(flops / cost.baseline - 0.85) <= 0.01


def test_onnx_parity_of_a_head_pruned_subnet(tmp_path):
    pytest.importorskip('onnxruntime')
    pytest.importorskip('onnxscript')
    from mmdcs.apis.deploy import ExportWrapper, OrtModel, export_and_check, set_export_mode_
    m = _supernet(1)
    spec = _with_dead_channels(m.export_subnet())
    p = set_export_mode_(_pruned(m, spec))
    # some LiteMLA reads a kept channel of a pruned head (the appended zero channel)
    assert any(a.read_zero for a in p.attentions().values())
    x = torch.randn(1, 3, 64, 96, generator=torch.Generator().manual_seed(3))
    out = str(tmp_path / 'heads.onnx')
    res = export_and_check(ExportWrapper(p, 'backbone'), x, out)
    assert all(r['ok'] for r in res['parity'])
    with torch.no_grad():
        ref = p(x)
    assert_close_scaled(OrtModel(out)(x)[0], ref[0], 1e-4)
    assert sum(h.kept for h in spec.heads) < sum(HEADS.values())
    import onnx
    # the graph's LiteMLAs are narrow (Linear_θ's bias keeps its name)
    shapes = {i.name: tuple(i.dims) for i in onnx.load(out).graph.initializer}
    for h in spec.heads:
        assert shapes[f'net.{h.name}.qk_select.theta.bias'] == (16 * h.kept, )


def test_the_search_ends_on_the_budget_without_dead_channels():
    """A DCS-EfficientViT classifier with select_heads and a FLOPs target: its budget has a
    head unit per LiteMLA, and the end of the search (project_to_budget) ranks a head with its
    channels: {α > 0} of the channels lies inside {α > 0} of the heads, and the deployed count
    (the exported subnet built, mmengine's count) is within 1 % below the target."""
    from mmengine.registry import DefaultScope

    from mmdcs.registry import MODELS
    cfg = dict(type='mmdcs.ChannelSelectionClassifier',
               backbone=dict(type='mmdcs.EfficientViT', arch=ARCH, variant='dcs',
                             select_heads=True),
               neck=dict(type='GlobalAveragePooling'),
               head=dict(type='LinearClsHead', num_classes=10, in_channels=1536,
                         loss=dict(type='CrossEntropyLoss')),
               data_preprocessor=dict(type='ClsDataPreprocessor', num_classes=10),
               cost=dict(target=dict(flops=0.85, input_size=SIZE)))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(cfg)
    assert list(model._head_selectors) == ATTNS and model._budget.head_dims == HEADS
    random_gates_(model.backbone, 3, alpha_shift=1.)
    rep = model.project_to_budget()
    assert 0.84 <= rep['after_ratio'] <= 0.85
    spec = model.backbone.export_subnet()
    heads = {h.name: set(h.keep) for h in spec.heads}
    assert sum(map(len, heads.values())) < sum(HEADS.values())
    for b in spec.blocks:
        assert {(c // 16) % HEADS[b.name] for c in b.keep} == heads[b.name], b.name
    pruned = copy.deepcopy(model)
    apply_subnet_(pruned.backbone, spec)
    assert count_flops(pruned, (1, 3, SIZE, SIZE)) == rep['after']


def test_a_baseline_checkpoint_loads_into_a_supernet_with_head_gates(tmp_path):
    """The magnitude export starts from a baseline checkpoint: the head gates' α may be
    missing from it (load_baseline_checkpoint), nothing else."""
    from mmdcs.apis.export import load_baseline_checkpoint
    from mmdcs.apis.launch import UserError
    base = EfficientViT(ARCH, variant='baseline')
    path = str(tmp_path / 'base.pth')
    torch.save({'state_dict': base.state_dict()}, path)
    m = EfficientViT(ARCH, variant='dcs', select_heads=True)
    load_baseline_checkpoint(m, path)
    assert_close_scaled(m.stem.in_conv.conv.weight.detach(),
                        base.stem.in_conv.conv.weight.detach(), 0)
    torch.save({'state_dict': {k: v for k, v in base.state_dict().items()
                               if 'qkv' not in k}}, path)
    with pytest.raises(UserError, match='does not fit'):
        load_baseline_checkpoint(m, path)


@pytest.mark.parametrize('method', ['alpha', 'magnitude'])
def test_export_api_writes_the_heads_and_builds_the_narrow_network(tmp_path, method):
    """mmdcs.apis.export.export_subnet on a select_heads config: the subnet file (format 3)
    lists the kept heads, no kept channel lies in a pruned head, the pruned checkpoint loads
    into the network built from the file, and the measured FLOPs are within ±1 %."""
    import json

    import mmpretrain.utils
    from mmengine.config import Config

    from mmdcs.apis.export import export_subnet
    from mmdcs.apis.subnet_io import build_model
    mmpretrain.utils.register_all_modules(init_default_scope=False)
    path = str(tmp_path / 'heads.py')
    with open(path, 'w') as f:
        f.write("default_scope = 'mmpretrain'\nmodel = dict(type='ImageClassifier', "
                f"backbone=dict(type='mmdcs.EfficientViT', arch='{ARCH}', variant='dcs', "
                "select_heads=True), neck=dict(type='GlobalAveragePooling'), "
                "head=dict(type='LinearClsHead', num_classes=10, in_channels=1536))\n")
    torch.manual_seed(0)
    model = build_model(Config.fromfile(path).model, 'mmpretrain')
    random_gates_(model.backbone, 5, alpha_shift=1.)
    ckpt = str(tmp_path / 'heads.pth')
    torch.save({'state_dict': model.state_dict()}, ckpt)
    res = export_subnet(path, ckpt, str(tmp_path / 'out'), method=method,
                        target=('flops', 0.85), shape=(SIZE, SIZE))
    with open(res.subnet) as f:
        data = json.load(f)
    assert data['format'] == 'mmdcs.subnet/3' and [h['name'] for h in data['heads']] == ATTNS
    heads = {h['name']: set(h['keep']) for h in data['heads']}
    assert sum(map(len, heads.values())) < sum(HEADS.values())
    for b in data['blocks']:
        assert {(c // 16) % HEADS[b['name']] for c in b['keep']} == heads[b['name']]
    assert res.budget['measured']['flops']['ratio'] == pytest.approx(0.85, abs=0.01)
