"""What every mmdcs backbone family shares: the variants, supernet/subnet modes, subnet export,
cost model, loading of converted (timm) checkpoints, and the contract the rest of mmdcs (the
analysis, the tools) asks a backbone through instead of looking at its class.

A family (one file: ``vit.py``, ``swin.py``, ``mobilevit.py``, ``efficientvit.py``) subclasses
:class:`SelectableBackbone`, sets ``family`` and ``arch_zoo``, builds its layers with the
selection modules of :mod:`mmdcs.selection` according to ``self.qk_select`` and
``self.mlp_select``, and implements :meth:`cost_terms`. It does not apply the subnet itself: once
the outermost ``__init__`` of the instance's class has returned, the base class checks
``theta_rank`` against the built Linear_θ layers, prunes to ``subnet`` if one was given and
freezes ``frozen_stages`` (:meth:`SelectableBackbone._finish_build`, wired by
``__init_subclass__``), so a family can neither forget nor misorder it.

Everything the rest of mmdcs knows about a family is on its class (the analysis and the tools
find the classes with :func:`backbone_classes` / :func:`backbone_class`, never by name), and
:func:`contract_gaps` names what a class lacks (the contract suite runs it on every family):

* ``nominal_size`` (class attribute): the side of the square input the family's FLOPs and cost
  terms are quoted at (224; MobileViT 256). A family whose size is an argument (ViT, Swin:
  ``img_size``) reports the built size through :attr:`~SelectableBackbone.input_size` and
  returns that argument from :meth:`~SelectableBackbone.size_kwargs`.
* ``is_peer`` (class attribute): ``True`` on the backbones of the peer methods (DynamicViT,
  DynamicSwin; the OFB backbones set it too), which are timed against a plain backbone.
* :meth:`~SelectableBackbone.attention_layout`: for each softmax attention module, how its rows
  map onto the image's token grid (:class:`AttentionLayout`); ``softmax_attention = False`` on a
  family without a softmax attention matrix (EfficientViT's ReLU linear attention).
* ``paper_variant`` (class attribute): the variant the papers apply to the family (method.md
  §9): ``'dcs'`` (MobileViT, EfficientViT) or ``'kcr'`` (ViT, Swin); the default of the
  complexity, latency and benchmark tables.
* ``cam_layer`` (class attribute): the default Grad-CAM target layer, a dotted path inside the
  backbone (a negative integer counts from the end: ``'stages.-1'``), and
  :meth:`~SelectableBackbone.tokens_to_bchw`: that layer's output (or its gradient) as
  (B, C, h, w) (:func:`feature_to_bchw` for a layer that gives maps or a square token grid).
* ``timm_models`` (class attribute): arch → timm model name of the archs whose timm weights
  convert (``{}``: none), ``checkpoint_layouts`` (the source layouts besides ``'timm'``, e.g.
  Swin's ``'official'``) and :meth:`~SelectableBackbone.convert_checkpoint` (a state dict of
  such a layout → the state dict of the family's mmpretrain classifier).
* optional, for the peer methods: ``plain_arch`` (a peer backbone's arch in the plain family's
  names, what it is timed against) and ``final_token_norm()`` (the module giving the family's
  final normalised tokens, and whether they start with a class token: DynamicViT's
  distillation from a ViT / Swin teacher).
* ``frozen_stages``, one meaning in every family (the mmpretrain / mmdet convention):
  ``-1`` freezes nothing; ``0`` freezes the stem (the patch / convolutional embedding, and the
  position embedding and class token where there are some); ``k >= 1`` freezes the stem and the
  first ``k`` stages. A *stage* is what :meth:`~SelectableBackbone.stage_parts` returns: a
  transformer block for ViT (as mmpretrain's VisionTransformer), a Swin stage's blocks and the
  patch merging that follows them (mmdet's SwinTransformer), the stages after the stem for
  MobileViT and EfficientViT. The norms (or MobileViT's ``final_conv``) applied to a frozen
  stage's output are frozen with it. Frozen parameters get ``requires_grad=False`` and frozen
  modules stay in eval mode (BatchNorm statistics, dropout) whenever :meth:`train` is called.
  A family implements :meth:`~SelectableBackbone.stem_parts`,
  :meth:`~SelectableBackbone.stage_parts` and ``num_stages``, and passes ``frozen_stages`` to
  :meth:`~SelectableBackbone._set_frozen_stages`.
"""
import functools
import inspect
import math
from typing import Dict, List, Optional, Sequence, Tuple, Type, Union

