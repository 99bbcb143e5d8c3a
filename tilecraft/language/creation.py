"""Tile creation and matrix products: `zeros`, `ones`, `full`, `arange`, `dot`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from tilecraft.language.state import eager_context
from tilecraft.language.tiles import LANES, RegisteredSize, Tile

Shape = Sequence["int | Tile"]


def _sizes(shape: Shape) -> list[int]:
    # in interpret mode a tile at a ragged edge holds just its valid indices
    return [len(s) if isinstance(s, Tile) else int(s) for s in shape]


def mark_lanes(t: torch.Tensor, shape: Shape) -> torch.Tensor:
    """`t` marked with its dims made from `register_block_size` values (`eager_lanes`)."""
    lanes = {d: s for d, s in enumerate(shape) if isinstance(s, RegisteredSize)}
    if lanes:
        setattr(t, LANES, lanes)
    return t


def full(
    shape: Shape,
    value: float,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """A new tile of `shape` (tiles and ints) filled with `value` (`device` is accepted
    as Helion's `hl.full` takes it; tiles live on the kernel's device).

    Example::

        row_max = tc.full([tile_m], float("-inf"), dtype=torch.float32)
    """
    ctx = eager_context("full")
    return mark_lanes(torch.full(_sizes(shape), value, dtype=dtype, device=ctx.device), shape)


def zeros(
    shape: Shape, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """A new tile of `shape` (tiles and ints) filled with zeros, e.g. an accumulator
    (`device` is accepted as Helion's `hl.zeros` takes it).

    Example::

        acc = tc.zeros([tile_m, tile_n], dtype=torch.float32)
    """
    ctx = eager_context("zeros")
    return mark_lanes(torch.zeros(_sizes(shape), dtype=dtype, device=ctx.device), shape)


def ones(
    shape: Shape, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """A new tile of `shape` (tiles and ints) filled with ones (`tc.full(shape, 1)`).

    Example::

        counts = tc.ones([tile_m], dtype=torch.int32)
    """
    ctx = eager_context("ones")
    return mark_lanes(torch.ones(_sizes(shape), dtype=dtype, device=ctx.device), shape)


def arange(
    begin: int, end: int | None = None, step: Any = 1, dtype: torch.dtype = torch.int32
) -> torch.Tensor:
    """Integers `[begin, end)` (or `[0, begin)`) `step` apart as a tile.

    Example::

        offsets = tc.arange(tile.begin, tile.end)
    """
    ctx = eager_context("arange")
    if isinstance(step, torch.dtype):  # `tc.arange(a, b, torch.int64)`
        dtype, step = step, 1
    lo, hi = (0, begin) if end is None else (begin, end)
    return torch.arange(lo, hi, step, dtype=dtype, device=ctx.device)


def dot(
    a: torch.Tensor,
    b: torch.Tensor,
    acc: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Matrix product of two tiles, accumulated in float32 (int32 for int8 tiles).

    Without `acc` the result has dtype `out_dtype` (default float32, int32 for int8);
    with `acc` the product is cast to `out_dtype` (if given) and added to `acc`, and the
    result has `acc`'s dtype. fp8 tiles (`torch.float8_e4m3fn`, `torch.float8_e5m2`) are
    multiplied by the GPU's fp8 units.

    Example::

        acc = tc.dot(x[tile_m, tile_k], y[tile_k, tile_n], acc=acc)
        scores = tc.dot(q, k.T, out_dtype=torch.float32)
    """
    eager_context("dot")
    product = exact_matmul(a, b)
    if acc is None:
        return product.to(out_dtype or product.dtype)
    return acc + product.to(out_dtype or product.dtype).to(acc.dtype)


def exact_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`a @ b` as compiled kernels compute it: in float32 (float64 stays), or in int32 for
    int8 tiles; other dtypes as PyTorch computes them."""
    dtypes = {a.dtype, b.dtype}
    if torch.float64 in dtypes:
        return torch.matmul(a.to(torch.float64), b.to(torch.float64))
    if any(d.is_floating_point for d in dtypes):
        return torch.matmul(a.to(torch.float32), b.to(torch.float32))
    if dtypes <= {torch.int8, torch.uint8}:  # (PyTorch's CUDA kernels have no int matmul)
        wide = torch.matmul(a.cpu().to(torch.int32), b.cpu().to(torch.int32))
        return wide.to(a.device)
    return torch.matmul(a, b)
