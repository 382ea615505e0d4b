"""A config's latency table: what ``tools/analysis/latency_table.py`` (and any tool that needs a
table for a config) shares — the supernet backbone and its baseline built from a config at an
input size, the table measured and validated on this device, a table file read back for a
config with one clear line on a mismatch.
"""
import copy
import os
import os.path as osp
from typing import Callable, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from mmdcs.analysis.complexity import PAPER_VARIANT, backbone_class
from mmdcs.analysis.latency import DTYPES, _size, build_runtime, device_name
from mmdcs.analysis.latency_table import (build_table, check_timed_apart, format_validation,
                                          load_table, validate)
from mmdcs.analysis.latency_target import latency_target_row, supernet_pair
from mmdcs.analysis.peer_benchmark import import_torch_pruning, peer_benchmark
from mmdcs.selection.budget import BudgetError, Measure
from mmdcs.selection.latency_cost import LatencyCost, LatencyTableError
from .launch import UserError
from .outputs import write_json
from .subnet_io import (backbone_cfg_of, build_model, config_input_size, load_task_config,
                        require_supernet)

Size = Tuple[int, int]

#: backbone arguments of the selection: dropped to build the baseline of a supernet's config
SELECTION_KEYS = ('subnet', 'select_hidden', 'select_heads', 'theta_rank', 'gate_init', 'tau',
                  'qk_mask', 'init_cfg')


def config_backbones(config: str, shape: Optional[Sequence[int]] = None,
                     cfg_options: Optional[dict] = None) -> Tuple[nn.Module, nn.Module, Size,
                                                                   str]:
    """(supernet backbone, baseline backbone, (H, W), where the size comes from) of a config:
    the config's backbone (a DCS or KCR supernet; :class:`UserError` otherwise) and the same
    backbone settings with ``variant='baseline'`` and no selection, both built for ``shape``
    (default: the config's input size), random weights, eval mode."""
    cfg, scope = load_task_config(config, cfg_options)
    bcfg = copy.deepcopy(backbone_cfg_of(cfg.model))
    bcfg.pop('init_cfg', None)
    sup = require_supernet(build_model(copy.deepcopy(bcfg), scope), config)
    if shape:
        size, source = (int(shape[0]), int(shape[-1])), '--shape'
    else:
        size, source = config_input_size(cfg, sup)
    extra = type(sup).size_kwargs(size)
    if extra and tuple(sup.input_size) != size:
        bcfg.update(extra)
        sup = require_supernet(build_model(copy.deepcopy(bcfg), scope), config)
    base_cfg = {k: v for k, v in bcfg.items() if k not in SELECTION_KEYS}
    base_cfg['variant'] = 'baseline'
    base = build_model(base_cfg, scope)
    return sup.eval(), base.eval(), size, source


def check_device(device: str, dtype: str) -> None:
    if device not in ('cpu', 'cuda'):
        raise UserError(f'--device must be cpu or cuda, got {device!r}')
    if device == 'cuda' and not torch.cuda.is_available():
        raise UserError('--device cuda: no CUDA device is available here (build the table on '
                        'the machine it is for)')
    if dtype not in DTYPES:
        raise UserError(f'--dtype must be one of {", ".join(DTYPES)}, got {dtype!r}')


def make_runtime(runtime: str = 'torch', device: str = 'cpu', threads: Optional[int] = 1,
                 dtype: str = 'fp32', workdir: Optional[str] = None):
    """The runtime ``--runtime`` names, set up for ``device``, ``threads`` and ``dtype``
    (:func:`mmdcs.analysis.latency.build_runtime`); one :class:`UserError` line where it
    cannot run here (unknown, a package or an execution provider missing, a dtype)."""
    check_device(device, dtype)
    try:
        return build_runtime(Measure(runtime=runtime, device=device, threads=threads,
                                     dtype=dtype), workdir)
    except ValueError as e:
        raise UserError(f'--runtime {runtime}: {e}') from e


