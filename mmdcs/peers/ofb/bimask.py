"""The bi-mask of Once-for-Both (OFB; Ye et al., CVPR 2024, Sec. 3.2–3.3, supplementary A–B).

A searchable unit group (the heads × per-head qkv channels of an attention, the hidden channels of
an MLP, the embedding channels) carries two learnable scores:

* the **importance score** S, one logit per unit (shape ``(C,)`` or ``(heads, head_dim)``);
* the **sparsity score** α, one logit per *candidate cell* of a width grid: a list of widths
  (MLP, embedding), or the product of head counts and per-head widths (attention, the public
  code's joint search).

With p = softmax(α) over the cells still active, the sparsity mask of a cell keeps the
``width`` best units by S (in the attention: the best heads by Σ sigmoid(S) over their channels
that active cells can keep, and in each of them the best channels by S). Their mixture is
V = Σ_cells p_cell · mask_cell, and the applied mask is::

    m = (1 - w_p) · V + w_p · sigmoid(S)

with ``w_p`` decaying from 0.99 to 0.1 over the warm-up (set by the training loop). mmdcs adds one
factor (a choice, see :meth:`BiMask.forward`): m is 0 outside the units that some active cell can
keep (the "support"), so that slicing the weights to the support after cells are dropped
changes nothing. The public code slices them too, and so drops their ``w_p·sigmoid(S)`` share.

When one cell is left the search of the group is over ("finished"): S is turned into the raw
multiplier m it stood for (``(1 - w_p) + w_p·sigmoid(S)`` on the kept units), which keeps training
until it is folded into the weights ("fused").
"""
from typing import List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from torch import Tensor

Keep = Union[Tensor, Tuple[Tensor, Tensor]]


# ----------------------------------------------------------------------------- search spaces
def _widths(total: int, low: int, step: int) -> List[int]:
    """``range(low, total + 1, step)``, with ``total`` itself always a choice (the supernet
    contains the full model) and every width ≥ 1."""
    low, step = max(1, int(low)), max(1, int(step))
    out = list(range(low, total + 1, step))
    if not out or out[-1] != total:
        out.append(total)
    return out


def head_choices(num_heads: int) -> List[int]:
    """Head counts {2, 4, …, H} (the public code's), with H itself for an odd H."""
    if num_heads < 1:
        raise ValueError(f'num_heads must be ≥ 1, got {num_heads}')
    return _widths(num_heads, min(2, num_heads), 2)


