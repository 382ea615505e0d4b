"""k-means for the IB regulariser: seeded k-means++, full-batch Lloyd and the streaming
(exact, accumulated) Lloyd step :class:`MiniBatchKMeans` (method.md §6).
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from .checks import check_int, check_matrix
from .distributed import all_reduce_sum_
from .state import TensorState

__all__ = ['kmeans_pp_init', 'lloyd_step', 'kmeans', 'MiniBatchKMeans', 'sq_dist', 'nearest']


def sq_dist(x: Tensor, c: Tensor) -> Tensor:
    """‖x_i − c_a‖² (n, k), clamped at 0."""
    return ((x * x).sum(1, keepdim=True) - 2 * x @ c.t() + (c * c).sum(1)[None]).clamp_min(0)


def nearest(x: Tensor, centroids: Tensor) -> Tensor:
    """Index of the nearest centroid (ties: the lowest index), computed in float64."""
    x = x.to(torch.float64)
    c = centroids.to(device=x.device, dtype=torch.float64)
    return (-2 * x @ c.t() + (c * c).sum(1)[None]).argmin(1)


def default_generator(generator: Optional[torch.Generator], seed: int = 0) -> torch.Generator:
    return generator if generator is not None else torch.Generator().manual_seed(seed)


def kmeans_pp_init(x: Tensor, k: int, generator: Optional[torch.Generator] = None) -> Tensor:
    """k-means++ seeding (Arthur & Vassilvitskii 2007): (k, d) centroids chosen among ``x``.

    The first centroid is uniform, the next ones are drawn with probability ∝ D², the squared
    distance to the nearest centroid so far. Sampling uses the CPU ``generator`` (default: a
    generator seeded with 0), so the result is a deterministic function of (x, k, seed).
    """
    check_matrix(x, 'x')
    n = x.shape[0]
    k = check_int(k, 'k', 1)
    if k > n:
        raise ValueError(f'k-means++ needs at least k = {k} samples, got {n}')
    g = default_generator(generator)
    xs = x.detach().to('cpu', torch.float64)
    chosen = [int(torch.randint(n, (1, ), generator=g))]
    d2 = sq_dist(xs, xs[chosen[-1]][None])[:, 0]
    for _ in range(1, k):
        if float(d2.sum()) > 0:
            j = int(torch.multinomial(d2, 1, generator=g))
        else:  # every point coincides with a centroid: uniform among the unchosen ones
            free = torch.ones(n, dtype=torch.bool)
            free[chosen] = False
            cand = free.nonzero()[:, 0]
            j = int(cand[torch.randint(len(cand), (1, ), generator=g)])
        chosen.append(j)
        d2 = torch.minimum(d2, sq_dist(xs, xs[j][None])[:, 0])
    return x.detach()[torch.tensor(chosen, device=x.device)].clone()


def lloyd_step(x: Tensor, centroids: Tensor) -> Tuple[Tensor, Tensor]:
    """One full-batch Lloyd iteration: (new centroids, counts); an empty cluster keeps its
    centroid. float64; the reference for :class:`MiniBatchKMeans`."""
    check_matrix(x, 'x')
    check_matrix(centroids, 'centroids', x.shape[1])
    x = x.detach().to(torch.float64)
    c = centroids.detach().to(device=x.device, dtype=torch.float64)
    idx = nearest(x, c)
    sums = torch.zeros_like(c).index_add_(0, idx, x)
    counts = torch.bincount(idx, minlength=c.shape[0])
    new = c.clone()
    keep = counts > 0
    new[keep] = sums[keep] / counts[keep, None].to(torch.float64)
    return new, counts


def kmeans(x: Tensor, k: int, iters: int = 20,
           generator: Optional[torch.Generator] = None) -> Tensor:
    """k-means++ seeding, then up to ``iters`` Lloyd iterations (stops when stable); float64."""
    iters = check_int(iters, 'iters', 0)
    c = kmeans_pp_init(x, k, generator).to(torch.float64)
    for _ in range(iters):
        new, _ = lloyd_step(x, c)
        if torch.equal(new, c):
            break
        c = new
    return c


class MiniBatchKMeans(TensorState):
    """Streaming k-means over mini-batches: the exact Lloyd step, accumulated.

    :meth:`partial_fit` assigns each row to its nearest current centroid and adds it to that
    cluster's float64 sum and count; :meth:`step` sets every non-empty centroid to sum / count
    (empty clusters keep theirs) and resets the sums. Over one pass this is exactly one
    full-batch Lloyd iteration (:func:`lloyd_step`) on the concatenated rows, whatever the batch
    sizes and order. :meth:`all_reduce` sums the accumulators across DDP ranks first.
    Memory: O(k·d).
    """
    _state_names = ('centroids', 'sums', 'counts')

    def __init__(self, num_clusters: int, dim: int, device='cpu'):
        self.num_clusters = check_int(num_clusters, 'num_clusters', 1)
        self.dim = check_int(dim, 'dim', 1)
        self.centroids = torch.zeros(num_clusters, dim, dtype=torch.float64, device=device)
        self.sums = torch.zeros_like(self.centroids)
        self.counts = torch.zeros(num_clusters, dtype=torch.long, device=device)

    def set_centroids(self, centroids: Tensor) -> None:
        check_matrix(centroids, 'centroids', self.dim)
        if centroids.shape[0] != self.num_clusters:
            raise ValueError(f'centroids: expected {self.num_clusters} rows, got '
                             f'{centroids.shape[0]}')
        self.centroids.copy_(centroids.detach().to(self.centroids))

    def assign(self, x: Tensor) -> Tensor:
        check_matrix(x, 'x', self.dim)
        return nearest(x.to(self.centroids.device), self.centroids)

    def partial_fit(self, x: Tensor) -> Tensor:
        """Accumulate a batch; returns its hard assignments."""
        x = check_matrix(x, 'x', self.dim).detach().to(self.centroids.device, torch.float64)
        idx = nearest(x, self.centroids)
        self.sums.index_add_(0, idx, x)
        self.counts += torch.bincount(idx, minlength=self.num_clusters)
        return idx

    def all_reduce(self) -> None:
        all_reduce_sum_(self.sums, self.counts)

    def step(self) -> int:
        """Centroids ← sums / counts (non-empty clusters); resets; returns #empty clusters."""
        keep = self.counts > 0
        self.centroids[keep] = self.sums[keep] / self.counts[keep, None].to(torch.float64)
        empty = int((~keep).sum())
        self.reset()
        return empty

    def reset(self) -> None:
        self.sums.zero_()
        self.counts.zero_()
