"""Math functions of signs and of two operands, lowered to the op table's ops: signbit,
copysign, fmax/fmin, hypot, atan2, asin, acos, lerp, logaddexp(2), xlogy, xlog1py, entr,
log_ndtr, nan_to_num.

As in activations.py: 16-bit floats compute in float32 and round once at the end;
special values (NaN, infinities, signed zeros) follow PyTorch's kernels, which the mode
tests hold them to.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from tilecraft.exc import DtypeError, UnsupportedOperation
from tilecraft.frontend.activations import LN2
from tilecraft.frontend.builder import LOW_PRECISION, Builder, Operand, compute_dtype, promote
from tilecraft.frontend.ops import OPS, op, refuse_16_bits
from tilecraft.frontend.views import bitcast
from tilecraft.ir.nodes import Value

SIGNED = {2: torch.int16, 4: torch.int32, 8: torch.int64}  # float size -> its bits as int


def _where(b: Builder, cond: Value | bool, a: Operand, c: Operand) -> Operand:
    """torch.where, also of a condition known when compiling."""
    if isinstance(cond, bool):
        return a if cond else c
    return b.elementwise("where", cond, a, c)


def _eq(b: Builder, x: Operand, y: Operand) -> Value:
    return b.elementwise("eq", x, y, dtype=torch.bool)


def _either(b: Builder, x: Value, y: Value) -> Value:
    return b.elementwise("or", x, y, dtype=torch.bool)


def _floats(b: Builder, name: str, *operands: Operand, ints: bool = True) -> tuple:
    """The result dtype of float function `name` of `operands` (integers give float32, or
    are refused where PyTorch refuses them), and the operands in its compute dtype."""
    dtype = promote(*operands)
    if not dtype.is_floating_point:
        if not ints:
            raise DtypeError(f"{name} needs float tiles, not {dtype} (PyTorch refuses too)", b.loc)
        dtype = torch.float32
    wide = compute_dtype(dtype)
    return dtype, [b.cast(o, wide) if isinstance(o, Value) else float(o) for o in operands]


def _done(b: Builder, result: Operand, dtype: torch.dtype) -> Value:
    """The result rounded once to its dtype."""
    return b.cast(result, dtype)  # type: ignore[return-value]


def _abs(b: Builder, x: Operand) -> Operand:
    return OPS["abs"](b, x) if isinstance(x, Value) else abs(x)


def _negated(b: Builder, x: Operand) -> Operand:
    return b.elementwise("mul", x, -1.0) if isinstance(x, Value) else -x


@op("signbit")
def _signbit(b: Builder, x: Value) -> Value:
    """The sign bit, set for -0.0 and negative NaN too: a float's bits read as a signed
    integer are negative exactly then."""
    dtype = x.type.dtype
    bits = bitcast(b, x, SIGNED[dtype.itemsize]) if dtype.is_floating_point else x
    return b.elementwise("lt", bits, 0, dtype=torch.bool)


def _negative(b: Builder, x: Operand) -> Value | bool:
    """Whether `x`'s sign bit is set (a Python bool for a number)."""
    return _signbit(b, x) if isinstance(x, Value) else math.copysign(1.0, x) < 0


def _with_sign(b: Builder, magnitude: Operand, of: Operand) -> Operand:
    """`magnitude` (not negative) with the sign of `of`."""
    return _where(b, _negative(b, of), _negated(b, magnitude), magnitude)


@op("angle")
def _angle(b: Builder, x: Value) -> Value:
    """The angle of a real number: pi below 0, else 0 (+0.0 at -0.0); NaN at NaN."""
    dtype, (xf,) = _floats(b, "angle", x)
    angle = _where(b, b.elementwise("lt", xf, 0.0, dtype=torch.bool), math.pi, 0.0)
    if x.type.dtype.is_floating_point:
        angle = _where(b, OPS["isnan"](b, xf), xf, angle)
    return _done(b, angle, dtype)


@op("copysign")
def _copysign(b: Builder, x: Operand, y: Operand) -> Value:
    dtype, (xf, yf) = _floats(b, "copysign", x, y)
    return _done(b, _with_sign(b, _abs(b, xf), yf), dtype)


