"""Side by side with Torch-Pruning at equal FLOPs or equal measured latency (docs/benchmarks.md *Side by side
with Torch-Pruning*).

One model, one process: mmdcs's budget subnet at a latency target (the paper's variant with
hidden-unit selection, its latency table, :func:`~mmdcs.analysis.latency_target.
latency_budget_spec`) against the peer users pick instead, Torch-Pruning (``torch-pruning``, an
optional benchmark extra, not a dependency of mmdcs) applied to **timm's model of the same arch**
(the model mmdcs's baseline equals after conversion, README *Backbones*), pruned to the FLOPs
ratio mmdcs's subnet reached:

* ``'hidden'`` — the hidden units of every MLP / inverted bottleneck only
  (:func:`hidden_unit_layers`: the groups of Torch-Pruning's dependency graph whose channels stay
  between one layer's output and one other layer's input), the residual width untouched;
* ``'hidden+heads'`` — the same and whole attention heads (timm attentions with a ``qkv`` Linear
  and ``num_heads``), one ratio for both (Torch-Pruning's own ViT recipe); where whole heads make
  the FLOPs jump over the target, the heads stay at the last ratio below it and the hidden
  units alone are iterated (:func:`match_ratio`).

Both with ``MagnitudePruner`` (L2 magnitude, per-layer ratio, ``round_to`` channels), the
ratio iterated until the FLOPs (``mmengine`` multiply-accumulates with the attention products,
:func:`~mmdcs.analysis.complexity.count_flops`, the same counter as mmdcs's) are within ``tol``
of mmdcs's subnet's. Every model is then timed **in the same run**, interleaved round by round
(the order rotated every round), both clocks read around every call (:func:`time_all`:
the wall clock, what a user waits, and with one thread the calling thread's CPU time, which a
shared machine's scheduler does not inflate), medians; each ratio is against its own baseline
(mmdcs's backbone, or timm's ``forward_features``). Random weights: timing depends on the widths
only.

* :func:`peer_benchmark` — one model: its rows; :func:`format_peer_benchmark` — as markdown.
* :func:`match_ratio` — the FLOPs-matching loop (bracketed secant with bisection);
  :func:`match_flops` — with whole heads.
"""
import copy
import math
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn

from mmdcs.selection import SubnetSpec
from mmdcs.selection.budget import Measure
from .complexity import (backbone_class, build_backbone, count_flops, count_params,
                         flops_budget_subnet)
from .latency import _size, build_runtime, time_models
from .latency_target import latency_budget_spec, latency_target_row

#: the peer's rows
PEER_METHODS = ('hidden', 'hidden+heads')
#: how to install the optional peer
INSTALL_HINT = ('pip install torch-pruning==1.6.1 (the benchmark extra: pip install -e '
                '".[bench]")')
#: the columns of :func:`format_peer_benchmark`
COLUMNS = ('model', 'method', 'flops_ratio', 'params_ratio', 'latency_ratio',
           'latency_ratio_thread', 'baseline_ms', 'pruned_ms')


def import_torch_pruning():
    """The ``torch_pruning`` module; ImportError with one line saying how to install it."""
    try:
        import torch_pruning  # lazy import: an optional benchmark extra, not a dependency
    except ImportError as e:
        raise ImportError(f'torch-pruning is not installed, the peer of this benchmark: '
                          f'{INSTALL_HINT}') from e
    return torch_pruning


# ----------------------------------------------------------------------------- matching
class MatchResult(dict):
    """``ratio`` (the pruning ratio found), ``value`` (the FLOPs ratio it gives), ``converged``
    (``|value − target| ≤ tol·target``), ``lo``/``hi`` (the last bracket: value(lo) ≥ target ≥
    value(hi)) and ``evaluations`` (every (ratio, value) tried)."""

    def __getattr__(self, k):
        try:
            return self[k]
        except KeyError as e:
            raise AttributeError(k) from e


