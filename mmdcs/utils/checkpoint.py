"""Safe checkpoint loading: a checkpoint file must not be able to run code.

Unpickling a ``.pth`` file can call any Python function the file names (``os.system``, ``eval``,
...). torch ≥ 2.6 therefore loads with ``weights_only=True`` by default: only tensors, numbers,
strings and containers, plus the types an allowlist adds. mmdcs loads every local checkpoint
(``init_cfg=dict(type='Pretrained')``, ``load_from``, ``--resume``, ``tools/test.py``'s
CHECKPOINT, the export / convert / analysis tools, a DynamicViT teacher) with
:func:`load_checkpoint_file`:

* ``.safetensors`` files are read with ``safetensors`` (tensors only; the mmdcs ``meta`` is a JSON
  string in the file's metadata);
* other files with ``torch.load(..., weights_only=True)`` and :data:`SAFE_GLOBALS`, the exact,
  harmless types an mmengine checkpoint holds besides tensors: mmengine's ``HistoryBuffer`` (the
  message hub's logged scalars; :func:`mmdcs.utils.compat.patch_history_buffer_pickling` makes
  it pickle its numbers only, and unpickling it only sets them) and numpy arrays / scalars of
  numeric and bool dtypes (metric values, ETA). No function that can reach other code
  (``getattr``, ``eval``, ``exec``, ``os.*``, ...) and no object-dtype array is in it;
* a file that names anything else is refused with :class:`UnsafeCheckpointError` (one line: the
  file, the objects it holds, the flag that loads it anyway), unless it is trusted: the user
  passed ``--trust-checkpoint`` (or ``trust_checkpoint = True`` in the config), or, for a
  full-state ``--resume``, the file lies in the run's own work dir (what this machine wrote);
  a trusted file that the safe loader refuses is loaded with ``weights_only=False``;
* a file that is no checkpoint at all (random bytes, a truncated download, an empty file) gives
  :class:`UnreadableCheckpointError` (one line: the file, that it is not a readable checkpoint,
  why).

Both errors are ``ValueError`` subclasses that :func:`mmdcs.apis.launch.user_errors` turns into
one line and exit code 2. Which files are trusted is module state set by the tools
(:func:`trust_checkpoints`, inside :func:`trust_scope`). Why a file is refused is found without
executing it: the pickle stream is disassembled (:mod:`pickletools`) and the globals it names are
compared with the allowlist.
"""
import io
import json
import os
import os.path as osp
import pickletools
import re
import warnings
import zipfile
from contextlib import contextmanager
from typing import Iterable, Iterator, List, Optional, Tuple

#: the flag every checkpoint-reading tool accepts (named in the refusal message)
TRUST_FLAG = '--trust-checkpoint'
#: the config key that does the same for tools/train.py and tools/test.py
TRUST_KEY = 'trust_checkpoint'
#: where the JSON of the mmdcs ``meta`` lives in the metadata of a safetensors file
SAFETENSORS_META_KEY = 'mmdcs_meta'

_state = dict(all=False, dirs=(), hint=TRUST_FLAG)


class CheckpointError(ValueError):
    """A checkpoint file that is not loaded (the message is one line naming the file)."""


class UnsafeCheckpointError(CheckpointError):
    """The file holds objects other than weights: unpickling it could run code."""


class UnreadableCheckpointError(CheckpointError):
    """The file is not a readable checkpoint (random bytes, truncated, empty, ...)."""


# ----------------------------------------------------------------------------- trust
def trust_checkpoints(all: Optional[bool] = None, dirs: Iterable[str] = (),
                      hint: Optional[str] = None) -> None:
    """Set which files may fall back to the unsafe loader: every file (``all=True``: the user's
    ``--trust-checkpoint``) and/or the files inside ``dirs`` (a resumed run's work dir).
    ``hint``: how the refusal message tells the user to trust a file."""
    if all is not None:
        _state['all'] = bool(all)
    new = tuple(osp.realpath(d) for d in dirs if d)
    if new:
        _state['dirs'] = tuple(dict.fromkeys(_state['dirs'] + new))
    if hint is not None:
        _state['hint'] = hint


@contextmanager
def trust_scope() -> Iterator[None]:
    """Restore the trust settings on exit (a tool's ``main`` called in-process, tests)."""
    saved = dict(_state)
    try:
        yield
    finally:
        _state.clear()
        _state.update(saved)


def is_trusted(filename: str) -> bool:
    """Whether ``filename`` may be loaded with ``weights_only=False`` if the safe loader
    refuses it."""
    if _state['all']:
        return True
    path = osp.realpath(filename)
    return any(path.startswith(d.rstrip(os.sep) + os.sep) for d in _state['dirs'])


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


def _unsafe_message(filename: str, names: List[str], what: str = '') -> str:
    what = what or ('objects other than weights (' + ', '.join(names[:4]) +
                    (', ...' if len(names) > 4 else '') + ')')
    msg = (f'{filename} holds {what}; unpickling it could run code, so it is not loaded. '
           f'If you trust its source, load it with {_state["hint"]}')
    if _state['dirs']:
        msg += (' (a full-state resume loads such a file without it only from the run\'s '
                f'work dir, {", ".join(_state["dirs"])})')
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
    """Load a local checkpoint file safely (see the module docstring); raises
    ``FileNotFoundError``, :class:`UnsafeCheckpointError` or :class:`UnreadableCheckpointError`.
    """
    import torch
    filename = osp.expanduser(str(filename))
    if not osp.isfile(filename):
        raise FileNotFoundError(f'{filename} can not be found.')
    if is_safetensors(filename):
        return _load_safetensors(filename, map_location)
    try:
        with torch.serialization.safe_globals(safe_globals()), warnings.catch_warnings():
            # torch warns about pickle protocols > 2 before it refuses them: one line is enough
            warnings.filterwarnings('ignore', message='Detected pickle protocol')
            return torch.load(filename, map_location=map_location, weights_only=True)
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as e:  # noqa: BLE001  (torch raises many kinds on a bad file)
        error = _diagnose(filename, e)
    if isinstance(error, UnsafeCheckpointError) and is_trusted(filename):
        try:
            return torch.load(filename, map_location=map_location, weights_only=False)
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception as e:  # noqa: BLE001
            raise unreadable(filename, f'{type(e).__name__}: {str(e).strip()[:200]}') from None
    raise error


# ----------------------------------------------------------------------------- writing
def plain(obj):
    """``obj`` with numpy scalars / arrays made Python numbers / lists and tuples kept, so that
    it pickles without numpy (for the ``meta`` of the checkpoints mmdcs writes)."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        np = None
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
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
