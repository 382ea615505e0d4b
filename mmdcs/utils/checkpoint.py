"""Safe checkpoint loading: a checkpoint file must not be able to run code.

Unpickling a ``.pth`` file can call any Python function the file names (``os.system``, ``eval``,
...). torch ≥ 2.6 therefore loads with ``weights_only=True`` by default: only tensors, numbers,
strings and containers, plus the types an allowlist adds. mmdcs loads every checkpoint
(``init_cfg=dict(type='Pretrained')``, ``load_from``, ``--resume``, ``tools/test.py``'s
CHECKPOINT, the export / convert / analysis tools, a DynamicViT teacher; from a local path or any
scheme mmengine knows, :data:`mmdcs.utils.compat.SCHEMES`) with :func:`load_checkpoint_file`:

* ``.safetensors`` files are read with ``safetensors`` (tensors only; the mmdcs ``meta`` is a JSON
  string in the file's metadata);
* other files with ``torch.load(..., weights_only=True)`` and :data:`SAFE_GLOBALS`, the exact,
  harmless types an mmengine checkpoint holds besides tensors: mmengine's ``HistoryBuffer`` (the
  message hub's logged scalars; :func:`mmdcs.utils.compat.patch_history_buffer_pickling` makes
  it pickle its numbers only, and unpickling it only sets them) and numpy arrays / scalars of
  numeric and bool dtypes (metric values, ETA). No function that can reach other code
  (``getattr``, ``eval``, ``exec``, ``os.*``, ...) and no object-dtype array is in it;
* a file that names anything else is refused with :class:`UnsafeCheckpointError` (one line: the
  file, the objects it holds, the flag that loads it anyway: mmdcs's tools name
  ``--trust-checkpoint``, other tools, e.g. mmdet's own ``tools/train.py``, the config key
  ``trust_checkpoint = True``), unless it is trusted: the user passed ``--trust-checkpoint`` (or
  set ``trust_checkpoint = True`` in the config, also read from the config of the Runner that is
  loading), or, for the full-state ``--resume`` of ``tools/train.py``, a run of this user wrote
  the file into that work dir: it lies directly in the work dir, and its HMAC-SHA256 under the
  user's key (:func:`manifest_key`: a 0600 file in the user's config directory, outside any
  work dir) is the one recorded in the work dir's :data:`MANIFEST` when mmdcs saved it
  (:func:`record_checkpoint`, called by the checkpoint saving patched into mmengine, see
  :mod:`mmdcs.utils.compat`); whoever can write the work dir but lacks the key cannot forge a
  line. A trusted file that the safe loader refuses is loaded with ``weights_only=False`` (from
  the bytes whose tag was checked);
* a file that is no checkpoint at all (random bytes, a truncated download, an empty file, a list,
  a bare tensor, a state dict with names that are not strings: :func:`check_structure`) gives
  :class:`UnreadableCheckpointError` (one line: the file, that it is not a readable checkpoint,
  why).

A checkpoint that does not fit the model it is loaded into (few of the weights it is meant to fill
filled, or tensors of another shape; in a complete load, :func:`complete_loads`, a weight missing
or a tensor of another network) gives :class:`MismatchedCheckpointError` (one line:
:func:`check_loaded`, called by mmengine's ``load_state_dict`` as :mod:`mmdcs.utils.compat`
patches it), unless ``allow_partial_checkpoint = True``.

These errors are ``ValueError`` subclasses that :func:`mmdcs.apis.launch.user_errors` turns into
one line and exit code 2. Which files are trusted is module state set by the tools
(:func:`trust_checkpoints`, inside :func:`trust_scope`). Why a file is refused is found without
executing it: the pickle stream is disassembled (:mod:`pickletools`) and the globals it names are
compared with the allowlist.
"""
import hashlib
import hmac
import io
import json
import os
import os.path as osp
import pickletools
import re
import secrets
import stat
import sys
import warnings
import zipfile
from contextlib import contextmanager
from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from mmdcs.selection.utils import in_search_state

from .files import atomic_write

