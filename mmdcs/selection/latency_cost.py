"""A latency budget (method.md §11): the latency of a supernet's pruned networks on one device,
predicted from a table measured there (HALP / NViT style lookup table).

:class:`LatencyCost` has the public interface of :class:`~mmdcs.selection.budget.LinearCost`
(same unit keys ``(CHANNELS, block)`` / ``(HIDDEN, path)`` / ``(HEADS, attention)``, same method
names and meanings), with ``resource = 'latency'`` and milliseconds as the unit:

    latency(widths) = const + Σ_u T_u(widths of u)

* a channel-only unit (a block's MLP channels D̃, its hidden width fixed) or a hidden-only unit
  (a convolutional FFN's expanded channels H̃): ``T_u`` is piecewise linear between the measured
  widths of its grid;
* a block's MLP searched over kept channels *and* kept hidden units: ``T_u(D̃, H̃)`` is bilinear
  in each cell of its (D̃, H̃) grid;
* an attention searched over its heads (``select_heads``, method.md §2.7; format 2): ``T_u(A)``
  is piecewise linear in the kept heads A between the head counts of its grid (every count for
  a few heads), so in the search it is taken at E[A] = Σ sigmoid(α).

Below the smallest measured width the first segment is extended (and the time clipped at 0);
widths are capped at the full width. ``const`` is the time of everything no width changes.
The table (a plain dict, the JSON file ``mmdcs.analysis.latency_table`` writes) also records where
it was measured; :meth:`LatencyCost.context_warnings` names a device, thread count, batch or
dtype that differs from the one it is used for.

:func:`read_table` (:meth:`LatencyCost.from_file`) is the one reader of a table file: JSON only
(nothing in it runs), every check of a table's content in one place, one
:class:`LatencyTableError` line naming the file.

Framework-free: plain PyTorch.
"""
import bisect
import math
import os.path as osp
import warnings
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from mmdcs.checks import check_timing

from .budget import CHANNELS, HEADS, HIDDEN, LATENCY_TOLERANCE, CostBounds, Measure
from .jsonio import read_json
from .subnet import head_selectors, hidden_selectors, prunable_modules

#: the format tag of a latency table (2: head units, ``select_heads``)
LATENCY_TABLE_FORMAT = 'mmdcs.latency_table/2'
#: the formats read: 1 (channel and hidden units only) still loads, for models without heads
LATENCY_TABLE_FORMATS = ('mmdcs.latency_table/1', LATENCY_TABLE_FORMAT)
#: keys every table file has besides its units and times (checked by :func:`read_table`)
REQUIRED_KEYS = ('arch', 'variant', 'selection', 'input_shape', 'batch', 'threads', 'dtype',
                 'device', 'device_name', 'torch')
#: the dtypes and devices a table can be measured with
TABLE_DTYPES = ('fp32', 'fp16', 'bf16')
TABLE_DEVICES = ('cpu', 'cuda')
#: the runtime of a table that does not name one (tables measured before runtimes were
#: recorded: PyTorch eager)
DEFAULT_RUNTIME = 'torch'

Unit = Tuple[str, str]


class LatencyTableError(ValueError):
    """A latency table that is malformed or does not fit the backbone it is used with."""


def _segment(grid: Sequence[float], w: float) -> int:
    """Index i of the segment [grid[i], grid[i+1]] that holds ``w`` from the left
    (grid[i] < w ≤ grid[i+1]); the first segment below the grid, the last above it."""
    i = bisect.bisect_left(grid, w) - 1
    return min(max(i, 0), len(grid) - 2)


class _Curve:
    """Piecewise-linear T(w) over a sorted grid (one point: a constant)."""

    def __init__(self, grid: Sequence[float], ms: Sequence[float]):
        self.grid = [float(g) for g in grid]
        self.ms = [float(t) for t in ms]

    def slope(self, w: float) -> float:
        if len(self.grid) < 2:
            return 0.
        i = _segment(self.grid, w)
        g = self.grid
        return (self.ms[i + 1] - self.ms[i]) / (g[i + 1] - g[i])

    def value(self, w):
        """T(w) for a float or a tensor (differentiable: slope of the segment that holds the
        detached value)."""
        if len(self.grid) < 2:
            return w * 0 + self.ms[0] if isinstance(w, Tensor) else self.ms[0]
        wf = float(w.detach()) if isinstance(w, Tensor) else float(w)
        i = _segment(self.grid, wf)
        out = self.ms[i] + (w - self.grid[i]) * self.slope(wf)
        return out.clamp_min(0.) if isinstance(out, Tensor) else max(out, 0.)


