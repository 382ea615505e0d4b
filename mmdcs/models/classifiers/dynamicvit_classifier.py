"""The classifier of DynamicViT training (paper §3.4; public ``main.py`` + ``losses.py``).

``DynamicViTClassifier`` is mmpretrain's ``ImageClassifier`` with a :class:`DynamicViT` or
:class:`DynamicSwin` backbone and a frozen **teacher**: the unpruned network (the same architecture
as a plain mmdcs ViT / Swin classifier, built from its model config and loaded from its
checkpoint). Each training step adds to the head's cross-entropy (``loss_cls``) the DynamicViT
terms of :class:`~mmdcs.peers.dynamicvit.DynamicViTLoss`, logged separately: ``loss_ratio``
(keep ratios), ``loss_kl`` (KL to the teacher's class distribution) and ``loss_distill`` (MSE to
the teacher's final tokens), plus the mean kept fraction of every stage (``keep_s1``, …).

The teacher is held outside the module tree: it is in no optimizer, no checkpoint and no DDP
wrapper, stays in eval mode and follows the inputs' device. It is built and loaded when training
first needs it (``init_weights`` or the first ``loss``), so evaluating, exporting or measuring a
trained student (``tools/test.py``, ``tools/analysis/complexity.py``) needs no teacher checkpoint. By default the student starts from the
teacher's weights (``init_from_teacher``; the public code loads the same pretrained weights into
both), the predictors (and DynamicSwin's fast paths) from their own initialisation.
"""
import os.path as osp
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
from mmpretrain.models.classifiers import ImageClassifier
from mmpretrain.structures import DataSample

from mmdcs.models.backbones.dynamic_vit import PREDICTOR_KEYS
from mmdcs.peers.dynamicvit import DynamicViTLoss
from mmdcs.registry import MODELS
from mmdcs.utils.scope import build_model_part, cls_data_preprocessor


