"""Tiles of block size 1 (`block_size=1` in the kernel) broadcast as size-1 dims against
other tiles' dims, as eager mode's tensors do (Helion's kernels rely on it); a tile whose
block size the config picks does not, and is refused at the line."""

from __future__ import annotations

import pytest
import torch

import tilecraft as tc
from tilecraft.exc import ShapeMismatch
from tilecraft.testing import check_modes


@tc.kernel
def signed_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    b, m, _ = q.size()
    n = k.size(1)
    out = torch.empty([b, m, n], dtype=q.dtype, device=q.device)
    for tile_b, tile_m in tc.tile([b, m], block_size=[1, None]):
        rows = q[tile_b, tile_m, :]  # [tile_b, tile_m, d]
        for tile_n in tc.tile(n):
            scores = rows[0] @ k[tile_b.begin, tile_n, :].T  # [tile_m, tile_n]
            total = rows.sum(-1)  # [tile_b, tile_m]
            # [tile_m, tile_b] meets [tile_m, tile_n]: tile_b's dim holds one row
            signed = torch.where(total.T > 0, scores, -scores)
            out[tile_b, tile_m, tile_n] = signed + total.T * 0.5
    return out


def _signed_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    scores = q @ k.transpose(1, 2)
    total = q.sum(-1, keepdim=True)
    return torch.where(total > 0, scores, -scores) + total * 0.5


def test_a_tile_of_block_size_one_broadcasts_in_where_and_arithmetic() -> None:
    q, k = torch.randn(3, 21, 16), torch.randn(3, 37, 16)
    check_modes(signed_scores, (q, k), _signed_scores)


@tc.kernel
def outer_rows(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    b, n = x.size()
    out = torch.empty([b, n, y.size(1)], dtype=x.dtype, device=x.device)
    for tile_b, tile_n, tile_m in tc.tile([b, n, y.size(1)], block_size=[1, None, None]):
        # [tile_n, tile_b] * [tile_b, tile_m]: tile_b's dim meets tile_n's and tile_m's
        out[tile_b, tile_n, tile_m] = x[tile_b, tile_n].T * y[tile_b, tile_m]
    return out


@pytest.mark.parametrize("shape", [(3, 9, 5), (1, 1, 1), (2, 0, 4)])
def test_outer_product_of_rows_through_a_tile_of_block_size_one(shape: tuple) -> None:
    b, n, m = shape
    x, y = torch.randn(b, n), torch.randn(b, m)
    check_modes(outer_rows, (x, y), lambda x, y: x[:, :, None] * y[:, None, :])


@tc.kernel
def outer_tuned(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    b, n = x.size()
    out = torch.empty([b, n, y.size(1)], dtype=x.dtype, device=x.device)
    for tile_b, tile_n, tile_m in tc.tile([b, n, y.size(1)]):
        out[tile_b, tile_n, tile_m] = x[tile_b, tile_n].T * y[tile_b, tile_m]
    return out


def test_a_tile_the_config_sizes_does_not_broadcast() -> None:
    """Its block may hold many positions: refused at the user's line, not guessed."""
    x, y = torch.randn(3, 9), torch.randn(3, 5)
    with pytest.raises(ShapeMismatch, match="do not broadcast") as info:
        outer_tuned(x, y)
    assert "x[tile_b, tile_n].T * y[tile_b, tile_m]" in str(info.value)


@pytest.mark.parametrize("blocks", [[1, 8, 8], [16, 8, 4], [4, 16, 32]])
def test_a_tile_over_one_position_broadcasts_whatever_its_block_size(blocks: list) -> None:
    """A tile over an extent of 1 (decoding's single query) broadcasts as a size-1 dim;
    its block may hold more lanes than that one position (the config picks it)."""
    x, y = torch.randn(1, 9), torch.randn(1, 5)
    config = tc.Config(block_sizes=blocks)
    check_modes(outer_tuned, (x, y), lambda x, y: x[:, :, None] * y[:, None, :], config=config)


@tc.kernel
def single_query(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """One query row against keys: `[tile_q, tile_n]` scores meet `[tile_n]` key norms
    through `torch.where` and arithmetic, with `tile_q`'s dim in either place."""
    n = k.size(0)
    out = torch.empty([q.size(0), n], dtype=q.dtype, device=q.device)
    for tile_q, tile_n in tc.tile([q.size(0), n]):
        scores = q[tile_q, :] @ k[tile_n, :].T  # [tile_q, tile_n]
        norms = (k[tile_n, :] * k[tile_n, :]).sum(-1)[None, :]  # [1, tile_n]
        rows = q[tile_q, :].sum(-1)  # [tile_q]
        picked = torch.where(scores > 0, scores, norms) - rows[:, None]
        out[tile_q, tile_n] = picked * rows  # [tile_q] meets tile_n's dim
    return out


def _single_query(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    scores, norms, rows = q @ k.T, (k * k).sum(-1)[None, :], q.sum(-1)
    return (torch.where(scores > 0, scores, norms) - rows[:, None]) * rows


def test_single_query_rows() -> None:
    check_modes(single_query, (torch.randn(1, 16), torch.randn(37, 16)), _single_query)


@tc.kernel
def spread_row(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The single row of `x` stored to every row of the result, zeroed where `x`'s row of
    flags (`[tile_q, tile_n]`) says so in `y`'s rows (`[tile_m, tile_n]`)."""
    m, n = y.size()
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_q, tile_m, tile_n in tc.tile([x.size(0), m, n], block_size=[None, 8, None]):
        out[tile_m, tile_n] = x[tile_q, tile_n]
        flags = x[tile_q, tile_n] > 0
        out[tile_m, tile_n] += y[tile_m, tile_n].masked_fill(flags, 0.0)
    return out


@pytest.mark.parametrize("blocks", [[1, 16], [16, 4]])
def test_stores_and_masks_broadcast_a_tile_over_one_position(blocks: list) -> None:
    x, y = torch.randn(1, 37), torch.randn(21, 37)
    config = tc.Config(block_sizes=blocks)
    check_modes(spread_row, (x, y), lambda x, y: x + y.masked_fill(x > 0, 0.0), config=config)
