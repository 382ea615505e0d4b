"""What the attention weights of a DCS model look like: :mod:`.stats` (recording: row
entropies, one query's maps, Q/K ranks), :mod:`.report` (tables), :mod:`.plots` (figures).
Grad-CAM is :mod:`mmdcs.analysis.gradcam` (its names are importable from here too)."""
from ..gradcam import DEFAULT_CAM_LAYERS, get_layer, grad_cam, plot_cams
from .plots import (check_map_head, overlay, plot_attention_maps, plot_entropy_histograms,
                    pyplot)
from .report import entropy_table, rank_table
from .stats import (AttentionNotSupported, AttentionStats, attention_layout, attention_modules,
                    backbone_of, collect_attention, masked_rank_bound, qk_of, qk_ranks,
                    resolve_block, row_entropy)

__all__ = [
    'AttentionNotSupported', 'AttentionStats', 'attention_layout', 'attention_modules',
    'backbone_of', 'collect_attention', 'masked_rank_bound', 'qk_of', 'qk_ranks',
    'resolve_block', 'row_entropy', 'entropy_table', 'rank_table', 'overlay',
    'plot_attention_maps', 'plot_entropy_histograms', 'pyplot', 'check_map_head',
    'DEFAULT_CAM_LAYERS',
    'get_layer', 'grad_cam', 'plot_cams'
]
