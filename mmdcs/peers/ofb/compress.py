"""Physical slicing of parameters *in place*, with their optimizer state.

OFB prunes the supernet while it trains: every ΔT iterations the units no cell can keep any more
are cut out of the weights. Here a parameter keeps its identity (``param.data`` is replaced, the
``nn.Parameter`` object stays), so the optimizer's parameter groups, the param schedulers and a
checkpoint's optimizer state (stored by position) stay valid; the optimizer's per-parameter state
tensors of the parameter's shape (AdamW's ``exp_avg`` and ``exp_avg_sq``, ``max_exp_avg_sq``,
SGD's ``momentum_buffer``) are sliced with it, so the kept entries keep their moments.

:func:`adopt_state_shapes_` is the reverse for a resumed run: a freshly built (full-size)
supernet takes the sliced shapes of a checkpoint before loading it.
"""
from typing import Callable, Dict, Iterable, List, Sequence, Union

import torch
import torch.nn as nn
from torch import Tensor

Optimizers = Union[None, torch.optim.Optimizer, Sequence[torch.optim.Optimizer]]


def as_optimizers(optimizers) -> List[torch.optim.Optimizer]:
    """A list of torch optimizers from None, an optimizer, a list of them, or anything with an
    ``optimizer`` attribute (mmengine's ``OptimWrapper``) or a ``values()`` of such
    (``OptimWrapperDict``)."""
    if optimizers is None:
        return []
    if isinstance(optimizers, torch.optim.Optimizer):
        return [optimizers]
    if hasattr(optimizers, 'optimizer') and isinstance(optimizers.optimizer,
                                                       torch.optim.Optimizer):
        return [optimizers.optimizer]
    if hasattr(optimizers, 'values') and callable(optimizers.values):
        optimizers = list(optimizers.values())
    out = []
    for o in optimizers:
        out.extend(as_optimizers(o))
    return out


def remap_param_(param: nn.Parameter, fn: Callable[[Tensor], Tensor],
                 optimizers: Optimizers = None) -> None:
    """``param.data = fn(param.data)`` in place, and the same on every optimizer state tensor
    that has the parameter's shape. The gradient is dropped (it has the old shape)."""
    old_shape = param.shape
    with torch.no_grad():
        param.data = fn(param.data).contiguous().clone()
    param.grad = None
    for opt in as_optimizers(optimizers):
        state = opt.state.get(param)
        if not state:
            continue
        for key, value in list(state.items()):
            if torch.is_tensor(value) and value.shape == old_shape and value.dim() > 0:
                state[key] = fn(value).contiguous().clone()


def slice_param_(param: nn.Parameter, index: Tensor, dim: int = 0,
                 optimizers: Optimizers = None) -> None:
    """Keep the entries ``index`` of ``param`` along ``dim`` (and of its optimizer state)."""
    index = index.to(param.device).long()
    remap_param_(param, lambda t: t.index_select(dim, index.to(t.device)), optimizers)


def reset_optimizer_state_(param: nn.Parameter, optimizers: Optimizers = None) -> None:
    """Forget the optimizer state of ``param`` (it is re-initialised at its next step), as the
    public code does for α after cells are dropped and for S when it becomes a multiplier."""
    for opt in as_optimizers(optimizers):
        opt.state.pop(param, None)


def compress_group_(bimask, threshold: float, slice_units: Callable[[Tensor], None],
                    optimizers: Optimizers = None) -> bool:
    """One pruning step of one unit group (a searching :class:`~.bimask.BiMask`): drop its
    cells with p ≤ threshold / n (and α's optimizer state), call ``slice_units(keep)`` with the
    units the remaining cells can keep when that support shrank, and finish the group when one
    cell is left (and forget S's optimizer state: S becomes a multiplier). Returns whether
    anything changed."""
    dropped = bimask.drop_cells(threshold)
    if dropped:
        reset_optimizer_state_(bimask.alpha, optimizers)
    if bimask.units != bimask.extent():
        slice_units(bimask.keep_index())
    if bimask.num_active == 1:
        bimask.finish_()
        reset_optimizer_state_(bimask.score, optimizers)
        return True
    return dropped


def sync_layer_attrs_(module: nn.Module) -> None:
    """Make the size attributes of the layers of ``module`` match their (sliced) weights:
    ``nn.Linear.in/out_features``, ``nn.Conv2d.in/out_channels``,
    ``nn.LayerNorm.normalized_shape`` (which ``F.layer_norm`` reads)."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            m.out_features, m.in_features = m.weight.shape
        elif isinstance(m, nn.Conv2d) and m.groups == 1:
            m.out_channels, m.in_channels = m.weight.shape[:2]
        elif isinstance(m, nn.LayerNorm) and m.weight is not None:
            m.normalized_shape = tuple(m.weight.shape)


def is_search_state(state_dict: Dict[str, Tensor], prefix: str = '') -> bool:
    """Whether ``state_dict`` holds the search state of an OFB supernet under ``prefix``."""
    return any(k.startswith(prefix) and k.endswith('bimask.active') for k in state_dict)


def adopt_state_shapes_(module: nn.Module, state_dict: Dict[str, Tensor], prefix: str = '',
                        skip: Iterable[str] = ()) -> List[str]:
    """Resize (in place) the parameters and buffers of ``module`` to the shapes they have in
    ``state_dict`` (a checkpoint of the same supernet after some compressions), so that the state
    dict loads. Only shrinking is allowed, and only a tensor of the same number of dimensions;
    anything else raises a ``ValueError`` naming the tensor. Returns the names resized.

    ``skip``: names (relative to ``module``) left alone (e.g. a position embedding that the
    module resamples itself)."""
    skip = set(skip)
    resized = []
    tensors = dict(module.named_parameters(recurse=True))
    tensors.update(dict(module.named_buffers(recurse=True)))
    for name, tensor in tensors.items():
        key = prefix + name
        if name in skip or key not in state_dict or tensor is None:
            continue
        new = state_dict[key]
        if not torch.is_tensor(new) or new.shape == tensor.shape:
            continue
        if new.dim() != tensor.dim() or any(a > b for a, b in zip(new.shape, tensor.shape)):
            raise ValueError(f'{key}: the checkpoint has shape {tuple(new.shape)}, the model '
                             f'{tuple(tensor.shape)}; an OFB checkpoint can only be smaller '
                             '(is it from another arch?)')
        with torch.no_grad():
            tensor.data = torch.zeros(new.shape, dtype=tensor.dtype, device=tensor.device)
        resized.append(name)
    if resized:
        sync_layer_attrs_(module)
    return resized
