"""How hard the retraining term pulls against the cross-entropy (method.md §4.3, §6.8, §7.5).

For a classifier with a regulariser (IB or KCR) and batches of its training data:

* :func:`fill_state` — one pass over the batches in train mode, feeding the regulariser's
  streaming statistics, then the epoch-end refresh (what the hook does during ``t_warm``);
* :func:`gradient_shares` — per batch, the gradients of CE and of η·term with respect to the
  same weight parameters (all of them; the head's; the backbone's), their norms, ratio and
  cosine, and the share of the CE gradient that survives a clip of the summed gradient's norm
  (``clip_grad.max_norm`` of the config): ``min(1, max_norm / ‖∇CE + η∇term‖)``.

Plain PyTorch on a built model; the tool is ``tools/analysis/regularizer_grad.py``.
"""
from typing import Dict, Iterable, List, Optional, Tuple

import torch
from torch import Tensor, nn

from mmdcs.regularizers import Regularizer


def _features(model: nn.Module, inputs: Tensor) -> Tuple[tuple, Tensor]:
    feats = model.extract_feat(inputs)
    f = model.head.pre_logits(feats)
    return feats, f.flatten(1) if f.dim() != 2 else f


@torch.no_grad()
def fill_state(model: nn.Module, reg: Regularizer,
               batches: Iterable[Tuple[Tensor, Tensor]]) -> Dict[str, float]:
    """Feed ``reg`` one epoch of ``batches`` (train mode, as the training does) and refresh it."""
    was_training = model.training
    model.train()
    reg.begin_epoch()
    for inputs, labels in batches:
        _, f = _features(model, inputs)
        reg.update(f, labels, inputs)
    model.train(was_training)
    return reg.end_epoch()


def _norm(grads: List[Optional[Tensor]]) -> float:
    sq = sum(float(g.double().pow(2).sum()) for g in grads if g is not None)
    return sq ** 0.5


def _dot(a: List[Optional[Tensor]], b: List[Optional[Tensor]]) -> float:
    return sum(float((x.double() * y.double()).sum()) for x, y in zip(a, b)
               if x is not None and y is not None)


def gradient_shares(model: nn.Module, reg: Regularizer, batches: Iterable[Tuple[Tensor, Tensor]],
                    eta: float, max_norm: Optional[float] = None, seed: int = 0
                    ) -> Dict[str, float]:
    """Mean over ``batches`` of: ``ce``, ``term`` (the regulariser's value, without η),
    ``grad_ce``, ``grad_reg`` (of η·term), ``ratio`` (grad_reg / grad_ce), ``cos`` (between the
    two), the same ratio on the head's parameters (``ratio_head``) and the backbone's
    (``ratio_backbone``), and with ``max_norm`` the share of ∇CE left after clipping the sum
    (``ce_kept_after_clip``; also ``ce_kept_without_term``, the share with CE alone).

    Train mode (dropout, drop path as in training), seeded; the regulariser's state is used as
    it is (refresh it first with :func:`fill_state`)."""
    was_training = model.training
    model.train()
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    names = [n for n, _ in params]
    tensors = [p for _, p in params]
    is_head = [n.startswith('head.') for n in names]
    rows = []
    for i, (inputs, labels) in enumerate(batches):
        torch.manual_seed(seed + i)
        feats, f = _features(model, inputs)
        logits = model.head(feats)
        ce = nn.functional.cross_entropy(logits, labels.to(logits.device))
        term = reg.batch_loss(f, labels, inputs)['loss']
        g_ce = torch.autograd.grad(ce, tensors, retain_graph=True, allow_unused=True)
        if term.requires_grad:
            g_reg = torch.autograd.grad(eta * term, tensors, allow_unused=True)
        else:
            g_reg = [None] * len(tensors)
        n_ce, n_reg = _norm(g_ce), _norm(g_reg)
        split = {}
        for part, keep in (('head', True), ('backbone', False)):
            a = [g for g, h in zip(g_ce, is_head) if h == keep]
            b = [g for g, h in zip(g_reg, is_head) if h == keep]
            split[f'ratio_{part}'] = _norm(b) / max(_norm(a), 1e-30)
        row = dict(ce=float(ce), term=float(term), grad_ce=n_ce, grad_reg=n_reg,
                   ratio=n_reg / max(n_ce, 1e-30),
                   cos=_dot(g_ce, g_reg) / max(n_ce * n_reg, 1e-30), **split)
        if max_norm is not None:
            total = (n_ce ** 2 + n_reg ** 2 + 2 * _dot(g_ce, g_reg)) ** 0.5
            row['ce_kept_after_clip'] = min(1.0, max_norm / max(total, 1e-30))
            row['ce_kept_without_term'] = min(1.0, max_norm / max(n_ce, 1e-30))
        rows.append(row)
    model.train(was_training)
    if not rows:
        raise ValueError('no batch to measure')
    return {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]} | {'batches': len(rows)}
