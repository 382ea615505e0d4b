"""Fashion-MNIST placed where mmpretrain's ``FashionMNIST`` dataset reads it.

Fashion-MNIST is Zalando's set of 70,000 grey 28x28 article images in 10 classes (60,000 train,
10,000 test). mmpretrain's ``FashionMNIST`` (``download=False``) reads the four idx files,
uncompressed, from one folder::

    OUT/train-images-idx3-ubyte   OUT/train-labels-idx1-ubyte
    OUT/t10k-images-idx3-ubyte    OUT/t10k-labels-idx1-ubyte
    OUT/placement.json            the checksums and the source, written last

:func:`place_fashion_mnist` takes them, in this order, from

1. a folder the user names (the four files, gzipped or not);
2. Debian's ``dataset-fashion-mnist`` package where apt is present, without root: the installed
   package's files (``dpkg -L``), else ``apt-get download`` into a temporary folder and
   ``dpkg-deb -x``;
3. mmpretrain's own download (``FashionMNIST(download=True)``), on a machine with the internet.

Every file is checked against the sha256 of the release's file (:data:`FILES`) before anything
is placed. A file already in OUT with that content is kept; one with another content is refused,
never replaced. ``placement.json`` is written last: only a folder with it and the four verified
files is a complete placement, reused as it is.

This module uses the standard library (mmpretrain for the download only).
"""
import glob
import gzip
import hashlib
import json
import os
import os.path as osp
import shutil
import subprocess
import tempfile
from typing import Callable, Dict, List, Optional, Tuple

from mmdcs.utils.files import atomic_write, new_temp_file, place

__all__ = ['FILES', 'MARKER', 'DEBIAN_PACKAGE', 'FashionMNISTError', 'placed',
           'place_fashion_mnist']

#: the files mmpretrain's FashionMNIST reads and the sha256 of each, uncompressed: the files of
#: the Fashion-MNIST release (zalandoresearch/fashion-mnist, data/fashion/*.gz; the labels'
#: archives have the md5s of mmpretrain's ``FashionMNIST.train_list`` / ``test_list``, and the
#: images' pixel mean and std are the published 0.2860 / 0.3530 on train)
FILES = {
    'train-images-idx3-ubyte': 'c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888',
    'train-labels-idx1-ubyte': 'bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9',
    't10k-images-idx3-ubyte': '5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b',
    't10k-labels-idx1-ubyte': '0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34',
}
#: written last into OUT: its presence (with verified files) marks a complete placement
MARKER = 'placement.json'
DEBIAN_PACKAGE = 'dataset-fashion-mnist'
WAYS = ('a folder with the four idx files (--from DIR, gzipped or not)',
        f"Debian's {DEBIAN_PACKAGE} package (apt-get download, no root needed)",
        "mmpretrain's download on a machine with the internet")


class FashionMNISTError(Exception):
    """The data cannot be placed: one line saying why."""


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with _open_maybe_gz(path) as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):
            h.update(chunk)
    return h.hexdigest()


def _open_maybe_gz(path: str):
    return gzip.open(path, 'rb') if path.endswith('.gz') else open(path, 'rb')


def placed(out_dir: str, files: Optional[Dict[str, str]] = None) -> Optional[dict]:
    """The marker of a complete placement in ``out_dir`` (every file there with its checksum),
    else None."""
    files = FILES if files is None else files
    try:
        with open(osp.join(out_dir, MARKER)) as f:
            marker = json.load(f)
    except (OSError, ValueError):
        return None
    ok = isinstance(marker, dict) and marker.get('files') == files and all(
        osp.isfile(osp.join(out_dir, n)) and _sha256(osp.join(out_dir, n)) == s
        for n, s in files.items())
    return marker if ok else None


