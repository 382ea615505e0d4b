"""The binary Gumbel gate with a straight-through estimator (method.md §1).

    soft = sigmoid((θ + g1 - g2) / τ),  g1, g2 ~ Gumbel(0, 1)   (training)
    gate = 1[soft > 0.5] forward, d gate / d soft = 1 backward
    gate = 1[θ > 0]                                              (eval, exported subnet)

The hard decision is ``θ + g1 - g2 > 0``: the probability that a gate is open is sigmoid(θ) at any
τ; τ only sharpens the gradient of the soft relaxation. τ is a buffer (saved in checkpoints) and
is set from outside (``TemperatureHook``), never by the model.
"""
import torch
import torch.nn as nn
from torch import Tensor

from mmdcs.checks import check_number


class _StraightThrough(torch.autograd.Function):
    """Forward: exact 0/1 (``soft > 0.5``). Backward: the gradient passes to ``soft``."""

    @staticmethod
    def forward(ctx, soft: Tensor) -> Tensor:
        return (soft > 0.5).to(soft.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        return grad


def gumbel_noise_pair(shape, *, device, dtype, generator=None) -> Tensor:
    """g1 - g2 for i.i.d. Gumbel(0, 1) g1, g2 (a standard logistic sample)."""
    eps = torch.finfo(torch.float32).tiny
    u = torch.rand((2, ) + tuple(shape), device=device, dtype=torch.float32, generator=generator)
    neg_log_u = (-torch.log(u.clamp_min(eps))).clamp_min(eps)
    g = -torch.log(neg_log_u)
    return (g[0] - g[1]).to(dtype)


def check_tau(tau) -> float:
    """The gate temperature τ: a finite number > 0."""
    return check_number(tau, 'tau (the gate temperature)', 0, low_open=True)


class BinaryGumbelGate(nn.Module):
    """Binary Gumbel gate over a logit tensor of any shape.

    Args:
        tau: initial temperature τ (the search starts at 4.5, method.md §5).
    """

    def __init__(self, tau: float = 4.5):
        super().__init__()
        self.register_buffer('tau', torch.tensor(check_tau(tau)))

    def set_tau(self, tau: float) -> None:
        self.tau.fill_(check_tau(tau))

    def forward(self, logits: Tensor) -> Tensor:
        if not self.training:
            return (logits > 0).to(logits.dtype)
        noise = gumbel_noise_pair(logits.shape, device=logits.device, dtype=logits.dtype)
        soft = torch.sigmoid((logits + noise) / self.tau)
        return _StraightThrough.apply(soft)

    def probs(self, logits: Tensor, expectation: str = 'gate') -> Tensor:
        """The probability that each gate is open, differentiable in θ (the cost model's input,
        method.md §3): ``'gate'`` gives sigmoid(θ), exact for the hard gate at any τ (the decision
        is θ + g1 − g2 > 0 with g1 − g2 ~ Logistic(0, 1)); ``'paper'`` gives the papers'
        sigmoid(θ/τ), which under-counts open gates for θ > 0 and τ > 1 (at θ = 3, τ = 4.5:
        0.66 instead of 0.95), kept only to reproduce the papers."""
        if expectation == 'gate':
            return torch.sigmoid(logits)
        if expectation == 'paper':
            return torch.sigmoid(logits / self.tau)
        raise ValueError(f"expectation must be 'gate' or 'paper', got {expectation!r}")

    def extra_repr(self) -> str:
        return f'tau={float(self.tau):.4g}'
