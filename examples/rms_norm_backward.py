"""The backward of RMS normalization, and rms_norm as a differentiable PyTorch operator."""

from __future__ import annotations

import rms_norm as forward  # a module, so the example tests only see this file's kernels
import torch

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def rms_norm_backward(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = x.size()
    grad_x = torch.empty_like(x)
    # per-row terms of the weight gradient, summed down the rows by the second loop (in
    # the kernel: two PyTorch ops on the host would cost an eager step more than a launch)
    grad_w_rows = torch.empty([m, n], dtype=torch.float32, device=x.device)
    grad_w = torch.empty_like(weight)
    for tile_m in tc.tile(m):
        row = x[tile_m, :].to(torch.float32)
        dy = grad_out[tile_m, :].to(torch.float32)
        inv_rms = torch.rsqrt(torch.mean(row * row, dim=-1) + eps)
        dy_w = dy * weight[:].to(torch.float32)
        proj = torch.mean(dy_w * row, dim=-1) * inv_rms * inv_rms
        grad_x[tile_m, :] = ((dy_w - row * proj[:, None]) * inv_rms[:, None]).to(grad_x.dtype)
        grad_w_rows[tile_m, :] = dy * row * inv_rms[:, None]
    for tile_n in tc.tile(n):
        grad_w[tile_n] = torch.sum(grad_w_rows[:, tile_n], dim=0).to(grad_w.dtype)
    return grad_x, grad_w


# rms_norm as a differentiable PyTorch operator: torch.ops.examples.rms_norm
rms_norm_op = forward.rms_norm.as_torch_op("examples::rms_norm", backward=rms_norm_backward)


def reference(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same gradients from PyTorch autograd, in float32."""
    x32 = x.detach().float().requires_grad_()
    w32 = weight.detach().float().requires_grad_()
    forward.reference(x32, w32, eps).backward(grad_out.detach().float())
    assert x32.grad is not None and w32.grad is not None
    return x32.grad.to(x.dtype), w32.grad.to(weight.dtype)


def inputs(shape=(129, 1000), dtype=torch.float32, device=None) -> tuple:
    device = device or default_device()
    x = torch.randn(shape, dtype=dtype, device=device)
    grad_out = torch.randn(shape, dtype=dtype, device=device)
    return grad_out, x, torch.randn(shape[1], dtype=dtype, device=device)


def main() -> None:
    args = inputs()
    assert_close(rms_norm_backward(*args), reference(*args))
    grad_out, x, weight = (a.detach().requires_grad_(a is not args[0]) for a in args)
    rms_norm_op(x, weight).backward(grad_out)
    assert_close((x.grad, weight.grad), reference(*args))
    print("rms_norm_backward: ok")


if __name__ == "__main__":
    main()
