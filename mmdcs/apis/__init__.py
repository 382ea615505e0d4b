"""What the tools call: the top layer of mmdcs (it may import every package below it; nothing in
mmdcs imports it).

* :mod:`.launch` — config loading, the task of a config, pre-flight checks of data paths, CPU
  DDP set-up, building the runner, and :func:`~.launch.user_errors` (one line and exit 2 for
  bad input);
* :mod:`.subnet_io` — building a config's model, finding its mmdcs backbone, input sizes,
  pruning a whole model's state dict to a subnet, the pruned checkpoint, printed summaries;
* :mod:`.export` — the export of a subnet (to a budget or not) as one call,
  :func:`~.export.export_subnet` (``tools/export_subnet.py``, the demo);
* :mod:`.deploy` — ONNX export of any model of a config, the onnxruntime parity check, the
  graph's MACs, and the evaluation of exported detectors / segmentors (``tools/deployment``);
* :mod:`.ort_runtime` — onnxruntime (and its TensorRT provider) as a runtime of latency tables
  and measurements (``--runtime onnxruntime``), registered here.
"""
from . import ort_runtime  # noqa: F401  (registers the onnxruntime runtimes)
from .launch import UserError, load_config, prepare_task, user_errors

__all__ = ['UserError', 'load_config', 'prepare_task', 'user_errors']
