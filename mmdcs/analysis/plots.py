"""Per-epoch curves from mmengine's JSON logs (``<work_dir>/<timestamp>/vis_data/scalars.json``,
one JSON object per line; ``<timestamp>.json`` has the same lines), for one or several runs:

* **IB** (DCS paper, Fig. 8): the exact IB(W) of each epoch (``ib_ib``, logged by
  ``RegularizerHook`` at epoch end), the IBB of the training batches (``ibb``, eq. 2, averaged
  over the epoch) and the corrected Theorem 3.1 bound IBB + (1/B)Σ_i H(φ(X_i,·)) (``ib_bound``),
  I(X̃;X) and I(X̃;Y) (``ib_i_feat_input``, ``ib_i_feat_label``);
* **KC** (KCR paper, Fig. 1): TNN (``kcr_tnn``), KC (``kcr_kc``), the trace of K_n
  (``kcr_trace``) and the KCR loss term (``loss_kcr``);
* **training**: loss, the IB/KCR loss terms, validation top-1/top-5, the search's cost term.

Lines of a log: training iterations carry ``epoch``, ``iter`` and ``step`` (the global
iteration): their values are averaged per epoch; the other lines (validation metrics, the
hook's epoch-end scalars) carry ``step`` = the epoch. A scalar present in epoch-end lines is
taken from those only (mmengine's logger also repeats hook scalars, smoothed, in later
iteration lines). Several timestamp folders of one work dir (a resumed run) are read in time
order; a later value of the same epoch replaces an earlier one.
"""
import glob
import json
import math
import os
import os.path as osp
from collections import OrderedDict, defaultdict
from typing import Dict, List, Optional, Sequence, Tuple

Series = Dict[str, Dict[int, float]]

#: figure → panels: (title, y label, [keys drawn in the panel])
FIGURES: Dict[str, List[Tuple[str, str, List[str]]]] = OrderedDict(
    ib=[
        ('IB(W) = I(X̃;X) − I(X̃;Y) (epoch)', 'IB (nats)', ['ib_ib']),
        ('IBB and the IB bound, training batches (epoch mean)', 'nats', ['ibb', 'ib_bound']),
        ('I(X̃;X) (epoch)', 'nats', ['ib_i_feat_input']),
        ('I(X̃;Y) (epoch)', 'nats', ['ib_i_feat_label']),
    ],
    kc=[
        ('TNN ‖K‖_r (epoch)', 'TNN', ['kcr_tnn']),
        ('KC(K) (epoch)', 'KC', ['kcr_kc']),
        ('tr K_n (epoch)', 'trace', ['kcr_trace']),
        ('KCR loss term (epoch mean)', 'η·KCR', ['loss_kcr']),
    ],
    training=[
        ('training loss (epoch mean)', 'loss', ['loss']),
        ('validation top-1', 'accuracy (%)', ['accuracy/top1']),
        ('IB / KCR loss terms (epoch mean)', 'loss', ['loss_ib', 'loss_kcr']),
        ('search cost term (epoch mean)', 'λ·log cost', ['arch_loss_cost', 'loss_cost']),
        ('validation top-5', 'accuracy (%)', ['accuracy/top5']),
    ],
)
#: legend names of keys drawn together in one panel
KEY_LABELS = {'loss_ib': 'η·IBB, variational part (loss_ib)', 'loss_kcr': 'η·KCR (loss_kcr)',
              'ibb': 'IBB, eq. 2 (ibb; not an upper bound of IB)',
              'ib_bound': 'IBB + (1/B)Σ H(φ(X_i,·)) ≥ IB (ib_bound)',
              'arch_loss_cost': 'arch_loss_cost', 'loss_cost': 'loss_cost'}
_SKIP = {'epoch', 'iter', 'step', 'time', 'data_time', 'memory'}