def measure_table(sup: nn.Module, base: nn.Module, size: Size, batch: int = 1,
                  threads: Optional[int] = 1, dtype: str = 'fp32', device: str = 'cpu',
                  rounds: int = 5, multiple_of: int = 8, validate_k: int = 0,
                  validate_rounds: int = 15, progress: Optional[Callable[[str], None]] = print,
                  runtime: str = 'torch') -> dict:
    """The latency table of ``sup`` measured here in ``runtime`` (and validated on
    ``validate_k`` random subnets, kept in the table's ``validation``)."""
    rt = make_runtime(runtime, device, threads, dtype)
    table = build_table(sup, base, size, batch, threads, dtype, device, rounds,
                        multiple_of=multiple_of, progress=progress, runtime=rt)
    if validate_k:
        table['validation'] = validate(table, sup, base, validate_k, validate_rounds,
                                       multiple_of=multiple_of, progress=progress, runtime=rt)
    return table


def table_for(path: str, backbone: nn.Module, input_size: Optional[Sequence[int]] = None,
              device: Optional[str] = None, threads: Optional[int] = None,
              batch: Optional[int] = None, dtype: Optional[str] = None) -> LatencyCost:
    """The :class:`LatencyCost` of a table file for ``backbone``: one :class:`UserError` line
    when the file is missing, corrupt or for another arch / variant / selection / input size;
    a warning naming both when it was measured on another device, thread count, batch or
    dtype than the one given."""
    try:
        cost = LatencyCost.from_file(path, backbone, input_size)
    except LatencyTableError as e:
        msg = str(e)
        raise UserError(msg if path in msg else f'{path}: {msg}') from e
    cost.context_warnings(device_name(torch.device(device)) if device else None, threads, batch,
                          dtype)
    return cost


def summary(table: dict) -> str:
    """What a table is and what it cost, in a few lines (printed by the tool)."""
    cost = LatencyCost(table)
    lines = [
        f'{table["arch"]} ({table["variant"]}, selection {table["selection"]}) at '
        f'{"x".join(map(str, table["input_shape"]))}, batch {table["batch"]}, '
        f'{table["threads"]} thread(s), {table["dtype"]}, {table["device_name"]}, '
        f'{_runtime_text(table)}',
        f'baseline {table["baseline_ms"]:.3f} ms, pruned network at full width '
        f'{table["full_ms"]:.3f} ms (predicted {cost.ceiling:.3f}), constant '
        f'{table["const_ms"]:.3f} ms; predicted floor (groups of {table["multiple_of"]}) '
        f'{cost.ratio(cost.floor_at(table["multiple_of"])):.3f} of the baseline',
        f'{len(table["units"])} units, {table["grid_points"]} grid points x {table["rounds"]} '
        f'interleaved rounds; built in {table["build_s"]:.1f} s; spread of a unit\'s rounds: '
        f'median {table["dispersion"]["unit_spread_median"]:.1%}, max '
        f'{table["dispersion"]["unit_spread_max"]:.1%}']
    if table.get('validation'):
        lines += ['', format_validation(table['validation'])]
    return '\n'.join(lines)


def _runtime_text(table: dict) -> str:
    """The runtime a table was measured in, with its version (PyTorch's for older tables)."""
    info = table.get('runtime_info') or {}
    name = table.get('runtime') or 'torch'
    return f'{name} {info.get("version") or table.get("torch")}'


def table_file_name(arch: str, variant: str, size: Sequence[int], batch: int,
                    threads: Optional[int], device: str, dtype: str,
                    select_hidden=False, select_heads: bool = False,
                    runtime: str = 'torch') -> str:
    """The file name a latency table is cached under in a ``--tables`` directory: everything
    a table is valid for (arch, variant, selection, input size, batch, threads, device,
    dtype, runtime). A head-selected supernet's table (head units) is ``-heads`` after the
    hidden-unit part, so a table without head units is never looked up for it; a runtime
    other than PyTorch's is ``_<runtime>`` after the dtype (the other names are unchanged)."""
    hidden = '' if not select_hidden else '-hidden' if select_hidden is True else \
        f'-hidden-{select_hidden}'
    heads = '-heads' if select_heads else ''
    rt = '' if runtime == 'torch' else f'_{runtime}'
    return (f'{arch}_{variant}{hidden}{heads}_{size[0]}x{size[-1]}_b{batch}_t{threads or 0}_'
            f'{device}_{dtype}{rt}.json')


