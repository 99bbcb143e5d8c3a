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
