"""Evaluate an exported detector / segmentor in onnxruntime against PyTorch on the config's test
set: the same preprocessed batches go through the PyTorch model (``mode='predict'``) and
through the ONNX model + mmdet's / mmseg's post-processing in Python
(:func:`mmdcs.apis.deploy.postprocess`); the config's test metric of both is printed with
their difference in points.

    python tools/deployment/test_onnx.py CONFIG CHECKPOINT MODEL.onnx [--max-batches N]
        [--tolerance 0.5] [--threads N] [--json out.json] [--force] [--cfg-options k=v ...]

MODEL.onnx is ``tools/deployment/pytorch2onnx.py CONFIG CHECKPOINT --out MODEL.onnx
--dynamic-batch`` (dynamic batch: the test loader's last batch may be smaller). Exit 1 when a
metric differs by more than --tolerance points (mAP ×100, mIoU in %).
"""
import json
import os.path as osp
import sys

try:
    import mmdcs  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from mmdcs.apis.launch import (ToolParser, UserError, add_cfg_options, add_trust_flag,
                               non_negative_float, positive_int, run_program, set_checkpoint_trust,
                               thread_count_or_all, user_errors)
from mmdcs.apis.outputs import add_force_argument, check_output_file, refuse_overwrite, write_text


def parse_args(argv=None):
    p = ToolParser(description='PyTorch vs onnxruntime metric of a detector or '
                                'segmentor on the config\'s test set')
    p.add_argument('config')
    p.add_argument('checkpoint')
    p.add_argument('onnx', help='the exported model (pytorch2onnx.py --dynamic-batch)')
    p.add_argument('--max-batches', type=positive_int, help='evaluate only the first N batches')
    p.add_argument('--tolerance', type=non_negative_float, default=0.5,
                   help='max metric difference in points (default 0.5)')
    p.add_argument('--threads', type=thread_count_or_all,
                   help='onnxruntime intra-op threads (0: all cores)')
    p.add_argument('--json', help='write both metrics to this file')
    add_cfg_options(p)
    add_trust_flag(p)
    add_force_argument(p)
    return p.parse_args(argv)


def points(key: str, value: float) -> float:
    """A metric in points: mmdet's COCO metrics are fractions, mmseg's are percents."""
    return 100. * value if key.startswith('coco/') else value


def compare(metrics: dict) -> list:
    rows = []
    for k, v in metrics['pytorch'].items():
        if k not in metrics['onnxruntime']:
            continue
        try:  # numbers of any kind (mmseg's are numpy scalars)
            v, w = float(v), float(metrics['onnxruntime'][k])
        except (TypeError, ValueError):
            continue
        if v != v or v == -1:  # nan / COCO's -1: no object of that size range
            continue
        rows.append(dict(metric=k, pytorch=points(k, v), onnxruntime=points(k, w),
                         diff=points(k, w) - points(k, v)))
    return rows


def run(args) -> dict:
    from mmdcs.apis.deploy import evaluate_pair, model_kind, read_metadata, set_export_mode_
    from mmdcs.apis.launch import check_data_paths
    from mmdcs.apis.subnet_io import (build_model, load_model_checkpoint, load_task_config,
                                       require_checkpoint, runner_model_cfg)
    check_output_file(args.json, '--json')
    refuse_overwrite([args.json], args.force)
    require_checkpoint(args.config, args.checkpoint)
    if not osp.isfile(args.onnx):
        raise UserError(f'ONNX file not found: {args.onnx}')
    cfg, scope = load_task_config(args.config, args.cfg_options)
    set_checkpoint_trust(args, cfg)
    check_data_paths(cfg, ('test_dataloader', ))
    model = build_model(runner_model_cfg(cfg), scope)
    load_model_checkpoint(model, args.checkpoint)
    set_export_mode_(model)
    kind = model_kind(model)
    # the one reader of ONNX files: a broken file is one line
    exported = read_metadata(args.onnx).get('mmdcs.kind')
    if kind not in ('detector', 'segmentor'):
        raise UserError(f'{args.config}: a {kind}; this tool evaluates detectors and '
                        'segmentors (classifiers: compare tools/test.py outputs)')
    if exported is not None and exported != kind:
        raise UserError(f'{args.onnx} is an exported {exported}, the config builds a {kind}')
    if args.max_batches is not None and args.max_batches < 1:
        raise UserError('--max-batches must be >= 1')
    res = evaluate_pair(cfg, model, args.onnx, args.max_batches, args.threads)
    rows = compare(res)
    print(f'{res["images"]} test images; PyTorch {res["seconds"]["pytorch"]:.1f} s, onnxruntime '
          f'(+ post-processing in Python) {res["seconds"]["onnxruntime"]:.1f} s')
    pred = res['predictions']
    if 'pixels' in pred:
        print(f"predictions: {pred['same_pixels'] / max(pred['pixels'], 1):.4%} of the pixels get "
              'the same class')
    elif 'images' in pred:
        print(f"predictions: the same detections (count and labels, in any order) in "
              f"{pred['identical_images']}/{pred['images']} images; "
              f"{pred['detections_pytorch']} vs {pred['detections_onnxruntime']} detections; max "
              f"box diff (each to the nearest of its label) {pred.get('max_box_diff', 0.):.2e} px, max score diff "
              f"{pred.get('max_score_diff', 0.):.2e}")
    print('| metric | PyTorch | onnxruntime | difference (points) |')
    print('|---|---|---|---|')
    for r in rows:
        print(f"| {r['metric']} | {r['pytorch']:.2f} | {r['onnxruntime']:.2f} | "
              f"{r['diff']:+.2f} |")
    if args.json:
        write_text(args.json, json.dumps(dict(res, rows=rows), indent=1, default=str) + '\n',
                   force=args.force)
    bad = [r for r in rows if abs(r['diff']) > args.tolerance]
    if bad:
        print(f'FAILED: {", ".join(r["metric"] for r in bad)} differ by more than '
              f'{args.tolerance} points', file=sys.stderr)
        sys.exit(1)
    return res


def main(argv=None):
    with user_errors():
        return run(parse_args(argv))


if __name__ == '__main__':
    run_program(main)
