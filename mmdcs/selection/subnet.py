"""Subnet export and application (method.md §4): a searched supernet becomes plain data, and a pruned
network is built from that data alone.

A *prunable* module is any module with a ``select`` attribute (a :class:`ChannelSelector`) and a
``pruned(keep)`` method that returns its deployed replacement with its weights sliced
(:class:`~mmdcs.selection.mlp.GatedMLP` is one; a family may add its own, e.g. EfficientViT's
attention projection). The description of a subnet lists, per prunable module (by its path in the
backbone): D, the kept indices, D̃. It is JSON::

    {"format": "mmdcs.subnet/2", "family": "vit", "arch": "deit-small", "variant": "dcs",
     "blocks": [{"name": "blocks.0.mlp", "dim": 384, "kept": 301, "keep": [0, 2, ...]}, ...],
     "hidden": [{"name": "blocks.0.mlp", "dim": 1536, "kept": 700, "keep": [3, 4, ...]}, ...],
     "meta": {"source_checkpoint_sha256": "...", ...}}

``hidden`` (format 2, optional) lists the kept hidden units of the modules searched with
hidden-unit selection (``select_hidden=True``): a *hidden-prunable* module has a
``prune_hidden_(keep, pad)`` method that narrows it in place and a ``hidden_features`` width
(:class:`~mmdcs.selection.mlp.GatedMLP`; EfficientViT's MBConv). A hidden-prunable module that the
file does not list keeps all its hidden units. Files of format 1 (no ``hidden``) still load.

``heads`` (format 3, optional) lists the kept attention heads of the attentions searched with
head selection (``select_heads=True``): a *head-prunable* module has a ``prune_heads_(keep)``
method and a ``num_heads`` (:class:`~mmdcs.selection.DCSAttention`); ``dim`` is its number of
heads. An attention the file does not list keeps all its heads. Formats 1 and 2 still load.
"""
import hashlib
import json
import os.path as osp
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Union

import torch
import torch.nn as nn

from mmdcs.checks import check_number

from .jsonio import read_json
from .selectors import ChannelSelector

SUBNET_FORMAT = 'mmdcs.subnet/3'
#: every format this version reads (1: before hidden-unit selection, 2: before head selection)
SUBNET_FORMATS = ('mmdcs.subnet/1', 'mmdcs.subnet/2', SUBNET_FORMAT)


class SubnetError(ValueError):
    """A subnet description that does not fit the backbone it is applied to."""


@dataclass
class BlockSelection:
    """Kept channels of one prunable module.

    ``pad`` lists kept channels that the search dropped and the export kept only to round D̃ up
    to a multiple (``multiple_of``): their weights start at zero, so the pruned network computes
    exactly what the searched one does, and retraining can use them."""
    name: str
    dim: int
    keep: List[int]
    pad: List[int] = field(default_factory=list)

    @property
    def kept(self) -> int:
        return len(self.keep)

    def to_dict(self) -> dict:
        d = dict(name=self.name, dim=self.dim, kept=self.kept, keep=list(self.keep))
        if self.pad:
            d['pad'] = list(self.pad)
        return d


def _integer(value, what: str) -> int:
    """An index or width of a subnet file: an integer (a bool or a float is refused)."""
    return check_number(value, f'"{what}"', integer=True)


def _check_entry(entry, dim: int, what: str, width: str, unit: str, empty: str) -> None:
    """A block's (or hidden entry's) kept indices against the backbone's width ``dim``."""
    if entry.dim != dim:
        raise SubnetError(f'{what} {entry.name}: the subnet says {width} = {entry.dim}, the '
                          f'backbone has {width} = {dim}')
    if entry.kept == 0:
        raise SubnetError(f'{what} {entry.name}: {empty}')
    bad = [k for k in entry.keep if not 0 <= k < dim]
    if bad:
        raise SubnetError(f'{what} {entry.name}: {unit} index {bad[0]} is out of range '
                          f'[0, {dim})')
    if len(set(entry.keep)) != len(entry.keep):
        raise SubnetError(f'{what} {entry.name}: repeated {unit} indices')
    if not set(entry.pad) <= set(entry.keep):
        raise SubnetError(f'{what} {entry.name}: "pad" lists {unit}s that are not in "keep"')


