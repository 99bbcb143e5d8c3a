# Kernel bodies index tensors with tiles, which the DSL's stubs do not type for mypy
# (`tc.tile` over a list yields tuples, block sizes may be None, tiles index tensors).
# mypy: disable-error-code="index,list-item,misc,arg-type,operator,union-attr"
"""The backward kernels of `tilecraft.nn.conv2d`: the activation's gradient, then the input
and weight gradients as implicit GEMMs (general convolutions) or direct stencils
(depthwise ones). Like the forward kernels they read NCHW and channels-last tensors
through 4-D subscripts, so the output gradient may come in either memory format.

The input gradient gathers, for each input position and tap, the output position the tap
came from (none where the stride skips it). The weight gradient reduces over all output
positions; that reduction is split into `splits` chunks (a tunable) whose float32 partial
sums are added on the host, so small weights still spread over many programs.
"""

from __future__ import annotations

import math

import torch

import tilecraft as tc
from tilecraft.language.tunables import Choice
from tilecraft.nn.conv2d_kernels import (
    GELU,
    RELU,
    SILU,
    _new_output,
    _positions,
    check_block,
    input_at,
    is_flat,
    output_at,
    reduction_block,
    reduction_extent,
    tap_offsets,
)

SPLIT_ROWS = 4096  # output positions per chunk of the weight gradient's reduction, at least
MAX_SPLITS = 64


