"""A test double of a non-linear budget resource: a made-up per-unit table (what a latency table
is), const + Σ_unit piecewise-linear t_u(width), implementing mmdcs.selection.budget.ResourceCost
without LinearCost's closed forms, to show that the budget's consumers take any implementation."""
import math
from typing import Dict, Optional

import torch

from mmdcs.selection.budget import CHANNELS, HIDDEN, BudgetError


def _interp(grid, values, w):
    """Piecewise-linear interpolation of (grid, values) at w (a float or a 0-d tensor)."""
    for i in range(len(grid) - 1):
        a, b = grid[i], grid[i + 1]
        if float(w.detach() if torch.is_tensor(w) else w) <= b or i == len(grid) - 2:
            t = (w - a) / (b - a)
            return values[i] + (values[i + 1] - values[i]) * t
    return values[-1]


class TableCost:
    """const + Σ_u t_u(w_u): t_u is piecewise linear on a grid of widths (1, every 8, D), concave
    (a step of 8 costs the same as the step before it down to 1/2 of it: narrow layers are
    relatively slow, as GEMMs are), scaled per unit by ``weight[u]``."""

    def __init__(self, dims: Dict[str, int], hidden_dims: Dict[str, int], const: float = 10.,
                 resource: str = 'toy', weight: Optional[Dict] = None, input_size=None):
        self.resource = resource
        self.dims, self.hidden_dims, self.head_dims = dict(dims), dict(hidden_dims), {}
        self.tolerance, self.multiple_of = 0., 1
        self.input_size = input_size
        self.const = float(const)
        self.meta = dict(identity=dict(table='synthetic', units=len(dims) + len(hidden_dims)))
        self.grid, self.values = {}, {}
        for i, (u, d) in enumerate(self.unit_dims().items()):
            grid = sorted({1, d} | set(range(8, d, 8)))
            w = (weight or {}).get(u, 1. + 0.1 * (i % 5))
            self.grid[u] = grid
            self.values[u] = [w * (2 * g - g * g / (2 * d)) / d * 4 for g in grid]
        self.baseline = self.count({}) * 1.05  # the baseline: a little above full width

    def unit_dims(self):
        out = {(CHANNELS, n): int(d) for n, d in self.dims.items()}
        out.update(((HIDDEN, k), int(h)) for k, h in self.hidden_dims.items())
        return out

    def count(self, widths):
        total = self.const
        for u, d in self.unit_dims().items():
            total += float(_interp(self.grid[u], self.values[u], float(widths.get(u, d))))
        return total

    def measure(self, **changes):
        return None  # not measured: its count is what it is

    def count_model(self, model):
        return None  # no network counted

    def context_warnings(self, *args, **kwargs):
        return []

    def at(self, kept, hidden_kept=None, heads_kept=None):
        w = {(CHANNELS, n): v for n, v in kept.items()}
        w.update(((HIDDEN, k), v) for k, v in (hidden_kept or {}).items())
        return self.count(w)

    def marginal(self, unit, widths):
        w = dict(self.unit_dims())
        w.update(widths)
        less = dict(w)
        less[unit] = w[unit] - 1
        return self.count(w) - self.count(less)

    def expected(self, selectors, expectation='gate', hidden=None, heads=None):
        total = torch.zeros(())
        for (kind, name), d in self.unit_dims().items():
            table = selectors if kind == CHANNELS else (hidden or {})
            w = table[name].expected_kept(expectation) if name in table else float(d)
            total = total + _interp(self.grid[(kind, name)], self.values[(kind, name)], w)
        return total + self.const

    @property
    def ceiling(self):
        return self.count({})

    @property
    def floor(self):
        return self.floor_at(1)

    def floor_at(self, multiple_of=1):
        m = max(1, int(multiple_of))
        return self.count({u: min(m, d) for u, d in self.unit_dims().items()})

    def ratio(self, count):
        return count / self.baseline

    def check_target(self, ratio, name, multiple_of=1):
        floor, ceiling = self.ratio(self.floor_at(multiple_of)), 1.
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or math.isnan(ratio) \
                or not floor < ratio < ceiling:
            raise BudgetError(f'{name} = {ratio!r} cannot be met: between the floor {floor:.4f} '
                              f'and the ceiling {ceiling}')
        return ratio * self.baseline


