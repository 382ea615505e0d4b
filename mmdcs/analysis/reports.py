"""IB and kernel-complexity reports of a trained classifier over a dataset split (seed 000,
Table 4: IB(W); seed 001, Table 4 / Fig. 1: TNN, KC and the KCR bounds), and the loading
helpers the analysis tools share (a config's model and checkpoint, its test pipeline, images,
dataset batches).

Over the n images of the split, with X̃ the pre-logit features
(``model.head.pre_logits(model.extract_feat(x))``), X the input representation
(:func:`mmdcs.regularizers.input_representation`: 8×8 area average per channel, L2-normalised)
and Y the labels:

* **IB** (METHOD §6, :mod:`mmdcs.regularizers.ib`): C = number of classes clusters for
  X̃ and for X, centroids by seeded k-means (k-means++ then Lloyd) **on this set**,
  φ = soft assignments at scale s; the exact IB(W) = I(X̃;X) − I(X̃;Y) (:func:`ib_exact`), the
  paper's IBB(W) (eq. 2) with the optimal Q of eq. (7) (:func:`optimal_q`, :func:`ibb_full`) and
  its constant term (no gradient in training), the **corrected Theorem 3.1 bound**
  IB ≤ IBB + (1/n) Σ_i H(φ(X_i,·)) ≤ IBB + log C (:func:`ib_upper_bound`; always holds), the
  Lemma D.1 slack (:func:`lemma_d1_slack`, IB ≤ IBB + slack, always, looser), and whether
  IB ≤ IBB (Theorem 3.1 as printed: false in general, see the module docs).
* **KC** (METHOD §7, :mod:`mmdcs.regularizers.kcr`): S = X̃ᵀX̃/n, TNN ‖K‖_r with
  r = ⌈γ·min(n, d)⌉ (γ = 0.1; :func:`tnn_exact`), KC(K) = min_h (h/n + sqrt(Σ_{i>h} λ̂_i / n))
  (:func:`kernel_complexity`) and the KCR lower/upper bounds of seed 001 Theorem 3.1
  (:func:`kcr_bounds`) from the residual ‖(I − ηK_n)^t Y‖_F² of t gradient-descent steps on the
  last linear layer (Y one-hot; default η = 1/λ̂_1, t = 100; "≲" constants taken as 1).

The input centroids depend on the images only (same split, same seed → same centroids), so
reports of several models over the same split compare like with like (baseline vs DCS/KCR).
"""
import os
import os.path as osp
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from torch import Tensor

IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.bmp', '.ppm', '.pgm', '.tif', '.tiff', '.webp')
#: ImageNet mean/std (0-255), used when no config gives a data preprocessor
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)


# ----------------------------------------------------------------------------- loading
def load_classifier(config: str, checkpoint: Optional[str] = None,
                    cfg_options: Optional[dict] = None, device: str = 'cpu'):
    """(model in eval mode, cfg, scope) of a config, with ``checkpoint`` loaded (strict).

    The config's top-level ``data_preprocessor`` is set into the model as mmengine's runner does
    (mean/std normalisation of the inputs).

    ``checkpoint`` None or ``'none'``: random initialisation (``init_weights``), for smoke
    tests. Raises :class:`~mmdcs.apis.launch.UserError` with a clear message when the config or
    checkpoint is missing or does not fit.
    """
    from mmdcs.apis.subnet_io import build_model, load_model_checkpoint, load_task_config
    import copy
    cfg, scope = load_task_config(config, cfg_options)
    model_cfg = copy.deepcopy(cfg.model)
    # as mmengine's Runner: the config's top-level data_preprocessor goes into the model
    if cfg.get('data_preprocessor', None) is not None and isinstance(model_cfg, dict):
        model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor)
    model = build_model(model_cfg, scope)
    if checkpoint in (None, '', 'none', 'None'):
        if hasattr(model, 'init_weights'):
            model.init_weights()
    else:
        load_model_checkpoint(model, checkpoint)
    return model.to(device).eval(), cfg, scope


def _walk_dataset(ds):
    while isinstance(ds, dict) and 'pipeline' not in ds and isinstance(ds.get('dataset'), dict):
        ds = ds['dataset']
    return ds


def dataloader_cfg(cfg, split: str = 'val'):
    """The config's ``<split>_dataloader`` (``test`` falls back to ``val`` and vice versa)."""
    order = {'val': ('val', 'test'), 'test': ('test', 'val'), 'train': ('train', )}
    if split not in order:
        raise ValueError(f'split must be train, val or test, got {split!r}')
    for s in order[split]:
        dl = cfg.get(f'{s}_dataloader', None)
        if isinstance(dl, dict) and isinstance(dl.get('dataset'), dict):
            return dl
    raise ValueError(f'the config has no {split}_dataloader with a dataset')


