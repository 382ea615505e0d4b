"""The backbone contract (mmdcs/models/backbones/base.py): ``nominal_size``, ``is_peer``,
``attention_layout()`` / ``softmax_attention`` and one meaning of ``frozen_stages``, and that the
analysis asks backbones through it instead of by class."""
import pytest
import torch
import torch.nn as nn

from mmdcs.analysis.attention import (AttentionNotSupported, attention_modules,
                                      collect_attention)
from mmdcs.analysis.complexity import default_input_size, nominal_input_size
from mmdcs.analysis.latency import is_peer_backbone
from mmdcs.models.backbones import SelectableBackbone
from mmdcs.models.backbones.base import AttentionLayout
from mmdcs.models.backbones.dynamic_swin import DynamicSwin
from mmdcs.models.backbones.dynamic_vit import DynamicViT
from mmdcs.models.backbones.efficientvit import EfficientViT
from mmdcs.models.backbones.mobilevit import MobileViT, MobileViTBlock
from mmdcs.models.backbones.ofb_swin import OFBSwin
from mmdcs.models.backbones.ofb_vit import OFBViT
from mmdcs.models.backbones.swin import Swin, SwinBlock
from mmdcs.models.backbones.vit import ViT


def _frozen(module: nn.Module):
    return {n for n, p in module.named_parameters() if not p.requires_grad}


# ----------------------------------------------------------------- nominal size
def test_nominal_size_is_a_class_attribute_the_analysis_reads():
    assert SelectableBackbone.nominal_size == 224
    assert MobileViT.nominal_size == 256 and EfficientViT.nominal_size == 224
    assert default_input_size(MobileViT) == (256, 256)

    class Wide(EfficientViT):
        nominal_size = 288

    assert default_input_size(Wide) == (288, 288)
    assert nominal_input_size(Wide('efficientvit-b0')) == (288, 288)
    # families built for a size report the built one
    assert nominal_input_size(ViT('deit-tiny', img_size=(160, 192))) == (160, 192)
    assert ViT.size_kwargs((160, 160)) == dict(img_size=160)
    assert Swin.size_kwargs((160, 192)) == dict(img_size=(160, 192))
    assert MobileViT.size_kwargs((160, 160)) == {}


# ----------------------------------------------------------------- peer marker
def test_peer_marker():
    for cls in (DynamicViT, DynamicSwin, OFBViT, OFBSwin):
        assert cls.is_peer and is_peer_backbone(cls)
    for cls in (ViT, Swin, MobileViT, EfficientViT):
        assert not cls.is_peer and not is_peer_backbone(cls)

    class NewPeer(ViT):  # a new peer only sets the marker
        is_peer = True

    assert is_peer_backbone(NewPeer) and is_peer_backbone(NewPeer('deit-tiny'))


# ----------------------------------------------------------------- attention layout
def test_attention_layouts_of_the_families():
    vit = ViT('deit-tiny', 'dcs')
    names = list(attention_modules(vit))
    lay = vit.attention_layout(names[0])
    assert lay.class_token and lay.watch is None
    swin = Swin('swin-t', 'dcs')
    name = list(attention_modules(swin))[-1]
    assert isinstance(swin.attention_layout(name).watch, SwinBlock)
    assert swin.attention_layout(name).watch is swin.layers[3].blocks[1]
    mvit = MobileViT('mobilevit-xs', 'dcs')
    lay = mvit.attention_layout(list(attention_modules(mvit))[0])
    assert isinstance(lay.watch, MobileViTBlock) and not lay.class_token
    assert not EfficientViT.softmax_attention
    with pytest.raises(AttentionNotSupported, match='linear attention'):
        attention_modules(EfficientViT('efficientvit-b0', 'dcs'))


def test_analysis_asks_the_backbone_for_its_layout():
    """A family's own layout decides the query maps (no branch on its class or family)."""

    class Flat(AttentionLayout):
        def query_map(self, attn, image, query, image_hw):
            return attn.new_ones(attn.shape[1], 2, 3), (2, 3), (0, 0)

    class Custom(ViT):
        family = 'custom'

        def attention_layout(self, name):
            return Flat()

    model = Custom('deit-tiny', 'dcs').eval()
    stats = collect_attention(model, torch.randn(1, 3, 32, 32), rank_images=0)
    assert all(tuple(m.shape) == (3, 2, 3) and bool((m == 1).all())
               for m in stats.maps.values())


# ----------------------------------------------------------------- frozen_stages
def test_vit_frozen_stages():
    assert not _frozen(ViT('deit-tiny').train())
    stem = ViT('deit-tiny', frozen_stages=0, drop_rate=0.1).train()
    assert _frozen(stem) == {'cls_token', 'pos_embed', 'patch_embed.proj.weight',
                             'patch_embed.proj.bias'}
    assert not stem.pos_drop.training and stem.blocks[0].training
    two = ViT('deit-tiny', frozen_stages=2).train()
    assert {n.split('.')[1] for n in _frozen(two) if n.startswith('blocks.')} == {'0', '1'}
    assert not two.blocks[1].training and two.blocks[2].training
    assert all(p.requires_grad for p in two.norm.parameters())
    every = ViT('deit-tiny', out_type='avg_featmap', frozen_stages=12).train()
    assert not any(p.requires_grad for p in every.parameters())
    with pytest.raises(ValueError, match='frozen_stages'):
        ViT('deit-tiny', frozen_stages=13)


