"""One rank of tests/test_tools/test_dist_teardown.py: tools/train.py's launch and teardown path
(``setup_cpu_distributed`` inside ``process_group_scope``, the program run by ``run_program``)
around a few DDP steps of a tiny model, the way mmengine's runner wraps it
(``MMDistributedDataParallel``, CPU, gloo). Run under torchrun (2 processes)."""
import os.path as osp
import sys

sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from mmengine.config import Config  # noqa: E402
from mmengine.model import MMDistributedDataParallel  # noqa: E402

from mmdcs.apis.launch import process_group_scope, run_program, setup_cpu_distributed  # noqa


def main():
    cfg = Config(dict(launcher='pytorch'))
    with process_group_scope():
        setup_cpu_distributed(cfg)
        wrapper = dict(cfg.model_wrapper_cfg)
        wrapper.pop('type')
        torch.manual_seed(0)
        # one allreduce per parameter (tiny buckets): many works end with the last backward
        model = MMDistributedDataParallel(
            module=nn.Sequential(*[nn.Linear(64, 64) for _ in range(8)]), bucket_cap_mb=1e-4,
            **wrapper)
        optim = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            optim.zero_grad()
            model(torch.randn(16, 64)).sum().backward()
            optim.step()
        print(f'rank {dist.get_rank()}: done', flush=True)
        # the last backward ends the run, and the race is made likely: from here on this thread
        # keeps the GIL until it blocks, so a gloo worker thread still releasing the backward's
        # allreduce work (which needs the GIL) is late, as under load. The interpreter's
        # shutdown then aborts the rank (the old end of tools/train.py); run_program must not.
        sys.setswitchinterval(100.)
        model(torch.randn(16, 64)).sum().backward()


if __name__ == '__main__':
    run_program(main)