def _ignoring_nan(keeps_first: str) -> Callable[..., Value]:
    """torch.fmax / fmin: the first operand where `keeps_first` holds (ties too: of two
    zeros, the first, as PyTorch's CPU kernels; the second in bfloat16, as they do there),
    else the second; a NaN loses to a number."""

    def handler(b: Builder, x: Operand, y: Operand) -> Value:
        if not all(isinstance(v, Value) and not v.weak for v in (x, y)):  # (host floats too)
            name = "fmax" if keeps_first == "ge" else "fmin"
            raise UnsupportedOperation(f"torch.{name} of a number (PyTorch refuses it too)", b.loc)
        keeps = keeps_first[0] + "t" if promote(x, y) == torch.bfloat16 else keeps_first
        first = b.elementwise(keeps, x, y, dtype=torch.bool)
        picked: Operand = b.elementwise("where", first, x, y)
        for nan, other in ((y, x), (x, y)):
            if isinstance(nan, Value) and nan.type.dtype.is_floating_point:
                picked = _where(b, OPS["isnan"](b, nan), other, picked)
        return _done(b, picked, promote(x, y))

    return handler


OPS["fmax"], OPS["fmin"] = _ignoring_nan("ge"), _ignoring_nan("le")


@op("hypot")
def _hypot(b: Builder, x: Operand, y: Operand) -> Value:
    """sqrt(x^2 + y^2) without overflow: big * sqrt(1 + (small / big)^2); infinite when
    either operand is, even beside a NaN (C's hypot)."""
    dtype, (xf, yf) = _floats(b, "hypot", x, y, ints=False)
    ax, ay = _abs(b, xf), _abs(b, yf)
    big, small = OPS["maximum"](b, ax, ay), OPS["minimum"](b, ax, ay)
    ratio = b.elementwise("truediv", small, big)
    root = OPS["sqrt"](b, b.elementwise("add", b.elementwise("mul", ratio, ratio), 1.0))
    length = _where(b, _eq(b, big, 0.0), 0.0, b.elementwise("mul", big, root))
    infinite = [_eq(b, a, math.inf) for a in (ax, ay) if isinstance(a, Value)]
    on = infinite[0] if len(infinite) == 1 else _either(b, *infinite)
    return _done(b, _where(b, on, math.inf, length), dtype)


def _atan2_of(b: Builder, y: Operand, x: Operand) -> Operand:
    """C's atan2 in the compute dtype: atan of the smaller magnitude over the larger (in
    [0, 1]), moved to its octant; signed zeros and infinities as C gives them."""
    ax, ay = _abs(b, x), _abs(b, y)
    big, small = OPS["maximum"](b, ax, ay), OPS["minimum"](b, ax, ay)
    ratio = _where(b, _eq(b, small, math.inf), 1.0, b.elementwise("truediv", small, big))
    angle = OPS["atan"](b, _where(b, _eq(b, big, 0.0), 0.0, ratio))
    steep = b.elementwise("gt", ay, ax, dtype=torch.bool)
    angle = _where(b, steep, b.elementwise("sub", math.pi / 2, angle), angle)
    angle = _where(b, _negative(b, x), b.elementwise("sub", math.pi, angle), angle)
    signed = _with_sign(b, angle, y)
    for operand in (x, y):
        if isinstance(operand, Value):
            signed = _where(b, OPS["isnan"](b, operand), math.nan, signed)
    return signed


@op("atan2", "arctan2")
def _atan2(b: Builder, y: Operand, x: Operand) -> Value:
    dtype, (yf, xf) = _floats(b, "atan2", y, x)
    return _done(b, _atan2_of(b, yf, xf), dtype)


def _cosine_of(b: Builder, xf: Value) -> Value:
    """sqrt(1 - x^2) as sqrt((1 - x)(1 + x)): exact near |x| = 1 (NaN past it)."""
    product = b.elementwise("mul", b.elementwise("sub", 1.0, xf), b.elementwise("add", xf, 1.0))
    return OPS["sqrt"](b, product)  # type: ignore[no-any-return]


