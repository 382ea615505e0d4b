"""The variational IB bound of DCS (method.md §6; DCS paper, section 3.3, Theorem 3.1, eq. 2 and 7).

Plain PyTorch: no mmengine runner or registry import. A hook drives :class:`IBState`::

    state = IBState(num_classes=C, feat_dim=d)          # once
    state.init_input_centroids(input_representation(sample_images))   # once, before training
    for epoch:                                # (or let update() do it: pass inputs_repr to it)
        state.begin_epoch()
        for batch:   # every training batch, on every rank, warm-up epochs included
            rep = input_representation(images)
            state.update(features, labels, rep)         # streaming Q sums + k-means sums
            out = state.loss(features, labels, rep)
            loss = ce + eta * out.ibb                   # after t_warm (gradient: out.variational)
        state.end_epoch()                               # all-reduce, refresh Q and centroids
    ckpt['ib_state'] = state.state_dict()               # everything, O(C·(C + d)) tensors

Definitions (the paper's, with A = B = C clusters):

* X_i, the input representation: :func:`input_representation` — the image area-averaged to
  8×8 per channel (``adaptive_avg_pool2d``: the exact mean of each block when H and W are
  multiples of 8, an anti-aliased and deterministic resize otherwise), flattened (3·64 = 192
  values) and L2-normalised. Its centroids are computed once, before training, by seeded
  k-means++ and Lloyd iterations on a sample (:meth:`IBState.init_input_centroids`).
* X̃_i, the learned feature: the classifier's pre-logit vector.
* φ(v, a) = softmax_a(−s·‖v − c_a‖²) (:func:`soft_assign`), s = 1 by default.
* Eq. (7), Q(a|y) = Σ_i φ(X̃_i, a)·1[y_i = y] / Σ_i 1[y_i = y] over the epoch.
* Eq. (2), per batch, IBB_j = mean_i [Σ_a Σ_b φ(X̃_i,a) φ(X_i,b) log φ(X_i,b)
  − Σ_a φ(X̃_i,a) log Q(a|y_i)], log Q clamped at log(q_min). Since Σ_a φ(X̃_i,a) = 1 the first
  term is Σ_b φ(X_i,b) log φ(X_i,b): it does not depend on the network weights, has no gradient,
  and is reported apart (:class:`IBBOutput`).

Streaming (memory independent of the dataset size n): during an epoch the state accumulates the
numerator of eq. (7) (C×A), the class counts (C) and the k-means sums and counts (A×d), all in
float64; :meth:`IBState.end_epoch` all-reduces them (SUM) across DDP ranks and refreshes Q and
the feature centroids. Alg. 1 line 16 runs "K-means clustering" on the epoch's X̃ at the end of
the epoch. mmdcs does **exact streaming Lloyd** (:class:`MiniBatchKMeans`): every X̃_i of the
epoch is assigned to its nearest centroid of the previous epoch — the same centroids that give
φ(X̃_i, a) for Q — the per-cluster sums and counts are accumulated, and at the end of the epoch
c_a = sum_a / count_a (an empty cluster keeps its centroid). That is exactly one full-batch
Lloyd iteration on the epoch's features (a test checks it), warm-started from the previous
epoch, so over the epochs it is k-means that follows the moving features at no extra pass over
the data. (Sculley's 2010 mini-batch k-means, with per-centroid learning rates, was the
alternative; it depends on the batch order and has no exact full-batch counterpart.)

Before the feature centroids exist (the very first batches), :meth:`IBState.update` keeps a
bounded buffer of the first ``init_samples`` features (all ranks together; a scalar all-reduce
per batch until then), runs seeded k-means++ (then ``feature_init_iters`` Lloyd iterations) on
the buffer gathered from all ranks in rank order — identical centroids on every rank — and then
accumulates the buffered rows as usual, so no sample of the epoch is lost. The buffer (at most
``init_samples`` rows plus one batch, during the first batches of the first epoch only) is then
freed; it is not part of the checkpoint: a run resumed before the initialisation starts over.

The exact IB(W) = I(X̃;X) − I(X̃;Y) of section 3.3 (:func:`ib_exact`) and IBB(W) over a whole
(sub)set (:func:`ibb_full`) are there for reports (DCS paper, Table 4) and for the tests.

Theorem 3.1 (IB ≤ IBB) — what holds and what does not. With P(a, b) = (1/n) Σ_i φ(X̃_i,a)
φ(X_i,b) and P(a, y) as in section 3.3, an exact rearrangement gives
(:func:`ib_bound_decomposition`)

    IBB − IB = Σ_y P(y) KL(P(·|y) ‖ Q(·|y)) + H(X̃|X) − (1/n) Σ_i H(φ(X_i, ·)).

The first term is ≥ 0 for every Q (0 for the Q of eq. 7), so eq. (7) gives the smallest IBB and
if the bound holds for it, it holds for every Q. As X̃ and X are independent given the sample,
H(X̃|X) ≥ (1/n) Σ_i H(φ(X̃_i,·)): the theorem holds whenever the feature assignments are on
average at least as soft as the input ones. Otherwise nothing makes H(X̃|X) ≥ (1/n) Σ_i
H(φ(X_i,·)), and the theorem can fail. Lemma D.1 is right, IB ≤ IBB + (1/n²) Σ_i Σ_j Σ_b
−φ(X_i,b) log φ(X_j,b) (:func:`lemma_d1_slack`, ≥ 0); Theorem 3.1 drops that term. Counter-
examples: all X̃_i near one centroid (H(X̃|X) ≈ 0) with soft φ(X_i,·); and, generically, the
representation above at s = 1: L2-normalised inputs have ‖X_i − c_b‖² ≤ 4, φ(X_i,·) is close to
uniform and IBB − IB ≈ H(X̃) − log C ≤ 0 for the Q of eq. (7) (the tests show violations on
random features for s ∈ {0.1, 1, 5} and on ResNet-18 features of real digits for s ∈ {0.1, 1}).
So the IBB value logged is not an upper bound of IB — at s = 1, and at larger s too on data
whose input assignments are soft (e.g. inputs equidistant from the input centroids: s = 20 does
not help; ``tests/test_regularizers/test_ib_bound.py``). What holds, for every Q and every set of
samples (a batch included), since KL ≥ 0 and H(X̃|X) ≥ 0:

    IB ≤ IBB + (1/n) Σ_i H(φ(X_i,·)) ≤ IBB + log C,

the **corrected Theorem 3.1** (:func:`mean_input_entropy`, :func:`ib_upper_bound`), and
IB ≤ IBB + lemma_d1_slack (Lemma D.1 with its term; looser, the slack is ≥ (1/n) Σ_i
H(φ(X_i,·))). Note that IBB + (1/n) Σ_i H(φ(X_i,·)) is eq. (2) without its first (constant)
term, i.e. the variational term −mean_i Σ_a φ(X̃_i,a) log Q(a|y_i): what the training
minimises *is* the corrected upper bound. The added term depends on the inputs only, so the
gradient of the training loss is unchanged. The logs (``ib_bound``, beside the paper's ``ibb``)
and the reports (``ib_bound``, ``ib_bound_log_c``, ``corrected_bound_holds``) label the corrected
bound.
"""
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from mmdcs.checks import check_number

