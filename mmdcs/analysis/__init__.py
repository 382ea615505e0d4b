"""Reports on mmdcs models: parameters and FLOPs (:mod:`.complexity`)."""
from .complexity import (PAPER_NUMBERS, PAPER_VARIANT, TABLE_MODELS, backbone_class,
                         build_classifier, complexity_table, count_flops, count_params,
                         flop_analysis, format_table, nominal_input_size, random_subnet,
                         sdpa_flop_jit, set_random_keep_)

__all__ = [
    'PAPER_NUMBERS', 'PAPER_VARIANT', 'TABLE_MODELS', 'backbone_class', 'build_classifier',
    'complexity_table', 'count_flops', 'count_params', 'flop_analysis', 'format_table',
    'nominal_input_size', 'random_subnet', 'sdpa_flop_jit', 'set_random_keep_'
]
