"""Scans, user combine functions and sort/topk, in both CPU modes, against PyTorch."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft.exc import TilecraftError
from tilecraft.testing import check_modes, run_mode

SCANS = {
    "cumsum": lambda r: torch.cumsum(r, 1),
    "cumprod": lambda r: r.cumprod(1),
    "cummax": lambda r: torch.cummax(r, 1).values,
    "cummax_i": lambda r: torch.cummax(r, dim=1).indices,
    "cummin": lambda r: torch.cummin(r, 1)[0],
    "cummin_i": lambda r: torch.cummin(r, 1)[1],
}


@tc.kernel
def row_scan(x: torch.Tensor, name: str) -> torch.Tensor:
    fn = SCANS[name]
    m, n = x.shape
    out = torch.empty([m, n], dtype=fn(x[:1]).dtype, device=x.device)
    for tile in tc.tile(m):
        out[tile, :] = fn(x[tile, :])
    return out


def rows(shape: tuple[int, int]) -> torch.Tensor:
    x = torch.randn(shape, device=DEVICE)
    x[1, 3] = float("nan")
    x[2, 5:] = float("inf")
    x[3, 4] = x[3, 2]  # a tie: the later index wins in cummax/cummin
    return x


@pytest.mark.parametrize("name", list(SCANS))
def test_row_scans_match_pytorch(name: str) -> None:
    check_modes(row_scan, (rows((6, 23)), name), lambda x, n: SCANS[n](x))


@pytest.mark.parametrize("name", ["cumsum", "cummax_i"])
def test_integer_scans(name: str) -> None:
    x = torch.randint(-5, 6, (5, 9), device=DEVICE, dtype=torch.int32)
    check_modes(row_scan, (x, name), lambda x, n: SCANS[n](x))


def test_cumsum_of_one_column() -> None:
    check_modes(row_scan, (torch.randn(4, 1, device=DEVICE), "cumsum"), lambda x, n: SCANS[n](x))


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_cumsum_carries_its_total_across_chunks(name: str) -> None:
    x = torch.rand(5, 37, device=DEVICE) + 0.5
    config = tc.Config(block_sizes=[4], reduction_loops=[8])
    check_modes(row_scan, (x, name), lambda x, n: SCANS[n](x), config=config, modes=["triton"])


CHUNKS = tc.Config(block_sizes=[4], reduction_loops=[8])


@pytest.mark.parametrize("width", [37, 32])  # ragged chunks, and chunks without a mask
@pytest.mark.parametrize("name", ["cummax", "cummax_i", "cummin_i"])
def test_cummax_carries_its_best_across_chunks(name: str, width: int) -> None:
    x = rows((6, width))
    x[4, 20:] = -5.0  # ties across chunk borders: the later index wins
    check_modes(row_scan, (x, name), lambda x, n: SCANS[n](x), config=CHUNKS, modes=["triton"])


def test_user_scans_carry_across_chunks_and_reverse_ones_are_refused() -> None:
    x = torch.randn(5, 37, device=DEVICE)
    check_modes(user_scans, (x, False), _user_reference, config=CHUNKS, modes=["triton"])
    with pytest.raises(TilecraftError, match="reduction_loops"):
        run_mode(user_scans, (x, True), "triton", CHUNKS)


def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


def first_max(v0: torch.Tensor, i0: torch.Tensor, v1: torch.Tensor, i1: torch.Tensor) -> tuple:
    take = v1 > v0
    return torch.where(take, v1, v0), torch.where(take, i1, i0)


@tc.kernel
def user_scans(x: torch.Tensor, reverse: bool) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = x.shape
    sums = torch.empty_like(x)
    best = torch.empty(x.shape, dtype=torch.int32, device=x.device)
    for tile in tc.tile(m):
        row = x[tile, :]
        sums[tile, :] = tc.associative_scan(add, row, dim=1, reverse=reverse)
        pos = tc.arange(0, n)[None, :] + tc.zeros([tile, n], dtype=torch.int32)
        _, where = tc.associative_scan(first_max, (row, pos), dim=1, reverse=reverse)
        best[tile, :] = where
    return sums, best


def _user_reference(x: torch.Tensor, reverse: bool) -> tuple[torch.Tensor, torch.Tensor]:
    if reverse:
        sums = x.flip(1).cumsum(1).flip(1)
        best = torch.stack(
            [
                torch.tensor(
                    [c + int(x[r, c:].argmax()) for c in range(x.shape[1])], device=x.device
                )
                for r in range(x.shape[0])
            ]
        )
        return sums, best.to(torch.int32)
    best = torch.stack(
        [
            torch.tensor([int(x[r, : c + 1].argmax()) for c in range(x.shape[1])], device=x.device)
            for r in range(x.shape[0])
        ]
    )
    return x.cumsum(1), best.to(torch.int32)


@pytest.mark.parametrize("reverse", [False, True])
def test_associative_scan_with_user_functions(reverse: bool) -> None:
    x = torch.randn(5, 13, device=DEVICE)
    check_modes(user_scans, (x, reverse), _user_reference, config=tc.Config(block_sizes=[2]))


def biggest(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.maximum(a, b)


@tc.kernel
def user_reduce(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty([m], device=x.device)
    for tile in tc.tile(m):
        out[tile] = tc.reduce(biggest, x[tile, :], dim=1)
    return out


def test_reduce_with_a_user_function_skips_masked_lanes() -> None:
    x = torch.randn(6, 13, device=DEVICE) - 10  # all negative: a masked 0 would win
    check_modes(user_reduce, (x,), lambda x: x.amax(1))


SORTS = {
    "sort": lambda r: torch.sort(r, dim=-1),
    "sort_desc": lambda r: r.sort(descending=True),
    "topk": lambda r: torch.topk(r, 3),
    "topk_small": lambda r: r.topk(4, largest=False),
    "stable": lambda r: torch.sort(r, dim=1, stable=True),
    "stable_desc": lambda r: r.sort(dim=-1, descending=True, stable=True),
}


@tc.kernel
def row_sort(x: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    fn = SORTS[name]
    m, n = x.shape
    k = fn(x[:1]).values.shape[1]
    values = torch.empty([m, k], dtype=x.dtype, device=x.device)
    indices = torch.empty([m, k], dtype=torch.int64, device=x.device)
    for tile in tc.tile(m):
        v, i = fn(x[tile, :])
        values[tile, :] = v
        indices[tile, :] = i
    return values, indices


@pytest.mark.parametrize("name", list(SORTS))
def test_sort_and_topk_match_pytorch(name: str) -> None:
    x = torch.randperm(5 * 11, device=DEVICE).reshape(5, 11).float() - 20.0
    x[1, 2] = float("nan")
    check_modes(row_sort, (x, name), lambda x, n: tuple(SORTS[n](x)))


@pytest.mark.parametrize("n", [7, 17])
@pytest.mark.parametrize("name", ["stable", "stable_desc", "topk"])
def test_stable_sorts_put_nans_last_on_every_device(name: str, n: int) -> None:
    """A NaN sorts after every number (first when descending), inf before it, as PyTorch's
    CPU kernel and documentation have it, in both modes on every device: PyTorch's CUDA
    kernel put the NaN first in a stable sort of 7 or 17 elements (an H100, torch 2.11)."""
    x = torch.stack([torch.randperm(n) for _ in range(5)]).float().to(DEVICE)
    x[:, 0], x[:, -2], x[2, 3] = float("inf"), float("nan"), float("-inf")
    check_modes(row_sort, (x, name), lambda x, n: tuple(t.to(x.device) for t in SORTS[n](x.cpu())))


def test_sort_of_integers() -> None:
    x = torch.randperm(4 * 9, device=DEVICE).reshape(4, 9).to(torch.int32)
    check_modes(row_sort, (x, "sort"), lambda x, n: tuple(SORTS[n](x)))


@tc.kernel
def reverse_scans(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = x.shape
    sums = torch.empty_like(x)
    prods = torch.empty_like(x)
    for tile in tc.tile(m):
        sums[tile, :] = tc.cumsum(x[tile, :], dim=1, reverse=True)
        prods[tile, :] = tc.cumprod(x[tile, :], 1)
    return sums, prods


def test_helion_cumsum_and_cumprod_with_reverse_over_a_ragged_row() -> None:
    x = torch.rand(5, 13, device=DEVICE) + 0.5
    reference = (x.flip(1).cumsum(1).flip(1), x.cumprod(1))
    check_modes(reverse_scans, (x,), lambda x: reference)


def test_sort_over_chunks_is_refused() -> None:
    config = tc.Config(block_sizes=[4], reduction_loops=[8])
    with pytest.raises(TilecraftError, match="reduction_loops"):
        run_mode(row_sort, (torch.randn(5, 37, device=DEVICE), "sort"), "triton", config)


def nan_rows(shape: tuple[int, int]) -> torch.Tensor:
    x = torch.randperm(shape[0] * shape[1], device=DEVICE).reshape(shape).float() - 50.0
    x[0, 3] = float("nan")
    x[1, :] = -float("inf")  # ties everywhere: the first positions win
    x[2, 2:] = float("nan")  # fewer numbers than k for largest=False
    return x


@pytest.mark.parametrize("name", ["topk", "topk_small"])
def test_topk_over_chunks_with_nan_and_ties(name: str) -> None:
    x = nan_rows((5, 37))
    config = tc.Config(block_sizes=[4], reduction_loops=[8])
    expected = SORTS[name](x)
    found = {}
    for mode in ("triton", "eager"):
        values, indices = found[mode] = run_mode(row_sort, (x, name), mode, config)
        torch.testing.assert_close(values, expected.values, equal_nan=True)
        # PyTorch picks among ties in its own way; both modes take the first positions
        assert torch.equal(indices[[0, 3, 4]], expected.indices[[0, 3, 4]])
        assert torch.equal(indices[1], torch.arange(indices.shape[1], device=DEVICE))
    assert torch.equal(found["eager"][1], found["triton"][1])