#: the flag every checkpoint-reading tool accepts (named in the refusal message)
TRUST_FLAG = '--trust-checkpoint'
#: the config key that does the same (tools/train.py, tools/test.py, and mmdet's / mmseg's /
#: mmpretrain's own tools, which have no such flag)
TRUST_KEY = 'trust_checkpoint'
#: the config key that lets a load fill only part of the weights it is meant to fill
PARTIAL_KEY = 'allow_partial_checkpoint'
#: where the JSON of the mmdcs ``meta`` lives in the metadata of a safetensors file
SAFETENSORS_META_KEY = 'mmdcs_meta'
#: the record of the checkpoints a training run wrote, in its checkpoint directory: ``TAG  NAME``
#: per line, TAG the HMAC-SHA256 of the file under the user's key (:func:`checkpoint_tag`)
MANIFEST = 'checkpoints.hmac'
#: the user's key of the manifests: ``$MMDCS_CONFIG_DIR/checkpoint.key`` (:func:`key_path`)
KEY_DIR_ENV = 'MMDCS_CONFIG_DIR'
KEY_FILE = 'checkpoint.key'
#: a load must fill at least this share of the values it is meant to fill (see
#: :func:`check_loaded`)
MIN_FILLED = 0.5

#: all: every file may fall back to the unsafe loader; dirs: files recorded in the manifest of
#: these directories may; hint: how a refusal names the way to trust a file (None: no mmdcs
#: tool is in charge, e.g. mmdet's own tools/train.py: the config key); partial: loads may fill
#: part of the weights; complete: a load into a whole model must fill all of it
#: (tools/test.py); last_file: the file loaded last (named by the load check)
_state = dict(all=False, dirs=(), hint=None, partial=False, complete=False, last_file=None)


class CheckpointError(ValueError):
    """A checkpoint file that is not loaded (the message is one line naming the file)."""


class UnsafeCheckpointError(CheckpointError):
    """The file holds objects other than weights: unpickling it could run code."""


class UnreadableCheckpointError(CheckpointError):
    """The file is not a readable checkpoint (random bytes, truncated, empty, ...)."""


class MismatchedCheckpointError(CheckpointError):
    """The file fills few of the weights it is loaded into, or fills them with tensors of
    another shape (a checkpoint of another architecture)."""


# ----------------------------------------------------------------------------- trust
def trust_checkpoints(all: Optional[bool] = None, dirs: Iterable[str] = (),
                      hint: Optional[str] = None, partial: Optional[bool] = None,
                      complete: Optional[bool] = None) -> None:
    """Set which files may fall back to the unsafe loader: every file (``all=True``: the user's
    ``--trust-checkpoint``) and/or the checkpoints that a training run of this user wrote
    into one of ``dirs`` (the work dir of the run ``tools/train.py`` resumes: the file lies
    directly in it and its tag under the user's key is the one recorded in the directory's
    :data:`MANIFEST` when mmdcs saved it, :func:`written_by_run`). ``hint``: how the refusal
    message tells the user to trust a file (set by mmdcs's tools; unset, the message names the
    config key :data:`TRUST_KEY`). ``partial``: loads may fill part of the weights they are
    meant to fill (:data:`PARTIAL_KEY`); ``complete``: a load into a whole model must fill all
    of it and bring nothing else of it (``tools/test.py``: weights left at their
    initialisation, or another network's, would be evaluated; :func:`complete_loads`)."""
    if all is not None:
        _state['all'] = bool(all)
    new = tuple(osp.realpath(d) for d in dirs if d)
    if new:
        _state['dirs'] = tuple(dict.fromkeys(_state['dirs'] + new))
    if hint is not None:
        _state['hint'] = hint
    if partial is not None:
        _state['partial'] = bool(partial)
    if complete is not None:
        _state['complete'] = bool(complete)


@contextmanager
def trust_scope() -> Iterator[None]:
    """Restore the trust settings on exit (a tool's ``main`` called in-process, tests)."""
    saved = dict(_state)
    try:
        yield
    finally:
        _state.clear()
        _state.update(saved)


@contextmanager
def complete_loads() -> Iterator[None]:
    """Inside the block, a checkpoint loaded into a whole model must fit it completely
    (:func:`check_loaded` under ``complete``): what ``tools/test.py`` sets for its run, and
    :func:`mmdcs.apis.subnet_io.load_model_checkpoint` (the export, deployment and analysis
    tools) for its load — one rule for every tool that computes with the weights as loaded."""
    saved = _state['complete']
    _state['complete'] = True
    try:
        yield
    finally:
        _state['complete'] = saved


