"""Attention masking (paper §3.3; public ``softmax_with_policy``).

During training a dropped token stays in the sequence but no other token attends to it::

    G_ij = 1 if i = j else D̂_j
    Ã_ij = exp(P_ij) G_ij / Σ_k exp(P_ik) G_ik      (+ the public code's eps, see below)

The mask D̂ is the hard Gumbel decision, whose straight-through gradient reaches the predictor
through the product with G. As the public code, the weights are computed in float32 as
``(e + eps/N) / (Σ e + eps)``. For numerical stability the row maximum is taken over the entries
that G keeps (the diagonal always is), and exponents of masked entries are capped at that maximum,
so neither a large logit of a dropped token nor an underflow of every kept one can turn a row
into inf/NaN; where the row maximum is a kept entry (the usual case) this is exactly the public
formula. With ``eps = 0`` a dropped token has no influence at all on the other tokens.
"""
from typing import Optional

import torch
import torch.nn as nn
from torch import Tensor

#: the public code's eps
POLICY_EPS = 1e-6


def softmax_with_policy(attn: Tensor, policy: Tensor, eps: float = POLICY_EPS) -> Tensor:
    """Softmax over the last dim of ``attn`` (B, H, N, N) restricted by ``policy`` (B, N) or
    (B, N, 1) ∈ {0, 1} (1 = the key token is alive); the diagonal is always kept."""
    B, H, N, M = attn.shape
    if N != M or policy.numel() != B * N:
        raise ValueError(f'softmax_with_policy: attention {tuple(attn.shape)} and policy '
                         f'{tuple(policy.shape)} do not fit')
    keep = policy.reshape(B, 1, 1, N).float()
    eye = torch.eye(N, dtype=keep.dtype, device=keep.device).view(1, 1, N, N)
    gate = keep + (1. - keep) * eye  # G
    logits = attn.float()
    row_max = logits.masked_fill(gate <= 0, float('-inf')).amax(dim=-1, keepdim=True).detach()
    e = (logits - row_max).clamp(max=0.).exp() * gate
    out = (e + eps / N) / (e.sum(dim=-1, keepdim=True) + eps)
    return out.to(attn.dtype)


def policy_attention(q: Tensor, k: Tensor, v: Tensor, policy: Optional[Tensor], scale: float,
                     eps: float = POLICY_EPS, attn_drop: Optional[nn.Module] = None) -> Tensor:
    """Multi-head attention with attention masking: q, k, v (B, H, N, d) → (B, H, N, d).
    ``policy=None`` is plain softmax attention."""
    attn = (q * scale) @ k.transpose(-2, -1)
    attn = attn.softmax(dim=-1) if policy is None else softmax_with_policy(attn, policy, eps)
    if attn_drop is not None:
        attn = attn_drop(attn)
    return attn @ v
