"""The result files the tools write (an exported subnet, a converted checkpoint, an ONNX model, a
report, a figure): never overwritten silently, never written through a link, never left
half-written, with the permissions the user's umask gives.

* :func:`check_output_file`, :func:`check_output_dir` — before any work, one
  :class:`~mmdcs.apis.launch.UserError` line for an output path of the wrong kind (a directory
  where a file is written, a file where a directory is expected) or under a directory that
  cannot be written (read-only, or a file in the way);
* :func:`refuse_overwrite` — before any work, one line when a result file is already there,
  unless ``--force`` (:func:`add_force_argument`);
* :func:`atomic_outputs` — the files are written under their own names in a private temporary
  directory (mode 0700) beside them and moved into place (:func:`place_file`) only when
  everything has been written: an interrupted (Ctrl-C, SIGTERM) or failed tool leaves the
  earlier files untouched and no half file; the temporary directory is removed (one left by a
  killed process is removed by the next one made there: :mod:`mmdcs.utils.files`);
* :func:`staged_directory` — the same for a tool that writes several files into a directory
  (figures, tables);
* :func:`write_text`, :func:`write_json` — one text file that way; :func:`write_texts` —
  several (a table and its JSON), all or none;
* :func:`place_file` — the primitive: moves a finished file to its name without following a
  symlink planted there, without replacing an existing file unless ``force`` (then the link or
  file itself is replaced, never what a link points to), mode ``0o666 & ~umask``.

Every tool that writes a user's result file goes through these (``tools/export_subnet.py``,
``tools/ofb_export.py``, ``tools/convert/timm_to_mmdcs.py``, ``tools/test.py --out /
--metrics-out``, ``tools/deployment/*`` (``--out`` ONNX files via
:func:`mmdcs.apis.deploy.export_and_check`, ``--json``) and the analysis tools' ``--out`` /
``--json`` / ``--out-dir`` files). An ``OSError`` while placing a file is reported as one line
naming the result (``cannot write ...``).
"""
import json
import os
import os.path as osp
import shutil
from contextlib import contextmanager
from typing import Dict, Iterable, Iterator, List, Optional

from mmdcs.utils.files import current_umask, new_temp_dir, place

from .launch import UserError

__all__ = ['add_force_argument', 'refuse_overwrite', 'atomic_outputs', 'staged_directory',
           'write_text', 'write_json', 'write_texts', 'check_output_file', 'check_output_dir',
           'place_file', 'current_umask']

#: in the name of every private temporary directory (hidden, beside the results:
#: :func:`mmdcs.utils.files.new_temp_dir`)
TEMP_MARK = '.tmp-'


def add_force_argument(parser) -> None:
    """``--force``: replace result files that already exist (refused otherwise)."""
    parser.add_argument('--force', action='store_true',
                        help='overwrite result files that already exist (refused otherwise)')


def refuse_overwrite(paths: Iterable[Optional[str]], force: bool = False) -> None:
    """One :class:`UserError` naming the first of ``paths`` that exists (a dangling symlink
    counts), unless ``force``.

    Call it before the work, so that nothing is computed for a refused run."""
    if force:
        return
    existing = [p for p in paths if p and osp.lexists(p)]
    if existing:
        more = f' (and {len(existing) - 1} more result file(s))' if len(existing) > 1 else ''
        raise UserError(f'{existing[0]} already exists{more}: refusing to overwrite an earlier '
                        'result; pass --force to replace it, or choose another output')


def _writable_ancestor(path: str, option: str, shown: str) -> None:
    """The deepest existing ancestor of ``path`` (itself included) must be a directory the
    process can write into (the missing ones are created there)."""
    probe = osp.abspath(path)
    while not osp.lexists(probe):
        probe = osp.dirname(probe)
    if not osp.isdir(probe):
        raise UserError(f'{option} {shown}: {probe} is not a directory')
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f'{option} {shown}: cannot write into the directory {probe} '
                        '(permission denied or a read-only file system)')


def check_output_file(path: Optional[str], option: str = '--out') -> None:
    """Pre-flight of a result file: not a directory, its directory writable (or creatable)."""
    if not path:
        return
    if osp.isdir(path):
        raise UserError(f'{option} {path} is a directory; name the file to write')
    _writable_ancestor(osp.dirname(osp.abspath(path)), option, path)


