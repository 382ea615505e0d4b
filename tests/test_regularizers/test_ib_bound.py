"""Theorem 3.1 of the DCS paper, corrected: IB ≤ IBB + (1/n) Σ_i H(φ(X_i,·)) ≤ IBB + log C holds
for every Q and every set of samples, where IB ≤ IBB (as printed) fails — at s = 1 and at s = 20
too; the training logs and the reports carry the corrected bound, labelled."""
import math

import pytest
import torch
import torch.nn.functional as F

from mmdcs.regularizers import (IBRegularizer, ib_exact, ib_upper_bound, ibb_full,
                                 input_representation, mean_input_entropy, optimal_q,
                                 soft_assign)

C = 4


def _equidistant_problem(s, n=120, seed=0):
    """Inputs equidistant from every input centroid (φ(X_i,·) uniform whatever s) and every
    feature at one centroid (H(X̃|X) ≈ 0): IBB − IB ≈ −log C at every scale."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, C, (n, ), generator=g)
    cx = torch.eye(C, dtype=torch.float64)  # inputs at the origin: equidistant
    x = torch.zeros(n, C, dtype=torch.float64) + 1e-3 * torch.randn(n, C, generator=g,
                                                                     dtype=torch.float64)
    cf = 3 * torch.eye(C, dtype=torch.float64)
    f = cf[0].expand(n, -1) + 1e-3 * torch.randn(n, C, generator=g, dtype=torch.float64)
    return soft_assign(f, cf, s), soft_assign(x, cx, s), labels


def _random_problem(s, n=150, seed=0):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, C, (n, ), generator=g)
    f = torch.randn(n, 8, generator=g, dtype=torch.float64) + labels[:, None].double()
    x = F.normalize(torch.randn(n, 12, generator=g, dtype=torch.float64), dim=1)
    cf = f[torch.randperm(n, generator=g)[:C]]
    cx = x[torch.randperm(n, generator=g)[:C]]
    return soft_assign(f, cf, s), soft_assign(x, cx, s), labels


def _random_q(seed):
    q = -torch.rand(C, C, generator=torch.Generator().manual_seed(seed),
                    dtype=torch.float64).log()
    return q / q.sum(1, keepdim=True)


@pytest.mark.parametrize('s', [0.1, 1.0, 5.0, 20.0])
def test_theorem_as_printed_fails_and_the_corrected_bound_holds(s):
    pf, px, y = _equidistant_problem(s)
    ib = ib_exact(pf, px, y, C).ib
    ibb = ibb_full(pf, px, y, optimal_q(pf, y, C), q_min=1e-300).ibb
    assert ib > ibb + 0.3, (float(ib), float(ibb))  # Theorem 3.1 as printed: false here
    bound = ib_upper_bound(ibb, px)
    assert ib <= bound + 1e-9
    assert bound <= ibb + math.log(C) + 1e-9
    assert float(mean_input_entropy(px)) == pytest.approx(math.log(C), abs=1e-2)


@pytest.mark.parametrize('s', [0.1, 1.0, 5.0, 20.0])
@pytest.mark.parametrize('seed', [0, 1, 2])
def test_corrected_bound_holds_for_every_q(s, seed):
    pf, px, y = _random_problem(s, seed=seed)
    ib = ib_exact(pf, px, y, C).ib
    for q in [optimal_q(pf, y, C), _random_q(seed), _random_q(seed + 7)]:
        ibb = ibb_full(pf, px, y, q, q_min=1e-300).ibb
        bound = ib_upper_bound(ibb, px)
        assert ib <= bound + 1e-9
        assert bound <= ibb + math.log(C) + 1e-9
        # the corrected bound is the variational term of eq. (2) (its constant term removed)
        v = ibb_full(pf, px, y, q, q_min=1e-300).variational
        assert float(bound) == pytest.approx(float(v), abs=1e-9)


def _ready_regularizer(seed=0, n=48):
    g = torch.Generator().manual_seed(seed)
    reg = IBRegularizer(feat_dim=6, num_classes=C, init_samples=n, s=20.0, normalize=False)
    images = torch.rand(n, 3, 8, 8, generator=g)
    labels = torch.arange(n) % C
    feats = torch.randn(n, 6, generator=g) + 2 * F.one_hot(labels, 6).float()
    reg.state.init_input_centroids(input_representation(images))
    reg.state.begin_epoch()
    reg.update(feats, labels, images)
    reg.state.end_epoch()
    assert reg.state.ready
    return reg, feats, labels, images


def test_training_logs_label_the_corrected_bound_of_the_batch():
    reg, feats, labels, images = _ready_regularizer()
    terms = reg.batch_loss(feats[:16], labels[:16], images[:16])
    assert {'loss', 'ibb', 'ibb_const', 'ib_bound'} <= set(terms)
    assert not terms['ib_bound'].requires_grad
    # ib_bound = IBB_j + (1/B) Σ_i H(φ(X_i,·)) = ibb − ibb_const
    assert float(terms['ib_bound']) == pytest.approx(
        float(terms['ibb'] - terms['ibb_const']), abs=1e-5)
    # ... an upper bound of the batch's own IB (with the state's centroids), ≤ IBB_j + log C
    pf, px = reg.state.assignments(feats[:16], input_representation(images[:16]))
    ib = ib_exact(pf, px, labels[:16], C).ib
    assert float(ib) <= float(terms['ib_bound']) + 1e-5
    assert float(terms['ib_bound']) <= float(terms['ibb']) + math.log(C) + 1e-5


def test_report_labels_the_corrected_bound():
    from mmdcs.analysis.reports import format_report, ib_report
    g = torch.Generator().manual_seed(3)
    y = torch.arange(80) % C
    feats = torch.randn(80, 6, generator=g, dtype=torch.float64) + F.one_hot(y, 6).double()
    reps = input_representation(torch.rand(80, 3, 16, 16, generator=g)).double()
    rep = ib_report(feats, reps, y, C, s=1.0)
    assert rep['ib_bound'] == pytest.approx(rep['ibb'] + rep['mean_input_entropy'], abs=1e-9)
    assert rep['ib_bound_log_c'] == pytest.approx(rep['ibb'] + math.log(C), abs=1e-9)
    assert rep['ib'] <= rep['ib_bound'] + 1e-9 and rep['corrected_bound_holds']
    text = format_report({'m': {f'ib/{k}': v for k, v in rep.items()}})
    assert 'IBB + (1/n)Σ H(φ(X_i,·))' in text and 'Thm 3.1 as printed' in text
    assert 'IBB = eq. (2)' in text
