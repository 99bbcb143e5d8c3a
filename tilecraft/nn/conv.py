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
