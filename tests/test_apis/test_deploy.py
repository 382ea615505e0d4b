"""ONNX export + onnxruntime parity (mmdcs/apis/deploy.py) of a baseline and a pruned subnet of
each family (tiny inputs), the pruned graph's narrow weights and MACs, outputs of nested
structure, and the clear error (naming the module) for an op without an ONNX conversion."""
import os
import os.path as osp

import pytest
import torch
import torch.nn as nn

pytest.importorskip('onnx')
pytest.importorskip('onnxruntime')
pytest.importorskip('onnxscript')

from mmdcs.analysis.latency import build_pair  # noqa: E402
from mmdcs.apis.deploy import (ExportError, ExportWrapper, OrtModel, ParityError,  # noqa: E402
                               export_and_check, flatten_outputs, onnx_macs,
                               set_export_mode_, unflatten_outputs)
from mmdcs.selection.mlp import PrunedMLP  # noqa: E402

#: one arch per family at a tiny input (export time is set by the graph, not the input)
FAMILIES = [('deit-tiny', 32), ('swin-t', 32), ('mobilevit-xs', 64), ('efficientvit-b0', 32)]

_PAIRS = {}


def _pair(arch, size):
    """(baseline, pruned subnet keeping 60% of every block, spec), built once per arch."""
    if arch not in _PAIRS:
        torch.manual_seed(0)
        _PAIRS[arch] = build_pair(arch, 0.6, input_size=(size, size), seed=0)
    return _PAIRS[arch]


def _weight_shapes(path):
    """Name → shape of every initializer of an ONNX file (the dynamo exporter names them after
    the parameters, here with the wrapper's ``net.`` prefix)."""
    import onnx
    return {i.name: tuple(i.dims) for i in onnx.load(path).graph.initializer}


def _assert_narrow(model, path):
    """Every pruned layer reads / writes only its kept channels in the ONNX graph: its weights
    there are the sliced ones (no zero-padded full-width matmul / conv)."""
    shapes = _weight_shapes(path)
    checked = 0
    for name, m in model.named_modules():
        if isinstance(m, PrunedMLP):
            assert m.kept < m.in_features, name
            hidden = m.fc1.out_features
            assert shapes[f'net.{name}.fc1.weight'] == (hidden, m.kept), name
            assert shapes[f'net.{name}.fc2.weight'] == (m.kept, hidden), name
            checked += 1
        elif getattr(m, 'keep', None) is not None and hasattr(m, 'cat_dim'):  # EfficientViT
            assert m.kept < m.cat_dim, name
            out = m.proj.conv.out_channels
            assert shapes[f'net.{name}.proj.conv.weight'] == (out, m.kept, 1, 1), name
            checked += 1
        elif getattr(m, 'proj_keep', None) is not None:  # MobileViT's projection conv
            conv = m.conv_proj.conv
            assert shapes[f'net.{name}.conv_proj.conv.weight'] == (
                conv.out_channels, m.proj_keep.numel(), 1, 1), name
            checked += 1
    assert checked > 0


@pytest.fixture(scope='module')
def exported(tmp_path_factory):
    """``exported(arch, size, form)``: (model, input, ONNX path, export_and_check's result) of
    the baseline or the pruned subnet, exported once per module run, each file alone in its
    folder. DeiT-Tiny's pair is exported with a dynamic batch: the MACs test reads the same
    files at two batches."""
    cache = {}

    def export(arch, size, form):
        if (arch, form) not in cache:
            base, sub, spec = _pair(arch, size)
            model = set_export_mode_(base if form == 'baseline' else sub)
            g = torch.Generator().manual_seed(1)
            x = torch.randn((1, 3, size, size), generator=g)
            out = str(tmp_path_factory.mktemp(f'{arch}_{form}') / f'{arch}_{form}.onnx')
            res = export_and_check(ExportWrapper(model, 'backbone'), x, out,
                                   dynamic_batch=arch == 'deit-tiny')
            cache[arch, form] = model, x, out, res
        return cache[arch, form]

    return export


@pytest.mark.parametrize('form', ['baseline', 'pruned'])
@pytest.mark.parametrize('arch,size', FAMILIES)
def test_backbone_export_parity(exported, arch, size, form):
    model, x, out, res = exported(arch, size, form)
    assert (model.subnet_spec is None) == (form == 'baseline')
    assert osp.isfile(out) and os.listdir(osp.dirname(out)) == [osp.basename(out)]
    with torch.no_grad():
        ref = model(x)
    assert len(res['parity']) == len(ref) and all(r['ok'] for r in res['parity'])
    # the check itself: onnxruntime's outputs, read back independently, are PyTorch's
    got = OrtModel(out)(x)
    for r, o in zip(ref, got):
        assert r.shape == o.shape
        assert float((r - o).abs().max()) <= 1e-4 * float(r.abs().max())
    assert res['summary']['nodes'] > 10 and res['summary']['bytes'] > 0
    if form == 'pruned':
        _assert_narrow(model, out)


