"""Ranking methods of the export to a budget (method.md §11, docs/budgets.md): a small registry
of *scorers*, each a name → a function giving every prunable channel and hidden unit a score.

A scorer is ``fn(backbone, **ctx) -> (channel_scores, hidden_scores)``:

* ``backbone`` — the supernet backbone (channel selectors on every prunable block, hidden
  selectors with ``select_hidden``), holding the checkpoint's weights;
* ``ctx`` — keyword context: always ``model`` (the whole model, e.g. the classifier, for
  scorers that run a forward pass); ``batches`` (an iterable of data batches, or a callable
  returning one) for a scorer registered with ``needs_data=True``; ignore what you do not use
  (take ``**ctx``);
* returns ``channel_scores``: block name (:func:`~mmdcs.selection.prunable_modules`) → one
  score per channel, higher is kept first; ``hidden_scores``: hidden selector path
  (:func:`~mmdcs.selection.hidden_selectors`) → one score per hidden unit (``{}`` when the
  backbone has no hidden selection).

Registration records how the export treats the scores:

* ``normalize`` — :func:`~mmdcs.selection.budget.normalize_scores` before the joint ranking
  (``'mean'``: each block's / module's scores relative to their mean, for scores on
  different scales such as weight norms; ``None`` for probabilities);
* ``baseline`` — the scorer reads a plain *baseline* checkpoint (the export turns the config's
  backbone into the MLP-channel-selection supernet ``dcs-arch2`` with its α unset, loads the
  baseline's weights into it and needs a budget); ``False``: a searched supernet checkpoint;
* ``needs_data`` — the export passes ``batches`` (e.g. a Taylor scorer's gradients).

Two today: ``'alpha'`` (σ(α), σ(β): the search's probabilities) and ``'magnitude'`` (L2 norms of
each channel's and hidden unit's weights, the standard criterion). Add one with::

    @register_scorer('taylor', normalize='mean', baseline=True, needs_data=True)
    def taylor_scores(backbone, *, model, batches, **ctx):
        ...
        return channel_scores, hidden_scores

Framework-free: plain PyTorch.
"""
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import torch.nn as nn
from torch import Tensor

from .budget import (NORMALIZATIONS, alpha_scores, hidden_alpha_scores, hidden_magnitude_scores,
                     magnitude_scores)

Scores = Tuple[Dict[str, Tensor], Dict[str, Tensor]]


@dataclass(frozen=True)
class Scorer:
    """A registered ranking method (see the module's documentation)."""
    name: str
    fn: Callable[..., Scores]
    normalize: Optional[str] = None
    baseline: bool = False
    needs_data: bool = False
    help: str = ''

    def __call__(self, backbone: nn.Module, **ctx) -> Scores:
        channel, hidden = self.fn(backbone, **ctx)
        return dict(channel), dict(hidden or {})


#: name → :class:`Scorer`, in registration order
SCORERS: Dict[str, Scorer] = {}


def register_scorer(name: str, *, normalize: Optional[str] = None, baseline: bool = False,
                    needs_data: bool = False, help: str = '', force: bool = False):
    """Decorator: register ``fn(backbone, **ctx) -> (channel_scores, hidden_scores)`` under
    ``name`` (ValueError if taken, unless ``force``)."""
    if normalize not in NORMALIZATIONS:
        raise ValueError(f'normalize must be one of {NORMALIZATIONS}, got {normalize!r}')

    def wrap(fn):
        if name in SCORERS and not force:
            raise ValueError(f'a scorer named {name!r} is registered already')
        SCORERS[name] = Scorer(name, fn, normalize, bool(baseline), bool(needs_data),
                               help or (fn.__doc__ or '').strip().split('\n')[0])
        return fn

    return wrap


def scorer_names() -> Tuple[str, ...]:
    """The registered scorers' names (the export's ``--method`` choices)."""
    return tuple(SCORERS)


def get_scorer(name: str) -> Scorer:
    """The scorer registered as ``name``; KeyError naming the known ones otherwise."""
    try:
        return SCORERS[name]
    except KeyError:
        raise KeyError(f'unknown ranking method {name!r}; known: '
                       f'{", ".join(SCORERS)}') from None


@register_scorer('alpha', help='the searched probabilities σ(α) and σ(β)')
def searched_scores(backbone: nn.Module, **ctx) -> Scores:
    """σ(α) of every channel and σ(β) of every hidden unit: the search's probabilities."""
    return alpha_scores(backbone), hidden_alpha_scores(backbone)


@register_scorer('magnitude', normalize='mean', baseline=True,
                 help='L2 norms of the weights, relative to their block\'s / module\'s mean')
def weight_norm_scores(backbone: nn.Module, **ctx) -> Scores:
    """The L2 norm of every channel's and hidden unit's weights (the magnitude pruner)."""
    return magnitude_scores(backbone), hidden_magnitude_scores(backbone)
