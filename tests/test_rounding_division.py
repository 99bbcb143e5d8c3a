"""Rounded division (`torch.div(..., rounding_mode=...)`, `torch.divide`,
`torch.floor_divide`) and `torch.round(x, decimals=n)` on tiles, beyond the tables of
test_mode_agreement.py: tiles of 0 and 1 elements, signed zeros, the rounding of 16-bit
quotients PyTorch's CUDA kernel does, and the errors for arguments an op does not take.
Eager mode runs PyTorch itself; compiled mode runs under Triton's interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft import exc
from tilecraft.testing import check_modes, run_mode

LINES = Path(__file__).read_text().splitlines()
FLOATS = [torch.float32, torch.float16, torch.bfloat16]
DTYPES = [*FLOATS, torch.float64, torch.int32, torch.int64]
OPS = {
    "trunc": lambda x, y: torch.div(x, y, rounding_mode="trunc"),
    "floor": lambda x, y: torch.divide(x, y, rounding_mode="floor"),
    "floor_divide": lambda x, y: x.floor_divide(y),
    "true": lambda x, y: x.div(y, rounding_mode=None),
}


@tc.kernel(config=tc.Config(block_sizes=[16]))
def divide(x: torch.Tensor, y: torch.Tensor, name: str) -> torch.Tensor:
    fn = OPS[name]
    out = torch.empty(x.shape, dtype=fn(x[:1], y[:1]).dtype, device=x.device)
    for tile in tc.tile(x.size(0)):
        out[tile] = fn(x[tile], y[tile])
    return out


@tc.kernel(config=tc.Config(block_sizes=[16]))
def round_to(x: torch.Tensor, decimals: int) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.round(x[tile], decimals=decimals)
    return out


def operands(length: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Random dividends and nonzero divisors of both signs (ints: small, no overflow)."""
    x, y = torch.randn(length) * 40, torch.randn(length) * 6
    y = torch.where(y.abs() < 1, y.sign() + (y == 0), y)
    if not dtype.is_floating_point:
        x, y = x.round(), y.round()
    return x.to(dtype).to(DEVICE), y.to(dtype).to(DEVICE)


@pytest.mark.parametrize("length", [0, 1, 19])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(OPS))
def test_division_of_short_and_ragged_tiles(name: str, dtype: torch.dtype, length: int) -> None:
    x, y = operands(length, dtype)
    if name == "trunc" and dtype in (torch.float16, torch.bfloat16):
        # where PyTorch's CPU and CUDA kernels differ (see the test below), a quotient of 1
        quotient = x.float() / y.float()
        x = torch.where(quotient.trunc().to(dtype) != quotient.to(dtype).trunc(), y, x)
    reference = OPS[name](x, y)
    tolerance = reference.dtype if reference.dtype.is_floating_point else None
    check_modes(divide, (x, y, name), lambda x, y, n: OPS[n](x, y), tolerance)


@pytest.mark.parametrize("length", [0, 1, 37])
@pytest.mark.parametrize("decimals", [-3, -1, 1, 2, 4])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_round_to_decimals(dtype: torch.dtype, decimals: int, length: int) -> None:
    x = torch.randn(length, dtype=torch.float64) * 10 ** torch.randint(-2, 5, (length,))
    x[: min(length, 4)] = torch.tensor([0.125, -2.5e-3, float("nan"), -float("inf")])[:length]
    x = x.to(dtype).to(DEVICE)
    if DEVICE == "cuda":  # tilecraft scales as PyTorch's CPU kernel does: check where
        # its CUDA kernel, which rounds the scaled 16-bit value to 16 bits, agrees
        cpu, cuda = (torch.round(x.to(d), decimals=decimals).cpu() for d in ("cpu", "cuda"))
        x = torch.where(((cpu == cuda) | cpu.isnan()).to(DEVICE), x, 0.125)
    check_modes(round_to, (x, decimals), lambda x, n: torch.round(x, decimals=n), dtype)


def signs(t: torch.Tensor) -> list[bool]:
    return t.float().signbit().tolist()


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", ["trunc", "floor", "floor_divide"])
def test_zero_quotients_keep_their_sign(name: str, dtype: torch.dtype) -> None:
    x = torch.tensor([-0.5, 0.5, -0.0, 0.0, -0.25, 0.25, 0.0], dtype=dtype, device=DEVICE)
    y = torch.tensor([2.0, -2.0, 3.0, -3.0, -7.0, 7.0, float("inf")], dtype=dtype, device=DEVICE)
    expected = signs(OPS[name](x, y))
    for mode, result in check_modes(divide, (x, y, name), lambda x, y, n: OPS[n](x, y)).items():
        assert signs(result) == expected, mode


