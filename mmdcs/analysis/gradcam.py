"""Grad-CAM (Selvaraju et al. 2017) of an mmpretrain classifier and its figure (DCS paper,
supplementary Fig. 7)."""
from typing import Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from mmdcs.models.backbones.base import backbone_classes, feature_to_bchw
from .attention.plots import overlay, pyplot
from .attention.stats import backbone_of
from .complexity import _takes_mode


#: family → default Grad-CAM layer in a classifier (``backbone.`` + the family's ``cam_layer``):
#: a snapshot of the families registered at import; :func:`grad_cam` asks the backbone itself
DEFAULT_CAM_LAYERS = {f: f'backbone.{cls.cam_layer}' for f, cls in backbone_classes().items()}


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


def default_cam_layer(model: nn.Module, backbone: nn.Module) -> Optional[str]:
    """The default Grad-CAM layer of ``model``: its backbone's ``cam_layer`` (the backbone
    contract: the last stage; ViT the first norm of its last block), as a path in ``model``."""
    layer = getattr(backbone, 'cam_layer', '')
    if not layer:
        return None
    prefix = next(n for n, m in model.named_modules() if m is backbone)
    return f'{prefix}.{layer}' if prefix else layer


def check_target_class(target_class, num_classes: int) -> None:
    """``target_class`` (an index, indices, or None: the predicted class) names classes of a
    model with ``num_classes`` outputs: a ``ValueError`` naming the valid range otherwise."""
    if target_class is None:
        return
    given = [target_class] if isinstance(target_class, int) else list(target_class)
    bad = [c for c in given if isinstance(c, bool) or not isinstance(c, int) or
           not 0 <= c < num_classes]
    if bad:
        raise ValueError(f'target class {bad[0]!r} is not a class of the model: it has '
                         f'{num_classes} classes (0 to {num_classes - 1})')


def grad_cam(model: nn.Module, inputs: Tensor, target_layer: Optional[str] = None,
             target_class: Optional[Union[int, Sequence[int]]] = None
             ) -> Tuple[Tensor, Tensor, Tensor]:
    """Grad-CAM (Selvaraju et al. 2017) of an mmpretrain classifier.

    cam = ReLU(Σ_k w_k A_k), w_k = mean over positions of ∂score_c/∂A_k, at the output A of
    ``target_layer`` (default: the backbone's ``cam_layer``, :func:`default_cam_layer`: the
    last stage), for the
    class c = ``target_class`` (default: the predicted class). Eval mode (DCS gates
    deterministic).

    Returns (cams (B, H, W) in [0, 1] at the input size, classes (B,), scores (B,) softmax
    probabilities of those classes).
    """
    backbone = backbone_of(model)
    path = target_layer or default_cam_layer(model, backbone)
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
            check_target_class(target_class, logits.shape[-1])
            score = logits.gather(1, cls[:, None]).sum()
            model.zero_grad(set_to_none=True)
            score.backward()
        act = store['act']
        if act.grad is None:
            raise ValueError(f'target layer {path!r} got no gradient (is it used for the '
                             'prediction?)')
        to_bchw = getattr(backbone, 'tokens_to_bchw', None)
        if to_bchw is None:  # not an mmdcs backbone: maps, or tokens of a square grid
            to_bchw = lambda t, hw: feature_to_bchw(t)  # noqa: E731
        a = to_bchw(act.detach(), tuple(inputs.shape[-2:]))
        g = to_bchw(act.grad.detach(), tuple(inputs.shape[-2:]))
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