@op("asin", "arcsin")
def _asin(b: Builder, x: Value) -> Value:
    dtype, (xf,) = _floats(b, "asin", x)
    return _done(b, OPS["atan"](b, b.elementwise("truediv", xf, _cosine_of(b, xf))), dtype)


@op("acos", "arccos")
def _acos(b: Builder, x: Value) -> Value:
    dtype, (xf,) = _floats(b, "acos", x)
    return _done(b, _atan2_of(b, _cosine_of(b, xf), xf), dtype)


def _less_one(b: Builder, w: Operand, dtype: torch.dtype) -> Operand:
    """w - 1 in `dtype`: a number rounded to it first, as PyTorch converts the weight."""
    if isinstance(w, Value):
        return b.elementwise("sub", w, 1.0)
    return float(torch.tensor(w, dtype=dtype)) - 1.0  # exact, then rounded once


@op("lerp")
def _lerp(b: Builder, start: Operand, end: Operand, weight: Operand) -> Value:
    """PyTorch's: start + w * (end - start) for |w| < 0.5, else end - (end - start) * (1 -
    w), exact at both ends. Tiles of two dtypes are refused, as PyTorch refuses them (a
    float16 start and a float32 end compiled; the expression fuzzer's find)."""
    tiles = [start, end] + ([weight] if isinstance(weight, Value) and weight.type.rank else [])
    dtypes = {o.type.dtype for o in tiles if isinstance(o, Value)}
    if len(dtypes) > 1:
        names = " and ".join(sorted(str(d) for d in dtypes))
        raise DtypeError(f"lerp of {names} tiles (PyTorch needs one dtype: cast one)", b.loc)
    dtype, (s, e, w) = _floats(b, "lerp", start, end, weight, ints=False)
    diff = b.elementwise("sub", e, s)
    # one rounding each, as PyTorch's kernels fuse them (w - 1 is exactly -(1 - w))
    near = b.elementwise("fma", w, diff, s)
    far = b.elementwise("fma", _less_one(b, w, compute_dtype(dtype)), diff, e)
    small = (
        b.elementwise("lt", _abs(b, w), 0.5, dtype=torch.bool)
        if isinstance(w, Value)
        else abs(w) < 0.5
    )
    return _done(b, _where(b, small, near, far), dtype)


def _log_add(exp: str, scale: float) -> Callable[..., Value]:
    """torch.logaddexp (exp "exp", scale 1) or logaddexp2 ("exp2", 1 / ln 2): max(x, y) +
    log1p(exp(-|x - y|)) * scale; x itself where both are the same infinity."""

    def handler(b: Builder, x: Operand, y: Operand) -> Value:
        dtype, (xf, yf) = _floats(b, "logaddexp", x, y, ints=False)
        gap = OPS["neg"](b, _abs(b, b.elementwise("sub", xf, yf)))
        tail = OPS["log1p"](b, OPS[exp](b, gap))
        tail = tail if scale == 1 else b.elementwise("mul", tail, scale)
        total = b.elementwise("add", OPS["maximum"](b, xf, yf), tail)
        same = b.elementwise("and", OPS["isinf"](b, xf), _eq(b, xf, yf), dtype=torch.bool)
        return _done(b, _where(b, same, xf, total), dtype)

    return handler


OPS["logaddexp"], OPS["logaddexp2"] = _log_add("exp", 1.0), _log_add("exp2", 1 / LN2)


def _log_of(b: Builder, y: Operand, fn: str) -> Operand:
    """log(y) or log1p(y) (`fn`), of a number too (-inf at the pole, NaN below)."""
    if isinstance(y, Value):
        return OPS[fn](b, y)  # type: ignore[no-any-return]
    pole = 0.0 if fn == "log" else -1.0
    return getattr(math, fn)(y) if y > pole else (-math.inf if y == pole else math.nan)


