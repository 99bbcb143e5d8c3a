"""Triton spellings shared by the code generator: dtypes, literals, reduction identities.

Elementwise ops are emitted from their entries in the op table (`tilecraft.ir.ops`)."""

from __future__ import annotations

import math

import torch

# whether Triton's CPU interpreter will run the generated code (TRITON_INTERPRET=1)
from tilecraft.codegen import fp8
from tilecraft.runtime.cpu import interpreter_set as triton_interpret

TL_DTYPES = {
    torch.float32: "tl.float32",
    torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16",
    torch.float64: "tl.float64",
    torch.int8: "tl.int8",
    torch.int16: "tl.int16",
    torch.int32: "tl.int32",
    torch.int64: "tl.int64",
    torch.uint8: "tl.uint8",
    torch.bool: "tl.int1",
    torch.float8_e4m3fn: "tl.float8e4nv",  # Hopper's fp8 formats
    torch.float8_e5m2: "tl.float8e5",
}


def tl_dtype(dtype: torch.dtype) -> str:
    """The Triton name of a torch dtype."""
    return TL_DTYPES[dtype]


def literal(value: object) -> str:
    """A Python scalar as Triton source."""
    if isinstance(value, float):
        if math.isinf(value):
            return 'float("inf")' if value > 0 else '-float("inf")'
        if math.isnan(value):
            return 'float("nan")'
    return repr(value)


def wrapped(value: object, dtype: torch.dtype | None) -> object:
    """A Python int in an integer op of `dtype` as PyTorch takes it: wrapped into the
    dtype's range (uint8 `x == -2` compares with 254, int8 `x + 300` adds 44), where
    Triton's interpreter refused a negative constant beside an unsigned tile."""
    if type(value) is not int or dtype is None or dtype.is_floating_point or dtype == torch.bool:
        return value
    bits = dtype.itemsize * 8
    value %= 2**bits
    return value - 2**bits if dtype.is_signed and value >= 2 ** (bits - 1) else value


# The integer of a float's bits, by width: Triton makes a zero of any constant equal to 0,
# so -0.0 is written as its bits (the sign bit alone) and bitcast.
_BITS = {1: "tl.int8", 2: "tl.int16", 4: "tl.int32", 8: "tl.int64"}


def typed_literal(value: float, dtype: torch.dtype, shape: str = "[]") -> str:
    """A float constant of `dtype` (a tile of `shape`), exactly: -0.0 keeps its sign, and a
    float64 keeps its digits (a bare `0.7` is a float32 in Triton, as a helper's argument)."""
    bits = dtype.itemsize * 8
    if value == 0 and math.copysign(1.0, value) < 0:
        sign = -(2 ** (bits - 1))
        return (
            f"tl.full({shape}, {sign}, {_BITS[dtype.itemsize]}).to({tl_dtype(dtype)}, bitcast=True)"
        )
    if dtype == torch.float64 or shape != "[]":
        return f"tl.full({shape}, {literal(value)}, {tl_dtype(dtype)})"
    return literal(value)


def convert(text: str, src: torch.dtype, dst: torch.dtype) -> str:
    """`text`, of dtype `src`, converted to `dst`. Triton's interpreter truncates float ->
    bfloat16 (and cannot convert ints to it): there, round to nearest even by hand, as
    PyTorch and the GPU do. It also misreads bfloat16 subnormals (3e-39 became 3.7e-40,
    1e-40 became 0): there, widen a bfloat16 by its bits (its bits are a float32's top half).
    Floats go to uint8 through int64, as in PyTorch (wrapping: -1.0 is 255, 300.0 is 44),
    where the GPU's own conversion would saturate; to int8 and int16 through int32, as C's
    casts in PyTorch's kernels go (a float past int16's range became 32767 in an int8 on
    the GPU, where PyTorch's CUDA kernels wrap int32's saturated value: -1). Fp8: see
    codegen/fp8.py."""
    if src in fp8.FORMATS and src != dst:  # (Triton converts fp8 to floats only)
        wide = fp8.widened(text, src) if triton_interpret() else f"{text}.to(tl.float32)"
        return wide if dst == torch.float32 else convert(wide, torch.float32, dst)
    if dst in fp8.FORMATS and src != dst:  # the GPU's own conversion saturates: not there
        wide = text if src == torch.float32 else convert(text, src, torch.float32)
        return fp8.narrowed(wide, dst)
    if src == torch.bfloat16 and triton_interpret():
        wide = (
            f"({text}.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)"
        )
        return wide if dst == torch.float32 else convert(wide, torch.float32, dst)
    if dst == torch.uint8 and src.is_floating_point:
        return f"{text}.to(tl.int64).to(tl.uint8)"
    if dst in (torch.int8, torch.int16) and src.is_floating_point:
        return f"{text}.to(tl.int32).to({tl_dtype(dst)})"
    if dst != torch.bfloat16 or src == torch.bfloat16:
        return f"{text}.to({tl_dtype(dst)})"
    wide = text if src == torch.float32 else f"{text}.to(tl.float32)"
    if not triton_interpret():
        return f"{wide}.to(tl.bfloat16)"
    bits = f"{wide}.to(tl.uint32, bitcast=True)"
    high = f"(({bits} + 0x7FFF + (({bits} >> 16) & 1)) >> 16)"
    return f"{high}.to(tl.uint16).to(tl.bfloat16, bitcast=True)"


TL_REDUCE = {
    "sum": "tl.sum",
    "max": "tl.max",
    "min": "tl.min",
    "argmax": "tl.argmax",
    "argmin": "tl.argmin",
}


def identity(kind: str, dtype: torch.dtype) -> str:
    """The neutral element of a reduction, used for masked-off lanes."""
    if kind == "sum":
        return "0"
    if kind == "prod":
        return "1"
    high = kind in ("min", "argmin")
    if dtype.is_floating_point:
        return literal(math.inf if high else -math.inf)
    if dtype == torch.bool:
        return "1" if high else "0"
    info = torch.iinfo(dtype)
    return str(info.max if high else info.min)
