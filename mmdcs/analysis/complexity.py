"""Parameters and FLOPs of mmdcs models, counted with one tool (``mmengine.analysis``) for the
baseline, the supernet and the pruned subnet alike (method.md §9).

FLOPs are multiply-accumulates as ``mmengine.analysis`` counts them, with the attention products
added (see :mod:`mmdcs.models.counting`, where the counting lives).

* :func:`count_params`, :func:`count_flops`, :func:`calibrate_cost` — of any module (a backbone,
  or a whole mmengine model such as an mmpretrain ``ImageClassifier``, traced in ``'tensor'``
  mode); defined in :mod:`mmdcs.models.counting`, re-exported here.
* :func:`random_subnet` — a subnet pruned to a stated kept ratio without a search (seeded random
  choice of round(ratio·D) channels per prunable block): FLOPs and parameters depend only on D̃.
* :func:`flops_budget_subnet` — a subnet at a FLOPs budget without a search (one kept ratio r for
  every block and, with ``select_hidden``, every MLP's hidden units, r chosen so that the whole
  backbone's FLOPs are ``target``·baseline; seeded random channels), for latency and size tables.
* :func:`flops_ranked_subnet` — the same budget as the export meets it, with or without
  attention heads: the joint ranking (channels, hidden units and, with ``select_heads``, heads
  per unit of exact FLOPs) of a seeded random supernet scored by a registered scorer (default
  the magnitude pruner's).
* :func:`complexity_table` / :func:`format_table` — every model: baseline, DCS/KCR supernet and
  subnets at given kept ratios, beside the papers' own numbers (:data:`PAPER_NUMBERS`).
"""
import os.path as osp
import time
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Type, Union

import torch
import torch.nn as nn

from mmdcs.models.backbones import SelectableBackbone
# the registered families (the backbone contract); re-exported here
from mmdcs.models.backbones.base import backbone_class, backbone_classes  # noqa: F401
# the counting itself lives with the models (the classifier's budget uses it); re-exported here
from mmdcs.models.counting import (Size, _takes_mode, calibrate_cost,  # noqa: F401
                                   count_flops, count_params, flop_analysis, sdpa_flop_jit)
from mmdcs.selection import SubnetSpec, hidden_selectors, prunable_modules
from mmdcs.selection.budget import budget_subnet, build_cost
from mmdcs.selection.importance import get_scorer

#: The papers' own numbers (method.md §9): (arch, variant) → whole classifier at the paper's input
#: size (224; 256 for MobileViT). params in M, FLOPs in G, as printed in the papers.
#: Sources: the DCS paper and the KCR paper (method.md, References), tables named per row.
PAPER_NUMBERS: Dict[Tuple[str, str], dict] = {
    ('mobilevit-xs', 'baseline'): dict(params=2.3, flops=0.71, top1=74.8,
                                       source='DCS Table 4 (Table 1: 0.7 G)'),
    ('mobilevit-xs', 'dcs'): dict(params=2.0, flops=0.54, top1=76.8,
                                  source='DCS Table 4 (Table 1: 0.5 G)'),
    ('mobilevit-s', 'baseline'): dict(params=5.6, flops=1.4, top1=78.4,
                                      source='DCS Table 1 (Tables 4, 8: 1.6 G)'),
    ('mobilevit-s', 'dcs'): dict(params=4.8, flops=1.2, top1=81.0, source='DCS Table 1'),
    ('efficientvit-b1', 'baseline'): dict(params=9.1, flops=0.52, top1=79.4,
                                          source='DCS Table 1, r224 (text: 0.54 G)'),
    ('efficientvit-b1', 'dcs'): dict(params=8.2, flops=0.46, top1=80.8,
                                     source='DCS Table 1, r224'),
    ('vit-s16', 'baseline'): dict(params=22.1, flops=4.3, top1=81.2, source='KCR Table 1'),
    ('vit-s16', 'kcr'): dict(params=19.8, flops=3.8, top1=82.2, source='KCR Table 1'),
    ('vit-s16', 'dcs'): dict(params=20.2, flops=3.9, top1=82.0, source='DCS Table 1'),
    ('vit-b16', 'baseline'): dict(params=86.5, flops=17.6, top1=83.7, source='KCR Table 1'),
    ('vit-b16', 'kcr'): dict(params=69.5, flops=14.5, top1=84.6, source='KCR Table 1'),
    ('swin-t', 'baseline'): dict(params=29.0, flops=4.5, top1=81.3, source='KCR Table 1'),
    ('swin-t', 'kcr'): dict(params=24.6, flops=3.9, top1=82.4, source='KCR Table 1'),
    ('swin-t', 'dcs'): dict(params=26.1, flops=4.0, top1=82.0, source='DCS Table 1'),
    ('swin-b', 'baseline'): dict(params=88.0, flops=15.4, top1=83.5, source='KCR Table 1'),
    ('swin-b', 'kcr'): dict(params=70.2, flops=12.6, top1=84.7, source='KCR Table 1'),
}