def runner_config_flag(key: str) -> bool:
    """``key`` of the config of the mmengine Runner that is running this load (found on the
    call stack: ``runner.train()`` / ``runner.test()`` load through it), False without one. This
    is how :data:`TRUST_KEY` and :data:`PARTIAL_KEY` work in mmdet's, mmseg's and mmpretrain's
    own tools, which do not know them."""
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get('self', None)
        if owner is not None and any(c.__name__ in ('Runner', 'FlexibleRunner')
                                     for c in type(owner).__mro__):
            cfg = getattr(owner, 'cfg', None)
            try:
                return bool(cfg.get(key, False)) if cfg is not None else False
            except Exception:  # noqa: BLE001  (not a config)
                return False
        frame = frame.f_back
    return False


def _digest(h, data_or_path: Union[bytes, str]) -> str:
    if isinstance(data_or_path, bytes):
        h.update(data_or_path)
        return h.hexdigest()
    with open(data_or_path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            h.update(block)
    return h.hexdigest()


def key_path() -> str:
    """Where the user's manifest key is kept: ``$MMDCS_CONFIG_DIR/checkpoint.key``, by default
    in the user's config directory (``$XDG_CONFIG_HOME/mmdcs``, ``~/.config/mmdcs``)."""
    root = os.environ.get(KEY_DIR_ENV) or osp.join(
        os.environ.get('XDG_CONFIG_HOME') or osp.join(osp.expanduser('~'), '.config'), 'mmdcs')
    return osp.join(root, KEY_FILE)


def _create_key(path: str) -> None:
    """A new random key at ``path`` (mode 0600, its directory 0700), atomically: a process that
    creates one at the same time wins or loses as a whole."""
    os.makedirs(osp.dirname(path), mode=0o700, exist_ok=True)
    tmp = f'{path}.tmp-{os.getpid()}-{secrets.token_hex(4)}'
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, 'O_NOFOLLOW', 0), 0o600)
    try:
        with os.fdopen(fd, 'w') as f:
            f.write(secrets.token_hex(32) + '\n')
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        try:
            os.link(tmp, path)
        except FileExistsError:  # made meanwhile by another process of this user
            pass
    finally:
        os.unlink(tmp)


def manifest_key(create: bool = False) -> Tuple[Optional[bytes], str]:
    """(the user's manifest key, '') or (None, why there is none): the key file (:func:`key_path`)
    must be a regular file of this user that nobody else can read or write, holding 64 hex
    digits; ``create``: made on first use (when a run records its first checkpoint)."""
    path = key_path()
    try:
        if create and not osp.lexists(path):
            _create_key(path)
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None, (f'{path} is not a private file of this user (mode 0600); remove it '
                          'and a new key is made')
        with open(path, 'rb') as f:
            text = f.read(200).strip()
    except FileNotFoundError:
        return None, f'no key at {path} (made when a run records its first checkpoint)'
    except OSError as e:
        return None, f'{path}: {e.strerror or e}'
    if not re.fullmatch(rb'[0-9a-f]{64}', text):
        return None, f'{path} does not hold a key (64 hex digits); remove it and a new key is made'
    return bytes.fromhex(text.decode()), ''


def checkpoint_tag(key: bytes, data_or_path: Union[bytes, str]) -> str:
    """The manifest's record of a checkpoint: HMAC-SHA256 of its bytes under the user's key."""
    return _digest(hmac.new(key, digestmod=hashlib.sha256), data_or_path)


def read_manifest(directory: str) -> Dict[str, str]:
    """name → tag of the checkpoints recorded in ``directory``'s :data:`MANIFEST` (empty when
    there is none; a symlink or malformed lines are ignored)."""
    path = osp.join(directory, MANIFEST)
    if not osp.isfile(path) or osp.islink(path):
        return {}
    out = {}
    with open(path, encoding='utf-8', errors='replace') as f:
        for line in f:
            digest, _, name = line.rstrip('\n').partition('  ')
            if re.fullmatch(r'[0-9a-f]{64}', digest) and name and os.sep not in name:
                out[name] = digest
    return out