from .base import Regularizer, register, unit_rows
from .checks import check_int, check_labels, check_matrix, check_scale
from .distributed import all_gather_rows, all_reduce_sum_, broadcast_, world_size
from .kmeans import MiniBatchKMeans, kmeans
from .state import TensorState

__all__ = [
    'INPUT_SIZE', 'input_representation', 'soft_assign', 'log_soft_assign', 'IBState',
    'IBBOutput', 'IBTerms', 'optimal_q', 'ib_exact', 'ibb_full', 'lemma_d1_slack',
    'mean_input_entropy', 'ib_upper_bound', 'ib_bound_decomposition', 'IBRegularizer'
]

#: side of the area-averaged image of the input representation (3·8·8 = 192 values)
INPUT_SIZE = 8


# ---------------------------------------------------------------------------------------------
# representation and soft assignment
# ---------------------------------------------------------------------------------------------
def input_representation(images: Tensor, size: int = INPUT_SIZE) -> Tensor:
    """X_i: images (B, ch, H, W) → (B, ch·size²), area-averaged to size×size, L2-normalised.

    ``adaptive_avg_pool2d`` is used (not bilinear): each output pixel is the mean of its input
    block (exact block means when H, W are multiples of ``size``), so the representation is
    anti-aliased, deterministic and independent of the interpolation convention. It works on a
    mean/std-normalised float batch as well as on raw intensities; the L2 normalisation makes
    it invariant to a global intensity scale. No gradient is needed (inputs are constants).
    """
    if not isinstance(images, Tensor) or images.dim() != 4 or not images.is_floating_point():
        raise ValueError('images must be a floating (B, channels, H, W) tensor, got '
                         + (f'shape {tuple(images.shape)} {images.dtype}'
                            if isinstance(images, Tensor) else type(images).__name__))
    size = check_int(size, 'size', 1)
    pooled = F.adaptive_avg_pool2d(images.detach(), size)
    return F.normalize(pooled.flatten(1), dim=1)


