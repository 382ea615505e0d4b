"""The KCR loss: truncated nuclear norm of the feature gram (method.md §7; KCR paper, 3.2, eq. 3-4).

Plain PyTorch: no mmengine runner or registry import.

Notation (KCR paper, 3.2): F ∈ R^{n×d} the pre-logit features of the n training samples,
K(x, x') = F(x)ᵀF(x'), K = F Fᵀ (n×n; the seed writes FᵀF, a typo), K_n = K / n with eigenvalues
λ̂_1 ≥ … ≥ λ̂_n ≥ 0, rank r = ⌈γ·min(n, d)⌉ (γ ∈ (0, 1], 0.1 by default; :func:`rank_for`) and the
truncated nuclear norm (TNN) ‖K‖_r = Σ_{i>r} λ̂_i.

**Exact streaming route** (:class:`KCRState`, the mmdcs default). The non-zero eigenvalues of
F Fᵀ/n are those of the d×d matrix S = Fᵀ F / n, so with V_r the top-r eigenvectors of S,

    ‖K‖_r = tr(S) − tr(V_rᵀ S V_r) = (1/n) Σ_i (‖F_i‖² − ‖V_rᵀ F_i‖²)
          = (1/n) Σ_i ‖(I − V_r V_rᵀ) F_i‖²,

separable per sample and exact (:func:`tnn_exact`). During an epoch :meth:`KCRState.update`
accumulates Σ F_iᵀ F_i and n in float64 (O(d²) memory whatever n is); :meth:`KCRState.end_epoch`
all-reduces them across DDP ranks and takes V_r from ``torch.linalg.eigh`` in float64. The batch
term is KCR_j = mean_{i∈B} ‖(I − V_r V_rᵀ) F_i‖² (the same value as ‖F_i‖² − ‖V_rᵀF_i‖², computed
as a squared residual: non-negative, no cancellation), with V_r of the previous epoch — as the
papers refresh their statistics once per epoch. **Before the first refresh** there is no V_r:
:meth:`KCRState.loss` returns 0 (a constant, no gradient) and ``ready`` is False. The loss is
only used after the warm-up epochs (t_warm = 90), during which the hook keeps feeding the state.

**The paper's Nyström route** (:class:`NystromKCR`). m landmarks I ⊂ [n] (a seeded choice),
C = F F_Iᵀ (n×m), W = F_I F_Iᵀ = Q Λ Qᵀ, Ũ = C Q_r Λ_r^{-1/2} (n×r). Ũ is a factor of the
Nyström approximation C W⁺ Cᵀ, **not** orthonormal: plugged into eq. (3) as it is, the "TNN"
goes negative (method.md §7; ``orthonormalize=False`` reproduces it). mmdcs orthonormalises it
(thin QR, Ũ = U_r R); with m = n the route is then exact. Eq. (3)/(4) of the seed mix two scales:
they subtract Σ_s Σ_k [U_r]_si [K_n]_ik [U_r]_ks (built on K_n = K/n) from K(x_i, x_i) (built on
K), and state tr(K_n) = Σ_i K(x_i, x_i), which is off by the factor n. mmdcs uses the consistent
per-sample term

    t_i = K(x_i, x_i) − n·Σ_s Σ_k [U_r]_is [K_n]_ik [U_r]_ks = ‖F_i‖² − Σ_s [U_r]_is ⟨F_i, G_s⟩,
    G = Fᵀ U_r (d×r),  KCR_j = mean_{i∈B} t_i,   (1/n) Σ_i t_i = tr(K_n) − tr(U_rᵀ K_n U_r),

which for m = n equals the exact route's per-sample term. Memory, honestly: the route needs the
whole epoch's features to build C (n×m) and to orthonormalise Ũ (n×r), so :class:`NystromKCR`
holds the epoch's n×d features (and C, n×m, at the refresh): O(n·(d + m)), growing with the
dataset. Between epochs it keeps O(d²): the row of U_r for a sample is the Nyström extension
[U_r]_i = K(x_i, I) Q_r Λ_r^{-1/2} R^{-1} = F_i P (P = F_Iᵀ Q_r Λ_r^{-1/2} R^{-1}, d×r) — the
very formula that defines Ũ's rows — evaluated at the current feature, and ⟨F_i, G_s⟩ is row i
of K_n·U_r with the current F_i against the previous epoch's features (through G). So
t_i = F_i (I − M) F_iᵀ with M = P Gᵀ (d×d, fixed between refreshes), and **both** factors are
differentiated: ∂t_i/∂F_i = 2F_i − F_i (M + Mᵀ). For m = n, M = V_r V_rᵀ (the projector on the
top-r eigenvectors of S), so the gradient of the whole-set term is 2(I − V_r V_rᵀ)F/n — that of
the exact TNN, orthogonal to the top-r directions. (Treating the row of U_r as a constant, as
mmdcs did before, gives (2I − V_r V_rᵀ)F/n: ~95 % off and pushing the top-r directions too.)
The value and the gradient equal the exact route's for m = n
(``tests/test_regularizers/test_nystrom_gradient.py``); for m < n they are the Nyström
approximation's and its exact derivative.

**Reports** (KCR paper, Theorem 3.1, Table 4, Fig. 1): :func:`kernel_complexity`
KC(K) = min_{h∈[0,r0]} (h/n + sqrt((1/n) Σ_{i=h+1}^{r0} λ̂_i)), r0 = min(n, d) (all the non-zero
eigenvalues); A-KC (Fig. 1) is the same with the approximate TNN of each h
(:func:`kernel_complexity_from_tnn`). :func:`kcr_bounds` gives the KCR lower/upper bounds of
Theorem 3.1, ‖(I_n − η K_n)^t Y‖_F² ∓ (KC(K) + x/n), up to the unspecified constants of "≲";
the training term is the residual of t steps of gradient descent with step η on the last linear
layer from W_1 = 0 (the theorem's setting, KCR paper eq. 5-7; :func:`gd_residual`,
:func:`gd_residual_from_stats`). Table 4's "KCL" is not defined in the seed; it is not computed.
"""
import math
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from .base import Regularizer, register, unit_rows
from mmdcs.checks import check_number

