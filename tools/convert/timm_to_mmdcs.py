"""Convert a timm checkpoint (or the official Swin layout) into an mmdcs classifier checkpoint.

    python tools/convert/timm_to_mmdcs.py FAMILY ARCH SRC DST [--layout timm|official] [--force]
    python tools/convert/timm_to_mmdcs.py vit vit-s16 vit_small_patch16_224.pth vit-s16_in1k.pth
    python tools/convert/timm_to_mmdcs.py swin swin-t --random-init swin-t_random.pth

SRC is a timm state dict (.pth/.bin, or .safetensors), e.g. downloaded by hand from the model hub;
nothing is downloaded here. It is loaded safely (weights only: a file holding other objects is
refused with one line unless ``--trust-checkpoint``; see ``mmdcs/utils/checkpoint.py``).
``--random-init`` converts a freshly initialised timm model instead (for smoke tests and
benchmarks). DST is an mmengine checkpoint
(``{'state_dict': ..., 'meta': ...}``; a ``.safetensors`` DST: a safetensors file with the meta
as JSON in its metadata) for the mmpretrain classifier of
``configs/_base_/models/<family>_<arch>.py``; its ``backbone.*`` weights also initialise a DCS/KCR
supernet ("all kept" gates) or a detector/segmentor backbone (``init_cfg=dict(type='Pretrained',
checkpoint=DST, prefix='backbone.')``).
"""
import argparse
import os.path as osp
import sys

try:
    import mmdcs  # noqa: F401
except ImportError:
    sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

import torch

from mmdcs.apis.launch import (ToolParser, UserError, add_trust_flag, run_program,
                               set_checkpoint_trust, user_errors)
from mmdcs.apis.outputs import (add_force_argument, atomic_outputs, check_output_file,
                                refuse_overwrite)
from mmdcs.models.backbones.base import backbone_classes
from mmdcs.utils.checkpoint import load_checkpoint_file, save_weights

#: the registered families whose archs convert from timm (each family's ``timm_models``)
FAMILIES = tuple(sorted(f for f, cls in backbone_classes().items() if cls.timm_models))
LAYOUTS = tuple(dict.fromkeys(lay for f in FAMILIES
                              for lay in backbone_classes()[f].checkpoint_layouts))


def load_state_dict(path):
    if not osp.isfile(path):
        raise UserError(f'source checkpoint not found: {path}')
    ckpt = load_checkpoint_file(path, map_location='cpu')
    for key in ('state_dict', 'model', 'state_dict_ema'):
        if isinstance(ckpt, dict) and key in ckpt and isinstance(ckpt[key], dict):
            return ckpt[key]
    return ckpt


def parse_args(argv=None):
    parser = ToolParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('family', choices=FAMILIES)
    parser.add_argument('arch')
    parser.add_argument('src', nargs='?', help='timm state dict (omit with --random-init)')
    parser.add_argument('dst', help='output mmengine checkpoint')
    parser.add_argument('--layout', choices=LAYOUTS, default='timm',
                        help="source layout (the family's checkpoint_layouts); 'official' = "
                        "Microsoft's Swin checkpoints")
    parser.add_argument('--random-init', action='store_true',
                        help='convert a randomly initialised timm model (no SRC)')
    add_trust_flag(parser)
    add_force_argument(parser)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    with user_errors():
        set_checkpoint_trust(args)
        convert(args)


def convert(args) -> None:
    check_output_file(args.dst, 'DST')
    refuse_overwrite([args.dst], args.force)
    cls = backbone_classes()[args.family]
    timm_names = cls.timm_models
    if args.arch not in timm_names:
        raise UserError(f'unknown arch {args.arch!r} for {args.family}; valid: '
                        f'{", ".join(timm_names)}')
    if args.layout not in cls.checkpoint_layouts:
        others = [f for f in FAMILIES if args.layout in backbone_classes()[f].checkpoint_layouts]
        raise UserError(f'--layout {args.layout} is for {", ".join(others)}, not {args.family}')
    if args.random_init:
        import timm
        torch.manual_seed(0)
        state = timm.create_model(timm_names[args.arch], pretrained=False).state_dict()
        source = f'timm:{timm_names[args.arch]} (random init)'
    else:
        if args.src is None:
            raise UserError('give SRC or --random-init')
        state = load_state_dict(args.src)
        source = args.src
    try:
        converted = cls.convert_checkpoint(state, args.arch, args.layout)
    except (ValueError, KeyError) as e:  # the weights are not of this family / arch
        raise UserError(f'{source}: {e.args[0] if e.args else e}') from e
    with atomic_outputs(args.dst, force=args.force) as (tmp, ):
        save_weights(tmp, converted, dict(source=source, family=args.family, arch=args.arch))
    n = sum(v.numel() for k, v in converted.items() if v.is_floating_point())
    print(f'wrote {args.dst}: {len(converted)} tensors, {n / 1e6:.2f} M values, from {source}')


if __name__ == '__main__':
    run_program(main)