# ----------------------------------------------------------------------------- reading
def find_logs(path: str) -> List[str]:
    """The JSON log files of a run: ``path`` itself if it is a file, else every
    ``*/vis_data/scalars.json`` under it (a work dir, or one timestamp folder), oldest first."""
    if osp.isfile(path):
        return [path]
    if not osp.isdir(path):
        raise FileNotFoundError(f'no such log file or work dir: {path}')
    found = sorted(set(glob.glob(osp.join(path, '*', 'vis_data', 'scalars.json'))
                       + glob.glob(osp.join(path, 'vis_data', 'scalars.json'))))
    if not found:  # <timestamp>.json files
        found = sorted(glob.glob(osp.join(path, '*', 'vis_data', '*.json'))
                       + glob.glob(osp.join(path, 'vis_data', '*.json')))
        found = [f for f in found if osp.basename(f)[:8].isdigit()]
    if not found:
        raise FileNotFoundError(f'no mmengine JSON log (*/vis_data/scalars.json) under {path}')
    return sorted(found, key=lambda f: (osp.basename(osp.dirname(osp.dirname(f))), f))


def load_records(path: str) -> List[dict]:
    """Every JSON line of the run's logs (oldest folder first); bad lines are skipped."""
    records = []
    for f in find_logs(path):
        with open(f) as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(rec, dict):
                    records.append(rec)
    return records


def last_validation(path: str) -> Optional[dict]:
    """The last line of a run's logs with a val top-1 (``accuracy/top1``; its ``step`` is the
    epoch), the run's logs read oldest first; None when there is none (or no log yet)."""
    try:
        records = load_records(path)
    except FileNotFoundError:
        return None
    found = None
    for rec in records:
        if 'accuracy/top1' in rec:
            found = rec
    return found


def epoch_series(records: Sequence[dict]) -> Series:
    """key → {epoch: value}: iteration lines averaged per epoch, epoch lines as they are
    (preferred for a key that has both)."""
    it_sums: Dict[str, Dict[int, List[float]]] = defaultdict(lambda: defaultdict(list))
    ep_vals: Dict[str, Dict[int, float]] = defaultdict(dict)
    for rec in records:
        is_iter = 'iter' in rec and 'epoch' in rec
        if is_iter:
            epoch = int(rec['epoch'])
        elif 'step' in rec:
            epoch = int(rec['step'])
        elif 'epoch' in rec:
            epoch = int(rec['epoch'])
        else:
            continue
        for k, v in rec.items():
            if k in _SKIP or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            if not math.isfinite(float(v)):
                continue
            if is_iter:
                it_sums[k][epoch].append(float(v))
            else:
                ep_vals[k][epoch] = float(v)
    out: Series = {}
    for k, per in it_sums.items():
        if k not in ep_vals:
            out[k] = {e: sum(v) / len(v) for e, v in sorted(per.items())}
    for k, per in ep_vals.items():
        out[k] = dict(sorted(per.items()))
    return out


def run_t_warm(path: str) -> Optional[int]:
    """``model.regularizer.t_warm`` of the run's saved config (vis_data/config.py), if any."""
    if not osp.isdir(path):
        return None
    configs = sorted(glob.glob(osp.join(path, '*', 'vis_data', 'config.py'))
                     + glob.glob(osp.join(path, 'vis_data', 'config.py')))
    for c in configs[::-1]:
        try:
            from mmengine.config import Config
            reg = Config.fromfile(c).model.get('regularizer', None)
            if reg and reg.get('t_warm') is not None:
                return int(reg['t_warm'])
        except Exception:  # a config that needs other files: no marker, not an error
            continue
    return None


# ----------------------------------------------------------------------------- plotting
def _plt():
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


