"""Separable Gaussian blur of uint8 images: two stencil passes, `x[..., tile.index + d]`.

Each pass reads its neighbours by offsetting a tile's indices; positions that fall off
the image are masked automatically and read as 0, so borders are zero-padded, as
`F.conv2d(..., padding=radius)` and OpenCV's BORDER_CONSTANT do (not torchvision's
reflect). The arithmetic is fixed point, as OpenCV's for 8-bit images: each 1-D
Gaussian is quantized to integer weights summing to 256, the row pass keeps 8 fraction
bits in int32 and the column pass rounds the 16-bit fraction away, so the result is
exact and equals a float64 `F.conv2d` reference bit for bit.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import tilecraft as tc
from tilecraft.testing import default_device

ONE = 256  # the fixed-point scale of the 1-D weights


@tc.kernel
def gaussian_blur(image: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    channels, height, width = image.size()
    radius = weights.size(0) // 2
    rows = torch.empty([channels, height, width], dtype=torch.int32, device=image.device)
    out = torch.empty_like(image)
    size = [channels, height, width]
    for tile_c, tile_h, tile_w in tc.tile(size, block_size=[1, None, None]):
        acc = tc.zeros([tile_c, tile_h, tile_w], dtype=torch.int32)
        for k in range(2 * radius + 1):
            pixels = image[tile_c, tile_h, tile_w.index + (k - radius)]
            acc = acc + weights[k] * pixels.to(torch.int32)
        rows[tile_c, tile_h, tile_w] = acc
    for tile_c, tile_h, tile_w in tc.tile(size, block_size=[1, None, None]):
        acc = tc.zeros([tile_c, tile_h, tile_w], dtype=torch.int32)
        for k in range(2 * radius + 1):
            acc = acc + weights[k] * rows[tile_c, tile_h.index + (k - radius), tile_w]
        out[tile_c, tile_h, tile_w] = ((acc + ONE * ONE // 2) // (ONE * ONE)).to(torch.uint8)
    return out


def gaussian_weights(sigma: float, radius: int | None = None) -> torch.Tensor:
    """A 1-D Gaussian as int32 weights summing to 256 (radius 3 sigma by default)."""
    radius = max(1, math.ceil(3 * sigma)) if radius is None else radius
    x = torch.arange(-radius, radius + 1, dtype=torch.float64)
    kernel = torch.exp(-0.5 * (x / sigma) ** 2)
    weights = torch.round(kernel / kernel.sum() * ONE).to(torch.int32)
    weights[radius] += ONE - int(weights.sum())  # the rounding error goes to the centre
    return weights


def reference(image: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    radius = weights.numel() // 2
    square = torch.outer(weights, weights).to(torch.float64)[None, None]
    acc = F.conv2d(image.to(torch.float64)[:, None], square, padding=radius)[:, 0]
    return torch.div(acc + ONE * ONE // 2, ONE * ONE, rounding_mode="floor").to(torch.uint8)


def inputs(shape=(67, 93), dtype=torch.float32, device=None, sigma: float = 1.2) -> tuple:
    """A 3-channel uint8 image of `shape` (the image is uint8 whatever `dtype` says)."""
    device = device or default_device()
    image = torch.randint(0, 256, (3, *shape), dtype=torch.uint8, device=device)
    return image, gaussian_weights(sigma).to(device)


def main() -> None:
    args = inputs(sigma=2.0)
    assert torch.equal(gaussian_blur(*args), reference(*args))
    print("gaussian_blur: ok")


if __name__ == "__main__":
    main()
