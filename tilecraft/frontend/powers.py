"""Powers and rounding to decimals, as PyTorch computes them: `x ** n` by repeated
squaring for small integer exponents (exact, the sign of a negative base kept), `c ** tile`
through exp2, and `torch.round(x, decimals=n)` by scaling."""

from __future__ import annotations

import math
from typing import Any

import torch

from tilecraft.exc import DtypeError, UnsupportedOperation
from tilecraft.frontend.builder import Builder, Operand, compute_dtype, promote
from tilecraft.frontend.ops import OPS, op
from tilecraft.ir.nodes import Value


@op("round")
def _round(b: Builder, x: Value, *, decimals: int = 0) -> Value:
    """`torch.round(x, decimals=n)` as PyTorch computes it, in float32 for 16-bit floats:
    round(x * 10**n) / 10**n, or round(x / 10**-n) * 10**-n for a negative n (halves to
    even, and what the scaling overflows or rounds away, too)."""
    if type(decimals) is not int:
        raise UnsupportedOperation(f"round(decimals={decimals!r}) needs a constant int", b.loc)
    if decimals == 0 or not isinstance(x, Value):
        return b.elementwise("round", x)
    if not x.type.dtype.is_floating_point:
        raise DtypeError(
            f"round(decimals=...) of a {x.type.dtype} tile (PyTorch refuses too)", b.loc
        )
    wide = b.cast(x, compute_dtype(x.type.dtype))
    scale = _power_of_ten(abs(decimals), wide.type.dtype)  # type: ignore[union-attr]
    if decimals > 0:
        out = b.elementwise(
            "truediv", b.elementwise("round", b.elementwise("mul", wide, scale)), scale
        )
    else:
        out = b.elementwise(
            "mul", b.elementwise("round", b.elementwise("truediv", wide, scale)), scale
        )
    return b.cast(out, x.type.dtype)  # type: ignore[return-value]


def _power_of_ten(n: int, dtype: torch.dtype) -> float:
    """10**n as PyTorch holds it in `dtype` (float32: inf past 10**38). Rounded here: Triton
    reads a Python float beyond float32's range as a float64, whose product would not
    overflow as PyTorch's does."""
    exact = 10.0**n if n <= 308 else math.inf
    return float(torch.tensor(exact, dtype=torch.float64).to(dtype).item())


@op("pow", "float_power")
def _pow(b: Builder, x: Operand, y: Operand) -> Value:
    """`x ** y` with torch.pow's rules: exact products for small integer exponents, and
    the sign of a negative base kept for odd integer exponents."""
    if not isinstance(x, Value):
        return _scalar_pow(b, x, y)
    if isinstance(y, Value):
        if not promote(x, y).is_floating_point:
            raise UnsupportedOperation("a tile exponent needs float tiles: cast with .float()")
        out = b.elementwise("pow", x, y, dtype=promote(x, y))
        return _scalar_special_cases(b, x, y, out) if y.type.rank == 0 else out
    integers = isinstance(y, int) and not x.type.dtype.is_floating_point  # exact, wrapping
    if integers or (float(y).is_integer() and abs(y) <= 64):
        return _integer_pow(b, x, int(y), float_exponent=isinstance(y, float))
    if y == 0.5:
        return OPS["sqrt"](b, x)
    if y == -0.5:
        return OPS["rsqrt"](b, x)
    return _float_pow(b, x, y)


def _scalar_special_cases(b: Builder, x: Value, y: Value, out: Value) -> Value:
    """`x ** s` for a runtime scalar `s`: PyTorch takes sqrt/rsqrt for 0.5/-0.5, whose
    results differ from pow's at -inf and -0."""
    rsqrt = OPS["where"](b, OPS["eq"](b, y, -0.5), OPS["rsqrt"](b, x), out)
    return OPS["where"](b, OPS["eq"](b, y, 0.5), OPS["sqrt"](b, x), rsqrt)  # type: ignore[no-any-return]


def _float_pow(b: Builder, x: Value, y: float) -> Value:
    dtype = promote(x, y)
    if not dtype.is_floating_point:
        x, dtype = b.cast(x, torch.float32), torch.float32  # type: ignore[assignment]
    return b.elementwise("pow", x, y, dtype=dtype)


def _integer_pow(b: Builder, x: Value, n: int, float_exponent: bool) -> Value:
    """`x ** n` by repeated squaring (a negative `n` divides 1 by the result)."""
    dtype = x.type.dtype if x.type.dtype.is_floating_point or not float_exponent else torch.float32
    if n < 0 and not dtype.is_floating_point:
        raise DtypeError("integers to negative integer powers are not allowed", b.loc)
    if n == 0:  # 1 everywhere, NaN included, as torch.pow
        return b.op("full", (), dtype, x.type.dims, hint="ones", value=1)
    result: Any = None
    square: Any = b.cast(x, compute_dtype(dtype))
    k = abs(n)
    while k:
        if k & 1:
            result = square if result is None else b.elementwise("mul", result, square)
        k >>= 1
        if k:
            square = b.elementwise("mul", square, square)
    assert isinstance(result, Value)
    if n < 0:
        result = b.elementwise("truediv", 1.0, result)
    return b.cast(result, dtype)  # type: ignore[return-value]


def _scalar_pow(b: Builder, base: Operand, y: Operand) -> Value:
    """`c ** tile`: exp2(y * log2(c)) for a positive constant base. An int to the power of
    an integer tile is an integer in PyTorch (wrapping): refused, not rounded through floats."""
    if not isinstance(y, Value) or not isinstance(base, (int, float)) or base <= 0:
        raise UnsupportedOperation("`c ** tile` needs a positive constant base c", b.loc)
    if not isinstance(base, float) and not y.type.dtype.is_floating_point:
        raise UnsupportedOperation(
            f"`{base} ** tile` of an integer tile is an integer power: write the base as a"
            f" float ({float(base)!r}) or cast the tile with .float()",
            b.loc,
        )
    yf = b.cast(y, compute_dtype(promote(y, 1.0)))
    out = OPS["exp2"](b, b.elementwise("mul", yf, math.log2(base)))
    return b.cast(out, promote(y, 1.0))  # type: ignore[return-value]
