"""Triton helper functions behind the op table's ops (`ops.py`): source templates
written once into a generated module (`{name}` is the helper's name there) and the emit
pieces they share. Each says which PyTorch or CUDA behaviour it reproduces and why."""

from __future__ import annotations

from collections.abc import Callable

import torch

from tilecraft.runtime.cpu import interpreter_set as interpreted


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def _trunc(a: str) -> str:
    return f"tl.where({a} < 0, tl.ceil({a}), tl.floor({a}))"


FLOAT_ROUND = """def {name}(a):
    # round half to even (torch.round), exact: a - floor(a) is exact below 2**mantissa,
    # where floats are integers already; a zero result keeps a's sign (round(-0.3) = -0.0)
    # (compared with low + 0.5, not a - low: a GPU compiler fuses a - low with the product
    # that made a, as in round(x * 10), into one exact FMA, and 3.4999999 is no longer 3.5)
    low = tl.floor(a)
    half = low + 0.5
    up = (a > half) | ((a == half) & (low % 2 != 0))
    rounded = tl.where(up, low + 1, low)
    rounded = tl.where(rounded == 0, a * 0.0, rounded)
    return tl.where(tl.abs(a) >= {exact}, a, rounded)
"""


def _round_helper(d: torch.dtype) -> str | None:
    """Round half to even for floats (integers are their own rounding: no helper)."""
    if not is_float(d):
        return None
    exact = 2.0**52 if d == torch.float64 else 2.0**23
    return FLOAT_ROUND.replace("{exact}", repr(exact))


def _log1p(a: str) -> str:
    """Accurate for tiny `a`: log(u) * a / (u - 1) with u = 1 + a (Goldberg's trick)."""
    u = f"(1.0 + {a})"
    exact = f"tl.log({u}) * ({a} / ({u} - 1.0))"
    return f"tl.where({u} == 1.0, {a}, tl.where({u} == float('inf'), {u}, {exact}))"


def _expm1(a: str) -> str:
    """Accurate for tiny `a`: (u - 1) * a / log(u) with u = exp(a) (Kahan's trick) where
    u is near 1; u - 1 elsewhere (it cancels nothing there, and the trick took the log of a
    subnormal u: expm1(-100) came out -0.9997)."""
    u = f"tl.exp({a})"
    exact = f"({u} - 1.0) * ({a} / tl.log({u}))"
    return f"tl.where({u} == 1.0, {a}, tl.where(tl.abs({a}) < 0.5, {exact}, {u} - 1.0))"


INT_FLOORDIV = """def {name}(a, b):
    # PyTorch's flooring division (Triton's // truncates toward zero, as C's does)
    quotient = a // b
    return quotient - ((a % b != 0) & ((a < 0) != (b < 0))).to(quotient.dtype)
"""


FLOAT_FLOORDIV = """def {name}(a, b):
    # PyTorch's recipe: from C's fmod, corrected toward -inf (so inf // x is NaN)
    mod = {fmod}
    div = (a - mod) / b
    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floor = tl.floor(div)
    floor = tl.where(div - floor > 0.5, floor + 1, floor)
    quotient = tl.where(div != 0, floor, 0.0 * (a / b))
    return tl.where(b == 0, a / b, quotient)
"""


def _fmod(d: torch.dtype, a: str, b: str) -> str:
    """C's fmod (torch.fmod), exact. Triton's float `%` is exact in its interpreter; on an
    NVIDIA GPU it divides approximately (1e30 % -3 came out near 4e22) and gave a number for
    an infinite dividend, so the GPU takes libdevice's fmod (CUDA's, as PyTorch's kernels
    do; it takes no int constants, hence the casts). In float64 for every float: Triton
    links libdevice flushing float32 denormals to zero, so `1.0 % 1e-40` was NaN on a GPU;
    the remainder is exact in the inputs' format, so rounding back loses nothing."""
    if not d.is_floating_point:
        return f"{a} % {b}"
    if not interpreted():
        fmod = f"libdevice.fmod(tl.cast({a}, tl.float64), tl.cast({b}, tl.float64))"
        return fmod if d == torch.float64 else f"tl.cast({fmod}, tl.float32)"  # 16-bit: in 32
    return f'tl.where(tl.abs({a}) == float("inf"), float("nan"), {a} % {b})'


REMAINDER = """def {name}(a, b):
    # PyTorch's remainder: C's fmod, moved to the divisor's sign
    r = {fmod}
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
"""


def _with_fmod(floats: str, integers: str | None = None) -> Callable[[torch.dtype], str]:
    """A helper whose `{fmod}` is C's fmod of `a` and `b` in the compute dtype (`integers`,
    where given, is the template for integers)."""
    return lambda d: (floats if is_float(d) else integers or floats).replace(
        "{fmod}", _fmod(d, "a", "b")
    )


