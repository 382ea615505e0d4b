"""The training objective of DynamicViT (paper §3.4; public ``DistillDiffPruningLoss_dynamic`` for
ViT, ``ConvNextDistillDiffPruningLoss(swin_token=True)`` for Swin)::

    L = L_cls + λ_ratio·L_ratio + λ_KL·KL(teacher ‖ student) + λ_distill·L_distill

* ``L_ratio = 1/S Σ_s mean_b (ρ_s − mean_i D^{b,s}_i)²`` — the kept fraction of every sample at
  every stage against its target (per sample, not per batch: the public ``dynamic=False``);
* ``KL`` — ``kl_div(log_softmax(student), log_softmax(teacher), 'batchmean')`` on the logits;
* ``L_distill`` — MSE between the student's and the teacher's final (normalised) patch tokens,
  averaged over the elements of the tokens the final decision keeps (ViT; zero if none is kept),
  or of all tokens (Swin, whose tokens are never dropped).

Public weights: λ_ratio 2.0 (DeiT-S), 5.0 (DeiT-B), 10.0 (Swin, ConvNeXt); λ_KL = λ_distill = 0.5;
the cross-entropy (weight 1) comes from the classification head.
"""
from typing import Dict, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from mmdcs.checks import check_number


def keep_ratio_loss(decisions: Sequence[Tensor], targets: Sequence[float]) -> Tensor:
    """``1/S Σ_s mean_b (mean_i D^{b,s}_i − ρ_s)²`` for decisions (B, N) ∈ [0, 1] per stage."""
    if len(decisions) != len(targets) or not decisions:
        raise ValueError(f'keep_ratio_loss: {len(decisions)} decisions for {len(targets)} '
                         'target ratios')
    total = 0.
    for d, rho in zip(decisions, targets):
        total = total + ((d.flatten(1).mean(dim=1) - rho)**2).mean()
    return total / len(decisions)


def cls_distill_loss(logits: Tensor, teacher_logits: Tensor) -> Tensor:
    """KL(teacher ‖ student) of the class distributions, averaged over the batch."""
    return F.kl_div(F.log_softmax(logits, dim=-1), F.log_softmax(teacher_logits, dim=-1),
                    reduction='batchmean', log_target=True)


def token_distill_loss(tokens: Tensor, teacher_tokens: Tensor,
                       mask: Optional[Tensor] = None) -> Tensor:
    """Mean squared error of tokens (B, N, C) against the teacher's, over the tokens whose
    ``mask`` (B, N) is > 0.5 (all tokens if None); 0 if the mask keeps none."""
    if tokens.shape != teacher_tokens.shape:
        raise ValueError(f'token_distill_loss: student tokens {tuple(tokens.shape)} and teacher '
                         f'tokens {tuple(teacher_tokens.shape)} differ')
    if mask is None:
        return (tokens - teacher_tokens).pow(2).mean()
    keep = mask.reshape(tokens.shape[:2]) > 0.5
    if not bool(keep.any()):
        return tokens.sum() * 0.
    return (tokens[keep] - teacher_tokens[keep]).pow(2).mean()


class DynamicViTLoss(nn.Module):
    """The DynamicViT terms besides the cross-entropy, weighted, as a dict of losses.

    Args:
        ratio_weight: λ_ratio.
        kl_weight: λ_KL.
        distill_weight: λ_distill.
    """

    def __init__(self, ratio_weight: float = 2., kl_weight: float = 0.5,
                 distill_weight: float = 0.5):
        super().__init__()
        self.ratio_weight = check_number(ratio_weight, 'DynamicViTLoss: ratio_weight', 0)
        self.kl_weight = check_number(kl_weight, 'DynamicViTLoss: kl_weight', 0)
        self.distill_weight = check_number(distill_weight, 'DynamicViTLoss: distill_weight', 0)

    def forward(self, logits: Tensor, tokens: Tensor, decisions: Sequence[Tensor],
                keep_ratios: Sequence[float], teacher_logits: Tensor, teacher_tokens: Tensor,
                token_mask: Optional[Tensor] = None) -> Dict[str, Tensor]:
        """Returns ``loss_ratio``, ``loss_kl``, ``loss_distill`` (weighted) and the mean kept
        fraction of every stage (``keep_s1``, …; logged, not optimised)."""
        out = {
            'loss_ratio': self.ratio_weight * keep_ratio_loss(decisions, keep_ratios),
            'loss_kl': self.kl_weight * cls_distill_loss(logits, teacher_logits),
            'loss_distill': self.distill_weight * token_distill_loss(
                tokens, teacher_tokens, token_mask),
        }
        with torch.no_grad():
            for s, d in enumerate(decisions):
                out[f'keep_s{s + 1}'] = d.detach().float().mean()
        return out
