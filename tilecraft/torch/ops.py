"""Register a tilecraft kernel as a PyTorch custom operator (`torch.library.custom_op`).

The fake (meta) implementation is the kernel's own host code run with its device loops
replaced by no-ops, so `torch.compile` and `torch.export` see the outputs' shapes and
dtypes without running anything.

In plain eager PyTorch a call skips the operator's dispatch (tens of microseconds a call,
more than a small kernel's launch): it runs the kernel, or, where autograd records it, an
`autograd.Function` with the very backward and setup_context registered on the operator.
Whatever traces or intercepts calls (torch.compile, torch.export, dispatch and torch
function modes, functorch transforms, jit tracing, tensor subclasses such as fake tensors)
gets the registered operator, as do meta tensors and operators that mutate their arguments.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch

from tilecraft.exc import TilecraftError
from tilecraft.frontend.blocks import BlockTable
from tilecraft.frontend.host import capture_stmt, compile_function, rewrite_host
from tilecraft.language.tunables import Fragment, fragment_default
from tilecraft.torch import inline
from tilecraft.torch.dispatch import (
    DirectOp,
    available,
    check_no_alias,
    plain_eager,
    requires_grad,
    signature_impl,
)

if TYPE_CHECKING:
    from tilecraft.runtime.kernel import Kernel

ARG_TYPES = (torch.Tensor, float, int, bool)
_registered: dict[str, TorchOp] = {}


class OpRegistrationError(TilecraftError):
    """A kernel that cannot become a PyTorch operator: bad annotations, name or backward."""


class TorchOp:
    """A kernel registered as the PyTorch operator `namespace::name`; call it like the kernel.

    `op.op` is the `torch.library` operator (also reachable as `torch.ops.namespace.name`).
    """

    def __init__(self, kernel: Kernel, name: str, mutates_args: Iterable[str] = ()) -> None:
        self.kernel, self.name = kernel, name
        self.signature = torch_signature(kernel)
        self._arity = len(self.signature.parameters)  # calls with every argument, positional
        self.mutates_args = tuple(mutates_args)
        # a DirectOp (dispatch.py) unless the op mutates its arguments: those keep custom_op
        self.direct: DirectOp | None = None
        self.op = _define(self, self.signature)
        (self.direct or self.op).register_fake(fake_impl(kernel))
        if not self.mutates_args:  # under torch.compile: its Triton kernels, not a call
            inline.install(name, kernel, self.direct.lib if self.direct else None)
        self.function = None
        # whether calls may skip the operator in eager mode: not for mutating ops, nor for
        # the first call, which goes through the operator, whose checks (outputs must not
        # alias inputs, ...) then hold for the eager calls after it
        self._eager = False
        _registered[name] = self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # plain_eager is False under torch.compile, which then traces only the op
        if self._eager and plain_eager(args, kwargs):
            inputs = args  # complete, or normalized as the operator's setup_context sees them
            if kwargs or len(args) != self._arity:
                inputs = self.kernel.normalize(args, kwargs)
            if not (_grad_enabled() and requires_grad(inputs)):
                return self.kernel.run(inputs)
            if self._apply is not None:  # else not differentiable: as the operator says
                return self._apply(*inputs)
        if torch.compiler.is_compiling():
            return self.op(*args, **kwargs)
        result = self.op(*args, **kwargs)
        if self.direct is not None and not self._eager and plain_eager(args, kwargs):
            check_no_alias(self.name, (*args, *kwargs.values()), result)  # as custom_op would
        self._eager = not self.mutates_args  # after a first call through the operator
        return result

    @property
    def function(self) -> type[torch.autograd.Function] | None:
        """The eager twin of the op's autograd registration (set by register_autograd)."""
        return self._function

    @function.setter
    def function(self, function: type[torch.autograd.Function] | None) -> None:
        self._function = function
        self._apply = None if function is None else fast_apply(function)
        if self.direct is not None:
            self.direct.eager_apply = self._apply

    @property
    def num_outputs(self) -> int:
        """How many tensors the op returns."""
        return num_outputs(self.signature)

    def register_autograd(
        self, backward: Callable[..., Any], setup_context: Callable[..., Any] | None = None
    ) -> TorchOp:
        """Make the op differentiable; see `tilecraft.torch.autograd.register_backward`."""
        from tilecraft.torch.autograd import register_backward

        register_backward(self, backward, setup_context)
        return self


def fast_apply(function: type[torch.autograd.Function]) -> Callable[..., Any]:
    """`function.apply` for calls that `plain_eager` admits, less its Python wrapper's work
    (a closure, a generator, checks for setup_context and functorch: microseconds a call).

    Without a functorch transform active (plain_eager checked) and without a
    `setup_context` method, that wrapper unwraps functorch's dead wrappers and calls the
    C++ apply: so does this. Where PyTorch lacks either piece, `function.apply` runs.
    """
    base = super(torch.autograd.Function, function)  # what Function.apply's super() is
    apply = getattr(base, "apply", None)
    unwrap = getattr(getattr(torch._C, "_functorch", None), "unwrap_if_dead", None)
    if apply is None or unwrap is None or _has_setup_context(function):
        return function.apply
    tensor = torch.Tensor

    def run(*args: Any) -> Any:
        return apply(*[unwrap(a) if isinstance(a, tensor) else a for a in args])

    return run