import torch
import torch.nn as nn
from mmengine.model import BaseModule
from torch import Tensor

from mmdcs.checks import check_numbers
from mmdcs.selection import (DEFAULT_GATE_INIT, CostModel, CostTerm, QKChannelSelector,
                             SubnetError, SubnetSpec, apply_subnet_, export_subnet, head_layout,
                             hidden_layout,
                             prunable_modules, selector_layout)

#: variant -> (Q/K channel selection, attention-output/MLP channel selection)
#: 'dcs-arch1' and 'dcs-arch2' are the paper's ablations (DCS paper, Table 8): Q/K selection only,
#: MLP selection only; 'kcr' has the same structure as 'dcs-arch2' (KCR paper, 3.1).
VARIANTS: Dict[str, Tuple[bool, bool]] = {
    'baseline': (False, False),
    'dcs': (True, True),
    'kcr': (False, True),
    'dcs-arch1': (True, False),
    'dcs-arch2': (False, True),
}
QK_MASKS = ('shared', 'separate')

#: a part that ``frozen_stages`` freezes: a module (eval mode, no gradients) or a parameter
FrozenPart = Union[nn.Module, nn.Parameter]


#: the ranges of the numeric arguments of the backbones (every family's, the peers' too), by
#: name (:func:`mmdcs.checks.check_number`): checked before a constructor builds anything
#: (:func:`check_backbone_numbers`), so that NaN, an infinity or a value out of range is refused
#: naming the argument instead of being trained on
NUMERIC_ARGUMENTS: Dict[str, dict] = dict(
    gate_init=dict(), tau=dict(low=0, low_open=True), gumbel_tau=dict(low=0, low_open=True),
    drop_rate=dict(low=0, high=1, high_open=True),
    attn_drop_rate=dict(low=0, high=1, high_open=True),
    drop_path_rate=dict(low=0, high=1, high_open=True), policy_eps=dict(low=0),
    mlp_ratio=dict(low=0, low_open=True), expand_ratio=dict(low=0, low_open=True),
    keep_ratio=dict(low=0, high=1, low_open=True, none=True),
    in_channels=dict(low=1, integer=True), patch_size=dict(low=1, integer=True),
    window_size=dict(low=1, integer=True), frozen_stages=dict(low=-1, integer=True),
    theta_rank=dict(low=1, integer=True, none=True),
)


def check_backbone_numbers(init, owner: str, args: tuple, kwargs: dict) -> None:
    """The numeric arguments of a call of a backbone's constructor ``init`` (the given ones,
    also those passed on through ``**kwargs``) against :data:`NUMERIC_ARGUMENTS`: a
    ``ValueError`` naming the argument (``ViT: drop_path_rate must be a finite number in
    [0, 1), got nan``). A call that does not bind is left to the constructor's own error."""
    try:
        given = inspect.signature(init).bind_partial(*args, **kwargs).arguments
    except TypeError:
        return
    values = {}
    for name, value in given.items():
        if isinstance(value, dict) and inspect.signature(init).parameters[name].kind == \
                inspect.Parameter.VAR_KEYWORD:
            values.update(value)
        else:
            values[name] = value
    check_numbers(values, NUMERIC_ARGUMENTS, owner)


def check_choice(kind: str, value, choices: Sequence, owner: str) -> None:
    """Raise a ValueError listing the valid choices (unknown arch, variant, ...)."""
    if value not in choices:
        raise ValueError(f'{owner}: unknown {kind} {value!r}; valid: '
                         f'{", ".join(map(str, choices))}')


