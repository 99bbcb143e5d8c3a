# Kernel bodies index tensors with tiles, which the DSL's stubs do not type for mypy
# (`tc.tile` over a list yields tuples, block sizes may be None, tiles index tensors).
# mypy: disable-error-code="index,list-item,misc,arg-type,operator,union-attr,call-overload"
"""1x1 convolutions of NCHW images (stride 1, no padding, one group) as plain GEMMs over
planes: `out[n] (out_ch x pixels) = W (out_ch x in_ch) @ x[n] (in_ch x pixels)`.

An NCHW image is, per image, an `[in_ch, pixels]` matrix with contiguous rows, and so is its
output: the GEMM reads the filter row-major, the image and writes the output along
contiguous pixels (vector loads and stores, the MMA's preferred operand layouts), where
`conv2d_pointwise` reads NCHW memory as `[pixels, in_ch]` transposes. The batch is a grid
dimension. The backward is two more plain GEMMs: `dx[n] = W^T @ grad[n]` and
`dW = sum_n grad[n] @ x[n]^T`, the latter's reduction (images by pixels) split in chunks
whose float32 partial sums are added on the host.
"""

from __future__ import annotations

import torch

import tilecraft as tc
from tilecraft.language.tunables import Choice
from tilecraft.nn.conv2d_kernels import (
    SUM_COLS,
    SUM_ROWS,
    _epilogue,
    _outputs,
    k_splits,
    partial_sums,
    saves_pre,
    split_chunk,
)

SPLIT_PIXELS = 4096  # (image, pixel) pairs per chunk of the weight gradient, at least
MAX_SPLITS = 64


def _as_planes(t: torch.Tensor) -> torch.Tensor:
    """`(batch, channels, height, width)` as `(batch, channels, pixels)` (a view of NCHW
    memory; a copy for another layout, such as a channels-last residual)."""
    return t.reshape(t.size(0), t.size(1), t.size(2) * t.size(3))


