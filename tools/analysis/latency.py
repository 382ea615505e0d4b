"""Latency of pruned subnets against their baselines, measured in the same run, beside the
FLOPs ratio (mmengine.analysis multiply-accumulates).

Random subnets of each paper's variant (KCR for ViT/Swin, DCS for MobileViT/EfficientViT)
keeping --ratio of every prunable block, random weights (timing does not depend on them):

    python tools/analysis/latency.py [--models vit-s16 vit-b16 swin-t swin-b mobilevit-xs
        mobilevit-s efficientvit-b1] [--ratio 0.7] [--size N] [--batch-sizes 1 16]
        [--threads 1] [--warmup 3] [--repeats 10] [--devices cpu cuda] [--profile]
        [--out table.md] [--json rows.json]

At a FLOPs budget instead of a kept ratio, with hidden-unit selection (one kept ratio for every
block's channels and every MLP's hidden units, chosen so that the backbone's FLOPs are the target;
widths rounded up to a multiple of 8 unless --multiple-of says otherwise):

    python tools/analysis/latency.py --target-flops 0.7 --select-hidden [all] [--hidden-only] ...

With --select-heads (--target-flops or --target-latency) attention heads are pruned
too: the supernet is built with select_heads=True, its channels, hidden units (with
--select-hidden) and heads ranked jointly by the magnitude scorer per unit of cost (FLOPs: the
exact count, instead of one kept ratio; latency: its table, which then has head units and its
own file name in --tables, '<arch>_<variant>[-hidden]-heads_...json'; a kept table without head
units is refused in one line, not used and not overwritten; EfficientViT, whose LiteMLA selects
heads and channels in one module, has no table with heads: refused in one line); every row has
a "heads kept" column (kept/total over the attentions):

    python tools/analysis/latency.py --target-flops 0.7 --select-heads [--select-hidden] ...
    python tools/analysis/latency.py --target-latency 0.7 --select-heads [--tables DIR] ...

--ranked (--target-flops) is that FLOPs export without heads (every head kept), the row to set
beside a --select-heads one: the same ranking, so the two differ only in the heads.

At a latency target: each model's latency table on this device (read from --tables DIR when
it holds one for the same model, input size, batch, threads, device and dtype; else measured and
kept there), the budget subnet the table predicts at R (channels, with --select-hidden also hidden
units, ranked jointly by weight magnitude of a randomly-initialised supernet per unit of predicted
latency; widths in groups of 8), measured interleaved against the baseline; per model and batch:
predicted ratio, measured ratio, FLOPs ratio, params ratio (--repeats defaults to 21 here):

    python tools/analysis/latency.py --target-latency 0.7 [--tables DIR] [--models ...]
        [--batch 1 16] [--threads 1] [--devices cpu cuda] [--dtype fp32|bf16|fp16]
        [--select-hidden [all]] [--size N]

An exported subnet (its arch is read from the file):

    python tools/analysis/latency.py --subnet work_dirs/.../subnet.json [--size N] ...

A config's backbone (a pruned subnet config, or any mmdcs config with --subnet); the baseline is
the same backbone with variant='baseline' and no subnet:

    python tools/analysis/latency.py --config CONFIG [--subnet subnet.json] ...

A peer method's model (OFB: a fine-tune config with its arch.json; DynamicViT / DynamicSwin: the
config, tokens pruned at inference) against the plain backbone of the same arch:

    python tools/analysis/latency.py --config configs/ofb/ofb-deit-s_finetune_in1k.py \
        --cfg-options model.backbone.arch_file=work_dirs/.../export/arch.json
    python tools/analysis/latency.py --config configs/dynamicvit/dynamicvit-deit-s_0.7_in1k.py

Per model and batch: ms/image of the baseline and of the subnet (median of interleaved timed
rounds after warm-up, eval mode, torch.inference_mode, fixed threads; CUDA timed with
torch.cuda.synchronize when available), the latency ratio, the FLOPs ratio, and whether they
differ by at most --tolerance (0.05). --profile adds the per-operator CPU time of both models
(torch.profiler) at the first batch size; --modules the time by leaf module (narrowed /
unchanged / added / outside) with the latency ratio expected if the narrowed modules ran at their
FLOPs ratio; --theta-fusion (DCS) qkv and Linear_θ as two matmuls vs one. While timing, glibc
keeps freed memory for reuse (--system-malloc: leave the allocator as it is).
"""
import json
import os.path as osp
import sys
import time

