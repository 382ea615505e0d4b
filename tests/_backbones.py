"""What the backbone tests share: one :class:`FamilyCase` per backbone family (the table the
contract suite ``tests/test_models/test_backbone_contract.py`` runs every family through) and the
helpers of the family test files (timm reference models, converted weights, classifiers from the
configs, random gates, FLOPs, seeded inputs).

``tests/`` is on ``sys.path`` (the directory of the root ``conftest.py``): ``import _backbones``.

A new family (a registered :class:`~mmdcs.models.backbones.SelectableBackbone` subclass with a
``family`` and an ``arch_zoo``) is found by ``mmdcs.models.backbones.base.backbone_classes``; the
contract suite fails for it until it has an entry in :data:`CASES`, and until its class fills the
backbone contract (``contract_gaps``). Its timm weights are found through the class too
(``timm_models``, ``convert_checkpoint``).
"""
import functools
import os.path as osp
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Tuple

import pytest
import torch
import torch.nn as nn

from mmdcs.models.backbones.base import backbone_class, backbone_classes
from mmdcs.selection import ChannelSelector, QKChannelSelector

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))

Size = Tuple[int, int]
Shape = Tuple[int, int, int]


# ----------------------------------------------------------------------------- small helpers
def rand_input(*shape: int, seed: int = 0) -> torch.Tensor:
    """Uniform [0, 1) images of ``shape``, seeded (independent of the global RNG)."""
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


def randn_input(*shape: int, seed: int = 0) -> torch.Tensor:
    """Standard normal images of ``shape``, seeded (independent of the global RNG)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def flops(model: nn.Module, x: torch.Tensor) -> int:
    """mmengine's FLOP count (multiply-accumulates) of ``model(x)``, without warnings."""
    from mmengine.analysis import FlopAnalyzer
    fa = FlopAnalyzer(model, (x, ))
    fa.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    return fa.total()


@torch.no_grad()
def random_gates_(model: nn.Module, seed: int = 0, alpha_shift: float = 0.,
                  theta_std: float = 0.2, theta_bias_std: Optional[float] = 0.5) -> nn.Module:
    """Random selection parameters: α ~ N(alpha_shift, 1) of every channel selector (so about
    half the channels are kept at shift 0) and, for DCS, Linear_θ weights ~ N(0, theta_std²)
    (and biases ~ N(0, theta_bias_std²) unless None) so that the Q/K masks are partial."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, ChannelSelector):
            m.alpha.copy_(torch.randn(m.alpha.shape, generator=g) + alpha_shift)
        elif isinstance(m, QKChannelSelector):
            m.theta.weight.copy_(torch.randn(m.theta.weight.shape, generator=g) * theta_std)
            if theta_bias_std is not None:
                m.theta.bias.copy_(torch.randn(m.theta.bias.shape, generator=g) * theta_bias_std)
    return model


@torch.no_grad()
def randomize_weights_(model: nn.Module, seed: int) -> nn.Module:
    """Non-trivial weights and BatchNorm statistics (timm's init zeroes some BN weights and gives
    small Linear weights, which would hide mistakes)."""
    g = torch.Generator().manual_seed(seed)

    def rand(t, lo, hi):
        t.copy_(torch.rand(t.shape, generator=g) * (hi - lo) + lo)

    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            rand(m.weight, 0.5, 1.2)
            rand(m.bias, -0.1, 0.1)
            rand(m.running_mean, -0.1, 0.1)
            rand(m.running_var, 0.8, 1.5)
        elif isinstance(m, nn.LayerNorm):
            rand(m.weight, 0.5, 1.5)
            rand(m.bias, -0.1, 0.1)
        elif isinstance(m, nn.Linear):
            m.weight.copy_(torch.randn(m.weight.shape, generator=g) / m.in_features**0.5)
            rand(m.bias, -0.05, 0.05)
    return model


@torch.no_grad()
def randomize_bn_(model: nn.Module, seed: int) -> nn.Module:
    """Non-trivial BatchNorm statistics and affine parameters, so that eval-mode BN is checked."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return model