def log_soft_assign(v: Tensor, centroids: Tensor, s: float = 1.0) -> Tensor:
    """log φ(v, a) = log_softmax_a(−s·‖v − c_a‖²), (n, k), differentiable in ``v``.

    Computed as log_softmax_a(s·(2 v·c_a − ‖c_a‖²)): the same values (the ‖v‖² term is a
    per-row constant), without the cancellation of large norms.
    """
    s = check_scale(s)
    check_matrix(v, 'v')
    check_matrix(centroids, 'centroids', v.shape[1])
    c = centroids.to(device=v.device, dtype=v.dtype)
    return torch.log_softmax(s * (2 * v @ c.t() - (c * c).sum(1)[None]), dim=1)


def soft_assign(v: Tensor, centroids: Tensor, s: float = 1.0) -> Tensor:
    """φ(v, a) = softmax_a(−s·‖v − c_a‖²) (DCS paper, 3.3), (n, k); rows sum to 1."""
    return log_soft_assign(v, centroids, s).exp()


# ---------------------------------------------------------------------------------------------
# the exact IB, the bound over a whole set, and what separates them
# ---------------------------------------------------------------------------------------------
class IBBOutput(NamedTuple):
    """IBB of eq. (2) on a batch (or over a set) and its two terms.

    ``ibb = constant + variational``; ``variational`` = −mean_i Σ_a φ(X̃_i,a) log Q(a|y_i) carries
    the whole gradient; ``constant`` = mean_i Σ_a Σ_b φ(X̃_i,a) φ(X_i,b) log φ(X_i,b)
    (= mean_i Σ_b φ(X_i,b) log φ(X_i,b)) has none and is ``None`` when it cannot be computed
    (no input representation or no input centroids).
    """
    ibb: Tensor
    variational: Tensor
    constant: Optional[Tensor]


class IBTerms(NamedTuple):
    """The exact IB(W) = I(X̃;X) − I(X̃;Y) of DCS paper, 3.3, in nats (float64)."""
    ib: Tensor
    i_feat_input: Tensor
    i_feat_label: Tensor


def _check_assign(p: Tensor, name: str, n: Optional[int] = None) -> Tensor:
    check_matrix(p, name)
    if n is not None and p.shape[0] != n:
        raise ValueError(f'{name}: {p.shape[0]} rows, expected {n} (one per sample)')
    return p.detach().to(torch.float64)


def _mutual_information(joint: Tensor) -> Tensor:
    pa = joint.sum(1, keepdim=True)
    pb = joint.sum(0, keepdim=True)
    return (torch.xlogy(joint, joint) - torch.xlogy(joint, pa * pb)).sum()


def optimal_q(feat_assign: Tensor, labels: Tensor, num_classes: int) -> Tensor:
    """Eq. (7): Q(a|y) = Σ_i φ(X̃_i,a) 1[y_i=y] / Σ_i 1[y_i=y], (C, A); unseen classes uniform."""
    num_classes = check_int(num_classes, 'num_classes', 2)
    p = _check_assign(feat_assign, 'feat_assign')
    labels = check_labels(labels, p.shape[0], num_classes).to(p.device)
    sums = torch.zeros(num_classes, p.shape[1], dtype=torch.float64,
                       device=p.device).index_add_(0, labels, p)
    counts = torch.bincount(labels, minlength=num_classes)
    q = torch.full_like(sums, 1.0 / p.shape[1])
    seen = counts > 0
    q[seen] = sums[seen] / counts[seen, None].to(torch.float64)
    return q


def ib_exact(feat_assign: Tensor, input_assign: Tensor, labels: Tensor,
             num_classes: int) -> IBTerms:
    """IB(W) = I(X̃;X) − I(X̃;Y) from the φ matrices of a whole (sub)set (DCS paper, 3.3).

    P(a,b) = (1/n) Σ_i φ(X̃_i,a) φ(X_i,b), P(a,y) = (1/n) Σ_i φ(X̃_i,a) 1[y_i=y]; float64.
    """
    num_classes = check_int(num_classes, 'num_classes', 2)
    pf = _check_assign(feat_assign, 'feat_assign')
    n = pf.shape[0]
    px = _check_assign(input_assign, 'input_assign', n).to(pf.device)
    labels = check_labels(labels, n, num_classes).to(pf.device)
    onehot = F.one_hot(labels, num_classes).to(torch.float64)
    i_x = _mutual_information(pf.t() @ px / n)
    i_y = _mutual_information(pf.t() @ onehot / n)
    return IBTerms(i_x - i_y, i_x, i_y)


