"""Hidden-unit selection (``select_hidden=True``) and a low-rank Linear_θ (``theta_rank``) in the
four families: searched, exported (subnet format 2), pruned physically narrower and equal to the
supernet in eval; the cost model counts the pruned network's FLOPs exactly."""
import pytest
import torch

from mmdcs.analysis.complexity import count_flops
from mmdcs.models.backbones.efficientvit import EfficientViT
from mmdcs.models.backbones.mobilevit import MobileViT
from mmdcs.models.backbones.swin import Swin
from mmdcs.models.backbones.vit import ViT
from mmdcs.selection import (SubnetError, SubnetSpec, arch_parameters, hidden_selectors,
                             prunable_modules, prune_state_dict)
from _tools import assert_close_scaled  # noqa: E402 (tests/ is on sys.path)

CASES = {
    'vit': (lambda **k: ViT('deit-tiny', img_size=32, **k), 32, 'kcr'),
    'swin': (lambda **k: Swin('swin-t', out_indices=(3, ), img_size=64, **k), 64, 'kcr'),
    'mobilevit': (lambda **k: MobileViT('mobilevit-xs', **k), 64, 'dcs'),
    'efficientvit': (lambda **k: EfficientViT('efficientvit-b0', **k), 64, 'dcs'),
}


def _random_alpha_(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        sels = [m.select for m in prunable_modules(model).values()]
        for sel in sels + list(hidden_selectors(model).values()):
            sel.alpha.copy_(torch.randn(sel.alpha.shape, generator=g))


@pytest.mark.parametrize('family', list(CASES))
def test_hidden_selection_pruned_equals_supernet(family, tmp_path):
    build, size, variant = CASES[family]
    torch.manual_seed(0)
    sup = build(variant=variant, select_hidden=True).eval()
    hidden = hidden_selectors(sup)
    assert len(hidden) == len(prunable_modules(sup)) > 0
    assert all(any(p is s.alpha for p in arch_parameters(sup)) for s in hidden.values())
    _random_alpha_(sup)
    spec = sup.export_subnet(multiple_of=8)
    assert len(spec.hidden) == len(hidden) and spec.hidden_kept_ratio < 0.7
    path = str(tmp_path / 'subnet.json')
    spec.save(path)
    # the pruned network is built from the file alone (no select_hidden needed)
    pruned = type(sup)(arch=sup.arch, subnet=path, **(
        {'img_size': 32} if family == 'vit' else {'img_size': 64} if family == 'swin' else {}))
    pruned.eval()
    assert not hidden_selectors(pruned)
    for b in spec.hidden:
        m = pruned.get_submodule(b.name)  # physically narrower
        assert m.hidden_features == b.kept < b.dim
        w = m.fc1.weight if hasattr(m, 'fc1') else m.depth_conv.conv.weight
        assert w.shape[0] == b.kept
    pruned.load_state_dict(prune_state_dict(sup.state_dict(), SubnetSpec.load(path),
                                            lambda: build(variant=variant, select_hidden=True)))
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        outs = sup(x), pruned(x)
    for a, b in zip(*outs):
        assert_close_scaled(a, b, 1e-4)
    # the cost model of the search is the exact FLOPs of the pruned network (up to a constant)
    cm = sup.cost_model('flops')
    full = type(sup)(arch=sup.arch, variant=variant, **(
        {'img_size': 32} if family == 'vit' else {'img_size': 64} if family == 'swin' else {}))
    if family in ('vit', 'swin'):  # nominal size = the test size: an exact count
        saved = count_flops(full, size) - count_flops(pruned, size)
        cost_full = sum(float(t.flops(torch.tensor(float(t.selector.dim)),
                                      torch.tensor(float(t.hidden_dim)))) for t in cm.terms)
        # the exported widths (with their padding) through the cost model
        pad = {b.name: b.kept for b in spec.hidden}
        dk = {b.name: b.kept for b in spec.blocks}
        names = list(prunable_modules(sup))
        cost_kept = sum(float(t.flops(torch.tensor(float(dk[n])), torch.tensor(float(pad[n]))))
                        for t, n in zip(cm.terms, names))
        assert saved == pytest.approx(cost_full - cost_kept, rel=1e-6)


def test_select_hidden_needs_mlp_selection_and_is_off_by_default():
    assert not hidden_selectors(ViT('deit-tiny', 'kcr', img_size=32))
    with pytest.raises(ValueError, match='select_hidden needs a variant with MLP'):
        ViT('deit-tiny', 'dcs-arch1', img_size=32, select_hidden=True)


@pytest.mark.parametrize('family', ['vit', 'efficientvit'])
def test_theta_rank_search_export_retrain(family, tmp_path):
    build, size, _ = CASES[family]
    torch.manual_seed(0)
    sup = build(variant='dcs', theta_rank=4, select_hidden=True)
    sel = [m for m in sup.modules() if type(m).__name__ == 'QKChannelSelector']
    assert sel and all(s.theta_rank == 4 and s.theta_down.out_features == 4 for s in sel)
    # the search cost counts both factors of Linear_θ as its constant
    assert sup.theta_cost('paper') == sum(p.numel() for s in sel for p in s.parameters())
    # search: a training step reaches Linear_θ (both factors) and α
    sup.train()
    x = torch.randn(2, 3, size, size)
    sum(o.float().pow(2).mean() for o in sup(x)).backward()
    assert all(s.theta.weight.grad.abs().sum() > 0 for s in sel)
    sel[0].theta.weight.data.normal_()  # so that the input factor gets a gradient too
    sup.zero_grad()
    sum(o.float().pow(2).mean() for o in sup(x)).backward()
    assert sel[0].theta_down.weight.grad.abs().sum() > 0
    assert all(p.grad is not None for p in arch_parameters(sup))
    # export: the subnet records the rank
    sup.eval()
    _random_alpha_(sup)
    spec = sup.export_subnet()
    assert spec.meta['theta_rank'] == 4
    path = str(tmp_path / 'subnet.json')
    spec.save(path)
    # retrain: the pruned network takes the rank from the file and loads the supernet weights
    kw = {'img_size': 32} if family == 'vit' else {}
    pruned = type(sup)(arch=sup.arch, subnet=path, **kw).eval()
    assert pruned.theta_rank == 4
    pruned.load_state_dict(prune_state_dict(
        sup.state_dict(), spec, lambda: build(variant='dcs', theta_rank=4, select_hidden=True)))
    with torch.no_grad():
        for a, b in zip(sup(x), pruned(x)):
            assert_close_scaled(a, b, 1e-4)
    pruned.train()
    sum(o.float().pow(2).mean() for o in pruned(x)).backward()
    assert any(m.theta_down.weight.grad is not None
               for m in pruned.modules() if type(m).__name__ == 'QKChannelSelector')
    with pytest.raises(SubnetError, match='theta_rank=8'):
        type(sup)(arch=sup.arch, subnet=path, theta_rank=8, **kw)


@pytest.mark.parametrize('family', ['mobilevit', 'efficientvit'])
def test_select_hidden_all_prunes_the_conv_ffns_too(family):
    """``select_hidden='all'``: the MV2 / MBConv inverted bottlenecks get hidden gates too; the
    pruned network equals the supernet, and the flops cost model predicts its FLOPs exactly."""
    from mmdcs.analysis.complexity import nominal_input_size
    build, size, variant = CASES[family]
    torch.manual_seed(0)
    sup = build(variant=variant, select_hidden='all').eval()
    n_mlp = len(hidden_selectors(build(variant=variant, select_hidden=True)))
    assert len(hidden_selectors(sup)) > n_mlp
    _random_alpha_(sup, seed=3)
    spec = sup.export_subnet()
    pruned = type(sup)(arch=sup.arch, subnet=spec).eval()
    pruned.load_state_dict(prune_state_dict(sup.state_dict(), spec,
                                            lambda: build(variant=variant, select_hidden='all')))
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for a, b in zip(sup(x), pruned(x)):
            assert_close_scaled(a, b, 1e-4)
    cm = sup.cost_model('flops')
    full = sum(float(t.flops(torch.tensor(float(t.selector.dim if t.selector else 0)),
                             torch.tensor(float(t.hidden_dim)))) for t in cm.terms)
    ns = nominal_input_size(sup)
    assert count_flops(sup, ns) - count_flops(pruned, ns) == pytest.approx(
        full - cm.at_kept(), rel=1e-9)
    with pytest.raises(ValueError, match="select_hidden must be False, True or 'all'"):
        build(variant=variant, select_hidden='some')
