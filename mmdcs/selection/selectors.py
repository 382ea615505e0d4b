"""The two channel selections of a DCS block (method.md §2).

* :class:`QKChannelSelector` — channel selection for the attention weights: a per-token mask
  ``M = gate(Linear_θ(x))`` on the Q/K channels. Linear_θ is a weight of the network (trained by
  the ordinary loss) and stays in the deployed network, since M depends on the input.
* :class:`ChannelSelector` — channel selection for the attention outputs / MLP: a mask
  ``g = gate(α)`` over D channels, with α an *architecture parameter* (trained by the search loss
  only, then frozen into the list of kept channels).
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from mmdcs.checks import check_number

from .gates import BinaryGumbelGate

#: initial logit of every gate: P(open) = sigmoid(3) = 0.95 during the search, and all channels
#: kept at eval, so a supernet initialised from a baseline checkpoint starts as that baseline.
DEFAULT_GATE_INIT = 3.0


class QKChannelSelector(nn.Module):
    """Per-token mask on the Q/K channels, shared by Q and K (or one each, ``separate=True``,
    the paper's "QK-Mask" ablation).

    Args:
        in_dim: channels of the attention input x (the normalised tokens).
        qk_dim: channels of Q (= heads × head_dim).
        separate: two masks (one for Q, one for K) instead of one shared mask.
        gate_init: initial bias of Linear_θ (its weight starts at 0, so every gate starts open).
        tau: initial temperature.
        theta_rank: ``None`` (the paper: Linear_θ is one in_dim × qk_dim layer) or r ≥ 1:
            Linear_θ factored as in_dim → r → qk_dim (``theta_down`` without bias, then
            ``theta``), in_dim·r + r·qk_dim multiply-accumulates per token instead of
            in_dim·qk_dim. ``theta`` always holds the output layer and its bias.
    """

    def __init__(self, in_dim: int, qk_dim: int, separate: bool = False,
                 gate_init: float = DEFAULT_GATE_INIT, tau: float = 4.5,
                 theta_rank: Optional[int] = None):
        super().__init__()
        out_dim = qk_dim * (2 if separate else 1)
        theta_rank = check_number(theta_rank, 'theta_rank', 1, integer=True, none=True)
        if theta_rank is not None:
            if theta_rank >= min(in_dim, out_dim):
                theta_rank = None  # a factorisation at this rank saves nothing: the full layer
        self.qk_dim = qk_dim
        self.separate = separate
        self.theta_rank = theta_rank
        self.theta_down = None if theta_rank is None else nn.Linear(in_dim, theta_rank,
                                                                      bias=False)
        self.theta = nn.Linear(in_dim if theta_rank is None else theta_rank, out_dim)
        self.gate = BinaryGumbelGate(tau)
        self.gate_init = check_number(gate_init, 'gate_init')
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every gate starts open: the output layer's weight is 0 and its bias ``gate_init``
        (the low-rank input layer gets a small random init, so the output layer has gradients)."""
        nn.init.zeros_(self.theta.weight)
        nn.init.constant_(self.theta.bias, self.gate_init)
        if self.theta_down is not None:
            nn.init.trunc_normal_(self.theta_down.weight, std=.02)

    def logits(self, x: Tensor) -> Tensor:
        """Linear_θ(x), full rank or factored."""
        if self.theta_down is not None:
            x = self.theta_down(x)
        return self.theta(x)

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        """x: (..., in_dim) → (mask_q, mask_k), each (..., qk_dim) of exact 0/1."""
        m = self.gate(self.logits(x))
        if self.separate:
            return m[..., :self.qk_dim], m[..., self.qk_dim:]
        return m, m


class ChannelSelector(nn.Module):
    """A mask g = gate(α) over ``dim`` channels; α is an architecture parameter.

    After the search the kept channels are ``{i : α_i > 0}`` (:meth:`keep_indices`).
    """

    def __init__(self, dim: int, gate_init: float = DEFAULT_GATE_INIT, tau: float = 4.5):
        super().__init__()
        self.dim = dim
        self.alpha = nn.Parameter(torch.full((dim, ), check_number(gate_init, 'gate_init')))
        self.gate = BinaryGumbelGate(tau)

    def forward(self) -> Tensor:
        return self.gate(self.alpha)

    def keep_indices(self) -> Tensor:
        """Indices of the kept channels (α > 0), sorted."""
        return torch.nonzero(self.alpha.detach() > 0, as_tuple=False).flatten()

    def expected_kept(self, expectation: str = 'gate') -> Tensor:
        """E[D̃] = Σ_i sigmoid(α_i) (``'gate'``: exact at any τ) or the papers' Σ_i
        sigmoid(α_i / τ) (``'paper'``), differentiable in α (the cost model's input)."""
        return self.gate.probs(self.alpha, expectation).sum()

    def extra_repr(self) -> str:
        return f'dim={self.dim}'
