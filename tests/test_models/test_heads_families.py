"""Head selection (``select_heads=True``, method.md §2.7) on every family that supports it: one
suite over ViT, Swin, MobileViT and EfficientViT.

A gate per head beside the channel gates; the exported subnet lists the kept heads (format 3;
formats 1 and 2 still load); the pruned attention is physically narrower (its q, k, v rows, its
Linear_θ rows, its columns of proj — Swin: its column of the relative position bias table;
EfficientViT's LiteMLA: its channels of each scale branch, proj reading the kept channels) and
computes what the supernet computes in eval at non-square sizes (Swin: sizes that need window
padding, both padding orders, small maps; MobileViT: a map the 2×2 patch does not divide); its
FLOPs and parameters drop by exactly a head's closed form (mmengine's count); the calibrated
cost prices heads exactly; export to a FLOPs budget ranks heads with channels within ±1 %;
magnitude head scores; ONNX parity; a baseline checkpoint loads into a head-selected supernet;
the export API writes the heads; bad input is one line naming the block and the key.

Each family is described once (:class:`HeadFamily` in :data:`FAMILIES`: how to build a small
supernet with heads and its baseline, the attentions and their widths by hand, sizes, the
closed forms of a head's cost, tolerances); every common test runs once per family. What a
family offers is read through the backbone contract (``supports_heads``,
``head_prunable_modules``, ``head_selectors``, ``channel_heads``) and checked against the
description. The tests at the end have no counterpart in another family."""
import copy
import json
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import pytest
import torch

from _backbones import random_gates_, randomize_weights_
from _mm_batches import alternate, search_loop
from _tools import assert_close_scaled
from mmdcs.models.backbones.efficientvit import EfficientViT, LiteMLA
from mmdcs.models.backbones.mobilevit import MobileViT
from mmdcs.models.backbones.swin import Swin
from mmdcs.models.backbones.vit import ViT
from mmdcs.models.counting import calibrate_cost, count_flops, count_params
from mmdcs.selection import (SUBNET_FORMAT, BlockSelection, ChannelSelector, DCSAttention,
                             SubnetError, SubnetSpec, apply_subnet_, arch_parameters,
                             head_selectors, hidden_selectors, prune_state_dict)
from mmdcs.selection.budget import CHANNELS, HEADS, HIDDEN
from mmdcs.selection.subnet import head_layout, head_prunable_modules

Size = Tuple[int, int]


# ============================================================================ the families
@dataclass(frozen=True)
class PrunedCase:
    """One head-pruned == supernet check: the supernet's variant and Q/K masks, the input sizes
    and the options given to both networks (the supernet and the pruned one)."""
    variant: str
    qk_mask: str
    sizes: Tuple[Size, ...]
    options: dict = field(default_factory=dict)
    why: str = ''


@dataclass(frozen=True)
class HeadFamily:
    """What the head suite needs to know about one family, by hand (the tests compare what the
    backbone says through the contract with this).

    Args:
        name, cls, arch: the family, its backbone class and a small architecture.
        kw: keyword arguments of every network built from ``cls`` (ViT and Swin: the image
            size their position tables are made for).
        size: the nominal test size (cost counts, gradients).
        dims: attention path → (heads H, width D, head width d), in the network's order.
        randomize: ``(model, seed)`` → non-trivial α (some heads and channels closed), Linear_θ
            and weights (the family's own draw, kept from its old tests).
        closed_in_build: an attention ``build`` closes every head of (every α ≤ 0), or None.
        pruned_cases: the pruned == supernet checks.
        closed: (attention, input size) of the "every head closed" check.
        grad_size: input size of the gradient check.
        default_variant: the variant of the "default is the paper's network" check.
        drop_keep: ``(i, H)`` → the heads kept in the i-th attention of the exact-count check.
        count_cases: (variant, size) of the exact-count check.
        head_cost: ``(attention, size, variant, resource)`` → one head's MACs or parameters,
            closed form.
        calibrate: (seed, extra build kwargs) of the calibrated-cost supernet.
        budget: (seed, build kwargs, targets) of the export to a FLOPs budget.
        ranked: ``meta['budget']['ranked']`` of that export, exactly (None: only 'heads' in it).
        magnitude: (attention, head whose proj columns are scaled ×10) of the magnitude check.
        magnitude_rel: tolerance of the magnitude scores against the hand-computed norm.
        magnitude_ignores: parameters of the attention that do not enter a head's score.
        onnx_size: input of the ONNX export.
        onnx_qkv_bias: 'all' (every attention's ``qkv.bias`` keeps its name in the graph),
            'some' (at least one does) or None (not checked: the family's qkv has no bias).
        bad: (attention, out-of-range dim, repeated head, a path without heads) of the bad-input
            check.
        channel_owner: ``(attention, channel)`` → the head owning a channel where channels lie
            inside heads (EfficientViT), else None.
        baseline_variant: the supernet a baseline checkpoint is loaded into.
        api: (backbone config, neck, head in_channels, [(method, target)], α init, export
            kwargs, magnitude from a baseline checkpoint) of the export API check, or None.
    """
    name: str
    cls: type
    arch: str
    kw: dict
    size: Size
    dims: Dict[str, Tuple[int, int, int]]
    randomize: Callable
    pruned_cases: Tuple[PrunedCase, ...]
    closed: Tuple[str, Size]
    grad_size: Size
    default_variant: str
    drop_keep: Callable[[int, int], List[int]]
    count_cases: Tuple[Tuple[str, Size], ...]
    head_cost: Callable
    calibrate: Tuple[int, dict]
    budget: Tuple[int, dict, Tuple[float, ...]]
    magnitude: Tuple[str, int]
    onnx_size: Size
    onnx_qkv_bias: Optional[str]
    bad: Tuple[str, int, int, str]
    baseline_variant: str
    api: Optional[tuple]
    ranked: Optional[str] = None
    closed_in_build: Optional[str] = None
    magnitude_rel: float = 1e-6
    magnitude_ignores: Tuple[str, ...] = ()
    channel_owner: Optional[Callable[[str, int], int]] = None

    @property
    def heads(self) -> Dict[str, int]:
        return {a: h for a, (h, _, _) in self.dims.items()}

    @property
    def attns(self) -> List[str]:
        return list(self.dims)

    def build(self, seed=0, variant='dcs', qk_mask='shared', alpha_shift=0., **kw):
        """A supernet with head selection and random selection parameters (``alpha_shift``:
        the mean of the random α, where the family's draw has one), in eval."""
        torch.manual_seed(seed)
        m = self.cls(self.arch, variant=variant, select_heads=True, qk_mask=qk_mask,
                     **dict(self.kw, **kw))
        self.randomize(m, seed, alpha_shift)
        if self.closed_in_build:
            sel = m.get_submodule(self.closed_in_build).head_select
            with torch.no_grad():
                sel.alpha.copy_(-torch.rand(sel.dim, generator=torch.Generator().manual_seed(
                    seed)) - .1)
        return m.eval()

    def new(self, **kw):
        return self.cls(self.arch, **dict(self.kw, **kw))

    def pruned(self, supernet, spec, **kw):
        """The pruned network of ``spec`` built from the file's data, with the supernet's
        weights sliced (prune_state_dict)."""
        state = prune_state_dict(supernet.state_dict(), spec, lambda: copy.deepcopy(supernet))
        p = self.new(subnet=spec.to_dict(), **kw)
        p.load_state_dict(state, strict=True)
        return p.eval()