def test_pipeline_cfg(cfg) -> list:
    """The test (or val) pipeline of a config (the transforms of a deterministic view)."""
    for s in ('test', 'val'):
        dl = cfg.get(f'{s}_dataloader', None)
        ds = _walk_dataset(dl.get('dataset')) if isinstance(dl, dict) else None
        if isinstance(ds, dict) and ds.get('pipeline'):
            return list(ds['pipeline'])
    return []


def build_pipeline(pipeline_cfg: list, scope: str = 'mmpretrain'):
    """An mmengine ``Compose`` of the transforms, built under the task's default scope."""
    from mmengine.dataset import Compose
    from mmengine.registry import DefaultScope
    scope = 'mmpretrain' if scope == 'mmdcs' else scope
    with DefaultScope.overwrite_default_scope(scope):
        return Compose(pipeline_cfg)


def list_images(root: str, limit: Optional[int] = None) -> List[str]:
    """Image files under ``root`` (recursively, sorted), or ``root`` itself if it is a file."""
    if osp.isfile(root):
        return [root]
    if not osp.isdir(root):
        raise FileNotFoundError(f'no such image file or folder: {root}')
    out = []
    for d, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            if f.lower().endswith(IMAGE_EXTENSIONS):
                out.append(osp.join(d, f))
    if not out:
        raise FileNotFoundError(f'no image files ({", ".join(IMAGE_EXTENSIONS)}) under {root}')
    return out[:limit] if limit else out


def _to_display(chw: Tensor, bgr: bool) -> Tensor:
    """(C, H, W) uint8 image → (H, W, 3) uint8 RGB for display."""
    img = chw.detach().cpu()
    if img.dtype != torch.uint8:
        img = img.float()
        lo, hi = float(img.min()), float(img.max())
        img = ((img - lo) / max(hi - lo, 1e-6) * 255).round().to(torch.uint8)
    if img.shape[0] == 1:
        img = img.expand(3, -1, -1)
    elif bgr and img.shape[0] == 3:
        img = img.flip(0)
    return img.permute(1, 2, 0).contiguous()


def load_images(paths: Sequence[str], model: Optional[nn.Module] = None, cfg=None,
                scope: str = 'mmpretrain', size: Optional[Union[int, Tuple[int, int]]] = None
                ) -> Tuple[Tensor, List[Tensor]]:
    """(inputs (B, C, H, W) float, display images [(H, W, 3) uint8 RGB]) of image files.

    With a config: its test pipeline (``LoadImageFromFile`` and whatever resize/crop it has)
    and the model's ``data_preprocessor`` (mean/std, BGR→RGB), so the inputs are exactly what
    the model sees at test time; ``size`` (if given) resizes after the pipeline. Without one:
    RGB, resized to ``size`` (default 224), ImageNet mean/std.
    """
    import numpy as np
    from PIL import Image
    if cfg is not None and model is not None and hasattr(model, 'data_preprocessor'):
        pipe_cfg = test_pipeline_cfg(cfg) or [dict(type='LoadImageFromFile'),
                                              dict(type='PackInputs')]
        pipeline = build_pipeline(pipe_cfg, scope)
        packed = [pipeline(dict(img_path=p)) for p in paths]
        raw = [d['inputs'] for d in packed]
        if size is not None:
            hw = (size, size) if isinstance(size, int) else tuple(size)
            raw = [torch.nn.functional.interpolate(r[None].float(), size=hw, mode='bilinear',
                                                   align_corners=False)[0].round().clamp(
                                                       0, 255).to(torch.uint8) for r in raw]
        dp = model.data_preprocessor
        device = next(model.parameters()).device
        with torch.no_grad():
            data = dp(dict(inputs=[r.to(device) for r in raw],
                           data_samples=[d['data_samples'] for d in packed]), False)
        bgr = bool(getattr(dp, '_channel_conversion', False))
        return data['inputs'], [_to_display(r, bgr) for r in raw]
    hw = (224, 224) if size is None else ((size, size) if isinstance(size, int) else tuple(size))
    mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(3, 1, 1)
    xs, shows = [], []
    for p in paths:
        img = Image.open(p).convert('RGB').resize((hw[1], hw[0]), Image.BILINEAR)
        t = torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1)
        shows.append(t.permute(1, 2, 0).contiguous())
        xs.append((t.float() - mean) / std)
    return torch.stack(xs), shows


