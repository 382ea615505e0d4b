"""The main job of mmdcs, end to end on the embedded digits data (CPU, 2 cores):

  1. data: build the digits datasets (classification + detection/segmentation scenes);
     latency tables: MobileViT-XS's at 64×64 on this CPU (batch 16, one thread), for DCS's and
     KCR's supernets with hidden-unit selection ``'all'`` (MLP channels × hidden units, the MV2
     blocks' expanded channels); magnitude pruning prunes KCR's network and shares its table;
  2. baseline: train and evaluate a MobileViT-XS classifier;
  3. DCS: search a DCS-MobileViT-XS supernet aimed at a latency target predicted by its table
     (alternating weight/α steps, a Lagrange multiplier, τ decay), export the subnet at that
     predicted latency, measure it against the baseline, retrain it with the IB bound (EMA
     weights), evaluate;
  4. KCR: the same with a KCR supernet and the KCR loss;
  5. magnitude: the baseline to beat, at the same latency target: the trained baseline's MLP
     channels and hidden units ranked by weight norm per unit of predicted latency
     (``export_subnet.py --method magnitude``), retrained on the same schedule (cross-entropy
     only), evaluated;
  6. downstream: fine-tune an SSDLite detector and a Semantic-FPN segmenter on the digit scenes
     with the DCS subnet as backbone (built from the exported file, initialised from the
     retrained classifier), and report their COCO mAP (mmdet's CocoMetric) and mIoU;
  7. print the tables: params, FLOPs, predicted and measured latency ratios, val top-1, the IB /
     kernel-complexity reports; mAP, mIoU.

``--resource flops`` runs the earlier demo instead: every method at the search configs' FLOPs
budget (0.92), MLP channels only.

While a step runs, one line shows where it is (epoch / iteration of that step, elapsed time and
mmengine's ETA). The val top-1 of a run is its last validation (the EMA weights where the config
has EMA, the last epoch's checkpoint: what ``tools/test.py`` gives on the same val set).

Every step is an ordinary command of this repository (printed as it runs), with its log under
--work-dir. Run it with `make demo`, which sets up the environment first.

`--peers` runs the comparison of the methods on one backbone instead (`make demo-peers`):
a DeiT-Tiny baseline, DCS, KCR and magnitude pruning at one FLOPs budget (search -> export ->
retrain), OFB (search -> export -> fine-tune) and DynamicViT (distilled from the baseline), then
a table of params, FLOPs, CPU latency and top-1 of every final model.
"""
import argparse
import contextlib
import json
import math
import os
import os.path as osp
import re
import subprocess
import sys
import time
import warnings

# setuptools' notice about mmengine 0.10.7 importing pkg_resources is not for demo users
warnings.filterwarnings('ignore', message='pkg_resources is deprecated')

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
sys.path.insert(0, ROOT)

from mmdcs.apis.launch import (ToolParser, UserError, non_negative_int, open_ratio, positive_int,
                               run_program, user_errors)  # noqa: E402
from mmdcs.analysis.plots import last_validation  # noqa: E402
from mmdcs.apis.compare import RESOURCES, needs_tables  # noqa: E402
from mmdcs.apis.outputs import check_output_dir  # noqa: E402


#: mmengine's training log lines: "Epoch(train)  [2][10/45] ... eta: 0:01:02" (epoch-based) and
#: "Iter(train) [ 40/300] ... eta: ..." (iteration-based)
_EPOCH_LINE = re.compile(r'Epoch\((train|val|test)\)\s*\[(\d+)\]\s*\[\s*(\d+)/(\d+)\]')
_ITER_LINE = re.compile(r'Iter\((train|val|test)\)\s*\[\s*(\d+)/(\d+)\]')
_ETA = re.compile(r'eta: (?:(\d+) days?, )?(\d+):(\d+):(\d+)')


def _clock(seconds):
    seconds = int(max(0, seconds))
    return f'{seconds // 60}:{seconds % 60:02d}'


