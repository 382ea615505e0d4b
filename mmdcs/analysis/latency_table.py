"""A supernet's latency table on one device: the measurements behind
:class:`~mmdcs.selection.latency_cost.LatencyCost` (HALP / NViT style lookup table).

What is measured (:func:`build_table`):

* every prunable **unit** — a block's MLP channels D̃ (channel-only), its MLP over kept channels
  × kept hidden units (``select_hidden``: a pair, bilinear), or a convolutional FFN's expanded
  channels H̃ (hidden-only) — is timed as the module around it that the real forward calls on
  its own and that holds no other unit (a ViT / Swin / MobileViT transformer layer around its
  MLP, an inverted bottleneck around its expanded channels), **re-run on the input it received
  in the real network** at those widths (captured with a forward pre-hook: same input size,
  same neighbours), plus every layer outside it that reads the unit's kept channels
  (MobileViT's projection conv after the last transformer layer of a block);
* with ``select_heads``, every head-selected **attention** is a unit of its own (its time as a
  function of its kept heads, on :func:`head_grid`: every count up to 16), timed the same way
  (the attention module re-run on its real input inside the pruned network); the module of a
  unit that holds such an attention (a ViT block around its MLP) is timed whole and the
  attention's time subtracted (:func:`nested_modules`), so the block's other operations stay
  with its MLP unit as without heads;
* on a **grid** of widths per unit: multiples of 8 (``multiple_of``) from 8 up, the step
  growing with the width (about half of it: 8, 16, 24, 32, 48, 72, 104, 152, 224, 336, 504, …,
  and the full width): fine where a narrow GEMM's fixed costs and kernel changes bend the
  curve, coarse where the time is close to linear in the width (:func:`width_grid`). A pair
  unit is measured on the product of its channel and hidden grids. All units are set to their
  k-th grid point in one pruned network, so one network per grid point is built;
* the **constant** — the time of everything no width changes — is the whole network's time
  minus its units', at every grid point; the table keeps their median (and their spread);
* the **baseline** network (no selection), timed in the rounds of every grid point too: a
  shared machine's load drifts over minutes, so each grid point's times are scaled by the
  baseline timed beside them (to the median of those baselines, the table's ``baseline_ms``);
  the pruned network at full width is timed interleaved with the baseline at the start.

Every timing goes through the one harness, :func:`mmdcs.analysis.latency.time_interleaved`:
``meter(fn, module)`` → seconds per call (injectable: the tests use a synthetic one; default a
:class:`~mmdcs.analysis.latency.Meter` on the table's clock), in ``rounds`` rounds that
interleave every timed module of a grid point (the order rotated every round), medians per
module. Times are stored in ms per call of the batch. The networks run in a *runtime*
(``build_table(runtime=...)``; default PyTorch eager, its threads fixed for the whole build).

:func:`validate` measures random subnets end to end against the baseline (interleaved, medians)
and compares their latency ratio with the prediction; :func:`load_table` (the one reader,
:func:`mmdcs.selection.latency_cost.read_table`) reads a table file (JSON only: nothing in it
runs) and refuses a corrupt, truncated or malformed one in one line.
"""
import copy
import itertools
import random
import statistics
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from mmdcs.checks import check_timing
from mmdcs.models.counting import distinct_halves
from mmdcs.selection import BlockSelection, SubnetSpec, apply_subnet_
from mmdcs.selection.budget import CHANNELS, HEADS, HIDDEN, Measure
from mmdcs.selection.latency_cost import (LATENCY_TABLE_FORMAT, LatencyCost, off_line,
                                          read_table, selection_options)
from mmdcs.selection.subnet import head_selectors, hidden_selectors, prunable_modules
from . import latency as harness
from .latency import (_ALLOCATOR, DTYPES, TorchRuntime, build_runtime, device_name,
                      measure_pair, network_key, spread, time_interleaved)

#: ``meter(fn, module)`` → seconds per call (:func:`mmdcs.analysis.latency.time_interleaved`)
Meter_ = Callable[[Callable[[], object], nn.Module], object]
#: how long a table's meter calls a module at least per timing (short modules are called
#: repeatedly, the time per call taken)
MIN_TIME = 2e-3


def default_clock(device: str, threads: Optional[int]) -> str:
    """``'thread'`` (the calling thread's CPU time) for one CPU thread, ``'wall'`` otherwise."""
    return 'thread' if torch.device(device).type == 'cpu' and threads == 1 else 'wall'