class SelectableBackbone(BaseModule):
    """Base of the mmdcs backbones.

    Args:
        arch: a key of the family's ``arch_zoo``.
        variant: ``'baseline'``, ``'dcs'``, ``'kcr'`` (or an ablation, see :data:`VARIANTS`).
            With a ``subnet`` the variant may be omitted: it is read from the subnet file.
        subnet: a subnet description (path to the JSON written by ``tools/export_subnet.py``,
            its dict, or a :class:`SubnetSpec`): build the pruned network instead of the supernet.
        qk_mask: ``'shared'`` (one Q/K mask, the paper) or ``'separate'`` (the QK-Mask ablation).
        gate_init: initial α and Linear_θ bias (every gate starts open).
        tau: initial gate temperature (then set by ``TemperatureHook``).
        select_hidden: also search the hidden units of every block's MLP (a second gate, see
            :class:`~mmdcs.selection.GatedMLP`); needs a variant with MLP selection. Off by
            default (the papers). ``'all'``: also the expanded channels of the convolutional
            inverted bottlenecks (MobileViT's MV2 blocks, EfficientViT's MBConvs; needs
            ``cost.mode='flops'``). A subnet carries its hidden units itself (its ``hidden``).
        theta_rank: rank r of the Q/K mask generator Linear_θ (D→r→D; ``None``: full rank, the
            paper). A subnet exported from such a supernet records it (``meta.theta_rank``).
    """
    family: str = ''
    arch_zoo: Dict[str, dict] = {}
    #: side of the square input the family's FLOPs and cost terms are quoted at
    nominal_size: int = 224
    #: whether this is a peer method's backbone (DynamicViT, DynamicSwin)
    is_peer: bool = False
    #: whether the family's attention has a softmax attention matrix (for the attention
    #: analysis; EfficientViT's LiteMLA is ReLU linear attention, so it has none)
    softmax_attention: bool = True
    #: stages of the family (what ``frozen_stages`` counts)
    num_stages: int = 0
    frozen_stages: int = -1
    #: the variant the papers apply to the family (method.md §9), the tables' default
    paper_variant: str = ''
    #: default Grad-CAM target layer: a dotted path inside the backbone (negative integers
    #: count from the end), whose output :meth:`tokens_to_bchw` turns into maps
    cam_layer: str = ''
    #: arch → timm model name of the archs whose timm weights :meth:`convert_checkpoint`
    #: converts (``{}``: the family has none; ``None``: not declared, a contract gap)
    timm_models: Optional[Dict[str, str]] = None
    #: the source layouts :meth:`convert_checkpoint` reads (``'timm'`` when ``timm_models``)
    checkpoint_layouts: Tuple[str, ...] = ('timm', )
    #: whether the family's attentions support head selection (``select_heads=True``) and a
    #: subnet's ``heads`` (a declared-absent piece of the contract where False)
    supports_heads: bool = False

    def __init_subclass__(cls, **kwargs):
        """Make the outermost ``__init__`` of every subclass end with :meth:`_finish_build`
        (a family's ``__init__``, and a subclass's that calls it through ``super()``, only
        build layers)."""
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get('__init__')
        if init is None:
            if getattr(cls.__init__, '_finishes_build', False):
                return  # inherits a wrapped constructor: it finishes the build already
            init = cls.__init__

        @functools.wraps(init)
        def __init__(self, *args, **kw):
            check_backbone_numbers(init, type(self).__name__, (self, ) + args, kw)
            if not type(self).supports_heads and 'select_heads' in kw:
                if kw.pop('select_heads'):
                    raise ValueError(f'{type(self).__name__}: select_heads=True, but '
                                     f'{type(self).__name__} (family {type(self).family!r}) '
                                     'has no head selection (supports_heads is False)')
            init(self, *args, **kw)
            if type(self).__init__ is __init__:  # the outermost constructor has returned
                self._finish_build()

        __init__._finishes_build = True
        cls.__init__ = __init__

    def __init__(self, arch: str, variant: Optional[str] = None,
                 subnet: Union[None, str, dict, SubnetSpec] = None, qk_mask: str = 'shared',
                 gate_init: float = DEFAULT_GATE_INIT, tau: float = 4.5, init_cfg=None,
                 select_hidden: bool = False, theta_rank: Optional[int] = None,
                 select_heads: bool = False):
        super().__init__(init_cfg=init_cfg)
        name = type(self).__name__
        check_choice('arch', arch, list(self.arch_zoo), name)
        self.subnet_spec: Optional[SubnetSpec] = None
        if subnet is not None:
            self.subnet_spec = SubnetSpec.coerce(subnet)
            if variant is None:
                variant = self.subnet_spec.variant
        variant = variant or 'baseline'
        check_choice('variant', variant, list(VARIANTS), name)
        check_choice('qk_mask', qk_mask, QK_MASKS, name)
        if self.subnet_spec is not None and not VARIANTS[variant][1]:
            raise SubnetError(f'{name}: a subnet needs a variant with channel selection '
                              f'(dcs, kcr, dcs-arch2), got {variant!r}')
        self.arch = arch
        self.arch_settings = dict(self.arch_zoo[arch])
        self.variant = variant
        qk, mlp = VARIANTS[variant]
        #: for the family: None or 'shared'/'separate' (DCSAttention's qk_select)
        self.qk_select: Optional[str] = qk_mask if qk else None
        #: for the family: whether MLPs get a channel selector
        self.mlp_select: bool = mlp
        self.gate_init = gate_init
        self.init_tau = tau
        if select_hidden not in (False, True, 'all'):
            raise ValueError(f"{name}: select_hidden must be False, True or 'all', got "
                             f'{select_hidden!r}')
        if select_hidden and not mlp:
            raise ValueError(f'{name}: select_hidden needs a variant with MLP channel selection '
                             f'(dcs, kcr, dcs-arch2), got {variant!r}')
        #: for the family: whether MLPs get a hidden-unit selector (never in a pruned network:
        #: the subnet lists the kept hidden units)
        self.select_hidden: Union[bool, str] = select_hidden if self.subnet_spec is None else False
        spec_rank = None if self.subnet_spec is None else self.subnet_spec.meta.get('theta_rank')
        if spec_rank is not None and theta_rank is not None and int(spec_rank) != theta_rank:
            raise SubnetError(f'{name}: theta_rank={theta_rank}, but the subnet was searched '
                              f'with theta_rank={spec_rank}')
        if select_heads not in (False, True):
            raise ValueError(f'{name}: select_heads must be False or True, got '
                             f'{select_heads!r}')
        if select_heads and not self.supports_heads:
            raise ValueError(f'{name}: select_heads=True, but {name} (family {self.family!r}) '
                             'has no head selection (supports_heads is False)')
        if select_heads and not mlp:
            raise ValueError(f'{name}: select_heads needs a variant with channel selection '
                             f'(dcs, kcr, dcs-arch2), got {variant!r}')
        #: for the family: whether attentions get a gate per head (never in a pruned network:
        #: the subnet lists the kept heads)
        self.select_heads: bool = bool(select_heads) and self.subnet_spec is None
        #: for the family: rank of Linear_θ (None: full)
        self.theta_rank: Optional[int] = theta_rank if spec_rank is None else int(spec_rank)

    # ----------------------------------------------------------------- supernet / subnet
    def _finish_build(self) -> None:
        """Run once, after the outermost ``__init__`` of the instance's class (never by a
        family): :meth:`_apply_subnet`, then freeze ``frozen_stages``."""
        self._apply_subnet()
        self._freeze_stages()

    def _apply_subnet(self) -> None:
        """Part of :meth:`_finish_build`: checks ``theta_rank`` against the built Linear_θ
        layers, then prunes to ``subnet`` if one was given."""
        self._check_theta_rank()
        if self.subnet_spec is None:
            return
        self.subnet_spec.check(self.family, self.arch, selector_layout(self), self.variant,
                               hidden_layout(self),
                               head_layout(self) if self.supports_heads else {})
        apply_subnet_(self, self.subnet_spec)  # also calls self._after_subnet

    def _check_theta_rank(self) -> None:
        """A ``theta_rank`` at or above the width of every Linear_θ (D → r → D with r ≥ D is
        the full layer: a silent full rank) is refused with a ValueError naming ``theta_rank``
        and the allowed range. Below the widest layer it is used where it saves something (a
        layer narrower than r stays full, :class:`QKChannelSelector`). A variant without Q/K
        selection has no Linear_θ: the rank has nothing to act on there (a config shared by
        the baseline and the DCS supernet)."""
        if self.theta_rank is None:
            return
        selectors = [m for m in self.modules() if isinstance(m, QKChannelSelector)]
        if selectors and all(m.theta_down is None for m in selectors):
            widest = max(min(m.theta.in_features, m.theta.out_features) for m in selectors)
            raise ValueError(f'{type(self).__name__}: theta_rank = {self.theta_rank} is not '
                             f'below the width of any Linear_θ of {self.arch} (the widest is '
                             f'{widest}), so it would be the full layer: use 1 ≤ theta_rank ≤ '
                             f'{widest - 1}, or None (full rank, the paper)')

    def _after_subnet(self, spec: SubnetSpec) -> None:
        """Family hook: prune what follows a block beyond its own MLP (MobileViT's projection)."""

    @property
    def is_supernet(self) -> bool:
        return bool(prunable_modules(self))

    def export_subnet(self, multiple_of: int = 1, **meta) -> SubnetSpec:
        """The deterministic subnet (α > 0) of this supernet, every D̃ rounded up to a multiple
        of ``multiple_of`` (see :func:`mmdcs.selection.export_subnet`)."""
        if not self.is_supernet:
            raise SubnetError(f'{type(self).__name__}({self.variant}) has no architecture '
                              'parameters to export (a baseline, or already pruned)')
        if self.theta_rank is not None and self.qk_select is not None:
            meta.setdefault('theta_rank', self.theta_rank)
        return export_subnet(self, self.family, self.arch, self.variant, multiple_of, **meta)

    # ----------------------------------------------------------------- cost
    def cost_terms(self) -> List[CostTerm]:
        """One :class:`CostTerm` per prunable block (family specific)."""
        raise NotImplementedError

    def cost_model(self, mode: str = 'paper', const_flops: float = 0.,
                   expectation: str = 'paper', with_theta: bool = False) -> CostModel:
        """The cost model of this supernet. The defaults give the papers' cost as published
        (their E[D̃] = Σ sigmoid(α/τ), Linear_θ not counted); the search
        (``ChannelSelectionClassifier``) asks for ``expectation='gate'`` (E[D̃] = Σ sigmoid(α),
        exact) and ``with_theta=True`` (Linear_θ of DCS as a constant, :meth:`theta_cost`)."""
        const = self.theta_cost(mode) if with_theta else 0.
        return CostModel(self.cost_terms(), mode, const_flops, expectation, const)

    def theta_cost(self, mode: str = 'flops') -> float:
        """The cost of the Q/K mask layers Linear_θ of DCS, a constant of the search cost: in
        ``'paper'`` mode their parameters (the unit of the papers' l·(2D̃² + D̃)), in
        ``'flops'`` mode their multiply-accumulates at the nominal input size (tokens ×
        in × out, the tokens found by one forward pass); 0 without Q/K selection."""
        # both layers of a low-rank Linear_θ (theta_rank): theta_down (D→r) and theta (r→D)
        thetas = [lin for m in self.modules() if isinstance(m, QKChannelSelector)
                  for lin in (getattr(m, 'theta_down', None), m.theta) if lin is not None]
        if not thetas:
            return 0.
        if mode == 'paper':
            return float(sum(p.numel() for t in thetas for p in t.parameters()))
        return float(sum(macs for macs in _theta_macs(self, thetas)))

    # ----------------------------------------------------------------- input size
    @property
    def input_size(self) -> Tuple[int, int]:
        """(H, W) this backbone's FLOPs are quoted at: ``img_size`` for the families built for
        one (ViT, Swin), ``nominal_size`` otherwise."""
        size = getattr(self, 'img_size', None) or self.nominal_size
        return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))

    #: whether the family is built for one input size (``img_size``: ViT's position-embedding
    #: grid, Swin's cost); False: its layers do not depend on it (MobileViT, EfficientViT)
    takes_img_size: bool = False

    @classmethod
    def size_kwargs(cls, size: Optional[Tuple[int, int]]) -> dict:
        """Constructor arguments that build this family for inputs of ``size`` (H, W):
        ``img_size`` for a family built for one input size, none otherwise."""
        if size is None or not cls.takes_img_size:
            return {}
        return dict(img_size=size[0] if size[0] == size[1] else tuple(size))

    # ----------------------------------------------------------------- attention
    def attention_layout(self, name: str) -> 'AttentionLayout':
        """How the attention weights of the softmax attention module ``name`` (a
        :class:`~mmdcs.selection.DCSAttention`) map onto the image (family specific)."""
        raise NotImplementedError(f'{type(self).__name__} has no attention layout')

    # ----------------------------------------------------------------- Grad-CAM
    def tokens_to_bchw(self, act: Tensor, image_hw: Tuple[int, int]) -> Tensor:
        """The output of :attr:`cam_layer` (or its gradient) for images of ``image_hw`` as
        (B, C, h, w) (family specific; :func:`feature_to_bchw` for maps or square grids)."""
        raise NotImplementedError(f'{type(self).__name__} does not say how its features map '
                                  'onto the image (tokens_to_bchw)')

    # ----------------------------------------------------------------- checkpoints of others
    @classmethod
    def convert_checkpoint(cls, state_dict: Dict[str, Tensor], arch: str,
                           layout: str = 'timm') -> Dict[str, Tensor]:
        """A state dict of ``layout`` (one of ``checkpoint_layouts``; ``'timm'``: a timm model
        of ``timm_models[arch]``) → the state dict of the family's mmpretrain classifier
        (``backbone.*``, ``head.*``); ValueError / KeyError when it is not of that arch."""
        raise NotImplementedError(f'{cls.__name__} converts no checkpoints (convert_checkpoint)')

    # ----------------------------------------------------------------- frozen stages
    def stem_parts(self) -> List[FrozenPart]:
        """What ``frozen_stages=0`` freezes (family specific, see the module docs)."""
        raise NotImplementedError

    def stage_parts(self, i: int) -> List[FrozenPart]:
        """What stage ``i`` (0-based) adds to the frozen parts (family specific)."""
        raise NotImplementedError

    def frozen_parts(self) -> List[FrozenPart]:
        """The modules and parameters ``frozen_stages`` freezes (see the module docs)."""
        if self.frozen_stages < 0:
            return []
        parts = list(self.stem_parts())
        for i in range(self.frozen_stages):
            parts += self.stage_parts(i)
        return parts

    def _set_frozen_stages(self, frozen_stages: int) -> None:
        """Check and store ``frozen_stages`` (in [-1, num_stages]); call in ``__init__``."""
        check_choice('frozen_stages', frozen_stages, list(range(-1, self.num_stages + 1)),
                     type(self).__name__)
        self.frozen_stages = frozen_stages

    def _freeze_stages(self) -> None:
        for part in self.frozen_parts():
            if isinstance(part, nn.Parameter):
                part.requires_grad = False
                continue
            part.eval()
            for p in part.parameters():
                p.requires_grad = False

    def train(self, mode: bool = True):
        """As ``nn.Module.train``; the frozen parts stay in eval mode."""
        super().train(mode)
        self._freeze_stages()
        return self

    # ----------------------------------------------------------------- checkpoints
    def load_converted(self, state_dict: dict, strict: bool = True) -> Tuple[List[str], List[str]]:
        """Load a converted state dict (e.g. from timm via the family's ``convert_timm``).

        The selection parameters (Linear_θ, α, τ) a baseline checkpoint cannot have are allowed
        to be missing: they keep their "all kept" initialisation. Anything else missing or
        unexpected is reported (an error with ``strict=True``, returned otherwise)."""
        missing, unexpected = self.load_state_dict(state_dict, strict=False)
        selection = ('.qk_select.', '.select.', '.hidden_select.', '.head_select.', 'gate.tau')
        missing = [k for k in missing if not any(s in f'.{k}' for s in selection)]
        if strict and (missing or unexpected):
            raise KeyError(f'{type(self).__name__}: checkpoint does not fit; missing keys: '
                           f'{missing[:10]}{" ..." if len(missing) > 10 else ""}; unexpected '
                           f'keys: {unexpected[:10]}{" ..." if len(unexpected) > 10 else ""}')
        return missing, unexpected


