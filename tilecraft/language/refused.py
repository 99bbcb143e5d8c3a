"""Helion names that tilecraft cannot support, so a ported kernel fails at the line that
uses one, saying why, rather than with a NameError.

Each name is a stub: calling it (in host code, in eager mode, or compiled: the device
compiler looks it up in `REFUSED`) raises `UnsupportedOperation` at the user's line.
"""

from __future__ import annotations

from typing import Any, NoReturn

from tilecraft.exc import UnsupportedOperation
from tilecraft.language.state import user_loc

_DISTRIBUTED = (
    "it works on symmetric memory shared by several GPUs (torch.distributed), which "
    "tilecraft kernels do not address: each kernel runs on one device"
)
_ASSEMBLY = (
    "tilecraft generates all of a kernel's Triton code itself and runs every kernel on the "
    "CPU too (eager mode, Triton's interpreter), where inline GPU assembly cannot run: "
    "write the computation with torch operations on tiles"
)
_INLINE_TRITON = (
    "tilecraft generates all of a kernel's Triton code itself (and eager mode runs no "
    "Triton): write the computation with torch operations on tiles, or call a separate "
    "Triton kernel from the host"
)

# name -> why it is refused
REASONS = {
    "signal": _DISTRIBUTED,
    "wait": _DISTRIBUTED,
    "stacktensor_like": _DISTRIBUTED,
    "StackTensor": _DISTRIBUTED,
    "ProcessGroupName": _DISTRIBUTED,
    "AsyncCopyDescriptor": _DISTRIBUTED,
    "start_async_remote_copy": _DISTRIBUTED,
    "wait_async_remote_copy": _DISTRIBUTED,
    "inline_asm_elementwise": _ASSEMBLY,
    "inline_triton": _INLINE_TRITON,
    "triton_kernel": _INLINE_TRITON,
    "rand4x": (
        "four random streams from one Philox call are not implemented yet: call hl.rand "
        "four times with different seeds"
    ),
    "float4_e2m1fn_x2_to_float32": (
        "unpacking fp4 pairs is not implemented yet: split the bytes with `x & 15` and "
        "`x >> 4` and look the codes up in a table of the 16 values"
    ),
    "dot_scaled": (
        "block-scaled (microscaling) matrix products need the GPU's MX units, which neither "
        "CPU mode has: dequantize the operands (multiply by their scales) and use tc.dot"
    ),
}


def refusal(name: str) -> UnsupportedOperation:
    """The error a use of the refused name `name` raises (located by the caller)."""
    return UnsupportedOperation(f"hl.{name} is not supported by tilecraft: {REASONS[name]}")


def _refuse(name: str) -> NoReturn:
    raise UnsupportedOperation(refusal(name).message, user_loc())


def signal(*args: Any, **kwargs: Any) -> NoReturn:
    """Helion's signal to other GPUs' programs through symmetric memory: refused."""
    _refuse("signal")


def wait(*args: Any, **kwargs: Any) -> NoReturn:
    """Helion's wait for a signal from other GPUs' programs: refused."""
    _refuse("wait")


def stacktensor_like(*args: Any, **kwargs: Any) -> NoReturn:
    """Helion's stack of tensors on several GPUs (symmetric memory): refused."""
    _refuse("stacktensor_like")


def start_async_remote_copy(*args: Any, **kwargs: Any) -> NoReturn:
    """Helion's copy to another GPU's memory: refused."""
    _refuse("start_async_remote_copy")


def wait_async_remote_copy(*args: Any, **kwargs: Any) -> NoReturn:
    """Helion's wait for a copy to another GPU's memory: refused."""
    _refuse("wait_async_remote_copy")


def inline_asm_elementwise(*args: Any, **kwargs: Any) -> NoReturn:
    """Helion's inline PTX assembly applied elementwise: refused."""
    _refuse("inline_asm_elementwise")


def inline_triton(*args: Any, **kwargs: Any) -> NoReturn:
    """Helion's inline Triton source: refused."""
    _refuse("inline_triton")


def triton_kernel(*args: Any, **kwargs: Any) -> NoReturn:
    """Helion's call of a `@triton.jit` function from device code: refused."""
    _refuse("triton_kernel")


def dot_scaled(*args: Any, **kwargs: Any) -> NoReturn:
    """Helion's block-scaled (MX format) matrix product: refused."""
    _refuse("dot_scaled")


def rand4x(*args: Any, **kwargs: Any) -> NoReturn:
    """Helion's four random streams from one Philox call: not implemented yet."""
    _refuse("rand4x")


def float4_e2m1fn_x2_to_float32(*args: Any, **kwargs: Any) -> NoReturn:
    """Helion's unpacking of two fp4 (e2m1) values a byte: not implemented yet."""
    _refuse("float4_e2m1fn_x2_to_float32")


class _Refused:
    """A refused class of Helion's: making one is refused."""

    name = ""

    def __new__(cls, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(cls.name)


class StackTensor(_Refused):
    """Helion's stack of tensors on several GPUs: refused."""

    name = "StackTensor"


class ProcessGroupName(_Refused):
    """Helion's mark of an argument naming a process group: refused."""

    name = "ProcessGroupName"


class AsyncCopyDescriptor(_Refused):
    """Helion's handle of a copy to another GPU: refused."""

    name = "AsyncCopyDescriptor"


# the device compiler's lookup: each refused callable and its name
REFUSED: dict[object, str] = {
    fn: name for name, fn in list(globals().items()) if name in REASONS and callable(fn)
}