def width_grid(dim: int, multiple_of: int = 8) -> List[int]:
    """The widths a unit of full width ``dim`` is measured at: multiples of ``multiple_of``
    from ``multiple_of`` up, the step the largest multiple of ``multiple_of`` not above half
    the width reached (at least ``multiple_of``), one group below the full width (the step in
    time when a block's first group goes: a block at full width has no gather / scatter), and
    ``dim`` itself; ``[dim]`` when ``dim <= multiple_of``."""
    m = max(1, int(multiple_of))
    out, w = [], m
    while w < dim:
        out.append(w)
        w += max(m, (w // 2) // m * m)
    below = (dim - 1) // m * m  # the largest multiple of m below the full width
    return sorted(set(out + [below] if below >= m else out)) + [int(dim)]


def head_grid(heads: int, every: int = 16) -> List[int]:
    """The head counts an attention of ``heads`` heads is measured at: every count from 1 up to
    ``every``, then a step of about a quarter of the count reached, and ``heads`` itself."""
    out = list(range(1, min(int(heads), every) + 1))
    w = out[-1]
    while w < heads:
        w = min(int(heads), w + max(1, w // 4))
        out.append(w)
    return out


# ----------------------------------------------------------------------------- structure
def _units(backbone: nn.Module) -> Tuple[Dict[str, int], Dict[str, int]]:
    dims = {n: int(m.select.dim) for n, m in prunable_modules(backbone).items()}
    hdims = {k: int(s.dim) for k, s in hidden_selectors(backbone).items()}
    if not dims and not hdims:
        raise ValueError(f'{type(backbone).__name__} has no architecture parameters: a latency '
                         'table needs a DCS or KCR supernet')
    return dims, hdims


def _head_units(backbone: nn.Module) -> Dict[str, int]:
    """Head-selected attention path → its number of heads (``select_heads``)."""
    return {k: int(s.dim) for k, s in head_selectors(backbone).items()}


def check_timed_apart(backbone: nn.Module) -> None:
    """ValueError (one line) when a module of ``backbone`` has its heads and its channels (or
    hidden units) selected together (EfficientViT's LiteMLA with ``select_heads``): a latency
    table cannot time them apart, so :func:`build_table` refuses it (a tool can ask before it
    measures anything)."""
    dims, hdims = _units(backbone)
    both = [k for k in _head_units(backbone) if k in dims or k in hdims]
    if both:
        raise ValueError(f'{both[0]}: its heads and its channels are selected in one module; a '
                         'latency table cannot time them apart')


def _spec(backbone, dims, hdims, widths: Dict[Tuple[str, str], int],
          adims: Optional[Dict[str, int]] = None) -> SubnetSpec:
    blocks = [BlockSelection(n, d, list(range(int(widths.get((CHANNELS, n), d)))))
              for n, d in dims.items()]
    hidden = [BlockSelection(k, h, list(range(int(widths.get((HIDDEN, k), h)))))
              for k, h in hdims.items()]
    heads = [BlockSelection(k, a, list(range(int(widths.get((HEADS, k), a)))))
             for k, a in (adims or {}).items()]
    return SubnetSpec(backbone.family, backbone.arch, backbone.variant, blocks, {}, hidden,
                      heads)


def pruned_copy(backbone: nn.Module, widths: Dict[Tuple[str, str], int],
                device: torch.device, dtype: torch.dtype) -> nn.Module:
    """The pruned network of ``backbone`` (a supernet) at ``widths`` (the first channels, hidden
    units and heads of every unit kept; which ones does not change the time), eval mode, on
    ``device``."""
    dims, hdims = _units(backbone)
    net = copy.deepcopy(backbone)
    apply_subnet_(net, _spec(backbone, dims, hdims, widths, _head_units(backbone)))
    return net.to(device=device, dtype=dtype).eval()


def _called(net: nn.Module, names: Sequence[str], x: torch.Tensor) -> Dict[str, int]:
    """How often each module of ``names`` is called (``__call__``) in one forward."""
    calls = {n: 0 for n in names}
    handles = []
    for n in names:
        def hook(mod, args, _n=n):
            calls[_n] += 1
        handles.append(net.get_submodule(n).register_forward_pre_hook(hook))
    try:
        with torch.inference_mode():
            net(x)
    finally:
        for h in handles:
            h.remove()
    return calls


def _ancestors(path: str) -> List[str]:
    parts = path.split('.')
    return ['.'.join(parts[:cut]) for cut in range(len(parts), 0, -1)]


def timed_modules(net: nn.Module, unit_paths: Sequence[str], x: torch.Tensor) -> Dict[str, str]:
    """unit path → the module timed for it: the unit's module or its closest ancestor that
    the forward calls on its own (a pruned MLP is run through its block's ``residual``) and
    that holds no other unit; else (a ViT block around its MLP and its head-selected attention)
    the closest ancestor called on its own in which every other unit has such a module of its
    own, not around this one: those are timed too and subtracted (:func:`nested_modules`)."""
    paths = list(dict.fromkeys(unit_paths))
    candidates = sorted({a for u in paths for a in _ancestors(u)})
    calls = _called(net, candidates, x)

    def holds(a, v):
        return v == a or v.startswith(a + '.')

    alone = {}
    for u in paths:
        for a in _ancestors(u):
            if any(v != u and holds(a, v) for v in paths):
                break
            if calls[a]:
                alone[u] = a
                break
    out = dict(alone)
    for u in paths:
        if u in out:
            continue
        for a in _ancestors(u):
            others = [v for v in paths if v != u and holds(a, v)]
            if calls[a] and all(v in alone and holds(a, alone[v]) and not holds(alone[v], u)
                                for v in others):
                out[u] = a
                break
        if u not in out:
            raise RuntimeError(f'internal: no module around unit {u} runs on its own and '
                               'apart from the other units; its time cannot be measured')
    return out


def nested_modules(blocks: Dict[str, str]) -> Dict[str, List[str]]:
    """unit path → the timed modules of other units inside its timed module (their time is
    subtracted from its own: a ViT block's time minus its head-selected attention's is its MLP
    unit's)."""
    out = {}
    for u, a in blocks.items():
        out[u] = sorted({b for v, b in blocks.items()
                         if v != u and b != a and b.startswith(a + '.')})
    return out


def extra_modules(backbone: nn.Module, blocks: Dict[str, str]) -> Dict[Tuple[str, str], List[str]]:
    """unit → leaf modules outside every timed block whose weights read the unit's kept
    channels / hidden units (MobileViT's projection conv): found as the layers whose weight
    shape changes from the full width to a probe width distinct per unit."""
    dims, hdims = _units(backbone)
    half, hhalf = distinct_halves(dims), distinct_halves(hdims)
    full = pruned_copy(backbone, {}, torch.device('cpu'), torch.float32)
    probe = pruned_copy(backbone, dict([((CHANNELS, n), w) for n, w in half.items()]
                                       + [((HIDDEN, k), w) for k, w in hhalf.items()]),
                        torch.device('cpu'), torch.float32)
    inside = list(blocks.values())
    probe_mods = dict(probe.named_modules())
    out: Dict[Tuple[str, str], List[str]] = {}
    for name, m in full.named_modules():
        if not name or any(True for _ in m.children()) or name not in probe_mods:
            continue
        if any(name == b or name.startswith(b + '.') for b in inside):
            continue
        for pname, p in m.named_parameters(recurse=False):
            q = getattr(probe_mods[name], pname, None)
            if q is None or q.shape == p.shape:
                continue
            for a, b in zip(p.shape, q.shape):
                if a == b:
                    continue
                unit = next(((CHANNELS, n) for n in dims if (dims[n], half[n]) == (a, b)), None)
                unit = unit or next(((HIDDEN, k) for k in hdims if (hdims[k], hhalf[k]) == (a, b)),
                                    None)
                if unit is not None and name not in out.get(unit, []):
                    out.setdefault(unit, []).append(name)
    return out


# ----------------------------------------------------------------------------- timing
def _capture(net: nn.Module, names: Sequence[str], x: torch.Tensor) -> Dict[str, tuple]:
    """name → (module, args, kwargs, calls): the (first) input each module gets in one forward
    of ``net``, cloned (a module may write into its input's successor in place)."""
    seen: Dict[str, list] = {}
    handles = []

    def clone(v):
        if isinstance(v, torch.Tensor):
            return v.clone()
        if isinstance(v, (tuple, list)):
            return type(v)(clone(i) for i in v)
        return v
    for n in names:
        def hook(mod, args, kwargs, _n=n):
            if _n in seen:
                seen[_n][3] += 1
            else:
                seen[_n] = [mod, clone(args), {k: clone(v) for k, v in kwargs.items()}, 1]
        handles.append(net.get_submodule(n).register_forward_pre_hook(hook, with_kwargs=True))
    try:
        with torch.inference_mode():
            net(x)
    finally:
        for h in handles:
            h.remove()
    missing = [n for n in names if n not in seen]
    if missing:
        raise RuntimeError(f'internal: {", ".join(missing[:3])} not called in the forward')
    return {n: tuple(v) for n, v in seen.items()}


def _axes(u: dict) -> List[Tuple[str, List[int]]]:
    """A unit's grid axes: ``(kind, widths)`` — its heads, its channels and / or hidden units
    (a pair: both, its cells the product)."""
    if 'heads' in u:
        return [(HEADS, u['grid_heads'])]
    return [(k, g) for k, g in ((CHANNELS, u['grid_channels']), (HIDDEN, u['grid_hidden']))
            if g]


def _cells(u: dict) -> List[Tuple[int, ...]]:
    """Every grid cell of a unit (channel-major for a pair)."""
    return [tuple(c) for c in itertools.product(*(g for _, g in _axes(u)))]


def _assign(u: dict, cell: Tuple[int, ...]) -> Dict[Tuple[str, str], int]:
    return {(kind, u['path']): w for (kind, _), w in zip(_axes(u), cell)}


def _full_cell(u: dict) -> Tuple[int, ...]:
    return tuple(g[-1] for _, g in _axes(u))


#: layers that compute nothing in eval (dropout, stochastic depth): one kind in a signature, so
#: that blocks whose only difference is their drop-path rate are pooled
_NO_OPS = (nn.Identity, nn.Dropout)


def _structure(net: nn.Module, path: str) -> tuple:
    """What the time of module ``path`` depends on besides its input: every submodule's class,
    parameter and buffer shapes and plain integer, boolean, string or tuple attributes (a
    shifted window, a stride; not floats: an eps, a scale or a drop rate changes no time).
    Dropout, stochastic depth and identities are one kind (eval)."""
    out = []
    for name, m in net.get_submodule(path).named_modules():
        if isinstance(m, _NO_OPS) or type(m).__name__ == 'DropPath':
            out.append((name, 'no-op'))
            continue
        attrs = sorted((k, repr(v)) for k, v in vars(m).items()
                       if not k.startswith('_') and k != 'training'
                       and isinstance(v, (int, bool, str, tuple, type(None))))
        tensors = [(k, tuple(t.shape), str(t.dtype)) for k, t in
                   list(m.named_parameters(recurse=False)) + list(m.named_buffers(recurse=False))
                   if t is not None]
        out.append((name, type(m).__name__, tuple(attrs), tuple(tensors)))
    return tuple(out)


def _shapes(v):
    if isinstance(v, torch.Tensor):
        return tuple(v.shape)
    if isinstance(v, (tuple, list)):
        return tuple(_shapes(i) for i in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _shapes(i)) for k, i in v.items()))
    return repr(v)


def _module_key(net: nn.Module, name: str, cap: tuple) -> str:
    """The computation a captured module is: its structure and its inputs' shapes (a runtime
    that exports graphs exports one per key)."""
    _mod, args, kwargs, calls = cap
    return repr((_structure(net, name), _shapes(args), _shapes(kwargs), calls))


def _signature(net: nn.Module, u: dict, cap: Dict[str, tuple]) -> str:
    """Units with the same signature are the same computation on the same input shape (the 12
    blocks of a ViT; a Swin stage's blocks of one shift): their times differ by noise only."""
    mod, args, kwargs, calls = cap[u['timed']]
    return repr((u.get('channels'), u.get('hidden'), u.get('heads'), u.get('grid_channels'),
                 u.get('grid_hidden'), u.get('grid_heads'), calls, _shapes(args),
                 sorted((k, _shapes(v)) for k, v in kwargs.items()),
                 _structure(net, u['timed']), [_structure(net, e) for e in u['extra']],
                 [_structure(net, m) for m in u.get('minus', ())]))


def _linear_misses(grid: Sequence[int], ms: Sequence[float], noise: Sequence[float],
                   tol: float, multiple_of: int) -> List[int]:
    """New widths where a curve is not linear: at every interior point whose time is further
    than ``tol`` (and than twice its noise, ms) from the line through its neighbours, the
    middles of the two segments around it (multiples of ``multiple_of`` strictly inside)."""
    m = max(1, int(multiple_of))
    out = set()
    for i in range(1, len(grid) - 1):
        a, w, b = grid[i - 1], grid[i], grid[i + 1]
        if abs(off_line(grid, ms, i)) > max(tol, 2 * noise[i]):
            for lo, hi in ((a, w), (w, b)):
                mid = (lo + hi) // 2 // m * m
                if lo < mid < hi:
                    out.add(mid)
    return sorted(out - set(grid))


class _Build:
    """The measurement of one latency table (:func:`build_table`): the units, every grid
    point's timings in the runtime, their entries (pooled and scaled) and the passes that
    refine them. Not an API: build_table's state."""

    def __init__(self, backbone, baseline, size, batch, dtype, runtime, meter, clock, rounds,
                 warmup, multiple_of, seed, rotate, pool, say):
        self.backbone, self.runtime, self.meter, self.clock = backbone, runtime, meter, clock
        self.rounds, self.warmup, self.m = rounds, warmup, multiple_of
        self.rotate, self.pool, self.say = rotate, pool, say
        self.dev, self.tdtype = runtime.device, DTYPES[dtype]
        in_ch = next((m.in_channels for m in backbone.modules() if isinstance(m, nn.Conv2d)), 3)
        g = torch.Generator().manual_seed(seed)
        self.x = runtime.tensor(torch.randn((int(batch), in_ch) + size, generator=g))
        self.units = self._units(multiple_of)
        self.started = time.perf_counter()
        full = pruned_copy(backbone, {}, self.dev, self.tdtype)
        self._structure_of(full)
        self.base = baseline.to(self.dev, self.tdtype).eval()
        self.points: List[tuple] = []  # (baseline ms, {path: (cell, ms, spread)}, rest ms)
        # the baseline and the full-width pruned network, interleaved
        self.ends = self._time({'baseline': (self._prepared_base(), self.base),
                                'full': (runtime.prepare(full, (self.x, )), full)})

    def _units(self, multiple_of):
        dims, hdims = _units(self.backbone)
        units = {p: dict(path=p, channels=dims.get(p), hidden=hdims.get(p),
                         grid_channels=width_grid(dims[p], multiple_of) if p in dims else None,
                         grid_hidden=width_grid(hdims[p], multiple_of) if p in hdims else None)
                 for p in dict.fromkeys(list(dims) + list(hdims))}
        # head-selected attentions: a unit each, timed at every head count (a few heads)
        for k, a in _head_units(self.backbone).items():
            units[k] = dict(path=k, heads=a, grid_heads=head_grid(a))
        return units

    def _structure_of(self, full):
        """What is timed for every unit, what is subtracted and added, and its signature."""
        blocks = timed_modules(full, list(self.units), self.x)
        nested = nested_modules(blocks)
        extras = extra_modules(self.backbone, blocks)
        for u in self.units.values():
            u['timed'] = blocks[u['path']]
            if nested[u['path']]:
                u['minus'] = nested[u['path']]  # the other units' modules inside it
            u['extra'] = sorted({e for key in ((CHANNELS, u['path']), (HIDDEN, u['path']))
                                 for e in extras.get(key, [])})
        self.group = {p: p for p in self.units}
        if self.pool:
            cap = _capture(full, list(dict.fromkeys(u['timed'] for u in self.units.values())),
                           self.x)
            self.group = {p: _signature(full, u, cap) for p, u in self.units.items()}

    def _prepared_base(self):
        if not hasattr(self, '_base_fn'):
            self._base_fn = self.runtime.prepare(self.base, (self.x, ),
                                                 key=network_key(self.base, self.x))
        return self._base_fn

    def _time(self, items) -> Dict[str, List[float]]:
        times = time_interleaved(items, self.rounds, self.warmup, self.meter, [self.clock])
        return {n: v[self.clock] for n, v in times.items()}

    def measure(self, point: Dict[str, Tuple[int, ...]], network: bool) -> None:
        """Time one grid point: every unit at its cell in one pruned network, each unit's
        module re-run on the input it gets there (in the runtime: a graph of its own where
        the runtime cannot time inside a network), the baseline beside it and, with
        ``network``, the whole pruned network (the constant: network minus its units)."""
        widths = {k: w for p, cell in point.items() for k, w in
                  _assign(self.units[p], cell).items()}
        net = pruned_copy(self.backbone, widths, self.dev, self.tdtype)
        units = self.units.values()
        names = list(dict.fromkeys([u['timed'] for u in units]
                                   + [e for u in units for e in u['extra']]))
        cap = _capture(net, names, self.x)
        keyed = not self.runtime.in_graph
        items = {n: (self.runtime.prepare(m, a, kw, key=_module_key(net, n, cap[n])
                                          if keyed else None), m)
                 for n, (m, a, kw, _c) in cap.items()}
        if network:
            items['[network]'] = (self.runtime.prepare(net, (self.x, )), net)
        items['[baseline]'] = (self._prepared_base(), self.base)
        times = self._time(items)
        med = {n: statistics.median(ts) * (cap[n][3] if n in cap else 1)
               for n, ts in times.items()}
        entries = {}
        for p, u in self.units.items():
            # a module around other units' modules: its time minus theirs (noise may take a
            # difference of two medians below 0)
            t = max(0., med[u['timed']] - sum(med[n] for n in u.get('minus', ())))
            t += sum(med[e] for e in u['extra'])
            entries[p] = (point[p], t, spread(times[u['timed']]))
        rest = med['[network]'] - sum(e[1] for e in entries.values()) if network else None
        self.points.append((med['[baseline]'], entries, rest))
        self.say(f'latency table {self.backbone.arch}: grid point {len(self.points)}/'
                 f'{self.planned}, {time.perf_counter() - self.started:.1f} s')

    def grid_points(self) -> List[Dict[str, Tuple[int, ...]]]:
        """The first pass: every unit's cells, rotated (each unit starts at another cell, so
        the error a point's rounds share falls on different widths of different units) or
        aligned (every unit at its k-th cell, a unit with fewer staying at its last)."""
        cells = {p: _cells(u) for p, u in self.units.items()}
        n = max(len(c) for c in cells.values())
        shift = {p: (r * len(c)) // len(cells) if self.rotate else 0
                 for r, (p, c) in enumerate(cells.items())}
        return [{p: c[(k + shift[p]) % len(c)] if self.rotate else c[min(k, len(c) - 1)]
                 for p, c in cells.items()} for k in range(n)]

    def extra_points(self, wanted: Dict[str, List[Tuple[int, ...]]]):
        """Points that visit the ``wanted`` cells of every unit (rotated over the members of a
        pooled group), every other unit at full width."""
        n = max((len(c) for c in wanted.values()), default=0)
        out = []
        for k in range(n):
            point = {}
            for r, (p, u) in enumerate(self.units.items()):
                c = wanted.get(p) or []
                point[p] = c[(k + r) % len(c)] if c and (k < len(c) or self.rotate) else \
                    _full_cell(u)
            out.append(point)
        return out

    def run(self, points, network_every: int = 1) -> None:
        self.planned = len(self.points) + len(points)
        for k, point in enumerate(points):
            self.measure(point, network=k % network_every == 0)

    def entries(self) -> Dict[str, Dict[Tuple[int, ...], Tuple[float, float]]]:
        """unit → cell → (ms, spread): the median over every visit of every unit of its
        pooled group (aligned grids: a unit's first visit of a cell), each point scaled by the
        baseline timed beside it (the load of a shared machine drifts over minutes: the table
        is in one unit, the baseline's); spread: the median relative spread of the visits'
        rounds."""
        self.baseline_ms = statistics.median(p[0] for p in self.points)
        visits: Dict[str, Dict[tuple, List[Tuple[float, float]]]] = {}
        for base_k, entries, _rest in self.points:
            scale = self.baseline_ms / base_k if base_k > 0 else 1.
            for p, (cell, t, s) in entries.items():
                mine = visits.setdefault(self.group[p], {}).setdefault(cell, [])
                if self.rotate or not any(q == p for q, _v in mine):
                    mine.append((p, (t * scale, s)))
        return {p: {cell: (statistics.median(v[0] for _q, v in vs),
                           statistics.median(v[1] for _q, v in vs))
                    for cell, vs in visits[self.group[p]].items()} for p in self.units}

    def nonlinear(self, tol_share: float) -> Dict[str, List[Tuple[int, ...]]]:
        """The cells to add where a unit's time is not linear in a width (along each axis at
        the other's full width; a pair gets a whole row or column): :func:`_linear_misses`
        with a tolerance of ``tol_share`` of the unit's full-width time."""
        got = self.entries()
        wanted = {}
        for p, u in self.units.items():
            axes, full = _axes(u), _full_cell(u)
            for i, (kind, grid) in enumerate(axes):
                if kind == HEADS:
                    continue  # every head count up to 16 is on the grid already
                line = [full[:i] + (w, ) + full[i + 1:] for w in grid]
                ms = [got[p][c][0] for c in line]
                noise = [got[p][c][0] * got[p][c][1] / 2 for c in line]
                new = _linear_misses(grid, ms, noise, tol_share * ms[-1], self.m)
                if new:
                    grid[:] = sorted(set(grid) | set(new))
                    others = [g for j, (_k, g) in enumerate(axes) if j != i]
                    wanted.setdefault(p, []).extend(
                        tuple(c) for w in new for c in itertools.product(
                            *[[w] if j == i else g for j, (_k, g) in enumerate(axes)]))
        return wanted

    def noisy(self, limit: float, most: int) -> Dict[str, List[Tuple[int, ...]]]:
        """The cells whose entries' rounds spread more than ``limit`` (relative), at most
        ``most`` per unit, noisiest first: measured once more."""
        got = self.entries()
        return {p: c for p in self.units
                for c in [sorted((cell for cell, (_t, s) in got[p].items() if s > limit),
                                 key=lambda cell: -got[p][cell][1])[:most]] if c}

    def table(self) -> dict:
        """The units' entries (ms, and their spread) on their grids, the constant and the
        baseline, as the table's fields."""
        got = self.entries()
        units = []
        for p, u in self.units.items():
            grids = [g for _k, g in _axes(u)]
            try:
                if len(grids) == 2:
                    ms = [[got[p][(d, h)][0] for h in grids[1]] for d in grids[0]]
                    sp = [[got[p][(d, h)][1] for h in grids[1]] for d in grids[0]]
                else:
                    ms = [got[p][(w, )][0] for w in grids[0]]
                    sp = [got[p][(w, )][1] for w in grids[0]]
            except KeyError as e:
                raise RuntimeError(f'internal: unit {p} was not measured at {e}') from e
            entry = dict(u, ms=ms, spread=sp)
            members = sum(self.group[q] == self.group[p] for q in self.units)
            if members > 1:
                entry['pooled'] = members
            units.append(entry)
        scaled = [(rest * self.baseline_ms / b if b > 0 else rest)
                  for b, _e, rest in self.points if rest is not None]
        start = statistics.median(self.ends['baseline'])
        spreads = [s for v in got.values() for _t, s in v.values()]
        bases = [p[0] for p in self.points]
        return dict(
            baseline_ms=self.baseline_ms, const_ms=statistics.median(scaled),
            full_ms=statistics.median(self.ends['full']) * self.baseline_ms / start,
            units=units, grid_points=len(self.points),
            dispersion=dict(
                baseline_ms_min=min(bases), baseline_ms_max=max(bases),
                baseline_spread=spread(self.ends['baseline']),
                full_spread=spread(self.ends['full']),
                unit_spread_median=statistics.median(spreads) if spreads else 0.,
                unit_spread_max=max(spreads) if spreads else 0.,
                const_ms_min=min(scaled), const_ms_max=max(scaled),
                note='every grid point scaled by the baseline timed in its rounds; '
                     'baseline_ms_min/max: those baselines (the drift of the machine); spread = '
                     '(max - min) / median of a module\'s rounds (per entry: the median over '
                     'its visits); const_ms_min/max: the network minus its units over the grid '
                     'points where the network was timed'))


#: how many whole pruned networks a table of a runtime that times exported graphs times for
#: its constant (each is an export): spread over the first pass
NETWORK_POINTS = 6
#: a unit's time further than this share of its full-width time from the line through its
#: neighbours is not linear there: the segments around it are measured at their middles
NONLINEAR = 0.02
#: an entry whose rounds spread more than this (relative) is measured once more
NOISY = 0.05


def build_table(backbone: nn.Module, baseline: nn.Module, input_size: Sequence[int],
                batch: int = 1, threads: Optional[int] = None, dtype: str = 'fp32',
                device: str = 'cpu', rounds: int = 5, warmup: int = 1, multiple_of: int = 8,
                meter: Optional[Meter_] = None, seed: int = 0,
                progress: Optional[Callable[[str], None]] = None, rotate: bool = True,
                pool: bool = True, runtime=None, refine: int = 1,
                noisy: Optional[float] = NOISY) -> dict:
    """Measure the latency table of ``backbone`` (an mmdcs supernet) on this device (see the
    module docs).

    Args:
        backbone: the supernet (its selection options are the table's).
        baseline: the baseline network (no selection) of the same arch and input size: what a
            latency target is a ratio of.
        input_size: (H, W); batch: images per call.
        threads: intra-op threads for the build (None: as it is).
        dtype: ``'fp32'``, ``'fp16'`` or ``'bf16'``; device: ``'cpu'`` or ``'cuda'``.
        rounds, warmup: interleaved timed rounds per grid point (medians) and untimed calls.
        multiple_of: grid step (:func:`width_grid`).
        meter: ``meter(fn, module)`` → seconds per call (default: a
            :class:`~mmdcs.analysis.latency.Meter` on the table's clock; tests: synthetic).
        progress: called with a progress line per grid point.
        rotate: each unit starts its grid at another point (spread over its grid), so that the
            units of one pruned network are at different widths and the error a grid point's
            rounds share (the load of that moment, the baseline it is scaled by) falls on
            different widths of different units (False: every unit at its k-th point, a unit
            with fewer points staying at its last; the tables of format 1). A unit with fewer
            points than the longest grid goes round its own again; its entries are the medians
            of its visits.
        pool: units of the same signature (:func:`_signature`: the same computation on the same
            input shape) share their entries: the median over them at each width.
        runtime: where the networks run (default PyTorch eager on ``device`` with ``threads``;
            a runtime that times exported graphs, such as onnxruntime, times each unit's module
            as a graph of its own and the whole network at :data:`NETWORK_POINTS` points).
        refine: passes that add the middles of the segments around a width where a unit's
            time is not linear (:data:`NONLINEAR`; 0: the grid as it is).
        noisy: entries whose rounds spread more than this are measured once more (None: not).

    Returns:
        the table (a JSON-able dict, ``LatencyCost(table)`` predicts from it).
    """
    check_table_options(batch, threads, rounds, warmup, dtype)
    runtime = runtime or TorchRuntime(device, threads, dtype)
    clock = getattr(meter, 'clock_name', 'injected') if meter else default_clock(
        runtime.device, threads)
    meter = meter or harness.Meter([clock], min_time=MIN_TIME, device=runtime.device)
    size = (int(input_size[0]), int(input_size[-1]))
    check_timed_apart(backbone)
    with runtime.running():
        used_threads = threads or torch.get_num_threads()
        b = _Build(backbone, baseline, size, batch, dtype, runtime, meter, clock, rounds,
                   warmup, multiple_of, seed, rotate, pool, progress or (lambda line: None))
        first = b.grid_points()
        b.run(first, 1 if runtime.in_graph else max(1, -(-len(first) // NETWORK_POINTS)))
        for _ in range(refine):
            wanted = b.nonlinear(NONLINEAR)
            if not wanted:
                break
            b.run(b.extra_points(wanted), len(first) + 1)
        if noisy is not None:
            b.run(b.extra_points(b.noisy(noisy, max(1, len(first) // 8))), len(first) + 1)
        fields = b.table()
    table = dict(
        format=LATENCY_TABLE_FORMAT, arch=backbone.arch, family=backbone.family,
        variant=backbone.variant, selection=selection_options(backbone),
        input_shape=list(size), batch=int(batch), threads=used_threads, dtype=dtype,
        device=runtime.device.type, device_name=device_name(runtime.device),
        torch=torch.__version__, runtime=runtime.name, runtime_info=runtime.identity(),
        allocator=_ALLOCATOR['state'], unit_time='ms per call (one batch)', clock=clock,
        scope='backbone forward', multiple_of=int(multiple_of), rounds=int(rounds),
        warmup=int(warmup), grid_order='rotated' if rotate else 'aligned', pooled=bool(pool),
        refine=int(refine), noisy=noisy, **fields, build_s=time.perf_counter() - b.started,
        created=time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()), validation=None)
    LatencyCost(table)  # what was written can be read back
    return table


def check_table_options(batch: int, threads: Optional[int], rounds: int, warmup: int,
                        dtype: str) -> None:
    """ValueError (one line) for options a table cannot be measured with: batch and threads
    positive, at most MAX_BATCH images and the cores here (:func:`mmdcs.checks.check_timing`)."""
    check_timing(batch, threads)
    if dtype not in DTYPES:
        raise ValueError(f'dtype must be one of {", ".join(DTYPES)}, got {dtype!r}')
    if rounds < 1 or warmup < 0:
        raise ValueError(f'need rounds >= 1, warmup >= 0; got {rounds}, {warmup}')


# ----------------------------------------------------------------------------- validation
def random_widths(cost: LatencyCost, rng: random.Random,
                  multiple_of: int = 8) -> Dict[Tuple[str, str], int]:
    """A random width for every unit, uniform over [1, full], rounded up to a multiple of
    ``multiple_of`` (capped at the full width) as the export rounds; heads are not rounded
    (the export keeps any count)."""
    m = max(1, int(multiple_of))
    return {u: rng.randint(1, d) if u[0] == HEADS else min(d, -(-rng.randint(1, d) // m) * m)
            for u, d in cost.unit_dims().items()}


def table_measure(table: dict, **changes) -> Measure:
    """How a table's predictions are measured: :meth:`LatencyCost.measure` of the table."""
    return LatencyCost(table).measure(**changes)


def validate(table: dict, backbone: nn.Module, baseline: nn.Module, k: int = 10,
             rounds: int = 15, warmup: int = 1, multiple_of: int = 8,
             meter: Optional[Meter_] = None, seed: int = 0,
             progress: Optional[Callable[[str], None]] = None, runtime=None) -> dict:
    """The predictor's error on ``k`` random subnets (:func:`random_widths`): each subnet and
    the baseline timed interleaved (``rounds`` rounds, medians; :func:`~mmdcs.analysis.
    latency.measure_pair`) at the table's input size, batch, threads, dtype, device, runtime
    and clock; predicted ratio (the table's prediction over its baseline) vs measured ratio
    (subnet over the baseline measured beside it).

    Returns dict(rows=[...], mean_abs_error, max_abs_error, k, rounds): errors in ratio
    points, i.e. fractions of the baseline latency."""
    if k < 1:
        raise ValueError(f'validate needs k >= 1 subnets, got {k}')
    cost = LatencyCost.from_table(table, backbone)
    measure = cost.measure(rounds=rounds, warmup=warmup)
    runtime = runtime or build_runtime(measure)
    in_ch = next((m.in_channels for m in backbone.modules() if isinstance(m, nn.Conv2d)), 3)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((measure.batch, in_ch) + tuple(table['input_shape']), generator=g)
    rng = random.Random(seed)
    rows = []
    started = time.perf_counter()
    for i in range(k):
        widths = random_widths(cost, rng, multiple_of)
        sub = pruned_copy(backbone, widths, runtime.device, DTYPES[measure.dtype])
        t = measure_pair(baseline, sub, x, measure, runtime, meter)
        pred = cost.ratio(cost.count(widths))
        rows.append(dict(predicted_ratio=pred, measured_ratio=t['ratio'],
                         error=pred - t['ratio'], baseline_ms=t['baseline_ms'],
                         subnet_ms=t['pruned_ms'], predicted_ms=cost.count(widths),
                         **{f'kept_{kind}': sum(w for (kd, _), w in widths.items() if kd == kind)
                            for kind in (CHANNELS, HIDDEN, HEADS)}))
        del sub
        if progress:
            progress(f'validation {table["arch"]}: subnet {i + 1}/{k}: predicted {pred:.3f}, '
                     f'measured {t["ratio"]:.3f} ({time.perf_counter() - started:.1f} s)')
    errs = [abs(r['error']) for r in rows]
    return dict(k=k, rounds=rounds, multiple_of=multiple_of, seed=seed, rows=rows,
                clock=measure.clock if meter is None else getattr(meter, 'clock_name',
                                                                   'injected'),
                runtime=runtime.identity(),
                mean_abs_error=statistics.fmean(errs), max_abs_error=max(errs),
                mean_error=statistics.fmean(r['error'] for r in rows),
                created=time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
                note='errors in ratio points (fractions of the baseline latency): predicted '
                     '(table) minus measured (subnet / baseline timed interleaved, medians)')


# ----------------------------------------------------------------------------- files
#: a table file, read and checked: the one reader, :func:`mmdcs.selection.latency_cost.read_table`
load_table = read_table


def format_validation(v: dict) -> str:
    lines = ['| subnet | predicted ratio | measured ratio | error |', '|---|---|---|---|']
    for i, r in enumerate(v['rows']):
        lines.append(f'| {i} | {r["predicted_ratio"]:.3f} | {r["measured_ratio"]:.3f} | '
                     f'{r["error"]:+.3f} |')
    lines.append(f'mean abs. error {v["mean_abs_error"]:.2%} of the baseline latency (max '
                 f'{v["max_abs_error"]:.2%}, mean signed {v["mean_error"]:+.2%}), {v["k"]} '
                 f'random subnets, {v["rounds"]} interleaved rounds each')
    return '\n'.join(lines)
