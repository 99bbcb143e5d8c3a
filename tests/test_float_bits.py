"""frexp, ldexp, nextafter and isclose on tiles (all were refused), in both CPU modes,
against PyTorch, exactly: zeros of both signs, subnormals, the largest and smallest
normals, infinities and NaN, in every float dtype PyTorch takes."""

from __future__ import annotations

import itertools

import pytest
import torch
from conftest import DEVICE, needs_nvidia_backend

import tilecraft as tc
from tilecraft.exc import DtypeError
from tilecraft.testing import check_modes, compile_for_gpu, run_mode

INF, NAN = float("inf"), float("nan")
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def edges(dtype: torch.dtype) -> torch.Tensor:
    info = torch.finfo(dtype)
    subnormal = info.smallest_normal * info.eps
    values = [0.0, -0.0, 1.0, -1.0, 0.5, 3.0, -7.25, 123.456, 1e-7, INF, -INF, NAN]
    values += [info.max, -info.max, info.smallest_normal, subnormal, -subnormal, subnormal * 3]
    return torch.tensor(values, dtype=torch.float64).to(DEVICE, dtype)


@tc.kernel
def parts(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mantissa = torch.empty_like(x)
    exponent = torch.empty(x.shape, dtype=torch.int32, device=x.device)
    for tile in tc.tile(x.size(0)):
        m, e = torch.frexp(x[tile])
        mantissa[tile] = m
        exponent[tile] = torch.frexp(x[tile]).exponent + e * 0
    return mantissa, exponent


@pytest.mark.parametrize("dtype", FLOATS)
def test_frexp_is_exact(dtype: torch.dtype) -> None:
    """The mantissa's magnitude in [0.5, 1) and the int32 exponent, subnormals included;
    0, inf and NaN are their own mantissa with exponent 0 (as PyTorch's, C's frexp)."""
    x = edges(dtype)
    check_modes(parts, (x,), lambda x: tuple(torch.frexp(x)), None)


@tc.kernel
def scaled(x: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=torch.ldexp(x[:1], e[:1]).dtype, device=x.device)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.ldexp(x[tile], e[tile])
    return out


@pytest.mark.parametrize("dtype", [*FLOATS, torch.int32])
@pytest.mark.parametrize("exponents", [torch.int32, torch.float32])
def test_ldexp_in_the_promoted_dtype(dtype: torch.dtype, exponents: torch.dtype) -> None:
    """x * 2^e in the operands' promoted dtype, integers giving float32: an integer
    exponent scales exactly (2^-149 * 2^200 is finite in float32), a float one is 2.0 ** e
    in its own dtype first (2.0 ** 200.0 is inf in float32, beside a float64 x too)."""
    x = (edges(dtype) if dtype.is_floating_point else torch.arange(-9, 9)).to(DEVICE, dtype)
    e = torch.tensor([0, 1, -1, 3, 200, -200, 10, -30, 2.5, -1.5, 127, -149])
    e = e.repeat(len(x) // len(e) + 1)[: len(x)].to(DEVICE, exponents)
    check_modes(scaled, (x, e), torch.ldexp, None)


@tc.kernel
def neighbour(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.nextafter(x[tile], y[tile])
    return out


def every_pair(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    index = torch.tensor(list(itertools.product(range(len(x)), repeat=2)), device=x.device)
    return x[index[:, 0]], x[index[:, 1]]


@pytest.mark.parametrize("dtype", FLOATS)
def test_nextafter_of_every_pair(dtype: torch.dtype) -> None:
    """One step of the bits toward the other operand: past the largest normal (inf), from
    a zero (the smallest subnormal with the other's sign), across the subnormals, equal
    operands (the second: -0.0 toward +0.0 is +0.0), NaN."""
    x, y = every_pair(edges(dtype))
    found = check_modes(neighbour, (x, y), torch.nextafter, None)
    expected = torch.nextafter(x, y)
    for value in found.values():  # (zeros' signs too: check_modes compares values)
        numbers = ~expected.isnan()
        assert torch.equal(value[numbers].signbit(), expected[numbers].signbit())


@tc.kernel
def near(x: torch.Tensor, y: torch.Tensor, rtol: float, atol: float, nan: bool) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=torch.bool, device=x.device)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.isclose(x[tile], y[tile], rtol=rtol, atol=atol, equal_nan=nan)
    return out


@pytest.mark.parametrize("dtype", [*FLOATS, torch.int32, torch.bool])
@pytest.mark.parametrize("tolerances", [(1e-5, 1e-8), (1e-2, 0.0), (0.0, 0.0), (0.0, 0.5)])
@pytest.mark.parametrize("nan", [False, True])
def test_isclose(dtype: torch.dtype, tolerances: tuple, nan: bool) -> None:
    """PyTorch's: equal, both NaN (equal_nan), or a finite difference within atol +
    |rtol * other|, each step in the operands' dtype (integers' differences in integers,
    bools as float32); infinities are close only to themselves."""
    if dtype.is_floating_point:
        x, y = every_pair(edges(dtype))
        y = torch.cat([y, x * (1 + 1e-3)])
        x = torch.cat([x, x])
    else:
        x = torch.tensor([-9, -1, 0, 1, 2, 50, 2**31 - 1, -(2**31)]).to(DEVICE, dtype)
        x, y = every_pair(x)
    args = (x, y, *tolerances, nan)

    def reference(x, y, rtol, atol, nan):
        return torch.isclose(x, y, rtol=rtol, atol=atol, equal_nan=nan)

    check_modes(near, args, reference, None)


@pytest.mark.parametrize("given", [[], [-0.7]], ids=["none", "one"])
def test_of_no_element_and_one(given: list) -> None:
    """Each of the four on empty and one-element tensors, in both modes."""
    x = torch.tensor(given, device=DEVICE)
    check_modes(parts, (x,), lambda x: tuple(torch.frexp(x)), None)
    e = torch.ones(len(given), dtype=torch.int32, device=DEVICE)
    check_modes(scaled, (x, e), torch.ldexp, None)
    check_modes(neighbour, (x, x * 3), torch.nextafter, None)
    args = (x, x * 3, 1e-5, 1e-8, False)
    check_modes(near, args, lambda x, y, *_: torch.isclose(x, y), None)


@tc.kernel
def parts_of_ints(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.frexp(x[tile]).mantissa
    return out


def test_frexp_of_integers_is_refused_at_the_line() -> None:
    with pytest.raises(DtypeError, match="frexp needs float tiles") as caught:
        run_mode(parts_of_ints, (torch.arange(5, device=DEVICE),), "triton")
    assert "torch.frexp(x[tile]).mantissa" in str(caught.value)


@needs_nvidia_backend
@pytest.mark.parametrize("dtype", FLOATS)
def test_every_function_compiles_for_sm90(dtype: torch.dtype) -> None:
    """Bit casts of each float dtype to its integers and back: Triton's compiler takes
    them, for sm_90."""
    config = tc.Config(block_sizes=[64])
    x = torch.rand(100).to(dtype)
    compile_for_gpu(parts, (x,), config)
    compile_for_gpu(scaled, (x, torch.arange(100, dtype=torch.int32)), config)
    compile_for_gpu(neighbour, (x, x), config)
    compile_for_gpu(near, (x, x, 1e-5, 1e-8, True), config)
