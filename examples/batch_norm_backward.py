"""The backward of `batch_norm.py`'s fused batch norm, and the fused op as a differentiable
PyTorch operator (`torch.ops.examples.batch_norm`).

With `xhat = (x - mean) * rstd` and `g` the gradient before the ReLU (0 where the output
is not positive), a channel's gradients are `dbias = sum(g)`, `dweight = sum(g * xhat)` and
`dx = weight * rstd * (g - (dbias + xhat * dweight) / rows)`; the residual's is `g`. One
program per block of channels takes the two sums in one pass down the rows and writes dx
(and g) in a second.
"""

from __future__ import annotations

from typing import Any

import batch_norm as forward  # a module, so the example tests only see this file's kernel
import torch

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def batch_norm_backward(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    out: torch.Tensor,
    relu: bool = False,
    has_residual: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """dx, dweight, dbias and the residual's gradient (empty without a residual)."""
    rows, channels = x.size()
    grad_x = torch.empty_like(x)
    grad_w = torch.empty([channels], dtype=torch.float32, device=x.device)
    grad_b = torch.empty_like(grad_w)
    grad_res = torch.empty_like(x) if has_residual else x.new_empty(0)
    for tile_c in tc.tile(channels):
        mu = mean[tile_c]
        inv = rstd[tile_c]
        sum_g = tc.zeros([tile_c], dtype=torch.float32)
        sum_gx = tc.zeros([tile_c], dtype=torch.float32)
        for tile_r in tc.tile(rows):  # rows past the end read g = 0: they add nothing
            g = _grad_before_relu(grad_out, out, tile_r, tile_c, relu)
            xhat = (x[tile_r, tile_c].to(torch.float32) - mu[None, :]) * inv[None, :]
            sum_g = sum_g + torch.sum(g, 0)
            sum_gx = sum_gx + torch.sum(g * xhat, 0)
        grad_w[tile_c] = sum_gx
        grad_b[tile_c] = sum_g
        scale = weight[tile_c].to(torch.float32) * inv
        for tile_r in tc.tile(rows):
            g = _grad_before_relu(grad_out, out, tile_r, tile_c, relu)
            xhat = (x[tile_r, tile_c].to(torch.float32) - mu[None, :]) * inv[None, :]
            dx = scale[None, :] * (g - (sum_g[None, :] + xhat * sum_gx[None, :]) / rows)
            grad_x[tile_r, tile_c] = dx.to(grad_x.dtype)
            if has_residual:
                grad_res[tile_r, tile_c] = g.to(grad_res.dtype)
    return grad_x, grad_w.to(weight.dtype), grad_b.to(weight.dtype), grad_res


def _grad_before_relu(
    grad_out: torch.Tensor, out: torch.Tensor, tile_r: Any, tile_c: Any, relu: bool
) -> torch.Tensor:
    """The output gradient through the ReLU (PyTorch's rule: 0 where the output is <= 0)."""
    g = grad_out[tile_r, tile_c].to(torch.float32)
    if relu:
        g = torch.where(out[tile_r, tile_c] <= 0, 0.0, g)
    return g


def _setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
    x, weight, _, _, _, relu, has_residual = inputs
    out, mean, rstd = output
    ctx.save_for_backward(x, weight, mean, rstd, out)
    ctx.flags = (relu, has_residual)
    ctx.mark_non_differentiable(mean, rstd)


def _backward(ctx: Any, grad_out: torch.Tensor, *_stats: Any) -> tuple:
    x, weight, mean, rstd, out = ctx.saved_tensors
    relu, has_residual = ctx.flags
    grads = batch_norm_backward(grad_out.contiguous(), x, weight, mean, rstd, out, *ctx.flags)
    grad_x, grad_w, grad_b, grad_res = grads
    return grad_x, grad_w, grad_b, grad_res if has_residual else None, None, None, None


# relu(batch_norm(x) + residual) as a differentiable PyTorch operator
batch_norm_op = forward.batch_norm.as_torch_op(
    "examples::batch_norm", backward=_backward, setup_context=_setup_context
)


def reference(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    out: torch.Tensor,
    relu: bool = False,
    has_residual: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The same gradients from PyTorch autograd, in float32 (eps as `inputs` uses it)."""
    g = grad_out.float()
    if relu:
        g = torch.where(out <= 0, 0.0, g)
    x32 = x.detach().float().requires_grad_()
    w32 = weight.detach().float().requires_grad_()
    normed = (x32 - x32.mean(0)) * torch.rsqrt(x32.var(0, unbiased=False) + 1e-5)
    (normed * w32).backward(g)
    assert x32.grad is not None and w32.grad is not None
    grad_res = g.to(x.dtype) if has_residual else x.new_empty(0)
    return x32.grad.to(x.dtype), w32.grad.to(x.dtype), g.sum(0).to(x.dtype), grad_res


def inputs(shape=(1000, 64), dtype=torch.float32, device=None) -> tuple:
    """The backward's arguments for `batch_norm.py`'s inputs, from its forward."""
    x, weight, bias, residual, eps, relu, has_residual = forward.inputs(shape, dtype, device)
    out, mean, rstd = forward.reference(x, weight, bias, residual, eps, relu, has_residual)
    grad_out = torch.randn_like(x)
    return grad_out, x, weight, mean, rstd, out, relu, has_residual


def main() -> None:
    args = inputs()
    assert_close(batch_norm_backward(*args), reference(*args))
    x, weight, bias, residual = (
        t.detach().requires_grad_() for t in forward.inputs(device=default_device())[:4]
    )
    out, _, _ = batch_norm_op(x, weight, bias, residual, 1e-5, True, True)
    out.sum().backward()
    assert x.grad is not None and residual.grad is not None
    assert torch.equal(residual.grad, (out > 0).to(out.dtype))
    print("batch_norm_backward: ok")


if __name__ == "__main__":
    main()