try:
    import mmdcs  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from mmdcs.apis.launch import (ConfigOptions, ToolParser, UserError, add_prior_argument,
                               batch_size, non_negative_float, non_negative_int, positive_int,
                               positive_size, run_program, seed, thread_count, unit_ratio,
                               user_errors)
from mmdcs.apis.outputs import (add_force_argument, check_output_file, refuse_overwrite,
                                write_texts)
from mmdcs.models.backbones.base import VARIANTS


def parse_args(argv=None):
    p = ToolParser(description='Latency of pruned subnets vs their baselines')
    p.add_argument('--models', nargs='+', default=None,
                   help='archs (default: vit-s16 vit-b16 swin-t swin-b mobilevit-xs mobilevit-s '
                   'efficientvit-b1)')
    p.add_argument('--ratio', type=unit_ratio, default=0.7,
                   help='kept ratio of the random subnets (default 0.7)')
    p.add_argument('--multiple-of', type=positive_int, default=None, metavar='N',
                   help='round the random subnets\' kept widths up to a multiple of N (as '
                   'tools/export_subnet.py --multiple-of; default 1, with --target-flops 8)')
    p.add_argument('--target-flops', type=unit_ratio, default=None, metavar='R',
                   help='random subnets at this FLOPs ratio to the baseline instead of --ratio')
    p.add_argument('--target-latency', type=unit_ratio, default=None, metavar='R',
                   help='the budget subnet a latency table predicts at this latency ratio, '
                   'measured against the baseline (see --tables)')
    p.add_argument('--tables', metavar='DIR', default=None,
                   help='with --target-latency: read the latency tables from DIR (measured and '
                   'written there when missing; --force measures them again)')
    p.add_argument('--validate', metavar='K', type=non_negative_int, default=0,
                   help='with --target-latency: also time K random subnets of each table\'s '
                   'supernet beside the baseline (15 interleaved rounds each, medians) and '
                   'report the predictor\'s error (mean abs. and max, fractions of the '
                   'baseline latency; as latency_table.py --validate)')
    p.add_argument('--refine', metavar='N', type=non_negative_int, default=0,
                   help='with --target-latency: measure the subnet and, while its latency ratio '
                   '(the table\'s clock) is more than 0.01 from the target, ask the table for '
                   'asked x target / measured (first asked: the target) and export and measure '
                   'again, at most N times; '
                   'the subnet measured closest to the target is kept (default 0: the '
                   'table\'s subnet as it is)')
    p.add_argument('--dtype', choices=('fp32', 'fp16', 'bf16'), default='fp32',
                   help='with --target-latency: the dtype of the table and the timing')
    add_prior_argument(p, 'with --target-latency')
    p.add_argument('--select-hidden', nargs='?', const=True, default=False, choices=[True, 'all'],
                   help='with --target-flops or --target-latency: also prune every MLP\'s '
                   'hidden units; "all": '
                   'also the expanded channels of the convolutional inverted bottlenecks '
                   '(MobileViT MV2, EfficientViT MBConv)')
    p.add_argument('--select-heads', action='store_true',
                   help='with --target-flops or --target-latency: also prune attention heads '
                   '(select_heads=True; channels, hidden units and heads ranked jointly by the '
                   'magnitude scorer per unit of FLOPs or of the latency table\'s time; the '
                   'table has head units and its own file name)')
    p.add_argument('--ranked', action='store_true',
                   help='with --target-flops: the channels (and hidden units) ranked by the '
                   'magnitude scorer per unit of FLOPs, as --select-heads ranks them, instead of '
                   'one kept ratio (implied by --select-heads)')
    p.add_argument('--hidden-only', action='store_true',
                   help='with --target-flops --select-hidden: prune the hidden units only '
                   '(every block keeps all its channels)')
    p.add_argument('--variant', default=None, choices=[v for v in VARIANTS if v != 'baseline'],
                   help='variant of the random subnets and, with --target-latency, of the '
                   'supernet (default: the paper\'s per family: kcr for vit/swin, dcs for '
                   'mobilevit/efficientvit)')
    p.add_argument('--theta-rank', type=positive_int, default=None, metavar='R',
                   help='DCS random subnets: Linear_θ at rank R (D→R→D; default full rank, '
                        'the paper)')
    p.add_argument('--subnet', help='an exported subnet.json (its arch replaces --models)')
    p.add_argument('--config', help='time the backbone of this config (a pruned subnet, or with '
                   '--subnet) against the same backbone as a baseline')
    p.add_argument('--cfg-options', nargs='+', action=ConfigOptions,
                   help='config mode: override settings, key=value')
    p.add_argument('--size', type=positive_size, default=None,
                   help='input size (default: each model\'s nominal size, 224 or 256; in config '
                   'mode the config\'s)')
    p.add_argument('--batch-sizes', '--batch', type=batch_size, nargs='+', default=[1, 16])
    p.add_argument('--threads', type=thread_count, default=1,
                   help='CPU intra-op threads (torch.set_num_threads), default 1')
    p.add_argument('--warmup', type=non_negative_int, default=3)
    p.add_argument('--repeats', type=positive_int, default=None,
                   help='timed rounds (median taken; default 10, with --target-latency 21)')
    p.add_argument('--number', type=positive_int, default=1, help='calls per timed round')
    p.add_argument('--devices', nargs='+', default=None, choices=['cpu', 'cuda'],
                   help='default: cpu, and cuda where a CUDA device is available; a device '
                   'given here must be available')
    p.add_argument('--runtime', default='torch', metavar='NAME',
                   help='what the networks run in: torch (PyTorch eager, the default), '
                   'onnxruntime (their ONNX files, 1 intra-op and 1 inter-op thread unless '
                   '--threads), tensorrt (onnxruntime\'s TensorRT provider, on a GPU); with '
                   '--target-latency the tables are measured in it too (a kept table of '
                   'another runtime is not used: its file name differs)')
    p.add_argument('--tolerance', type=non_negative_float, default=0.05,
                   help='allowed |latency ratio - FLOPs ratio| (default 0.05)')
    p.add_argument('--seed', type=seed, default=0)
    p.add_argument('--system-malloc', action='store_true',
                   help="leave glibc's allocator as it is (default: it keeps freed memory for "
                        'reuse, so large activations are not page-faulted in again on every '
                        'forward; mmdcs.analysis.latency.keep_freed_memory)')
    p.add_argument('--profile', action='store_true',
                   help='also print the top CPU operators of both models (torch.profiler)')
    p.add_argument('--modules', action='store_true',
                   help='also time every leaf module of both models (forward hooks) and print '
                        'the narrowed / unchanged / added / outside-module parts beside their '
                        'FLOPs, with the latency ratio expected if the narrowed modules ran at '
                        'their FLOPs ratio (mmdcs.analysis.latency.module_scaling)')
    p.add_argument('--theta-fusion', action='store_true',
                   help='DCS subnets: also time each attention\'s qkv and Linear_θ matmuls as '
                        'they run and fused into one matmul (does fusing them pay?)')
    p.add_argument('--profile-top', type=positive_int, default=12,
                   help='operators printed per model')
    p.add_argument('--profile-rounds', type=positive_int, default=3,
                   help='interleaved profiling sessions (median per operator)')
    p.add_argument('--out', help='also write the markdown table here')
    p.add_argument('--json', help='also write the rows (and profiles) as JSON here')
    add_force_argument(p)
    args = p.parse_args(argv)
    if not 0 < args.ratio <= 1:
        p.error(f'--ratio must be in (0, 1], got {args.ratio}')
    if args.target_flops is not None and not 0 < args.target_flops <= 1:
        p.error(f'--target-flops must be in (0, 1], got {args.target_flops}')
    if args.repeats is None:
        args.repeats = 21 if args.target_latency is not None else 10
    if args.target_latency is not None:
        if args.target_flops is not None or args.config or args.subnet or args.hidden_only:
            p.error('--target-latency goes with --models, not --target-flops, --config, '
                    '--subnet or --hidden-only')
        if args.profile or args.modules or args.theta_fusion:
            p.error('--profile, --modules and --theta-fusion do not go with --target-latency')
    elif args.tables or args.dtype != 'fp32' or args.validate or args.refine:
        p.error('--tables, --dtype, --validate and --refine go with --target-latency')
    elif args.prior is not None:
        p.error('--prior goes with --target-latency')
    if args.select_hidden and args.target_flops is None and args.target_latency is None:
        p.error('--select-hidden goes with --target-flops or --target-latency')
    if args.hidden_only and args.target_flops is None:
        p.error('--hidden-only goes with --target-flops')
    if args.hidden_only and not args.select_hidden:
        p.error('--hidden-only needs --select-hidden')
    if args.select_heads and args.target_flops is None and args.target_latency is None:
        p.error('--select-heads goes with --target-flops or --target-latency')
    if args.select_heads and args.hidden_only:
        p.error('--select-heads does not go with --hidden-only (the heads are ranked with the '
                'channels)')
    if args.ranked and (args.target_flops is None or args.hidden_only):
        p.error('--ranked goes with --target-flops (not --hidden-only)')
    if args.multiple_of is None:
        args.multiple_of = 8 if (args.target_flops or args.target_latency) is not None else 1
    if args.theta_rank is not None and (args.config or args.subnet):
        p.error('--theta-rank goes with random subnets (--models), not --config / --subnet '
                '(their subnet records its rank)')
    if args.config and args.models:
        p.error('give --config or --models, not both')
    if args.subnet and args.models:
        p.error('--subnet gives the arch: do not give --models with it')
    return args


