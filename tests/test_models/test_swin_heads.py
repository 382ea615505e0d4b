"""Head selection on Swin (``select_heads=True``, method.md §2.7): a gate per head in every
(shifted) window attention; the exported subnet lists the kept heads (format 3); a pruned head
loses its rows of q, k, v (and of Linear_θ), its columns of proj and its column of the relative
position bias table; the pruned network computes what the supernet does in eval at non-square
sizes and at sizes that need window padding (both padding orders, small maps padded or not); the
head's FLOPs (attention products over the padded windows included) and parameters (its bias
table slice included) are exact against mmengine's count; export to a FLOPs budget within ±1 %;
magnitude scores; ONNX parity; bad input one line naming the block and the key."""
import copy
import json

import pytest
import torch

from _mm_batches import cls_batch  # noqa: E402 (tests/ is on sys.path)
from _tools import assert_close_scaled  # noqa: E402
from mmdcs.models.backbones.swin import Swin
from mmdcs.models.counting import calibrate_cost, count_flops, count_params
from mmdcs.selection import (SUBNET_FORMAT, BlockSelection, ChannelSelector, SubnetError,
                             SubnetSpec, apply_subnet_, arch_parameters, head_selectors,
                             hidden_selectors, prune_state_dict)
from mmdcs.selection.budget import CHANNELS, HEADS, HIDDEN

IMG = 64
ATTNS = [f'layers.{i}.blocks.{j}.attn' for i, depth in enumerate((2, 2, 6, 2))
         for j in range(depth)]
HEADS_T = {a: (3, 6, 12, 24)[int(a.split('.')[1])] for a in ATTNS}  # Swin-T
D_T = {a: 96 * 2**int(a.split('.')[1]) for a in ATTNS}
HEAD_DIM = 32  # every Swin-T head
TABLE = 13 * 13  # (2·7 - 1)² relative position biases per head


def _supernet(seed=0, variant='dcs', qk_mask='shared', **kw):
    """A Swin-T supernet with head selection: random α (some heads and channels closed, some
    attentions with every head α ≤ 0), random Linear_θ (DCS: masks that vary per token) and a
    random relative position bias table (every head's column differs)."""
    torch.manual_seed(seed)
    m = Swin('swin-t', variant=variant, select_heads=True, img_size=IMG, qk_mask=qk_mask, **kw)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith('alpha') or 'theta' in name or 'bias_table' in name:
                p.copy_(torch.randn(p.shape, generator=g) * 2)
    return m.eval()


def _pruned(supernet, spec, **kw):
    """The pruned network of ``spec`` built from the file's data, with the supernet's weights
    sliced (prune_state_dict)."""
    state = prune_state_dict(supernet.state_dict(), spec, lambda: copy.deepcopy(supernet))
    p = Swin('swin-t', subnet=spec.to_dict(), img_size=IMG, **kw)
    p.load_state_dict(state, strict=True)
    return p.eval()


def _every_channel(spec):
    return [BlockSelection(b.name, b.dim, list(range(b.dim))) for b in spec.blocks]


