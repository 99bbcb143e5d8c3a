"""`while` inside device loops: on a scalar computed on the device (a loop on the device,
numbers and tiles carried across trips), on host values (unrolled while compiling), and
refused clearly on a tile; both modes against PyTorch."""

from __future__ import annotations

import pytest
import torch

import tilecraft as tc
from tilecraft.exc import DtypeError, ShapeMismatch, UnsupportedSyntax
from tilecraft.testing import check_modes


@tc.kernel
def halvings(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(x.size(0), dtype=torch.int64, device=x.device)
    for i in tc.grid(x.size(0)):
        v = x[i]
        n = 0
        while v > 1.0:
            v = v / 2
            n += 1
        out[i] = n
    return out


def _halvings(x: torch.Tensor) -> torch.Tensor:
    n = torch.ceil(torch.log2(x.double())).clamp(min=0)
    return torch.where(torch.isnan(x), 0, n).long()


@pytest.mark.parametrize("n", [0, 1, 13])
def test_a_counter_carried_across_trips(n: int) -> None:
    x = torch.rand(n) * 1000
    if n:
        x[0] = float("nan")  # NaN > 1 is False: no trip
    check_modes(halvings, (x,), _halvings)


@tc.kernel
def row_sums(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Sums of a CSR matrix's rows, one element at a time up to a bound read on the device."""
    rows = offsets.size(0) - 1
    out = torch.empty(rows, dtype=values.dtype, device=values.device)
    for r in tc.grid(rows):
        i, end = offsets[r], offsets[r + 1]
        total = tc.zeros([], dtype=torch.float32)
        while i < end:
            total = total + values[i]
            i = i + 1
        out[r] = total.to(out.dtype)
    return out


def test_a_loop_up_to_a_bound_read_on_the_device() -> None:
    lengths = torch.tensor([3, 0, 1, 7, 0])
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    values = torch.randn(int(lengths.sum()))
    bounds = zip(offsets[:-1], offsets[1:], strict=True)
    expected = torch.stack([values[a:b].sum() for a, b in bounds])
    check_modes(row_sums, (values, offsets), lambda v, o: expected)


@tc.kernel
def search(sorted_seq: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """`torch.searchsorted` by bisection: the bounds start as host ints and become values
    computed on the device in a branch on a load, so the loop runs on the device."""
    out = torch.empty(values.size(0), dtype=torch.int64, device=values.device)
    for i in tc.grid(values.size(0)):
        v = values[i]
        lo, hi = 0, sorted_seq.size(0)
        while lo < hi:
            mid = (lo + hi) // 2
            if sorted_seq[mid] < v:
                lo = mid + 1
            else:
                hi = mid
        out[i] = lo
    return out


@pytest.mark.parametrize("n", [0, 1, 50])
def test_bisection_with_bounds_that_start_on_the_host(n: int) -> None:
    seq = torch.sort(torch.randn(n)).values
    values = torch.cat([torch.randn(20), seq[:3], torch.tensor([-1e9, 1e9])])
    check_modes(search, (seq, values), torch.searchsorted)


@tc.kernel
def first_above(x: torch.Tensor, threshold: float) -> torch.Tensor:
    """The position of each row's first element above `threshold` (the row's length if
    none is): a `break` on a load."""
    out = torch.empty(x.size(0), dtype=torch.int64, device=x.device)
    n = x.size(1)
    for r in tc.grid(x.size(0)):
        j = 0
        while j < n:
            if x[r, j] > threshold:
                break
            j += 1
        out[r] = j
    return out


def _first_above(x: torch.Tensor, threshold: float) -> torch.Tensor:
    above = torch.cat([x > threshold, torch.ones(x.size(0), 1, dtype=torch.bool)], 1)
    return above.int().argmax(1)  # the first True, the appended column if none


@pytest.mark.parametrize("shape", [(9, 13), (3, 0), (1, 1)])
def test_break_ends_the_loop(shape: tuple) -> None:
    x = torch.randn(shape)
    if x.numel() > 2:
        x[0, :] = float("nan")  # never above: the whole row
    check_modes(first_above, (x, 1.0), _first_above)


@tc.kernel
def newton_sqrt(a: torch.Tensor) -> torch.Tensor:
    """Square roots of a tile by Newton's method, until every lane has converged."""
    out = torch.empty_like(a)
    for tile in tc.tile(a.size(0), block_size=16):
        x = a[tile]
        y = torch.where(x > 1.0, x, 1.0)
        trips = 0
        while (torch.abs(y * y - x) > 1e-12 * x).any() and trips < 60:
            y = 0.5 * (y + x / y)
            trips += 1
        out[tile] = y
    return out


def test_tiles_carried_while_a_reduction_of_them_holds() -> None:
    a = torch.rand(37, dtype=torch.float64) * 100 + 0.01
    check_modes(newton_sqrt, (a,), torch.sqrt)


@tc.kernel
def doubling(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.size(1)
    for tile in tc.tile(x.size(0)):
        width = 1
        while width < n:  # host values only: unrolled while compiling
            width *= 2
        out[tile, :] = x[tile, :] * width
    return out


def test_a_while_on_host_values_is_unrolled() -> None:
    check_modes(doubling, (torch.randn(5, 9),), lambda x: x * 16)


@tc.kernel
def skip_odd(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(x.size(0), dtype=x.dtype, device=x.device)
    for i in tc.grid(x.size(0)):
        k = 0
        total = x[i] * 0
        while k < 6:
            k += 1
            if k % 2 == 1:
                continue
            total = total + x[i] * k
        out[i] = total
    return out


def test_continue_inside_a_while() -> None:
    check_modes(skip_odd, (torch.randn(7),), lambda x: x * 12)


@tc.kernel
def tile_condition(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in tc.tile(x.size(0)):
        y = x[tile]
        while y > 1.0:
            y = y / 2
        out[tile] = y
    return out


@tc.kernel
def counter_turns_float(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for i in tc.grid(x.size(0)):
        v = x[i]
        n = 0
        while v > 1.0:
            v = v / 2
            n = n + 0.5
        out[i] = n
    return out


@tc.kernel
def while_else(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for i in tc.grid(x.size(0)):
        v = x[i]
        while v > 1.0:
            v = v / 2
        else:
            v = v + 1
        out[i] = v
    return out


@pytest.mark.parametrize(
    ("kernel", "error", "match", "line"),
    [
        (tile_condition, ShapeMismatch, "must be one value", "while y > 1.0:"),
        (counter_turns_float, DtypeError, "Python int before", "while v > 1.0:"),
        (while_else, UnsupportedSyntax, "while ... else", "while v > 1.0:"),
    ],
    ids=["tile", "number_kind", "else"],
)
def test_refused_at_the_line(kernel, error, match, line) -> None:
    with pytest.raises(error, match=match) as info:
        kernel(torch.rand(9) * 10)
    assert line in str(info.value)


@tc.kernel
def first_pair_above(x: torch.Tensor, threshold: float) -> torch.Tensor:
    """The first (row-major) pair of a row and a later column position whose sum passes
    `threshold`: nested loops, each with its own `break`."""
    out = torch.full([x.size(0), 2], -1, dtype=torch.int64, device=x.device)
    n = x.size(1)
    for r in tc.grid(x.size(0)):
        i = 0
        found = False
        while i < n:
            j = i + 1
            while j < n:
                if x[r, i] + x[r, j] > threshold:
                    found = True
                    break
                j += 1
            if found:
                out[r, 0] = i
                out[r, 1] = j
                break
            i += 1
    return out


def _first_pair_above(x: torch.Tensor, threshold: float) -> torch.Tensor:
    out = torch.full([x.size(0), 2], -1, dtype=torch.int64)
    for r in range(x.size(0)):
        pairs = [(i, j) for i in range(x.size(1)) for j in range(i + 1, x.size(1))]
        hit = next(((i, j) for i, j in pairs if x[r, i] + x[r, j] > threshold), None)
        if hit is not None:
            out[r] = torch.tensor(hit)
    return out


def test_nested_loops_break_each_their_own() -> None:
    x = torch.randn(6, 7)
    check_modes(first_pair_above, (x, 2.0), _first_pair_above)
