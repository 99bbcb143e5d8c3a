"""`tilecraft.nn.conv2d`: `torch.nn.functional.conv2d` with a fused epilogue, differentiable.

The forward picks one of five kernels: a direct stencil for depthwise filters (groups ==
in channels == out channels; over positions by channels for channels-last images,
`conv2d_depthwise`, which can also stream down rows at stride 1; over planes for NCHW
ones, `conv2d_kernels`), a plain GEMM for 1x1 filters (stride 1, no padding, one group:
over pixels by channels for channels-last images, `conv2d_kernels`, and `W @ x[n]` over
each NCHW image's planes, `conv2d_planes`), and an implicit GEMM for everything else.
The backward (`conv2d_backward`, `conv2d_planes`) takes the activation's gradient, then
the input and weight gradients (implicit GEMMs, plain GEMMs over NCHW planes for the 1x1
filters that run over them, or stencils for depthwise filters); the bias gradient is a sum
of the pre-activation gradient and the residual's is that gradient itself.

All forward kernels are PyTorch operators (`torch.ops.tilecraft_nn.conv2d_gemm`,
`conv2d_pointwise`, `conv2d_pointwise_planes`, `conv2d_depthwise`,
`conv2d_depthwise_planes`) sharing one signature and one autograd formula, and so are the
backward kernels, so `torch.compile` traces both passes.
"""

from __future__ import annotations

from typing import Any

import torch

from tilecraft.exc import UnsupportedOperation
from tilecraft.nn import conv2d_backward as bwd
from tilecraft.nn import conv2d_depthwise as depthwise
from tilecraft.nn import conv2d_kernels as fwd
from tilecraft.nn import conv2d_planes as planes

Pair = int | tuple[int, int]
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _pair(value: Pair, name: str) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) for v in pair):
        raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}")
    return int(pair[0]), int(pair[1])


