"""The MLP of a DCS/KCR block: supernet (gated) and deployed (pruned) forms (METHOD §2.2, §2.3).

Supernet: ``x + g ⊙ MLP(g ⊙ LN(x))`` with g = gate(α). Deployed: fc1 reads only the D̃ kept
input channels, fc2 writes only the D̃ kept output channels, which are added back into the
residual stream at the kept indices; in eval mode with the same weights both give the same
output (the deployed form just skips the zeroed channels). Both return a tensor of the full width
D, so the blocks that use them do not change between the two forms.

Parameter names follow timm's ``Mlp`` (``fc1``, ``fc2``), so timm checkpoints load directly.
"""
from typing import Sequence, Type, Union

import torch
import torch.nn as nn
from torch import Tensor

from .selectors import DEFAULT_GATE_INIT, ChannelSelector


class GatedMLP(nn.Module):
    """Two-layer MLP with optional channel selection on its input and output.

    Args:
        in_features: D, the channels of the residual stream.
        hidden_features: hidden width.
        act_layer: activation class.
        drop: dropout after the activation and after fc2 (as timm's Mlp).
        select: add the channel selector (α); without it this is exactly timm's Mlp.
        gate_init, tau: initial α and temperature of the selector.
    """

    def __init__(self, in_features: int, hidden_features: int,
                 act_layer: Type[nn.Module] = nn.GELU, drop: float = 0., bias: bool = True,
                 select: bool = True, gate_init: float = DEFAULT_GATE_INIT, tau: float = 4.5):
        super().__init__()
        self.in_features = in_features
        self.hidden_features = hidden_features
        self.act_layer = act_layer
        self.drop_prob = drop
        self.fc1 = nn.Linear(in_features, hidden_features, bias=bias)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden_features, in_features, bias=bias)
        self.drop2 = nn.Dropout(drop)
        self.select = ChannelSelector(in_features, gate_init, tau) if select else None

    @property
    def params_per_channel(self) -> int:
        """Parameters that read or write one selected channel: an fc1 column, an fc2 row and
        its fc2 bias (what pruning that channel removes)."""
        return self.fc1.out_features + self.fc2.in_features + (self.fc2.bias is not None)

    def channel_norms(self) -> Tensor:
        """L2 norm of each selected channel's weights (its fc1 column and fc2 row together):
        the magnitude pruner's score (:mod:`mmdcs.selection.budget`)."""
        w1 = self.fc1.weight.detach().float()
        w2 = self.fc2.weight.detach().float()
        return (w1.pow(2).sum(0) + w2.pow(2).sum(1)).sqrt()

    def _mlp(self, x: Tensor) -> Tensor:
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))

    def forward(self, x: Tensor) -> Tensor:
        if self.select is None:
            return self._mlp(x)
        g = self.select()
        return self._mlp(x * g) * g

    @torch.no_grad()
    def pruned(self, keep: Union[Tensor, Sequence[int]],
               pad: Sequence[int] = ()) -> 'PrunedMLP':
        """The deployed module for these kept channels, with this module's weights sliced.

        Channels in ``pad`` (a subset of ``keep``) get zero weights in and out, so the deployed
        module computes what this one does with those channels gated off."""
        keep = torch.as_tensor(keep, dtype=torch.long, device=self.fc1.weight.device)
        out = PrunedMLP(self.in_features, self.hidden_features, keep, self.act_layer,
                        self.drop_prob, bias=self.fc1.bias is not None)
        out.to(self.fc1.weight.device, self.fc1.weight.dtype)
        out.fc1.weight.copy_(self.fc1.weight[:, keep])
        out.fc2.weight.copy_(self.fc2.weight[keep])
        if self.fc1.bias is not None:
            out.fc1.bias.copy_(self.fc1.bias)
            out.fc2.bias.copy_(self.fc2.bias[keep])
        zero = zero_positions(keep, pad)
        if zero.numel():
            out.fc1.weight[:, zero] = 0
            out.fc2.weight[zero] = 0
            if out.fc2.bias is not None:
                out.fc2.bias[zero] = 0
        return out


def zero_positions(keep: Tensor, pad: Sequence[int]) -> Tensor:
    """Positions in ``keep`` of the channels listed in ``pad``."""
    if not len(pad):
        return keep.new_zeros(0)
    pad = torch.as_tensor(list(pad), dtype=keep.dtype, device=keep.device)
    return torch.isin(keep, pad).nonzero().flatten()


class PrunedMLP(nn.Module):
    """Deployed MLP: reads the D̃ kept channels and returns a D-wide update that is zero outside
    them.

    Args:
        in_features: D (the residual width).
        hidden_features: hidden width.
        keep: the kept channel indices (D̃ of them, sorted, unique).
    """

    def __init__(self, in_features: int, hidden_features: int, keep: Union[Tensor, Sequence[int]],
                 act_layer: Type[nn.Module] = nn.GELU, drop: float = 0., bias: bool = True):
        super().__init__()
        keep = torch.as_tensor(keep, dtype=torch.long)
        if keep.numel() == 0:
            raise ValueError('a pruned MLP needs at least one kept channel')
        self.in_features = in_features
        self.hidden_features = hidden_features
        # part of the state dict, so a pruned checkpoint records its own layout
        self.register_buffer('keep', keep.clone())
        self.fc1 = nn.Linear(keep.numel(), hidden_features, bias=bias)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden_features, keep.numel(), bias=bias)
        self.drop2 = nn.Dropout(drop)

    @property
    def kept(self) -> int:
        return self.keep.numel()

    def forward(self, x: Tensor) -> Tensor:
        # gather/scatter on a 2-D view: several times faster on the CPU than on the last dim
        # of a 3-D/4-D tensor (tools/analysis/latency.py --profile)
        x2 = x.reshape(-1, x.shape[-1])
        y = x2.index_select(1, self.keep)
        y = self.drop2(self.fc2(self.drop1(self.act(self.fc1(y)))))
        return x2.new_zeros(x2.shape).index_add_(1, self.keep, y).view(x.shape)

    def extra_repr(self) -> str:
        return f'in_features={self.in_features}, kept={self.kept}'
