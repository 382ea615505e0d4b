"""The KCR loss (method.md §7): exact streaming TNN, the Nyström route, reports, DDP, state."""
import math

import pytest
import torch

from mmdcs.regularizers import (KCRState, NystromKCR, gd_residual, gd_residual_from_stats,
                                 kcr_bounds, kernel_complexity, kernel_complexity_from_tnn,
                                 rank_for, tnn_exact, tnn_from_eigvals)

from _dist_utils import run_distributed  # noqa: E402 (tests/test_regularizers is on sys.path)


def _features(seed, n, d, integer=False, decay=True):
    g = torch.Generator().manual_seed(seed)
    if integer:  # exactly representable products and sums: any summation order is exact
        return torch.randint(-3, 4, (n, d), generator=g).to(torch.float64)
    f = torch.randn(n, d, generator=g, dtype=torch.float64)
    if decay:  # a decaying spectrum, as learned features have
        f = f * torch.linspace(3, 0.1, d, dtype=torch.float64)
    return f


def _gram_eigvals(f):
    """Eigenvalues of K_n = F Fᵀ / n, computed directly (n×n), descending."""
    n = f.shape[0]
    return torch.linalg.eigvalsh(f @ f.t() / n).flip(0)


def _batches(n, size):
    return [slice(i, min(n, i + size)) for i in range(0, n, size)]


def _fed(state, f, size, **kw):
    state.begin_epoch()
    for sl in _batches(f.shape[0], size):
        state.update(f[sl], **{k: v[sl] for k, v in kw.items()})
    return state.end_epoch()


def test_rank_and_gamma_validation():
    assert rank_for(0.1, 1000, 30) == 3  # 0.1·30 = 3.0000000000000004 in floating point
    assert rank_for(0.1, 1000, 384) == 39
    assert rank_for(0.1, 25, 384) == 3
    assert rank_for(1.0, 10, 20) == 10
    assert rank_for(1e-6, 10, 20) == 1
    for bad in (0, 0.0, -0.1, 1.0001, 2, float('nan'), float('inf'), True, None, '0.1'):
        with pytest.raises(ValueError, match='gamma'):
            rank_for(bad, 10, 10)
        with pytest.raises(ValueError, match='gamma'):
            KCRState(8, bad)
        with pytest.raises(ValueError, match='gamma'):
            NystromKCR(8, bad)
        with pytest.raises(ValueError, match='gamma'):
            tnn_exact(torch.randn(4, 3), bad)


@pytest.mark.parametrize('n,d,gamma', [(200, 24, 0.1), (150, 40, 0.25), (30, 64, 0.5),
                                       (60, 60, 1.0)])