def _overrides(cls: type, name: str) -> bool:
    """Whether ``cls`` defines ``name`` below :class:`SelectableBackbone`."""
    for k in cls.__mro__:
        if k is SelectableBackbone:
            return False
        if name in vars(k):
            return True
    return False


def contract_gaps(cls: Type[SelectableBackbone]) -> List[str]:
    """What the family class ``cls`` lacks of the backbone contract (see the module docs),
    one line per piece, each naming it; ``[]`` for a complete family."""
    gaps = []
    if not (isinstance(cls.family, str) and cls.family):
        gaps.append('family: the family name (a non-empty string)')
    if not cls.arch_zoo:
        gaps.append('arch_zoo: arch → settings (at least one arch)')
    if cls.paper_variant not in VARIANTS or cls.paper_variant == 'baseline':
        gaps.append(f'paper_variant: the variant the papers apply to the family (one of '
                    f'{", ".join(v for v in VARIANTS if v != "baseline")}), got '
                    f'{cls.paper_variant!r}')
    if not (isinstance(cls.cam_layer, str) and cls.cam_layer):
        gaps.append('cam_layer: the default Grad-CAM layer (a dotted path in the backbone)')
    if not isinstance(cls.supports_heads, bool):
        gaps.append(f'supports_heads: True or False (head selection), got '
                    f'{cls.supports_heads!r}')
    if not (isinstance(cls.nominal_size, int) and cls.nominal_size > 0):
        gaps.append(f'nominal_size: a positive int, got {cls.nominal_size!r}')
    methods = ['cost_terms', 'tokens_to_bchw', 'stem_parts', 'stage_parts']
    if cls.softmax_attention:
        methods.append('attention_layout')
    gaps += [f'{m}(): not implemented' + (' (or softmax_attention = False)'
                                         if m == 'attention_layout' else '')
             for m in methods if not _overrides(cls, m)]
    if not isinstance(cls.timm_models, dict):
        gaps.append('timm_models: arch → timm model name ({} for none)')
    elif cls.timm_models:
        if not _overrides(cls, 'convert_checkpoint'):
            gaps.append('convert_checkpoint(): not implemented (timm_models is not empty)')
        unknown = sorted(set(cls.timm_models) - set(cls.arch_zoo))
        if unknown and cls.arch_zoo:
            gaps.append(f'timm_models: archs not in arch_zoo: {unknown}')
    return gaps


