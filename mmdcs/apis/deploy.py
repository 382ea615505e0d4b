"""ONNX export of mmdcs models and the onnxruntime checks (``tools/deployment/``).

What is exported is the network's tensor computation, for any task of a config:

* a classifier (mmpretrain ``ImageClassifier`` and the mmdcs classifiers): ``mode='tensor'``,
  the head's logits (no softmax);
* a backbone alone (``backbone=True``): its tuple of feature maps (``out_indices``);
* an mmdet detector: the head's raw outputs (e.g. SSD: per level class scores and box deltas);
  the post-processing (anchor decoding, score threshold, NMS) runs in Python on the onnxruntime
  outputs with mmdet's own ``bbox_head.predict_by_feat`` (:func:`postprocess`), as mmdet does
  after its ``_forward``;
* an mmseg ``EncoderDecoder``: the decode head's class logits resized to the input (the
  network part of ``decode_head.predict``); the crop / resize to the original image is
  ``postprocess_result`` in Python.

The input is the *preprocessed* batch (normalised, padded: what ``model.data_preprocessor``
returns), float32 NCHW. Every form of the mmdcs backbones exports: baseline, DCS/KCR supernet
(eval: deterministic gates), pruned subnet, OFB compact network, DynamicViT (its top-k token
gather becomes ONNX ``TopK`` + ``GatherElements``).

The exporter is ``torch.onnx.export(..., dynamo=True)`` (torch.export + onnxscript), the default
of torch ≥ 2.9; ``exporter='torchscript'`` selects the older tracer (``dynamo=False``). Why the
default (measured with torch 2.14.1, onnxruntime 1.31.1): the TorchScript tracer is deprecated,
and with a dynamic batch it bakes the traced batch size into MobileViT's unfold / fold and
EfficientViT's attention reshapes, so onnxruntime's outputs at another batch are wrong (the
parity check fails: ``pytorch2onnx.py ... --dynamic-batch --exporter torchscript``); the dynamo
graphs are also 2-3x smaller (the pruned DeiT-Tiny: 556 nodes against 1448) and write the pruned
MLP's channel scatter as one ScatterND instead of Expand + ScatterElements + Add. Its one
drawback is export time (2-5x the tracer's here). torch.export specialises a batch of 1, so a
dynamic-batch export traces a batch of 2.

The file is written to a temporary name in the target directory and renamed only after the
export and the parity check succeeded, so a failed export never leaves a file under the
requested name.
"""
import json
import os.path as osp
import re
import time
import warnings
from contextlib import contextmanager
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from .launch import UserError
from .outputs import atomic_outputs, place_file

#: the default ONNX opset (what torch 2.14's dynamo exporter targets)
DEFAULT_OPSET = 18
#: parity tolerance: max |onnxruntime − PyTorch| relative to the output's scale (max |PyTorch|)
DEFAULT_RTOL = 1e-4
EXPORTERS = ('dynamo', 'torchscript')
#: keys of the ONNX model's ``metadata_props`` written by :func:`export_onnx`
META_KIND, META_STRUCTURE, META_CONFIG = 'mmdcs.kind', 'mmdcs.outputs', 'mmdcs.config'


def opset_range(exporter: str = 'dynamo') -> Tuple[int, int]:
    """The ONNX opsets ``exporter`` writes here: (lowest, highest), from torch.onnx's limits
    (the TorchScript exporter stops earlier than dynamo) and the installed onnx package's."""
    import onnx
    limits = getattr(torch.onnx, '_constants', None)
    low = getattr(limits, 'ONNX_MIN_OPSET', 7)
    high = getattr(limits, 'ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET' if exporter == 'torchscript'
                   else 'ONNX_MAX_OPSET', DEFAULT_OPSET)
    return low, min(high, onnx.defs.onnx_opset_version())


