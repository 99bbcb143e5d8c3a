"""A tiny transformer block on tilecraft ops trains like the same block in plain PyTorch."""

from __future__ import annotations

import pytest
import torch
import transformer_block as tb  # from examples/, on the path through conftest


def test_losses_match_pytorch_and_decrease() -> None:
    ours, theirs = tb.models()
    got, expected = tb.train(ours, steps=4), tb.train(theirs, steps=4)
    assert got == pytest.approx(expected, rel=1e-3)
    assert all(later < earlier for earlier, later in zip(got, got[1:], strict=False)), got
    for (name, a), (_, b) in zip(ours.named_parameters(), theirs.named_parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4, msg=f"parameter {name}")


def test_gradients_match_pytorch() -> None:
    ours, theirs = tb.models()
    tokens, targets = tb.data()
    ours(tokens, targets).backward()
    theirs(tokens, targets).backward()
    for (name, a), (_, b) in zip(ours.named_parameters(), theirs.named_parameters(), strict=True):
        assert a.grad is not None, name
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-3, atol=1e-5, msg=f"gradient {name}")


def test_matmul_op_backward_on_transposed_views() -> None:
    x = torch.randn(7, 5, requires_grad=True)
    w = torch.randn(9, 5).t().requires_grad_()  # a non-contiguous weight
    grad = torch.randn(7, 9)
    tb.matmul_op(x, w).backward(grad)
    torch.testing.assert_close(x.grad, grad @ w.detach().t())
    torch.testing.assert_close(w.grad, x.detach().t() @ grad)


def test_forward_and_loss_compile_with_fullgraph() -> None:
    ours, theirs = tb.models()
    tokens, targets = tb.data()
    compiled = torch.compile(ours, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(tokens, targets), theirs(tokens, targets))


def test_training_step_compiles_with_fullgraph() -> None:
    """Forward and backward graphs trace through every tilecraft op, the loss included."""
    ours, theirs = tb.models()
    tokens, targets = tb.data()
    loss = torch.compile(ours, fullgraph=True, backend="aot_eager")(tokens, targets)
    expected = theirs(tokens, targets)
    torch.testing.assert_close(loss, expected)
    loss.backward()
    expected.backward()
    for (name, a), (_, b) in zip(ours.named_parameters(), theirs.named_parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-3, atol=1e-5, msg=f"gradient {name}")
