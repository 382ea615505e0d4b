"""Once-for-Both (OFB; Ye et al., "Once for Both: Single Stage of Importance and Sparsity Search
for Vision Transformer Compression", CVPR 2024), plain PyTorch.

* :mod:`.bimask` — importance score S and sparsity score α over candidate widths, the bi-mask
* :mod:`.losses` — adaptive one-hot loss (entropy + tan-activated variance), score norm, FLOPs
* :mod:`.layers` — attention / MLP with a bi-mask, their compression and fusion
* :mod:`.compress` — in-place slicing of parameters with their optimizer state, shape adoption
* :mod:`.pmim` — progressive masked image modelling (patch mask, decoder, loss) and schedules
* :mod:`.cost` — FLOPs as a differentiable function of the widths
* :mod:`.arch` — the exported architecture file (read, checked, written)
* :mod:`.supernet` — what the OFB backbones share (bi-mask bookkeeping, fusion)

The backbones that compose these are ``mmdcs.OFBViT`` and ``mmdcs.OFBSwin``
(``mmdcs/models/backbones/ofb_*.py``), the search objective is ``mmdcs.OFBClassifier``, and the
schedules and the pruning every ΔT iterations are driven by ``mmdcs.OFBSearchHook``.
"""
from .arch import ARCH_FORMAT, ArchFileError, load_arch, save_arch
from .bimask import BiMask, embed_choices, head_choices, head_dim_choices, mlp_choices
from .compress import (adopt_state_shapes_, as_optimizers, compress_group_, is_search_state,
                       remap_param_, reset_optimizer_state_, slice_param_, sync_layer_attrs_)
from .cost import vit_block_macs, vit_macs
from .layers import OFBAttention, OFBMlp, masked_layer_norm
from .losses import (SCORE_NORM_WEIGHTS, adaptive_one_hot_loss, entropy, flops_loss,
                     normalized_variance, score_norm)
from .pmim import (PMIMDecoder, linear_schedule, local_norm_targets, pmim_loss,
                   random_patch_mask, upsample_patch_mask)

__all__ = [
    'ARCH_FORMAT', 'ArchFileError', 'load_arch', 'save_arch', 'BiMask', 'head_choices', 'head_dim_choices', 'mlp_choices', 'embed_choices',
    'adopt_state_shapes_', 'as_optimizers', 'compress_group_', 'is_search_state', 'remap_param_',
    'reset_optimizer_state_', 'slice_param_', 'sync_layer_attrs_', 'vit_block_macs', 'vit_macs',
    'OFBAttention', 'OFBMlp', 'masked_layer_norm', 'SCORE_NORM_WEIGHTS', 'adaptive_one_hot_loss',
    'entropy', 'flops_loss', 'normalized_variance', 'score_norm', 'PMIMDecoder',
    'linear_schedule', 'local_norm_targets', 'pmim_loss', 'random_patch_mask',
    'upsample_patch_mask'
]
