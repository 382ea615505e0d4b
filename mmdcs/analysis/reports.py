"""IB and kernel-complexity reports of a trained classifier over a dataset split (DCS paper,
Table 4: IB(W); KCR paper, Table 4 / Fig. 1: TNN, KC and the KCR bounds).

Over the n images of the split, with X̃ the pre-logit features
(``model.head.pre_logits(model.extract_feat(x))``), X the input representation
(:func:`mmdcs.regularizers.input_representation`: 8×8 area average per channel, L2-normalised)
and Y the labels:

* **IB** (method.md §6, :mod:`mmdcs.regularizers.ib`): C = number of classes clusters for
  X̃ and for X, centroids by seeded k-means (k-means++ then Lloyd) **on this set**,
  φ = soft assignments at scale s; the exact IB(W) = I(X̃;X) − I(X̃;Y) (:func:`ib_exact`), the
  paper's IBB(W) (eq. 2) with the optimal Q of eq. (7) (:func:`optimal_q`, :func:`ibb_full`) and
  its constant term (no gradient in training), the **corrected Theorem 3.1 bound**
  IB ≤ IBB + (1/n) Σ_i H(φ(X_i,·)) ≤ IBB + log C (:func:`ib_upper_bound`; always holds), the
  Lemma D.1 slack (:func:`lemma_d1_slack`, IB ≤ IBB + slack, always, looser), and whether
  IB ≤ IBB (Theorem 3.1 as printed: false in general, see the module docs).
* **KC** (method.md §7, :mod:`mmdcs.regularizers.kcr`): S = X̃ᵀX̃/n, TNN ‖K‖_r with
  r = ⌈γ·min(n, d)⌉ (γ = 0.1; :func:`tnn_exact`), KC(K) = min_h (h/n + sqrt(Σ_{i>h} λ̂_i / n))
  (:func:`kernel_complexity`) and the KCR lower/upper bounds of KCR paper Theorem 3.1
  (:func:`kcr_bounds`) from the residual ‖(I − ηK_n)^t Y‖_F² of t gradient-descent steps on the
  last linear layer (Y one-hot; default η = 1/λ̂_1, t = 100; "≲" constants taken as 1).

The input centroids depend on the images only (same split, same seed → same centroids), so
reports of several models over the same split compare like with like (baseline vs DCS/KCR).
Loading a config's classifier and its dataset batches is :mod:`mmdcs.apis.loading`.
"""
import math
from typing import Dict, Iterable, Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from mmdcs.regularizers import (gd_residual_from_stats, ib_exact, ib_upper_bound, ibb_full,
                                input_representation, kcr_bounds, kernel_complexity, kmeans,
                                lemma_d1_slack, mean_input_entropy, optimal_q, rank_for,
                                soft_assign, tnn_exact)


# ----------------------------------------------------------------------------- extraction
@torch.no_grad()
def extract_features(model: nn.Module, batches: Iterable[Tuple[Tensor, Tensor]]
                     ) -> Tuple[Tensor, Tensor, Tensor]:
    """(features X̃ (n, d) float64, input representations X (n, 192) float64, labels (n,)).

    X̃ = ``model.head.pre_logits(model.extract_feat(x))`` (flattened), X =
    :func:`~mmdcs.regularizers.input_representation` of the preprocessed input, as in
    training.
    """
    model.eval()
    feats, reps, labels = [], [], []
    for x, y in batches:
        f = model.head.pre_logits(model.extract_feat(x))
        feats.append(f.flatten(1).double().cpu())
        reps.append(input_representation(x.float()).double().cpu())
        labels.append(y.long().cpu())
    if not feats:
        raise ValueError('no images: the split is empty')
    return torch.cat(feats), torch.cat(reps), torch.cat(labels)


def num_classes_of(model: nn.Module, labels: Optional[Tensor] = None) -> int:
    c = getattr(getattr(model, 'head', None), 'num_classes', None)
    if isinstance(c, int):
        return c
    if labels is not None:
        return int(labels.max()) + 1
    raise ValueError('cannot tell the number of classes (no head.num_classes)')


