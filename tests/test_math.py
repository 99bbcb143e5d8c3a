"""Elementwise math from the op table, in both CPU modes, against PyTorch and each other.

Inputs hold NaN, infinities, zeros of both signs, halves (rounding ties) and values of
both signs, so the cases where a naive lowering departs from PyTorch are exercised.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft.ir.ops import OPDEFS, Kind
from tilecraft.testing import MODES, TOLERANCES, check_modes, run_mode

SPECIAL = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -2.5, 1e-7]


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    """Close within the dtype's tolerance, with NaN exactly where PyTorch has NaN."""
    rtol, atol = TOLERANCES[dtype]
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)


def special_values(shape: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    x = torch.randn(shape, device=DEVICE) * 3
    flat = x.view(-1)
    flat[: len(SPECIAL)] = torch.tensor(SPECIAL)
    return x.to(dtype)


@tc.kernel
def unary(x: torch.Tensor, name: str) -> torch.Tensor:
    fn = getattr(torch, name)
    out = torch.empty(x.shape, dtype=fn(x[:1, :1]).dtype, device=x.device)
    for tile in tc.tile(x.size()):
        out[tile] = fn(x[tile])
    return out


UNARY = [
    "round",
    "trunc",
    "floor",
    "ceil",
    "sign",
    "abs",
    "neg",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tanh",
    "sigmoid",
    "erf",
    "erfc",
    "reciprocal",
    "isnan",
    "isinf",
    "isfinite",
    "relu",
    "square",
]


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.float64], ids=["f32", "f16", "f64"]
)
def test_unary_matches_torch_with_nan_inf_and_ties(mode, name: str, dtype: torch.dtype) -> None:
    x = special_values((13, 37), dtype)
    expected = getattr(torch, name)(x)
    actual = mode(unary)(x, name)
    assert actual.dtype == expected.dtype
    if expected.dtype == torch.bool:
        assert torch.equal(actual, expected)
        return
    assert_close(actual, expected, dtype)


@pytest.mark.parametrize("name", ["log1p", "expm1"])
def test_log1p_expm1_keep_precision_near_zero(mode, name: str) -> None:
    x = torch.tensor([[1e-10, -1e-9, 3e-8, 1e-6, -1e-5]], device=DEVICE)
    actual = mode(unary)(x, name)
    torch.testing.assert_close(actual, getattr(torch, name)(x), rtol=1e-6, atol=0)


@pytest.mark.parametrize("name", ["expm1", "tanh"])
def test_expm1_and_tanh_keep_precision_small_and_large(mode, name: str) -> None:
    """tanh was 2 * sigmoid(2x) - 1 (0 for |x| < 3e-8: all precision lost) and expm1 took
    the log of exp(x), subnormal for x near -100 (expm1(-100) was -0.9997)."""
    x = torch.tensor([[1e-10, -1e-7, 3e-5, 0.3, -2.5, 9.0, -50.0, -100.0, 60.0]], device=DEVICE)
    torch.testing.assert_close(mode(unary)(x, name), getattr(torch, name)(x), rtol=1e-5, atol=0)


def test_erfc_keeps_its_tail_and_ndtr_is_pytorchs(mode) -> None:
    """erfc was refused. Under the interpreter (no libdevice) it is 1 - erf in float64
    below 2 and a continued fraction beyond (erfc(9) is 4e-37, erfc(10) a denormal);
    ndtr is PyTorch's 0.5 * (1 + erf(x / sqrt(2))), cancellation and all."""
    x = torch.tensor([[0.0, 0.3, -0.7, 1.9, 2.1, 3.0, 5.0, 9.0, 10.0, 10.5, -3.0, -27.0]])
    x = x.to(DEVICE)
    # (on a GPU erfc(10), a subnormal, is rounded once from float64: 1.4e-45, where CUDA's
    # erfcf gives 2.8e-45)
    tail = 0 if x.device.type == "cpu" else 1.5e-45
    torch.testing.assert_close(mode(unary)(x, "erfc"), torch.erfc(x), rtol=2e-6, atol=tail)
    wide = x.double() * 2.5
    torch.testing.assert_close(mode(unary)(wide, "erfc"), torch.erfc(wide), rtol=1e-13, atol=0)
    grid = torch.linspace(-12, 12, 2001, device=DEVICE)[None]
    for dtype, atol in ((torch.float32, 1e-6), (torch.float64, 1e-12), (torch.bfloat16, 4e-3)):
        found = mode(normal_cdf)(grid.to(dtype))
        torch.testing.assert_close(found, torch.special.ndtr(grid.to(dtype)), atol=atol, rtol=0)