from .checks import check_int, check_labels, check_matrix
from .distributed import all_gather_rows, all_reduce_sum_
from .state import TensorState

__all__ = [
    'rank_for', 'tnn_exact', 'tnn_from_eigvals', 'kernel_complexity',
    'kernel_complexity_from_tnn', 'gd_residual', 'gd_residual_from_stats', 'kcr_bounds',
    'KCRBounds', 'KCRState', 'NystromKCR', 'KCRRegularizer'
]


def _float_features(features: Tensor, dim: int) -> Tensor:
    """The features (B, dim) checked and in float32 at least (float64 stays float64)."""
    check_matrix(features, 'features', dim)
    dtype = features.dtype if features.dtype in (torch.float32, torch.float64) else torch.float32
    return features.to(dtype)


def _check_gamma(gamma) -> float:
    """γ, the rank ratio of r = ⌈γ·min(n, d)⌉: in (0, 1]."""
    return check_number(gamma, 'gamma', 0, 1, low_open=True)


def rank_for(gamma: float, n: int, d: int) -> int:
    """r = ⌈γ·min(n, d)⌉ (≥ 1). The product is rounded to 9 decimals first, so that e.g.
    0.1·30 = 3.0000000000000004 gives 3, not 4."""
    gamma = _check_gamma(gamma)
    n = check_int(n, 'n', 1)
    d = check_int(d, 'd', 1)
    return max(1, math.ceil(round(gamma * min(n, d), 9)))


def _eigh_desc(s: Tensor) -> Tuple[Tensor, Tensor]:
    """Eigen-decomposition of a symmetric matrix in float64, eigenvalues descending."""
    s = s.detach().to(torch.float64)
    evals, evecs = torch.linalg.eigh((s + s.t()) / 2)
    return evals.flip(0), evecs.flip(1)