def _config_pair(args):
    """(arch label, baseline backbone, subnet backbone, input size) of a config."""
    import copy
    from mmdcs.analysis.latency import is_peer_backbone, plain_baseline
    from mmdcs.selection import SubnetSpec
    from mmdcs.apis.subnet_io import (backbone_cfg_of, build_model, config_input_size,
                                       load_task_config, mmdcs_backbone, with_subnet)
    cfg, scope = load_task_config(args.config, args.cfg_options)
    model_cfg = cfg.model
    if args.subnet:
        from mmdcs.registry import MODELS
        btype = backbone_cfg_of(model_cfg).get('type')
        bcls = MODELS.get(btype) if isinstance(btype, str) else None
        if bcls is not None and is_peer_backbone(bcls):
            raise UserError(f'{args.config}: --subnet is for DCS/KCR backbones, not {btype} (an '
                            'OFB network takes --cfg-options model.backbone.arch_file=arch.json)')
        SubnetSpec.coerce(args.subnet)
        model_cfg = with_subnet(model_cfg, args.subnet)
    sub_model = build_model(model_cfg, scope).eval()
    peer = getattr(sub_model, 'backbone', sub_model)
    if is_peer_backbone(peer):
        size = (args.size, args.size) if args.size else config_input_size(cfg, peer)[0]
        return peer.arch, plain_baseline(peer, size), peer, size
    sub = mmdcs_backbone(sub_model)
    if sub is None:
        raise UserError(f'{args.config}: the backbone is not an mmdcs backbone')
    if sub.subnet_spec is None:
        raise UserError(f'{args.config}: the backbone is not a pruned subnet (variant '
                        f'{sub.variant!r}); give --subnet subnet.json or a subnet config')
    base_cfg = copy.deepcopy(model_cfg)
    b = backbone_cfg_of(base_cfg)
    b.pop('subnet', None)
    b.pop('init_cfg', None)
    b['variant'] = 'baseline'
    base = mmdcs_backbone(build_model(base_cfg, scope)).eval()
    if args.size:
        size = (args.size, args.size)
    else:
        size, _ = config_input_size(cfg, sub)
    return sub.arch, base, sub, size