# ------------------------------------------------------------------ pruned == supernet
@pytest.mark.parametrize('variant,qk_mask,size,options', [
    # non-square; stages 0 and 1 padded (16x24 -> 21x28, 8x12 -> 14x14) and shifted; every
    # stage's map (detection / segmentation)
    ('dcs', 'shared', (64, 96), dict(out_indices=(0, 1, 2, 3))),
    # timm's order (shift, then pad) on padded maps, separate Q/K masks
    ('dcs', 'separate', (72, 40), dict(window_padding='timm')),
    # small maps padded to the 7x7 window and shifted (mmdet), no padding at stage 0 (14x28)
    ('kcr', 'shared', (56, 112), dict(pad_small_map=True)),
    # odd sizes: the patch embedding and PatchMerging pad too (17x23 -> 21x28, 9x12 -> 14x14)
    ('kcr', 'shared', (66, 90), dict()),
    # a low-rank Linear_θ (D -> 16 -> D): its second layer loses the pruned heads' rows
    ('dcs', 'shared', (40, 72), dict(theta_rank=16)),
])
def test_head_pruned_equals_supernet_in_eval(variant, qk_mask, size, options):
    m = _supernet(1, variant, qk_mask, **options)
    spec = m.export_subnet()
    kept = {b.name: b for b in spec.heads}
    assert set(kept) == set(ATTNS) and min(b.kept for b in spec.heads) >= 1
    assert sum(b.kept for b in spec.heads) < sum(HEADS_T.values())  # some heads pruned
    p = _pruned(m, spec, qk_mask=qk_mask, **options)
    for name, b in kept.items():
        attn, ref = p.get_submodule(name), m.get_submodule(name)
        D, k = D_T[name], b.kept
        assert attn.num_heads == k and attn.head_select is None
        assert attn.qkv.weight.shape == (3 * HEAD_DIM * k, D)
        assert attn.proj.weight.shape == (D, HEAD_DIM * k)
        # the kept heads' columns of the bias table, in order
        assert torch.equal(attn.relative_position_bias_table,
                           ref.relative_position_bias_table[:, b.keep])
        if variant == 'dcs':
            rows = HEAD_DIM * k * (2 if qk_mask == 'separate' else 1)
            rank = options.get('theta_rank')
            assert attn.qk_select.theta.weight.shape == (rows, rank or D)
            if rank:  # D -> r is shared by the heads and stays whole
                assert attn.qk_select.theta_down.weight.shape == (rank, D)
    x = torch.randn((2, 3) + size, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        refs, gots = m(x), p(x)
    assert len(gots) == len(refs) == len(options.get('out_indices', (3, )))
    for i, (got, ref) in enumerate(zip(gots, refs)):
        assert_close_scaled(got, ref, 1e-5, f'{variant} {qk_mask} {size} {options} out {i}')
    ref = refs[0]
    # a closed head matters: opening every head changes the supernet's output
    with torch.no_grad():
        for sel in head_selectors(m).values():
            sel.alpha.abs_()
        assert (m(x)[0] - ref).abs().max() > 1e-3 * ref.abs().max()


def test_bias_table_columns_follow_the_heads():
    """Pruning reads the kept heads' own bias columns: the network built with another head's
    column (here the kept heads' columns reversed) computes something else."""
    m = _supernet(1)
    spec = m.export_subnet()
    p = _pruned(m, spec)
    x = torch.randn(1, 3, 64, 96, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ref = p(x)[0]
        swapped = 0
        for b in spec.heads:
            if b.kept > 1:
                t = p.get_submodule(b.name).relative_position_bias_table
                t.copy_(t.flip(1))
                swapped += 1
        assert swapped
        assert (p(x)[0] - ref).abs().max() > 1e-3 * ref.abs().max()


def test_every_head_closed_keeps_the_head_of_largest_alpha():
    m = _supernet(0)
    with torch.no_grad():
        m.layers[1].blocks[1].attn.head_select.alpha.copy_(
            torch.tensor([-3., -.5, -2., -4., -1., -6.]))
    spec = m.export_subnet()
    assert {b.name: b.keep for b in spec.heads}['layers.1.blocks.1.attn'] == [1]
    p = _pruned(m, spec)
    x = torch.randn(1, 3, IMG, 80)
    with torch.no_grad():
        assert_close_scaled(p(x)[0], m(x)[0], 1e-5)


def test_head_alpha_is_an_architecture_parameter_with_a_gradient():
    m = _supernet(0).train()
    sels = head_selectors(m)
    assert {k: s.dim for k, s in sels.items()} == HEADS_T
    assert all(isinstance(s, ChannelSelector) for s in sels.values())
    arch = {id(p) for p in arch_parameters(m)}
    assert all(id(s.alpha) in arch for s in sels.values())
    m(torch.randn(2, 3, 40, 56))[0].square().sum().backward()
    assert all(s.alpha.grad is not None and s.alpha.grad.abs().sum() > 0 for s in sels.values())


def test_default_is_the_papers_network():
    m = Swin('swin-t', variant='kcr', img_size=IMG)
    assert not head_selectors(m)
    spec = m.export_subnet()
    assert spec.heads == [] and 'heads' not in spec.to_dict()


# ------------------------------------------------------------------ exact cost
#: (tokens of the padded map T, windows nW, tokens per window N) per stage, by hand: window 7,
#: a side of at most 7 takes the window to its length (no padding, no shift)
WINDOWS = {
    (64, 64): [(21 * 21, 9, 49), (14 * 14, 4, 49), (16, 1, 16), (4, 1, 4)],
    (64, 96): [(21 * 28, 12, 49), (14 * 14, 4, 49), (4 * 6, 1, 24), (2 * 3, 1, 6)],
}


def _head_macs(attn, size, variant):
    """One head's MACs: q, k, v 3·T·D·d, the products q·kᵀ and attn·v 2·nW·N²·d, proj T·d·D,
    Linear_θ (DCS, shared mask) T·D·d."""
    T, nW, N = WINDOWS[size][int(attn.split('.')[1])]
    D, d = D_T[attn], HEAD_DIM
    return 3 * T * D * d + 2 * nW * N * N * d + T * d * D + (T * D * d if variant == 'dcs' else 0)


def _head_params(attn, variant):
    """One head's parameters: q, k, v rows with biases, proj columns, its bias table column,
    Linear_θ rows with biases (DCS)."""
    D, d = D_T[attn], HEAD_DIM
    return 3 * d * (D + 1) + d * D + TABLE + (d * (D + 1) if variant == 'dcs' else 0)


@pytest.mark.parametrize('variant,size', [('dcs', (64, 96)), ('kcr', (64, 64))])
def test_flops_and_params_drop_by_exactly_the_pruned_heads(variant, size):
    """mmengine's count of the head-pruned network (MLPs all kept) = the full network's minus
    each pruned head's closed form (per stage: the padded map's tokens and windows)."""
    m = _supernet(3, variant)
    full = m.export_subnet()
    heads = [BlockSelection(a, h, [0, h - 1] if i % 2 else [1]) for i, (a, h) in
             enumerate(HEADS_T.items())]
    spec = SubnetSpec('swin', 'swin-t', variant, _every_channel(full), {}, [], heads)
    allheads = SubnetSpec('swin', 'swin-t', variant, _every_channel(full), {}, [], [])
    p, ref = _pruned(m, spec), _pruned(m, allheads)
    pruned = {h.name: h.dim - h.kept for h in heads}
    assert count_flops(ref, size) - count_flops(p, size) == sum(
        n * _head_macs(a, size, variant) for a, n in pruned.items())
    assert count_params(ref) - count_params(p) == sum(
        n * _head_params(a, variant) for a, n in pruned.items())


@pytest.fixture(scope='module')
def calibrated():
    """(supernet, exact FLOPs count, exact params count) of seed 4 at 64x64, with hidden-unit
    selection too (channels, hidden units and heads in one count)."""
    m = _supernet(4, select_hidden=True)
    return m, calibrate_cost(m, 'flops', (IMG, IMG)), calibrate_cost(m, 'params')


@pytest.mark.parametrize('resource', ['flops', 'params'])
def test_calibrated_cost_prices_heads_exactly(calibrated, resource):
    """calibrate_cost's head coefficients are the closed forms, and its count of exported
    subnets (heads and MLP channels pruned together) is mmengine's count of the pruned
    network, exactly."""
    m, *costs = calibrated
    cost = costs[resource == 'params']
    assert cost.head_dims == HEADS_T
    for a in ATTNS:
        want = _head_macs(a, (IMG, IMG), 'dcs') if resource == 'flops' else _head_params(a, 'dcs')
        assert cost.head_coef[a] == want, a
        assert cost.marginal((HEADS, a), {}) == want
    for seed in (4, 5):
        s = _supernet(seed, select_hidden=True)
        spec = s.export_subnet()
        assert spec.hidden and spec.heads
        p = copy.deepcopy(s)
        apply_subnet_(p, spec)
        widths = {(CHANNELS, b.name): b.kept for b in spec.blocks}
        widths.update(((HIDDEN, b.name), b.kept) for b in spec.hidden)
        widths.update(((HEADS, h.name), h.kept) for h in spec.heads)
        got = count_flops(p, IMG) if resource == 'flops' else count_params(p)
        assert cost.count(widths) == got, seed
    # the expected count: E[kept heads] = Σ sigmoid(α) enters linearly, with a gradient
    sels = {n: mod.select for n, mod in m.named_modules() if hasattr(mod, 'pruned')}
    hidden, heads = hidden_selectors(m), head_selectors(m)
    e = cost.expected(sels, 'gate', hidden, heads=heads)
    e.backward()
    manual = cost.at({n: float(s.expected_kept().detach()) for n, s in sels.items()},
                     {k: float(s.expected_kept().detach()) for k, s in hidden.items()},
                     {k: float(s.expected_kept().detach()) for k, s in heads.items()})
    assert_close_scaled(e.detach(), torch.tensor(manual), 1e-6)  # float32 sums
    assert all(s.alpha.grad is not None for s in heads.values())
    m.zero_grad(set_to_none=True)


# ------------------------------------------------------------------ export
def test_subnet_round_trip_and_older_formats(tmp_path):
    m = _supernet(1)
    spec = m.export_subnet(multiple_of=8)
    d = spec.to_dict()
    assert d['format'] == SUBNET_FORMAT == 'mmdcs.subnet/3'
    assert {h['name'] for h in d['heads']} == set(ATTNS)
    assert all('pad' not in h for h in d['heads'])  # heads are never rounded up
    path = str(tmp_path / 'subnet.json')
    spec.save(path)
    back = SubnetSpec.load(path)
    assert back.to_dict() == d
    p = Swin('swin-t', subnet=path, img_size=IMG)
    assert {a: p.get_submodule(a).num_heads for a in ATTNS} == {h.name: h.kept
                                                                for h in spec.heads}
    # a format-2 file (no heads) still loads and builds the network with every head
    old = dict(d, format='mmdcs.subnet/2')
    old.pop('heads')
    p = Swin('swin-t', subnet=old, img_size=IMG)
    assert {a: p.get_submodule(a).num_heads for a in ATTNS} == HEADS_T
    assert all(p.get_submodule(a).relative_position_bias_table.shape == (TABLE, HEADS_T[a])
               for a in ATTNS)


def test_magnitude_scores_of_heads():
    """A head's magnitude score is the L2 norm of its q, k, v rows (and biases) and proj
    columns, computed here by hand from the slices; its bias table column (an additive logit,
    not a weight on the head's values) is not part of it."""
    from mmdcs.selection.budget import head_magnitude_scores
    m = _supernet(2)
    scores = head_magnitude_scores(m)
    assert set(scores) == set(ATTNS)
    attn, D, d = m.layers[1].blocks[1].attn, 192, HEAD_DIM
    for h in range(6):
        rows = [part * D + h * d + j for part in range(3) for j in range(d)]
        cols = list(range(h * d, (h + 1) * d))
        with torch.no_grad():
            ref = (attn.qkv.weight[rows].pow(2).sum() + attn.qkv.bias[rows].pow(2).sum()
                   + attn.proj.weight[:, cols].pow(2).sum()).sqrt()
        assert_close_scaled(scores['layers.1.blocks.1.attn'][h], ref, 1e-6, f'head {h}')
    with torch.no_grad():
        attn.relative_position_bias_table.mul_(100)
        assert torch.equal(head_magnitude_scores(m)['layers.1.blocks.1.attn'],
                           scores['layers.1.blocks.1.attn'])
        attn.proj.weight[:, 4 * d:5 * d] *= 10  # a head with larger weights scores higher
    assert int(head_magnitude_scores(m)['layers.1.blocks.1.attn'].argmax()) == 4


@pytest.mark.parametrize('method', ['alpha', 'magnitude'])
@pytest.mark.parametrize('target', [0.5, 0.7])
def test_export_to_a_flops_budget_ranks_heads_within_one_percent(calibrated, method, target):
    """budget_subnet with the scorer's head scores: heads ranked with channels and hidden
    units, the built network's mmengine FLOPs within ±1 % of the target (of the baseline's)."""
    from mmdcs.selection import budget_subnet
    from mmdcs.selection.importance import get_scorer
    m, cost, _ = calibrated
    scorer = get_scorer(method)
    scores, hidden = scorer(m)
    spec = budget_subnet(m, 'swin', 'swin-t', 'dcs', scores, cost, target,
                         hidden_scores=hidden, normalize=scorer.normalize,
                         head_scores=scorer.heads(m))
    assert {h.name for h in spec.heads} == set(ATTNS)
    assert sum(h.kept for h in spec.heads) < sum(HEADS_T.values())
    assert spec.meta['budget']['ranked'] == 'channels and hidden units and heads'
    p = _pruned(m, spec)
    flops = count_flops(p, IMG)
    assert flops == spec.meta['budget']['achieved']
    assert abs(flops / cost.baseline - target) <= 0.01


def test_search_with_head_gates_ends_on_the_flops_target():
    """The alternating loop moves Swin's head α under a FLOPs budget (32x32: stage 0's 8x8
    map padded to 14x14 and shifted), and the end of the search puts channels and heads on the
    target; the built network is what the budget counts."""
    import types

    from mmengine.logging import MessageHub
    from mmengine.registry import DefaultScope

    from mmdcs.engine import AlternatingSearchLoop, SearchOptimWrapperConstructor
    from mmdcs.registry import MODELS
    cfg = dict(type='mmdcs.ChannelSelectionClassifier',
               backbone=dict(type='mmdcs.Swin', arch='swin-t', variant='kcr', img_size=32,
                             select_heads=True),
               neck=dict(type='GlobalAveragePooling'),
               head=dict(type='LinearClsHead', num_classes=10, in_channels=768,
                         loss=dict(type='CrossEntropyLoss')),
               data_preprocessor=dict(type='ClsDataPreprocessor', num_classes=10),
               cost=dict(target=dict(flops=0.6)))
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(cfg)
    assert set(model._head_selectors) == set(ATTNS) and model._budget.head_dims == HEADS_T
    optim = SearchOptimWrapperConstructor(dict(
        weight=dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=1e-3)),
        arch=dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=0.2))))(model)
    loop = AlternatingSearchLoop.__new__(AlternatingSearchLoop)
    loop._runner = types.SimpleNamespace(
        model=model, optim_wrapper=optim, message_hub=MessageHub.get_instance('swin_heads'),
        visualizer=types.SimpleNamespace(add_scalars=lambda *a, **k: None))
    loop._iter, loop._max_iters = 0, 40
    heads = head_selectors(model.backbone)
    before = torch.cat([s.alpha.detach().clone() for s in heads.values()])
    model.train()
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        loop.train_step(cls_batch(g, size=32), 'weight')
        loop._iter += 1
        loop.train_step(cls_batch(g, size=32), 'arch')
        loop._iter += 1
    after = torch.cat([s.alpha.detach() for s in heads.values()])
    assert (after - before).abs().max() > 0.1  # the arch steps moved the head α
    loop.end_search()
    lin = model._budget
    kept = {n: int((s.alpha > 0).sum()) for n, s in model._selectors.items()}
    heads_kept = {k: max(1, int((s.alpha > 0).sum())) for k, s in heads.items()}
    assert lin.ratio(lin.at(kept, {}, heads_kept)) == pytest.approx(0.6, abs=0.012)
    spec = model.backbone.export_subnet()
    assert {h.name: h.kept for h in spec.heads} == heads_kept
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        pruned = MODELS.build(dict(type='ImageClassifier',
                                   backbone=dict(type='mmdcs.Swin', arch='swin-t', img_size=32,
                                                 subnet=spec.to_dict()),
                                   neck=dict(type='GlobalAveragePooling'),
                                   head=dict(type='LinearClsHead', num_classes=10,
                                             in_channels=768)))
    assert lin.at(kept, {}, heads_kept) == count_flops(pruned, (1, 3, 32, 32))


