"""The main job of mmdcs, end to end on the embedded digits data (CPU, a few minutes):

  1. build the digits datasets (classification + detection/segmentation scenes) if missing;
  2. train a classifier from an mmdcs config with tools/train.py and evaluate it with
     tools/test.py.

Run it with `make demo` (which sets up the environment first). Every step is an ordinary command
a user could run by hand; they are printed as they run.
"""
import argparse
import json
import os
import os.path as osp
import subprocess
import sys
import time

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))


def run(cmd, log_path):
    """Run one step, its output to a log file; fail loudly with the log's tail."""
    print('$ ' + ' '.join(cmd), flush=True)
    t0 = time.time()
    with open(log_path, 'w') as log:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        with open(log_path) as f:
            tail = f.read()[-4000:]
        sys.exit(f'demo step failed (exit {proc.returncode}): {" ".join(cmd)}\n'
                 f'--- last lines of {log_path} ---\n{tail}')
    print(f'  done in {time.time() - t0:.0f} s (log: {osp.relpath(log_path, ROOT)})', flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--work-dir', default='work_dirs/demo')
    parser.add_argument('--data', default='data/digits')
    parser.add_argument('--epochs', type=int, default=4, help='classifier epochs')
    args = parser.parse_args()
    work = osp.join(ROOT, args.work_dir)
    os.makedirs(work, exist_ok=True)
    py = sys.executable

    print('== 1. data: the digits datasets (scikit-learn scans, no download)')
    run([py, 'tools/data/build_digits.py', '--out', args.data, '--skip-existing'],
        osp.join(work, 'data.log'))

    print('== 2. classifier: train and evaluate')
    cfg = 'configs/demo/mobilevit-xs_digits-cls.py'
    cls_dir = osp.join(work, 'cls')
    data_opts = [f'train_dataloader.dataset.data_root={args.data}/cls',
                 f'val_dataloader.dataset.data_root={args.data}/cls',
                 f'test_dataloader.dataset.data_root={args.data}/cls',
                 f'train_cfg.max_epochs={args.epochs}']
    run([py, 'tools/train.py', cfg, '--work-dir', cls_dir, '--cfg-options'] + data_opts,
        osp.join(work, 'cls_train.log'))
    ckpt = open(osp.join(cls_dir, 'last_checkpoint')).read().strip()
    metrics_path = osp.join(cls_dir, 'test_metrics.json')
    run([py, 'tools/test.py', cfg, ckpt, '--work-dir', cls_dir, '--metrics-out', metrics_path,
         '--cfg-options'] + data_opts[2:3], osp.join(work, 'cls_test.log'))
    metrics = json.load(open(metrics_path))

    print('\n== results')
    print(f'| model | dataset | val top-1 (%) |')
    print(f'|---|---|---|')
    print(f'| MobileViT-XS (baseline) | digits 64x64 | {metrics["accuracy/top1"]:.2f} |')


if __name__ == '__main__':
    main()
