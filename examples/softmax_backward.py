"""The backward of row softmax, and softmax as a differentiable PyTorch operator.

The softmax is recomputed from the input rather than saved: dx = y * (dy - sum(dy * y))."""

from __future__ import annotations

import softmax as forward  # a module, so the example tests only see this file's kernels
import torch

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def softmax_backward(grad_out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    grad_x = torch.empty_like(x)
    for tile_m in tc.tile(m):
        row = x[tile_m, :].to(torch.float32)
        dy = grad_out[tile_m, :].to(torch.float32)
        numerator = torch.exp(row - torch.amax(row, dim=1, keepdim=True))
        y = numerator / numerator.sum(dim=1, keepdim=True)
        dot = torch.sum(dy * y, dim=1, keepdim=True)
        grad_x[tile_m, :] = (y * (dy - dot)).to(grad_x.dtype)
    return grad_x


# softmax as a differentiable PyTorch operator: torch.ops.examples.softmax
softmax_op = forward.softmax.as_torch_op("examples::softmax", backward=softmax_backward)


def reference(grad_out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The same gradient from PyTorch autograd, in float32."""
    x32 = x.detach().float().requires_grad_()
    forward.reference(x32).backward(grad_out.detach().float())
    assert x32.grad is not None
    return x32.grad.to(x.dtype)


def inputs(shape=(123, 1000), dtype=torch.float32, device=None) -> tuple:
    device = device or default_device()
    x = torch.randn(shape, dtype=dtype, device=device)
    return torch.randn(shape, dtype=dtype, device=device), x


def main() -> None:
    args = inputs()
    assert_close(softmax_backward(*args), reference(*args))
    grad_out, x = args[0], args[1].detach().requires_grad_()
    softmax_op(x).backward(grad_out)
    assert_close(x.grad, reference(*args))
    print("softmax_backward: ok")


if __name__ == "__main__":
    main()
