"""Progressive masked image modelling (PMIM) of OFB (Sec. 3.4, supplementary C; the public code's
``MIMVisionTransformer``), and the two linear schedules of the search.

During the search a random share of the input patches is masked (their patch embeddings are
replaced by a learned mask token); a light decoder, ``Conv2d(C, s²·3, 1)`` + ``PixelShuffle(s)``
(SimMIM's), reconstructs the image from the final feature map, and the L1 loss on locally
normalised pixels is taken over the masked pixels only. The kept share decreases linearly from
0.95 to 0.75 over the warm-up epochs ("progressive"); the classification loss is computed on the
same masked input.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor


def linear_schedule(progress: float, warmup: float, start: float, end: float) -> float:
    """``start`` → ``end`` linearly over ``warmup`` epochs of progress, then ``end``."""
    if warmup <= 0:
        return end
    t = min(max(progress / warmup, 0.), 1.)
    return start + (end - start) * t


def random_patch_mask(batch: int, num_patches: int, keep_ratio: float, device=None,
                      generator=None) -> Tensor:
    """(B, L) float mask, 1 = masked: per sample, ``L − int(L·keep_ratio)`` patches chosen
    uniformly at random (the public code's count)."""
    if not 0 < keep_ratio <= 1:
        raise ValueError(f'keep_ratio must be in (0, 1], got {keep_ratio}')
    num_keep = int(num_patches * keep_ratio)
    noise = torch.rand(batch, num_patches, device=device, generator=generator)
    ranks = noise.argsort(dim=1).argsort(dim=1)
    return (ranks >= num_keep).float()


def upsample_patch_mask(mask: Tensor, grid, patch_size: int) -> Tensor:
    """(B, L) patch mask on an (h, w) grid → (B, 1, h·p, w·p) pixel mask."""
    B = mask.shape[0]
    h, w = grid
    m = mask.view(B, 1, h, w)
    return m.repeat_interleave(patch_size, 2).repeat_interleave(patch_size, 3)


def _box_mean(x: Tensor, window: int, count_include_pad: bool) -> Tensor:
    """Mean over the window×window neighbourhood (stride 1, zero padding), computed as two 1-D
    poolings: exact for a box, and O(window) instead of O(window²) per pixel."""
    pad = window // 2
    x = F.avg_pool2d(x, (window, 1), 1, (pad, 0), count_include_pad=count_include_pad)
    return F.avg_pool2d(x, (1, window), 1, (0, pad), count_include_pad=count_include_pad)


@torch.no_grad()
def local_norm_targets(images: Tensor, window: int = 47) -> Tensor:
    """Pixels normalised by the mean and (unbiased) std of their ``window``×``window``
    neighbourhood (the public code's ``norm_targets``; zero padding is not counted)."""
    if window % 2 != 1:
        raise ValueError(f'the normalisation window must be odd, got {window}')
    mean = _box_mean(images, window, False)
    sq_mean = _box_mean(images**2, window, False)
    count = _box_mean(torch.ones_like(images[:, :1]), window, True) * window**2
    var = (sq_mean - mean**2) * (count / (count - 1).clamp_min(1))
    return (images - mean) / (var.clamp_min(0) + 1e-6)**0.5


def pmim_loss(reconstruction: Tensor, images: Tensor, pixel_mask: Tensor,
              window: int = 47) -> Tensor:
    """Mean L1 between the reconstruction and the locally normalised images over the masked
    pixels (``pixel_mask`` (B, 1, H, W), 1 = masked) and the channels."""
    if reconstruction.shape != images.shape:
        raise ValueError(f'reconstruction {tuple(reconstruction.shape)} and images '
                         f'{tuple(images.shape)} differ in shape')
    targets = local_norm_targets(images, window)
    l1 = (reconstruction - targets).abs() * pixel_mask
    return l1.sum() / (pixel_mask.sum() + 1e-5) / images.shape[1]


class PMIMDecoder(nn.Module):
    """``Conv2d(C, s²·out, 1)`` + ``PixelShuffle(s)``: a (B, C, h, w) map → (B, out, h·s, w·s).

    Args:
        in_channels: width of the feature map.
        scale: the map's stride in pixels (16 for ViT/16, 32 for Swin's last stage).
        out_channels: image channels.
    """

    def __init__(self, in_channels: int, scale: int, out_channels: int = 3):
        super().__init__()
        self.scale = scale
        self.conv = nn.Conv2d(in_channels, scale * scale * out_channels, 1)
        self.shuffle = nn.PixelShuffle(scale)

    def forward(self, x: Tensor) -> Tensor:
        return self.shuffle(self.conv(x))