def record_checkpoint(path: str, data: Optional[bytes] = None) -> None:
    """Record the tag (:func:`checkpoint_tag`) of a checkpoint mmdcs just wrote (``data``: its
    bytes, else read) in the :data:`MANIFEST` of its directory, written atomically; entries of
    files that are gone (``max_keep_ckpts``) are dropped. Without a usable key (e.g. a
    read-only home) nothing is recorded: such a file is then not trusted on ``--resume``."""
    key, _ = manifest_key(create=True)
    if key is None:
        return
    directory, name = osp.split(osp.abspath(path))
    entries = read_manifest(directory)
    entries[name] = checkpoint_tag(key, data if data is not None else path)
    entries = {n: d for n, d in entries.items() if osp.isfile(osp.join(directory, n))}
    atomic_write(osp.join(directory, MANIFEST),
                 ''.join(f'{d}  {n}\n' for n, d in sorted(entries.items())))


def written_by_run(filename: str, data: Optional[bytes] = None) -> bool:
    """Whether ``filename`` lies directly in the work dir of the run being resumed
    (:func:`trust_checkpoints`'s ``dirs``; not in a directory below it), and that work dir's
    :data:`MANIFEST` records the file's tag under this user's key: a run of this user wrote
    exactly these bytes."""
    directory, name = osp.split(osp.realpath(filename))
    if directory not in _state['dirs']:
        return False
    key, _ = manifest_key()
    recorded = read_manifest(directory).get(name)
    return key is not None and recorded is not None and hmac.compare_digest(
        recorded, checkpoint_tag(key, data if data is not None else filename))


def is_trusted(filename: str, data: Optional[bytes] = None) -> bool:
    """Whether ``filename`` (whose bytes are ``data``, when read already) may be loaded with
    ``weights_only=False`` if the safe loader refuses it: the user trusts every file
    (``--trust-checkpoint``, or :data:`TRUST_KEY` in the config of the running Runner), or a
    resumed run wrote it (:func:`written_by_run`)."""
    if _state['all'] or runner_config_flag(TRUST_KEY):
        return True
    return written_by_run(filename, data)


# ----------------------------------------------------------------------------- allowlist
def _numpy_globals() -> List:
    import numpy as np
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy < 2
        from numpy.core import multiarray
    out = [np.ndarray, np.dtype]
    # a file written with numpy 1.x names numpy.core.multiarray; numpy 2 numpy._core.multiarray
    for fn in (multiarray._reconstruct, multiarray.scalar):
        out += [fn, (fn, f'numpy.core.multiarray.{fn.__name__}'),
                (fn, f'numpy._core.multiarray.{fn.__name__}')]
    # the dtype classes an array or scalar may be built with: numeric and bool only (an
    # object-dtype array is refused)
    names = ['BoolDType', 'Int8DType', 'UInt8DType', 'Int16DType', 'UInt16DType', 'Int32DType',
             'UInt32DType', 'Int64DType', 'UInt64DType', 'LongDType', 'ULongDType',
             'LongLongDType', 'ULongLongDType', 'ByteDType', 'UByteDType', 'ShortDType',
             'UShortDType', 'IntDType', 'UIntDType', 'Float16DType', 'Float32DType',
             'Float64DType', 'LongDoubleDType', 'Complex64DType', 'Complex128DType']
    dtypes = getattr(np, 'dtypes', None)
    out += [getattr(dtypes, n) for n in names if dtypes is not None and hasattr(dtypes, n)]
    return out


def safe_globals() -> List:
    """The types (beyond torch's defaults) that the safe loader accepts: see the module
    docstring. Every entry is a data type or a constructor of numeric data."""
    out = _numpy_globals()
    try:
        from mmengine.logging.history_buffer import HistoryBuffer
        out.append(HistoryBuffer)
    except ImportError:  # mmengine absent: plain torch checkpoints only
        pass
    return out


def _allowed_global_names() -> set:
    names = set()
    for g in safe_globals():
        if isinstance(g, tuple):
            names.add(g[1])
        else:
            names.add(f'{g.__module__}.{g.__name__}')
    try:
        from torch import _weights_only_unpickler as wou
        names.update(wou._get_allowed_globals())
    except (ImportError, AttributeError):
        pass
    return names


