"""Side by side with Torch-Pruning at equal FLOPs (issue 23; docs/benchmarks.md *Side by side
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
from .latency import _size, time_models
from .latency_target import latency_budget_spec

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
             runtime: str = 'torch') -> Dict[str, Dict[str, float]]:
    """ms per call of every model in one run of the harness (:func:`~mmdcs.analysis.latency.
    time_models`: interleaved rounds, the order rotated every round, medians), the wall clock
    and, with one thread, the calling thread's CPU time read around the same calls (``meter``:
    a synthetic one, tests). Returns name → clock → median ms."""
    measure = Measure(runtime=runtime, threads=threads, batch=int(x.shape[0]), rounds=rounds,
                      warmup=warmup, clock='thread' if threads == 1 else 'wall')
    t = time_models(models, x, measure=measure, meter=meter)
    return {n: v['clocks'] for n, v in t.items()}


# ----------------------------------------------------------------------------- the benchmark
def peer_benchmark(arch: str, target: float = 0.7, *, table: Optional[dict] = None,
                   input_size: Union[None, int, Sequence[int]] = None,
                   select_hidden: Union[bool, str] = 'all', variant: Optional[str] = None,
                   method: str = 'magnitude', multiple_of: int = 8, round_to: int = 8,
                   peers: Sequence[str] = PEER_METHODS, hidden_only: bool = True,
                   tol: float = 0.01, threads: int = 1,
                   repeats: int = 21, warmup: int = 3, seed: int = 0, table_rounds: int = 5,
                   table_meter: Optional[Callable] = None, meter: Optional[Callable] = None,
                   progress: Optional[Callable[[str], None]] = None,
                   on_table: Optional[Callable[[dict], None]] = None) -> dict:
    """mmdcs at a latency target beside Torch-Pruning at the same FLOPs, one model, CPU, batch 1.

    Args:
        arch: e.g. ``'vit-s16'`` (its family names a timm model, ``timm_models``).
        target: mmdcs's latency target (ratio to the baseline, as predicted by the table).
        table, input_size, select_hidden, variant, method, multiple_of, table_rounds,
            table_meter, seed, on_table: mmdcs's side
            (:func:`~mmdcs.analysis.latency_target.latency_budget_spec`; ``table`` None: the
            table is measured here).
        round_to: the peer's widths are rounded to multiples of it.
        peers: which of :data:`PEER_METHODS` rows to add (a model without attention heads
            Torch-Pruning removes gets no ``'hidden+heads'`` row: ``skipped`` says why).
        hidden_only: also mmdcs's own network with the hidden units alone pruned (one kept
            ratio, every residual channel kept, :func:`~mmdcs.analysis.complexity.
            flops_budget_subnet`) at the same FLOPs: the peer's choice of units in mmdcs's
            implementation, which says whether a gap is the units or the implementation.
        tol: relative tolerance of the FLOPs match.
        threads, repeats, warmup, meter: the timing (:func:`time_all`).
        progress: called with a line at every step.

    Returns:
        dict(rows=[one per method, :data:`COLUMNS` and more], skipped={method: why},
        table=..., table_built=bool, spec=mmdcs's subnet (a dict), timings={name: {clock: ms}},
        seconds).
    """
    unknown = set(peers) - set(PEER_METHODS)
    if unknown:
        raise ValueError(f'peers must be among {", ".join(PEER_METHODS)}, got '
                         f'{", ".join(sorted(unknown))}')
    tp = import_torch_pruning()
    say = progress or (lambda line: None)
    t0 = time.perf_counter()
    spec, table, built, base, size, variant = latency_budget_spec(
        arch, target, 1, threads, 'cpu', 'fp32', variant=variant, input_size=input_size,
        select_hidden=select_hidden, method=method, multiple_of=multiple_of, table=table,
        table_rounds=table_rounds, table_meter=table_meter, seed=seed, progress=progress,
        on_table=on_table)
    torch.manual_seed(seed)
    pruned = build_backbone(arch, spec.variant, spec, size).eval()
    base_flops = count_flops(base, size)
    ours_flops = count_flops(pruned, size) / base_flops
    predicted = float(spec.meta['budget']['achieved_ratio'])
    say(f'{arch}: mmdcs ({variant}, select_hidden={select_hidden}) at latency target {target:g}: '
        f'predicted {predicted:.3f}, FLOPs ratio {ours_flops:.4f}')

    x = torch.randn((1, 3) + tuple(size), generator=torch.Generator().manual_seed(seed))
    tmodel, _ = timm_model(arch, size, seed)
    timm_base = TimmFeatures(tmodel).eval()
    timm_flops = count_flops(timm_base, size)
    timm_params = feature_params(timm_base, x)
    names = {mod: n for n, mod in tmodel.named_modules()}
    called = called_modules(timm_base, x)  # the classifier head's MLP is not a backbone's
    hidden = [names[mod] for mod in hidden_unit_layers(tmodel, x, tp) if mod in called]
    say(f'{arch}: timm {type(tmodel).__name__}: {len(hidden)} hidden-unit layers '
        f'(e.g. {hidden[0] if hidden else "none"})')
    models = {'mmdcs baseline': base, 'mmdcs': pruned, 'timm baseline': timm_base}
    rows_meta = [dict(method=f'mmdcs {variant} + hidden ({method}, latency target '
                             f'{target:g})', name='mmdcs', base='mmdcs baseline',
                      flops_ratio=ours_flops, params_ratio=count_params(pruned) /
                      count_params(base), predicted_ratio=predicted, pruning_ratio=None,
                      heads_ratio=None, match=None)]
    if hidden_only:
        # mmdcs's own network pruned like the peer's 'hidden' row: every hidden width at one
        # ratio, the residual channels D̃ all kept, at the same FLOPs
        cls = backbone_class(arch)
        ho_spec = flops_budget_subnet(cls, arch, variant, ours_flops,
                                      select_hidden=select_hidden or True, prune_channels=False,
                                      seed=seed, multiple_of=multiple_of, **cls.size_kwargs(size))
        torch.manual_seed(seed)
        ho = build_backbone(arch, ho_spec.variant, ho_spec, size).eval()
        rows_meta.append(dict(method=f'mmdcs {variant}, hidden units only (FLOPs budget)',
                              name='mmdcs hidden only', base='mmdcs baseline',
                              flops_ratio=count_flops(ho, size) / base_flops,
                              params_ratio=count_params(ho) / count_params(base),
                              predicted_ratio=None, pruning_ratio=1 - ho_spec.meta['keep_ratio'],
                              heads_ratio=None, match=None))
        models['mmdcs hidden only'] = ho
        say(f'{arch}: mmdcs hidden units only: kept ratio {ho_spec.meta["keep_ratio"]:.3f} → '
            f'FLOPs ratio {rows_meta[-1]["flops_ratio"]:.4f}')
    skipped = {}
    for peer in peers:
        heads = peer == 'hidden+heads'
        if heads and not head_attentions(tmodel):
            skipped[peer] = 'no attention with whole heads Torch-Pruning removes'
            say(f'{arch}: Torch-Pruning {peer}: skipped ({skipped[peer]})')
            continue
        def flops_at(r, h=None, heads=heads):
            h = (r if h is None else h) if heads else None
            return count_flops(TimmFeatures(tp_prune(tmodel, x, r, h, round_to, tp, hidden)),
                               size) / timm_flops

        try:
            m, h_used = match_flops(flops_at, ours_flops, tol, heads)
        except (RuntimeError, ValueError) as e:  # e.g. a forward that fails after pruning
            skipped[peer] = f'Torch-Pruning could not prune it ({type(e).__name__}: ' \
                            f'{str(e).splitlines()[0][:160]})'
            say(f'{arch}: Torch-Pruning {peer}: skipped ({skipped[peer]})')
            continue
        if not m.converged:
            skipped[peer] = (f'FLOPs not matched within {tol:.0%}: ratio {m.ratio:.4f} gives '
                             f'{m.value:.4f} for {ours_flops:.4f}')
            say(f'{arch}: Torch-Pruning {peer}: skipped ({skipped[peer]})')
            continue
        feats = TimmFeatures(tp_prune(tmodel, x, m.ratio, h_used, round_to, tp,
                                      hidden)).eval()
        name = f'Torch-Pruning {peer}'
        models[name] = feats
        rows_meta.append(dict(method=f'Torch-Pruning {peer} (magnitude, round_to={round_to})',
                              name=name, base='timm baseline', flops_ratio=m.value,
                              params_ratio=feature_params(feats, x) / timm_params,
                              predicted_ratio=None, pruning_ratio=m.ratio, heads_ratio=h_used,
                              match=[list(e) for e in m.evaluations]))
        say(f'{arch}: Torch-Pruning {peer}: ratio {m.ratio:.4f}'
            + (f' (heads {h_used:.4f})' if heads else '')
            + f' → FLOPs ratio {m.value:.4f} ({len(m.evaluations)} tries)')

    say(f'{arch}: timing {len(models)} models, {repeats} interleaved rounds, {threads} thread(s)')
    timings = time_all(models, x, repeats, warmup, threads, meter)
    rows = []
    for meta in rows_meta:
        b, p = timings[meta['base']], timings[meta['name']]
        rows.append(dict(
            model=arch, input=f'{size[0]}x{size[1]}', threads=threads, target=float(target),
            method=meta['method'], flops_ratio=meta['flops_ratio'],
            params_ratio=meta['params_ratio'], predicted_ratio=meta['predicted_ratio'],
            latency_ratio=p['wall'] / b['wall'],
            latency_ratio_thread=(p['thread'] / b['thread']) if 'thread' in p else None,
            baseline_ms=b['wall'], pruned_ms=p['wall'], pruning_ratio=meta['pruning_ratio'],
            heads_ratio=meta['heads_ratio'], match=meta['match'], rounds=int(repeats)))
    return dict(rows=rows, skipped=skipped, table=table, table_built=built,
                spec=spec.to_dict() if isinstance(spec, SubnetSpec) else spec,
                timings=timings, baseline_flops=dict(mmdcs=base_flops, timm=timm_flops),
                seconds=time.perf_counter() - t0)


def format_peer_benchmark(rows: Sequence[dict]) -> str:
    """Markdown table of :func:`peer_benchmark` rows."""
    lines = ['| model | method | FLOPs ratio | params ratio | latency ratio (wall) | '
             'latency ratio (thread CPU) | baseline ms | pruned ms |',
             '|' + '---|' * 8]
    for r in rows:
        th = r.get('latency_ratio_thread')
        lines.append(f'| {r["model"]} | {r["method"]} | {r["flops_ratio"]:.3f} | '
                     f'{r["params_ratio"]:.3f} | {r["latency_ratio"]:.3f} | '
                     f'{"—" if th is None else f"{th:.3f}"} | {r["baseline_ms"]:.2f} | '
                     f'{r["pruned_ms"]:.2f} |')
    return '\n'.join(lines)