def split_choices(rows: int) -> Choice:
    """Chunk counts for a weight gradient's reduction over `rows` output positions: the
    heuristic's pick first (the default), then the other powers of two up to MAX_SPLITS."""
    best = max(1, min(MAX_SPLITS, rows // SPLIT_ROWS))
    best = 1 << (best.bit_length() - 1)
    others = [s for s in (1, 2, 4, 8, 16, 32, 64) if s != best and s <= max(1, rows // 16)]
    return Choice(best, *others)


@tc.kernel
def activation_backward(grad: torch.Tensor, saved: torch.Tensor, act: int) -> torch.Tensor:
    """The gradient before the activation, from the gradient after it and `saved` (the
    output for ReLU, the pre-activation for SiLU and GELU); flat tensors."""
    grad_pre = torch.empty_like(grad)
    for tile in tc.tile(grad.size(0)):
        g = grad[tile].to(torch.float32)
        s = saved[tile].to(torch.float32)
        if act == RELU:  # PyTorch's threshold_backward: a NaN output passes the gradient
            g = torch.where(s <= 0, 0.0, g)
        if act == SILU:
            sig = torch.sigmoid(s)
            g = g * sig * (1.0 + s * (1.0 - sig))
        if act == GELU:
            cdf = 0.5 * (1.0 + torch.erf(s * (1.0 / math.sqrt(2.0))))
            pdf = torch.exp(-0.5 * s * s) * (1.0 / math.sqrt(2.0 * math.pi))
            g = g * (cdf + s * pdf)
        grad_pre[tile] = g.to(grad_pre.dtype)
    return grad_pre


@tc.kernel
def conv2d_input_grad(
    grad: torch.Tensor,
    weight: torch.Tensor,
    x: torch.Tensor,
    stride_h: int,
    stride_w: int,
    pad_h: int,
    pad_w: int,
    dil_h: int,
    dil_w: int,
    groups: int,
    channels_last: bool,
) -> torch.Tensor:
    """dX of a convolution (x is read for its shape and dtype only): an implicit GEMM of
    input positions by the input channels of a group, reducing over (tap, output channel)."""
    batch, in_ch, height, width = x.size()
    out_ch, cin_g = weight.size(0), weight.size(1)
    cout_g = out_ch // groups
    kernel_w = tc.specialize(weight.size(3))
    taps = weight.size(2) * kernel_w
    flat, padded = is_flat(cout_g), reduction_extent(cout_g)
    filters = weight.permute(2, 3, 0, 1)  # [kh, kw, out_ch, cin_g], rows of K: a view
    grad_x = _new_output(x, in_ch, height, width, channels_last)
    block_k = tc.register_block_size(16, padded if not flat else taps * padded)
    check_block(block_k, padded, flat)
    size = [groups, batch * height * width, cin_g]
    for tile_g, tile_m, tile_n in tc.tile(size, block_size=[1, None, None]):
        image, ih, iw = _positions(tile_m.index, height, width)
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in tc.tile(taps * padded, block_size=block_k):
            tap, c, real = reduction_block(tile_k, cout_g, taps, flat)
            rows, cols, row_w, col_w = tap_offsets(tap, kernel_w, flat)
            oh, hit_h = output_at(ih[:, None], rows, stride_h, dil_h, pad_h)
            ow, hit_w = output_at(iw[:, None], cols, stride_w, dil_w, pad_w)
            co = tile_g.begin * cout_g + c
            where = [image[:, None], co[None, :], oh, ow]
            gathered = tc.load(grad, where, extra_mask=hit_h & hit_w & real[None, :])
            taps_w = tc.load(filters, [row_w, col_w, co[:, None], tile_n.index[None, :]],
                             extra_mask=real[:, None])  # fmt: skip
            acc = torch.addmm(acc, gathered, taps_w)
        ci = tile_g.begin * cin_g + tile_n.index
        grad_x[image[:, None], ci[None, :], ih[:, None], iw[:, None]] = acc.to(grad_x.dtype)
    return grad_x


@tc.kernel
def conv2d_weight_grad(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    stride_h: int,
    stride_w: int,
    pad_h: int,
    pad_w: int,
    dil_h: int,
    dil_w: int,
    groups: int,
) -> torch.Tensor:
    """dW of a convolution (weight read for its shape and dtype): per tap and group, im2col
    transposed times the output gradient, over chunks of the output positions."""
    batch, _, height, width = x.size()
    out_ch, cin_g, kernel_h, kernel_w = weight.size()
    cout_g = out_ch // groups
    out_h, out_w = grad.size(2), grad.size(3)
    m, taps = batch * out_h * out_w, kernel_h * kernel_w
    splits = tc.register_tunable("splits", split_choices(m))
    chunk = (m + splits - 1) // splits
    parts = torch.empty([splits, taps, cin_g, out_ch], dtype=torch.float32, device=x.device)
    size = [splits, groups * taps, cin_g, cout_g]
    for tile_s, tile_t, tile_i, tile_o in tc.tile(size, block_size=[1, 1, None, None]):
        group, tap = tile_t.begin // taps, tile_t.begin % taps
        ci = group * cin_g + tile_i.index
        co = group * cout_g + tile_o.index
        acc = tc.zeros([tile_i, tile_o], dtype=torch.float32)
        start = tile_s.begin * chunk
        for tile_m in tc.tile(start, min(start + chunk, m)):
            image, oh, ow = _positions(tile_m.index, out_h, out_w)
            ih = input_at(oh, tap // kernel_w, stride_h, dil_h, pad_h)
            iw = input_at(ow, tap % kernel_w, stride_w, dil_w, pad_w)
            patch = x[image[:, None], ci[None, :], ih[:, None], iw[:, None]]
            grad_tile = grad[image[:, None], co[None, :], oh[:, None], ow[:, None]]
            acc = torch.addmm(acc, patch.T, grad_tile)
        parts[tile_s.begin, tap, tile_i.index[:, None], co[None, :]] = acc
    per_tap = parts.sum(0).view(kernel_h, kernel_w, cin_g, out_ch)
    return per_tap.permute(3, 2, 0, 1).contiguous().to(weight.dtype)


@tc.kernel
def depthwise_input_grad(
    grad: torch.Tensor,
    weight: torch.Tensor,
    x: torch.Tensor,
    stride_h: int,
    stride_w: int,
    pad_h: int,
    pad_w: int,
    dil_h: int,
    dil_w: int,
    channels_last: bool,
) -> torch.Tensor:
    """dX of a depthwise convolution as a direct stencil: each input position sums, over the
    taps, the output gradient it fed times the channel's weight."""
    batch, channels, height, width = x.size()
    kernel_h = tc.specialize(weight.size(2))
    kernel_w = tc.specialize(weight.size(3))
    filters = weight.reshape(channels, kernel_h * kernel_w)  # a view: no copy per call
    grad_x = _new_output(x, channels, height, width, channels_last)
    for tile_m, tile_c in tc.tile([batch * height * width, channels]):
        image, ih, iw = _positions(tile_m.index, height, width)
        acc = tc.zeros([tile_m, tile_c], dtype=torch.float32)
        for i in range(kernel_h):
            oh, hit_h = output_at(ih, i, stride_h, dil_h, pad_h)
            for j in range(kernel_w):
                ow, hit_w = output_at(iw, j, stride_w, dil_w, pad_w)
                where = [image[:, None], tile_c.index[None, :], oh[:, None], ow[:, None]]
                fed = tc.load(grad, where, extra_mask=(hit_h & hit_w)[:, None])
                taps_w = filters[tile_c, i * kernel_w + j].to(torch.float32)
                acc = acc + fed.to(torch.float32) * taps_w[None, :]
        where_x = (image[:, None], tile_c.index[None, :], ih[:, None], iw[:, None])
        grad_x[where_x] = acc.to(grad_x.dtype)
    return grad_x


@tc.kernel
def depthwise_weight_grad(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    stride_h: int,
    stride_w: int,
    pad_h: int,
    pad_w: int,
    dil_h: int,
    dil_w: int,
) -> torch.Tensor:
    """dW of a depthwise convolution: per tap and channel, the sum over output positions of
    the output gradient times the input pixel the tap read, over chunks of the positions."""
    batch, channels, _, _ = x.size()
    kernel_h, kernel_w = weight.size(2), weight.size(3)
    out_h, out_w = grad.size(2), grad.size(3)
    m, taps = batch * out_h * out_w, kernel_h * kernel_w
    splits = tc.register_tunable("splits", split_choices(m))
    chunk = (m + splits - 1) // splits
    parts = torch.empty([splits, taps, channels], dtype=torch.float32, device=x.device)
    for tile_s, tile_t, tile_c in tc.tile([splits, taps, channels], block_size=[1, 1, None]):
        i, j = tile_t.begin // kernel_w, tile_t.begin % kernel_w
        acc = tc.zeros([tile_c], dtype=torch.float32)
        # rows past the last output position are past the last image and read 0
        for tile_m in tc.tile(chunk):
            image, oh, ow = _positions(tile_s.begin * chunk + tile_m.index, out_h, out_w)
            ih = input_at(oh, i, stride_h, dil_h, pad_h)
            iw = input_at(ow, j, stride_w, dil_w, pad_w)
            pixels = x[image[:, None], tile_c.index[None, :], ih[:, None], iw[:, None]]
            grad_tile = grad[image[:, None], tile_c.index[None, :], oh[:, None], ow[:, None]]
            acc = acc + torch.sum(pixels.to(torch.float32) * grad_tile.to(torch.float32), 0)
        parts[tile_s.begin, tile_t.begin, tile_c] = acc
    per_tap = parts.sum(0).t().reshape(channels, 1, kernel_h, kernel_w)
    return per_tap.contiguous().to(weight.dtype)