def run_latency_target(args):
    """--target-latency: the rows of mmdcs.apis.latency_io.latency_target_rows per device."""
    from mmdcs.analysis.complexity import TABLE_MODELS
    from mmdcs.analysis.latency import environment_note, keep_freed_memory
    from mmdcs.analysis.latency_target import format_latency_target
    from mmdcs.apis.latency_io import latency_target_rows
    devices = args.devices
    if not args.system_malloc:
        keep_freed_memory()
    rows = []
    t_all = time.perf_counter()
    for device in devices:
        rows += latency_target_rows(
            args.models or list(TABLE_MODELS), args.target_latency, args.batch_sizes,
            args.threads, device, args.dtype, args.tables, args.force, input_size=args.size,
            select_hidden=args.select_hidden, select_heads=args.select_heads,
            multiple_of=args.multiple_of, repeats=args.repeats, warmup=args.warmup, seed=args.seed,
            validate=args.validate, refine=args.refine, runtime=args.runtime,
            variant=args.variant, prior=args.prior,
            progress=lambda line: print(line, flush=True))
    text = format_latency_target(rows)
    text += ('\n\n' + environment_note() + f' Target latency {args.target_latency:g}; predicted: '
             'the latency table\'s; measured: the subnet (magnitude ranking of a '
             f'randomly-initialised supernet) against the baseline, median of {args.repeats} '
             'interleaved rounds.' + (' Attention heads ranked with the channels '
                                      '(--select-heads).' if args.select_heads else '')
             + (f' Predictor error: {args.validate} random subnets of the table\'s supernet '
                '(widths uniform over [1, full], rounded up to --multiple-of), each timed '
                'beside the baseline in 15 interleaved rounds (medians), |predicted − measured| '
                'latency ratio.' if args.validate else '')
             + (f' --refine {args.refine}: while the measured ratio (the table\'s clock) was '
                'more than 0.01 from the target, the table was asked for asked × target / '
                'measured and the subnet exported and measured again; the closest kept ("asked '
                'of the table": the request that gave it; tries in brackets).' if args.refine
                else ''))
    print('\n' + text)
    print(f'\n({len(rows)} rows in {time.perf_counter() - t_all:.0f} s)')
    kept = [{k: v for k, v in r.items() if k != 'table'} for r in rows]
    write_texts({args.out: text + '\n',
                 args.json: json.dumps(dict(rows=kept), indent=1) + '\n'}, args.force)
    return rows


