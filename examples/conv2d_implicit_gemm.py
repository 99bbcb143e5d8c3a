"""2-D convolution as an implicit GEMM over channels-last (NHWC) images.

The convolution is a matrix product `[batch*out_h*out_w, kh*kw*in_ch] @ [kh*kw*in_ch,
out_ch]` whose left operand is never built: each tile of it is gathered from the image
with indices computed from the output positions and filter taps, and taps that fall in
the zero padding are masked off. The weight is stored `[kh, kw, in_ch, out_ch]`, so its
rows are the reduction index in the same order.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def conv2d_nhwc(x: torch.Tensor, weight: torch.Tensor, stride: int, padding: int) -> torch.Tensor:
    batch, height, width, in_ch = x.size()
    kernel_h, kernel_w, _, out_ch = weight.size()
    out_h = (height + 2 * padding - kernel_h) // stride + 1
    out_w = (width + 2 * padding - kernel_w) // stride + 1
    m, k = batch * out_h * out_w, kernel_h * kernel_w * in_ch
    out = torch.empty([batch, out_h, out_w, out_ch], dtype=x.dtype, device=x.device)
    pixels = x.reshape(-1)
    filters = weight.reshape(k, out_ch)
    rows_out = out.view(m, out_ch)
    for tile_m, tile_n in tc.tile([m, out_ch]):
        image = tile_m.index // (out_h * out_w)
        oh = tile_m.index % (out_h * out_w) // out_w
        ow = tile_m.index % out_w
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in tc.tile(k):
            i = tile_k.index // (kernel_w * in_ch)
            j = tile_k.index // in_ch % kernel_w
            c = tile_k.index % in_ch
            ih = oh[:, None] * stride + i[None, :] - padding
            iw = ow[:, None] * stride + j[None, :] - padding
            inside = (ih >= 0) & (ih < height) & (iw >= 0) & (iw < width)
            index = ((image[:, None] * height + ih) * width + iw) * in_ch + c[None, :]
            patch = tc.load(pixels, [index], extra_mask=inside)
            acc = torch.addmm(acc, patch, filters[tile_k, tile_n])
        rows_out[tile_m, tile_n] = acc.to(out.dtype)
    return out


def reference(x: torch.Tensor, weight: torch.Tensor, stride: int, padding: int) -> torch.Tensor:
    nchw = x.permute(0, 3, 1, 2).float()
    filters = weight.permute(3, 2, 0, 1).float()
    out = F.conv2d(nchw, filters, stride=stride, padding=padding)
    return out.permute(0, 2, 3, 1).to(x.dtype)


def inputs(
    shape=(30, 45), dtype=torch.float32, device=None, stride: int = 2, padding: int = 1
) -> tuple:
    """Two NHWC images of `shape` pixels and 6 channels, and 10 filters of 3x3."""
    device = device or default_device()
    x = torch.randn(2, *shape, 6, dtype=dtype, device=device)
    weight = torch.randn(3, 3, 6, 10, dtype=dtype, device=device) / 5
    return x, weight, stride, padding


def main() -> None:
    for stride, padding in ((2, 1), (1, 0), (1, 2)):
        args = inputs(stride=stride, padding=padding)
        assert_close(conv2d_nhwc(*args), reference(*args))
    print("conv2d_implicit_gemm: ok")


if __name__ == "__main__":
    main()