def check_opset(opset, exporter: str = 'dynamo') -> int:
    """``opset`` as an int if ``exporter`` can write it (:func:`opset_range`); an
    :class:`ExportError` naming the range otherwise."""
    low, high = opset_range(exporter)
    if isinstance(opset, bool) or not isinstance(opset, int) or not low <= opset <= high:
        raise ExportError(f'--opset {opset}: the {exporter} exporter writes ONNX opsets {low} to '
                          f'{high} here (default {DEFAULT_OPSET})')
    return opset


class ExportError(UserError):
    """A model (or one of its operations) that cannot be exported: one line naming the module
    and what to do."""


# ----------------------------------------------------------------------------- outputs
def flatten_outputs(out) -> Tuple[List[torch.Tensor], Any]:
    """Nested tuples / lists of tensors → (flat list, structure), the structure being a tensor
    placeholder ``None`` or a list of structures. :func:`unflatten_outputs` inverts it."""
    if isinstance(out, torch.Tensor):
        return [out], None
    if isinstance(out, (tuple, list)):
        flat, struct = [], []
        for o in out:
            f, s = flatten_outputs(o)
            flat += f
            struct.append(s)
        return flat, struct
    raise ExportError(f'the model returns a {type(out).__name__}; only tensors and (nested) '
                      'tuples / lists of tensors can be ONNX outputs')


def unflatten_outputs(flat: Sequence, struct) -> Any:
    it = iter(flat)

    def build(s):
        return next(it) if s is None else [build(c) for c in s]

    return build(struct)


def output_names(kind: str, struct) -> List[str]:
    """Readable ONNX output names for the structure of a model's outputs."""
    if struct is None:
        return ['seg_logits' if kind == 'segmentor' else 'logits' if kind == 'classifier'
                else 'output']
    if kind == 'backbone' and all(s is None for s in struct):
        return [f'feat{i}' for i in range(len(struct))]
    if kind == 'detector' and len(struct) in (2, 3) and all(isinstance(s, list) for s in struct):
        heads = ('cls_score', 'bbox_pred', 'extra')
        return [f'{heads[j]}{i}' for j, s in enumerate(struct) for i in range(len(s))]
    names: List[str] = []

    def walk(s, prefix):
        if s is None:
            names.append(prefix)
        else:
            for i, c in enumerate(s):
                walk(c, f'{prefix}.{i}' if prefix != 'output' or len(s) > 1 else f'output{i}')

    walk(struct, 'output')
    return names


# ----------------------------------------------------------------------------- what to export
def model_kind(model: nn.Module, backbone: bool = False) -> str:
    """``'backbone'``, ``'classifier'``, ``'detector'``, ``'segmentor'`` (or ``'model'``: an
    mmengine model exported through its ``mode='tensor'``)."""
    if backbone:
        return 'backbone'
    names = [c.__module__ for c in type(model).__mro__]
    if any(n.startswith('mmpretrain.') for n in names) or any(
            n.startswith('mmdcs.models.classifiers') for n in names):
        return 'classifier'
    if any(n.startswith('mmdet.models.detectors') for n in names):
        return 'detector'
    if any(n.startswith('mmseg.models.segmentors') for n in names):
        return 'segmentor'
    if any(n.startswith('mmdcs.models.backbones') for n in names):
        return 'backbone'
    return 'model'