def resolve_devices(args) -> None:
    """``args.devices``: cpu and, where one is available, cuda by default; a device given on
    the command line must be available (one :class:`UserError` line, before any work: never an
    empty table)."""
    import torch
    cuda = torch.cuda.is_available()
    if args.devices is None:
        args.devices = ['cpu'] + (['cuda'] if cuda else [])
    elif 'cuda' in args.devices and not cuda:
        raise UserError('--devices cuda: no CUDA device is available here (time on the machine '
                        'the table is for, or give --devices cpu)')
    args.devices = list(dict.fromkeys(args.devices))


def _jobs(args):
    """The models to time: ``[(arch, callable building (base, sub, size))]`` and the row label
    of a config's peer (its ratio and variant)."""
    from mmdcs.analysis.complexity import TABLE_MODELS, backbone_class
    from mmdcs.analysis.latency import _size, build_pair, is_peer_backbone
    from mmdcs.selection import SubnetError, SubnetSpec
    if args.config:
        arch, base, sub, size = _config_pair(args)
        label = dict(variant=type(sub).__name__,
                     ratio=(getattr(sub, 'keep_ratios', None) or [None])[0]) \
            if is_peer_backbone(sub) else {}
        return [(arch, lambda: (base, sub, size))], label
    if args.subnet:
        try:
            spec = SubnetSpec.coerce(args.subnet)
            backbone_class(spec.arch)
        except (SubnetError, ValueError) as e:
            raise UserError(str(e)) from e

        def from_spec(spec=spec):
            b, s, _ = build_pair(spec.arch, subnet=spec, input_size=args.size, seed=args.seed)
            return b, s, _size(args.size, spec.arch)
        return [(spec.arch, from_spec)], {}
    models = args.models or list(TABLE_MODELS)
    for m in models:
        try:
            cls = backbone_class(m)
        except ValueError as e:
            raise UserError(str(e)) from e
        if args.select_heads and not cls.supports_heads:
            raise UserError(f'--select-heads: {m} ({cls.__name__}) has no head selection '
                            '(supports_heads is False)')

    def from_ratio(m):
        try:
            b, s, _ = build_pair(m, args.ratio, args.variant, None, args.size, args.seed,
                                 args.multiple_of, args.target_flops, args.select_hidden,
                                 not args.hidden_only, args.theta_rank, args.select_heads,
                                 args.ranked)
        except (KeyError, ValueError) as e:
            raise UserError(f'{m}: {e}') from e
        return b, s, _size(args.size, m)
    return [(m, lambda m=m: from_ratio(m)) for m in models], {}


