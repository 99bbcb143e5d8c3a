"""tilecraft kernels as PyTorch custom operators: fake impls, torch.compile, autograd."""

from __future__ import annotations

import itertools

import cross_entropy_backward as cross_entropy_backward_example
import layer_norm_backward as layer_norm_backward_example
import pytest
import rms_norm as rms_norm_example
import rms_norm_backward as backward_example
import softmax as softmax_example
import softmax_backward as softmax_backward_example
import torch

import tilecraft as tc
from tilecraft.testing import assert_close
from tilecraft.torch import OpRegistrationError

_ids = itertools.count()


def unique(name: str) -> str:
    """A fresh operator name: registrations last for the whole process."""
    return f"tctest::{name}_{next(_ids)}"


@pytest.fixture(scope="module")
def ops() -> tuple[tc.torch.TorchOp, tc.torch.TorchOp]:
    rms = tc.as_torch_op(unique("rms_norm"))(rms_norm_example.rms_norm)
    return rms, softmax_example.softmax.as_torch_op(unique("softmax"))


def test_op_is_registered_and_matches_reference(ops) -> None:
    rms, _ = ops
    x, w = rms_norm_example.inputs((37, 129))
    namespace, name = rms.name.split("::")
    assert getattr(getattr(torch.ops, namespace), name).default is not None
    assert_close(rms(x, w), rms_norm_example.reference(x, w))
    assert_close(rms(x, w, 1e-3), rms_norm_example.reference(x, w, 1e-3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_fake_impl_shapes_and_dtypes(ops, dtype: torch.dtype) -> None:
    rms, softmax = ops
    for _ in range(3):
        m, n = (int(s) for s in torch.randint(1, 200, (2,)))
        x = torch.randn(m, n, dtype=dtype, device="meta")
        out = rms(x, torch.randn(n, dtype=dtype, device="meta"))
        assert (out.shape, out.dtype, out.device.type) == ((m, n), dtype, "meta")
        assert softmax(x).shape == (m, n)


def test_opcheck(ops) -> None:
    rms, softmax = ops
    x, w = rms_norm_example.inputs((9, 33))
    torch.library.opcheck(rms.op, (x, w))
    torch.library.opcheck(softmax.op, (x,))


@pytest.mark.slow
def test_torch_compile_fullgraph_two_ops(ops) -> None:
    rms, softmax = ops
    x, w = rms_norm_example.inputs((37, 129))

    def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return softmax(rms(x, w)) * 2

    expected = softmax_example.reference(rms_norm_example.reference(x, w)) * 2
    assert_close(torch.compile(block, fullgraph=True, backend="eager")(x, w), expected)
    assert_close(torch.compile(block, fullgraph=True)(x, w), expected)


def test_torch_export(ops) -> None:
    rms, softmax = ops

    class Block(torch.nn.Module):
        def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return softmax(rms(x, w))

    x, w = rms_norm_example.inputs((16, 64))
    program = torch.export.export(Block(), (x, w))
    assert rms.name.replace("::", ".") in program.graph_module.code
    assert_close(program.module()(x, w), Block()(x, w))


def test_eager_interpret_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = tc.kernel(softmax_example.softmax.fn)
    monkeypatch.setattr(kernel.settings, "interpret", True)
    op = kernel.as_torch_op(unique("softmax_eager"))
    (x,) = softmax_example.inputs((5, 40))
    assert_close(torch.compile(op, fullgraph=True, backend="eager")(x), torch.softmax(x, 1))


@pytest.mark.parametrize("shape", [(37, 129), (1, 300), (16, 64)])
def test_rms_norm_gradients_match_autograd(shape: tuple[int, int]) -> None:
    grad_out, x, w = backward_example.inputs(shape)
    x.requires_grad_(), w.requires_grad_()
    backward_example.rms_norm_op(x, w).backward(grad_out)
    assert_close((x.grad, w.grad), backward_example.reference(grad_out, x, w))


@pytest.mark.slow
def test_rms_norm_gradients_under_torch_compile() -> None:
    grad_out, x, w = backward_example.inputs((37, 129))
    x.requires_grad_(), w.requires_grad_()
    op = backward_example.rms_norm_op
    torch.compile(lambda x, w: (op(x, w) * grad_out).sum(), fullgraph=True)(x, w).backward()
    assert_close((x.grad, w.grad), backward_example.reference(grad_out, x, w))


def test_layer_norm_backward_matches_autograd() -> None:
    grad_out, x, w, b = layer_norm_backward_example.inputs((37, 129))
    x.requires_grad_(), w.requires_grad_(), b.requires_grad_()
    layer_norm_backward_example.layer_norm_op(x, w, b).backward(grad_out)
    expected = layer_norm_backward_example.reference(grad_out, x, w, b)
    assert_close((x.grad, w.grad, b.grad), expected)


def test_softmax_backward_matches_autograd() -> None:
    grad_out, x = softmax_backward_example.inputs((37, 129))
    x.requires_grad_()
    softmax_backward_example.softmax_op(x).backward(grad_out)
    assert_close(x.grad, softmax_backward_example.reference(grad_out, x))


def test_cross_entropy_backward_matches_autograd() -> None:
    grad_out, logits, labels = cross_entropy_backward_example.inputs((37, 129))
    logits.requires_grad_()
    cross_entropy_backward_example.cross_entropy_op(logits, labels).backward(grad_out)
    assert labels.grad is None
    assert_close(logits.grad, cross_entropy_backward_example.reference(grad_out, logits, labels))


def test_function_backward_with_setup_context() -> None:
    def setup(ctx, inputs, output) -> None:
        ctx.save_for_backward(output)

    def backward(ctx, grad):  # d softmax: y * (g - sum(g * y))
        (y,) = ctx.saved_tensors
        return y * (grad - (grad * y).sum(1, keepdim=True))

    kernel = tc.kernel(softmax_example.softmax.fn)
    op = tc.as_torch_op(unique("softmax"), backward=backward, setup_context=setup)(kernel)
    x = torch.randn(7, 30, requires_grad=True)
    grad = torch.randn(7, 30)
    op(x).backward(grad)
    x_ref = x.detach().requires_grad_()
    torch.softmax(x_ref, 1).backward(grad)
    assert_close(x.grad, x_ref.grad)


def test_registering_twice_raises(ops) -> None:
    rms, _ = ops
    with pytest.raises(OpRegistrationError, match="already registered") as info:
        rms_norm_example.rms_norm.as_torch_op(rms.name)
    assert "rms_norm.py" in str(info.value) and "def rms_norm" in str(info.value)


def test_backward_kernel_with_wrong_arity_raises() -> None:
    @tc.kernel
    def too_few_grads(
        g: torch.Tensor, x: torch.Tensor, w: torch.Tensor, eps: float
    ) -> torch.Tensor:
        return g

    with pytest.raises(OpRegistrationError, match="returns 1 gradients, but needs 4 arguments"):
        tc.as_torch_op(unique("rms_norm"), backward=too_few_grads)(rms_norm_example.rms_norm)


def test_backward_function_with_wrong_grad_count_raises() -> None:
    def backward(ctx, grad):
        return grad  # rms_norm has 3 inputs

    op = tc.as_torch_op(unique("rms_norm"), backward=backward)(rms_norm_example.rms_norm)
    x, w = (t.requires_grad_() for t in rms_norm_example.inputs((4, 8)))
    with pytest.raises(OpRegistrationError, match="returned 1 gradients, expected 3"):
        op(x, w).backward(torch.ones(4, 8, device=x.device))


def test_missing_annotations_raise() -> None:
    @tc.kernel
    def untyped(x, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in tc.tile(x.size()):
            out[tile] = x[tile] + y[tile]
        return out

    with pytest.raises(OpRegistrationError, match="parameter `x` needs a type annotation") as info:
        untyped.as_torch_op(unique("untyped"))
    assert "def untyped" in str(info.value)
