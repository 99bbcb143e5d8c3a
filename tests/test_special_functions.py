"""torch.special's Bessel functions (i1, i0e, i1e), erfcx, ndtri, log_ndtr, entr and
xlog1py, in both CPU modes, against PyTorch over dense grids, their edges (NaN,
infinities, signed zeros, the switches between series) and their 16-bit refusals.

All of them were refused (`UnsupportedOperation`) before."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft.exc import DtypeError
from tilecraft.testing import run_mode

INF, NAN = float("inf"), float("nan")
EDGES = [0.0, -0.0, 1e-30, -1e-30, 1e-40, 1.0, -1.0, 1.99, 2.0, -2.0, 29.99, 30.0, -30.0]
EDGES += [88.0, 89.0, -89.0, 700.0, 709.0, 710.0, INF, -INF, NAN]
# rtol, atol by dtype: the helpers compute in float64 and round once; PyTorch's float32
# kernels compute in float32 (a few ulps off)
TOLERANCE = {torch.float32: (4e-6, 1e-37), torch.float64: (1e-11, 1e-300)}
TOLERANCE |= {torch.bfloat16: (1e-2, 1e-37), torch.float16: (2e-3, 1e-7)}


@tc.kernel
def special(x: torch.Tensor, name: str) -> torch.Tensor:
    fn = getattr(torch.special, name)
    out = torch.empty(x.shape, dtype=fn(x[:1]).dtype, device=x.device)
    for tile in tc.tile(x.size(0)):
        out[tile] = fn(x[tile])
    return out


def grid(low: float, high: float, dtype: torch.dtype) -> torch.Tensor:
    inside = torch.linspace(low, high, 1001, dtype=torch.float64)
    return torch.cat([inside, torch.tensor(EDGES, dtype=torch.float64)]).to(DEVICE, dtype)


def check(mode, name: str, x: torch.Tensor) -> None:
    rtol, atol = TOLERANCE[x.dtype]
    expected = getattr(torch.special, name)(x)
    found = mode(special)(x, name)
    torch.testing.assert_close(found, expected, rtol=rtol, atol=atol, equal_nan=True)
    # the signs of zeros too (i1(-0.0) is +0.0, i1e(-inf) is -0.0)
    zeros = expected == 0
    assert torch.equal(found[zeros].signbit(), expected[zeros].signbit())


@pytest.mark.parametrize("name", ["i0", "i1", "i0e", "i1e"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_modified_bessel_functions(mode, name: str, dtype: torch.dtype) -> None:
    """Over +-120 (float32's unscaled ones overflow from 88.7 on, float16's from 11), at
    the switch to the asymptotic series (30) and at the infinities (NaN unscaled, 0
    scaled, with i1e's sign)."""
    check(mode, name, grid(-120.0, 120.0, dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_erfcx_and_log_ndtr(mode, dtype: torch.dtype) -> None:
    """erfcx: exp(x^2) erfc(x), finite to +inf (0 there), overflowing below -9.4
    (float32) and -26.6 (float64); log_ndtr's tail below -1 (log of the CDF far past
    where the CDF underflows: -804.6 at -40) and -0.0 for large x."""
    check(mode, "erfcx", grid(-30.0, 60.0, dtype))
    check(mode, "log_ndtr", grid(-60.0, 40.0, dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ndtri(mode, dtype: torch.dtype) -> None:
    """The normal quantile over [0, 1] (NaN outside, -inf and inf at the ends), near 1/2
    (no cancellation: relative precision of results near 0) and over probabilities down
    to 1e-300 (float64; float32's 1e-37), where Cephes' tail series works."""
    smallest = -300 if dtype == torch.float64 else -37
    tail = torch.logspace(smallest, -1, 600, dtype=torch.float64)
    near_half = 0.5 + torch.tensor([1e-7, -1e-7, 3e-9, -2e-4], dtype=torch.float64)
    x = torch.cat([grid(0.0, 1.0, torch.float64), tail, 1 - tail[-300:], near_half])
    check(mode, "ndtri", x.to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_entr(mode, dtype: torch.dtype) -> None:
    """-x log(x): 0 at both zeros, -inf below 0 and at +inf, NaN at NaN."""
    check(mode, "entr", grid(-3.0, 50.0, dtype))


@tc.kernel
def x_log1p_y(x: torch.Tensor, y: torch.Tensor, k: float) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.special.xlog1py(x[tile], y[tile]) + torch.special.xlog1py(k, y[tile])
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("k", [0.0, 2.5, NAN])
def test_xlog1py(mode, dtype: torch.dtype, k: float) -> None:
    """x * log1p(y): 0 where x is 0 (beside y = -1 or inf too), NaN where y is NaN, -inf
    at y = -1, NaN below; of a number `k` for x too."""
    values = torch.tensor([0.0, -0.0, 2.0, -3.0, INF, NAN, 0.5], dtype=torch.float64)
    ys = torch.tensor([0.0, -1.0, -2.0, 1e-20, 3.0, INF, NAN, -0.5], dtype=torch.float64)
    x = values.repeat_interleave(len(ys)).to(DEVICE, dtype)
    y = ys.repeat(len(values)).to(DEVICE, dtype)
    number = torch.tensor(k, dtype=dtype)
    expected = torch.special.xlog1py(x, y) + torch.special.xlog1py(number, y)
    rtol, atol = TOLERANCE[dtype]
    found = mode(x_log1p_y)(x, y, k)
    torch.testing.assert_close(found, expected, rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("name", ["erfcx", "log_ndtr", "ndtri"])
def test_16_bit_erfcx_ndtri_and_log_ndtr_are_refused_at_the_line(name: str) -> None:
    """PyTorch has no 16-bit kernel of these: compiled code refuses it with a DtypeError
    at the kernel's line, not a raw Triton error (eager mode runs PyTorch's, which raises)."""
    x = torch.ones(5, dtype=torch.float16, device=DEVICE)
    with pytest.raises(DtypeError, match=f"{name} of a torch.float16 tile") as caught:
        run_mode(special, (x, name), "triton")
    assert "out[tile] = fn(x[tile])" in str(caught.value)
    with pytest.raises((RuntimeError, NotImplementedError), match="not implemented for 'Half'"):
        run_mode(special, (x, name), "eager")
