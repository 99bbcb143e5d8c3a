"""Tile creation and matrix products: `zeros`, `full`, `arange`, `dot`."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tilecraft.language.state import eager_context
from tilecraft.language.tiles import Tile

Shape = Sequence["int | Tile"]


def _sizes(shape: Shape) -> list[int]:
    # in interpret mode a tile at a ragged edge holds just its valid indices
    return [len(s) if isinstance(s, Tile) else int(s) for s in shape]


def full(shape: Shape, value: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A new tile of `shape` (tiles and ints) filled with `value`.

    Example::

        row_max = tc.full([tile_m], float("-inf"), dtype=torch.float32)
    """
    ctx = eager_context("full")
    return torch.full(_sizes(shape), value, dtype=dtype, device=ctx.device)


def zeros(shape: Shape, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A new tile of `shape` (tiles and ints) filled with zeros, e.g. an accumulator.

    Example::

        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
    """
    ctx = eager_context("zeros")
    return torch.zeros(_sizes(shape), dtype=dtype, device=ctx.device)


def arange(begin: int, end: int | None = None, dtype: torch.dtype = torch.int32) -> torch.Tensor:
    """Consecutive integers `[begin, end)` (or `[0, begin)`) as a tile.

    Example::

        offsets = tc.arange(tile.begin, tile.end)
    """
    ctx = eager_context("arange")
    lo, hi = (0, begin) if end is None else (begin, end)
    return torch.arange(lo, hi, dtype=dtype, device=ctx.device)


def dot(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor | None = None) -> torch.Tensor:
    """Matrix product of two tiles with float32 accumulation, added to `acc` if given.

    Example::

        acc = tc.dot(x[tile_m, tile_k], y[tile_k, tile_n], acc=acc)
    """
    eager_context("dot")
    out = torch.matmul(a.to(torch.float32), b.to(torch.float32))
    return out if acc is None else acc + out.to(acc.dtype)
