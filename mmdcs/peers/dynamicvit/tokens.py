"""Token bookkeeping of DynamicViT: keep ratios and counts, the training decision, the inference
top-k gather, and the restoration of dropped tokens into a dense map.

* Training (paper §3.2–3.3): ``D = GumbelSoftmax(π, hard=True)[:, :, keep] ⊙ D̂`` — a hard 0/1
  mask with a straight-through gradient, cumulative over the stages (a dropped token stays
  dropped).
* Inference (DynamicViT paper §3.4): the ``m_s = ⌈ρ_s·N⌉`` best-scored patch tokens are gathered (``argsort`` of
  the keep score), the class token always kept; ``N`` is the number of patch tokens entering the
  network and ρ_s the keep ratio of stage s relative to it. The public code uses ``int(ρ_s·N)``;
  here the count is ``⌈ρ_s·N⌉`` (at least one token), so a stage never keeps fewer than ρ_s.
* Dense outputs: a dropped token keeps the features it had at the stage where it was dropped
  (:func:`restore_tokens`), so a feature map stays defined at every position.
"""
import math
from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .predictor import KEEP

#: schedules of the keep ratios: ViT/LV-ViT ``ρ^s`` (public main.py KEEP_RATE), ConvNeXt/Swin
#: ``ρ - 0.2·(s - 1)`` (public SPARSE_RATIO)
RATIO_SCHEDULES = ('power', 'linear')


def keep_ratios(rho: float, num_stages: int, schedule: str = 'power') -> List[float]:
    """The keep ratio of every stage: ``[ρ, ρ², ρ³, …]`` ('power') or ``[ρ, ρ−0.2, ρ−0.4, …]``
    ('linear'), relative to the tokens entering the network."""
    if schedule not in RATIO_SCHEDULES:
        raise ValueError(f'unknown keep-ratio schedule {schedule!r}; valid: '
                         f'{", ".join(RATIO_SCHEDULES)}')
    if not 0 < rho <= 1:
        raise ValueError(f'the keep ratio ρ must be in (0, 1], got {rho}')
    if schedule == 'power':
        ratios = [rho**(s + 1) for s in range(num_stages)]
    else:
        ratios = [round(rho - 0.2 * s, 10) for s in range(num_stages)]
    check_keep_ratios(ratios)
    return ratios


def check_keep_ratios(ratios: Sequence[float], owner: str = 'keep_ratios') -> List[float]:
    """Each in (0, 1], non-increasing over the stages; returned as floats."""
    ratios = [float(r) for r in ratios]
    for r in ratios:
        if not 0 < r <= 1:
            raise ValueError(f'{owner}: every keep ratio must be in (0, 1], got {ratios}')
    if any(b > a for a, b in zip(ratios, ratios[1:])):
        raise ValueError(f'{owner}: keep ratios must not increase over the stages, got {ratios}')
    return ratios


def keep_count(ratio: float, num_tokens: int) -> int:
    """``⌈ρ·N⌉`` (at least 1): the tokens a stage keeps at inference. A product that lands a
    float rounding error above an integer (0.8²·25 = 16.000000000000004) counts as that integer."""
    if not 0 < ratio <= 1:
        raise ValueError(f'keep ratio must be in (0, 1], got {ratio}')
    return max(1, math.ceil(ratio * num_tokens - 1e-6))


def batch_index_select(x: Tensor, idx: Tensor) -> Tensor:
    """Per-sample gather along dim 1: x (B, N, ...) and idx (B, M) → (B, M, ...)."""
    if idx.shape[0] != x.shape[0] or idx.dim() != 2:
        raise ValueError(f'batch_index_select: index {tuple(idx.shape)} does not fit tokens '
                         f'{tuple(x.shape)}')
    index = idx.reshape(idx.shape + (1, ) * (x.dim() - 2)).expand(-1, -1, *x.shape[2:])
    return x.gather(1, index)


def batch_index_fill(x: Tensor, src: Tensor, idx: Tensor) -> Tensor:
    """Out-of-place per-sample scatter along dim 1: a copy of x (B, N, ...) with
    ``out[b, idx[b, j]] = src[b, j]``."""
    index = idx.reshape(idx.shape + (1, ) * (x.dim() - 2)).expand(-1, -1, *x.shape[2:])
    return x.scatter(1, index, src)


def topk_keep_indices(log_probs: Tensor, k: int) -> Tensor:
    """Indices (B, k) of the k tokens with the highest keep score, best first (as the public
    ``argsort(descending=True)[:, :k]``)."""
    return torch.argsort(log_probs[..., KEEP], dim=1, descending=True)[:, :k]


def gumbel_keep_mask(log_probs: Tensor, prev: Optional[Tensor] = None, tau: float = 1.) -> Tensor:
    """Hard Gumbel-softmax keep decision (B, N) with straight-through gradient, times the previous
    decision ``prev`` (B, N) if given."""
    mask = F.gumbel_softmax(log_probs, tau=tau, hard=True, dim=-1)[..., KEEP]
    return mask if prev is None else mask * prev


def restore_tokens(dense: Tensor, tokens: Tensor, idx: Tensor) -> Tensor:
    """The dense token map (B, N, C): ``dense`` (the features the dropped tokens had when they were
    dropped) with the current ``tokens`` (B, M, C) written back at their original positions
    ``idx`` (B, M)."""
    return batch_index_fill(dense, tokens, idx)