POW = """def {name}(a, b):
    # C's pow (as torch.pow): |a|^b, negated for an odd integer b and a negative a (-0.0
    # too), NaN for a fractional b of a finite negative a; 1 where b == 0, a == 1, or
    # a == -1 and b is infinite
    b = b * 1.0  # a float exponent of integral value can reach here as an int constant
    mag = tl.exp2(tl.log2(tl.abs(a)) * b)
    whole = tl.where(tl.floor(b * 0.5) * 2 != b, mag * -1.0, mag)  # 0 - mag would lose -0.0
    fraction = tl.where((a == -float("inf")) | (a == 0), mag, float("nan"))
    negative = tl.where(b == tl.floor(b), whole, fraction)
    result = tl.where((a < 0) | (1.0 / a < 0), negative, mag)
    one = tl.where(a == -1, tl.abs(b) == float("inf"), a == 1)
    return tl.where(b == 0, 1.0, tl.where(one, 1.0, result))
"""

# tanh: libdevice's on a GPU (CUDA's, as PyTorch's kernels); Triton's interpreter has no
# libdevice, so there a helper from expm1 (2 * sigmoid(2x) - 1 cancelled small x to 0)
TANH = f"""def {{name}}(a):
    # -expm1(-2|a|) / (2 + expm1(-2|a|)), exact near 0; odd, with the sign of a zero kept
    z = -2.0 * tl.abs(a)
    t = {_expm1("z")}
    r = (t * -1.0) / (t + 2.0)
    return tl.where(a < 0, r * -1.0, tl.where(a == 0, a, r))
"""

# atan: libdevice's on a GPU; under the interpreter (no libdevice) Cephes' rational
# approximation, reduced to [0, 0.66] through atan(x) = pi/2 - atan(1/x) and pi/4 +
# atan((x - 1) / (x + 1)); within an ulp of numpy's in float32 and float64
ATAN = """def {name}(a):
    x = tl.abs(a)
    big = x > 2.414213562373095
    mid = x > 0.66
    t = tl.where(big, -1.0 / x, tl.where(mid, (x - 1.0) / (x + 1.0), x))
    zero = tl.zeros_like(x)  # (constants in x's dtype: a literal alone is a float32)
    base = tl.where(mid, zero + 0.7853981633974483, zero)
    base = tl.where(big, zero + 1.5707963267948966, base)
    low = tl.where(mid, zero + 3.061616997868383e-17, zero)
    low = tl.where(big, zero + 6.123233995736766e-17, low)
    z = t * t
    p = (((-0.8750608600031904 * z - 16.157537187333652) * z - 75.00855792314705) * z
         - 122.88666844901361) * z - 64.85021904942025
    q = ((((z + 24.858464901423062) * z + 165.02700983169885) * z + 432.88106049129027) * z
         + 485.3903996359137) * z + 194.5506571482614
    r = base + (t * (z * p / q) + t + low)
    return tl.where(a == 0, a, tl.where(a < 0, r * -1.0, r))
"""

# erfc: libdevice's on a GPU; under the interpreter (no libdevice) in float64: 1 - erf(a)
# below |a| = 2 (the interpreter's erf is the C library's; at most 5e-15 relative there),
# beyond it Laplace's continued fraction exp(-a^2) / sqrt(pi) / (a + 1/2 / (a + 1 / (a +
# 3/2 / ...))) of 60 terms (2e-16 from 2 on): float32 results correctly rounded
ERFC = """def {name}(a):
    x = a.to(tl.float64)
    ax = tl.maximum(tl.abs(x), 2.0)  # (the fraction's lanes below 2 are not taken)
    t = ax
    for n in tl.static_range(60, 0, -1):
        t = ax + (n * 0.5) / t
    tail = tl.exp(ax * -ax) / (t * 1.7724538509055159)
    far = tl.where(x < 0, 2.0 - tail, tail)
    near = 1.0 - tl.erf(x)
    return tl.where(tl.abs(x) >= 2.0, far, near).to(a.dtype)  # (NaN: near, NaN)
"""

