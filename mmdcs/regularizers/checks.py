"""Argument checks of the regularisers: each raises a ``ValueError`` that names the argument
(the numbers through :func:`mmdcs.checks.check_number`, as every constructor of mmdcs)."""
from typing import Optional

import torch
from torch import Tensor

from mmdcs.checks import check_number


def check_scale(s, name: str = 's') -> float:
    """A scale (the soft-assignment scale ``s``, ``q_min``): a finite number > 0."""
    return check_number(s, name, 0, low_open=True)


def check_int(v, name: str, minimum: int) -> int:
    return check_number(v, name, minimum, integer=True)


def check_matrix(x, name: str, dim: Optional[int] = None) -> Tensor:
    if not isinstance(x, Tensor) or x.dim() != 2 or not x.is_floating_point():
        desc = f'a {x.dim()}-D {x.dtype} tensor' if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f'{name} must be a 2-D floating tensor (rows = samples), got {desc}')
    if dim is not None and x.shape[1] != dim:
        raise ValueError(f'{name}: feature dimension mismatch, expected {dim} columns, '
                         f'got shape {tuple(x.shape)}')
    return x


def check_labels(labels, n: int, num_classes: int, name: str = 'labels') -> Tensor:
    if not isinstance(labels, Tensor) or labels.dim() != 1 or labels.is_floating_point() \
            or labels.dtype == torch.bool or labels.is_complex():
        raise ValueError(f'{name} must be a 1-D integer tensor of class indices')
    if labels.shape[0] != n:
        raise ValueError(f'{name}: {labels.shape[0]} labels for {n} samples')
    if n and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise ValueError(f'{name} out of range: must lie in [0, {num_classes}), got '
                         f'min {int(labels.min())}, max {int(labels.max())}')
    return labels.long()