# ---------------------------------------------------------------------------- ViT (DeiT-Tiny)
def _vit_randomize(m, seed, alpha_shift=0.):
    """α and Linear_θ ~ N(0, 2²): some heads and channels closed, masks that vary per token."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith('alpha') or 'theta' in name:
                p.copy_(torch.randn(p.shape, generator=g) * 2)


def _vit_head_cost(attn, size, variant, resource):
    """qkv 3·N·D·d, the products 2·N²·d, proj N·d·D, Linear_θ N·D·d MACs (N = 1 + tokens);
    3·d·(D+1) + d·D + d·(D+1) parameters (d = 64, D = 192)."""
    N, D, d = 1 + (size[0] // 16) * (size[1] // 16), 192, 64
    if resource == 'flops':
        return 3 * N * D * d + 2 * N * N * d + N * d * D + N * D * d
    return 3 * d * (D + 1) + d * D + d * (D + 1)


VIT = HeadFamily(
    name='vit', cls=ViT, arch='deit-tiny', kw=dict(img_size=64), size=(64, 64),
    dims={f'blocks.{i}.attn': (3, 192, 64) for i in range(12)},
    randomize=_vit_randomize,
    pruned_cases=tuple(
        PrunedCase('dcs', qk, (size, ), dict(out_type=out))
        for qk in ('shared', 'separate')
        for size, out in (((48, 80), 'cls_token'), ((40, 72), 'featmap'))),
    closed=('blocks.4.attn', (64, 64)), grad_size=(64, 64), default_variant='dcs',
    drop_keep=lambda i, h: [0, 2] if i % 2 else [1],
    count_cases=(('dcs', (64, 64)), ), head_cost=_vit_head_cost,
    calibrate=(4, {}), budget=(7, {}, (0.5, 0.7)),
    magnitude=('blocks.5.attn', 0), onnx_size=(32, 32), onnx_qkv_bias='all',
    bad=('blocks.2.attn', 4, 1, 'blocks.2.mlp'), baseline_variant='kcr',
    api=(dict(type='mmdcs.ViT', arch='deit-tiny', variant='dcs', img_size=32,
              select_heads=True), None, 192, (('alpha', 0.6), ('magnitude', 0.6)),
         lambda p, g: p.copy_(torch.randn(p.shape, generator=g).abs() + 0.1), {}, False),
)


# ---------------------------------------------------------------------------- Swin-T
_SWIN_ATTNS = [f'layers.{i}.blocks.{j}.attn' for i, depth in enumerate((2, 2, 6, 2))
               for j in range(depth)]
#: (2·7 - 1)² relative position biases per head
SWIN_TABLE = 13 * 13
#: (tokens of the padded map T, windows nW, tokens per window N) per stage, by hand: window 7,
#: a side of at most 7 takes the window to its length (no padding, no shift)
SWIN_WINDOWS = {
    (64, 64): [(21 * 21, 9, 49), (14 * 14, 4, 49), (16, 1, 16), (4, 1, 4)],
    (64, 96): [(21 * 28, 12, 49), (14 * 14, 4, 49), (4 * 6, 1, 24), (2 * 3, 1, 6)],
}


def _swin_randomize(m, seed, alpha_shift=0.):
    """α, Linear_θ (DCS) and the relative position bias table ~ N(0, 2²): every head's bias
    column differs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith('alpha') or 'theta' in name or 'bias_table' in name:
                p.copy_(torch.randn(p.shape, generator=g) * 2)


def _swin_head_cost(attn, size, variant, resource):
    """MACs: q, k, v 3·T·D·d, the products q·kᵀ and attn·v 2·nW·N²·d (over the padded
    windows), proj T·d·D, Linear_θ (DCS, shared mask) T·D·d. Parameters: q, k, v rows with
    biases, proj columns, its bias table column, Linear_θ rows with biases (DCS)."""
    _, D, d = SWIN.dims[attn]
    dcs = variant == 'dcs'
    if resource == 'flops':
        T, nW, N = SWIN_WINDOWS[tuple(size)][int(attn.split('.')[1])]
        return 3 * T * D * d + 2 * nW * N * N * d + T * d * D + (T * D * d if dcs else 0)
    return 3 * d * (D + 1) + d * D + SWIN_TABLE + (d * (D + 1) if dcs else 0)


SWIN = HeadFamily(
    name='swin', cls=Swin, arch='swin-t', kw=dict(img_size=64), size=(64, 64),
    dims={a: ((3, 6, 12, 24)[int(a.split('.')[1])], 96 * 2**int(a.split('.')[1]), 32)
          for a in _SWIN_ATTNS},
    randomize=_swin_randomize,
    pruned_cases=(
        PrunedCase('dcs', 'shared', ((64, 96), ), dict(out_indices=(0, 1, 2, 3)),
                   'non-square; stages 0 and 1 padded (16x24 -> 21x28, 8x12 -> 14x14) and '
                   'shifted; every stage'),
        PrunedCase('dcs', 'separate', ((72, 40), ), dict(window_padding='timm'),
                   "timm's order (shift, then pad) on padded maps"),
        PrunedCase('kcr', 'shared', ((56, 112), ), dict(pad_small_map=True),
                   'small maps padded to the 7x7 window and shifted, no padding at stage 0'),
        PrunedCase('kcr', 'shared', ((66, 90), ), {},
                   'odd sizes: the patch embedding and PatchMerging pad too'),
        PrunedCase('dcs', 'shared', ((40, 72), ), dict(theta_rank=16),
                   "a low-rank Linear_θ (D -> 16 -> D): its second layer loses the pruned "
                   "heads' rows"),
    ),
    closed=('layers.1.blocks.1.attn', (64, 80)), grad_size=(40, 56), default_variant='kcr',
    drop_keep=lambda i, h: [0, h - 1] if i % 2 else [1],
    count_cases=(('dcs', (64, 96)), ('kcr', (64, 64))), head_cost=_swin_head_cost,
    calibrate=(4, dict(select_hidden=True)), budget=(4, dict(select_hidden=True), (0.5, 0.7)),
    ranked='channels and hidden units and heads',
    magnitude=('layers.1.blocks.1.attn', 4),
    magnitude_ignores=('relative_position_bias_table', ),
    onnx_size=(40, 48), onnx_qkv_bias='some',
    bad=('layers.1.blocks.1.attn', 12, 2, 'layers.1.blocks.1.mlp'), baseline_variant='kcr',
    api=(dict(type='mmdcs.Swin', arch='swin-t', variant='kcr', img_size=48, select_heads=True),
         dict(type='GlobalAveragePooling'), 768, (('alpha', None), ('magnitude', 0.7)),
         lambda p, g: p.copy_(torch.randn(p.shape, generator=g) * 2 + 0.5), {}, True),
)


