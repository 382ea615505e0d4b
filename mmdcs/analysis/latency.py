"""Latency of a pruned subnet against its baseline, measured in the same run, beside the FLOPs
ratio (``mmengine.analysis``, :func:`~mmdcs.analysis.complexity.count_flops`).

How the time is taken (:func:`time_models`):

* eval mode, ``torch.inference_mode()``, a fixed number of intra-op threads
  (``torch.set_num_threads``; restored afterwards);
* the same input tensor for both models; ``warmup`` untimed calls of each first;
* ``repeats`` timed rounds; **interleaved** (baseline, subnet, baseline, subnet, ...) so that a
  load change on a shared machine hits both models alike; each round times ``number``
  consecutive calls; the result is the **median** round, in ms per image (÷ batch size);
* on CUDA, ``torch.cuda.synchronize()`` before starting and before stopping each clock.

The ratio ``latency(subnet) / latency(baseline)`` is compared with
``FLOPs(subnet) / FLOPs(baseline)`` (the same input size, batch 1): ``within`` says whether they
differ by at most ``tolerance`` (0.05). :func:`profile_ops` gives the per-operator CPU time
breakdown (``torch.profiler``) to find where they part.

* :func:`latency_pair` — one arch: baseline and the subnet (random at a kept ratio with the
  paper's variant, or a given subnet), every batch size and device.
* :func:`latency_table` / :func:`format_latency_table` — several archs.
* :func:`plain_baseline` — the unpruned plain backbone a peer method's backbone (OFB, DynamicViT)
  compresses, to time it against.
* :func:`module_scaling` — where the two ratios part, by leaf module (narrowed / unchanged /
  added / outside), with the latency ratio the FLOPs can buy on the device.
* :func:`theta_fusion_timing` — DCS: qkv and Linear_θ as two matmuls vs one fused matmul.
* :func:`keep_freed_memory` — glibc keeps freed memory while timing (no page faults per forward).
"""
import contextlib
import ctypes
import ctypes.util
import os
import platform
import statistics
import time
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from mmdcs.selection import DCSAttention, SubnetSpec
from mmdcs.selection.budget import Measure
from .complexity import (TABLE_MODELS, _takes_mode, backbone_class,
                         build_backbone, count_flops, default_input_size, flop_analysis,
                         flops_budget_subnet, flops_ranked_subnet, random_subnet)

Size = Tuple[int, int]

#: the default models of the table (method.md §9)
LATENCY_MODELS = TABLE_MODELS
#: |latency ratio − FLOPs ratio| allowed
DEFAULT_TOLERANCE = 0.05

#: glibc ``mallopt`` parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
#: what :func:`keep_freed_memory` did to the allocator of this process (see environment_note)
_ALLOCATOR = {'state': 'system default'}


def keep_freed_memory() -> bool:
    """Let glibc's malloc keep the memory a forward frees, for the next forward to reuse.

    By default glibc serves every block above its mmap threshold (≤ 32 MiB) with a fresh
    ``mmap`` and gives it back on free, so each large activation of each forward is zero-filled
    page by page again by the kernel: on the 2-core development machine a SiLU over a 64 MiB
    tensor took 34 ms with a new output and 11 ms into an existing one, and MobileViT-XS at batch
    16 ran at 96 ms/img against 44 at batch 1. That charges a network per byte of activation
    above a size, not per operation, and favours whichever model has smaller activations (the
    pruned one). Allocators meant for inference (jemalloc, tcmalloc, PyTorch's CUDA caching
    allocator) keep freed memory; this does the same with glibc: ``mallopt(M_MMAP_MAX, 0)``
    (large blocks come from the heap) and ``mallopt(M_TRIM_THRESHOLD, 2**31 - 1)`` (the heap is
    not shrunk). Process-wide and for the rest of the process. Returns False (and changes
    nothing) where the C library is not glibc."""
    name = ctypes.util.find_library('c')
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # glibc only
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
    if ok:
        _ALLOCATOR['state'] = 'glibc keeping freed memory (mallopt: no mmap, no trim)'
    return ok


@contextlib.contextmanager
def num_threads(n: Optional[int]):
    """Set ``torch.set_num_threads(n)`` inside the block (None: leave it), restore after."""
    if n is None:
        yield
        return
    if n < 1:
        raise ValueError(f'threads must be >= 1, got {n}')
    old = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _sync(device) -> None:
    if device is not None and torch.device(device).type == 'cuda':
        torch.cuda.synchronize(device)


def _forward_fn(model: nn.Module) -> Callable:
    if _takes_mode(model):  # an mmengine model: 'tensor' mode (no data samples, no post-processing)
        return lambda x: model(x, mode='tensor')
    return model


# ----------------------------------------------------------------------------- the harness
#: the clocks a measurement reads: wall time, or the calling thread's CPU time (with one
#: intra-op thread on the CPU every operator of PyTorch and of onnxruntime runs on the calling
#: thread, so this is the time the forward computes, without the time a shared machine's
#: scheduler gives other processes; on a quiet machine the two agree)
CLOCKS = {'wall': time.perf_counter, 'thread': time.thread_time}
#: what :func:`measure_pair` measures, as a record's name (``meta['budget']['measured']``)
TIMED = 'latency'
#: a timed item: a call of no arguments and the module it runs (what a synthetic meter reads)
Item = Tuple[Callable[[], object], Optional[nn.Module]]