class _Surface:
    """Bilinear T(d, h) over a (D̃ grid) × (H̃ grid); ``ms[i][j]`` at (d_grid[i], h_grid[j])."""

    def __init__(self, d_grid: Sequence[float], h_grid: Sequence[float],
                 ms: Sequence[Sequence[float]]):
        self.d = _Curve(d_grid, [0.] * len(d_grid)).grid
        self.h = _Curve(h_grid, [0.] * len(h_grid)).grid
        self.ms = [[float(t) for t in row] for row in ms]

    def _cell(self, d: float, h: float):
        i = _segment(self.d, d) if len(self.d) > 1 else 0
        j = _segment(self.h, h) if len(self.h) > 1 else 0
        return i, j

    def _weights(self, grid, i, w):
        """(index pairs, interpolation fraction) along one axis."""
        if len(grid) < 2:
            return (i, i), w * 0
        return (i, i + 1), (w - grid[i]) / (grid[i + 1] - grid[i])

    def value(self, d, h):
        df = float(d.detach()) if isinstance(d, Tensor) else float(d)
        hf = float(h.detach()) if isinstance(h, Tensor) else float(h)
        i, j = self._cell(df, hf)
        (i0, i1), s = self._weights(self.d, i, d)
        (j0, j1), t = self._weights(self.h, j, h)
        m = self.ms
        out = ((1 - s) * (1 - t) * m[i0][j0] + s * (1 - t) * m[i1][j0]
               + (1 - s) * t * m[i0][j1] + s * t * m[i1][j1])
        return out.clamp_min(0.) if isinstance(out, Tensor) else max(out, 0.)

    def slope_d(self, d: float, h: float) -> float:
        if len(self.d) < 2:
            return 0.
        i, _ = self._cell(d, h)
        return ((self.value(self.d[i + 1], h) - self.value(self.d[i], h))
                / (self.d[i + 1] - self.d[i]))

    def slope_h(self, d: float, h: float) -> float:
        if len(self.h) < 2:
            return 0.
        _, j = self._cell(d, h)
        return ((self.value(d, self.h[j + 1]) - self.value(d, self.h[j]))
                / (self.h[j + 1] - self.h[j]))