# ---------------------------------------------------------------------------- MobileViT-XS
#: the attentions of mobilevit-xs: (block, layers, D, stride) per stage with a MobileViT block
_MV_STAGES = (('stages.2.1', 2, 96, 8), ('stages.3.1', 4, 120, 16), ('stages.4.1', 3, 144, 32))


def _mv_randomize(m, seed, alpha_shift=0.):
    randomize_weights_(m, seed)
    random_gates_(m, seed + 1, alpha_shift)


def _mv_head_cost(attn, size, variant, resource):
    """A head of a block with an h×w map (T = h·w tokens in P = 4 sequences of N = T/4
    patches), width D and head width d = D/4: qkv 3·T·D·d, the products 2·P·N²·d, proj T·d·D,
    Linear_θ T·D·d MACs; 3·d·(D+1) + d·D + d·(D+1) parameters."""
    block, _, D, stride = next(s for s in _MV_STAGES if attn.startswith(s[0]))
    d = D // 4
    if resource == 'params':
        return 3 * d * (D + 1) + d * D + d * (D + 1)
    T, P = (size[0] // stride) * (size[1] // stride), 4
    N = T // P
    return 3 * T * D * d + 2 * P * N * N * d + T * d * D + T * D * d


MOBILEVIT = HeadFamily(
    name='mobilevit', cls=MobileViT, arch='mobilevit-xs', kw={}, size=(64, 64),
    dims={f'{b}.transformer.{j}.attn': (4, D, D // 4) for b, n, D, _ in _MV_STAGES
          for j in range(n)},
    randomize=_mv_randomize, closed_in_build='stages.3.1.transformer.2.attn',
    # non-square; 72x104 is 9x13 at stride 8: the 2x2 patch needs the fold's interpolation
    pruned_cases=tuple(PrunedCase('dcs', qk, ((64, 96), (72, 104)))
                       for qk in ('shared', 'separate')),
    closed=('stages.4.1.transformer.1.attn', (64, 96)), grad_size=(64, 64),
    default_variant='dcs',
    drop_keep=lambda i, h: [0, 2] if i % 2 else [1, 2, 3],
    count_cases=(('dcs', (64, 64)), ), head_cost=_mv_head_cost,
    # at 64×64 the transformer layers are a third of MobileViT-XS's count: the floor is 0.72
    calibrate=(4, {}), budget=(7, dict(alpha_shift=1.), (0.8, )),
    magnitude=('stages.4.1.transformer.1.attn', 2), onnx_size=(64, 96), onnx_qkv_bias='all',
    # a head count that the block's width (D = 120) does not divide: not this block's
    bad=('stages.3.1.transformer.1.attn', 7, 1, 'stages.3.1.transformer.1.mlp'),
    baseline_variant='dcs',
    api=(dict(type='mmdcs.MobileViT', arch='mobilevit-xs', variant='dcs', select_heads=True),
         dict(type='GlobalAveragePooling'), 384, (('alpha', 0.85), ),
         lambda p, g: p.copy_(torch.randn(p.shape, generator=g) + 1.), dict(shape=(64, 64)),
         False),
)


# ---------------------------------------------------------------------------- EfficientViT-B1
#: B1's LiteMLAs: (stage, blocks, C) with head_dim 16 (8 and 16 heads), one 5x5 scale
_EVT_STAGES = ((2, 3, 128), (3, 4, 256))


def _evt_per_head(T, C, d=16, k=5, branches=2, separate=False, resource='flops'):
    """A LiteMLA head's own count (proj excluded: it reads the α-kept channels): qkv 3d·C,
    the depthwise k×k 3d·k², the grouped 1×1 3d·d, Linear_θ d·C (2d·C separate), per pixel;
    the products kᵀ[v 1] and q·(kᵀ[v 1]) 2·T·d·(d+1) per branch. Parameters: the same
    weights, Linear_θ with its bias."""
    theta = (2 if separate else 1) * d
    if resource == 'flops':
        return T * (3 * d * C + 3 * d * k * k + 3 * d * d + theta * C) \
            + branches * 2 * T * d * (d + 1)
    return 3 * d * C + 3 * d * k * k + 3 * d * d + theta * (C + 1)


def _evt_head_cost(attn, size, variant, resource):
    stride = 16 if attn.startswith('stages.2.') else 32
    T = (size[0] // stride) * (size[1] // stride)
    return _evt_per_head(T, EFFICIENTVIT.dims[attn][1], resource=resource)


EFFICIENTVIT = HeadFamily(
    name='efficientvit', cls=EfficientViT, arch='efficientvit-b1', kw={}, size=(64, 64),
    dims={f'stages.{s}.blocks.{j}.context_module.main': (C // 16, C, 16)
          for s, n, C in _EVT_STAGES for j in range(1, n + 1)},
    randomize=_mv_randomize, closed_in_build='stages.3.blocks.2.context_module.main',
    pruned_cases=tuple(PrunedCase('dcs', qk, ((64, 96), (72, 104)))
                       for qk in ('shared', 'separate')),
    closed=('stages.2.blocks.1.context_module.main', (64, 96)), grad_size=(64, 64),
    default_variant='dcs',
    drop_keep=lambda i, h: list(range(0, h, 1 + i % 3)),
    count_cases=(('dcs', (64, 64)), ), head_cost=_evt_head_cost,
    # at 64×64 the floor is 0.76; channels alone reach no lower than 0.96 here
    calibrate=(4, {}), budget=(7, dict(alpha_shift=1.), (0.85, )),
    magnitude=('stages.2.blocks.2.context_module.main', 5), magnitude_rel=1e-5,
    onnx_size=(64, 96), onnx_qkv_bias=None,
    # a head count that the block's width (C = 128, head_dim 16) does not give
    bad=('stages.2.blocks.2.context_module.main', 7, 1, 'stages.2.blocks.2.local_module.main'),
    baseline_variant='dcs',
    channel_owner=lambda attn, c: (c // 16) % EFFICIENTVIT.dims[attn][0],
    api=(dict(type='mmdcs.EfficientViT', arch='efficientvit-b1', variant='dcs',
              select_heads=True), dict(type='GlobalAveragePooling'), 1536,
         (('alpha', 0.85), ('magnitude', 0.85)), None, dict(shape=(64, 64)), False),
)

FAMILIES = {f.name: f for f in (VIT, SWIN, MOBILEVIT, EFFICIENTVIT)}


def by_family(cases: Callable[[HeadFamily], Sequence] = None):
    """``pytest.mark.parametrize`` over the families (``cases``: each family's own cases, the
    test then takes ``fam`` and ``case``)."""
    if cases is None:
        return pytest.mark.parametrize('fam', list(FAMILIES.values()), ids=list(FAMILIES))
    params = [pytest.param(f, c, id=f'{f.name}-{i}') for f in FAMILIES.values()
              for i, c in enumerate(cases(f))]
    return pytest.mark.parametrize('fam,case', params)


def _every_channel(spec):
    return [BlockSelection(b.name, b.dim, list(range(b.dim))) for b in spec.blocks]


def _with_dead_channels(fam, spec):
    """``spec`` with 3 more kept channels per attention, of its pruned heads, where channels
    lie inside heads (a subnet file may list them; the pruned proj reads them as zero: the
    supernet outputs zero there too); None for a family without such channels."""
    if fam.channel_owner is None:
        return None
    heads = {h.name: set(h.keep) for h in spec.heads}
    blocks = []
    for b in spec.blocks:
        dead = [c for c in range(b.dim) if fam.channel_owner(b.name, c) not in heads[b.name]
                and c not in b.keep][:3]
        blocks.append(BlockSelection(b.name, b.dim, sorted(b.keep + dead)))
    return SubnetSpec(spec.family, spec.arch, spec.variant, blocks, dict(spec.meta),
                      spec.hidden, spec.heads)


def _specs(fam, spec):
    """The exported spec and, where channels lie inside heads, the one with dead channels."""
    dead = _with_dead_channels(fam, spec)
    return [spec] if dead is None else [spec, dead]


def _widths(spec):
    widths = {(CHANNELS, b.name): b.kept for b in spec.blocks}
    widths.update(((HIDDEN, b.name), b.kept) for b in spec.hidden)
    widths.update(((HEADS, h.name), h.kept) for h in spec.heads)
    return widths


_CACHE: dict = {}


def _supernet(fam, seed=1):
    """``fam.build(seed)``, built once per module run, for the tests that only read it (export,
    prune from copies of it)."""
    key = (fam.name, 'supernet', seed)
    if key not in _CACHE:
        _CACHE[key] = fam.build(seed)
    return _CACHE[key]


def _calibrated(fam, seed, kw, resource):
    """(supernet, calibrated cost) shared by the tests of one module run (the supernet is not
    changed by them: gradients are cleared after use)."""
    key = (fam.name, seed, tuple(sorted(kw.items())))
    if key not in _CACHE:
        _CACHE[key] = [fam.build(seed, **kw), {}]
    m, costs = _CACHE[key]
    if resource not in costs:
        costs[resource] = calibrate_cost(m, resource, fam.size)
    return m, costs[resource]


def _head_classifier(backbone: dict, in_channels: int, target: dict):
    """A search classifier (10 classes) on ``backbone`` with ``select_heads`` and a budget
    ``cost.target``, built in mmpretrain's scope."""
    from mmengine.registry import DefaultScope

    from mmdcs.registry import MODELS
    cfg = dict(type='mmdcs.ChannelSelectionClassifier',
               backbone=dict(backbone, select_heads=True),
               neck=dict(type='GlobalAveragePooling'),
               head=dict(type='LinearClsHead', num_classes=10, in_channels=in_channels,
                         loss=dict(type='CrossEntropyLoss')),
               data_preprocessor=dict(type='ClsDataPreprocessor', num_classes=10),
               cost=dict(target=target))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(cfg)


# ============================================================================ the contract
def test_the_families_with_heads_are_the_described_ones(monkeypatch):
    """supports_heads is part of the contract: every family declares it (the base's False:
    absent); the families that support heads are exactly the ones this suite describes; a
    non-bool declaration is a gap."""
    from mmdcs.models.backbones.base import backbone_classes, contract_gaps
    # mmdcs's own families: a subclass another test defines (a family of its own, alive until
    # the garbage collector frees it) is found by backbone_classes() too, whatever the order
    classes = {f: c for f, c in backbone_classes().items() if c.__module__.startswith('mmdcs.')}
    assert {f for f, c in classes.items() if c.supports_heads is True} == set(FAMILIES)
    assert all(c.supports_heads is False for f, c in classes.items() if f not in FAMILIES)
    assert all(classes[f] is fam.cls for f, fam in FAMILIES.items())
    assert not any(g.startswith('supports_heads') for g in contract_gaps(ViT))
    monkeypatch.setattr(ViT, 'supports_heads', 'yes')
    assert any(g.startswith('supports_heads:') for g in contract_gaps(ViT))


# ============================================================================ pruned == supernet
def _check_narrow(fam, case, attn, ref, sel, channels):
    """The pruned attention has the kept heads' weights only."""
    H, D, d = fam.dims[sel.name]
    k = sel.kept
    assert attn.num_heads == k and attn.head_select is None
    theta_rows = d * k * (2 if case.qk_mask == 'separate' else 1)
    if isinstance(attn, LiteMLA):
        assert attn.heads == k
        assert attn.qkv.conv.weight.shape[0] == 3 * d * k
        assert attn.aggreg[0][0].weight.shape[0] == 3 * d * k
        assert attn.aggreg[0][1].groups == 3 * k
        assert attn.qk_select.theta.weight.shape[0] == theta_rows
        assert attn.proj.conv.weight.shape[1] == len(channels)
        return
    assert attn.qkv.weight.shape == (3 * d * k, D)
    assert attn.proj.weight.shape == (D, d * k)
    if hasattr(ref, 'relative_position_bias_table'):  # the kept heads' columns, in order
        assert torch.equal(attn.relative_position_bias_table,
                           ref.relative_position_bias_table[:, sel.keep])
    if case.variant == 'dcs':
        rank = case.options.get('theta_rank')
        assert attn.qk_select.theta.weight.shape == (theta_rows, rank or D)
        if rank:  # D -> r is shared by the heads and stays whole
            assert attn.qk_select.theta_down.weight.shape == (rank, D)


@by_family(lambda f: f.pruned_cases)
def test_head_pruned_equals_supernet_in_eval(fam, case):
    m = fam.build(1, case.variant, case.qk_mask, **case.options)
    spec = m.export_subnet()
    kept = {b.name: b for b in spec.heads}
    assert list(kept) == fam.attns and min(b.kept for b in spec.heads) >= 1
    assert sum(b.kept for b in spec.heads) < sum(fam.heads.values())  # some heads pruned
    if fam.closed_in_build:  # every α ≤ 0: the largest stays
        assert kept[fam.closed_in_build].kept == 1
    channels = {b.name: b.keep for b in spec.blocks}
    if fam.channel_owner is not None:
        # the export keeps no channel of a pruned head (it outputs zero), and every kept head
        # has its channels of α > 0
        for name, b in kept.items():
            alpha = m.get_submodule(name).select.alpha.detach()
            assert set(channels[name]) == {c for c in range(alpha.numel()) if alpha[c] > 0
                                           and fam.channel_owner(name, c) in b.keep}
    # a subnet that lists such channels anyway reads them as zero: the same network
    for sp in _specs(fam, spec):
        p = fam.pruned(m, sp, qk_mask=case.qk_mask, **case.options)
        channels = {b.name: b.keep for b in sp.blocks}
        for name, b in kept.items():
            _check_narrow(fam, case, p.get_submodule(name), m.get_submodule(name), b,
                          channels.get(name))
        if fam.channel_owner is not None:
            assert any(a.read_zero for a in p.attentions().values()) == (sp is not spec)
        for size in case.sizes:
            x = torch.randn((2, 3) + size, generator=torch.Generator().manual_seed(2))
            with torch.no_grad():
                refs, gots = m(x), p(x)
            assert len(gots) == len(refs)
            if 'out_indices' in case.options:
                assert len(refs) == len(case.options['out_indices'])
            for i, (got, r) in enumerate(zip(gots, refs)):
                assert_close_scaled(got, r, 1e-5, f'{case} {size} out {i}')
    ref = refs[0]
    # a closed head matters: opening every head changes the supernet's output
    with torch.no_grad():
        for sel in head_selectors(m).values():
            sel.alpha.abs_()
        assert (m(x)[0] - ref).abs().max() > 1e-3 * ref.abs().max()


@by_family()
def test_every_head_closed_keeps_the_head_of_largest_alpha(fam):
    name, size = fam.closed
    m = fam.build(0)
    H = fam.heads[name]
    alpha = ([-3., -.5, -2., -4., -1., -6.] + [-7. - i for i in range(H)])[:H]
    with torch.no_grad():
        m.get_submodule(name).head_select.alpha.copy_(torch.tensor(alpha))
    spec = m.export_subnet()
    assert {b.name: b.keep for b in spec.heads}[name] == [1]
    p = fam.pruned(m, spec)
    x = torch.randn((1, 3) + size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert_close_scaled(p(x)[0], m(x)[0], 1e-5)


@by_family()
def test_head_alpha_is_an_architecture_parameter_with_a_gradient(fam):
    m = fam.build(0).train()
    sels = head_selectors(m)
    assert list(sels) == fam.attns and {k: s.dim for k, s in sels.items()} == fam.heads
    assert all(isinstance(s, ChannelSelector) for s in sels.values())
    arch = {id(p) for p in arch_parameters(m)}
    assert all(id(s.alpha) in arch for s in sels.values())
    x = torch.randn((2, 3) + fam.grad_size, generator=torch.Generator().manual_seed(0))
    m(x)[0].square().sum().backward()
    assert all(s.alpha.grad is not None and s.alpha.grad.abs().sum() > 0 for s in sels.values())
    # E[kept heads] = Σ sigmoid(α)
    s = sels[fam.attns[0]]
    assert_close_scaled(s.expected_kept().detach(), torch.sigmoid(s.alpha.detach()).sum(), 1e-6)


@by_family()
def test_default_is_the_papers_network(fam):
    m = fam.new(variant=fam.default_variant)
    assert not head_selectors(m)
    # every attention keeps its heads whole, without a head selector
    assert head_layout(m) == fam.heads
    assert all(a.head_select is None and getattr(a, 'full_heads', a.num_heads) == a.num_heads
               for a in head_prunable_modules(m).values())
    spec = m.export_subnet()
    assert spec.heads == [] and 'heads' not in spec.to_dict()
    with pytest.raises(ValueError, match='select_heads needs a variant with channel selection'):
        fam.new(variant='baseline', select_heads=True)


# ============================================================================ exact cost
@by_family(lambda f: f.count_cases)
def test_flops_and_params_drop_by_exactly_the_pruned_heads(fam, case):
    """mmengine's count of the head-pruned network (channels all kept) = the full network's
    minus each pruned head's closed form (``head_cost``)."""
    variant, size = case
    m = fam.build(3, variant)
    full = m.export_subnet()
    heads = [BlockSelection(a, h, fam.drop_keep(i, h)) for i, (a, h) in
             enumerate(fam.heads.items())]
    spec = SubnetSpec(fam.name, fam.arch, variant, _every_channel(full), {}, [], heads)
    allheads = SubnetSpec(fam.name, fam.arch, variant, _every_channel(full), {}, [], [])
    p, ref = fam.pruned(m, spec), fam.pruned(m, allheads)
    pruned = {h.name: h.dim - h.kept for h in heads}
    assert sum(pruned.values()) > 0  # the pattern prunes heads
    assert count_flops(ref, size) - count_flops(p, size) == sum(
        n * fam.head_cost(a, size, variant, 'flops') for a, n in pruned.items())
    assert count_params(ref) - count_params(p) == sum(
        n * fam.head_cost(a, size, variant, 'params') for a, n in pruned.items())


@by_family(lambda f: ('flops', 'params'))
def test_calibrated_cost_prices_heads_exactly(fam, case):
    """calibrate_cost's head coefficients are the closed forms, and its count of exported
    subnets (heads, channels and, where searched, hidden units pruned together; kept channels
    of pruned heads included) is mmengine's count of the pruned network, exactly; E[kept
    heads] = Σ sigmoid(α) enters the expected count linearly, with a gradient."""
    resource = case
    seed, kw = fam.calibrate
    m, cost = _calibrated(fam, seed, kw, resource)
    assert cost.head_dims == fam.heads and list(cost.head_dims) == fam.attns
    for a in fam.attns:
        want = fam.head_cost(a, fam.size, 'dcs', resource)
        assert cost.head_coef[a] == want, a
        assert cost.marginal((HEADS, a), {}) == want, a
        assert cost.unit_dims()[(HEADS, a)] == fam.heads[a]
    for s in (seed, seed + 1):
        sup = fam.build(s, **kw)
        spec = sup.export_subnet()
        assert spec.heads and bool(spec.hidden) == bool(kw.get('select_hidden'))
        for sp in _specs(fam, spec):
            p = copy.deepcopy(sup)
            apply_subnet_(p, sp)
            got = count_flops(p, fam.size) if resource == 'flops' else count_params(p)
            assert cost.count(_widths(sp)) == got, s
    sels = {n: mod.select for n, mod in m.named_modules() if hasattr(mod, 'pruned')}
    hidden, heads = hidden_selectors(m), head_selectors(m)
    try:
        e = cost.expected(sels, 'gate', hidden, heads=heads)
        e.backward()
        manual = cost.at({n: float(s.expected_kept().detach()) for n, s in sels.items()},
                         {k: float(s.expected_kept().detach()) for k, s in hidden.items()},
                         {k: float(s.expected_kept().detach()) for k, s in heads.items()})
        assert_close_scaled(e.detach(), torch.tensor(manual), 1e-6)  # float32 sums
        assert all(s.alpha.grad is not None for s in heads.values())
    finally:
        m.zero_grad(set_to_none=True)


# ============================================================================ export
@by_family()
def test_subnet_round_trip_and_older_formats(fam, tmp_path):
    m = _supernet(fam)
    spec = m.export_subnet(multiple_of=8)
    d = spec.to_dict()
    assert d['format'] == SUBNET_FORMAT == 'mmdcs.subnet/3'
    assert [h['name'] for h in d['heads']] == fam.attns
    assert all('pad' not in h for h in d['heads'])  # heads are never rounded up
    path = str(tmp_path / 'subnet.json')
    spec.save(path)
    assert SubnetSpec.load(path).to_dict() == d
    p = fam.new(subnet=path)
    assert head_layout(p) == {h.name: h.kept for h in spec.heads}
    # a format-2 file (no heads) still loads and builds the network with every head
    old = dict(d, format='mmdcs.subnet/2')
    old.pop('heads')
    p = fam.new(subnet=old)
    assert head_layout(p) == fam.heads
    for a in fam.attns:
        table = getattr(p.get_submodule(a), 'relative_position_bias_table', None)
        assert table is None or table.shape == (SWIN_TABLE, fam.heads[a])
    assert SubnetSpec.from_dict(dict(old, format='mmdcs.subnet/1')).heads == []


def _head_weights(attn, h, d):
    """The slices of head ``h``'s weights that make its magnitude score, by hand."""
    if isinstance(attn, LiteMLA):
        H = attn.heads
        rows = list(range(h * 3 * d, (h + 1) * 3 * d))
        cols = [(b * H + h) * d + j for b in range(attn.num_branches) for j in range(d)]
        return [attn.qkv.conv.weight[rows], attn.aggreg[0][0].weight[rows],
                attn.aggreg[0][1].weight[rows], attn.proj.conv.weight[:, cols]]
    D = attn.qkv.weight.shape[1]
    rows = [part * D + h * d + j for part in range(3) for j in range(d)]
    cols = list(range(h * d, (h + 1) * d))
    return [attn.qkv.weight[rows], attn.qkv.bias[rows], attn.proj.weight[:, cols]]


def _proj_weight(attn):
    return attn.proj.conv.weight if isinstance(attn, LiteMLA) else attn.proj.weight


@by_family()
def test_magnitude_scores_of_heads(fam):
    """A head's magnitude score is the L2 norm of its q, k, v rows (and biases) and proj
    columns (LiteMLA: its qkv rows, its depthwise and grouped 1×1 rows, its proj columns in
    every branch), computed here by hand from the slices; a parameter that is no weight on
    the head's values (Swin's bias table: an additive logit) is not part of it; a head with
    larger weights scores higher."""
    from mmdcs.selection.budget import head_magnitude_scores
    m = fam.build(2)
    scores = head_magnitude_scores(m)
    assert list(scores) == fam.attns
    name, boosted = fam.magnitude
    attn, (H, _, d) = m.get_submodule(name), fam.dims[name]
    with torch.no_grad():
        for h in range(H):
            ref = sum(w.pow(2).sum() for w in _head_weights(attn, h, d)).sqrt()
            assert_close_scaled(scores[name][h], ref, fam.magnitude_rel, f'head {h}')
        for p in fam.magnitude_ignores:
            getattr(attn, p).mul_(100)
        assert torch.equal(head_magnitude_scores(m)[name], scores[name])
        _proj_weight(attn)[:, boosted * d:(boosted + 1) * d] *= 10
    assert int(head_magnitude_scores(m)[name].argmax()) == boosted


@by_family(lambda f: [(method, t) for t in f.budget[2] for method in ('alpha', 'magnitude')])
def test_export_to_a_flops_budget_ranks_heads_within_one_percent(fam, case):
    """budget_subnet with the scorer's head scores: heads ranked with channels (and hidden
    units where searched), the built network's mmengine FLOPs within ±1 % of the target (of
    the baseline's). Where channels lie inside heads the export ranks a head with its
    channels: no kept channel belongs to a pruned head, every kept head has a kept channel."""
    from mmdcs.selection import budget_subnet
    from mmdcs.selection.importance import get_scorer
    method, target = case
    seed, kw, _ = fam.budget
    m, cost = _calibrated(fam, seed, kw, 'flops')
    scorer = get_scorer(method)
    scores, hidden = scorer(m)
    spec = budget_subnet(m, fam.name, fam.arch, 'dcs', scores, cost, target,
                         hidden_scores=hidden, normalize=scorer.normalize,
                         head_scores=scorer.heads(m))
    assert [h.name for h in spec.heads] == fam.attns
    assert sum(h.kept for h in spec.heads) < sum(fam.heads.values())
    ranked = spec.meta['budget']['ranked']
    assert 'heads' in ranked and (fam.ranked is None or ranked == fam.ranked)
    if fam.channel_owner is not None:
        heads = {h.name: set(h.keep) for h in spec.heads}
        for b in spec.blocks:
            owners = {fam.channel_owner(b.name, c) for c in b.keep}
            assert owners == heads[b.name], b.name  # no dead channel, no dead head
    p = fam.pruned(m, spec)
    flops = count_flops(p, fam.size)
    assert flops == spec.meta['budget']['achieved']
    assert abs(flops / cost.baseline - target) <= 0.01


@by_family()
def test_onnx_parity_of_a_head_pruned_subnet(fam, tmp_path):
    pytest.importorskip('onnxruntime')
    pytest.importorskip('onnxscript')
    import onnx

    from mmdcs.apis.deploy import ExportWrapper, OrtModel, export_and_check, set_export_mode_
    m = _supernet(fam)
    spec = _specs(fam, m.export_subnet())[-1]
    p = set_export_mode_(fam.pruned(m, spec))
    if fam.channel_owner is not None:  # some attention reads a kept channel of a pruned head
        assert any(a.read_zero for a in p.attentions().values())
    x = torch.randn((1, 3) + fam.onnx_size, generator=torch.Generator().manual_seed(3))
    out = str(tmp_path / 'heads.onnx')
    res = export_and_check(ExportWrapper(p, 'backbone'), x, out)
    assert all(r['ok'] for r in res['parity'])
    with torch.no_grad():
        ref = p(x)
    assert_close_scaled(OrtModel(out)(x)[0], ref[0], 1e-4)
    assert sum(h.kept for h in spec.heads) < sum(fam.heads.values())
    # the graph's attention is narrow: Linear_θ's bias keeps its name in every attention; the
    # exporter folds the weights' transposes (Swin: the bias table's gather and, in some
    # blocks, qkv's bias) into constants of other names (2026-11-26, torch's dynamo exporter)
    shapes = {i.name: tuple(i.dims) for i in onnx.load(out).graph.initializer}
    named_qkv = 0
    for h in spec.heads:
        d = fam.dims[h.name][2]
        assert shapes[f'net.{h.name}.qk_select.theta.bias'] == (d * h.kept, )
        key = f'net.{h.name}.qkv.bias'
        if fam.onnx_qkv_bias == 'all' or (fam.onnx_qkv_bias == 'some' and key in shapes):
            assert shapes[key] == (3 * d * h.kept, )
            named_qkv += 1
    assert named_qkv or fam.onnx_qkv_bias is None


# ============================================================================ bad input
BAD_EDITS = {
    'out of range': (lambda h, f: h.__setitem__('keep', [0, f.heads[f.bad[0]]]),
                     lambda f: f'head index {f.heads[f.bad[0]]} is out of range '
                     f'[0, {f.heads[f.bad[0]]})'),
    'empty': (lambda h, f: h.__setitem__('keep', []), lambda f: 'no head kept'),
    'repeated': (lambda h, f: h.__setitem__('keep', [f.bad[2]] * 2), lambda f: 'repeated head'),
    'dim': (lambda h, f: h.__setitem__('dim', f.bad[1]),
            lambda f: f'the subnet says heads = {f.bad[1]}, the backbone has heads = '
            f'{f.heads[f.bad[0]]}'),
}


@by_family(lambda f: list(BAD_EDITS) + ['name'])
def test_bad_heads_are_one_line_naming_the_block_and_the_key(fam, case):
    attn, _, _, other = fam.bad
    d = _supernet(fam).export_subnet().to_dict()
    entry = next(h for h in d['heads'] if h['name'] == attn)
    if case == 'name':
        entry['name'] = other
        message = f'heads entry {other}: the backbone has no attention with prunable heads there'
    else:
        edit, message = BAD_EDITS[case]
        edit(entry, fam)
        # "heads entry <attention>": the key of the file and the block
        message = f'heads entry {attn}: {message(fam)}'
    entry.pop('kept')
    with pytest.raises(SubnetError) as e:
        fam.new(subnet=d)
    assert message in str(e.value) and '\n' not in str(e.value)


# ============================================================================ checkpoints, API
@by_family()
def test_a_baseline_checkpoint_loads_into_a_head_selected_supernet(fam, tmp_path):
    """The head α a baseline checkpoint cannot have may be missing (they keep their "all kept"
    initialisation), nothing else: load_converted and the export's load_baseline_checkpoint
    (a file) refuse a checkpoint without an attention's weights; the KCR supernet with open
    gates then computes the baseline's output in eval."""
    from mmdcs.apis.export import load_baseline_checkpoint
    from mmdcs.apis.launch import UserError
    torch.manual_seed(0)
    base = fam.new(variant='baseline').eval()
    state = base.state_dict()
    sup = fam.new(variant=fam.baseline_variant, select_heads=True)
    missing, unexpected = sup.load_converted(state)
    assert missing == [] and unexpected == []
    assert all(bool((s.alpha > 0).all()) for s in head_selectors(sup).values())
    qkv = [k for k in state if '.qkv.' in k and k.startswith(f'{fam.attns[0]}.')]
    assert qkv
    with pytest.raises(KeyError, match='checkpoint does not fit'):
        sup.load_converted({k: v for k, v in state.items() if k not in qkv})
    path = str(tmp_path / 'base.pth')
    torch.save({'state_dict': state}, path)
    m = fam.new(variant=fam.baseline_variant, select_heads=True)
    load_baseline_checkpoint(m, path)
    assert all(torch.equal(v, m.state_dict()[k]) for k, v in state.items())
    torch.save({'state_dict': {k: v for k, v in state.items() if k not in qkv}}, path)
    with pytest.raises(UserError, match='does not fit'):
        load_baseline_checkpoint(m, path)
    kcr = fam.new(variant='kcr', select_heads=True, gate_init=3.).eval()
    kcr.load_converted(state)
    size = (fam.size[0], fam.size[1] + 16)
    x = torch.randn((1, 3) + size, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert_close_scaled(kcr(x)[0], base(x)[0], 1e-5)


@by_family(lambda f: f.api[3] if f.api else ())
def test_export_api_writes_the_heads_and_builds_the_narrow_network(fam, case, tmp_path):
    """mmdcs.apis.export.export_subnet on a select_heads classifier config: subnet.json
    (format 3) lists the kept heads of every attention (no kept channel in a pruned head where
    channels lie inside heads); without a target the API verifies that the pruned model gives
    the supernet's eval output, with one the measured FLOPs are within ±1 % of it. Where the
    family says so, the magnitude pruner reads a baseline checkpoint (no α, no head α)."""
    import mmpretrain.utils
    from mmengine.config import Config

    from mmdcs.apis.export import export_subnet
    from mmdcs.apis.subnet_io import build_model
    backbone, neck, in_channels, _, init, kwargs, from_baseline = fam.api
    method, target = case
    mmpretrain.utils.register_all_modules(init_default_scope=False)
    path = str(tmp_path / 'heads.py')
    with open(path, 'w') as f:
        f.write(f"default_scope = 'mmpretrain'\nmodel = dict(type='ImageClassifier', "
                f"backbone={backbone!r}, neck={neck!r}, head=dict(type='LinearClsHead', "
                f"num_classes=10, in_channels={in_channels}))\n")
    torch.manual_seed(0)
    model = build_model(Config.fromfile(path).model, 'mmpretrain')
    if init is None:
        random_gates_(model.backbone, 5, alpha_shift=1.)
    else:
        g = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith('alpha'):
                    init(p, g)
    ckpt = str(tmp_path / 'heads.pth')
    state = model.state_dict()
    if from_baseline and method == 'magnitude':  # the same layers, no selection
        state = {k: v for k, v in state.items() if not k.endswith(('alpha', 'gate.tau'))}
        assert not any('head_select' in k for k in state)
    torch.save({'state_dict': state}, ckpt)
    res = export_subnet(path, ckpt, str(tmp_path / 'out'), method=method,
                        target=None if target is None else ('flops', target), **kwargs)
    with open(res.subnet) as f:
        data = json.load(f)
    assert data['format'] == 'mmdcs.subnet/3'
    assert [h['name'] for h in data['heads']] == fam.attns
    heads = {h['name']: set(h['keep']) for h in data['heads']}
    assert sum(map(len, heads.values())) < sum(fam.heads.values())
    if fam.channel_owner is not None:
        for b in data['blocks']:
            assert {fam.channel_owner(b['name'], c) for c in b['keep']} == heads[b['name']]
    if target is not None:
        assert res.budget['measured']['flops']['ratio'] == pytest.approx(target, abs=0.01)


# ============================================================================ no counterpart
@pytest.mark.parametrize('peer,family,arch', [('DynamicViT', 'vit', 'deit-s'),
                                              ('DynamicSwin', 'swin', 'swin-t')])
def test_select_heads_on_a_peer_backbone_is_one_line(peer, family, arch):
    """A peer method's backbone (supports_heads False) has no head selection."""
    import importlib
    module = importlib.import_module(f'mmdcs.models.backbones.dynamic_{family}')
    with pytest.raises(ValueError) as e:
        getattr(module, peer)(arch, select_heads=True)
    assert (f"select_heads=True, but {peer} (family '{family}') has no head selection"
            in str(e.value)) and '\n' not in str(e.value)


def test_heads_of_a_subnet_on_a_family_without_heads_are_refused(monkeypatch):
    sw = Swin('swin-t', variant='kcr', img_size=64)
    spec = sw.export_subnet()
    spec.heads = [BlockSelection('layers.0.blocks.0.attn', 3, [0])]
    # a family that declares no head selection: even a real attention path is refused
    monkeypatch.setattr(Swin, 'supports_heads', False)
    with pytest.raises(SubnetError, match='has no attention with prunable heads there'):
        Swin('swin-t', subnet=spec, img_size=64)


def test_prune_heads_refuses_bad_heads_and_a_second_pruning():
    for a in (DCSAttention(64, 4), LiteMLA(64, 64, dim=16, select=True, select_heads=True)):
        for bad in ([], [4], [1, 1]):
            with pytest.raises(ValueError, match='prune_heads_: bad heads'):
                copy.deepcopy(a).prune_heads_(bad)
    a.prune_heads_([0, 2])  # LiteMLA
    with pytest.raises(RuntimeError, match='already pruned'):
        a.prune_heads_([0])


def test_vit_projection_to_a_flops_budget_ranks_heads_with_channels():
    """The end of a search (project_to_budget) puts {α > 0} of channels and heads on the
    budget: the exported subnet's mmengine FLOPs within 1 % below the target."""
    from mmdcs.selection.budget_search import project_to_budget
    m = VIT.build(6)
    with torch.no_grad():  # start from everything kept
        for p in arch_parameters(m):
            p.abs_()
    cost = calibrate_cost(m, 'flops', VIT.size)
    sels = {n: mod.select for n, mod in m.named_modules() if hasattr(mod, 'pruned')}
    budget = 0.7 * cost.baseline
    rep = project_to_budget(cost, sels, budget, {}, head_selectors=head_selectors(m))
    assert sum(rep['heads_kept'].values()) < 36 and min(rep['heads_kept'].values()) >= 1
    spec = m.export_subnet()
    p = copy.deepcopy(m)
    apply_subnet_(p, spec)
    flops = count_flops(p, VIT.size)
    assert flops == rep['after']
    assert 0.99 * budget <= flops <= budget


def test_swin_bias_table_columns_follow_the_heads():
    """Pruning reads the kept heads' own bias columns: the network built with another head's
    column (here the kept heads' columns reversed) computes something else."""
    m = _supernet(SWIN)
    spec = m.export_subnet()
    p = SWIN.pruned(m, spec)
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


def test_swin_search_with_head_gates_ends_on_the_flops_target():
    """The alternating loop moves Swin's head α under a FLOPs budget (32x32: stage 0's 8x8
    map padded to 14x14 and shifted), and the end of the search puts channels and heads on the
    target; the built network is what the budget counts."""
    from mmengine.registry import DefaultScope

    from mmdcs.registry import MODELS
    torch.manual_seed(0)
    model = _head_classifier(dict(type='mmdcs.Swin', arch='swin-t', variant='kcr', img_size=32),
                             768, dict(flops=0.6))
    assert set(model._head_selectors) == set(SWIN.attns)
    assert model._budget.head_dims == SWIN.heads
    loop = search_loop(model, 'swin_heads', 40)
    heads = head_selectors(model.backbone)
    before = torch.cat([s.alpha.detach().clone() for s in heads.values()])
    model.train()
    g = torch.Generator().manual_seed(0)
    alternate(loop, 20, g, size=32)
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


def test_swin_bad_heads_through_the_export_tool_exit_2(tmp_path, capsys):
    """A bad heads entry given to a tool's entry point: one line, exit 2 (user_errors)."""
    from mmdcs.apis.launch import user_errors
    d = _supernet(SWIN).export_subnet().to_dict()
    entry = next(h for h in d['heads'] if h['name'] == 'layers.3.blocks.0.attn')
    entry['keep'], entry['kept'] = [0, 24], 2
    path = tmp_path / 'bad.json'
    path.write_text(json.dumps(d))
    with pytest.raises(SystemExit) as e:
        with user_errors():
            Swin('swin-t', subnet=str(path), img_size=64)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert 'heads entry layers.3.blocks.0.attn: head index 24 is out of range [0, 24)' in err


def test_mobilevit_search_classifier_costs_the_heads():
    """A DCS-MobileViT classifier with select_heads and a FLOPs target: the budget has a head
    unit per attention (the classifier refuses a budget that does not cost heads)."""
    model = _head_classifier(dict(type='mmdcs.MobileViT', arch='mobilevit-xs', variant='dcs'),
                             384, dict(flops=0.85, input_size=64))
    assert list(model._head_selectors) == MOBILEVIT.attns
    assert list(model._budget.head_dims) == MOBILEVIT.attns
    assert all(c > 0 for c in model._budget.head_coef.values())


def test_efficientvit_search_ends_on_the_budget_without_dead_channels():
    """A DCS-EfficientViT classifier with select_heads and a FLOPs target: its budget has a
    head unit per LiteMLA, and the end of the search (project_to_budget) ranks a head with its
    channels: {α > 0} of the channels lies inside {α > 0} of the heads, and the deployed count
    (the exported subnet built, mmengine's count) is within 1 % below the target."""
    fam = EFFICIENTVIT
    model = _head_classifier(dict(type='mmdcs.EfficientViT', arch=fam.arch, variant='dcs'),
                             1536, dict(flops=0.85, input_size=64))
    assert list(model._head_selectors) == fam.attns and model._budget.head_dims == fam.heads
    random_gates_(model.backbone, 3, alpha_shift=1.)
    rep = model.project_to_budget()
    assert 0.84 <= rep['after_ratio'] <= 0.85
    spec = model.backbone.export_subnet()
    heads = {h.name: set(h.keep) for h in spec.heads}
    assert sum(map(len, heads.values())) < sum(fam.heads.values())
    for b in spec.blocks:
        assert {fam.channel_owner(b.name, c) for c in b.keep} == heads[b.name], b.name
    pruned = copy.deepcopy(model)
    apply_subnet_(pruned.backbone, spec)
    assert count_flops(pruned, (1, 3, 64, 64)) == rep['after']


@by_family()
def test_channel_heads_is_the_described_owner(fam):
    """Where channels lie inside heads, the contract's ``channel_heads()`` of each attention is
    the owner this suite computes by hand; elsewhere no attention declares it."""
    m = fam.new(variant='dcs', select_heads=True)
    for a in fam.attns:
        owner = getattr(m.get_submodule(a), 'channel_heads', None)
        assert callable(owner) == (fam.channel_owner is not None), a
        if callable(owner):
            got = owner().tolist()
            assert got == [fam.channel_owner(a, c) for c in range(len(got))], a
