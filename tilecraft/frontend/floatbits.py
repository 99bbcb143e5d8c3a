"""Functions of a float's parts and neighbours, lowered to the op table's ops: frexp,
ldexp, nextafter, isclose. The bit-level ones work on the float's bits read as an
integer (`x.view(int)`), so they are exact, subnormals included."""

from __future__ import annotations

from typing import NamedTuple

import torch

from tilecraft.exc import DtypeError, UnsupportedOperation
from tilecraft.frontend.builder import Builder, Operand, promote
from tilecraft.frontend.ops import OPS, op
from tilecraft.frontend.piecewise import _floats_only
from tilecraft.frontend.special import _number, _scalar
from tilecraft.frontend.views import bitcast
from tilecraft.ir.nodes import Value

# float dtype -> (its bits' int dtype, mantissa bits, exponent mask, exponent of [0.5, 1))
LAYOUTS = {
    torch.float64: (torch.int64, 52, 0x7FF, 1022),
    torch.float32: (torch.int32, 23, 0xFF, 126),
    torch.float16: (torch.int16, 10, 0x1F, 14),
    torch.bfloat16: (torch.int16, 7, 0xFF, 126),
}


class MantissaExponent(NamedTuple):
    """What `torch.frexp` returns: `.mantissa` and `.exponent`, or unpack it."""

    mantissa: Value
    exponent: Value


def _e(b: Builder, name: str, *operands: Operand) -> Value:
    return b.elementwise(name, *operands)


def _bool(b: Builder, name: str, *operands: Operand) -> Value:
    """A comparison or a logical op of bool tiles."""
    return b.elementwise(name, *operands, dtype=torch.bool)


@op("frexp")
def _frexp(b: Builder, input: Value) -> MantissaExponent:  # noqa: A002
    """x = mantissa * 2^exponent, the mantissa's magnitude in [0.5, 1) and the exponent an
    int32: the exponent field read from the bits (of float32's for 16-bit floats), and the
    mantissa the same bits with that field set to 2^-1's. Subnormals are first scaled into
    the normal range; 0, inf and NaN are their own mantissa, with exponent 0."""
    _floats_only(b, "frexp", input)
    dtype = input.type.dtype
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    ints, bits, mask, half = LAYOUTS[wide]
    x = b.cast(input, wide)
    tiny = _bool(b, "lt", OPS["abs"](b, x), torch.finfo(wide).tiny)
    scaled = _e(b, "where", tiny, _e(b, "mul", x, 2.0 ** (bits + 1)), x)
    word = bitcast(b, scaled, ints)  # type: ignore[arg-type]
    field = _e(b, "and", _e(b, "rshift", word, bits), mask)
    exponent = _e(b, "sub", field, _e(b, "where", tiny, half + bits + 1, half))
    kept = _e(b, "and", word, ~(mask << bits))
    mantissa = bitcast(b, _e(b, "or", kept, half << bits), wide)
    special = _bool(b, "or", _bool(b, "eq", x, 0.0), OPS["isinf"](b, x))
    special = _bool(b, "or", special, OPS["isnan"](b, x))
    mantissa = _e(b, "where", special, x, mantissa)
    exponent = _e(b, "where", special, 0, exponent)
    return MantissaExponent(b.cast(mantissa, dtype), b.cast(exponent, torch.int32))  # type: ignore[arg-type]


