"""Differentiable tilecraft ops: a forward op paired with a backward kernel or function."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tilecraft.torch.ops import OpRegistrationError, TorchOp, num_outputs, torch_signature


def register_backward(
    op: TorchOp, backward: Callable[..., Any], setup_context: Callable[..., Any] | None = None
) -> None:
    """Make `op` differentiable: through its own Autograd kernel (dispatch.py), or, for an
    operator defined by `custom_op`, through `torch.library.register_autograd`.

    `backward` is either a tilecraft kernel, called as `backward(*grad_outputs, *inputs)`
    and returning one gradient per tensor input of `op` (the inputs are saved for it), or a
    PyTorch-style function `backward(ctx, *grad_outputs)` returning one gradient per input
    (None for non-tensors), paired with a `setup_context(ctx, inputs, output)`.
    """
    from tilecraft.runtime.kernel import Kernel

    if isinstance(backward, (Kernel, TorchOp)):
        if setup_context is not None:
            raise _error(op, "a backward kernel gets the forward inputs; drop `setup_context`")
        run_backward = _kernel_backward(op, backward)
    else:
        run_backward = _checked_backward(op, backward)
    setup = setup_context or _save_inputs
    if op.direct is not None:  # its Autograd kernel reads these (tilecraft/torch/dispatch.py)
        op.direct.backward, op.direct.setup_context = run_backward, setup
    else:
        op.op.register_autograd(run_backward, setup_context=setup)
    op.function = eager_function(op, run_backward, setup)


def eager_function(
    op: TorchOp, backward: Callable[..., Any], setup_context: Callable[..., Any]
) -> type[torch.autograd.Function]:
    """An `autograd.Function` doing what `op`'s autograd registration does, for eager calls:
    the forward runs the kernel (autograd off, as below the operator's autograd) and calls
    `setup_context(ctx, inputs, output)`; the backward is `backward(ctx, *grads)`."""
    kernel = op.kernel

    # old-style (ctx first): a Function with a `setup_context` method binds its arguments
    # to the forward's signature on every call
    def forward(ctx: Any, *args: Any) -> Any:
        output = kernel.run(args)  # normalized by the op; autograd is off here
        setup_context(ctx=ctx, inputs=args, output=output)  # by keyword, as torch.library
        return output

    name = f"{op.name.replace('::', '_')}_eager"
    methods = {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    return type(name, (torch.autograd.Function,), methods)


def _save_inputs(ctx: Any, inputs: tuple, output: Any) -> None:
    ctx.save_for_backward(*(a for a in inputs if isinstance(a, torch.Tensor)))
    ctx.inputs = tuple(None if isinstance(a, torch.Tensor) else a for a in inputs)


def saved_inputs(ctx: Any) -> tuple:
    """The forward inputs that `_save_inputs` kept, in their original order."""
    tensors = iter(ctx.saved_tensors)
    return tuple(next(tensors) if a is None else a for a in ctx.inputs)


def _kernel_backward(op: TorchOp, backward: Any) -> Callable[..., Any]:
    kernel = backward.kernel if isinstance(backward, TorchOp) else backward
    _check_kernel_arity(op, kernel)
    bwd = backward if isinstance(backward, TorchOp) else _backward_op(op, backward)
    tensor_inputs = _tensor_inputs(op)

    def run(ctx: Any, *grads: Any) -> tuple:
        inputs = saved_inputs(ctx)
        result = bwd(*grads, *inputs)
        grads_in = iter(result if isinstance(result, tuple) else (result,))
        return tuple(next(grads_in) if is_tensor else None for is_tensor in tensor_inputs)

    return run


def _backward_op(op: TorchOp, kernel: Any) -> TorchOp:
    # an op, not a plain call, so torch.compile traces the backward graph through it too
    return TorchOp(kernel, f"{op.name}_backward")


def _check_kernel_arity(op: TorchOp, kernel: Any) -> None:
    sig = torch_signature(kernel)
    takes, returns = len(sig.parameters), num_outputs(sig)
    wants_in = op.num_outputs + len(op.signature.parameters)
    wants_out = sum(_tensor_inputs(op))
    if (takes, returns) != (wants_in, wants_out):
        raise _error(
            op,
            f"backward `{kernel.source.tree.name}` takes {takes} arguments and returns "
            f"{returns} gradients, but needs {wants_in} arguments ({op.num_outputs} grad "
            f"outputs, then the forward inputs) and {wants_out} gradients (one per tensor input)",
        )


def _checked_backward(op: TorchOp, backward: Callable[..., Any]) -> Callable[..., Any]:
    count = len(op.signature.parameters)

    def run(ctx: Any, *grads: Any) -> Any:
        result = backward(ctx, *grads)
        got = len(result) if isinstance(result, tuple) else 1
        if got != count:
            name = getattr(backward, "__name__", "backward")
            raise _error(op, f"`{name}` returned {got} gradients, expected {count} (one per input)")
        return result

    return run


def _tensor_inputs(op: TorchOp) -> list[bool]:
    return [p.annotation is torch.Tensor for p in op.signature.parameters.values()]


def _error(op: TorchOp, message: str) -> OpRegistrationError:
    src = op.kernel.source
    return OpRegistrationError(f"operator {op.name!r}: {message}", src.loc(src.tree))
