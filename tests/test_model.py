"""A tiny transformer block on tilecraft ops trains like the same block in plain PyTorch."""

from __future__ import annotations

import inspect

import pytest
import torch
import transformer_block as tb  # from examples/, on the path through conftest

import tilecraft as tc
from tilecraft.nn.attention import attention_backward, attention_forward

pytestmark = pytest.mark.usefixtures("on_test_device")  # a GPU runs these too


def model_kernels() -> list[tc.Kernel]:
    """Every tilecraft kernel the block's forward and backward run."""
    modules = (tb.mm, tb.lf, tb.rms, tb.rms.forward, tb.ce, tb.ce.forward)
    found = [k for m in modules for _, k in inspect.getmembers(m, _is_kernel)]
    return [*found, attention_forward, attention_backward]


def _is_kernel(value: object) -> bool:
    return isinstance(value, tc.Kernel)


def test_the_block_runs_the_attention_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(attention_forward.settings, "interpret", True)
    real = attention_forward.run_eagerly
    monkeypatch.setattr(
        attention_forward, "run_eagerly", lambda args: calls.append(1) or real(args)
    )
    ours, _ = tb.models()
    ours(*tb.data())
    assert calls, "the block's attention did not run tilecraft.nn.attention's kernel"


def test_losses_match_pytorch_and_decrease(mode) -> None:
    for kernel in model_kernels():
        mode(kernel)
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


def test_bfloat16_training_matches_pytorch_in_eager_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """The block in bfloat16 (as the GPU trains it) against PyTorch in bfloat16; on the CPU
    only the eager mode computes bfloat16 correctly (Triton's interpreter does not)."""
    for kernel in model_kernels():
        monkeypatch.setattr(kernel.settings, "interpret", True)
    ours, theirs = tb.models(dtype=torch.bfloat16)
    assert ours.qkv.dtype == torch.bfloat16
    got, expected = tb.train(ours, steps=3), tb.train(theirs, steps=3)
    assert got == pytest.approx(expected, rel=tb.LOSS_RTOL[torch.bfloat16])
    assert got[-1] < got[0], got
