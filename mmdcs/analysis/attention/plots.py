"""Figures of :class:`~.stats.AttentionStats` (DCS paper, supplementary): entropy histograms
(Fig. 4) and one query's attention maps (Fig. 5/6); :func:`overlay` (a heat map on an image) is
shared with Grad-CAM's figure."""
import math
from typing import Dict, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from .stats import AttentionStats, resolve_block


def pyplot():
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


def plot_entropy_histograms(stats: Dict[str, AttentionStats], path: str,
                            block: Union[int, str] = -1, bins: int = 40,
                            title: Optional[str] = None) -> str:
    """Fig. 4 style: per head of ``block``, overlaid histograms (one per model) of the row
    entropies, with each model's mean; x from 0 to log N. Writes a PNG; returns the path."""
    plt = pyplot()
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


def overlay(image: Tensor, heat: Tensor, alpha: float = 0.5):
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


def check_map_head(maps: Dict[str, Tensor], head: Optional[int]) -> None:
    """``head`` (0-based; None: the heads' mean) is a head of every map (heads, gh, gw): a
    ``ValueError`` naming the valid range otherwise (never a clamped head under another
    head's label)."""
    if head is None:
        return
    heads = min(m.shape[0] for m in maps.values()) if maps else 0
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < heads:
        raise ValueError(f'head {head!r} is not a head of the mapped block: it has {heads} '
                         f'heads (0 to {heads - 1}; -1: their mean)')


def plot_attention_maps(image: Tensor, maps: Dict[str, Tensor], path: str,
                        query_cell: Optional[Tuple[int, int]] = None,
                        grid: Optional[Tuple[int, int]] = None, head: Optional[int] = 0,
                        title: Optional[str] = None) -> str:
    """Fig. 5/6 style: the image (query cell boxed), then per model the query's attention map
    (head ``head``, or the heads' mean with ``head=None``) upsampled onto the image."""
    check_map_head(maps, head)
    plt = pyplot()
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
        heat = m.mean(0) if head is None else m[head]
        ax = axes[0][i + 1]
        ax.imshow(overlay(image, heat))
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
