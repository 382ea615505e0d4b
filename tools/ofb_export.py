"""Export the compact network of an OFB search (Once-for-Both): ``DIR/arch.json`` (the searched
widths, from which ``mmdcs.OFBViT`` / ``mmdcs.OFBSwin`` build a plain dense network) and
``DIR/compact.pth`` (its fused weights, an mmengine checkpoint of plain data of the whole
classifier; ``--format safetensors``: ``DIR/compact.safetensors``).

    python tools/ofb_export.py CONFIG CHECKPOINT --out DIR [--shape H W]
                               [--cfg-options k=v ...] [--no-verify] [--force]
                               [--format pth|safetensors] [--trust-checkpoint]

CONFIG is the search config, CHECKPOINT a checkpoint of it (any epoch: a checkpoint taken after
some compressions has sliced weights, which the model adopts while loading). If the search has
not finished, every group still searching keeps its most probable width (and the tool says how
many). The tool then fuses the importance scores into the weights, builds the compact network
from ``arch.json`` alone, loads ``compact.pth`` into it and checks that it gives the masked
supernet's eval output; it prints params and FLOPs (``mmdcs.analysis.complexity``, multiply-
accumulates) of the unpruned and the compact classifier and how to fine-tune.
"""
import copy
import os.path as osp
import sys

try:
    import mmdcs  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))

from mmdcs.apis.launch import (ConfigOptions, ToolParser, UserError, add_trust_flag, positive_size,
                               run_program, set_checkpoint_trust, user_errors)
from mmdcs.apis.outputs import (add_force_argument, atomic_outputs, check_output_dir,
                                refuse_overwrite)


def parse_args(argv=None):
    parser = ToolParser(
        description='Export the compact network (arch.json + compact.pth) of an OFB search')
    parser.add_argument('config', help='the search config')
    parser.add_argument('checkpoint', help='a checkpoint of the search')
    parser.add_argument('--out', required=True, help='output directory')
    parser.add_argument('--shape', type=positive_size, nargs='+', metavar='N',
                        help="input size H [W] for the FLOPs and the check (default: the "
                        "backbone's img_size)")
    parser.add_argument('--no-verify', action='store_true',
                        help='skip the check that the compact network gives the masked '
                        "supernet's output")
    parser.add_argument('--cfg-options', nargs='+', action=ConfigOptions,
                        help='override settings of the config, key=value')
    parser.add_argument('--format', choices=('pth', 'safetensors'), default='pth',
                        help='file format of the compact weights (DIR/compact.FORMAT)')
    add_trust_flag(parser)
    add_force_argument(parser)
    return parser.parse_args(argv)


def compact_model_cfg(model_cfg, arch_path: str):
    """The search config's model with its backbone built from ``arch_path`` and no search."""
    cfg = copy.deepcopy(model_cfg)
    cfg['search'] = None
    backbone = cfg['backbone']
    backbone['arch_file'] = arch_path
    backbone.pop('search_space', None)
    backbone.pop('init_cfg', None)
    return cfg


def _logits(model, x):
    import torch
    with torch.no_grad():
        out = model(x, mode='tensor')
    return out if torch.is_tensor(out) else out[-1]


def _compact(args, cfg, scope, model, backbone, arch, meta, ckpt, arch_tmp, ckpt_tmp, x,
             full_shape, ref_masked, ref_soft, fused):
    """The compact network from the arch file alone with the fused weights, checked against
    the masked supernet, saved to ``ckpt_tmp``; (compact, rows, diffs, ok)."""
    import mmdcs
    from mmdcs.analysis.complexity import count_flops, count_params
    from mmdcs.apis.subnet_io import build_model, save_pruned_checkpoint
    from mmdcs.selection import in_search_state, search_state_keys
    compact = build_model(compact_model_cfg(cfg.model, arch_tmp), scope)
    prefix = 'backbone.'
    searched = search_state_keys(model)  # the search's state is not the compact network's
    state = {prefix + k: v for k, v in backbone.compact_state_dict().items()}
    state.update({k: v for k, v in model.state_dict().items()
                  if not k.startswith(prefix) and not in_search_state(k, searched)})
    missing, unexpected = compact.load_state_dict(state, strict=False)
    missing = [k for k in missing if not in_search_state(k, searched)]  # its own state
    if missing or unexpected:
        raise UserError(f'internal: the fused weights do not fit the compact network (missing '
                        f'{missing[:5]}, unexpected {unexpected[:5]})')
    compact.eval()
    out = _logits(compact, x)
    diffs = dict(fused=float((fused - ref_masked).abs().max()),
                 compact=float((out - ref_masked).abs().max()),
                 soft=float((ref_soft - ref_masked).abs().max()))
    scale = max(1., float(ref_masked.abs().max()))
    ok = diffs['compact'] <= 1e-4 * scale and diffs['fused'] <= 1e-4 * scale

    full_cfg = copy.deepcopy(cfg.model)
    full_cfg['search'] = None
    full_cfg['backbone']['search_space'] = ()
    full = build_model(full_cfg, scope).eval()
    rows = [('unpruned classifier', count_params(full), count_flops(full, full_shape)),
            ('compact classifier', count_params(compact), count_flops(compact, full_shape))]
    src_meta = ckpt.get('meta', None) or {}
    ckpt_meta = dict(mmdcs_version=mmdcs.__version__, ofb_arch=arch,
                     input_shape=list(full_shape),
                     params=dict(unpruned=rows[0][1], compact=rows[1][1]),
                     flops=dict(unpruned=rows[0][2], compact=rows[1][2]), **meta)
    if isinstance(src_meta, dict) and 'dataset_meta' in src_meta:
        ckpt_meta['dataset_meta'] = src_meta['dataset_meta']
    save_pruned_checkpoint(ckpt_tmp, compact.state_dict(), ckpt_meta)
    return compact, rows, diffs, ok


