"""The backbone-family contract, run by every registered family (ViT, Swin, MobileViT,
EfficientViT, and the next one: families are found by ``backbone_classes()``; each needs an entry
in ``tests/_backbones.py`` CASES, or these tests fail for it).

* timm equivalence: the converted timm weights fill the classifier of the family's config
  exactly (every arch), which then gives timm's logits, at the nominal size and at one that needs
  position-embedding interpolation / padded windows / resized maps; dense features are timm's
  intermediates where timm has them;
* open supernets (every selection variant) compute the baseline;
* subnet round trip: a random subnet → JSON → a pruned backbone built from the file alone has
  that subnet's layout; pruned == supernet (eval), at every test size;
* ``out_indices``: every feature map, its shape, subsets and negative indices;
* ``frozen_stages``: -1 nothing, 0 the stem, k the stem and the first k stages (no gradient,
  eval mode after ``train()``);
* registries (mmdet / mmseg / mmpretrain scopes) and bad input (arch, variant, indices, subnets);
* the contract itself: every family's class fills it (``contract_gaps``: paper variant, Grad-CAM
  layer and its maps, timm conversion, cost terms, frozen parts, attention layout), a class
  lacking any piece is named by it, and the subnet and ``frozen_stages`` are applied once, after
  the outermost constructor (the base class's doing, not the family's).

Tiny archs and small inputs: the family files keep only what is particular to a family.
"""
import copy
import functools
import importlib
import json
import re

import pytest
import torch

from _backbones import (CASES, backbone_state, case, classifier, families, frozen_prefixes,
                        rand_input, randn_input, random_gates_, timm_model, under)
from mmdcs.analysis.gradcam import get_layer
from mmdcs.models.backbones import VARIANTS, SelectableBackbone
from mmdcs.models.backbones.base import contract_gaps, count_params
from mmdcs.selection import QKChannelSelector, SubnetError, SubnetSpec, prune_state_dict
from _tools import assert_close_scaled  # noqa: E402 (tests/ is on sys.path)

FAMILIES = list(families())
TIMM_ARCHS = [(f, a) for f in FAMILIES for a in families()[f].timm_models or {}]
TIMM_FEATURES = [f for f in FAMILIES if f in CASES and CASES[f].timm_features]
#: every selection variant (dcs-arch2 has kcr's structure) and the separate Q/K masks
SUPERNETS = [('dcs', 'shared'), ('dcs', 'separate'), ('kcr', 'shared'), ('dcs-arch1', 'shared')]


def _ids(params):
    return ['-'.join(str(v) if not isinstance(v, tuple) else 'x'.join(map(str, v)) for v in p)
            if isinstance(p, tuple) else str(p) for p in params]


def test_every_family_has_a_case():
    assert FAMILIES, 'no backbone family registered'
    missing = sorted(set(FAMILIES) - set(CASES))
    stale = sorted(set(CASES) - set(FAMILIES))
    assert not missing, f'families without an entry in tests/_backbones.py CASES: {missing}'
    assert not stale, f'CASES entries of no registered family: {stale}'


def test_a_new_family_is_found_and_fails_without_a_case():
    """A SelectableBackbone subclass with a family and an arch zoo joins the suite by itself,
    and its tests fail (naming the table to fill) until it has a case."""
    import gc

    from mmdcs.models.backbones import SelectableBackbone

    class NewFamilyBackbone(SelectableBackbone):
        family = 'new-family-under-test'
        arch_zoo = {'tiny': {}}

    try:
        assert families()['new-family-under-test'] is NewFamilyBackbone
        with pytest.raises(pytest.fail.Exception,
                           match=r"'new-family-under-test' \(NewFamilyBackbone\) has no entry "
                           r'in tests/_backbones.py CASES'):
            case('new-family-under-test')
        # and test_every_family_fills_the_contract names everything it lacks
        gaps = contract_gaps(NewFamilyBackbone)
        for piece in CONTRACT_PIECES:
            assert any(g.startswith(piece) for g in gaps), (piece, gaps)
    finally:
        del NewFamilyBackbone
        gc.collect()
    assert 'new-family-under-test' not in families()


# ----------------------------------------------------------------------------- the contract
#: every piece of the contract a family class must fill (what contract_gaps names)
CONTRACT_PIECES = ('paper_variant', 'cam_layer', 'timm_models', 'cost_terms()',
                   'tokens_to_bchw()', 'stem_parts()', 'stage_parts()', 'attention_layout()')