# lgamma and digamma under the interpreter (lgamma's libdevice on a GPU; digamma has none,
# so this on a GPU too), in float64: arguments below 1/2 reflected (Euler's), the rest
# moved up to 10 or more by the recurrences, then Stirling's series (error below 1e-15)
LGAMMA = """def {name}(a):
    x = a.to(tl.float64)
    y = tl.where(x < 0.5, 1.0 - x, x)
    logs = tl.zeros_like(y)
    for _ in tl.static_range(10):  # lgamma(y) = lgamma(y + 1) - log(y)
        logs = tl.where(y < 10.0, logs + tl.log(y), logs)
        y = tl.where(y < 10.0, y + 1.0, y)
    w = 1.0 / (y * y)
    series = (((((w * 0.0008417508417508417 - 0.0005952380952380953) * w
                 + 0.0007936507936507937) * w - 0.002777777777777778) * w
               + 0.08333333333333333) / y)
    big = (y - 0.5) * tl.log(y) - y + 0.9189385332046728 + series - logs
    turns = tl.where(tl.abs(x) < 1.0, x, x - 2.0 * tl.floor(x * 0.5))  # x mod 2, exact
    sine = tl.abs(tl.sin(turns * 3.141592653589793))
    small = tl.log(3.141592653589793 / sine) - big
    out = tl.where(x < 0.5, small, big)
    out = tl.where((x == 1.0) | (x == 2.0), 0.0, out)  # its zeros, exactly
    pole = ((x <= 0) & (x == tl.floor(x))) | (tl.abs(x) == float("inf"))
    return tl.where(pole, float("inf"), out).to(a.dtype)
"""

DIGAMMA = """def {name}(a):
    x = a.to(tl.float64)
    y = tl.where(x < 0.5, 1.0 - x, x)
    steps = tl.zeros_like(y)
    for _ in tl.static_range(10):  # digamma(y) = digamma(y + 1) - 1 / y
        steps = tl.where(y < 10.0, steps - 1.0 / y, steps)
        y = tl.where(y < 10.0, y + 1.0, y)
    w = 1.0 / (y * y)
    series = ((((w * -0.007575757575757576 + 0.004166666666666667) * w
                - 0.003968253968253968) * w + 0.008333333333333333) * w
              - 0.08333333333333333) * w
    big = tl.log(y) - 0.5 / y + series + steps
    turns = tl.where(tl.abs(x) < 1.0, x, x - 2.0 * tl.floor(x * 0.5))  # x mod 2, exact
    angle = turns * 3.141592653589793
    small = big - 3.141592653589793 * tl.cos(angle) / tl.sin(angle)
    out = tl.where(x < 0.5, small, big)
    pole = (x <= 0) & (x == tl.floor(x))  # 0: -inf (+inf for -0.0); below: NaN
    zero = tl.where(1.0 / x < 0, float("inf"), -float("inf"))
    out = tl.where(pole, tl.where(x == 0, zero, float("nan")), out)
    out = tl.where(x == float("inf"), x, tl.where(x == -float("inf"), float("nan"), out))
    return out.to(a.dtype)
"""

# erfinv under the interpreter, in float64: Winitzki's closed form (within 2e-3), then
# three Newton steps on the interpreter's exact erf; +-inf at +-1, NaN beyond
ERFINV = """def {name}(a):
    y = a.to(tl.float64)
    log = tl.log((1.0 - y) * (1.0 + y))
    b = 4.330746750799873 + log * 0.5  # 2 / (pi * 0.147) + log / 2
    x = tl.sqrt(tl.sqrt(b * b - log * 6.802721088435374) - b)  # (1 / 0.147)
    x = tl.where(y < 0, x * -1.0, x)
    for _ in tl.static_range(3):
        x = x - (tl.erf(x) - y) / (1.1283791670955126 * tl.exp(x * -x))
    x = tl.where(y == 0, y, x)
    return tl.where(tl.abs(y) == 1.0, y * float("inf"), x).to(a.dtype)
"""

# i0 (the modified Bessel function of order 0), on a GPU too, in float64: its power series
# below 30 (60 terms), the asymptotic series of e^x / sqrt(2 pi x) beyond. In float32 it
# is inf from x = log(FLT_MAX) on, and NaN at +-inf, as PyTorch's (exp(x) over sqrt(x))
I0 = """def {name}(a):
    x = tl.abs(a.to(tl.float64))
    quarter = x * x * 0.25
    term = tl.zeros_like(x) + 1.0
    near = term
    for k in tl.static_range(1, 61):
        term = term * quarter / (k * k)
        near = near + term
    z = tl.maximum(x, 30.0)
    term = tl.zeros_like(x) + 1.0
    far = term
    for k in tl.static_range(1, 16):
        term = term * ((2 * k - 1) * (2 * k - 1)) / (8 * k * z)
        far = far + term
    far = far * tl.exp(z) / tl.sqrt(z * 6.283185307179586)
    out = tl.where(x >= 30.0, far, near)  # (NaN: near, NaN)
    if a.dtype != tl.float64:
        out = tl.where(x > 88.72283905206835, float("inf"), out)
    return tl.where(x == float("inf"), float("nan"), out).to(a.dtype)  # (PyTorch's inf/inf)
"""