@pytest.mark.parametrize('method,target', [('alpha', None), ('magnitude', 0.7)])
def test_export_api_writes_the_heads_and_builds_the_narrow_network(tmp_path, method, target):
    """mmdcs.apis.export.export_subnet on a select_heads Swin classifier config: subnet.json
    (format 3) lists the kept heads of all 12 window attentions; without a target the API
    verifies that the pruned model gives the supernet's eval output, with one the measured
    FLOPs are within ±1 % of it. The magnitude pruner reads a baseline checkpoint (no α, no
    head α: they may be missing)."""
    import mmpretrain.utils
    from mmengine.config import Config

    from mmdcs.apis.export import export_subnet
    from mmdcs.apis.subnet_io import build_model
    mmpretrain.utils.register_all_modules(init_default_scope=False)
    path = str(tmp_path / 'heads.py')
    with open(path, 'w') as f:
        f.write("default_scope = 'mmpretrain'\nmodel = dict(type='ImageClassifier', "
                "backbone=dict(type='mmdcs.Swin', arch='swin-t', variant='kcr', img_size=48, "
                "select_heads=True), neck=dict(type='GlobalAveragePooling'), "
                "head=dict(type='LinearClsHead', num_classes=10, in_channels=768))\n")
    torch.manual_seed(0)
    model = build_model(Config.fromfile(path).model, 'mmpretrain')
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith('alpha'):
                p.copy_(torch.randn(p.shape, generator=g) * 2 + 0.5)
    ckpt = str(tmp_path / 'heads.pth')
    state = model.state_dict()
    if method == 'magnitude':  # a baseline's checkpoint: the same layers, no selection
        state = {k: v for k, v in state.items() if not k.endswith(('alpha', 'gate.tau'))}
        assert not any('head_select' in k for k in state)
    torch.save({'state_dict': state}, ckpt)
    res = export_subnet(path, ckpt, str(tmp_path / 'out'), method=method,
                        target=None if target is None else ('flops', target))
    with open(res.subnet) as f:
        data = json.load(f)
    assert data['format'] == 'mmdcs.subnet/3'
    assert {h['name'] for h in data['heads']} == set(ATTNS)
    assert sum(h['kept'] for h in data['heads']) < sum(HEADS_T.values())
    if target is not None:
        assert res.budget['measured']['flops']['ratio'] == pytest.approx(target, abs=0.01)


