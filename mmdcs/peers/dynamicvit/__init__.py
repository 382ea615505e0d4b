"""DynamicViT (Rao et al., NeurIPS 2021; T-PAMI extension for Swin): dynamic token sparsification,
framework-free.

* :mod:`.predictor` — the prediction module (local + policy-weighted global features → keep/drop
  log-probabilities) and the fast path of DynamicSwin
* :mod:`.attention` — attention masking (softmax restricted to the kept keys)
* :mod:`.tokens` — keep ratios and counts, the Gumbel training decision, the top-k inference
  gather, dense restoration of dropped tokens
* :mod:`.losses` — keep-ratio MSE, KL and token distillation from the unpruned teacher

The backbones composing them are :class:`mmdcs.models.backbones.dynamic_vit.DynamicViT` and
``DynamicSwin``; the classifier with the frozen teacher is
:class:`mmdcs.models.classifiers.dynamicvit_classifier.DynamicViTClassifier`.
"""
from .attention import POLICY_EPS, policy_attention, softmax_with_policy
from .losses import DynamicViTLoss, cls_distill_loss, keep_ratio_loss, token_distill_loss
from .predictor import KEEP, FastMLP, TokenPredictor
from .tokens import (RATIO_SCHEDULES, batch_index_fill, batch_index_select, check_keep_ratios,
                     gumbel_keep_mask, keep_count, keep_ratios, restore_tokens,
                     topk_keep_indices)

__all__ = [
    'TokenPredictor', 'FastMLP', 'KEEP', 'softmax_with_policy', 'policy_attention', 'POLICY_EPS',
    'keep_ratios', 'check_keep_ratios', 'keep_count', 'RATIO_SCHEDULES', 'batch_index_select',
    'batch_index_fill', 'topk_keep_indices', 'gumbel_keep_mask', 'restore_tokens',
    'DynamicViTLoss', 'keep_ratio_loss', 'cls_distill_loss', 'token_distill_loss'
]