def match_ratio(value_at: Callable[[float], float], target: float, tol: float = 0.01,
                lo: float = 0., hi: float = 0.9, max_iter: int = 24,
                value_lo: Optional[float] = None) -> MatchResult:
    """The pruning ratio r in [lo, hi] at which ``value_at(r)`` (a FLOPs ratio, non-increasing
    in r, possibly in steps) is within ``tol`` (relative) of ``target``.

    A bracketed secant step (the FLOPs of a pruned network are close to linear in the ratio),
    with a bisection where the secant point falls in the outer tenths of the bracket or the
    same end moved twice in a row; stops
    at the first value within tolerance, or when the bracket is narrower than 1e-4 (a step of
    the function straddles the target: ``converged`` False, the bracket says where).
    ``value_lo``: ``value_at(lo)`` if known (e.g. 1.0 for nothing pruned)."""
    if not 0 < target:
        raise ValueError(f'target must be > 0, got {target}')
    if not lo < hi:
        raise ValueError(f'need lo < hi, got {lo}, {hi}')
    evals: List[Tuple[float, float]] = []

    def f(r):
        v = float(value_at(r))
        evals.append((r, v))
        return v

    def done(r, v, ok, a, b):
        return MatchResult(ratio=r, value=v, converged=ok, lo=a, hi=b, evaluations=evals)

    v_lo = f(lo) if value_lo is None else float(value_lo)
    if abs(v_lo - target) <= tol * target:
        return done(lo, v_lo, True, lo, lo)
    v_hi = f(hi)
    if abs(v_hi - target) <= tol * target:
        return done(hi, v_hi, True, hi, hi)
    if v_lo < target:
        return done(lo, v_lo, False, lo, lo)  # nothing to prune: already below the target
    if v_hi > target:
        return done(hi, v_hi, False, hi, hi)  # cannot reach it: pruning all it may prune
    a, b, va, vb = lo, hi, v_lo, v_hi
    last = None  # the end the previous step moved
    for _ in range(max_iter):
        if b - a < 1e-4:
            break
        r = a + (va - target) * (b - a) / (va - vb) if va > vb else (a + b) / 2
        margin = (b - a) / 10
        if last == 'twice' or not a + margin <= r <= b - margin:
            r = (a + b) / 2  # a secant stuck on one side, or at an end: bisect
        v = f(r)
        if abs(v - target) <= tol * target:
            return done(r, v, True, a, b)
        moved = 'a' if v > target else 'b'
        last = 'twice' if moved == last else moved
        if v > target:
            a, va = r, v
        else:
            b, vb = r, v
    best = min(((a, va), (b, vb)), key=lambda rv: abs(rv[1] - target))
    return done(best[0], best[1], False, a, b)


def match_flops(flops_at: Callable[..., float], target: float, tol: float = 0.01,
                heads: bool = False, hi: float = 0.9) -> Tuple[MatchResult, Optional[float]]:
    """The peer's ratio at a FLOPs ratio ``target``: ``flops_at(r)`` (hidden units at r and,
    with ``heads``, heads at r too) matched by :func:`match_ratio`; with heads, where a whole
    head's step jumps over the target (no ratio within ``tol``), the heads stay at the ratio
    below the step and the hidden units alone are matched, ``flops_at(r, h)``. Returns (the
    match, with every evaluation of both stages; the heads ratio used, None without heads)."""
    m = match_ratio(flops_at, target, tol, hi=hi, value_lo=1.0)
    if not heads:
        return m, None
    if m.converged or not m.lo < m.hi:
        return m, m.ratio
    h = m.lo
    m2 = match_ratio(lambda r: flops_at(r, h), target, tol, lo=h, hi=max(hi, h + 1e-3),
                     value_lo=dict(m.evaluations).get(h))
    m2['evaluations'] = m.evaluations + m2.evaluations
    return m2, h