def head_dim_choices(head_dim: int) -> List[int]:
    """qkv channels per head {d/4, d/4 + d/8, …, d}."""
    return _widths(head_dim, head_dim // 4, head_dim // 8)


def mlp_choices(hidden: int) -> List[int]:
    """MLP hidden widths {h/4, h/4 + h/8, …, h}."""
    return _widths(hidden, hidden // 4, hidden // 8)


def embed_choices(embed_dim: int) -> List[int]:
    """Embedding widths {E/2, E/2 + s, …, E} with s = min(E/32, 12)."""
    return _widths(embed_dim, embed_dim // 2, min(embed_dim // 32, 12))


# ----------------------------------------------------------------------------- bi-mask
class BiMask(nn.Module):
    """Importance score S and sparsity score α of one unit group, and the mask they make.

    Args:
        units: ``(C,)`` for a channel group, ``(heads, head_dim)`` for an attention.
        choices: one list of candidate widths per axis of ``units`` (``[widths]`` or
            ``[head counts, per-head widths]``), ascending, the last the full size.
        score_std: std of the truncated-normal init of S (0.2, the public code's); α starts
            uniform in [0, 1).
        w_p: initial weight of S in the mask.

    State (all in the state dict, so a checkpoint restores the search exactly): ``score``,
    ``alpha`` (the full cell grid, never sliced), ``active`` (cells still in the search),
    ``finished``, ``fused`` and ``w_p``.
    """

    def __init__(self, units: Sequence[int], choices: Sequence[Sequence[int]],
                 score_std: float = 0.2, w_p: float = 0.99):
        super().__init__()
        units = tuple(int(u) for u in units)
        if len(units) not in (1, 2) or min(units) < 1:
            raise ValueError(f'BiMask: units must be (C,) or (heads, head_dim), got {units}')
        if len(choices) != len(units):
            raise ValueError(f'BiMask: {len(units)} unit axes need {len(units)} choice lists, '
                             f'got {len(choices)}')
        self.choices: List[List[int]] = []
        for size, widths in zip(units, choices):
            widths = [int(w) for w in widths]
            if (not widths or widths != sorted(set(widths)) or widths[0] < 1
                    or widths[-1] != size):
                raise ValueError(f'BiMask: choices {widths} must be ascending, distinct, ≥ 1 '
                                 f'and end with the full size {size}')
            self.choices.append(widths)
        self.full_units = units
        grid = tuple(len(c) for c in self.choices)
        self.score = nn.Parameter(torch.empty(units))
        nn.init.trunc_normal_(self.score, std=score_std)
        self.alpha = nn.Parameter(torch.rand(grid))
        self.register_buffer('active', torch.ones(grid, dtype=torch.bool))
        self.register_buffer('finished', torch.tensor(False))
        self.register_buffer('fused', torch.tensor(False))
        self.register_buffer('w_p', torch.tensor(float(w_p)))

    # ------------------------------------------------------------------ state
    @property
    def units(self) -> Tuple[int, ...]:
        """The current (possibly sliced) unit shape."""
        return tuple(self.score.shape)

    @property
    def num_active(self) -> int:
        return int(self.active.sum())

    @property
    def is_finished(self) -> bool:
        return bool(self.finished)

    @property
    def is_fused(self) -> bool:
        return bool(self.fused)

    def extra_repr(self) -> str:
        return (f'units={self.units} of {self.full_units}, cells={self.num_active}/'
                f'{self.active.numel()}, finished={self.is_finished}, fused={self.is_fused}')

    def cell_sizes(self) -> Tensor:
        """Units kept by each cell (grid shape)."""
        sizes = torch.tensor(self.choices[0], dtype=torch.float32, device=self.alpha.device)
        if len(self.choices) == 2:
            dims = torch.tensor(self.choices[1], dtype=torch.float32, device=self.alpha.device)
            sizes = sizes[:, None] * dims[None, :]
        return sizes

    def probs(self) -> Tensor:
        """p = softmax(α) over the active cells (0 on the others), grid shape."""
        logits = self.alpha.masked_fill(~self.active, float('-inf'))
        return torch.softmax(logits.flatten(), 0).view_as(self.alpha)

    def active_probs(self) -> Tensor:
        """p of the active cells only (a vector): what the adaptive one-hot loss sees."""
        return torch.softmax(self.alpha[self.active], 0)

    def extent(self) -> Tuple[int, ...]:
        """The largest width of an active cell along every axis: the support's bounding box."""
        idx = self.active.nonzero()
        return tuple(self.choices[a][int(idx[:, a].max())] for a in range(len(self.choices)))

    # ------------------------------------------------------------------ ranking
    def ranks(self) -> Tuple[Tensor, ...]:
        """Rank of every unit (0 = most important): ``(rank,)`` for channels,
        ``(head_rank (H,), dim_rank (H, d))`` for an attention (heads by Σ sigmoid(S) over their
        channels in the support, channels of a head by S). Ties are broken by position."""
        s = self.score.detach()
        if s.dim() == 1:
            order = torch.sort(s, descending=True, stable=True).indices
            return (torch.argsort(order, stable=True), )
        # a head's importance: Σ sigmoid(S) over the channels it can keep (all of them until
        # the widest cells are dropped), so that slicing to the support keeps the order
        dim_sorted, dim_order = torch.sort(s, dim=-1, descending=True, stable=True)
        head_score = torch.sigmoid(dim_sorted[:, :self.extent()[1]]).sum(-1)
        head_order = torch.sort(head_score, descending=True, stable=True).indices
        return (torch.argsort(head_order, stable=True),
                torch.argsort(dim_order, dim=-1, stable=True))

    def _prefix(self, axis: int, length: int) -> Tensor:
        """(cells along ``axis``, length): 1 where a cell keeps the rank."""
        widths = torch.tensor(self.choices[axis], device=self.alpha.device)
        return (torch.arange(length, device=widths.device)[None, :] < widths[:, None]).float()

    def sparsity_mask(self, p: Optional[Tensor] = None) -> Tensor:
        """V = Σ_cells p_cell · mask_cell, in unit order (units shape)."""
        p = self.probs() if p is None else p
        ranks = self.ranks()
        if len(self.units) == 1:
            v_rank = p @ self._prefix(0, self.units[0])  # (C,) by rank
            return v_rank[ranks[0]]
        heads, dims = self.units
        v_rank = self._prefix(0, heads).t() @ p @ self._prefix(1, dims)  # (H, d) by ranks
        return torch.gather(v_rank[ranks[0]], 1, ranks[1])

    def support(self) -> Tensor:
        """1 on the units some active cell can keep (the best ``extent`` ones), else 0."""
        ranks, ext = self.ranks(), self.extent()
        if len(ranks) == 1:
            return (ranks[0] < ext[0]).float()
        return ((ranks[0] < ext[0])[:, None] & (ranks[1] < ext[1])).float()

    def forward(self) -> Optional[Tensor]:
        """The mask to multiply the units with (units shape), or None once fused."""
        if self.is_fused:
            return None
        if self.is_finished:
            return self.score
        w_p = self.w_p.to(self.score.dtype)
        mask = (1 - w_p) * self.sparsity_mask() + w_p * torch.sigmoid(self.score)
        return mask * self.support()

    def expected_size(self) -> Tensor:
        """E_p[kept units] (differentiable in α); the current size once finished."""
        if self.is_finished or self.is_fused:
            return self.score.new_tensor(float(self.score.numel()))
        return (self.probs() * self.cell_sizes()).sum()

    # ------------------------------------------------------------------ compression
    def drop_cells(self, threshold: float) -> bool:
        """Drop the active cells with p ≤ threshold / (number of active cells) (the public
        code's rule, threshold η = 0.2). Returns whether any cell was dropped."""
        if not 0 < threshold < 1:
            raise ValueError(f'the compression threshold must be in (0, 1), got {threshold}')
        if self.is_finished or self.num_active <= 1:
            return False
        with torch.no_grad():
            p = self.probs()
            keep = self.active & (p > threshold / self.num_active)
            if bool(keep.all()) or not bool((keep != self.active).any()):
                return False
            self.active.copy_(keep)
        return True

    def keep_index(self) -> Keep:
        """The units of the support, ascending: a LongTensor (channels) or ``(heads (N,),
        dims (N, W))`` (an attention: the kept heads and, per kept head, its kept channels)."""
        ranks, ext = self.ranks(), self.extent()
        if len(ranks) == 1:
            return torch.nonzero(ranks[0] < ext[0]).flatten()
        heads = torch.nonzero(ranks[0] < ext[0]).flatten()
        dims = torch.sort(torch.argsort(ranks[1][heads], dim=-1, stable=True)[:, :ext[1]],
                          dim=-1).values
        return heads, dims

    def finish_(self) -> None:
        """Turn S into the multiplier m it stands for, once one cell is left and the units are
        sliced to it (then V = 1 on every unit): ``S ← (1 - w_p) + w_p·sigmoid(S)``."""
        if self.num_active != 1:
            raise RuntimeError(f'BiMask.finish_: {self.num_active} cells are still active')
        if self.units != self.extent():
            raise RuntimeError(f'BiMask.finish_: slice the units to {self.extent()} first '
                               f'(they are {self.units})')
        with torch.no_grad():
            w_p = float(self.w_p)
            self.score.copy_((1 - w_p) + w_p * torch.sigmoid(self.score))
            self.finished.fill_(True)

    def mark_fused_(self) -> None:
        """The multiplier has been folded into the weights: the mask is the identity."""
        self.fused.fill_(True)
        self.score.requires_grad_(False)
        self.alpha.requires_grad_(False)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if self.is_fused:
            self.score.requires_grad_(False)
            self.alpha.requires_grad_(False)