def _num(x, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(float(x)):
        raise LatencyTableError(f'{what} must be a finite number, got {x!r}')
    return float(x)


def _grid(values, full: int, what: str) -> List[int]:
    if not isinstance(values, list) or not values:
        raise LatencyTableError(f'{what} must be a non-empty list of widths')
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= full:
            raise LatencyTableError(f'{what}: width {v!r} is not an integer in [1, {full}]')
        out.append(v)
    if out != sorted(set(out)):
        raise LatencyTableError(f'{what} must be strictly increasing')
    if out[-1] != full:
        raise LatencyTableError(f'{what} must end at the full width {full}')
    return out


def _ms_list(values, n: int, what: str) -> List[float]:
    if not isinstance(values, list) or len(values) != n:
        raise LatencyTableError(f'{what} must be a list of {n} times (ms)')
    out = [_num(v, what) for v in values]
    if any(v < 0 for v in out):
        raise LatencyTableError(f'{what}: negative time')
    return out


def _spreads(u: dict, ms, what: str):
    """A unit's ``spread`` (the relative range of each entry's rounds, the shape of its ``ms``),
    or None where the table records none."""
    sp = u.get('spread')
    if sp is None:
        return None
    rows = ms if ms and isinstance(ms[0], list) else [ms]
    sp_rows = sp if isinstance(sp, list) and sp and isinstance(sp[0], list) else [sp]
    if not isinstance(sp, list) or len(sp_rows) != len(rows) or any(
            not isinstance(r, list) or len(r) != len(t) for r, t in zip(sp_rows, rows)):
        raise LatencyTableError(f'{what}: "spread" must have the shape of "ms"')
    return [[_num(v, what + ': spread') for v in r] for r in sp_rows]


def off_line(grid: Sequence[float], ms: Sequence[float], i: int) -> float:
    """How far the time ``ms[i]`` lies above the straight line through its neighbours
    (``grid[i - 1]``, ``grid[i + 1]``): the table builder's test for where a curve bends, and
    the predictor's for whether a step is noise."""
    a, w, b = grid[i - 1], grid[i], grid[i + 1]
    return ms[i] - (ms[i - 1] + (ms[i + 1] - ms[i - 1]) * (w - a) / (b - a))


def step_is_noise(grid: Sequence[int], lines: Sequence[Sequence[float]],
                  spreads: Sequence[Sequence[float]], multiple_of: int) -> bool:
    """Whether a unit's entry one group below its full width (``grid[-2]``, measured to see the
    step in time when the first group goes: a gather / scatter that comes in) is off the
    straight line through its neighbours by no more than its noise: the mean deviation over the
    ``lines`` along that axis (a pair: one at every width of the other axis) within the mean of
    the entries' rounds' range (ms · spread) over √(number of lines). Such a step is none: the
    point is left out and the time is linear there. A step that every line shows (a residual
    channel's gather) stays; one whose sign the noise sets (a hidden unit's) goes — before, the
    sign of a step of a few hundredths of a millisecond decided whether a unit's first group
    could go at all, and two builds of one table gave subnets 0.017 of the FLOPs apart."""
    if len(grid) < 3 or grid[-1] - grid[-2] > max(1, int(multiple_of)):
        return False
    off = [off_line(grid, ms, len(grid) - 2) for ms in lines]
    noise = [ms[-2] * sp[-2] for ms, sp in zip(lines, spreads)]
    n = len(off)
    return abs(sum(off) / n) <= sum(noise) / n / math.sqrt(n)


def _cut(values: list) -> list:
    """``values`` without the one before the last (the step point of a grid)."""
    return values[:-2] + values[-1:]


def _noise_free_curve(grid: List[int], ms: List[float], sp, m: int) -> '_Curve':
    """A channel-only or hidden-only unit's curve, its step point left out where it is noise
    (:func:`step_is_noise`)."""
    if sp is not None and step_is_noise(grid, [ms], sp, m):
        grid, ms = _cut(grid), _cut(ms)
    return _Curve(grid, ms)


def _noise_free_surface(dg: List[int], hg: List[int], rows: List[List[float]], sp,
                        m: int) -> '_Surface':
    """A pair's surface, its step row (channels) and / or column (hidden units) left out where
    it is noise over the widths of the other axis (:func:`step_is_noise`)."""
    if sp is not None:
        cut_d = step_is_noise(dg, [list(c) for c in zip(*rows)], [list(c) for c in zip(*sp)], m)
        cut_h = step_is_noise(hg, rows, sp, m)
        if cut_d:
            dg, rows = _cut(dg), _cut(rows)
        if cut_h:
            hg, rows = _cut(hg), [_cut(r) for r in rows]
    return _Surface(dg, hg, rows)


class TableUnits(NamedTuple):
    """The unit entries of a table (:func:`parse_units`)."""
    #: channel-only units: block → T(D̃); hidden-only: path → T(H̃); pairs: block → T(D̃, H̃);
    #: heads: attention → T(A)
    chan: Dict[str, _Curve]
    hid: Dict[str, _Curve]
    pair: Dict[str, _Surface]
    heads: Dict[str, _Curve]
    #: full widths: block → D, path → H, attention → number of heads
    dims: Dict[str, int]
    hidden_dims: Dict[str, int]
    head_dims: Dict[str, int]
    #: block → the path of its hidden selector (the pairs)
    pair_hidden: Dict[str, str]


def parse_units(table: dict) -> TableUnits:
    """The unit entries of a table; raises :class:`LatencyTableError` naming the entry on any
    malformed one. An entry has a ``path`` and either ``channels`` and / or ``hidden`` (full
    widths, ``grid_channels`` / ``grid_hidden``), or ``heads`` (the attention's number of heads,
    ``grid_heads``; format 2 only); ``ms`` the times on the grid (a pair: rows over channels of
    times over hidden units), ``spread`` (optional, its shape) their rounds' relative range: a
    channel or hidden axis's step point that is within it of the line is left out
    (:func:`step_is_noise`)."""
    units = table.get('units')
    if not isinstance(units, list) or not units:
        raise LatencyTableError('"units" must be a non-empty list')
    with_heads = table.get('format') != LATENCY_TABLE_FORMATS[0]
    m = int(table.get('multiple_of') or 8)
    chan, hid, pair, heads, dims, hdims, adims, pair_hidden = ({} for _ in range(8))
    for k, u in enumerate(units):
        if not isinstance(u, dict) or not isinstance(u.get('path'), str):
            raise LatencyTableError(f'units entry #{k} must be an object with a "path"')
        p = u['path']
        d, h, a = u.get('channels'), u.get('hidden'), u.get('heads')
        for val, what in ((d, 'channels'), (h, 'hidden'), (a, 'heads')):
            if val is not None and (isinstance(val, bool) or not isinstance(val, int)
                                    or val < 1):
                raise LatencyTableError(f'unit {p}: "{what}" must be a positive width or null')
        ms = u.get('ms')
        if a is not None:
            if not with_heads:
                raise LatencyTableError(f'unit {p}: head units need format '
                                        f'{LATENCY_TABLE_FORMAT!r}')
            if d is not None or h is not None:
                raise LatencyTableError(f'unit {p}: a head unit has no "channels" or "hidden" '
                                        '(list them in an entry of their own)')
            if p in adims:
                raise LatencyTableError(f'unit {p} (heads) is listed twice')
            ag = _grid(u.get('grid_heads'), a, f'unit {p}: grid_heads')
            heads[p] = _Curve(ag, _ms_list(ms, len(ag), f'unit {p}: ms'))
            adims[p] = a
            continue
        if p in dims or p in hdims:
            raise LatencyTableError(f'unit {p} is listed twice')
        if d is None and h is None:
            raise LatencyTableError(f'unit {p}: neither "channels", "hidden" nor "heads" is '
                                    'selected')
        if d is not None and h is not None:
            dg = _grid(u.get('grid_channels'), d, f'unit {p}: grid_channels')
            hg = _grid(u.get('grid_hidden'), h, f'unit {p}: grid_hidden')
            if not isinstance(ms, list) or len(ms) != len(dg):
                raise LatencyTableError(f'unit {p}: "ms" must be {len(dg)} rows (channels) of '
                                        f'{len(hg)} times (hidden)')
            rows = [_ms_list(r, len(hg), f'unit {p}: ms row {i}') for i, r in enumerate(ms)]
            pair[p] = _noise_free_surface(dg, hg, rows, _spreads(u, rows, f'unit {p}'), m)
            dims[p], hdims[p], pair_hidden[p] = d, h, p
        elif d is not None:
            dg = _grid(u.get('grid_channels'), d, f'unit {p}: grid_channels')
            t = _ms_list(ms, len(dg), f'unit {p}: ms')
            chan[p] = _noise_free_curve(dg, t, _spreads(u, t, f'unit {p}'), m)
            dims[p] = d
        else:
            hg = _grid(u.get('grid_hidden'), h, f'unit {p}: grid_hidden')
            t = _ms_list(ms, len(hg), f'unit {p}: ms')
            hid[p] = _noise_free_curve(hg, t, _spreads(u, t, f'unit {p}'), m)
            hdims[p] = h
    return TableUnits(chan, hid, pair, heads, dims, hdims, adims, pair_hidden)


class LatencyCost(CostBounds):
    """Predicted latency (ms) of the pruned networks of a supernet: ``const + Σ_u T_u``
    interpolated in a measured table (see the module docs). Interface and semantics of
    :class:`~mmdcs.selection.budget.LinearCost`; ``resource = 'latency'``.

    Args:
        table: a latency table (dict; :func:`read_table` reads and checks a file,
            :meth:`from_file` builds the cost from one). Its ``baseline_ms`` is the measured
            baseline network (what a target ratio multiplies), ``const_ms`` the time no width
            changes.
    """
    resource = 'latency'
    #: the ranking weighs each unit by the FLOPs an element does, not by its time: what is
    #: slow per FLOP goes first (docs/budgets.md, "Which prior for a latency target")
    prior = 'flops'

    def __init__(self, table: dict):
        if not isinstance(table, dict):
            raise LatencyTableError('a latency table must be a JSON object')
        if table.get('format') not in LATENCY_TABLE_FORMATS:
            raise LatencyTableError(f'not an mmdcs latency table (expected "format": '
                                    f'{" or ".join(map(repr, LATENCY_TABLE_FORMATS))}, got '
                                    f'{table.get("format")!r})')
        try:  # what a measurement with the table's settings would run (a missing key: below)
            check_timing(table.get('batch', 1), table.get('threads', 1), here=False)
        except ValueError as e:
            raise LatencyTableError(f'the table\'s {e}') from None
        self.table = table
        self.baseline = _num(table.get('baseline_ms'), 'baseline_ms')
        if self.baseline <= 0:
            raise LatencyTableError('baseline_ms must be positive')
        self.const = _num(table.get('const_ms'), 'const_ms')
        u = parse_units(table)
        self._chan, self._hid, self._pair, self._heads = u.chan, u.hid, u.pair, u.heads
        self.dims, self.hidden_dims, self.head_dims = u.dims, u.hidden_dims, u.head_dims
        self.pair_hidden = u.pair_hidden
        shape = table.get('input_shape')
        self.input_size = tuple(shape) if isinstance(shape, list) else None
        self.meta = {k: table.get(k) for k in ('arch', 'variant', 'device_name', 'threads',
                                               'batch', 'dtype')}
        self.meta['runtime'] = self.runtime
        #: a measured miss beyond it is refused (docs/budgets.md: 0.70 asked, 0.70 ± 0.03)
        self.tolerance = LATENCY_TOLERANCE
        #: kept widths in groups of the table's grid step unless told otherwise
        self.multiple_of = int(table.get('multiple_of') or 8)

    @property
    def runtime(self) -> str:
        """The runtime the table was measured in (``'torch'`` where it names none)."""
        return str(self.table.get('runtime') or DEFAULT_RUNTIME)

    def measure(self, **changes) -> Measure:
        """Where and how the table was measured, as a :class:`Measure` (its runtime, device,
        threads, batch, dtype and clock), with ``changes`` (those not None). A runtime other
        than the table's is one :class:`LatencyTableError` line: its predictions are of
        another program."""
        runtime = changes.pop('runtime', None)
        if runtime is not None and runtime != self.runtime:
            raise LatencyTableError(
                f'the latency table was measured in the {self.runtime} runtime, not '
                f'{runtime}: measure a table with tools/analysis/latency_table.py --runtime '
                f'{runtime}')
        t = self.table
        threads = t.get('threads') if isinstance(t.get('threads'), int) else None
        clock = t.get('clock') if t.get('clock') in ('wall', 'thread') else None
        if clock is None:
            clock = 'thread' if t.get('device') == 'cpu' and threads == 1 else 'wall'
        return Measure(runtime=self.runtime, device=str(t.get('device') or 'cpu'),
                       threads=threads, batch=int(t.get('batch') or 1),
                       dtype=str(t.get('dtype') or 'fp32'), clock=clock).replace(**changes)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_table(cls, table: dict, backbone: nn.Module,
                   input_size: Optional[Sequence[int]] = None) -> 'LatencyCost':
        """The cost of ``table`` for ``backbone`` (an mmdcs supernet); a
        :class:`LatencyTableError` naming what differs when the table was measured for another
        arch, variant, selection options, input size (``input_size``, or the backbone's own for
        a family built for one) or units."""
        cost = cls(table)
        cost.check_backbone(backbone, input_size)
        return cost

    @classmethod
    def from_file(cls, path: str, backbone: Optional[nn.Module] = None,
                  input_size: Optional[Sequence[int]] = None) -> 'LatencyCost':
        """The cost of the table file at ``path`` (:func:`read_table`), checked against
        ``backbone`` when given (:meth:`check_backbone`); every refusal is one
        :class:`LatencyTableError` line that names the file."""
        cost = cls(read_table(path))
        if backbone is not None:
            try:
                cost.check_backbone(backbone, input_size)
            except LatencyTableError as e:
                raise LatencyTableError(f'{path}: {e}') from e
        return cost

    def check_backbone(self, backbone: nn.Module,
                       input_size: Optional[Sequence[int]] = None) -> None:
        t = self.table
        for key, have in (('arch', getattr(backbone, 'arch', None)),
                          ('variant', getattr(backbone, 'variant', None))):
            if t.get(key) != have:
                raise LatencyTableError(f'the latency table is for {key} {t.get(key)!r}, this '
                                        f'backbone is {have!r}')
        heads = {k: int(s.dim) for k, s in head_selectors(backbone).items()}
        if heads and not self.head_dims:
            raise LatencyTableError(
                'the latency table has no head units (measured without select_heads) and this '
                'backbone selects heads: measure its table with tools/analysis/latency_table.py')
        want = selection_options(backbone)
        got = dict(t.get('selection') or {})
        got.setdefault('select_heads', False)  # format 1: no heads
        diff = [f'{k}={got.get(k)!r} (table) vs {v!r} (backbone)' for k, v in want.items()
                if got.get(k) != v]
        if diff:
            raise LatencyTableError('the latency table was measured with other selection '
                                    'options: ' + ', '.join(diff))
        if input_size is None and getattr(backbone, 'takes_img_size', False):
            input_size = backbone.input_size
        if input_size is not None and self.input_size is not None and \
                tuple(int(s) for s in input_size) != tuple(self.input_size):
            raise LatencyTableError(
                f'the latency table was measured at input {"x".join(map(str, self.input_size))}'
                f', this model runs at {"x".join(str(int(s)) for s in input_size)}')
        dims = {n: int(m.select.dim) for n, m in prunable_modules(backbone).items()}
        hdims = {k: int(s.dim) for k, s in hidden_selectors(backbone).items()}
        for what, table_dims, model_dims in (('channel', self.dims, dims),
                                             ('hidden', self.hidden_dims, hdims),
                                             ('head', self.head_dims, heads)):
            missing = [n for n in model_dims if n not in table_dims]
            extra = [n for n in table_dims if n not in model_dims]
            if missing or extra:
                raise LatencyTableError(
                    f'the latency table\'s {what} units do not match the backbone\'s'
                    + (f'; not in the table: {", ".join(missing[:4])}' if missing else '')
                    + (f'; not in the backbone: {", ".join(extra[:4])}' if extra else ''))
            for n, d in model_dims.items():
                if table_dims[n] != d:
                    raise LatencyTableError(f'unit {n}: the latency table has {what} width '
                                            f'{table_dims[n]}, the backbone {d}')

    def context_warnings(self, device_name: Optional[str] = None,
                         threads: Optional[int] = None, batch: Optional[int] = None,
                         dtype: Optional[str] = None, warn: bool = True) -> List[str]:
        """Where the table is used on another device, thread count, batch or dtype than it
        was measured on: one message per difference naming both (and a ``UserWarning`` each
        with ``warn``). A table is valid for the machine it was measured on."""
        out = []
        for key, now in (('device_name', device_name), ('threads', threads), ('batch', batch),
                         ('dtype', dtype)):
            then = self.table.get(key)
            if now is not None and then is not None and now != then:
                out.append(f'the latency table was measured with {key} = {then!r}, it is used '
                           f'with {key} = {now!r}: its predictions may not hold here')
        if warn:
            for msg in out:
                warnings.warn(msg, stacklevel=2)
        return out

    # ------------------------------------------------------------------ the count
    def at(self, kept: Dict[str, float],
           hidden_kept: Optional[Dict[str, float]] = None,
           heads_kept: Optional[Dict[str, float]] = None) -> float:
        """The predicted latency (ms) with ``kept[name]`` channels in every block (and
        ``hidden_kept[path]`` hidden units in every hidden-selected module, ``heads_kept[path]``
        heads in every head-selected attention; default: all)."""
        h = dict(self.hidden_dims, **(hidden_kept or {}))
        a = dict(self.head_dims, **(heads_kept or {}))
        total = self.const
        for k, c in self._heads.items():
            total += c.value(min(float(a[k]), self.head_dims[k]))
        for n, c in self._chan.items():
            total += c.value(min(float(kept[n]), self.dims[n]))
        for n, s in self._pair.items():
            total += s.value(min(float(kept[n]), self.dims[n]),
                             min(float(h[n]), self.hidden_dims[n]))
        for k, c in self._hid.items():
            total += c.value(min(float(h[k]), self.hidden_dims[k]))
        return total

    def unit_dims(self) -> Dict[Unit, int]:
        """Every prunable unit, ``(CHANNELS, block)``, ``(HIDDEN, path)`` and
        ``(HEADS, attention)``, → its full width."""
        out = {(CHANNELS, n): int(d) for n, d in self.dims.items()}
        out.update(((HIDDEN, k), int(h)) for k, h in self.hidden_dims.items())
        out.update(((HEADS, k), int(a)) for k, a in self.head_dims.items())
        return out

    def count(self, widths: Dict[Unit, float]) -> float:
        """The predicted latency at the widths of :meth:`unit_dims`' units (missing: full
        width)."""
        kept = {n: widths.get((CHANNELS, n), d) for n, d in self.dims.items()}
        hidden = {k: widths.get((HIDDEN, k), h) for k, h in self.hidden_dims.items()}
        heads = {k: widths.get((HEADS, k), a) for k, a in self.head_dims.items()}
        return self.at(kept, hidden, heads)

    def marginal(self, unit: Unit, widths: Dict[Unit, float]) -> float:
        """d latency / d width of ``unit`` at ``widths``: the slope of the table's segment
        just below the width (g_i < w ≤ g_{i+1}), so removing a group that stays inside one
        segment (groups of 8 on a grid of multiples of 8) saves exactly ``size·marginal``; in
        a bilinear unit the slope at the other width's current value. A head's: the slope of
        its attention's curve just below the kept heads (one head apart where the grid has every
        count)."""
        kind, name = unit
        if kind == CHANNELS:
            d = float(widths.get((CHANNELS, name), self.dims[name]))
            if name in self._pair:
                h = float(widths.get((HIDDEN, name), self.hidden_dims[name]))
                return self._pair[name].slope_d(min(d, self.dims[name]),
                                                min(h, self.hidden_dims[name]))
            return self._chan[name].slope(min(d, self.dims[name]))
        if kind == HIDDEN:
            h = float(widths.get((HIDDEN, name), self.hidden_dims[name]))
            if name in self._pair:
                d = float(widths.get((CHANNELS, name), self.dims[name]))
                return self._pair[name].slope_h(min(d, self.dims[name]),
                                                min(h, self.hidden_dims[name]))
            return self._hid[name].slope(min(h, self.hidden_dims[name]))
        if kind == HEADS:
            a = float(widths.get((HEADS, name), self.head_dims[name]))
            return self._heads[name].slope(min(a, self.head_dims[name]))
        raise KeyError(f'unknown unit kind {kind!r}')

    def floor_at(self, multiple_of: int = 1) -> float:
        """Every block and hidden-selected module down to one group of ``multiple_of``
        channels / hidden units (its full width if that is smaller), every head-selected
        attention to one head (heads are never rounded up)."""
        m = max(1, int(multiple_of))
        return self.at({n: min(m, d) for n, d in self.dims.items()},
                       {k: min(m, h) for k, h in self.hidden_dims.items()},
                       {k: 1 for k in self.head_dims})

    #: a latency target is a ratio of the measured baseline; its floor is a prediction
    _ratio_of = 'latency'
    _floor_name = 'predicted floor'

    def _baseline_phrase(self) -> str:
        where = ', '.join(str(v) for v in (
            'x'.join(map(str, self.input_size)) if self.input_size else None,
            f'batch {self.table.get("batch")}' if self.table.get('batch') else None,
            f'{self.table.get("threads")} thread(s)' if self.table.get('threads') else None,
            self.table.get('device_name')) if v)
        return f'measured latency ({self.baseline:.3f} ms{" at " + where if where else ""})'

    def expected(self, selectors: Dict[str, nn.Module], expectation: str = 'gate',
                 hidden: Optional[Dict[str, nn.Module]] = None,
                 heads: Optional[Dict[str, nn.Module]] = None) -> Tensor:
        """The differentiable predicted latency at E[D̃_j] from each block's selector (and
        E[H̃_k] from each hidden selector in ``hidden``, E[A_k] = Σ sigmoid(α) from each head
        selector in ``heads``, path → selector; others at full width): piecewise linear in a
        channel-only, hidden-only or head unit, bilinear in a block's MLP over (E[D̃], E[H̃]),
        so its gradient is the table's slope there."""
        d = {n: selectors[n].expected_kept(expectation) for n in self.dims}
        h = {k: (hidden[k].expected_kept(expectation) if hidden and k in hidden
                 else float(self.hidden_dims[k])) for k in self.hidden_dims}
        a = {k: (heads[k].expected_kept(expectation) if heads and k in heads
                 else float(self.head_dims[k])) for k in self.head_dims}
        ref = next(iter(d.values())) if d else next(
            (v for v in list(h.values()) + list(a.values()) if isinstance(v, Tensor)),
            torch.zeros(()))
        total = ref.new_tensor(self.const) if isinstance(ref, Tensor) else torch.tensor(
            self.const)
        for n, c in self._chan.items():
            total = total + c.value(d[n])
        for n, s in self._pair.items():
            total = total + s.value(d[n], h[n])
        for k, c in self._hid.items():
            total = total + c.value(h[k])
        for k, c in self._heads.items():
            total = total + c.value(a[k])
        return total


def selection_options(backbone: nn.Module) -> dict:
    """What a latency table must have been measured with besides arch and variant: the
    backbone's selection options (the Q/K selection, hidden-unit selection, Linear_θ rank,
    head selection; a table of format 1 has no ``select_heads``: False)."""
    return dict(qk_select=getattr(backbone, 'qk_select', None),
                mlp_select=bool(getattr(backbone, 'mlp_select', False)),
                select_hidden=getattr(backbone, 'select_hidden', False),
                theta_rank=getattr(backbone, 'theta_rank', None),
                select_heads=bool(head_selectors(backbone)))


def read_table(path: str) -> dict:
    """A latency table file (JSON; nothing in it is executed), checked: its units and times
    (:class:`LatencyCost`), the keys every table has, its input shape, dtype and device. One
    :class:`LatencyTableError` line naming the file and the problem when it is missing,
    corrupt, truncated or not a table. The one reader of table files (the budget resource
    ``latency``, the table and latency tools)."""
    if not osp.isfile(str(path)):
        raise LatencyTableError(f'latency table not found: {path}')
    table = read_json(path, LatencyTableError, 'latency table', expect=None)
    try:
        LatencyCost(table)
        missing = [k for k in REQUIRED_KEYS if k not in table]
        if missing:
            raise LatencyTableError(f'missing {", ".join(missing)}')
        shape = table['input_shape']
        if (not isinstance(shape, list) or len(shape) != 2
                or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0
                           for s in shape)):
            raise LatencyTableError('"input_shape" must be [H, W]')
        if table['dtype'] not in TABLE_DTYPES or table['device'] not in TABLE_DEVICES:
            raise LatencyTableError(f'unknown dtype {table["dtype"]!r} or device '
                                    f'{table["device"]!r}')
    except LatencyTableError as e:
        raise LatencyTableError(f'{path}: not a valid latency table ({e})') from e
    return table