def random_images(n: int, size: Union[int, Tuple[int, int]] = 224, seed: int = 0
                  ) -> Tuple[Tensor, List[Tensor]]:
    """n random normalised inputs (smooth noise, so attention maps are not all flat) and their
    display images."""
    hw = (size, size) if isinstance(size, int) else tuple(size)
    g = torch.Generator().manual_seed(seed)
    low = torch.rand(n, 3, max(2, hw[0] // 16), max(2, hw[1] // 16), generator=g)
    img = torch.nn.functional.interpolate(low, size=hw, mode='bilinear', align_corners=False)
    show = [(im.permute(1, 2, 0) * 255).round().to(torch.uint8) for im in img]
    return (img - 0.5) / 0.25, show


def dataset_batches(cfg, model: nn.Module, scope: str = 'mmpretrain', split: str = 'val',
                    max_images: Optional[int] = None, batch_size: int = 32, seed: int = 0,
                    deterministic_pipeline: bool = True
                    ) -> Iterator[Tuple[Tensor, Tensor]]:
    """(inputs, labels) batches of a config's split, preprocessed by the model's
    ``data_preprocessor`` (as the runner does in eval).

    ``max_images``: a seeded random subset of that many images (all if None or larger).
    ``deterministic_pipeline``: the train split uses the test pipeline (no random
    augmentation), so the report describes the data, not one augmentation draw.
    """
    import copy
    from mmengine.dataset import pseudo_collate
    from mmengine.registry import DefaultScope
    from torch.utils.data import DataLoader, Subset
    dl = dataloader_cfg(cfg, split)
    ds_cfg = copy.deepcopy(dl['dataset'])
    if split == 'train' and deterministic_pipeline:
        inner = _walk_dataset(ds_cfg)
        pipe = test_pipeline_cfg(cfg)
        if pipe and isinstance(inner, dict):
            inner['pipeline'] = pipe
    task_scope = 'mmpretrain' if scope == 'mmdcs' else scope
    from mmengine.registry import DATASETS
    with DefaultScope.overwrite_default_scope(task_scope):
        try:
            dataset = DATASETS.build(ds_cfg)
        except (FileNotFoundError, OSError) as e:
            from mmdcs.apis.launch import UserError
            raise UserError(f'the {split} dataset of the config cannot be read: {e}') from e
    n = len(dataset)
    if max_images is not None and max_images < n:
        g = torch.Generator().manual_seed(seed)
        idx = torch.randperm(n, generator=g)[:max_images].sort().values.tolist()
        dataset = Subset(dataset, idx)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=0,
                        collate_fn=pseudo_collate)
    dp = model.data_preprocessor
    device = next(model.parameters()).device
    for data in loader:
        with torch.no_grad():
            data = dp(data, False)
        labels = torch.cat([ds.gt_label for ds in data['data_samples']]).long()
        yield data['inputs'], labels


# ----------------------------------------------------------------------------- extraction
@torch.no_grad()
def extract_features(model: nn.Module, batches: Iterable[Tuple[Tensor, Tensor]]
                     ) -> Tuple[Tensor, Tensor, Tensor]:
    """(features X̃ (n, d) float64, input representations X (n, 192) float64, labels (n,)).

    X̃ = ``model.head.pre_logits(model.extract_feat(x))`` (flattened), X =
    :func:`~mmdcs.regularizers.input_representation` of the preprocessed input, as in
    training.
    """
    from mmdcs.regularizers import input_representation
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
    """The exact IB(W) and the IBB bound over a set (seed 000, 3.3; METHOD §6).

    Centroids: seeded k-means (k = ``num_classes``) on the features and on the input
    representations of this set. Returns ib, i_feat_input, i_feat_label (nats), ibb (eq. 2,
    the paper's IBB), ibb_variational, ibb_constant (the constant term, eq. 2's first term),
    mean_input_entropy ((1/n) Σ_i H(φ(X_i,·))), ib_bound (= ibb + mean_input_entropy, the
    corrected Theorem 3.1 upper bound of IB), ib_bound_log_c (= ibb + log C), lemma_d1_slack,
    ibb_corrected (= ibb + slack, Lemma D.1), bound_holds (IB ≤ IBB, Theorem 3.1 as printed),
    corrected_bound_holds (IB ≤ ib_bound ≤ ib_bound_log_c), lemma_d1_bound_holds, n, clusters,
    s.
    """
    import math

    from mmdcs.regularizers import (ib_exact, ib_upper_bound, ibb_full, kmeans,
                                     lemma_d1_slack, mean_input_entropy, optimal_q,
                                     soft_assign)
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
    """TNN, KC and the KCR bounds of the feature gram (seed 001, 3.2 and Theorem 3.1).

    Returns n, d, gamma, rank (r), trace (tr K_n), tnn (‖K‖_r, exact), tnn_ratio (tnn/trace),
    kc (KC(K)), kc_h (its minimising h), and with labels: lr (η; default 1/λ̂_1, the largest
    step for which gradient descent is stable), steps (t), residual (‖(I−ηK_n)^t Y‖_F², a sum
    over the n samples), residual_per_sample, kcr_lower, kcr_upper (residual ∓ (KC + x/n)).
    """
    from mmdcs.regularizers import (gd_residual_from_stats, kcr_bounds, kernel_complexity,
                                     rank_for, tnn_exact)
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
    from mmdcs.regularizers import input_representation
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
