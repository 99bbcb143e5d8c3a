"""Piecewise activations (torch.nn.functional's), lowered to the op table's ops:
leaky_relu, rrelu (eval), elu, selu, celu, hardtanh, relu6, hardsigmoid, hardswish, softsign,
tanhshrink, threshold, hardshrink, softshrink, logit.

Each follows PyTorch's kernel: the same comparison picks each piece (so NaN and the signs
of zeros come out as PyTorch's), 16-bit floats compute in float32 and round once.
"""

from __future__ import annotations

from typing import Any

import torch

from tilecraft.exc import DtypeError, UnsupportedOperation
from tilecraft.frontend.activations import _narrow, _wide
from tilecraft.frontend.builder import Builder
from tilecraft.frontend.ops import OPS, op
from tilecraft.ir.nodes import Value

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _numbers(b: Builder, name: str, *values: Any) -> None:
    """Refuse parameters that are not constants (PyTorch takes numbers for these)."""
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise UnsupportedOperation(f"{name}'s parameters must be numbers", b.loc)


def _floats_only(b: Builder, name: str, x: Value) -> None:
    """Refuse integer tiles where PyTorch's kernel does."""
    if not x.type.dtype.is_floating_point:
        raise DtypeError(
            f"{name} needs float tiles, not {x.type.dtype} (PyTorch refuses too)", b.loc
        )


def _pick(b: Builder, test: str, xf: Value, bound: Any, yes: Any, no: Any) -> Value:
    """where(xf `test` bound, yes, no)."""
    return b.elementwise("where", b.elementwise(test, xf, bound, dtype=torch.bool), yes, no)


@op("leaky_relu")
def _leaky_relu(b: Builder, x: Value, negative_slope: float = 0.01, inplace: bool = False) -> Value:
    _floats_only(b, "leaky_relu", x)
    _numbers(b, "leaky_relu", negative_slope)
    xf = _wide(b, x)
    return _narrow(b, _pick(b, "gt", xf, 0.0, xf, b.elementwise("mul", xf, negative_slope)), x)


def _exponential(
    b: Builder, x: Value, alpha: float, scale: float = 1.0, input_scale: float = 1.0
) -> Value:
    """PyTorch's elu kernel: x * scale above 0, expm1(x * input_scale) * alpha * scale at
    or below it."""
    _floats_only(b, "elu", x)
    xf = _wide(b, x)
    inner = xf if input_scale == 1 else b.elementwise("mul", xf, input_scale)
    below = b.elementwise("mul", OPS["expm1"](b, inner), alpha * scale)
    above = xf if scale == 1 else b.elementwise("mul", xf, scale)
    return _narrow(b, _pick(b, "le", xf, 0.0, below, above), x)


@op("rrelu")
def _rrelu(
    b: Builder,
    x: Value,
    lower: float = 1 / 8,
    upper: float = 1 / 3,
    training: bool = False,
    inplace: bool = False,
) -> Value:
    """Eval mode's rrelu: leaky_relu with the slopes' mean (training draws random slopes:
    refused, as tilecraft's random numbers take a seed)."""
    _numbers(b, "rrelu", lower, upper)
    if training is not False:
        raise UnsupportedOperation("rrelu in training (random slopes) on tiles", b.loc)
    return _leaky_relu(b, x, (lower + upper) / 2)


@op("elu")
def _elu(b: Builder, x: Value, alpha: float = 1.0, inplace: bool = False) -> Value:
    _numbers(b, "elu", alpha)
    return _exponential(b, x, alpha)


@op("selu")
def _selu(b: Builder, x: Value, inplace: bool = False) -> Value:
    return _exponential(b, x, SELU_ALPHA, SELU_SCALE)


@op("celu")
def _celu(b: Builder, x: Value, alpha: float = 1.0, inplace: bool = False) -> Value:
    _numbers(b, "celu", alpha)
    return _exponential(b, x, alpha, input_scale=1.0 / alpha)


@op("hardtanh")
def _hardtanh(
    b: Builder, x: Value, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False
) -> Value:
    _numbers(b, "hardtanh", min_val, max_val)
    if not x.type.dtype.is_floating_point:  # PyTorch casts the bounds to the tile's dtype
        min_val, max_val = int(min_val), int(max_val)
    return OPS["clamp"](b, x, min_val, max_val)  # type: ignore[no-any-return]