def test_swin_frozen_stages_follow_mmdet():
    """mmdet's SwinTransformer: stage i is its blocks and the PatchMerging after them (here
    ``layers[i + 1].downsample``); k=0 the patch embedding only."""
    stem = Swin('swin-t', out_indices=(0, 1, 2, 3), frozen_stages=0).train()
    assert _frozen(stem) == {n for n, _ in stem.named_parameters()
                             if n.startswith('patch_embed.')}
    one = Swin('swin-t', out_indices=(0, 1, 2, 3), frozen_stages=1).train()
    frozen = _frozen(one)
    assert {n for n, _ in one.layers[0].named_parameters(prefix='layers.0')} <= frozen
    assert {n for n, _ in one.layers[1].downsample.named_parameters(
        prefix='layers.1.downsample')} <= frozen
    assert {'norm0.weight', 'norm0.bias'} <= frozen and 'norm1.weight' not in frozen
    assert not any(n.startswith('layers.1.blocks') for n in frozen)
    assert not one.layers[1].downsample.training and one.layers[1].blocks.training
    every = Swin('swin-t', out_indices=(0, 1, 2, 3), frozen_stages=4).train()
    assert not any(p.requires_grad for p in every.parameters())
    with pytest.raises(ValueError, match='frozen_stages'):
        Swin('swin-t', frozen_stages=5)


@pytest.mark.parametrize('cls, arch', [(MobileViT, 'mobilevit-xs'),
                                       (EfficientViT, 'efficientvit-b0')])
def test_conv_families_frozen_stages(cls, arch):
    stem = cls(arch, frozen_stages=0).train()
    assert _frozen(stem) == {f'stem.{n}' for n, _ in stem.stem.named_parameters()}
    assert not any(m.training for m in stem.stem.modules())
    assert stem.stages[0].training
    two = cls(arch, frozen_stages=2).train()
    assert not two.stages[1].training and two.stages[2].training
    assert not any(p.requires_grad for p in two.stages[1].parameters())
    assert all(p.requires_grad for p in two.stages[2].parameters())
    with pytest.raises(ValueError, match='frozen_stages'):
        cls(arch, frozen_stages=cls(arch).num_stages + 1)


# ----------------------------------------------------------------- family knowledge on the class
def test_a_peer_names_the_plain_arch_it_is_timed_against():
    """latency.plain_baseline asks the peer's ``plain_arch`` (DeiT names → ViT's), not a table
    of aliases in the analysis."""
    from mmdcs.analysis.latency import plain_baseline
    assert DynamicViT('deit-s').plain_arch == 'vit-s16'
    assert DynamicViT('deit-tiny').plain_arch == 'deit-tiny'
    assert OFBViT('vit-s16', search_space=()).plain_arch == 'vit-s16'  # stored as 'deit-s'
    assert OFBViT('deit-b', search_space=()).plain_arch == 'vit-b16'
    plain = plain_baseline(DynamicViT('deit-s'), (32, 32))
    assert type(plain) is ViT and plain.arch == 'vit-s16' and plain.variant == 'baseline'
    assert type(plain_baseline(DynamicSwin('swin-t'), (32, 32))) is Swin


def test_the_tools_take_families_and_layouts_from_the_classes(capsys, tmp_path):
    """timm_to_mmdcs offers every family with timm archs and the layouts their classes read;
    benchmark_search's variant is the family's paper_variant unless given."""
    from _tools import load_tool, run_main
    from mmdcs.models.backbones.base import backbone_classes
    convert = load_tool('tools/convert/timm_to_mmdcs.py')
    assert convert.FAMILIES == tuple(sorted(f for f, c in backbone_classes().items()
                                            if c.timm_models))
    assert set(convert.FAMILIES) >= {'vit', 'swin', 'mobilevit', 'efficientvit'}
    assert convert.LAYOUTS == ('timm', 'official') and Swin.checkpoint_layouts == convert.LAYOUTS
    code, err = run_main('tools/convert/timm_to_mmdcs.py',
                         ['vit', 'deit-tiny', '--random-init', '--layout', 'official',
                          str(tmp_path / 'x.pth')], capsys)
    assert code == 2 and '--layout official is for swin, not vit' in err
    bench = load_tool('tools/analysis/benchmark_search.py')
    assert bench.family_of('swin-t') == ('mmdcs.Swin', Swin)
    code, err = run_main('tools/analysis/benchmark_search.py',
                         ['--arch', 'deit-tiny', '--variant', 'baseline'], capsys)
    assert code == 2 and "--variant 'baseline'" in err
    code, err = run_main('tools/analysis/benchmark_search.py', ['--arch', 'vit-h14'], capsys)
    assert code == 2 and "unknown arch 'vit-h14'" in err


def test_the_final_token_map_of_the_token_distillation_is_the_family_s():
    """DynamicViT's classifier asks the teacher's backbone for its final normalised tokens."""
    vit = ViT('deit-tiny')
    assert vit.final_token_norm() == (vit.norm, True)
    swin = Swin('swin-t', img_size=64)
    assert swin.final_token_norm() == (swin.norm3, False)
    with pytest.raises(ValueError, match=r'needs the last stage of Swin in out_indices'):
        Swin('swin-t', img_size=64, out_indices=(1, )).final_token_norm()