class Progress:
    """One line that follows a step's log: epoch / iteration, elapsed, ETA (mmengine's, of the
    training part). Rewritten in place on a terminal, printed every ``every`` s otherwise."""

    def __init__(self, log_path, epochs=None, every=30.):
        self.log_path, self.epochs, self.every = log_path, epochs, every
        self.offset, self.state, self.eta, self.width = 0, '', None, 0
        self.tty = sys.stdout.isatty()
        self.last_print = time.time()

    def _read(self):
        try:
            with open(self.log_path, 'rb') as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return
        data = data[:data.rfind(b'\n') + 1]  # whole lines only; the rest is read next time
        self.offset += len(data)
        for line in data.decode(errors='replace').splitlines():
            m = _EPOCH_LINE.search(line)
            if m:
                phase, epoch, i, n = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
                of = f'/{self.epochs}' if self.epochs else ''
                self.state = (f'epoch {epoch}{of}, iter {i}/{n}' if phase == 'train' else
                              f'epoch {epoch}{of}, validating {i}/{n}')
            else:
                m = _ITER_LINE.search(line)
                if m:
                    phase = m.group(1)
                    self.state = (f'iter {m.group(2)}/{m.group(3)}' if phase == 'train'
                                  else f'validating {m.group(2)}/{m.group(3)}')
            eta = _ETA.search(line)
            if eta and '(train)' in line:
                d, h, m, sec = (int(g or 0) for g in eta.groups())
                self.eta = (((d * 24 + h) * 60 + m) * 60 + sec, time.time())

    def update(self, elapsed):
        self._read()
        text = f'  .. {self.state or "starting"} | {_clock(elapsed)} elapsed'
        if self.eta is not None:
            text += f' | ETA {_clock(self.eta[0] - (time.time() - self.eta[1]))}'
        if self.tty:
            pad = max(0, self.width - len(text))
            sys.stdout.write('\r' + text + ' ' * pad)
            sys.stdout.flush()
            self.width = len(text)
        elif time.time() - self.last_print >= self.every:
            print(text, flush=True)
            self.last_print = time.time()

    def finish(self):
        if self.tty and self.width:
            sys.stdout.write('\r' + ' ' * self.width + '\r')
            sys.stdout.flush()


def run(cmd, log_path, epochs=None):
    """Run one step with its output in a log file, showing its progress on one line; stop with
    the log's tail if it fails."""
    print('$ ' + ' '.join(cmd), flush=True)
    t0 = time.time()
    progress = Progress(log_path, epochs)
    # the step's log, streamed: not through a symlink planted under its name
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666)
    with os.fdopen(fd, 'w') as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            while proc.poll() is None:
                time.sleep(1.)
                progress.update(time.time() - t0)
        finally:
            if proc.poll() is None:
                proc.kill()
            progress.finish()
    if proc.returncode != 0:
        with open(log_path) as f:
            tail = f.read()[-4000:]
        sys.exit(f'demo step failed (exit {proc.returncode}): {" ".join(cmd)}\n'
                 f'--- last lines of {log_path} ---\n{tail}')
    print(f'  done in {time.time() - t0:.0f} s (log: {osp.relpath(log_path, ROOT)})', flush=True)


def last_checkpoint(work_dir):
    with open(osp.join(work_dir, 'last_checkpoint')) as f:
        return f.read().strip()


def last_scalars(work_dir):
    """The last value of every scalar in the run's vis_data/scalars.json."""
    values = {}
    for root, _, files in os.walk(work_dir):
        if 'scalars.json' in files:
            with open(osp.join(root, 'scalars.json')) as f:
                for line in f:
                    values.update(json.loads(line))
    return values


ARCH_LABELS = {'mobilevit-xs': 'MobileViT-XS', 'deit-tiny': 'DeiT-Tiny'}
#: the demo's latency target (of the baseline backbone, predicted by the tables and met as
#: measured, ±0.03): at 64×64 and batch 16 the tables' predicted floors are about 0.5 (measured:
#: the README's "Results at a glance"); at batch 1 they are close to 1 (per-call costs dominate)
DEMO_LATENCY = 0.8
#: the batch the demo's tables are measured at and its subnets timed: the classifier latency
#: column's
DEMO_LATENCY_BATCH = 16
#: how far above the highest floor a target must be (else it is raised, and said)
FLOOR_MARGIN = 0.02