@MODELS.register_module()
class DynamicViTClassifier(ImageClassifier):
    """Image classifier for DynamicViT / DynamicSwin training with a frozen teacher.

    Args:
        backbone: a ``mmdcs.DynamicViT`` or ``mmdcs.DynamicSwin`` config.
        teacher: the model config of the unpruned classifier (e.g. the ``model`` of
            ``configs/_base_/models/vit_deit-tiny.py``); same backbone family and head.
        teacher_checkpoint: its trained weights (an mmengine checkpoint or a state dict, e.g. a
            timm model converted by ``tools/convert/timm_to_mmdcs.py``); required for training
            only, checked when the teacher is first used.
        ratio_weight: λ_ratio (public: 2.0 DeiT-S, 5.0 DeiT-B, 10.0 Swin).
        kl_weight: λ_KL (public 0.5).
        distill_weight: λ_distill (public 0.5).
        init_from_teacher: copy the teacher's weights into the student at ``init_weights``.
        neck, head, pretrained, train_cfg, data_preprocessor, init_cfg: as mmpretrain's
            ``ImageClassifier``.
    """

    def __init__(self, backbone: dict, teacher: dict, teacher_checkpoint: Optional[str],
                 neck: Optional[dict] = None, head: Optional[dict] = None,
                 ratio_weight: float = 2., kl_weight: float = 0.5, distill_weight: float = 0.5,
                 init_from_teacher: bool = True, pretrained: Optional[str] = None,
                 train_cfg: Optional[dict] = None, data_preprocessor: Optional[dict] = None,
                 init_cfg: Optional[dict] = None):
        super().__init__(backbone=build_model_part(backbone), neck=build_model_part(neck),
                         head=build_model_part(head), pretrained=pretrained,
                         train_cfg=train_cfg,
                         data_preprocessor=cls_data_preprocessor(data_preprocessor,
                                                                 train_cfg),
                         init_cfg=init_cfg)
        if not all(hasattr(self.backbone, a) for a in ('keep_ratios', 'last_decisions')):
            raise ValueError('DynamicViTClassifier needs a DynamicViT or DynamicSwin backbone, '
                             f'got {type(self.backbone).__name__}')
        self.criterion = DynamicViTLoss(ratio_weight, kl_weight, distill_weight)
        self.init_from_teacher = init_from_teacher
        if not isinstance(teacher, dict):
            raise TypeError(f'DynamicViTClassifier: teacher must be a model config dict, got '
                            f'{type(teacher).__name__}')
        self._teacher_cfg = dict(teacher)
        self.teacher_checkpoint = teacher_checkpoint
        # outside the module tree: no optimizer, checkpoint or DDP sees it; built on first use
        self.__dict__['_teacher'] = None

    # --------------------------------------------------------------------- teacher
    @property
    def teacher(self) -> nn.Module:
        """The frozen teacher, built and loaded from ``teacher_checkpoint`` on first access."""
        if self.__dict__['_teacher'] is None:
            self.__dict__['_teacher'] = self._build_teacher(self._teacher_cfg,
                                                            self.teacher_checkpoint)
        return self.__dict__['_teacher']

    def _build_teacher(self, cfg: dict, checkpoint: Optional[str]) -> nn.Module:
        if not checkpoint:
            raise ValueError('DynamicViTClassifier: teacher_checkpoint is required for training '
                             '(the weights of the unpruned baseline the student is distilled '
                             'from)')
        if not osp.isfile(checkpoint):
            raise FileNotFoundError(
                f'DynamicViTClassifier: teacher_checkpoint {checkpoint!r} not found: train the '
                'unpruned baseline first (its config is the `teacher` model), or convert a timm '
                'model with tools/convert/timm_to_mmdcs.py, and pass its path')
        teacher = build_model_part(dict(cfg))
        student_family = getattr(self.backbone, 'family', None)
        if getattr(teacher.backbone, 'family', None) != student_family:
            raise ValueError(f'DynamicViTClassifier: the teacher backbone '
                             f'{type(teacher.backbone).__name__} is not of the student\'s family '
                             f'({student_family})')
        from mmengine.runner.checkpoint import _load_checkpoint, _load_checkpoint_to_model
        ckpt = _load_checkpoint(checkpoint, map_location='cpu')
        state = ckpt.get('state_dict', ckpt) if isinstance(ckpt, dict) else ckpt
        try:
            _load_checkpoint_to_model(teacher, state, strict=True)
        except RuntimeError as e:
            raise KeyError(f'DynamicViTClassifier: teacher_checkpoint {checkpoint!r} does not '
                           f'fit the teacher model: {e}') from None
        teacher.requires_grad_(False)
        return teacher.eval()

    def _final_norm(self, model: nn.Module) -> Tuple[nn.Module, bool]:
        """The module whose output is the final normalised token map, and whether it carries a
        class token first (ViT) or is a (B, H, W, C) map (Swin)."""
        bb = model.backbone
        final = getattr(bb, 'final_token_norm', None)  # the family's (ViT, Swin)
        if final is None:
            raise ValueError(f'DynamicViTClassifier: {type(bb).__name__} has no final token map '
                             'for the token distillation (final_token_norm)')
        return final()

    @torch.no_grad()
    def teacher_outputs(self, inputs: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The teacher's logits (B, K) and final normalised patch tokens (B, N, C)."""
        teacher = self.teacher
        if next(teacher.parameters()).device != inputs.device:
            teacher.to(inputs.device)
        teacher.eval()
        norm, has_cls = self._final_norm(teacher)
        captured = []
        handle = norm.register_forward_hook(lambda m, a, out: captured.append(out))
        try:
            logits = teacher(inputs, mode='tensor')
        finally:
            handle.remove()
        tokens = captured[-1]
        tokens = tokens[:, 1:] if has_cls else tokens.flatten(1, 2)
        return logits, tokens

    # --------------------------------------------------------------------- weights
    def init_weights(self) -> None:
        super().init_weights()
        if not self.init_from_teacher:
            return
        missing, unexpected = self.load_state_dict(self.teacher.state_dict(), strict=False)
        # the predictors (and Swin's fast paths) are the student's own
        missing = [k for k in missing if not any(s in k for s in PREDICTOR_KEYS)]
        if missing or unexpected:
            raise KeyError(f'DynamicViTClassifier: the teacher\'s weights do not fit the student; '
                           f'missing {missing[:10]}, unexpected {unexpected[:10]}')

    # --------------------------------------------------------------------- losses
    def loss(self, inputs: torch.Tensor, data_samples: List[DataSample]) -> dict:
        feats = self.extract_feat(inputs)
        head_losses = self.head.loss(feats, data_samples)
        # 'loss' would clash with the total the runner logs under that name
        losses = {'loss_cls': head_losses.pop('loss')}
        losses.update(head_losses)  # accuracy, if the head computes it
        logits = self.head(feats)
        bb = self.backbone
        if bb.last_tokens is None:
            raise RuntimeError('DynamicViTClassifier: the backbone kept no final tokens (is the '
                               'last block / stage among its outputs?)')
        t_logits, t_tokens = self.teacher_outputs(inputs)
        losses.update(self.criterion(logits, bb.last_tokens, bb.last_decisions, bb.keep_ratios,
                                     t_logits, t_tokens, bb.last_mask))
        return losses
