"""The exported architecture of an OFB search: a small JSON file from which a compact, dense
backbone is built (no masks, no scores).

ViT::

    {"format": "mmdcs-ofb-arch/1", "family": "vit", "arch": "deit-s", "embed_dim": 312,
     "blocks": [{"num_heads": 6, "head_dim": 48, "mlp_hidden": 960}, ...],
     "meta": {...}}

Swin: ``"stages": [{"embed_dim": 96, "blocks": [...]}, ...]`` instead of ``embed_dim`` and
``blocks``. ``meta`` (source config, checkpoint, its sha256, FLOPs...) is informative only.
"""
import json
import os.path as osp
from typing import Dict, List, Union

from mmdcs.selection.jsonio import read_json

ARCH_FORMAT = 'mmdcs-ofb-arch/1'
BLOCK_KEYS = ('num_heads', 'head_dim', 'mlp_hidden')


class ArchFileError(ValueError):
    """An architecture file that cannot be read or does not fit the backbone."""


def load_arch(arch: Union[str, dict]) -> dict:
    """The architecture dict from a path or a dict, with its format checked."""
    if isinstance(arch, str):
        if not osp.isfile(arch):
            raise ArchFileError(f'OFB arch file not found: {arch}')
        arch = read_json(arch, ArchFileError, 'OFB arch', expect=None)
    if not isinstance(arch, dict):
        raise ArchFileError(f'an OFB arch must be a dict, got {type(arch).__name__}')
    if arch.get('format') != ARCH_FORMAT:
        raise ArchFileError(f'not an OFB arch file (format {arch.get("format")!r}, expected '
                            f'{ARCH_FORMAT!r}); DCS/KCR subnet files go to model.backbone.subnet '
                            'of mmdcs.ViT / mmdcs.Swin')
    return arch


def save_arch(arch: dict, path: str) -> None:
    with open(path, 'w') as f:
        json.dump(arch, f, indent=1)
        f.write('\n')


def _positive_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArchFileError(f'{what} must be a positive integer, got {value!r}')
    return value


def check_family(arch: dict, family: str, name: str, owner: str) -> None:
    if arch.get('family') != family:
        raise ArchFileError(f'{owner}: the arch file is for family {arch.get("family")!r}, '
                            f'not {family!r}')
    if arch.get('arch') != name:
        raise ArchFileError(f'{owner}: the arch file was searched on {arch.get("arch")!r}, '
                            f'the backbone is {name!r}')


def check_blocks(blocks, depth: int, full: Dict[str, int], where: str) -> List[Dict[str, int]]:
    """Validate ``depth`` block entries against the full widths ``full`` (``num_heads``,
    ``head_dim``, ``mlp_hidden``); errors name the block."""
    if not isinstance(blocks, list) or len(blocks) != depth:
        n = len(blocks) if isinstance(blocks, list) else type(blocks).__name__
        raise ArchFileError(f'{where}: the arch file has {n} blocks, the backbone {depth}')
    out = []
    for i, block in enumerate(blocks):
        if not isinstance(block, dict):
            raise ArchFileError(f'{where} block {i}: expected a dict, got {block!r}')
        missing = [k for k in BLOCK_KEYS if k not in block]
        if missing:
            raise ArchFileError(f'{where} block {i}: missing {", ".join(missing)}')
        entry = {}
        for k in BLOCK_KEYS:
            v = _positive_int(block[k], f'{where} block {i} {k}')
            if v > full[k]:
                raise ArchFileError(f'{where} block {i}: {k} = {v} exceeds the full model\'s '
                                    f'{full[k]}')
            entry[k] = v
        out.append(entry)
    return out


def check_width(value, full: int, what: str) -> int:
    v = _positive_int(value, what)
    if v > full:
        raise ArchFileError(f'{what} = {v} exceeds the full model\'s {full}')
    return v