class ExportWrapper(nn.Module):
    """The tensor computation of a model as ``forward(images) -> flat tuple of tensors`` (see
    the module docstring for what each kind returns)."""

    def __init__(self, model: nn.Module, kind: str):
        super().__init__()
        self.model = model
        self.kind = kind
        if kind == 'backbone' and not isinstance(model, nn.Module):
            raise ExportError('nothing to export')
        if kind == 'backbone' and getattr(model, 'backbone', None) is not None:
            self.net = model.backbone
        else:
            self.net = model
        if kind == 'detector' and not hasattr(model, 'bbox_head'):
            raise ExportError(f'{type(model).__name__}: only single-stage detectors (a '
                              '`bbox_head`, e.g. SSD, RetinaNet) are exported with their '
                              'post-processing in Python; export its backbone with --backbone')
        if kind == 'segmentor' and not hasattr(model, 'decode_head'):
            raise ExportError(f'{type(model).__name__}: a segmentor without `decode_head`; '
                              'export its backbone with --backbone')
        #: structure of the last forward's outputs (see :func:`flatten_outputs`)
        self.structure = None

    def raw_forward(self, x: torch.Tensor):
        if self.kind == 'backbone':
            return self.net(x)
        if self.kind == 'segmentor':
            logits = self.model(x, mode='tensor')
            # decode_head.predict_by_feat: logits upsampled to the (padded) input size
            return self.model.decode_head.predict_by_feat(
                logits, [dict(img_shape=tuple(int(s) for s in x.shape[-2:]))])
        return self.model(x, mode='tensor')

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        flat, self.structure = flatten_outputs(self.raw_forward(x))
        return tuple(flat)


def set_export_mode_(model: nn.Module) -> nn.Module:
    """Eval mode, no gradients, and the settings of mmdcs modules that only analysis tools
    use switched off (recording of attention weights)."""
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    for m in model.modules():
        if getattr(m, 'record_attn', False):
            m.record_attn = False
    return model


