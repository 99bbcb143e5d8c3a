"""Under `torch.compile`, an operator's Triton kernels in the graph instead of a call.

A compiled graph calls an opaque operator through the dispatcher, a Python kernel,
tilecraft's specialization key and its launch: about 30 us of host time a call on an H200
host, where inductor launches the kernels it generates for a few. So each operator gets,
as `torch.library.triton_op` gives its operators, a rule for functionalization, the stage
of AOTAutograd through which every `torch.compile` backend traces a graph: the rule runs
the call's generated host launcher (its output allocation and launches) with each Triton
kernel wrapped by `torch.library.wrap_triton`. The graph then holds the launcher's PyTorch
ops and the kernels themselves, which inductor compiles and launches from its own code.

A kernel that would tune on its first call tunes while the graph is traced, on stand-ins
of the call's tensors (random normal floats); not one with a tensor of ints or bools among
its arguments (they may hold indices, which stand-ins cannot), which stays an operator call
and tunes on its first real call (tune it first, give it a config, or set the effort to
"none" to have it inlined). A call stays an operator call too where its launcher is not
known ahead of a real call: symbolic shapes, CPU tensors (Triton's interpreter cannot be
traced), host code that reads tensor values, checked launches (TILECRAFT_CHECK), launches
inductor cannot make (an int argument beyond int32, a register limit); under
`torch.export`, which keeps operators as they are; and wherever this PyTorch lacks the
pieces.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from tilecraft.runtime import fast_launch

if TYPE_CHECKING:
    from tilecraft.runtime.kernel import Kernel

log = logging.getLogger(__name__)


def _functional_mode() -> Any:
    """PyTorch's FunctionalTensorMode (what triton_op registers its rule for), or None."""
    try:
        from torch._subclasses.functional_tensor import FunctionalTensorMode
        from torch.utils._python_dispatch import _disable_current_modes  # noqa: F401
    except ImportError:
        return None
    return FunctionalTensorMode if hasattr(torch.library, "wrap_triton") else None


def install(name: str, kernel: Kernel, lib: Any = None) -> bool:
    """Give the operator `name` the functionalization rule that traces `kernel`'s launches;
    whether this PyTorch could."""
    mode_type = _functional_mode()
    if mode_type is None:
        return False

    def rule(mode: Any, func: Any, types_: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        launcher = None if kwargs or _exporting() else traceable_launcher(kernel, args)
        if launcher is not None:
            try:
                with mode:
                    return launcher(*args)
            except Exception as e:  # noqa: BLE001 - what it traced is dead code, dropped later
                log.debug("tilecraft: %s stays an operator call: %s", kernel.fn.__name__, e)
        return mode.__torch_dispatch__(func, types_, args, kwargs)

    torch.library.register_torch_dispatch(name, mode_type, rule, lib=lib)
    return True


def traceable_launcher(kernel: Kernel, args: tuple) -> Callable[..., Any] | None:
    """The launcher calls with `args` (functional or fake tensors) run, its Triton kernels
    wrapped to be traced; None where there is none to trace (see the module docstring)."""
    if kernel.settings.check or not all(_static_cuda(a) for a in args):
        return None  # (a checked launch reads its flags back: not traceable)
    from torch.utils._python_dispatch import _disable_current_modes

    # tuning on stand-ins: random floats; not where a tensor of ints may hold indices
    tune = all(a.dtype.is_floating_point for a in args if isinstance(a, torch.Tensor))
    try:
        with _disable_current_modes():  # stand-ins, tilecraft's analysis and tuning: untraced
            launcher = kernel.settled_launcher(tuple(_stand_in(a) for a in args), tune)
    except Exception as e:  # noqa: BLE001 - the call stays an operator call, which reports it
        log.debug("tilecraft: %s stays an operator call: %s", kernel.fn.__name__, e)
        return None
    return None if launcher is None else _wrapped(launcher)


class NotTraceable(Exception):
    """A launch that inductor would not take."""


class _Traced:
    """A Triton kernel as `wrap_triton` wraps it, refusing launches that inductor cannot
    make: ints beyond int32 (torch 2.11 fails on them) and register limits."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = torch.library.wrap_triton(kernel)

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        def launch(*args: Any, **kwargs: Any) -> Any:
            if "maxnreg" in kwargs:
                raise NotTraceable("a launch with maxnreg")
            for a in (*args, *kwargs.values()):
                if type(a) is int and not -(2**31) <= a < 2**31:
                    raise NotTraceable(f"an int argument beyond int32 ({a})")
            return self.kernel[grid](*args, **kwargs)

        return launch


def _static_cuda(arg: Any) -> bool:
    """A CUDA tensor of static shape and strides, or a plain Python scalar."""
    if isinstance(arg, torch.Tensor):
        sizes = (*arg.shape, *arg.stride(), arg.storage_offset())
        return arg.device.type == "cuda" and all(type(s) is int for s in sizes)
    return isinstance(arg, (int, float, bool)) or arg is None


def _stand_in(arg: Any) -> Any:
    """A tensor with `arg`'s metadata on its device (for a fake one): random normal floats,
    else zeros."""
    if not isinstance(arg, torch.Tensor):
        return arg
    last = sum((n - 1) * s for n, s in zip(arg.shape, arg.stride(), strict=True))
    size = arg.storage_offset() + (last + 1 if arg.numel() else 0)
    make = torch.randn if arg.dtype.is_floating_point else torch.zeros
    base = make(size, dtype=arg.dtype, device=arg.device)
    return base.as_strided(arg.shape, arg.stride(), arg.storage_offset())


def _wrapped(launcher: Callable[..., Any]) -> Callable[..., Any]:
    """`launcher` with the Triton kernels it launches wrapped by `wrap_triton`."""
    from triton.runtime.jit import JITFunction

    namespace = dict(launcher.__globals__)  # type: ignore[attr-defined]
    for name in fast_launch.launched_names(launcher.__code__):  # type: ignore[attr-defined]
        value = fast_launch.unwrap(namespace.get(name))
        if isinstance(value, JITFunction):
            namespace[name] = _Traced(value)
    code = launcher.__code__  # type: ignore[attr-defined]
    return types.FunctionType(code, namespace, code.co_name, launcher.__defaults__)  # type: ignore[attr-defined]


def _exporting() -> bool:
    is_exporting = getattr(torch.compiler, "is_exporting", None)
    return bool(is_exporting and is_exporting())