class Meter:
    """Seconds per call of ``fn`` on every clock of ``clocks`` (names of :data:`CLOCKS`, or
    name → a clock function), all read around the same calls: ``number`` calls, then more
    until ``min_time`` has passed on the first clock; on CUDA synchronised before the first
    call and after the last. ``meter(fn, module)`` is the one thing :func:`time_interleaved`
    asks of a meter (tests replace it with a synthetic one, which may return a float: the same
    seconds on every clock)."""

    def __init__(self, clocks: Union[Sequence[str], Dict[str, Callable[[], float]]] = ('wall', ),
                 min_time: float = 0., number: int = 1, device=None):
        if not isinstance(clocks, dict):
            unknown = [c for c in clocks if c not in CLOCKS]
            if unknown or not clocks:
                raise ValueError(f'clocks must be among {", ".join(CLOCKS)}, got '
                                 f'{list(clocks)}')
            clocks = {c: CLOCKS[c] for c in clocks}
        if number < 1 or min_time < 0:
            raise ValueError(f'need number >= 1 and min_time >= 0, got {number}, {min_time}')
        self.read, self.clocks = dict(clocks), tuple(clocks)
        self.min_time, self.number, self.device = float(min_time), int(number), device
        if device is not None and torch.device(device).type == 'cuda' and 'thread' in clocks:
            raise ValueError('CUDA is timed with the wall clock')

    def __call__(self, fn: Callable[[], object], module=None) -> Dict[str, float]:
        _sync(self.device)
        first = self.read[self.clocks[0]]
        t0 = {c: read() for c, read in self.read.items()}
        n = 0
        while True:
            fn()
            n += 1
            if n >= self.number:
                _sync(self.device)
                if first() - t0[self.clocks[0]] >= self.min_time:
                    break
        return {c: (read() - t0[c]) / n for c, read in self.read.items()}


def time_interleaved(items: Dict[str, Item], rounds: int, warmup: int,
                     meter: Callable, clocks: Sequence[str] = ('wall', )
                     ) -> Dict[str, Dict[str, List[float]]]:
    """THE timing loop of mmdcs: ms per call of every item over ``rounds`` interleaved rounds,
    every item once per round, the order rotated by one every round (no item always runs right
    after the same one, and a load change on a shared machine hits every item alike), after
    ``warmup`` untimed calls of each; ``meter(fn, module)`` → seconds per call (a
    :class:`Meter`, or a synthetic one: a float is the same on every clock of ``clocks``).
    Returns name → clock → ms per round."""
    if rounds < 1 or warmup < 0:
        raise ValueError(f'need rounds >= 1, warmup >= 0; got {rounds}, {warmup}')
    names = list(items)
    out = {n: {c: [] for c in clocks} for n in names}
    with torch.inference_mode():
        for _ in range(warmup):
            for fn, _m in items.values():
                fn()
        for r in range(rounds):
            k = r % len(names)
            for n in names[k:] + names[:k]:
                got = meter(*items[n])
                for c in clocks:
                    out[n][c].append(1e3 * float(got[c] if isinstance(got, dict) else got))
    return out


def spread(values: Sequence[float]) -> float:
    """Relative spread of a measurement's rounds: (max − min) / median."""
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med > 0 else 0.


def timing_stats(ms: Dict[str, List[float]], batch: int = 1) -> dict:
    """The summary of one item's rounds (``clock → ms``, the first clock the primary one):
    median_ms, min_ms, mean_ms, stdev_ms (per call), ms_per_image (median / batch), rounds
    (the primary clock's), spread, and ``clocks`` (clock → median ms)."""
    clock, ts = next(iter(ms.items()))
    med = statistics.median(ts)
    return dict(median_ms=med, min_ms=min(ts), mean_ms=statistics.fmean(ts),
                stdev_ms=statistics.stdev(ts) if len(ts) > 1 else 0., ms_per_image=med / batch,
                rounds=list(ts), spread=spread(ts), clock=clock,
                clocks={c: statistics.median(v) for c, v in ms.items()})


# ----------------------------------------------------------------------------- runtimes
#: the dtypes a table or a measurement runs in
DTYPES = {'fp32': torch.float32, 'fp16': torch.float16, 'bf16': torch.bfloat16}


class TorchRuntime:
    """PyTorch eager, the runtime a network is timed in by default: a module called in
    inference mode on ``device`` in ``dtype``, with ``threads`` intra-op threads
    (``torch.set_num_threads`` while timing, restored after). Every runtime (registered with
    :func:`register_runtime`) has this interface: ``prepare(module, args, kwargs, key)`` → a
    call of no arguments running the module once on those inputs; ``running()``, the context
    the calls run in; ``identity()``, what a measurement records of it; ``in_graph``, whether
    a module can be timed alone on the input it gets inside a network (onnxruntime times
    exported graphs: a module becomes a graph of its own, cached by ``key``);
    ``writes_files``, whether a prepared network is a file (the callable's ``file``)."""
    name = 'torch'
    in_graph = True
    #: whether a prepared network is a file the runtime runs (onnxruntime: its ONNX file)
    writes_files = False

    def __init__(self, device: str = 'cpu', threads: Optional[int] = 1, dtype: str = 'fp32',
                 workdir: Optional[str] = None, keep_files: bool = False):
        self.device, self.threads, self.dtype = torch.device(device), threads, dtype
        self.workdir = workdir  # PyTorch runs modules in memory: no file, nothing kept

    def tensor(self, x: torch.Tensor) -> torch.Tensor:
        """An input on the runtime's device and dtype."""
        return x.to(self.device, DTYPES[self.dtype])

    def prepare(self, module: nn.Module, args: tuple, kwargs: Optional[dict] = None,
                key: Optional[str] = None) -> Callable[[], object]:
        module.to(self.device, DTYPES[self.dtype]).eval()
        fn = _forward_fn(module)
        kwargs = kwargs or {}
        return lambda: fn(*args, **kwargs)

    def running(self):
        return num_threads(self.threads if self.device.type == 'cpu' else None)

    def identity(self) -> dict:
        return dict(name=self.name, version=str(torch.__version__),
                    options=dict(intra_op_threads=self.threads, device=str(self.device),
                                 dtype=self.dtype))


#: runtime name → its class (:class:`TorchRuntime`'s interface)
_RUNTIMES: Dict[str, Callable] = {'torch': TorchRuntime}


