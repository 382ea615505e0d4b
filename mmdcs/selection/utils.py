"""Model-wide queries over the selection modules (used by the search and the hooks), and the
state a model keeps of a search that is not part of its network."""
from typing import Iterator, List, Sequence, Set, Tuple

import torch.nn as nn

from .gates import BinaryGumbelGate
from .selectors import ChannelSelector, QKChannelSelector


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


def architecture_state_keys(model: nn.Module) -> Set[str]:
    """The state-dict names of the architecture parameters and gate state of ``model`` (α, θ of
    the Q/K selection, τ of the gates; with ``select_hidden`` / ``select_heads`` theirs too):
    what a supernet has and a baseline lacks (found by module type, at any depth)."""
    kinds = (ChannelSelector, QKChannelSelector, BinaryGumbelGate)
    out: Set[str] = set()
    for name, m in model.named_modules():
        if isinstance(m, kinds):
            out.update(m.state_dict(prefix=f'{name}.' if name else '').keys())
    return out


def search_state_keys(model: nn.Module) -> Tuple[str, ...]:
    """The state-dict names (or prefixes: a submodule's) of what ``model`` keeps of a search
    that is not part of its network, as its modules' classes declare in
    ``search_state_names`` (e.g. a search's budget multiplier ``cost_mu``, OFB's masking state
    and its PMIM decoder), with their paths in ``model``. The names count whether or not this
    instance holds them (a model built without its search objective lacks its buffers): a
    checkpoint of the same model kind may bring them or not, and leaving them out changes no
    output (:func:`in_search_state`)."""
    out = []
    for name, m in model.named_modules():
        out += [f'{name}.{n}' if name else n for n in getattr(type(m), 'search_state_names', ())]
    return tuple(out)


def in_search_state(key: str, search_state: Sequence[str]) -> bool:
    """Whether the state-dict name ``key`` is one of :func:`search_state_keys` or lies under
    one."""
    return any(key == p or key.startswith(p + '.') for p in search_state)
