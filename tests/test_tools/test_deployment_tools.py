"""tools/deployment/pytorch2onnx.py and test_onnx.py: a classifier (dynamic batch, checkpoint),
an SSDLite detector with a pruned DCS-MobileViT-XS backbone exported and evaluated in
onnxruntime against PyTorch on the digit scenes, and the one-line errors (exit 2, no file left)
for an op without an ONNX conversion and a missing checkpoint. test_onnx.py and one refusal of
pytorch2onnx.py run as a user runs them (a process: exit code, one error line); the other
exports and refusals call the same ``main`` in this process."""
import json
import os
import os.path as osp

import pytest
import torch

pytest.importorskip('onnx')
pytest.importorskip('onnxruntime')
pytest.importorskip('onnxscript')

from _tools import assert_close_scaled, load_tool, run_main  # noqa: E402 (tests/ is on sys.path)

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
ENV = dict(OMP_NUM_THREADS='1', MKL_NUM_THREADS='1')

CLS_CONFIG = """default_scope = 'mmpretrain'
{imports}
model = dict(
    type='ImageClassifier',
    backbone=dict(type='mmdcs.ViT', arch='deit-tiny', img_size=32{subnet}),
    neck={neck},
    head=dict(type='LinearClsHead', num_classes=10, in_channels=192))
"""

HIST_NECK = '''import torch
import torch.nn as nn
from mmpretrain.registry import MODELS


@MODELS.register_module()
class HistNeck(nn.Module):
    """histc has no ONNX conversion."""

    def forward(self, inputs):
        return tuple(x + torch.histc(x, bins=4).sum() for x in inputs)
'''


def _config(root, name, neck='None', imports='', subnet=''):
    path = osp.join(str(root), f'{name}.py')
    with open(path, 'w') as f:
        f.write(CLS_CONFIG.format(neck=neck, imports=imports, subnet=subnet))
    return path


def _ok(proc, what):
    assert proc.returncode == 0, f'{what} (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n' \
        f'{proc.stderr[-4000:]}'


def _one_error_line(err):
    lines = [ln for ln in err.splitlines() if ln.startswith('error:')]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


def _pytorch2onnx(argv, capsys):
    """tools/deployment/pytorch2onnx.py's ``main(argv)`` in this process (from the repository
    root); returns what it printed."""
    before = os.getcwd()
    os.chdir(ROOT)
    try:
        _tool('pytorch2onnx').main(list(argv))
    finally:
        os.chdir(before)
    return capsys.readouterr().out


def test_classifier_with_checkpoint_dynamic_batch(tmp_path, capsys):
    from mmengine.config import Config

    from mmdcs.apis.subnet_io import build_model, load_task_config
    config = _config(tmp_path, 'deit')
    cfg, scope = load_task_config(config)
    torch.manual_seed(0)
    model = build_model(Config.fromfile(config).model, scope)
    ckpt = str(tmp_path / 'deit.pth')
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, ckpt)
    out = str(tmp_path / 'out' / 'deit.onnx')
    stdout = _pytorch2onnx([config, ckpt, '--out', out, '--dynamic-batch'], capsys)
    assert 'logits' in stdout and 'max abs diff' in stdout
    assert 'ONNX nodes' in stdout and 'MiB' in stdout
    assert os.listdir(osp.dirname(out)) == ['deit.onnx']
    # the file holds the checkpoint's weights: onnxruntime gives its logits at batch 3
    from mmdcs.apis.deploy import OrtModel
    model.eval()
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        ref = model(x, mode='tensor')
    got = OrtModel(out)(x)
    assert got.shape == (3, 10)
    assert float((got - ref).abs().max()) <= 1e-4 * float(ref.abs().max())