def _tables_dir(tables: Optional[str]) -> None:
    """``--tables DIR``: created if missing; a path that is not a directory is one line."""
    if tables is not None:
        if osp.exists(tables) and not osp.isdir(tables):
            raise UserError(f'--tables {tables}: not a directory')
        os.makedirs(tables, exist_ok=True)


def _kept_table(tables: Optional[str], name: str, force: bool,
                progress: Optional[Callable[[str], None]], label: str):
    """(path, table) of table file ``name`` kept in ``tables``: the table read back when the
    file is there (and not ``force``), else None (measured and written by the caller); a
    corrupt or mismatched file is one line naming it. ``(None, None)`` without ``tables``."""
    if tables is None:
        return None, None
    path = osp.join(tables, name)
    if not osp.exists(path) or force:
        return path, None
    try:
        table = load_table(path)
    except LatencyTableError as e:
        msg = str(e)
        raise UserError(msg if path in msg else f'{path}: {msg}') from e
    if progress:
        progress(f'{label}: table {path}')
    return path, table


def _check_models(models: Sequence[str], select_heads: bool, variant, input_size,
                  select_hidden) -> None:
    """Every arch known; with ``select_heads``, a family with head selection whose heads a
    table can time apart from its channels (one :class:`UserError` line otherwise)."""
    for arch in models:
        try:
            cls = backbone_class(arch)
        except ValueError as e:
            raise UserError(str(e)) from e
        if select_heads and not cls.supports_heads:
            raise UserError(f'--select-heads: {arch} ({cls.__name__}) has no head selection '
                            '(supports_heads is False)')
    for arch in models if select_heads else ():  # a table must time heads apart
        sup = supernet_pair(arch, variant, input_size, select_hidden,
                            select_heads=True)[0]
        try:
            check_timed_apart(sup)
        except ValueError as e:
            raise UserError(f'--select-heads: {arch}: {e} (--target-flops --select-heads '
                            'counts them exactly)') from e
        del sup


def row_line(row: dict) -> str:
    """A progress line of a :func:`latency_target_rows` row."""
    return (f'{row["model"]}: batch {row["batch"]}: predicted {row["predicted_ratio"]:.3f}, '
            f'measured {row["measured_ratio"]:.3f} (wall clock), '
            f'{row["measured_ratio_clock"]:.3f} ({row["clock"]} clock), FLOPs '
            f'{row["flops_ratio"]:.3f}, params {row["params_ratio"]:.3f}'
            + (f', heads {row["heads_kept"]}/{row["heads_total"]}' if 'heads_kept' in row
               else '')
            + (f', asked {row["asked_ratio"]:.3f} of the table after '
               f'{len(row["refine_steps"]) - 1} measured correction(s)'
               if len(row.get('refine_steps') or ()) > 1 else '')
            + (f', predictor error {row["predictor_error"]:.1%} (max '
               f'{row["predictor_error_max"]:.1%})' if 'predictor_error' in row else '')
            + f' ({row["seconds"]:.0f} s)')


