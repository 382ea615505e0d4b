"""The mmdcs defaults of the retraining terms (method.md §4.3, §6.8, §7.5): the terms see the
L2-normalised features (scale-free; the papers' raw features with ``normalize=False``) and η
rises over ``ramp`` epochs after t_warm instead of a step (``ramp=0``: the papers' step)."""
import math

import pytest
import torch

from mmdcs.regularizers import build_regularizer, eta_ramp, unit_rows

from _tools import assert_close_scaled  # noqa: E402 (tests/ is on sys.path)


def _data(seed=0, n=256, d=12, classes=4, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % classes
    f = torch.randn(n, d, generator=g, dtype=torch.float64) * torch.linspace(3, 0.2, d,
                                                                           dtype=torch.float64)
    f[:, 0] += 2.0 * labels.double()  # classes that differ
    return f * scale, labels


def _filled(cfg, f, labels, d, classes=4, batch=32):
    reg = build_regularizer(cfg, feat_dim=d, num_classes=classes)
    reg.begin_epoch()
    for i in range(0, f.shape[0], batch):
        reg.update(f[i:i + batch], labels[i:i + batch])
    reg.end_epoch()
    return reg


def test_kcr_normalised_term_is_the_hand_computed_tail_share():
    """normalize=True: S = Σ f̂ᵢf̂ᵢᵀ/n of the unit rows, V_r its top-r eigenvectors, and the batch
    term is mean_i ‖(I − V_rV_rᵀ) f̂_i‖² ∈ [0, 1], computed here by hand; normalize=False is the
    same formula on the raw rows (the papers')."""
    f, y = _data()
    d, gamma = f.shape[1], 0.25
    batch = f[:40]
    for normalize in (True, False):
        reg = _filled(dict(type='kcr', gamma=gamma, normalize=normalize), f, y, d)
        rows = f / f.norm(dim=1, keepdim=True) if normalize else f
        s = rows.t() @ rows / rows.shape[0]
        evecs = torch.linalg.eigh(s).eigenvectors.flip(1)
        r = math.ceil(gamma * d)
        v = evecs[:, :r]
        b = batch / batch.norm(dim=1, keepdim=True) if normalize else batch
        expected = (b - b @ v @ v.t()).pow(2).sum(1).mean()
        got = reg.batch_loss(batch, y[:40])['loss']
        assert_close_scaled(got, expected, 1e-9, f'normalize={normalize}')
        if normalize:
            assert 0 <= float(got) <= 1


def _value_and_grad(kind, normalize, scale):
    f, y = _data(scale=scale)
    cfg = dict(type=kind, normalize=normalize)
    if kind == 'ib':
        cfg.update(init_samples=64)
    reg = _filled(cfg, f, y, f.shape[1])
    x = f[:40].clone().requires_grad_(True)
    loss = reg.batch_loss(x, y[:40])['loss']
    loss.backward()
    return float(loss.detach()), float(x.grad.norm())


@pytest.mark.parametrize('kind', ['kcr', 'ib'])
def test_normalised_terms_do_not_depend_on_the_feature_scale(kind):
    """The same features times 10: the normalised term has the same value and a gradient 10
    times smaller (the features are 10 times larger): it sees only their directions."""
    v1, g1 = _value_and_grad(kind, True, 1.0)
    v10, g10 = _value_and_grad(kind, True, 10.0)
    assert_close_scaled(v10, v1, 1e-6, kind)
    assert_close_scaled(g10 * 10, g1, 1e-6, kind)


def test_raw_terms_depend_on_the_feature_scale():
    """The papers' raw features: KCR's term grows as the square of the scale (so the network
    lowers it by shrinking the features), IB's gradient vanishes as the scale grows (at s = 1
    the soft assignments of large features are one-hot: no gradient but at the boundaries)."""
    v1, _ = _value_and_grad('kcr', False, 1.0)
    v10, _ = _value_and_grad('kcr', False, 10.0)
    assert_close_scaled(v10, 100 * v1, 1e-6, 'kcr')
    _, g1 = _value_and_grad('ib', False, 1.0)
    _, g10 = _value_and_grad('ib', False, 10.0)
    assert g1 > 1e-2 and g10 < 1e-12 * g1


def test_normalised_kcr_gradient_has_no_radial_part():
    """With unit rows the term cannot be lowered by shrinking a feature: its gradient with
    respect to each F_i is orthogonal to F_i (the raw term's is not: it pulls ‖F_i‖ down)."""
    f, y = _data()
    for normalize, radial_zero in ((True, True), (False, False)):
        reg = _filled(dict(type='kcr', gamma=0.25, normalize=normalize), f, y, f.shape[1])
        x = f[:40].clone().requires_grad_(True)
        reg.batch_loss(x, y[:40])['loss'].backward()
        radial = (x.grad * x.detach()).sum(1).abs() / (x.grad.norm(dim=1) * x.norm(dim=1))
        if radial_zero:
            assert float(radial.max()) < 1e-9
        else:
            assert float(radial.mean()) > 0.1


def test_unit_rows():
    x = torch.tensor([[3., 4.], [0., 0.], [0., -2.]])
    assert torch.equal(unit_rows(x), torch.tensor([[0.6, 0.8], [0., 0.], [0., -1.]]))
    assert unit_rows(x.half()).dtype == torch.float32


def test_normalize_must_be_a_bool():
    for kind in ('kcr', 'ib'):
        with pytest.raises(ValueError, match='normalize'):
            build_regularizer(dict(type=kind, normalize='yes'), feat_dim=4, num_classes=3)


def test_eta_ramp_schedule():
    """0 before epoch t_warm; then (i − i₀ + 1)/(ramp·iters) up to 1; ramp 0 is the step."""
    per, t_warm = 10, 2
    got = [eta_ramp(i, per, t_warm, 1.0) for i in range(18, 33)]
    assert got == [0, 0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1, 1, 1]
    assert [eta_ramp(i, per, t_warm, 0) for i in (19, 20, 21)] == [0, 1, 1]
    assert eta_ramp(20, per, t_warm, 2.5) == pytest.approx(1 / 25)
    assert eta_ramp(44, per, t_warm, 2.5) == 1.0 and eta_ramp(43, per, t_warm, 2.5) < 1
    # a function of the iteration only: a resumed run at iteration 25 gets what it had
    assert eta_ramp(25, per, t_warm, 1.0) == got[7]
    for bad in (-1, float('nan'), float('inf'), 'x'):
        with pytest.raises(ValueError, match='ramp'):
            eta_ramp(0, per, t_warm, bad)
    with pytest.raises(ValueError, match='iters_per_epoch'):
        eta_ramp(0, 0, t_warm, 1.0)
