"""The backward of mean cross-entropy, and cross_entropy as a differentiable PyTorch operator.

The gradient of each row is `(softmax(row) - onehot(label)) * grad / n`: one pass over the
row for its log-sum-exp, one to write the gradient."""

from __future__ import annotations

from typing import Any

import cross_entropy as forward  # a module, so the example tests only see this file's kernels
import torch

import tilecraft as tc
from tilecraft.testing import assert_close, default_device


@tc.kernel
def cross_entropy_backward(
    grad_out: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    n, v = logits.size()
    grad_logits = torch.empty_like(logits)
    grad = grad_out.reshape(1)  # the loss's gradient, read in the kernel (a view, no copy)
    for tile_n in tc.tile(n):
        scale = grad[0].to(torch.float32) / n  # d mean / d loss of a row
        target = labels[tile_n]
        row_max = tc.full([tile_n], float("-inf"), dtype=torch.float32)
        row_sum = tc.zeros([tile_n], dtype=torch.float32)
        for tile_v in tc.tile(v):
            values = logits[tile_n, tile_v].to(torch.float32)
            new_max = torch.maximum(row_max, torch.amax(values, dim=1))
            row_sum = row_sum * torch.exp(row_max - new_max) + torch.exp(
                values - new_max[:, None]
            ).sum(dim=1)
            row_max = new_max
        lse = row_max + torch.log(row_sum)
        for tile_v in tc.tile(v):
            values = logits[tile_n, tile_v].to(torch.float32)
            probs = torch.exp(values - lse[:, None])
            is_target = tile_v.index[None, :] == target[:, None]
            row_grad = torch.where(is_target, probs - 1.0, probs) * scale
            grad_logits[tile_n, tile_v] = row_grad.to(grad_logits.dtype)
    return grad_logits


def _save_inputs(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    ctx.save_for_backward(*inputs)


# The backward kernel as an operator too, so torch.compile can trace a training step.
cross_entropy_backward_op = cross_entropy_backward.as_torch_op("examples::cross_entropy_backward")


def _backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, None]:
    logits, labels = ctx.saved_tensors
    return cross_entropy_backward_op(grad_out, logits, labels), None  # labels: no gradient


# cross_entropy as a differentiable PyTorch operator: torch.ops.examples.cross_entropy.
# A backward function rather than a backward kernel, since the integer labels have no
# gradient and a kernel would have to return one.
cross_entropy_op = forward.cross_entropy.as_torch_op(
    "examples::cross_entropy", backward=_backward, setup_context=_save_inputs
)


def reference(grad_out: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The same gradient from PyTorch autograd, in float32."""
    logits32 = logits.detach().float().requires_grad_()
    forward.reference(logits32, labels).backward(grad_out.detach().float())
    assert logits32.grad is not None
    return logits32.grad.to(logits.dtype)


def inputs(shape=(130, 1000), dtype=torch.float32, device=None) -> tuple:
    device = device or default_device()
    logits, labels = forward.inputs(shape, dtype, device)
    return torch.randn((), dtype=torch.float32, device=device), logits, labels


def main() -> None:
    args = inputs()
    assert_close(cross_entropy_backward(*args), reference(*args))
    grad_out, logits, labels = args[0], args[1].detach().requires_grad_(), args[2]
    cross_entropy_op(logits, labels).backward(grad_out)
    assert_close(logits.grad, reference(*args))
    print("cross_entropy_backward: ok")


if __name__ == "__main__":
    main()