# ----------------------------------------------------------------------------- the report
def ib_report(features: Tensor, inputs_repr: Tensor, labels: Tensor, num_classes: int,
              s: float = 1.0, kmeans_iters: int = 50, seed: int = 0, q_min: float = 1e-8
              ) -> Dict[str, float]:
    """The exact IB(W) and the IBB bound over a set (DCS paper, 3.3; method.md §6).

    Centroids: seeded k-means (k = ``num_classes``) on the features and on the input
    representations of this set. Returns ib, i_feat_input, i_feat_label (nats), ibb (eq. 2,
    the paper's IBB), ibb_variational, ibb_constant (the constant term, eq. 2's first term),
    mean_input_entropy ((1/n) Σ_i H(φ(X_i,·))), ib_bound (= ibb + mean_input_entropy, the
    corrected Theorem 3.1 upper bound of IB), ib_bound_log_c (= ibb + log C), lemma_d1_slack,
    ibb_corrected (= ibb + slack, Lemma D.1), bound_holds (IB ≤ IBB, Theorem 3.1 as printed),
    corrected_bound_holds (IB ≤ ib_bound ≤ ib_bound_log_c), lemma_d1_bound_holds, n, clusters,
    s.
    """
    n = features.shape[0]
    if n < num_classes:
        raise ValueError(f'the IB report needs at least as many images as classes '
                         f'({num_classes}); got {n}')
    f = features.detach().double()
    x = inputs_repr.detach().double()
    cf = kmeans(f, num_classes, kmeans_iters, torch.Generator().manual_seed(seed + 1))
    cx = kmeans(x, num_classes, kmeans_iters, torch.Generator().manual_seed(seed))
    pf = soft_assign(f, cf, s)
    px = soft_assign(x, cx, s)
    terms = ib_exact(pf, px, labels, num_classes)
    q = optimal_q(pf, labels, num_classes)
    ibb = ibb_full(pf, px, labels, q, q_min)
    slack = lemma_d1_slack(px)
    bound = ib_upper_bound(ibb.ibb, px)
    bound_log_c = float(ibb.ibb) + math.log(num_classes)
    return dict(n=float(n), clusters=float(num_classes), s=float(s), ib=float(terms.ib),
                i_feat_input=float(terms.i_feat_input), i_feat_label=float(terms.i_feat_label),
                ibb=float(ibb.ibb), ibb_variational=float(ibb.variational),
                ibb_constant=float(ibb.constant),
                mean_input_entropy=float(mean_input_entropy(px)), ib_bound=float(bound),
                ib_bound_log_c=bound_log_c, lemma_d1_slack=float(slack),
                ibb_corrected=float(ibb.ibb + slack),
                bound_holds=bool(terms.ib <= ibb.ibb + 1e-12),
                corrected_bound_holds=bool(terms.ib <= bound + 1e-12
                                           and bound <= bound_log_c + 1e-12),
                lemma_d1_bound_holds=bool(terms.ib <= ibb.ibb + slack + 1e-12))


def kc_report(features: Tensor, labels: Optional[Tensor] = None,
              num_classes: Optional[int] = None, gamma: float = 0.1,
              lr: Optional[float] = None, steps: int = 100, x: float = 1.0
              ) -> Dict[str, float]:
    """TNN, KC and the KCR bounds of the feature gram (KCR paper, 3.2 and Theorem 3.1).

    Returns n, d, gamma, rank (r), trace (tr K_n), tnn (‖K‖_r, exact), tnn_ratio (tnn/trace),
    kc (KC(K)), kc_h (its minimising h), and with labels: lr (η; default 1/λ̂_1, the largest
    step for which gradient descent is stable), steps (t), residual (‖(I−ηK_n)^t Y‖_F², a sum
    over the n samples), residual_per_sample, kcr_lower, kcr_upper (residual ∓ (KC + x/n)).
    """
    f = features.detach().double()
    n, d = f.shape
    r = rank_for(gamma, n, d)
    tnn = tnn_exact(f, gamma)
    s = f.t() @ f / n
    evals = torch.linalg.eigvalsh((s + s.t()) / 2).flip(0).clamp_min(0)
    kc, h = kernel_complexity(evals, n)
    trace = float(evals.sum())
    out = dict(n=float(n), d=float(d), gamma=float(gamma), rank=float(r), trace=trace,
               tnn=float(tnn), tnn_ratio=float(tnn) / trace if trace > 0 else 0.,
               kc=float(kc), kc_h=float(h))
    if labels is not None:
        c = num_classes or int(labels.max()) + 1
        y = torch.nn.functional.one_hot(labels.long(), c).double()
        lam_max = float(evals[0])
        eta = lr if lr is not None else (1.0 / lam_max if lam_max > 0 else 1.0)
        residual = gd_residual_from_stats(s, f.t() @ y, float(n), n, eta, steps)
        b = kcr_bounds(residual, kc, n, x)
        out.update(lr=float(eta), steps=float(steps), residual=float(residual),
                   residual_per_sample=float(residual) / n, kcr_lower=float(b.lower),
                   kcr_upper=float(b.upper), x=float(x))
    return out