def tnn_from_eigvals(eigvals: Tensor, r: int) -> Tensor:
    """Σ_{i>r} λ̂_i of the eigenvalues (any order; negative round-off clamped to 0)."""
    lam = eigvals.detach().to(torch.float64).clamp_min(0).sort(descending=True).values
    return lam[r:].sum()


def tnn_exact(features: Tensor, gamma: float) -> Tensor:
    """‖K‖_r of K_n = F Fᵀ/n, r = ⌈γ·min(n, d)⌉, through S = Fᵀ F / n: tr(S) − tr(V_rᵀ S V_r).

    V_r (top-r eigenvectors of S, float64 ``eigh``) is a constant; the value is differentiable in
    ``features`` with the gradient of the TNN itself (the derivative of a sum of eigenvalues
    with respect to S is the projector on their eigenvectors). Returned in the features' dtype.
    """
    gamma = _check_gamma(gamma)
    check_matrix(features, 'features')
    n, d = features.shape
    if n == 0:
        raise ValueError('features: at least one sample is needed')
    r = rank_for(gamma, n, d)
    s = features.t() @ features / n
    _, evecs = _eigh_desc(s)
    v = evecs[:, :r].to(device=features.device, dtype=features.dtype)
    return torch.diagonal(s).sum() - torch.diagonal(v.t() @ s @ v).sum()


def kernel_complexity_from_tnn(tnn_curve: Tensor, n: int) -> Tuple[Tensor, int]:
    """min_h (h/n + sqrt(tnn_curve[h] / n)) over h = 0..len−1, and the minimising h.

    With tnn_curve[h] = Σ_{i>h} λ̂_i this is KC(K); with the approximate TNN of each h it is the
    A-KC of KCR paper, Fig. 1. Negative round-off of the curve is clamped to 0.
    """
    n = check_int(n, 'n', 1)
    curve = tnn_curve.detach().to(torch.float64).clamp_min(0)
    h = torch.arange(len(curve), dtype=torch.float64, device=curve.device)
    values = h / n + torch.sqrt(curve / n)
    best = int(values.argmin())
    return values[best], best


def kernel_complexity(eigvals: Tensor, n: int, r0: Optional[int] = None) -> Tuple[Tensor, int]:
    """KC(K) = min_{h∈[0,r0]} (h/n + sqrt((1/n) Σ_{i=h+1}^{r0} λ̂_i)) (KCR paper, 3.2); (KC, h*).

    ``eigvals``: eigenvalues of K_n (or of S = FᵀF/n: the same non-zero ones), any order.
    r0 defaults to min(n, number of eigenvalues), i.e. every possibly non-zero eigenvalue.
    """
    n = check_int(n, 'n', 1)
    lam = eigvals.detach().to(torch.float64).clamp_min(0).sort(descending=True).values
    r0 = min(n, len(lam)) if r0 is None else check_int(r0, 'r0', 0)
    lam = lam[:r0]
    tails = torch.cat([lam.flip(0).cumsum(0).flip(0), lam.new_zeros(1)])  # tails[h], h=0..r0
    return kernel_complexity_from_tnn(tails, n)


def _check_gd(lr, steps) -> Tuple[float, int]:
    # lr: the gradient-descent step η of the theorem
    return check_number(lr, 'lr', 0, low_open=True), check_int(steps, 'steps', 0)


def gd_residual(features: Tensor, targets: Tensor, lr: float, steps: int) -> Tensor:
    """‖(I_n − η K_n)^t Y‖_F² computed directly (n×n; for checks and small n).

    ``targets``: Y (n, C), e.g. one-hot labels. The training loss of KCR paper, Theorem 3.1:
    the squared residual after t steps of gradient descent from W_1 = 0 on ‖F W_1 − Y‖²/(2n).
    As in the seed it is a sum over the n samples (not a mean).
    """
    check_matrix(features, 'features')
    lr, steps = _check_gd(lr, steps)
    f = features.detach().to(torch.float64)
    n = f.shape[0]
    y = check_matrix(targets, 'targets').detach().to(f)
    if y.shape[0] != n:
        raise ValueError(f'targets: {y.shape[0]} rows for {n} samples')
    step = torch.eye(n, dtype=torch.float64, device=f.device) - lr * (f @ f.t()) / n
    return (torch.linalg.matrix_power(step, steps) @ y).pow(2).sum()


