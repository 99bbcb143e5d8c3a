"""Arguments of the `tilecraft.nn` kernels at chosen shapes, for recording and replaying
tuning landscapes (`tilecraft.autotune.landscape.Case` with `example="tilecraft.nn.cases"`).

Each `<kernel>_inputs` builds exactly the arguments the public function (`attention`,
`conv2d`) passes its kernel, so a landscape's tuning key is the one a user's call has: the
trials recorded for it warm-start that call's tuning, and the cost model learns from them.

Example::

    case = Case("tilecraft.nn.cases", "conv2d_gemm", (32, 256, 14, 256, 3, 1))
    kernel, bound, args = case.bind("meta")
"""

from __future__ import annotations

import math
from typing import Any

import torch

from tilecraft.nn.attention import attention_backward, attention_forward
from tilecraft.nn.conv2d import plan
from tilecraft.nn.conv2d_depthwise import conv2d_depthwise
from tilecraft.nn.conv2d_kernels import conv2d_gemm, conv2d_pointwise
from tilecraft.runtime.cpu import cpu_mode, runs_on_cpu

__all__ = [
    "attention_backward",
    "attention_backward_inputs",
    "attention_forward",
    "attention_forward_inputs",
    "conv2d_depthwise",
    "conv2d_depthwise_inputs",
    "conv2d_gemm",
    "conv2d_gemm_inputs",
    "conv2d_pointwise",
    "conv2d_pointwise_inputs",
]


def attention_forward_inputs(
    shape: tuple[int, ...],
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device | None = None,
    causal: bool = False,
) -> tuple:
    """`attention_forward`'s arguments for `(batch, heads, sequence, head_dim)` (self
    attention, no bias, no window), as `tilecraft.nn.attention` passes them."""
    batch, heads, seq, head_dim = shape
    q, k, v = (
        torch.randn(batch, heads, seq, head_dim, dtype=dtype, device=device) for _ in range(3)
    )
    return q, k, v, q.new_empty(0), causal, 1.0 / math.sqrt(head_dim), 0, False


def attention_backward_inputs(
    shape: tuple[int, ...],
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device | None = None,
    causal: bool = False,
) -> tuple:
    """`attention_backward`'s arguments for `(batch, heads, sequence, head_dim)`, as
    `tilecraft.nn.attention`'s backward passes them: the output gradient, the forward's
    inputs, and its output (heads side by side in memory) and row statistics, computed by
    the forward (on "meta", only their shapes and layouts)."""
    q, k, v, bias, *flags = attention_forward_inputs(shape, dtype, device, causal)
    forward = (q, k, v, bias, *flags)
    batch, heads, seq, head_dim = shape
    if q.device.type == "meta":
        out = q.new_empty(batch, seq, heads, head_dim).transpose(1, 2)
        stats = q.new_empty(2, batch, heads, seq, dtype=torch.float32)
    elif runs_on_cpu(forward) and cpu_mode() == "eager":  # CPU tensors beside a GPU
        out, stats = attention_forward.run_eagerly(forward)
    else:  # the forward's default config: no tuning run for inputs
        out, stats = attention_forward.bind(forward).compile()(*forward)
    # the gradient laid out as the output (a model's `out.transpose(1, 2)` hands it so)
    return (torch.randn_like(out), q, k, v, bias, out, stats, *flags)


def conv_inputs(
    shape: tuple[int, ...],
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device | None = None,
) -> tuple[Any, tuple]:
    """`conv2d`'s kernel and arguments for `(batch, in_ch, size, out_ch, kernel, stride)`,
    with `groups` as a seventh entry if not 1: channels-last square images, `kernel // 2`
    padding, no bias, activation or residual (a ResNet-50 or MobileNetV2 convolution,
    followed by a batch norm)."""
    batch, in_ch, size, out_ch, kernel, stride, *rest = shape
    groups = rest[0] if rest else 1
    x = torch.randn(batch, in_ch, size, size, dtype=dtype, device=device)
    w = torch.randn(out_ch, in_ch // groups, kernel, kernel, dtype=dtype, device=device)
    x = x.contiguous(memory_format=torch.channels_last)
    w = w.mul(1.0 / math.sqrt(in_ch // groups * kernel * kernel))  # outputs of unit scale
    op, args = plan(x, w, stride=stride, padding=kernel // 2, groups=groups)
    return op.kernel, args


def _conv_for(function: str, shape: tuple[int, ...], dtype: torch.dtype, device: Any) -> tuple:
    kernel, args = conv_inputs(shape, dtype, device)
    if kernel.__name__ != function:
        raise ValueError(f"conv2d runs {kernel.__name__} for {shape}, not {function}")
    return args


def conv2d_gemm_inputs(
    shape: tuple[int, ...],
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device | None = None,
) -> tuple:
    """`conv2d_gemm`'s arguments (see `conv_inputs`); a shape conv2d runs another kernel
    for (a 1x1 filter of stride 1) is an error."""
    return _conv_for("conv2d_gemm", shape, dtype, device)


def conv2d_pointwise_inputs(
    shape: tuple[int, ...],
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device | None = None,
) -> tuple:
    """`conv2d_pointwise`'s arguments: `shape` as `conv_inputs` takes it, a 1x1 filter of
    stride 1."""
    return _conv_for("conv2d_pointwise", shape, dtype, device)


def conv2d_depthwise_inputs(
    shape: tuple[int, ...],
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device | None = None,
) -> tuple:
    """`conv2d_depthwise`'s arguments: `shape` as `conv_inputs` takes it, with groups equal
    to the channels, e.g. `(32, 144, 56, 144, 3, 1, 144)`."""
    return _conv_for("conv2d_depthwise", shape, dtype, device)
