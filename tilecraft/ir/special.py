"""The special functions of the op table (`ops.py`): CUDA's libdevice functions on a GPU
(as PyTorch's kernels call them) and Triton helpers where a GPU has no such function or
the interpreter runs (it has no libdevice). Helpers compute in float64 and round once; each
says which PyTorch behaviour it reproduces."""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any

import torch

from tilecraft.ir.helpers import _expm1


def _fraction(a: str, t: str, indent: int = 4) -> str:
    """Lines setting `t` to Laplace's continued fraction of erfc at `a` (2 or more), 60
    terms: a + 1/2 / (a + 1 / (a + 3/2 / ...)), so that erfc(a) = exp(-a^2) / (sqrt(pi) t)."""
    pad = " " * indent
    return (f"{t} = {a}\n{pad}for n in tl.static_range(60, 0, -1):\n"
            f"{pad}    {t} = {a} + (n * 0.5) / {t}")  # fmt: skip


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
ERFC = f"""def {{name}}(a):
    x = a.to(tl.float64)
    ax = tl.maximum(tl.abs(x), 2.0)  # (the fraction's lanes below 2 are not taken)
    {_fraction("ax", "t")}
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

# the modified Bessel functions of the first kind, i0 and i1, and their scaled forms i0e
# and i1e (times exp(-|x|)), in float64, on a GPU too: the power series below 30 (60
# terms), beyond it the asymptotic series of e^x / sqrt(2 pi x) (15 terms). i1 is odd
# (+0 at -0.0, as PyTorch's). Unscaled, float32 results are inf from x = log(FLT_MAX) on,
# and NaN at +-inf, as PyTorch's (it computes exp(x), then divides by sqrt(x)); scaled,
# they are 0 there
BESSEL_I = """def {{name}}(a):
    x = tl.abs(a.to(tl.float64))
    quarter = x * x * 0.25
    term = tl.zeros_like(x) + {first}
    near = term
    for k in tl.static_range(1, 61):
        term = term * quarter / (k * (k + {order}))
        near = near + term
    z = tl.maximum(x, 30.0)
    term = tl.zeros_like(x) + 1.0
    far = term
    for k in tl.static_range(1, 16):
        term = term * ((2 * k - 1) * (2 * k - 1) - {order4}) / (8 * k * z)
        far = far + term
    {scale}
    out = tl.where(x >= 30.0, far, near)  # (NaN: near, NaN)
    {edges}
    return {signed}.to(a.dtype)
"""
UNSCALED = """far = far * tl.exp(z) / tl.sqrt(z * 6.283185307179586)
    if a.dtype != tl.float64:
        far = tl.where(x > 88.72283905206835, float("inf"), far)"""
SCALED = """far = far / tl.sqrt(z * 6.283185307179586)
    near = near * tl.exp(x * -1.0)"""


def bessel_i(order: int, scaled: bool) -> str:
    """The helper of i0, i1 (`order`) or of i0e, i1e (`scaled`)."""
    edges = "" if scaled else 'out = tl.where(x == float("inf"), float("nan"), out)'
    return BESSEL_I.format(
        first="1.0" if order == 0 else "x * 0.5",
        order=order,
        order4=4 * order * order,
        scale=SCALED if scaled else UNSCALED,
        edges=edges,
        signed="tl.where(a < 0, out * -1.0, out)" if order else "out",
    )


# erfcx, exp(x^2) erfc(x), in float64, on a GPU too (PyTorch's is its own, not
# libdevice's): exp(x^2) (1 - erf(x)) below |x| = 2, beyond it 1 / sqrt(pi) over erfc's
# continued fraction (no exp: finite to +inf, 0 there), and 2 exp(x^2) - erfcx(-x) below
# -2 (inf once exp(x^2) overflows the result's dtype)
ERFCX = f"""def {{name}}(a):
    x = a.to(tl.float64)
    ax = tl.maximum(tl.abs(x), 2.0)  # (the fraction's lanes below 2 are not taken)
    {_fraction("ax", "t")}
    tail = 1.0 / (t * 1.7724538509055159)
    far = tl.where(x < 0, 2.0 * tl.exp(x * x) - tail, tail)
    near = tl.exp(x * x) * (1.0 - tl.erf(x))
    return tl.where(tl.abs(x) >= 2.0, far, near).to(a.dtype)  # (NaN: near, NaN)
