"""The repository's tools (``tools/*.py``) loaded as modules, so a test can call their
``main(argv)`` or functions in this process (tests/ is on sys.path: the root conftest's dir)."""
import importlib.util
import os
import os.path as osp
import subprocess
import sys

import pytest

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))


def digits_opts(root: str, epochs: int = 1) -> list:
    """``--cfg-options`` that point a digits classification config at the small dataset the
    ``tiny_digits`` fixture built in ``root``, for ``epochs`` epochs, without loader workers."""
    cls = osp.join(root, 'cls')
    return [f'train_dataloader.dataset.data_root={cls}', f'val_dataloader.dataset.data_root={cls}',
            f'test_dataloader.dataset.data_root={cls}', f'train_cfg.max_epochs={epochs}',
            'train_dataloader.num_workers=0', 'val_dataloader.num_workers=0',
            'test_dataloader.num_workers=0', 'default_hooks.logger.interval=1']


def assert_close_scaled(got, ref, rel: float = 1e-4, what: str = '') -> float:
    """``max |got - ref| <= rel * scale`` with ``scale = max |ref|`` (1 for an all-zero or empty
    ``ref``): a tolerance scaled to the output's magnitude, the same for a tensor of logits
    around 1e-3 and one around 1e3, so that the verdict does not depend on the CPU, the thread
    count or the runtime's rounding (an absolute ``atol`` is either vacuous for small outputs or
    below the rounding of large ones). Returns the relative difference."""
    import torch
    got, ref = torch.as_tensor(got).double(), torch.as_tensor(ref).double()
    assert got.shape == ref.shape, f'{what}: shape {tuple(got.shape)} != {tuple(ref.shape)}'
    if not ref.numel():
        return 0.
    scale = float(ref.abs().max()) or 1.
    diff = float((got - ref).abs().max())
    assert diff <= rel * scale, f'{what}: max abs diff {diff:.3g} > {rel:g} x scale {scale:.3g}'
    return diff / scale


def load_tool(rel: str):
    """The tool at ``rel`` (e.g. ``'tools/export_subnet.py'``) as a fresh module."""
    name = 'mmdcs_tool_' + rel.replace('/', '_').replace('.py', '')
    spec = importlib.util.spec_from_file_location(name, osp.join(ROOT, rel))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_main(rel: str, argv, capsys, cwd: str = ROOT):
    """(exit code, stderr) of the tool at ``rel`` run in this process (``main(argv)``, which
    must end with ``SystemExit``), in ``cwd`` (None: the current directory)."""
    before = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        with pytest.raises(SystemExit) as e:
            load_tool(rel).main(list(argv))
    finally:
        os.chdir(before)
    return e.value.code, capsys.readouterr().err


#: how libstdc++ reports a C++ runtime abort of a rank (``std::terminate``, exit code -6)
CXX_ABORT = 'terminate called'


def dist_env(port: int) -> dict:
    """A minimal environment for a 2-rank CPU run of ``tools/dist_*.sh`` on master ``port``."""
    env = {'PATH': f'{osp.dirname(sys.executable)}:/usr/bin:/bin', 'OMP_NUM_THREADS': '1',
           'HOME': osp.expanduser('~'), 'PORT': str(port)}
    if os.environ.get('MMDCS_CONFIG_DIR'):  # the test session's checkpoint key, not the user's
        env['MMDCS_CONFIG_DIR'] = os.environ['MMDCS_CONFIG_DIR']
    return env


def run_dist_train(args, port: int, timeout: int = 600):
    """``bash tools/dist_train.sh ARGS`` (2 CPU ranks, gloo) in a subprocess with a minimal
    environment and master ``port``; returns the CompletedProcess. Run once: a rank aborted by
    the C++ runtime at exit (``terminate called ...``, once a rerun here) is a defect of the
    teardown, fixed in tools/train.py (tests/test_tools/test_dist_teardown.py)."""
    cmd = ['bash', 'tools/dist_train.sh'] + list(args)
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=dist_env(port))