@pytest.mark.parametrize('family', FAMILIES)
def test_every_family_fills_the_contract(family):
    """No gap (contract_gaps), and the pieces work: the paper's variant builds a supernet, the
    Grad-CAM layer exists and its output maps onto the image's grid, the timm archs convert."""
    c, cls = case(family), families()[family]
    assert contract_gaps(cls) == []
    assert cls(c.arch, cls.paper_variant, **c.dense).is_supernet
    model = cls(c.arch, 'baseline', **c.dense).eval()
    seen = []
    get_layer(model, cls.cam_layer).register_forward_hook(
        lambda m, a, out: seen.append(out[-1] if isinstance(out, (tuple, list)) else out))
    size = c.sizes[-1]
    with torch.no_grad():
        model(rand_input(2, 3, *size, seed=4))
    maps = model.tokens_to_bchw(seen[-1], size)
    assert maps.dim() == 4 and maps.shape[0] == 2
    # a map on the image's grid: its cells are at most the image's, and of its aspect
    h, w = maps.shape[-2:]
    assert 1 <= h <= size[0] and 1 <= w <= size[1]
    assert abs(h / w - size[0] / size[1]) <= max(1 / h, 1 / w) * size[0] / size[1] + 1e-6
    assert set(cls.timm_models) <= set(cls.arch_zoo)


def _complete_members():
    """Class members of a family that fills the whole contract (checked by class only)."""
    return dict(
        family='complete-family-under-test', arch_zoo={'tiny': {}}, paper_variant='dcs',
        cam_layer='stages.-1', timm_models={'tiny': 'tiny_timm'},
        cost_terms=lambda self: [], tokens_to_bchw=lambda self, act, hw: act,
        stem_parts=lambda self: [], stage_parts=lambda self, i: [],
        attention_layout=lambda self, name: None,
        convert_checkpoint=classmethod(lambda cls, sd, arch, layout='timm': sd))


#: (what is taken from a complete family, the gap it leaves)
MISSING = [('family', 'family'), ('arch_zoo', 'arch_zoo'), ('paper_variant', 'paper_variant'),
           ('cam_layer', 'cam_layer'), ('timm_models', 'timm_models'),
           ('cost_terms', 'cost_terms()'), ('tokens_to_bchw', 'tokens_to_bchw()'),
           ('stem_parts', 'stem_parts()'), ('stage_parts', 'stage_parts()'),
           ('attention_layout', 'attention_layout()'),
           ('convert_checkpoint', 'convert_checkpoint()')]


@pytest.mark.parametrize('member, gap', MISSING, ids=[m for m, _ in MISSING])
def test_a_family_lacking_a_piece_of_the_contract_is_named(member, gap):
    import gc
    members = _complete_members()
    complete = type('CompleteFamily', (SelectableBackbone, ), dict(members))
    members.pop(member)
    lacking = type('LackingFamily', (SelectableBackbone, ), members)
    try:
        assert contract_gaps(complete) == []
        gaps = contract_gaps(lacking)
        assert len(gaps) == 1 and gaps[0].startswith(gap), gaps
    finally:
        del complete, lacking
        gc.collect()


def test_a_contract_piece_may_be_declared_absent():
    """No softmax attention: no attention layout; no timm archs (``{}``): no conversion; a
    paper variant must be a selection variant."""
    import gc
    members = _complete_members()
    for m in ('attention_layout', 'convert_checkpoint'):
        members.pop(m)
    absent = type('AbsentFamily', (SelectableBackbone, ),
                  dict(members, softmax_attention=False, timm_models={}))
    wrong = type('WrongFamily', (SelectableBackbone, ),
                 dict(_complete_members(), paper_variant='baseline',
                      timm_models={'huge': 'huge_timm'}))
    try:
        assert contract_gaps(absent) == []
        gaps = contract_gaps(wrong)
        assert [g.split(':')[0] for g in gaps] == ['paper_variant', 'timm_models'], gaps
        assert "'baseline'" in gaps[0] and "['huge']" in gaps[1]
    finally:
        del absent, wrong
        gc.collect()


