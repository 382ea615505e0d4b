"""A tensor-state container for the regularisers (saved in checkpoints by the hook that owns it)."""
from collections import OrderedDict
from typing import Dict, Iterator, Tuple

import torch
from torch import Tensor


class TensorState:
    """A small container of named tensors with ``state_dict``/``load_state_dict``/``to``.

    Deliberately **not** an ``nn.Module``: registered as a submodule of a DDP-wrapped model, its
    buffers would be overwritten by rank 0's at every forward (``broadcast_buffers``), which
    would destroy the per-rank running sums. The owner (a hook) saves it in checkpoints.
    """
    _state_names: Tuple[str, ...] = ()
    _state_children: Tuple[str, ...] = ()

    def named_tensors(self, prefix: str = '') -> Iterator[Tuple[str, Tensor]]:
        for name in self._state_names:
            yield prefix + name, getattr(self, name)
        for child in self._state_children:
            yield from getattr(self, child).named_tensors(prefix + child + '.')

    def state_dict(self) -> 'OrderedDict[str, Tensor]':
        return OrderedDict((k, v.detach().clone()) for k, v in self.named_tensors())

    def load_state_dict(self, state_dict: Dict[str, Tensor], strict: bool = True) -> None:
        own = dict(self.named_tensors())
        missing = sorted(set(own) - set(state_dict))
        unexpected = sorted(set(state_dict) - set(own))
        if strict and (missing or unexpected):
            raise KeyError(f'{type(self).__name__}.load_state_dict: missing keys {missing}, '
                           f'unexpected keys {unexpected}')
        for key, value in state_dict.items():
            if key not in own:
                continue
            target = own[key]
            value = torch.as_tensor(value)
            if tuple(value.shape) != tuple(target.shape):
                raise ValueError(f'{type(self).__name__}.load_state_dict: {key} has shape '
                                 f'{tuple(value.shape)}, expected {tuple(target.shape)}')
            target.copy_(value.to(device=target.device, dtype=target.dtype))
        self._after_load()

    def _after_load(self) -> None:
        pass

    def to(self, device) -> 'TensorState':
        for name in self._state_names:
            setattr(self, name, getattr(self, name).to(device))
        for child in self._state_children:
            getattr(self, child).to(device)
        return self

    @property
    def device(self) -> torch.device:
        return next(self.named_tensors())[1].device

    def tensor_sizes(self) -> Dict[str, Tuple[int, ...]]:
        """Name → shape of every state tensor (constant whatever the number of samples fed)."""
        return {k: tuple(v.shape) for k, v in self.named_tensors()}