"""

# ndtri, the standard normal quantile, in float64, on a GPU too (PyTorch's is Cephes'):
# for the lower half q = min(p, 1 - p), Abramowitz and Stegun's 26.2.23 (within 4.5e-4),
# then three Newton steps on the normal CDF, 0.5 erfc(z) at z = -x / sqrt(2): below z = 2
# on 0.5 - q - erf(z) / 2 (no cancellation near 1/2), beyond on the log of the CDF from
# erfc's continued fraction (its exp would underflow near the smallest q); mirrored for p
# above 1/2; -inf at 0, inf at 1, NaN outside
NDTRI = f"""def {{name}}(a):
    p = a.to(tl.float64)
    q = tl.minimum(p, 1.0 - p)
    t = tl.sqrt(-2.0 * tl.log(q))
    x = ((0.010328 * t + 0.802853) * t + 2.515517) / (((0.001308 * t + 0.189269) * t
                                                       + 1.432788) * t + 1.0) - t
    for _ in tl.static_range(3):
        z = x * -0.7071067811865476
        az = tl.maximum(z, 2.0)  # (the fraction's lanes below 2 are not taken)
        {_fraction("az", "f", 8)}
        log_cdf = az * -az - tl.log(f * 3.5449077018110318)  # (2 sqrt(pi))
        far = (log_cdf - tl.log(q)) / (f * 1.4142135623730951)  # (density / CDF: f sqrt(2))
        near = (0.5 - q - 0.5 * tl.erf(z)) / (tl.exp(x * x * -0.5) * 0.3989422804014327)
        x = x - tl.where(z >= 2.0, far, near)
    x = tl.where(q == 0.5, 0.0, tl.where(p > 0.5, x * -1.0, x))
    x = tl.where(p == 0.0, -float("inf"), tl.where(p == 1.0, float("inf"), x))
    return tl.where((p < 0.0) | (p > 1.0), float("nan"), x).to(a.dtype)  # (NaN: NaN)
"""


def _euler_maclaurin() -> list[float]:
    """(2k)! / B_2k for k = 1..12 (B the Bernoulli numbers, from their recurrence): the
    divisors of the Euler-Maclaurin tail's terms."""
    bernoulli = [Fraction(1)]
    for m in range(1, 25):
        total = sum((math.comb(m + 1, j) * bernoulli[j] for j in range(m)), Fraction(0))
        bernoulli.append(-total / (m + 1))
    return [float(math.factorial(2 * k) / bernoulli[2 * k]) for k in range(1, 13)]


# the Hurwitz zeta function sum((q + k)^-x), in float64, on a GPU too, as PyTorch's CPU
# kernel (Cephes' algorithm, in double): inf at x = 1 and at integer q <= 0, NaN below x = 1
# and at q < 0 for x not an integer; else the terms one by one (at least 9, until q + k
# passes 9; each lane stops where a term falls below 2^-53 of the sum), then the
# Euler-Maclaurin tail (up to 12 terms, stopping likewise). A negative base is raised to
# an integer power (its sign kept); 1 to any power is 1
ZETA_HEAD = """def {{name}}(xa, qa):
    x = xa.to(tl.float64)
    q = qa.to(tl.float64)
    odd = (x - 2.0 * tl.floor(x * 0.5)) == 1.0
    pole = (q <= 0.0) & (q == tl.floor(q))
    undefined = (q <= 0.0) & (x != tl.floor(x))
    live = ~(pole | undefined | (x <= 1.0))
    s = {power_q}
    a = q
    b = tl.zeros_like(s)
    for _ in tl.static_range(9):
        a = a + 1.0
        {term}
    extra = tl.max(tl.where(live & (a <= 9.0), tl.floor(9.0 - a) + 1.0, 0.0))
    for _ in range(extra.to(tl.int32)):
        more = live & (a <= 9.0)
        a = tl.where(more, a + 1.0, a)
        {term_more}
    w = a
    s = tl.where(live, s + b * w / (x - 1.0) - 0.5 * b, s)
    rising = tl.zeros_like(s) + 1.0
"""
ZETA_TAIL = """    s = tl.where(pole, float("inf"), tl.where(undefined, float("nan"), s))
    s = tl.where(x == 1.0, float("inf"), tl.where(x < 1.0, float("nan"), s))
    return s.to({out})
"""
TINY = "1.1102230246251565e-16"  # 2^-53: a term this much smaller than the sum ends it