def _count_apply_subnet(monkeypatch):
    calls = []
    apply = SelectableBackbone._apply_subnet

    def counted(self):
        calls.append(type(self).__name__)
        return apply(self)

    monkeypatch.setattr(SelectableBackbone, '_apply_subnet', counted)
    return calls


@pytest.mark.parametrize('family', FAMILIES)
def test_subnet_and_frozen_stages_are_applied_once_after_the_outermost_init(family,
                                                                            monkeypatch):
    """The base class prunes and freezes once the instance's outermost ``__init__`` has
    returned: the family's own constructor does not (a second pass would fail on the pruned
    layers or count twice), and a subclass that adds layers after ``super().__init__`` still
    sees the supernet there and gets a pruned, frozen network."""
    import gc
    c, cls = case(family), families()[family]
    sup = random_gates_(cls(c.arch, 'kcr', **c.dense), seed=5)
    spec = sup.export_subnet()
    calls = _count_apply_subnet(monkeypatch)
    pruned = cls(c.arch, subnet=spec, frozen_stages=0, **c.dense)
    assert calls == [cls.__name__] and not pruned.is_supernet
    assert {b.name: pruned.get_submodule(b.name).keep.tolist() for b in spec.blocks} == \
        spec.keep_map()
    stem = [p for part in pruned.stem_parts()
            for p in ([part] if isinstance(part, torch.nn.Parameter) else part.parameters())]
    assert stem and not any(p.requires_grad for p in stem)

    class Extended(cls):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.supernet_in_init = self.is_supernet
            self.extra = torch.nn.Linear(2, 2)

    class Inherited(Extended):  # no __init__ of its own
        pass

    try:
        for sub in (Extended, Inherited):
            del calls[:]
            model = sub(c.arch, subnet=spec, **c.dense)
            assert calls == [sub.__name__]
            assert model.supernet_in_init and not model.is_supernet
            assert {b.name: model.get_submodule(b.name).keep.tolist() for b in spec.blocks} == \
                spec.keep_map()
    finally:
        del Extended, Inherited
        gc.collect()


# ----------------------------------------------------------------------------- timm equivalence
@pytest.mark.parametrize('family, arch', TIMM_ARCHS, ids=_ids(TIMM_ARCHS))
def test_converted_timm_weights_give_timm_logits(family, arch):
    """Every timm tensor has its place with its shape in the classifier of the family's config
    (strict load) and nothing else is there; the classifier gives timm's logits at the case's
    sizes for this arch (timm built to run at that size, with the same weights)."""
    ref = timm_model(arch)
    clf = classifier(arch).eval()
    clf.load_state_dict(families()[family].convert_checkpoint(ref.state_dict(), arch),
                        strict=True)
    assert count_params(clf) == count_params(ref)
    for size in [s for a, s in case(family).timm_logits if a == arch]:
        sized = timm_model(arch, size, like=ref)
        x = randn_input(1, 3, *size, seed=1)
        with torch.no_grad():
            expected = sized(x)
            out = clf(x, mode='tensor')
        assert out.shape == expected.shape == (1, 1000)
        assert expected.std() > 1e-2  # informative logits: not a comparison of near-zeros
        assert_close_scaled(out, expected, 1e-4)


@pytest.mark.parametrize('family', TIMM_FEATURES)
def test_dense_features_are_timm_intermediates(family):
    c, cls = case(family), families()[family]
    arch, size, timm_features = c.timm_features
    model = cls(arch, **c.dense).eval()
    model.load_converted(backbone_state(arch))
    x = rand_input(1, 3, *size, seed=2)
    with torch.no_grad():
        ours = model(x)
        ref = timm_features(timm_model(arch, size), x)
    assert len(ours) == len(ref) == len(c.dense_shapes)
    for o, r in zip(ours, ref):
        assert o.shape == r.shape
        assert_close_scaled(o, r, 1e-4)


# ----------------------------------------------------------------------------- supernet = baseline
@functools.lru_cache(maxsize=None)
def _baseline(family):
    """The baseline with the converted weights and every output (shared: do not modify); its
    missing keys, an input of the odd test size and its outputs."""
    c, cls = case(family), families()[family]
    base = cls(c.arch, 'baseline', **c.dense).eval()
    missing, unexpected = base.load_converted(backbone_state(c.arch), strict=False)
    assert not unexpected and not base.is_supernet
    x = randn_input(2, 3, *c.sizes[-1], seed=3)
    with torch.no_grad():
        return base, tuple(missing), x, base(x)


