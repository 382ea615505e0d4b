"""What every OFB backbone shares (a mixin for ``nn.Module`` backbones whose searchable units are
:class:`~.layers.OFBAttention`, :class:`~.layers.OFBMlp` and embedding :class:`~.bimask.BiMask`s).

A family implements ``compress_`` (returning ``out_keep``, the output channels kept, for the layers
that read them: the classifier head, the PMIM decoder), ``_fuse_embed_``, ``expected_macs``,
``expected_width``, ``full_macs``, ``export_arch``, ``compact_state_dict``, ``forward_search``,
``mim_scale`` and ``mim_grid``.
"""
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn

from .bimask import BiMask
from .compress import adopt_state_shapes_, is_search_state
from .layers import OFBAttention, OFBMlp

#: the kinds of unit groups (the public code's w_head / w_mlp / w_embedding)
KINDS = ('attn', 'mlp', 'embed')


class OFBSupernetMixin:
    """Bi-mask bookkeeping, schedules, finalisation and fusion of an OFB backbone."""
    #: a peer method's backbone (as ``is_peer`` of mmdcs's backbone contract)
    is_peer = True

    def named_bimasks(self) -> List[Tuple[str, str, BiMask]]:
        """``(kind, name, bimask)`` for every bi-mask, kind 'attn', 'mlp' or 'embed'."""
        out = []
        for name, m in self.named_modules():
            if isinstance(m, BiMask):
                owner = name.rsplit('.', 1)[0] if '.' in name else ''
                parent = self.get_submodule(owner) if owner else self
                kind = 'attn' if isinstance(parent, OFBAttention) else \
                    'mlp' if isinstance(parent, OFBMlp) else 'embed'
                out.append((kind, name, m))
        return out

    def bimasks(self, kind: Optional[str] = None) -> List[BiMask]:
        return [m for k, _, m in self.named_bimasks() if kind is None or k == kind]

    @property
    def is_supernet(self) -> bool:
        return bool(self.bimasks())

    @property
    def search_finished(self) -> bool:
        """Every unit group has one cell left (always true for a compact model)."""
        return all(m.is_finished for m in self.bimasks())

    @property
    def fused(self) -> bool:
        return all(m.is_fused for m in self.bimasks())

    def set_w_p_(self, value: float) -> None:
        """Set w_p on the groups whose search is not over (the public ``update_w``)."""
        if not 0 <= value <= 1:
            raise ValueError(f'w_p must be in [0, 1], got {value}')
        for m in self.bimasks():
            if not m.is_finished:
                m.w_p.fill_(value)

    def search_state(self) -> Dict[str, float]:
        """Numbers for the logs: groups finished, active cells, current widths."""
        masks = self.bimasks()
        return dict(groups_finished=float(sum(m.is_finished for m in masks)),
                    groups=float(len(masks)),
                    active_cells=float(sum(m.num_active for m in masks)))

    def discretize_(self) -> int:
        """End the search of every unfinished group: keep only its most probable cell (the
        next ``compress_`` slices and finishes it). Returns the number of groups changed."""
        n = 0
        for m in self.bimasks():
            if m.is_finished:
                continue
            with torch.no_grad():
                p = m.probs()
                onehot = torch.zeros_like(m.active)
                onehot.view(-1)[int(p.view(-1).argmax())] = True
                m.active.copy_(onehot)
            n += 1
        return n

    def fuse_(self) -> None:
        """Fold every finished mask into the weights (the public ``fuse``): afterwards the
        supernet is the dense compact network with extra, unused score parameters."""
        if not self.search_finished:
            raise RuntimeError(f'{type(self).__name__}.fuse_: the search is not finished '
                               '(discretize_ and compress_ first)')
        for m in self.modules():
            if isinstance(m, (OFBAttention, OFBMlp)):
                m.fuse_()
        self._fuse_embed_()

    def _fuse_embed_(self) -> None:
        raise NotImplementedError

    def _read_arch(self, arch_file) -> dict:
        raise NotImplementedError

    def _arch_or_search_space(self, arch_file, search_space) -> Tuple[Optional[dict], tuple]:
        """(arch_spec, search_space) of a new backbone: a compact network's checked arch file
        and no search space, or no arch file and the supernet's search space (default: every
        kind), checked; clear errors for both given and for unknown kinds."""
        name = type(self).__name__
        if arch_file is not None:
            if search_space:
                raise ValueError(f'{name}: give either arch_file (compact network) or '
                                 f'search_space (supernet), not both')
            return self._read_arch(arch_file), ()
        search_space = tuple(KINDS if search_space is None else search_space)
        unknown = set(search_space) - set(KINDS)
        if unknown:
            raise ValueError(f'{name}: unknown search_space entries {sorted(unknown)}; '
                             f'valid: {", ".join(KINDS)}')
        return None, search_space

    def _adopt_search_shapes(self, state_dict, prefix: str, skip=()) -> None:
        """Called from ``_load_from_state_dict``: a checkpoint of this supernet taken after some
        compressions has smaller tensors; take its shapes first (a resumed run)."""
        if self.is_supernet and is_search_state(state_dict, prefix):
            adopt_state_shapes_(self, state_dict, prefix, skip=skip)


def has_ofb_backbone(model: nn.Module) -> bool:
    return isinstance(getattr(model, 'backbone', None), OFBSupernetMixin)
