"""Export with ``multiple_of``: every D̃ rounded up with zero-weight channels, the pruned network
still equal to the searched one, for every family."""
import pytest
import torch

from mmdcs.models.backbones.efficientvit import EfficientViT
from mmdcs.models.backbones.mobilevit import MobileViT
from mmdcs.models.backbones.swin import Swin
from mmdcs.models.backbones.vit import ViT
from mmdcs.selection import SubnetError, SubnetSpec, prunable_modules, prune_state_dict

CASES = {
    'vit': (lambda v: ViT('deit-tiny', v, img_size=32), 32),
    'swin': (lambda v: Swin('swin-t', v, out_indices=(3, )), 64),
    'mobilevit': (lambda v: MobileViT('mobilevit-xs', v), 64),
    'efficientvit': (lambda v: EfficientViT('efficientvit-b0', v), 64),
}


def _random_alpha_(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in prunable_modules(model).values():
            m.select.alpha.copy_(torch.randn(m.select.alpha.shape, generator=g))


@pytest.mark.parametrize('family', list(CASES))
def test_rounded_subnet_equals_supernet(family, tmp_path):
    build, size = CASES[family]
    variant = 'kcr' if family in ('vit', 'swin') else 'dcs'
    torch.manual_seed(0)
    sup = build(variant).eval()
    _random_alpha_(sup)
    exact = sup.export_subnet()
    spec = sup.export_subnet(multiple_of=8)
    assert spec.meta['multiple_of'] == 8
    padded = 0
    for b, e in zip(spec.blocks, exact.blocks):
        assert b.kept % 8 == 0 or b.kept == b.dim
        assert b.kept - e.kept < 8 and set(e.keep) <= set(b.keep)
        assert sorted(set(b.keep) - set(e.keep)) == b.pad
        # the added channels are the dropped ones of largest α
        alpha = prunable_modules(sup)[b.name].select.alpha.detach()
        dropped = sorted(set(range(b.dim)) - set(e.keep), key=lambda i: -float(alpha[i]))
        assert set(b.pad) == set(dropped[:len(b.pad)])
        padded += len(b.pad)
    assert padded > 0
    path = str(tmp_path / 'subnet.json')
    spec.save(path)
    loaded = SubnetSpec.load(path)
    assert [b.pad for b in loaded.blocks] == [b.pad for b in spec.blocks]
    pruned = type(sup)(arch=sup.arch, subnet=path).eval()
    pruned.load_state_dict(prune_state_dict(sup.state_dict(), loaded, lambda: build(variant)))
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for a, b in zip(sup(x), pruned(x)):
            assert torch.allclose(a, b, atol=1e-4), float((a - b).abs().max())


def test_pad_must_be_kept_and_multiple_positive():
    sup = ViT('deit-tiny', 'kcr', img_size=32)
    _random_alpha_(sup)
    d = sup.export_subnet(multiple_of=8).to_dict()
    b = next(b for b in d['blocks'] if b.get('pad'))
    b['pad'] = [i for i in range(b['dim']) if i not in b['keep']][:1]
    with pytest.raises(SubnetError, match='"pad" lists channels that are not in "keep"'):
        ViT('deit-tiny', subnet=d, img_size=32)
    with pytest.raises(SubnetError, match='multiple_of'):
        sup.export_subnet(multiple_of=0)