def _x_times(fn: str) -> Callable[..., Value]:
    """torch.xlogy (`fn` "log") or xlog1py ("log1p"): x * fn(y), 0 where x is 0, NaN where
    y is NaN. For 16-bit floats as PyTorch's kernels (CPU and CUDA) compute it: fn(y)
    rounded to the dtype, then the product of it and x (a number rounded to the dtype too)."""

    def handler(b: Builder, x: Operand, y: Operand) -> Value:
        dtype, (xf, yf) = _floats(b, "x" + fn + "y", x, y)
        log = _log_of(b, yf, fn)
        if dtype in LOW_PRECISION:
            if isinstance(log, Value):
                log = b.cast(b.cast(log, dtype), torch.float32)
            else:
                log = getattr(torch, fn)(torch.tensor(yf, dtype=dtype)).item()
            xf = xf if isinstance(xf, Value) else torch.tensor(xf, dtype=dtype).item()
        product = b.elementwise("mul", xf, log)
        if isinstance(xf, Value):
            zero: Operand = _where(b, _eq(b, xf, 0.0), 0.0, product)
        else:
            zero = 0.0 if xf == 0 else product
        if not isinstance(yf, Value):
            nan = math.isnan(yf)
            return _done(b, b.elementwise("add", product, math.nan) if nan else zero, dtype)
        return _done(b, _where(b, OPS["isnan"](b, yf), math.nan, zero), dtype)

    return handler


OPS["xlogy"], OPS["xlog1py"] = _x_times("log"), _x_times("log1p")


@op("entr")
def _entr(b: Builder, x: Value) -> Value:
    """torch.special.entr: -x log(x) above 0, 0 at 0, -inf below, NaN at NaN."""
    dtype, (xf,) = _floats(b, "entr", x)
    value = OPS["neg"](b, b.elementwise("mul", xf, OPS["log"](b, xf)))
    zero = _where(b, _eq(b, xf, 0.0), 0.0, -math.inf)
    out = _where(b, b.elementwise("gt", xf, 0.0, dtype=torch.bool), value, zero)
    return _done(b, _where(b, OPS["isnan"](b, xf), xf, out), dtype)


@op("log_ndtr")
def _log_ndtr(b: Builder, x: Value) -> Value:
    """torch.special.log_ndtr, as PyTorch's kernel: with t = x / sqrt(2), log(erfcx(-t) / 2)
    - t^2 below -1 (the tail, where the CDF underflows), else log1p(-erfc(t) / 2)."""
    dtype, (xf,) = _floats(b, "log_ndtr", x)
    refuse_16_bits(b, "log_ndtr", dtype)
    t = b.elementwise("mul", xf, math.sqrt(0.5))
    tail = OPS["log"](b, b.elementwise("mul", OPS["erfcx"](b, OPS["neg"](b, t)), 0.5))
    tail = b.elementwise("sub", tail, b.elementwise("mul", t, t))
    body = OPS["log1p"](b, b.elementwise("mul", OPS["erfc"](b, t), -0.5))
    low = b.elementwise("lt", xf, -1.0, dtype=torch.bool)
    return _done(b, b.elementwise("where", low, tail, body), dtype)


def _number(value: Operand) -> Operand:
    return value if isinstance(value, Value) else float(value)


def _scalar(value: object) -> bool:
    """A number that is a launch argument (a float argument of the kernel)."""
    return isinstance(value, Value) and value.type.rank == 0


@op("nan_to_num")
def _nan_to_num(
    b: Builder,
    x: Value,
    nan: float = 0.0,
    posinf: float | None = None,
    neginf: float | None = None,
) -> Value:
    """NaN, +inf and -inf replaced by constants (by default 0 and the dtype's extremes)."""
    dtype = x.type.dtype
    if not dtype.is_floating_point:
        return x
    for value in (nan, posinf, neginf):
        if value is not None and not _scalar(value) and not isinstance(value, (int, float)):
            raise UnsupportedOperation("nan_to_num(nan=, posinf=, neginf=) need numbers", b.loc)
    top = torch.finfo(dtype).max
    out = _where(b, OPS["isnan"](b, x), _number(nan), x)
    out = _where(b, _eq(b, x, math.inf), top if posinf is None else _number(posinf), out)
    out = _where(b, _eq(b, x, -math.inf), -top if neginf is None else _number(neginf), out)
    return _done(b, out, dtype)


