"""Differential test of the two CPU modes: each op users write in `tc.tile` loops, run
eagerly (PyTorch) and compiled (Triton's interpreter), against PyTorch, in float32, half,
bfloat16 and int32, on NaN, infinities, signed zeros, subnormals, huge and tiny values,
lengths that are not multiples of the block (and 1 and 0).

Where PyTorch's CPU kernels disagree with its own CUDA kernels, inputs are left out and
the reason is written beside them (tilecraft follows the CUDA results there)."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE

import tilecraft as tc
from tilecraft.exc import DtypeError, UnsupportedOperation
from tilecraft.testing import check_modes, run_mode

INF, NAN = float("inf"), float("nan")
SPECIAL = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 3.0, -7.0, 0.7, -0.7]
SPECIAL += [1e-30, 1e30, 88.0, 1e-40, 3e-39, 65504.0, 70000.0, -3.5, 0.35, 1.4]  # 1e-40: subnormal
INTS = [-7, -3, -1, 0, 1, 2, 3, 5, 31, 100, -(2**31), 2**31 - 1]
FLOATS = [torch.float32, torch.float16, torch.bfloat16]
ALL = [*FLOATS, torch.float64, torch.int32]
LENGTH = 37  # ragged against the block of 16

UNARY = {
    "exp": torch.exp,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "abs": torch.abs,
    "absolute": lambda x: x.absolute(),
    "sgn": torch.sgn,
    "floor": torch.floor,
    "ceil": torch.ceil,
    "round": torch.round,
    "sign": torch.sign,
    "pow2": lambda x: x**2,
    "pow3": lambda x: torch.pow(x, 3),
    "pow0": lambda x: x**0,
    "pow100": lambda x: x**100,
    "pow-1": lambda x: x**-1.0,
    "pow0.5": lambda x: x**0.5,
    "pow-0.5": lambda x: x**-0.5,
    "rpow": lambda x: 2.0**x,
    "rpow_int": lambda x: 2**x,
    "clamp": lambda x: torch.clamp(x, -1.0, 2.0),
    "clamp_inverted": lambda x: torch.clamp(x, 2.0, 1.0),
    "clamp_zero": lambda x: torch.clamp(x, -0.0, 0.0),  # ties between zeros
    "relu": torch.relu,
    "where": lambda x: torch.where(x > 0, x, 0.5),
    # the method's order (was read as torch.where(x, x > 0, 0.5)): of a bool tile too
    "where_method": lambda x: x.where(x > 0, 0.5),
    "where_method_bool": lambda x: (x > 0).where(x < 2, x > -1),
    "where_other": lambda x: x.where(x > 0, other=x * 2),
    "type_as": lambda x: (x * 2).type_as(x.double()),
    "dropout_eval": lambda x: F.dropout(x, 0.3, training=False) + F.silu(x, inplace=False),
    "rrelu_eval": lambda x: F.rrelu(x, 0.1, 0.3) + F.elu(x, 1.0, False),
    "angle": torch.angle,
    "add": lambda x: x + 0.7,
    "rsub": lambda x: 0.7 - x,
    "mul": lambda x: x * 0.1,
    "div": lambda x: x / 3,
    "rdiv": lambda x: 1.7 / x,  # PyTorch's x.reciprocal() * 1.7, rounded twice
    "floordiv": lambda x: x // 0.7,
    "floordiv_int": lambda x: x // -3,
    "mod_int": lambda x: x % -3,
    "div_trunc": lambda x: torch.div(x, -0.5, rounding_mode="trunc"),
    "div_trunc_int": lambda x: torch.div(x, -3, rounding_mode="trunc"),
    "div_floor": lambda x: x.div(0.25, rounding_mode="floor"),
    "div_floor_int": lambda x: x.div(3, rounding_mode="floor"),
    "round1": lambda x: torch.round(x, decimals=1),
    "round3": lambda x: x.round(decimals=3),
    "round-1": lambda x: torch.round(x, decimals=-1),
    "round-2": lambda x: torch.round(x, decimals=-2),
    "round50": lambda x: torch.round(x, decimals=50),  # 10**50 overflows float32: NaN
    "to_bool": lambda x: x.bool(),
    "to_int": lambda x: x.int(),
    "to_half": lambda x: x.half(),
    "to_bfloat16": lambda x: x.bfloat16(),
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "softplus": F.softplus,
    "softplus_scaled": lambda x: F.softplus(x, beta=2.0, threshold=3.0),
    "logsigmoid": F.logsigmoid,
    "mish": F.mish,
    "sinh": torch.sinh,
    "cosh": lambda x: x.cosh(),
    "frac": torch.frac,
    "asinh": torch.asinh,
    "acosh": lambda x: x.arccosh(),
    "atanh": torch.atanh,
    "atan": torch.atan,
    "asin": torch.asin,
    "acos": lambda x: x.arccos(),
    "signbit": torch.signbit,
    "copysign": lambda x: torch.copysign(x, -2.0),
    "nan_to_num": torch.nan_to_num,
    "nan_to_num_given": lambda x: torch.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-3.0),
    "xlogy": lambda x: torch.xlogy(x, 3.0),
    "xlogy_zero": lambda x: torch.xlogy(0.0, x),
    "xlog1py": lambda x: torch.special.xlog1py(x, 3.0),
    "xlog1py_zero": lambda x: torch.special.xlog1py(0.0, x),
    "lerp": lambda x: torch.lerp(x, torch.ones_like(x), 0.75),
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "elu": F.elu,
    "selu": F.selu,
    "celu": lambda x: F.celu(x, alpha=2.0),
    "hardtanh": F.hardtanh,
    "relu6": F.relu6,
    "hardsigmoid": F.hardsigmoid,
    "hardswish": F.hardswish,
    "softsign": F.softsign,
    "tanhshrink": F.tanhshrink,
    "threshold": lambda x: F.threshold(x, 0.5, -3.0),
    "hardshrink": F.hardshrink,
    "softshrink": F.softshrink,
    "logit": torch.logit,
    "logit_eps": lambda x: torch.logit(x, eps=1e-3),
    "isposinf": torch.isposinf,
    "isneginf": lambda x: x.isneginf(),
    "heaviside": lambda x: torch.heaviside(x, x * 3),
    "deg2rad": torch.deg2rad,
    "rad2deg": lambda x: x.rad2deg(),
    "sinc": torch.sinc,
    "addcmul": lambda x: torch.addcmul(x, x, x, value=0.5),
    "addcdiv": lambda x: x.addcdiv(x, x + 3, value=2),
    "rsub_fn": lambda x: torch.rsub(x, 2),
    "positive": torch.positive,
    "masked_fill": lambda x: x.masked_fill(x > 0.5, 2.7),  # (2 in an int tile)
    "masked_fill_nan": lambda x: torch.masked_fill(x, x < 0, float("nan")),
    "erfc": torch.erfc,
    "erfinv": lambda x: torch.erfinv(x * 0.3),
    "lgamma": torch.lgamma,
    "digamma": torch.digamma,
    "i0": torch.i0,
    "i1": torch.special.i1,
    "i0e": torch.special.i0e,
    "i1e": torch.special.i1e,
    "erfcx": torch.special.erfcx,
    "ndtr": torch.special.ndtr,
    "log_ndtr": torch.special.log_ndtr,
    "ndtri": torch.special.ndtri,
    "entr": torch.special.entr,
    "polygamma1": lambda x: torch.polygamma(1, x),
    "polygamma3": lambda x: x.polygamma(3),
}
# int32 inputs only for ops where PyTorch allows them and they stay exact
INTEGER_OPS = {"abs", "sign", "pow2", "pow3", "pow0", "pow100", "clamp", "where", "add", "div"}
INTEGER_OPS |= {"floordiv_int", "mod_int", "to_bool", "to_int", "to_half", "sqrt"}
INTEGER_OPS |= {"div_trunc_int", "div_floor_int", "sinh", "cosh"}
INTEGER_OPS |= {"atan", "asin", "signbit", "copysign", "nan_to_num", "xlogy", "hardtanh"}
INTEGER_OPS |= {"relu6", "softsign", "threshold", "logit", "rdiv", "isposinf", "isneginf"}
INTEGER_OPS |= {"heaviside", "deg2rad", "addcmul", "rsub_fn", "positive", "masked_fill"}
INTEGER_OPS |= {"entr", "xlog1py", "absolute", "sgn", "where_method", "where_method_bool"}
INTEGER_OPS |= {"where_other", "type_as", "angle"}
NO_16_BITS = {"erfcx", "log_ndtr", "ndtri", "zeta"}  # PyTorch has no 16-bit kernel of these
NO_16_BITS_ON_CUDA = {"angle"}  # (its CPU kernels take them: tilecraft does too)


def values(dtype: torch.dtype, length: int = LENGTH) -> torch.Tensor:
    """The special values of `dtype`, then random ones, `length` in all."""
    special = torch.tensor(SPECIAL if dtype.is_floating_point else INTS, dtype=torch.float64)
    noise = torch.randn(max(length - len(special), 0), dtype=torch.float64) * 5
    full = torch.cat([special, noise])[:length]
    return full.to(dtype) if dtype.is_floating_point else full.round().to(dtype)


def defined(name: str, x: torch.Tensor) -> torch.Tensor:
    """Inputs where PyTorch defines the result the same way on every device."""
    if name == "to_int" and x.is_floating_point():  # C leaves NaN, inf, overflow undefined
        return x[x.isfinite() & (x.abs() < 2**31)]
    if name in ("mod", "fmod", "rmod") and x.is_floating_point():
        wide = x.double()
        return x[exact_quotients(0.7 / wide if name == "rmod" else wide / 0.7)]
    if name in ("pow0.5", "pow-0.5") and x.dtype == torch.float16:
        # PyTorch's CPU half kernel takes std::pow (pow(-inf, 0.5) = inf); its float32,
        # bfloat16 and CUDA kernels take sqrt/rsqrt (NaN, and -inf at -0.0): tilecraft
        # follows those
        return x[(x != -INF) & ~((x == 0) & x.signbit())]
    if name == "gelu":  # PyTorch's vectorized CPU kernel gives NaN at inf (float64's: inf)
        x = x[x != INF]
        # and +0.0 where its scalar one (the tail of a tensor) gives -0.0: -0.0 and the
        # negative inputs whose 1 + erf(x / sqrt(2)) rounds to 0 (AVX2; which elements take
        # which path depends on the CPU's vector width)
        x = x[~(x.signbit() & (F.gelu(x) == 0))]
    if name == "logit_eps" and dtype_of_16_bits(x):  # PyTorch's CPU kernel rounds the
        # bound 1 - eps to the dtype (1.0 in bfloat16: logit gives inf past it), its CUDA
        # kernel keeps it in float32 (6.9), as tilecraft does
        x = x[~(x >= 1 - 1e-3)]
    if name == "softshrink":  # between the bounds PyTorch's vectorized CPU kernel gives
        # +0.0, its scalar one (a tensor's tail) x * 0: -0.0 for negative x
        x = x[~(x.signbit() & (x >= -0.5))]
    if DEVICE == "cuda" and name in DEVICE_DEPENDENT:
        x = x[same_on_cpu_and_cuda(UNARY[name], x)]
    return x[kept_on_gpu(x)]


def dtype_of_16_bits(x: torch.Tensor) -> bool:
    return x.dtype in (torch.float16, torch.bfloat16)


def kept_on_gpu(x: torch.Tensor) -> torch.Tensor:
    """Where the test device keeps `x` as PyTorch does: Triton's compiled code flushes
    float32 subnormals to zero (as Inductor's does), PyTorch's CUDA kernels keep them, a
    known GPU difference left out on CUDA."""
    if DEVICE != "cuda" or not x.is_floating_point():
        return torch.ones_like(x, dtype=torch.bool)
    return (x == 0) | ~(x.float().abs() < torch.finfo(torch.float32).tiny)


# PyTorch's CPU kernels scale by 10**n in wider precision than its CUDA kernels (0.35
# rounds to 0.3 on the CPU, 0.4 on CUDA; 16-bit values past 6550 overflow only on CUDA),
# and its CPU and CUDA remainders of 16-bit values near 1e30 differ: tilecraft follows the
# CPU, and on CUDA these ops are checked where PyTorch's two devices agree
DEVICE_DEPENDENT = {"round1", "round3", "round-1", "round-2", "mod_int"}


def same_on_cpu_and_cuda(fn, x: torch.Tensor) -> torch.Tensor:
    cpu, cuda = fn(x.cpu()), fn(x.cuda()).cpu()
    return (cpu == cuda) | (cpu.isnan() & cuda.isnan())


def exact_quotients(quotient: torch.Tensor) -> torch.Tensor:
    """Where PyTorch's CPU fmod and remainder agree with C's fmod: its vectorized kernel
    computes a - trunc(a / b) * b, NaN or inexact for quotients past 2**24 (fmod(1e30,
    1e-30)); C's fmod, which Triton and PyTorch's CUDA kernels use, is exact."""
    return ~quotient.isfinite() | (quotient.abs() <= 2**24)


def tolerance(out: torch.Tensor) -> torch.dtype | None:
    return out.dtype if out.dtype.is_floating_point else None


@tc.kernel(config=tc.Config(block_sizes=[16]))
def unary(x: torch.Tensor, name: str) -> torch.Tensor:
    fn = UNARY[name]
    out = torch.empty(x.shape, dtype=fn(x[:1]).dtype, device=x.device)
    for tile in tc.tile(x.size(0)):
        out[tile] = fn(x[tile])
    return out


def unary_cases() -> list:
    return [
        pytest.param(n, d, id=f"{n}-{str(d)[6:]}")
        for n in UNARY
        for d in ALL
        if (d.is_floating_point or n in INTEGER_OPS)
        and not (n in NO_16_BITS and d in (torch.float16, torch.bfloat16))
        and not (n in NO_16_BITS_ON_CUDA and DEVICE == "cuda" and d.itemsize == 2)
    ]


@pytest.mark.parametrize("name,dtype", unary_cases())
def test_unary_ops_agree_with_pytorch(name: str, dtype: torch.dtype) -> None:
    x = defined(name, values(dtype)).to(DEVICE)
    check_modes(unary, (x, name), lambda x, n: UNARY[n](x), tolerance(UNARY[name](x)))


@pytest.mark.parametrize("name", list(UNARY))
@pytest.mark.parametrize("given", [[], [-0.7]], ids=["none", "one"])
def test_unary_ops_of_no_element_and_one(name: str, given: list) -> None:
    x = torch.tensor(given, device=DEVICE)
    check_modes(unary, (x, name), lambda x, n: UNARY[n](x), tolerance(UNARY[name](x)))


BINARY = {
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "div": torch.div,
    "floordiv": lambda x, y: x // y,
    "div_trunc": lambda x, y: torch.div(x, y, rounding_mode="trunc"),
    "div_floor": lambda x, y: x.div(y, rounding_mode="floor"),
    "floor_divide": torch.floor_divide,
    "true_divide": torch.true_divide,
    "remainder": torch.remainder,
    "fmod": torch.fmod,
    "pow": torch.pow,
    "eq": torch.eq,
    "where": lambda x, y: torch.where(x > y, x, y),
    "atan2": torch.atan2,
    "hypot": torch.hypot,
    "copysign": torch.copysign,
    "fmax": torch.fmax,
    "fmin": lambda x, y: x.fmin(y),
    "lerp": lambda x, y: torch.lerp(x, y, 0.3),
    "lerp_weights": lambda x, y: torch.lerp(x, y, y),
    "logaddexp": torch.logaddexp,
    "logaddexp2": torch.logaddexp2,
    "xlogy": torch.xlogy,
    "xlog1py": torch.special.xlog1py,
    "zeta": torch.special.zeta,
}
FLOAT_ONLY = {"pow", "hypot", "lerp", "lerp_weights", "logaddexp", "logaddexp2"}
INT64 = {"div_trunc", "div_floor", "floor_divide", "true_divide"}  # also run in int64
DIVISIONS = {"div", "floordiv", "remainder", "fmod", *INT64}


@tc.kernel(config=tc.Config(block_sizes=[16]))
def binary(x: torch.Tensor, y: torch.Tensor, name: str) -> torch.Tensor:
    fn = BINARY[name]
    out = torch.empty(x.shape, dtype=fn(x[:1], y[:1]).dtype, device=x.device)
    for tile in tc.tile(x.size(0)):
        out[tile] = fn(x[tile], y[tile])
    return out


def pairs(name: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Every pair of special values, less those PyTorch leaves undefined or computes
    differently on its CPU."""
    v = values(dtype, len(SPECIAL) if dtype.is_floating_point else len(INTS))
    index = torch.tensor(list(itertools.product(range(len(v)), repeat=2)))
    x, y = v[index[:, 0]], v[index[:, 1]]
    if not dtype.is_floating_point and name in DIVISIONS:
        keep = y != 0  # PyTorch raises; a kernel cannot
        if name not in ("div", "true_divide"):  # -2**31 // -1 overflows: undefined in C
            keep &= (x != -(2**31)) | (y != -1)
        x, y = x[keep], y[keep]
    if name in ("fmod", "remainder") and dtype.is_floating_point:
        keep = exact_quotients(x.double() / y.double())
        x, y = x[keep], y[keep]
    if name == "div_trunc" and dtype in (torch.float16, torch.bfloat16):
        keep = rounded_first(x, y)
        x, y = x[keep], y[keep]
    if name in ("fmax", "fmin") and DEVICE != "cpu":  # of two zeros, C leaves the sign
        # (PyTorch's CPU kernels give the first in float32, the second in bfloat16, as
        # tilecraft does; maximum's tile-length dependence there is fixed in eager mode)
        keep = (x != 0) | (y != 0)
        x, y = x[keep], y[keep]
    if name == "zeta" and DEVICE != "cpu":  # PyTorch's CUDA kernel sums float32 in float32:
        # where the terms underflow it divides 0 by 0 (NaN); its CPU kernel sums in float64
        # and rounds the tiny sum to 0, as tilecraft does
        exact = torch.special.zeta(x.double(), y.double()).abs()
        keep = ~(exact < torch.finfo(torch.float32).tiny)
        x, y = x[keep], y[keep]
    if name == "logaddexp2":  # -1 and -1: 0 or a rounding of log1p(1) / ln 2 below 1 (-0.0)
        keep = (x != -1) | (y != -1)
        x, y = x[keep], y[keep]
    keep = kept_on_gpu(x) & kept_on_gpu(y)
    return x[keep].to(DEVICE), y[keep].to(DEVICE)


def rounded_first(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Where PyTorch's CPU and CUDA kernels agree on a 16-bit trunc division: the CPU
    truncates the float32 quotient, CUDA that quotient rounded to 16 bits (2.9995 in half
    is 3), which tilecraft follows."""
    quotient = x.float() / y.float()
    cpu, cuda = quotient.trunc().to(x.dtype), quotient.to(x.dtype).trunc()
    return (cpu == cuda) | (cpu.isnan() & cuda.isnan())


def binary_cases() -> list:
    return [
        pytest.param(n, d, id=f"{n}-{str(d)[6:]}")
        for n in BINARY
        for d in [*ALL, *([torch.int64] if n in INT64 else [])]
        if d.is_floating_point or n not in FLOAT_ONLY
        if not (n in NO_16_BITS and d in (torch.float16, torch.bfloat16))
    ]


@pytest.mark.parametrize("name,dtype", binary_cases())
def test_binary_ops_agree_with_pytorch(name: str, dtype: torch.dtype) -> None:
    x, y = pairs(name, dtype)
    fn = BINARY[name]
    check_modes(binary, (x, y, name), lambda x, y, n: BINARY[n](x, y), tolerance(fn(x, y)))


@tc.kernel
def typed_as(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=like.dtype, device=x.device)
    for tile in tc.tile(x.size(0)):
        out[tile] = (x[tile] * 3).type_as(like)
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.int32, torch.float64])
def test_type_as_of_a_tensor_argument(dtype: torch.dtype) -> None:
    """`tile.type_as(t)` of a kernel's tensor argument (not a tile): the tensor's dtype."""
    x = values(torch.float32).to(DEVICE)
    x = x[x.isfinite() & (x.abs() < 1e9)] if dtype == torch.int32 else x
    like = torch.zeros(1, dtype=dtype, device=DEVICE)
    check_modes(typed_as, (x, like), lambda x, like: (x * 3).type_as(like), tolerance(like))


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("given", [[], [-0.7]], ids=["none", "one"])
def test_binary_ops_of_no_element_and_one(name: str, given: list) -> None:
    x = torch.tensor(given, device=DEVICE)
    fn = BINARY[name]
    check_modes(binary, (x, x * 3, name), lambda x, y, n: BINARY[n](x, y), tolerance(fn(x, x)))


REDUCTIONS = {
    "sum": lambda r: r.sum(1),
    "amax": lambda r: r.amax(1),
    "amin": lambda r: torch.amin(r, 1),
    "max": lambda r: torch.max(r, 1).indices,
    "argmax": lambda r: r.argmax(1),
    "argmin": lambda r: torch.argmin(r, dim=1),
    "mean": lambda r: r.mean(1),
    "prod": lambda r: r.prod(1),
    "cumsum": lambda r: r.cumsum(1),
    "cumprod": lambda r: torch.cumprod(r, 1),
    "softmax": lambda r: torch.softmax(r, 1),
    "log_softmax": lambda r: torch.log_softmax(r, 1),
    "nansum": lambda r: r.nansum(1),
    "nanmean": lambda r: torch.nanmean(r, 1),
    "count_nonzero": lambda r: torch.count_nonzero(r, 1),
    "aminmax": lambda r: torch.aminmax(r, dim=1)[1] - torch.aminmax(r, dim=1).min,
    # (PyTorch's std_mean takes its mean from Welford's updates: NaN for a row holding two
    # infinities, unlike torch.mean; rows here are finite or NaN)
    "std_mean": lambda r: torch.stack(torch.std_mean(r.nan_to_num(NAN, 9.0, -9.0), 1), 1),
    "var_mean": lambda r: torch.stack(torch.var_mean(r.nan_to_num(NAN, 9.0, -9.0), 1), 1),
    "softmin": lambda r: F.softmin(r, 1),
    "normalize": lambda r: F.normalize(r, dim=1),
    "glu": lambda r: F.glu(torch.cat([r, r * 2], 1), 1),
}
REDUCED = {  # the dtypes each runs in, besides float32
    "sum": [torch.float16, torch.bfloat16, torch.int32],
    "amax": [torch.bfloat16, torch.int32],
    "amin": [torch.float16],
    "argmax": [torch.float16, torch.int32],
    "argmin": [torch.bfloat16],
    "mean": [torch.float16, torch.bfloat16],
    "prod": [torch.int32],
    "cumsum": [torch.float16, torch.int32],
    "softmax": [torch.bfloat16],
    "log_softmax": [torch.float16],
    "nansum": [torch.float16, torch.int32],
    "nanmean": [torch.bfloat16],
    "count_nonzero": [torch.int32, torch.float16],
    "aminmax": [torch.int32],
    "std_mean": [torch.float16],
    "var_mean": [torch.float16],
    "softmin": [torch.bfloat16],
    "glu": [torch.float16],
}


@tc.kernel(config=tc.Config(block_sizes=[4]))
def rows(x: torch.Tensor, name: str) -> torch.Tensor:
    fn = REDUCTIONS[name]
    m, n = x.shape
    out = torch.empty([m, *fn(x[:1]).shape[1:]], dtype=fn(x[:1]).dtype, device=x.device)
    for tile in tc.tile(m):
        out[tile] = fn(x[tile, :])
    return out


def matrix(shape: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    """Random rows, and where there is room: a NaN, a row of NaN, a row of -inf, both
    infinities in one row, a tie for the max, signed zeros."""
    x = torch.randn(shape, dtype=torch.float64) * 3
    if shape[0] > 5 and shape[1] > 2:
        x[1, 2], x[4, :], x[2, :] = NAN, NAN, -INF
        x[3, 0], x[3, -1] = INF, -INF
        x[0, 1] = x[0, 5] = x[0].max()
        x[5, :2] = torch.tensor([0.0, -0.0])
    if not dtype.is_floating_point:
        return x.nan_to_num(0, 9, -9).round().to(dtype)
    return x.to(dtype)


def reduction_cases() -> list:
    return [
        pytest.param(n, d, id=f"{n}-{str(d)[6:]}")
        for n in REDUCTIONS
        for d in [torch.float32, torch.float64, *REDUCED.get(n, [])]
    ]


@pytest.mark.parametrize("name,dtype", reduction_cases())
def test_reductions_and_scans_agree_with_pytorch(name: str, dtype: torch.dtype) -> None:
    for shape in [(7, 37), (1, 1)]:
        x = matrix(shape, dtype).to(DEVICE)
        expected = REDUCTIONS[name](x)
        # a scan's rounding error scales with its running sum, not with each output: a
        # half cumsum crossing zero is held to bfloat16's absolute tolerance
        tol = torch.bfloat16 if (name, dtype) == ("cumsum", torch.float16) else tolerance(expected)
        check_modes(rows, (x, name), lambda x, n: REDUCTIONS[n](x), tol)


@pytest.mark.parametrize(
    "name",
    ["sum", "mean", "prod", "cumsum", "softmax", "nansum", "nanmean", "count_nonzero"]
    + ["std_mean", "var_mean", "softmin", "normalize", "glu"],
)
def test_reductions_of_empty_rows_and_no_rows(name: str) -> None:
    for shape in [(4, 0), (0, 5)]:
        x = torch.randn(shape, device=DEVICE)
        check_modes(rows, (x, name), lambda x, n: REDUCTIONS[n](x))


def test_integer_powers_stay_integers() -> None:
    """`x ** 100` of an int tile wraps as PyTorch's does (it went through float32: a float
    result, saturated); `2 ** tile` of an int tile, an integer in PyTorch, is refused."""
    x = values(torch.int32).to(DEVICE)
    assert unary(x, "pow100").dtype == torch.int32
    with pytest.raises(UnsupportedOperation, match="integer power"):
        unary(x, "rpow_int")


SMALL_INTS = {
    "eq": lambda x: x == -2,
    "lt": lambda x: x < -1,
    "add": lambda x: x + (-2),
    "mul": lambda x: x * -1,
    "sub": lambda x: x - 300,
    "where": lambda x: torch.where(x > 1, x, -2),
    "narrowed": lambda x: x.to(torch.int8) == 300,
    "clamp": lambda x: torch.clamp(x, -3, 100),
}


@tc.kernel(config=tc.Config(block_sizes=[16]))
def small_ints(x: torch.Tensor, name: str) -> torch.Tensor:
    fn = SMALL_INTS[name]
    out = torch.empty(x.shape, dtype=fn(x[:1]).dtype, device=x.device)
    for tile in tc.tile(x.size(0)):
        out[tile] = fn(x[tile])
    return out


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16])
@pytest.mark.parametrize("name", list(SMALL_INTS))
def test_int_constants_wrap_into_small_int_tiles(name: str, dtype: torch.dtype) -> None:
    """PyTorch wraps a Python int into a small int tile's dtype (uint8 `x == -2` compares
    with 254); Triton's interpreter raised on a negative constant beside an unsigned tile
    and on 300 beside an int8 one (found by the expression fuzzer)."""
    x = torch.tensor([0, 1, 2, 100, 127, 3, 5, 9, 254, 255], dtype=torch.int64).to(dtype)
    check_modes(small_ints, (x.to(DEVICE), name), lambda x, n: SMALL_INTS[n](x))


BOOLS = {
    "add": lambda x, y: x + y,
    "mul": lambda x, y: x * y,
    "add_then_float": lambda x, y: (x + y).float(),
    "squared_sum": lambda x, y: (x + y) * (x + y),
    "maximum": torch.maximum,
    "add_int": lambda x, y: x + 1,
}


@tc.kernel(config=tc.Config(block_sizes=[16]))
def bools(x: torch.Tensor, y: torch.Tensor, name: str) -> torch.Tensor:
    fn = BOOLS[name]
    out = torch.empty(x.shape, dtype=fn(x[:1], y[:1]).dtype, device=x.device)
    for tile in tc.tile(x.size(0)):
        out[tile] = fn(x[tile], y[tile])
    return out


@pytest.mark.parametrize("name", list(BOOLS))
def test_bool_arithmetic_is_logical(name: str) -> None:
    """True + True is True in PyTorch; compiled code gave 2 (Triton adds int1 as
    integers), which a cast to float kept (found by the dtype fuzzer)."""
    x = torch.tensor([True, False, True, False] * 5, device=DEVICE)
    y = torch.tensor([True, True, False, False] * 5, device=DEVICE)
    check_modes(bools, (x, y, name), lambda x, y, n: BOOLS[n](x, y))


@tc.kernel
def where_of_constants(x: torch.Tensor, n: int) -> torch.Tensor:
    out = torch.empty([x.size(0), 2], device=x.device)
    for tile in tc.tile(x.size(0)):
        picked = torch.where(x[tile, :] > -2, n, 5).to(torch.float32)
        out[tile, 0] = picked[:, 0]
        out[tile, 1] = picked.sum(-1)
    return out


def test_where_of_int_constants_cast_to_float() -> None:
    """The cast folded into the `where`, whose int constants Triton kept as an int32
    tile: the first column was stored as the bits of 3 and 5 (4e-45); found by the
    reduction fuzzer."""
    x = torch.randint(-5, 5, (6, 9), device=DEVICE)

    def reference(x: torch.Tensor, n: int) -> torch.Tensor:
        picked = torch.where(x > -2, n, 5).to(torch.float32)
        return torch.stack([picked[:, 0], picked.sum(-1)], 1)

    check_modes(where_of_constants, (x, 3), reference)


def test_running_sums_start_from_positive_zero() -> None:
    """PyTorch's cumsum adds each element to a running total that starts at +0.0, so a
    row's leading -0.0 sums to +0.0; Triton's scan kept -0.0 (the reduction fuzzer's
    find)."""
    x = torch.tensor([[-0.0, -0.0, 1.0, -1.0], [-0.0, 2.0, -2.0, -0.0], [1.0, -0.0, -1.0, -0.0]])
    check_modes(rows, (x.to(DEVICE), "cumsum"), lambda x, n: REDUCTIONS[n](x))


@tc.kernel
def add_numbers(x: torch.Tensor, s: float) -> torch.Tensor:
    out = torch.empty([x.size(0), 4], dtype=x.dtype, device=x.device)
    for tile in tc.tile(x.size(0)):
        h = x[tile]
        out[tile, 0] = h + 3.141592653589793
        out[tile, 1] = 0.1 - h
        acc = h
        acc += s
        out[tile, 2] = acc
        out[tile, 3] = h - 999
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_adds_of_numbers_compute_in_float32(dtype: torch.dtype) -> None:
    """`h + c` of a 16-bit tile adds the float32 constant and rounds once, in both modes, as
    PyTorch's CUDA kernels do: PyTorch's CPU add rounds c to 16 bits first (its mul does
    not), and eager mode followed it (`h + math.pi` differed from compiled in a fifth of
    float16 values; -999 is -1000 in bfloat16); the flow fuzzer's find."""
    x = (torch.randn(300, generator=torch.Generator().manual_seed(0)) * 50).to(dtype)
    wide, s = x.float(), 3.141592653589793
    expected = torch.stack([wide + s, 0.1 - wide, wide + s, wide - 999], 1).to(dtype)
    assert not torch.equal(expected[:, 0], x + s)  # (where PyTorch's CPU add differs)
    for mode in ("eager", "triton"):
        assert torch.equal(run_mode(add_numbers, (x.to(DEVICE), s), mode).cpu(), expected), mode