def test_unsupported_op_is_one_line_exit_2_and_no_file(tmp_path, run_tool):
    with open(tmp_path / 'hist_neck.py', 'w') as f:
        f.write(HIST_NECK)
    config = _config(tmp_path, 'hist', neck="dict(type='HistNeck')",
                     imports="custom_imports = dict(imports=['hist_neck'], "
                     'allow_failed_imports=False)')
    out = str(tmp_path / 'out' / 'hist.onnx')
    env = dict(ENV, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]))
    proc = run_tool(['tools/deployment/pytorch2onnx.py', config, '--out', out], env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = _one_error_line(proc.stderr)
    assert "module 'neck' (HistNeck)" in line and 'aten::histc' in line, line
    assert 'Traceback' not in proc.stderr
    assert os.listdir(osp.dirname(out)) == []


def test_missing_checkpoint_and_bad_out(tmp_path, capsys):
    config = _config(tmp_path, 'deit')
    code, err = run_main('tools/deployment/pytorch2onnx.py', [
        config, str(tmp_path / 'nope.pth'), '--out', str(tmp_path / 'm.onnx')], capsys)
    assert code == 2 and 'checkpoint not found' in _one_error_line(err)
    code, err = run_main('tools/deployment/pytorch2onnx.py',
                         [config, '--out', str(tmp_path / 'm.pt')], capsys)
    assert code == 2 and '.onnx' in _one_error_line(err)
    assert not [f for f in os.listdir(tmp_path) if 'onnx' in f]


DET_CONFIG = 'configs/demo/ssdlite_dcs-mobilevit-xs_digits-scenes.py'


def _separated_prefix(scores: torch.Tensor, margin: float) -> float:
    """The score threshold above which the candidates' order cannot change when every score
    moves by at most ``margin / 2``: the midpoint of the first gap (from the top) that is wider
    than ``margin`` and above which every gap is wider than ``margin``; inf when even the two
    best candidates are within ``margin`` of each other."""
    s = scores.sort(descending=True).values.double()
    if len(s) < 2:
        return float(s[0]) - margin if len(s) else float('inf')
    close = ((s[:-1] - s[1:]) <= margin).nonzero()
    k = int(close[0]) if len(close) else len(s) - 1  # first gap <= margin: s[k] ~ s[k+1]
    if k == 0:
        return float('inf')
    return float(s[k - 1] + s[k]) / 2


def _compare_raw_and_detections(model, cfg, onnx_path, rel=1e-4, perturb=None):
    """onnxruntime against PyTorch on the config's test set, machine-independently:

    * the raw head tensors (per level class scores and box deltas): max difference <= rel x
      the tensor's magnitude;
    * mmdet's post-processing in Python on PyTorch's raw tensors gives exactly what
      ``model.predict`` gives (same runtime, same numbers: no tolerance);
    * the detections of onnxruntime + post-processing against PyTorch's, only among the best
      candidates whose scores are separated by more than what the tolerance allows: an
      untrained head scores its anchors almost alike, so the last bits of another CPU's or
      runtime's arithmetic reorder near-ties in top-k / NMS (80 px box differences on an AMD
      EPYC), which says nothing about the export. Candidates (all anchors x classes before NMS)
      above a gap wider than the margin keep their order in both runtimes, and so does NMS
      among them: the same detections, scores within the margin, boxes within 1e-3 px.

    ``perturb(i, tensor)``, if given, changes onnxruntime's output ``i`` first (to check that
    the comparison tolerates another machine's rounding and catches a real difference).
    Returns (images, detections compared)."""
    import copy

    from mmengine.registry import DefaultScope
    from mmengine.runner import Runner

    from mmdcs.apis.deploy import ExportWrapper, OrtModel, postprocess, unflatten_outputs
    wrapper = ExportWrapper(model, 'detector')
    ort = OrtModel(onnx_path)
    head = model.bbox_head
    images = compared = 0
    with DefaultScope.overwrite_default_scope('mmdet'):
        loader = Runner.build_dataloader(copy.deepcopy(cfg.test_dataloader))
    for batch in loader:
        with torch.no_grad():
            data = model.data_preprocessor(batch, False)
            inputs, samples = data['inputs'], data['data_samples']
            ref_flat = list(wrapper(inputs))
            predicted = model(inputs, copy.deepcopy(samples), mode='predict')
        got_flat = ort.run_flat(inputs)
        if perturb is not None:
            got_flat = [perturb(i, g) for i, g in enumerate(got_flat)]
        assert len(got_flat) == len(ref_flat)
        # 1. the network: every raw output within rel x its magnitude
        tol = {}
        for i, (g, r) in enumerate(zip(got_flat, ref_flat)):
            assert_close_scaled(g, r, rel, what=f'output {i}')
            tol[i] = rel * (float(r.abs().max()) or 1.)
        ref, got = (unflatten_outputs(f, wrapper.structure) for f in (ref_flat, got_flat))
        n_levels = len(ref[0])
        cls_tol = max(tol[i] for i in range(n_levels))
        # 2. the post-processing in Python is mmdet's predict, bit for bit
        ours = postprocess(model, 'detector', ref, copy.deepcopy(samples))
        for a, b in zip(predicted, ours):
            a, b = a.pred_instances, b.pred_instances
            assert len(a) > 0 and torch.equal(a.labels, b.labels)
            assert torch.equal(a.bboxes, b.bboxes) and torch.equal(a.scores, b.scores)
        # 3. detections among the separated candidates: softmax moves each score by at most
        # 2x the largest logit change, so both runtimes' scores are within 2 * cls_tol; a gap
        # wider than margin = 4 * cls_tol cannot be crossed
        margin = 4 * cls_tol
        metas = [s.metainfo for s in samples]
        with torch.no_grad():
            cands = head.predict_by_feat(*ref, batch_img_metas=metas, rescale=True,
                                         with_nms=False)
        theirs = postprocess(model, 'detector', got, copy.deepcopy(samples))
        for a, b, c in zip(ours, theirs, cands):
            images += 1
            a, b = a.pred_instances, b.pred_instances
            thr = _separated_prefix(c.scores, margin)
            keep_a, keep_b = a.scores > thr, b.scores > thr
            assert int(keep_a.sum()) == int(keep_b.sum()), (thr, a.scores[:5], b.scores[:5])
            assert torch.equal(a.labels[keep_a], b.labels[keep_b])
            assert_close_scaled(b.scores[keep_b], a.scores[keep_a], margin / 2 / max(
                float(a.scores.abs().max()), 1e-12), what='scores')
            if keep_a.any():  # delta tolerance x std 0.2 x anchor <= 80 px: far below 1e-3
                assert float((a.bboxes[keep_a] - b.bboxes[keep_b]).abs().max()) <= 1e-3
            compared += int(keep_a.sum())
    return images, compared


def test_ssdlite_pruned_backbone_onnx_matches_pytorch(tiny_digits, tmp_path, run_tool, capsys):
    """SSDLite with a pruned DCS-MobileViT-XS backbone: exported (dynamic batch), checked, and
    evaluated on the digit scenes in onnxruntime + mmdet's post-processing in Python by
    test_onnx.py; then, in this process, the raw head tensors and the detections that do not
    hinge on near-ties against PyTorch (:func:`_compare_raw_and_detections`)."""
    from mmdcs.analysis.complexity import random_subnet
    from mmdcs.apis.deploy import set_export_mode_
    from mmdcs.apis.subnet_io import build_model, load_model_checkpoint, load_task_config
    spec = random_subnet('MobileViT', 'mobilevit-xs', 'dcs', 0.7, seed=0)
    subnet = str(tmp_path / 'subnet.json')
    spec.save(subnet)
    scenes = osp.join(tiny_digits, 'scenes')
    ann = osp.join(scenes, 'annotations', 'instances_val.json')
    opts = [f'model.backbone.subnet={subnet}', 'model.backbone.init_cfg=None',
            f'test_dataloader.dataset.data_root={scenes}', f'test_evaluator.ann_file={ann}',
            'test_dataloader.num_workers=0', 'test_dataloader.persistent_workers=False',
            'test_dataloader.batch_size=4',
            # an untrained head scores every anchor about alike: keep the few best boxes
            'model.test_cfg.score_thr=0.0', 'model.test_cfg.max_per_img=20']
    cfg, scope = load_task_config(osp.join(ROOT, DET_CONFIG))
    cfg.merge_from_dict({'model.backbone.subnet': subnet, 'model.backbone.init_cfg': None})
    torch.manual_seed(0)
    model = build_model(cfg.model, scope)
    model.init_weights()
    ckpt = str(tmp_path / 'ssd.pth')
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, ckpt)
    out = str(tmp_path / 'ssd.onnx')
    stdout = _pytorch2onnx([DET_CONFIG, ckpt, '--out', out, '--dynamic-batch', '--cfg-options'] +
                           opts, capsys)
    assert 'cls_score0' in stdout and 'bbox_pred3' in stdout
    # the tool evaluates both sides; its metric verdict on an untrained head (mAP ~ 0, its
    # detections decided by near-ties) is not what this test checks: --tolerance 100
    metrics = str(tmp_path / 'metrics.json')
    proc = run_tool(['tools/deployment/test_onnx.py', DET_CONFIG, ckpt, out, '--json', metrics,
                     '--tolerance', '100', '--cfg-options'] + opts, env=ENV)
    _ok(proc, 'test_onnx.py')
    with open(metrics) as f:
        res = json.load(f)
    pred = res['predictions']
    assert res['images'] == 6 and pred['images'] == 6
    assert pred['detections_pytorch'] == pred['detections_onnxruntime'] == 6 * 20
    rows = {r['metric']: r for r in res['rows']}
    assert 0 <= rows['coco/bbox_mAP']['pytorch'] <= 100
    assert 'coco/bbox_mAP' in proc.stdout
    cfg, scope = load_task_config(osp.join(ROOT, DET_CONFIG), _options(opts))
    model = build_model(cfg.model, scope)
    load_model_checkpoint(model, ckpt)
    set_export_mode_(model)
    images, compared = _compare_raw_and_detections(model, cfg, out)
    assert images == 6
    # the comparison of detections is not vacuous: the best-separated ones are compared
    assert compared >= 6, compared
    # another machine's rounding, up to 0.9 x the tolerance on every raw output, passes (it
    # reorders near-ties: detections compared by position differed by 80 px here) ...
    g = torch.Generator().manual_seed(1)
    assert _compare_raw_and_detections(
        model, cfg, out, perturb=lambda i, t: t + 0.9e-4 * float(t.abs().max()) * 2 * (
            torch.rand(t.shape, generator=g) - 0.5))[1] >= 6
    # ... and a real difference (box deltas of one level off by 1 %) fails
    with pytest.raises(AssertionError, match='output 5'):
        _compare_raw_and_detections(model, cfg, out, perturb=lambda i, t: t * 1.01 if i == 5
                                    else t)