# ----------------------------------------------------------------------------- diagnosis
def _pickle_streams(filename: str) -> Tuple[Optional[bytes], str]:
    """(the pickle bytes to scan, '') or (None, why the file is no checkpoint)."""
    size = osp.getsize(filename)
    if size == 0:
        return None, 'the file is empty'
    with open(filename, 'rb') as f:
        head = f.read(4)
    if head == b'PK\x03\x04':
        if not zipfile.is_zipfile(filename):
            return None, 'a truncated or damaged zip archive (an interrupted download or copy?)'
        try:
            with zipfile.ZipFile(filename) as z:
                names = [n for n in z.namelist() if n.endswith('data.pkl')]
                if not names:
                    return None, 'a zip archive without the data.pkl of torch.save'
                return z.read(names[0]), ''
        except (zipfile.BadZipFile, OSError, EOFError) as e:
            return None, f'a damaged zip archive ({e})'
    with open(filename, 'rb') as f:
        return f.read(), ''


def pickle_globals(data: bytes, max_pickles: int = 5) -> List[str]:
    """The ``module.name`` of every global a pickle stream names, found by disassembling it
    (nothing is executed). Several consecutive pickles are scanned (torch's legacy format).
    Raises ``ValueError`` when the first pickle is not valid."""
    found: List[str] = []
    stream = io.BytesIO(data)
    for i in range(max_pickles):
        start = stream.tell()
        if start >= len(data):
            break
        strings: List[str] = []  # the strings pushed so far (module and name of STACK_GLOBAL)
        memo, n_memo, prev_string = {}, 0, False
        try:
            for op, arg, _ in pickletools.genops(stream):
                last = None
                if op.name in ('GLOBAL', 'INST'):
                    found.append(arg.replace(' ', '.'))
                elif op.name == 'STACK_GLOBAL':
                    found.append('.'.join(strings[-2:]))
                elif isinstance(arg, str) and ('UNICODE' in op.name or 'STRING' in op.name):
                    last = arg
                elif op.name in ('BINGET', 'LONG_BINGET', 'GET'):
                    last = memo.get(arg)
                elif op.name == 'MEMOIZE':
                    memo[n_memo] = strings[-1] if strings and prev_string else None
                    n_memo += 1
                elif op.name in ('BINPUT', 'LONG_BINPUT', 'PUT'):
                    memo[arg] = strings[-1] if strings and prev_string else None
                if last is not None:
                    strings.append(last)
                if op.name not in ('MEMOIZE', 'BINPUT', 'LONG_BINPUT', 'PUT', 'FRAME'):
                    prev_string = last is not None
        except Exception:  # noqa: BLE001  (a malformed stream)
            if i == 0:
                raise ValueError('not a pickle') from None
            break
    return list(dict.fromkeys(found))


def _diagnose(filename: str, error: BaseException) -> CheckpointError:
    """Why the safe loader refused ``filename``: objects other than weights (which), or not a
    readable checkpoint (why)."""
    data, why = _pickle_streams(filename)
    if data is None:
        return unreadable(filename, why)
    try:
        names = pickle_globals(data)
    except ValueError:
        return unreadable(filename, 'neither a torch.save file nor a safetensors file')
    allowed = _allowed_global_names()
    unsafe = [n for n in names if n not in allowed]
    text = str(error)
    m = re.search(r"GLOBAL ([\w.]+)|got <class '([\w.]+)'>", text)
    if not unsafe and m:
        unsafe = [m.group(1) or m.group(2)]
    if unsafe:
        return UnsafeCheckpointError(_unsafe_message(filename, unsafe))
    if 'Weights only load failed' in text or 'WeightsUnpickler' in text:
        # a valid pickle that the weights-only unpickler refuses for another reason
        reason = text.split('WeightsUnpickler error:')[-1] if 'WeightsUnpickler error:' in \
            text else text
        reason = next((ln.strip() for ln in reason.splitlines() if ln.strip()), '')[:160]
        return UnsafeCheckpointError(_unsafe_message(
            filename, [], f'objects the weights-only loader cannot check ({reason})'))
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(error).__name__)
    return unreadable(filename, f'{type(error).__name__}: {first[:200]}')