#: the variant each paper applies to a family (method.md §9): each family's ``paper_variant``
#: (the backbone contract; DCS for the mobile models, KCR for ViT and Swin)
#: (a snapshot of the families registered at import; the tables ask the class itself)
PAPER_VARIANT = {f: cls.paper_variant for f, cls in backbone_classes().items()}

#: models of the full table (method.md §9)
TABLE_MODELS = ('vit-s16', 'vit-b16', 'swin-t', 'swin-b', 'mobilevit-xs', 'mobilevit-s',
                'efficientvit-b1')

# ----------------------------------------------------------------------------- backbones
def _resolve_class(backbone_cls) -> Type[SelectableBackbone]:
    if isinstance(backbone_cls, str):
        name = backbone_cls.split('.')[-1]
        for cls in backbone_classes().values():
            if cls.__name__ == name:
                return cls
        return backbone_class(backbone_cls)
    return backbone_cls


def nominal_input_size(backbone: nn.Module) -> Size:
    """The input size a backbone's FLOPs are quoted at: its ``input_size`` (the backbone
    contract: ``img_size`` for ViT and Swin, ``nominal_size`` otherwise, 256 for MobileViT);
    the ``img_size`` of a peer backbone; 224 otherwise."""
    size = getattr(backbone, 'input_size', None) or getattr(backbone, 'img_size', None) or 224
    return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))


def default_input_size(backbone_cls) -> Size:
    """The ``nominal_size`` of a backbone class (its :func:`nominal_input_size` when built
    with default arguments)."""
    size = _resolve_class(backbone_cls).nominal_size
    return (size, size)


@torch.no_grad()
def set_random_keep_(model: nn.Module, keep_ratio: float, seed: int = 0) -> Dict[str, int]:
    """Set every α of a supernet so that exactly max(1, round(keep_ratio·D)) channels of each
    prunable block are kept (α = +1 on a seeded random choice of channels, −1 elsewhere).
    Returns block → D̃."""
    if not 0. < keep_ratio <= 1.:
        raise ValueError(f'keep_ratio must be in (0, 1], got {keep_ratio}')
    modules = prunable_modules(model)
    if not modules:
        raise ValueError(f'{type(model).__name__} has no architecture parameters (a baseline '
                         'or an already pruned backbone): nothing to prune')
    g = torch.Generator().manual_seed(seed)
    kept = {}
    for name, m in modules.items():
        d = m.select.dim
        k = min(d, max(1, int(round(keep_ratio * d))))
        alpha = torch.full((d, ), -1.)
        alpha[torch.randperm(d, generator=g)[:k]] = 1.
        m.select.alpha.copy_(alpha.to(m.select.alpha))
        kept[name] = k
    return kept


def random_subnet(backbone_cls, arch: str, variant: str, keep_ratio: float, seed: int = 0,
                  multiple_of: int = 1, **backbone_kwargs) -> SubnetSpec:
    """A subnet pruned to a stated ratio without a search.

    Builds the supernet ``backbone_cls(arch=arch, variant=variant, **backbone_kwargs)``, keeps
    exactly max(1, round(keep_ratio·D)) channels of every prunable block (a seeded random
    choice, :func:`set_random_keep_`) and returns its :class:`SubnetSpec` (every D̃ rounded up
    to a multiple of ``multiple_of``).

    Args:
        backbone_cls: the class (``mmdcs.models.backbones.vit.ViT``), or its name (``'ViT'``,
            ``'mmdcs.ViT'``), or a family (``'vit'``).
    """
    cls = _resolve_class(backbone_cls)
    model = cls(arch=arch, variant=variant, **backbone_kwargs)
    set_random_keep_(model, keep_ratio, seed)
    return model.export_subnet(multiple_of, random_keep_ratio=keep_ratio, seed=seed)