# ----------------------------------------------------------------------------- the sources
def _find(folder: str, names, recursive: bool = False) -> Dict[str, str]:
    """name -> path of ``name`` or ``name.gz`` in ``folder`` (or below it)."""
    found = {}
    for name in names:
        for candidate in (name, name + '.gz'):
            pattern = osp.join(glob.escape(folder), '**' if recursive else '', candidate)
            hits = sorted(p for p in glob.glob(pattern, recursive=recursive) if osp.isfile(p))
            if hits:
                found[name] = hits[0]
                break
    return found


def from_folder(folder: str, names) -> Tuple[Dict[str, str], str]:
    """The files in the folder the user named (the only source then: its failure is the error)."""
    if not osp.isdir(folder):
        raise FashionMNISTError(f'--from {folder}: not a folder')
    found = _find(folder, names)
    missing = [n for n in names if n not in found]
    if missing:
        raise FashionMNISTError(f'--from {folder}: no {", ".join(missing)} (nor .gz) there')
    return found, folder


def _run(cmd: List[str], cwd: Optional[str] = None) -> str:
    if not shutil.which(cmd[0]):
        raise FashionMNISTError(f'{cmd[0]} not found')
    try:
        return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        last = (getattr(e, 'stderr', None) or str(e)).strip().splitlines()
        raise FashionMNISTError(f'{" ".join(cmd[:2])} failed'
                                + (f': {last[-1]}' if last else '')) from e


def installed_files() -> List[str]:
    """The files of the installed Debian package (none if it is not installed)."""
    try:
        return _run(['dpkg', '-L', DEBIAN_PACKAGE]).split()
    except FashionMNISTError:
        return []


def apt_get_download(work: str) -> str:
    """Download the Debian package into ``work`` (no root needed); returns the .deb's path."""
    _run(['apt-get', 'download', DEBIAN_PACKAGE], cwd=work)
    debs = glob.glob(osp.join(glob.escape(work), f'{DEBIAN_PACKAGE}_*.deb'))
    if not debs:
        raise FashionMNISTError(f'apt-get download left no {DEBIAN_PACKAGE}_*.deb')
    return debs[0]


def from_debian(work: str, names) -> Tuple[Dict[str, str], str]:
    """The files of the installed package, else of the downloaded .deb unpacked in ``work``."""
    listed = installed_files()
    found = {n: p for n in names for p in listed
             if osp.basename(p) in (n, n + '.gz') and osp.isfile(p)}
    if len(found) == len(names):
        return found, f'the installed Debian package {DEBIAN_PACKAGE}'
    deb = apt_get_download(work)
    _run(['dpkg-deb', '-x', deb, osp.join(work, 'unpacked')])
    found = _find(osp.join(work, 'unpacked'), names, recursive=True)
    missing = [n for n in names if n not in found]
    if missing:
        raise FashionMNISTError(f'{osp.basename(deb)} holds no {", ".join(missing)}')
    return found, f'Debian package {osp.basename(deb)}'


def from_download(work: str, names) -> Tuple[Dict[str, str], str]:
    """mmpretrain's FashionMNIST download (all four archives) into ``work``."""
    try:
        from mmpretrain.datasets import FashionMNIST  # lazy import: the download only
        FashionMNIST(data_root=work, split='test', test_mode=True, download=True)
    except Exception as e:  # no internet, a proxy, a server error: the next way
        raise FashionMNISTError(f'{type(e).__name__}: {e}'.splitlines()[0]) from e
    return _find(work, names), f"mmpretrain's download ({FashionMNIST.url_prefix})"


# ----------------------------------------------------------------------------- placing
def _check_existing(out_dir: str, files: Dict[str, str]) -> List[str]:
    """Names still to place; a file of another content at a target is refused."""
    todo = []
    for name, sha in files.items():
        path = osp.join(out_dir, name)
        if not osp.lexists(path):
            todo.append(name)
        elif osp.islink(path) or not osp.isfile(path) or _sha256(path) != sha:
            raise FashionMNISTError(
                f'{path} exists and is not the Fashion-MNIST file {name}: refusing to replace '
                'it; move it away or choose another --out')
    return todo


