"""mmdcs.analysis.attention is split: statistics, tables, figures; Grad-CAM apart
(mmdcs.analysis.gradcam); the public names stay importable from the package."""
import mmdcs.analysis.attention as attention
from mmdcs.analysis import gradcam
from mmdcs.analysis.attention import plots, report, stats


def test_each_name_lives_in_its_module():
    assert attention.collect_attention is stats.collect_attention
    assert attention.rank_table is report.rank_table
    assert attention.plot_entropy_histograms is plots.plot_entropy_histograms
    assert attention.grad_cam is gradcam.grad_cam and attention.plot_cams is gradcam.plot_cams
    assert gradcam.grad_cam.__module__ == 'mmdcs.analysis.gradcam'
    assert stats.AttentionStats.__module__ == 'mmdcs.analysis.attention.stats'
