"""Activations and other composite elementwise functions, lowered to the op table's ops.

Each computes as PyTorch's kernels do: 16-bit floats in float32, float64 in float64,
integers as float32, the result rounded once to the input's float dtype. Eager mode runs
PyTorch's own functions, so these formulas are held to them by the tests.
"""

from __future__ import annotations

import math

import torch

from tilecraft.exc import UnsupportedOperation
from tilecraft.frontend.builder import Builder, compute_dtype
from tilecraft.frontend.ops import OPS, op
from tilecraft.ir.nodes import Value

LN2 = math.log(2.0)


def _wide(b: Builder, x: Value) -> Value:
    """`x` in the dtype PyTorch computes it in (float32 for 16-bit floats and integers)."""
    dtype = x.type.dtype
    return b.cast(x, compute_dtype(dtype) if dtype.is_floating_point else torch.float32)  # type: ignore[return-value]


def _narrow(b: Builder, y: Value, x: Value) -> Value:
    """`y` in the result dtype of a float function of `x`."""
    dtype = x.type.dtype if x.type.dtype.is_floating_point else torch.float32
    return b.cast(y, dtype)  # type: ignore[return-value]


@op("silu")
def _silu(b: Builder, x: Value) -> Value:
    xf = _wide(b, x)
    return _narrow(b, b.elementwise("mul", xf, OPS["sigmoid"](b, xf)), x)


@op("gelu")
def _gelu(b: Builder, x: Value, approximate: str = "none") -> Value:
    xf = _wide(b, x)
    if approximate == "tanh":
        cube = b.elementwise("mul", b.elementwise("mul", xf, xf), xf)
        inner = b.elementwise("add", xf, b.elementwise("mul", cube, 0.044715))
        t = OPS["tanh"](b, b.elementwise("mul", inner, math.sqrt(2.0 / math.pi)))
    elif approximate == "none":
        t = OPS["erf"](b, b.elementwise("mul", xf, 1.0 / math.sqrt(2.0)))
    else:
        raise UnsupportedOperation(f"gelu(approximate={approximate!r})", b.loc)
    half = b.elementwise("mul", xf, 0.5)
    return _narrow(b, b.elementwise("mul", half, b.elementwise("add", t, 1.0)), x)


@op("ndtr")
def _ndtr(b: Builder, x: Value) -> Value:
    """`torch.special.ndtr`, the standard normal CDF, as PyTorch's kernel computes it:
    0.5 * (1 + erf(x / sqrt(2))), which loses the far lower tail to the cancellation
    (ndtr(-8) is 0 in float32; 0.5 * erfc(-x / sqrt(2)) keeps it)."""
    xf = _wide(b, x)
    t = OPS["erf"](b, b.elementwise("mul", xf, 1.0 / math.sqrt(2.0)))
    return _narrow(b, b.elementwise("mul", b.elementwise("add", t, 1.0), 0.5), x)


def _softplus_of(b: Builder, xf: Value) -> Value:
    """log(1 + exp(x)), computed in `xf`'s dtype."""
    return OPS["log1p"](b, OPS["exp"](b, xf))  # type: ignore[no-any-return]


@op("softplus")
def _softplus(b: Builder, x: Value, beta: float = 1.0, threshold: float = 20.0) -> Value:
    """PyTorch's: x where x * beta > threshold, else log1p(exp(x * beta)) / beta."""
    if not isinstance(beta, (int, float)) or not isinstance(threshold, (int, float)):
        raise UnsupportedOperation("softplus(beta=, threshold=) need constant numbers", b.loc)
    xf = _wide(b, x)
    scaled = xf if beta == 1 else b.elementwise("mul", xf, float(beta))
    soft = _softplus_of(b, scaled)
    soft = soft if beta == 1 else b.elementwise("truediv", soft, float(beta))
    above = b.elementwise("gt", scaled, float(threshold), dtype=torch.bool)
    return _narrow(b, b.elementwise("where", above, xf, soft), x)


@op("logsigmoid")
def _logsigmoid(b: Builder, x: Value) -> Value:
    """PyTorch's: min(x, 0) - log1p(exp(-|x|)) (no overflow either way)."""
    xf = _wide(b, x)
    tail = _softplus_of(b, OPS["neg"](b, OPS["abs"](b, xf)))
    return _narrow(b, b.elementwise("sub", b.elementwise("minimum", xf, 0.0), tail), x)


@op("mish")
def _mish(b: Builder, x: Value) -> Value:
    """PyTorch's: x * tanh(log1p(exp(x)))."""
    xf = _wide(b, x)
    return _narrow(b, b.elementwise("mul", xf, OPS["tanh"](b, _softplus_of(b, xf))), x)