def export(args) -> dict:
    import torch

    from mmdcs.peers.ofb.arch import save_arch
    from mmdcs.peers.ofb.supernet import has_ofb_backbone
    from mmdcs.selection import file_sha256
    from mmdcs.apis.subnet_io import (build_model, complexity_lines, export_meta, human,
                                       load_model_checkpoint, load_task_config,
                                       require_checkpoint, runner_model_cfg, shape_arg)
    set_checkpoint_trust(args)
    arch_path = osp.join(args.out, 'arch.json')
    ckpt_path = osp.join(args.out, f'compact.{getattr(args, "format", "pth")}')
    check_output_dir(args.out, '--out')
    refuse_overwrite((arch_path, ckpt_path), getattr(args, 'force', False))
    shape = shape_arg(args.shape)
    require_checkpoint(args.config, args.checkpoint)
    cfg, scope = load_task_config(args.config, args.cfg_options)
    model = build_model(runner_model_cfg(cfg), scope)
    if not has_ofb_backbone(model) or not hasattr(model, 'finalize'):
        raise UserError(f'{args.config}: not an OFB search config (type=\'mmdcs.OFBClassifier\' '
                        'with an mmdcs.OFBViT / mmdcs.OFBSwin backbone)')
    backbone = model.backbone
    if not backbone.is_supernet:
        raise UserError(f'{args.config}: the backbone is already compact (arch_file) or has no '
                        'search space: nothing to export')
    ckpt = load_model_checkpoint(model, args.checkpoint)
    model.eval()
    if shape is None:
        shape = tuple(backbone.img_size) if not isinstance(backbone.img_size, int) else \
            (backbone.img_size, backbone.img_size)
    full_shape = (1, backbone.in_channels) + tuple(shape)
    x = torch.randn((2, ) + full_shape[1:], generator=torch.Generator().manual_seed(0))

    was_finished = backbone.search_finished
    ref_soft = _logits(model, x)
    discretised = model.finalize()
    ref_masked = _logits(model, x)
    model.fuse()
    fused = _logits(model, x)

    sha = file_sha256(args.checkpoint)
    meta = export_meta(args.config, args.checkpoint, sha)
    arch = backbone.export_arch(**meta, search_finished=was_finished,
                                groups_discretised=discretised)
    # both files or neither, never a half-written one (temporary files moved at the end)
    with atomic_outputs(arch_path, ckpt_path, force=getattr(args, 'force', False)) as (
            arch_tmp, ckpt_tmp):
        save_arch(arch, arch_tmp)
        compact, rows, diffs, ok = _compact(args, cfg, scope, model, backbone, arch, meta, ckpt,
                                            arch_tmp, ckpt_tmp, x, full_shape, ref_masked,
                                            ref_soft, fused)

    # ------------------------------------------------------------------ report
    print(f'\nOFB compact network of {type(backbone).__name__}({backbone.arch}) from '
          f'{args.checkpoint} (sha256 {sha[:16]}...)')
    if discretised:
        print(f'the search had not finished: {discretised} unit group(s) still searching were '
              f'set to their most probable width (max |logit change| {diffs["soft"]:.3g})')
    print('\n' + arch_summary(arch) + '\n')
    print(f'Params and FLOPs (mmengine.analysis, multiply-accumulates) at input '
          f'{shape[0]}x{shape[1]}:\n')
    print(complexity_lines(rows, full_shape))
    f0, f1 = rows[0][2], rows[1][2]
    print(f'\nFLOPs {human(f0)} -> {human(f1)} ({f1 / max(f0, 1):.1%}); params '
          f'{human(rows[0][1])} -> {human(rows[1][1])} ({rows[1][1] / max(rows[0][1], 1):.1%})')
    if not args.no_verify:
        print(f'check: compact vs masked supernet eval logits, max |diff| = '
              f'{diffs["compact"]:.3g} (fused supernet {diffs["fused"]:.3g}): '
              f'{"equal" if ok else "NOT EQUAL"}')
        if not ok:
            print('WARNING: the compact network does not reproduce the supernet; please '
                  'report this', file=sys.stderr)
    print(f'\nwrote {arch_path}\nwrote {ckpt_path}\n')
    finetune = args.config.replace('_search_', '_finetune_')
    if finetune == args.config or not osp.isfile(finetune):
        finetune = 'FINETUNE_CONFIG'
    print('Fine-tune the compact network:\n'
          f'  python tools/train.py {finetune} --cfg-options '
          f'model.backbone.arch_file={arch_path} load_from={ckpt_path}')
    return dict(arch=arch, rows=rows, diffs=diffs, ok=ok, arch_path=arch_path,
                checkpoint=ckpt_path, discretised=discretised)


def arch_summary(arch: dict) -> str:
    """Markdown table of the searched widths."""
    if arch['family'] == 'vit':
        stages = [dict(embed_dim=arch['embed_dim'], blocks=arch['blocks'])]
    else:
        stages = arch['stages']
    lines = ['| stage | block | embed | heads | head dim | MLP hidden |',
             '|---|---|---|---|---|---|']
    for s, stage in enumerate(stages):
        for i, b in enumerate(stage['blocks']):
            lines.append(f'| {s} | {i} | {stage["embed_dim"]} | {b["num_heads"]} | '
                         f'{b["head_dim"]} | {b["mlp_hidden"]} |')
    return '\n'.join(lines)


def main(argv=None):
    args = parse_args(argv)
    with user_errors():
        export(args)


if __name__ == '__main__':
    run_program(main)
