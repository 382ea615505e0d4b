"""The interface every retraining regulariser of mmdcs implements (method.md §6, §7).

A regulariser is a plain object (no ``nn.Module``: under DDP its running sums must stay per rank
until the epoch-end all-reduce) that the classifier feeds and a hook drives:

* :meth:`Regularizer.update` — every training batch, warm-up epochs included: add the batch's
  features (and labels / input images where the term needs them) to the streaming statistics;
* :meth:`Regularizer.batch_loss` — after ``t_warm``: the differentiable per-batch term under
  ``'loss'`` plus detached values to log;
* :meth:`Regularizer.begin_epoch` / :meth:`Regularizer.end_epoch` — reset the sums; all-reduce
  them across ranks, refresh the state and return the epoch report (floats);
* :meth:`Regularizer.state_dict` / :meth:`Regularizer.load_state_dict` — the tensors a
  checkpoint must hold to resume exactly; :meth:`Regularizer.to` moves them.

A new regulariser subclasses :class:`Regularizer`, keeps its tensors in a
:class:`~mmdcs.regularizers.state.TensorState` (``self.state``) and registers itself in
:data:`REGULARIZERS` with :func:`register`; ``ChannelSelectionClassifier(regularizer=dict(
type=NAME, ...))`` then builds it by name (:func:`build_regularizer`).
"""
from typing import Callable, Dict, Optional

import torch
from torch import Tensor

from mmdcs.checks import check_number

from .state import TensorState

#: name -> Regularizer subclass (filled by :func:`register`)
REGULARIZERS: Dict[str, type] = {}


def register(cls: type) -> type:
    """Class decorator: make ``cls`` buildable as ``regularizer=dict(type=cls.name)``."""
    REGULARIZERS[cls.name] = cls
    return cls


class Regularizer:
    """Base class: what the classifier and :class:`~mmdcs.engine.RegularizerHook` call.

    Subclasses set ``name`` (the config ``type`` and the log prefix), ``default_eta`` (η of
    the paper) and ``self.state`` (a :class:`TensorState` with ``begin_epoch``/``end_epoch``),
    and implement :meth:`update` and :meth:`batch_loss`.
    """
    name: str = ''
    default_eta: float = 1.0
    state: TensorState

    def update(self, features: Tensor, labels: Tensor, inputs: Optional[Tensor] = None) -> None:
        """Add one training batch (features detached) to the streaming statistics."""
        raise NotImplementedError

    def batch_loss(self, features: Tensor, labels: Tensor,
                   inputs: Optional[Tensor] = None) -> Dict[str, Tensor]:
        """``{'loss': differentiable term, ...detached values to log}`` for one batch."""
        raise NotImplementedError

    # -- the epoch and the checkpoint: the state object does the work -----------------------
    def begin_epoch(self) -> None:
        self.state.begin_epoch()

    def end_epoch(self) -> Dict[str, float]:
        return self.state.end_epoch()

    def state_dict(self):
        return self.state.state_dict()

    def load_state_dict(self, state_dict, strict: bool = True) -> None:
        self.state.load_state_dict(state_dict, strict)

    def to(self, device) -> 'Regularizer':
        self.state.to(device)
        return self

    @property
    def ready(self) -> bool:
        return self.state.ready


def unit_rows(features: Tensor, eps: float = 1e-12) -> Tensor:
    """Each row divided by its L2 norm (differentiable; a zero row stays 0), in float32 at least.

    The regularisers' ``normalize`` option (method.md §7.5, §6.8): the term then depends on the
    direction of a feature, not on a scale the network can shrink at no cost to the logits.
    """
    dtype = features.dtype if features.dtype in (torch.float32, torch.float64) else torch.float32
    f = features.to(dtype)
    return f / f.norm(dim=1, keepdim=True).clamp_min(eps)


def eta_ramp(iteration: int, iters_per_epoch: int, t_warm: int, ramp: float) -> float:
    """The share of η in force at a training iteration (0-based, counted over the whole run).

    0 before epoch ``t_warm``; then rising linearly to 1 over ``ramp`` epochs: iteration
    i ≥ i₀ = t_warm·iters_per_epoch gets min(1, (i − i₀ + 1) / (ramp·iters_per_epoch)), so the
    first iteration with the term already has a small share and the last one of the ramp has
    all of it. ``ramp = 0`` is the papers' step (1 from i₀ on). A function of the iteration
    only, so a resumed run continues the same schedule (method.md §4.3).
    """
    check_number(iters_per_epoch, 'iters_per_epoch', 1, integer=True)
    ramp = check_number(ramp, 'regularizer.ramp', 0)  # epochs
    start = t_warm * iters_per_epoch
    if iteration < start:
        return 0.0
    length = ramp * iters_per_epoch
    if length <= 0:
        return 1.0
    return min(1.0, (iteration - start + 1) / length)


def build_regularizer(cfg: dict, feat_dim: int, num_classes: Optional[int]) -> Regularizer:
    """A regulariser from ``dict(type=NAME, **options)`` for features of width ``feat_dim``."""
    cfg = dict(cfg)
    kind = cfg.pop('type', None)
    if kind not in REGULARIZERS:
        raise ValueError(f'regularizer.type must be one of {tuple(sorted(REGULARIZERS))}, '
                         f'got {kind!r}')
    factory: Callable[..., Regularizer] = REGULARIZERS[kind]
    return factory(feat_dim=feat_dim, num_classes=num_classes, **cfg)