# ----------------------------------------------------------------------------- family cases
@dataclass(frozen=True)
class FamilyCase:
    """What the contract suite needs to know about a family beyond what its class says.

    Args:
        arch: the (smallest) arch the contract tests build.
        sizes: small (H, W) inputs of the contract tests; the last one is odd (it needs padding
            or interpolation where the family takes other sizes than its nominal one).
        dense: constructor arguments that make the backbone return every feature map it has.
        dense_shapes: the (C, H, W) of those feature maps at ``sizes[-1]``.
        num_outputs: how many outputs ``out_indices`` selects from (a larger index is refused).
        timm_logits: (arch, size) pairs where the converted classifier gives timm's logits.
        timm_kwargs: ``size -> kwargs`` of ``timm.create_model`` that the timm model needs to
            run at ``size`` with the same weights (``{}`` at the nominal size).
        timm_features: None, or (arch, size, fn): ``fn(timm_model, x)`` gives the feature maps
            of ``dense`` (the same backbone built with ``dense``) at that size.
        randomize_timm: None or ``fn(model)``: non-trivial weights for the timm reference.
        stem: name prefixes of the stem's modules and parameters (``frozen_stages=0`` freezes
            them).
        stage: ``i -> prefixes`` of stage i, with the norms applied to its output
            (``frozen_stages=k`` freezes stages 0 .. k-1).
        num_stages: the largest valid ``frozen_stages``.
        last_block: the last prunable block of ``arch`` (named by the subnet checks).
        extra_block: a prunable-block name that ``arch`` does not have.
        theta_std: std of the random Linear_θ weights that make the Q/K masks partial.
    """
    arch: str
    sizes: Tuple[Size, ...]
    dense: dict
    dense_shapes: Tuple[Shape, ...]
    num_outputs: int
    timm_logits: Tuple[Tuple[str, Size], ...]
    timm_kwargs: Callable[[Size], dict]
    stem: Tuple[str, ...]
    stage: Callable[[int], Tuple[str, ...]]
    num_stages: int
    last_block: str
    extra_block: str
    timm_features: Optional[Tuple[str, Size, Callable]] = None
    randomize_timm: Optional[Callable[[nn.Module], nn.Module]] = None
    theta_std: float = 0.2


def _nominal(size, nominal=(224, 224)):
    return tuple(size) == tuple(nominal)


def _mobilevit_features(timm_model, x):
    # timm's taps: the 5 stage ends, the last one after final_conv
    return timm_model.forward_intermediates(x, intermediates_only=True)


def _efficientvit_features(timm_model, x):
    # the stem, then timm's features_only indices 0-3; the classification feature (5) last
    feats = [timm_model.stem(x)]
    feats += timm_model.forward_intermediates(x, indices=[0, 1, 2, 3], intermediates_only=True)
    return feats + [timm_model.head.in_conv(feats[-1])]


CASES: Dict[str, FamilyCase] = {
    'vit': FamilyCase(
        arch='deit-tiny',
        sizes=((48, 64), (96, 80)),  # any multiple of 16; ≠ 224: the position embedding resampled
        dense=dict(out_type='featmap', out_indices=(3, 5, 7, 11)),
        dense_shapes=((192, 6, 5), ) * 4,
        num_outputs=12,
        # timm's dynamic_img_size resamples its position embedding as ours does
        timm_logits=(('deit-tiny', (224, 224)), ('deit-tiny', (160, 224)),
                     ('vit-s16', (96, 64)), ('vit-b16', (96, 64))),
        timm_kwargs=lambda size: {} if _nominal(size) else dict(dynamic_img_size=True),
        stem=('patch_embed.', 'cls_token', 'pos_embed', 'pos_drop.'),
        # a block; the last one with the final norm (and fc_norm) applied to its output
        stage=lambda i: (f'blocks.{i}.', ) + (('norm.', 'fc_norm.') if i == 11 else ()),
        num_stages=12,
        last_block='blocks.11.mlp',
        extra_block='blocks.12.mlp'),
    'swin': FamilyCase(
        arch='swin-t',
        sizes=((64, 64), (100, 138)),  # patch padding, odd merges, padded windows, small maps
        dense=dict(out_indices=(0, 1, 2, 3)),
        dense_shapes=((96, 25, 35), (192, 13, 18), (384, 7, 9), (768, 4, 5)),
        num_outputs=4,
        # timm built for the size picks its windows as ours does; at 224×448 the last stage
        # (7×14) shifts along W only. (timm pads a map after the cyclic shift, mmdet and ours
        # before it: padded windows are compared with mmdet's block in test_swin.py.)
        timm_logits=(('swin-t', (224, 224)), ('swin-t', (224, 448)), ('swin-b', (224, 224))),
        timm_kwargs=lambda size: {} if _nominal(size) else dict(img_size=tuple(size)),
        stem=('patch_embed.', ),
        # mmdet's stage i: its blocks, its output norm and the patch merging after it
        stage=lambda i: (f'layers.{i}.blocks.', f'norm{i}.', f'layers.{i + 1}.downsample.'),
        num_stages=4,
        last_block='layers.3.blocks.1.mlp',
        extra_block='layers.3.blocks.2.mlp',
        theta_std=0.05),
    'mobilevit': FamilyCase(
        arch='mobilevit-xs',
        sizes=((64, 64), (72, 104)),  # 9×13 and 5×7 maps: the MobileViT blocks interpolate
        dense=dict(out_indices=(0, 1, 2, 3, 4)),
        dense_shapes=((32, 36, 52), (48, 18, 26), (64, 9, 13), (80, 5, 7), (384, 3, 4)),
        num_outputs=5,
        # 224 for S: the 7×7 map of the last MobileViT block is resized to 8×8 and back
        timm_logits=(('mobilevit-xs', (256, 256)), ('mobilevit-s', (224, 224))),
        timm_kwargs=lambda size: {},
        timm_features=('mobilevit-xs', (200, 136), _mobilevit_features),
        randomize_timm=lambda m: randomize_weights_(m, seed=1),
        stem=('stem.', ),
        stage=lambda i: (f'stages.{i}.', ) + (('final_conv.', ) if i == 4 else ()),
        num_stages=5,
        last_block='stages.4.1.transformer.2.mlp',
        extra_block='stages.4.1.transformer.3.mlp',
        theta_std=0.3),
    'efficientvit': FamilyCase(
        arch='efficientvit-b0',
        sizes=((64, 64), (80, 112)),  # odd maps (5×7 → 3×4)
        dense=dict(out_indices=(0, 1, 2, 3, 4, 5)),
        dense_shapes=((8, 40, 56), (16, 20, 28), (32, 10, 14), (64, 5, 7), (128, 3, 4),
                      (1024, 3, 4)),
        num_outputs=6,
        timm_logits=(('efficientvit-b0', (96, 128)), ('efficientvit-b0', (80, 112)),
                     ('efficientvit-b1', (96, 128)), ('efficientvit-b2', (96, 128)),
                     ('efficientvit-b3', (96, 128))),
        timm_kwargs=lambda size: {},
        timm_features=('efficientvit-b0', (160, 96), _efficientvit_features),
        randomize_timm=lambda m: randomize_bn_(m, seed=1),
        stem=('stem.', ),
        stage=lambda i: (f'stages.{i}.', ),
        num_stages=4,
        last_block='stages.3.blocks.2.context_module.main',
        extra_block='stages.3.blocks.3.context_module.main'),
}