def register_runtime(name: str, cls: Callable) -> None:
    """Make ``name`` a runtime of tables and measurements (``--runtime NAME``): ``cls(device,
    threads, dtype, workdir, keep_files=False)`` with :class:`TorchRuntime`'s interface; its
    constructor refuses
    in one line (``ValueError``) what it cannot run here (a missing package or execution
    provider, a dtype)."""
    _RUNTIMES[name] = cls


def runtime_names() -> Tuple[str, ...]:
    """The registered runtimes (``torch``; ``onnxruntime`` and ``tensorrt`` once
    :mod:`mmdcs.apis` is imported)."""
    return tuple(_RUNTIMES)


def build_runtime(measure: Measure, workdir: Optional[str] = None, keep_files: bool = False):
    """The runtime a :class:`~mmdcs.selection.budget.Measure` names, set up as it says
    (``keep_files``: a runtime that writes files, such as onnxruntime's ONNX files, keeps those
    of the networks it measured while it lives); ``ValueError`` (one line) for an unknown one
    or one that cannot run here."""
    if measure.runtime not in _RUNTIMES:
        raise ValueError(f'runtime {measure.runtime!r} is not available here (known: '
                         f'{", ".join(_RUNTIMES)})')
    if measure.dtype not in DTYPES:
        raise ValueError(f'dtype must be one of {", ".join(DTYPES)}, got {measure.dtype!r}')
    return _RUNTIMES[measure.runtime](measure.device, measure.threads, measure.dtype, workdir,
                                      keep_files=keep_files)


def measure_clocks(measure: Measure) -> List[str]:
    """The clocks a measurement reads: the measure's first, then the wall clock."""
    return [measure.clock] + [c for c in ('wall', ) if c != measure.clock]


def time_models(models: Dict[str, nn.Module], inputs: torch.Tensor, warmup: int = 3,
                repeats: int = 10, number: int = 1, threads: Optional[int] = None, *,
                measure: Optional[Measure] = None, runtime=None,
                meter: Optional[Callable] = None,
                keys: Optional[Dict[str, str]] = None) -> Dict[str, dict]:
    """Time several models on the same input, interleaved round by round
    (:func:`time_interleaved`), in a runtime (default PyTorch eager on ``inputs``' device,
    ``threads`` intra-op threads; or as ``measure`` says, its rounds and warm-up then replacing
    ``repeats`` and ``warmup``). ``keys``: name → the runtime's cache key of the model (a
    model prepared under a key before is not exported again by onnxruntime).

    Returns name → :func:`timing_stats` (median_ms, min_ms, mean_ms, stdev_ms per batch,
    ms_per_image, rounds, spread, clocks) with batch, device, threads and the runtime's file
    of the model (``file``: onnxruntime's ONNX file, else None)."""
    if measure is None:
        measure = Measure(device=str(inputs.device), threads=threads, batch=int(inputs.shape[0]),
                          rounds=repeats, warmup=warmup)
    if measure.rounds < 1 or number < 1 or measure.warmup < 0:
        raise ValueError(f'need repeats >= 1, number >= 1, warmup >= 0; got {measure.rounds}, '
                         f'{number}, {measure.warmup}')
    runtime = runtime or build_runtime(measure)
    x = runtime.tensor(inputs)
    clocks = measure_clocks(measure)
    with runtime.running():
        items = {n: (runtime.prepare(m, (x, ), key=(keys or {}).get(n)), m)
                 for n, m in models.items()}
        meter = meter or Meter(clocks, number=number, device=measure.device)
        ms = time_interleaved(items, measure.rounds, measure.warmup, meter, clocks)
        used = torch.get_num_threads()
    batch = int(inputs.shape[0])
    return {n: dict(timing_stats(v, batch), batch=batch, device=str(measure.device),
                    threads=measure.threads or used, file=getattr(items[n][0], 'file', None))
            for n, v in ms.items()}


def network_key(net: nn.Module, inputs: torch.Tensor) -> str:
    """A runtime's cache key of a whole network that does not change (a baseline): its class,
    arch and variant, its parameters' count and the input's shape."""
    return repr((type(net).__name__, getattr(net, 'arch', None), getattr(net, 'variant', None),
                 sum(p.numel() for p in net.parameters()), tuple(inputs.shape)))


def measure_pair(baseline: nn.Module, pruned: nn.Module, inputs: torch.Tensor,
                 measure: Measure, runtime=None, meter: Optional[Callable] = None) -> dict:
    """A pruned network's latency against its baseline's, as ``measure`` says (its runtime,
    threads, batch, clock, rounds; :func:`time_models`): the record a measurement of a target
    keeps — baseline_ms, pruned_ms and ratio on the measure's clock, ratio_wall (the wall
    clock's), rounds, clock, threads, batch, device, device_name, runtime (name, version,
    options) — and, under ``files``, the runtime's files of both (onnxruntime: the ONNX
    files; the baseline's is prepared once per runtime)."""
    runtime = runtime or build_runtime(measure)
    t = time_models(dict(baseline=baseline, pruned=pruned), inputs, measure=measure,
                    runtime=runtime, meter=meter,
                    keys=dict(baseline=network_key(baseline, inputs)))
    b, p = t['baseline'], t['pruned']
    wall = ((p['clocks']['wall'] / b['clocks']['wall']) if 'wall' in p['clocks']
            else p['median_ms'] / b['median_ms'])
    return dict(baseline_ms=float(b['median_ms']), pruned_ms=float(p['median_ms']),
                ratio=float(p['median_ms'] / b['median_ms']), ratio_wall=float(wall),
                rounds=int(measure.rounds), clock=str(b['clock']), threads=measure.threads,
                batch=int(measure.batch), device=str(measure.device),
                device_name=device_name(measure.device), runtime=runtime.identity(),
                spread=max(b['spread'], p['spread']),
                files=dict(baseline=b['file'], pruned=p['file']))