@tc.kernel
def conv2d_pointwise_planes(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    residual: torch.Tensor,
    stride_h: int,
    stride_w: int,
    pad_h: int,
    pad_w: int,
    dil_h: int,
    dil_w: int,
    groups: int,
    out_h: int,
    out_w: int,
    act: int,
    has_bias: bool,
    has_residual: bool,
    channels_last: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A 1x1 convolution of an NCHW image as a GEMM per image, `W @ x[n]`, then the epilogue;
    returns the output and the pre-activation (empty unless the activation's gradient needs
    it). Takes `conv2d_gemm`'s arguments (NCHW x, a 1x1 filter, stride 1, no padding, one
    group). With `splits` > 1 (split-K) the channels are cut in that many chunks, summed in
    float32 by a second pass that applies the epilogue. `image_tiles` (a tunable, unsplit
    only) loads the image through `[1, block, block]` tiles of its `(batch, in_ch, pixels)`
    view, which `indexing="tensor_descriptor"` turns into TMA loads, rather than at a
    scalar image (pointer loads only)."""
    batch, in_ch, height, width = x.size()
    out_ch, pixels = weight.size(0), height * width
    filters = weight.reshape(out_ch, in_ch)  # rows of in_ch: a view of either weight layout
    out, pre = _outputs(x, out_ch, height, width, False, act)
    flags = (act, has_bias, has_residual)
    planes, out_planes = _as_planes(x), _as_planes(out)
    pre_planes = _as_planes(pre) if saves_pre(act) else pre
    res_planes = _as_planes(residual) if has_residual else pre
    block_k = tc.register_block_size(16, in_ch)
    splits = tc.register_tunable("splits", k_splits(in_ch))
    image_tiles = tc.register_tunable("image_tiles", Choice(False, True))
    chunk = split_chunk(in_ch, block_k, splits)
    parts = partial_sums(splits, [batch, out_ch, pixels], x)
    size = [splits * batch, out_ch, pixels]
    for tile_sb, tile_m, tile_n in tc.tile(size, block_size=[1, None, None]):
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        if splits > 1:  # this program's chunk of the channels (whole blocks but the last)
            image, start = tile_sb.begin % batch, tile_sb.begin // batch * chunk
            for tile_k in tc.tile(start, min(start + chunk, in_ch), block_size=block_k):
                acc = torch.addmm(acc, filters[tile_m, tile_k], planes[image, tile_k, tile_n])
            parts[tile_sb.begin // batch, image, tile_m, tile_n] = acc
        else:  # (the program's own image: no wrap-around of a computed index)
            for tile_k in tc.tile(in_ch, block_size=block_k):
                if image_tiles:  # a [1, block, block] tile: TMA descriptors can load it
                    fed = planes[tile_sb, tile_k, tile_n].squeeze(0)
                else:  # at a scalar image: pointers only
                    fed = planes[tile_sb.begin, tile_k, tile_n]
                acc = torch.addmm(acc, filters[tile_m, tile_k], fed)
            where = [tile_sb.begin, tile_m, tile_n]
            cols = tile_m.index[:, None]  # the bias runs down the rows (output channels)
            _epilogue(acc, where, cols, out_planes, pre_planes, bias, res_planes, flags)
    # split-K's second pass: the chunks' sums added, then the epilogue (no programs unsplit)
    size = [batch if splits > 1 else 0, out_ch, pixels]
    for tile_b, tile_m, tile_n in tc.tile(size, block_size=[1, SUM_ROWS, SUM_COLS]):
        acc = parts[0, tile_b.begin, tile_m, tile_n]
        for s in range(1, splits):
            acc = acc + parts[s, tile_b.begin, tile_m, tile_n]
        where = [tile_b.begin, tile_m, tile_n]
        cols = tile_m.index[:, None]
        _epilogue(acc, where, cols, out_planes, pre_planes, bias, res_planes, flags)
    return out, pre


@tc.kernel
def pointwise_planes_input_grad(
    grad: torch.Tensor, weight: torch.Tensor, x: torch.Tensor
) -> torch.Tensor:
    """dX of an NCHW 1x1 convolution (x read for its shape and dtype only): `W^T @ grad[n]`
    per image, `grad` NCHW."""
    batch, in_ch, height, width = x.size()
    out_ch, pixels = weight.size(0), height * width
    filters_t = weight.reshape(out_ch, in_ch).t()  # [in_ch, out_ch]: a view
    grad_planes = _as_planes(grad)
    grad_x = torch.empty([batch, in_ch, height, width], dtype=x.dtype, device=x.device)
    grad_x_planes = _as_planes(grad_x)
    for tile_b, tile_m, tile_n in tc.tile([batch, in_ch, pixels], block_size=[1, None, None]):
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in tc.tile(out_ch):
            fed = grad_planes[tile_b.begin, tile_k, tile_n]
            acc = torch.addmm(acc, filters_t[tile_m, tile_k], fed)
        grad_x_planes[tile_b.begin, tile_m, tile_n] = acc.to(grad_x.dtype)
    return grad_x


def weight_grad_splits(batch: int, pixels: int) -> Choice:
    """Chunk counts for the weight gradient's reduction over `batch` images of `pixels`:
    the heuristic's pick first (a chunk of at least SPLIT_PIXELS pairs), then the other
    powers of two up to MAX_SPLITS."""
    best = max(1, min(MAX_SPLITS, batch * pixels // SPLIT_PIXELS))
    best = 1 << (best.bit_length() - 1)
    most = max(1, batch * pixels // 16)
    others = [s for s in (1, 2, 4, 8, 16, 32, 64) if s != best and s <= most]
    return Choice(best, *others)


def chunks(batch: int, pixels: int, splits: int) -> tuple[int, int, int]:
    """How `splits` chunks cut the (image, pixel) reduction: (images per chunk, chunks of
    each image's pixels, pixels per chunk). Whole images while there are at least as many
    images as chunks, else one image and `splits // batch` runs of its pixels."""
    images = max(1, -(-batch // splits))
    pixel_chunks = max(1, splits // max(batch, 1))
    return images, pixel_chunks, -(-pixels // pixel_chunks)


@tc.kernel
def pointwise_planes_weight_grad(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor
) -> torch.Tensor:
    """dW of an NCHW 1x1 convolution (weight read for its shape and dtype):
    `sum_n grad[n] @ x[n]^T` over chunks of images and pixels, `grad` NCHW."""
    batch, in_ch, height, width = x.size()
    out_ch, pixels = weight.size(0), height * width
    splits = tc.register_tunable("splits", weight_grad_splits(batch, pixels))
    images, pixel_chunks, pixel_chunk = chunks(batch, pixels, splits)
    image_chunks = -(-batch // images)
    grad_planes, planes = _as_planes(grad), _as_planes(x)
    parts = torch.empty(
        [image_chunks * pixel_chunks, out_ch, in_ch], dtype=torch.float32, device=x.device
    )
    size = [image_chunks * pixel_chunks, out_ch, in_ch]
    for tile_s, tile_m, tile_n in tc.tile(size, block_size=[1, None, None]):
        first = tile_s.begin // pixel_chunks * images
        start = tile_s.begin % pixel_chunks * pixel_chunk
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        for image in tc.grid(first, min(first + images, batch)):
            for tile_k in tc.tile(start, min(start + pixel_chunk, pixels)):
                fed = grad_planes[image, tile_m, tile_k]
                acc = torch.addmm(acc, fed, planes[image, tile_n, tile_k].T)
        parts[tile_s.begin, tile_m, tile_n] = acc
    return parts.sum(0).view(out_ch, in_ch, 1, 1).to(weight.dtype)