def ibb_full(feat_assign: Tensor, input_assign: Tensor, labels: Tensor, q: Tensor,
             q_min: float = 1e-8) -> IBBOutput:
    """IBB(W) of Theorem 3.1 over a whole (sub)set for a given Q (C, A); float64.

    The first term is computed literally, Σ_a Σ_b φ(X̃_i,a) φ(X_i,b) log φ(X_i,b).
    """
    check_matrix(q, 'q')
    pf = _check_assign(feat_assign, 'feat_assign')
    n = pf.shape[0]
    if q.shape[1] != pf.shape[1]:
        raise ValueError(f'q: {q.shape[1]} clusters, feat_assign has {pf.shape[1]}')
    px = _check_assign(input_assign, 'input_assign', n).to(pf.device)
    labels = check_labels(labels, n, q.shape[0]).to(pf.device)
    q_min = check_scale(q_min, 'q_min')
    log_q = torch.log(q.detach().to(device=pf.device, dtype=torch.float64).clamp_min(q_min))
    constant = (pf.sum(1) * torch.xlogy(px, px).sum(1)).mean()
    variational = -(pf * log_q[labels]).sum(1).mean()
    return IBBOutput(constant + variational, variational, constant)


def lemma_d1_slack(input_assign: Tensor) -> Tensor:
    """The term of Lemma D.1 that Theorem 3.1 drops: −(1/n²) Σ_i Σ_j Σ_b φ(X_i,b) log φ(X_j,b).

    A cross-entropy, ≥ 0; with it the bound holds: IB ≤ IBB + this. Depends on the inputs only.
    O(n·B): −Σ_b (mean_i φ(X_i,b)) (mean_j log φ(X_j,b)).
    """
    px = _check_assign(input_assign, 'input_assign')
    log_px = torch.log(px.clamp_min(torch.finfo(torch.float64).tiny))
    return -(px.mean(0) * log_px.mean(0)).sum()


def mean_input_entropy(input_assign: Tensor) -> Tensor:
    """(1/n) Σ_i H(φ(X_i,·)) in nats (float64): what the corrected Theorem 3.1 adds to IBB
    (= −(the constant term of eq. 2)); between 0 and log B."""
    px = _check_assign(input_assign, 'input_assign')
    return -torch.xlogy(px, px).sum(1).mean()


def ib_upper_bound(ibb: Tensor, input_assign: Tensor) -> Tensor:
    """The corrected Theorem 3.1: IB ≤ IBB + (1/n) Σ_i H(φ(X_i,·)) (≤ IBB + log C), for the
    IBB of any Q over the same samples (see the module doc)."""
    return ibb.detach().to(torch.float64) + mean_input_entropy(input_assign).to(ibb.device)


def ib_bound_decomposition(feat_assign: Tensor, input_assign: Tensor, labels: Tensor,
                           q: Tensor) -> Dict[str, Tensor]:
    """The exact terms of IBB − IB = kl_q + h_feat_given_input − mean_input_entropy (float64).

    * ``kl_q`` = Σ_y P(y) KL(P(·|y) ‖ Q(·|y)) ≥ 0 (0 for the Q of eq. 7; no clamping of Q here);
    * ``h_feat_given_input`` = H(X̃|X) under P(a, b);
    * ``mean_input_entropy`` = (1/n) Σ_i H(φ(X_i, ·)).

    Theorem 3.1 holds for this data iff kl_q + h_feat_given_input ≥ mean_input_entropy.
    """
    check_matrix(q, 'q')
    pf = _check_assign(feat_assign, 'feat_assign')
    n = pf.shape[0]
    px = _check_assign(input_assign, 'input_assign', n).to(pf.device)
    labels = check_labels(labels, n, q.shape[0]).to(pf.device)
    q = q.detach().to(device=pf.device, dtype=torch.float64)
    num_classes = q.shape[0]
    onehot = F.one_hot(labels, num_classes).to(torch.float64)
    p_ay = onehot.t() @ pf / n  # (C, A): P(y, a)
    p_y = onehot.mean(0)
    cond = p_ay / p_y.clamp_min(1e-300)[:, None]
    kl_q = (torch.xlogy(p_ay, cond) - torch.xlogy(p_ay, q)).sum()
    joint = pf.t() @ px / n  # (A, B)
    p_b = joint.sum(0)
    h_a_given_b = -(torch.xlogy(joint, joint) - torch.xlogy(joint, p_b[None])).sum()
    mean_h = -torch.xlogy(px, px).sum(1).mean()
    return {'kl_q': kl_q, 'h_feat_given_input': h_a_given_b, 'mean_input_entropy': mean_h,
            'gap': kl_q + h_a_given_b - mean_h}