def test_pruned_vit_graph_macs_drop_by_exactly_the_pruned_channels(exported):
    """The MatMul/Gemm MACs onnxruntime computes for the pruned ViT are the baseline's minus
    2·N·hidden per pruned channel of every MLP (fc1 reads D̃, fc2 writes D̃); a graph with
    full-width (zero-padded) linear layers would not drop at all."""
    base, sub, spec = _pair('deit-tiny', 32)
    paths = {name: exported('deit-tiny', 32, form)[2]
             for name, form in (('base', 'baseline'), ('sub', 'pruned'))}
    tokens = 1 + (32 // 16)**2
    hidden = base.mlp_hidden
    pruned = sum(b.dim - b.kept for b in spec.blocks)
    assert pruned > 0
    mb, ms = onnx_macs(paths['base']), onnx_macs(paths['sub'])
    assert mb['total'] - ms['total'] == 2 * tokens * hidden * pruned
    # per image, whatever the batch the graph runs at
    assert onnx_macs(paths['sub'], batch=3)['total'] == ms['total']


def test_flatten_roundtrip():
    t = [torch.zeros(1), torch.ones(2), torch.full((3, ), 2.)]
    nested = ([t[0], t[1]], [t[2]])
    flat, struct = flatten_outputs(nested)
    assert [f.numel() for f in flat] == [1, 2, 3]
    back = unflatten_outputs(flat, struct)
    assert [len(b) for b in back] == [2, 1] and back[1][0] is t[2]
    with pytest.raises(ExportError, match='only tensors'):
        flatten_outputs({'a': t[0]})


class _HistNeck(nn.Module):
    """A neck with an op that has no ONNX conversion (histc)."""

    def forward(self, x):
        return x + torch.histc(x, bins=4).sum()


class _Net(nn.Module):

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.neck = _HistNeck()

    def forward(self, x):
        return self.neck(self.conv(x))


def test_unsupported_op_names_the_module_and_leaves_no_file(tmp_path):
    out = str(tmp_path / 'net.onnx')
    with pytest.raises(ExportError) as e:
        export_and_check(ExportWrapper(_Net().eval(), 'backbone'), torch.randn(1, 3, 8, 8), out)
    msg = str(e.value)
    assert "module 'neck' (_HistNeck)" in msg and 'aten::histc' in msg, msg
    assert '\n' not in msg
    assert os.listdir(tmp_path) == []


def test_parity_failure_keeps_no_file_under_the_name(tmp_path, monkeypatch):
    """A model whose onnxruntime output differs (simulated) is not left under --out."""
    import mmdcs.apis.deploy as deploy
    real = deploy.OrtModel.run_flat

    def off(self, images):
        return [o + 1. for o in real(self, images)]

    monkeypatch.setattr(deploy.OrtModel, 'run_flat', off)
    net = nn.Sequential(nn.Conv2d(3, 4, 3)).eval()
    out = str(tmp_path / 'net.onnx')
    with pytest.raises(ParityError, match='max abs diff'):
        export_and_check(ExportWrapper(net, 'backbone'), torch.randn(1, 3, 8, 8), out)
    assert sorted(os.listdir(tmp_path)) == ['net.onnx.parity-failed']


def test_detection_agreement_does_not_depend_on_the_order_of_near_tied_detections():
    """Two runtimes may sort near-tied detections differently: the agreement pairs each
    detection with the nearest of its label, so a reordering is no difference, a moved box is."""
    import torch
    from mmdet.structures import DetDataSample
    from mmengine.structures import InstanceData

    from mmdcs.apis.deploy import compare_predictions

    def sample(boxes, scores, labels):
        s = DetDataSample()
        s.pred_instances = InstanceData(bboxes=torch.tensor(boxes, dtype=torch.float32),
                                        scores=torch.tensor(scores), labels=torch.tensor(labels))
        return s

    boxes = [[0., 0., 10., 10.], [50., 50., 90., 90.], [5., 5., 20., 20.]]
    ref = sample(boxes, [0.5, 0.5 - 1e-7, 0.3], [1, 1, 2])
    swapped = sample([boxes[1], boxes[0], boxes[2]], [0.5, 0.5 - 1e-7, 0.3], [1, 1, 2])
    acc = {}
    compare_predictions('detector', [ref], [swapped], acc)
    assert acc['identical_images'] == 1 and acc['max_box_diff'] == 0.
    assert acc['max_score_diff'] <= 1e-6
    moved = sample([boxes[1], [0., 0., 10., 13.], boxes[2]], [0.5, 0.5, 0.3], [1, 1, 2])
    acc = {}
    compare_predictions('detector', [ref], [moved], acc)
    assert acc['max_box_diff'] == pytest.approx(3.)
    other_label = sample(boxes, [0.5, 0.5, 0.3], [1, 2, 2])
    acc = {}
    compare_predictions('detector', [ref], [other_label], acc)
    assert acc['identical_images'] == 0 and 'max_box_diff' not in acc