def device_name(device) -> str:
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


def profile_ops(models: Union[nn.Module, Dict[str, nn.Module]], inputs: torch.Tensor,
                repeats: int = 3, top: int = 12, threads: Optional[int] = None,
                rounds: int = 3) -> Union[List[dict], Dict[str, List[dict]]]:
    """Per-operator CPU self time of ``model(inputs)`` (``torch.profiler``, eval, inference
    mode), per forward pass.

    ``models`` may be one module or name → module: several models are profiled **interleaved**,
    ``rounds`` sessions each of ``repeats`` calls (after one warm-up call), and each operator's
    time is the median over the rounds, so that a load change on a shared machine does not hit
    one model only.

    Returns (per model) the ``top`` operators by self CPU time (``top=None``: all) as dicts:
    op, calls (per forward), self_ms (per forward), share (of the model's total self time);
    the list has a ``total_ms`` entry last (op ``'[total]'``).
    """
    from torch.profiler import ProfilerActivity, profile
    single = isinstance(models, nn.Module)
    named = {'model': models} if single else dict(models)
    fns = {}
    for name, m in named.items():
        m.eval()
        fns[name] = _forward_fn(m)
    per_round: Dict[str, List[Dict[str, Tuple[float, float]]]] = {n: [] for n in named}
    with num_threads(threads), torch.inference_mode():
        for fn in fns.values():
            fn(inputs)
        for r in range(max(1, rounds)):
            order = list(fns.items()) if r % 2 == 0 else list(fns.items())[::-1]
            for name, fn in order:
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    for _ in range(repeats):
                        fn(inputs)
                per_round[name].append({
                    e.key: (e.count / repeats, e.self_cpu_time_total / 1e3 / repeats)
                    for e in prof.key_averages()})
    out = {}
    for name, rounds_ in per_round.items():
        ops = set().union(*rounds_)
        rows = []
        for op in ops:
            vals = [rd.get(op, (0., 0.)) for rd in rounds_]
            rows.append(dict(op=op, calls=statistics.median(v[0] for v in vals),
                             self_ms=statistics.median(v[1] for v in vals)))
        total = sum(r['self_ms'] for r in rows) or 1.
        for r in rows:
            r['share'] = r['self_ms'] / total
        rows.sort(key=lambda r: -r['self_ms'])
        rows = rows[:top] if top else rows
        rows.append(dict(op='[total]', calls=0., self_ms=total, share=1.))
        out[name] = rows
    return out['model'] if single else out


@torch.inference_mode()
def theta_fusion_timing(model: nn.Module, inputs: torch.Tensor, rounds: int = 7,
                        number: int = 20, threads: Optional[int] = None) -> List[dict]:
    """Would computing Linear_θ in the same matmul as qkv pay? (a DCS model's attention).

    For every :class:`~mmdcs.selection.DCSAttention` with a full-rank Linear_θ, the input it
    sees in ``model(inputs)`` is captured, then timed (interleaved rounds of ``number`` calls,
    median) as it runs now — ``F.linear`` with the qkv weight, then with θ's — and as one
    ``F.linear`` with both weights stacked (the fused form, split afterwards).

    Returns one dict per attention: name, tokens, in_dim, out_qkv, out_theta, separate_us,
    fused_us, saving (1 − fused/separate).
    """
    captured = {}
    handles = []

    def capture(mod, args, name):
        captured.setdefault(name, (mod, args[0].clone()))  # returns None: the input is kept

    for name, m in model.named_modules():
        sel = getattr(m, 'qk_select', None)
        if (isinstance(m, DCSAttention) and sel is not None
                and getattr(sel, 'theta_down', None) is None):
            handles.append(m.register_forward_pre_hook(
                lambda mod, args, _n=name: capture(mod, args, _n)))
    try:
        _forward_fn(model.eval())(inputs)
    finally:
        for h in handles:
            h.remove()
    rows = []
    with num_threads(threads):
        for name, (m, x) in captured.items():
            x = x.reshape(-1, x.shape[-1])
            wq, bq = m.qkv.weight, m.qkv.bias
            wt, bt = m.qk_select.theta.weight, m.qk_select.theta.bias
            wf = torch.cat([wq, wt])
            bf = torch.cat([bq if bq is not None else wq.new_zeros(wq.shape[0]), bt])
            split = [wq.shape[0], wt.shape[0]]

            def separate():
                return F.linear(x, wq, bq), F.linear(x, wt, bt)

            def fused():
                return F.linear(x, wf, bf).split(split, -1)
            times = time_interleaved({'separate': (separate, m), 'fused': (fused, m)},
                                     max(1, rounds), 1, Meter(number=number))
            times = {k: [t * 1e3 for t in v['wall']] for k, v in times.items()}  # µs
            sep, fus = statistics.median(times['separate']), statistics.median(times['fused'])
            rows.append(dict(name=name, tokens=x.shape[0], in_dim=x.shape[1],
                             out_qkv=split[0], out_theta=split[1], separate_us=sep,
                             fused_us=fus, saving=1 - fus / sep))
    return rows


def format_theta_fusion(rows: Sequence[dict], title: str = '') -> str:
    """Markdown table of :func:`theta_fusion_timing` rows, with their total."""
    lines = [title] if title else []
    lines += ['| attention | tokens | in | qkv out | θ out | separate µs | fused µs | saving |',
              '|' + '---|' * 8]
    for r in rows:
        lines.append(f'| {r["name"]} | {r["tokens"]} | {r["in_dim"]} | {r["out_qkv"]} | '
                     f'{r["out_theta"]} | {r["separate_us"]:.1f} | {r["fused_us"]:.1f} | '
                     f'{r["saving"]:+.1%} |')
    if rows:
        sep = sum(r['separate_us'] for r in rows)
        fus = sum(r['fused_us'] for r in rows)
        lines.append(f'| total | | | | | {sep:.1f} | {fus:.1f} | {1 - fus / sep:+.1%} |')
    return '\n'.join(lines)