def test_tnn_exact_is_the_sum_of_the_smallest_gram_eigenvalues(n, d, gamma):
    f = _features(n + d, n, d)
    r = math.ceil(round(gamma * min(n, d), 9))
    lam = _gram_eigvals(f)
    expected = lam[r:].sum()
    torch.testing.assert_close(tnn_exact(f, gamma), expected, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(tnn_from_eigvals(lam, r), expected.clamp_min(0), rtol=1e-9,
                               atol=1e-10)
    # its gradient is the gradient of Σ_{i>r} λ̂_i (distinct eigenvalues here)
    fa = f.clone().requires_grad_(True)
    (g1, ) = torch.autograd.grad(tnn_exact(fa, gamma), fa)
    fb = f.clone().requires_grad_(True)
    (g2, ) = torch.autograd.grad(
        torch.linalg.eigvalsh(fb.t() @ fb / n).flip(0)[r:].sum(), fb)
    torch.testing.assert_close(g1, g2, rtol=1e-7, atol=1e-9)


def test_streaming_s_equals_the_full_batch_s_and_gives_the_exact_tnn():
    n, d, gamma = 173, 16, 0.2
    f = _features(1, n, d, integer=True)
    st = KCRState(d, gamma)
    st.begin_epoch()
    start = 0
    for size in (1, 50, 7, 64, 51):
        st.update(f[start:start + size])
        start += size
    assert start == n
    assert torch.equal(st.s_sum, f.t() @ f) and int(st.count) == n  # exact
    stats = st.end_epoch()
    assert stats['samples'] == n and stats['rank'] == rank_for(gamma, n, d) == 4
    assert int(st.count) == 0 and float(st.s_sum.abs().sum()) == 0  # reset
    torch.testing.assert_close(st.eigvals, _gram_eigvals(f)[:d], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(st.tnn(), tnn_exact(f, gamma), rtol=1e-10, atol=1e-10)
    # the batch terms, weighted by batch size, add up to the TNN of the epoch
    total = sum(st.loss(f[sl]) * (sl.stop - sl.start) for sl in _batches(n, 40)) / n
    torch.testing.assert_close(total, tnn_exact(f, gamma), rtol=1e-10, atol=1e-10)
    # same value and gradient as tnn_exact on the whole set as one batch
    fa = f.clone().requires_grad_(True)
    (g1, ) = torch.autograd.grad(st.loss(fa), fa)
    fb = f.clone().requires_grad_(True)
    (g2, ) = torch.autograd.grad(tnn_exact(fb, gamma), fb)
    torch.testing.assert_close(g1, g2, rtol=1e-9, atol=1e-12)
    # float features: equal to the full-batch S up to round-off
    g = _features(2, n, d).float()
    st2 = KCRState(d, gamma)
    _fed(st2, g, 30)
    torch.testing.assert_close(st2.s_matrix(), g.double().t() @ g.double() / n, rtol=1e-10,
                               atol=1e-10)
    loss32 = st2.loss(g)
    assert loss32.dtype == torch.float32
    torch.testing.assert_close(loss32.double(), tnn_exact(g.double(), gamma), rtol=1e-4,
                               atol=1e-5)


def test_loss_is_zero_and_flagged_before_the_first_refresh():
    st = KCRState(8, 0.5)
    f = torch.randn(5, 8, requires_grad=True)
    assert not st.ready
    loss = st.loss(f)
    assert float(loss) == 0 and not loss.requires_grad
    st.update(f)
    assert float(st.loss(f)) == 0  # still: V_r comes at the end of the epoch
    assert st.end_epoch()['samples'] == 5 and st.ready
    assert float(st.loss(f).detach()) > 0 and st.loss(f).requires_grad
    # an epoch without any sample changes nothing
    before = st.state_dict()
    assert st.end_epoch() == {'samples': 0.0}
    assert all(torch.equal(v, st.state_dict()[k]) for k, v in before.items())


@pytest.mark.parametrize('n,d,gamma', [(120, 20, 0.2), (90, 30, 0.1), (40, 64, 0.3)])
def test_nystrom_with_all_landmarks_agrees_with_the_exact_route(n, d, gamma):
    f = _features(10 + n, n, d)
    exact = KCRState(d, gamma)
    _fed(exact, f, 32)
    ny = NystromKCR(d, gamma, num_landmarks=n)
    stats = _fed(ny, f, 32)
    assert stats['landmarks'] == n and stats['rank'] == rank_for(gamma, n, d)
    true = _gram_eigvals(f)[rank_for(gamma, n, d):].sum()
    rel = abs(float(ny.tnn()) - float(true)) / float(true)
    assert rel < 1e-3, rel
    assert abs(float(exact.tnn()) - float(true)) / float(true) < 1e-9
    # per-batch terms summed over all the batches (batch means; equal batch sizes)
    terms_ny = torch.stack([ny.loss(f[sl]) for sl in _batches(n, 10)])
    terms_ex = torch.stack([exact.loss(f[sl]) for sl in _batches(n, 10)])
    assert abs(float(terms_ny.sum() - terms_ex.sum())) / float(terms_ex.sum()) < 1e-3
    torch.testing.assert_close(terms_ny, terms_ex, rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(ny.per_sample(f).mean(), true, rtol=1e-6, atol=1e-8)
    # A-KC over h ≤ r from the Ritz values equals KC restricted to h ≤ r
    r = int(ny.rank)
    lam = _gram_eigvals(f).clamp_min(0)
    curve = torch.stack([lam[h:].sum() for h in range(r + 1)])
    akc, h_a = ny.approx_kernel_complexity()
    kc_r, h_r = kernel_complexity_from_tnn(curve, n)
    torch.testing.assert_close(akc, kc_r, rtol=1e-6, atol=1e-9)
    assert h_a == h_r


def test_nystrom_with_fewer_landmarks_overestimates_and_the_raw_formula_goes_negative():
    n, d, gamma = 300, 40, 0.2
    f = _features(0, n, d)
    true = float(tnn_exact(f, gamma))
    ny = NystromKCR(d, gamma, num_landmarks=100, seed=0)
    _fed(ny, f, 64)
    approx = float(ny.tnn())
    # U_r orthonormal: tr(U_rᵀ K_n U_r) ≤ Σ_{i≤r} λ̂_i (Ky Fan), so the estimate is ≥ the TNN
    assert true - 1e-9 <= approx < 1.2 * true
    # the batch terms agree with the total (the extension reproduces U_r's rows)
    total = sum(ny.loss(f[sl]) * (sl.stop - sl.start) for sl in _batches(n, 64)) / n
    torch.testing.assert_close(total, torch.tensor(approx, dtype=torch.float64), rtol=1e-9,
                               atol=1e-9)
    # the seed's Ũ = C Q Λ^{-1/2}, not orthonormalised: a negative "TNN" (method.md §7)
    raw = NystromKCR(d, gamma, num_landmarks=n, orthonormalize=False)
    _fed(raw, f, 64)
    assert float(raw.tnn()) < -1000 < 0 < true


def test_kernel_complexity_matches_its_definition():
    g = torch.Generator().manual_seed(3)
    lam = torch.rand(12, generator=g, dtype=torch.float64).pow(3) * 5
    for n in (5, 12, 40, 1000):
        r0 = min(n, 12)
        srt = lam.sort(descending=True).values[:r0]
        vals = [h / n + math.sqrt(float(srt[h:].sum()) / n) for h in range(r0 + 1)]
        kc, h = kernel_complexity(lam, n)
        assert abs(float(kc) - min(vals)) < 1e-12 and h == vals.index(min(vals))
    # KC never exceeds min(sqrt(tr/n), rank/n)
    kc, _ = kernel_complexity(lam, 1000)
    assert float(kc) <= min(math.sqrt(float(lam.sum()) / 1000), 12 / 1000) + 1e-15


def test_kcr_bounds_from_streaming_statistics():
    n, d, C = 120, 10, 4
    f = _features(4, n, d) / 3
    labels = torch.arange(n) % C
    y = torch.nn.functional.one_hot(labels, C).double()
    st = KCRState(d, 0.3, num_classes=C)
    _fed(st, f, 25, labels=labels)
    torch.testing.assert_close(st.fty, f.t() @ y, rtol=1e-12, atol=1e-12)
    for lr, steps in ((0.1, 0), (0.1, 5), (0.5, 50)):
        direct = gd_residual(f, y, lr, steps)
        stats = gd_residual_from_stats(f.t() @ f / n, f.t() @ y, float(n), n, lr, steps)
        torch.testing.assert_close(stats, direct, rtol=1e-9, atol=1e-9)
        b = st.bounds(lr, steps, x=2.0)
        kc, _ = st.kernel_complexity()
        torch.testing.assert_close(b.upper - b.lower, 2 * (kc + 2.0 / n), rtol=1e-12,
                                   atol=1e-12)
        torch.testing.assert_close((b.upper + b.lower) / 2, direct, rtol=1e-9, atol=1e-9)
    assert float(gd_residual(f, y, 0.1, 0)) == n  # t = 0: ‖Y‖² = n
    with pytest.raises(ValueError, match='num_classes'):
        KCRState(d).bounds(0.1, 1)
    with pytest.raises(ValueError, match='lr'):
        gd_residual(f, y, 0, 1)
    with pytest.raises(ValueError, match='x '):
        kcr_bounds(1.0, 0.1, n, x=0)


def test_state_dict_round_trip_and_fixed_sizes():
    d, gamma, C = 12, 0.25, 3
    sizes = {}
    for n in (50, 500):
        f = _features(n, n, d)
        labels = torch.arange(n) % C
        st = KCRState(d, gamma, num_classes=C)
        ny = NystromKCR(d, gamma, num_landmarks=30)
        _fed(st, f, 25, labels=labels)
        _fed(ny, f, 25)
        st.update(f[:7], labels[:7])  # mid-epoch sums are saved too
        sizes[n] = (st.tensor_sizes(), ny.tensor_sizes())
        st2 = KCRState(d, gamma, num_classes=C)
        st2.load_state_dict(st.state_dict())
        ny2 = NystromKCR(d, gamma, num_landmarks=30)
        ny2.load_state_dict(ny.state_dict())
        for a, b in ((st, st2), (ny, ny2)):
            for k, v in a.state_dict().items():
                assert torch.equal(v, b.state_dict()[k]), k
            probe = f[:9].float()
            assert torch.equal(a.loss(probe), b.loss(probe))
        assert torch.equal(st.tnn(), st2.tnn()) and torch.equal(ny.tnn(), ny2.tnn())
        for s_ in (st, st2):
            s_.update(f[7:20], labels[7:20])
            s_.end_epoch()
        assert torch.equal(st.eigvecs, st2.eigvecs) and int(st.n_last) == 20
    assert sizes[50] == sizes[500]  # memory independent of n
    bad = st.state_dict()
    bad['s_sum'] = torch.zeros(d + 1, d + 1, dtype=torch.float64)
    with pytest.raises(ValueError, match='s_sum has shape'):
        KCRState(d, gamma, num_classes=C).load_state_dict(bad)
    with pytest.raises(KeyError, match='unexpected keys'):
        KCRState(d, gamma).load_state_dict(st.state_dict())  # no num_classes: no fty


def test_bad_inputs_raise_value_errors():
    st = KCRState(8, 0.1, num_classes=3)
    with pytest.raises(ValueError, match='features: feature dimension mismatch'):
        st.update(torch.randn(4, 9))
    with pytest.raises(ValueError, match='features: feature dimension mismatch'):
        st.loss(torch.randn(4, 7))
    with pytest.raises(ValueError, match='features must be a 2-D'):
        st.update(torch.randn(4, 8, 1))
    with pytest.raises(ValueError, match='labels out of range'):
        st.update(torch.randn(4, 8), torch.tensor([0, 1, 2, 3]))
    with pytest.raises(ValueError, match='dim'):
        KCRState(0)
    with pytest.raises(ValueError, match='num_classes'):
        KCRState(8, num_classes=1)
    with pytest.raises(ValueError, match='num_landmarks'):
        NystromKCR(8, num_landmarks=0)
    ny = NystromKCR(8)
    ny.update(torch.randn(4, 8), indices=torch.arange(4))
    with pytest.raises(ValueError, match='indices'):
        ny.update(torch.randn(4, 8), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match='features: feature dimension mismatch'):
        ny.update(torch.randn(4, 3), indices=torch.arange(4))


# ------------------------------------------------------------------------------------------------
# DDP: two gloo processes, each with half the data, give the one-process state
# ------------------------------------------------------------------------------------------------
N_DDP, D_DDP, C_DDP, GAMMA_DDP = 90, 12, 3, 0.25


def _ddp_data():
    f = _features(21, N_DDP, D_DDP, integer=True)
    return f, torch.arange(N_DDP) % C_DDP


def _kcr_states():
    return (KCRState(D_DDP, GAMMA_DDP, num_classes=C_DDP),
            NystromKCR(D_DDP, GAMMA_DDP, num_landmarks=40, seed=3))


def _kcr_ddp_worker(rank, world_size):
    f, labels = _ddp_data()
    st, ny = _kcr_states()
    idx = torch.arange(rank, N_DDP, world_size)
    for epoch in range(2):
        st.begin_epoch()
        ny.begin_epoch()
        for part in idx.split(10):
            st.update(f[part] + epoch, labels[part])
            ny.update(f[part] + epoch, labels[part], indices=part)
        st_stats, ny_stats = st.end_epoch(), ny.end_epoch()
    probe = f[:11].float()
    return {'st': st.state_dict(), 'ny': ny.state_dict(), 'st_stats': st_stats,
            'ny_stats': ny_stats, 'st_loss': st.loss(probe), 'ny_loss': ny.loss(probe)}


def test_ddp_two_processes_equal_one_process():
    results = run_distributed(_kcr_ddp_worker, 2)
    f, labels = _ddp_data()
    st, ny = _kcr_states()
    for epoch in range(2):
        st_stats = _fed(st, f + epoch, 30, labels=labels)
        ny_stats = _fed(ny, f + epoch, 30, indices=torch.arange(N_DDP))
    probe = f[:11].float()
    for res in results:
        assert res['st_stats'] == st_stats and int(st.refreshes) == 2
        for k, v in st.state_dict().items():  # integer features: exact sums in any order
            assert torch.equal(res['st'][k], v), k
        assert torch.equal(res['st_loss'], st.loss(probe))
        assert res['ny_stats'].keys() == ny_stats.keys()
        for k in ny_stats:
            assert math.isclose(res['ny_stats'][k], ny_stats[k], rel_tol=1e-12), k
        for k, v in ny.state_dict().items():
            torch.testing.assert_close(res['ny'][k], v, rtol=1e-10, atol=1e-10, msg=k)
        torch.testing.assert_close(res['ny_loss'], ny.loss(probe), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_states_on_cuda_match_cpu():
    n, d, gamma = 100, 16, 0.25
    f = _features(5, n, d)
    res = []
    for device in ('cpu', 'cuda'):
        st = KCRState(d, gamma, device=device)
        ny = NystromKCR(d, gamma, num_landmarks=n, device=device)
        _fed(st, f.to(device), 25)
        _fed(ny, f.to(device), 25)
        res.append((st.tnn().cpu(), ny.tnn().cpu(), st.loss(f.to(device)).cpu(),
                    ny.loss(f.to(device)).cpu()))
    for a, b in zip(*res):
        torch.testing.assert_close(b, a, rtol=1e-8, atol=1e-8)
