"""How a latency table's grid order changes what a latency target measures (docs/budgets.md, "Why
ViT-S/16 missed"): the same paper model's table built with every unit at its k-th grid point
(``aligned``, unpooled: the tables of format 1) and with rotated grids and identical units pooled
(the default of :func:`~mmdcs.analysis.latency_table.build_table`), each exported at the target
and measured (:func:`~mmdcs.analysis.latency_target.latency_target_row`), beside what a smooth
surface through the table's entries predicts for the same export (:func:`surface_ratio`).

A table whose noise the export's greedy used predicts its own export too low; the smooth
surface, fitted to all entries of the units of one shape together, does not follow the noise of
single grid points. Where the two predictions differ, the table's prediction is the one to
doubt.
"""
import time
from typing import Callable, Dict, List, Optional, Tuple

import torch

from .latency_table import build_table
from .latency_target import latency_target_row, supernet_pair

#: (name, rotate, pool) of the grid orders compared
GRID_ORDERS = (('aligned', False, False), ('rotated+pooled', True, True))


def _features(kind: str, d: float = 0., h: float = 0.) -> List[float]:
    if kind == 'pair':
        return [1., d, h, d * h, h * h, d * d]
    return [1., d, d * d]


def _kind(u: dict) -> Tuple[str, str, tuple]:
    """(kind, key, grid) of a table unit: units of one key share a surface."""
    if 'heads' in u:
        return 'curve', f'heads {u["heads"]}', tuple(u['grid_heads'])
    if u.get('channels') and u.get('hidden'):
        grid = (tuple(u['grid_channels']), tuple(u['grid_hidden']))
        return 'pair', f'pair {u["channels"]}x{u["hidden"]}', grid
    if u.get('channels'):
        return 'curve', f'channels {u["channels"]}', tuple(u['grid_channels'])
    return 'curve', f'hidden {u["hidden"]}', tuple(u['grid_hidden'])


def surface_ratio(table: dict, widths: Dict[str, Tuple[float, ...]]) -> float:
    """The latency ratio a smooth surface predicts at ``widths`` (unit path → (D̃, H̃) for a
    channels × hidden unit, (w, ) for any other): per group of units of one kind and full width,
    a least-squares quadratic through all their entries (``a + b·D̃ + c·H̃ + p·D̃·H̃ + q·H̃² +
    r·D̃²``; a curve: ``a + b·w + c·w²``), the table's constant added, over its baseline."""
    groups: Dict[str, List[dict]] = {}
    kinds = {}
    for u in table['units']:
        kind, key, grid = _kind(u)
        groups.setdefault(key, []).append(u)
        kinds[key] = (kind, grid)
    coef, key_of = {}, {}
    for key, units in groups.items():
        kind, grid = kinds[key]
        rows, ys = [], []
        for u in units:
            key_of[u['path']] = key
            if kind == 'pair':
                for i, d in enumerate(grid[0]):
                    for j, h in enumerate(grid[1]):
                        rows.append(_features(kind, d, h))
                        ys.append(u['ms'][i][j])
            else:
                for w, t in zip(grid, u['ms']):
                    rows.append(_features(kind, w))
                    ys.append(t)
        a = torch.tensor(rows, dtype=torch.float64)
        y = torch.tensor(ys, dtype=torch.float64).unsqueeze(1)
        coef[key] = torch.linalg.lstsq(a, y, driver='gelsd').solution.flatten()
    total = float(table['const_ms'])
    for path, w in widths.items():
        key = key_of[path]
        kind, _ = kinds[key]
        x = torch.tensor(_features(kind, *[float(v) for v in w]), dtype=torch.float64)
        total += float(x @ coef[key])
    return total / float(table['baseline_ms'])


def spec_widths(spec: dict) -> Dict[str, Tuple[int, ...]]:
    """Unit path → kept widths of a subnet (dict form): (D̃, H̃) of a block with hidden
    selection, (D̃, ) or (H̃, ) otherwise, (heads, ) of an attention."""
    hidden = {h['name']: h['kept'] for h in spec.get('hidden', [])}
    out: Dict[str, Tuple[int, ...]] = {}
    for b in spec['blocks']:
        out[b['name']] = (b['kept'], hidden.pop(b['name'])) if b['name'] in hidden else (
            b['kept'], )
    out.update((k, (v, )) for k, v in hidden.items())
    out.update((a['name'], (a['kept'], )) for a in spec.get('heads', []))
    return out


def compare_grid_orders(arch: str, target: float = 0.7, input_size=None,
                        select_hidden=False, batch: int = 1, threads: Optional[int] = 1,
                        rounds: int = 5, repeats: int = 21, multiple_of: int = 8, seed: int = 0,
                        table_meter: Optional[Callable] = None,
                        meter: Optional[Callable] = None,
                        progress: Optional[Callable[[str], None]] = None) -> List[dict]:
    """One row per grid order (:data:`GRID_ORDERS`): the paper model's table built that way on
    this CPU, its export at ``target`` measured (:func:`latency_target_row`), and the smooth
    surface's prediction of that export (:func:`surface_ratio`). ``table_meter`` and
    ``meter``: synthetic meters (tests)."""
    sup, base, size, variant = supernet_pair(arch, None, input_size, select_hidden, seed)
    rows = []
    for name, rotate, pool in GRID_ORDERS:
        started = time.perf_counter()
        table = build_table(sup, base, size, batch, threads, 'fp32', 'cpu', rounds,
                            multiple_of=multiple_of, meter=table_meter, seed=seed,
                            progress=progress, rotate=rotate, pool=pool)
        row = latency_target_row(arch, target, batch, threads, variant=variant,
                                 input_size=size, select_hidden=select_hidden,
                                 multiple_of=multiple_of, table=table, repeats=repeats,
                                 meter=meter, seed=seed)
        rows.append(dict(grid=name, model=arch, input=f'{size[0]}x{size[1]}', target=target,
                         predicted_ratio=row['predicted_ratio'],
                         surface_ratio=surface_ratio(table, spec_widths(row['spec'])),
                         measured_ratio_clock=row['measured_ratio_clock'],
                         measured_ratio=row['measured_ratio'], clock=row['clock'],
                         flops_ratio=row['flops_ratio'], build_s=table['build_s'],
                         baseline_ms=table['baseline_ms'], spec=row['spec'],
                         seconds=time.perf_counter() - started))
    return rows


def format_grid_orders(rows: List[dict]) -> str:
    lines = ['| grid | model | input | target | predicted | smooth surface | measured (table\'s '
             'clock) | measured (wall) | FLOPs ratio | table built in |',
             '|' + '---|' * 10]
    for r in rows:
        lines.append(f'| {r["grid"]} | {r["model"]} | {r["input"]} | {r["target"]:.2f} | '
                     f'{r["predicted_ratio"]:.3f} | {r["surface_ratio"]:.3f} | '
                     f'{r["measured_ratio_clock"]:.3f} ({r["clock"]}) | '
                     f'{r["measured_ratio"]:.3f} | {r["flops_ratio"]:.3f} | '
                     f'{r["build_s"]:.0f} s |')
    return '\n'.join(lines)
