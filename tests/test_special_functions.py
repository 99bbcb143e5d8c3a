"""torch.special's Bessel functions (i1, i0e, i1e), erfcx, ndtri, log_ndtr, entr, xlog1py,
zeta and polygamma, in both CPU modes, against PyTorch over dense grids, their edges (NaN,
infinities, signed zeros, the switches between series) and their 16-bit refusals.

All of them were refused (`UnsupportedOperation`) before."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE, needs_nvidia_backend

import tilecraft as tc
from tilecraft.exc import DtypeError, UnsupportedOperation
from tilecraft.testing import compile_for_gpu, run_mode

INF, NAN = float("inf"), float("nan")
EDGES = [0.0, -0.0, 1e-30, -1e-30, 1e-40, 1.0, -1.0, 1.99, 2.0, -2.0, 29.99, 30.0, -30.0]
EDGES += [88.0, 89.0, -89.0, 700.0, 709.0, 710.0, INF, -INF, NAN]
# rtol, atol by dtype: the helpers compute in float64 and round once; PyTorch's float32
# kernels compute in float32 (a few ulps off)
TOLERANCE = {torch.float32: (4e-6, 1e-37), torch.float64: (1e-11, 1e-300)}
TOLERANCE |= {torch.bfloat16: (1e-2, 1e-37), torch.float16: (2e-3, 1e-7)}
# bfloat16 results that round twice (polygamma's zeta, xlog1py's log1p): PyTorch's CPU
# kernels round the inner value to bfloat16 first, as tilecraft does, its CUDA ones do not
TWO_ULPS = {torch.bfloat16: 2.5e-2}


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
    x = torch.cat([grid(0.0, 1.0, torch.float64).cpu(), tail, 1 - tail[-300:], near_half])
    check(mode, "ndtri", x.to(DEVICE, dtype))


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
    rtol, atol = TWO_ULPS.get(dtype, TOLERANCE[dtype][0]), TOLERANCE[dtype][1]
    found = mode(x_log1p_y)(x, y, k)
    torch.testing.assert_close(found, expected, rtol=rtol, atol=atol, equal_nan=True)


@tc.kernel
def hurwitz(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.special.zeta(x[tile], q[tile]) + torch.special.zeta(x[tile], 2.0)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_zeta(mode, dtype: torch.dtype) -> None:
    """The Hurwitz zeta function, as PyTorch's CPU kernel: inf at x = 1 and at integer
    q <= 0 (-inf too), NaN below x = 1, at negative q for x not an integer and at q =
    +inf; sums of alternating signs at negative q for integer x (as many terms as q is
    below 9); huge q; and of a number (q = 2)."""
    xs = [1.0, 0.5, 1.5, 2.0, 3.0, 4.0, 7.5, 12.0, 30.0, INF, NAN, -1.0]
    qs = [1.0, 0.5, 2.0, 1e-3, 9.0, 9.5, 100.0, 1e8, INF, -1.0, -1.5, -20.3, -0.7, 0.0]
    qs += [-0.0, NAN, -INF, 3.7]
    x = torch.tensor(xs, dtype=torch.float64).repeat_interleave(len(qs))
    q = torch.tensor(qs, dtype=torch.float64).repeat(len(xs))
    x, q = (v.to(DEVICE, dtype) for v in (x, q))
    expected = torch.special.zeta(x, q) + torch.special.zeta(x, torch.tensor(2.0, dtype=dtype))
    rtol, atol = TOLERANCE[dtype]
    torch.testing.assert_close(mode(hurwitz)(x, q), expected, rtol=rtol, atol=atol, equal_nan=True)


@tc.kernel
def hurwitz_2d(x: torch.Tensor, q: torch.Tensor, s: float) -> torch.Tensor:
    out = torch.empty_like(x)
    for tm, tn in tc.tile(x.shape):
        out[tm, tn] = torch.special.zeta(x[tm, tn], q[tm, tn]) + torch.special.zeta(s, q[tm, tn])
    return out


def test_zeta_of_2d_tiles_and_a_float_argument(mode) -> None:
    """The summation's length is the most any lane of a 2-D tile needs; a kernel's float
    argument (a launch argument, not a constant) is an operand too (the interpreter
    refused its scalar in the helper before it was spread over the tile)."""
    x = (torch.rand(5, 7, dtype=torch.float64) * 5 + 1.1).to(DEVICE)
    q = (torch.rand(5, 7, dtype=torch.float64) * 20 - 10).to(DEVICE)
    x = torch.where(q < 0, x.round(), x)
    expected = torch.special.zeta(x, q) + torch.special.zeta(torch.tensor(2.5).double(), q)
    found = mode(hurwitz_2d)(x, q, 2.5)
    torch.testing.assert_close(found, expected, rtol=1e-9, atol=0, equal_nan=True)


@tc.kernel
def polygamma_of(x: torch.Tensor, n: int) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=torch.polygamma(n, x[:1]).dtype, device=x.device)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.polygamma(n, x[tile]) + x[tile].polygamma(n) * 0.5
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 6])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_polygamma(mode, n: int, dtype: torch.dtype) -> None:
    """n = 1 is PyTorch's trigamma (reflected below 1/2: its poles at 0 and below are
    where sin(pi x) rounds to 0, finite and huge at -1, -2, ... as PyTorch's); beyond,
    (-1)^(n+1) n! zeta(n + 1, x): -inf at the poles for even n. Past n = 1 negative x
    sum an alternating series: float64 within 1e-6 there (PyTorch's and tilecraft's
    answers are both 4e-8 from the exact zeta(7, -9.5)); float32 and bfloat16 leave them
    out (PyTorch's bfloat16 kernel sums in float32: polygamma(4, -9.5) is 7% off)."""
    x = grid(-9.7, 30.3, torch.float64)
    if n > 1:  # the alternating sums below 0 lose digits to cancellation
        negative = x[x < 0].to(dtype)
        x = x[~(x < 0)]
        if dtype == torch.float64:  # (the exact zeta(7, -9.5) is 4e-8 from both answers)
            check_polygamma(mode, n, negative, rtol=1e-6)
    check_polygamma(mode, n, x.to(dtype))


def check_polygamma(mode, n: int, x: torch.Tensor, rtol: float | None = None) -> None:
    rtol, atol = rtol or TWO_ULPS.get(x.dtype, TOLERANCE[x.dtype][0]), TOLERANCE[x.dtype][1]
    expected = torch.polygamma(n, x) + x.polygamma(n) * 0.5
    found = mode(polygamma_of)(x, n)
    torch.testing.assert_close(found, expected, rtol=rtol, atol=atol, equal_nan=True)


@tc.kernel
def polygamma_of_tile(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.polygamma(n[tile], x[tile])
    return out


@tc.kernel
def polygamma_negative(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        out[tile] = torch.polygamma(-1, x[tile])
    return out


def test_zeta_and_polygamma_refusals() -> None:
    """16-bit zeta (no PyTorch kernel), a negative n and an n that is a tile: refused at
    the line when compiled."""
    half = torch.ones(5, dtype=torch.float16, device=DEVICE)
    with pytest.raises(DtypeError, match="zeta of a torch.float16 tile"):
        run_mode(hurwitz, (half, half), "triton")
    x = torch.ones(5, device=DEVICE)
    with pytest.raises(UnsupportedOperation, match="polygamma of a negative n"):
        run_mode(polygamma_negative, (x,), "triton")
    n = torch.ones(5, dtype=torch.int64, device=DEVICE)
    with pytest.raises(UnsupportedOperation, match="needs a constant int n") as caught:
        run_mode(polygamma_of_tile, (x, n), "triton")
    assert "torch.polygamma(n[tile], x[tile])" in str(caught.value)


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


@needs_nvidia_backend
def test_every_function_compiles_for_sm90() -> None:
    """The helpers run on a GPU too (float64 inside, zeta's summation a loop whose length
    a reduction over the tile sets): Triton's compiler takes them, for sm_90."""
    config = tc.Config(block_sizes=[64])
    x = torch.rand(100)
    for name in ["i0", "i1", "i0e", "i1e", "erfcx", "ndtri", "log_ndtr", "entr"]:
        compile_for_gpu(special, (x, name), config)
    compile_for_gpu(hurwitz, (x, x), config)
    for n in (1, 4):
        compile_for_gpu(polygamma_of, (x.double(), n), config)
    compile_for_gpu(x_log1p_y, (x, x, 2.0), config)