def gd_residual_from_stats(s_matrix: Tensor, fty: Tensor, y_sq: float, n: int, lr: float,
                           steps: int) -> Tensor:
    """The same ‖(I_n − η K_n)^t Y‖_F² from O(d² + d·C) statistics.

    With S = FᵀF/n = V Λ Vᵀ, the unit eigenvectors of K_n are u_k = F v_k / sqrt(n λ_k), so
    ‖(I − ηK_n)^t Y‖² = ‖Y‖² − Σ_k ‖u_kᵀ Y‖² (1 − (1 − η λ_k)^{2t}), u_kᵀY = v_kᵀ(FᵀY)/sqrt(n λ_k).
    ``fty`` = FᵀY (d, C), ``y_sq`` = ‖Y‖_F² (n for one-hot labels).
    """
    lr, steps = _check_gd(lr, steps)
    n = check_int(n, 'n', 1)
    evals, evecs = _eigh_desc(s_matrix)
    fty = fty.detach().to(evecs)
    keep = evals > evals.abs().max().clamp_min(1e-300) * 1e-12
    lam, v = evals[keep], evecs[:, keep]
    proj_sq = (v.t() @ fty).pow(2).sum(1) / (n * lam)
    decay = 1 - (1 - lr * lam).pow(2 * steps)
    return torch.as_tensor(float(y_sq), dtype=torch.float64) - (proj_sq * decay).sum().cpu()


class KCRBounds(NamedTuple):
    """The KCR bounds of KCR paper, Theorem 3.1 (constants of '≲' taken as 1)."""
    lower: Tensor
    upper: Tensor


def kcr_bounds(residual, kc, n: int, x: float = 1.0) -> KCRBounds:
    """Lower/upper bound: residual − KC − x/n and residual + KC + x/n.

    ``residual`` = ‖(I_n − ηK_n)^t Y‖_F² (:func:`gd_residual`), ``kc`` = KC(K) (or A-KC for the
    "approximated" bounds of Fig. 1), x > 0 the confidence parameter (probability ≥ 1 − e^{−x}).
    The theorem holds up to unspecified constants ("≲"), so these are the shapes of the bounds,
    not certified numbers; note also that the seed compares a sum over n samples (the residual)
    with an expected per-sample loss.
    """
    n = check_int(n, 'n', 1)
    x = check_number(x, 'x', 0, low_open=True)  # the confidence parameter
    residual = torch.as_tensor(residual, dtype=torch.float64)
    slack = torch.as_tensor(kc, dtype=torch.float64) + x / n
    return KCRBounds(residual - slack, residual + slack)