#: the parts of :func:`module_scaling`
SCALING_PARTS = ('narrowed', 'unchanged', 'added', 'outside modules')


def _leaves(model: nn.Module) -> Dict[str, nn.Module]:
    return {n: m for n, m in model.named_modules() if n and not any(True for _ in m.children())}


def _numel(out) -> int:
    if isinstance(out, torch.Tensor):
        return out.numel()
    if isinstance(out, (tuple, list)):
        return sum(_numel(o) for o in out)
    return 0


@torch.inference_mode()
def module_scaling(base: nn.Module, sub: nn.Module, inputs: torch.Tensor, rounds: int = 5,
                   threads: Optional[int] = None) -> dict:
    """Where the latency ratio parts from the FLOPs ratio, module by module.

    Every leaf module of both models is timed with forward hooks (``rounds`` interleaved forward
    passes after one warm-up, median per module; the hooks add a few µs per module to both
    models alike) and counted (:func:`~mmdcs.analysis.complexity.flop_analysis`, batch 1).
    The baseline's leaves fall into three parts by what the subnet did to them, matched by name:
    **narrowed** (fewer FLOPs in the subnet, or for a parameter-free leaf such as an activation
    or a norm without FLOPs, a smaller output), **unchanged**, and — the subnet's own —
    **added** (e.g. DCS's Linear_θ and gates); **outside modules** is the time of the forward
    pass not spent in any leaf (functional code: attention products, reshapes, window shifts,
    residual additions, the gather/scatter of a pruned MLP).

    ``expected_ratio`` is the latency ratio the subnet would have if every narrowed leaf took
    its baseline time × its own FLOPs ratio (output-size ratio for parameter-free leaves),
    every other part kept its baseline time and the added leaves their measured time: the
    ratio that the FLOPs can buy on this device given where the baseline spends its time. The
    measured ratio above it is time the narrowed operators lose (narrow kernels, per-call
    overhead, gather/scatter); the expected ratio above the FLOPs ratio is time spent where the
    FLOPs are few (memory-bound and per-call costs of the parts the method does not prune).

    Returns dict(parts=[dict(part, base_ms, sub_ms, base_mflops, sub_mflops)],
    base_ms, sub_ms (the hooked forward passes), measured_ratio, expected_ratio, flops_ratio,
    narrowed_time_share, narrowed_flops_share (of the baseline)).
    """
    x1 = inputs[:1]
    models = {'base': base.eval(), 'sub': sub.eval()}
    leaves = {k: _leaves(m) for k, m in models.items()}
    flops, times, sizes = {}, {}, {}
    for k, m in models.items():
        fa = flop_analysis(m, inputs=x1)
        by_module = fa.by_module()
        flops[k] = {n: by_module.get(n, 0) for n in leaves[k]}
        flops[k]['[total]'] = fa.total()
    records: Dict[str, Dict[str, List[float]]] = {k: {} for k in models}
    handles = []
    for k, ls in leaves.items():
        sizes[k] = {}
        for n, leaf in ls.items():
            def pre(mod, args, _n=n, _k=k):
                mod.__dict__['_mmdcs_t0'] = time.perf_counter()

            def post(mod, args, out, _n=n, _k=k):
                t = time.perf_counter() - mod.__dict__.pop('_mmdcs_t0')
                records[_k].setdefault(_n, [0.])[-1] += t
                sizes[_k][_n] = _numel(out)
            handles += [leaf.register_forward_pre_hook(pre), leaf.register_forward_hook(post)]
    fns = {k: _forward_fn(m) for k, m in models.items()}

    def call(k):
        def run():
            for v in records[k].values():
                v.append(0.)  # this call's time per leaf, added up by the hooks
            fns[k](inputs)
        return run
    try:
        with num_threads(threads):
            for fn in fns.values():
                fn(inputs)
            for k in models:
                records[k].clear()
            totals = time_interleaved({k: (call(k), m) for k, m in models.items()},
                                      max(1, rounds), 0, Meter())
    finally:
        for h in handles:
            h.remove()
    med = {k: {n: statistics.median(v[-rounds:]) * 1e3 for n, v in rec.items()}
           for k, rec in records.items()}
    total = {k: statistics.median(v['wall']) for k, v in totals.items()}
    parts = {p: dict(part=p, base_ms=0., sub_ms=0., base_mflops=0., sub_mflops=0.)
             for p in SCALING_PARTS}
    expected = 0.
    for n in leaves['base']:
        tb, ts = med['base'].get(n, 0.), med['sub'].get(n, 0.)
        fb, fs = flops['base'][n], flops['sub'].get(n, 0)
        if fb > 0:
            scale, narrowed = fs / fb, fs < fb
        else:
            nb, ns = sizes['base'].get(n, 0), sizes['sub'].get(n, 0)
            scale = ns / nb if nb else 1.
            narrowed = ns < nb
        part = parts['narrowed' if narrowed else 'unchanged']
        expected += tb * scale if narrowed else tb
        part['base_ms'] += tb
        part['sub_ms'] += ts
        part['base_mflops'] += fb / 1e6
        part['sub_mflops'] += fs / 1e6
    for n in leaves['sub']:
        if n not in leaves['base']:
            parts['added']['sub_ms'] += med['sub'].get(n, 0.)
            parts['added']['sub_mflops'] += flops['sub'][n] / 1e6
            expected += med['sub'].get(n, 0.)
    outside = parts['outside modules']
    outside['base_ms'] = total['base'] - sum(med['base'].values())
    outside['sub_ms'] = total['sub'] - sum(med['sub'].values())
    outside['base_mflops'] = (flops['base']['[total]'] / 1e6 - sum(
        p['base_mflops'] for p in parts.values()))
    outside['sub_mflops'] = (flops['sub']['[total]'] / 1e6 - sum(
        p['sub_mflops'] for k, p in parts.items() if k != 'outside modules'))
    expected += outside['base_ms']
    nar = parts['narrowed']
    return dict(parts=list(parts.values()), base_ms=total['base'], sub_ms=total['sub'],
                measured_ratio=total['sub'] / total['base'],
                expected_ratio=expected / total['base'],
                flops_ratio=flops['sub']['[total]'] / flops['base']['[total]'],
                narrowed_time_share=nar['base_ms'] / total['base'],
                narrowed_flops_share=nar['base_mflops'] * 1e6 / flops['base']['[total]'])