def classifier_report(model: nn.Module, batches: Iterable[Tuple[Tensor, Tensor]],
                      s: float = 1.0, gamma: float = 0.1, kmeans_iters: int = 50,
                      seed: int = 0, kcr_lr: Optional[float] = None, kcr_steps: int = 100
                      ) -> Dict[str, float]:
    """IB and KC reports of one classifier over the (inputs, labels) batches, plus its top-1
    accuracy on them (``accuracy``, %)."""
    feats, reps, labels = [], [], []
    correct = 0
    model.eval()
    with torch.no_grad():
        for x, y in batches:
            h = model.extract_feat(x)
            f = model.head.pre_logits(h)
            logits = model.head(h)
            correct += int((logits.argmax(-1).cpu() == y.cpu()).sum())
            feats.append(f.flatten(1).double().cpu())
            reps.append(input_representation(x.float()).double().cpu())
            labels.append(y.long().cpu())
    if not feats:
        raise ValueError('no images: the split is empty')
    f, r, y = torch.cat(feats), torch.cat(reps), torch.cat(labels)
    c = num_classes_of(model, y)
    out = dict(accuracy=100. * correct / len(y))
    out.update({f'ib/{k}': v for k, v in ib_report(f, r, y, c, s, kmeans_iters, seed).items()})
    out.update({f'kc/{k}': v for k, v in kc_report(f, y, c, gamma, kcr_lr, kcr_steps).items()})
    return out


#: (key, label) of the rows of :func:`format_report`
REPORT_ROWS = (
    ('accuracy', 'top-1 on these images (%)'),
    ('ib/n', 'images n'),
    ('ib/ib', 'IB(W) = I(X̃;X) − I(X̃;Y) (nats)'),
    ('ib/i_feat_input', 'I(X̃;X)'),
    ('ib/i_feat_label', 'I(X̃;Y)'),
    ('ib/ibb', 'IBB (eq. 2, optimal Q)'),
    ('ib/ibb_constant', '  its constant term = −(1/n)Σ H(φ(X_i,·))'),
    ('ib/ibb_variational', '  its variational term'),
    ('ib/ib_bound', 'IB bound, corrected Thm 3.1: IBB + (1/n)Σ H(φ(X_i,·))'),
    ('ib/ib_bound_log_c', 'IBB + log C (≥ the corrected bound)'),
    ('ib/corrected_bound_holds', 'IB ≤ IBB + (1/n)Σ H(φ(X_i,·)) ≤ IBB + log C'),
    ('ib/lemma_d1_slack', 'Lemma D.1 slack'),
    ('ib/lemma_d1_bound_holds', 'IB ≤ IBB + Lemma D.1 slack'),
    ('ib/bound_holds', 'IB ≤ IBB (Thm 3.1 as printed; false in general)'),
    ('kc/d', 'feature dim d'),
    ('kc/rank', 'rank r = ⌈γ·min(n,d)⌉'),
    ('kc/trace', 'tr K_n'),
    ('kc/tnn', 'TNN ‖K‖_r'),
    ('kc/tnn_ratio', 'TNN / tr K_n'),
    ('kc/kc', 'KC(K)'),
    ('kc/kc_h', '  argmin h'),
    ('kc/lr', 'GD step η'),
    ('kc/steps', 'GD steps t'),
    ('kc/residual', '‖(I−ηK_n)^t Y‖²_F'),
    ('kc/kcr_lower', 'KCR lower bound'),
    ('kc/kcr_upper', 'KCR upper bound'),
)


def _fmt_value(v) -> str:
    if isinstance(v, bool):
        return 'yes' if v else 'NO'
    if v is None:
        return '—'
    if float(v).is_integer() and abs(v) < 1e9:
        return f'{int(v)}'
    return f'{v:.4g}'


def format_report(reports: Dict[str, Dict[str, float]]) -> str:
    """Markdown table: one row per quantity, one column per model (name → report)."""
    names = list(reports)
    lines = ['| quantity | ' + ' | '.join(names) + ' |', '|' + '---|' * (len(names) + 1)]
    for key, label in REPORT_ROWS:
        if not any(key in r for r in reports.values()):
            continue
        lines.append(f'| {label} | ' + ' | '.join(_fmt_value(reports[n].get(key))
                                                 for n in names) + ' |')
    first = next(iter(reports.values()))
    lines.append('')
    lines.append(
        f'IB: {int(first.get("ib/clusters", 0))} clusters (= classes) for X̃ and for X, '
        f'k-means on this set, φ scale s = {first.get("ib/s", 1):g}; X = 8×8 area-averaged '
        'input, L2-normalised. IBB = eq. (2) of the DCS paper with the Q of eq. (7), '
        'mean_i [Σ_b φ(X_i,b) log φ(X_i,b) − Σ_a φ(X̃_i,a) log Q(a|y_i)]; Theorem 3.1 as printed '
        '(IB ≤ IBB) is false in general, the corrected bound is IB ≤ IBB + (1/n)Σ_i H(φ(X_i,·)) '
        '≤ IBB + log C. KC: S = X̃ᵀX̃/n (exact eigenvalues), '
        f'γ = {first.get("kc/gamma", 0.1):g}; KCR bounds = residual ∓ (KC + x/n) with '
        'the "≲" constants taken as 1 (shapes of the bounds, not certified numbers).')
    return '\n'.join(lines)