def backbone_classes() -> Dict[str, Type[SelectableBackbone]]:
    """Family name → mmdcs backbone class: every :class:`SelectableBackbone` subclass with a
    ``family`` and an ``arch_zoo`` (each family file registers its class on import), a peer
    method's backbone (``is_peer``) excepted; the first class of a family (a subclass of it,
    e.g. DynamicViT of ViT, is not the family)."""
    out, stack = {}, list(SelectableBackbone.__subclasses__())
    while stack:
        cls = stack.pop()
        if cls.family and cls.arch_zoo and not cls.is_peer:
            out.setdefault(cls.family, cls)
        stack.extend(cls.__subclasses__())
    return out


def backbone_class(arch_or_family: str) -> Type[SelectableBackbone]:
    """The backbone class of an arch (``'vit-s16'``) or a family (``'vit'``)."""
    classes = backbone_classes()
    if arch_or_family in classes:
        return classes[arch_or_family]
    for cls in classes.values():
        if arch_or_family in cls.arch_zoo:
            return cls
    archs = sorted(a for c in classes.values() for a in c.arch_zoo)
    raise ValueError(f'unknown arch {arch_or_family!r}; valid: {", ".join(archs)}')


def feature_to_bchw(act: Tensor, channels_last: bool = False) -> Tensor:
    """A feature map (B, C, h, w) as it is, (B, h, w, C) with ``channels_last``, or the tokens
    (B, N, C) of a square grid, as (B, C, h, w) (:meth:`SelectableBackbone.tokens_to_bchw`)."""
    if act.dim() == 4 and channels_last:
        return act.permute(0, 3, 1, 2)
    if act.dim() == 3:  # tokens (B, N, C)
        side = int(math.isqrt(act.shape[1]))
        return act.reshape(act.shape[0], side, side, -1).permute(0, 3, 1, 2)
    if act.dim() != 4:
        raise ValueError(f'Grad-CAM needs a spatial activation, got shape {tuple(act.shape)}')
    return act


