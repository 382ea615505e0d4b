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

Every timing is ``timer(fn, module)`` → seconds per call (injectable: the tests use a synthetic
one; default :class:`WallTimer`), in ``rounds`` rounds that interleave every timed module of a
grid point (the order reversed every other round), medians per module. Times are stored in ms
per call of the batch. Threads are fixed with ``torch.set_num_threads`` for the whole build.

:func:`validate` measures random subnets end to end against the baseline (interleaved, medians)
and compares their latency ratio with the prediction; :func:`load_table` (the one reader,
:func:`mmdcs.selection.latency_cost.read_table`) reads a table file (JSON only: nothing in it
runs) and refuses a corrupt, truncated or malformed one in one line.
"""
import copy
import platform
import random
import statistics
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from mmdcs.checks import check_timing
from mmdcs.models.counting import distinct_halves
from mmdcs.selection import BlockSelection, SubnetSpec, apply_subnet_
from mmdcs.selection.budget import CHANNELS, HEADS, HIDDEN
from mmdcs.selection.latency_cost import (LATENCY_TABLE_FORMAT, LatencyCost, read_table,
                                          selection_options)
from mmdcs.selection.subnet import head_selectors, hidden_selectors, prunable_modules
from .latency import _ALLOCATOR, keep_freed_memory, num_threads

Timer = Callable[[Callable[[], object], nn.Module], float]
DTYPES = {'fp32': torch.float32, 'fp16': torch.float16, 'bf16': torch.bfloat16}


#: the clocks a :class:`WallTimer` reads: wall time, or the calling thread's CPU time
CLOCKS = {'wall': time.perf_counter, 'thread': time.thread_time}


class WallTimer:
    """Seconds per call of ``fn``: calls it until ``min_time`` has passed (at least once) and
    divides; on CUDA synchronised before the first and after the last call.

    ``clock='thread'`` reads the calling thread's CPU time instead of the wall clock: with one
    intra-op thread on the CPU every operator runs on the calling thread, so this is the time
    the forward computes, without the time the scheduler gives other processes on a shared
    machine (on a quiet machine the two agree). More threads, or CUDA: the wall clock."""

    def __init__(self, min_time: float = 2e-3, device: Optional[torch.device] = None,
                 clock: str = 'wall'):
        if clock not in CLOCKS:
            raise ValueError(f'clock must be one of {", ".join(CLOCKS)}, got {clock!r}')
        self.min_time = float(min_time)
        self.cuda = device is not None and torch.device(device).type == 'cuda'
        if self.cuda and clock != 'wall':
            raise ValueError('CUDA is timed with the wall clock')
        self.clock_name = clock
        self.clock = CLOCKS[clock]

    def _sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def __call__(self, fn: Callable[[], object], module: nn.Module) -> float:
        self._sync()
        t0 = self.clock()
        n = 0
        while True:
            fn()
            n += 1
            self._sync()
            elapsed = self.clock() - t0
            if elapsed >= self.min_time:
                return elapsed / n


def default_clock(device: str, threads: Optional[int]) -> str:
    """``'thread'`` (the calling thread's CPU time) for one CPU thread, ``'wall'`` otherwise."""
    return 'thread' if torch.device(device).type == 'cpu' and threads == 1 else 'wall'


def clock_timer(clock: str = 'thread') -> Callable:
    """A replacement of :func:`mmdcs.analysis.latency.time_models` (its signature and result
    keys) that reads ``clock`` (:data:`mmdcs.analysis.latency_table.CLOCKS`): ``'thread'``, the
    calling thread's CPU time — what a one-thread latency table is measured with, without the
    time a shared machine's scheduler gives other processes (on a quiet machine the wall clock
    agrees). Interleaved rounds (the order reversed every other round), medians; glibc keeps
    freed memory, as while a table is measured (:func:`mmdcs.analysis.latency.
    keep_freed_memory`: process-wide)."""
    def timer(models, x, warmup: int = 3, repeats: int = 21, threads: Optional[int] = None):
        keep_freed_memory()
        fns = {k: ((lambda m=m: m(x)), m.eval()) for k, m in models.items()}
        with num_threads(threads):
            ms = _rounds(fns, repeats, warmup, WallTimer(clock=clock))
        return {k: dict(median_ms=statistics.median(v), threads=threads, device=str(x.device),
                        clock=clock) for k, v in ms.items()}
    return timer


def width_grid(dim: int, multiple_of: int = 8) -> List[int]:
    """The widths a unit of full width ``dim`` is measured at: multiples of ``multiple_of``
    from ``multiple_of`` up, the step the largest multiple of ``multiple_of`` not above half
    the width reached (at least ``multiple_of``), and ``dim`` itself; ``[dim]`` when
    ``dim <= multiple_of``."""
    m = max(1, int(multiple_of))
    out, w = [], m
    while w < dim:
        out.append(w)
        w += max(m, (w // 2) // m * m)
    return out + [int(dim)]


def head_grid(heads: int, every: int = 16) -> List[int]:
    """The head counts an attention of ``heads`` heads is measured at: every count from 1 up to
    ``every``, then a step of about a quarter of the count reached, and ``heads`` itself."""
    out = list(range(1, min(int(heads), every) + 1))
    w = out[-1]
    while w < heads:
        w = min(int(heads), w + max(1, w // 4))
        out.append(w)
    return out


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU model (``/proc/cpuinfo``, else ``platform.processor()``)."""
    device = torch.device(device)
    if device.type == 'cuda':
        return torch.cuda.get_device_name(device)
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.lower().startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or 'unknown CPU'


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


def _rounds(fns: Dict[str, Tuple[Callable, nn.Module]], rounds: int, warmup: int,
            timer: Timer) -> Dict[str, List[float]]:
    """ms per call of every fn over ``rounds`` interleaved rounds (order reversed every other
    round), after ``warmup`` untimed calls of each."""
    items = list(fns.items())
    with torch.inference_mode():
        for _ in range(warmup):
            for _, (fn, _m) in items:
                fn()
        out: Dict[str, List[float]] = {k: [] for k in fns}
        for r in range(rounds):
            for k, (fn, m) in (items if r % 2 == 0 else items[::-1]):
                out[k].append(timer(fn, m) * 1e3)
    return out


def _call(mod, args, kwargs):
    return lambda: mod(*args, **kwargs)


def _spread(values: Sequence[float]) -> float:
    """Relative spread of a module's rounds: (max − min) / median."""
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med > 0 else 0.


def _grid_points(units: Dict[str, dict]) -> int:
    return max(len(u.get('grid_channels') or [0]) * len(u.get('grid_hidden') or [0])
               if 'heads' not in u else len(u['grid_heads']) for u in units.values())


def _unit_points(u: dict) -> int:
    if 'heads' in u:
        return len(u['grid_heads'])
    return len(u['grid_channels'] or [0]) * len(u['grid_hidden'] or [0]) if (
        u['grid_channels'] and u['grid_hidden']) else len(u['grid_channels'] or u['grid_hidden'])


def _point(u: dict, k: int) -> Tuple[Dict[Tuple[str, str], int], Tuple[int, ...]]:
    """(unit → width, table index) of unit ``u`` at grid point ``k`` (a unit with fewer
    points stays at its last one)."""
    p = u['path']
    if 'heads' in u:
        j = min(k, len(u['grid_heads']) - 1)
        return {(HEADS, p): u['grid_heads'][j]}, (j, )
    gd, gh = u['grid_channels'], u['grid_hidden']
    if gd and gh:
        k = min(k, len(gd) * len(gh) - 1)
        i, j = divmod(k, len(gh))
        return {(CHANNELS, p): gd[i], (HIDDEN, p): gh[j]}, (i, j)
    if gd:
        i = min(k, len(gd) - 1)
        return {(CHANNELS, p): gd[i]}, (i, )
    j = min(k, len(gh) - 1)
    return {(HIDDEN, p): gh[j]}, (j, )


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


def _signature(net: nn.Module, u: dict, cap: Dict[str, tuple]) -> str:
    """Units with the same signature are the same computation on the same input shape (the 12
    blocks of a ViT; a Swin stage's blocks of one shift): their times differ by noise only."""
    def shapes(v):
        if isinstance(v, torch.Tensor):
            return tuple(v.shape)
        if isinstance(v, (tuple, list)):
            return tuple(shapes(i) for i in v)
        return repr(v)
    mod, args, kwargs, calls = cap[u['timed']]
    return repr((u.get('channels'), u.get('hidden'), u.get('heads'), u.get('grid_channels'),
                 u.get('grid_hidden'), u.get('grid_heads'), calls, shapes(args),
                 sorted((k, shapes(v)) for k, v in kwargs.items()),
                 _structure(net, u['timed']), [_structure(net, e) for e in u['extra']],
                 [_structure(net, m) for m in u.get('minus', ())]))


def build_table(backbone: nn.Module, baseline: nn.Module, input_size: Sequence[int],
                batch: int = 1, threads: Optional[int] = None, dtype: str = 'fp32',
                device: str = 'cpu', rounds: int = 5, warmup: int = 1, multiple_of: int = 8,
                timer: Optional[Timer] = None, seed: int = 0,
                progress: Optional[Callable[[str], None]] = None, rotate: bool = True,
                pool: bool = True) -> dict:
    """Measure the latency table of ``backbone`` (an mmdcs supernet) on this device (see the
    module docs).

    Args:
        backbone: the supernet (its selection options are the table's).
        baseline: the baseline network (no selection) of the same arch and input size: what a
            latency target is a ratio of.
        input_size: (H, W); batch: images per call.
        threads: ``torch.set_num_threads`` for the build (None: as it is).
        dtype: ``'fp32'``, ``'fp16'`` or ``'bf16'``; device: ``'cpu'`` or ``'cuda'``.
        rounds, warmup: interleaved timed rounds per grid point (medians) and untimed calls.
        multiple_of: grid step (:func:`width_grid`).
        timer: ``timer(fn, module)`` → seconds per call (default :class:`WallTimer`).
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

    Returns:
        the table (a JSON-able dict, ``LatencyCost(table)`` predicts from it).
    """
    check_timing(batch, threads)  # positive, at most MAX_BATCH images, the cores here
    if dtype not in DTYPES:
        raise ValueError(f'dtype must be one of {", ".join(DTYPES)}, got {dtype!r}')
    if rounds < 1 or warmup < 0 or batch < 1:
        raise ValueError(f'need rounds >= 1, warmup >= 0, batch >= 1; got {rounds}, {warmup}, '
                         f'{batch}')
    dev = torch.device(device)
    tdtype = DTYPES[dtype]
    clock = getattr(timer, 'clock_name', 'injected') if timer else default_clock(dev, threads)
    timer = timer or WallTimer(device=dev, clock=clock)
    size = (int(input_size[0]), int(input_size[-1]))
    check_timed_apart(backbone)
    dims, hdims = _units(backbone)
    adims = _head_units(backbone)
    in_ch = next((m.in_channels for m in backbone.modules() if isinstance(m, nn.Conv2d)), 3)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((int(batch), in_ch) + size, generator=g).to(dev, tdtype)
    started = time.perf_counter()
    paths = list(dict.fromkeys(list(dims) + list(hdims)))
    units = {p: dict(path=p, channels=dims.get(p), hidden=hdims.get(p),
                     grid_channels=width_grid(dims[p], multiple_of) if p in dims else None,
                     grid_hidden=width_grid(hdims[p], multiple_of) if p in hdims else None)
             for p in paths}
    for u in units.values():
        u['ms'] = ([[None] * len(u['grid_hidden']) for _ in u['grid_channels']]
                   if u['grid_channels'] and u['grid_hidden']
                   else [None] * len(u['grid_channels'] or u['grid_hidden']))
    # head-selected attentions: a unit each, timed at every head count (a few heads)
    for k, a in adims.items():
        grid = head_grid(a)
        units[k] = dict(path=k, heads=a, grid_heads=grid, ms=[None] * len(grid))
    say = progress or (lambda line: None)
    with num_threads(threads):
        used_threads = torch.get_num_threads()
        full = pruned_copy(backbone, {}, dev, tdtype)
        blocks = timed_modules(full, list(units), x)
        nested = nested_modules(blocks)
        extras = extra_modules(backbone, blocks)
        for u in units.values():
            u['timed'] = blocks[u['path']]
            if nested[u['path']]:
                u['minus'] = nested[u['path']]  # the other units' modules inside it
            u['extra'] = sorted({e for key in ((CHANNELS, u['path']), (HIDDEN, u['path']))
                                 for e in extras.get(key, [])})
        signature = {}
        if pool:
            cap = _capture(full, list(dict.fromkeys(u['timed'] for u in units.values())), x)
            signature = {p: _signature(full, u, cap) for p, u in units.items()}
            del cap
        # baseline and the full-width pruned network, interleaved
        base = baseline.to(dev, tdtype).eval()
        ends = _rounds({'baseline': (lambda: base(x), base), 'full': (lambda: full(x), full)},
                       rounds, warmup, timer)
        del full
        n_points = _grid_points(units)
        shift = {p: (r * _unit_points(u)) // len(units) if rotate else 0
                 for r, (p, u) in enumerate(units.items())}
        points = []  # (baseline ms beside it, {path: (index, ms, spread)}, rest ms)
        for k in range(n_points):
            widths, index = {}, {}
            for p, u in units.items():
                w, idx = _point(u, (k + shift[p]) % _unit_points(u) if rotate else k)
                widths.update(w)
                index[p] = idx
            net = pruned_copy(backbone, widths, dev, tdtype)
            names = list(dict.fromkeys([u['timed'] for u in units.values()]
                                       + [e for u in units.values() for e in u['extra']]))
            cap = _capture(net, names, x)
            fns = {n: (_call(m, a, kw), m) for n, (m, a, kw, _c) in cap.items()}
            fns['[network]'] = (lambda: net(x), net)
            fns['[baseline]'] = (lambda: base(x), base)
            times = _rounds(fns, rounds, warmup, timer)
            med = {n: statistics.median(ts) * (cap[n][3] if n in cap else 1)
                   for n, ts in times.items()}
            entries = {}
            for p, u in units.items():
                # a module around other units' modules: its time minus theirs (noise may take
                # a difference of two medians below 0)
                t = max(0., med[u['timed']] - sum(med[n] for n in u.get('minus', ())))
                t += sum(med[e] for e in u['extra'])
                entries[p] = (index[p], t, _spread(times[u['timed']]))
            points.append((med['[baseline]'], entries,
                           med['[network]'] - sum(e[1] for e in entries.values())))
            del net, cap, fns
            say(f'latency table {backbone.arch}: grid point {k + 1}/{n_points}, '
                f'{time.perf_counter() - started:.1f} s')
    # the load of a shared machine drifts over minutes: every grid point is scaled by the
    # baseline timed in its own rounds (to the median of those baselines), so that the table
    # is in one unit, the baseline's
    baseline_ms = statistics.median(p[0] for p in points)
    rest: List[float] = []
    spreads: List[float] = []
    visits: Dict[str, Dict[Tuple[int, ...], List[float]]] = {p: {} for p in units}
    for base_k, entries, rest_k in points:
        scale = baseline_ms / base_k if base_k > 0 else 1.
        rest.append(rest_k * scale)
        for p, (idx, t, spread) in entries.items():
            if not rotate and idx in visits[p]:
                continue  # a unit held at its last point: its first visit, as format 1
            visits[p].setdefault(idx, []).append(t * scale)
            spreads.append(spread)
    groups: Dict[str, List[str]] = {}
    for p in units:
        groups.setdefault(signature.get(p, p), []).append(p)
    for members in groups.values():
        for idx in visits[members[0]]:
            # the median of every visit of every unit of the group at this width
            t = statistics.median([v for p in members for v in visits[p][idx]])
            for p in members:
                slot = units[p]['ms'][idx[0]] if len(idx) == 2 else units[p]['ms']
                slot[idx[-1]] = t
        if len(members) > 1:
            for p in members:
                units[p]['pooled'] = len(members)
    const = statistics.median(rest)
    start_base = statistics.median(ends['baseline'])
    base_ks = [p[0] for p in points]
    table = dict(
        format=LATENCY_TABLE_FORMAT, arch=backbone.arch, family=backbone.family,
        variant=backbone.variant, selection=selection_options(backbone),
        input_shape=list(size), batch=int(batch), threads=used_threads, dtype=dtype,
        device=dev.type, device_name=device_name(dev), torch=torch.__version__,
        allocator=_ALLOCATOR['state'], unit_time='ms per call (one batch)', clock=clock,
        scope='backbone forward', multiple_of=int(multiple_of), rounds=int(rounds),
        warmup=int(warmup), baseline_ms=baseline_ms,
        full_ms=statistics.median(ends['full']) * baseline_ms / start_base,
        const_ms=const,
        units=[dict(u) for u in units.values()],
        dispersion=dict(
            baseline_ms_min=min(base_ks), baseline_ms_max=max(base_ks),
            baseline_spread=_spread(ends['baseline']), full_spread=_spread(ends['full']),
            unit_spread_median=statistics.median(spreads) if spreads else 0.,
            unit_spread_max=max(spreads) if spreads else 0.,
            const_ms_min=min(rest), const_ms_max=max(rest),
            note='every grid point scaled by the baseline timed in its rounds; '
                 'baseline_ms_min/max: those baselines (the drift of the machine); spread = '
                 '(max - min) / median of a module\'s rounds; const_ms_min/max: the network '
                 'minus its units over the grid points'),
        grid_points=n_points, grid_order='rotated' if rotate else 'aligned',
        pooled=bool(pool), build_s=time.perf_counter() - started,
        created=time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()), validation=None)
    LatencyCost(table)  # what was written can be read back
    return table


# ----------------------------------------------------------------------------- validation
def random_widths(cost: LatencyCost, rng: random.Random,
                  multiple_of: int = 8) -> Dict[Tuple[str, str], int]:
    """A random width for every unit, uniform over [1, full], rounded up to a multiple of
    ``multiple_of`` (capped at the full width) as the export rounds; heads are not rounded
    (the export keeps any count)."""
    m = max(1, int(multiple_of))
    return {u: rng.randint(1, d) if u[0] == HEADS else min(d, -(-rng.randint(1, d) // m) * m)
            for u, d in cost.unit_dims().items()}


def validate(table: dict, backbone: nn.Module, baseline: nn.Module, k: int = 10,
             rounds: int = 15, warmup: int = 1, multiple_of: int = 8,
             timer: Optional[Timer] = None, seed: int = 0,
             progress: Optional[Callable[[str], None]] = None) -> dict:
    """The predictor's error on ``k`` random subnets (:func:`random_widths`): each subnet and
    the baseline timed interleaved (``rounds`` rounds, medians) at the table's input size,
    batch, threads, dtype and device; predicted ratio (the table's prediction over its
    baseline) vs measured ratio (subnet over the baseline measured beside it).

    Returns dict(rows=[...], mean_abs_error, max_abs_error, k, rounds): errors in ratio
    points, i.e. fractions of the baseline latency."""
    if k < 1:
        raise ValueError(f'validate needs k >= 1 subnets, got {k}')
    cost = LatencyCost.from_table(table, backbone)
    dev = torch.device(table['device'])
    tdtype = DTYPES[table['dtype']]
    timer = timer or WallTimer(device=dev, clock=default_clock(dev, table.get('threads')))
    size = tuple(table['input_shape'])
    in_ch = next((m.in_channels for m in backbone.modules() if isinstance(m, nn.Conv2d)), 3)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((int(table['batch']), in_ch) + size, generator=g).to(dev, tdtype)
    rng = random.Random(seed)
    base = baseline.to(dev, tdtype).eval()
    rows = []
    started = time.perf_counter()
    with num_threads(table.get('threads')):
        for i in range(k):
            widths = random_widths(cost, rng, multiple_of)
            sub = pruned_copy(backbone, widths, dev, tdtype)
            t = _rounds({'baseline': (lambda: base(x), base), 'subnet': (lambda: sub(x), sub)},
                        rounds, warmup, timer)
            b, s = statistics.median(t['baseline']), statistics.median(t['subnet'])
            pred = cost.ratio(cost.count(widths))
            rows.append(dict(predicted_ratio=pred, measured_ratio=s / b, error=pred - s / b,
                             baseline_ms=b, subnet_ms=s, predicted_ms=cost.count(widths),
                             kept_channels=sum(w for (kind, _), w in widths.items()
                                               if kind == CHANNELS),
                             kept_hidden=sum(w for (kind, _), w in widths.items()
                                             if kind == HIDDEN),
                             kept_heads=sum(w for (kind, _), w in widths.items()
                                            if kind == HEADS)))
            del sub
            if progress:
                progress(f'validation {table["arch"]}: subnet {i + 1}/{k}: predicted '
                         f'{pred:.3f}, measured {s / b:.3f} ({time.perf_counter() - started:.1f}'
                         ' s)')
    errs = [abs(r['error']) for r in rows]
    return dict(k=k, rounds=rounds, multiple_of=multiple_of, seed=seed, rows=rows,
                clock=getattr(timer, 'clock_name', 'injected'),
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
