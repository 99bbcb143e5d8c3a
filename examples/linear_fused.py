"""A matrix product with its neighbours fused in: a ReLU on the left operand, a residual add
and a ReLU-style gate in the epilogue; and the same kernel as a differentiable operator.

`linear_fused(x, w, residual, gate, relu_x)` is `(relu(x) if relu_x else x) @ w`, plus
`residual` where one is given, zeroed where `gate <= 0` where a gate is given. An empty
tensor (`torch.empty(0)`) means "not given": its size is known when the kernel is
specialized, so an absent residual or gate costs nothing on the device. One kernel then
serves a layer's forward (`relu(up) @ down + h`) and both halves of its backward: the
input gradient `(g @ w.T) * (x > 0)` gates by `x`, the weight gradient `relu(x).T @ g`
applies the ReLU to its left operand, so no step runs a separate elementwise op.
"""

from __future__ import annotations

from typing import Any

import torch

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def linear_fused(
    x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor, gate: torch.Tensor, relu_x: bool
) -> torch.Tensor:
    m, k = x.size()
    k2, n = w.size()
    assert k == k2, f"size mismatch {k} != {k2}"
    has_residual, has_gate = residual.numel() > 0, gate.numel() > 0
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in tc.tile([m, n]):
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in tc.tile(k):
            a = x[tile_m, tile_k]
            if relu_x:
                a = torch.relu(a)
            acc = torch.addmm(acc, a, w[tile_k, tile_n])
        if has_residual:
            acc = acc + residual[tile_m, tile_n].to(torch.float32)
        if has_gate:
            acc = torch.where(gate[tile_m, tile_n] > 0, acc, 0.0)
        out[tile_m, tile_n] = acc.to(out.dtype)
    return out


def reference(
    x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor, gate: torch.Tensor, relu_x: bool
) -> torch.Tensor:
    out = torch.matmul(torch.relu(x.float()) if relu_x else x.float(), w.float())
    if residual.numel() > 0:
        out = out + residual.float()
    if gate.numel() > 0:
        out = torch.where(gate > 0, out, 0.0)
    return out.to(x.dtype)


def inputs(shape=(100, 200, 70), dtype=torch.float32, device=None) -> tuple:
    """`x` of (m, k) and `w` of (k, n), a residual and a gate of (m, n), the ReLU on `x`."""
    device = device or default_device()
    m, k, n = shape if len(shape) == 3 else (*shape, shape[0])
    return (
        torch.randn(m, k, dtype=dtype, device=device) / k**0.5,
        torch.randn(k, n, dtype=dtype, device=device),
        torch.randn(m, n, dtype=dtype, device=device),
        torch.randn(m, n, dtype=dtype, device=device),
        True,
    )


def absent(like: torch.Tensor) -> torch.Tensor:
    """The empty tensor that stands for an argument not given."""
    return like.new_empty(0)


def _save(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    x, w, residual, _, relu_x = inputs
    ctx.save_for_backward(x, w)
    ctx.relu_x, ctx.has_residual = relu_x, residual.numel() > 0


def _backward(ctx: Any, grad: torch.Tensor) -> tuple:
    x, w = ctx.saved_tensors
    none = absent(grad)
    # the kernel reads strided views, so the transposes need no copies; the ReLU's
    # gradient is the gate `x > 0` on the input gradient, and relu(x) feeds the weight's
    grad_x = linear_fused_op(grad, w.t(), none, x if ctx.relu_x else none, False)
    grad_w = linear_fused_op(x.t(), grad, none, none, ctx.relu_x)
    return grad_x, grad_w, grad if ctx.has_residual else None, None, None


# linear_fused as a differentiable PyTorch operator: torch.ops.examples.linear_fused
linear_fused_op = linear_fused.as_torch_op(
    "examples::linear_fused", backward=_backward, setup_context=_save
)


def main() -> None:
    args = inputs()
    assert_close(linear_fused(*args), reference(*args))
    x, w, residual = (a.detach().requires_grad_() for a in args[:3])
    grad = torch.randn_like(residual)
    linear_fused_op(x, w, residual, absent(x), True).backward(grad)
    x32, w32 = (a.detach().float().requires_grad_() for a in (x, w))
    (torch.relu(x32) @ w32 + residual.detach().float()).backward(grad.float())
    assert_close((x.grad, w.grad, residual.grad), (x32.grad, w32.grad, grad))
    print("linear_fused: ok")


if __name__ == "__main__":
    main()