@pytest.mark.parametrize('family', FAMILIES)
@pytest.mark.parametrize('variant, qk_mask', SUPERNETS, ids=_ids(SUPERNETS))
def test_open_supernet_with_converted_weights_equals_baseline(family, variant, qk_mask):
    c, cls = case(family), families()[family]
    _, base_missing, x, expected = _baseline(family)
    sup = cls(c.arch, variant, qk_mask=qk_mask, **c.dense).eval()
    missing, unexpected = sup.load_converted(backbone_state(c.arch), strict=False)
    # the selection parameters keep their "all open" init; the rest is the baseline's
    assert not unexpected and sorted(missing) == sorted(base_missing)
    qk, mlp = VARIANTS[variant]
    assert sup.is_supernet == mlp
    selectors = [m for m in sup.modules() if isinstance(m, QKChannelSelector)]
    assert bool(selectors) == qk
    assert all(m.separate == (qk_mask == 'separate') for m in selectors)
    with torch.no_grad():
        out = sup(x)
    assert len(out) == len(expected) == len(c.dense_shapes)
    for o, e in zip(out, expected):
        assert_close_scaled(o, e, 1e-5)


# ----------------------------------------------------------------------------- subnets
@functools.lru_cache(maxsize=None)
def _searched(family, variant):
    """A supernet with the converted weights and random gates (about half the channels kept,
    partial Q/K masks), eval mode, and its exported subnet. Shared: do not modify."""
    c, cls = case(family), families()[family]
    sup = cls(c.arch, variant, **c.dense).eval()
    sup.load_converted(backbone_state(c.arch), strict=False)
    random_gates_(sup, seed=10, theta_std=c.theta_std)
    return sup, sup.export_subnet(note='test')


SELECTION = ['dcs', 'kcr']


@pytest.mark.parametrize('family', FAMILIES)
@pytest.mark.parametrize('variant', SELECTION)
def test_subnet_round_trip_through_json(family, variant, tmp_path):
    c, cls = case(family), families()[family]
    sup, spec = _searched(family, variant)
    assert spec.family == family and spec.arch == c.arch and spec.variant == variant
    assert spec.meta == dict(note='test')
    assert [b.name for b in spec.blocks][-1] == c.last_block
    assert 0 < spec.kept_ratio < 1 and all(0 < b.kept <= b.dim for b in spec.blocks)
    path = str(tmp_path / 'subnet.json')
    spec.save(path)
    with open(path) as f:
        assert json.load(f) == spec.to_dict()
    assert SubnetSpec.load(path).to_dict() == spec.to_dict()
    pruned = cls(arch=c.arch, subnet=path, **c.dense)  # from the file alone
    assert pruned.variant == variant and not pruned.is_supernet
    assert pruned.subnet_spec.to_dict() == spec.to_dict()
    # the built network has the subnet's layout: every prunable block keeps those channels
    assert {b.name: pruned.get_submodule(b.name).keep.tolist() for b in spec.blocks} == \
        spec.keep_map()
    assert count_params(pruned) < count_params(sup)
    # a pruned state dict records its layout and loads into the network built from the dict
    from_dict = cls(c.arch, subnet=spec.to_dict(), **c.dense)
    from_dict.load_state_dict(pruned.state_dict(), strict=True)
    assert count_params(from_dict) == count_params(pruned)


@pytest.mark.parametrize('family', FAMILIES)
@pytest.mark.parametrize('variant', SELECTION)
def test_pruned_subnet_equals_supernet(family, variant):
    c, cls = case(family), families()[family]
    sup, spec = _searched(family, variant)
    pruned = cls(c.arch, subnet=spec, **c.dense).eval()
    pruned.load_state_dict(prune_state_dict(sup.state_dict(), spec,
                                            lambda: cls(c.arch, variant, **c.dense)))
    seen = []
    if VARIANTS[variant][0]:  # the Q/K masks of a DCS supernet are really partial
        qk = next(m for m in sup.modules() if isinstance(m, QKChannelSelector))
        handle = qk.register_forward_hook(lambda m, i, o: seen.append(float(o[0].mean())))
    with torch.no_grad():
        for i, size in enumerate(c.sizes):
            x = randn_input(2, 3, *size, seed=5 + i)
            ref, out = sup(x), pruned(x)
            assert len(out) == len(ref) == len(c.dense_shapes)
            for o, r in zip(out, ref):
                assert_close_scaled(o, r, 1e-4)
        # the gates did something: the baseline computes another function
        _, _, x, base = _baseline(family)
        assert not all(torch.allclose(s, b, atol=1e-3) for s, b in zip(sup(x), base))
    if VARIANTS[variant][0]:
        handle.remove()
        assert seen and all(0.05 < m < 0.95 for m in seen), seen