def plot_panels(runs: Dict[str, Series], panels: Sequence[Tuple[str, str, List[str]]],
                path: str, title: Optional[str] = None,
                t_warm: Optional[Dict[str, Optional[int]]] = None) -> Optional[str]:
    """One PNG with a panel per (title, y label, keys) that some run has data for; one line
    per run (and key), legend = run name; x = epoch. ``t_warm``: run → epoch after which the
    IB/KCR term is on (a dotted line). Returns the path, or None when no panel has data."""
    used = [(t, y, [k for k in keys if any(k in s for s in runs.values())])
            for t, y, keys in panels]
    used = [p for p in used if p[2]]
    if not used:
        return None
    plt = _plt()
    cols = 2 if len(used) > 1 else 1
    rows = math.ceil(len(used) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.0 * cols, 3.9 * rows), squeeze=False)
    colors = plt.rcParams['axes.prop_cycle'].by_key()['color']
    styles = ['-', '--', ':', '-.']
    for i, (ptitle, ylabel, keys) in enumerate(used):
        ax = axes[i // cols][i % cols]
        epochs = set()
        for r, (name, series) in enumerate(runs.items()):
            for j, k in enumerate(keys):
                if k not in series:
                    continue
                xs = list(series[k])
                ys = [series[k][e] for e in xs]
                epochs.update(xs)
                label = name if len(keys) == 1 else f'{name}: {KEY_LABELS.get(k, k)}'
                ax.plot(xs, ys, styles[j % len(styles)], marker='o', markersize=3.5,
                        linewidth=1.8, color=colors[r % len(colors)], label=label)
            tw = (t_warm or {}).get(name)
            if tw is not None and tw > 0:
                ax.axvline(tw + 0.5, color=colors[r % len(colors)], linestyle=':',
                           linewidth=1, alpha=0.8)
        ax.set_title(ptitle, fontsize=11)
        ax.set_xlabel('epoch')
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if epochs:
            lo, hi = min(epochs), max(epochs)
            ax.set_xlim(lo - 0.5 if hi - lo < 4 else lo - 0.02 * (hi - lo),
                        hi + 0.5 if hi - lo < 4 else hi + 0.02 * (hi - lo))
        if epochs and max(epochs) - min(epochs) <= 20:
            ax.set_xticks(range(int(min(epochs)), int(max(epochs)) + 1))
        else:
            ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=8)
    for j in range(len(used), rows * cols):
        axes[j // cols][j % cols].axis('off')
    if title:
        note = ''
        if t_warm and any(v for v in t_warm.values()):
            note = '  (dotted: end of warm-up, t_warm)'
        fig.suptitle(title + note, fontsize=12)
    fig.tight_layout()
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_logs(runs: Dict[str, str], out_dir: str, figures: Sequence[str] = tuple(FIGURES),
              keys: Optional[Sequence[str]] = None, prefix: str = '') -> Dict[str, str]:
    """Read every run (name → work dir or JSON log) and write the figures that have data.

    Args:
        runs: legend name → work dir / log file.
        out_dir: where the PNGs go (``<prefix><figure>.png``).
        figures: among ``'ib'``, ``'kc'``, ``'training'``.
        keys: extra scalars for a ``custom`` figure (one panel each).

    Returns figure name → PNG path (figures without data are left out).
    """
    series = {name: epoch_series(load_records(p)) for name, p in runs.items()}
    warm = {name: run_t_warm(p) for name, p in runs.items()}
    titles = {'ib': 'Information bottleneck (DCS paper, Fig. 8)',
              'kc': 'Kernel complexity (KCR paper, Fig. 1)', 'training': 'Training'}
    out = {}
    for fig in figures:
        if fig not in FIGURES:
            raise ValueError(f'unknown figure {fig!r}; valid: {", ".join(FIGURES)}')
        p = plot_panels(series, FIGURES[fig], osp.join(out_dir, f'{prefix}{fig}.png'),
                        titles[fig], warm)
        if p:
            out[fig] = p
    if keys:
        missing = [k for k in keys if not any(k in s for s in series.values())]
        if missing:
            known = sorted(set().union(*[set(s) for s in series.values()]))
            raise ValueError(f'no scalar {", ".join(missing)} in the logs; found: '
                             f'{", ".join(known)}')
        p = plot_panels(series, [(k, k, [k]) for k in keys],
                        osp.join(out_dir, f'{prefix}custom.png'), 'Scalars', warm)
        out['custom'] = p
    return out


def summary_table(runs: Dict[str, str], keys: Sequence[str] = (
        'loss', 'accuracy/top1', 'ib_ib', 'ibb', 'kcr_tnn', 'kcr_kc')) -> str:
    """Markdown: the last epoch's value of some scalars per run."""
    series = {name: epoch_series(load_records(p)) for name, p in runs.items()}
    keys = [k for k in keys if any(k in s for s in series.values())]
    lines = ['| run | last epoch | ' + ' | '.join(keys) + ' |', '|' + '---|' * (2 + len(keys))]
    for name, s in series.items():
        last = max((max(v) for v in s.values() if v), default=0)
        vals = []
        for k in keys:
            if k in s and s[k]:
                e = max(s[k])
                vals.append(f'{s[k][e]:.4g}')
            else:
                vals.append('—')
        lines.append(f'| {name} | {last} | ' + ' | '.join(vals) + ' |')
    return '\n'.join(lines)
