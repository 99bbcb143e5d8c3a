"""Python floats passed to kernels meet tiles as PyTorch's Python scalars do: the tile's
dtype decides (float32 for integer tiles), and float64 tiles get the float's full
precision (the kernel receives the float's 64 bits, not a float32)."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft.exc import DtypeError
from tilecraft.testing import check_modes, run_mode


@tc.kernel
def affine(x: torch.Tensor, s: float) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = x.dtype if x.dtype.is_floating_point else torch.float32
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    picked = torch.empty_like(out)
    for tile in tc.tile(x.size(0)):
        v = x[tile]
        out[tile] = (v - s) * (s * 3)  # `s * 3` computed in double, as in Python
        picked[tile] = torch.where(v > s, v, s)
    return out, picked


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.int64])
def test_host_float_follows_pytorch_promotion(mode, dtype: torch.dtype) -> None:
    x = (torch.randn(37, device=DEVICE) * 10).to(dtype)
    s = 0.1  # not a float32: a float64 result shows whether it was rounded to one
    out, picked = mode(affine)(x, s)
    expected = (x - s) * (s * 3)
    assert out.dtype == expected.dtype
    if dtype == torch.float16:  # rounded to half after each op in PyTorch
        torch.testing.assert_close(out, expected)
    else:
        assert torch.equal(out, expected)
    assert torch.equal(picked, torch.where(x > s, x, s).to(picked.dtype))


@tc.kernel
def cast_scale(x: torch.Tensor, s: float) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] + torch.full_like(x[tile], 0.0) + s
    return out


def test_extreme_host_floats(mode) -> None:
    x = torch.zeros(5, dtype=torch.float64, device=DEVICE)
    for s in (1e-310, -0.0, 1e300, float("inf"), float("-inf")):
        assert torch.equal(mode(cast_scale)(x, s), x + s)
    assert mode(cast_scale)(x, float("nan")).isnan().all()


@tc.kernel
def torch_of_host_floats(x: torch.Tensor, s: float, out: torch.Tensor) -> None:
    for tile_m, tile_n in tc.tile(out.size()):
        unit = torch.square(torch.div(s, s, rounding_mode="floor"))
        out[tile_m, tile_n] = torch.sign(torch.div(7, s, rounding_mode="floor")) % unit + x[
            tile_m, tile_n
        ] * (s % 1.0)


@pytest.mark.parametrize("s", [-0.5, 0.5, -3.0])
def test_torch_functions_of_host_floats_are_tensors(s: float) -> None:
    """`torch.div(7, s)` of a host float is a 0-d float32 tensor in PyTorch, whose `%` keeps
    PyTorch's zero sign (-1.0 % 1.0 is -0.0), where Python's float `%` (`s % 1.0`) takes
    the divisor's: compiled code computed the first as Python floats (+0.0). Seen at
    seed 102 of test_fuzz_dtypes, kernel 161."""
    from tilecraft.testing import check_modes

    x = torch.tensor([[0.0, -0.0, 1.5], [2.0, -1.0, 0.0]], device=DEVICE)

    def reference(x: torch.Tensor, s: float, out: torch.Tensor) -> tuple:
        unit = torch.square(torch.div(s, s, rounding_mode="floor"))
        first = torch.sign(torch.div(7, s, rounding_mode="floor")) % unit
        return x, first.to(x.device) + x * (s % 1.0)

    check_modes(torch_of_host_floats, (x, s, torch.empty_like(x)), reference)


@tc.kernel
def root_in_an_arm(x: torch.Tensor, s: float, n: int, out: torch.Tensor) -> None:
    for tile in tc.tile(x.size(0)):
        acc = x[tile]
        if acc > 100:  # taken for inf only
            acc = (s % float(n)) ** 0.5 * acc
        out[tile] = acc + 1


def test_a_negative_host_float_to_a_fractional_power_is_nan_in_both_modes() -> None:
    """Python's `(-2.5) ** 0.5` is a complex number: eager mode spread it through the tile
    from an `if` arm not taken (NaN where compiled code, computing it as a tensor's power,
    kept the other arm). Seen at seed 213 of the flow fuzzer, kernel 55."""
    from tilecraft.testing import check_modes

    x = torch.tensor([1.0, -3.0, float("inf"), 0.0], device=DEVICE)
    args = (x, -2.5, -5, torch.empty_like(x))
    expected = torch.where(x > 100, float("nan"), x + 1)  # (the arm taken for inf: NaN)
    check_modes(root_in_an_arm, args, lambda x, s, n, out: (x, expected))


@tc.kernel
def past_the_range(x: torch.Tensor, out: torch.Tensor) -> None:
    for tile in tc.tile(x.size(0)):
        a = x[tile]
        out[tile] = (a + (math.pi * 1000 + -999) ** 3) - 1e9 + (a**70000.0 - a)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_numbers_past_a_16_bit_range_add_in_float32_in_both_modes(dtype) -> None:
    """`h + 9.8e9`: PyTorch's CPU add rounds the number to inf first (`-inf + inf`: NaN),
    its CUDA kernels and compiled code add it in float32 (-inf); eager mode did the CPU's
    (flow fuzzer seed 218, kernel 118)."""
    from tilecraft.testing import check_modes

    x = torch.tensor([float("-inf"), 1.0, 0.5, 2.0, float("nan"), -1.0], device=DEVICE)
    x = x.to(dtype)

    def reference(x: torch.Tensor, out: torch.Tensor) -> tuple:
        wide = x.float()
        big = (wide + (math.pi * 1000 + -999) ** 3).to(dtype).float() - 1e9
        return x, (big.to(dtype).float() + (wide**70000.0).to(dtype).float() - wide).to(dtype)

    check_modes(past_the_range, (x, torch.empty_like(x)), reference, dtype)


@tc.kernel
def filled(x: torch.Tensor, s: float, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        out[t, 0] = torch.full_like(x[t], s)
        out[t, 1] = x[t].new_full([t], s)
        out[t, 2] = torch.full_like(x[t], x[t].amax())  # a scalar tile
        out[t, 3] = torch.full_like(x[t], 2.7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.uint8])
def test_a_fill_value_may_be_a_host_float_or_a_scalar_tile(dtype) -> None:
    """`torch.full_like(x, s)` with a float passed to the kernel (compiled code refused it:
    "a fill value must be a constant number"), converted to the tile's dtype as PyTorch
    converts a fill value: rounded to bfloat16 (7.3 is 7.3125), truncated to an integer
    (2.7 is 2, as compiled code refused too)."""
    x = (torch.arange(11, device=DEVICE) * 7 % 13).to(dtype)

    def reference(x: torch.Tensor, s: float, out: torch.Tensor) -> tuple:
        peak = x.amax().expand(x.shape) if len(x) else x
        parts = [torch.full_like(x, s), torch.full_like(x, s), peak]
        return x, torch.stack([*parts, torch.full_like(x, 2.7)], 1)

    specials = (math.inf, math.nan) if dtype.is_floating_point else ()
    for s in (7.3, -0.0, 200.9, *specials):
        if dtype == torch.uint8 and s < 0:
            continue  # (PyTorch refuses a negative float for uint8)
        for n in (11, 1, 0):
            out = torch.empty(n, 4, dtype=dtype, device=DEVICE)
            check_modes(filled, (x[:n], s, out), reference)


@tc.kernel
def fill_overflows(x: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        x[t] = torch.full_like(x[t], 300)


def test_a_fill_value_past_the_dtype_is_refused_as_pytorch_refuses_it() -> None:
    x = torch.zeros(4, dtype=torch.int8, device=DEVICE)
    with pytest.raises(DtypeError, match="300 does not fit torch.int8") as e:
        fill_overflows(x)
    assert "x[t] = torch.full_like(x[t], 300)" in str(e.value)
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.full_like(x, 300)


@tc.kernel
def number_over_tile(x: torch.Tensor, s: float, out: torch.Tensor) -> None:
    for t in tc.tile(x.size(0)):
        out[t, 0] = s / x[t]
        out[t, 1] = torch.div(s, x[t])
        out[t, 2] = torch.true_divide(s, x[t])
        out[t, 3] = 7.3 / x[t]
        out[t, 4] = torch.div(7.3, x[t])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_number_over_a_tile_is_a_reciprocal_only_as_an_operator(dtype) -> None:
    """`s / x` is PyTorch's `x.reciprocal() * s`; `torch.div(s, x)` divides, its number
    taken in the tile's dtype (7.3 is 7.3125 in bfloat16). Compiled code took both as the
    reciprocal's product (an ulp off in a quarter of float32 values, more at 16 bits)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(500, generator=g) * 300
    x[:5] = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan])
    x = x.to(dtype).to(DEVICE)

    def reference(x: torch.Tensor, s: float, out: torch.Tensor) -> tuple:
        parts = [s / x, torch.div(s, x), torch.true_divide(s, x), 7.3 / x, torch.div(7.3, x)]
        return x, torch.stack(parts, 1)

    for n in (500, 1, 0):
        out = torch.empty(n, 5, dtype=dtype, device=DEVICE)
        check_modes(number_over_tile, (x[:n], math.pi, out), reference, torch.float64)


@tc.kernel
def remainder_by_python_mod(x: torch.Tensor, n: int, s: float) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.fmod(x[tile], n % s)
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_python_remainder_of_host_numbers_is_rounded_as_a_number(dtype) -> None:
    """`n % s` of a host int and a host float is a Python float; PyTorch rounds it to a
    16-bit tile's dtype for fmod (-4.3 is -4.3125 in bfloat16). Compiled code took the
    float remainder (computed at launch) for a 0-d tensor and did not round it:
    fmod(22.875, -4.3) gave 1.375 where PyTorch gives 1.3125 (dtype fuzzer, seed 592)."""
    x = torch.tensor([22.875, -9.5, 3.0, 100.0], device=DEVICE).to(dtype)
    expected = torch.fmod(x, 3 % -7.3)
    for mode in ("eager", "triton"):
        found = run_mode(remainder_by_python_mod, (x, 3, -7.3), mode)
        assert torch.equal(found, expected), (mode, found, expected)