@tc.kernel
def normal_cdf(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size()):
        out[tile] = torch.special.ndtr(x[tile])
    return out


@pytest.mark.parametrize("name", ["lgamma", "digamma"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_lgamma_and_digamma_over_poles_and_tails(mode, name: str, dtype: torch.dtype) -> None:
    """Both were refused. Negative arguments (reflected), the poles at 0 and the negative
    integers (digamma: -inf at 0, +inf at -0.0, NaN below), tiny and huge arguments and
    the zeros of lgamma at 1 and 2."""
    grid = torch.linspace(-9.7, 25.3, 1200, device=DEVICE)
    edges = [0.0, -0.0, -1.0, -3.0, 1.0, 2.0, 0.5, 1e-30, -1e-30, 1e30, float("inf")]
    edges += [-float("inf"), float("nan"), 1.4616321449683622, -2.5]
    x = torch.cat([grid, torch.tensor(edges, device=DEVICE)])[None].to(dtype)
    expected = getattr(torch, name)(x)
    rtol, atol = {torch.float32: (2e-6, 1e-6), torch.float64: (1e-11, 1e-13)}.get(
        dtype, (2e-3, 2e-3)
    )
    torch.testing.assert_close(mode(unary)(x, name), expected, rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_erfinv_and_i0(mode, dtype: torch.dtype) -> None:
    """Both were refused. erfinv over (-1, 1) and at +-1 (+-inf), beyond (NaN) and 0; i0
    over +-100 (past float32's range from 89 on: inf), 0 and the series' switch at 30."""
    inside = torch.cat([torch.linspace(-0.999999, 0.999999, 2001), torch.tensor([0.0, -0.0])])
    outside = torch.tensor([1.0, -1.0, 1.5, -2.0, float("nan"), 1e-30])
    y = torch.cat([inside, outside]).to(DEVICE)[None].to(dtype)
    tol = {torch.float32: (2e-6, 1e-6), torch.float64: (1e-9, 1e-12)}.get(dtype, (1e-2, 1e-2))
    found = mode(unary)(y, "erfinv")
    torch.testing.assert_close(found, torch.erfinv(y), rtol=tol[0], atol=tol[1], equal_nan=True)
    x = torch.cat([torch.linspace(-100, 100, 2001), torch.tensor([0.0, 29.99, 30.0])])
    x = x.to(DEVICE)[None].to(dtype)
    torch.testing.assert_close(mode(unary)(x, "i0"), torch.i0(x), rtol=tol[0] * 2, atol=0)


def test_log10_of_powers_of_ten_is_exact(mode) -> None:
    """log10 was log2(x) * log10(2), rounded twice: 2.9999998 for 1000 in float32, so
    floor(log10(x)), the digit count, came out one short."""
    x = torch.tensor([[10.0**k for k in range(-30, 31)]], device=DEVICE)
    assert torch.equal(mode(unary)(x, "log10"), torch.log10(x))
    exact = torch.tensor([[10.0**k for k in range(11)]], device=DEVICE)  # float32 holds these
    assert torch.equal(mode(unary)(exact, "log10").floor(), torch.arange(11.0, device=DEVICE)[None])


@tc.kernel
def scaled_reciprocal(x: torch.Tensor, s: float) -> torch.Tensor:
    out = torch.empty([2, *x.shape], dtype=(1.7 / x[:1]).dtype, device=x.device)
    for tile_m, tile_n in tc.tile(x.size()):
        out[0, tile_m, tile_n] = 1.7 / x[tile_m, tile_n]
        out[1, tile_m, tile_n] = s / x[tile_m, tile_n]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32])
def test_number_over_tile_is_reciprocal_times_number(mode, dtype: torch.dtype) -> None:
    """`1.7 / x` is PyTorch's x.reciprocal() * 1.7 (Tensor.__rtruediv__), rounded twice;
    compiled code divided once, an ulp away in a quarter of the elements (the fuzzer's
    find)."""
    x = (torch.randn(40, 50, device=DEVICE) * 5).to(dtype)
    expected = torch.stack([1.7 / x, 0.5 / x])
    torch.testing.assert_close(
        mode(scaled_reciprocal)(x, 0.5), expected, rtol=0, atol=0, equal_nan=True
    )


@pytest.mark.parametrize("name", ["round", "trunc", "sign", "abs", "neg", "floor"])
def test_integer_unary(mode, name: str) -> None:
    x = torch.randint(-50, 50, (7, 9), device=DEVICE, dtype=torch.int32)
    assert torch.equal(mode(unary)(x, name), getattr(torch, name)(x))


@tc.kernel
def binary(x: torch.Tensor, y: torch.Tensor, name: str) -> torch.Tensor:
    fn = getattr(torch, name)
    out = torch.empty(x.shape, dtype=fn(x[:1, :1], y[:1, :1]).dtype, device=x.device)
    for tile in tc.tile(x.size()):
        out[tile] = fn(x[tile], y[tile])
    return out


@pytest.mark.parametrize("name", ["maximum", "minimum", "fmod", "remainder", "pow", "atan2"])
def test_binary_float_ops_propagate_nan(mode, name: str) -> None:
    x = special_values((11, 23), torch.float32)
    y = special_values((11, 23), torch.float32).flip(0).contiguous()
    if name == "pow":
        y = torch.randint(-3, 4, y.shape, device=DEVICE).float().where(y.isfinite(), y)
    expected = getattr(torch, name)(x, y)
    assert_close(mode(binary)(x, y, name), expected, torch.float32)


@pytest.mark.parametrize("name", ["bitwise_left_shift", "bitwise_right_shift", "fmod"])
def test_binary_integer_ops(mode, name: str) -> None:
    x = torch.randint(-100, 100, (9, 13), device=DEVICE, dtype=torch.int32)
    y = torch.randint(1, 5, (9, 13), device=DEVICE, dtype=torch.int32)
    assert torch.equal(mode(binary)(x, y, name), getattr(torch, name)(x, y))


@tc.kernel
def power(x: torch.Tensor, exponent: float) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=(x[:1] ** exponent).dtype, device=x.device)
    for tile in tc.tile(x.size()):
        out[tile] = x[tile] ** exponent
    return out