def test_onnx_parity_of_a_head_pruned_subnet(tmp_path):
    pytest.importorskip('onnxruntime')
    pytest.importorskip('onnxscript')
    from mmdcs.apis.deploy import ExportWrapper, OrtModel, export_and_check, set_export_mode_
    m = _supernet(1)
    spec = m.export_subnet()
    p = set_export_mode_(_pruned(m, spec))
    # non-square, stage 0 padded (10x12 -> 14x14) and shifted
    x = torch.randn(1, 3, 40, 48, generator=torch.Generator().manual_seed(3))
    out = str(tmp_path / 'heads.onnx')
    res = export_and_check(ExportWrapper(p, 'backbone'), x, out)
    assert all(r['ok'] for r in res['parity'])
    with torch.no_grad():
        ref = p(x)
    assert_close_scaled(OrtModel(out)(x)[0], ref[0], 1e-4)
    import onnx
    # the graph's attention is narrow: Linear_θ's bias keeps its name in every attention; the
    # exporter folds the weights' transposes, the bias table's gather and, in some blocks, qkv's
    # bias into constants of other names (here 2026-11-26, torch's dynamo exporter)
    shapes = {i.name: tuple(i.dims) for i in onnx.load(out).graph.initializer}
    named_qkv = 0
    for h in spec.heads:
        assert shapes[f'net.{h.name}.qk_select.theta.bias'] == (HEAD_DIM * h.kept, )
        if f'net.{h.name}.qkv.bias' in shapes:
            assert shapes[f'net.{h.name}.qkv.bias'] == (3 * HEAD_DIM * h.kept, )
            named_qkv += 1
    assert named_qkv
    assert sum(h.kept for h in spec.heads) < sum(HEADS_T.values())


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize('edit,message', [
    (lambda h: h.__setitem__('keep', [0, 6]), 'heads entry layers.1.blocks.1.attn: head index 6 '
     'is out of range [0, 6)'),
    (lambda h: h.__setitem__('keep', []), 'heads entry layers.1.blocks.1.attn: no head kept'),
    (lambda h: h.__setitem__('keep', [2, 2]), 'heads entry layers.1.blocks.1.attn: repeated '
     'head'),
    (lambda h: h.__setitem__('dim', 12), 'heads entry layers.1.blocks.1.attn: the subnet says '
     'heads = 12'),
    (lambda h: h.__setitem__('name', 'layers.1.blocks.1.mlp'), 'heads entry '
     'layers.1.blocks.1.mlp: the backbone has no attention with prunable heads there'),
])
def test_bad_heads_are_one_line_naming_the_block_and_the_key(edit, message):
    d = _supernet(1).export_subnet().to_dict()
    entry = next(h for h in d['heads'] if h['name'] == 'layers.1.blocks.1.attn')
    edit(entry)
    entry.pop('kept')
    with pytest.raises(SubnetError) as e:
        Swin('swin-t', subnet=d, img_size=IMG)
    assert message in str(e.value) and '\n' not in str(e.value)