@dataclass
class SubnetSpec:
    """The exported architecture: what a pruned backbone is built from."""
    family: str
    arch: str
    variant: str
    blocks: List[BlockSelection]
    meta: dict = field(default_factory=dict)
    #: kept hidden units of the hidden-prunable modules (format 2; empty: all kept)
    hidden: List[BlockSelection] = field(default_factory=list)
    #: kept heads of the head-prunable attentions (format 3; empty: all kept)
    heads: List[BlockSelection] = field(default_factory=list)

    # ---------------------------------------------------------------- (de)serialisation
    def to_dict(self) -> dict:
        d = dict(format=SUBNET_FORMAT, family=self.family, arch=self.arch,
                 variant=self.variant, blocks=[b.to_dict() for b in self.blocks])
        if self.hidden:
            d['hidden'] = [b.to_dict() for b in self.hidden]
        if self.heads:
            d['heads'] = [b.to_dict() for b in self.heads]
        d['meta'] = dict(self.meta)
        return d

    @staticmethod
    def _parse_blocks(items, source: str, key: str) -> List[BlockSelection]:
        if not isinstance(items, list):
            raise SubnetError(f'{source}: "{key}" must be a list')
        blocks = []
        for i, b in enumerate(items):
            try:
                # indices and widths are integers: 0.7 is refused, never cut to 0
                blocks.append(BlockSelection(str(b['name']), _integer(b['dim'], 'dim'),
                                             [_integer(k, 'keep') for k in b['keep']],
                                             [_integer(k, 'pad') for k in b.get('pad', [])]))
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                raise SubnetError(f'{source}: {key} entry #{i} is malformed ({e!r}); each entry '
                                  'needs "name", "dim" and "keep"') from e
            kept = b.get('kept', blocks[-1].kept)
            if isinstance(kept, bool) or not isinstance(kept, int) or kept != blocks[-1].kept:
                raise SubnetError(f'{source}: {key} entry {blocks[-1].name}: "kept" = {kept!r} '
                                  f'but "keep" lists {blocks[-1].kept} channels')
        return blocks

    @classmethod
    def from_dict(cls, d: dict, source: str = 'subnet') -> 'SubnetSpec':
        if not isinstance(d, dict) or d.get('format') not in SUBNET_FORMATS:
            raise SubnetError(f'{source}: not an mmdcs subnet description (expected '
                              f'"format": one of {", ".join(SUBNET_FORMATS)})')
        for key in ('family', 'arch', 'variant', 'blocks'):
            if key not in d:
                raise SubnetError(f'{source}: missing key {key!r}')
        for key, kind in (('family', str), ('arch', str), ('variant', str), ('meta', dict)):
            if not isinstance(d.get(key, {}), kind):
                raise SubnetError(f'{source}: "{key}" must be a '
                                  f'{"string" if kind is str else "dict (JSON object)"}, got '
                                  f'{type(d[key]).__name__} {str(d[key])[:40]!r}')
        blocks = cls._parse_blocks(d['blocks'], source, 'blocks')
        hidden = cls._parse_blocks(d.get('hidden', []), source, 'hidden')
        heads = cls._parse_blocks(d.get('heads', []), source, 'heads')
        if any(b.pad for b in heads):
            raise SubnetError(f'{source}: heads entry {next(b for b in heads if b.pad).name}: '
                              '"pad" is not allowed for heads')
        return cls(d['family'], d['arch'], d['variant'], blocks, dict(d.get('meta', {})), hidden,
                   heads)

    def save(self, path: str) -> None:
        with open(path, 'w') as f:
            json.dump(self.to_dict(), f, indent=1)

    @classmethod
    def load(cls, path: str) -> 'SubnetSpec':
        if not osp.isfile(path):
            raise SubnetError(f'subnet file not found: {path}')
        return cls.from_dict(read_json(path, SubnetError, 'subnet', expect=None), source=path)

    @classmethod
    def coerce(cls, subnet: Union[str, dict, 'SubnetSpec']) -> 'SubnetSpec':
        """A spec from a path, a dict (as in a config) or a spec."""
        if isinstance(subnet, SubnetSpec):
            return subnet
        if isinstance(subnet, str):
            return cls.load(subnet)
        if isinstance(subnet, dict):
            return cls.from_dict(subnet)
        raise SubnetError(f'a subnet must be a path, a dict or a SubnetSpec, got {type(subnet)}')

    # ---------------------------------------------------------------- queries
    @property
    def kept_ratio(self) -> float:
        return sum(b.kept for b in self.blocks) / max(1, sum(b.dim for b in self.blocks))

    @property
    def hidden_kept_ratio(self) -> Optional[float]:
        """Kept fraction of the listed hidden units (None without hidden selection)."""
        if not self.hidden:
            return None
        return sum(b.kept for b in self.hidden) / max(1, sum(b.dim for b in self.hidden))

    def keep_map(self) -> Dict[str, List[int]]:
        return {b.name: b.keep for b in self.blocks}

    def check(self, family: str, arch: str, layout: Dict[str, int],
              variant: Optional[str] = None,
              hidden_layout: Optional[Dict[str, int]] = None,
              head_layout: Optional[Dict[str, int]] = None) -> None:
        """Refuse a description that does not fit a backbone.

        Args:
            family, arch: of the backbone.
            layout: prunable module path → D, of the backbone's supernet.
            variant: of the backbone, if it is fixed by its config.
            hidden_layout: hidden-prunable module path → hidden width H (checks ``hidden``).
            head_layout: head-prunable attention path → number of heads (checks ``heads``).
        """
        if self.family != family:
            raise SubnetError(f'the subnet is for the {self.family!r} family, this backbone is '
                              f'{family!r}')
        if self.arch != arch:
            raise SubnetError(f'the subnet is for arch {self.arch!r}, this backbone is {arch!r}')
        if variant is not None and self.variant != variant:
            raise SubnetError(f'the subnet is a {self.variant!r} network, this backbone is '
                              f'configured as {variant!r}')
        names = [b.name for b in self.blocks]
        missing = [n for n in layout if n not in names]
        extra = [n for n in names if n not in layout]
        if missing or extra or len(set(names)) != len(names):
            raise SubnetError(
                f'the subnet has {len(names)} blocks, the backbone {len(layout)} prunable blocks'
                + (f'; missing in the subnet: {", ".join(missing[:4])}' if missing else '')
                + (f'; not in the backbone: {", ".join(extra[:4])}' if extra else '')
                + ('; some blocks are listed twice' if len(set(names)) != len(names) else ''))
        for b in self.blocks:
            _check_entry(b, layout[b.name], 'block', 'D', 'channel',
                         'D̃ = 0 (no channel kept); a block needs at least one channel')
        if self.hidden:
            self._check_hidden(hidden_layout or {})
        if self.heads:
            self._check_heads(head_layout or {})

    def _check_heads(self, head_layout: Dict[str, int]) -> None:
        names = [b.name for b in self.heads]
        if len(set(names)) != len(names):
            raise SubnetError('the subnet lists the heads of an attention twice (key "heads")')
        for b in self.heads:
            if b.name not in head_layout:
                raise SubnetError(f'heads entry {b.name}: the backbone has no attention with '
                                  'prunable heads there (key "heads")')
            _check_entry(b, head_layout[b.name], 'heads entry', 'heads', 'head',
                         'no head kept; an attention needs at least one (key "heads")')

    def _check_hidden(self, hidden_layout: Dict[str, int]) -> None:
        names = [b.name for b in self.hidden]
        if len(set(names)) != len(names):
            raise SubnetError('the subnet lists the hidden units of a module twice')
        for b in self.hidden:
            if b.name not in hidden_layout:
                raise SubnetError(f'hidden entry {b.name}: the backbone has no module with '
                                  f'prunable hidden units there')
            _check_entry(b, hidden_layout[b.name], 'hidden entry', 'H', 'unit',
                         'no hidden unit kept; a module needs at least one')