def _hyperbolic(b: Builder, x: Value, fn: str, combine: str) -> Value:
    """(fn(|x|) combine fn(-|x|)) / 2, or e^(|x|/2) * e^(|x|/2) / 2 for |x| past 20, where
    the other term is below an ulp and exp(|x|) alone would overflow (cosh(89) is finite;
    exp(|x| - ln 2) would round |x| - ln 2, 4e-6 off there)."""
    a = OPS["abs"](b, x)
    near = b.elementwise(
        "mul", b.elementwise(combine, OPS[fn](b, a), OPS[fn](b, OPS["neg"](b, a))), 0.5
    )
    half = OPS["exp"](b, b.elementwise("mul", a, 0.5))
    far = b.elementwise("mul", half, b.elementwise("mul", half, 0.5))
    return b.elementwise("where", b.elementwise("gt", a, 20.0, dtype=torch.bool), far, near)


def _odd(b: Builder, x: Value, magnitude_result: Value) -> Value:
    """f(x) for an odd f from f(|x|): the sign of x put back, zeros' signs too."""
    negative = b.elementwise("lt", x, 0.0, dtype=torch.bool)
    zero = b.elementwise("eq", x, 0.0, dtype=torch.bool)
    signed = b.elementwise("where", negative, OPS["neg"](b, magnitude_result), magnitude_result)
    return b.elementwise("where", zero, x, signed)


@op("sinh")
def _sinh(b: Builder, x: Value) -> Value:
    """From expm1 (exact near 0), with x's sign."""
    xf = _wide(b, x)
    return _narrow(b, _odd(b, xf, _hyperbolic(b, xf, "expm1", "sub")), x)


@op("cosh")
def _cosh(b: Builder, x: Value) -> Value:
    xf = _wide(b, x)
    return _narrow(b, _hyperbolic(b, xf, "exp", "add"), x)


@op("frac")
def _frac(b: Builder, x: Value) -> Value:
    """x - trunc(x), with x's sign (NaN for infinities, as PyTorch)."""
    if not x.type.dtype.is_floating_point:
        raise UnsupportedOperation(f"frac of a {x.type.dtype} tile (PyTorch refuses too)", b.loc)
    xf = _wide(b, x)
    return _narrow(b, b.elementwise("sub", xf, OPS["trunc"](b, xf)), x)


def _log_twice(b: Builder, magnitude: Value) -> Value:
    """log(2|x|): asinh and acosh of |x| past 1e10, where x * x would overflow."""
    return b.elementwise("add", OPS["log"](b, magnitude), LN2)


@op("asinh", "arcsinh")
def _asinh(b: Builder, x: Value) -> Value:
    """log1p(|x| + x^2 / (1 + sqrt(1 + x^2))) with x's sign: exact near 0."""
    xf = _wide(b, x)
    a = OPS["abs"](b, xf)
    square = b.elementwise("mul", a, a)
    root = OPS["sqrt"](b, b.elementwise("add", square, 1.0))
    near = OPS["log1p"](
        b,
        b.elementwise("add", a, b.elementwise("truediv", square, b.elementwise("add", root, 1.0))),
    )
    far = b.elementwise("gt", a, 1e10, dtype=torch.bool)
    return _narrow(b, _odd(b, xf, b.elementwise("where", far, _log_twice(b, a), near)), x)


@op("acosh", "arccosh")
def _acosh(b: Builder, x: Value) -> Value:
    """log1p(t + sqrt(2t + t^2)) with t = x - 1 (exact near 1; NaN below 1)."""
    xf = _wide(b, x)
    t = b.elementwise("sub", xf, 1.0)
    root = OPS["sqrt"](
        b, b.elementwise("add", b.elementwise("mul", t, 2.0), b.elementwise("mul", t, t))
    )
    near = OPS["log1p"](b, b.elementwise("add", t, root))
    far = b.elementwise("gt", xf, 1e10, dtype=torch.bool)
    result = b.elementwise("where", far, _log_twice(b, xf), near)
    below = b.elementwise("lt", xf, 1.0, dtype=torch.bool)
    return _narrow(b, b.elementwise("where", below, math.nan, result), x)


@op("atanh", "arctanh")
def _atanh(b: Builder, x: Value) -> Value:
    """log1p(2x / (1 - x)) / 2: exact near 0, inf at 1, NaN past it."""
    xf = _wide(b, x)
    ratio = b.elementwise("truediv", b.elementwise("mul", xf, 2.0), b.elementwise("sub", 1.0, xf))
    return _narrow(b, b.elementwise("mul", OPS["log1p"](b, ratio), 0.5), x)


@op("dropout")
def _dropout(b: Builder, input: Value, p: float = 0.5, training: bool = True) -> Value:  # noqa: A002
    """`F.dropout(x, p, training=False)` is `x` (a model's eval mode); training, it needs
    a seed for the same numbers in both modes, and is refused saying what to write."""
    if training is not False:
        instead = "`torch.where(tc.rand([...], seed) >= p, x / (1 - p), 0.0)`"
        raise UnsupportedOperation(f"`dropout` in training on tiles: use {instead}", b.loc)
    return input
