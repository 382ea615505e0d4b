"""The exact count of a budget at an input size other than the family's nominal one (issue 22):
``calibrate_cost`` measures every coefficient at the size asked for, so the count of any pruned
subnet is mmengine's, whatever the family does with the tokens there (MobileViT's patch
unfolding interpolates a map the patch does not divide; Swin pads to whole windows; EfficientViT's
strided convs round up), with and without hidden-unit selection; and the export to a budget at
that size lands within ±1 % of the baseline."""
import pytest
import torch

from mmdcs.analysis.complexity import calibrate_cost, count_flops, count_params
from mmdcs.models.backbones.efficientvit import EfficientViT
from mmdcs.models.backbones.mobilevit import MobileViT
from mmdcs.models.backbones.swin import Swin
from mmdcs.models.backbones.vit import ViT
from mmdcs.selection import SubnetSpec, hidden_selectors, prunable_modules
from mmdcs.selection.budget import alpha_scores, budget_subnet

#: family → (builder, a size that is not its nominal one (non-square), the variant tested with
#: hidden-unit selection (the other paper's is tested without), the select_hidden option)
CASES = {
    # the patch grid of 48x32 is 3x2 instead of the nominal 2x2
    'vit': (lambda **k: ViT('deit-tiny', img_size=32, **k), (48, 32), 'kcr', True),
    # 44x36 → an 11x9 token grid: windows of 7 pad it to 14x14 in the first stage, 6x5 → 7x7
    # (a narrow Swin-T, see the test)
    'swin': (lambda **k: Swin('swin-t', out_indices=(3, ), img_size=64, **k), (44, 36), 'kcr',
             True),
    # nominal 256; at 96x80 the 6x5 and 3x3 maps are interpolated up to whole 2x2 patches
    'mobilevit': (lambda **k: MobileViT('mobilevit-xs', **k), (96, 80), 'dcs', 'all'),
    # nominal 224; 72x88 gives odd maps (9x11 at stride 8, 5x6 at 16, 3x3 at 32)
    'efficientvit': (lambda **k: EfficientViT('efficientvit-b0', **k), (72, 88), 'dcs', 'all'),
}


def _random_gates_(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        sels = [m.select for m in prunable_modules(model).values()]
        for sel in sels + list(hidden_selectors(model).values()):
            sel.alpha.copy_(torch.randn(sel.alpha.shape, generator=g))


@pytest.mark.parametrize('hidden', [False, True], ids=['channels', 'hidden'])
@pytest.mark.parametrize('family', list(CASES))
def test_count_is_exact_at_a_non_nominal_size(family, hidden, monkeypatch):
    build, size, variant, option = CASES[family]
    # both papers' variants: DCS (Linear_θ, a constant) where the family's case is KCR and the
    # reverse, on the channels-only case
    if not hidden:
        variant = {'kcr': 'dcs', 'dcs': 'kcr'}[variant]
    if family == 'swin':  # Swin-T's layout and windows at a quarter of its width: faster
        monkeypatch.setitem(Swin.arch_zoo, 'swin-t', dict(embed_dims=32, depths=(2, 2, 2, 2),
                                                          num_heads=(1, 2, 4, 8)))
    torch.manual_seed(0)
    sup = build(variant=variant, select_hidden=option if hidden else False).eval()
    assert tuple(sup.input_size) != size
    flops = calibrate_cost(sup, 'flops', size)
    params = calibrate_cost(sup, 'params', size)
    assert flops.input_size == size and bool(flops.hidden_dims) == hidden
    base = build(variant='baseline').eval()
    assert flops.baseline == count_flops(base, (1, 3) + size)
    assert params.baseline == count_params(base)
    # a random subnet: the prediction is mmengine's count of the built pruned network
    _random_gates_(sup, seed=3)
    spec = sup.export_subnet()
    pruned = build(subnet=spec).eval()
    kept = {b.name: b.kept for b in spec.blocks}
    hkept = {b.name: b.kept for b in spec.hidden}
    measured = count_flops(pruned, (1, 3) + size)
    assert flops.at(kept, hkept) == pytest.approx(measured, rel=1e-6)
    assert params.at(kept, hkept) == pytest.approx(count_params(pruned), rel=1e-6)
    # the export to a budget at that size (channels and hidden units ranked jointly)
    target = 0.6 if family in ('vit', 'swin') or hidden else round(
        (flops.ratio(flops.floor) + 1) / 2, 2)
    spec = budget_subnet(sup, sup.family, sup.arch, sup.variant, alpha_scores(sup), flops,
                         target)
    pruned = build(subnet=SubnetSpec.coerce(spec.to_dict())).eval()
    ratio = count_flops(pruned, (1, 3) + size) / flops.baseline
    assert ratio == pytest.approx(target, abs=0.01)
    assert ratio == pytest.approx(spec.meta['budget']['achieved_ratio'], rel=1e-6)
