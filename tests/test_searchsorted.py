"""torch.searchsorted and torch.bucketize of tiles against a row of boundaries: both
modes against PyTorch, both sides, ties, duplicates, NaN and inf, no boundaries."""

from __future__ import annotations

import pytest
import torch

import tilecraft as tc
from tilecraft.testing import check_modes


@tc.kernel
def places(bounds: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    out = torch.empty([5, *x.shape], dtype=torch.int64, device=x.device)
    for tile in tc.tile(x.size(0)):
        row, edges = x[tile, :], bounds[:]
        out[0, tile, :] = torch.searchsorted(edges, row)
        out[1, tile, :] = torch.searchsorted(edges, row, side="right")
        out[2, tile, :] = torch.bucketize(row, edges, right=True, out_int32=True).long()
        out[3, tile, :] = torch.bucketize(row, edges)
        out[4, tile, :] = torch.searchsorted(edges, 1) + row.long() * 0  # of a number
    return out


def _places(bounds: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.stack(
        [
            torch.searchsorted(bounds, x),
            torch.searchsorted(bounds, x, side="right"),
            torch.bucketize(x, bounds, right=True, out_int32=True).long(),
            torch.bucketize(x, bounds),
            torch.searchsorted(bounds, torch.ones_like(x)).long(),
        ]
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
@pytest.mark.parametrize("count", [0, 1, 9])
def test_values_placed_among_boundaries(dtype: torch.dtype, count: int) -> None:
    bounds = torch.sort((torch.randn(count) * 3).round().to(dtype)).values  # duplicates
    x = (torch.randn(7, 11) * 4).round().to(dtype)  # ties with the boundaries
    if dtype.is_floating_point:
        x[0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    check_modes(places, (bounds, x), _places)
