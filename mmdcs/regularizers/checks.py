"""Argument checks of the regularisers: each raises a ``ValueError`` that names the argument."""
import math
from numbers import Integral, Real
from typing import Optional

import torch
from torch import Tensor


def check_scale(s, name: str = 's') -> float:
    if isinstance(s, bool) or not isinstance(s, Real) or not math.isfinite(s) or s <= 0:
        raise ValueError(f'{name} (the soft-assignment scale) must be a finite number > 0, '
                         f'got {s!r}')
    return float(s)


def check_int(v, name: str, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, Integral) or v < minimum:
        raise ValueError(f'{name} must be an integer >= {minimum}, got {v!r}')
    return int(v)


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