# ----------------------------------------------------------------------------- the peer's model
class TimmFeatures(nn.Module):
    """A timm classifier's ``forward_features``: the part mmdcs's backbone equals (the
    classifier head is not timed or counted)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model.forward_features(x)


def timm_model(arch: str, input_size: Union[None, int, Sequence[int]] = None,
               seed: int = 0, fused_attn: bool = True) -> Tuple[nn.Module, Tuple[int, int]]:
    """(timm's model of ``arch``, random init with ``seed``, eval mode; (H, W)): the family's
    ``timm_models`` name (the backbone contract); ``img_size`` passed where the size is not
    the model's default. ValueError for an arch without a timm equivalent.

    ``fused_attn``: every timm attention computes softmax(QKᵀ)V with
    ``F.scaled_dot_product_attention``, as mmdcs's attentions do (timm 1.0 does so by default
    for ViT but not for Swin, whose fused path it marks experimental: its Swin-T then runs
    1.3× slower than mmdcs's at batch 1 on one CPU thread, and every pruning ratio against that
    baseline is inflated by the slower unpruned attention)."""
    import timm  # lazy import: only the peer benchmark builds timm's models
    cls = backbone_class(arch)
    name = (cls.timm_models or {}).get(arch)
    if not name:
        raise ValueError(f'{arch}: no timm model to compare with (the {cls.family} family '
                         f'names timm models for {sorted(cls.timm_models or {}) or "no arch"})')
    size = _size(input_size, arch)
    torch.manual_seed(seed)
    default = timm.get_pretrained_cfg(name)
    default = tuple(default.input_size[-2:]) if default is not None else None
    kwargs = {} if default == tuple(size) else dict(img_size=tuple(size))
    model = timm.create_model(name, pretrained=False, **kwargs).eval()
    if fused_attn:
        for m in model.modules():
            if isinstance(getattr(m, 'fused_attn', None), bool):
                m.fused_attn = True
    return model, size


def _is_depthwise(m: nn.Module) -> bool:
    return isinstance(m, nn.Conv2d) and m.groups > 1 and m.groups == m.in_channels == \
        m.out_channels


def hidden_unit_layers(model: nn.Module, example: torch.Tensor, tp=None) -> List[nn.Module]:
    """The layers whose output channels are hidden units: in Torch-Pruning's dependency graph of
    ``model``, the groups where exactly one (non-depthwise) Linear/Conv2d's output channels
    reach exactly one other Linear/Conv2d's input through element-wise operations, norms and
    depthwise convolutions only (an MLP's ``fc1``, an inverted bottleneck's expansion); groups
    with a split, unbind or concatenation (attention's qkv, multi-branch blocks) or on the
    residual stream (several layers write it) are not hidden units."""
    tp = tp or import_torch_pruning()
    roots = (nn.Linear, nn.Conv2d)
    dg = tp.DependencyGraph().build_dependency(model, example_inputs=example)
    blocked = {'SPLIT', 'UNBIND', 'CONCAT', 'SLICE', 'EXPAND'}
    layers = []
    for group in dg.get_all_groups(root_module_types=roots):
        outs, ins, ok = [], [], True
        for dep, _ in group:
            mod, kind = dep.target.module, getattr(dep.target.type, 'name', '')
            if kind in blocked:
                ok = False
                break
            if isinstance(mod, roots) and not _is_depthwise(mod):
                (outs if dg.is_out_channel_pruning_fn(dep.handler) else ins).append(mod)
        if ok and len(outs) == 1 and len(set(ins)) == 1 and outs[0] is not ins[0]:
            layers.append(outs[0])
    return layers


def head_attentions(model: nn.Module) -> Dict[nn.Module, nn.Module]:
    """timm attentions whose heads Torch-Pruning removes: ``qkv`` Linear → module, for the
    modules with a ``qkv`` ``nn.Linear`` and an int ``num_heads``."""
    return {m.qkv: m for m in model.modules()
            if isinstance(getattr(m, 'qkv', None), nn.Linear) and
            isinstance(getattr(m, 'num_heads', None), int)}


def tp_prune(model: nn.Module, example: torch.Tensor, ratio: float,
             heads_ratio: Optional[float] = None, round_to: int = 8, tp=None,
             hidden_names: Optional[Sequence[str]] = None) -> nn.Module:
    """A pruned copy of ``model`` (timm's): Torch-Pruning's ``MagnitudePruner`` (L2 magnitude,
    the same ``ratio`` in every layer, widths rounded to ``round_to``) on the hidden units
    (:func:`hidden_unit_layers`, or the modules of ``model`` named ``hidden_names``, found
    once for many ratios), with ``heads_ratio`` also on whole heads of every
    :func:`head_attentions` (their ``num_heads`` set after); every other layer ignored."""
    tp = tp or import_torch_pruning()
    net = copy.deepcopy(model).eval()
    if hidden_names is None:
        hidden = hidden_unit_layers(net, example, tp)
    else:
        mods = dict(net.named_modules())
        hidden = [mods[n] for n in hidden_names]
    if not hidden:
        raise ValueError('no hidden-unit layers found for Torch-Pruning')
    keep = set(hidden)
    kwargs = {}
    attns = {}
    if heads_ratio is not None:
        attns = head_attentions(net)
        if not attns:
            raise ValueError('no attention with whole heads for Torch-Pruning')
        keep |= set(attns)
        # at least one head left in every attention (Torch-Pruning prunes ceil(ratio·heads)
        # and skips an attention that would lose them all, which would make the FLOPs jump up)
        fewest = min(a.num_heads for a in attns.values())
        heads_ratio = min(float(heads_ratio), (fewest - 1) / fewest)
        kwargs = dict(num_heads={q: a.num_heads for q, a in attns.items()}, prune_num_heads=True,
                      prune_head_dims=False, head_pruning_ratio=heads_ratio)
    ignored = [m for m in net.modules()
               if isinstance(m, (nn.Linear, nn.Conv2d)) and m not in keep and
               not _is_depthwise(m)]
    head_dims = {q: q.out_features // (3 * a.num_heads) for q, a in attns.items()}
    pruner_cls = getattr(tp.pruner, 'MagnitudePruner', None) or tp.pruner.BasePruner
    pruner = pruner_cls(net, example, importance=tp.importance.MagnitudeImportance(p=2),
                        pruning_ratio=float(ratio), ignored_layers=ignored, round_to=round_to,
                        **kwargs)
    before = {q: a.num_heads for q, a in attns.items()}
    pruner.step()
    for q, a in attns.items():
        a.num_heads = q.out_features // (3 * head_dims[q])
        if hasattr(a, 'attn_dim'):  # timm >= 1.0.2x reshapes by it
            a.attn_dim = a.num_heads * head_dims[q]
    if attns and any(math.ceil(heads_ratio * n) > 0 for n in before.values()) and \
            all(a.num_heads == before[q] for q, a in attns.items()):
        raise ValueError(f'Torch-Pruning removed no head at head ratio {heads_ratio:.3f} '
                         '(it does not find these attentions\' heads)')
    return net


def called_modules(features: TimmFeatures, example: torch.Tensor) -> set:
    """The modules ``forward_features`` calls (not the classifier head's)."""
    called = set()
    hooks = [m.register_forward_hook(lambda m, i, o: called.add(m))
             for m in features.model.modules() if m is not features.model]
    try:
        with torch.no_grad():
            features(example)
    finally:
        for h in hooks:
            h.remove()
    return called


def feature_params(features: TimmFeatures, example: torch.Tensor) -> int:
    """Parameters ``forward_features`` uses: those of every module it calls, and the model's
    own (class token, position embedding), not the classifier head's."""
    seen = set()
    for m in list(called_modules(features, example)) + [features.model]:
        for p in m.parameters(recurse=False):
            seen.add(p)
    return sum(p.numel() for p in seen)


# ----------------------------------------------------------------------------- timing
def time_all(models: Dict[str, nn.Module], x: torch.Tensor, rounds: int = 21, warmup: int = 3,
             threads: Optional[int] = 1, meter: Optional[Callable] = None,
             runtime: Union[str, object] = 'torch') -> Dict[str, Dict[str, float]]:
    """ms per call of every model in one run of the harness (:func:`~mmdcs.analysis.latency.
    time_models`: interleaved rounds, the order rotated every round, medians) in ``runtime``
    (a name or a runtime object: PyTorch eager, onnxruntime on each model's ONNX file), the
    wall clock and, with one thread, the calling thread's CPU time read around the same calls
    (``meter``: a synthetic one, tests). Returns name → clock → median ms."""
    name = runtime if isinstance(runtime, str) else runtime.name
    measure = Measure(runtime=name, threads=threads, batch=int(x.shape[0]), rounds=rounds,
                      warmup=warmup, clock='thread' if threads == 1 else 'wall')
    t = time_models(models, x, measure=measure, meter=meter,
                    runtime=None if isinstance(runtime, str) else runtime)
    return {n: v['clocks'] for n, v in t.items()}


def match_latency(tmodel: nn.Module, x: torch.Tensor, target: float, tol: float, runtime,
                  prune: Callable[[float], nn.Module], rounds: int, warmup: int,
                  threads: Optional[int], meter: Optional[Callable] = None,
                  hi: float = 0.9) -> MatchResult:
    """The peer's pruning ratio at which its network measures ``target`` of timm's baseline's
    latency in ``runtime`` (the table's clock: the thread's CPU time for one thread), bisected
    by :func:`match_ratio` over measurements (each try timed beside the baseline,
    :func:`time_all`); the FLOPs ratio of the match is the caller's."""
    base = TimmFeatures(tmodel).eval()
    clock = 'thread' if threads == 1 else 'wall'

    def measured(r: float) -> float:
        t = time_all(dict(baseline=base, pruned=TimmFeatures(prune(r)).eval()), x, rounds,
                     warmup, threads, meter, runtime)
        return t['pruned'][clock] / t['baseline'][clock]
    return match_ratio(measured, target, tol, hi=hi, value_lo=1.0)


# ----------------------------------------------------------------------------- the benchmark
#: what the peer is matched to: mmdcs's subnet's FLOPs ratio, or its measured latency ratio
MATCHES = ('flops', 'latency')


def peer_benchmark(arch: str, target: float = 0.7, *, table: Optional[dict] = None,
                   input_size: Union[None, int, Sequence[int]] = None,
                   select_hidden: Union[bool, str] = 'all', variant: Optional[str] = None,
                   method: str = 'magnitude', multiple_of: int = 8, round_to: int = 8,
                   peers: Sequence[str] = PEER_METHODS, hidden_only: bool = True,
                   tol: float = 0.01, threads: int = 1, batch: int = 1, runtime='torch',
                   runtimes: Sequence = (), match: str = 'flops', refine: int = 0,
                   repeats: int = 21, warmup: int = 3, seed: int = 0, table_rounds: int = 5,
                   table_meter: Optional[Callable] = None, meter: Optional[Callable] = None,
                   progress: Optional[Callable[[str], None]] = None,
                   on_table: Optional[Callable[[dict], None]] = None,
                   prior: Optional[str] = None) -> dict:
    """mmdcs at a latency target beside Torch-Pruning, one model, CPU.

    Args:
        arch: e.g. ``'vit-s16'`` (its family names a timm model, ``timm_models``).
        target: mmdcs's latency target (ratio to the baseline, as predicted by the table).
        table, input_size, select_hidden, variant, method, multiple_of, table_rounds,
            table_meter, seed, on_table, prior: mmdcs's side
            (:func:`~mmdcs.analysis.latency_target.latency_target_row`; ``table`` None: the
            table is measured here, in ``runtime``).
        runtime: the runtime (a name or a runtime object) of mmdcs's table and of the
            measurements a match and a correction make; ``runtimes``: more runtimes every
            model is timed in at the end (e.g. PyTorch and onnxruntime: one column each).
        batch, threads: the input batch and the intra-op threads of every timing.
        match: ``'flops'``, the peer pruned to the FLOPs ratio mmdcs's subnet reached; or
            ``'latency'``, to the latency ratio mmdcs's subnet measured in ``runtime`` (its
            FLOPs beside): the peer's hidden-unit ratio bisected over measurements
            (:func:`match_latency`).
        refine: mmdcs's measured corrections (:func:`~mmdcs.analysis.target.meet_target`);
            with ``match='latency'`` or ``refine`` mmdcs's subnet is the one measured, else the
            table's prediction.
        round_to: the peer's widths are rounded to multiples of it.
        peers: which of :data:`PEER_METHODS` rows to add (a model without attention heads
            Torch-Pruning removes gets no ``'hidden+heads'`` row: ``skipped`` says why).
        hidden_only: also mmdcs's own network with the hidden units alone pruned (one kept
            ratio, every residual channel kept, :func:`~mmdcs.analysis.complexity.
            flops_budget_subnet`) at the same FLOPs.
        tol: relative tolerance of the match.
        repeats, warmup, meter: the timing (:func:`time_all`).
        progress: called with a line at every step.

    Returns:
        dict(rows=[one per method, :data:`COLUMNS` and more: ``latency`` runtime → clock →
        ratio], skipped={method: why}, table=..., table_built=bool, spec=mmdcs's subnet (a
        dict), timings={runtime: {name: {clock: ms}}}, seconds).
    """
    unknown = set(peers) - set(PEER_METHODS)
    if unknown or match not in MATCHES:
        raise ValueError(f'peers must be among {", ".join(PEER_METHODS)} and match one of '
                         f'{", ".join(MATCHES)}, got {sorted(peers)}, {match!r}')
    tp = import_torch_pruning()
    say = progress or (lambda line: None)
    t0 = time.perf_counter()
    by_latency = match == MATCHES[1]  # the benchmark's mode: the peer at mmdcs's measured time
    if isinstance(runtime, str):
        runtime = build_runtime(Measure(runtime=runtime, threads=threads))
    ours = _ours(arch, target, dict(
        batch=batch, threads=threads, variant=variant, input_size=input_size,
        select_hidden=select_hidden, method=method, multiple_of=multiple_of, table=table,
        table_rounds=table_rounds, table_meter=table_meter, seed=seed, progress=progress,
        on_table=on_table, prior=prior), runtime, by_latency or refine, dict(
            repeats=repeats, warmup=warmup, meter=meter, refine=refine))
    spec, size = ours['spec'], ours['size']
    say(f'{arch}: mmdcs ({ours["variant"]}, select_hidden={select_hidden}) at latency target '
        f'{target:g}: predicted {ours["predicted"]:.3f}'
        + (f', measured {ours["measured"]:.3f}' if ours['measured'] is not None else '')
        + f', FLOPs ratio {ours["flops"]:.4f}')
    x = torch.randn((int(batch), 3) + tuple(size), generator=torch.Generator().manual_seed(seed))
    tmodel, _ = timm_model(arch, size, seed)
    timm_base = TimmFeatures(tmodel).eval()
    x1 = x[:1]
    names = {mod: n for n, mod in tmodel.named_modules()}
    called = called_modules(timm_base, x1)  # the classifier head's MLP is not a backbone's
    hidden = [names[mod] for mod in hidden_unit_layers(tmodel, x1, tp) if mod in called]
    say(f'{arch}: timm {type(tmodel).__name__}: {len(hidden)} hidden-unit layers '
        f'(e.g. {hidden[0] if hidden else "none"})')
    models = {'mmdcs baseline': ours['base'], 'mmdcs': ours['pruned'], 'timm baseline': timm_base}
    rows_meta = [ours['row']]
    if hidden_only:
        rows_meta.append(_hidden_only(arch, ours, select_hidden, seed, multiple_of, models, say))
    peer = dict(tp=tp, tmodel=tmodel, x=x, hidden=hidden, round_to=round_to, tol=tol,
                by_latency=by_latency, runtime=runtime, repeats=repeats, warmup=warmup,
                threads=threads, meter=meter, say=say)
    skipped = {}
    for name in peers:
        got = _peer(arch, name, ours, peer)
        if isinstance(got, str):
            skipped[name] = got
            say(f'{arch}: Torch-Pruning {name}: skipped ({got})')
            continue
        models[got[0]['name']] = got[1]
        rows_meta.append(got[0])
    timings = {}
    for rt in [runtime] + [r for r in runtimes if r != runtime]:
        label = rt if isinstance(rt, str) else rt.name
        say(f'{arch}: timing {len(models)} models in {label}, {repeats} interleaved rounds, '
            f'{threads} thread(s), batch {batch}')
        timings[label] = time_all(models, x, repeats, warmup, threads, meter, rt)
    rows = [_row(arch, size, threads, batch, target, m, timings, repeats) for m in rows_meta]
    return dict(rows=rows, skipped=skipped, table=ours['table'],
                table_built=ours['built'], match=match,
                spec=spec.to_dict() if isinstance(spec, SubnetSpec) else spec,
                timings=timings, baseline_flops=dict(mmdcs=ours['base_flops'],
                                                     timm=count_flops(timm_base, size)),
                seconds=time.perf_counter() - t0)


def _hidden_only(arch, ours: dict, select_hidden, seed, multiple_of, models, say) -> dict:
    """mmdcs's own network pruned like the peer's 'hidden' row: every hidden width at one
    ratio, the residual channels D̃ all kept, at the same FLOPs as mmdcs's subnet."""
    cls = backbone_class(arch)
    size, base = ours['size'], ours['base']
    spec = flops_budget_subnet(cls, arch, ours['variant'], ours['flops'],
                               select_hidden=select_hidden or True, prune_channels=False,
                               seed=seed, multiple_of=multiple_of, **cls.size_kwargs(size))
    torch.manual_seed(seed)
    net = build_backbone(arch, spec.variant, spec, size).eval()
    models['mmdcs hidden only'] = net
    meta = dict(method=f'mmdcs {ours["variant"]}, hidden units only (FLOPs budget)',
                name='mmdcs hidden only', base='mmdcs baseline',
                flops_ratio=count_flops(net, size) / ours['base_flops'],
                params_ratio=count_params(net) / count_params(base), predicted_ratio=None,
                measured_ratio=None, pruning_ratio=1 - spec.meta['keep_ratio'],
                heads_ratio=None, match=None)
    say(f'{arch}: mmdcs hidden units only: kept ratio {spec.meta["keep_ratio"]:.3f} → FLOPs '
        f'ratio {meta["flops_ratio"]:.4f}')
    return meta


def _peer(arch, name: str, ours: dict, p: dict):
    """One Torch-Pruning row, matched to mmdcs's subnet (its FLOPs or its measured latency):
    (row meta, pruned model), or why it has none (a string)."""
    heads = name == 'hidden+heads'
    tmodel, tp, x1, size = p['tmodel'], p['tp'], p['x'][:1], ours['size']
    if heads and not head_attentions(tmodel):
        return 'no attention with whole heads Torch-Pruning removes'
    if heads and p['by_latency']:
        return 'matched at equal FLOPs only (whole heads make the latency jump)'
    timm_flops = count_flops(TimmFeatures(tmodel), size)

    def pruned(r, h=None):
        return tp_prune(tmodel, x1, r, (r if h is None else h) if heads else None,
                        p['round_to'], tp, p['hidden'])
    try:
        if p['by_latency']:
            m, h_used = match_latency(tmodel, p['x'], ours['measured'], p['tol'],
                                      p['runtime'], pruned, p['repeats'], p['warmup'],
                                      p['threads'], p['meter']), None
        else:
            m, h_used = match_flops(lambda r, h=None: count_flops(
                TimmFeatures(pruned(r, h)), size) / timm_flops, ours['flops'], p['tol'], heads)
    except (RuntimeError, ValueError) as e:  # e.g. a forward that fails after pruning
        return (f'Torch-Pruning could not prune it ({type(e).__name__}: '
                f'{str(e).splitlines()[0][:160]})')
    what = 'latency' if p['by_latency'] else 'FLOPs'
    if not m.converged:
        return (f'{what} not matched within {p["tol"]:.0%}: ratio {m.ratio:.4f} gives '
                f'{m.value:.4f} for {ours["measured"] if p["by_latency"] else ours["flops"]}')
    feats = TimmFeatures(pruned(m.ratio, h_used)).eval()
    p['say'](f'{arch}: Torch-Pruning {name}: ratio {m.ratio:.4f}'
             + (f' (heads {h_used:.4f})' if heads else '')
             + f' → {what} ratio {m.value:.4f} ({len(m.evaluations)} tries)')
    return dict(method=f'Torch-Pruning {name} (magnitude, round_to={p["round_to"]}, equal '
                       f'{what})', name=f'Torch-Pruning {name}', base='timm baseline',
                flops_ratio=count_flops(feats, size) / timm_flops,
                params_ratio=feature_params(feats, x1) / feature_params(TimmFeatures(tmodel),
                                                                        x1),
                predicted_ratio=None, measured_ratio=m.value if p['by_latency'] else None,
                pruning_ratio=m.ratio, heads_ratio=h_used,
                match=[list(e) for e in m.evaluations]), feats


def _row(arch, size, threads, batch, target, meta: dict, timings: dict, repeats) -> dict:
    """A row: the method's ratios, and its latency ratio to its own baseline in every runtime
    and clock (the first runtime's wall and thread clocks as ``latency_ratio`` and
    ``latency_ratio_thread``)."""
    latency = {rt: {c: t[meta['name']][c] / t[meta['base']][c] for c in t[meta['name']]}
               for rt, t in timings.items()}
    first = next(iter(timings))
    b, p = timings[first][meta['base']], timings[first][meta['name']]
    return dict(model=arch, input=f'{size[0]}x{size[1]}', threads=threads, batch=int(batch),
                target=float(target), **{k: v for k, v in meta.items() if k not in ('name',
                                                                                   'base')},
                latency_ratio=latency[first]['wall'],
                latency_ratio_thread=latency[first].get('thread'), latency=latency,
                baseline_ms=b['wall'], pruned_ms=p['wall'], rounds=int(repeats))


def _ours(arch, target, kw: dict, runtime, measured: bool, timing: dict) -> dict:
    """mmdcs's side: the subnet at the target (measured and corrected in ``runtime`` when
    ``measured``, else the table's prediction), built, with its ratios."""
    if measured:
        row = latency_target_row(arch, target, runtime=runtime, **kw, **timing)
        spec, table, built = SubnetSpec.coerce(row['spec']), row['table'], row['table_built']
        size, variant = tuple(int(v) for v in row['input'].split('x')), row['variant']
        base = build_backbone(arch, 'baseline', None, size).eval()
        measured_ratio = row['measured_ratio_clock']
    else:
        kw = dict(kw)
        batch, threads = kw.pop('batch'), kw.pop('threads')
        spec, table, built, base, size, variant = latency_budget_spec(
            arch, target, batch, threads, 'cpu', 'fp32', runtime=runtime, **kw)
        measured_ratio = None
    torch.manual_seed(kw.get('seed', 0))
    pruned = build_backbone(arch, spec.variant, spec, size).eval()
    base_flops = count_flops(base, size)
    flops = count_flops(pruned, size) / base_flops
    predicted = float(spec.meta['budget']['achieved_ratio'])
    prior = spec.meta['budget'].get('prior', 'cost') or 'none'
    meta = dict(method=f'mmdcs {variant} + hidden (latency target {target:g}, prior {prior})',
                name='mmdcs', base='mmdcs baseline', flops_ratio=flops,
                params_ratio=count_params(pruned) / count_params(base),
                predicted_ratio=predicted, measured_ratio=measured_ratio, pruning_ratio=None,
                heads_ratio=None, match=None)
    return dict(spec=spec, table=table, built=built, base=base, pruned=pruned, size=size,
                variant=variant, flops=flops, predicted=predicted, measured=measured_ratio,
                base_flops=base_flops, row=meta)


def format_peer_benchmark(rows: Sequence[dict]) -> str:
    """Markdown table of :func:`peer_benchmark` rows (a column per further runtime a row was
    timed in: its ratio on the thread's CPU time, else the wall clock)."""
    more = list(dict.fromkeys(rt for r in rows for rt in list(r.get('latency') or {})[1:]))
    lines = ['| model | batch | method | FLOPs ratio | params ratio | latency ratio (wall) | '
             'latency ratio (thread CPU) | '
             + ''.join(f'latency ratio, {rt} | ' for rt in more) + 'baseline ms | pruned ms |',
             '|' + '---|' * (9 + len(more))]
    for r in rows:
        th = r.get('latency_ratio_thread')
        extra = ''.join(
            f'{(c.get("thread", c.get("wall")) if c else float("nan")):.3f} | '
            for rt in more for c in [(r.get('latency') or {}).get(rt)])
        lines.append(f'| {r["model"]} | {r.get("batch", 1)} | {r["method"]} | '
                     f'{r["flops_ratio"]:.3f} | {r["params_ratio"]:.3f} | '
                     f'{r["latency_ratio"]:.3f} | {"—" if th is None else f"{th:.3f}"} | '
                     f'{extra}{r["baseline_ms"]:.2f} | {r["pruned_ms"]:.2f} |')
    return '\n'.join(lines)