def format_module_scaling(report: dict, title: str = '') -> str:
    """Markdown table of a :func:`module_scaling` report and its two ratios."""
    lines = [title] if title else []
    lines += ['| part | baseline ms | subnet ms | time ratio | baseline MFLOPs | subnet MFLOPs '
              '| FLOPs ratio |', '|' + '---|' * 7]

    def ratio(a, b):
        return f'{a / b:.3f}' if b else '—'
    for p in report['parts'] + [dict(part='total', base_ms=report['base_ms'],
                                     sub_ms=report['sub_ms'], base_mflops=float('nan'),
                                     sub_mflops=float('nan'))]:
        if p['part'] == 'total':
            fl = ('', '', f'{report["flops_ratio"]:.3f}')
        else:
            fl = (f'{p["base_mflops"]:.1f}', f'{p["sub_mflops"]:.1f}',
                  ratio(p['sub_mflops'], p['base_mflops']))
        lines.append(f'| {p["part"]} | {p["base_ms"]:.2f} | {p["sub_ms"]:.2f} | '
                     f'{ratio(p["sub_ms"], p["base_ms"])} | {fl[0]} | {fl[1]} | {fl[2]} |')
    lines.append(
        f'narrowed modules: {report["narrowed_time_share"]:.1%} of the baseline\'s time, '
        f'{report["narrowed_flops_share"]:.1%} of its FLOPs. Latency ratio measured (hooked) '
        f'{report["measured_ratio"]:.3f}; expected if every narrowed module ran at its FLOPs '
        f'ratio and nothing else changed {report["expected_ratio"]:.3f}; FLOPs ratio '
        f'{report["flops_ratio"]:.3f}.')
    return '\n'.join(lines)


#: operator groups of :func:`op_groups` (substring match on the aten op name, first match wins)
OP_GROUPS = (
    ('gather/scatter', ('index_select', 'index_copy', 'index_add', 'new_zeros', 'zero_',
                        'fill_', 'gather', 'scatter', 'index')),
    ('attention', ('scaled_dot_product', 'flash_attention', 'softmax', 'bmm', 'baddbmm')),
    ('GEMM/conv', ('addmm', 'aten::mm', 'matmul', 'convolution', 'conv2d', 'linear')),
    ('norm', ('layer_norm', 'batch_norm')),
    ('activation', ('gelu', 'silu', 'relu', 'hardswish', 'sigmoid')),
    ('copy/layout', ('copy_', 'contiguous', 'clone', 'cat', 'pad', 'roll', 'reshape', 'view',
                     'permute', 'transpose', 'as_strided', 'empty', 'expand', 'unfold')),
)


def op_groups(rows: Sequence[dict]) -> Dict[str, float]:
    """Self ms per forward of :func:`profile_ops` rows (``top=None``) summed by
    :data:`OP_GROUPS` (+ 'other' and 'total')."""
    out = {name: 0. for name, _ in OP_GROUPS}
    out['other'] = 0.
    total = 0.
    for r in rows:
        if r['op'] == '[total]':
            continue
        total += r['self_ms']
        for name, keys in OP_GROUPS:
            if any(k in r['op'] for k in keys):
                out[name] += r['self_ms']
                break
        else:
            out['other'] += r['self_ms']
    out['total'] = total
    return out


def format_op_groups(groups: Dict[str, Dict[str, float]]) -> str:
    """Markdown table: op group × model (ms per forward) and subnet/baseline ratios."""
    names = list(groups)
    keys = list(next(iter(groups.values())))
    head = '| op group | ' + ' | '.join(f'{n} ms' for n in names) + ' |'
    if len(names) == 2:
        head += f' {names[1]}/{names[0]} |'
    lines = [head, '|' + '---|' * (head.count('|') - 1)]
    for k in keys:
        vals = [groups[n][k] for n in names]
        line = f'| {k} | ' + ' | '.join(f'{v:.2f}' for v in vals) + ' |'
        if len(names) == 2:
            line += f' {vals[1] / vals[0]:.3f} |' if vals[0] > 0 else ' — |'
        lines.append(line)
    return '\n'.join(lines)


def format_profile(rows: Sequence[dict], title: str = '') -> str:
    lines = [title] if title else []
    lines.append(f'{"op":<40} {"calls":>7} {"self ms":>9} {"share":>7}')
    for r in rows:
        calls = '' if r['op'] == '[total]' else f'{r["calls"]:.0f}'
        lines.append(f'{r["op"][:40]:<40} {calls:>7} {r["self_ms"]:>9.3f} '
                     f'{r["share"]:>6.1%}')
    return '\n'.join(lines)


def _size(size: Union[None, int, Sequence[int]], arch: str) -> Size:
    if size is None:
        return default_input_size(backbone_class(arch))
    if isinstance(size, int):
        return (size, size)
    return (int(size[0]), int(size[-1]))


def is_peer_backbone(backbone: Union[nn.Module, type]) -> bool:
    """Whether ``backbone`` (a module or a class) is one of the peer methods' (OFB or
    DynamicViT / DynamicSwin): its ``is_peer`` marker (the backbone contract)."""
    return bool(getattr(backbone, 'is_peer', False))


