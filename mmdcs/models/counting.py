"""Counting parameters and FLOPs of mmdcs models with one tool (``mmengine.analysis``), and the
exact count of a supernet's pruned networks that a budget uses (method.md §3, §11).

FLOPs are **multiply-accumulates** as ``mmengine.analysis.FlopAnalyzer`` (fvcore) counts them:
convolutions, linear layers, matmuls/einsums, normalisation layers; element-wise operations
(activations, softmax, the 0/1 gate masks, residual additions) count nothing. mmengine has no
handle for ``aten::scaled_dot_product_attention``, so the attention products of
:class:`~mmdcs.selection.DCSAttention` (ViT, Swin, MobileViT) would silently count 0; we add one
(:func:`sdpa_flop_jit`: Q·Kᵀ and W·V, ``B·heads·N_q·N_k·(d_qk + d_v)``), so the
explicit-matmul form and the fused form count the same.

* :func:`count_params`, :func:`count_flops` — of any module (a backbone, or a whole mmengine
  model such as an mmpretrain ``ImageClassifier``, traced in ``'tensor'`` mode).
* :func:`calibrate_cost` — a supernet's pruned networks' count as ``const + Σ_j coef_j·D̃_j``
  (what the search's budget and the export to a budget use).

These live with the models (the classifier calibrates its budget when it is built);
:mod:`mmdcs.analysis.complexity` builds the tables on them.
"""
import copy
import inspect
import math
import warnings
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.analysis import FlopAnalyzer
from mmengine.analysis.jit_handles import get_shape

from mmdcs.selection import (BlockSelection, QKChannelSelector, SubnetSpec, apply_subnet_,
                             hidden_selectors, prunable_modules)
from mmdcs.selection.budget import RESOURCES, LinearCost
from mmdcs.selection.selectors import ChannelSelector

Size = Tuple[int, int]


# ----------------------------------------------------------------------------- counting
def sdpa_flop_jit(inputs: list, outputs: list) -> int:
    """MACs of ``aten::scaled_dot_product_attention``: Q·Kᵀ and W·V (FlopAnalyzer handle)."""
    q, k, v = (get_shape(t) for t in inputs[:3])
    batch = math.prod(q[:-2])
    return batch * q[-2] * k[-2] * (q[-1] + v[-1])