def unreadable(filename: str, why: str) -> UnreadableCheckpointError:
    return UnreadableCheckpointError(f'{filename} is not a readable checkpoint: {why}')


def trust_hint() -> str:
    """How to trust a file: mmdcs's tools name their flag; under another tool (mmdet's, mmseg's
    own tools/train.py, which have no such flag) the config key."""
    return f'load it with {_state["hint"]}' if _state['hint'] else \
        f'set `{TRUST_KEY} = True` in the config'


def partial_hint() -> str:
    return (f'`{PARTIAL_KEY} = True` in the config (e.g. --cfg-options {PARTIAL_KEY}=True)')


def _unsafe_message(filename: str, names: List[str], what: str = '') -> str:
    what = what or ('objects other than weights (' + ', '.join(names[:4]) +
                    (', ...' if len(names) > 4 else '') + ')')
    msg = (f'{filename} holds {what}; unpickling it could run code, so it is not loaded. '
           f'If you trust its source, {trust_hint()}')
    if _state['dirs']:
        _, problem = manifest_key()
        msg += (' (a full-state resume loads such a file without it only when this run wrote '
                'it: its tag under your key recorded in '
                + ', '.join(osp.join(d, MANIFEST) for d in _state['dirs'])
                + (f'; {problem}' if problem else '') + ')')
    return msg + '.'


# ----------------------------------------------------------------------------- loading
def _load_safetensors(filename: str, map_location=None) -> dict:
    from safetensors import SafetensorError, safe_open
    state = {}
    try:
        with safe_open(filename, framework='pt', device='cpu') as f:
            metadata = f.metadata() or {}
            for key in f.keys():
                state[key] = f.get_tensor(key)
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise unreadable(filename, f'a damaged safetensors file ({e})') from None
    meta = {k: v for k, v in metadata.items() if k != SAFETENSORS_META_KEY}
    if SAFETENSORS_META_KEY in metadata:
        try:
            meta.update(json.loads(metadata[SAFETENSORS_META_KEY]))
        except ValueError:
            raise unreadable(filename, f'its {SAFETENSORS_META_KEY} metadata is not JSON') \
                from None
    if map_location is not None and not callable(map_location) and not isinstance(
            map_location, dict):
        state = {k: v.to(map_location) for k, v in state.items()}
    return dict(state_dict=state, meta=meta)


def is_safetensors(filename: str) -> bool:
    return str(filename).endswith('.safetensors')


def load_checkpoint_file(filename: str, map_location=None):
    """Load a local checkpoint file safely (see the module docstring) and check that it is one
    (:func:`check_structure`); raises ``FileNotFoundError``, :class:`UnsafeCheckpointError` or
    :class:`UnreadableCheckpointError`."""
    filename = osp.expanduser(str(filename))
    if not osp.isfile(filename):
        raise FileNotFoundError(f'{filename} can not be found.')
    _state['last_file'] = filename
    if is_safetensors(filename):
        return _load_safetensors(filename, map_location)
    return check_structure(filename, _load_pickled(filename, map_location))


def check_structure(filename: str, ckpt):
    """``ckpt`` if it has a checkpoint's structure — a dict with string keys, whose
    ``state_dict`` (when it has one; else the dict itself is the state dict, as mmengine reads
    it) maps names (strings) to tensors — else one :class:`UnreadableCheckpointError` line
    (a list, a bare tensor, integer names ...) instead of an error deep inside the loading."""
    import torch
    shape = "{'state_dict': {name: tensor, ...}, ...} or {name: tensor, ...}"
    if not isinstance(ckpt, Mapping):
        raise unreadable(filename, f'it holds a {type(ckpt).__name__}, not a dict ({shape})')
    state = ckpt.get('state_dict', ckpt)
    what = 'its state_dict' if state is not ckpt else 'its top level'
    if not isinstance(state, Mapping):
        raise unreadable(filename, f'{what} is a {type(state).__name__}, not a dict ({shape})')
    for key, value in state.items():
        if not isinstance(key, str):
            raise unreadable(filename, f'{what} has the key {key!r} ({type(key).__name__}): '
                             'tensors are named by strings')
        if state is not ckpt and not torch.is_tensor(value) and not key.endswith('_extra_state'):
            raise unreadable(filename, f'{what} holds a {type(value).__name__} under {key!r}, '
                             'not a tensor')
    return ckpt


