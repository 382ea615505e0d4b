"""Multi-head self-attention with channel selection for the attention weights (method.md §2.1).

    M = gate(Linear_θ(x)) ∈ {0,1}^{B×N×D},   W = softmax((Q ⊙ M)(K ⊙ M)ᵀ / sqrt(d_head) + bias)

M is split by heads like Q. ``attn_bias`` is an additive term broadcastable to
(B, heads, N, N): Swin passes its relative position bias plus the shifted-window mask there, so
the same module serves full and windowed attention (for windows, B is batch × windows and the
mask is per token inside each window). Parameter names follow timm's ``Attention`` (``qkv``,
``proj``), so timm checkpoints load directly.

Head selection (``select_heads=True``, beyond the papers, method.md §2.7): a gate per head,
g = gate(α_heads) (a :class:`ChannelSelector` over the heads, searched like the channel α), scales
each head's output before ``proj``; :meth:`DCSAttention.prune_heads_` removes a pruned head's rows
of q, k, v (and of Linear_θ's output), and its columns of ``proj``.
"""
from typing import Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .selectors import DEFAULT_GATE_INIT, ChannelSelector, QKChannelSelector

QK_SELECT_MODES = (None, 'shared', 'separate')


class DCSAttention(nn.Module):
    """Self-attention (timm layout) with optional per-token Q/K channel selection.

    Args:
        dim: token channels.
        num_heads: attention heads.
        qkv_bias: bias of the qkv projection.
        attn_drop, proj_drop: dropout rates.
        qk_select: ``None`` (plain attention), ``'shared'`` (one mask for Q and K, the paper's
            default) or ``'separate'`` (one each).
        head_dim: channels per head (default dim // num_heads).
        gate_init, tau: initial Linear_θ bias and temperature of the Q/K gates.
        theta_rank: rank of Linear_θ (``None``: full, the paper; see :class:`QKChannelSelector`).
        select_heads: a gate per head (``head_select``, α over the heads; off by default).
    """

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = True, attn_drop: float = 0.,
                 proj_drop: float = 0., qk_select: Optional[str] = None,
                 head_dim: Optional[int] = None, gate_init: float = DEFAULT_GATE_INIT,
                 tau: float = 4.5, theta_rank: Optional[int] = None,
                 select_heads: bool = False):
        super().__init__()
        if qk_select not in QK_SELECT_MODES:
            raise ValueError(f'qk_select must be one of {QK_SELECT_MODES}, got {qk_select!r}')
        if head_dim is None:
            if dim % num_heads:
                raise ValueError(f'dim {dim} is not divisible by num_heads {num_heads}')
            head_dim = dim // num_heads
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.attn_dim = num_heads * head_dim
        self.scale = head_dim**-0.5
        self.qkv = nn.Linear(dim, self.attn_dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(self.attn_dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        self.qk_select = None if qk_select is None else QKChannelSelector(
            dim, self.attn_dim, separate=qk_select == 'separate', gate_init=gate_init, tau=tau,
            theta_rank=theta_rank)
        #: gate per head (None: every head kept); its α are architecture parameters
        self.head_select = ChannelSelector(num_heads, gate_init, tau) if select_heads else None
        #: set True to keep the last attention weights in ``last_attn`` (analysis tools)
        self.record_attn = False
        self.last_attn: Optional[Tensor] = None

    def _heads(self, t: Tensor) -> Tensor:
        B, N, _ = t.shape
        return t.reshape(B, N, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, x: Tensor, attn_bias: Optional[Tensor] = None) -> Tensor:
        B, N, _ = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        if self.qk_select is not None:
            mq, mk = self.qk_select(x)
            q = q * self._heads(mq)
            k = k * self._heads(mk)
        if self.record_attn:
            attn = (q * self.scale) @ k.transpose(-2, -1)
            if attn_bias is not None:
                attn = attn + attn_bias
            attn = attn.softmax(dim=-1)
            self.last_attn = attn.detach()
            x = self.attn_drop(attn) @ v
        else:
            x = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_bias,
                dropout_p=self.attn_drop.p if self.training else 0.)
        if self.head_select is not None:
            x = x * self.head_gate().to(x.dtype).view(1, -1, 1, 1)
        x = x.transpose(1, 2).reshape(B, N, self.attn_dim)
        return self.proj_drop(self.proj(x))

    def head_gate(self) -> Tensor:
        """g = gate(α) over the heads; in eval, where every α ≤ 0, the head of largest α stays
        open (as the export keeps it: at least one head per attention), so the pruned network
        computes what the supernet does."""
        g = self.head_select()
        if self.training:
            return g
        alpha = self.head_select.alpha.detach()
        first = F.one_hot(alpha.argmax(), alpha.numel()).to(g.dtype)
        return torch.where(g.sum() > 0, g, first)

    @torch.no_grad()
    def head_norms(self) -> Tensor:
        """The L2 norm of each head's weights: its rows of q, k and v (weights and biases)
        and its columns of ``proj`` (the magnitude pruner's score of a head)."""
        h, hd = self.num_heads, self.head_dim
        w = self.qkv.weight.reshape(3, h, hd, -1).pow(2).sum(dim=(0, 2, 3))
        if self.qkv.bias is not None:
            w = w + self.qkv.bias.reshape(3, h, hd).pow(2).sum(dim=(0, 2))
        w = w + self.proj.weight.reshape(-1, h, hd).pow(2).sum(dim=(0, 2))
        return w.sqrt()

    def head_channels(self, keep: Sequence[int]) -> Tensor:
        """The q (= k = v) channel indices of the heads ``keep``."""
        hd = self.head_dim
        return torch.cat([torch.arange(h * hd, (h + 1) * hd) for h in keep])

    @torch.no_grad()
    def prune_heads_(self, keep: Sequence[int]) -> None:
        """Keep only the heads ``keep`` (sorted, distinct, ≥ 1; checked by the subnet): their
        rows of q, k and v, their columns of ``proj``, their rows of Linear_θ's output (the
        per-token Q/K masks act within the kept heads). The head gate is removed."""
        keep = sorted(int(h) for h in keep)
        if not keep or len(set(keep)) != len(keep) or not 0 <= keep[0] <= keep[-1] \
                < self.num_heads:
            raise ValueError(f'prune_heads_: bad heads {keep} of {self.num_heads}')
        idx = self.head_channels(keep)
        rows = torch.cat([idx + i * self.attn_dim for i in range(3)])
        self.qkv = _sliced_linear(self.qkv, rows=rows)
        self.proj = _sliced_linear(self.proj, cols=idx)
        sel = self.qk_select
        if sel is not None:
            theta_rows = torch.cat([idx, idx + self.attn_dim]) if sel.separate else idx
            sel.theta = _sliced_linear(sel.theta, rows=theta_rows)
            sel.qk_dim = len(idx)
        self.num_heads = len(keep)
        self.attn_dim = len(idx)
        self.head_select = None


def _sliced_linear(layer: nn.Linear, rows: Optional[Tensor] = None,
                   cols: Optional[Tensor] = None) -> nn.Linear:
    """A copy of ``layer`` with only the output ``rows`` / input ``cols`` of its weight."""
    w = layer.weight
    if rows is not None:
        w = w[rows]
    if cols is not None:
        w = w[:, cols]
    out = nn.Linear(w.shape[1], w.shape[0], bias=layer.bias is not None).to(w)
    out.weight.copy_(w)
    if layer.bias is not None:
        out.bias.copy_(layer.bias if rows is None else layer.bias[rows])
    out.train(layer.training)
    return out