class AttentionLayout:
    """How the rows of one softmax attention module map onto an image's token grid.

    The attention analysis records the module's weights, shaped (B', heads, N_q, N_k) with B'
    sequences (images, windows or pixel positions) per batch, and asks the layout for the map of
    one query over the token grid of one image. A family subclasses it next to its blocks.

    Attributes:
        watch: a module whose forward input is the feature map the attention runs on (the
            analysis registers :meth:`observe` as its forward pre-hook), or None.
        class_token: whether the sequences start with a class token (the ``'cls'`` query).
    """
    watch: Optional[nn.Module] = None
    class_token: bool = False

    def observe(self, module: nn.Module, args: tuple) -> None:
        """Forward pre-hook of :attr:`watch`: note the size of the feature map."""

    def query_map(self, attn: Tensor, image: int, query: Union[str, Tuple[float, float]],
                  image_hw: Tuple[int, int]) -> Tuple[Tensor, Tuple[int, int], Tuple[int, int]]:
        """(heads, gh, gw) weights of ``query`` (``'cls'``, ``'centre'`` or (y, x) fractions
        of the image) of image ``image`` of the batch over the token grid, the grid size and
        the query's cell ((-1, -1) for the class token)."""
        raise NotImplementedError


def query_cell(query: Union[str, Tuple[float, float]], gh: int, gw: int) -> Tuple[int, int]:
    """Grid cell of a query: ``'centre'`` or (y, x) as fractions of the image (0..1)."""
    if query in ('centre', 'center', 'cls'):
        return gh // 2, gw // 2
    y, x = query
    return min(gh - 1, max(0, int(float(y) * gh))), min(gw - 1, max(0, int(float(x) * gw)))


