"""The classifier of the OFB search (and of the compact network's fine-tuning).

``OFBClassifier`` is mmpretrain's ``ImageClassifier`` with an OFB backbone
(:class:`~mmdcs.models.backbones.ofb_vit.OFBViT`, ``OFBSwin``). With ``search=dict(...)`` its
loss is the public code's (``OFBSearchLOSS`` + ``engine.search_one_epoch``)::

    CE + w_head·L_attn + w_mlp·L_mlp + w_embed·L_embed + w_flops·L_flops
       + (CE / L_pmim)·L_pmim      (the weight detached: the PMIM term is as large as CE)
       + L_score                   (Σ w_kind·c_kind·Σ sigmoid(S), c = 4e-4 attention, 1e-4 else)

with L_kind the adaptive one-hot losses of the unit groups still searching, L_flops =
((FLOPs(α) − target)/FLOPs_full)² over the whole classifier at the backbone's nominal input size,
and L_pmim the masked-image-modelling loss of the progressive patch masking. Each term is logged
(``loss_ce``, ``loss_attn``, ``loss_mlp``, ``loss_embed``, ``loss_flops``, ``loss_pmim``,
``loss_score_norm``; ``loss`` is their sum), with the searched GFLOPs (``gflops``) and the raw
PMIM L1 (``pmim_l1``). Once every group has one cell left the search is over: the architecture
terms and PMIM stop, the decoder is frozen and, if configured, the post-search batch
augmentations (the public code's mixup 0.8 / cutmix 1.0) are switched on.

Without ``search`` it is a plain ``ImageClassifier`` whose head width follows a compact
backbone (built from an arch file), so a config needs no per-search ``in_channels``.
"""
from typing import Dict, List, Optional

import torch
import torch.nn as nn
from mmengine.logging import print_log
from mmpretrain.models.classifiers import ImageClassifier
from mmpretrain.models.necks import GlobalAveragePooling
from mmpretrain.models.utils.batch_augments import RandomBatchAugment
from mmpretrain.structures import DataSample

from mmdcs.checks import check_number
from mmdcs.peers.ofb import (SCORE_NORM_WEIGHTS, PMIMDecoder, adaptive_one_hot_loss,
                             adopt_state_shapes_, flops_loss, is_search_state,
                             random_patch_mask, score_norm, slice_param_, sync_layer_attrs_,
                             upsample_patch_mask, pmim_loss)
from mmdcs.peers.ofb.supernet import KINDS, OFBSupernetMixin
from mmdcs.registry import MODELS
from mmdcs.utils.errors import InputError
from mmdcs.utils.scope import build_model_part, cls_data_preprocessor

SEARCH_KEYS = ('target_flops', 'target_ratio', 'w_head', 'w_mlp', 'w_embed', 'w_flops',
               'entropy', 'variance', 'norm', 'pmim', 'after_search_augments')
#: loss weight per kind of unit group
KIND_WEIGHT = {'attn': 'w_head', 'mlp': 'w_mlp', 'embed': 'w_embed'}


def _non_negative(name: str, value) -> float:
    return check_number(value, f'search.{name}', 0)


