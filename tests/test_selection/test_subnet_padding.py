"""Export with ``multiple_of``: every D̃ rounded up with zero-weight channels, the pruned network
still equal to the searched one, for every family."""
import pytest
import torch

from _backbones import case, families, random_gates_
from mmdcs.models.backbones.vit import ViT
from mmdcs.selection import SubnetError, SubnetSpec, prunable_modules, prune_state_dict
from _tools import assert_close_scaled  # noqa: E402 (tests/ is on sys.path)


@pytest.mark.parametrize('family', list(families()))
def test_rounded_subnet_equals_supernet(family, tmp_path):
    c, cls = case(family), families()[family]
    size = c.sizes[0]
    variant = 'kcr' if family in ('vit', 'swin') else 'dcs'

    def build(variant):
        return cls(c.arch, variant, **c.dense)

    torch.manual_seed(0)
    sup = random_gates_(build(variant).eval(), seed=0, theta_std=c.theta_std)
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
    pruned = cls(arch=c.arch, subnet=path, **c.dense).eval()
    pruned.load_state_dict(prune_state_dict(sup.state_dict(), loaded, lambda: build(variant)))
    x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for a, b in zip(sup(x), pruned(x)):
            assert_close_scaled(a, b, 1e-4)


def test_pad_must_be_kept_and_multiple_positive():
    sup = random_gates_(ViT('deit-tiny', 'kcr', img_size=32))
    d = sup.export_subnet(multiple_of=8).to_dict()
    b = next(b for b in d['blocks'] if b.get('pad'))
    b['pad'] = [i for i in range(b['dim']) if i not in b['keep']][:1]
    with pytest.raises(SubnetError, match='"pad" lists channels that are not in "keep"'):
        ViT('deit-tiny', subnet=d, img_size=32)
    with pytest.raises(SubnetError, match='multiple_of'):
        sup.export_subnet(multiple_of=0)