@tc.kernel
def cube(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = (3 * x[tile]) ** 3
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_powers_of_numbers_round_once(dtype: torch.dtype) -> None:
    """`h ** 3` is computed in float32 and rounded once in both modes: PyTorch's CPU
    bfloat16 kernel rounds h * h to bfloat16 first (its float16 one does not), and eager mode
    followed it (a bfloat16 cube an ulp from the compiled one); the flow fuzzer's find."""
    x = (torch.randn(300, generator=torch.Generator().manual_seed(1)) * 3).to(dtype)
    expected = ((3 * x).float() ** 3).to(dtype)
    for mode in ("eager", "triton"):
        assert torch.equal(run_mode(cube, (x.to(DEVICE),), mode).cpu(), expected), mode


@tc.kernel
def lerp_to_float32(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.lerp(x[tile], y[tile], 0.3)


def test_lerp_of_two_dtypes_is_refused_as_pytorch_refuses_it() -> None:
    """PyTorch's lerp needs its start and end (and a weight tile) of one dtype; tilecraft
    promoted a float16 start and a float32 end (the expression fuzzer's find, seed 31)."""
    x, y = torch.randn(5, device=DEVICE).half(), torch.randn(5, device=DEVICE)
    args = (x, y, torch.zeros(5, device=DEVICE))
    with pytest.raises(RuntimeError, match="expected dtype"):  # (eager mode runs PyTorch's)
        run_mode(lerp_to_float32, args, "eager")
    with pytest.raises(DtypeError, match="lerp of torch.float16 and torch.float32 tiles"):
        run_mode(lerp_to_float32, args, "triton")


@tc.kernel
def extremes_of_a_scalar(x: torch.Tensor, f: torch.Tensor, out: torch.Tensor) -> None:
    for i in tc.grid(x.size(0)):
        for t in tc.tile(x.size(1)):
            a, v = x[i, t], f[i]
            out[i, t, 0] = torch.maximum(v, a)
            out[i, t, 1] = torch.minimum(v * 2, a)


def test_maximum_of_a_loaded_scalar_and_a_tile() -> None:
    """Its NaN test, a 0-d bool, or'd with the tile's comparison failed in Triton's
    interpreter (numpy's bitwise_or); the flow fuzzer's find (seed 104, `max(acc, b % 2)`
    with `acc` a 0-d value)."""
    x = torch.tensor([[1.0, -2.0, NAN, 0.5], [3.0, -INF, 2.0, -1.0]], device=DEVICE)
    f = torch.tensor([0.75, NAN], device=DEVICE)

    def reference(x: torch.Tensor, f: torch.Tensor, out: torch.Tensor) -> tuple:
        v = f[:, None]
        return x, f, torch.stack([torch.maximum(v, x), torch.minimum(v * 2, x)], -1)

    check_modes(extremes_of_a_scalar, (x, f, torch.zeros(2, 4, 2, device=DEVICE)), reference)


@tc.kernel
def or_of_a_scalar_test(x: torch.Tensor, f: torch.Tensor, out: torch.Tensor) -> None:
    for i in tc.grid(x.size(0)):
        for t in tc.tile(x.size(1)):
            a, v = x[i, t], f[i]
            if (a >= 0) & ((a != 1) | (v == 1)):
                out[i, t] = a


def test_or_of_a_tile_test_and_a_scalar_test_masks_a_store() -> None:
    """`tile_test | scalar_test` as a store's mask: Triton's interpreter made float32 values
    of `tl.where(tile_test, True, scalar_test)` (an InterpreterError, "mask has unsupported
    dtype"); the flow fuzzer's find (seed 115)."""
    x = torch.tensor([[-2, 0, 1, 3], [1, -1, 4, 1]], dtype=torch.int8, device=DEVICE)
    f = torch.tensor([0, 1], dtype=torch.int8, device=DEVICE)

    def reference(x: torch.Tensor, f: torch.Tensor, out: torch.Tensor) -> tuple:
        keep = (x >= 0) & ((x != 1) | (f[:, None] == 1))
        return x, f, torch.where(keep, x, out)

    check_modes(or_of_a_scalar_test, (x, f, torch.zeros_like(x)), reference)


@tc.kernel
def and_of_a_scalar_test(x: torch.Tensor, f: torch.Tensor, out: torch.Tensor) -> None:
    for i in tc.grid(x.size(0)):
        for t in tc.tile(x.size(1)):
            a, v = x[i, t], f[i]
            if (a == 1) & (v != 2):
                out[i, t] = a * 3


@pytest.mark.parametrize("width", [1, 5])
def test_and_of_a_tile_test_and_a_scalar_test_masks_a_store(width: int) -> None:
    """`tile_test & scalar_test` as a store's mask, on a block of one element (no bounds
    mask beside it): `tl.where(tile_test, scalar_test, False)` was no bool block there in
    Triton's interpreter ("mask has unsupported dtype"; the flow fuzzer's, seed 120)."""
    x = torch.tensor([[1, 0, 1, 1, 2]] * 3, dtype=torch.int8, device=DEVICE)[:, :width]
    f = torch.tensor([0, 2, 1], dtype=torch.int8, device=DEVICE)

    def reference(x: torch.Tensor, f: torch.Tensor, out: torch.Tensor) -> tuple:
        return x, f, torch.where((x == 1) & (f[:, None] != 2), x * 3, out)

    check_modes(and_of_a_scalar_test, (x, f, torch.zeros_like(x)), reference)


@tc.kernel
def block_scans(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    sums, ends = torch.empty_like(x), torch.empty_like(x)
    width = torch.empty(x.size(0), dtype=torch.int32, device=x.device)
    block = tc.register_block_size(x.size(1))
    for tile_r in tc.tile(x.size(0)):
        for tile_c in tc.tile(x.size(1), block_size=block):
            v = x[tile_r, tile_c]
            sums[tile_r, tile_c] = torch.cumsum(v, 0)  # along tile_r's own block
            ends[tile_r, tile_c] = torch.sort(v, 1).values
        width[tile_r] = tile_r.block_size + block
    return sums, ends, width


@pytest.mark.parametrize("sizes", [None, [4, 8], [16, 2], [32, 16]])
def test_tile_local_scans_see_the_configs_blocks_in_both_modes(sizes: list[int] | None) -> None:
    """A scan or sort along a tiled dim sees one block of it: eager mode tiles each loop as
    the config (or the default config) tiles compiled code, not by a size of its own."""
    x = torch.randn(37, 21, device=DEVICE)
    config = None if sizes is None else tc.Config(block_sizes=sizes)
    if sizes is None:
        sizes = [int(b) for b in block_scans.bind((x,)).default_config.block_sizes]
    rows, cols = sizes[1], sizes[0]

    def reference(x: torch.Tensor) -> tuple:
        blocks = [x[r : r + rows] for r in range(0, x.size(0), rows)]
        sums = torch.cat([b.cumsum(0) for b in blocks])
        ends = torch.cat([c.sort(1).values for c in x.split(cols, 1)], 1)
        width = torch.full((x.size(0),), rows + cols, dtype=torch.int32, device=x.device)
        return sums, ends, width

    check_modes(block_scans, (x,), reference, torch.float32, config=config)