def _options(opts):
    """``key=value`` strings as the dict ``--cfg-options`` makes of them."""
    import argparse

    from mmengine.config import DictAction
    parser = argparse.ArgumentParser()
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    return parser.parse_args(['--cfg-options'] + list(opts)).cfg_options


def _tool(name):
    return load_tool(f'tools/deployment/{name}.py')


def test_benchmark_onnx_interleaves_and_reports_the_graph_flops_ratio(tmp_path, capsys):
    """Two small conv nets, the second with half the middle channels: every (threads, batch)
    row has both latencies and the FLOPs ratio of the two graphs (their Conv MACs)."""
    import torch.nn as nn

    from mmdcs.apis.deploy import ExportWrapper, export_and_check
    paths = {}
    for name, mid in (('base', 32), ('pruned', 16)):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Conv2d(3, mid, 3, padding=1), nn.ReLU(),
                            nn.Conv2d(mid, 8, 3, padding=1)).eval()
        paths[name] = str(tmp_path / f'{name}.onnx')
        export_and_check(ExportWrapper(net, 'backbone'), torch.randn(1, 3, 16, 16), paths[name],
                         dynamic_batch=True)
    bench = _tool('benchmark_onnx')
    out = str(tmp_path / 'bench.json')
    rows = bench.main([paths['base'], paths['pruned'], '--batch', '1', '3', '--threads', '1',
                       '--repeats', '3', '--warmup', '1', '--json', out])
    # MACs per pixel: 3·9·mid + mid·9·8
    ratio = (27 * 16 + 16 * 72) / (27 * 32 + 32 * 72)
    assert [(r['threads'], r['batch']) for r in rows] == [(1, 1), (1, 3)]
    for r in rows:
        assert r['base_ms'] > 0 and r['pruned_ms'] > 0
        assert abs(r['flops_ratio'] - ratio) < 1e-9
        assert abs(r['latency_ratio'] - r['pruned_ms'] / r['base_ms']) < 1e-9
    with open(out) as f:
        assert len(json.load(f)['rows']) == 2
    assert 'FLOPs ratio' in capsys.readouterr().out
    # a fixed-batch file cannot be timed at other batches: one clear line, exit 2
    fixed = str(tmp_path / 'fixed.onnx')
    export_and_check(ExportWrapper(nn.Sequential(nn.Conv2d(3, 4, 3)).eval(), 'backbone'),
                     torch.randn(1, 3, 16, 16), fixed)
    with pytest.raises(SystemExit) as e:
        bench.main([fixed, fixed, '--batch', '2'])
    assert e.value.code == 2 and '--dynamic-batch' in capsys.readouterr().err
    # a file that is no ONNX model (empty, random bytes, truncated): one line naming it, exit 2,
    # from the one reader of ONNX files (benchmark_onnx.py, test_onnx.py, the sessions)
    data = open(fixed, 'rb').read()
    broken = {'empty.onnx': b'', 'truncated.onnx': data[:len(data) // 2],
              'random.onnx': bytes(torch.randint(0, 256, (4096, ),
                                                 generator=torch.Generator().manual_seed(0))
                                   .to(torch.uint8).tolist())}
    for name, content in broken.items():
        path = str(tmp_path / name)
        with open(path, 'wb') as f:
            f.write(content)
        with pytest.raises(SystemExit) as e:
            bench.main([path, paths['pruned'], '--batch', '1'])
        err = capsys.readouterr().err
        assert e.value.code == 2 and 'Traceback' not in err and f'error: {path} is not a' in err
        from mmdcs.apis.deploy import ort_session, read_onnx
        from mmdcs.apis.launch import UserError
        for read in (read_onnx, ort_session):
            with pytest.raises(UserError, match=f'{path} is not a'):
                read(path)


def test_metric_comparison_reads_numpy_scalars_and_points():
    """mmseg's metrics are numpy scalars (in %), mmdet's COCO metrics fractions: both compared
    in points; COCO's -1 (no object of a size range) is left out."""
    import numpy as np
    tool = _tool('test_onnx')
    rows = tool.compare(dict(
        pytorch={'mIoU': np.float32(8.37), 'coco/bbox_mAP': 0.0123, 'coco/bbox_mAP_l': -1.0,
                 'name': 'x'},
        onnxruntime={'mIoU': np.float32(8.37), 'coco/bbox_mAP': 0.0133, 'coco/bbox_mAP_l': -1.0,
                     'name': 'x'}))
    by = {r['metric']: r for r in rows}
    assert sorted(by) == ['coco/bbox_mAP', 'mIoU']
    assert by['mIoU']['diff'] == 0 and abs(by['mIoU']['pytorch'] - 8.37) < 1e-5
    assert abs(by['coco/bbox_mAP']['diff'] - 0.1) < 1e-9
