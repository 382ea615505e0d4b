"""Grad-CAM of classifiers on images, DCS paper Fig. 7 style: first row the images, then one
row per model with its Grad-CAM heat map (predicted class and probability in the titles).

    python tools/analysis/vis_cam.py --model CONFIG CHECKPOINT [--model CONFIG CHECKPOINT]
        [--names baseline dcs] --images IMG_OR_DIR [IMG_OR_DIR ...] [--num-images 6]
        [--target-layer backbone.stages.-1] [--target-class C] [--size S]
        [--out work_dirs/cam/grad_cam.png]

Grad-CAM (Selvaraju et al. 2017) is computed here (mmdcs.analysis.gradcam.grad_cam: hooks on the
target layer's activations and gradients, cam = ReLU(Σ_k w_k A_k), w_k the mean gradient of channel
k; no `grad-cam` package needed). Default target layer: the backbone's `cam_layer` (the backbone
contract), the last stage of each family: ViT `backbone.blocks.-1.norm1` (the tokens that feed the
last attention; class token dropped, patch tokens reshaped to the grid), Swin `backbone.layers.-1`,
MobileViT `backbone.stages.-1`, EfficientViT `backbone.stages.-1`. The class is the predicted one
unless --target-class. Images go through the config's test pipeline and data preprocessor.
CHECKPOINT may be `none` (random weights).
"""
import os.path as osp
import sys

try:
    import mmdcs  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from mmdcs.apis.launch import (ConfigOptions, ToolParser, UserError, add_trust_flag,
                               non_negative_int, positive_int, positive_size, run_program,
                               set_checkpoint_trust, user_errors)
from mmdcs.apis.outputs import (add_force_argument, atomic_outputs, check_output_file,
                                refuse_overwrite)


def parse_args(argv=None):
    p = ToolParser(description='Grad-CAM of classifiers (DCS paper, Fig. 7)')
    p.add_argument('--model', nargs=2, action='append', required=True,
                   metavar=('CONFIG', 'CHECKPOINT'),
                   help='a classifier config and checkpoint (repeat to compare)')
    p.add_argument('--names', nargs='+', help='one row name per model')
    p.add_argument('--images', nargs='+', required=True, help='image files or folders')
    p.add_argument('--num-images', type=positive_int, default=6, help='at most this many images')
    p.add_argument('--target-layer', help='dotted path in the model (default: per family)')
    p.add_argument('--target-class', type=non_negative_int, default=None,
                   help='class index (default: the predicted class of each model)')
    p.add_argument('--size', type=positive_size, default=None,
                   help='resize after the test pipeline')
    p.add_argument('--out', default='work_dirs/cam/grad_cam.png', help='output PNG')
    p.add_argument('--cfg-options', nargs='+', action=ConfigOptions,
                   help='override settings of every config, key=value')
    add_trust_flag(p)
    add_force_argument(p)
    args = p.parse_args(argv)
    if args.names and len(args.names) != len(args.model):
        p.error(f'--names: {len(args.names)} names for {len(args.model)} models')
    return args


def main(argv=None):
    args = parse_args(argv)
    with user_errors():
        set_checkpoint_trust(args)
        check_output_file(args.out, '--out')
        refuse_overwrite([args.out], args.force)
        from mmdcs.analysis.gradcam import (check_target_class, default_cam_layer, grad_cam,
                                            plot_cams)
        from mmdcs.apis.loading import list_images, load_classifier, load_images
        paths = []
        try:
            for item in args.images:
                paths += list_images(item)
        except FileNotFoundError as e:
            raise UserError(str(e)) from e
        paths = paths[:args.num_images]
        names = args.names or [osp.splitext(osp.basename(c))[0] for c, _ in args.model]
        if len(set(names)) != len(names):
            names = [f'{n} ({i + 1})' for i, n in enumerate(names)]
        cams, shows, class_names = {}, None, None
        for name, (config, ckpt) in zip(names, args.model):
            model, cfg, scope = load_classifier(config, ckpt, args.cfg_options)
            if not hasattr(model, 'head'):
                raise UserError(f'{config}: not a classifier (no head)')
            num_classes = getattr(model.head, 'num_classes', None)
            if isinstance(num_classes, int):
                try:
                    check_target_class(args.target_class, num_classes)
                except ValueError as e:
                    raise UserError(f'--target-class {args.target_class}: {config}: {e}') from e
            backbone = getattr(model, 'backbone', model)
            layer = args.target_layer or default_cam_layer(model, backbone)
            if layer is None:
                raise UserError(f'{config}: no default target layer for '
                                f'{type(backbone).__name__}; give --target-layer')
            inputs, show = load_images(paths, model, cfg, scope, args.size)
            if shows is None:
                shows = show
            try:
                cams[name] = grad_cam(model, inputs, layer, args.target_class)
            except ValueError as e:
                raise UserError(f'{name}: {e}') from e
            if class_names is None:
                meta = getattr(model, 'dataset_meta', None) or {}
                ds = (cfg.get('test_dataloader') or {}).get('dataset', {}) or {}
                class_names = meta.get('classes') or ds.get('classes')
            preds = ', '.join(str(int(c)) for c in cams[name][1])
            print(f'{name}: target layer {layer}; predicted classes: {preds}', flush=True)
        with atomic_outputs(args.out, force=args.force) as (tmp, ):
            plot_cams(shows, cams, tmp, class_names)
        out = args.out
        print(f'Grad-CAM figure: {out}')
        return cams


if __name__ == '__main__':
    run_program(main)
