"""A kernel as a dispatcher operator whose kernels call tilecraft directly.

`torch.library.custom_op` wraps an implementation in Python layers that run on every call
through the dispatcher (its autograd kernel, a Python redispatch, a check of the outputs):
about 12 us a call on a CPU, paid by every tilecraft call in a `torch.compile`d graph,
which calls operators through the dispatcher. Here the operator is defined with
`torch.library.Library` and gets two kernels of its own:

- the backend kernel (`CompositeExplicitAutograd`, any device) runs the kernel;
- the Autograd kernel, on plain eager calls (`plain_eager`: no mode, no transform, plain
  tensors, which is how a compiled graph calls it), runs the kernel, or the op's eager
  `autograd.Function` where autograd records; on anything else (fake tensors while
  torch.compile traces, dispatch modes, subclasses, meta tensors, functorch transforms) it
  does what custom_op's does: an `autograd.Function` whose forward redispatches below
  autograd, with the registered setup_context and backward.

Where PyTorch lacks the private pieces the redispatch needs, `available()` is False and
operators are defined through `custom_op` as before.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from tilecraft.runtime.kernel import Kernel

_below_autograd: Any = getattr(torch._C, "_AutoDispatchBelowAutograd", None)
_after_autograd: Any = getattr(torch._C, "_after_autograd_keyset", None)


def available() -> bool:
    """Whether this PyTorch has what the Autograd kernel's generic path needs."""
    return _below_autograd is not None and _after_autograd is not None


class DirectOp:
    """The operator `namespace::name` running `kernel`; `overload` is its OpOverload."""

    def __init__(self, kernel: Kernel, name: str, impl: Callable[..., Any]) -> None:
        namespace, self.opname = name.split("::")
        self.kernel, self.name = kernel, name
        self.arity = len(inspect.signature(impl).parameters)
        self.lib = torch.library.Library(namespace, "FRAGMENT")
        self.lib.define(self.opname + torch.library.infer_schema(impl, mutates_args=()))
        self.overload = getattr(getattr(torch.ops, namespace), self.opname).default
        # set by `register_autograd`: the eager Function's apply, backward, setup_context
        self.eager_apply: Callable[..., Any] | None = None
        self.backward: Callable[..., Any] | None = None
        self.setup_context: Callable[..., Any] | None = None
        self.generic = _generic_function(self)
        self.lib.impl(self.opname, self._backend, "CompositeExplicitAutograd")
        self.lib.impl(self.opname, self._autograd, "Autograd", with_keyset=True)

    def register_fake(self, fake: Callable[..., Any]) -> None:
        """Register `fake` as the operator's fake (meta) implementation."""
        torch.library.register_fake(self.name, fake, lib=self.lib)

    def _backend(self, *args: Any) -> Any:
        # the dispatcher leaves out trailing arguments equal to their defaults
        args = self.kernel.normalize(args, {})
        result = self.kernel.run(args)
        check_no_alias(self.name, args, result)
        return result

    def _autograd(self, keyset: Any, *args: Any) -> Any:
        if len(args) != self.arity:  # the dispatcher left out trailing defaults
            args = self.kernel.normalize(args, {})
        grad = torch.is_grad_enabled() and requires_grad(args)
        if plain_eager(args):
            if not grad:
                return self.kernel.run(args)
            if self.eager_apply is not None:
                return self.eager_apply(*args)
        if grad:
            return self.generic.apply(*args, keyset)  # last: ctx.needs_input_grad as the op's
        return self.redispatch(keyset, args)

    def redispatch(self, keyset: Any, args: tuple) -> Any:
        """Call the kernels below autograd (custom_op's path)."""
        with _below_autograd():
            return self.overload.redispatch(keyset & _after_autograd, *args)


def _generic_function(op: DirectOp) -> type[torch.autograd.Function]:
    """What custom_op's autograd kernel records, for calls that are not plain eager."""

    def forward(*args: Any) -> Any:
        return op.redispatch(args[-1], args[:-1])

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        if op.setup_context is not None:
            op.setup_context(ctx=ctx, inputs=inputs[:-1], output=output)

    def backward(ctx: Any, *grads: Any) -> Any:
        if op.backward is None:
            raise RuntimeError(
                f"Trying to backward through {op.name} but no autograd formula was registered;"
                " give the operator a backward (`as_torch_op(..., backward=...)`)"
            )
        result = op.backward(ctx, *grads)
        return (*(result if isinstance(result, tuple) else (result,)), None)

    methods = {
        "forward": staticmethod(forward),
        "setup_context": staticmethod(setup_context),
        "backward": staticmethod(backward),
    }
    name = f"{op.name.replace('::', '_')}_generic"
    return type(name, (torch.autograd.Function,), methods)


_TENSOR, _PARAMETER = torch.Tensor, torch.nn.Parameter  # the plain tensors


def plain_eager(args: tuple, kwargs: dict[str, Any] | None = None) -> bool:
    """Whether a call runs in plain eager PyTorch on plain tensors with data (not meta
    tensors, which get the fake implementation), with nothing tracing or intercepting it
    (see `tilecraft.torch.ops`); where unsure, False."""
    if torch.compiler.is_compiling() or _tracing():  # first: torch.compile folds it
        return False
    if _dispatch_modes() or _function_modes() or _transforms():
        return False
    for a in (*args, *kwargs.values()) if kwargs else args:
        kind = type(a)  # the exact types first: cheaper than isinstance for tensors
        if kind is _TENSOR or kind is _PARAMETER:
            if a.is_meta:
                return False
        elif isinstance(a, _TENSOR):  # a subclass (fake tensors, ...)
            return False
    return True


def _active() -> bool:
    return True


# PyTorch has no public query for dispatch modes, torch function modes and functorch
# transforms; where its private ones are missing, every call takes the registered operator.
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", _active)
_function_modes = getattr(torch._C, "_is_torch_function_mode_enabled", _active)
_transforms = getattr(torch._C, "_are_functorch_transforms_active", _active)
_tracing = getattr(torch._C, "_is_tracing", torch.jit.is_tracing)  # less its is_scripting


def requires_grad(args: tuple) -> bool:
    """Whether a tensor among `args` requires grad."""
    for a in args:  # noqa: SIM110 - a loop: cheaper than any() over a generator or a list
        if isinstance(a, torch.Tensor) and a.requires_grad:
            return True
    return False


def check_no_alias(name: str, args: tuple, result: Any) -> None:
    """Raise if an output shares memory with an input or another output, which
    operators must not do (custom_op checks the same on every call)."""
    outputs = result if isinstance(result, tuple) else (result,)
    seen: set[int] = set()
    for t in args:
        if isinstance(t, torch.Tensor) and t.numel() and t.device.type != "meta":
            seen.add(t.untyped_storage().data_ptr())
    for t in outputs:
        if not isinstance(t, torch.Tensor) or not t.numel() or t.device.type == "meta":
            continue
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen:
            raise RuntimeError(
                f"{name}: an output shares memory with an input or another output; an"
                " operator must return new tensors (use .clone())"
            )
        seen.add(ptr)


def signature_impl(kernel: Kernel, sig: inspect.Signature) -> Callable[..., Any]:
    """A function with the kernel's checked signature (for schema inference)."""

    def impl(*args: Any) -> Any:
        return kernel(*args)

    impl.__signature__ = sig  # type: ignore[attr-defined]
    impl.__name__ = kernel.source.tree.name
    return impl
