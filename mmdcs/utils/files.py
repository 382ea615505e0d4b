"""Writing a file the one safe way: atomically, never through a symlink, with the user's umask.

:func:`atomic_write` writes the bytes into a new temporary file beside the target (created with
``O_CREAT | O_EXCL | O_NOFOLLOW``, so it can be neither an existing file nor a planted link),
then renames it onto the target (``os.replace``: atomic on one file system; a symlink at the
target's name is replaced itself, its target is never written). A reader sees the old file or
the new one, never half a file; an interrupted write leaves no temporary file behind. The file
mode is ``0o666`` less the process's umask, as ``open(path, 'w')`` would give.

Whether an existing target may be replaced is the caller's decision (the tools refuse without
``--force``: :mod:`mmdcs.apis.outputs`, built on this; a training run replaces its own
checkpoints). This module is plumbing (layer 2): the engine's checkpoint saving and the tools'
result files both use it.
"""
import os
import os.path as osp
import secrets
from typing import Union

__all__ = ['atomic_write', 'new_temp_file']

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, 'O_NOFOLLOW', 0) | \
    getattr(os, 'O_BINARY', 0)


def _open_temp(path: str):
    """(name, fd) of a new hidden file beside ``path``: ``DIR/.NAME.tmp-PID-RANDOM.EXT`` (the
    directory is created if needed; the extension is kept: some writers pick the format from
    it)."""
    head, tail = osp.split(osp.abspath(path))
    stem, ext = osp.splitext(tail)
    os.makedirs(head, exist_ok=True)
    while True:
        tmp = osp.join(head, f'.{stem}.tmp-{os.getpid()}-{secrets.token_hex(4)}{ext}')
        try:
            return tmp, os.open(tmp, _FLAGS, 0o666)
        except FileExistsError:  # pragma: no cover  (a clash of 32 random bits)
            continue


def new_temp_file(path: str) -> str:
    """Create an empty, new, hidden file beside ``path`` and return its name (for a writer that
    needs a path: write it, then ``os.replace`` it onto ``path``)."""
    tmp, fd = _open_temp(path)
    os.close(fd)
    return tmp


def atomic_write(path: str, data: Union[bytes, str]) -> None:
    """Write ``data`` (bytes, or text as UTF-8) to ``path`` atomically and without following a
    symlink at ``path`` (see the module docstring). An existing file is replaced."""
    if isinstance(data, str):
        data = data.encode('utf-8')
    tmp, fd = _open_temp(path)
    try:
        with os.fdopen(fd, 'wb') as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if osp.lexists(tmp):
            os.remove(tmp)
        raise