def prunable_modules(model: nn.Module) -> Dict[str, nn.Module]:
    """Path → module for every module with a channel selector and a ``pruned`` method."""
    return {
        name: m
        for name, m in model.named_modules()
        if isinstance(getattr(m, 'select', None), ChannelSelector) and hasattr(m, 'pruned')
    }


def selector_layout(model: nn.Module) -> Dict[str, int]:
    """Path → D of every prunable module of a supernet."""
    return {name: m.select.dim for name, m in prunable_modules(model).items()}


def hidden_prunable_modules(model: nn.Module) -> Dict[str, nn.Module]:
    """Path → module for every module whose hidden units can be pruned (``prune_hidden_``),
    with or without a hidden selector."""
    return {
        name: m
        for name, m in model.named_modules()
        if callable(getattr(m, 'prune_hidden_', None)) and hasattr(m, 'hidden_features')
    }


def hidden_layout(model: nn.Module) -> Dict[str, int]:
    """Path → hidden width H of every hidden-prunable module."""
    return {name: int(m.hidden_features) for name, m in hidden_prunable_modules(model).items()}


def hidden_selectors(model: nn.Module) -> Dict[str, ChannelSelector]:
    """Path → hidden selector of every module searched with hidden-unit selection."""
    return {
        name: m.hidden_select
        for name, m in hidden_prunable_modules(model).items()
        if isinstance(getattr(m, 'hidden_select', None), ChannelSelector)
    }


