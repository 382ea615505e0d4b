"""The search objectives of OFB (main paper eq. 6–8, supplementary A–B, the public code's
``get_sparsity_loss`` / ``get_flops_loss``).

* :func:`adaptive_one_hot_loss` — entropy H(p) plus the tangent-activated variance term
  ``tan(π/2 − π·ω) / n`` with ω = σ/σ_t, σ = Σ_k (p_k − mean p)², σ_t = 1 − 1/n its value at a
  one-hot p (so ω ∈ [0, 1]); both are 0 / minimal exactly at one-hot vectors (Theorem 1);
* :func:`score_norm` — the ℓ1 term on sigmoid(S) (weights 4e-4 attention, 1e-4 MLP/embedding);
* :func:`flops_loss` — ((searched − target) / original)², searched a differentiable function of α.
"""
import math
from typing import Union

import torch
from torch import Tensor

#: the public code's weights of the score norm term, per kind of unit group
SCORE_NORM_WEIGHTS = {'attn': 4e-4, 'mlp': 1e-4, 'embed': 1e-4}

#: ω is kept in [EPS, 1 - EPS]: tan(π/2 − π·ω) is ±∞ at exactly uniform / one-hot p
OMEGA_EPS = 1e-6


def entropy(p: Tensor) -> Tensor:
    """−Σ p log p (0·log 0 = 0)."""
    return -(p * torch.log(p.clamp_min(1e-30))).sum()


def normalized_variance(p: Tensor) -> Tensor:
    """ω = Σ_k (p_k − mean p)² / (1 − 1/n) ∈ [0, 1] for a probability vector p of length n ≥ 2."""
    n = p.numel()
    if n < 2:
        raise ValueError('the variance term needs at least 2 cells')
    sigma = ((p - p.mean())**2).sum()
    return sigma / (1. - 1. / n)


def adaptive_one_hot_loss(p: Tensor, use_entropy: bool = True,
                          use_variance: bool = True) -> Tensor:
    """Adaptive one-hot loss of the probabilities ``p`` (1-D, the active cells) of one group:
    ``H(p) + tan(π/2 − π·ω)/n``. A single cell (the search of the group is over) gives 0."""
    p = p.flatten()
    n = p.numel()
    loss = p.new_zeros(())
    if n < 2:
        return loss
    if use_entropy:
        loss = loss + entropy(p)
    if use_variance:
        omega = normalized_variance(p).clamp(OMEGA_EPS, 1. - OMEGA_EPS)
        loss = loss + torch.tan(math.pi / 2 - math.pi * omega) / n
    return loss


def score_norm(score: Tensor, weight: float) -> Tensor:
    """``weight · Σ sigmoid(S)`` (an ℓ1 pull of the importance scores towards 0)."""
    return weight * torch.sigmoid(score).sum()


def flops_loss(searched: Tensor, target: Union[float, Tensor],
               original: Union[float, Tensor]) -> Tensor:
    """((searched − target) / original)²: 0 at the target, differentiable in ``searched``."""
    if float(original) <= 0:
        raise ValueError(f'the original FLOPs must be > 0, got {float(original)}')
    return ((searched - target) / original)**2