def _load_pickled(filename: str, map_location=None):
    import torch
    try:
        with torch.serialization.safe_globals(safe_globals()), warnings.catch_warnings():
            # torch warns about pickle protocols > 2 before it refuses them: one line is enough
            warnings.filterwarnings('ignore', message='Detected pickle protocol')
            return torch.load(filename, map_location=map_location, weights_only=True)
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as e:  # noqa: BLE001  (torch raises many kinds on a bad file)
        error = _diagnose(filename, e)
    if isinstance(error, UnsafeCheckpointError):
        # read once: the bytes whose digest is checked are the bytes unpickled
        with open(filename, 'rb') as f:
            data = f.read()
        if not is_trusted(filename, data):
            raise error
        try:
            return torch.load(io.BytesIO(data), map_location=map_location, weights_only=False)
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception as e:  # noqa: BLE001
            raise unreadable(filename, f'{type(e).__name__}: {str(e).strip()[:200]}') from None
    raise error


# ----------------------------------------------------------------------------- fit
_SIZE_MISMATCH = re.compile(r'size mismatch for ([^:\s]+): copying a param with shape (.+?) '
                            r'from checkpoint, the shape in current model is (.+?)\.(?:\n|$)')


def _shape(text: str) -> str:
    return text.replace('torch.Size(', '').replace(')', '').replace('[', '(').replace(']', ')')


def check_loaded(target: str, model_numel: Dict[str, int], loaded_keys: Sequence[str],
                 missing: Sequence[str], unexpected: Sequence[str], errors: Sequence[str],
                 whole_model: bool, search_state: Sequence[str] = ()) -> None:
    """Refuse a load that filled few of the weights it was meant to fill, or filled some with
    tensors of another shape, or (a complete load) brought tensors the model does not have:
    one :class:`MismatchedCheckpointError` line (the file, how many tensors matched / were
    missing / unexpected / mis-shaped, the switch that allows it).

    ``model_numel``: name → number of values of every tensor of the module loaded into;
    ``loaded_keys``: the names the checkpoint gave it; ``missing``, ``unexpected``, ``errors``:
    what the load reported (``errors`` holds torch's "size mismatch for ..." lines);
    ``search_state``: names (or prefixes) of what the model kind keeps of a search, not of its
    network (:func:`mmdcs.selection.search_state_keys`: e.g. ``cost_mu``): neither missing
    nor unexpected counts for them.
    What the load is meant to fill: an ``init_cfg`` Pretrained load (into a backbone, after its
    prefix) every weight of that module; a load into a whole model (``load_from``, ``--resume``,
    ``tools/test.py``'s CHECKPOINT: ``whole_model``) the weights of its ``backbone`` and of the
    model's other parts (``neck``, ``head``, ...) that the checkpoint has, so that a head or neck
    a downstream config adds stays at its initialisation; under ``complete``
    (:func:`complete_loads`: ``tools/test.py``, the export, deployment and analysis tools)
    every weight of the model, and nothing else of it: a tensor the model lacks at its top
    level or inside one of its parts (a supernet's gates and Linear_θ in a plain network) means
    the file holds another network (one of a part the model has not, e.g. an auxiliary head a
    test config drops, is not used and passes). Refused: a mis-shaped tensor, under
    ``complete`` a meant weight missing or such an unexpected tensor, or fewer than
    :data:`MIN_FILLED` of the meant values filled (counted in values, so that a few small new
    tensors, e.g. the gates of a supernet initialised from a pretrained baseline, or a detector
    backbone's extra norms, do not count as much as the weights). Allowed anyway with
    :data:`PARTIAL_KEY` (the tools' config, or the running Runner's)."""
    if not model_numel or _state['partial'] or runner_config_flag(PARTIAL_KEY):
        return
    shaped = {}
    for err in errors:
        for m in _SIZE_MISMATCH.finditer(str(err)):
            shaped[m.group(1)] = (_shape(m.group(2)), _shape(m.group(3)))
    part = (lambda k: k.split('.', 1)[0])
    searched = (lambda k: in_search_state(k, search_state))
    missing = {k for k in missing if k in model_numel and not searched(k)}
    unexpected = [k for k in unexpected if not searched(k)]
    complete = whole_model and _state['complete']
    parts = {part(k) for k in model_numel}
    foreign = [k for k in unexpected if '.' not in k or part(k) in parts] if complete else []
    if whole_model and not complete:
        # the backbone always; a neck or head only when the file has one
        given = {part(k) for k in loaded_keys} | {'backbone'}
        meant = [k for k in model_numel if part(k) in given]
    else:
        meant = [k for k in model_numel if not searched(k)]
    lost = missing | set(shaped)
    total = sum(model_numel[k] for k in meant)
    filled = sum(model_numel[k] for k in meant if k not in lost)
    n_missing = sum(1 for k in meant if k in missing)
    n_matched = sum(1 for k in meant if k not in lost)
    share = filled / total if total else 0.0
    if not shaped and share >= MIN_FILLED and not (complete and (n_missing or foreign)):
        return
    why = ('it holds tensors of another shape' if shaped else
           'it holds tensors the model does not have (another network\'s)' if foreign else
           'it leaves weights at their initialisation, which a test would evaluate'
           if complete and share >= MIN_FILLED else
           'it fills few of the weights' if n_matched else 'it fills none of the weights')
    detail = ''
    if shaped:
        key, (ckpt, model) = next(iter(shaped.items()))
        detail = f' (e.g. {key}: {ckpt} in the file, {model} in the model)'
    elif foreign:
        detail = f' (e.g. {foreign[0]} unexpected)'
    elif n_missing:
        detail = f' (e.g. {next(k for k in meant if k in missing)} missing)'
    parts_meant = '' if not whole_model or complete else \
        f' of its parts meant ({", ".join(sorted({part(k) for k in meant})) or "none"})'
    raise MismatchedCheckpointError(
        f'{_state["last_file"] or "the checkpoint"} does not fit {target}: {why}: '
        f'{n_matched} of the {len(meant)} tensors{parts_meant} matched '
        f'({100 * share:.1f} % of their values), {n_missing} missing, {len(unexpected)} '
        f'unexpected, {len(shaped)} mis-shaped{detail}.'
        + (' Is it a checkpoint of another model?' if shaped or foreign or share < MIN_FILLED
           else '')
        + f' If a partial load is what you want, set {partial_hint()}.')


