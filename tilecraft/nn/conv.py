# Kernel bodies index tensors with tiles, which the DSL's stubs do not type for mypy
# (`tc.tile` over a list yields tuples, block sizes may be None, tiles index tensors).
# mypy: disable-error-code="index,list-item,misc,arg-type,operator"
"""The causal depthwise 1-D convolution of state-space models (Mamba's `causal_conv1d`).

`x` is `(batch, channels, length)`, `weight` `(channels, width)`: each channel is filtered by
its own taps over the current and the `width - 1` previous steps,
`out[b, c, t] = bias[c] + sum_k weight[c, k] * x[b, c, t - width + 1 + k]`, with zeros before
the start, optionally followed by SiLU. That is `F.conv1d(x, weight[:, None], bias,
padding=width - 1, groups=channels)[..., :length]`. Taps before the start read 0 through
the masked gather of an index tile past the tensor's edge. Sums are float32.
"""

from __future__ import annotations

from typing import Any

import torch

import tilecraft as tc


@tc.kernel
def causal_conv1d_forward(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, silu: bool
) -> torch.Tensor:
    """The convolution plus bias, then SiLU when `silu`."""
    batch, channels, length = x.size()
    width = tc.specialize(weight.size(1))
    out = torch.empty_like(x)
    for tile_b, tile_c, tile_l in tc.tile([batch, channels, length], block_size=[1, None, None]):
        acc = _conv(x, weight, bias, tile_b, tile_c, tile_l, width)
        if silu:
            acc = acc * torch.sigmoid(acc)
        out[tile_b, tile_c, tile_l] = acc.to(out.dtype)
    return out


def _conv(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    tile_b: Any,
    tile_c: Any,
    tile_l: Any,
    width: int,
) -> torch.Tensor:
    """Bias plus taps over [tile_b, tile_c, tile_l], in float32."""
    acc = tc.zeros([tile_b, tile_c, tile_l], dtype=torch.float32)
    acc = acc + bias[tile_c].to(torch.float32)[None, :, None]
    for k in range(width):
        steps = tile_l.index + (k - width + 1)  # negative steps read 0: the causal padding
        taps = weight[tile_c, k].to(torch.float32)
        acc = acc + taps[None, :, None] * x[tile_b, tile_c, steps].to(torch.float32)
    return acc