def _has_setup_context(function: type[torch.autograd.Function]) -> bool:
    base = getattr(torch.autograd.function, "_SingleLevelFunction", None)
    return base is None or function.setup_context is not base.setup_context


_grad_enabled = torch.is_grad_enabled


def as_torch_op(
    name: str,
    mutates_args: Iterable[str] = (),
    backward: Callable[..., Any] | None = None,
    setup_context: Callable[..., Any] | None = None,
) -> Callable[[Kernel], TorchOp]:
    """Decorator form: `tc.as_torch_op("mylib::rms_norm")(kernel)` returns a `TorchOp`.

    Example::

        rms_norm_op = tc.as_torch_op("mylib::rms_norm", backward=rms_norm_backward)(rms_norm)
        y = torch.compile(lambda x, w: rms_norm_op(x, w), fullgraph=True)(x, w)
    """

    def register(kernel: Kernel) -> TorchOp:
        op = TorchOp(kernel, name, mutates_args)
        return op.register_autograd(backward, setup_context) if backward is not None else op

    return register


def torch_signature(kernel: Kernel) -> inspect.Signature:
    """The kernel's signature with resolved annotations, checked against what ops accept."""
    try:
        sig = inspect.signature(kernel.fn, eval_str=True)
    except Exception as e:
        raise _error(kernel, f"cannot resolve its annotations ({e})") from None
    for param in sig.parameters.values():
        if param.annotation not in ARG_TYPES:
            raise _error(kernel, f"parameter `{param.name}` needs a type annotation of " + _names())
        if param.kind not in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            raise _error(kernel, f"parameter `{param.name}` must be a plain positional parameter")
    if not _is_tensor_return(sig.return_annotation):
        raise _error(
            kernel, "its return needs an annotation: torch.Tensor or tuple[torch.Tensor, ...]"
        )
    return sig


def num_outputs(sig: inspect.Signature) -> int:
    """How many tensors a checked signature returns."""
    ret = sig.return_annotation
    return len(typing.get_args(ret)) if typing.get_origin(ret) is tuple else 1


def _is_tensor_return(ret: Any) -> bool:
    if ret is torch.Tensor:
        return True
    parts = typing.get_args(ret)
    return typing.get_origin(ret) is tuple and bool(parts) and all(p is torch.Tensor for p in parts)


def _names() -> str:
    return "torch.Tensor, float, int or bool"


def _error(kernel: Kernel, message: str) -> OpRegistrationError:
    src = kernel.source
    return OpRegistrationError(f"kernel `{src.tree.name}`: {message}", src.loc(src.tree))


def _define(op: TorchOp, sig: inspect.Signature) -> Any:
    kernel, name = op.kernel, op.name
    if name in _registered or _exists(name):
        raise _error(kernel, f"an operator named {name!r} is already registered")
    if name.count("::") != 1:
        raise _error(kernel, f"operator name {name!r} must look like 'namespace::name'")
    impl = signature_impl(kernel, sig)
    try:
        if not op.mutates_args and available():
            op.direct = DirectOp(kernel, name, impl)
            return op.direct.overload
        return torch.library.custom_op(name, impl, mutates_args=op.mutates_args)
    except (RuntimeError, ValueError) as e:
        raise _error(kernel, f"torch.library refused {name!r}: {e}") from None


def _exists(name: str) -> bool:
    namespace, opname = name.split("::", 1) if "::" in name else ("", name)
    return hasattr(getattr(torch.ops, namespace, None), opname) if namespace else False


def fake_impl(kernel: Kernel) -> Callable[..., Any]:
    """The kernel's host code with device loops as no-ops: outputs with shapes, no data."""
    config = kernel.chosen_config()
    choices = config.to_dict() if config else {}
    tables: list[BlockTable] = []  # the table of the call in progress
    host: list[Callable[..., Any]] = []  # compiled on first use

    def tunable(name: str, fragment: Fragment) -> Any:
        return choices.get(name, fragment_default(fragment))

    def block_size(*args: Any) -> Any:
        return tables[-1].register(*args)

    def run(*args: Any) -> Any:
        if not host:
            extra = {"_tc_capture": _ignore, "_tc_block_size": block_size, "_tc_tunable": tunable}
            module = rewrite_host(kernel.source, capture_stmt)
            host.append(compile_function(module, kernel.source, extra))
        tables.append(BlockTable(choices))
        try:
            return host[0](*args)
        finally:
            tables.pop()

    return run


def _ignore(index: int, env: dict[str, Any]) -> None:
    """Device loops do nothing in the fake implementation."""