# ---------------------------------------------------------------------------------------------
# the streaming state
# ---------------------------------------------------------------------------------------------
class IBState(TensorState):
    """Everything the IB term of DCS needs across batches, epochs, ranks and resumes.

    Args:
        num_classes: C (≥ 2); A = B = C clusters (DCS paper, 3.3).
        feat_dim: dimension d of the learned feature X̃ (the pre-logit vector).
        input_dim: dimension of the input representation (192 = 3·8·8).
        s: the scale of φ (> 0), 1 in the paper.
        q_min: log Q(a|y) is clamped at log(q_min) in the loss.
        init_samples: features buffered (all ranks together) before the feature centroids are
            initialised by k-means++; default max(4·C, 256). At least C are needed; if an epoch
            ends with fewer than ``init_samples`` (but ≥ C) the initialisation uses what it has.
        feature_init_iters: Lloyd iterations after the k-means++ seeding of the feature
            centroids (on the same buffer).
        seed: seed of every random choice (k-means++).
        device: where the state lives (the features' device; CUDA for NCCL).

    State (all fixed-size; ``state_dict()`` holds every one): ``input_centroids`` (C, 192),
    ``km.centroids`` (C, d) — the feature centroids — ``q`` (C, C) = Q(a|y) with row y (uniform
    at first), the epoch accumulators ``q_sums`` (C, C), ``class_counts`` (C), ``km.sums``,
    ``km.counts``, and the flags/counters ``input_ready``, ``feature_ready``, ``refreshes``.
    """
    _state_names = ('input_centroids', 'q', 'q_sums', 'class_counts', 'ab_sums', 'ab_count',
                    'input_ready', 'feature_ready', 'refreshes')
    _state_children = ('km', )

    def __init__(self, num_classes: int, feat_dim: int, input_dim: int = 3 * INPUT_SIZE ** 2,
                 s: float = 1.0, q_min: float = 1e-8, init_samples: Optional[int] = None,
                 feature_init_iters: int = 10, seed: int = 0, device='cpu'):
        self.num_classes = check_int(num_classes, 'num_classes', 2)
        self.feat_dim = check_int(feat_dim, 'feat_dim', 1)
        self.input_dim = check_int(input_dim, 'input_dim', 1)
        self.s = check_scale(s)
        self.q_min = check_number(q_min, 'q_min', 0, 1, low_open=True, high_open=True)
        if init_samples is None:
            init_samples = max(4 * num_classes, 256)
        self.init_samples = check_int(init_samples, 'init_samples', num_classes)
        self.feature_init_iters = check_int(feature_init_iters, 'feature_init_iters', 0)
        self.seed = check_int(seed, 'seed', 0)
        C = num_classes
        f64 = dict(dtype=torch.float64, device=device)
        self.input_centroids = torch.zeros(C, input_dim, **f64)
        self.q = torch.full((C, C), 1.0 / C, **f64)
        self.q_sums = torch.zeros(C, C, **f64)
        self.class_counts = torch.zeros(C, dtype=torch.long, device=device)
        # Σ_i φ(X̃_i,a) φ(X_i,b) over the epoch (batches given with their input
        # representations): the joint P(a,b) of the exact IB(W) reported at epoch end
        self.ab_sums = torch.zeros(C, C, **f64)
        self.ab_count = torch.zeros((), dtype=torch.long, device=device)
        self.input_ready = torch.tensor(False, device=device)
        self.feature_ready = torch.tensor(False, device=device)
        self.refreshes = torch.tensor(0, dtype=torch.long, device=device)
        self.km = MiniBatchKMeans(C, feat_dim, device=device)
        # (features, labels, input representations or None) of the batches before the init
        self._pending: List[Tuple[Tensor, Tensor, Optional[Tensor]]] = []

    # -- convenience --------------------------------------------------------------------------
    @property
    def feature_centroids(self) -> Tensor:
        return self.km.centroids

    @property
    def ready(self) -> bool:
        """True once Q has been refreshed from data at least once."""
        return int(self.refreshes) > 0

    def _generator(self, offset: int = 0) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed + offset)

    def to(self, device) -> 'IBState':
        super().to(device)
        self._pending = [(f.to(device), y.to(device), None if x is None else x.to(device))
                         for f, y, x in self._pending]
        return self

    # -- initialisation -------------------------------------------------------------------------
    def init_input_centroids(self, inputs_repr: Tensor, iters: int = 20,
                             broadcast: bool = True) -> Tensor:
        """Input centroids: seeded k-means++ then ``iters`` Lloyd iterations on a sample of X_i.

        Call once before training with a seeded sample of the training set (≥ C rows). With
        ``broadcast`` and an initialised process group, rank 0's result is broadcast (every rank
        must call this). Alternatively pass ``inputs_repr`` to :meth:`update`: the centroids
        are then computed from the same first batches as the feature centroids.
        """
        check_matrix(inputs_repr, 'inputs_repr', self.input_dim)
        c = kmeans(inputs_repr.detach(), self.num_classes, iters, self._generator(0))
        self.input_centroids.copy_(c.to(self.input_centroids))
        if broadcast:
            broadcast_(self.input_centroids)
        self.input_ready.fill_(True)
        return self.input_centroids

    def init_feature_centroids(self, features: Tensor, iters: Optional[int] = None) -> Tensor:
        """Feature centroids: seeded k-means++ (+ ``iters`` Lloyd iterations) on ``features``.

        Local (no communication): in DDP call it with the same rows on every rank.
        :meth:`update` calls it by itself on the first ``init_samples`` features of all ranks.
        """
        check_matrix(features, 'features', self.feat_dim)
        iters = self.feature_init_iters if iters is None else iters
        c = kmeans(features.detach(), self.num_classes, iters, self._generator(1))
        self.km.set_centroids(c)
        self.feature_ready.fill_(True)
        return self.km.centroids

    def _pending_count(self) -> int:
        return sum(f.shape[0] for f, _, _ in self._pending)

    def _init_from_pending(self) -> None:
        local_f = torch.cat([f for f, _, _ in self._pending]) if self._pending else \
            torch.zeros(0, self.feat_dim, dtype=torch.float64, device=self.device)
        all_f = all_gather_rows(local_f)
        if all_f.shape[0] < self.num_classes:
            raise ValueError(
                f'IBState: the feature centroids need at least num_classes = '
                f'{self.num_classes} features, the epoch gave {all_f.shape[0]}')
        self.init_feature_centroids(all_f)
        if not bool(self.input_ready):
            # the input centroids too, if every rank gave the input representations
            have = torch.tensor([int(all(x is not None for _, _, x in self._pending))],
                                dtype=torch.long, device=self.device)
            all_reduce_sum_(have)
            if int(have) == world_size():
                local_x = torch.cat([x for _, _, x in self._pending]) if self._pending else \
                    torch.zeros(0, self.input_dim, dtype=torch.float64, device=self.device)
                self.init_input_centroids(all_gather_rows(local_x), broadcast=False)
        pending, self._pending = self._pending, []
        for f, y, x in pending:
            self._accumulate(f, y, x)

    # -- the epoch ----------------------------------------------------------------------------
    def begin_epoch(self) -> None:
        """Reset the epoch accumulators (a partial epoch's sums are discarded)."""
        self.q_sums.zero_()
        self.class_counts.zero_()
        self.ab_sums.zero_()
        self.ab_count.zero_()
        self.km.reset()
        self._pending = []

    def _accumulate(self, f: Tensor, labels: Tensor, x: Optional[Tensor] = None) -> None:
        phi = soft_assign(f, self.km.centroids, self.s)
        self.q_sums.index_add_(0, labels, phi)
        self.class_counts += torch.bincount(labels, minlength=self.num_classes)
        if x is not None and bool(self.input_ready):
            self.ab_sums += phi.t() @ soft_assign(x, self.input_centroids, self.s)
            self.ab_count += f.shape[0]
        self.km.partial_fit(f)

    @torch.no_grad()
    def update(self, features: Tensor, labels: Tensor,
               inputs_repr: Optional[Tensor] = None) -> None:
        """Feed one training batch: adds it to Q's sums (eq. 7) and the k-means sums.

        φ(X̃_i, a) uses the centroids of the previous epoch. Call on every rank for every batch
        (before the centroids exist this performs one scalar all-reduce per batch).
        ``inputs_repr`` (optional) only serves before the initialisation: if the input
        centroids were not set by :meth:`init_input_centroids`, they are initialised with the
        feature centroids, by the same seeded k-means on the same first batches.
        """
        check_matrix(features, 'features', self.feat_dim)
        labels = check_labels(labels, features.shape[0], self.num_classes, 'labels')
        f = features.detach().to(self.device, torch.float64)
        labels = labels.to(self.device)
        if bool(self.feature_ready):
            x = None
            if inputs_repr is not None:
                check_matrix(inputs_repr, 'inputs_repr', self.input_dim)
                x = inputs_repr.detach().to(self.device, torch.float64)
            self._accumulate(f, labels, x)
            return
        x = None
        if inputs_repr is not None:
            check_matrix(inputs_repr, 'inputs_repr', self.input_dim)
            if inputs_repr.shape[0] != f.shape[0]:
                raise ValueError(f'inputs_repr: {inputs_repr.shape[0]} rows for '
                                 f'{f.shape[0]} features')
            x = inputs_repr.detach().to(self.device, torch.float64)
        self._pending.append((f, labels, x))
        count = torch.tensor([self._pending_count()], dtype=torch.long, device=self.device)
        all_reduce_sum_(count)
        if int(count) >= self.init_samples:
            self._init_from_pending()

    @torch.no_grad()
    def end_epoch(self) -> Dict[str, float]:
        """All-reduce the sums, Q(a|y) ← eq. (7), centroids ← one Lloyd step; reset the sums.

        A class with no sample in this epoch keeps its previous row of Q (uniform if never
        seen); an empty cluster keeps its centroid. Every rank must call it.
        """
        if not bool(self.feature_ready):
            total = torch.tensor([self._pending_count()], dtype=torch.long, device=self.device)
            all_reduce_sum_(total)
            if int(total) == 0:
                return {'samples': 0.0}
            self._init_from_pending()
        all_reduce_sum_(self.q_sums, self.class_counts, self.km.sums, self.km.counts,
                         self.ab_sums, self.ab_count)
        report = self._epoch_ib()
        seen = self.class_counts > 0
        self.q[seen] = self.q_sums[seen] / self.class_counts[seen, None].to(torch.float64)
        samples = int(self.class_counts.sum())
        classes_seen = int(seen.sum())
        empty = self.km.step()
        self.q_sums.zero_()
        self.class_counts.zero_()
        self.ab_sums.zero_()
        self.ab_count.zero_()
        self.refreshes += 1
        return dict(samples=float(samples), classes_seen=float(classes_seen),
                    empty_clusters=float(empty), **report)

    def _epoch_ib(self) -> Dict[str, float]:
        """The exact IB(W) = I(X̃;X) − I(X̃;Y) of the epoch, from the streamed joints (DCS paper,
        3.3): P(a,b) from the batches given with input representations, P(a,y) from all."""
        n_y, n_ab = int(self.class_counts.sum()), int(self.ab_count)
        if n_y == 0 or n_ab == 0:
            return {}
        i_y = _mutual_information(self.q_sums.t() / n_y)
        i_x = _mutual_information(self.ab_sums / n_ab)
        return {'ib': float(i_x - i_y), 'i_feat_input': float(i_x), 'i_feat_label': float(i_y)}

    # -- the loss -------------------------------------------------------------------------------
    def assignments(self, features: Optional[Tensor] = None,
                    inputs_repr: Optional[Tensor] = None) -> Tuple[Optional[Tensor],
                                                                   Optional[Tensor]]:
        """(φ(X̃, ·), φ(X, ·)) with the current centroids (for :func:`ib_exact` reports)."""
        pf = px = None
        if features is not None:
            check_matrix(features, 'features', self.feat_dim)
            pf = soft_assign(features.detach().to(torch.float64), self.km.centroids, self.s)
        if inputs_repr is not None:
            check_matrix(inputs_repr, 'inputs_repr', self.input_dim)
            px = soft_assign(inputs_repr.detach().to(torch.float64), self.input_centroids,
                             self.s)
        return pf, px

    def constant_term(self, inputs_repr: Tensor) -> Optional[Tensor]:
        """mean_i Σ_b φ(X_i,b) log φ(X_i,b) (no gradient); None without input centroids."""
        if not bool(self.input_ready):
            return None
        check_matrix(inputs_repr, 'inputs_repr', self.input_dim)
        x = inputs_repr.detach()
        dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
        log_px = log_soft_assign(x.to(dtype), self.input_centroids, self.s)
        return (log_px.exp() * log_px).sum(1).mean()

    def loss(self, features: Tensor, labels: Tensor,
             inputs_repr: Optional[Tensor] = None) -> IBBOutput:
        """IBB_j of eq. (2) on a batch, differentiable in ``features``.

        Uses the current Q and centroids (those of the previous epoch). Before the feature
        centroids exist the terms are zeros (``ready`` tells whether Q came from data; with the
        initial uniform Q the variational term is the constant log C). The computation runs
        in float32 at least (float64 if the features are float64).
        """
        check_matrix(features, 'features', self.feat_dim)
        labels = check_labels(labels, features.shape[0], self.num_classes, 'labels')
        dtype = features.dtype if features.dtype in (torch.float32, torch.float64) \
            else torch.float32
        constant = self.constant_term(inputs_repr) if inputs_repr is not None else None
        if inputs_repr is not None and inputs_repr.shape[0] != features.shape[0]:
            raise ValueError(f'inputs_repr: {inputs_repr.shape[0]} rows for '
                             f'{features.shape[0]} features')
        if not bool(self.feature_ready):
            zero = features.new_zeros((), dtype=dtype)
            return IBBOutput(zero if constant is None else constant.to(dtype), zero, constant)
        log_pf = log_soft_assign(features.to(dtype), self.km.centroids, self.s)
        log_q = torch.log(self.q.clamp_min(self.q_min)).to(device=features.device, dtype=dtype)
        variational = -(log_pf.exp() * log_q[labels.to(features.device)]).sum(1).mean()
        if constant is None:
            return IBBOutput(variational, variational, None)
        constant = constant.to(device=features.device, dtype=dtype)
        return IBBOutput(variational + constant, variational, constant)