class KCRState(TensorState):
    """The exact streaming KCR term: S = Σ F_iᵀF_i over an epoch → V_r → per-batch TNN term.

    Args:
        dim: d, the feature dimension.
        gamma: rank ratio γ ∈ (0, 1]; r = ⌈γ·min(n, d)⌉.
        n_for_rank: the n of the rank formula; default the epoch's sample count (all ranks).
        num_classes: if given, :meth:`update` also accumulates FᵀY (d×C) so that
            :meth:`bounds` can report the KCR bounds.
        device: where the state lives (the features' device; CUDA for NCCL).

    State (fixed sizes, all in ``state_dict()``): ``s_sum`` (d, d) and ``count`` — the epoch's
    accumulators —, ``eigvals`` (d) and ``eigvecs`` (d, d) of the last S = Fᵀ F / n (descending),
    ``rank``, ``n_last``, ``refreshes`` (and ``fty_sum``/``fty`` (d, C) with ``num_classes``).
    """

    def __init__(self, dim: int, gamma: float = 0.1, n_for_rank: Optional[int] = None,
                 num_classes: Optional[int] = None, device='cpu'):
        self.dim = check_int(dim, 'dim', 1)
        self.gamma = _check_gamma(gamma)
        self.n_for_rank = None if n_for_rank is None else check_int(n_for_rank, 'n_for_rank', 1)
        self.num_classes = None if num_classes is None else check_int(num_classes,
                                                                       'num_classes', 2)
        f64 = dict(dtype=torch.float64, device=device)
        i64 = dict(dtype=torch.long, device=device)
        self.s_sum = torch.zeros(dim, dim, **f64)
        self.count = torch.zeros((), **i64)
        self.eigvals = torch.zeros(dim, **f64)
        self.eigvecs = torch.eye(dim, **f64)
        self.rank = torch.zeros((), **i64)
        self.n_last = torch.zeros((), **i64)
        self.refreshes = torch.zeros((), **i64)
        names = ['s_sum', 'count', 'eigvals', 'eigvecs', 'rank', 'n_last', 'refreshes']
        if self.num_classes is not None:
            self.fty_sum = torch.zeros(dim, self.num_classes, **f64)
            self.fty = torch.zeros(dim, self.num_classes, **f64)
            names += ['fty_sum', 'fty']
        self._state_names = tuple(names)

    @property
    def ready(self) -> bool:
        """True once V_r has been computed from an epoch of features."""
        return int(self.refreshes) > 0

    @property
    def basis(self) -> Tensor:
        """V_r (d, r), the top-r eigenvectors of the last S (float64)."""
        return self.eigvecs[:, :int(self.rank)]

    def begin_epoch(self) -> None:
        """Reset the epoch accumulators (a partial epoch's sums are discarded)."""
        self.s_sum.zero_()
        self.count.zero_()
        if self.num_classes is not None:
            self.fty_sum.zero_()

    @torch.no_grad()
    def update(self, features: Tensor, labels: Optional[Tensor] = None) -> None:
        """Add a batch: S_sum += FᵀF (float64), n += B (and FᵀY with ``num_classes``)."""
        check_matrix(features, 'features', self.dim)
        f = features.detach().to(self.s_sum.device, torch.float64)
        self.s_sum += f.t() @ f
        self.count += f.shape[0]
        if self.num_classes is not None and labels is not None:
            labels = check_labels(labels, f.shape[0], self.num_classes).to(f.device)
            self.fty_sum.index_add_(1, labels, f.t())

    @torch.no_grad()
    def end_epoch(self) -> Dict[str, float]:
        """All-reduce S_sum and n, S = S_sum / n, V_r by float64 ``eigh``; reset the sums.

        Every rank must call it. With no sample at all this epoch nothing changes.
        """
        to_reduce = [self.s_sum, self.count]
        if self.num_classes is not None:
            to_reduce.append(self.fty_sum)
        all_reduce_sum_(*to_reduce)
        n = int(self.count)
        if n == 0:
            return {'samples': 0.0}
        evals, evecs = _eigh_desc(self.s_sum / n)
        self.eigvals.copy_(evals)
        self.eigvecs.copy_(evecs)
        self.rank.fill_(rank_for(self.gamma, self.n_for_rank or n, self.dim))
        self.n_last.fill_(n)
        if self.num_classes is not None:
            self.fty.copy_(self.fty_sum)
        self.refreshes += 1
        self.begin_epoch()
        kc, h = self.kernel_complexity()
        return {'samples': float(n), 'rank': float(self.rank), 'tnn': float(self.tnn()),
                'trace': float(self.eigvals.clamp_min(0).sum()), 'kc': float(kc),
                'kc_h': float(h)}

    def tnn(self) -> Tensor:
        """‖K‖_r of the last epoch's features (exact, float64)."""
        return tnn_from_eigvals(self.eigvals, int(self.rank))

    def kernel_complexity(self) -> Tuple[Tensor, int]:
        """KC(K) of the last epoch's features and its minimising h."""
        return kernel_complexity(self.eigvals, max(int(self.n_last), 1))

    def s_matrix(self) -> Tensor:
        """S = Fᵀ F / n of the last epoch (from the stored eigen-decomposition)."""
        return (self.eigvecs * self.eigvals) @ self.eigvecs.t()

    def bounds(self, lr: float, steps: int, x: float = 1.0) -> KCRBounds:
        """KCR lower/upper bounds (Theorem 3.1) for the last epoch (needs ``num_classes``)."""
        if self.num_classes is None:
            raise ValueError('bounds need the labels: build KCRState with num_classes')
        n = int(self.n_last)
        residual = gd_residual_from_stats(self.s_matrix(), self.fty, n, n, lr, steps)
        kc, _ = self.kernel_complexity()
        return kcr_bounds(residual, kc, n, x)

    def per_sample(self, features: Tensor) -> Tensor:
        """‖(I − V_r V_rᵀ) F_i‖² (B,), differentiable; zeros before the first refresh."""
        f = _float_features(features, self.dim)
        if not self.ready:
            return f.new_zeros(f.shape[0])
        v = self.basis.to(f)
        resid = f - (f @ v) @ v.t()
        return resid.pow(2).sum(1)

    def loss(self, features: Tensor) -> Tensor:
        """KCR_j = mean_{i∈B} (‖F_i‖² − ‖V_rᵀF_i‖²) with V_r of the previous epoch.

        0 (no gradient) before the first :meth:`end_epoch` (``ready`` is False).
        """
        return self.per_sample(features).mean() if features.shape[0] else \
            features.new_zeros(())


