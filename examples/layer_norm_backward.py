"""The backward of layer normalization, and layer_norm as a differentiable PyTorch operator."""

from __future__ import annotations

import layer_norm as forward  # a module, so the example tests only see this file's kernels
import torch

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def layer_norm_backward(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    m, n = x.size()
    grad_x = torch.empty_like(x)
    # per-row terms of the weight and bias gradients, summed over rows on the host
    grad_w_rows = torch.empty([m, n], dtype=torch.float32, device=x.device)
    grad_b_rows = torch.empty([m, n], dtype=torch.float32, device=x.device)
    for tile_m in tc.tile(m):
        row = x[tile_m, :].to(torch.float32)
        dy = grad_out[tile_m, :].to(torch.float32)
        mean = torch.mean(row, dim=-1, keepdim=True)
        var = torch.var(row, dim=-1, keepdim=True, unbiased=False)
        rstd = torch.rsqrt(var + eps)
        normed = (row - mean) * rstd
        dy_w = dy * weight[:].to(torch.float32)
        mean_dy_w = torch.mean(dy_w, dim=-1, keepdim=True)
        mean_dy_w_normed = torch.mean(dy_w * normed, dim=-1, keepdim=True)
        grad_x[tile_m, :] = ((dy_w - mean_dy_w - normed * mean_dy_w_normed) * rstd).to(grad_x.dtype)
        grad_w_rows[tile_m, :] = dy * normed
        grad_b_rows[tile_m, :] = dy
    return grad_x, grad_w_rows.sum(0).to(weight.dtype), grad_b_rows.sum(0).to(bias.dtype)


# layer_norm as a differentiable PyTorch operator: torch.ops.examples.layer_norm
layer_norm_op = forward.layer_norm.as_torch_op("examples::layer_norm", backward=layer_norm_backward)


def reference(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The same gradients from PyTorch autograd, in float32."""
    x32, w32, b32 = (t.detach().float().requires_grad_() for t in (x, weight, bias))
    forward.reference(x32, w32, b32, eps).backward(grad_out.detach().float())
    assert x32.grad is not None and w32.grad is not None and b32.grad is not None
    return x32.grad.to(x.dtype), w32.grad.to(weight.dtype), b32.grad.to(bias.dtype)


def inputs(shape=(97, 768), dtype=torch.float32, device=None) -> tuple:
    device = device or default_device()
    x = torch.randn(shape, dtype=dtype, device=device)
    grad_out = torch.randn(shape, dtype=dtype, device=device)
    weight = torch.randn(shape[1], dtype=dtype, device=device)
    return grad_out, x, weight, torch.randn(shape[1], dtype=dtype, device=device)


def main() -> None:
    args = inputs()
    assert_close(layer_norm_backward(*args), reference(*args))
    grad_out, x, weight, bias = (a.detach().requires_grad_(a is not args[0]) for a in args)
    layer_norm_op(x, weight, bias).backward(grad_out)
    assert_close((x.grad, weight.grad, bias.grad), reference(*args))
    print("layer_norm_backward: ok")


if __name__ == "__main__":
    main()