class Demo:

    def __init__(self, args):
        self.args = args
        self.py = sys.executable
        self.work = osp.join(ROOT, args.work_dir)
        os.makedirs(self.work, exist_ok=True)
        self.cls_root = osp.join(args.data, 'cls')
        self.rows = []
        self.downstream_rows = []
        #: row name → (config, cfg-options) of the main table's classifiers, for the latency
        self.models = {}
        self.peer_rows = []
        #: a latency demo's tables (mmdcs.apis.compare.LatencyTables) and target
        self.tables, self.latency_target = None, None
        #: tag → the exported subnet's budget record (FLOPs ratio, latency predicted/measured)
        self.budgets = {}

    def images(self):
        n = self.args.train_images
        return f' on the first {n} training images' if n else ''

    def data_opts(self, epochs):
        root = self.cls_root
        return [f'train_dataloader.dataset.data_root={root}',
                f'val_dataloader.dataset.data_root={root}',
                f'test_dataloader.dataset.data_root={root}', f'train_cfg.max_epochs={epochs}'] + (
                    [f'train_dataloader.dataset.indices={self.args.train_images}']
                    if self.args.train_images else [])

    def train(self, name, config, epochs, extra=()):
        work_dir = osp.join(self.work, name)
        run([self.py, 'tools/train.py', config, '--work-dir', work_dir, '--cfg-options'] +
            self.data_opts(epochs) + list(extra), osp.join(self.work, f'{name}_train.log'),
            epochs)
        return work_dir

    def evaluate(self, name, config, work_dir, extra=()):
        """Val top-1 of the run's last checkpoint: its last validation (after the last epoch,
        with the EMA weights where the config has EMA: what tools/test.py gives on the same val
        set, without a second process); tools/test.py when the log has none."""
        last = last_validation(work_dir)
        if last is not None and last.get('step') == self.args.epochs:
            return last['accuracy/top1']
        metrics_path = osp.join(work_dir, 'test_metrics.json')
        run([self.py, 'tools/test.py', config, last_checkpoint(work_dir), '--work-dir', work_dir,
             '--metrics-out', metrics_path, '--cfg-options'] + self.data_opts(1)[2:3] +
            list(extra), osp.join(self.work, f'{name}_test.log'))
        with open(metrics_path) as f:
            return json.load(f)['accuracy/top1']

    @staticmethod
    def target(search_cfg):
        """The FLOPs budget of a demo search config (``model.cost.target.flops``), which the
        export and the magnitude pruner meet too."""
        from mmengine.config import Config
        return Config.fromfile(osp.join(ROOT, search_cfg)).model.cost.target.flops

    def budget(self, search_cfg):
        """The budget every method meets: the latency target (a latency demo), or the FLOPs
        budget of the demo search config (:meth:`target`)."""
        return self.latency_target if self.tables is not None else self.target(search_cfg)

    @property
    def resource(self):
        return 'latency' if self.tables is not None else 'flops'

    def latency_tables(self, arch='mobilevit-xs', tables=None):
        """The latency tables of ``arch`` at 64×64 on this CPU (batch 16, one thread; kept in
        WORK/latency_tables and read back by a second run) and the demo's latency target:
        ``--target-latency``, raised above every table's predicted floor where it is not.
        ``tables``: a :class:`~mmdcs.apis.compare.LatencyTables` (default: measured here)."""
        from mmdcs.apis.compare import TABLE_VARIANTS, LatencyTables
        from mmdcs.apis.launch import UserError
        print(f'== 1b. latency tables: {ARCH_LABELS[arch]} at 64×64 on this CPU (batch '
              f'{DEMO_LATENCY_BATCH}, 1 '
              'thread), DCS\'s and KCR\'s supernets with hidden-unit selection \'all\' '
              '(magnitude prunes KCR\'s network: the same table)', flush=True)
        self.tables = tables or LatencyTables(
            osp.join(self.work, 'latency_tables'), batch=DEMO_LATENCY_BATCH,
            log=lambda line: None if 'grid point' in line else print('  ' + line, flush=True))
        floors, ceilings = [], []
        try:
            for kind in ('dcs', 'kcr', 'pruned'):
                t0 = time.time()
                path, cost = self.tables.get(arch, kind)
                floor = cost.ratio(cost.floor_at(self.tables.multiple_of))
                full = cost.ratio(cost.ceiling)
                floors.append(floor)
                ceilings.append(min(1., full))
                print(f'  {TABLE_VARIANTS[kind]}: {osp.relpath(path, ROOT)}: predicted floor '
                      f'{floor:.3f}, full width {full:.3f} of the baseline '
                      f'({cost.baseline:.2f} ms; {time.time() - t0:.0f} s)', flush=True)
        except UserError as e:
            sys.exit(f'demo step failed: {e}')
        target = self.args.target_latency
        low = max(floors) + FLOOR_MARGIN
        if target < low:
            target = math.ceil(round(low * 100, 6)) / 100
            print(f'  --target-latency {self.args.target_latency} is below a predicted floor '
                  f'(+{FLOOR_MARGIN}) on this CPU: the demo aims at {target} instead',
                  flush=True)
        if target >= min(ceilings):
            sys.exit(f'demo step failed: no latency target fits every method on this CPU '
                     f'(floors {", ".join(f"{f:.3f}" for f in floors)}, ceilings '
                     f'{", ".join(f"{c:.3f}" for c in ceilings)})')
        self.latency_target = target
        print(f'  every method aims at {target} of the baseline\'s latency', flush=True)

    def export(self, tag, config, checkpoint, target, method='alpha', kind=None,
               cfg_options=None):
        """subnet.json at ``target`` of the baseline FLOPs, or of its latency predicted by the
        table of ``kind`` (then measured against the baseline with the table's clock)
        (:func:`mmdcs.apis.export.export_subnet`, in this process; its report goes to the
        step's log); returns (path, kept channels, channels)."""
        from mmdcs.apis.export import export_subnet
        from mmdcs.apis.launch import UserError
        from mmdcs.selection.budget import LATENCY_REFINE
        subnet_dir = osp.join(self.work, f'{tag}_subnet')
        log_path = osp.join(self.work, f'{tag}_export.log')
        kw = dict(target=('flops', float(target)))
        if self.tables is not None:
            table, _ = self.tables.get('mobilevit-xs', kind)
            kw = dict(target=('latency', float(target)), cost_options=dict(latency_table=table),
                      multiple_of=self.tables.multiple_of, measure=True,  # the table's clock
                      refine=LATENCY_REFINE)  # met as measured (±0.03) or the step fails
        print(f'$ export_subnet({config}, {osp.relpath(checkpoint, ROOT)}, '
              f'target=({self.resource}, {target}), method={method}'
              + (f', latency_table={osp.relpath(table, ROOT)}' if self.tables is not None
                 else '') + (f', cfg_options={cfg_options}' if cfg_options else '') + ')',
              flush=True)
        t0 = time.time()
        # the step's log: not through a symlink planted under its name (as run() writes it);
        # what the libraries print while exporting goes there too
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666)
        with os.fdopen(fd, 'w') as log:
            try:
                with contextlib.redirect_stdout(log):
                    result = export_subnet(osp.join(ROOT, config), checkpoint, subnet_dir,
                                           method=method, cfg_options=cfg_options, **kw)
            except (UserError, ValueError) as e:
                sys.exit(f'demo step failed: the export of {tag}: {e}')
            log.write('\n'.join(result.lines + result.warnings) + '\n')
        print(f'  done in {time.time() - t0:.0f} s (log: {osp.relpath(log_path, ROOT)})',
              flush=True)
        subnet = osp.join(subnet_dir, 'subnet.json')
        with open(subnet) as f:
            spec = json.load(f)
        kept = sum(b['kept'] for b in spec['blocks'])
        total = sum(b['dim'] for b in spec['blocks'])
        budget = spec['meta']['budget']
        achieved = budget['measured']['flops']['ratio']
        hidden = spec.get('hidden', [])
        print(f'  subnet: {kept}/{total} MLP channels kept '
              f'({sum(b["kept"] < b["dim"] for b in spec["blocks"])}/{len(spec["blocks"])} '
              f'blocks pruned)'
              + (f', {sum(b["kept"] for b in hidden)}/{sum(b["dim"] for b in hidden)} hidden '
                 'units' if hidden else '')
              + f', FLOPs {achieved:.3f} of the baseline'
              + (f' (target {target})' if self.tables is None else ''), flush=True)
        record = dict(flops_ratio=achieved)
        if self.tables is not None:
            t = budget['measured']['latency']
            record.update(predicted=budget['achieved_ratio'], measured=t['ratio'])
            tries = budget.get('refine') or []
            print(f"  latency: predicted {budget['achieved_ratio']:.3f} of the baseline (target "
                  f"{target}"
                  + (f", the table asked for {budget['asked_ratio']:.3f} after {len(tries) - 1} "
                     "measured correction(s)" if len(tries) > 1 else '')
                  + f"), measured {t['ratio']:.3f} ({t['pruned_ms']:.2f} / "
                  f"{t['baseline_ms']:.2f} ms, batch {t['batch']}, {t['threads']} thread, "
                  f"{self.tables.clock} clock, median of {t['rounds']} interleaved rounds)",
                  flush=True)
        self.budgets[tag] = record
        return subnet, kept, total

    def complexity(self, config, extra=()):
        """Params and FLOPs (mmengine.analysis) of the config's classifier at 64×64."""
        from mmdcs.analysis.complexity import count_flops, count_params
        from mmdcs.apis.subnet_io import build_model, load_task_config, runner_model_cfg
        cfg, scope = load_task_config(osp.join(ROOT, config),
                                      dict(o.split('=', 1) for o in extra))
        model = build_model(runner_model_cfg(cfg), scope)
        return count_params(model) / 1e6, count_flops(model, (3, 64, 64)) / 1e6

    def baseline(self):
        print('== 2. baseline: MobileViT-XS classifier, trained and evaluated', flush=True)
        cfg = 'configs/demo/mobilevit-xs_digits-cls.py'
        work_dir = self.train('baseline', cfg, self.args.epochs)
        top1 = self.evaluate('baseline', cfg, work_dir)
        params, flops = self.complexity(cfg)
        self.rows.append(('MobileViT-XS (baseline)', params, flops, top1, '—'))
        self.models[self.rows[-1][0]] = (cfg, [])
        return cfg, work_dir

    def method(self, kind, arch='mobilevit-xs', step=None, rows=None):
        """Search -> export -> retrain -> evaluate of DCS or KCR on ``arch`` (demo configs
        ``configs/demo/{kind}-{arch}_{search,retrain}_digits.py``); one row of the table."""
        name = kind.upper()
        label = ARCH_LABELS[arch]
        step = step or (3 if kind == 'dcs' else 4)
        tag = kind if arch == 'mobilevit-xs' else f'{kind}-{arch}'
        print(f'== {step}. {name}-{label}: search -> export -> retrain', flush=True)
        search_cfg = f'configs/demo/{kind}-{arch}_search_digits.py'
        search_opts = []
        if self.tables is not None:
            from mmdcs.apis.compare import budget_options
            search_opts = budget_options(self.latency_target, self.tables, arch, kind)
        search_dir = self.train(f'{tag}_search', search_cfg, self.args.epochs, search_opts)
        scalars = last_scalars(search_dir)
        if 'arch_cost_ratio_kept' in scalars:
            what = 'predicted latency' if self.tables is not None else 'FLOPs'
            print(f"  search ended at {scalars['arch_cost_ratio_kept']:.3f} of the baseline "
                  f'{what} (target {self.budget(search_cfg)}; μ = '
                  f"{scalars.get('arch_cost_mu', float('nan')):.3g})", flush=True)
        model_opts = {}
        if search_opts:  # the export builds the supernet the search trained
            from mmdcs.apis.compare import Runner
            model_opts = Runner._as_dict(search_opts)
        subnet, kept, total = self.export(tag, search_cfg, last_checkpoint(search_dir),
                                          self.budget(search_cfg), kind=kind,
                                          cfg_options=model_opts or None)
        retrain_cfg = f'configs/demo/{kind}-{arch}_retrain_digits.py'
        # CE alone for the first half of the epochs, then CE + η·(IB or KCR) (t_warm, method.md §4)
        opts = [f'model.backbone.subnet={subnet}',
                f'model.regularizer.t_warm={self.args.epochs // 2}']
        retrain_dir = self.train(f'{tag}_retrain', retrain_cfg, self.args.epochs, opts)
        top1 = self.evaluate(f'{tag}_retrain', retrain_cfg, retrain_dir, opts)
        params, flops = self.complexity(retrain_cfg, opts)
        scalars = last_scalars(retrain_dir)
        if kind == 'dcs':
            bound = scalars.get('ib_bound', float('nan'))  # IBB + mean input entropy
            report = (f"IB {scalars['ib_ib']:.3f} (bound {bound:.3f}, "
                      f"IBB {scalars.get('ibb', float('nan')):.3f})"
                      if 'ib_ib' in scalars else 'n/a')
        else:
            report = (f"KC {scalars['kcr_kc']:.4f}, TNN {scalars['kcr_tnn']:.3f}"
                      if 'kcr_kc' in scalars else 'n/a')
        (self.rows if rows is None else rows).append(
            (f'{name}-{label} ({kept}/{total} channels)', params, flops, top1, report))
        self.budgets[(self.rows if rows is None else rows)[-1][0]] = self.budgets.get(tag)
        return retrain_cfg, opts, retrain_dir

    def magnitude(self, base_cfg, base_dir, arch='mobilevit-xs', step=5, rows=None):
        """The baseline to beat: the trained baseline pruned by weight magnitude to the FLOPs
        budget of the DCS/KCR searches, retrained on their schedule (cross-entropy only)."""
        label = ARCH_LABELS[arch]
        tag = 'magnitude' if arch == 'mobilevit-xs' else f'magnitude-{arch}'
        target = self.budget(f'configs/demo/dcs-{arch}_search_digits.py')
        print(f'== {step}. magnitude-pruned {label} (the baseline to beat): export at the same '
              f'{self.resource} budget -> retrain', flush=True)
        hidden = (self.tables.options(arch, 'pruned').get('model.backbone.select_hidden')
                  if self.tables is not None else None)
        subnet, kept, total = self.export(
            tag, base_cfg, last_checkpoint(base_dir), target, 'magnitude', kind='pruned',
            cfg_options={'model.backbone.select_hidden': hidden} if hidden else None)
        retrain_cfg = f'configs/demo/magnitude-{arch}_retrain_digits.py'
        opts = [f'model.backbone.subnet={subnet}']
        retrain_dir = self.train(f'{tag}_retrain', retrain_cfg, self.args.epochs, opts)
        top1 = self.evaluate(f'{tag}_retrain', retrain_cfg, retrain_dir, opts)
        params, flops = self.complexity(retrain_cfg, opts)
        (self.rows if rows is None else rows).append(
            (f'magnitude-{label} ({kept}/{total} channels)', params, flops, top1, '—'))
        self.budgets[(self.rows if rows is None else rows)[-1][0]] = self.budgets.get(tag)
        return retrain_cfg, opts, retrain_dir

    def downstream(self):
        print('== 6. downstream: detection and segmentation with the DCS subnet backbone',
              flush=True)
        subnet = osp.join(self.work, 'dcs_subnet', 'subnet.json')
        pretrained = last_checkpoint(osp.join(self.work, 'dcs_retrain'))
        scenes = osp.join(self.args.data, 'scenes')
        common = [f'model.backbone.subnet={subnet}',
                  f'model.backbone.init_cfg.checkpoint={pretrained}'] + [
            f'{split}_dataloader.dataset.data_root={scenes}'
            for split in ('train', 'val', 'test')]
        ann = osp.join(scenes, 'annotations', 'instances_val.json')
        det, seg = self.args.det_epochs, self.args.seg_iters
        tasks = (
            ('det', 'configs/demo/ssdlite_dcs-mobilevit-xs_digits-scenes.py',
             [f'val_evaluator.ann_file={ann}', f'test_evaluator.ann_file={ann}'] +
             [f'train_cfg.max_epochs={det}', f'param_scheduler.1.T_max={det}',
              f'param_scheduler.1.end={det}'], 'coco/bbox_mAP', f'SSDLite, {det} epochs, bbox mAP'),
            ('seg', 'configs/demo/fcn_dcs-mobilevit-xs_digits-scenes.py',
             [f'train_cfg.max_iters={seg}', f'param_scheduler.1.T_max={seg}',
              f'param_scheduler.1.end={seg}'], 'mIoU', f'Semantic-FPN, {seg} iterations, mIoU'),
        )
        for name, cfg, extra, key, label in tasks:
            work_dir = osp.join(self.work, name)
            opts = common + extra
            run([self.py, 'tools/train.py', cfg, '--work-dir', work_dir, '--cfg-options'] + opts,
                osp.join(self.work, f'{name}_train.log'))
            metrics_path = osp.join(work_dir, 'test_metrics.json')
            run([self.py, 'tools/test.py', cfg, last_checkpoint(work_dir), '--work-dir',
                 work_dir, '--metrics-out', metrics_path, '--cfg-options'] + opts,
                osp.join(self.work, f'{name}_test.log'))
            with open(metrics_path) as f:
                metrics = json.load(f)
            self.downstream_rows.append((label, key, metrics[key], metrics))

    # ------------------------------------------------------------------ peer methods
    def peers(self):
        """DCS, KCR, OFB and DynamicViT on DeiT-Tiny, same data, epochs and weight lr."""
        rows, models = [], {}
        print('== 2. DeiT-Tiny baseline (also the DynamicViT teacher)', flush=True)
        cfg = 'configs/demo/deit-tiny_digits-cls.py'
        base_dir = self.train('deit-tiny_baseline', cfg, self.args.epochs)
        top1 = self.evaluate('deit-tiny_baseline', cfg, base_dir)
        rows.append(('DeiT-Tiny (baseline)', *self.complexity(cfg), top1, '—'))
        models['DeiT-Tiny (baseline)'] = (cfg, [])
        for step, kind in ((3, 'dcs'), (4, 'kcr')):
            cfg, opts, _ = self.method(kind, 'deit-tiny', step, rows)
            models[rows[-1][0]] = (cfg, opts)
        cfg, opts, _ = self.magnitude('configs/demo/deit-tiny_digits-cls.py', base_dir,
                                      'deit-tiny', 5, rows)
        models[rows[-1][0]] = (cfg, opts)

        print('== 6. OFB-DeiT-Tiny: search (bi-masks, PMIM, unit pruning) -> export -> '
              'fine-tune', flush=True)
        search_cfg = 'configs/demo/ofb-deit-tiny_search_digits.py'
        search_dir = self.train('ofb-deit-tiny_search', search_cfg, self.args.epochs)
        export_dir = osp.join(self.work, 'ofb-deit-tiny_export')
        run([self.py, 'tools/ofb_export.py', search_cfg, last_checkpoint(search_dir), '--out',
             export_dir], osp.join(self.work, 'ofb-deit-tiny_export.log'))
        cfg = 'configs/demo/ofb-deit-tiny_finetune_digits.py'
        opts = [f'model.backbone.arch_file={osp.join(export_dir, "arch.json")}',
                f'load_from={osp.join(export_dir, "compact.pth")}']
        ft_dir = self.train('ofb-deit-tiny_finetune', cfg, self.args.epochs, opts)
        top1 = self.evaluate('ofb-deit-tiny_finetune', cfg, ft_dir, opts)
        rows.append(('OFB-DeiT-Tiny (searched widths)', *self.complexity(cfg, opts), top1, '—'))
        models[rows[-1][0]] = (cfg, opts)

        print('== 7. DynamicViT-DeiT-Tiny/0.7: token sparsification, distilled from the '
              'baseline', flush=True)
        cfg = 'configs/demo/dynamicvit-deit-tiny_digits.py'
        opts = [f'model.teacher_checkpoint={last_checkpoint(base_dir)}']
        dyn_dir = self.train('dynamicvit-deit-tiny', cfg, self.args.epochs, opts)
        top1 = self.evaluate('dynamicvit-deit-tiny', cfg, dyn_dir, opts)
        scalars = last_scalars(dyn_dir)
        kept = ', '.join(f'{scalars[k]:.2f}' for k in sorted(scalars) if k.startswith('keep_s'))
        rows.append(('DynamicViT-DeiT-Tiny/0.7', *self.complexity(cfg, opts), top1,
                     f'kept tokens {kept}' if kept else '—'))
        models[rows[-1][0]] = (cfg, opts)
        self.peer_rows = [r + (ms, ) for r, ms in zip(rows, self.latencies(models))]

    def latencies(self, models, batch=16):
        """CPU ms per image of every model (eval, batch 16 at 64×64, 1 thread, interleaved
        rounds, median)."""
        import torch

        from mmdcs.analysis.latency import time_models
        from mmdcs.apis.subnet_io import build_model, load_task_config, runner_model_cfg
        built = {}
        for name, (config, opts) in models.items():
            cfg, scope = load_task_config(osp.join(ROOT, config),
                                          dict(o.split('=', 1) for o in opts))
            built[name] = build_model(runner_model_cfg(cfg), scope).eval()
        x = torch.randn(batch, 3, 64, 64, generator=torch.Generator().manual_seed(0))
        times = time_models(built, x, warmup=3, repeats=15, threads=1)
        return [times[name]['ms_per_image'] for name in models]

    def table(self):
        if self.peer_rows:
            target = self.budget('configs/demo/dcs-deit-tiny_search_digits.py')
            print('\n== DCS, KCR, magnitude pruning (all three at '
                  f'{target} of the baseline FLOPs), OFB and DynamicViT on DeiT-Tiny (digits val '
                  f'set, 64×64, {self.args.epochs} epochs per run{self.images()}; FLOPs by '
                  'mmengine.analysis; '
                  'CPU latency at batch 16, 1 thread, median)')
            print('| model | params (M) | FLOPs (M) | latency (ms/img) | val top-1 (%) | notes |')
            print('|---|---|---|---|---|---|')
            for name, params, flops, top1, note, ms in self.peer_rows:
                print(f'| {name} | {params:.3f} | {flops:.1f} | {ms:.2f} | {top1:.2f} | '
                      f'{note} |')
        if not self.rows:
            return
        target = self.budget('configs/demo/dcs-mobilevit-xs_search_digits.py')
        if self.tables is not None:
            what = (f'{target} of the baseline\'s latency predicted by latency tables measured '
                    f'here (64×64, batch {self.tables.batch}, 1 thread; hidden-unit selection '
                    '\'all\')')
        else:
            what = f'{target} of the baseline FLOPs'
        print('\n== results (digits val set, 64×64, '
              f'{self.args.epochs} epochs per run{self.images()}; FLOPs counted by '
              'mmengine.analysis; DCS, KCR '
              f'and magnitude pruning at {what}, retrained on one schedule)')
        ms = self.latencies(self.models) if self.models else [float('nan')] * len(self.rows)
        lat = self.tables is not None
        print('| model | params (M) | FLOPs (M) | ' + (
            'FLOPs ratio | latency ratio: predicted → measured | ' if lat else '')
            + 'latency (ms/img) | val top-1 (%) | IB / KC (last epoch) |')
        print('|---|---|---|---|---|---|' + ('---|---|' if lat else ''))
        base_flops = self.rows[0][2]
        for (name, params, flops, top1, report), t in zip(self.rows, ms):
            extra = ''
            if lat:
                b = self.budgets.get(name)
                extra = (f'{flops / base_flops:.3f} | '
                         + (f"{b['predicted']:.3f} → {b['measured']:.3f}" if b else '1 → 1')
                         + ' | ')
            print(f'| {name} | {params:.3f} | {flops:.1f} | {extra}{t:.2f} | {top1:.2f} | '
                  f'{report} |')
        if lat:
            clock = self.tables.clock + (' (the thread\'s CPU time, as the tables)'
                                         if self.tables.clock == 'thread' else '')
            print(f'(latency ratio: of the backbone to the baseline backbone, predicted by the '
                  f'table, measured by the export: batch {self.tables.batch}, 1 thread, {clock} '
                  'clock, median of '
                  '21 interleaved rounds)')
        if self.models:
            print('(latency (ms/img): the whole classifier, CPU, eval, batch 16 at 64×64, 1 '
                  'thread, wall clock, median of interleaved rounds)')
        if self.downstream_rows:
            print('\n| downstream (digit scenes, 128×128, DCS-MobileViT-XS subnet backbone) '
                  '| metric | value |')
            print('|---|---|---|')
            for label, key, value, _ in self.downstream_rows:
                shown = f'{value:.3f}' if key.startswith('coco/') else f'{value:.2f}'
                print(f'| {label} | {key} | {shown} |')