@op("polygamma")
def _polygamma(b: Builder, n: Operand, x: Operand) -> Value:
    """torch.polygamma(n, x) (or x.polygamma(n)), as PyTorch's kernels: digamma at n = 0;
    at 1 their trigamma (reflected below 1/2, six steps of the recurrence, the asymptotic
    series), in the compute dtype; beyond, (-1)^(n+1) n! zeta(n + 1, x) (zeta rounded to a
    16-bit dtype first, as theirs)."""
    if not isinstance(n, int) or isinstance(n, bool):
        raise UnsupportedOperation("polygamma(n, x) needs a constant int n", b.loc)
    if n < 0:
        raise UnsupportedOperation("polygamma of a negative n (PyTorch refuses it too)", b.loc)
    if n == 0:
        return OPS["digamma"](b, x)  # type: ignore[no-any-return]
    dtype, (xf,) = _floats(b, "polygamma", x)
    if n == 1:
        return _done(b, _trigamma(b, xf), dtype)
    zeta: Operand = _zeta_of(b, float(n + 1), xf)
    if dtype in LOW_PRECISION:  # PyTorch's kernels round zeta to the dtype, then multiply
        zeta = b.cast(b.cast(zeta, dtype), torch.float32)
    return _done(b, b.elementwise("mul", zeta, float(math.factorial(n) * (-1) ** (n + 1))), dtype)


@op("zeta")
def _zeta(b: Builder, x: Operand, q: Operand) -> Value:
    """torch.special.zeta(x, q), the Hurwitz zeta function (the op table's helper)."""
    dtype, (xf, qf) = _floats(b, "zeta", x, q)
    refuse_16_bits(b, "zeta", dtype)
    return _done(b, _zeta_of(b, xf, qf), dtype)


def _zeta_of(b: Builder, x: Operand, q: Operand) -> Value:
    """The zeta op of operands in the compute dtype, each a whole tile (the helper works
    on tiles: a number or a kernel's float argument is added to zeros like the other)."""
    like = max((v for v in (x, q) if isinstance(v, Value)), key=lambda v: v.type.rank)
    zeros = OPS["zeros_like"](b, like)
    x, q = (v if _whole(v, like) else b.elementwise("add", zeros, v) for v in (x, q))
    return b.elementwise("zeta", x, q)


def _whole(v: Operand, like: Value) -> bool:
    return isinstance(v, Value) and v.type.rank == like.type.rank


def _trigamma(b: Builder, x: Value) -> Value:
    """PyTorch's trigamma: below 1/2, -(pi^2 / sin(pi x)^2 + trigamma(1 - x)) (so its
    poles are where sin(pi x) rounds to 0, and near them what it rounds to); then
    sum(1 / (x + k)^2) for k < 6 and the asymptotic series at x + 6."""
    below = b.elementwise("lt", x, 0.5, dtype=torch.bool)
    sine = OPS["sin"](b, b.elementwise("mul", x, math.pi))
    reflected = b.elementwise("truediv", -math.pi * math.pi, b.elementwise("mul", sine, sine))
    y: Value = b.elementwise("where", below, b.elementwise("sub", 1.0, x), x)
    total: Value = b.elementwise("where", below, reflected, 0.0)
    for _ in range(6):
        total = b.elementwise("add", total, b.elementwise("truediv", 1.0, OPS["square"](b, y)))
        y = b.elementwise("add", y, 1.0)
    inverse = b.elementwise("truediv", 1.0, OPS["square"](b, y))
    inner = b.elementwise("sub", 1 / 30, b.elementwise("mul", inverse, 1 / 42))
    inner = b.elementwise("sub", 1 / 6, b.elementwise("mul", inverse, inner))
    series = b.elementwise("add", 1.0, b.elementwise("truediv", 0.5, y))
    series = b.elementwise("add", series, b.elementwise("mul", inverse, inner))
    total = b.elementwise("add", total, b.elementwise("truediv", series, y))
    return b.elementwise("where", below, OPS["neg"](b, total), total)  # type: ignore[no-any-return]