@pytest.mark.parametrize("exponent", [5, 3, 2, 0, -1, -3, 2.0, 7.0, 0.5, 1.5, -0.5, 2.5])
def test_pow_of_negative_bases_follows_torch_signs(mode, exponent: float) -> None:
    x = special_values((5, 41), torch.float32)
    assert_close(mode(power)(x, exponent), x**exponent, torch.float32)


@pytest.mark.parametrize("exponent", [0, 1, 2, 5])
def test_integer_pow_stays_integer(mode, exponent: int) -> None:
    x = torch.randint(-9, 9, (6, 7), device=DEVICE, dtype=torch.int64)
    out = mode(power)(x, exponent)
    assert out.dtype == torch.int64 and torch.equal(out, x**exponent)


@tc.kernel
def nan_clamp(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size()):
        v = x[tile]
        out[tile] = torch.clamp(v, -1.0, 1.0) + torch.relu(v) + max(v, 0.5)
    return out


def test_clamp_relu_and_builtin_max_propagate_nan(mode) -> None:
    x = special_values((9, 17), torch.float32)
    expected = torch.clamp(x, -1.0, 1.0) + torch.relu(x) + torch.maximum(x, torch.tensor(0.5))
    assert_close(mode(nan_clamp)(x), expected, torch.float32)


@tc.kernel
def bit_ops(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size()):
        v = x[tile]
        out[tile] = (~v) ^ (v << 2) | (v >> 1) & 7
    return out


def test_bitwise_operators_on_ints(mode) -> None:
    x = torch.randint(-1000, 1000, (10, 3), device=DEVICE, dtype=torch.int32)
    assert torch.equal(mode(bit_ops)(x), (~x) ^ (x << 2) | (x >> 1) & 7)


def test_every_elementwise_op_has_an_emission_and_eager_rule() -> None:
    from tilecraft.codegen.kernel import KernelWriter

    for opdef in OPDEFS.values():
        if opdef.kind is Kind.ELEMENTWISE:  # cast, bitcast: written by the writer's op_ method
            written = hasattr(KernelWriter, f"op_{opdef.name}")
            has_rule = opdef.emit is not None or opdef.helper is not None or written
            assert has_rule and opdef.eager is not None, opdef.name


