"""The one reader of the JSON files a user gives mmdcs (subnet descriptions, OFB arch files,
latency tables, comparison results): :func:`read_json`.

JSON is plain data (nothing in it runs), but Python's reader accepts more than JSON and fails in
ways a user cannot read: ``Infinity`` / ``NaN`` and numbers beyond the float range (``1e400``)
become infinite or NaN floats; a file nested 200,000 levels deep raises ``RecursionError``; a
byte that is not UTF-8 raises ``UnicodeDecodeError`` from deep inside. Here each of these is
one line naming the file (raised as the caller's error type, e.g.
:class:`~mmdcs.selection.SubnetError`, which the tools print as one line with exit code 2), and
the top-level value can be required to be an object. What the content must hold is checked by
each kind's own reader (``SubnetSpec.from_dict``, ``load_arch``, ``read_table``, ...).
"""
import json
import math
from typing import Any, Optional, Type


class _Refused(Exception):
    """Raised from inside the JSON parser's hooks (carries the reason)."""


def _no_constant(name: str):
    raise _Refused(f'{name} is not a JSON number (only finite numbers are)')


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f'the number {text[:40]} is beyond the range of a float')
    return value


def read_json(path: str, error: Type[Exception] = ValueError, what: str = 'JSON',
              expect: Optional[type] = dict) -> Any:
    """The content of the JSON file ``path``: finite numbers only, UTF-8 text, nested within
    Python's recursion limit; with ``expect`` (default ``dict``) its top-level value of that
    type. Anything else raises ``error`` with one line ``PATH: not a valid WHAT file (why)``
    (``FileNotFoundError`` / ``OSError`` for a file that cannot be opened)."""
    with open(path, 'rb') as f:
        data = f.read()

    def refuse(why: str) -> Exception:
        return error(f'{path}: not a valid {what} file ({why})')

    try:
        text = data.decode('utf-8-sig')
    except UnicodeDecodeError as e:
        raise refuse(f'not UTF-8 text: byte 0x{data[e.start]:02x} at offset {e.start}') \
            from None
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except _Refused as e:
        raise refuse(str(e)) from None
    except json.JSONDecodeError as e:
        raise refuse('the file is empty' if not text.strip() else
                     f'corrupt or truncated JSON: {e.msg} at line {e.lineno} column {e.colno}') \
            from None
    except RecursionError:
        raise refuse('nested too deeply') from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise refuse(' '.join(str(e).split())[:160]) from None
    if expect is not None and not isinstance(value, expect):
        raise refuse(f'expected a JSON {_KIND.get(expect, expect.__name__)}, found '
                     f'{_KIND.get(type(value), type(value).__name__)}')
    return value


_KIND = {dict: 'object', list: 'array', str: 'string', int: 'number', float: 'number',
         bool: 'boolean', type(None): 'null'}