@tc.kernel
def causal_conv1d_backward(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, silu: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of x, weight and bias (the forward recomputed where SiLU needs it)."""
    batch, channels, length = x.size()
    width = tc.specialize(weight.size(1))
    size = [batch, channels, length]
    # the gradient before SiLU, in float32
    grad_pre = torch.empty(size, dtype=torch.float32, device=x.device)
    for tile_b, tile_c, tile_l in tc.tile(size, block_size=[1, None, None]):
        g = grad_out[tile_b, tile_c, tile_l].to(torch.float32)
        if silu:
            pre = _conv(x, weight, bias, tile_b, tile_c, tile_l, width)
            sig = torch.sigmoid(pre)
            g = g * sig * (1.0 + pre * (1.0 - sig))
        grad_pre[tile_b, tile_c, tile_l] = g
    # dx[t] = sum_k w[k] * g[t + width - 1 - k]: the taps run forward in time; past the end
    # the gathered gradient reads 0
    grad_x = torch.empty_like(x)
    for tile_b, tile_c, tile_l in tc.tile(size, block_size=[1, None, None]):
        acc = tc.zeros([tile_b, tile_c, tile_l], dtype=torch.float32)
        for k in range(width):
            steps = tile_l.index + (width - 1 - k)
            taps = weight[tile_c, k].to(torch.float32)
            acc = acc + taps[None, :, None] * grad_pre[tile_b, tile_c, steps]
        grad_x[tile_b, tile_c, tile_l] = acc.to(grad_x.dtype)
    # dw[c, k] = sum_{b, t} g[b, c, t] * x[b, c, t - width + 1 + k]: per-batch terms, summed
    # on the host (no atomics)
    grad_w_parts = torch.empty([batch, channels, width], dtype=torch.float32, device=x.device)
    for tile_b, tile_c, tile_k in tc.tile([batch, channels, width], block_size=[1, None, 1]):
        acc_w = tc.zeros([tile_b, tile_c], dtype=torch.float32)
        for tile_l in tc.tile(length):
            inputs_at = tile_l.index + (tile_k.begin - width + 1)
            g = grad_pre[tile_b, tile_c, tile_l]
            acc_w = acc_w + torch.sum(g * x[tile_b, tile_c, inputs_at].to(torch.float32), -1)
        grad_w_parts[tile_b, tile_c, tile_k] = acc_w[:, :, None]
    grad_w = grad_w_parts.sum(0).to(weight.dtype)
    return grad_x, grad_w, grad_pre.sum([0, 2]).to(bias.dtype)


# a differentiable PyTorch operator: torch.ops.tilecraft_nn.causal_conv1d
causal_conv1d_op = causal_conv1d_forward.as_torch_op(
    "tilecraft_nn::causal_conv1d", backward=causal_conv1d_backward
)


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
) -> torch.Tensor:
    """Causal depthwise 1-D convolution, differentiable; `activation` is None or "silu".

    `x` is `(batch, channels, length)`, `weight` `(channels, width)`, `bias` `(channels,)`:
    `F.conv1d(x, weight[:, None], bias, padding=width - 1, groups=channels)[..., :length]`,
    then SiLU when asked.
    """
    if activation not in (None, "silu"):
        raise ValueError(f"activation must be None or 'silu', not {activation!r}")
    if x.dim() != 3 or weight.dim() != 2 or weight.size(0) != x.size(1):
        raise ValueError(
            f"x must be (batch, channels, length) and weight (channels, width), got "
            f"{tuple(x.shape)} and {tuple(weight.shape)}"
        )
    if bias is None:
        bias = torch.zeros(x.size(1), dtype=weight.dtype, device=weight.device)
    elif bias.shape != (x.size(1),):
        raise ValueError(f"bias must be ({x.size(1)},), got {tuple(bias.shape)}")
    args = (x.contiguous(), weight.contiguous(), bias.contiguous())
    return causal_conv1d_op(*args, activation == "silu")


@tc.kernel
def conv2d_nhwc_forward(
    x: torch.Tensor, weight: torch.Tensor, stride: int, padding: int
) -> torch.Tensor:
    """2-D convolution of NHWC `x` by `weight` `[kh, kw, in_ch, out_ch]`, as an implicit
    GEMM `[batch*out_h*out_w, kh*kw*in_ch] @ [kh*kw*in_ch, out_ch]` whose left operand is
    gathered tile by tile from the image (taps in the zero padding masked off)."""
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
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in tc.tile(k):
            patch = _patch(pixels, tile_m, tile_k, x.size(), weight.size(), stride, padding)
            acc = torch.addmm(acc, patch, filters[tile_k, tile_n])
        rows_out[tile_m, tile_n] = acc.to(out.dtype)
    return out


def _patch(
    pixels: torch.Tensor,
    tile_m: Any,
    tile_k: Any,
    x_size: Any,
    w_size: Any,
    stride: int,
    padding: int,
) -> torch.Tensor:
    """The [tile_m, tile_k] block of the im2col matrix: output positions by (tap, channel)."""
    batch, height, width, in_ch = x_size
    kernel_h, kernel_w = w_size[0], w_size[1]
    out_h = (height + 2 * padding - kernel_h) // stride + 1
    out_w = (width + 2 * padding - kernel_w) // stride + 1
    image = tile_m.index // (out_h * out_w)
    oh = tile_m.index % (out_h * out_w) // out_w
    ow = tile_m.index % out_w
    i = tile_k.index // (kernel_w * in_ch)
    j = tile_k.index // in_ch % kernel_w
    c = tile_k.index % in_ch
    ih = oh[:, None] * stride + i[None, :] - padding
    iw = ow[:, None] * stride + j[None, :] - padding
    inside = (ih >= 0) & (ih < height) & (iw >= 0) & (iw < width)
    index = ((image[:, None] * height + ih) * width + iw) * in_ch + c[None, :]
    return tc.load(pixels, [index], extra_mask=inside)


@tc.kernel
def conv2d_nhwc_backward(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, stride: int, padding: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of `conv2d_nhwc_forward`'s input and weight, each an implicit GEMM.

    dX: input positions by in_ch, reducing over (tap, out_ch), the output gradient gathered
    at the output position each tap came from (none where the stride skips it).
    dW: (tap, in_ch) by out_ch, reducing over output positions: im2col transposed times
    the output gradient.
    """
    batch, height, width, in_ch = x.size()
    kernel_h, kernel_w, _, out_ch = weight.size()
    out_h, out_w = grad_out.size(1), grad_out.size(2)
    taps = kernel_h * kernel_w
    grad_x = torch.empty_like(x)
    grad_rows = grad_out.reshape(-1)
    grad_x_rows = grad_x.view(batch * height * width, in_ch)
    # [kh, kw, out_ch, in_ch] rows: the reduction index of dX in the order it is gathered
    filters_t = weight.permute(0, 1, 3, 2).reshape(taps * out_ch, in_ch)
    for tile_m, tile_n in tc.tile([batch * height * width, in_ch]):
        image = tile_m.index // (height * width)
        ih = tile_m.index % (height * width) // width
        iw = tile_m.index % width
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in tc.tile(taps * out_ch):
            i = tile_k.index // (kernel_w * out_ch)
            j = tile_k.index // out_ch % kernel_w
            co = tile_k.index % out_ch
            rise = ih[:, None] + padding - i[None, :]  # oh * stride for the tap, if any
            run = iw[:, None] + padding - j[None, :]
            oh, ow = rise // stride, run // stride
            hit = (rise >= 0) & (rise % stride == 0) & (oh < out_h)
            hit = hit & (run >= 0) & (run % stride == 0) & (ow < out_w)
            index = ((image[:, None] * out_h + oh) * out_w + ow) * out_ch + co[None, :]
            gathered = tc.load(grad_rows, [index], extra_mask=hit)
            acc = torch.addmm(acc, gathered, filters_t[tile_k, tile_n])
        grad_x_rows[tile_m, tile_n] = acc.to(grad_x.dtype)
    m, k = batch * out_h * out_w, taps * in_ch
    grad_w = torch.empty([k, out_ch], dtype=weight.dtype, device=weight.device)
    pixels = x.reshape(-1)
    grad_out_rows = grad_out.reshape(m, out_ch)
    for tile_k, tile_n in tc.tile([k, out_ch]):
        acc_w = tc.zeros([tile_k, tile_n], dtype=torch.float32)
        for tile_m in tc.tile(m):
            patch = _patch(pixels, tile_m, tile_k, x.size(), weight.size(), stride, padding)
            acc_w = torch.addmm(acc_w, patch.T, grad_out_rows[tile_m, tile_n])
        grad_w[tile_k, tile_n] = acc_w.to(grad_w.dtype)
    return grad_x, grad_w.view(weight.size())


# torch.ops.tilecraft_nn.conv2d_nhwc, differentiable in the input and the weight
conv2d_nhwc_op = conv2d_nhwc_forward.as_torch_op(
    "tilecraft_nn::conv2d_nhwc", backward=conv2d_nhwc_backward
)


def conv2d_nhwc(
    x: torch.Tensor, weight: torch.Tensor, stride: int = 1, padding: int = 0
) -> torch.Tensor:
    """2-D convolution of a channels-last image, differentiable in `x` and `weight`.

    `x` is `(batch, height, width, in_ch)`, `weight` `(kernel_h, kernel_w, in_ch, out_ch)`;
    the result `(batch, out_h, out_w, out_ch)` is
    `F.conv2d(x.permute(0, 3, 1, 2), weight.permute(3, 2, 0, 1), stride=stride,
    padding=padding).permute(0, 2, 3, 1)`.
    """
    if x.dim() != 4 or weight.dim() != 4 or weight.size(2) != x.size(3):
        raise ValueError(
            f"x must be (batch, height, width, in_ch) and weight (kernel_h, kernel_w, in_ch, "
            f"out_ch), got {tuple(x.shape)} and {tuple(weight.shape)}"
        )
    if stride < 1 or padding < 0:
        raise ValueError(f"stride must be >= 1 and padding >= 0, got {stride} and {padding}")
    for size, kernel in ((x.size(1), weight.size(0)), (x.size(2), weight.size(1))):
        if size + 2 * padding < kernel:
            raise ValueError(f"a {kernel}-tap filter is larger than the padded image ({size})")
    return conv2d_nhwc_op(x.contiguous(), weight.contiguous(), int(stride), int(padding))
