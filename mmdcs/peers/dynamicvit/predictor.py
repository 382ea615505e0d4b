"""The prediction module of DynamicViT (paper §3.2; public ``PredictorLG``).

    z = GELU(Linear(LN(x)))                       (B, N, C)
    z_i = [z_i[:C/2], Agg(z[:, C/2:], D̂)]         local half, policy-weighted mean of the rest
    π = LogSoftmax(MLP(z))                         MLP: C → C/2 → C/4 → 2 (GELU between)

Channel 0 of π is the log-probability of **keeping** a token, channel 1 of dropping it (the public
code's convention; the paper numbers them the other way round). The module layout (``in_conv``,
``out_conv``) is the public one, so its checkpoints load.
"""
from typing import Optional

import torch
import torch.nn as nn
from torch import Tensor

#: index of the "keep" log-probability in the predictor output
KEEP = 0


class TokenPredictor(nn.Module):
    """Scores the tokens of a stage: (B, N, C) → (B, N, 2) log-probabilities (keep, drop).

    Args:
        dim: token channels C (≥ 4).
    """

    def __init__(self, dim: int):
        super().__init__()
        if dim < 4:
            raise ValueError(f'TokenPredictor: dim must be ≥ 4, got {dim}')
        self.dim = dim
        self.in_conv = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.GELU())
        self.out_conv = nn.Sequential(
            nn.Linear(dim, dim // 2), nn.GELU(),
            nn.Linear(dim // 2, dim // 4), nn.GELU(),
            nn.Linear(dim // 4, 2), nn.LogSoftmax(dim=-1))

    def forward(self, x: Tensor, policy: Optional[Tensor] = None) -> Tensor:
        """x: (B, N, C); policy: (B, N) or (B, N, 1) current decision D̂ (1 = token alive), or None
        (every token counts in the global mean). With a 0/1 policy the weighted mean equals the
        public code's; the denominator is clamped at 1 so a sample with no token left (likely
        with few tokens, e.g. 16 at 64×64) does not turn into NaN."""
        z = self.in_conv(x)
        B, N, C = z.shape
        half = C // 2
        local, rest = z[..., :half], z[..., half:]
        if policy is None:
            glob = rest.mean(dim=1, keepdim=True)
        else:
            w = policy.reshape(B, N, 1).to(rest.dtype)
            # a sample whose tokens are all dropped gets a zero global feature, not 0/0
            glob = (rest * w).sum(dim=1, keepdim=True) / w.sum(dim=1, keepdim=True).clamp(min=1.)
        return self.out_conv(torch.cat([local, glob.expand(B, N, C - half)], dim=-1))


class FastMLP(nn.Module):
    """The cheap path of DynamicSwin / DynamicCNN (public ``fastMlp``): ``Dropout(Linear(LN(x)))``,
    C → C, for the tokens the predictor does not select. Layout ``fc1 = [LayerNorm, Linear]`` as
    the public code, so its checkpoints load."""

    def __init__(self, dim: int, drop: float = 0.):
        super().__init__()
        self.fc1 = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim))
        self.drop = nn.Dropout(drop)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.fc1(x))