def check_output_dir(path: Optional[str], option: str = '--out') -> None:
    """Pre-flight of an output directory: not a file, writable (or creatable)."""
    if not path:
        return
    if osp.lexists(path) and not osp.isdir(path):
        raise UserError(f'{option} {path} is a file, not a directory; name a directory (it is '
                        'created if missing)')
    _writable_ancestor(path, option, path)


def _cannot_write(path: str, e: OSError) -> UserError:
    reason = e.strerror or str(e)
    return UserError(f'cannot write {path}: {reason}'
                     + (f' ({e.filename})' if e.filename and osp.abspath(str(e.filename)) !=
                        osp.abspath(path) and TEMP_MARK not in str(e.filename) else ''))


def place_file(tmp: str, path: str, force: bool = False) -> None:
    """Move the finished file ``tmp`` to ``path`` (:func:`mmdcs.utils.files.place`: mode
    ``0o666 & ~umask``, never through a symlink). Without ``force`` an existing ``path`` — a
    file, a directory, a (dangling) symlink — is refused (:class:`UserError`), atomically; with
    ``force`` ``path`` itself is replaced (a symlink there is replaced by the file, what it
    points to is not touched). Any other ``OSError`` is one line naming ``path``."""
    try:
        place(tmp, path, replace=force)
    except FileExistsError:
        refuse_overwrite([path])
        raise
    except IsADirectoryError:
        raise UserError(f'cannot write {path}: it is a directory')
    except OSError as e:
        raise _cannot_write(path, e) from e


def _temp_dir(parent: str, for_path: str) -> str:
    try:
        return new_temp_dir(parent)
    except OSError as e:
        raise _cannot_write(for_path, e) from e


@contextmanager
def atomic_outputs(*paths: str, force: bool = False) -> Iterator[List[str]]:
    """Yield temporary paths for ``paths`` (same names, in a private temporary directory in
    each one's directory, which is created if needed); when the block ends without an error,
    move each into place (:func:`place_file`) — all of them, or on an error none; the
    temporary directories are removed. A file the block did not write is left alone.

    ``force=False`` (re)checks that none of ``paths`` exists before moving any (and each
    move refuses an existing file); ``force=True`` replaces them."""
    dirs = {}
    temps = []
    try:
        for p in paths:
            parent = osp.dirname(osp.abspath(p))
            if parent not in dirs:
                dirs[parent] = _temp_dir(parent, p)
            temps.append(osp.join(dirs[parent], osp.basename(p)))
        yield list(temps)
        refuse_overwrite(paths, force)
        for tmp, path in zip(temps, paths):
            if osp.lexists(tmp):
                place_file(tmp, path, force)
    finally:
        for d in dirs.values():
            shutil.rmtree(d, ignore_errors=True)


@contextmanager
def staged_directory(out_dir: str, force: bool = False) -> Iterator[str]:
    """For a tool that writes several files into ``out_dir`` (figures, tables): yield a
    private temporary directory inside it; when the block ends without an error, move every
    file written there into ``out_dir`` (:func:`place_file`) — refused (:class:`UserError`,
    nothing moved) when one exists already, unless ``force`` — and remove the temporary
    directory in any case."""
    check_output_dir(out_dir, 'output directory')
    stage = _temp_dir(out_dir, out_dir)
    try:
        yield stage
        names = sorted(os.listdir(stage))
        refuse_overwrite([osp.join(out_dir, n) for n in names], force)
        for name in names:
            place_file(osp.join(stage, name), osp.join(out_dir, name), force)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def write_text(path: str, text: str, force: bool = False) -> None:
    """Write ``text`` to ``path`` atomically (:func:`atomic_outputs`)."""
    with atomic_outputs(path, force=force) as (tmp, ):
        with open(tmp, 'w') as f:
            f.write(text)


def write_json(path: str, obj, force: bool = False, **kwargs) -> None:
    """``json.dump`` to ``path`` atomically."""
    kwargs.setdefault('indent', 1)
    write_text(path, json.dumps(obj, **kwargs) + '\n', force=force)


def write_texts(contents: Dict[str, str], force: bool = False) -> None:
    """Write each ``{path: text}`` (None paths skipped) — all of them, or none on an error."""
    contents = {p: t for p, t in contents.items() if p}
    with atomic_outputs(*contents, force=force) as temps:
        for tmp, text in zip(temps, contents.values()):
            with open(tmp, 'w') as f:
                f.write(text)
