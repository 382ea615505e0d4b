"""What every mmdcs backbone family shares: the variants, supernet/subnet modes, subnet export,
cost model, and loading of converted (timm) checkpoints.

A family (one file: ``vit.py``, ``swin.py``, ``mobilevit.py``, ``efficientvit.py``) subclasses
:class:`SelectableBackbone`, sets ``family`` and ``arch_zoo``, builds its layers with the
selection modules of :mod:`mmdcs.selection` according to ``self.qk_select`` and
``self.mlp_select``, calls :meth:`_apply_subnet` at the end of ``__init__``, and implements
:meth:`cost_terms`.
"""
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch.nn as nn
from mmengine.model import BaseModule

from mmdcs.utils.compat import patch_mmdet_ssd_head
from mmdcs.selection import (DEFAULT_GATE_INIT, CostModel, CostTerm, QKChannelSelector,
                             SubnetError, SubnetSpec, apply_subnet_, export_subnet, hidden_layout,
                             prunable_modules, selector_layout)

#: variant -> (Q/K channel selection, attention-output/MLP channel selection)
#: 'dcs-arch1' and 'dcs-arch2' are the paper's ablations (seed 000, Table 8): Q/K selection only,
#: MLP selection only; 'kcr' has the same structure as 'dcs-arch2' (seed 001, 3.1).
VARIANTS: Dict[str, Tuple[bool, bool]] = {
    'baseline': (False, False),
    'dcs': (True, True),
    'kcr': (False, True),
    'dcs-arch1': (True, False),
    'dcs-arch2': (False, True),
}
QK_MASKS = ('shared', 'separate')


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

    def __init__(self, arch: str, variant: Optional[str] = None,
                 subnet: Union[None, str, dict, SubnetSpec] = None, qk_mask: str = 'shared',
                 gate_init: float = DEFAULT_GATE_INIT, tau: float = 4.5, init_cfg=None,
                 select_hidden: bool = False, theta_rank: Optional[int] = None):
        super().__init__(init_cfg=init_cfg)
        # mmdet 3.3's SSDHead cannot predict without this (see mmdcs.utils.compat); applied here
        # too because a detector with an mmdcs backbone may be built after mmdcs.registry was
        # first imported, when mmdet was not loaded yet
        patch_mmdet_ssd_head()
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
        #: for the family: rank of Linear_θ (None: full)
        self.theta_rank: Optional[int] = theta_rank if spec_rank is None else int(spec_rank)

    # ----------------------------------------------------------------- supernet / subnet
    def _apply_subnet(self) -> None:
        """Call at the end of a family's ``__init__``: prune to ``subnet`` if one was given."""
        if self.subnet_spec is None:
            return
        self.subnet_spec.check(self.family, self.arch, selector_layout(self), self.variant,
                               hidden_layout(self))
        apply_subnet_(self, self.subnet_spec)  # also calls self._after_subnet

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

    # ----------------------------------------------------------------- checkpoints
    def load_converted(self, state_dict: dict, strict: bool = True) -> Tuple[List[str], List[str]]:
        """Load a converted state dict (e.g. from timm via the family's ``convert_timm``).

        The selection parameters (Linear_θ, α, τ) a baseline checkpoint cannot have are allowed
        to be missing: they keep their "all kept" initialisation. Anything else missing or
        unexpected is reported (an error with ``strict=True``, returned otherwise)."""
        missing, unexpected = self.load_state_dict(state_dict, strict=False)
        selection = ('.qk_select.', '.select.', '.hidden_select.', 'gate.tau')
        missing = [k for k in missing if not any(s in f'.{k}' for s in selection)]
        if strict and (missing or unexpected):
            raise KeyError(f'{type(self).__name__}: checkpoint does not fit; missing keys: '
                           f'{missing[:10]}{" ..." if len(missing) > 10 else ""}; unexpected '
                           f'keys: {unexpected[:10]}{" ..." if len(unexpected) > 10 else ""}')
        return missing, unexpected


def _theta_macs(backbone: nn.Module, thetas: Sequence[nn.Linear]) -> List[float]:
    """Multiply-accumulates of each Linear_θ in one eval forward pass of ``backbone`` on one
    image of its nominal input size."""
    import torch
    from mmdcs.analysis.complexity import nominal_input_size
    h, w = nominal_input_size(backbone)
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
