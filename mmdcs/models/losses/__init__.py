"""Training losses of the methods, framework-free (plain PyTorch; no mmengine runner or
registry imports). The mmengine hooks and classifiers that drive them live elsewhere.

* :mod:`.ib_bound` — the variational IB bound of DCS (METHOD §6): :class:`IBState` (streaming
  Q(a|y), k-means centroids, DDP all-reduce, checkpoint state) and the exact IB for reports
* :mod:`.kcr` — the KCR truncated-nuclear-norm loss (METHOD §7): :class:`KCRState` (exact,
  streaming S = FᵀF), :class:`NystromKCR` (the paper's route) and the kernel-complexity reports
"""
from .ib_bound import (INPUT_SIZE, IBBOutput, IBState, IBTerms, MiniBatchKMeans,
                       ib_bound_decomposition, ib_exact, ibb_full, input_representation, kmeans,
                       kmeans_pp_init, lemma_d1_slack, lloyd_step, log_soft_assign, optimal_q,
                       soft_assign)
from .kcr import (KCRBounds, KCRState, NystromKCR, gd_residual, gd_residual_from_stats,
                  kcr_bounds, kernel_complexity, kernel_complexity_from_tnn, rank_for, tnn_exact,
                  tnn_from_eigvals)

__all__ = [
    'INPUT_SIZE', 'input_representation', 'soft_assign', 'log_soft_assign', 'kmeans_pp_init',
    'lloyd_step', 'kmeans', 'MiniBatchKMeans', 'IBState', 'IBBOutput', 'IBTerms', 'optimal_q',
    'ib_exact', 'ibb_full', 'lemma_d1_slack', 'ib_bound_decomposition', 'rank_for', 'tnn_exact',
    'tnn_from_eigvals', 'kernel_complexity', 'kernel_complexity_from_tnn', 'gd_residual',
    'gd_residual_from_stats', 'kcr_bounds', 'KCRBounds', 'KCRState', 'NystromKCR'
]