def _power(base: str) -> str:
    """Triton text of `base` ** -x for the zeta helper (x an integer where base < 0)."""
    magnitude = f"tl.exp(x * -tl.log(tl.abs({base})))"
    signed = f"tl.where(({base} < 0.0) & odd, {magnitude} * -1.0, {magnitude})"
    return f"tl.where({base} == 1.0, 1.0, {signed})"


def _zeta_term(lanes: str) -> str:
    """A summation step of the zeta helper over `lanes`: the next term added, and the
    lanes whose term fell below the sum's last bit stop."""
    return (f"b = tl.where({lanes}, {_power('a')}, b)\n"
            f"        s = tl.where({lanes}, s + b, s)\n"
            f"        live = live & ~({lanes} & (tl.abs(b / s) < {TINY}))")  # fmt: skip


@functools.cache
def zeta(dtype: torch.dtype) -> str:
    """The zeta helper's source for a compute dtype: the summation, then the
    Euler-Maclaurin tail unrolled."""
    head = ZETA_HEAD.format(
        power_q=_power("q"), term=_zeta_term("live"), term_more=_zeta_term("more")
    )
    tail = []
    for i, divisor in enumerate(_euler_maclaurin()):
        tail += [f"rising = rising * (x + {2 * i}.0)", "b = b / w",
                 f"t = rising * b / {divisor!r}", "s = tl.where(live, s + t, s)",
                 f"live = live & ~(tl.abs(t / s) < {TINY})",
                 f"rising = rising * (x + {2 * i + 1}.0)", "b = b / w"]  # fmt: skip
    out = "tl.float64" if dtype == torch.float64 else "tl.float32"
    return head + "".join(f"    {line}\n" for line in tail) + ZETA_TAIL.replace("{out}", out)


# name -> (libdevice function, or None for the helper on a GPU too; the helper; the eager
# function; PyTorch's names)
LIBDEVICE: dict[str, tuple[str | None, str, Any, tuple[str, ...]]] = {
    "tanh": ("tanh", TANH, torch.tanh, ("tanh",)),
    "atan": ("atan", ATAN, torch.atan, ("atan", "arctan")),
    "erfc": ("erfc", ERFC, torch.erfc, ("erfc",)),
    "lgamma": ("lgamma", LGAMMA, torch.lgamma, ("lgamma", "gammaln")),
    "digamma": (None, DIGAMMA, torch.digamma, ("digamma", "psi")),
    "erfinv": ("erfinv", ERFINV, torch.erfinv, ("erfinv",)),
    "i0": (None, bessel_i(0, False), torch.i0, ("i0",)),
    "i1": (None, bessel_i(1, False), torch.special.i1, ("i1",)),
    "i0e": (None, bessel_i(0, True), torch.special.i0e, ("i0e",)),
    "i1e": (None, bessel_i(1, True), torch.special.i1e, ("i1e",)),
    "erfcx": (None, ERFCX, torch.special.erfcx, ("erfcx",)),
    "ndtri": (None, NDTRI, torch.special.ndtri, ("ndtri",)),
}

# libdevice's float32 erfc flushes its subnormal results (erfc(10) was 0 on an H100, where
# PyTorch's is 2.8e-45): in float64 there, rounded once
IN_FLOAT64 = {"erfc"}
