"""Reports on mmdcs models: parameters and FLOPs (:mod:`.complexity`), latency of pruned vs
baseline (:mod:`.latency`; a model at a latency target: :mod:`.latency_target`), attention
entropy/rank (:mod:`.attention`), Grad-CAM
(:mod:`.gradcam`), IB and kernel-complexity reports (:mod:`.reports`), log plots (:mod:`.plots`).
Loading a config's classifier, images and dataset batches for them is the tools' layer
(:mod:`mmdcs.apis.loading`)."""
from .attention import (AttentionNotSupported, AttentionStats, attention_modules,
                        collect_attention, entropy_table, masked_rank_bound, plot_attention_maps,
                        plot_entropy_histograms, qk_ranks, rank_table, row_entropy)
from .gradcam import DEFAULT_CAM_LAYERS, grad_cam, plot_cams
from .complexity import (PAPER_NUMBERS, PAPER_VARIANT, TABLE_MODELS, backbone_class,
                         build_classifier, complexity_table, count_flops, count_params,
                         flop_analysis, format_table, nominal_input_size, random_subnet,
                         sdpa_flop_jit, set_random_keep_)
from .latency import (LATENCY_MODELS, build_pair, format_latency_table, format_op_groups,
                      format_profile, latency_pair, latency_table, op_groups, profile_ops,
                      time_models)
from .plots import epoch_series, load_records, plot_logs, plot_panels, summary_table
from .reports import (classifier_report, extract_features, format_report, ib_report,
                      kc_report)

__all__ = [
    'PAPER_NUMBERS', 'PAPER_VARIANT', 'TABLE_MODELS', 'backbone_class', 'build_classifier',
    'complexity_table', 'count_flops', 'count_params', 'flop_analysis', 'format_table',
    'nominal_input_size', 'random_subnet', 'sdpa_flop_jit', 'set_random_keep_',
    'LATENCY_MODELS', 'build_pair', 'format_latency_table', 'format_op_groups', 'format_profile',
    'latency_pair', 'latency_table', 'op_groups', 'profile_ops', 'time_models',
    'DEFAULT_CAM_LAYERS', 'AttentionNotSupported', 'AttentionStats', 'attention_modules',
    'collect_attention', 'entropy_table', 'grad_cam', 'masked_rank_bound', 'plot_attention_maps',
    'plot_cams', 'plot_entropy_histograms', 'qk_ranks', 'rank_table', 'row_entropy',
    'classifier_report', 'extract_features', 'format_report', 'ib_report', 'kc_report',
    'epoch_series', 'load_records', 'plot_logs',
    'plot_panels', 'summary_table'
]
