"""Model-wide queries over the selection modules (used by the search and the hooks)."""
from typing import Iterator, List

import torch.nn as nn

from .gates import BinaryGumbelGate
from .selectors import ChannelSelector


def gates(model: nn.Module) -> Iterator[BinaryGumbelGate]:
    """Every gate of a model."""
    return (m for m in model.modules() if isinstance(m, BinaryGumbelGate))


def set_temperature(model: nn.Module, tau: float) -> int:
    """Set τ on every gate; returns how many gates were set."""
    n = 0
    for g in gates(model):
        g.set_tau(tau)
        n += 1
    return n


def arch_parameters(model: nn.Module) -> List[nn.Parameter]:
    """The architecture parameters α (searched by the architecture optimizer only)."""
    return [m.alpha for m in model.modules() if isinstance(m, ChannelSelector)]