# ----------------------------------------------------------------------------- out_indices
@pytest.mark.parametrize('family', FAMILIES)
@pytest.mark.parametrize('variant', ['baseline', 'dcs'])
def test_out_indices_feature_maps(family, variant):
    c, cls = case(family), families()[family]
    model = cls(c.arch, variant, **c.dense).eval()
    x = randn_input(1, 3, *c.sizes[-1], seed=4)
    with torch.no_grad():
        outs = model(x)
    assert isinstance(outs, tuple)
    assert [tuple(o.shape) for o in outs] == [(1, ) + s for s in c.dense_shapes]
    if hasattr(model, 'out_channels'):
        assert tuple(model.out_channels) == tuple(s[0] for s in c.dense_shapes)
    # a subset, with a negative index (from the end): the same maps, in order
    dense = tuple(c.dense['out_indices'])
    sub = cls(c.arch, variant, **dict(c.dense, out_indices=(dense[1], -1))).eval()
    assert sub.out_indices == (dense[1], c.num_outputs - 1) and dense[-1] == c.num_outputs - 1
    missing, _ = sub.load_state_dict(model.state_dict(), strict=False)
    assert not missing
    with torch.no_grad():
        sub_outs = sub(x)
    assert len(sub_outs) == 2
    assert torch.equal(sub_outs[0], outs[1]) and torch.equal(sub_outs[1], outs[-1])


# ----------------------------------------------------------------------------- frozen_stages
def _frozen_cases():
    out = []
    for f in FAMILIES:
        stages = CASES[f].num_stages if f in CASES else 1
        out += [pytest.param(f, k, id=f'{f}-{k}') for k in sorted({-1, 0, 1, stages})]
    return out


FROZEN = _frozen_cases()


@pytest.mark.parametrize('family, frozen_stages', FROZEN)
def test_frozen_stages_freeze_the_stem_and_the_first_stages(family, frozen_stages):
    """-1: nothing; 0: the stem (patch / conv embedding, position embedding and class token
    where present); k ≥ 1: the stem and the first k stages. Frozen parameters get no gradient
    and frozen modules stay in eval mode through ``train()``."""
    c, cls = case(family), families()[family]
    model = cls(c.arch, 'dcs', frozen_stages=frozen_stages, **c.dense)
    prefixes = frozen_prefixes(c, frozen_stages)
    for _ in range(2):  # train() after eval() as well
        model.train()
        frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
        expected = {n for n, _ in model.named_parameters() if under(n, prefixes)}
        assert frozen == expected
        assert bool(frozen) == (frozen_stages >= 0)
        for name, m in model.named_modules():
            if name and under(name, prefixes):
                assert not m.training, name
            elif any(p.requires_grad for p in m.parameters(recurse=False)):
                assert m.training, name
        model.eval()
    model.train()
    if any(p.requires_grad for p in model.parameters()):  # not everything frozen
        x = randn_input(2, 3, *c.sizes[0], seed=6)
        sum(o.pow(2).mean() for o in model(x)).backward()
        assert all(p.grad is None for n, p in model.named_parameters() if n in expected)
        assert any(p.grad is not None for n, p in model.named_parameters() if n not in expected)


@pytest.mark.parametrize('family', FAMILIES)
def test_frozen_stages_out_of_range_is_refused(family):
    c, cls = case(family), families()[family]
    with pytest.raises(ValueError, match='frozen_stages'):
        cls(c.arch, frozen_stages=c.num_stages + 1)


# ----------------------------------------------------------------------------- registries
SCOPES = ['mmdet', 'mmseg', 'mmpretrain']


