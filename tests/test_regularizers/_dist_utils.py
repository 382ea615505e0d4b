"""Run a function in ``world_size`` gloo processes (CPU) and collect what each rank returns.

``fn(rank, world_size, *args)`` must be a module-level function of an importable module (the
test module itself is fine) and return something ``torch.save`` can write (tensors, numbers,
dicts of them). The process group uses a ``file://`` rendezvous in a temporary directory (no
port to find or to collide).

Start-up: by default the ranks are forked (:func:`_start_method`) and inherit the imported
modules. With ``spawn`` a rank imports ``fn``'s module afresh; ``mmdcs.regularizers`` is plain
PyTorch (no mmengine, no backbones), so that stays cheap.
"""
import importlib
import os
import os.path as osp
import tempfile

import torch
import torch.multiprocessing as mp


def _entry(rank, world_size, init_file, out_dir, fn_module, fn_name, args):
    torch.set_num_threads(1)
    fn = getattr(importlib.import_module(fn_module), fn_name)
    import torch.distributed as dist
    dist.init_process_group('gloo', init_method=f'file://{init_file}', rank=rank,
                            world_size=world_size)
    try:
        result = fn(rank, world_size, *args)
        torch.save(result, osp.join(out_dir, f'rank{rank}.pt'))
    finally:
        dist.destroy_process_group()


def _start_method():
    """'fork' where available (the ranks inherit the imported modules: ~0.5 s instead of ~5-15 s
    of imports per rank on a busy 2-core machine), else 'spawn'; ``MMDCS_TEST_MP`` overrides.
    The ranks run one thread and CPU (gloo) only, so forking a process that imported torch is
    safe here."""
    default = 'fork' if 'fork' in mp.get_all_start_methods() else 'spawn'
    return os.environ.get('MMDCS_TEST_MP', default)


def run_distributed(fn, world_size=2, args=()):
    """Spawn the ranks, wait for them, and return the list of their results (rank order)."""
    os.environ.setdefault('OMP_NUM_THREADS', '1')
    with tempfile.TemporaryDirectory() as tmp:
        init_file = osp.join(tmp, 'rendezvous')
        mp.start_processes(
            _entry,
            args=(world_size, init_file, tmp, fn.__module__, fn.__qualname__, tuple(args)),
            nprocs=world_size, join=True, start_method=_start_method())
        return [torch.load(osp.join(tmp, f'rank{r}.pt')) for r in range(world_size)]