@pytest.mark.parametrize("decimals", [0, 1, -1])
def test_rounding_to_zero_keeps_the_sign(decimals: int) -> None:
    x = torch.tensor([-0.3, -0.04, -0.0, 0.04, -4.0, -0.5, 0.5], device=DEVICE)
    expected = signs(torch.round(x, decimals=decimals))
    modes = check_modes(round_to, (x, decimals), lambda x, n: torch.round(x, decimals=n))
    for mode, result in modes.items():
        assert signs(result) == expected, mode


@pytest.mark.parametrize(
    "dtype,pairs",
    [
        (torch.float16, [(7.0, 1.1669921875, 6.0), (100.0, 1.0205078125, 98.0)]),
        (torch.bfloat16, [(10.0, 1.4296875, 7.0), (-100.0, 1.03125, -97.0)]),
    ],
    ids=str,
)
def test_sixteen_bit_trunc_rounds_the_quotient_first(dtype: torch.dtype, pairs: list) -> None:
    """trunc(7 / 1.167) in half is 6 (the quotient 5.998 rounds to 6.0 in half first), as
    PyTorch's CUDA kernel gives; its CPU kernel truncates the float32 quotient (5)."""
    x, y, expected = (torch.tensor(v, dtype=dtype, device=DEVICE) for v in zip(*pairs, strict=True))
    assert torch.equal(run_mode(divide, (x, y, "trunc"), "triton"), expected)


@tc.kernel
def add_scaled(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.add(x[tile], y[tile], alpha=2)
    return out


@tc.kernel
def exp_into(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile] + torch.exp(x[tile], out=y[tile])
    return out


@tc.kernel
def sum_rows(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty([x.size(0)], device=x.device)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.sum(x[tile, :], dim=-1, keep_dims=True)
    return out


@tc.kernel
def true_divide_floored(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.true_divide(x[tile], y[tile], rounding_mode="floor")
    return out


UNTAKEN = [
    (add_scaled, "add", "alpha", "out[tile] = torch.add(x[tile], y[tile], alpha=2)"),
    (exp_into, "exp", "out", "out[tile] = x[tile] + torch.exp(x[tile], out=y[tile])"),
    (sum_rows, "sum", "keep_dims", "out[tile] = torch.sum(x[tile, :], dim=-1, keep_dims=True)"),
    (
        true_divide_floored,
        "true_divide",
        "rounding_mode",
        'out[tile] = torch.true_divide(x[tile], y[tile], rounding_mode="floor")',
    ),
]


def raised(kernel: tc.Kernel, *args: object) -> exc.TilecraftError:
    kernel.settings.interpret = False
    with pytest.raises(exc.TilecraftError) as info:
        kernel(*args)
    return info.value


@pytest.mark.parametrize("kernel,op,keyword,source", UNTAKEN, ids=lambda v: str(v)[:12])
def test_keywords_an_op_does_not_take_are_named_at_the_users_line(
    kernel: tc.Kernel, op: str, keyword: str, source: str
) -> None:
    x = torch.randn(5, 3, device=DEVICE)
    y = torch.randn(5, 3, device=DEVICE)
    error = raised(kernel, x[:, 0].contiguous() if op != "sum" else x, y[:, 0].contiguous())
    assert type(error) is exc.UnsupportedOperation
    message = str(error).splitlines()
    assert f"`{op}` on tiles does not take the keyword argument `{keyword}=`" in message[0]
    (number,) = [i + 1 for i, line in enumerate(LINES) if line.strip() == source]
    assert f"line {number}, column" in message[1]
    assert message[2].strip() == source
    column = message[3].index("^") - message[2].index("o")  # under the call, not the store
    assert source[column:].startswith(f"torch.{op}(")


@tc.kernel
def round_ints(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile].round(decimals=1)
    return out


@tc.kernel
def round_positional(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.round(x[tile], 2)
    return out


@tc.kernel
def divide_up(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = x[tile].div(2, rounding_mode="up")
    return out


def test_bad_rounding_arguments_are_clean_errors() -> None:
    x = torch.randn(6, device=DEVICE)
    error = raised(round_ints, x.int())
    assert type(error) is exc.DtypeError and "round(decimals=...)" in str(error)
    error = raised(round_positional, x)
    assert type(error) is exc.UnsupportedOperation and "`round`" in str(error)
    error = raised(divide_up, x)
    assert type(error) is exc.UnsupportedOperation and "rounding_mode='up'" in str(error)


@pytest.mark.parametrize("decimals", [39, -40, 400])
def test_scales_past_float32_overflow_as_in_pytorch(decimals: int) -> None:
    """10**39 is inf in float32, so PyTorch's float32 round(x, decimals=39) is NaN: the
    generated code multiplies by inf, not by a constant Triton would read as a float64."""
    x = torch.tensor([1.25, -0.0, 3e30, float("nan")], device=DEVICE)
    check_modes(round_to, (x, decimals), lambda x, n: torch.round(x, decimals=n))
    code = round_to.bind((x, decimals)).to_triton_code()
    assert 'float("inf")' in code and "e+" not in code
