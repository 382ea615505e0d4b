"""Export a model of a config to ONNX and check it with onnxruntime against PyTorch.

    python tools/deployment/pytorch2onnx.py CONFIG [CHECKPOINT] --out model.onnx
        [--shape H W] [--batch N] [--dynamic-batch] [--opset N] [--backbone]
        [--exporter dynamo|torchscript] [--rtol 1e-4] [--cfg-options k=v ...] [--force]

Any family and form of the mmdcs backbones (baseline, DCS/KCR supernet in eval, pruned subnet
via ``model.backbone.subnet=...``, OFB compact network, DynamicViT), as a classifier (logits), a
backbone alone (``--backbone``: its multi-scale feature maps), an mmdet single-stage detector or
an mmseg segmentor (the network's tensors; post-processing in Python, see
``tools/deployment/test_onnx.py``). The input is the preprocessed (normalised) image batch,
float32 NCHW, of the config's input size (or --shape).

After the export the ONNX model runs in onnxruntime on the same random input as PyTorch; the
tool prints the max abs difference of every output and fails (exit 1) when one exceeds
``rtol`` × the output's scale (max |PyTorch output|). It then prints the ONNX node count and the
file size. A model or operation that cannot be exported gets one line naming the module (exit
2); no file is ever left under the --out name unless export and check succeeded, and an
existing --out file is not replaced without --force (``mmdcs/apis/outputs.py``).
"""
import os.path as osp
import sys

try:
    import mmdcs  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from mmdcs.apis.launch import (ToolParser, UserError, add_cfg_options, add_trust_flag, batch_size,
                               positive_float, positive_int, positive_size, run_program, seed,
                               set_checkpoint_trust, user_errors)
from mmdcs.apis.outputs import add_force_argument, check_output_file, refuse_overwrite


def parse_args(argv=None):
    from mmdcs.apis.deploy import DEFAULT_OPSET, DEFAULT_RTOL, EXPORTERS
    parser = ToolParser(
        description='Export a model (classifier, backbone, detector, segmentor) to ONNX and '
        'check it with onnxruntime against PyTorch')
    parser.add_argument('config', help='the model\'s config')
    parser.add_argument('checkpoint', nargs='?', help='its weights (default: the config\'s '
                        'initialisation, e.g. to check that a model exports)')
    parser.add_argument('--out', required=True, help='the .onnx file to write')
    parser.add_argument('--shape', type=positive_size, nargs='+', metavar='N',
                        help='input size H [W] (default: the config\'s input size, else the '
                        'backbone\'s nominal size)')
    parser.add_argument('--batch', type=batch_size, default=1,
                        help='batch size of the export input')
    parser.add_argument('--dynamic-batch', action='store_true',
                        help='a dynamic batch axis (the check then also runs at batch + 1)')
    parser.add_argument('--opset', type=positive_int, default=DEFAULT_OPSET,
                        help='ONNX opset (default %(default)s; the range the exporter writes is '
                        'checked before the model is built)')
    parser.add_argument('--backbone', action='store_true',
                        help='export the backbone alone (its out_indices feature maps)')
    parser.add_argument('--exporter', choices=EXPORTERS, default='dynamo',
                        help='torch.onnx.export(dynamo=True) (default) or the TorchScript '
                        'tracer (dynamo=False)')
    parser.add_argument('--rtol', type=positive_float, default=DEFAULT_RTOL,
                        help='max |onnxruntime - PyTorch| allowed, relative to the output\'s '
                        'max |value|')
    parser.add_argument('--seed', type=seed, default=0, help='seed of the check input')
    add_cfg_options(parser)
    add_trust_flag(parser)
    add_force_argument(parser)
    return parser.parse_args(argv)


