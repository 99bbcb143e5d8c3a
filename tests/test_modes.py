"""Eager mode, the compiled kernel and PyTorch agree: NaN in reductions, gathers, masks."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE

import tilecraft as tc
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