class NystromKCR(TensorState):
    """The paper's Nyström route (KCR paper, 3.2), with Ũ orthonormalised (see module doc).

    Args:
        dim: d, the feature dimension.
        gamma: rank ratio γ ∈ (0, 1]; r = ⌈γ·min(n, d)⌉ (capped by the landmarks' rank).
        num_landmarks: m; m ≥ n uses every sample (exact).
        seed: the landmark choice is ``randperm(n)`` with seed ``seed + refreshes``.
        orthonormalize: orthonormalise Ũ (default). False reproduces the seed's formula as
            written, which is not a TNN estimate (it can be negative).
        storage_device, storage_dtype: where the epoch's features are held.

    Memory: the epoch's n×d features, O(n·(d + m)) at the refresh (see module doc); between
    epochs O(d²) (``extension`` P and ``g`` = FᵀU_r, padded to d columns, in the state dict).
    The features buffer is not checkpointed (a resumed epoch starts it afresh). In DDP, pass
    the dataset ``indices`` to :meth:`update` to make the gathered order — and so the landmark
    choice — that of one process; without them the order is rank-major.
    """
    _state_names = ('extension', 'g', 'ritz', 'rank', 'trace', 'tnn_bar', 'n_last',
                    'refreshes')

    def __init__(self, dim: int, gamma: float = 0.1, num_landmarks: int = 100000,
                 seed: int = 0, orthonormalize: bool = True, storage_device='cpu',
                 storage_dtype: torch.dtype = torch.float64, device='cpu'):
        self.dim = check_int(dim, 'dim', 1)
        self.gamma = _check_gamma(gamma)
        self.num_landmarks = check_int(num_landmarks, 'num_landmarks', 1)
        self.seed = check_int(seed, 'seed', 0)
        self.orthonormalize = bool(orthonormalize)
        self.storage_device = torch.device(storage_device)
        self.storage_dtype = storage_dtype
        f64 = dict(dtype=torch.float64, device=device)
        i64 = dict(dtype=torch.long, device=device)
        self.extension = torch.zeros(dim, dim, **f64)
        self.g = torch.zeros(dim, dim, **f64)
        self.ritz = torch.zeros(dim, **f64)
        self.rank = torch.zeros((), **i64)
        self.trace = torch.zeros((), **f64)
        self.tnn_bar = torch.zeros((), **f64)
        self.n_last = torch.zeros((), **i64)
        self.refreshes = torch.zeros((), **i64)
        self._feats: List[Tensor] = []
        self._index: List[Tensor] = []

    @property
    def ready(self) -> bool:
        return int(self.refreshes) > 0

    def begin_epoch(self) -> None:
        self._feats, self._index = [], []

    @torch.no_grad()
    def update(self, features: Tensor, labels: Optional[Tensor] = None,
               indices: Optional[Tensor] = None) -> None:
        """Keep the batch's features (detached) for the epoch-end Nyström refresh.

        ``labels`` is accepted for the common ``update(features, labels)`` call and unused;
        ``indices`` (keyword) are the samples' dataset indices (see the class doc).
        """
        check_matrix(features, 'features', self.dim)
        if self._feats and (indices is not None) != bool(self._index):
            raise ValueError('indices: give them for every batch of an epoch or for none')
        self._feats.append(features.detach().to(self.storage_device, self.storage_dtype))
        if indices is not None:
            if indices.dim() != 1 or indices.shape[0] != features.shape[0]:
                raise ValueError('indices: one dataset index per feature row expected')
            self._index.append(indices.detach().to(self.storage_device, torch.long))

    @torch.no_grad()
    def end_epoch(self) -> Dict[str, float]:
        """Gather the epoch's features, choose the landmarks, build U_r, G and the extension."""
        feats = torch.cat(self._feats) if self._feats else \
            torch.zeros(0, self.dim, dtype=self.storage_dtype, device=self.storage_device)
        feats = all_gather_rows(feats).to(torch.float64)
        if self._index:
            order = all_gather_rows(torch.cat(self._index)).argsort(stable=True)
            feats = feats[order]
        self._feats, self._index = [], []
        n = feats.shape[0]
        if n == 0:
            return {'samples': 0.0}
        d = self.dim
        m = min(self.num_landmarks, n)
        gen = torch.Generator().manual_seed(self.seed + int(self.refreshes))
        landmarks = torch.randperm(n, generator=gen)[:m].sort().values.to(feats.device)
        f_i = feats[landmarks]  # (m, d)
        c = feats @ f_i.t()  # (n, m)
        w_evals, w_evecs = _eigh_desc(f_i @ f_i.t())
        positive = int((w_evals > w_evals[0].clamp_min(1e-300) * 1e-10).sum()) \
            if float(w_evals[0]) > 0 else 0
        r = min(rank_for(self.gamma, n, d), positive)
        trace = feats.pow(2).sum() / n
        self.trace.fill_(float(trace))
        self.n_last.fill_(n)
        self.extension.zero_()
        self.g.zero_()
        self.ritz.zero_()
        self.rank.fill_(r)
        if r == 0:
            self.tnn_bar.fill_(float(trace))
            self.refreshes += 1
            return {'samples': float(n), 'rank': 0.0, 'tnn_bar': float(trace)}
        scale = w_evecs[:, :r] / w_evals[:r].sqrt()  # Q_r Λ_r^{-1/2} (m, r)
        u_tilde = c @ scale  # (n, r)
        ext = f_i.t() @ scale  # (d, r): rows of Ũ = F_i ext
        if self.orthonormalize:
            u, rr = torch.linalg.qr(u_tilde)
            ext = torch.linalg.solve_triangular(rr, ext, upper=True, left=False)
        else:
            u = u_tilde
        g = feats.t() @ u  # (d, r) = Fᵀ U_r
        ritz = torch.linalg.eigvalsh(g.t() @ g / n).flip(0)  # eigenvalues of U_rᵀ K_n U_r
        self.extension[:, :r] = ext
        self.g[:, :r] = g
        self.ritz[:r] = ritz
        # (1/n) Σ_i t_i, t_i = ‖F_i‖² − Σ_s u_is ⟨F_i, G_s⟩
        tnn_bar = trace - ((feats @ ext) * (feats @ g)).sum() / n
        self.tnn_bar.fill_(float(tnn_bar))
        self.refreshes += 1
        return {'samples': float(n), 'rank': float(r), 'tnn_bar': float(tnn_bar),
                'landmarks': float(m)}

    def tnn(self) -> Tensor:
        """The approximate TNN of eq. (3), tr(K_n) − tr(U_rᵀ K_n U_r), of the last epoch."""
        return self.tnn_bar.clone()

    def approx_kernel_complexity(self) -> Tuple[Tensor, int]:
        """A-KC (KCR paper, Fig. 1): KC with the approximate TNN of each h ∈ [0, r] (Ritz values
        of K_n on span U_r: TNN̄_h = tr(K_n) − Σ_{s≤h} θ_s)."""
        r = int(self.rank)
        curve = self.trace - torch.cat([self.ritz.new_zeros(1), self.ritz[:r].cumsum(0)])
        return kernel_complexity_from_tnn(curve, max(int(self.n_last), 1))

    def per_sample(self, features: Tensor) -> Tensor:
        """t_i = ‖F_i‖² − Σ_s [U_r]_is ⟨F_i, G_s⟩ (B,), with [U_r]_i = F_i P, differentiable
        in F_i through both factors (gradient 2(I − P_r)F_i for m = n; see the module doc)."""
        f = _float_features(features, self.dim)
        if not self.ready:
            return f.new_zeros(f.shape[0])
        r = int(self.rank)
        ext = self.extension[:, :r].to(f)
        g = self.g[:, :r].to(f)
        u_rows = f @ ext  # differentiated too: the row of U_r is a function of F_i
        return f.pow(2).sum(1) - (u_rows * (f @ g)).sum(1)

    def loss(self, features: Tensor) -> Tensor:
        """KCR_j = mean_{i∈B} t_i (eq. 4, scale-consistent form); 0 before the first refresh."""
        return self.per_sample(features).mean() if features.shape[0] else \
            features.new_zeros(())


