"""Grad-CAM asks the backbone (its ``cam_layer`` and ``tokens_to_bchw``, the backbone contract)
instead of branching on the family name: every family's classifier gives the Grad-CAM of a
reference written here from the per-family rules the analysis used to hold, at a non-square
size (a wrong token grid or channel order changes the map or its shape)."""
import math

import pytest
import torch
import torch.nn.functional as F

from _backbones import case, families, rand_input
from _tools import assert_close_scaled
from mmdcs.analysis.complexity import build_classifier
from mmdcs.analysis.gradcam import DEFAULT_CAM_LAYERS, default_cam_layer, get_layer, grad_cam

#: the per-family rules as the analysis held them before the contract carried them
REFERENCE_LAYERS = {'vit': 'backbone.blocks.-1.norm1', 'swin': 'backbone.layers.-1',
                    'mobilevit': 'backbone.stages.-1', 'efficientvit': 'backbone.stages.-1'}
SIZES = {'vit': (48, 80), 'swin': (64, 96), 'mobilevit': (64, 96), 'efficientvit': (64, 96)}


def _reference_bchw(act, family, backbone, image_hw):
    if act.dim() == 4 and family == 'swin':
        return act.permute(0, 3, 1, 2)
    if act.dim() == 3:
        prefix = backbone.num_prefix_tokens if family == 'vit' else 0
        tokens = act[:, prefix:]
        if family == 'vit':
            gh, gw = image_hw[0] // backbone.patch_size, image_hw[1] // backbone.patch_size
        else:
            gh = gw = math.isqrt(tokens.shape[1])
        return tokens.reshape(act.shape[0], gh, gw, -1).permute(0, 3, 1, 2)
    return act


def _reference_cam(model, x, family, target):
    store = {}

    def hook(mod, args, out):
        out.retain_grad()
        store['act'] = out

    handle = get_layer(model, REFERENCE_LAYERS[family]).register_forward_hook(hook)
    try:
        with torch.enable_grad():
            logits = model(x.clone(), mode='tensor')
            logits.gather(1, target[:, None]).sum().backward()
    finally:
        handle.remove()
        model.zero_grad(set_to_none=True)
    hw = tuple(x.shape[-2:])
    a = _reference_bchw(store['act'].detach(), family, model.backbone, hw)
    g = _reference_bchw(store['act'].grad, family, model.backbone, hw)
    cam = F.relu((g.mean(dim=(2, 3), keepdim=True) * a).sum(1, keepdim=True))
    cam = F.interpolate(cam, size=hw, mode='bilinear', align_corners=False)[:, 0]
    lo = cam.flatten(1).min(1).values[:, None, None]
    hi = cam.flatten(1).max(1).values[:, None, None]
    return (cam - lo) / (hi - lo).clamp_min(1e-12)


@pytest.mark.parametrize('family', sorted(REFERENCE_LAYERS))
def test_grad_cam_of_every_family_is_the_reference(family):
    cls = families()[family]
    arch = case(family).arch
    size = SIZES[family]
    torch.manual_seed(0)
    model = build_classifier(arch, 'baseline', img_size=size)
    assert default_cam_layer(model, model.backbone) == REFERENCE_LAYERS[family]
    assert DEFAULT_CAM_LAYERS[family] == f'backbone.{cls.cam_layer}'
    x = rand_input(2, 3, *size, seed=7)
    target = torch.tensor([3, 11])
    cams, classes, _ = grad_cam(model, x, target_class=[3, 11])
    assert cams.shape == (2, *size) and classes.tolist() == [3, 11]
    assert float(cams.min()) >= 0 and float(cams.max()) <= 1 + 1e-6
    assert float(cams.amax(dim=(1, 2)).min()) > 0.5  # a normalised map, not a constant one
    assert_close_scaled(cams, _reference_cam(model, x, family, target), 1e-4)
