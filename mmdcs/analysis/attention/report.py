"""Markdown tables of :class:`~.stats.AttentionStats`: row entropies per block and head, and
(DCS paper, Table 6) the numerical ranks of (Q⊙M)(K⊙M)ᵀ and QKᵀ."""
import math
from typing import Dict, Optional, Sequence

from .stats import AttentionStats, resolve_block


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