def test_bad_heads_through_the_export_tool_exit_2(tmp_path, capsys):
    """The same bad file given to a tool's entry point: one line, exit 2 (user_errors)."""
    from mmdcs.apis.launch import user_errors
    d = _supernet(1).export_subnet().to_dict()
    entry = next(h for h in d['heads'] if h['name'] == 'layers.3.blocks.0.attn')
    entry['keep'], entry['kept'] = [0, 24], 2
    path = tmp_path / 'bad.json'
    path.write_text(json.dumps(d))
    with pytest.raises(SystemExit) as e:
        with user_errors():
            Swin('swin-t', subnet=str(path), img_size=IMG)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert 'heads entry layers.3.blocks.0.attn: head index 24 is out of range [0, 24)' in err


def test_select_heads_on_dynamic_swin_is_one_line():
    """DynamicSwin (a peer method's backbone, baseline only) has no head selection."""
    from mmdcs.models.backbones.dynamic_swin import DynamicSwin
    with pytest.raises(ValueError) as e:
        DynamicSwin('swin-t', select_heads=True)
    assert ("select_heads=True, but DynamicSwin (family 'swin') has no head selection"
            in str(e.value)) and '\n' not in str(e.value)
    with pytest.raises(ValueError, match='select_heads needs a variant with channel selection'):
        Swin('swin-t', variant='baseline', select_heads=True)


def test_a_baseline_checkpoint_loads_into_a_head_selected_supernet():
    """The head α a baseline checkpoint cannot have may be missing (they keep their "all kept"
    initialisation): the supernet then computes the baseline's output in eval."""
    torch.manual_seed(0)
    base = Swin('swin-t', variant='baseline', img_size=IMG).eval()
    sup = Swin('swin-t', variant='kcr', select_heads=True, img_size=IMG, gate_init=3.).eval()
    missing, unexpected = sup.load_converted(base.state_dict())
    assert missing == [] and unexpected == []
    x = torch.randn(1, 3, IMG, 80, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert_close_scaled(sup(x)[0], base(x)[0], 1e-5)