@op("ldexp")
def _ldexp(b: Builder, input: Value, other: Value) -> Value:  # noqa: A002
    """input * 2^other in the operands' promoted dtype (float32 for integers), as PyTorch's:
    an integer exponent scales exactly, rounding once (C's ldexp: 2^-149 * 2^200 is finite
    in float32; the scaling is in float64, in two halves for float64), a float one is
    `input * 2.0 ** other`, the power in `other`'s dtype (inf at 200.0 in float32)."""
    if other.type.dtype.is_floating_point:
        return OPS["mul"](b, input, OPS["pow"](b, 2.0, other))  # type: ignore[no-any-return]
    dtype = promote(input, other)
    dtype = dtype if dtype.is_floating_point else torch.float32
    x, e = b.cast(input, torch.float64), b.cast(other, torch.float64)
    half = OPS["floor"](b, _e(b, "mul", e, 0.5))
    for power in (half, _e(b, "sub", e, half)):
        x = _e(b, "mul", x, OPS["exp2"](b, power))
    return b.cast(x, dtype)  # type: ignore[return-value]


@op("nextafter")
def _nextafter(b: Builder, input: Value, other: Value) -> Value:  # noqa: A002
    """The float after `input` toward `other`: its bits one up (away from 0) or down; from
    a zero, the smallest subnormal with `other`'s sign; `other` where the two are equal
    (-0.0 toward +0.0 is +0.0), NaN where either is."""
    dtype = promote(input, other)
    if not dtype.is_floating_point or dtype not in LAYOUTS:
        raise DtypeError(f"nextafter needs float tiles, not {dtype}", b.loc)
    x, y = b.cast(input, dtype), b.cast(other, dtype)
    ints = LAYOUTS[dtype][0]
    word = bitcast(b, x, ints)  # type: ignore[arg-type]
    away = _bool(b, "eq", _bool(b, "gt", y, x), _bool(b, "gt", x, 0.0))
    delta = b.cast(_e(b, "where", away, 1, -1), ints)
    step = bitcast(b, _e(b, "add", word, delta), dtype)  # type: ignore[arg-type]
    sign = -(2 ** (8 * dtype.itemsize - 1))  # the sign bit, as a signed integer
    smallest = _e(b, "where", _bool(b, "gt", y, 0.0), 1, sign + 1)  # (as bits)
    from_zero = bitcast(b, b.cast(smallest, ints), dtype)  # type: ignore[arg-type]
    out = _e(b, "where", _bool(b, "eq", x, 0.0), from_zero, step)
    out = _e(b, "where", _bool(b, "eq", x, y), y, out)
    nan = _bool(b, "or", OPS["isnan"](b, x), OPS["isnan"](b, y))
    return _e(b, "where", nan, _e(b, "add", x, y), out)


@op("isclose")
def _isclose(
    b: Builder,
    input: Value,  # noqa: A002
    other: Operand,
    rtol: float = 1e-05,
    atol: float = 1e-08,
    equal_nan: bool = False,
) -> Value:
    """PyTorch's: equal, or both NaN (`equal_nan`), or a finite |input - other| at most
    atol + |rtol * other|, each step in the operands' dtype as PyTorch's ops compute it
    (integers and bools in float32: no wrapped differences)."""
    if not all(type(t) in (int, float) or _scalar(t) for t in (rtol, atol)):
        raise UnsupportedOperation("isclose(rtol=, atol=) need numbers", b.loc)
    x, y = (b.cast(v, torch.float32) if _not_float(v) else v for v in (input, other))
    close = _bool(b, "eq", x, y)
    if equal_nan and promote(x, y).is_floating_point:
        both = _bool(b, "and", OPS["isnan"](b, x), _nan(b, y))
        close = _bool(b, "or", close, both)
    allowed = _e(b, "add", OPS["abs"](b, _e(b, "mul", y, _number(rtol))), _number(atol))
    actual = OPS["abs"](b, _e(b, "sub", x, y))
    within = _bool(b, "le", actual, allowed)
    within = _bool(b, "and", OPS["isfinite"](b, actual), within)
    return _bool(b, "or", close, within)


def _not_float(v: Operand) -> bool:
    return isinstance(v, Value) and not v.type.dtype.is_floating_point


def _nan(b: Builder, y: Operand) -> Operand:
    return OPS["isnan"](b, y) if isinstance(y, Value) else y != y  # type: ignore[comparison-overlap]
