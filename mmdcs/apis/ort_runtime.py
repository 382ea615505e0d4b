"""onnxruntime as a runtime of latency tables and of the measurement of a target
(``--runtime onnxruntime``; ``--runtime tensorrt``: onnxruntime's TensorRT execution provider,
on a GPU): a network is exported to an ONNX file by :func:`mmdcs.apis.deploy.export_onnx` (the
export ``tools/deployment/pytorch2onnx.py`` writes: the dynamo exporter, the default opset) and
run by an onnxruntime session with the thread options set explicitly
(:func:`mmdcs.apis.deploy.ort_session`: ``threads`` intra-op threads, one inter-op thread,
sequential execution, every graph optimisation), so what is timed is the file users deploy.

A module cannot be timed inside an onnxruntime session of the whole network: a latency table
exports each unit's module as a graph of its own on the input it gets inside the pruned network
(the same computation PyTorch re-runs for a table; one export per distinct module and input
shape, cached by the table's key) and times the whole network at a few points for its constant
(``in_graph = False``: :func:`mmdcs.analysis.latency_table.build_table`). Registered as the
runtimes ``onnxruntime`` and ``tensorrt`` when :mod:`mmdcs.apis` is imported.
"""
import itertools
import os
import os.path as osp
import shutil
import tempfile
import weakref
from collections import OrderedDict
from contextlib import nullcontext
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.nn as nn

from mmdcs.analysis.latency import register_runtime
from .deploy import DEFAULT_OPSET, ExportWrapper, export_onnx, ort_session

#: how many keyed sessions an onnxruntime runtime keeps open (the rest reopen from their file)
LIVE_SESSIONS = 16


class ModuleGraph(nn.Module):
    """A module called on the inputs it got inside a network, as a graph of one input: the
    first tensor argument is the graph's input, the other arguments are fixed (constants of the
    graph); its tensor outputs, flattened."""

    def __init__(self, module: nn.Module, args: tuple, kwargs: Optional[dict] = None):
        super().__init__()
        self.module, self.args, self.kwargs = module, list(args), dict(kwargs or {})
        self.index = next(i for i, a in enumerate(self.args) if isinstance(a, torch.Tensor))

    @property
    def example(self) -> torch.Tensor:
        return self.args[self.index]

    def forward(self, x):
        args = list(self.args)
        args[self.index] = x
        return tuple(_tensors(self.module(*args, **self.kwargs)))


