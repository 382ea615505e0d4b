"""DDP collectives of the regularisers' streaming state (no-ops without an initialised process
group). Plain ``torch.distributed``: the state objects call them at epoch end, on every rank.
"""
import torch
import torch.distributed as dist
from torch import Tensor


def world_size() -> int:
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def all_reduce_sum_(*tensors: Tensor) -> None:
    """In-place SUM over the ranks (nothing when not distributed)."""
    if world_size() > 1:
        for t in tensors:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)


def all_gather_rows(t: Tensor) -> Tensor:
    """Concatenate the rows of ``t`` from every rank, in rank order (sizes may differ)."""
    if world_size() == 1:
        return t
    world = world_size()
    size = torch.tensor([t.shape[0]], device=t.device, dtype=torch.long)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size)
    sizes = [int(s) for s in sizes]
    longest = max(sizes)
    padded = t.new_zeros((longest, ) + tuple(t.shape[1:]))
    padded[:t.shape[0]] = t
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    return torch.cat([p[:s] for p, s in zip(parts, sizes)])


def broadcast_(t: Tensor, src: int = 0) -> None:
    if world_size() > 1:
        dist.broadcast(t, src=src)
