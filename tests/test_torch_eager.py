"""Eager calls of tilecraft operators skip torch.library's dispatch and still act like it."""

from __future__ import annotations

import itertools

import cross_entropy_backward as ce_example
import pytest
import rms_norm as rms_norm_example
import rms_norm_backward as backward_example
import softmax as softmax_example
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import tilecraft as tc
from tilecraft.testing import assert_close
from tilecraft.torch.ops import plain_eager

_ids = itertools.count()


def unique(name: str) -> str:
    """A fresh operator name: registrations last for the whole process."""
    return f"tceager::{name}_{next(_ids)}"


def rms_op() -> tc.torch.TorchOp:
    """rms_norm as a new differentiable operator (so its first call is this test's)."""
    register = tc.as_torch_op(unique("rms_norm"), backward=backward_example.rms_norm_backward)
    return register(tc.kernel(rms_norm_example.rms_norm.fn))


def leaves(shape: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    grad_out, x, w = backward_example.inputs(shape)
    return grad_out, x.requires_grad_(), w.requires_grad_()


def backward_name(t: torch.Tensor) -> str:
    assert t.grad_fn is not None
    return type(t.grad_fn).__name__


class OpLog(TorchDispatchMode):
    """Records the name of every operator dispatched while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("shape", [(13, 40), (1, 5)])
def test_eager_calls_match_the_registered_operator(shape: tuple[int, int]) -> None:
    op = rms_op()
    grad_out, x, w = leaves(shape)
    with OpLog():  # a mode: the operator's generic autograd path, as custom_op's
        first = op(x, w)
    assert backward_name(first) == f"{op.name.replace('::', '_')}_genericBackward"
    first.backward(grad_out)
    grads = (x.grad, w.grad)
    eager_name = f"{op.name.replace('::', '_')}_eagerBackward"
    for call in (op, op.op):  # the eager path; the operator called in plain eager mode
        x.grad = w.grad = None
        second = call(x, w)  # an autograd.Function of the same backward
        assert backward_name(second) == eager_name
        second.backward(grad_out)
        assert_close(second, first)
        assert_close((x.grad, w.grad), grads)
    assert_close(grads, backward_example.reference(grad_out, x, w))


def test_operators_refuse_outputs_that_alias_inputs() -> None:
    from tilecraft.torch.dispatch import check_no_alias

    x, y = torch.randn(3), torch.randn(3)
    check_no_alias("t::ok", (x,), (y, torch.empty(0)))
    for args, out in [((x,), x[1:]), ((x,), (y, y.view(3)))]:
        with pytest.raises(RuntimeError, match="shares memory"):
            check_no_alias("t::bad", args, out)


def test_eager_calls_without_grad_run_the_kernel() -> None:
    op = rms_op()
    x, w = rms_norm_example.inputs((9, 33))
    op(x, w)
    out = op(x, w, 1e-3)  # a default given positionally
    assert not out.requires_grad and out.grad_fn is None
    assert_close(out, rms_norm_example.reference(x, w, 1e-3))
    _, xg, wg = leaves((9, 33))
    with torch.no_grad():
        assert op(xg, wg).grad_fn is None


def test_a_backward_function_with_setup_context_runs_eagerly() -> None:
    logits, labels = ce_example.forward.inputs((13, 70))
    logits.requires_grad_()
    op = ce_example.cross_entropy_op
    for _ in range(2):  # the second call is eager
        logits.grad = None
        loss = op(logits, labels)
        loss.backward()
        assert labels.grad is None
        expected = ce_example.reference(torch.tensor(1.0), logits, labels)
        assert_close(logits.grad, expected)
    assert backward_name(loss).endswith("_eagerBackward")


def test_non_differentiable_outputs_stay_so() -> None:
    def setup(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
        ctx.mark_non_differentiable(output)

    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        return (None,)

    kernel = tc.kernel(softmax_example.softmax.fn)
    op = tc.as_torch_op(unique("softmax"), backward=backward, setup_context=setup)(kernel)
    x = torch.randn(4, 9, requires_grad=True)
    assert [op(x).requires_grad for _ in range(2)] == [False, False]


def test_an_operator_without_backward_behaves_the_same_both_ways() -> None:
    op = tc.kernel(softmax_example.softmax.fn).as_torch_op(unique("softmax"))
    x = torch.randn(4, 9, requires_grad=True)
    outs = [op(x) for _ in range(2)]  # both through the operator: no backward to record
    assert [backward_name(o) for o in outs] == [backward_name(outs[0])] * 2
    with torch.no_grad():
        assert_close(op(x), torch.softmax(x, 1))


def test_dispatch_modes_see_the_operator() -> None:
    op = rms_op()
    x, w = rms_norm_example.inputs((5, 16))
    op(x, w)
    with OpLog() as log:
        assert not plain_eager((x, w))
        out = op(x, w)
    assert any(op.name.replace("::", ".") in name for name in log.names), log.names
    assert_close(out, rms_norm_example.reference(x, w))


def test_meta_and_subclass_tensors_take_the_operator() -> None:
    x = torch.randn(3, 4)
    assert plain_eager((x, torch.nn.Parameter(x), 1.0, None))
    assert not plain_eager((x.to("meta"),))
    assert not plain_eager((x, torch.nn.Parameter(x.to("meta"))))

    class Sub(torch.Tensor):
        pass

    assert not plain_eager((x.as_subclass(Sub),))
    assert not plain_eager((x,), {"w": x.as_subclass(Sub)})
    op = rms_op()
    op(*rms_norm_example.inputs((5, 16)))
    out = op(torch.empty(5, 16, device="meta"), torch.empty(16, device="meta"))
    assert out.shape == (5, 16) and out.is_meta


def test_torch_compile_traces_the_operator_after_eager_calls() -> None:
    op = rms_op()
    grad_out, x, w = leaves((6, 40))
    for _ in range(2):
        op(x, w).backward(grad_out)
    x.grad = w.grad = None
    compiled = torch.compile(
        lambda x, w: (op(x, w) * grad_out).sum(), fullgraph=True, backend="aot_eager"
    )
    compiled(x, w).backward()
    assert_close((x.grad, w.grad), backward_example.reference(grad_out, x, w))


def test_keyword_arguments_take_either_path() -> None:
    op = rms_op()
    grad_out, x, w = leaves((6, 20))
    for _ in range(2):  # the operator, then the eager path
        x.grad = w.grad = None
        op(x, weight=w, eps=1e-3).backward(grad_out)
        assert_close((x.grad, w.grad), backward_example.reference(grad_out, x, w, 1e-3))
    meta = op(x=torch.empty(6, 20, device="meta"), weight=torch.empty(20, device="meta"))
    assert meta.is_meta and meta.shape == (6, 20)
    plain = tc.kernel(rms_norm_example.rms_norm.fn).as_torch_op(unique("rms_norm"))
    outs = [plain(x, weight=w) for _ in range(2)]  # no backward: both through the operator
    assert_close(outs[1], outs[0])


def test_torch_compile_compiles_once_from_a_first_call() -> None:
    graphs = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        graphs.append(gm)
        return gm.forward

    op = tc.kernel(softmax_example.softmax.fn).as_torch_op(unique("softmax"))
    compiled = torch.compile(lambda x: op(x) * 2, fullgraph=True, backend=backend)
    x = torch.randn(3, 10)
    for _ in range(3):  # the op's first call sets no state that a guard would see change
        assert_close(compiled(x), torch.softmax(x, 1) * 2)
    assert len(graphs) == 1


def test_fast_apply_records_what_apply_records() -> None:
    from tilecraft.torch.ops import fast_apply

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, factor):  # noqa: ANN001, ANN205
            ctx.factor = factor
            return x * factor

        @staticmethod
        def backward(ctx, grad):  # noqa: ANN001, ANN205
            return grad * ctx.factor, None

    class WithSetup(Scale):
        @staticmethod
        def forward(x, factor):  # noqa: ANN001, ANN205
            return x * factor

        @staticmethod
        def setup_context(ctx, inputs, output):  # noqa: ANN001, ANN205
            ctx.factor = inputs[1]

    assert fast_apply(WithSetup) == WithSetup.apply  # its binding of arguments is kept
    apply = fast_apply(Scale)
    assert apply != Scale.apply
    x = torch.randn(5, requires_grad=True)
    out = apply(x, 3.0)
    assert type(out.grad_fn).__name__ == type(Scale.apply(x, 3.0).grad_fn).__name__
    out.sum().backward()
    assert_close(x.grad, torch.full((5,), 3.0))