def families() -> Dict[str, type]:
    """Family name → backbone class of every registered family (sorted by name; not the peers'
    backbones, which have their own tests)."""
    return {f: cls for f, cls in sorted(backbone_classes().items())
            if not getattr(cls, 'is_peer', False)}


def case(family: str) -> FamilyCase:
    """The family's entry in :data:`CASES`; fails the test when a new family has none."""
    if family not in CASES:
        pytest.fail(f'backbone family {family!r} ({backbone_classes()[family].__name__}) has no '
                    'entry in tests/_backbones.py CASES: add one (arch, sizes, dense outputs, '
                    'stem and stages, timm references) so the contract suite runs it')
    return CASES[family]


# ----------------------------------------------------------------------------- timm references
def _create_timm(arch: str, **kwargs) -> nn.Module:
    timm = pytest.importorskip('timm')
    torch.manual_seed(0)
    return timm.create_model(backbone_class(arch).timm_models[arch], pretrained=False,
                             **kwargs).eval()


@functools.lru_cache(maxsize=None)
def _cached_timm(arch: str) -> nn.Module:
    return _make_timm(arch)


def _make_timm(arch: str) -> nn.Module:
    model = _create_timm(arch)
    randomize = case(backbone_class(arch).family).randomize_timm
    return randomize(model) if randomize is not None else model


def timm_model(arch: str, size: Optional[Size] = None,
               like: Optional[nn.Module] = None) -> nn.Module:
    """timm's model of ``arch`` (seeded init, the family's randomisation), eval mode; with a
    ``size``: the same weights (``like``'s if given) in a timm model built to run at that size.
    The models of the contract archs are cached; the larger archs are built afresh (memory)."""
    family = backbone_class(arch).family
    kwargs = case(family).timm_kwargs(size) if size is not None else {}
    if like is None:
        like = _cached_timm(arch) if arch == case(family).arch else _make_timm(arch)
    if not kwargs:
        return like
    model = _create_timm(arch, **kwargs)
    model.load_state_dict(like.state_dict())
    return model


@functools.lru_cache(maxsize=None)
def converted(arch: str) -> Dict[str, torch.Tensor]:
    """The cached timm model's weights converted by the family's ``convert_checkpoint`` (a
    classifier state dict: ``backbone.*`` and the head)."""
    return backbone_class(arch).convert_checkpoint(timm_model(arch).state_dict(), arch)


def backbone_state(arch: str) -> Dict[str, torch.Tensor]:
    """The ``backbone.*`` part of :func:`converted`, without the prefix."""
    return {k[len('backbone.'):]: v for k, v in converted(arch).items()
            if k.startswith('backbone.')}


def classifier(arch: str, **backbone) -> nn.Module:
    """The mmpretrain classifier of ``configs/_base_/models/<family>_<arch>.py`` (backbone
    arguments overridden by ``backbone``)."""
    from mmengine.config import Config
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS
    family = backbone_class(arch).family
    cfg = Config.fromfile(osp.join(ROOT, f'configs/_base_/models/{family}_{arch}.py'))
    cfg.model.backbone.update(backbone)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(cfg.model)


def frozen_prefixes(c: FamilyCase, frozen_stages: int) -> Tuple[str, ...]:
    """The parameter-name prefixes ``frozen_stages`` freezes: nothing (-1), the stem (0), the
    stem and stages 0 .. k-1 (k ≥ 1)."""
    if frozen_stages < 0:
        return ()
    return c.stem + tuple(p for i in range(frozen_stages) for p in c.stage(i))


def under(name: str, prefixes: Sequence[str]) -> bool:
    """Whether a parameter / module name lies under one of ``prefixes`` (``'blocks.1.'`` or a
    parameter name such as ``'pos_embed'``)."""
    return any(name == p.rstrip('.') or name.startswith(p if p.endswith('.') else p + '.')
               for p in prefixes)
