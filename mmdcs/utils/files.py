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
import errno
import os
import os.path as osp
import secrets
from typing import Union

__all__ = ['atomic_write', 'new_temp_file', 'place', 'current_umask']

#: errors of a file system without hard links (place() then checks and renames)
_NO_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS)

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


def current_umask() -> int:
    """The process's umask (read without changing it for longer than two calls)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def place(tmp: str, path: str, replace: bool = False) -> None:
    """Move the finished file (or directory) ``tmp`` to ``path`` on the same file system, with
    mode ``0o666`` (a directory ``0o777``) less the umask, never through a symlink at ``path``.

    ``replace=False``: an existing ``path`` — a file, a directory, a (dangling) symlink — is
    refused with :class:`FileExistsError`, atomically (a hard link to ``path``, then ``tmp``
    is removed; on a file system without hard links: a check, then a rename).
    ``replace=True``: ``path`` itself is replaced (``os.replace``: a symlink there is replaced
    by the file, what it points to is never touched); a directory at ``path`` is refused with
    :class:`IsADirectoryError`."""
    os.chmod(tmp, (0o777 if osp.isdir(tmp) else 0o666) & ~current_umask())
    if replace:
        if osp.isdir(path) and not osp.islink(path):
            raise IsADirectoryError(errno.EISDIR, 'it is a directory', path)
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError as e:
        if e.errno not in _NO_LINKS:
            raise
        if osp.lexists(path):
            raise FileExistsError(errno.EEXIST, 'it exists', path) from e
        os.rename(tmp, path)
        return
    os.unlink(tmp)


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
        place(tmp, path, replace=True)
    except BaseException:
        if osp.lexists(tmp):
            os.remove(tmp)
        raise