@pytest.mark.parametrize('family', FAMILIES)
@pytest.mark.parametrize('scope', SCOPES)
def test_builds_through_downstream_registries(family, scope):
    from mmengine.registry import DefaultScope
    c, cls = case(family), families()[family]
    registry = importlib.import_module(f'{scope}.registry').MODELS
    cfg = dict(type=f'mmdcs.{cls.__name__}', arch=c.arch, variant='kcr', **c.dense)
    with DefaultScope.overwrite_default_scope(scope):
        model = registry.build(copy.deepcopy(cfg))
    assert type(model) is cls and model.is_supernet
    assert model.out_indices == tuple(c.dense['out_indices'])


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize('family', FAMILIES)
def test_bad_arch_variant_and_out_indices_are_refused(family):
    c, cls = case(family), families()[family]
    with pytest.raises(ValueError, match='.*'.join(map(re.escape, cls.arch_zoo))):
        cls('no-such-arch')
    with pytest.raises(ValueError, match='baseline'):
        cls(c.arch, 'dcss')
    with pytest.raises(ValueError, match='qk_mask'):
        cls(c.arch, 'dcs', qk_mask='both')
    n = c.num_outputs
    with pytest.raises(ValueError, match=f'out_indices {n}'):
        cls(c.arch, out_indices=n)
    with pytest.raises(ValueError, match=f'out_indices {-n - 1}'):
        cls(c.arch, out_indices=(0, -n - 1))


@functools.lru_cache(maxsize=None)
def _spec_dict(family):
    c, cls = case(family), families()[family]
    return random_gates_(cls(c.arch, 'kcr'), seed=30).export_subnet().to_dict()


BAD_SUBNETS = ['family', 'arch', 'missing', 'extra', 'out_of_range', 'empty', 'dim']


def _bad_subnet(family, kind, d):
    """Edit ``d`` (a subnet dict of the case's arch) as ``kind`` says; return the expected
    message (a regex)."""
    c, cls = case(family), families()[family]
    first, last = d['blocks'][0], d['blocks'][-1]
    if kind == 'family':
        other = next((f for f in FAMILIES if f != family), 'another')
        d['family'] = other
        return f"'{other}' family"
    if kind == 'arch':
        other = next(a for a in cls.arch_zoo if a != c.arch)
        d['arch'] = other
        return f"arch '{other}'"
    if kind == 'missing':
        d['blocks'].pop()
        return f'missing in the subnet: {re.escape(c.last_block)}'
    if kind == 'extra':
        d['blocks'].append(dict(first, name=c.extra_block))
        return f'not in the backbone: {re.escape(c.extra_block)}'
    if kind == 'out_of_range':
        first.update(keep=[0, first['dim']], kept=2)
        return f'block {re.escape(first["name"])}: channel index {first["dim"]} is out of range'
    if kind == 'empty':
        first.update(keep=[], kept=0)
        return f'block {re.escape(first["name"])}: D̃ = 0'
    assert kind == 'dim'
    last['dim'] += 1
    return f'block {re.escape(last["name"])}: the subnet says D = {last["dim"]}'


@pytest.mark.parametrize('family', FAMILIES)
@pytest.mark.parametrize('kind', BAD_SUBNETS)
def test_subnet_that_does_not_fit_is_refused_naming_the_block(family, kind):
    c, cls = case(family), families()[family]
    d = copy.deepcopy(_spec_dict(family))
    assert d['blocks'][-1]['name'] == c.last_block
    match = _bad_subnet(family, kind, d)
    with pytest.raises(SubnetError, match=match):
        cls(c.arch, subnet=d)


@pytest.mark.parametrize('family', FAMILIES)
def test_subnet_needs_a_selection_variant_and_only_supernets_export(family):
    c, cls = case(family), families()[family]
    d = copy.deepcopy(_spec_dict(family))
    assert isinstance(SubnetSpec.coerce(d), SubnetSpec)
    with pytest.raises(SubnetError, match='channel selection'):
        cls(c.arch, 'baseline', subnet=d)
    with pytest.raises(SubnetError, match='no architecture'):
        _baseline(family)[0].export_subnet()
    for variant, (_, mlp) in VARIANTS.items():
        if not mlp and variant != 'baseline':
            with pytest.raises(SubnetError, match='no architecture'):
                cls(c.arch, variant).export_subnet()
    with pytest.raises(SubnetError, match='no architecture'):
        cls(c.arch, subnet=d).export_subnet()  # already pruned
