"""Property-based tests: random shapes (0, 1, primes), non-contiguous views, NaN and inf.

Each example runs the kernel in eager mode and under Triton's interpreter and compares
both with PyTorch and with each other (`tilecraft.testing.check_modes`). Examples are
few and derandomized, so the run is fast and repeatable.
"""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft.exc import ShapeMismatch
from tilecraft.testing import check_modes, run_mode

hypothesis = pytest.importorskip("hypothesis")
st = pytest.importorskip("hypothesis.strategies")

SETTINGS = hypothesis.settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(hypothesis.HealthCheck),
)
SIZES = [0, 1, 2, 3, 5, 7, 13, 16, 31, 37, 64]
LAYOUTS = ["contiguous", "transposed", "strided", "offset"]
SPECIALS = [float("nan"), float("inf"), -float("inf")]


@st.composite
def matrices(draw: st.DrawFn, min_cols: int = 0) -> torch.Tensor:
    """A float tensor of a drawn shape and layout, with some NaN and infinities."""
    m = draw(st.sampled_from(SIZES))
    n = draw(st.sampled_from([s for s in SIZES if s >= min_cols]))
    dtype = draw(st.sampled_from([torch.float32, torch.float16]))
    layout = draw(st.sampled_from(LAYOUTS))
    seed = draw(st.integers(0, 2**16))
    generator = torch.Generator().manual_seed(seed)
    x = _laid_out(m, n, layout, generator)
    if x.numel():
        for value in draw(st.lists(st.sampled_from(SPECIALS), max_size=3)):
            i = int(torch.randint(0, m, (), generator=generator))
            j = int(torch.randint(0, n, (), generator=generator))
            x[i, j] = value
    return x.to(dtype)


def _laid_out(m: int, n: int, layout: str, generator: torch.Generator) -> torch.Tensor:
    """An (m, n) view: contiguous, a transpose, every other column, or offset in storage."""

    def randn(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=generator) * 3).to(DEVICE)

    if layout == "transposed":
        return randn(n, m).T
    if layout == "strided":
        return randn(m, 2 * n)[:, ::2]
    if layout == "offset":
        return randn(m + 1, n + 2)[1:, 2:]
    return randn(m, n)


def looped(kernel: tc.Kernel, x: torch.Tensor, chunk: int | None) -> tc.Kernel:
    """`kernel` with its rows reduced in chunks of `chunk` (rows of length 1 have no
    reduction dim to loop over)."""
    if chunk is None or x.size(1) == 1:
        return kernel
    return tc.kernel(kernel.fn, config=tc.Config(reduction_loops=[chunk]))


@tc.kernel
def blend(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    for tile_m, tile_n in tc.tile(x.size()):
        a, b = x[tile_m, tile_n], y[tile_m, tile_n]
        out[tile_m, tile_n] = torch.where(a > b, a * 2 - b / 3, torch.exp(-a.abs()) + b)
    return out


def blend_reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a, b = x.float(), y.float()
    return torch.where(a > b, a * 2 - b / 3, torch.exp(-a.abs()) + b).to(x.dtype)


@SETTINGS
@hypothesis.given(x=matrices(), data=st.data())
def test_elementwise(x: torch.Tensor, data: st.DataObject) -> None:
    layout = data.draw(st.sampled_from(LAYOUTS))
    y = _laid_out(*x.shape, layout, torch.Generator().manual_seed(1)).to(x.dtype)
    check_modes(blend, (x, y), blend_reference, x.dtype)


@tc.kernel
def row_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    m, n = x.size()
    total = torch.empty(m, dtype=torch.float32, device=x.device)
    mean = torch.empty(m, dtype=torch.float32, device=x.device)
    top = torch.empty(m, dtype=x.dtype, device=x.device)
    where = torch.empty(m, dtype=torch.int64, device=x.device)
    for tile_m in tc.tile(m):
        row = x[tile_m, :].to(torch.float32)
        total[tile_m] = row.sum(dim=1)
        mean[tile_m] = row.mean(dim=-1)
        top[tile_m] = torch.amax(x[tile_m, :], dim=1)
        where[tile_m] = torch.argmax(x[tile_m, :], dim=1)
    return total, mean, top, where


def row_stats_reference(x: torch.Tensor) -> tuple:
    row = x.float()
    return row.sum(1), row.mean(-1), x.amax(1), x.argmax(1)


@SETTINGS
@hypothesis.given(x=matrices(), chunk=st.sampled_from([None, 4]))
def test_row_reductions(x: torch.Tensor, chunk: int | None) -> None:
    kernel = looped(row_stats, x, chunk)
    if x.size(1) == 0:  # amax and argmax of empty rows: PyTorch raises, and so do we
        with pytest.raises(ShapeMismatch):
            run_mode(kernel, (x,), "triton")
        if x.size(0):  # eager mode meets the error in the first row
            with pytest.raises((IndexError, RuntimeError)):
                run_mode(kernel, (x,), "eager")
        return
    check_modes(kernel, (x,), row_stats_reference, x.dtype)


@tc.kernel
def softmax(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile_m in tc.tile(x.size(0)):
        out[tile_m, :] = torch.softmax(x[tile_m, :], dim=-1)
    return out


@SETTINGS
@hypothesis.given(x=matrices(), chunk=st.sampled_from([None, 8]))
def test_softmax(x: torch.Tensor, chunk: int | None) -> None:
    kernel = looped(softmax, x, chunk)
    reference = lambda t: torch.softmax(t.float(), dim=-1).to(t.dtype)  # noqa: E731
    check_modes(kernel, (x,), reference, x.dtype)


@tc.kernel
def gather_pairs(image: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    out = torch.empty(rows.size(0), dtype=image.dtype, device=image.device)
    for tile in tc.tile(rows.size(0)):
        out[tile] = image[rows[tile], cols[tile]]
    return out


@SETTINGS
@hypothesis.given(image=matrices(), length=st.sampled_from(SIZES), seed=st.integers(0, 99))
def test_gathers_pair_up(image: torch.Tensor, length: int, seed: int) -> None:
    hypothesis.assume(image.numel() > 0 or length == 0)
    generator = torch.Generator().manual_seed(seed)
    rows, cols = (
        torch.randint(0, max(s, 1), (length,), generator=generator).to(DEVICE) for s in image.shape
    )
    check_modes(gather_pairs, (image, rows, cols), lambda im, r, c: im[r, c], image.dtype)
