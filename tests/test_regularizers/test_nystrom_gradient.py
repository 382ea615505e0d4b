"""The Nyström route of the KCR loss: value and gradient.

With every sample a landmark (m = n) and Ũ orthonormalised, the per-batch term over the whole
set equals the exact TNN ‖K‖_r = (1/n) Σ_i ‖(I − P) F_i‖², P = V_r V_rᵀ, in value and in
gradient: 2(I − P)F/n, which is orthogonal to the top-r directions (the term must not push
them). A Nyström row of U_r treated as a constant would give (2I − P)F/n instead.
"""
import pytest
import torch

from mmdcs.regularizers import KCRState, NystromKCR, rank_for, tnn_exact

N, D, GAMMA = 40, 16, 0.25


def _features(seed=0, n=N, d=D):
    g = torch.Generator().manual_seed(seed)
    # a spread spectrum, so that the top-r subspace is well defined
    scales = torch.logspace(0, -1.5, d, dtype=torch.float64)
    return torch.randn(n, d, generator=g, dtype=torch.float64) * scales


def _nystrom(f, landmarks=N):
    state = NystromKCR(D, gamma=GAMMA, num_landmarks=landmarks)
    state.update(f)
    state.end_epoch()
    return state


def _grad(fn, f):
    x = f.clone().requires_grad_(True)
    value = fn(x)
    (grad, ) = torch.autograd.grad(value, x)
    return value.detach(), grad


def _projector(f):
    r = rank_for(GAMMA, *f.shape)
    evals, evecs = torch.linalg.eigh(f.t() @ f / f.shape[0])
    v = evecs.flip(1)[:, :r]
    return v @ v.t(), v


@pytest.mark.parametrize('seed', [0, 1])
def test_nystrom_with_all_landmarks_equals_exact_tnn_in_value_and_gradient(seed):
    f = _features(seed)
    nys = _nystrom(f)
    v_nys, g_nys = _grad(nys.loss, f)
    v_exact, g_exact = _grad(lambda x: tnn_exact(x, GAMMA), f)
    assert torch.allclose(v_nys, v_exact, rtol=1e-9, atol=1e-12), (v_nys, v_exact)
    rel = float((g_nys - g_exact).norm() / g_exact.norm())
    assert rel < 1e-8, rel


def test_gradient_is_two_times_the_residual_over_n_and_leaves_the_top_directions_alone():
    f = _features(2)
    p, v = _projector(f)
    expected = 2 * (f - f @ p) / N  # 2(I − P)F/n, row-wise
    _, g = _grad(_nystrom(f).loss, f)
    assert torch.allclose(g, expected, rtol=1e-8, atol=1e-12)
    assert float((g @ v).abs().max()) < 1e-10 * float(g.abs().max())
    # what a detached Nyström row gives instead, (2I − P)F/n, is far from it
    wrong = (2 * f - f @ p) / N
    assert float((wrong - expected).norm() / expected.norm()) > 0.3


def test_per_batch_gradients_add_up_to_the_whole_set_gradient():
    """Batches of the epoch (mean over each batch): B/n-weighted, they give the gradient of the
    whole-set term, as the exact streaming route does."""
    f = _features(3)
    nys = _nystrom(f)
    exact = KCRState(D, gamma=GAMMA)
    exact.update(f)
    exact.end_epoch()
    for b in (f[:8], f[8:25], f[25:]):
        _, g_nys = _grad(nys.loss, b)
        _, g_exact = _grad(exact.loss, b)
        assert torch.allclose(g_nys, g_exact, rtol=1e-7, atol=1e-12)


def test_fewer_landmarks_value_is_an_approximation_and_gradient_is_that_of_the_value():
    """m < n: the term as defined (rows of U_r by the Nyström extension of the current
    features) is differentiated as a whole; the autograd gradient equals a finite difference."""
    f = _features(4)
    nys = _nystrom(f, landmarks=20)
    x = f[:5].clone()
    _, g = _grad(nys.loss, x)
    eps = 1e-6
    direction = torch.randn(x.shape, generator=torch.Generator().manual_seed(5),
                            dtype=torch.float64)
    fd = (nys.loss(x + eps * direction) - nys.loss(x - eps * direction)) / (2 * eps)
    assert abs(float(fd) - float((g * direction).sum())) < 1e-6 * max(1., abs(float(fd)))
