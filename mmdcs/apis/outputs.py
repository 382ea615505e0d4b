"""The result files the tools write (an exported subnet, a converted checkpoint, a report, a
figure): never overwritten silently, never left half-written.

* :func:`refuse_overwrite` — before any work, one :class:`~mmdcs.apis.launch.UserError` line
  when a result file is already there, unless ``--force`` (:func:`add_force_argument`);
* :func:`atomic_outputs` — the files are written under temporary names in their own directory
  and renamed into place (``os.replace``, atomic on one file system) only when everything has
  been written: an interrupted or failed tool leaves the earlier files untouched and no half
  file; the temporary files are removed;
* :func:`staged_directory` — the same for a tool that writes several files into a directory
  (figures, tables): written into a temporary directory inside it, then moved into place;
* :func:`write_text`, :func:`write_json` — one text file that way.

Every tool that writes a user's result file goes through these (``tools/export_subnet.py``,
``tools/ofb_export.py``, ``tools/convert/timm_to_mmdcs.py``, ``tools/test.py --out /
--metrics-out`` and the analysis tools' ``--out`` / ``--json`` / ``--out-dir`` files).
"""
import json
import os
import os.path as osp
from contextlib import contextmanager
from typing import Iterable, Iterator, List, Optional

from .launch import UserError

__all__ = ['add_force_argument', 'refuse_overwrite', 'atomic_outputs', 'staged_directory',
           'write_text', 'write_json']


def add_force_argument(parser) -> None:
    """``--force``: replace result files that already exist (refused otherwise)."""
    parser.add_argument('--force', action='store_true',
                        help='overwrite result files that already exist (refused otherwise)')


def refuse_overwrite(paths: Iterable[Optional[str]], force: bool = False) -> None:
    """One :class:`UserError` naming the first of ``paths`` that exists, unless ``force``.

    Call it before the work, so that nothing is computed for a refused run."""
    if force:
        return
    existing = [p for p in paths if p and osp.lexists(p)]
    if existing:
        more = f' (and {len(existing) - 1} more result file(s))' if len(existing) > 1 else ''
        raise UserError(f'{existing[0]} already exists{more}: refusing to overwrite an earlier '
                        'result; pass --force to replace it, or choose another output')


def _temp_name(path: str) -> str:
    """A hidden name beside ``path`` that keeps its extension (matplotlib and others pick the
    format from it): ``DIR/.subnet.tmp-PID.json``."""
    head, tail = osp.split(osp.abspath(path))
    stem, ext = osp.splitext(tail)
    return osp.join(head, f'.{stem}.tmp-{os.getpid()}{ext}')


@contextmanager
def atomic_outputs(*paths: str, force: bool = True) -> Iterator[List[str]]:
    """Yield temporary paths for ``paths`` (same directories, created if needed); when the
    block ends without an error, rename each into place — all of them, or on an error none
    (the temporary files are removed). A file the block did not write is left alone.

    ``force=False`` checks (again) that none of ``paths`` exists before renaming."""
    temps = [_temp_name(p) for p in paths]
    for p in paths:
        os.makedirs(osp.dirname(osp.abspath(p)), exist_ok=True)
    try:
        yield list(temps)
        refuse_overwrite(paths, force)
        for tmp, path in zip(temps, paths):
            if osp.exists(tmp):
                os.replace(tmp, path)
    finally:
        for tmp in temps:
            if osp.exists(tmp):
                os.remove(tmp)


@contextmanager
def staged_directory(out_dir: str, force: bool = False) -> Iterator[str]:
    """For a tool that writes several files into ``out_dir`` (figures, tables): yield a
    temporary directory inside it; when the block ends without an error, move every file
    written there into ``out_dir`` — refused (:class:`UserError`, nothing moved) when one
    exists already, unless ``force`` — and remove the temporary directory in any case."""
    import shutil
    os.makedirs(out_dir, exist_ok=True)
    stage = osp.join(out_dir, f'.staging-{os.getpid()}')
    os.makedirs(stage, exist_ok=True)
    try:
        yield stage
        names = sorted(os.listdir(stage))
        refuse_overwrite([osp.join(out_dir, n) for n in names], force)
        for name in names:
            os.replace(osp.join(stage, name), osp.join(out_dir, name))
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temporary file + rename)."""
    with atomic_outputs(path) as (tmp, ):
        with open(tmp, 'w') as f:
            f.write(text)


def write_json(path: str, obj, **kwargs) -> None:
    """``json.dump`` to ``path`` atomically."""
    kwargs.setdefault('indent', 1)
    write_text(path, json.dumps(obj, **kwargs) + '\n')