def check_demo_data(args):
    """Before any step: ``--data`` holds no digits build made with other arguments than the
    demo's (step 1 would replace it; a complete build with the demo's is reused), and
    ``--train-images`` is not above the training images of that build."""
    from mmdcs.datasets.digits import DataBuildError, build_args, check_build, split_indices
    build = build_args()  # what step 1 builds: tools/data/build_digits.py's defaults
    try:
        check_build(osp.join(ROOT, args.data), build)
    except DataBuildError as e:
        raise UserError(f'--data: {e}') from e
    train = len(split_indices(build['val_ratio'], build['seed'], build['max_per_class'])[0])
    if args.train_images > train:
        raise UserError(f'--train-images {args.train_images}: the digits data has {train} '
                        'training images (0: all of them)')


def parse_args(argv=None):
    parser = ToolParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--work-dir', default='work_dirs/demo')
    parser.add_argument('--data', default='data/digits')
    # the length of the main demo (about 10 min on 2 cores): 3 epochs on the first 1,000
    # of the 1,438 training digits per classification run, 6 SSDLite epochs, 150 FPN iterations;
    # --peers: 4 epochs on all the digits (a DeiT from scratch needs them)
    parser.add_argument('--epochs', type=positive_int, default=None,
                        help='epochs of every classification run (default: 3; --peers: 4)')
    parser.add_argument('--train-images', type=non_negative_int, default=None, metavar='N',
                        help='train the classifiers on the first N training images (0: all; '
                        'default: 1000; --peers: all)')
    parser.add_argument('--det-epochs', type=positive_int, default=6,
                        help='SSDLite epochs (default: %(default)s)')
    parser.add_argument('--seg-iters', type=positive_int, default=150,
                        help='Semantic-FPN iterations (default: %(default)s)')
    parser.add_argument('--peers', action='store_true',
                        help='instead of the main job: compare DCS, KCR, magnitude pruning, OFB '
                        'and DynamicViT on DeiT-Tiny (same data, epochs, weight lr); prints '
                        'params, FLOPs, CPU latency and top-1 of each final model')
    parser.add_argument('--resource', choices=RESOURCES[::-1], default='latency',
                        help='the main demo\'s budget: an equal latency target predicted by '
                        'tables measured here (default), or the search configs\' FLOPs budget')
    parser.add_argument('--target-latency', type=open_ratio, default=DEMO_LATENCY,
                        metavar='R', help='the latency target of every method (default: '
                        '%(default)s; raised above the tables\' predicted floors where needed)')
    parser.add_argument('--quick', action='store_true',
                        help='a smoke run of every step: 1 epoch of each classification run, '
                        '1 detection epoch, 20 segmentation iterations')
    args = parser.parse_args(argv)
    if args.epochs is None:
        args.epochs = 4 if args.peers else 3
    if args.train_images is None:
        args.train_images = 0 if args.peers else 1000
    if args.quick:
        args.epochs, args.det_epochs, args.seg_iters = 1, 1, 20
    return args


def main(argv=None):
    args = parse_args(argv)
    with user_errors():  # before any step: the two directories the demo writes into
        check_output_dir(args.work_dir, '--work-dir')
        check_output_dir(args.data, '--data')
        check_demo_data(args)
    demo = Demo(args)
    t0 = time.time()
    print('== 1. data: the digits datasets (scikit-learn scans, no download)', flush=True)
    run([demo.py, 'tools/data/build_digits.py', '--out', args.data, '--skip-existing'],
        osp.join(demo.work, 'data.log'))
    if args.peers:
        demo.peers()
    else:
        if needs_tables(args.resource):  # a budget on latency tables: measured first
            demo.latency_tables()
        base_cfg, base_dir = demo.baseline()
        for run_step in (lambda: demo.method('dcs'), lambda: demo.method('kcr'),
                         lambda: demo.magnitude(base_cfg, base_dir)):
            config, opts, _ = run_step()
            demo.models[demo.rows[-1][0]] = (config, opts)
        demo.downstream()
    demo.table()
    print(f'\ndemo finished in {(time.time() - t0) / 60:.1f} min; work dirs under {args.work_dir}')


if __name__ == '__main__':
    run_program(main)