@op("relu6")
def _relu6(b: Builder, x: Value, inplace: bool = False) -> Value:
    return _hardtanh(b, x, 0.0, 6.0)


def _ramp(b: Builder, xf: Value) -> Value:
    """min(max(x + 3, 0), 6) / 6, hardsigmoid's and hardswish's ramp."""
    shifted = b.elementwise("add", xf, 3.0)
    return b.elementwise("truediv", OPS["clamp"](b, shifted, 0.0, 6.0), 6.0)


@op("hardsigmoid")
def _hardsigmoid(b: Builder, x: Value, inplace: bool = False) -> Value:
    _floats_only(b, "hardsigmoid", x)
    return _narrow(b, _ramp(b, _wide(b, x)), x)


@op("hardswish")
def _hardswish(b: Builder, x: Value, inplace: bool = False) -> Value:
    _floats_only(b, "hardswish", x)
    xf = _wide(b, x)
    shifted = OPS["clamp"](b, b.elementwise("add", xf, 3.0), 0.0, 6.0)
    return _narrow(b, b.elementwise("truediv", b.elementwise("mul", xf, shifted), 6.0), x)


# torch.nn.functional writes these two in Python, op by op (rounding each to the tile's
# dtype, integer abs wrapping at -2**31): so do their lowerings
@op("softsign")
def _softsign(b: Builder, x: Value) -> Value:
    return OPS["truediv"](b, x, b.elementwise("add", OPS["abs"](b, x), 1))  # type: ignore[no-any-return]


@op("tanhshrink")
def _tanhshrink(b: Builder, x: Value) -> Value:
    return b.elementwise("sub", x, OPS["tanh"](b, x))


@op("threshold")
def _threshold(
    b: Builder, x: Value, threshold: float, value: float, inplace: bool = False
) -> Value:
    _numbers(b, "threshold", threshold, value)
    if not x.type.dtype.is_floating_point:  # PyTorch casts both to the tile's dtype
        threshold, value = int(threshold), int(value)
    return _pick(b, "le", x, threshold, value, x)


@op("hardshrink")
def _hardshrink(b: Builder, x: Value, lambd: float = 0.5) -> Value:
    """0 inside [-lambd, lambd], x outside (NaN stays)."""
    _floats_only(b, "hardshrink", x)
    _numbers(b, "hardshrink", lambd)
    inside = b.elementwise(
        "and",
        b.elementwise("ge", x, -lambd, dtype=torch.bool),
        b.elementwise("le", x, lambd, dtype=torch.bool),
        dtype=torch.bool,
    )
    return b.elementwise("where", inside, 0.0, x)


@op("softshrink")
def _softshrink(b: Builder, x: Value, lambd: float = 0.5) -> Value:
    """x - lambd above lambd, x + lambd below -lambd, 0 between; NaN stays NaN. (Between,
    PyTorch's vectorized CPU kernel gives +0.0, its scalar one, for a tensor's last few
    elements, x * 0: -0.0 for negative x; this follows the vectorized one.)"""
    _floats_only(b, "softshrink", x)
    _numbers(b, "softshrink", lambd)
    xf = _wide(b, x)
    between = _pick(b, "ne", xf, xf, xf, 0.0)  # NaN, or 0
    below = _pick(b, "lt", xf, -lambd, b.elementwise("add", xf, lambd), between)
    return _narrow(b, _pick(b, "gt", xf, lambd, b.elementwise("sub", xf, lambd), below), x)


@op("logit")
def _logit(b: Builder, x: Value, eps: float | None = None) -> Value:
    """log(x / (1 - x)), x first clamped to [eps, 1 - eps] when eps is given (the bounds in
    float32 for 16-bit tiles, as PyTorch's CUDA kernel holds them; its CPU kernel rounds
    them to the tile's dtype, where 1 - 1e-3 is 1 in bfloat16)."""
    xf = _wide(b, x)
    if eps is not None:
        _numbers(b, "logit", eps)
        xf = OPS["clamp"](b, xf, eps, 1.0 - eps)
    ratio = b.elementwise("truediv", xf, b.elementwise("sub", 1.0, xf))
    return _narrow(b, OPS["log"](b, ratio), x)