# ----------------------------------------------------------------------------- writing
def plain(obj):
    """``obj`` with numpy scalars / arrays made Python numbers / lists, subclasses of str, int
    and float (``torch.__version__`` is a ``TorchVersion``) made the built-in types and tuples
    kept, so that it pickles as plain data the weights-only loader reads (for the ``meta`` of
    the checkpoints mmdcs writes)."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        np = None
    for t in (bool, str, int, float):
        if isinstance(obj, t):
            return t(obj)
    if isinstance(obj, dict):
        return {plain(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return tuple(plain(v) for v in obj)
    if isinstance(obj, (list, set)):
        return [plain(v) for v in obj]
    if np is not None and isinstance(obj, np.generic):
        return obj.item()
    if np is not None and isinstance(obj, np.ndarray):
        return obj.tolist()
    return obj


def save_weights(path: str, state_dict: dict, meta: Optional[dict] = None) -> None:
    """Write ``{'state_dict': ..., 'meta': ...}`` (tensors on the CPU, ``meta`` plain data) as
    a ``.pth`` file, or, when ``path`` ends in ``.safetensors``, as a safetensors file with the
    meta as JSON in its metadata. Both load through :func:`load_checkpoint_file`."""
    import torch
    meta = plain(meta or {})
    tensors = {k: v.detach().cpu() for k, v in state_dict.items()}
    os.makedirs(osp.dirname(osp.abspath(path)) or '.', exist_ok=True)
    if is_safetensors(path):
        from safetensors.torch import save_file
        # safetensors stores no views: each tensor gets its own contiguous memory
        tensors = {k: v.contiguous().clone() for k, v in tensors.items()}
        save_file(tensors, path, metadata={SAFETENSORS_META_KEY: json.dumps(meta)})
    else:
        torch.save({'meta': meta, 'state_dict': tensors}, path)