def count_params(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters (all of them, or those with ``requires_grad``)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def _shape(input_shape: Union[int, Sequence[int]], in_channels: int = 3) -> Tuple[int, ...]:
    """(B, C, H, W) from an int (square), (H, W), (C, H, W) or (B, C, H, W)."""
    if isinstance(input_shape, int):
        input_shape = (input_shape, input_shape)
    s = tuple(int(v) for v in input_shape)
    if len(s) == 2:
        return (1, in_channels) + s
    if len(s) == 3:
        return (1, ) + s
    if len(s) == 4:
        return s
    raise ValueError(f'input_shape must be H, (H, W), (C, H, W) or (B, C, H, W); got {s}')


class _TensorMode(nn.Module):
    """An mmengine model (``forward(inputs, data_samples, mode)``) traced in ``'tensor'`` mode."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x, mode='tensor')


def _takes_mode(model: nn.Module) -> bool:
    try:
        return 'mode' in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


@torch.no_grad()
def flop_analysis(model: nn.Module, input_shape: Union[None, int, Sequence[int]] = None,
                  count_attention: bool = True, inputs: Optional[torch.Tensor] = None):
    """A ready ``FlopAnalyzer`` of ``model`` on a random input of ``input_shape`` (or on
    ``inputs``; see :func:`count_flops`), for totals and per-module / per-operator
    breakdowns."""
    if inputs is None:
        if input_shape is None:
            raise ValueError('give input_shape or inputs')
        device = next(iter(model.parameters()), torch.empty(0)).device
        x = torch.randn(_shape(input_shape), device=device)
    else:
        x = inputs
    target = _TensorMode(model) if _takes_mode(model) else model
    fa = FlopAnalyzer(target, (x, ))
    if count_attention:
        fa.set_op_handle('aten::scaled_dot_product_attention', sdpa_flop_jit)
    fa.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    fa.tracer_warnings('none')
    return fa


@torch.no_grad()
def count_flops(model: nn.Module, input_shape: Union[None, int, Sequence[int]] = None,
                count_attention: bool = True, inputs: Optional[torch.Tensor] = None) -> int:
    """FLOPs (multiply-accumulates, mmengine's convention) of one forward pass in eval mode.

    Args:
        model: a backbone (``forward(x)``) or an mmengine model whose ``forward`` takes ``mode``
            (e.g. mmpretrain's ``ImageClassifier``), which is traced in ``'tensor'`` mode.
        input_shape: H (square), (H, W), (C, H, W) or (B, C, H, W); batch 1 unless given.
        count_attention: count ``scaled_dot_product_attention`` (Q·Kᵀ and W·V) with
            :func:`sdpa_flop_jit`; ``False`` gives mmengine's own count (0 for that op).
        inputs: the input tensor itself (any shape), instead of ``input_shape``.
    """
    was_training = model.training
    model.eval()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            return int(flop_analysis(model, input_shape, count_attention, inputs).total())
    finally:
        model.train(was_training)


# ----------------------------------------------------------------------------- budgets
@torch.no_grad()
def _theta_flops(backbone: nn.Module, x_shape: Tuple[int, ...]) -> float:
    """Multiply-accumulates of the Q/K mask layers Linear_θ of DCS in one eval forward pass of
    the backbone (tokens × in × out each, as mmengine counts a linear layer)."""
    thetas = [lin for m in backbone.modules() if isinstance(m, QKChannelSelector)
              for lin in (getattr(m, 'theta_down', None), m.theta) if lin is not None]
    if not thetas:
        return 0.
    total = [0.]

    def record(mod, inputs, output):
        total[0] += inputs[0].numel() * mod.out_features

    handles = [t.register_forward_hook(record) for t in thetas]
    was_training = backbone.training
    try:
        backbone.eval()
        device = next(backbone.parameters()).device
        backbone(torch.zeros(x_shape, device=device))
    finally:
        backbone.train(was_training)
        for h in handles:
            h.remove()
    return total[0]


@torch.no_grad()
def calibrate_cost(model: nn.Module, resource: str = 'flops',
                   input_size: Optional[Size] = None):
    """The exact count of the pruned networks of a supernet as a
    :class:`~mmdcs.selection.budget.LinearCost` (``const + Σ_j coef_j·D̃_j``), calibrated
    against this module's counts (``mmengine.analysis`` FLOPs, parameters) of the whole
    ``model`` (a classifier, or the backbone itself).

    Two networks are counted: the supernet at full width (in eval every channel is computed; the
    selection's α are not deployed parameters) and a copy pruned to half of every block's
    channels. The coefficients are the family's per-channel counts (``CostTerm``), FLOPs scaled
    by one factor fitted to the difference (the family's are at its nominal input size; every
    token count scales alike with the input), parameters exact (checked against the
    difference). The baseline (no selection) is the full width minus Linear_θ of DCS.

    Args:
        model: a model whose backbone (``model.backbone`` or the model) is an mmdcs supernet.
        resource: ``'flops'`` or ``'params'``.
        input_size: (H, W) of the FLOPs (default: the backbone's nominal input size).
    """
    if resource not in RESOURCES:
        raise ValueError(f'a budget counts one of {RESOURCES}, got {resource!r}')
    backbone = model if hasattr(model, 'cost_terms') else getattr(model, 'backbone', None)
    if backbone is None or not hasattr(backbone, 'cost_terms'):
        raise ValueError(f'{type(model).__name__} has no mmdcs backbone to calibrate')
    modules = prunable_modules(backbone)
    if not modules:
        raise ValueError(f'{type(backbone).__name__} has no architecture parameters')
    terms = {id(t.selector): t for t in backbone.cost_terms()}
    names = list(modules)
    dims = {n: m.select.dim for n, m in modules.items()}
    per_channel = {}
    # hidden-unit selection (select_hidden): a bilinear pair term per block and a term per
    # hidden unit; the per-channel count at full hidden width fits the scale below
    hidden_paths = {id(sel): k for k, sel in hidden_selectors(backbone).items()}
    pair, pair_hidden, hidden_coef, hidden_dims = {}, {}, {}, {}
    for t in backbone.cost_terms():
        if t.hidden is None:
            continue
        k = hidden_paths[id(t.hidden)]
        hidden_dims[k] = int(t.hidden.dim)
        hmod = backbone.get_submodule(k)
        if resource == 'flops':
            hidden_coef[k] = float(t.flops_per_hidden)
        elif hasattr(hmod, 'fc1'):  # an MLP: fc1's bias per hidden unit
            hidden_coef[k] = float(hmod.fc1.bias is not None)
        else:  # an inverted bottleneck: every weight of the expanded channels
            hidden_coef[k] = float(sum(
                p.numel() for name, p in hmod.named_parameters()
                if not name.startswith(('hidden_select.', 'point_conv.norm', 'conv3_1x1.bn'))
                and not name.endswith(('point_conv.conv.bias', 'conv3_1x1.conv.bias'))
            )) / hidden_dims[k]
        if t.selector is not None and (t.flops_per_pair or resource == 'params') and \
                hasattr(hmod, 'fc1'):
            n = next(n for n, m in modules.items() if m.select is t.selector)
            pair_hidden[n] = k
            pair[n] = float(t.flops_per_pair) if resource == 'flops' else 2.
    for n, m in modules.items():
        t = terms.get(id(m.select))
        if t is None:
            raise ValueError(f'block {n} has no cost term')
        if resource == 'flops':
            per_channel[n] = float(t.flops_per_channel + t.flops_per_pair * t.hidden_dim)
        else:
            per_channel[n] = float(t.params_per_channel)
    size = tuple(input_size) if input_size is not None else backbone.input_size
    in_ch = next((m.in_channels for m in backbone.modules() if isinstance(m, nn.Conv2d)), 3)
    shape = (1, in_ch) + tuple(size)

    half = {n: max(1, dims[n] // 2) for n in names}
    spec = SubnetSpec(backbone.family, backbone.arch, backbone.variant,
                      [BlockSelection(n, dims[n], list(range(half[n]))) for n in names])
    pruned = copy.deepcopy(model)
    apply_subnet_(pruned if model is backbone else pruned.backbone, spec)
    thetas = [lin for m in backbone.modules() if isinstance(m, QKChannelSelector)
              for lin in (getattr(m, 'theta_down', None), m.theta) if lin is not None]

    def params(module):
        arch = {id(p) for m in module.modules() if isinstance(m, ChannelSelector)
                for p in m.parameters()}
        return float(sum(p.numel() for p in module.parameters() if id(p) not in arch))

    if resource == 'flops':
        full, small = float(count_flops(model, shape)), float(count_flops(pruned, shape))
        theta = _theta_flops(backbone, shape)
    else:
        full, small = params(model), params(pruned)
        theta = float(sum(p.numel() for t in thetas for p in t.parameters()))
    nominal = sum(per_channel[n] * (dims[n] - half[n]) for n in names)
    scale = (full - small) / nominal if nominal else 0.
    if resource == 'params' and abs(scale - 1) > 1e-6:
        raise RuntimeError(f'internal: the parameters per channel of {type(backbone).__name__} '
                           f'({nominal:.0f} for the dropped half) do not match the model\'s '
                           f'count ({full - small:.0f})')
    coef = {n: per_channel[n] * scale for n in names}
    if resource == 'flops':
        pair = {n: c * scale for n, c in pair.items()}
        hidden_coef = {k: c * scale for k, c in hidden_coef.items()}
    # the per-channel count at full hidden width is coef + pair·H: split it
    for n, c in pair.items():
        coef[n] -= c * hidden_dims[pair_hidden[n]]
    cost = LinearCost(resource, baseline=full - theta, const=0., coef=coef, dims=dims,
                      input_size=tuple(size), meta=dict(scale=scale), pair=pair,
                      pair_hidden=pair_hidden, hidden_coef=hidden_coef, hidden_dims=hidden_dims)
    cost.const = full - cost.at(dims)
    return cost