def build(args):
    """(cfg, model, kind, wrapper, example input) for the arguments."""
    import torch

    from mmdcs.apis.deploy import ExportWrapper, check_opset, model_kind, set_export_mode_
    from mmdcs.apis.subnet_io import (build_model, config_input_size, load_model_checkpoint,
                                       load_task_config, mmdcs_backbone, require_checkpoint,
                                       runner_model_cfg, shape_arg)
    shape = shape_arg(args.shape)
    if args.checkpoint:
        require_checkpoint(args.config, args.checkpoint)
    if args.batch < 1:
        raise UserError(f'--batch must be >= 1, got {args.batch}')
    check_opset(args.opset, args.exporter)
    cfg, scope = load_task_config(args.config, args.cfg_options)
    set_checkpoint_trust(args, cfg)
    model = build_model(runner_model_cfg(cfg), scope)
    if args.checkpoint:
        load_model_checkpoint(model, args.checkpoint)
    set_export_mode_(model)
    if args.backbone and getattr(model, 'backbone', None) is None and mmdcs_backbone(
            model) is None:
        raise UserError(f'--backbone: the model of {args.config} ({type(model).__name__}) has '
                        'no `backbone`')
    kind = model_kind(model, args.backbone)
    if shape is None:
        shape, _ = config_input_size(cfg, mmdcs_backbone(model))
    in_ch = _in_channels(model)
    g = torch.Generator().manual_seed(args.seed)
    example = torch.randn((args.batch, in_ch) + tuple(shape), generator=g)
    return cfg, model, kind, ExportWrapper(model, kind), example


def _in_channels(model) -> int:
    import torch.nn as nn
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            return m.in_channels
    return 3


def fmt_bytes(n: int) -> str:
    return f'{n / 2**20:.2f} MiB' if n >= 2**20 else f'{n / 2**10:.1f} KiB'


def run(args) -> dict:
    import torch

    from mmdcs.apis.deploy import ParityError, export_and_check
    if not args.out.endswith('.onnx'):
        raise UserError(f'--out must name a .onnx file, got {args.out!r}')
    check_output_file(args.out, '--out')
    refuse_overwrite([args.out], args.force)
    torch.manual_seed(args.seed)
    cfg, model, kind, wrapper, example = build(args)
    check = example
    if args.dynamic_batch:
        g = torch.Generator().manual_seed(args.seed + 1)
        check = torch.randn((example.shape[0] + 1, ) + tuple(example.shape[1:]), generator=g)
    print(f'exporting the {kind} of {args.config} ({type(model).__name__}) at input '
          f'{tuple(example.shape)} with torch.onnx ({args.exporter}, opset {args.opset})')
    meta = {'mmdcs.config': osp.abspath(args.config),
            'mmdcs.checkpoint': osp.abspath(args.checkpoint) if args.checkpoint else '',
            'mmdcs.input_shape': 'x'.join(str(s) for s in example.shape)}
    try:
        res = export_and_check(wrapper, example, args.out, opset=args.opset,
                               dynamic_batch=args.dynamic_batch, exporter=args.exporter,
                               rtol=args.rtol, check_inputs=check, metadata=meta,
                               force=args.force)
    except ParityError as e:
        print(f'parity FAILED: {e}', file=sys.stderr)
        sys.exit(1)
    print(f'onnxruntime vs PyTorch on the same input {tuple(check.shape)} '
          f'(tolerance {args.rtol:g} x the output\'s max |value|):')
    for r in res['parity']:
        print(f"  {r['name']:<14} {str(tuple(r['shape'])):<22} max abs diff {r['max_abs']:.3e}"
              f"  (scale {r['scale']:.3g}, relative {r['rel']:.2e})  ok")
    s = res['summary']
    print(f"wrote {args.out}: {s['nodes']} ONNX nodes, opset {s['opset']}, "
          f"{fmt_bytes(s['bytes'])} (exported in {res['seconds']:.1f} s)")
    return res


def main(argv=None):
    with user_errors():
        return run(parse_args(argv))


if __name__ == '__main__':
    run_program(main)