# ----------------------------------------------------------------------------- unsupported ops
@contextmanager
def _module_tracker(model: nn.Module):
    """Record, for every ATen op the model runs, the innermost module (path) that runs it:
    ``{op name: module path}`` (the first module seen per op)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    names = {m: n for n, m in model.named_modules()}
    stack: List[str] = []
    seen: Dict[str, Tuple[str, str]] = {}

    def pre(module, args):
        if module in names:
            stack.append(names[module])

    def post(module, args, out):
        if module in names and stack:
            stack.pop()

    class Mode(TorchDispatchMode):

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            key = str(func.overloadpacket.__name__)
            if key not in seen and stack:
                owner = model.get_submodule(stack[-1]) if stack[-1] else model
                seen[key] = (stack[-1], type(owner).__name__)
            return func(*args, **(kwargs or {}))

    h1 = nn.modules.module.register_module_forward_pre_hook(pre)
    h2 = nn.modules.module.register_module_forward_hook(post)
    try:
        with Mode():
            yield seen
    finally:
        h1.remove()
        h2.remove()


def _failing_op(message: str) -> Optional[str]:
    """The ATen op named in an exporter error, if any (``aten::fft_rfft2``, ``aten.foo.default``,
    ``OpOverload(op='aten.foo', ...)``)."""
    m = re.search(r"aten(?:::|\.)([A-Za-z0-9_]+)", message)
    return m.group(1) if m else None


def locate_op(wrapper: nn.Module, example: torch.Tensor, op: str) -> Optional[Tuple[str, str]]:
    """(module path, class name) of the innermost module that runs the ATen op ``op``."""
    with torch.no_grad(), _module_tracker(wrapper) as seen:
        wrapper(example)
    for key in (op, op.strip('_'), op + '_', 'linalg_' + op.strip('_')):
        if key in seen:
            return seen[key]
    return None


def _error_summary(message: str) -> str:
    """The informative line of an exporter error (the dynamo exporter's "Exception summary"
    names the root cause after several lines of generic advice), without colour codes."""
    message = re.sub(r'\x1b\[[0-9;]*m', '', message)
    if '## Exception summary' in message:
        tail = message.split('## Exception summary', 1)[1].strip().splitlines()
        if tail:
            message = tail[0]
    return ' '.join(message.strip().split())[:300]


def _export_error(wrapper: nn.Module, example: torch.Tensor, error: BaseException,
                  opset: int) -> ExportError:
    message = str(error)
    op = _failing_op(message)
    where = None
    if op is not None:
        try:
            where = locate_op(wrapper, example, op)
        except Exception:  # the error message is what matters; locating is a bonus
            where = None
    first = _error_summary(message)
    if where is not None:
        path = where[0][len('net.'):] if where[0].startswith('net.') else where[0]
        path = path[len('model.'):] if path.startswith('model.') else path
        return ExportError(
            f"cannot export the module '{path or '(top level)'}' ({where[1]}): the operation "
            f"aten::{op} has no ONNX conversion at opset {opset}. Replace it in that module with "
            'ONNX-exportable operations (or try --opset 20 / --exporter torchscript); exporter '
            f'said: {first}')
    return ExportError(
        f'the ONNX export of {type(wrapper.net).__name__} failed'
        + (f' at the operation aten::{op}' if op else '')
        + f': {first}. Export a supported model (a classifier, a backbone with --backbone, a '
        'single-stage detector or an EncoderDecoder segmentor) or try --exporter torchscript')


# ----------------------------------------------------------------------------- export
@contextmanager
def _quiet():
    """The exporters' progress lines and deprecation warnings are not the tool's output."""
    import io
    from contextlib import redirect_stdout
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        buf = io.StringIO()
        with redirect_stdout(buf):
            yield buf


def export_onnx(wrapper: ExportWrapper, example: torch.Tensor, path: str,
                opset: int = DEFAULT_OPSET, dynamic_batch: bool = False,
                exporter: str = 'dynamo', metadata: Optional[Dict[str, str]] = None
                ) -> Dict[str, Any]:
    """Export ``wrapper`` on ``example`` to ``path`` (written as it is: callers write to a temp
    name, see :func:`export_and_check`). Returns dict(input_name, output_names, structure,
    seconds). Failures raise :class:`ExportError` naming the module."""
    import onnx
    if exporter not in EXPORTERS:
        raise ExportError(f'unknown exporter {exporter!r}; valid: {", ".join(EXPORTERS)}')
    check_opset(opset, exporter)
    if dynamic_batch and example.shape[0] == 1:
        # torch.export specialises a dimension of size 1 (a "dynamic" batch of 1 would be
        # fixed to 1 inside the graph's reshapes): trace a batch of 2
        example = torch.cat([example, example])
    with torch.no_grad():
        wrapper(example)
    structure = wrapper.structure
    names = output_names(wrapper.kind, structure)
    dynamic_axes = None
    if dynamic_batch:
        dynamic_axes = {'input': {0: 'batch'}}
        dynamic_axes.update({n: {0: 'batch'} for n in names})
    t0 = time.perf_counter()
    kwargs = dict(input_names=['input'], output_names=names, opset_version=opset,
                  dynamic_axes=dynamic_axes)
    try:
        with _quiet(), torch.no_grad():
            if exporter == 'dynamo':
                torch.onnx.export(wrapper, (example, ), path, dynamo=True, external_data=False,
                                  optimize=True, **kwargs)
            else:
                torch.onnx.export(wrapper, (example, ), path, dynamo=False,
                                  do_constant_folding=True, **kwargs)
    except ExportError:
        raise
    except Exception as e:  # every exporter failure: find the module, one line
        raise _export_error(wrapper, example, e, opset) from e
    model = onnx.load(path)
    props = dict(metadata or {})
    props[META_KIND] = wrapper.kind
    props[META_STRUCTURE] = json.dumps(structure)
    for k, v in props.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = k, str(v)
    onnx.save(model, path)
    return dict(input_name='input', output_names=names, structure=structure,
                seconds=time.perf_counter() - t0)


def read_onnx(path: str):
    """The ONNX model in the file ``path`` (its external data not loaded), checked by onnx's
    checker: the one reader of the ONNX files a user gives (``benchmark_onnx.py``,
    ``test_onnx.py``, :func:`ort_session`). A missing, empty, truncated or random file, or one
    that is not a valid model, is one :class:`~mmdcs.apis.launch.UserError` line naming it."""
    import onnx
    if not osp.isfile(path):
        raise UserError(f'ONNX file not found: {path}')
    if osp.getsize(path) == 0:
        raise UserError(f'{path} is not an ONNX model: the file is empty')
    try:
        model = onnx.load(path, load_external_data=False)
        onnx.checker.check_model(model)
    except Exception as e:  # noqa: BLE001  (protobuf's DecodeError, the checker's errors ...)
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()),
                     type(e).__name__)
        raise UserError(f'{path} is not a valid ONNX model (truncated, damaged or another kind '
                        f'of file: {first[:200]})') from None
    if not model.graph.input or not model.graph.output:
        raise UserError(f'{path} is not a usable ONNX model: its graph has no inputs or outputs')
    return model


def ort_session(path: str, threads: Optional[int] = None, optimize: bool = True,
                providers: Optional[Sequence[str]] = None):
    """An onnxruntime session (``threads`` intra-op threads and one inter-op thread, operators
    run sequentially; None: onnxruntime's default, all cores) of the model in ``path``
    (:func:`read_onnx` checks the file first) on ``providers`` (default the CPU execution
    provider)."""
    import onnxruntime as ort
    read_onnx(path)
    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads = int(threads)
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so.log_severity_level = 3
    try:
        return ort.InferenceSession(path, so, providers=list(providers or ['CPUExecutionProvider']))
    except Exception as e:  # noqa: BLE001  (onnxruntime's InvalidGraph, NotImplemented ...)
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()),
                     type(e).__name__)
        raise UserError(f'{path}: onnxruntime cannot run this model ({first[:200]})') from None


def read_metadata(path_or_session) -> Dict[str, str]:
    if isinstance(path_or_session, str):
        model = read_onnx(path_or_session)
        return {p.key: p.value for p in model.metadata_props}
    return dict(path_or_session.get_modelmeta().custom_metadata_map)


class OrtModel:
    """An exported model in onnxruntime: ``model(images) -> outputs`` as torch tensors, in the
    structure of the PyTorch outputs (lists per level for a detector)."""

    def __init__(self, path: str, threads: Optional[int] = None):
        self.session = ort_session(path, threads)
        meta = read_metadata(self.session)
        self.kind = meta.get(META_KIND, 'model')
        self.structure = json.loads(meta.get(META_STRUCTURE, 'null'))
        self.input_name = self.session.get_inputs()[0].name

    def run_flat(self, images: torch.Tensor) -> List[torch.Tensor]:
        x = images.detach().cpu().float().contiguous().numpy()
        return [torch.from_numpy(o) for o in self.session.run(None, {self.input_name: x})]

    def __call__(self, images: torch.Tensor):
        flat = self.run_flat(images)
        return flat[0] if self.structure is None else unflatten_outputs(flat, self.structure)


def parity(wrapper: ExportWrapper, path: str, inputs: torch.Tensor,
           rtol: float = DEFAULT_RTOL) -> List[Dict[str, Any]]:
    """onnxruntime against PyTorch on ``inputs``: per output, the max abs difference, the
    output's scale (max |PyTorch|; 1 for an all-zero output) and whether diff ≤ rtol·scale."""
    with torch.no_grad():
        ref = [r.float() for r in wrapper(inputs)]
    got = OrtModel(path).run_flat(inputs)
    names = output_names(wrapper.kind, wrapper.structure)
    rows = []
    for name, r, g in zip(names, ref, got):
        if tuple(r.shape) != tuple(g.shape):
            rows.append(dict(name=name, shape=tuple(r.shape), max_abs=float('inf'),
                             scale=float('nan'), ok=False,
                             note=f'onnxruntime gives shape {tuple(g.shape)}'))
            continue
        diff = float((r - g).abs().max()) if r.numel() else 0.
        scale = float(r.abs().max()) if r.numel() else 0.
        scale = scale if scale > 0 else 1.
        rows.append(dict(name=name, shape=tuple(r.shape), max_abs=diff, scale=scale,
                         rel=diff / scale, ok=diff <= rtol * scale))
    if len(got) != len(ref):
        rows.append(dict(name='(outputs)', shape=(), max_abs=float('inf'), scale=float('nan'),
                         ok=False, note=f'{len(got)} ONNX outputs, {len(ref)} PyTorch outputs'))
    return rows


def graph_summary(path: str) -> Dict[str, Any]:
    """Node count (top graph), op histogram and file size of an ONNX file."""
    import onnx
    model = onnx.load(path)
    ops: Dict[str, int] = {}
    for n in model.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    return dict(nodes=len(model.graph.node), ops=ops, bytes=osp.getsize(path),
                opset=max((o.version for o in model.opset_import if o.domain in ('', 'ai.onnx')),
                          default=0))


class ParityError(RuntimeError):
    """onnxruntime's outputs differ from PyTorch's beyond the tolerance."""


def export_and_check(wrapper: ExportWrapper, example: torch.Tensor, out: str,
                     opset: int = DEFAULT_OPSET, dynamic_batch: bool = False,
                     exporter: str = 'dynamo', rtol: float = DEFAULT_RTOL,
                     check_inputs: Optional[torch.Tensor] = None, check: bool = True,
                     metadata: Optional[Dict[str, str]] = None,
                     force: bool = True) -> Dict[str, Any]:
    """Export to a temporary file beside ``out``, check it with onnxruntime against PyTorch,
    then move it to ``out`` (:func:`mmdcs.apis.outputs.atomic_outputs`: never through a
    symlink, mode ``0o666 & ~umask``; an existing ``out`` is replaced only with ``force``, else
    :class:`~mmdcs.apis.launch.UserError`). On an export failure nothing is left; on a parity
    failure the file is kept as ``out + '.parity-failed'`` (for inspection, never under
    ``out``) and :class:`ParityError` is raised.

    Returns dict(export info, parity rows, graph summary, path)."""
    with atomic_outputs(out, force=force) as (tmp, ):
        info = export_onnx(wrapper, example, tmp, opset, dynamic_batch, exporter, metadata)
        rows = parity(wrapper, tmp, example if check_inputs is None else check_inputs,
                      rtol) if check else []
        summary = graph_summary(tmp)
        bad = [r for r in rows if not r['ok']]
        if bad:
            kept = out + '.parity-failed'
            place_file(tmp, kept, force=True)
            worst = max(bad, key=lambda r: r.get('rel', float('inf')))
            raise ParityError(
                f"onnxruntime differs from PyTorch on output {worst['name']}: max abs diff "
                f"{worst['max_abs']:.3g} > {rtol:g} x scale {worst['scale']:.3g}"
                + (f" ({worst['note']})" if 'note' in worst else '')
                + f'; the model was kept as {kept} (not {out})')
    return dict(info, parity=rows, summary=summary, path=out)


# ----------------------------------------------------------------------------- post-processing
def postprocess(model: nn.Module, kind: str, outputs, data_samples: list) -> list:
    """The data samples with predictions from the raw network ``outputs`` (onnxruntime's, in
    the PyTorch structure): mmdet's ``bbox_head.predict_by_feat`` (decoding, score threshold,
    NMS; boxes rescaled to the original image) or mmseg's ``postprocess_result`` (crop of the
    padding, resize to the original image, argmax)."""
    if kind == 'detector':
        metas = [s.metainfo for s in data_samples]
        with torch.no_grad():
            results = model.bbox_head.predict_by_feat(*outputs, batch_img_metas=metas,
                                                      rescale=True)
        return model.add_pred_to_datasample(data_samples, results)
    if kind == 'segmentor':
        logits = outputs[0] if isinstance(outputs, (list, tuple)) else outputs
        with torch.no_grad():
            return model.postprocess_result(logits, data_samples)
    raise ExportError(f'no post-processing for a {kind} (only detectors and segmentors)')


def evaluate_pair(cfg, model: nn.Module, onnx_path: str, max_batches: Optional[int] = None,
                  threads: Optional[int] = None) -> Dict[str, Any]:
    """See :func:`_evaluate_pair`; runs under the config's default scope (its dataset,
    transforms and metric types are unprefixed names of mmdet / mmseg)."""
    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope', None) or 'mmdcs'):
        return _evaluate_pair(cfg, model, onnx_path, max_batches, threads)


def _evaluate_pair(cfg, model: nn.Module, onnx_path: str, max_batches: Optional[int] = None,
                   threads: Optional[int] = None) -> Dict[str, Any]:
    """The config's test metric of the PyTorch model (``mode='predict'``) and of the ONNX model
    in onnxruntime + :func:`postprocess`, on the same preprocessed batches of the config's test
    set. Returns dict(pytorch=metrics, onnxruntime=metrics, images, seconds per side)."""
    import copy
    from mmengine.runner import Runner
    from mmengine.evaluator import Evaluator
    kind = model_kind(model)
    if kind not in ('detector', 'segmentor'):
        raise ExportError(f'evaluation of a {kind}: use tools/test.py; this checks detectors '
                          'and segmentors')
    loader = Runner.build_dataloader(copy.deepcopy(cfg.test_dataloader))
    evaluators = {}
    for side in ('pytorch', 'onnxruntime'):
        ev = cfg.test_evaluator
        ev = Evaluator(copy.deepcopy(ev)) if not isinstance(ev, (list, tuple)) else Evaluator(
            [copy.deepcopy(e) for e in ev])
        ev.dataset_meta = loader.dataset.metainfo
        evaluators[side] = ev
    ort_model = OrtModel(onnx_path, threads)
    agreement: Dict[str, float] = {}
    seconds = dict(pytorch=0., onnxruntime=0.)
    images = 0
    model.eval()
    for i, batch in enumerate(loader):
        if max_batches is not None and i >= max_batches:
            break
        with torch.no_grad():
            data = model.data_preprocessor(batch, False)
        inputs, samples = data['inputs'], data['data_samples']
        images += inputs.shape[0]
        t0 = time.perf_counter()
        with torch.no_grad():
            ref = model(inputs, copy.deepcopy(samples), mode='predict')
        t1 = time.perf_counter()
        raw = ort_model(inputs)
        if kind == 'segmentor' and not isinstance(raw, (list, tuple)):
            raw = [raw]
        got = postprocess(model, kind, raw, copy.deepcopy(samples))
        t2 = time.perf_counter()
        seconds['pytorch'] += t1 - t0
        seconds['onnxruntime'] += t2 - t1
        compare_predictions(kind, ref, got, agreement)
        evaluators['pytorch'].process(data_samples=ref, data_batch=batch)
        evaluators['onnxruntime'].process(data_samples=got, data_batch=batch)
    size = images if max_batches is not None else len(loader.dataset)
    return dict(pytorch=evaluators['pytorch'].evaluate(size),
                onnxruntime=evaluators['onnxruntime'].evaluate(size), images=images,
                seconds=seconds, predictions=agreement)


def _matched_differences(a, b) -> tuple:
    """(max box difference, max score difference) between two detection sets with the same
    labels, order-free: each detection of ``a`` is paired with the detection of ``b`` of its
    label whose box is nearest (max abs coordinate difference), the score difference read at
    that pair. Detections whose scores nearly tie may come out of two runtimes in another order
    (the last bits of a score decide the sort): compared by position they would show a box
    difference of the whole image."""
    box, score = 0., 0.
    for label in a.labels.unique():
        ia, ib = (a.labels == label).nonzero()[:, 0], (b.labels == label).nonzero()[:, 0]
        dist = (a.bboxes[ia][:, None, :] - b.bboxes[ib][None, :, :]).abs().amax(-1)
        near, j = dist.min(1)
        box = max(box, float(near.max()))
        score = max(score, float((a.scores[ia] - b.scores[ib][j]).abs().max()))
    return box, score


def compare_predictions(kind: str, ref: list, got: list, acc: Dict[str, float]) -> None:
    """Accumulate the prediction-level agreement of two lists of data samples into ``acc``:
    detector — images whose detections have the same count and labels (as multisets: order
    does not matter), the largest box and score difference among them, each detection paired
    with the nearest of its label (:func:`_matched_differences`), the detection counts;
    segmentor — pixels with the same class."""
    for r, g in zip(ref, got):
        if kind == 'detector':
            a, b = r.pred_instances, g.pred_instances
            acc['images'] = acc.get('images', 0) + 1
            acc['detections_pytorch'] = acc.get('detections_pytorch', 0) + len(a)
            acc['detections_onnxruntime'] = acc.get('detections_onnxruntime', 0) + len(b)
            same = len(a) == len(b) and torch.equal(a.labels.cpu().sort().values,
                                                    b.labels.cpu().sort().values)
            acc['identical_images'] = acc.get('identical_images', 0) + int(same)
            if same and len(a):
                box, score = _matched_differences(a, b)
                acc['max_box_diff'] = max(acc.get('max_box_diff', 0.), box)
                acc['max_score_diff'] = max(acc.get('max_score_diff', 0.), score)
        else:
            a, b = r.pred_sem_seg.data, g.pred_sem_seg.data
            acc['pixels'] = acc.get('pixels', 0) + a.numel()
            acc['same_pixels'] = acc.get('same_pixels', 0) + int((a == b).sum())


# ----------------------------------------------------------------------------- graph cost
def onnx_macs(path: str, batch: int = 1) -> Dict[str, int]:
    """Multiply-accumulates per image of an ONNX graph by op type (MatMul, Gemm, Conv,
    ConvTranspose) and their ``'total'``, from the shapes the graph really computes: the model
    runs once in onnxruntime (no graph optimisation) on a zero input of batch ``batch`` with
    every operand of those ops as an extra output (onnx's static shape inference loses the
    token counts after the first reshape of a dynamic-batch graph).

    This is the deployed graph's own cost: a pruned graph whose linear layers were zero-padded
    to the full width would count the full width here."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper
    model = read_onnx(path)
    g = model.graph
    consts = {i.name: tuple(i.dims) for i in g.initializer}
    for n in g.node:
        if n.op_type == 'Constant' and n.attribute and n.attribute[0].name == 'value':
            consts[n.output[0]] = tuple(numpy_helper.to_array(n.attribute[0].t).shape)
    ops = [n for n in g.node if n.op_type in ('MatMul', 'Gemm', 'Conv', 'ConvTranspose')]
    wanted = []
    have = {o.name for o in g.output}
    for n in ops:
        for name in list(n.input[:2]) + [n.output[0]]:
            if name and name not in consts and name not in have and name not in wanted:
                wanted.append(name)
    for name in wanted:
        g.output.append(onnx.ValueInfoProto(name=name))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=['CPUExecutionProvider'])
    feeds = {}
    for inp in sess.get_inputs():
        shape = [d if isinstance(d, int) else batch for d in inp.shape]
        feeds[inp.name] = np.zeros(shape, dtype=np.float32)
    names = [o.name for o in sess.get_outputs()]
    shapes = {k: tuple(v.shape) for k, v in zip(names, sess.run(names, feeds))}
    shapes.update(consts)
    macs: Dict[str, int] = {}
    for n in ops:
        a, w, out = shapes[n.input[0]], shapes[n.input[1]], shapes[n.output[0]]
        if n.op_type == 'MatMul':
            v = int(np.prod(out)) * (a[-1] if a else 1)
        elif n.op_type == 'Gemm':
            trans_a = next((at.i for at in n.attribute if at.name == 'transA'), 0)
            v = int(np.prod(out)) * (a[0] if trans_a else a[1])
        elif n.op_type == 'Conv':
            v = int(np.prod(out)) * int(np.prod(w[1:]))
        else:  # ConvTranspose: every input pixel meets the whole kernel of its group
            v = int(np.prod(a)) * int(np.prod(w[1:]))
        macs[n.op_type] = macs.get(n.op_type, 0) + v // batch
    macs['total'] = sum(macs.values())
    return macs
