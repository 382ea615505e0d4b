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
  (what the search's budget and the export to a budget use; registered as the budget
  resources ``'flops'`` and ``'params'``, :func:`mmdcs.selection.budget.build_cost`). The
  only calibration of a budget in mmdcs.

These live with the models (the classifier calibrates its budget when it is built);
:mod:`mmdcs.analysis.complexity` builds the tables on them.
"""
import copy
import functools
import inspect
import math
import os.path as osp
import warnings
import weakref
from typing import Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.analysis import FlopAnalyzer
from mmengine.analysis.jit_handles import get_shape

from mmdcs.selection import (BlockSelection, QKChannelSelector, SubnetSpec, apply_subnet_,
                             head_selectors, hidden_selectors, prunable_modules)
from mmdcs.selection.budget import BudgetError, LinearCost, register_resource
from mmdcs.selection.latency_cost import LatencyCost
from mmdcs.selection.subnet import file_sha256
from mmdcs.selection.selectors import ChannelSelector

Size = Tuple[int, int]
#: the exact counts a budget can aim at (the resources ``flops`` and ``params``)
COUNTS = ('flops', 'params')


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


def distinct_halves(dims: Dict[str, int]) -> Dict[str, int]:
    """A probe width for every unit: about half of it, distinct between units of the same full
    width where possible (so that a layer outside the units that reads one of them, e.g.
    MobileViT's projection conv, can be told which one by its new shape)."""
    used, out = set(), {}
    for n, d in dims.items():
        w = max(1, d // 2)
        while (d, w) in used and w > 1:
            w -= 1
        used.add((d, w))
        out[n] = w
    return out


def _own_counts(model: nn.Module, resource: str, shape):
    """(total, path → count of the module and its children, path → count of the module's own
    operations or parameters): FLOPs from one mmengine trace (``by_module``), or parameters
    (the selectors' α excluded)."""
    if resource == 'flops':
        was_training = model.training
        model.eval()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')
                fa = flop_analysis(model, shape)
                total = float(fa.total())
                counts = fa.by_module()
        finally:
            model.train(was_training)
        pre = 'model.' if _takes_mode(model) else ''  # the _TensorMode wrapper
        out = {name: float(counts.get(pre + name if name else pre[:-1], 0))
               for name, _ in model.named_modules()}
    else:
        arch = {id(p) for m in model.modules() if isinstance(m, ChannelSelector)
                for p in m.parameters()}
        out = {name: float(sum(p.numel() for p in m.parameters() if id(p) not in arch))
               for name, m in model.named_modules()}
        total = out['']
    # each module's own count: what its children do not count
    own = {name: out[name] - sum(out.get(f'{name}.{c}' if name else c, 0.)
                                 for c, _ in m.named_children())
           for name, m in model.named_modules()}
    return total, out, own


def _leaf_shapes(module: nn.Module) -> Dict[str, Tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in module.named_parameters(recurse=False)}


@torch.no_grad()
def calibrate_cost(model: nn.Module, resource: str = 'flops',
                   input_size: Optional[Size] = None):
    """The exact count of the pruned networks of a supernet as a
    :class:`~mmdcs.selection.budget.LinearCost`
    (``const + Σ_j coef_j·D̃_j + Σ_j pair_j·D̃_j·H̃_j + Σ_k hidden_coef_k·H̃_k``), measured with
    this module's counts (``mmengine.analysis`` FLOPs at ``input_size``, parameters) of the
    whole ``model`` (a classifier, or the backbone itself).

    Probes: the supernet at full width (in eval every channel is computed; the selection's α
    are not deployed parameters), a copy with about half of every block's channels and, with
    hidden-unit selection, a copy with about half of every hidden-selected module's units and
    one with both. Every probe is counted once (one trace each for FLOPs) and broken down by
    module: a prunable module's count, and a hidden-selected module's, is bilinear in its own
    D̃ and H̃, so the four corners give its coefficients exactly; an operation outside them
    whose count changes with D̃ (MobileViT's projection conv, which reads the last transformer
    layer's channels, and the interpolation of its fold where the patch does not divide the
    map) is attributed to its block by the new shape of its layer. Nothing is assumed about how
    token counts scale with the input (patch unfolding, window padding, strides): every
    coefficient is measured at ``input_size``. A count that is not of that form (a module that
    depends on another block's width, a change that no layer explains) is an internal error.
    The baseline (no selection) is the full width minus Linear_θ of DCS.

    Cost: 2 traced FLOP counts (4 with hidden-unit selection) and as many copies of the model;
    parameters need no trace.

    Args:
        model: a model whose backbone (``model.backbone`` or the model) is an mmdcs supernet.
        resource: ``'flops'`` or ``'params'``.
        input_size: (H, W) of the FLOPs (default: the backbone's nominal input size).
    """
    if resource not in COUNTS:
        raise ValueError(f'a budget counts one of {COUNTS}, got {resource!r}')
    backbone = model if hasattr(model, 'cost_terms') else getattr(model, 'backbone', None)
    if backbone is None or not hasattr(backbone, 'cost_terms'):
        raise ValueError(f'{type(model).__name__} has no mmdcs backbone to calibrate')
    modules = prunable_modules(backbone)
    if not modules:
        raise ValueError(f'{type(backbone).__name__} has no architecture parameters')
    prefix = '' if model is backbone else next(
        n + '.' for n, m in model.named_modules() if m is backbone)
    names = list(modules)
    dims = {n: int(m.select.dim) for n, m in modules.items()}
    hidden_dims = {k: int(sel.dim) for k, sel in hidden_selectors(backbone).items()}
    size = tuple(input_size) if input_size is not None else backbone.input_size
    in_ch = next((m.in_channels for m in backbone.modules() if isinstance(m, nn.Conv2d)), 3)
    shape = (1, in_ch) + tuple(size)

    half, hhalf = distinct_halves(dims), distinct_halves(hidden_dims)
    corners = [(False, False), (True, False)]
    if hidden_dims:
        corners += [(False, True), (True, True)]
    pr = _Probes(model, backbone, prefix, resource, shape, dims, hidden_dims, half, hhalf,
                 corners)
    coef, pair, hidden_coef = pr.unit_coefficients()
    pr.outside_coefficients(coef)
    head_coef, head_dims = _head_coefficients(model, backbone, prefix, resource, shape, dims,
                                              hidden_dims, pr.counts[0], _same)
    full = pr.totals[0]
    cost = LinearCost(resource, baseline=full - _theta_count(backbone, resource, shape),
                      const=0., coef=coef, dims=dims, input_size=tuple(size),
                      meta=dict(probes=len(corners) + bool(head_dims)), pair=pair,
                      pair_hidden={u: u for u in pair}, hidden_coef=hidden_coef,
                      hidden_dims=hidden_dims, head_coef=head_coef, head_dims=head_dims,
                      counter=functools.partial(count_model, resource=resource, shape=shape))
    cost.const = full - cost.at(dims)
    # the count at the probes' widths must be what was counted (the bilinear form holds)
    for (d_half, h_half), total in zip(corners, pr.totals):
        pred = cost.at({n: half[n] if d_half else dims[n] for n in names},
                       {k: hhalf[k] if h_half else h for k, h in hidden_dims.items()})
        if abs(pred - total) > 1e-6 * max(1., abs(total)):
            raise RuntimeError(f'internal: the calibrated {resource} count of '
                               f'{type(backbone).__name__} is {pred:.0f} where the probe counts '
                               f'{total:.0f}')
    return cost


def _same(a, b) -> bool:
    return abs(a - b) <= 1e-9 * max(1., abs(a), abs(b))


def _theta_count(backbone: nn.Module, resource: str, shape) -> float:
    """The count of DCS's Linear_θ (not in the baseline network)."""
    if resource == 'flops':
        return _theta_flops(backbone, shape)
    thetas = [lin for m in backbone.modules() if isinstance(m, QKChannelSelector)
              for lin in (getattr(m, 'theta_down', None), m.theta) if lin is not None]
    return float(sum(p.numel() for t in thetas for p in t.parameters()))


class _Probes:
    """The probes of :func:`calibrate_cost`: the model at full width and at the half widths of
    ``corners`` (channels, hidden units), each counted once and broken down by module, and the
    coefficients they give."""

    def __init__(self, model, backbone, prefix, resource, shape, dims, hidden_dims, half,
                 hhalf, corners):
        self.model, self.prefix, self.resource = model, prefix, resource
        self.dims, self.hidden_dims, self.half, self.hhalf = dims, hidden_dims, half, hhalf
        self.corners, self.backbone = corners, backbone
        self.names = list(dims)
        self.counts, self.shapes = [], []
        for d_half, h_half in corners:
            probe = model
            if d_half or h_half:
                probe = copy.deepcopy(model)
                spec = SubnetSpec(
                    backbone.family, backbone.arch, backbone.variant,
                    [BlockSelection(n, dims[n], list(range(half[n] if d_half else dims[n])))
                     for n in self.names],
                    hidden=[BlockSelection(k, h, list(range(hhalf[k] if h_half else h)))
                            for k, h in hidden_dims.items()])
                apply_subnet_(probe if model is backbone else
                              probe.get_submodule(prefix[:-1]), spec)
            self.counts.append(_own_counts(probe, resource, shape))
            self.shapes.append({n: _leaf_shapes(m) for n, m in probe.named_modules()})
        self.totals = [c[0] for c in self.counts]
        # units: the prunable modules and the hidden-selected modules (an MLP is both)
        self.units = list(dict.fromkeys(self.names + list(hidden_dims)))

    def value(self, i, path):
        return self.counts[i][1][self.prefix + path]

    def inside(self, path):
        return any(path == self.prefix + u or path.startswith(self.prefix + u + '.')
                   for u in self.units)

    def unit_coefficients(self):
        """(coef, pair, hidden_coef) of the prunable modules: each one's count is bilinear in
        its own D̃ and H̃, so the corners give its coefficients exactly."""
        coef = {n: 0. for n in self.names}
        pair, hidden_coef = {}, {}
        for u in self.units:
            b, c, p = self._bilinear(u)
            if u in self.dims:
                coef[u] += b
                if p:
                    pair[u] = p
            if u in self.hidden_dims:
                hidden_coef[u] = c
        return coef, pair, hidden_coef

    def _bilinear(self, u):
        """(b, c, p) of f = a + b·D̃ + c·H̃ + p·D̃·H̃ of unit ``u``, from the corners: 0 (D, H),
        1 (D/2, H), 2 (D, H/2), 3 (D/2, H/2)."""
        dims, hdims, half, hhalf = self.dims, self.hidden_dims, self.half, self.hhalf
        v = [self.value(i, u) for i in range(len(self.corners))]
        sel_x = u in dims and dims[u] != half[u]
        sel_y = u in hdims and hdims[u] != hhalf[u]
        b = c = p = 0.
        if sel_x:
            b = (v[0] - v[1]) / (dims[u] - half[u])
        elif not _same(v[0], v[1]):
            raise RuntimeError(f'internal: the {self.resource} of {u} depend on channels it '
                               'does not select')
        if len(self.corners) == 4:
            if sel_y:
                c = (v[0] - v[2]) / (hdims[u] - hhalf[u])
            elif not (_same(v[0], v[2]) and _same(v[1], v[3])):
                raise RuntimeError(f'internal: the {self.resource} of {u} depend on hidden '
                                   'units it does not select')
            if sel_x and sel_y:
                p = (v[0] - v[1] - v[2] + v[3]) / ((dims[u] - half[u]) * (hdims[u] - hhalf[u]))
                b -= p * hdims[u]
                c -= p * dims[u]
            elif sel_x and not _same(v[0] - v[1], v[2] - v[3]):
                raise RuntimeError(f'internal: the {self.resource} of {u} depend on hidden '
                                   'units it does not select')
        return b, c, p

    def _by_shape(self, path):
        return {n for k, new_shape in self.shapes[1].get(path, {}).items() for n in self.names
                for a, b in zip(self.shapes[0].get(path, {}).get(k, ()), new_shape)
                if (a, b) == (self.dims[n], self.half[n])}

    def outside_coefficients(self, coef) -> None:
        """The rest of the model is constant, but for operations that read a block's kept
        channels (MobileViT's projection conv, and the interpolation of its fold where the
        patch does not divide the map): a module with a parameter whose dim went from D to the
        probe's width is that block's; a module whose own operations changed without such a
        parameter is the block's whose such modules it contains. Added to ``coef``; anything
        else that changes is an internal error."""
        counts, units = self.counts, self.units
        rest = [t - sum(self.value(i, u) for u in units) for i, t in enumerate(self.totals)]
        changed = [p for p, own in counts[1][2].items()
                   if not self.inside(p) and p in counts[0][2] and not _same(own, counts[0][2][p])]
        owner = {p: self._by_shape(p) for p in self.shapes[1]
                 if not self.inside(p) and self._by_shape(p)}
        explained = 0.
        for path in changed:
            found = owner.get(path) or {n for p, ns in owner.items()
                                        if p.startswith(path + '.' if path else '') for n in ns}
            if len(found) != 1:
                raise RuntimeError(f'internal: {path or type(self.model).__name__} changes with '
                                   f'the kept channels but cannot be attributed to one block '
                                   f'({sorted(found)[:3]})')
            n = found.pop()
            d0, d1 = counts[0][2][path], counts[1][2][path]
            coef[n] += (d0 - d1) / (self.dims[n] - self.half[n])
            explained += d0 - d1
        if not _same(rest[0] - rest[1], explained) or (
                len(self.corners) == 4 and not (_same(rest[0], rest[2])
                                                and _same(rest[1], rest[3]))):
            raise RuntimeError(f'internal: the {self.resource} of '
                               f'{type(self.backbone).__name__} change with the kept widths '
                               'outside its prunable modules in a way no layer explains')


def _head_coefficients(model, backbone, prefix, resource, shape, dims, hidden_dims, full,
                       same) -> Tuple[Dict[str, float], Dict[str, int]]:
    """(attention path → count per kept head, → number of heads) of the head-selected
    attentions (``select_heads=True``): one more probe, about half of every attention's heads
    kept (channels and hidden units all kept), counted and broken down by module like the other
    probes. An attention's own count (q, k, v, the products, proj, Linear_θ) is linear in its
    kept heads; anything outside the attentions that changes is an internal error."""
    head_dims = {k: int(sel.dim) for k, sel in head_selectors(backbone).items()}
    if not head_dims:
        return {}, {}
    hhalf = distinct_halves(head_dims)
    probe = copy.deepcopy(model)
    spec = SubnetSpec(backbone.family, backbone.arch, backbone.variant,
                      [BlockSelection(n, d, list(range(d))) for n, d in dims.items()],
                      hidden=[BlockSelection(k, h, list(range(h)))
                              for k, h in hidden_dims.items()],
                      heads=[BlockSelection(k, h, list(range(hhalf[k])))
                             for k, h in head_dims.items()])
    apply_subnet_(probe if model is backbone else probe.get_submodule(prefix[:-1]), spec)
    total, out, _ = _own_counts(probe, resource, shape)
    head_coef, explained = {}, 0.
    for k, h in head_dims.items():
        if h == hhalf[k]:  # a single head: nothing to select, its cost stays in the constant
            head_coef[k] = 0.
            continue
        d = full[1][prefix + k] - out[prefix + k]
        head_coef[k] = d / (h - hhalf[k])
        explained += d
    if not same(full[0] - total, explained):
        raise RuntimeError(f'internal: the {resource} of {type(backbone).__name__} change with '
                           'the kept heads outside its attentions')
    return head_coef, head_dims


#: counts of built networks already counted (a network is counted by the target's check and
#: by the export's record): network → (resource, shape) → count
_COUNTED = weakref.WeakKeyDictionary()


def count_model(model: nn.Module, resource: str, shape) -> float:
    """The exact ``resource`` count of a built network: :func:`count_flops` at ``shape`` or
    :func:`count_params` (what a :class:`LinearCost` calibrated here counts a pruned network
    with, :meth:`LinearCost.count_model`); a network is traced once per shape."""
    seen = _COUNTED.setdefault(model, {})
    key = (resource, tuple(shape))
    if key not in seen:
        seen[key] = float(count_flops(model, shape) if resource == 'flops'
                          else count_params(model))
    return seen[key]


def _exact_count(resource: str):
    def build(model: nn.Module, input_size: Optional[Size] = None) -> LinearCost:
        return calibrate_cost(model, resource, input_size)
    build.__doc__ = f'The exact {resource} count (:func:`calibrate_cost`).'
    return build


# the exact counts are the budget resources 'flops' and 'params' (mmdcs.selection.budget's
# registry; the search, the export and the analysis tools build them by name)
register_resource('flops', _exact_count('flops'),
                  help='multiply-accumulates, counted by mmengine.analysis', counted=True)
register_resource('params', _exact_count('params'), help='parameters', counted=True)


def latency_cost(model: nn.Module, input_size: Optional[Size] = None,
                 latency_table: Optional[str] = None) -> LatencyCost:
    """The budget resource ``'latency'``: the latency predicted by the table at
    ``latency_table`` (``tools/analysis/latency_table.py``) for the mmdcs backbone of ``model``
    at ``input_size``; a table measured for another arch, variant, selection options, input size
    or units is one :class:`~mmdcs.selection.latency_cost.LatencyTableError` line. ``meta``
    records the table's identity (where and how it was measured, its path and sha256)."""
    if not latency_table:
        raise BudgetError('a latency target needs a latency table: latency_table=PATH (one is '
                          'built by tools/analysis/latency_table.py on the target device)')
    backbone = model if hasattr(model, 'cost_terms') else getattr(model, 'backbone', model)
    cost = LatencyCost.from_file(latency_table, backbone, input_size)
    cost.meta = dict(cost.meta, table=osp.abspath(latency_table),
                     table_sha256=file_sha256(latency_table),
                     input_size=list(cost.input_size) if cost.input_size else None)
    return cost


register_resource('latency', latency_cost, options=('latency_table', ),
                  help='milliseconds predicted by a latency table measured on the device')
