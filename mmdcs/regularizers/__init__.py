"""The retraining regularisers of the methods, framework-free (plain PyTorch; no mmengine runner
or registry imports), behind one interface (:class:`Regularizer`, :mod:`.base`).

* :mod:`.ib` — the variational IB bound of DCS (method.md §6): :class:`IBState` (streaming
  Q(a|y), k-means centroids, checkpoint state), :class:`IBRegularizer`, the exact IB for reports
* :mod:`.kcr` — the KCR truncated-nuclear-norm loss (method.md §7): :class:`KCRState` (exact,
  streaming S = FᵀF), :class:`NystromKCR` (the paper's route), :class:`KCRRegularizer` and the
  kernel-complexity reports
* shared pieces: :mod:`.kmeans` (k-means++, Lloyd, streaming Lloyd), :mod:`.distributed` (DDP
  all-reduce / gather), :mod:`.state` (the tensor-state container), :mod:`.checks`
"""
from .base import REGULARIZERS, Regularizer, build_regularizer, eta_ramp, register, unit_rows
from .ib import (INPUT_SIZE, IBBOutput, IBRegularizer, IBState, IBTerms, ib_bound_decomposition,
                 ib_exact, ib_upper_bound, ibb_full, input_representation, lemma_d1_slack,
                 log_soft_assign, mean_input_entropy, optimal_q, soft_assign)
from .kcr import (KCR_ROUTES, KCRBounds, KCRRegularizer, KCRState, NystromKCR, gd_residual,
                  gd_residual_from_stats, kcr_bounds, kernel_complexity,
                  kernel_complexity_from_tnn, rank_for, tnn_exact, tnn_from_eigvals)
from .kmeans import MiniBatchKMeans, kmeans, kmeans_pp_init, lloyd_step

__all__ = [
    'Regularizer', 'REGULARIZERS', 'register', 'build_regularizer', 'eta_ramp', 'unit_rows',
    'INPUT_SIZE',
    'input_representation', 'soft_assign', 'log_soft_assign', 'kmeans_pp_init', 'lloyd_step',
    'kmeans', 'MiniBatchKMeans', 'IBState', 'IBRegularizer', 'IBBOutput', 'IBTerms', 'optimal_q',
    'ib_exact', 'ibb_full', 'lemma_d1_slack', 'ib_bound_decomposition', 'mean_input_entropy',
    'ib_upper_bound', 'rank_for', 'tnn_exact',
    'tnn_from_eigvals', 'kernel_complexity', 'kernel_complexity_from_tnn', 'gd_residual',
    'gd_residual_from_stats', 'kcr_bounds', 'KCRBounds', 'KCRState', 'NystromKCR',
    'KCRRegularizer', 'KCR_ROUTES'
]
