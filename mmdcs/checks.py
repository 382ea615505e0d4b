"""The argument checks every mmdcs constructor and tool shares: a number is finite and inside its
range, a count is an integer inside its bounds (no NaN, no infinity, no bool for a number, no
string). Each check raises a ``ValueError`` whose message starts with the argument's name
(``gate_init must be a finite number, got nan``): the tools turn it into one line naming the
config key (``model.backbone.gate_init = nan: ...``, ``mmdcs.apis.launch.user_errors``), and the
argparse types of the tools (``mmdcs.apis.launch``) use the same checks for their arguments.

Plain Python (the method core's layer): no torch, no OpenMMLab.
"""
import math
import os
from numbers import Integral, Real
from typing import Mapping, Optional, Union

Number = Union[int, float]

#: the largest batch (images per call) a tool or a latency table takes
MAX_BATCH = 1024
#: the largest image side in pixels a tool's ``--shape`` / ``--size`` takes
MAX_IMAGE_SIDE = 8192
#: the most threads a latency table may record (more is no machine's: a corrupt file)
MAX_THREADS = 1024
#: the largest seed (what numpy's generator takes)
MAX_SEED = 2**32 - 1


def interval(low: Optional[Number] = None, high: Optional[Number] = None,
             low_open: bool = False, high_open: bool = False) -> str:
    """``'> 0'``, ``'≤ 1'``, ``'in [0, 1)'``, or ``''`` (any value): how a range is written in
    the messages."""
    if low is not None and high is not None:
        return f'in {"(" if low_open else "["}{low}, {high}{")" if high_open else "]"}'
    if low is not None:
        return f'{">" if low_open else "≥"} {low}'
    if high is not None:
        return f'{"<" if high_open else "≤"} {high}'
    return ''


def expected(low: Optional[Number] = None, high: Optional[Number] = None, *,
             low_open: bool = False, high_open: bool = False, integer: bool = False,
             none: bool = False) -> str:
    """What :func:`check_number` with these bounds accepts, in words: ``'a finite number in
    (0, 1]'``, ``'an integer ≥ 1 (or None)'``."""
    kind = 'an integer' if integer else 'a finite number'
    text = f'{kind} {interval(low, high, low_open, high_open)}'.strip()
    return text + (' (or None)' if none else '')


def fits(value, low: Optional[Number] = None, high: Optional[Number] = None, *,
         low_open: bool = False, high_open: bool = False, integer: bool = False,
         none: bool = False) -> bool:
    """Whether :func:`check_number` with these bounds accepts ``value``."""
    if value is None:
        return none
    if isinstance(value, bool) or not isinstance(value, Integral if integer else Real):
        return False
    if not integer and not math.isfinite(value):
        return False
    if low is not None and (value <= low if low_open else value < low):
        return False
    return high is None or (value < high if high_open else value <= high)


def check_number(value, name: str, low: Optional[Number] = None, high: Optional[Number] = None,
                 **bounds):
    """``value`` as a float (an int with ``integer=True``) if it is a finite number inside
    the range (``low``/``high`` included unless ``low_open``/``high_open``); None for None where
    ``none``. Else a ``ValueError`` that starts with ``name``: ``name must be a finite number in
    (0, 1], got nan``. A bool is not a number here; an integer-valued float is not an integer
    (``max_epochs = 2.5`` would be cut)."""
    if not fits(value, low, high, **bounds):
        raise ValueError(f'{name} must be {expected(low, high, **bounds)}, got {value!r}')
    if value is None:
        return None
    return int(value) if bounds.get('integer') else float(value)


def check_numbers(values: Mapping[str, object], ranges: Mapping[str, dict],
                  owner: str = '') -> None:
    """:func:`check_number` for every argument of ``values`` that ``ranges`` knows (its
    keyword arguments by name), e.g. a constructor's arguments against a family's table;
    ``owner`` prefixes the message (``'ViT: drop_path_rate must be ...'``)."""
    for name, value in values.items():
        if name in ranges:
            try:
                check_number(value, name, **ranges[name])
            except ValueError as e:
                raise ValueError(f'{owner}: {e}' if owner else str(e)) from None


def check_batch(batch, name: str = 'batch') -> int:
    """A batch size: an integer in [1, :data:`MAX_BATCH`]."""
    return check_number(batch, name, 1, MAX_BATCH, integer=True)


def cpu_count() -> int:
    """The CPU cores of this machine (``os.cpu_count()``)."""
    return os.cpu_count() or 1


def check_timing(batch, threads, here: bool = True) -> None:
    """The batch and thread count of a latency measurement: :func:`check_batch`, and
    :func:`check_threads` on this machine (``here``: a table built or a subnet timed here;
    threads None: as the process has them), else at most :data:`MAX_THREADS` (what a table
    read from a file may record: measured on another machine)."""
    check_batch(batch)
    if threads is not None or not here:
        check_number(threads, 'threads', 1, cpu_count() if here else MAX_THREADS, integer=True)