def head_prunable_modules(model: nn.Module) -> Dict[str, nn.Module]:
    """Path → attention for every attention whose heads can be pruned (``prune_heads_``), with
    or without a head selector."""
    return {
        name: m
        for name, m in model.named_modules()
        if callable(getattr(m, 'prune_heads_', None)) and hasattr(m, 'num_heads')
    }


def head_layout(model: nn.Module) -> Dict[str, int]:
    """Path → number of heads of every head-prunable attention."""
    return {name: int(m.num_heads) for name, m in head_prunable_modules(model).items()}


def head_selectors(model: nn.Module) -> Dict[str, ChannelSelector]:
    """Path → head selector of every attention searched with head selection."""
    return {
        name: m.head_select
        for name, m in head_prunable_modules(model).items()
        if isinstance(getattr(m, 'head_select', None), ChannelSelector)
    }


def _selection(name: str, selector: ChannelSelector, multiple_of: int,
               allowed: Optional[torch.Tensor] = None) -> BlockSelection:
    """{α > 0} of one selector (at least its largest α), rounded up to ``multiple_of`` with the
    dropped entries of largest α (``pad``). ``allowed`` (a bool mask): only those entries
    (the channels of the kept heads, where channels lie inside heads)."""
    alpha = selector.alpha.detach()
    ok = torch.ones_like(alpha, dtype=torch.bool) if allowed is None else \
        allowed.to(alpha.device).view_as(alpha)
    keep = ((alpha > 0) & ok).nonzero().flatten()
    if keep.numel() == 0:
        keep = alpha.masked_fill(~ok, -float('inf')).argmax().view(1)
    pad: List[int] = []
    target = min(int(ok.sum()), -(-keep.numel() // multiple_of) * multiple_of)
    if target > keep.numel():
        dropped = ok.clone()
        dropped[keep] = False
        cand = dropped.nonzero().flatten()
        order = alpha[cand].argsort(descending=True, stable=True)
        pad = sorted(cand[order[:target - keep.numel()]].tolist())
    return BlockSelection(name, selector.dim, sorted(keep.tolist() + pad), pad)


def export_subnet(model: nn.Module, family: str, arch: str, variant: str,
                  multiple_of: int = 1, **meta) -> SubnetSpec:
    """The deterministic subnet of a supernet: kept = {i : α_i > 0} in every prunable module
    (and every hidden selector: the spec's ``hidden`` entries; every head selector: its
    ``heads`` entries).

    A module whose α are all ≤ 0 keeps its single largest channel (a block cannot be empty).
    Where a module's channels lie inside its heads (``channel_heads()``: EfficientViT's LiteMLA)
    the channels of its pruned heads are not kept (they output zero in the supernet too).

    Args:
        multiple_of: round every D̃ up to a multiple of this (capped at D) with the dropped
            channels of largest α, recorded as ``pad`` (zero weights in the pruned network, so
            its output is unchanged). Matrix multiplies at widths that are multiples of 8 run
            faster on CPUs and GPUs (``tools/analysis/latency.py``).
    """
    if int(multiple_of) < 1:
        raise SubnetError(f'multiple_of must be a positive integer, got {multiple_of}')
    multiple_of = int(multiple_of)
    # heads are whole units: never rounded up (at least the head of largest α is kept)
    heads = [_selection(name, sel, 1) for name, sel in head_selectors(model).items()]
    kept_heads = {b.name: b.keep for b in heads}

    def allowed(name: str, m: nn.Module) -> Optional[torch.Tensor]:
        """Where a module's channels lie inside its heads (``channel_heads()``, EfficientViT's
        LiteMLA), a channel of a pruned head outputs zero: it is not kept."""
        owner = getattr(m, 'channel_heads', None)
        if name not in kept_heads or not callable(owner):
            return None
        return torch.isin(owner(), torch.as_tensor(kept_heads[name], dtype=torch.long))

    blocks = [_selection(name, m.select, multiple_of, allowed(name, m))
              for name, m in prunable_modules(model).items()]
    if not blocks:
        raise SubnetError('this model has no channel selectors: export needs a DCS or KCR '
                          'supernet')
    hidden = [_selection(name, sel, multiple_of)
              for name, sel in hidden_selectors(model).items()]
    if multiple_of > 1:
        meta.setdefault('multiple_of', multiple_of)
    return SubnetSpec(family, arch, variant, blocks, meta, hidden, heads)


def _set_submodule(model: nn.Module, path: str, module: nn.Module) -> None:
    parent, _, child = path.rpartition('.')
    setattr(model.get_submodule(parent) if parent else model, child, module)


@torch.no_grad()
def apply_subnet_(model: nn.Module, spec: SubnetSpec) -> nn.Module:
    """Replace every prunable module of a supernet by its pruned form, in place (weights are
    sliced from the supernet's). The spec must already be checked against the model.

    A model that prunes more than its prunable modules (MobileViT's projection conv reads the
    kept channels of the block before it) does so in its ``_after_subnet(spec)`` method, called
    last. Hidden units (``spec.hidden``) and heads (``spec.heads``) are pruned first, in
    place."""
    attentions = head_prunable_modules(model)
    for b in spec.heads:
        if b.name not in attentions:
            raise SubnetError(f'heads entry {b.name}: no attention with prunable heads at '
                              'this path')
        attentions[b.name].prune_heads_(b.keep)
    for m in attentions.values():  # an attention the spec does not list keeps every head
        if getattr(m, 'head_select', None) is not None:
            m.head_select = None
    if spec.hidden:
        narrowable = hidden_prunable_modules(model)
        for b in spec.hidden:
            if b.name not in narrowable:
                raise SubnetError(f'hidden entry {b.name}: no module with prunable hidden units '
                                  'at this path')
            narrowable[b.name].prune_hidden_(b.keep, pad=b.pad)
    modules = prunable_modules(model)
    for b in spec.blocks:
        if b.name not in modules:
            raise SubnetError(f'block {b.name}: no prunable module at this path')
        module = modules[b.name]
        pruned = module.pruned(b.keep, pad=b.pad) if b.pad else module.pruned(b.keep)
        _set_submodule(model, b.name, pruned)
    after = getattr(model, '_after_subnet', None)
    if callable(after):
        after(spec)
    return model


def prune_state_dict(supernet_state: Dict[str, torch.Tensor], spec: SubnetSpec,
                     build_supernet: Callable[[], nn.Module]) -> Dict[str, torch.Tensor]:
    """Turn a supernet state dict into the state dict of the pruned network of ``spec``.

    Args:
        supernet_state: the supernet backbone's weights.
        spec: the subnet.
        build_supernet: makes an (untrained) supernet of the same architecture.
    """
    model = build_supernet()
    missing, unexpected = model.load_state_dict(supernet_state, strict=False)
    if missing or unexpected:
        raise SubnetError('the supernet weights do not match the architecture: '
                          f'missing {missing[:5]}, unexpected {unexpected[:5]}')
    apply_subnet_(model, spec)
    return model.state_dict()


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):
            h.update(chunk)
    return h.hexdigest()