def synthetic_latency_table(backbone, input_shape, baseline_ms=None, const_ms=2.0, **extra):
    """A latency table (the format of mmdcs.analysis.latency_table, made up rather than timed)
    for an mmdcs supernet backbone: every prunable block and hidden-selected module a unit on a
    grid of multiples of 8, its time non-linear in the widths (a GEMM's time: a fixed part plus
    a part in D̃·H̃, with a penalty for widths that are not multiples of 32); with
    ``select_heads`` every head-selected attention a unit over its head counts."""
    from mmdcs.selection import head_selectors, hidden_selectors, prunable_modules
    from mmdcs.selection.latency_cost import LATENCY_TABLE_FORMAT, selection_options

    def grid(n):
        return sorted({min(8, n)} | set(range(8, n, 8)) | {n})

    def t(d, h, i):
        slow = 1.15 if (d % 32 or h % 32) else 1.0
        return (0.02 + 1e-5 * (1 + 0.1 * (i % 4)) * d * h * slow)

    dims = {n: int(m.select.dim) for n, m in prunable_modules(backbone).items()}
    hdims = {k: int(s.dim) for k, s in hidden_selectors(backbone).items()}
    units = []
    for i, (n, d) in enumerate(dims.items()):
        if n in hdims:
            h = hdims[n]
            units.append(dict(path=n, channels=d, hidden=h, grid_channels=grid(d),
                              grid_hidden=grid(h),
                              ms=[[t(x, y, i) for y in grid(h)] for x in grid(d)]))
        else:
            units.append(dict(path=n, channels=d, hidden=None, grid_channels=grid(d),
                              ms=[t(x, 4 * d, i) for x in grid(d)]))
    for i, (k, h) in enumerate(hdims.items()):
        if k not in dims:
            units.append(dict(path=k, channels=None, hidden=h, grid_hidden=grid(h),
                              ms=[t(64, y, i) for y in grid(h)]))
    # head-selected attentions (select_heads): every head count, a fixed part and a part per
    # head, larger than a group of channels' (as measured: a head is d channels of q, k, v)
    for i, (k, a) in enumerate(head_selectors(backbone).items()):
        units.append(dict(path=k, heads=int(a.dim), grid_heads=list(range(1, a.dim + 1)),
                          ms=[0.03 + 0.02 * (1 + 0.1 * (i % 3)) * n
                              for n in range(1, a.dim + 1)]))
    full = const_ms + sum(u['ms'][-1][-1] if u.get('channels') and u.get('hidden')
                          else u['ms'][-1] for u in units)
    table = dict(format=LATENCY_TABLE_FORMAT, arch=backbone.arch, variant=backbone.variant,
                 selection=selection_options(backbone), input_shape=list(input_shape), batch=1,
                 threads=1, dtype='fp32', device='cpu', device_name='Synthetic CPU',
                 torch='synthetic', baseline_ms=baseline_ms or full * 0.98, const_ms=const_ms,
                 units=units)
    table.update(extra)
    return table


def synthetic_meters(monkeypatch, ms, skew=1.1, table=True):
    """Every meter of the harness (``mmdcs.analysis.latency.Meter``) synthetic: a latency
    table's (``min_time`` > 0) reads ``ms(module)`` ms per call; a measurement's reads it on the
    thread clock and ``skew`` times it for a pruned network on the wall clock (so the two
    measured ratios differ). ``table=False``: building a table is an error (a kept table must
    be read, not measured again). Returns the list of the clocks each meter was made for."""
    import mmdcs.analysis.latency as latency
    from mmdcs.models.backbones.base import SelectableBackbone
    made = []

    def measurement(fn, module):
        s = ms(module) / 1e3
        base = isinstance(module, SelectableBackbone) and module.variant == 'baseline'
        return dict(thread=s, wall=s * (1. if base else skew))

    def factory(clocks=('wall', ), min_time=0., **kw):
        made.append(list(clocks))
        if min_time > 0 and not table:
            raise AssertionError('the kept table must be read, not measured again')
        return (lambda fn, module: ms(module) / 1e3) if min_time > 0 else measurement
    monkeypatch.setattr(latency, 'Meter', factory)
    return made