def _tensors(out) -> List[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return []


class _Run:
    """One onnxruntime session run on fixed inputs (``file``: the ONNX file it runs)."""

    def __init__(self, session, feed: dict, file: str, keep: bool):
        self.session, self.feed, self.file = session, feed, file
        if not keep:  # the session holds the graph: the file is not needed once it is gone
            weakref.finalize(self, _remove, file)

    def __call__(self):
        return self.session.run(None, self.feed)


def _remove(path: str) -> None:
    if osp.exists(path):
        os.remove(path)


class OrtRuntime:
    """onnxruntime on the CPU (``device='cpu'``, the CPU execution provider) or a GPU
    (``device='cuda'``: the CUDA execution provider), fp32; :class:`~mmdcs.analysis.latency.
    TorchRuntime`'s interface. ``keep_files``: the ONNX file of every network prepared without
    a key is kept until the runtime is gone (the export copies the file it measured); others
    are removed once their session is. A provider or dtype this onnxruntime cannot run is one
    ``ValueError`` line."""
    name = 'onnxruntime'
    in_graph = False
    writes_files = True
    #: device → the execution providers, first choice first
    PROVIDERS = {'cpu': ('CPUExecutionProvider', ),
                 'cuda': ('CUDAExecutionProvider', 'CPUExecutionProvider')}

    def __init__(self, device: str = 'cpu', threads: Optional[int] = 1, dtype: str = 'fp32',
                 workdir: Optional[str] = None, keep_files: bool = False):
        import onnxruntime  # lazy import: onnxruntime is loaded only to run onnxruntime
        self.version = onnxruntime.__version__
        if dtype != 'fp32':
            raise ValueError(f'{self.name} times fp32 ONNX files here, not {dtype}')
        wanted = self.PROVIDERS.get(str(device))
        if wanted is None:
            raise ValueError(f'{self.name}: device must be one of {", ".join(self.PROVIDERS)}, '
                             f'got {device!r}')
        have = onnxruntime.get_available_providers()
        if wanted[0] not in have:
            raise ValueError(f'{self.name} on {device}: this onnxruntime {self.version} has no '
                             f'{wanted[0]} (available: {", ".join(have)})')
        self.providers = [p for p in wanted if p in have]
        self.device = torch.device('cpu')  # the inputs are handed over from host memory
        self.threads, self.keep_files = threads, keep_files
        self.dir = workdir or tempfile.mkdtemp(prefix='mmdcs-onnx-')
        if workdir is None:
            weakref.finalize(self, shutil.rmtree, self.dir, True)
        self._files: Dict[str, Tuple[str, np.ndarray]] = {}  # key → its ONNX file, input
        self._live: 'OrderedDict[str, _Run]' = OrderedDict()  # the sessions kept, newest last
        self._count = itertools.count()

    def tensor(self, x: torch.Tensor) -> torch.Tensor:
        return x.detach().to('cpu', torch.float32)

    def prepare(self, module: nn.Module, args: tuple, kwargs: Optional[dict] = None,
                key: Optional[str] = None) -> _Run:
        """The module exported (once per ``key``) and a session of it on these inputs. A keyed
        file stays while the runtime lives; only the :data:`LIVE_SESSIONS` used last keep
        their session (each holds its graph, weights and memory arena: a table of a model
        with many distinct blocks held tens of GB), the others are opened again from their
        file when asked for."""
        if key is not None and key in self._live:
            self._live.move_to_end(key)
            return self._live[key]
        if key is not None and key in self._files:
            path, x = self._files[key]
        else:
            path, x = self._export(module, args, kwargs)
        session = ort_session(path, self.threads, providers=self.providers)
        run = _Run(session, {session.get_inputs()[0].name: x}, path,
                   keep=self.keep_files or key is not None)
        if key is not None:
            self._files[key] = (path, x)
            self._live[key] = run
            while len(self._live) > LIVE_SESSIONS:
                self._live.popitem(last=False)
        return run

    def _export(self, module: nn.Module, args: tuple, kwargs: Optional[dict]):
        """(a new ONNX file of the module, its input as an array)."""
        module = module.to('cpu', torch.float32).eval()
        graph = ModuleGraph(module, args, kwargs)
        x = graph.example
        net = module if (len(args) == 1 and not kwargs) else graph
        path = osp.join(self.dir, f'{next(self._count)}.onnx')
        export_onnx(ExportWrapper(net, 'backbone'), x, path)
        return path, x.detach().cpu().float().contiguous().numpy()

    def running(self):
        return nullcontext()

    def identity(self) -> dict:
        return dict(name=self.name, version=self.version,
                    options=dict(intra_op_num_threads=self.threads, inter_op_num_threads=1,
                                 execution_mode='ORT_SEQUENTIAL',
                                 graph_optimization_level='ORT_ENABLE_ALL',
                                 providers=list(self.providers), exporter='dynamo',
                                 opset=DEFAULT_OPSET))


class TensorRTRuntime(OrtRuntime):
    """onnxruntime's TensorRT execution provider on a GPU (``device='cuda'``; the CUDA provider
    for what TensorRT does not take)."""
    name = 'tensorrt'
    PROVIDERS = {'cuda': ('TensorrtExecutionProvider', 'CUDAExecutionProvider',
                          'CPUExecutionProvider')}


register_runtime(OrtRuntime.name, OrtRuntime)
register_runtime(TensorRTRuntime.name, TensorRTRuntime)
