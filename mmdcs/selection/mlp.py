"""The MLP of a DCS/KCR block: supernet (gated) and deployed (pruned) forms (method.md §2.2, §2.3).

Supernet: ``x + g ⊙ MLP(g ⊙ LN(x))`` with g = gate(α). Deployed: fc1 reads only the D̃ kept
input channels, fc2 writes only the D̃ kept output channels, which are added back into the
residual stream at the kept indices; in eval mode with the same weights both give the same
output (the deployed form just skips the zeroed channels). Both return a tensor of the full width
D, so the blocks that use them do not change between the two forms.

Hidden-unit selection (``select_hidden=True``, an mmdcs extension, off for the papers): a second
architecture gate h = gate(β) over the H hidden units, ``x + g ⊙ fc2(h ⊙ act(fc1(g ⊙ LN(x))))``.
Its pruned form is physically narrower (fc1 has H̃ rows, fc2 H̃ columns), with no gather at all;
the MLP's cost then shrinks as D̃·H̃ instead of D̃ alone (method.md §3).

Parameter names follow timm's ``Mlp`` (``fc1``, ``fc2``), so timm checkpoints load directly.
"""
from typing import Callable, Optional, Sequence, Type, Union

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
        select_hidden: add a second selector (``hidden_select``, its own α) over the hidden
            units; searched like α, exported as the subnet's ``hidden`` entries.
    """

    def __init__(self, in_features: int, hidden_features: int,
                 act_layer: Type[nn.Module] = nn.GELU, drop: float = 0., bias: bool = True,
                 select: bool = True, gate_init: float = DEFAULT_GATE_INIT, tau: float = 4.5,
                 select_hidden: bool = False):
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
        self.hidden_select = ChannelSelector(hidden_features, gate_init, tau) if (
            select_hidden) else None

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

    def hidden_norms(self) -> Tensor:
        """L2 norm of each hidden unit's weights (its fc1 row and fc2 column together): the
        magnitude pruner's score of a hidden unit (:mod:`mmdcs.selection.budget`)."""
        w1 = self.fc1.weight.detach().float()
        w2 = self.fc2.weight.detach().float()
        return (w1.pow(2).sum(1) + w2.pow(2).sum(0)).sqrt()

    def _mlp(self, x: Tensor) -> Tensor:
        h = self.drop1(self.act(self.fc1(x)))
        if self.hidden_select is not None:
            h = h * self.hidden_select()
        return self.drop2(self.fc2(h))

    def forward(self, x: Tensor) -> Tensor:
        if self.select is None:
            return self._mlp(x)
        g = self.select()
        return self._mlp(x * g) * g

    def residual(self, x: Tensor, h: Tensor, drop_path: Callable[[Tensor], Tensor],
                 inplace: bool = False) -> Tensor:
        """``x + drop_path(self(h))`` (the residual update of a block; see
        :meth:`PrunedMLP.residual`)."""
        return x + drop_path(self(h))

    @torch.no_grad()
    def prune_hidden_(self, keep: Union[Tensor, Sequence[int]], pad: Sequence[int] = ()) -> None:
        """Narrow the hidden layer to the ``keep`` units, in place: fc1 keeps those rows, fc2
        those columns; the ``pad`` units (kept for alignment only) get zero weights, so the
        output is the supernet's with the other units gated off. The hidden selector goes."""
        w = self.fc1.weight
        keep = torch.as_tensor(keep, dtype=torch.long, device=w.device)
        if keep.numel() == 0:
            raise ValueError('a pruned MLP needs at least one kept hidden unit')
        bias = self.fc1.bias is not None
        fc1 = nn.Linear(self.in_features, keep.numel(), bias=bias).to(w.device, w.dtype)
        fc2 = nn.Linear(keep.numel(), self.fc2.out_features,
                        bias=self.fc2.bias is not None).to(w.device, w.dtype)
        fc1.weight.copy_(w[keep])
        fc2.weight.copy_(self.fc2.weight[:, keep])
        if bias:
            fc1.bias.copy_(self.fc1.bias[keep])
        if self.fc2.bias is not None:
            fc2.bias.copy_(self.fc2.bias)
        zero = zero_positions(keep, pad)
        if zero.numel():
            fc1.weight[zero] = 0
            fc2.weight[:, zero] = 0
            if bias:
                fc1.bias[zero] = 0
        self.fc1, self.fc2 = fc1, fc2
        self.hidden_features = keep.numel()
        self.hidden_select = None

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

        #: every channel kept (e.g. only hidden units pruned): no gather / scatter at all
        self.full = bool(keep.numel() == in_features
                         and torch.equal(keep, torch.arange(in_features)))

    @property
    def kept(self) -> int:
        return self.keep.numel()

    def _mlp(self, y: Tensor) -> Tensor:
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(y)))))

    def forward(self, x: Tensor) -> Tensor:
        if self.full:
            return self._mlp(x)
        # gather/scatter on a 2-D view: several times faster on the CPU than on the last dim
        # of a 3-D/4-D tensor (tools/analysis/latency.py --profile)
        x2 = x.reshape(-1, x.shape[-1])
        y = self._mlp(x2.index_select(1, self.keep))
        return x2.new_zeros(x2.shape).index_add_(1, self.keep, y).view(x.shape)

    def residual(self, x: Tensor, h: Tensor, drop_path: Callable[[Tensor], Tensor],
                 inplace: bool = False) -> Tensor:
        """``x + drop_path(self(h))`` without the D-wide zero update: the D̃-wide update is
        added into the residual stream at the kept channels directly (one scatter-add instead of
        zeros + index_add + add, tools/analysis/latency.py --profile).

        ``inplace=True`` lets it write into ``x`` when no gradient is recorded (the caller
        promises that nothing else holds ``x``, e.g. ``x`` is the block's own intermediate)."""
        if self.full:
            return x + drop_path(self._mlp(h))
        shape = h.shape
        y = self._mlp(h.reshape(-1, shape[-1]).index_select(1, self.keep))
        y = drop_path(y.view(shape[:-1] + (y.shape[-1], ))).reshape(-1, y.shape[-1])
        x2 = x.reshape(-1, x.shape[-1])
        if inplace and not torch.is_grad_enabled() and x.is_contiguous():
            return x2.index_add_(1, self.keep, y).view(x.shape)
        return x2.index_add(1, self.keep, y).view(x.shape)

    def extra_repr(self) -> str:
        return f'in_features={self.in_features}, kept={self.kept}, hidden={self.hidden_features}'


