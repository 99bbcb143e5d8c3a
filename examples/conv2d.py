"""Direct 2-D convolution (NCHW, stride and zero padding), as `F.conv2d` computes it.

Each output tile reads, for every input channel and filter tap, the input pixels its
positions see: `x[b, ic, rows[:, None], cols[None, :]]` with `rows`/`cols` computed from
the output tiles' indices. Positions in the padding fall outside the input, so they are
masked automatically and read as 0 (zero padding).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def conv2d(x: torch.Tensor, weight: torch.Tensor, stride: int, padding: int) -> torch.Tensor:
    batch, in_channels, height, width = x.size()
    out_channels, _, kernel_h, kernel_w = weight.size()
    out_h = (height + 2 * padding - kernel_h) // stride + 1
    out_w = (width + 2 * padding - kernel_w) // stride + 1
    out = torch.empty([batch, out_channels, out_h, out_w], dtype=x.dtype, device=x.device)
    size = [batch, out_channels, out_h, out_w]
    for tile_b, tile_oc, tile_oh, tile_ow in tc.tile(size, block_size=[1, None, None, None]):
        acc = tc.zeros([tile_b, tile_oc, tile_oh, tile_ow], dtype=torch.float32)
        for ic in tc.grid(in_channels):
            for i in range(kernel_h):
                rows = tile_oh.index * stride + (i - padding)
                for j in range(kernel_w):
                    cols = tile_ow.index * stride + (j - padding)
                    pixels = x[tile_b, ic, rows[:, None], cols[None, :]].to(torch.float32)
                    taps = weight[tile_oc, ic, i, j].to(torch.float32)
                    acc = acc + taps[None, :, None, None] * pixels[:, None, :, :]
        out[tile_b, tile_oc, tile_oh, tile_ow] = acc.to(out.dtype)
    return out


def reference(x: torch.Tensor, weight: torch.Tensor, stride: int, padding: int) -> torch.Tensor:
    out = F.conv2d(x.float(), weight.float(), stride=stride, padding=padding)
    return out.to(x.dtype)


def inputs(
    shape=(30, 45), dtype=torch.float32, device=None, stride: int = 2, padding: int = 1
) -> tuple:
    """Two images of 3 channels and `shape` pixels, and 5 filters of 3x3."""
    device = device or default_device()
    x = torch.randn(2, 3, *shape, dtype=dtype, device=device)
    weight = torch.randn(5, 3, 3, 3, dtype=dtype, device=device) / 3
    return x, weight, stride, padding


def main() -> None:
    for stride, padding in ((2, 1), (1, 0), (1, 2)):
        args = inputs(stride=stride, padding=padding)
        assert_close(conv2d(*args), reference(*args))
    print("conv2d: ok")


if __name__ == "__main__":
    main()
