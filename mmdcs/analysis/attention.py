"""What the attention weights of a DCS model look like (seed 000, supplementary: Fig. 4 entropy
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
  token lower it (to at most the channels left), which is what seed 000's Table 6 reports.

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
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
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


# ----------------------------------------------------------------------------- tables
def entropy_table(stats: Dict[str, AttentionStats], blocks: Optional[Sequence] = None) -> str:
    """Markdown: average row entropy per block and head, one column per model (and log N)."""
    names = list(stats)
    first = stats[names[0]]
    chosen = [resolve_block(first, b) for b in blocks] if blocks else first.blocks
    lines = ['| block | head | log N | ' + ' | '.join(names) + ' |',
             '|' + '---|' * (3 + len(names))]
    for b in chosen:
        heads = first.entropies[b].shape[0]
        for h in range(heads):
            vals = []
            for n in names:
                e = stats[n].entropies.get(b)
                vals.append('—' if e is None or h >= e.shape[0] else f'{float(e[h].mean()):.3f}')
            lines.append(f'| {b} | {h + 1} | {math.log(first.num_keys[b]):.3f} | '
                         + ' | '.join(vals) + ' |')
    return '\n'.join(lines)


def rank_table(stats: Dict[str, AttentionStats], blocks: Optional[Sequence] = None) -> str:
    """Markdown (Table 6): mean numerical rank of (Q⊙M)(K⊙M)ᵀ and of QKᵀ per block and head,
    per model, with the bound min(N, c) of the masked product (c: channels some token keeps)
    and min(N, head_dim)."""
    names = [n for n in stats if stats[n].rank_masked]
    if not names:
        return '(no ranks computed: rank_images = 0)'
    first = stats[names[0]]
    chosen = [resolve_block(first, b) for b in blocks] if blocks else first.blocks
    cols = []
    for n in names:
        cols += [f'{n} (Q⊙M)(K⊙M)ᵀ', f'{n} QKᵀ', f'{n} min(N, c)']
    lines = ['| block | head | min(N, d_head) | ' + ' | '.join(cols) + ' |',
             '|' + '---|' * (3 + len(cols))]
    for b in chosen:
        if b not in first.rank_masked:
            continue
        bound = min(first.num_keys[b], first.head_dim[b])
        for h in range(first.rank_masked[b].shape[0]):
            vals = []
            for n in names:
                for d in (stats[n].rank_masked, stats[n].rank_unmasked, stats[n].rank_bound):
                    v = d.get(b)
                    vals.append('—' if v is None or h >= len(v) else f'{float(v[h]):.1f}')
            lines.append(f'| {b} | {h + 1} | {bound} | ' + ' | '.join(vals) + ' |')
    return '\n'.join(lines)


# ----------------------------------------------------------------------------- figures
def _plt():
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


def plot_entropy_histograms(stats: Dict[str, AttentionStats], path: str,
                            block: Union[int, str] = -1, bins: int = 40,
                            title: Optional[str] = None) -> str:
    """Fig. 4 style: per head of ``block``, overlaid histograms (one per model) of the row
    entropies, with each model's mean; x from 0 to log N. Writes a PNG; returns the path."""
    plt = _plt()
    names = list(stats)
    first = stats[names[0]]
    b = resolve_block(first, block)
    heads = first.entropies[b].shape[0]
    log_n = math.log(first.num_keys[b])
    cols = min(heads, 4)
    rows = math.ceil(heads / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.9 * rows), squeeze=False)
    # bins over [lo, log N]: lo = 0 unless every row is near log N (then zoom in, so the
    # histograms are not a single bar at the right edge)
    vmin = min(float(stats[n].entropies[b].min()) for n in names if b in stats[n].entropies)
    lo = 0. if vmin < 0.5 * log_n else max(0., vmin - 0.05 * (log_n - vmin) - 1e-3)
    edges = torch.linspace(lo, log_n * 1.0001 + 1e-6, bins + 1).tolist()
    colors = plt.rcParams['axes.prop_cycle'].by_key()['color']
    for h in range(rows * cols):
        ax = axes[h // cols][h % cols]
        if h >= heads:
            ax.axis('off')
            continue
        for i, n in enumerate(names):
            e = stats[n].entropies.get(b)
            if e is None or h >= e.shape[0]:
                continue
            v = e[h].numpy()
            c = colors[i % len(colors)]
            ax.hist(v, bins=edges, alpha=0.45, color=c, label=f'{n} (mean {v.mean():.2f})',
                    density=True)
            ax.axvline(float(v.mean()), color=c, linestyle='--', linewidth=1.2)
        ax.set_title(f'head {h + 1}', fontsize=10)
        ax.set_xlabel('row entropy (nats)')
        ax.set_ylabel('density')
        ax.set_xlim(lo, log_n * 1.0001 + 1e-6)
        ax.legend(fontsize=7)
    fig.suptitle(title or f'Entropy of the attention rows, block {b} '
                 f'(N = {first.num_keys[b]} keys, log N = {log_n:.2f}; '
                 f'{first.images} images)', fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _overlay(image: Tensor, heat: Tensor, alpha: float = 0.5):
    """(H, W, 3) float RGB in [0, 1]: the image with a jet heat map (heat normalised 0..1)
    blended on top; heat (gh, gw) is upsampled (bilinear) to the image size."""
    import matplotlib
    H, W = image.shape[:2]
    h = heat.detach().float()[None, None]
    h = F.interpolate(h, size=(H, W), mode='bilinear', align_corners=False)[0, 0]
    h = (h - h.min()) / (h.max() - h.min()).clamp_min(1e-12)
    cmap = matplotlib.colormaps['jet']
    colored = torch.from_numpy(cmap(h.numpy())[..., :3]).float()
    img = image.float() / 255.
    return ((1 - alpha) * img + alpha * colored).clamp(0, 1).numpy()


def plot_attention_maps(image: Tensor, maps: Dict[str, Tensor], path: str,
                        query_cell: Optional[Tuple[int, int]] = None,
                        grid: Optional[Tuple[int, int]] = None, head: Optional[int] = 0,
                        title: Optional[str] = None) -> str:
    """Fig. 5/6 style: the image (query cell boxed), then per model the query's attention map
    (head ``head``, or the heads' mean with ``head=None``) upsampled onto the image."""
    plt = _plt()
    from matplotlib.patches import Rectangle
    names = list(maps)
    H, W = image.shape[:2]
    fig, axes = plt.subplots(1, 1 + len(names), figsize=(3.4 * (1 + len(names)), 3.6),
                             squeeze=False)
    ax = axes[0][0]
    ax.imshow(image.numpy())
    ax.set_title('input (query boxed)' if query_cell and query_cell[0] >= 0 else
                 'input (query: class token)', fontsize=9)
    ax.axis('off')
    for i, n in enumerate(names):
        m = maps[n]
        heat = m.mean(0) if head is None else m[min(head, m.shape[0] - 1)]
        ax = axes[0][i + 1]
        ax.imshow(_overlay(image, heat))
        ent = float(torch.special.entr(heat.double().clamp_min(0) /
                                       heat.double().clamp_min(0).sum().clamp_min(1e-12)).sum())
        ax.set_title(f'{n}\n{"mean of heads" if head is None else f"head {head + 1}"}, '
                     f'entropy {ent:.2f}, w {float(heat.min()):.3g}–{float(heat.max()):.3g}',
                     fontsize=9)
        ax.axis('off')
        g = grid or tuple(m.shape[-2:])
        if query_cell and query_cell[0] >= 0:
            for a in (axes[0][0], ax):
                ch, cw = H / g[0], W / g[1]
                a.add_patch(Rectangle((query_cell[1] * cw, query_cell[0] * ch), cw, ch,
                                      fill=False, edgecolor='red', linewidth=1.5))
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------- Grad-CAM
#: default Grad-CAM target layer (in the classifier) per family: the last stage. ViT: the
#: first norm of the last block (its output feeds the last attention; the last block's own
#: output reaches the prediction through the class token only, so its patch tokens get no
#: gradient), as mmpretrain's vis_cam does
DEFAULT_CAM_LAYERS = {
    'vit': 'backbone.blocks.-1.norm1',
    'swin': 'backbone.layers.-1',
    'mobilevit': 'backbone.stages.-1',
    'efficientvit': 'backbone.stages.-1',
}


def get_layer(model: nn.Module, path: str) -> nn.Module:
    """A submodule by dotted path, where a negative integer part counts from the end
    (``'backbone.blocks.-1'``)."""
    m = model
    for part in path.split('.'):
        if part.lstrip('-').isdigit():
            m = list(m.children())[int(part)] if not hasattr(m, '__getitem__') else m[int(part)]
        else:
            if not hasattr(m, part):
                raise ValueError(f'no layer {path!r} in {type(model).__name__} (at {part!r})')
            m = getattr(m, part)
    return m


def _to_bchw(act: Tensor, family: str, backbone: nn.Module, image_hw: Tuple[int, int]) -> Tensor:
    """A target layer's activation as (B, C, h, w)."""
    if act.dim() == 4 and family == 'swin':
        return act.permute(0, 3, 1, 2)  # (B, H, W, C)
    if act.dim() == 3:  # tokens (B, N, C)
        prefix = getattr(backbone, 'num_prefix_tokens', 0) if family == 'vit' else 0
        tokens = act[:, prefix:]
        p = getattr(backbone, 'patch_size', None)
        if family == 'vit' and p:
            gh, gw = image_hw[0] // p, image_hw[1] // p
        else:
            gh = gw = int(math.isqrt(tokens.shape[1]))
        return tokens.reshape(act.shape[0], gh, gw, -1).permute(0, 3, 1, 2)
    if act.dim() != 4:
        raise ValueError(f'Grad-CAM needs a spatial activation, got shape {tuple(act.shape)}')
    return act


def grad_cam(model: nn.Module, inputs: Tensor, target_layer: Optional[str] = None,
             target_class: Optional[Union[int, Sequence[int]]] = None
             ) -> Tuple[Tensor, Tensor, Tensor]:
    """Grad-CAM (Selvaraju et al. 2017) of an mmpretrain classifier.

    cam = ReLU(Σ_k w_k A_k), w_k = mean over positions of ∂score_c/∂A_k, at the output A of
    ``target_layer`` (default per family, :data:`DEFAULT_CAM_LAYERS`: the last stage), for the
    class c = ``target_class`` (default: the predicted class). Eval mode (DCS gates
    deterministic).

    Returns (cams (B, H, W) in [0, 1] at the input size, classes (B,), scores (B,) softmax
    probabilities of those classes).
    """
    backbone = backbone_of(model)
    family = getattr(backbone, 'family', '')
    path = target_layer or DEFAULT_CAM_LAYERS.get(family)
    if path is None:
        raise ValueError(f'no default Grad-CAM layer for {type(backbone).__name__}: give '
                         'target_layer')
    layer = get_layer(model, path)
    store = {}

    def hook(mod, args, out):
        out = out[-1] if isinstance(out, (tuple, list)) else out
        out.retain_grad()
        store['act'] = out

    was_training = model.training
    model.eval()
    h = layer.register_forward_hook(hook)
    try:
        with torch.enable_grad():
            x = inputs.detach().clone().requires_grad_(True)
            logits = model(x, mode='tensor') if _takes_mode(model) else model(x)
            if isinstance(logits, (tuple, list)):
                logits = logits[-1]
            if target_class is None:
                cls = logits.argmax(-1)
            else:
                cls = torch.as_tensor(target_class, device=logits.device).long().expand(
                    logits.shape[0]) if isinstance(target_class, int) else torch.as_tensor(
                        list(target_class), device=logits.device).long()
            score = logits.gather(1, cls[:, None]).sum()
            model.zero_grad(set_to_none=True)
            score.backward()
        act = store['act']
        if act.grad is None:
            raise ValueError(f'target layer {path!r} got no gradient (is it used for the '
                             'prediction?)')
        a = _to_bchw(act.detach(), family, backbone, tuple(inputs.shape[-2:]))
        g = _to_bchw(act.grad.detach(), family, backbone, tuple(inputs.shape[-2:]))
        weights = g.mean(dim=(2, 3), keepdim=True)
        cam = F.relu((weights * a).sum(1, keepdim=True))
        cam = F.interpolate(cam, size=inputs.shape[-2:], mode='bilinear', align_corners=False)
        cam = cam[:, 0]
        lo = cam.flatten(1).min(1).values[:, None, None]
        hi = cam.flatten(1).max(1).values[:, None, None]
        cam = (cam - lo) / (hi - lo).clamp_min(1e-12)
        probs = logits.detach().softmax(-1).gather(1, cls[:, None])[:, 0]
    finally:
        h.remove()
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    return cam.cpu(), cls.cpu(), probs.cpu()


def _takes_mode(model: nn.Module) -> bool:
    import inspect
    try:
        return 'mode' in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def plot_cams(images: Sequence[Tensor], cams: Dict[str, Tuple[Tensor, Tensor, Tensor]],
              path: str, class_names: Optional[Sequence[str]] = None,
              title: Optional[str] = None) -> str:
    """Fig. 7 style grid: first row the images, then one row per model with its Grad-CAM
    overlays (predicted class and probability in each title)."""
    plt = _plt()
    names = list(cams)
    cols = len(images)
    fig, axes = plt.subplots(1 + len(names), cols, figsize=(2.6 * cols, 2.7 * (1 + len(names))),
                             squeeze=False)
    for j, img in enumerate(images):
        axes[0][j].imshow(img.numpy())
        axes[0][j].set_title(f'image {j + 1}', fontsize=9)
        axes[0][j].axis('off')
        for i, n in enumerate(names):
            cam, cls, prob = cams[n]
            ax = axes[i + 1][j]
            ax.imshow(_overlay(img, cam[j]))
            c = int(cls[j])
            label = class_names[c] if class_names and c < len(class_names) else str(c)
            ax.set_title(f'{n}: {label} ({float(prob[j]):.2f})', fontsize=8)
            ax.axis('off')
    fig.suptitle(title or 'Grad-CAM (predicted class, probability)', fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