def latency_target_rows(models: Sequence[str], target: float,
                        batch_sizes: Sequence[int] = (1, 16), threads: Optional[int] = 1,
                        device: str = 'cpu', dtype: str = 'fp32',
                        tables: Optional[str] = None, force: bool = False,
                        input_size=None, select_hidden=False, variant: Optional[str] = None,
                        progress: Optional[Callable[[str], None]] = print,
                        select_heads: bool = False, runtime: str = 'torch',
                        **options) -> list:
    """:func:`mmdcs.analysis.latency_target.latency_target_row` of every model and batch size
    in ``runtime`` (``--runtime``), the tables read from (or, when missing, measured and
    written to) the directory ``tables`` (:func:`table_file_name`; None: measured and not
    kept). A table file that is corrupt or for another supernet or runtime, a target the table
    cannot meet, a device or runtime that is not here: one :class:`UserError` line.
    ``select_heads``: the supernets select attention heads too, their tables have head units
    and their own file names; a kept table is checked against the supernet
    (:meth:`LatencyCost.check_backbone`: one without head units, or with other selection
    options, is refused in one line naming the file, not measured again over it); a family
    without head selection, or whose attention selects its heads and its channels in one
    module (EfficientViT's LiteMLA: no table can time them apart), is one line before anything
    is measured. ``options``: the row's other arguments."""
    rt = make_runtime(runtime, device, threads, dtype)
    _check_models(models, select_heads, variant, input_size, select_hidden)
    _tables_dir(tables)
    rows = []
    for arch in models:
        var = variant or PAPER_VARIANT[backbone_class(arch).family]
        size = _size(input_size, arch)
        for batch in batch_sizes:
            path, table = _kept_table(tables, table_file_name(
                arch, var, size, batch, threads, device, dtype, select_hidden, select_heads,
                runtime), force, progress, f'{arch}: batch {batch}')
            try:
                row = latency_target_row(arch, target, batch, threads, device, dtype,
                                         variant=var, input_size=size,
                                         select_hidden=select_hidden, table=table,
                                         select_heads=select_heads, runtime=rt,
                                         progress=progress, on_table=None if path is None
                                         else lambda t, p=path: write_json(p, t, force=True),
                                         **options)
            except BudgetError as e:
                raise UserError(f'{arch} (batch {batch}): {e}') from e
            except LatencyTableError as e:  # a kept table for another supernet: not used
                raise UserError(f'{path}: {e}' + ('; --force measures it again'
                                                  if table is not None else '')) from e
            row['table_file'] = path
            rows.append(row)
            if progress:
                progress(row_line(row))
    return rows


def peer_benchmark_results(models: Sequence[str], target: float = 0.7,
                           tables: Optional[str] = None, force: bool = False,
                           threads: int = 1, input_size=None, select_hidden='all',
                           variant: Optional[str] = None,
                           progress: Optional[Callable[[str], None]] = print,
                           batch: int = 1, runtime: str = 'torch',
                           runtimes: Sequence[str] = (), **options) -> list:
    """:func:`mmdcs.analysis.peer_benchmark.peer_benchmark` of every model (CPU, ``batch``),
    mmdcs's table of ``runtime`` read from (or measured and written to) ``tables`` as
    :func:`latency_target_rows` keeps them (the same file names: a table one tool built, the
    other reads; a run stopped midway resumes with the tables it wrote), every model timed in
    ``runtime`` and ``runtimes``. torch-pruning or timm not installed, an arch without a timm
    model, a runtime that cannot run here, a corrupt table, a target the table cannot meet:
    one :class:`UserError` line, before anything is measured where it can be known before."""
    try:
        import_torch_pruning()
        import timm  # noqa: F401  # lazy import: the peer is applied to timm's models
    except ImportError as e:
        raise UserError(str(e).splitlines()[0]) from e
    for arch in models:
        try:
            cls = backbone_class(arch)
        except ValueError as e:
            raise UserError(str(e)) from e
        if not (cls.timm_models or {}).get(arch):
            raise UserError(f'{arch}: no timm model to apply Torch-Pruning to (archs with one: '
                            f'{", ".join(sorted(cls.timm_models or {})) or "none"})')
    rt = make_runtime(runtime, 'cpu', threads)
    more = [make_runtime(r, 'cpu', threads) for r in runtimes if r != runtime]
    _tables_dir(tables)
    results = []
    for arch in models:
        var = variant or PAPER_VARIANT[backbone_class(arch).family]
        size = _size(input_size, arch)
        path, table = _kept_table(tables, table_file_name(
            arch, var, size, batch, threads, 'cpu', 'fp32', select_hidden, runtime=runtime),
            force, progress, arch)
        try:
            res = peer_benchmark(arch, target, table=table, input_size=size,
                                 select_hidden=select_hidden, variant=var, threads=threads,
                                 batch=batch, runtime=rt, runtimes=more, progress=progress,
                                 on_table=None if path is None
                                 else lambda t, p=path: write_json(p, t, force=True), **options)
        except BudgetError as e:
            raise UserError(f'{arch}: {e}') from e
        except LatencyTableError as e:
            raise UserError(f'{path}: {e}') from e
        res['table_file'] = path
        results.append(res)
    return results