@register
class IBRegularizer(Regularizer):
    """The IB term of DCS retraining (method.md §6) behind the :class:`Regularizer` interface.

    ``inputs`` are the image batch (B, ch, H, W); X_i is :func:`input_representation` of it.
    :meth:`batch_loss` returns ``loss`` = the variational part of IBB_j (it carries the whole
    gradient), and for the logs ``ibb`` (the whole IBB_j of eq. 2, the paper's IBB: *not* an
    upper bound of IB in general), ``ibb_const`` (its first term, mean_i Σ_b φ(X_i,b) log
    φ(X_i,b) = −(1/B) Σ_i H(φ(X_i,·)): the inputs only) and ``ib_bound`` = ibb − ibb_const =
    IBB_j + (1/B) Σ_i H(φ(X_i,·)), the corrected Theorem 3.1's upper bound of the batch's IB
    (≤ IBB_j + log C; module doc) — the variational term, logged whether or not the inputs are
    given. Options go to :class:`IBState`.

    ``normalize=True`` (the mmdcs default, method.md §6.8): X̃_i is L2-normalised before the
    soft assignment, the k-means and Q — as X_i already is —, so φ(X̃_i, ·) does not depend on
    a feature scale the network sets (‖X̃_i‖² ≈ d after a final LayerNorm: at s = 1 the
    assignments are then one-hot and the gradient is zero but near the cluster boundaries,
    where it is large). ``normalize=False`` is the paper's raw X̃.
    """
    name = 'ib'
    default_eta = 50.0

    def __init__(self, feat_dim: int, num_classes: Optional[int], normalize: bool = True,
                 **options):
        if num_classes is None:
            raise ValueError('the IB regularizer needs a head with num_classes')
        if not isinstance(normalize, bool):
            raise ValueError(f'regularizer.normalize must be True or False, got {normalize!r}')
        self.normalize = normalize
        self.state = IBState(num_classes, feat_dim, **options)

    def _features(self, features: Tensor) -> Tensor:
        return unit_rows(features) if self.normalize else features

    @staticmethod
    def _repr(inputs: Optional[Tensor]) -> Optional[Tensor]:
        return None if inputs is None else input_representation(inputs.detach())

    def update(self, features: Tensor, labels: Tensor, inputs: Optional[Tensor] = None) -> None:
        self.state.update(self._features(features.detach()), labels, self._repr(inputs))

    def batch_loss(self, features: Tensor, labels: Tensor,
                   inputs: Optional[Tensor] = None) -> Dict[str, Tensor]:
        out = self.state.loss(self._features(features), labels, self._repr(inputs))
        # the corrected bound IBB_j + (1/B) Σ_i H(φ(X_i,·)) is the variational term itself
        terms = {'loss': out.variational, 'ibb': out.ibb.detach(),
                 'ib_bound': out.variational.detach()}
        if out.constant is not None:
            terms['ibb_const'] = out.constant.detach()
        return terms
