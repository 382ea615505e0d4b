"""Grad-CAM (Selvaraju et al. 2017) of an mmpretrain classifier and its figure (DCS paper,
supplementary Fig. 7)."""
import math
from typing import Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .attention.plots import overlay, pyplot
from .attention.stats import backbone_of
from .complexity import _takes_mode


#: default Grad-CAM target layer (in the classifier) per family: the last stage. ViT: the
#: first norm of the last block (its output feeds the last attention; the last block's own
#: output reaches the prediction through the class token only, so its patch tokens get no
#: gradient), as mmpretrain's vis_cam does
DEFAULT_CAM_LAYERS = {
    'vit': 'backbone.blocks.-1.norm1',
    'swin': 'backbone.layers.-1',
    'mobilevit': 'backbone.stages.-1',
    'efficientvit': 'backbone.stages.-1',
}


def get_layer(model: nn.Module, path: str) -> nn.Module:
    """A submodule by dotted path, where a negative integer part counts from the end
    (``'backbone.blocks.-1'``)."""
    m = model
    for part in path.split('.'):
        if part.lstrip('-').isdigit():
            m = list(m.children())[int(part)] if not hasattr(m, '__getitem__') else m[int(part)]
        else:
            if not hasattr(m, part):
                raise ValueError(f'no layer {path!r} in {type(model).__name__} (at {part!r})')
            m = getattr(m, part)
    return m


def _to_bchw(act: Tensor, family: str, backbone: nn.Module, image_hw: Tuple[int, int]) -> Tensor:
    """A target layer's activation as (B, C, h, w)."""
    if act.dim() == 4 and family == 'swin':
        return act.permute(0, 3, 1, 2)  # (B, H, W, C)
    if act.dim() == 3:  # tokens (B, N, C)
        prefix = getattr(backbone, 'num_prefix_tokens', 0) if family == 'vit' else 0
        tokens = act[:, prefix:]
        p = getattr(backbone, 'patch_size', None)
        if family == 'vit' and p:
            gh, gw = image_hw[0] // p, image_hw[1] // p
        else:
            gh = gw = int(math.isqrt(tokens.shape[1]))
        return tokens.reshape(act.shape[0], gh, gw, -1).permute(0, 3, 1, 2)
    if act.dim() != 4:
        raise ValueError(f'Grad-CAM needs a spatial activation, got shape {tuple(act.shape)}')
    return act


def grad_cam(model: nn.Module, inputs: Tensor, target_layer: Optional[str] = None,
             target_class: Optional[Union[int, Sequence[int]]] = None
             ) -> Tuple[Tensor, Tensor, Tensor]:
    """Grad-CAM (Selvaraju et al. 2017) of an mmpretrain classifier.

    cam = ReLU(Σ_k w_k A_k), w_k = mean over positions of ∂score_c/∂A_k, at the output A of
    ``target_layer`` (default per family, :data:`DEFAULT_CAM_LAYERS`: the last stage), for the
    class c = ``target_class`` (default: the predicted class). Eval mode (DCS gates
    deterministic).

    Returns (cams (B, H, W) in [0, 1] at the input size, classes (B,), scores (B,) softmax
    probabilities of those classes).
    """
    backbone = backbone_of(model)
    family = getattr(backbone, 'family', '')
    path = target_layer or DEFAULT_CAM_LAYERS.get(family)
    if path is None:
        raise ValueError(f'no default Grad-CAM layer for {type(backbone).__name__}: give '
                         'target_layer')
    layer = get_layer(model, path)
    store = {}

    def hook(mod, args, out):
        out = out[-1] if isinstance(out, (tuple, list)) else out
        out.retain_grad()
        store['act'] = out

    was_training = model.training
    model.eval()
    h = layer.register_forward_hook(hook)
    try:
        with torch.enable_grad():
            x = inputs.detach().clone().requires_grad_(True)
            logits = model(x, mode='tensor') if _takes_mode(model) else model(x)
            if isinstance(logits, (tuple, list)):
                logits = logits[-1]
            if target_class is None:
                cls = logits.argmax(-1)
            else:
                cls = torch.as_tensor(target_class, device=logits.device).long().expand(
                    logits.shape[0]) if isinstance(target_class, int) else torch.as_tensor(
                        list(target_class), device=logits.device).long()
            score = logits.gather(1, cls[:, None]).sum()
            model.zero_grad(set_to_none=True)
            score.backward()
        act = store['act']
        if act.grad is None:
            raise ValueError(f'target layer {path!r} got no gradient (is it used for the '
                             'prediction?)')
        a = _to_bchw(act.detach(), family, backbone, tuple(inputs.shape[-2:]))
        g = _to_bchw(act.grad.detach(), family, backbone, tuple(inputs.shape[-2:]))
        weights = g.mean(dim=(2, 3), keepdim=True)
        cam = F.relu((weights * a).sum(1, keepdim=True))
        cam = F.interpolate(cam, size=inputs.shape[-2:], mode='bilinear', align_corners=False)
        cam = cam[:, 0]
        lo = cam.flatten(1).min(1).values[:, None, None]
        hi = cam.flatten(1).max(1).values[:, None, None]
        cam = (cam - lo) / (hi - lo).clamp_min(1e-12)
        probs = logits.detach().softmax(-1).gather(1, cls[:, None])[:, 0]
    finally:
        h.remove()
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    return cam.cpu(), cls.cpu(), probs.cpu()


def plot_cams(images: Sequence[Tensor], cams: Dict[str, Tuple[Tensor, Tensor, Tensor]],
              path: str, class_names: Optional[Sequence[str]] = None,
              title: Optional[str] = None) -> str:
    """Fig. 7 style grid: first row the images, then one row per model with its Grad-CAM
    overlays (predicted class and probability in each title)."""
    plt = pyplot()
    names = list(cams)
    cols = len(images)
    fig, axes = plt.subplots(1 + len(names), cols, figsize=(2.6 * cols, 2.7 * (1 + len(names))),
                             squeeze=False)
    for j, img in enumerate(images):
        axes[0][j].imshow(img.numpy())
        axes[0][j].set_title(f'image {j + 1}', fontsize=9)
        axes[0][j].axis('off')
        for i, n in enumerate(names):
            cam, cls, prob = cams[n]
            ax = axes[i + 1][j]
            ax.imshow(overlay(img, cam[j]))
            c = int(cls[j])
            label = class_names[c] if class_names and c < len(class_names) else str(c)
            ax.set_title(f'{n}: {label} ({float(prob[j]):.2f})', fontsize=8)
            ax.axis('off')
    fig.suptitle(title or 'Grad-CAM (predicted class, probability)', fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