def _stage(found: Dict[str, str], out_dir: str, files: Dict[str, str]) -> Dict[str, str]:
    """Each source file uncompressed into a temporary file beside its target, its checksum
    verified; returns target -> temporary file (all verified, or none left behind)."""
    staged = {}
    try:
        for name, src in found.items():
            target = osp.join(out_dir, name)
            tmp = new_temp_file(target)
            staged[target] = tmp
            h = hashlib.sha256()
            with _open_maybe_gz(src) as f, open(tmp, 'wb') as g:
                for chunk in iter(lambda: f.read(1 << 20), b''):
                    h.update(chunk)
                    g.write(chunk)
            if h.hexdigest() != files[name]:
                raise FashionMNISTError(
                    f'{src} is not the Fashion-MNIST file {name} (sha256 {h.hexdigest()[:16]}…, '
                    f'expected {files[name][:16]}…)')
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        _remove(staged.values())
        raise FashionMNISTError(f'cannot read {src}: {e}') from e
    except BaseException:
        _remove(staged.values())
        raise
    return staged


def _remove(paths) -> None:
    for p in paths:
        if osp.lexists(p):
            os.remove(p)


def place_fashion_mnist(out_dir: str, source: Optional[str] = None, apt: bool = True,
                        download: bool = True, files: Optional[Dict[str, str]] = None,
                        log: Callable[[str], None] = lambda line: None) -> dict:
    """Place the four idx files in ``out_dir`` (see the module's docstring).

    Args:
        out_dir: the folder mmpretrain's FashionMNIST reads (its ``data_root``).
        source: a folder with the four files (gzipped or not); then the only source tried.
        apt: try Debian's package (after ``source``).
        download: try mmpretrain's download (last).
        files: name -> sha256 (default :data:`FILES`).
        log: receives a line per source that failed.

    Returns:
        dict: ``out_dir``, ``skipped`` (a complete placement was there), ``source``.

    Raises:
        FashionMNISTError: no source worked (one line naming the ways), a source's file is not
            the release's, or OUT holds a file of another content.
    """
    files = dict(FILES if files is None else files)
    out_dir = osp.abspath(out_dir)
    marker = placed(out_dir, files)
    if marker is not None:
        return dict(out_dir=out_dir, skipped=True, source=marker.get('source'))
    todo = _check_existing(out_dir, files)
    os.makedirs(out_dir, exist_ok=True)
    ways = [('folder', lambda work: from_folder(source, todo))] if source else (
        [('Debian package', lambda work: from_debian(work, todo))] * bool(apt)
        + [('download', lambda work: from_download(work, todo))] * bool(download))
    origin = _fetch(out_dir, todo, files, ways, strict=bool(source), log=log) if todo else \
        'the files already there'
    atomic_write(osp.join(out_dir, MARKER),
                 json.dumps(dict(files=files, source=origin), indent=1) + '\n')
    return dict(out_dir=out_dir, skipped=False, source=origin)


def _fetch(out_dir: str, todo: List[str], files: Dict[str, str], ways, strict: bool,
           log: Callable[[str], None]) -> str:
    """Place ``todo`` from the first of ``ways`` that has them; returns where they came from.
    ``strict``: a failing way is the error (the user's folder), else the next one is tried."""
    tried = []
    for what, way in ways:
        with tempfile.TemporaryDirectory(prefix='.fashion-mnist-', dir=out_dir) as work:
            try:
                found, origin = way(work)
            except FashionMNISTError as e:
                if strict:
                    raise
                tried.append(f'{what}: {e}')
                log(f'{what}: {e}')
                continue
            staged = _stage(found, out_dir, files)
            try:
                for target, tmp in staged.items():
                    place(tmp, target)
            finally:  # an interrupted placement leaves no temporary file
                _remove(staged.values())
            return origin
    raise FashionMNISTError(
        f'Fashion-MNIST not found; place it from {"; or ".join(WAYS)}'
        + (f' (tried: {"; ".join(tried)})' if tried else ' (every way was turned off)'))