def enclosing_module(root: nn.Module, name: str, kind: type) -> nn.Module:
    """The closest module above ``root``'s submodule ``name`` that is a ``kind``."""
    parts = name.split('.')
    for cut in range(len(parts) - 1, 0, -1):
        parent = root.get_submodule('.'.join(parts[:cut]))
        if isinstance(parent, kind):
            return parent
    raise ValueError(f'{name} is not inside a {kind.__name__}')


def _theta_macs(backbone: nn.Module, thetas: Sequence[nn.Linear]) -> List[float]:
    """Multiply-accumulates of each Linear_θ in one eval forward pass of ``backbone`` on one
    image of its nominal input size."""
    h, w = backbone.input_size
    in_ch = next((m.in_channels for m in backbone.modules() if isinstance(m, nn.Conv2d)), 3)
    macs = [0.] * len(thetas)

    def hook(i):
        def record(mod, inputs, output):
            macs[i] += inputs[0].numel() / mod.in_features * mod.in_features * mod.out_features
        return record

    handles = [t.register_forward_hook(hook(i)) for i, t in enumerate(thetas)]
    was_training = backbone.training
    try:
        backbone.eval()
        with torch.no_grad():
            backbone(torch.zeros(1, in_ch, h, w))
    finally:
        backbone.train(was_training)
        for h_ in handles:
            h_.remove()
    return macs


def drop_path_rates(drop_path_rate: float, depth: int) -> List[float]:
    """Stochastic depth decaying linearly over the blocks (as timm and mmpretrain)."""
    if depth <= 1:
        return [drop_path_rate] * depth
    return [drop_path_rate * i / (depth - 1) for i in range(depth)]


def normalize_out_indices(out_indices: Union[int, Sequence[int]], num: int,
                          owner: str) -> Tuple[int, ...]:
    """Validate ``out_indices`` (negative values count from the end)."""
    if isinstance(out_indices, int):
        out_indices = [out_indices]
    out = []
    for i in out_indices:
        j = i + num if i < 0 else i
        if not 0 <= j < num:
            raise ValueError(f'{owner}: out_indices {i} out of range for {num} outputs')
        out.append(j)
    return tuple(out)


def count_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