def _width(dim: int, ratio: float, multiple_of: int) -> int:
    """max(1, round(ratio·dim)) rounded up to a multiple of ``multiple_of`` (capped at dim)."""
    k = max(1, int(round(ratio * dim)))
    return min(dim, -(-k // multiple_of) * multiple_of)


@torch.no_grad()
def _set_widths_(selectors, widths: Sequence[int], g: torch.Generator) -> None:
    for sel, k in zip(selectors, widths):
        alpha = torch.full((sel.dim, ), -1.)
        alpha[torch.randperm(sel.dim, generator=g)[:k]] = 1.
        sel.alpha.copy_(alpha.to(sel.alpha))


def flops_budget_subnet(backbone_cls, arch: str, variant: str, target: float,
                        select_hidden: Union[bool, str] = True, prune_channels: bool = True,
                        seed: int = 0,
                        multiple_of: int = 8, **backbone_kwargs) -> SubnetSpec:
    """A subnet whose backbone FLOPs are ``target`` × the baseline's, without a search.

    One kept ratio r for every prunable block's D̃ (``prune_channels``) and, with
    ``select_hidden``, every hidden width H̃ (widths rounded up to ``multiple_of``); r is the
    ratio whose FLOPs are nearest to the target, found with the budget's exact count of the
    supernet (the resource ``'flops'``: :func:`~mmdcs.models.counting.calibrate_cost`, measured
    by mmengine at the nominal input size; the baseline is the network without selection). The
    channels themselves are a seeded random choice (latency and size depend only on the
    widths). ``meta`` records the target, r
    and the predicted ratio; a target below the network's floor (r → 0) gives the floor, with
    ``meta.budget_reached = False``.
    """
    if not 0 < target <= 1:
        raise ValueError(f'the FLOPs target must be in (0, 1], got {target}')
    if not (select_hidden or prune_channels):
        raise ValueError('nothing to prune: give select_hidden or prune_channels')
    cls = _resolve_class(backbone_cls)
    sup = cls(arch=arch, variant=variant, select_hidden=select_hidden, **backbone_kwargs).eval()
    size = nominal_input_size(sup)
    # the one calibration of a budget (the exact count, baseline = no selection)
    cost = build_cost('flops', sup, size)
    terms = sup.cost_terms()
    dims = [t.selector.dim if t.selector is not None else 0 for t in terms]

    def widths(r: float):
        return ({n: _width(d, r, multiple_of) if prune_channels else d
                 for n, d in cost.dims.items()},
                {k: _width(h, r, multiple_of) for k, h in cost.hidden_dims.items()})

    best = None
    for i in range(1000, 0, -2):
        r = i / 1000
        ratio = cost.ratio(cost.at(*widths(r)))
        if best is None or abs(ratio - target) < abs(best[1] - target):
            best = (r, ratio)
    r, ratio = best
    g = torch.Generator().manual_seed(seed)
    sels = {id(m.select): m.select for m in prunable_modules(sup).values()}
    _set_widths_([sels[id(t.selector)] for t in terms if t.selector is not None],
                 [_width(d, r, multiple_of) if prune_channels else d
                  for t, d in zip(terms, dims) if t.selector is not None], g)
    hidden = [t.hidden for t in terms if t.hidden is not None]
    _set_widths_(hidden, [_width(h.dim, r, multiple_of) for h in hidden], g)
    assert len(hidden) == len(hidden_selectors(sup))
    return sup.export_subnet(multiple_of, target_flops=target, keep_ratio=r,
                             predicted_flops_ratio=round(ratio, 4),
                             budget_reached=abs(ratio - target) <= 0.01, seed=seed,
                             select_hidden=select_hidden, prune_channels=prune_channels)


def flops_ranked_subnet(backbone_cls, arch: str, variant: str, target: float,
                        select_hidden: Union[bool, str] = False, select_heads: bool = True,
                        seed: int = 0, multiple_of: int = 8, method: str = 'magnitude',
                        **backbone_kwargs) -> SubnetSpec:
    """A subnet at a FLOPs budget as the export meets it, with attention heads pruned too
    (``select_heads``) or not.

    No single kept ratio applies to heads (a head is a whole unit, a few per attention), so
    this is the export to a budget (:func:`mmdcs.selection.budget.budget_subnet`): the
    supernet with ``select_heads`` and ``select_hidden``, random weights (``seed``), its
    channels, hidden units and heads scored by the registered scorer ``method`` and ranked
    jointly per unit of the exact FLOPs count (:func:`build_cost` ``'flops'`` at the nominal
    input size), widths in groups of ``multiple_of``, heads one at a time (at least one per
    attention). Without heads it is the comparison's other arm (same ranking, every head
    kept). ValueError (one line) for ``select_heads`` on a family without head selection;
    :class:`~mmdcs.selection.budget.BudgetError` (a ValueError) for a target it cannot meet
    within ±1 %. ``meta`` records the target, the predicted ratio and ``select_heads``."""
    cls = _resolve_class(backbone_cls)
    if select_heads and not cls.supports_heads:
        raise ValueError(f'{arch} ({cls.__name__}) has no head selection (supports_heads is '
                         'False)')
    if not 0 < target <= 1:
        raise ValueError(f'the FLOPs target must be in (0, 1], got {target}')
    torch.manual_seed(seed)
    if select_heads:
        backbone_kwargs['select_heads'] = True
    sup = cls(arch=arch, variant=variant, select_hidden=select_hidden,
              **backbone_kwargs).eval()
    cost = build_cost('flops', sup, nominal_input_size(sup))
    scorer = get_scorer(method)
    scores, hidden_scores = scorer(sup, model=sup)
    head_scores = scorer.heads(sup) if scorer.heads is not None and select_heads else None
    spec = budget_subnet(sup, sup.family, arch, variant, scores, cost, target, multiple_of,
                         hidden_scores=hidden_scores or None, normalize=scorer.normalize,
                         head_scores=head_scores or None, method=method, target_flops=target,
                         seed=seed, select_hidden=select_hidden, select_heads=bool(select_heads))
    ratio = spec.meta['budget']['achieved_ratio']
    spec.meta.update(predicted_flops_ratio=round(ratio, 4),
                     budget_reached=abs(ratio - target) <= 0.01)
    return spec


# ----------------------------------------------------------------------------- classifiers
def repo_configs_dir() -> Optional[str]:
    """``configs/`` of the checkout (or ``mmdcs/.mim/configs`` of an installed package)."""
    here = osp.dirname(osp.dirname(osp.abspath(__file__)))
    for path in (osp.join(osp.dirname(here), 'configs'), osp.join(here, '.mim', 'configs')):
        if osp.isdir(path):
            return path
    return None


def base_model_config(arch: str) -> Optional[str]:
    """``configs/_base_/models/<family>_<arch>.py`` (the mmpretrain classifier of an arch)."""
    root = repo_configs_dir()
    if root is None:
        return None
    path = osp.join(root, '_base_', 'models', f'{backbone_class(arch).family}_{arch}.py')
    return path if osp.isfile(path) else None


def build_classifier(arch: str, variant: str = 'baseline', subnet=None,
                     img_size: Optional[Size] = None) -> nn.Module:
    """The mmpretrain ``ImageClassifier`` of ``configs/_base_/models/<family>_<arch>.py`` with
    its backbone set to ``variant`` (or built from ``subnet``, whose variant it takes), eval
    mode."""
    from mmengine.config import Config
    from mmengine.registry import DefaultScope
    path = base_model_config(arch)
    if path is None:
        raise FileNotFoundError(f'no base model config for {arch!r} (configs/_base_/models/)')
    import mmpretrain.utils
    mmpretrain.utils.register_all_modules(init_default_scope=False)
    model_cfg = Config.fromfile(path).model
    backbone = model_cfg.backbone
    backbone.variant = variant
    if subnet is not None:
        spec = SubnetSpec.coerce(subnet)
        backbone.subnet = subnet if isinstance(subnet, str) else spec.to_dict()
        backbone.variant = spec.variant
    backbone.update(_resolve_class(backbone.type).size_kwargs(img_size))
    from mmpretrain.registry import MODELS
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(model_cfg)
    return model.eval()


def build_backbone(arch: str, variant: str = 'baseline', subnet=None,
                   img_size: Optional[Size] = None) -> nn.Module:
    cls = backbone_class(arch)
    kwargs = cls.size_kwargs(img_size)
    if subnet is not None:
        return cls(arch=arch, subnet=subnet, **kwargs).eval()
    return cls(arch=arch, variant=variant, **kwargs).eval()


# ----------------------------------------------------------------------------- the table
def _row(arch: str, family: str, variant: str, role: str, kept_ratio: float, model: nn.Module,
         backbone: nn.Module, size: Size, paper: Optional[dict], seconds: float,
         flops: int) -> dict:
    return dict(
        model=arch, family=family, variant=variant, role=role, kept_ratio=kept_ratio,
        input=f'{size[0]}x{size[1]}', params_m=count_params(model) / 1e6,
        backbone_params_m=count_params(backbone) / 1e6, flops_g=flops / 1e9,
        paper_params_m=paper['params'] if paper else None,
        paper_flops_g=paper['flops'] if paper else None,
        paper_top1=paper['top1'] if paper else None,
        paper_source=paper['source'] if paper else None, seconds=seconds)


def complexity_table(models: Iterable[str] = TABLE_MODELS, ratios: Sequence[float] = (0.9, 0.7),
                     input_sizes: Union[None, int, Size, Dict[str, Union[int, Size]]] = None,
                     whole_model: bool = True, variants: Optional[Dict[str, str]] = None,
                     seed: int = 0, count_attention: bool = True) -> List[dict]:
    """Params and FLOPs of every model: baseline, supernet and subnets at kept ratios.

    Args:
        models: archs (``'vit-s16'``, ``'mobilevit-xs'`` ...).
        ratios: kept ratios of the subnets (a seeded random choice of round(ratio·D) channels
            per block, :func:`random_subnet`).
        input_sizes: None (each family's nominal size: 224, MobileViT 256), one size for all,
            or arch → size.
        whole_model: count the whole classifier of ``configs/_base_/models`` (comparable to the
            papers); False: the backbone alone.
        variants: family → variant of the supernet and subnets (default: the family's
            ``paper_variant``, :data:`PAPER_VARIANT`).
        seed: of the random subnets.
        count_attention: count the attention products (see :func:`count_flops`).

    Returns:
        one dict per row: model, family, variant, role ('baseline' | 'supernet' | 'subnet'),
        kept_ratio, input, params_m, backbone_params_m, flops_g, paper_params_m, paper_flops_g,
        paper_top1, paper_source (the paper's baseline beside the baseline row, its compact
        model beside the subnet rows), seconds (time to build and count).
    """
    variants = dict(variants or {})
    rows = []
    for arch in models:
        cls = backbone_class(arch)
        family = cls.family
        if input_sizes is None:
            size = default_input_size(cls)
        elif isinstance(input_sizes, dict):
            s = input_sizes.get(arch, default_input_size(cls))
            size = (s, s) if isinstance(s, int) else tuple(s)
        else:
            size = (input_sizes, input_sizes) if isinstance(input_sizes, int) else \
                tuple(input_sizes)
        variant = variants.get(family, cls.paper_variant)
        use_cls = whole_model and base_model_config(arch) is not None

        def build(v, subnet=None):
            if use_cls:
                m = build_classifier(arch, v, subnet, size)
                return m, m.backbone
            b = build_backbone(arch, v, subnet, size)
            return b, b

        def measure(role, v, kept_ratio, subnet=None, paper=None):
            t0 = time.perf_counter()
            model, backbone = build(v, subnet)
            flops = count_flops(model, size, count_attention)
            rows.append(_row(arch, family, v, role, kept_ratio, model, backbone, size, paper,
                             time.perf_counter() - t0, flops))
            return backbone

        with torch.no_grad():
            measure('baseline', 'baseline', 1.0, paper=PAPER_NUMBERS.get((arch, 'baseline')))
            supernet = measure('supernet', variant, 1.0)
            for r in ratios:
                set_random_keep_(supernet, r, seed)
                spec = supernet.export_subnet(random_keep_ratio=r, seed=seed)
                measure('subnet', variant, spec.kept_ratio, subnet=spec,
                        paper=PAPER_NUMBERS.get((arch, variant)))
    return rows


#: the DCS paper's mobile models, whose compact networks the paper-budget table matches
PAPER_BUDGET_MODELS = ('mobilevit-xs', 'mobilevit-s', 'efficientvit-b1')


def paper_budget_table(models: Iterable[str] = PAPER_BUDGET_MODELS,
                       select_hidden: Union[bool, str] = 'all', seed: int = 0,
                       multiple_of: int = 8, count_attention: bool = True) -> List[dict]:
    """Ours vs the paper at the paper's own FLOPs ratio, with hidden-unit selection.

    For each model with paper numbers for its baseline and its searched network (the DCS
    paper's MobileViT-XS/S, EfficientViT-B1): the subnet at a FLOPs budget
    (:func:`flops_budget_subnet`, one kept ratio for channels and hidden units) whose *whole
    classifier* has the paper's FLOPs ratio (compact / baseline) under our count, and the
    resulting params and FLOPs ratios beside the paper's. The counting conventions differ (the
    paper's absolute numbers are not ours), so ratios to each one's own baseline are compared.

    Returns one dict per model: model, variant, target (FLOPs ratio asked of the whole model),
    paper_params_ratio, params_ratio, paper_flops_ratio, flops_ratio, base_params_m,
    sub_params_m, base_flops_g, sub_flops_g, paper_* (absolute, as printed), kept_ratio,
    hidden_kept_ratio, keep_ratio (r), budget_reached.
    """
    rows = []
    for arch in models:
        cls = backbone_class(arch)
        variant = cls.paper_variant
        pb, pc = PAPER_NUMBERS.get((arch, 'baseline')), PAPER_NUMBERS.get((arch, variant))
        if pb is None or pc is None:
            raise ValueError(f'no paper numbers for {arch} ({variant})')
        size = default_input_size(cls)
        target = pc['flops'] / pb['flops']
        with torch.no_grad():
            base_cls = build_classifier(arch, 'baseline', None, size)
            base_flops = count_flops(base_cls, size, count_attention)
            base_bb = count_flops(base_cls.backbone, size, count_attention)
            head = base_flops - base_bb
            # the backbone budget that gives the whole model the paper's ratio
            bb_target = (target * base_flops - head) / base_bb
            spec = flops_budget_subnet(cls, arch, variant, bb_target, select_hidden,
                                       seed=seed, multiple_of=multiple_of,
                                       **cls.size_kwargs(size))
            sub_cls = build_classifier(arch, variant, spec, size)
            sub_flops = count_flops(sub_cls, size, count_attention)
        bp, sp = count_params(base_cls), count_params(sub_cls)
        rows.append(dict(
            model=arch, variant=variant, target=target,
            paper_params_ratio=pc['params'] / pb['params'], params_ratio=sp / bp,
            paper_flops_ratio=target, flops_ratio=sub_flops / base_flops,
            base_params_m=bp / 1e6, sub_params_m=sp / 1e6, base_flops_g=base_flops / 1e9,
            sub_flops_g=sub_flops / 1e9, paper_base=(pb['params'], pb['flops']),
            paper_sub=(pc['params'], pc['flops']), paper_source=pc['source'],
            kept_ratio=spec.kept_ratio, hidden_kept_ratio=spec.hidden_kept_ratio,
            keep_ratio=spec.meta['keep_ratio'], budget_reached=spec.meta['budget_reached']))
    return rows


def format_paper_budget_table(rows: Sequence[dict]) -> str:
    """Markdown table of :func:`paper_budget_table` rows."""
    lines = ['| model | variant | paper params M | ours params M | params ratio paper / ours | '
             'paper FLOPs G | ours FLOPs G | FLOPs ratio paper / ours | kept (channels, hidden) |',
             '|' + '---|' * 9]
    for r in rows:
        lines.append(
            f'| {r["model"]} | {r["variant"]} + hidden | {r["paper_base"][0]} → '
            f'{r["paper_sub"][0]} | {r["base_params_m"]:.2f} → {r["sub_params_m"]:.2f} | '
            f'{r["paper_params_ratio"]:.3f} / {r["params_ratio"]:.3f} | {r["paper_base"][1]} → '
            f'{r["paper_sub"][1]} | {r["base_flops_g"]:.3f} → {r["sub_flops_g"]:.3f} | '
            f'{r["paper_flops_ratio"]:.3f} / {r["flops_ratio"]:.3f} | '
            f'{r["kept_ratio"]:.2f}, {r["hidden_kept_ratio"]:.2f} |')
    return '\n'.join(lines) + (
        '\n\nOurs: the whole classifier (configs/_base_/models), random weights, a subnet at '
        'the paper\'s FLOPs ratio under our count (one kept ratio r for every block\'s channels '
        'and every hidden width, MLPs and inverted bottlenecks, widths multiples of 8; '
        'complexity.flops_budget_subnet), Linear_θ of DCS included. Paper: DCS paper, '
        'as printed (its own counting convention); ratios are to each one\'s own baseline.')


def _fmt(v, spec: str = '.2f') -> str:
    return '—' if v is None else format(v, spec)


def flops_note(count_attention: bool = True, whole_model: bool = True) -> str:
    """The FLOPs-convention note printed under the table."""
    what = ("the whole classifier (backbone + neck + head, 'tensor' mode, batch 1)"
            if whole_model else 'the backbone alone (batch 1)')
    attn = ('attention products included (mmdcs adds the handle for '
            'aten::scaled_dot_product_attention that mmengine lacks)' if count_attention else
            'attention products of scaled_dot_product_attention NOT counted (mmengine has no '
            'handle for it: --no-attention-flops)')
    return (
        'FLOPs conventions differ between papers and tools (method.md §9): here every row is '
        f'counted by one tool, mmengine.analysis.FlopAnalyzer, on {what}: multiply-accumulates '
        f'of convolutions, linear layers, matmuls and normalisation layers, {attn}; '
        'element-wise ops (activations, softmax, gate masks) count 0. The papers used their own '
        'counters and conventions, not always the same one (KCR Table 1\'s ViT-S 4.3 G matches '
        'the count here without the attention products, its ViT-B 17.6 G the count with them; '
        'the MobileViT figures, 0.71 G and 1.4-1.6 G, are far below any count here at 256): '
        'hold the "paper" columns against the trend, not digit by digit.')


def format_table(rows: Sequence[dict], note: bool = True, count_attention: bool = True,
                 whole_model: bool = True) -> str:
    """Markdown table of :func:`complexity_table` rows (and the FLOPs-convention note)."""
    head = ('| model | variant | network | kept | input | params (M) | backbone params (M) | '
            'FLOPs (G) | paper params (M) | paper FLOPs (G) | paper top-1 | paper source |')
    lines = [head, '|' + '---|' * 12]
    for r in rows:
        network = {'baseline': 'baseline', 'supernet': 'supernet',
                   'subnet': 'subnet'}.get(r['role'], r['role'])
        kept = '1.00' if r['role'] != 'subnet' else f'{r["kept_ratio"]:.2f}'
        lines.append(
            f'| {r["model"]} | {r["variant"]} | {network} | {kept} | {r["input"]} | '
            f'{r["params_m"]:.2f} | {r["backbone_params_m"]:.2f} | {r["flops_g"]:.3f} | '
            f'{_fmt(r["paper_params_m"], ".1f")} | {_fmt(r["paper_flops_g"], "g")} | '
            f'{_fmt(r["paper_top1"], ".1f")} | {r["paper_source"] or ""} |')
    text = '\n'.join(lines)
    if note:
        text += ('\n\nRows: "supernet" is the searchable network with every gate open (a DCS '
                 'supernet carries Linear_θ, the Q/K selector, in every attention: it adds FLOPs '
                 'and parameters, and stays in the deployed DCS network since its mask depends '
                 'on the input; KCR has none). "subnet" rows keep a seeded random '
                 'round(kept·D) channels of every prunable block (FLOPs and parameters depend '
                 'on D̃ only); the paper columns beside them are the papers\' searched compact '
                 'models, whose kept ratio the papers do not state. Paper numbers: '
                 'the DCS paper (ICML 2024) and the KCR paper; tables named per row.\n\n'
                 + flops_note(count_attention, whole_model))
    return text