@tc.kernel
def short_product(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.size()
    _, n = y.size()
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in tc.tile([m, n]):
        out[tile_m, tile_n] = (x[tile_m, :] @ y[:, tile_n]).to(out.dtype)
    return out


def test_products_with_a_short_inner_dim_avoid_tl_dot(mode) -> None:
    """tl.dot needs an inner dim of at least 16 on a GPU: shorter ones multiply and sum."""
    x, y = torch.randn(19, 3, device=DEVICE), torch.randn(3, 21, device=DEVICE)
    code = short_product.bind((x, y)).to_triton_code()
    assert "tl.dot" not in code and "tl.sum(" in code
    assert_close(mode(short_product)(x, y), x @ y, torch.float32)


@tc.kernel
def to_bfloat16(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile].to(torch.bfloat16)
    return out


def test_bfloat16_conversion_rounds_to_nearest_even_exactly(mode) -> None:
    """Ties (halfway between two bf16 numbers), subnormals, NaN, inf and overflow."""
    ties = (torch.arange(1, 2000, 7, dtype=torch.int32) << 16 | 0x8000).view(torch.float32)
    edges = torch.tensor([float("nan"), float("inf"), -float("inf"), 3.4e38, 1e-40, -0.0])
    x = torch.cat([torch.randn(301), ties, -ties, edges]).to(DEVICE)
    actual, expected = mode(to_bfloat16)(x), x.to(torch.bfloat16)
    same_bits = actual.view(torch.int16) == expected.view(torch.int16)
    assert bool((same_bits | (actual.isnan() & expected.isnan())).all())  # any NaN payload


@tc.kernel
def product_f64(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.size()
    _, n = y.size()
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in tc.tile([m, n]):
        acc = tc.zeros([tile_m, tile_n], dtype=torch.float64)
        for tile_k in tc.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = acc
    return out


@pytest.mark.parametrize("m,k,n", [(20, 37, 17), (1, 1, 1), (0, 5, 3), (4, 0, 3), (5, 3, 7)])
def test_float64_products_keep_double_precision(mode, m: int, k: int, n: int) -> None:
    """Triton's interpreter multiplied float64 operands into garbage (1e296); short inner
    dims (K < 16) take per-k outer products; NaN and inf propagate as in PyTorch."""
    x = torch.randn(m, k, device=DEVICE, dtype=torch.float64)
    y = torch.randn(k, n, device=DEVICE, dtype=torch.float64)
    if m > 1 and k > 1:
        x[0, 0], x[1, 1] = float("nan"), float("inf")
    torch.testing.assert_close(
        mode(product_f64)(x, y), x @ y, rtol=1e-12, atol=1e-12, equal_nan=True
    )


@tc.kernel(config=tc.Config(block_sizes=[32]))
def _correctly_rounded(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty([4, x.size(0)], dtype=x.dtype, device=x.device)
    for t in tc.tile(x.size(0)):
        out[0, t] = x[t] / y[t]
        out[1, t] = torch.sqrt(x[t])
        out[2, t] = torch.reciprocal(y[t])
        out[3, t] = -x[t]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_division_roots_and_negation_are_correctly_rounded(dtype: torch.dtype) -> None:
    """Bit for bit the correctly rounded answers (zeros' signs included), as PyTorch's CUDA
    kernels give them: Triton's float32 `/` and `tl.sqrt` are the GPU's approximations (1-2
    ulp) and its `-x` is `0 - x`. (PyTorch's CPU sqrt is an ulp off a fifth of the time,
    so eager mode on the CPU is held to that only for the other three.)"""
    x = torch.cat([special_values((1, 16), dtype).view(-1), torch.rand(61, device=DEVICE) * 1e3])
    x, y = x.to(dtype), (torch.rand(77, device=DEVICE) * 7 + 0.1).to(dtype)
    # Python's math.sqrt is IEEE's correctly rounded root; PyTorch's CPU float64 sqrt is an
    # ulp off on some machines (sqrt(0.5) on an AVX2 one)
    root = torch.tensor([math.sqrt(v) if v >= 0 else math.nan for v in x.tolist()], dtype=dtype)
    root = root.to(DEVICE)
    want = torch.stack([x / y, root, torch.reciprocal(y), -x])
    for mode in MODES:
        got = run_mode(_correctly_rounded, (x, y), mode)
        rows = [0, 2, 3] if mode == "eager" and DEVICE == "cpu" else [0, 1, 2, 3]
        got, expected = got[rows], want[rows]
        same = (got == expected) | (got.isnan() & expected.isnan())
        signs = torch.equal(got.signbit() | got.isnan(), expected.signbit() | expected.isnan())
        assert same.all() and signs, (mode, (~same).nonzero().tolist())


@tc.kernel(config=tc.Config(block_sizes=[8]))
def _signed_zeros(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty([7, x.size(0)], dtype=x.dtype, device=x.device)
    for t in tc.tile(x.size(0)):
        z = x[t]
        out[0, t] = -z
        out[1, t] = z**3
        out[2, t] = torch.pow(z, 2.0)
        out[3, t] = torch.abs(z)
        out[4, t] = z * 2 - 0.0
        out[5, t] = z + -0.0
        out[6, t] = torch.full_like(z, -0.0)
    return out


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64], ids=str
)
def test_zeros_keep_the_sign_pytorch_gives_them(dtype: torch.dtype) -> None:
    """assert_close takes -0.0 for 0.0; these compare the sign bits (on the GPU, Triton's
    `-x` was `0 - x`, so -(+0.0) came out +0.0, and a -0.0 constant is made +0.0)."""
    x = torch.tensor([0.0, -0.0, 1.0, -2.0], dtype=dtype, device=DEVICE)
    rows = [-x, x**3, torch.pow(x, 2.0), torch.abs(x), x * 2 - 0.0, x + -0.0]
    want = torch.stack([*rows, torch.full_like(x, -0.0)])
    for mode in MODES:
        got = run_mode(_signed_zeros, (x,), mode)
        torch.testing.assert_close(got, want, msg=mode)
        assert torch.equal(got.signbit(), want.signbit()), mode


@tc.kernel
def remainders_of(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        out[t, 0] = x[t] % y[t]
        out[t, 1] = torch.fmod(x[t], y[t])
        out[t, 2] = 2.0009 % y[t]
        out[t, 3] = torch.fmod(x[t], 1e-45)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_remainder_by_a_tiny_divisor_is_exact_in_both_modes(dtype) -> None:
    """`0.5 % 1e-45` is 0.0 (C's fmod is exact); PyTorch's CPU kernel gives NaN on a
    tensor longer than one element once the quotient passes about 1e38 (its vectorized
    fmod is undefined there), and so did eager mode, where compiled code and PyTorch's CUDA
    kernels give 0.0. The reference is PyTorch one element at a time (its exact path)."""
    tiny = [1e-45, 3e-39, -1e-40, 6e-8, 1.0, math.inf, 0.0, -2.5]
    big = [0.5, 1.5, -3.0, 1e30, -0.0, 65504.0, math.nan, 7.3125]
    x = torch.tensor([v for v in big for _ in tiny]).to(dtype).to(DEVICE)
    y = torch.tensor([v for _ in big for v in tiny]).to(dtype).to(DEVICE)
    ops = [
        lambda x, y: x % y,
        lambda x, y: torch.fmod(x, y),
        lambda x, y: 2.0009 % y,
        lambda x, y: torch.fmod(x, 1e-45),
    ]

    def reference(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> tuple:
        def alone(op: Callable) -> torch.Tensor:  # (x[:0] too: a tensor of no elements)
            parts = [op(x[k : k + 1], y[k : k + 1]) for k in range(len(x))]
            return torch.cat([op(x[:0], y[:0]), *parts])

        return x, y, torch.stack([alone(op) for op in ops], 1)

    for n in (len(x), 1, 0):
        out = torch.empty(n, len(ops), dtype=dtype, device=DEVICE)
        check_modes(remainders_of, (x[:n], y[:n], out), reference, torch.float64)


@tc.kernel
def extrema_of(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0), block_size=16):
        out[t, 0] = torch.maximum(x[t], y[t])
        out[t, 1] = torch.minimum(x[t], y[t])
        out[t, 2] = torch.max(x[t], y[t])
        out[t, 3] = torch.clamp(x[t], min=y[t])
        out[t, 4] = x[t].clamp_max(y[t])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_maximum_of_two_zeros_does_not_depend_on_a_tile_length(dtype) -> None:
    """Of two zeros, PyTorch's CPU maximum gives the second in its vector loop and the first
    in its scalar tail, so eager mode's zero depended on a tile's length (a tile of 3 gave
    -0.0 for the 0.0 of compiled code, which gives the second on the CPU and the GPU's zero
    on a GPU, as PyTorch's CUDA kernels); so did a clamp to a tile's bounds."""
    x = torch.tensor([-0.0, 0.0, -0.0, 1.0, math.nan] * 4, dtype=dtype, device=DEVICE)
    y = torch.tensor([0.0, -0.0, -0.0, -1.0, 2.0] * 4, dtype=dtype, device=DEVICE)

    def reference(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> tuple:
        ties = (x == 0) & (y == 0) & (DEVICE == "cpu")  # (on a GPU: PyTorch's CUDA zeros)
        big, small = (torch.where(ties, y, f(x, y)) for f in (torch.maximum, torch.minimum))
        return x, y, torch.stack([big, small, big, big, small], 1)

    for n in (3, 20, 19, 1, 0):  # (19: a last tile of 3)
        out = torch.empty(n, 5, dtype=dtype, device=DEVICE)
        check_modes(extrema_of, (x[:n], y[:n], out), reference)


@tc.kernel
def gelu_of(x: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        out[t] = torch.nn.functional.gelu(x[t])


def test_gelu_of_infinity_is_infinity_in_both_modes() -> None:
    """x * Φ(x) at x = inf is inf (as compiled code and PyTorch's CUDA kernels give);
    PyTorch's CPU kernel gives NaN, and so did eager mode. At -inf both give NaN."""
    x = torch.tensor([math.inf, -math.inf, 0.5, -0.0, math.nan], device=DEVICE)
    expected = torch.tensor([math.inf, math.nan, 0.5 * 0.6914624612740131, -0.0, math.nan])
    for n in (5, 1, 0):
        out = torch.empty(n, device=DEVICE)
        check_modes(gelu_of, (x[:n], out), lambda x, out: (x, expected[: len(x)].to(DEVICE)))


@tc.kernel
def angles(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        out[t, 0] = torch.atan(x[t])
        out[t, 1] = torch.atan2(x[t], y[t])


def test_atan_of_float64_keeps_float64s_precision() -> None:
    """Under Triton's interpreter atan's constants (pi / 2, pi / 4) were float32 literals:
    atan(-inf) was -1.5707963705 in float64, 3e-8 off."""
    x = torch.tensor([-math.inf, 0.5, 3.0, -0.7, 1e-300, 2.5], dtype=torch.float64, device=DEVICE)
    y = torch.tensor([1.0, 0.5, -2.0, -0.7, 1.0, math.inf], dtype=torch.float64, device=DEVICE)
    out = torch.empty(6, 2, dtype=torch.float64, device=DEVICE)
    expected = torch.stack([torch.atan(x), torch.atan2(x, y)], 1)
    for mode in MODES:
        got = run_mode(angles, (x, y, out), mode)[-1]
        torch.testing.assert_close(got, expected, rtol=1e-15, atol=0)


@tc.kernel
def hyperbolic(x: torch.Tensor, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        out[t, 0] = torch.sinh(x[t])
        out[t, 1] = torch.cosh(x[t])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_sinh_and_cosh_are_finite_up_to_the_dtypes_limit(dtype) -> None:
    """sinh(89) is 2.24e38 in float32: PyTorch's vectorized CPU kernel gave inf (its exp(89)
    overflows), and so did eager mode on a tile of 16 or more; compiled code's exp(|x| - ln
    2) was 4e-6 off there. Both modes now give it to float32's tolerance."""
    big = 709.9 if dtype == torch.float64 else 89.0
    values = [big, -big, 89.4, -21.0, 19.5, 0.5, -0.0, math.inf, math.nan] * 2
    x = torch.tensor(values, dtype=torch.float64).to(dtype).to(DEVICE)
    wide = x.double().cpu().tolist()
    sinh = [math.copysign(math.inf, v) if abs(v) > 1e3 else math.sinh(v) for v in wide]
    cosh = [math.inf if abs(v) > 1e3 else math.cosh(v) for v in wide]
    expected = torch.tensor([sinh, cosh], dtype=torch.float64).T.to(dtype).to(DEVICE)
    for n in (len(values), 1, 0):
        out = torch.empty(n, 2, dtype=dtype, device=DEVICE)
        check_modes(hyperbolic, (x[:n], out), lambda x, out: (x, expected[: len(x)]))
