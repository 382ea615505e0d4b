"""Statistics of the attention weights of a DCS model (DCS paper, supplementary: Fig. 4 entropy
histograms, Fig. 5/6 attention maps of one query, Table 6 ranks of (Q⊙M)(K⊙M)ᵀ), and a small
Grad-CAM (Fig. 7).

Every :class:`~mmdcs.selection.DCSAttention` of a model (ViT, Swin, MobileViT; baseline, DCS or
KCR, supernet or subnet) is switched to ``record_attn`` while :func:`collect_attention` runs
images through the model; forward hooks read, per attention module ("block"):

* the **row entropies** H(w) = −Σ_j w_j log w_j of every row of every affinity matrix
  W = softmax((Q⊙M)(K⊙M)ᵀ/√d + bias), per head. 0 ≤ H ≤ log N_keys;
* the **attention map of one query** (the class token for ViT; the centre token, or any
  position, otherwise) on the token grid, for the image chosen for maps;
* the **numerical rank** (``torch.linalg.matrix_rank``, float64, relative tolerance
  ``rank_rtol``) of (Q⊙M)(K⊙M)ᵀ and of the unmasked QKᵀ, per head, averaged over the
  sequences (images, windows, pixel positions) of the first ``rank_images`` images, and the
  bound min(N, c) where c counts the channels that some token keeps in Q and some token keeps
  in K: (Q⊙M)(K⊙M)ᵀ = Σ_c (q_c⊙m_c)(k_c⊙m_c)ᵀ has rank ≤ min(N, c) ≤ min(N, d_head).
  Note: with per-token masks the masked rank is **not** bounded by the unmasked one: when
  Q or K is rank-deficient (e.g. tokens of flat image regions), masking each row differently
  can take rows out of Q's row space and raise the rank. Masks that close a channel for every
  token lower it (to at most the channels left), which is what DCS paper's Table 6 reports.

Families:

* **ViT**: one sequence per image, N = 1 + h·w tokens (class token first).
* **Swin**: attention is windowed: the rows are those of every (shifted) window, N = the
  window's tokens (49 for 7×7), the relative position bias and the shifted-window mask inside
  the softmax; entropies are over window rows (≤ log 49). A query's map is non-zero only inside
  its window (on a map padded to a multiple of the window, the weights on padding tokens are
  not drawn). Windows are sequences for the rank.
* **MobileViT**: attention runs over the N = ⌈H/2⌉·⌈W/2⌉ patches of each of the P = 4 pixel
  positions of a 2×2 patch (4 sequences per image); maps average the P positions.
* **EfficientViT** uses ReLU linear attention (LiteMLA): there is no softmax attention matrix,
  so entropy, maps and rank are not defined: :func:`attention_modules` raises
  :class:`AttentionNotSupported`.
"""
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from torch import Tensor

from mmdcs.models.backbones import SelectableBackbone
from mmdcs.models.backbones.base import AttentionLayout
from mmdcs.selection import DCSAttention


class AttentionNotSupported(ValueError):
    """The model has no softmax attention matrix to analyse (e.g. EfficientViT)."""


# ----------------------------------------------------------------------------- basics
def row_entropy(attn: Tensor) -> Tensor:
    """Entropy (nats) of every row of attention weights (..., N_q, N_k) → (..., N_q);
    0·log 0 = 0."""
    return torch.special.entr(attn.double()).sum(-1).to(attn.dtype if attn.is_floating_point()
                                                        else torch.float32)


def backbone_of(model: nn.Module) -> nn.Module:
    return getattr(model, 'backbone', model)


def attention_modules(model: nn.Module) -> 'OrderedDict[str, DCSAttention]':
    """Name (in the backbone) → every :class:`DCSAttention` of the model's backbone.

    Raises :class:`AttentionNotSupported` for a model without one (EfficientViT's LiteMLA is
    ReLU linear attention: no softmax attention matrix)."""
    backbone = backbone_of(model)
    mods = OrderedDict((n, m) for n, m in backbone.named_modules()
                       if isinstance(m, DCSAttention))
    if not mods:
        if not getattr(backbone, 'softmax_attention', True):
            raise AttentionNotSupported(
                f'{type(backbone).__name__} is not supported: its attention is linear '
                'attention (EfficientViT\'s LiteMLA: ReLU(Q)(ReLU(K)ᵀV)), with no softmax '
                'attention matrix, so row entropies, attention maps and the rank of the '
                'affinity are not defined')
        raise AttentionNotSupported(f'{type(backbone).__name__} has no DCSAttention module '
                                    '(mmdcs ViT, Swin and MobileViT backbones have them)')
    return mods