def _padding(
    padding: Pair | str, kernel: tuple[int, int], stride: tuple[int, int], dilation: Any
) -> tuple[tuple[int, int], tuple[int, int]]:
    """(top, left) padding and the extra (bottom, right) padding 'same' may add."""
    if padding == "valid":
        return (0, 0), (0, 0)
    if padding == "same":
        if stride != (1, 1):
            raise ValueError("padding='same' is not supported for strided convolutions")
        total = [d * (k - 1) for d, k in zip(dilation, kernel, strict=True)]
        before = (total[0] // 2, total[1] // 2)
        return before, (total[0] - 2 * before[0], total[1] - 2 * before[1])
    if isinstance(padding, str):
        raise ValueError(f"padding must be 'valid', 'same', an int or a pair, not {padding!r}")
    return _pair(padding, "padding"), (0, 0)


def _out_size(size: int, kernel: int, stride: int, pad: int, extra: int, dil: int) -> int:
    return (size + 2 * pad + extra - dil * (kernel - 1) - 1) // stride + 1


def _check(x: torch.Tensor, weight: torch.Tensor, groups: int) -> None:
    if x.dim() != 4 or weight.dim() != 4:
        raise ValueError(
            f"conv2d takes x (batch, in_ch, height, width) and weight (out_ch, in_ch / groups, "
            f"kernel_h, kernel_w), got {tuple(x.shape)} and {tuple(weight.shape)}"
        )
    if groups < 1 or x.size(1) % groups or weight.size(0) % groups:
        raise ValueError(
            f"groups={groups} must divide the {x.size(1)} input and {weight.size(0)} output "
            "channels"
        )
    if weight.size(1) * groups != x.size(1):
        raise ValueError(
            f"weight {tuple(weight.shape)} expects {weight.size(1) * groups} input channels "
            f"with groups={groups}, but x has {x.size(1)}"
        )
    if not x.is_floating_point() or x.dtype != weight.dtype:
        raise ValueError(f"x and weight must share a float dtype, got {x.dtype}, {weight.dtype}")
    if x.dtype not in DTYPES:
        raise UnsupportedOperation(
            f"tilecraft.nn.conv2d computes float16, bfloat16 and float32 (sums in float32), "
            f"not {x.dtype}; use F.conv2d for it"
        )


def _layout(x: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """x and whether it is channels-last; other layouts are copied to NCHW (the one copy)."""
    if x.is_contiguous():
        return x, False
    if x.is_contiguous(memory_format=torch.channels_last):
        return x, True
    return x.contiguous(), False


def _kernel_op(
    x: torch.Tensor, weight: torch.Tensor, groups: int, geometry: tuple, channels_last: bool
) -> Any:
    """The forward operator for this filter: depthwise (by positions and channels, or by
    planes for NCHW images), 1x1 or the general implicit GEMM."""
    if is_depthwise(x, weight, groups):
        return conv2d_depthwise_op if channels_last else conv2d_depthwise_planes_op
    if is_pointwise(weight, groups, geometry[:4]):
        return conv2d_pointwise_op if channels_last else conv2d_pointwise_planes_op
    return conv2d_gemm_op


def is_pointwise(weight: torch.Tensor, groups: int, strides_pads: tuple) -> bool:
    """A 1x1 filter, one group, stride 1, no padding (dilation does not matter): a plain
    GEMM, over pixels by channels for channels-last images, per plane for NCHW ones."""
    return weight.shape[2:] == (1, 1) and groups == 1 and tuple(strides_pads) == (1, 1, 0, 0)


def is_depthwise(x: torch.Tensor, weight: torch.Tensor, groups: int) -> bool:
    """One filter per channel: the stencil kernels' case."""
    return groups == x.size(1) == weight.size(0) and weight.size(1) == 1


def conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: Pair = 1,
    padding: Pair | str = 0,
    dilation: Pair = 1,
    groups: int = 1,
    activation: str | None = None,
    residual: torch.Tensor | None = None,
) -> torch.Tensor:
    """`activation(F.conv2d(x, weight, bias, stride, padding, dilation, groups) + residual)`,
    computed by tilecraft kernels and differentiable in x, weight, bias and residual.

    `x` is `(batch, in_ch, height, width)` (or unbatched `(in_ch, height, width)`) in NCHW or
    channels-last memory; the result has x's memory format. Other memory layouts are
    copied to NCHW first. `activation` is None, "relu", "silu" or "gelu" (exact, erf);
    `residual` (the output's shape, any layout) is added before it, as a ResNet block adds
    its shortcut before the final ReLU. Sums are float32 in every dtype.

    Example::

        y = tilecraft.nn.conv2d(x, w, b, padding=1, activation="relu", residual=shortcut)
    """
    if x.dim() == 3:
        kept = conv2d(x[None], weight, bias, stride, padding, dilation, groups, activation,
                      None if residual is None else residual[None])  # fmt: skip
        return kept[0]
    op, args = plan(x, weight, bias, stride, padding, dilation, groups, activation, residual)
    out, _ = op(*args)
    return out


def plan(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: Pair = 1,
    padding: Pair | str = 0,
    dilation: Pair = 1,
    groups: int = 1,
    activation: str | None = None,
    residual: torch.Tensor | None = None,
) -> tuple[Any, tuple]:
    """The operator `conv2d` calls for these arguments (a `TorchOp`; `op.kernel` is its
    tilecraft kernel) and the arguments it passes, checked: for tuning or inspecting the
    kernel, e.g. `op.kernel.autotune(args)`. Takes `conv2d`'s arguments (batched x)."""
    _check(x, weight, groups)
    if activation not in fwd.ACTIVATIONS:
        raise ValueError(f"activation must be one of None, 'relu', 'silu', 'gelu': {activation!r}")
    geometry = _geometry(x, weight, stride, padding, dilation, groups)
    x, channels_last = _layout(x)
    out_shape = (x.size(0), weight.size(0), *geometry[7:9])
    bias_t = _optional(bias, (weight.size(0),), x, "bias")
    residual_t = _optional(residual, out_shape, x, "residual")
    flags = (fwd.ACTIVATIONS[activation], bias is not None, residual is not None, channels_last)
    op = _kernel_op(x, weight, groups, geometry, channels_last)
    # channels-last filters: the implicit GEMMs read them as [kh, kw, in_ch, out_ch] views
    # with consecutive channels (a copy only for a weight in another layout)
    weight = weight.contiguous(memory_format=torch.channels_last)
    return op, (x, weight, bias_t, residual_t, *geometry, *flags)


def _geometry(
    x: torch.Tensor, weight: torch.Tensor, stride: Pair, padding: Pair | str, dilation: Pair,
    groups: int,
) -> tuple[int, ...]:  # fmt: skip
    """(stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups, out_h, out_w), checked."""
    strides, dilations = _pair(stride, "stride"), _pair(dilation, "dilation")
    if min(strides) < 1 or min(dilations) < 1:
        raise ValueError(f"stride and dilation must be >= 1, got {stride} and {dilation}")
    kernel = (weight.size(2), weight.size(3))
    pads, extra = _padding(padding, kernel, strides, dilations)
    if min(pads) < 0:
        raise ValueError(f"padding must be >= 0, got {padding}")
    sizes = zip(x.shape[2:], kernel, strides, pads, extra, dilations, strict=True)
    out_h, out_w = (_out_size(*s) for s in sizes)
    if out_h < 1 or out_w < 1:
        raise ValueError(
            f"the {kernel[0]}x{kernel[1]} filter (dilation {dilations}) is larger than the "
            f"padded image {tuple(x.shape[2:])}"
        )
    return (*strides, *pads, *dilations, groups, out_h, out_w)


def _optional(
    value: torch.Tensor | None, shape: tuple[int, ...], x: torch.Tensor, name: str
) -> torch.Tensor:
    """An optional tensor argument checked against its shape, or an empty stand-in."""
    if value is None:
        return x.new_empty(0)
    if tuple(value.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(value.shape)}")
    if value.dtype != x.dtype:
        raise ValueError(f"{name} must be {x.dtype} like x, got {value.dtype}")
    return value


# -- autograd ------------------------------------------------------------------------------
def _setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
    x, weight, _, _, *geometry = inputs
    out, pre = output
    act = geometry[9]
    saved = pre if fwd.saves_pre(act) else out if act == fwd.RELU else pre
    ctx.save_for_backward(x, weight, saved)
    ctx.geometry = tuple(geometry)
    ctx.mark_non_differentiable(pre)


def _flat(t: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """The memory of a 4-D tensor of this layout as a flat view."""
    return (t.permute(0, 2, 3, 1) if channels_last else t).reshape(-1)


def _unflat(flat: torch.Tensor, like: torch.Tensor, channels_last: bool) -> torch.Tensor:
    n, c, h, w = like.shape
    if channels_last:
        return flat.view(n, h, w, c).permute(0, 3, 1, 2)
    return flat.view(n, c, h, w)


def _pre_activation_grad(grad: torch.Tensor, saved: torch.Tensor, act: int, cl: bool) -> Any:
    """The output gradient through the activation's derivative (the same without one)."""
    if act == fwd.NONE:
        return grad
    fmt = torch.channels_last if cl else torch.contiguous_format
    grad = grad.contiguous(memory_format=fmt)  # a copy only if it came in the other layout
    flat = activation_backward_op(_flat(grad, cl), _flat(saved, cl), act)
    return _unflat(flat, grad, cl)


def _backward(ctx: Any, grad_out: torch.Tensor, _grad_pre: Any) -> tuple:
    x, weight, saved = ctx.saved_tensors
    geometry: tuple = ctx.geometry
    groups: int = geometry[6]
    act, has_bias, has_residual, cl = geometry[9:]
    grad = _pre_activation_grad(grad_out, saved, act, cl)
    needs = ctx.needs_input_grad
    if (
        not cl
        and not is_depthwise(x, weight, groups)
        and is_pointwise(weight, groups, geometry[:4])
    ):
        grad_x, grad_w = _pointwise_planes_grads(grad, x, weight, needs)
    else:
        grad_x, grad_w = _stencil_or_gemm_grads(grad, x, weight, geometry, needs)
    grad_b = None
    if has_bias and needs[2]:
        grad_b = grad.sum((0, 2, 3), dtype=torch.float32).to(x.dtype)
    grad_r = grad if has_residual and needs[3] else None
    return (grad_x, grad_w, grad_b, grad_r) + (None,) * len(geometry)


def _pointwise_planes_grads(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, needs: tuple
) -> tuple[Any, Any]:
    """The input and weight gradients of an NCHW 1x1 convolution: plain GEMMs over planes."""
    grad = grad.contiguous()  # NCHW planes (a copy only if it came channels-last)
    grad_x = pointwise_planes_input_grad_op(grad, weight, x) if needs[0] else None
    grad_w = pointwise_planes_weight_grad_op(grad, x, weight) if needs[1] else None
    return grad_x, grad_w


def _stencil_or_gemm_grads(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, geometry: tuple, needs: tuple
) -> tuple[Any, Any]:
    """The input and weight gradients: stencils for depthwise filters, else implicit GEMMs."""
    shape, groups, cl = geometry[:6], geometry[6], geometry[12]
    depthwise = is_depthwise(x, weight, groups)
    grad_x = grad_w = None
    if needs[0] and depthwise:
        grad_x = depthwise_input_grad_op(grad, weight, x, *shape, cl)
    elif needs[0]:
        grad_x = conv2d_input_grad_op(grad, weight, x, *shape, groups, cl)
    if needs[1] and depthwise:
        grad_w = depthwise_weight_grad_op(grad, x, weight, *shape)
    elif needs[1]:
        grad_w = conv2d_weight_grad_op(grad, x, weight, *shape, groups)
    return grad_x, grad_w


def _forward_op(kernel: Any, name: str) -> Any:
    return kernel.as_torch_op(name, backward=_backward, setup_context=_setup_context)


conv2d_gemm_op = _forward_op(fwd.conv2d_gemm, "tilecraft_nn::conv2d_gemm")
conv2d_pointwise_op = _forward_op(fwd.conv2d_pointwise, "tilecraft_nn::conv2d_pointwise")
conv2d_pointwise_planes_op = _forward_op(
    planes.conv2d_pointwise_planes, "tilecraft_nn::conv2d_pointwise_planes"
)
conv2d_depthwise_op = _forward_op(depthwise.conv2d_depthwise, "tilecraft_nn::conv2d_depthwise")
conv2d_depthwise_planes_op = _forward_op(
    fwd.conv2d_depthwise_planes, "tilecraft_nn::conv2d_depthwise_planes"
)
activation_backward_op = bwd.activation_backward.as_torch_op("tilecraft_nn::activation_backward")
conv2d_input_grad_op = bwd.conv2d_input_grad.as_torch_op("tilecraft_nn::conv2d_input_grad")
conv2d_weight_grad_op = bwd.conv2d_weight_grad.as_torch_op("tilecraft_nn::conv2d_weight_grad")
depthwise_input_grad_op = bwd.depthwise_input_grad.as_torch_op("tilecraft_nn::depthwise_input_grad")
depthwise_weight_grad_op = bwd.depthwise_weight_grad.as_torch_op(
    "tilecraft_nn::depthwise_weight_grad"
)
pointwise_planes_input_grad_op = planes.pointwise_planes_input_grad.as_torch_op(
    "tilecraft_nn::pointwise_planes_input_grad"
)
pointwise_planes_weight_grad_op = planes.pointwise_planes_weight_grad.as_torch_op(
    "tilecraft_nn::pointwise_planes_weight_grad"
)