def mlp_residual(mlp: nn.Module, x: Tensor, h: Tensor, drop_path: Callable[[Tensor], Tensor],
                 inplace: bool = False) -> Tensor:
    """``x + drop_path(mlp(h))`` for any MLP; the pruned one adds its update in place of the
    kept channels (:meth:`PrunedMLP.residual`)."""
    residual = getattr(mlp, 'residual', None)
    if residual is None:
        return x + drop_path(mlp(h))
    return residual(x, h, drop_path, inplace)


def _norm_of(block: nn.Module) -> Optional[nn.Module]:
    for name in ('norm', 'bn'):
        m = getattr(block, name, None)
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            return name
    return None


@torch.no_grad()
def narrow_inverted_bottleneck_(expand: nn.Module, depthwise: nn.Module, project: nn.Module,
                                keep: Union[Tensor, Sequence[int]],
                                pad: Sequence[int] = ()) -> int:
    """Keep the ``keep`` expanded channels of an inverted bottleneck (1×1 expand → k×k
    depthwise → 1×1 project; each a module with a ``conv`` and an optional BatchNorm ``norm`` or
    ``bn`` after it), in place. The ``pad`` channels (alignment only) get zero weights and
    biases before the projection and zero projection columns, so the output is the one with
    those channels gated off. Returns the new width."""
    w = expand.conv.weight
    keep = torch.as_tensor(keep, dtype=torch.long, device=w.device)
    if keep.numel() == 0:
        raise ValueError('a pruned inverted bottleneck needs at least one expanded channel')
    n = keep.numel()
    zero = zero_positions(keep, pad)
    for block, kind in ((expand, 'out'), (depthwise, 'dw'), (project, 'in')):
        conv = block.conv
        new = nn.Conv2d(conv.in_channels if kind == 'out' else n,
                        conv.out_channels if kind == 'in' else n, conv.kernel_size, conv.stride,
                        conv.padding, conv.dilation, groups=n if kind == 'dw' else 1,
                        bias=conv.bias is not None,
                        padding_mode=conv.padding_mode).to(w.device, w.dtype)
        if kind == 'in':
            new.weight.copy_(conv.weight[:, keep])
            new.weight[:, zero] = 0
            if conv.bias is not None:
                new.bias.copy_(conv.bias)
        else:
            new.weight.copy_(conv.weight[keep])
            new.weight[zero] = 0
            if conv.bias is not None:
                new.bias.copy_(conv.bias[keep])
                new.bias[zero] = 0
            norm = _norm_of(block)
            if norm is not None:
                bn = getattr(block, norm)
                sliced = type(bn)(n, bn.eps, bn.momentum, bn.affine, bn.track_running_stats)
                state = {k: (v[keep] if v.dim() == 1 else v) for k, v in bn.state_dict().items()}
                if zero.numel() and bn.affine:  # a zero channel stays zero after the norm
                    state['weight'] = state['weight'].clone()
                    state['bias'] = state['bias'].clone()
                    state['weight'][zero] = 0
                    state['bias'][zero] = 0
                sliced.load_state_dict(state)
                setattr(block, norm, sliced.to(w.device).train(bn.training))
        block.conv = new
    return n



def inverted_bottleneck_norms(expand: nn.Module, depthwise: nn.Module,
                              project: nn.Module) -> Tensor:
    """L2 norm of each expanded channel's weights in an inverted bottleneck (its 1×1 expand
    filter, its depthwise filter and its 1×1 project column together; modules with a ``conv``
    as in :func:`narrow_inverted_bottleneck_`): the magnitude pruner's score of a hidden unit
    of a conv FFN."""
    e = expand.conv.weight.detach().float()
    d = depthwise.conv.weight.detach().float()
    p = project.conv.weight.detach().float()
    return (e.flatten(1).pow(2).sum(1) + d.flatten(1).pow(2).sum(1)
            + p.transpose(0, 1).flatten(1).pow(2).sum(1)).sqrt()
