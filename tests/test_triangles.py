"""torch.triu and torch.tril of tiles: by positions within the tile (as eager mode's
slices have them), over whole rows and over 2-D tiles of any block size; both modes."""

from __future__ import annotations

import pytest
import torch

import tilecraft as tc
from tilecraft.testing import check_modes


@tc.kernel
def triangles(x: torch.Tensor, diagonal: int) -> torch.Tensor:
    out = torch.empty([2, *x.shape], dtype=x.dtype, device=x.device)
    for tile in tc.tile(x.size(0)):
        block = x[tile, :, :]
        out[0, tile, :, :] = torch.triu(block, diagonal)
        out[1, tile, :, :] = block.tril(diagonal=diagonal)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool])
@pytest.mark.parametrize("diagonal", [-2, 0, 3])
def test_of_whole_matrices(dtype: torch.dtype, diagonal: int) -> None:
    x = (torch.randn(3, 5, 7) * 4).to(dtype)
    if dtype == torch.float32:
        x[0, 0, 0] = float("nan")
    expected = lambda x, d: torch.stack([torch.triu(x, d), torch.tril(x, d)])  # noqa: E731
    check_modes(triangles, (x, diagonal), expected)


@tc.kernel
def tiled_triu(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tm, tn in tc.tile(x.size()):
        out[tm, tn] = torch.triu(x[tm, tn], 1)
    return out


def _tiled_triu(x: torch.Tensor, bm: int, bn: int) -> torch.Tensor:
    out = torch.empty_like(x)
    for i in range(0, x.size(0), bm):
        for j in range(0, x.size(1), bn):
            out[i : i + bm, j : j + bn] = torch.triu(x[i : i + bm, j : j + bn], 1)
    return out


@pytest.mark.parametrize("blocks", [[4, 8], [8, 2], [1, 16]])
def test_of_2d_tiles_counts_positions_within_each_tile(blocks: list) -> None:
    x = torch.randn(13, 19)
    config = tc.Config(block_sizes=blocks)
    check_modes(tiled_triu, (x,), lambda x: _tiled_triu(x, *blocks), config=config)