#: the two routes of the KCR term: exact (streaming S = FᵀF, the default) and Nyström (paper)
KCR_ROUTES = ('exact', 'nystrom')


@register
class KCRRegularizer(Regularizer):
    """The KCR term (method.md §7) behind the :class:`Regularizer` interface.

    ``route='exact'`` (:class:`KCRState`) or ``'nystrom'`` (:class:`NystromKCR`); other options
    go to that class. Labels and inputs are not used by the term.

    ``normalize=True`` (the mmdcs default, method.md §7.5): the statistics and the term are
    computed on the L2-normalised features F_i/‖F_i‖, so K(x, x) = 1, every t_i lies in [0, 1]
    (the share of a sample's feature energy outside the top-r directions) and the term cannot
    be lowered by shrinking the features. ``normalize=False`` is the paper's term on the raw
    features (K(x, x) = ‖F_i‖², a scale the network sets: d·γ_LN² for a final LayerNorm).
    """
    name = 'kcr'
    default_eta = 1.0

    def __init__(self, feat_dim: int, num_classes: Optional[int] = None,
                 route: str = 'exact', normalize: bool = True, **options):
        if route not in KCR_ROUTES:
            raise ValueError(f'regularizer.route must be one of {KCR_ROUTES}, got {route!r}')
        if not isinstance(normalize, bool):
            raise ValueError(f'regularizer.normalize must be True or False, got {normalize!r}')
        self.route = route
        self.normalize = normalize
        self.state = KCRState(feat_dim, **options) if route == 'exact' else \
            NystromKCR(feat_dim, **options)

    def _features(self, features: Tensor) -> Tensor:
        return unit_rows(features) if self.normalize else features

    def update(self, features: Tensor, labels: Tensor, inputs: Optional[Tensor] = None) -> None:
        self.state.update(self._features(features.detach()), labels)

    def batch_loss(self, features: Tensor, labels: Tensor,
                   inputs: Optional[Tensor] = None) -> Dict[str, Tensor]:
        return {'loss': self.state.loss(self._features(features))}