def plain_baseline(backbone: nn.Module, input_size: Size, seed: int = 0) -> nn.Module:
    """The plain, unpruned backbone of the family and arch of ``backbone`` (e.g. an exported
    ``OFBViT`` of DeiT-S → ``ViT('vit-s16', variant='baseline')``) at ``input_size``, eval mode,
    random weights."""
    arch = getattr(backbone, 'plain_arch', backbone.arch)  # a peer's DeiT names: ViT's
    torch.manual_seed(seed)
    return build_backbone(arch, 'baseline', None, input_size)


def build_pair(arch: str, ratio: float = 0.7, variant: Optional[str] = None,
               subnet: Union[None, str, dict, SubnetSpec] = None,
               input_size: Union[None, int, Sequence[int]] = None, seed: int = 0,
               multiple_of: int = 1, target_flops: Optional[float] = None,
               select_hidden: bool = False, prune_channels: bool = True,
               theta_rank: Optional[int] = None, select_heads: bool = False,
               ranked: bool = False) -> Tuple[nn.Module, nn.Module, SubnetSpec]:
    """(baseline backbone, pruned subnet backbone, its spec), eval mode, random weights.

    With ``target_flops`` the subnet is instead the one at that FLOPs budget (one kept ratio for
    every block, and with ``select_hidden`` every MLP's hidden units too;
    :func:`~mmdcs.analysis.complexity.flops_budget_subnet`), ``ratio`` unused.

    The subnet is ``subnet`` if given (its arch must be ``arch``), else a seeded random subnet
    keeping ``ratio`` of every prunable block with ``variant`` (default: the paper's variant of
    the family, its class's ``paper_variant``), every D̃ rounded up to a
    multiple of ``multiple_of`` (:func:`mmdcs.selection.export_subnet`). Weights are random
    (timing does not depend on them); both are built at ``input_size`` (ViT: position-embedding
    grid). ``theta_rank``: the random subnet's Linear_θ at that rank (DCS; recorded in the spec).
    ``select_heads`` (with ``target_flops``): attention heads pruned too, the channels, hidden
    units and heads ranked by the magnitude scorer per unit of FLOPs
    (:func:`~mmdcs.analysis.complexity.flops_ranked_subnet`) instead of one kept ratio;
    ``ranked``: that ranking without heads (the same export, every head kept).
    """
    cls = backbone_class(arch)
    size = _size(input_size, arch)
    if subnet is not None:
        spec = SubnetSpec.coerce(subnet)
        if spec.arch != arch:
            raise ValueError(f'the subnet is for {spec.arch!r}, not {arch!r}')
    else:
        if not 0 < ratio <= 1:
            raise ValueError(f'ratio must be in (0, 1], got {ratio}')
        variant = variant or cls.paper_variant
        kwargs = cls.size_kwargs(size)
        if theta_rank is not None:
            kwargs['theta_rank'] = theta_rank
        if (select_heads or ranked) and (target_flops is None or not prune_channels):
            raise ValueError('select_heads and ranked go with target_flops and prune_channels')
        if target_flops is not None and (select_heads or ranked):
            spec = flops_ranked_subnet(cls, arch, variant, target_flops, select_hidden,
                                       select_heads, seed, multiple_of, **kwargs)
        elif target_flops is not None:
            spec = flops_budget_subnet(cls, arch, variant, target_flops, select_hidden,
                                       prune_channels, seed, multiple_of, **kwargs)
        else:
            spec = random_subnet(cls, arch, variant, ratio, seed, multiple_of, **kwargs)
    torch.manual_seed(seed)
    base = build_backbone(arch, 'baseline', None, size)
    sub = build_backbone(arch, spec.variant, spec, size)
    return base.eval(), sub.eval(), spec