@MODELS.register_module()
class OFBClassifier(ImageClassifier):
    """Image classifier of the OFB search and of the compact network.

    Args:
        backbone: an OFB backbone config (``mmdcs.OFBViT`` / ``mmdcs.OFBSwin``): a supernet for
            the search, a compact network (``arch_file=...``) for fine-tuning.
        neck, head, pretrained, train_cfg, data_preprocessor, init_cfg: as ``ImageClassifier``.
            The head's ``in_channels`` is set to a compact backbone's output width.
        search: the search objective, or None (no search). Keys (the public code's defaults):
            ``target_flops`` (GFLOPs = G multiply-accumulates of the whole classifier at the
            backbone's ``img_size``, counted as ``mmdcs.analysis.complexity.count_flops``
            counts the compact model) or ``target_ratio`` (of the unpruned classifier's),
            exactly one; ``w_head=0.5``, ``w_mlp=0.5``, ``w_embed=0.5``, ``w_flops=5.``;
            ``entropy``, ``variance``, ``norm`` (the terms of the adaptive one-hot loss and the
            score norm, all True); ``pmim=dict(window=47)`` (the PMIM decoder and the local
            normalisation window of its targets; None: no PMIM);
            ``after_search_augments`` (a ``RandomBatchAugment`` config switched on when the
            search ends, e.g. ``dict(augments=[dict(type='Mixup', alpha=0.8),
            dict(type='CutMix', alpha=1.0)])``; needs a head loss that takes soft labels).
    """

    #: what the model keeps of a search beside its network (PMIM's masking share, whether the
    #: search is over, the PMIM decoder): saved in checkpoints, not part of the compact network
    #: (:func:`mmdcs.selection.search_state_keys`)
    search_state_names = ('keep_ratio', 'search_done', 'decoder')

    def __init__(self, backbone: dict, neck: Optional[dict] = None, head: Optional[dict] = None,
                 search: Optional[dict] = None, pretrained: Optional[str] = None,
                 train_cfg: Optional[dict] = None, data_preprocessor: Optional[dict] = None,
                 init_cfg: Optional[dict] = None):
        backbone = build_model_part(backbone)
        if not isinstance(backbone, OFBSupernetMixin):
            raise TypeError(f'OFBClassifier needs an OFB backbone (mmdcs.OFBViT, mmdcs.OFBSwin), '
                            f'got {type(backbone).__name__}')
        head = self._fit_head(head, backbone)
        super().__init__(backbone=backbone, neck=build_model_part(neck),
                         head=build_model_part(head), pretrained=pretrained,
                         train_cfg=train_cfg,
                         data_preprocessor=cls_data_preprocessor(data_preprocessor,
                                                                 train_cfg),
                         init_cfg=init_cfg)
        self.search_cfg = self._check_search(search)
        self.decoder = None
        #: PMIM's share of kept patches (set by OFBSearchHook); 1 = no masking
        self.register_buffer('keep_ratio', torch.tensor(1.))
        #: the search is over (every group has one cell left); saved in checkpoints
        self.register_buffer('search_done', torch.tensor(False))
        if self.search_cfg is not None:
            pmim = self.search_cfg['pmim']
            if pmim is not None:
                self.decoder = PMIMDecoder(backbone.num_features, backbone.mim_scale,
                                           backbone.in_channels)
            self._target = self._target_macs()

    # --------------------------------------------------------------------- configuration
    @staticmethod
    def _fit_head(head, backbone):
        width = backbone.num_features
        if isinstance(head, dict) and 'in_channels' in head and head['in_channels'] != width:
            if backbone.is_supernet:
                raise ValueError(f'head.in_channels = {head["in_channels"]} but the backbone '
                                 f'outputs {width} channels')
            head = dict(head, in_channels=width)
        return head

    def _check_search(self, search: Optional[dict]) -> Optional[dict]:
        if search is None:
            return None
        cfg = dict(search)
        unknown = set(cfg) - set(SEARCH_KEYS)
        if unknown:
            raise ValueError(f'search: unknown keys {sorted(unknown)}; valid: '
                             f'{", ".join(SEARCH_KEYS)}')
        if not self.backbone.is_supernet:
            raise ValueError(f'a search needs a supernet backbone, but '
                             f'{type(self.backbone).__name__} has no bi-masks (built from an arch '
                             'file, or with search_space=())')
        if (cfg.get('target_flops') is None) == (cfg.get('target_ratio') is None):
            raise ValueError('search: give exactly one of target_flops (GFLOPs) and '
                             'target_ratio')
        check_number(cfg.get('target_ratio'), 'search.target_ratio', 0, 1, low_open=True,
                     none=True)
        check_number(cfg.get('target_flops'), 'search.target_flops', 0, low_open=True, none=True)
        for k, default in (('w_head', .5), ('w_mlp', .5), ('w_embed', .5), ('w_flops', 5.)):
            cfg[k] = _non_negative(k, cfg.get(k, default))
        for k in ('entropy', 'variance', 'norm'):
            cfg[k] = bool(cfg.get(k, True))
        pmim = cfg.get('pmim', dict(window=47))
        if pmim is not None:
            pmim = dict(pmim)
            if set(pmim) - {'window'}:
                raise ValueError(f'search.pmim: unknown keys {sorted(set(pmim) - {"window"})}')
            window = check_number(pmim.setdefault('window', 47), 'search.pmim.window', 3,
                                  integer=True)
            if window % 2 != 1:
                raise ValueError(f'search.pmim.window must be odd and ≥ 3, got {window}')
        cfg['pmim'] = pmim
        cfg.setdefault('after_search_augments', None)
        if cfg['after_search_augments'] is not None:
            RandomBatchAugment(**cfg['after_search_augments'])  # fail at build time
        return cfg

    def _head_fc(self) -> Optional[nn.Linear]:
        fc = getattr(self.head, 'fc', None)
        return fc if isinstance(fc, nn.Linear) else None

    def _head_macs(self, width):
        """The neck's global average pooling (1 per element, as mmengine counts it) and the
        head's fc, at the backbone's output ``width``."""
        macs = width * 0
        if isinstance(self.neck, GlobalAveragePooling):
            macs = macs + width * self.backbone.output_tokens
        fc = self._head_fc()
        return macs + width * fc.out_features if fc is not None else macs

    def full_macs(self) -> float:
        """MACs of the unpruned classifier at the backbone's nominal input size."""
        width = self.backbone.full_num_features if hasattr(self.backbone, 'full_num_features') \
            else self.backbone.full_embed_dim
        return self.backbone.full_macs() + float(self._head_macs(width))

    def expected_macs(self) -> torch.Tensor:
        """MACs of the classifier as a differentiable function of α."""
        return self.backbone.expected_macs() + self._head_macs(self.backbone.expected_width())

    def _target_macs(self) -> float:
        cfg, full = self.search_cfg, self.full_macs()
        if cfg.get('target_ratio') is not None:
            return cfg['target_ratio'] * full
        target = cfg['target_flops'] * 1e9
        if target > full:
            raise ValueError(f'search.target_flops = {cfg["target_flops"]} G exceeds the '
                             f'unpruned model\'s {full / 1e9:.4g} G at the nominal input size')
        return target

    # --------------------------------------------------------------------- state
    @property
    def searching(self) -> bool:
        return self.search_cfg is not None and not bool(self.search_done)

    def set_schedule_(self, w_p: Optional[float] = None,
                      keep_ratio: Optional[float] = None) -> None:
        """Set w_p on the searching groups and PMIM's kept share (OFBSearchHook)."""
        if w_p is not None:
            self.backbone.set_w_p_(w_p)
        if keep_ratio is not None:
            if not 0 < keep_ratio <= 1:
                raise ValueError(f'keep_ratio must be in (0, 1], got {keep_ratio}')
            self.keep_ratio.fill_(keep_ratio)

    # --------------------------------------------------------------------- losses
    def search_terms(self) -> Dict[str, torch.Tensor]:
        """The architecture terms (of the groups still searching) and the FLOPs term."""
        cfg = self.search_cfg
        sums = {k: None for k in KINDS}
        norm = None
        for kind, _, bm in self.backbone.named_bimasks():
            if bm.is_finished:
                continue
            term = adaptive_one_hot_loss(bm.active_probs(), cfg['entropy'], cfg['variance'])
            sums[kind] = term if sums[kind] is None else sums[kind] + term
            if cfg['norm']:
                n = cfg[KIND_WEIGHT[kind]] * score_norm(bm.score, SCORE_NORM_WEIGHTS[kind])
                norm = n if norm is None else norm + n
        out = {}
        for kind, name in (('attn', 'loss_attn'), ('mlp', 'loss_mlp'), ('embed', 'loss_embed')):
            if sums[kind] is not None:
                out[name] = cfg[KIND_WEIGHT[kind]] * sums[kind]
        if norm is not None:
            out['loss_score_norm'] = norm
        searched = self.expected_macs()
        out['loss_flops'] = cfg['w_flops'] * flops_loss(searched, self._target, self.full_macs())
        out['gflops'] = searched.detach() / 1e9
        return out

    def loss(self, inputs: torch.Tensor, data_samples: List[DataSample]) -> dict:
        if self.search_cfg is None:
            return super().loss(inputs, data_samples)
        if not self.searching:
            return self._after_search_loss(inputs, data_samples)
        bb = self.backbone
        patch_mask = None
        keep = float(self.keep_ratio)
        if self.decoder is not None and keep < 1:
            grid = bb.mim_grid(inputs)
            patch_mask = random_patch_mask(inputs.shape[0], grid[0] * grid[1], keep,
                                           device=inputs.device)
        outs, fmap = bb.forward_search(inputs, patch_mask)
        feats = self.neck(outs) if self.with_neck else outs
        # the head's 'loss' renamed, so that the total is what the log calls 'loss'
        losses = {('loss_ce' if k == 'loss' else k): v
                  for k, v in self.head.loss(feats, data_samples).items()}
        if not bb.search_finished:
            losses.update(self.search_terms())
        if patch_mask is not None:
            rec = self.decoder(fmap)
            if rec.shape[-2:] != inputs.shape[-2:]:
                raise InputError(f'PMIM: the input size {tuple(inputs.shape[-2:])} must be a '
                                 f'multiple of {bb.mim_scale}')
            pixel_mask = upsample_patch_mask(patch_mask, bb.mim_grid(inputs), bb.mim_scale)
            rec_loss = pmim_loss(rec, inputs, pixel_mask, self.search_cfg['pmim']['window'])
            ce = losses['loss_ce'].detach()
            losses['loss_pmim'] = ce / rec_loss.detach().clamp_min(1e-12) * rec_loss
            losses['pmim_l1'] = rec_loss.detach()
        return losses

    def _after_search_loss(self, inputs: torch.Tensor, data_samples: List[DataSample]) -> dict:
        """The cross-entropy alone, the search's other terms logged as 0 (a log shows the
        last value of a key that is no longer updated)."""
        losses = {('loss_ce' if k == 'loss' else k): v
                  for k, v in super().loss(inputs, data_samples).items()}
        zero = losses['loss_ce'].new_zeros(())
        for key in ('loss_attn', 'loss_mlp', 'loss_embed', 'loss_score_norm', 'loss_flops'):
            losses[key] = zero
        if self.decoder is not None:
            losses['loss_pmim'] = zero
        losses['gflops'] = self.expected_macs().detach() / 1e9
        return losses

    # --------------------------------------------------------------------- compression
    def compress(self, threshold: float = 0.2, optimizers=None) -> dict:
        """One pruning step of the backbone (see its ``compress_``), the head and the decoder
        sliced with the backbone's output channels; ends the search when every group is
        finished. ``optimizers``: torch optimizers or mmengine optimizer wrappers whose state of
        the sliced parameters is sliced too."""
        report = self.backbone.compress_(threshold, optimizers)
        keep = report.get('out_keep')
        if keep is not None:
            self._slice_readers_(keep, optimizers)
        report['finished'] = self.backbone.search_finished
        if report['finished'] and not bool(self.search_done):
            self.end_search()
        return report

    def _slice_readers_(self, keep: torch.Tensor, optimizers=None) -> None:
        """The layers that read the backbone's output channels: the head's fc, the decoder."""
        fc = self._head_fc()
        if fc is None:
            raise ValueError(f'pruning the output width needs a head with an `fc` Linear, got '
                             f'{type(self.head).__name__}; remove "embed" from the search space')
        slice_param_(fc.weight, keep, 1, optimizers)
        if hasattr(self.head, 'in_channels'):
            self.head.in_channels = fc.weight.shape[1]
        if self.decoder is not None:
            slice_param_(self.decoder.conv.weight, keep, 1, optimizers)
        sync_layer_attrs_(self)

    def finalize(self, optimizers=None) -> int:
        """End an unfinished search: every searching group keeps its most probable cell, and is
        sliced and finished. Returns the number of groups so discretised."""
        n = self.backbone.discretize_()
        if n:
            self.compress(0.5, optimizers)
        return n

    def end_search(self) -> None:
        """The search is over: no architecture terms, no PMIM, the decoder frozen, and the
        post-search batch augmentations switched on."""
        self.search_done.fill_(True)
        self.keep_ratio.fill_(1.)
        if self.decoder is not None:
            self.decoder.requires_grad_(False)
        augments = (self.search_cfg or {}).get('after_search_augments')
        dp = self.data_preprocessor
        if augments is not None and hasattr(dp, 'batch_augments'):
            dp.batch_augments = RandomBatchAugment(**augments)
            dp.to_onehot = True
            print_log('OFB: search finished; batch augmentations switched on',
                      logger='current')

    def fuse(self) -> None:
        """Fold the importance scores into the weights (a finished search only)."""
        self.backbone.fuse_()

    # --------------------------------------------------------------------- checkpoints
    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        """A checkpoint of a search in progress has sliced weights: take its shapes first (the
        backbone resamples its own position embedding), so that ``--resume`` works."""
        if is_search_state(state_dict, prefix + 'backbone.'):
            adopt_state_shapes_(self, state_dict, prefix, skip=('backbone.pos_embed', ))
            if hasattr(self.head, 'in_channels') and self._head_fc() is not None:
                self.head.in_channels = self._head_fc().weight.shape[1]
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if bool(self.search_done) and self.decoder is not None:
            self.decoder.requires_grad_(False)
