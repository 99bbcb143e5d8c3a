"""Eager mode, the compiled kernel and PyTorch agree: NaN in reductions, gathers, masks."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
from tilecraft.exc import ShapeMismatch
from tilecraft.testing import check_modes

NAN, INF = float("nan"), float("inf")

# -- NaN in reductions ---------------------------------------------------------------------


@tc.kernel
def row_reduce(x: torch.Tensor, op: str) -> torch.Tensor:
    m, n = x.size()
    dtype = torch.int64 if op.startswith("arg") or op.endswith("indices") else x.dtype
    out = torch.empty(m, dtype=dtype, device=x.device)
    for tile_m in tc.tile(m):
        row = x[tile_m, :]
        if op == "amax":
            r = torch.amax(row, dim=1)
        elif op == "amin":
            r = row.amin(dim=-1)
        elif op == "max_values":
            r = torch.max(row, dim=1).values
        elif op == "min_indices":
            r = torch.min(row, 1)[1]
        elif op == "argmax":
            r = torch.argmax(row, dim=1)
        elif op == "argmin":
            r = row.argmin(dim=-1)
        out[tile_m] = r
    return out


ROW_REDUCTIONS = {
    "amax": lambda r: r.amax(1),
    "amin": lambda r: r.amin(1),
    "max_values": lambda r: r.max(1).values,
    "min_indices": lambda r: r.min(1).indices,
    "argmax": lambda r: r.argmax(1),
    "argmin": lambda r: r.argmin(1),
}


def with_nan(m: int, n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Rows with no NaN, one NaN (first, middle, last), several NaN, all NaN, and +-inf."""
    x = torch.randn(m, n, device=DEVICE)
    x[1, n // 2] = NAN
    x[2, 0] = NAN
    x[3, n - 1] = NAN
    x[4, 1::3] = NAN
    x[5, :] = NAN
    x[6, :] = -INF
    x[7, n // 3] = INF
    x[7, n - 1] = NAN
    x[8, :] = x[8, 0]  # all tied
    return x.to(dtype)


@pytest.mark.parametrize("chunk", [None, 8], ids=["one_block", "looped"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("op", ROW_REDUCTIONS)
def test_reductions_propagate_nan(op, dtype, chunk) -> None:
    x = with_nan(10, 37, dtype)
    kernel = tc.kernel(row_reduce.fn, config=tc.Config(reduction_loops=[chunk]))
    check_modes(kernel, (x, op), lambda t, _: ROW_REDUCTIONS[op](t), dtype)


@pytest.mark.parametrize("chunk", [None, 8], ids=["one_block", "looped"])
def test_integer_reductions(chunk) -> None:
    x = torch.randint(-5, 5, (10, 37), dtype=torch.int32, device=DEVICE)
    kernel = tc.kernel(row_reduce.fn, config=tc.Config(reduction_loops=[chunk]))
    for op in ("amax", "argmin", "min_indices"):
        check_modes(kernel, (x, op), lambda t, _, op=op: ROW_REDUCTIONS[op](t))


@tc.kernel
def column_argmax(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.size(1), dtype=torch.int64, device=x.device)
    for tile_n in tc.tile(x.size(1)):
        out[tile_n] = torch.argmax(x[:, tile_n], dim=0)
    return out


def test_argmax_over_a_leading_dim_with_nan() -> None:
    x = with_nan(10, 37).T.contiguous()
    check_modes(column_argmax, (x,), lambda t: t.argmax(0))


# -- gathers follow PyTorch's advanced indexing ----------------------------------------------


@tc.kernel
def gather_pairs(image: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    out = torch.empty(rows.size(0), dtype=image.dtype, device=image.device)
    for tile in tc.tile(rows.size(0)):
        out[tile] = image[rows[tile], cols[tile]]
    return out


@tc.kernel
def gather_outer(image: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    out = torch.empty(rows.size(0), cols.size(0), dtype=image.dtype, device=image.device)
    for tile_r, tile_c in tc.tile([rows.size(0), cols.size(0)]):
        out[tile_r, tile_c] = image[rows[tile_r][:, None], cols[tile_c][None, :]]
    return out


@tc.kernel
def gather_split(x: torch.Tensor, first: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    out = torch.empty(first.size(0), x.size(1), dtype=x.dtype, device=x.device)
    for tile in tc.tile(first.size(0)):
        out[tile, :] = x[first[tile], :, last[tile]]
    return out


@tc.kernel
def gather_rows_of_tiles(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    out = torch.empty(rows.size(0), x.size(1), dtype=x.dtype, device=x.device)
    for tile_r, tile_c in tc.tile([rows.size(0), x.size(1)]):
        out[tile_r, tile_c] = x[rows[tile_r], tile_c]
    return out


def test_two_index_tiles_pair_up() -> None:
    image = torch.randn(9, 9, device=DEVICE)  # square: an outer product would fit silently
    rows = torch.randint(0, 9, (9,), device=DEVICE)
    cols = torch.randint(0, 9, (9,), device=DEVICE)
    check_modes(gather_pairs, (image, rows, cols), lambda im, r, c: im[r, c])


def test_index_tiles_broadcast_to_an_outer_product() -> None:
    image = torch.randn(11, 7, device=DEVICE)
    rows = torch.randint(0, 11, (5,), device=DEVICE)
    cols = torch.randint(0, 7, (13,), device=DEVICE)
    check_modes(gather_outer, (image, rows, cols), lambda im, r, c: im[r[:, None], c[None, :]])


def test_separated_index_tiles_go_first() -> None:
    x = torch.randn(5, 6, 7, device=DEVICE)
    first = torch.randint(0, 5, (11,), device=DEVICE)
    last = torch.randint(0, 7, (11,), device=DEVICE)
    check_modes(gather_split, (x, first, last), lambda t, f, e: t[f, :, e])


def test_an_index_tile_and_a_tile_stay_outer() -> None:
    x = torch.randn(8, 19, device=DEVICE)
    rows = torch.randint(0, 8, (13,), device=DEVICE)
    check_modes(gather_rows_of_tiles, (x, rows), lambda t, r: t[r])


@tc.kernel
def gather_two_tiles(image: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    out = torch.empty(rows.size(0), cols.size(0), dtype=image.dtype, device=image.device)
    for tile_r, tile_c in tc.tile([rows.size(0), cols.size(0)]):
        out[tile_r, tile_c] = image[rows[tile_r], cols[tile_c]]
    return out


def test_index_tiles_over_different_tiles_do_not_broadcast() -> None:
    image = torch.randn(9, 9, device=DEVICE)
    rows = torch.randint(0, 9, (9,), device=DEVICE)
    with pytest.raises(ShapeMismatch, match="do not broadcast"):
        gather_two_tiles(image, rows, rows)