def _diagnostics(args, arch, base, sub, size) -> dict:
    """--profile, --modules and --theta-fusion of one pair: printed, and returned for the JSON."""
    import torch
    from mmdcs.analysis.latency import (format_module_scaling, format_op_groups,
                                        format_profile, format_theta_fusion, module_scaling,
                                        op_groups, profile_ops, theta_fusion_timing)
    out, b = {}, args.batch_sizes[0]
    x = torch.randn((b, 3) + tuple(size))
    how = f'batch {b}, {args.threads} thread(s)'
    if args.profile:
        prof = profile_ops({'baseline': base.cpu(), 'subnet': sub.cpu()}, x,
                           repeats=max(1, min(args.repeats, 3)), top=None,
                           threads=args.threads, rounds=args.profile_rounds)
        groups = {k: op_groups(v) for k, v in prof.items()}
        out.update(ops={k: v[:args.profile_top] + v[-1:] for k, v in prof.items()},
                   groups=groups)
        for name in ('baseline', 'subnet'):
            print(format_profile(out['ops'][name], f'\n{arch} {name}: top CPU ops, ms per '
                                 f'forward ({how}, median of {args.profile_rounds} '
                                 'interleaved rounds)'))
        print(f'\n{arch}: CPU self time by op group (ms per forward)')
        print(format_op_groups(groups), end='\n\n')
    if args.modules:
        out['modules'] = module_scaling(base.cpu(), sub.cpu(), x, rounds=args.repeats,
                                        threads=args.threads)
        print(format_module_scaling(out['modules'], f'\n{arch}: time by module ({how}, '
                                    f'forward hooks, median of {args.repeats} interleaved '
                                    'passes)'), end='\n\n')
    if args.theta_fusion:
        out['theta_fusion'] = fusion = theta_fusion_timing(sub.cpu(), x, rounds=args.repeats,
                                                           threads=args.threads)
        print(format_theta_fusion(fusion, f'\n{arch}: qkv and Linear_θ, separate vs one fused '
                                  f'matmul ({how})') if fusion else
              f'\n{arch}: no attention with a full-rank Linear_θ to fuse', end='\n\n')
    return out


def _row_line(arch, r, tolerance) -> str:
    heads = f'heads {r["heads_kept"]}/{r["heads_total"]} ' if 'heads_kept' in r else ''
    return (f'{arch}: {r["device"]} batch {r["batch"]}: baseline {r["base_ms"]:.2f} ms/img, '
            f'subnet {r["sub_ms"]:.2f} ms/img, latency ratio {r["latency_ratio"]:.3f}, FLOPs '
            f'ratio {r["flops_ratio"]:.3f} {heads}'
            f'({"within" if r["within"] else "NOT within"} ±{tolerance})')


def run(args):
    resolve_devices(args)
    if args.target_latency is not None:
        return run_latency_target(args)
    from mmdcs.analysis.latency import (environment_note, format_latency_table,
                                        keep_freed_memory, latency_pair)
    from mmdcs.apis.latency_io import make_runtime
    make_runtime(args.runtime, threads=args.threads)  # one line where it cannot run here
    common = dict(batch_sizes=args.batch_sizes, devices=args.devices, threads=args.threads,
                  warmup=args.warmup, repeats=args.repeats, number=args.number,
                  tolerance=args.tolerance, seed=args.seed, runtime=args.runtime)
    jobs, label = _jobs(args)
    if not args.system_malloc:
        keep_freed_memory()
    rows, profiles = [], {}
    t_all = time.perf_counter()
    for arch, make in jobs:
        t0 = time.perf_counter()
        base, sub, size = make()
        new = latency_pair(arch, label.get('ratio', args.ratio), label.get('variant'),
                           input_size=size, models=(base, sub), **common)
        rows += new
        for r in new:
            print(_row_line(arch, r, args.tolerance), flush=True)
        extra = _diagnostics(args, arch, base, sub, size)
        if extra:
            profiles[arch] = extra
        print(f'({arch}: {time.perf_counter() - t0:.0f} s)', flush=True)
    text = format_latency_table(rows) + '\n\n' + environment_note()
    print('\n' + text)
    print(f'\n({len(rows)} rows in {time.perf_counter() - t_all:.0f} s)')
    write_texts({args.out: text + '\n',
                 args.json: json.dumps(dict(rows=rows, profiles=profiles), indent=1) + '\n'},
                args.force)
    return rows


def main(argv=None):
    args = parse_args(argv)
    with user_errors():
        check_output_file(args.out, '--out')
        check_output_file(args.json, '--json')
        refuse_overwrite([args.out, args.json], args.force)
        return run(args)


if __name__ == '__main__':
    run_program(main)
