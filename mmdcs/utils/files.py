"""Writing a file the one safe way: atomically, never through a symlink, with the user's umask.

:func:`atomic_write` writes the bytes into a new temporary file beside the target (created with
``O_CREAT | O_EXCL | O_NOFOLLOW``, so it can be neither an existing file nor a planted link),
then renames it onto the target (``os.replace``: atomic on one file system; a symlink at the
target's name is replaced itself, its target is never written). A reader sees the old file or
the new one, never half a file. The file mode is ``0o666`` less the process's umask, as
``open(path, 'w')`` would give. :func:`replacing` does the same for a writer that needs a path
(it writes the temporary file itself), :func:`new_temp_dir` gives a private directory for
several files (:mod:`mmdcs.apis.outputs`).

Temporaries are hidden and name their owner: ``.NAME.tmp-PID@HOST-RANDOM.EXT`` (a directory:
``.mmdcs.tmp-PID@HOST-RANDOM``; ``HOST``: 8 hex digits naming the host and its pid namespace).
A write that fails, or is interrupted by Ctrl-C or a SIGTERM (the tools turn it into an exit
that runs the clean-ups, :func:`mmdcs.apis.launch.run_program`), removes its temporary. One that
cannot clean up (SIGKILL, a power cut) leaves it behind; the next temporary made in the same
directory removes such leftovers (:func:`sweep_stale_temps`): only names of this pattern, only
entries of the current user, only those whose process is gone (same host and pid namespace, the
pid no longer running).

Whether an existing target may be replaced is the caller's decision (the tools refuse without
``--force``: :mod:`mmdcs.apis.outputs`, built on this; a training run replaces its own
checkpoints). This module is plumbing (layer 2): the engine's checkpoint saving, the runner's
files (:mod:`mmdcs.utils.compat`) and the tools' result files all use it.
"""
import errno
import hashlib
import os
import os.path as osp
import re
import secrets
import shutil
import socket
import stat
from contextlib import contextmanager
from typing import Iterator, Union

__all__ = ['atomic_write', 'replacing', 'new_temp_file', 'new_temp_dir', 'new_run_dir',
           'open_log', 'place', 'current_umask', 'sweep_stale_temps']

#: errors of a file system without hard links (place() then checks and renames)
_NO_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS)

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, 'O_NOFOLLOW', 0) | \
    getattr(os, 'O_BINARY', 0)

#: a temporary of this module: .NAME.tmp-PID@HOST-RANDOM[.EXT]
_TEMP_NAME = re.compile(r'^\..+\.tmp-(?P<pid>\d+)@(?P<host>[0-9a-f]{8})-[0-9a-f]{8}(\.[^.]*)?$')


def _host() -> str:
    """8 hex digits naming where a pid is meaningful: the host and its pid namespace (two
    containers of one host may share the host name, never a pid namespace)."""
    try:
        namespace = str(os.stat('/proc/self/ns/pid').st_ino)
    except OSError:  # not Linux
        namespace = ''
    where = f'{socket.gethostname()}/{namespace}'.encode('utf-8', 'replace')
    return hashlib.sha256(where).hexdigest()[:8]


def _temp_name(directory: str, stem: str, ext: str = '') -> str:
    return osp.join(directory, f'.{stem}.tmp-{os.getpid()}@{_host()}-'
                    f'{secrets.token_hex(4)}{ext}')


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):  # another user's, or not a pid
        return True
    return True


def sweep_stale_temps(directory: str) -> int:
    """Remove the temporaries this module left in ``directory`` (not recursively) when their
    process ended without cleaning up (killed): entries named by its pattern, owned by this
    user, made on this host by a process that no longer runs. Nothing else is touched (a
    symlink of that name is not this module's either). Returns how many were removed."""
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    host, removed = _host(), 0
    for name in names:
        m = _TEMP_NAME.match(name)
        if m is None or m['host'] != host or _running(int(m['pid'])):
            continue
        path = osp.join(directory, name)
        try:
            st = os.lstat(path)
            if st.st_uid != os.getuid():
                continue
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(path)
            elif stat.S_ISREG(st.st_mode):
                os.remove(path)
            else:
                continue
            removed += 1
        except OSError:  # gone meanwhile, or not ours to remove
            continue
    return removed


def _open_temp(path: str):
    """(name, fd) of a new hidden file beside ``path`` (the directory is created if needed;
    the extension is kept: some writers pick the format from it)."""
    head, tail = osp.split(osp.abspath(path))
    stem, ext = osp.splitext(tail)
    os.makedirs(head, exist_ok=True)
    sweep_stale_temps(head)
    while True:
        tmp = _temp_name(head, stem, ext)
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
    needs a path: write it, then ``os.replace`` it onto ``path``; :func:`replacing` does
    both)."""
    tmp, fd = _open_temp(path)
    os.close(fd)
    return tmp


def new_temp_dir(parent: str) -> str:
    """Create a new, private (mode 0700), hidden directory in ``parent`` (created if needed)
    and return its name; the caller removes it."""
    os.makedirs(parent, exist_ok=True)
    sweep_stale_temps(parent)
    while True:
        tmp = _temp_name(osp.abspath(parent), 'mmdcs')
        try:
            os.mkdir(tmp, 0o700)
            return tmp
        except FileExistsError:  # pragma: no cover  (a clash of 32 random bits)
            continue


def new_run_dir(path: str) -> str:
    """Create the directory ``path`` for a run's files (mmengine's ``WORK_DIR/TIMESTAMP``), so
    that nothing planted under its name beforehand is written through: a new directory, or one
    this user made already (another rank of the same run, a run started in the same second).
    Anything else there — a symlink (also one to a directory), a file, another user's
    directory — is refused with ``FileExistsError`` (not followed, nothing written into it)."""
    try:
        os.mkdir(path)
        return path
    except FileExistsError:
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
            return path
    raise FileExistsError(errno.EEXIST, "an entry that is not this user's directory is in the way "
                          "of the run's log directory (a planted link is not followed): remove "
                          'it, or start the run again', path)


def open_log(path: str):
    """A text file opened for writing while a run goes (a log): created, or truncated if it is
    a file already, never through a symlink at ``path`` (``O_NOFOLLOW``: a link there is
    refused with ``FileExistsError``, not followed), mode ``0o666`` less the umask; its
    directory is created if needed."""
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, 'O_NOFOLLOW', 0),
                     0o666)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise FileExistsError(errno.EEXIST, 'a symbolic link is in the way (not followed)',
                              path) from None
    return os.fdopen(fd, 'w')


def _remove(path: str) -> None:
    if osp.lexists(path):
        os.remove(path)


@contextmanager
def replacing(path: str) -> Iterator[str]:
    """Yield the name of a new temporary file beside ``path`` for a writer that needs a path
    (``Config.dump``, ``torch.save`` ...); when the block ends without an error it replaces
    ``path`` (:func:`place`, ``replace=True``: a symlink there is replaced, never followed),
    else it is removed."""
    tmp = new_temp_file(path)
    try:
        yield tmp
        place(tmp, path, replace=True)
    except BaseException:
        _remove(tmp)
        raise


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
        _remove(tmp)
        raise