def qk_of(attn: DCSAttention, x: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """(q, k, q⊙M, k⊙M), each (B, heads, N, head_dim), of a DCSAttention's input x (B, N, D),
    as its forward computes them (M = 1 without Q/K selection)."""
    B, N, _ = x.shape
    qkv = attn.qkv(x).reshape(B, N, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
    q, k = qkv[0], qkv[1]
    if attn.qk_select is None:
        return q, k, q, k
    mq, mk = attn.qk_select(x)
    return q, k, q * attn._heads(mq), k * attn._heads(mk)


def masked_rank_bound(qm: Tensor, km: Tensor) -> Tensor:
    """min(N, c) per (sequence, head): c = channels that some token keeps (non-zero) in Q⊙M
    and some token keeps in K⊙M, an upper bound of rank((Q⊙M)(K⊙M)ᵀ). (B, heads) long."""
    c = ((qm != 0).any(-2) & (km != 0).any(-2)).sum(-1)
    return c.clamp_max(min(qm.shape[-2], km.shape[-2]))


def qk_ranks(q: Tensor, k: Tensor, rtol: float = 1e-7) -> Tensor:
    """Numerical rank of q kᵀ per (sequence, head): (B, heads) long; float64 SVD, singular
    values below ``rtol``·σ_max are zero."""
    prod = q.double() @ k.double().transpose(-2, -1)
    return torch.linalg.matrix_rank(prod, rtol=rtol)


# ----------------------------------------------------------------------------- layouts
class _NoLayout(AttentionLayout):
    """A backbone without an attention layout (not an mmdcs family): no query maps."""

    def __init__(self, backbone: nn.Module):
        self.name = type(backbone).__name__

    def query_map(self, attn, image, query, image_hw):
        raise AttentionNotSupported(f'no attention layout for {self.name}')


def attention_layout(backbone: nn.Module, name: str) -> AttentionLayout:
    """The backbone's layout of its attention module ``name`` (the backbone contract,
    :meth:`~mmdcs.models.backbones.SelectableBackbone.attention_layout`)."""
    if not isinstance(backbone, SelectableBackbone):
        return _NoLayout(backbone)
    return backbone.attention_layout(name)


# ----------------------------------------------------------------------------- collection
@dataclass
class AttentionStats:
    """What :func:`collect_attention` gathered from one model (per attention module name)."""
    family: str
    entropies: 'OrderedDict[str, Tensor]' = field(default_factory=OrderedDict)  # (heads, R)
    num_keys: Dict[str, int] = field(default_factory=dict)
    head_dim: Dict[str, int] = field(default_factory=dict)
    rank_masked: Dict[str, Tensor] = field(default_factory=dict)  # (heads,) mean over seqs
    rank_unmasked: Dict[str, Tensor] = field(default_factory=dict)
    rank_bound: Dict[str, Tensor] = field(default_factory=dict)  # (heads,) mean min(N, c)
    rank_sequences: Dict[str, int] = field(default_factory=dict)
    maps: Dict[str, Tensor] = field(default_factory=dict)  # (heads, gh, gw)
    query_cell: Dict[str, Tuple[int, int]] = field(default_factory=dict)
    qk_select: bool = False
    images: int = 0

    @property
    def blocks(self) -> List[str]:
        return list(self.entropies)

    def mean_entropy(self) -> 'OrderedDict[str, Tensor]':
        """Block → (heads,) average row entropy."""
        return OrderedDict((n, e.mean(1)) for n, e in self.entropies.items())

    def to_dict(self) -> dict:
        """JSON-friendly summary (no per-row data)."""
        return dict(
            family=self.family, images=self.images, qk_select=self.qk_select,
            blocks={n: dict(num_keys=self.num_keys[n], head_dim=self.head_dim[n],
                            rows_per_head=int(self.entropies[n].shape[1]),
                            mean_entropy=self.entropies[n].mean(1).tolist(),
                            rank_masked=self.rank_masked[n].tolist()
                            if n in self.rank_masked else None,
                            rank_unmasked=self.rank_unmasked[n].tolist()
                            if n in self.rank_unmasked else None,
                            rank_bound=self.rank_bound[n].tolist()
                            if n in self.rank_bound else None,
                            rank_sequences=self.rank_sequences.get(n))
                    for n in self.blocks})


def resolve_block(stats_or_names, block: Union[int, str]) -> str:
    """A block name from an index (negative from the end) or a name."""
    names = stats_or_names.blocks if isinstance(stats_or_names, AttentionStats) else \
        list(stats_or_names)
    if isinstance(block, str) and not block.lstrip('-').isdigit():
        if block not in names:
            raise ValueError(f'unknown attention block {block!r}; valid: {", ".join(names)}')
        return block
    i = int(block)
    if not -len(names) <= i < len(names):
        raise ValueError(f'block index {i} out of range: {len(names)} attention blocks')
    return names[i]


@torch.no_grad()
def collect_attention(model: nn.Module, batches: Union[Tensor, Sequence[Tensor]],
                      rank_images: int = 4, rank_rtol: float = 1e-7, map_image: int = 0,
                      query: Union[str, Tuple[float, float]] = 'auto',
                      forward: Optional[Callable] = None) -> AttentionStats:
    """Run the images through ``model`` with every attention recording; gather entropies,
    one query's maps and ranks (see the module docs).

    Args:
        model: an mmpretrain classifier (its ``backbone`` is used) or an mmdcs backbone.
        batches: an input batch (B, C, H, W) or a sequence of batches (already normalised).
        rank_images: images (the first ones) whose Q/K products are ranked (0: none).
        rank_rtol: relative tolerance of the numerical rank.
        map_image: index (over all batches) of the image whose query maps are kept.
        query: ``'auto'`` (class token for ViT, centre otherwise), ``'cls'``, ``'centre'`` or
            (y, x) fractions of the image.
        forward: how to run a batch (default: the backbone's forward).
    """
    backbone = backbone_of(model)
    mods = attention_modules(model)
    family = getattr(backbone, 'family', '')
    layouts = {n: attention_layout(backbone, n) for n in mods}
    class_token = all(lay.class_token for lay in layouts.values())
    if query == 'auto':
        query = 'cls' if class_token else 'centre'
    if query == 'cls' and not class_token:
        raise ValueError(f'query "cls": {family or type(backbone).__name__} has no class token '
                         '(use "centre" or y,x fractions)')
    stats = AttentionStats(family=family,
                           qk_select=any(m.qk_select is not None for m in mods.values()))
    ent_parts: Dict[str, List[Tensor]] = {n: [] for n in mods}
    rank_sum: Dict[str, Tensor] = {}
    rank_sum_u: Dict[str, Tensor] = {}
    bound_sum: Dict[str, Tensor] = {}
    state = dict(offset=0, batch=0, hw=(0, 0))
    handles = []
    was_training = backbone.training
    backbone.eval()

    def make_hooks(name, module, layout):
        def hook(mod, args, output):
            attn = mod.last_attn
            mod.last_attn = None
            if attn is None:
                return
            B = state['batch']
            ent_parts[name].append(row_entropy(attn).transpose(0, 1).reshape(
                attn.shape[1], -1).float().cpu())
            stats.num_keys[name] = attn.shape[-1]
            stats.head_dim[name] = mod.head_dim
            local = map_image - state['offset']
            if 0 <= local < B and name not in stats.maps:
                m, _, cell = layout.query_map(attn, local, query, state['hw'])
                stats.maps[name] = m.float().cpu()
                stats.query_cell[name] = cell
            n_rank = min(B, rank_images - state['offset'])
            if n_rank > 0:
                seqs = attn.shape[0] // B * n_rank
                x = args[0][:seqs]
                q, k, qm, km = qk_of(mod, x)
                rm = qk_ranks(qm, km, rank_rtol).sum(0)
                ru = qk_ranks(q, k, rank_rtol).sum(0)
                rank_sum[name] = rank_sum.get(name, 0) + rm
                rank_sum_u[name] = rank_sum_u.get(name, 0) + ru
                bound_sum[name] = bound_sum.get(name, 0) + masked_rank_bound(qm, km).sum(0)
                stats.rank_sequences[name] = stats.rank_sequences.get(name, 0) + seqs
        return hook

    try:
        for name, m in mods.items():
            m.record_attn = True
            lay = layouts[name]
            handles.append(m.register_forward_hook(make_hooks(name, m, lay)))
            if lay.watch is not None:
                handles.append(lay.watch.register_forward_pre_hook(lay.observe))
        if isinstance(batches, Tensor):
            batches = [batches]
        run = forward or backbone
        device = next(backbone.parameters()).device
        for x in batches:
            x = x.to(device)
            state['batch'] = x.shape[0]
            state['hw'] = (x.shape[-2], x.shape[-1])
            run(x)
            state['offset'] += x.shape[0]
        stats.images = state['offset']
    finally:
        for h in handles:
            h.remove()
        for m in mods.values():
            m.record_attn = False
            m.last_attn = None
        backbone.train(was_training)
    for name in mods:
        if ent_parts[name]:
            stats.entropies[name] = torch.cat(ent_parts[name], dim=1)
        if name in rank_sum:
            n = stats.rank_sequences[name]
            stats.rank_masked[name] = rank_sum[name].double() / n
            stats.rank_unmasked[name] = rank_sum_u[name].double() / n
            stats.rank_bound[name] = bound_sum[name].double() / n
    return stats