def latency_pair(arch: str, ratio: float = 0.7, variant: Optional[str] = None,
                 subnet: Union[None, str, dict, SubnetSpec] = None,
                 input_size: Union[None, int, Sequence[int]] = None,
                 batch_sizes: Sequence[int] = (1, 16), devices: Sequence[str] = ('cpu', 'cuda'),
                 threads: Optional[int] = 1, warmup: int = 3, repeats: int = 10,
                 number: int = 1, tolerance: float = DEFAULT_TOLERANCE, seed: int = 0,
                 models: Optional[Tuple[nn.Module, nn.Module]] = None,
                 runtime: str = 'torch') -> List[dict]:
    """Baseline vs subnet latency of one arch, every batch size and available device.

    Args:
        arch: e.g. ``'vit-s16'``.
        ratio, variant, subnet, input_size, seed: see :func:`build_pair`.
        batch_sizes: batches to time (e.g. 1 and 16).
        devices: ``'cpu'`` and/or ``'cuda'`` (skipped when CUDA is not available).
        threads: CPU intra-op threads (``torch.set_num_threads``) during the CPU timing.
        warmup, repeats, number: see :func:`time_models`.
        tolerance: allowed |latency ratio − FLOPs ratio|.
        models: (baseline, subnet) already built (then ratio and variant only label the row:
            ``ratio`` unless the subnet has a ``subnet_spec``, ``variant`` or the subnet's;
            ``ratio=None`` shows no kept ratio).
        runtime: what the networks run in (:func:`build_runtime`: ``'torch'``,
            ``'onnxruntime'``, ...).

    Returns:
        one dict per (device, batch): model, variant, kept_ratio, input, device, batch, threads,
        base_ms / sub_ms (median ms per image), base_stdev_ms / sub_stdev_ms (per batch),
        latency_ratio (of the medians), base_min_ms / sub_min_ms / latency_ratio_min (of the
        fastest rounds, a check under machine load), base_gflops / sub_gflops (per image),
        flops_ratio, gap (latency ratio − FLOPs ratio), within (|gap| ≤ tolerance), tolerance,
        repeats, warmup.
    """
    size = _size(input_size, arch)
    if models is None:
        base, sub, spec = build_pair(arch, ratio, variant, subnet, size, seed)
        kept, var = spec.kept_ratio, spec.variant
        hidden_kept = spec.hidden_kept_ratio
    else:
        base, sub = models
        spec = getattr(sub, 'subnet_spec', None)
        kept = spec.kept_ratio if spec is not None else ratio
        hidden_kept = spec.hidden_kept_ratio if spec is not None else None
        var = variant or getattr(sub, 'variant', '?')
    base_flops = count_flops(base, size)
    sub_flops = count_flops(sub, size)
    flops_ratio = sub_flops / base_flops
    rows, runtimes = [], {}
    for dev in devices:
        if dev == 'cuda' and not torch.cuda.is_available():
            continue
        device = torch.device(dev)
        for b in batch_sizes:
            g = torch.Generator().manual_seed(seed)
            x = torch.randn((int(b), 3) + tuple(size), generator=g).to(device)
            measure = Measure(runtime=runtime, device=dev, batch=int(b), rounds=repeats,
                              warmup=warmup, threads=threads if device.type == 'cpu' else None)
            if dev not in runtimes:
                runtimes[dev] = build_runtime(measure)
            t = time_models({'baseline': base, 'subnet': sub}, x, number=number,
                            measure=measure, runtime=runtimes[dev])
            lat_ratio = t['subnet']['median_ms'] / t['baseline']['median_ms']
            lat_ratio_min = t['subnet']['min_ms'] / t['baseline']['min_ms']
            gap = lat_ratio - flops_ratio
            rows.append(dict(
                model=arch, variant=var, kept_ratio=kept, hidden_kept_ratio=hidden_kept,
                input=f'{size[0]}x{size[1]}',
                device=dev, batch=int(b), threads=t['baseline']['threads'],
                base_ms=t['baseline']['ms_per_image'], sub_ms=t['subnet']['ms_per_image'],
                base_stdev_ms=t['baseline']['stdev_ms'], sub_stdev_ms=t['subnet']['stdev_ms'],
                latency_ratio=lat_ratio, latency_ratio_min=lat_ratio_min,
                base_min_ms=t['baseline']['min_ms'] / b, sub_min_ms=t['subnet']['min_ms'] / b,
                base_gflops=base_flops / 1e9,
                sub_gflops=sub_flops / 1e9, flops_ratio=flops_ratio, gap=gap,
                within=abs(gap) <= tolerance, tolerance=tolerance,
                repeats=repeats, warmup=warmup, runtime=runtime))
            if spec is not None and spec.heads:  # head selection: the kept heads, summed
                rows[-1].update(heads_kept=sum(b.kept for b in spec.heads),
                                heads_total=sum(b.dim for b in spec.heads))
        if device.type == 'cuda':
            base.to('cpu')
            sub.to('cpu')
    return rows


def latency_table(models: Iterable[str] = LATENCY_MODELS, ratio: float = 0.7,
                  input_sizes: Union[None, int, Dict[str, int]] = None,
                  variants: Optional[Dict[str, str]] = None, **kwargs) -> List[dict]:
    """:func:`latency_pair` rows of several archs (``input_sizes``: None = nominal, one size,
    or arch → size; ``variants``: family → variant; other arguments as latency_pair)."""
    variants = dict(variants or {})
    rows = []
    for arch in models:
        cls = backbone_class(arch)
        size = input_sizes.get(arch) if isinstance(input_sizes, dict) else input_sizes
        rows += latency_pair(arch, ratio, variants.get(cls.family, cls.paper_variant),
                             input_size=size, **kwargs)
    return rows


def _kept(ratio: Optional[float], hidden: Optional[float] = None) -> str:
    text = '—' if ratio is None else f'{ratio:.2f}'
    return text if hidden is None else f'{text}, hidden {hidden:.2f}'


def format_latency_table(rows: Sequence[dict]) -> str:
    """Markdown table of :func:`latency_pair` rows (a "heads kept" column, ``kept/total``,
    when a row's subnet selects heads)."""
    with_heads = any('heads_kept' in r for r in rows)
    head = ('| model | variant | kept | input | device | batch | threads | baseline ms/img | '
            'subnet ms/img | latency ratio | (of min) | FLOPs ratio | gap | within ±tol |'
            + (' heads kept |' if with_heads else ''))
    lines = [head, '|' + '---|' * (14 + with_heads)]
    for r in rows:
        lines.append(
            f'| {r["model"]} | {r["variant"]} | '
            f'{_kept(r["kept_ratio"], r.get("hidden_kept_ratio"))} | {r["input"]} | '
            f'{r["device"]} | {r["batch"]} | {r["threads"]} | {r["base_ms"]:.2f} | '
            f'{r["sub_ms"]:.2f} | {r["latency_ratio"]:.3f} | '
            f'{r.get("latency_ratio_min", float("nan")):.3f} | {r["flops_ratio"]:.3f} | '
            f'{r["gap"]:+.3f} | {"yes" if r["within"] else "NO"} (±{r["tolerance"]:.2f}) |'
            + ((f' {r["heads_kept"]}/{r["heads_total"]} |' if 'heads_kept' in r else ' all |')
               if with_heads else ''))
    return '\n'.join(lines)


def environment_note() -> str:
    """Torch version, threads and CPU count (printed under a table)."""
    cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'
    return (f'torch {torch.__version__}, {os.cpu_count()} CPUs visible, CUDA: {cuda}; '
            f'allocator: {_ALLOCATOR["state"]}; '
            'ms/img and latency ratio: median of interleaved rounds after warm-up ("of min": '
            'ratio of the fastest rounds); FLOPs = multiply-accumulates '
            '(mmengine.analysis, attention products included), batch 1.')
