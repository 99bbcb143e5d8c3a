"""Gathers within a tile: `torch.gather`, `take_along_dim`, `index_select` and `row[idx]`
with an integer index tile.

Each output element takes the source element whose position along the dim equals its
index: the source is spread over a new dim beside the index's, the positions compared
with the index (a one-hot mask) and the one element picked by a max over the source's
dim. Only selects and a reduction: exact for every dtype (NaN and -0.0 too), the same in
Triton's interpreter and on GPUs, and no memory is read. It costs one compare per pair
of (index, source) lanes, so the source's dim is limited to MAX_GATHER elements.

A kernel cannot raise: an index out of range (negative ones included) matches no
position, padded lanes included, and reads 0 (False), as an index tile out of range of a
tensor does. Eager mode does the same for `row[idx]`; its gather, take_along_dim and
index_select raise there, as PyTorch does (a negative index too), but not on the lanes of
an `if` arm on a tile that is not taken. In the bounds-check mode (TILECRAFT_CHECK) the
compiled gather raises too. An index into a dim of length 0 is refused while compiling.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch

from tilecraft.exc import DtypeError, ShapeMismatch, UnsupportedOperation
from tilecraft.frontend.builder import Builder
from tilecraft.frontend.ops import OPS, _axis, op, reduce, view
from tilecraft.frontend.views import broadcast_to, static_extent, whole_extent
from tilecraft.ir.nodes import Value
from tilecraft.ir.types import Dim

MAX_GATHER = 256  # source positions compared with each index
INDEX_DTYPES = (torch.int64, torch.int32)


def lowest(dtype: torch.dtype) -> float | int:
    """The value no element is below: a max over it and one picked element is that one."""
    return -math.inf if dtype.is_floating_point else torch.iinfo(dtype).min


def pick(b: Builder, chosen: Value, x: Value, axis: int) -> Value:
    """Along `axis`, the element of `x` where `chosen` holds (at most one per lane; the
    dtype's lowest value where none does), exact for every dtype."""
    dtype = x.type.dtype
    wide = b.cast(x, torch.int8) if dtype == torch.bool else x
    picked = OPS["where"](b, chosen, wide, lowest(wide.type.dtype))  # type: ignore[union-attr]
    return b.cast(reduce(b, "max", picked, axis, False), dtype)  # type: ignore[return-value]


def positions(b: Builder, d: Dim, rank: int, axis: int) -> Value | int:
    """The positions 0..n-1 along static dim `d`, placed at `axis` of `rank` dims."""
    if d is None:
        return 0
    index = b.op("tile_index", (d,), torch.int32, (d,), hint="position")
    return view(b, index, tuple(":" if k == axis else "None" for k in range(rank)))


def take(b: Builder, x: Value, axis: int, index: Value, what: str) -> Value:
    """`x` with dim `axis` replaced by all the dims of `index`: `x[:, index]` for axis 1."""
    extra, after = index.type.rank, x.type.rank - axis  # after: x's dim and those after it
    spread_x = view(b, x, (":",) * axis + ("None",) * extra + (":",) * after)
    spread_i = view(b, index, ("None",) * axis + (":",) * extra + ("None",) * after)
    in_range = _in_range(b, x, axis, index, what)
    ok = view(b, in_range, ("None",) * axis + (":",) * extra + ("None",) * (after - 1))
    return _match(b, x, axis, spread_x, spread_i, axis + extra, ok)


def _in_range(b: Builder, x: Value, axis: int, index: Value, what: str) -> Value:
    extent = _source_extent(b, x, axis, what)
    ok: Value = OPS["and"](b, OPS["ge"](b, index, 0), OPS["lt"](b, index, extent))  # type: ignore[assignment]
    _check(b, ok, what)
    return ok


def _check(b: Builder, ok: Value, what: str) -> None:
    """In the bounds-check mode (TILECRAFT_CHECK) an index out of range raises at the
    user's line, as PyTorch's gather does (compiled code otherwise reads 0): lanes of an
    `if` arm on a tile that is not taken are not checked."""
    if b.masks:  # (an arm's mask of other dims: every lane is checked)
        with contextlib.suppress(ShapeMismatch):
            ok = OPS["bitwise_or"](b, ok, OPS["eq"](b, b.masks[-1], 0))  # type: ignore[assignment]
    b.effect("check_index", (ok,), what=f"`{what}`" if what.isidentifier() else what)


def _match(
    b: Builder, x: Value, axis: int, spread_x: Value, spread_i: Value, at: int, ok: Value
) -> Value:
    """The elements of `spread_x` (x's dim `axis` at `at`) whose position equals the
    index, 0 where the index is out of range (`ok` is False)."""
    d = x.type.dims[axis]
    pos = positions(b, d, spread_x.type.rank, at)
    chosen = OPS["eq"](b, spread_i, pos)
    if d is not None and b.blocks[d].fixed_size != b.blocks[d].extent:
        chosen = OPS["and"](b, chosen, OPS["lt"](b, pos, b.blocks[d].extent))  # not padding
    zero = False if x.type.dtype == torch.bool else 0
    return OPS["where"](b, ok, pick(b, chosen, spread_x, at), zero)  # type: ignore[no-any-return]


def _source_extent(b: Builder, x: Value, axis: int, what: str) -> int:
    extent = whole_extent(b, x, axis, what)
    if extent > MAX_GATHER:
        raise UnsupportedOperation(
            f"{what} from a dim of {extent} elements (more than {MAX_GATHER}: it compares "
            "every index with every position): index the tensor in memory instead "
            "(`x[tile, ids]`)",
            b.loc,
        )
    return extent


def _index_tile(b: Builder, index: Any, what: str, dtypes: tuple = INDEX_DTYPES) -> Value:
    if not isinstance(index, Value) or index.type.rank == 0:
        raise UnsupportedOperation(f"{what} needs an index tile of rank >= 1", b.loc)
    if index.type.dtype not in dtypes:
        names = " or ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise DtypeError(f"{what} needs a {names} index tile, not {index.type.dtype}", b.loc)
    return index


def _source(b: Builder, x: Any, what: str) -> Value:
    if not isinstance(x, Value) or x.type.rank == 0:
        raise UnsupportedOperation(f"{what} needs a tile of rank >= 1 to gather from", b.loc)
    return x


def _nothing_to_take(b: Builder, x: Value, axis: int, index: Value, what: str) -> None:
    """Any index into a dim of length 0 is out of range (PyTorch raises): refused unless
    the index tile is empty (a tile's dim never is)."""
    empty = any(static_extent(b, d) == 0 for d in index.type.dims)
    if whole_extent(b, x, axis, what) == 0 and not empty:
        raise ShapeMismatch(f"{what}: index out of range for a dim of size 0", b.loc)


@op("gather")
def _gather(b: Builder, x: Value, dim: int, index: Value, *, sparse_grad: bool = False) -> Value:
    """`torch.gather(x, dim, index)`: out[i][j] = x[i][index[i][j]] (dim=1). index has
    x's dims except along `dim` (PyTorch also takes smaller ones: refused here)."""
    x, index = _source(b, x, "gather"), _index_tile(b, index, "gather")
    if index.type.rank != x.type.rank:
        raise ShapeMismatch("gather: the index tile needs as many dims as the source", b.loc)
    axis = _axis(b, x, dim)
    for k, (dx, di) in enumerate(zip(x.type.dims, index.type.dims, strict=True)):
        if k != axis and dx != di:
            raise ShapeMismatch(
                f"gather: the index tile {b.describe(index.type.dims)} must match the source "
                f"{b.describe(x.type.dims)} on every dim but dim {axis}",
                b.loc,
            )
    _nothing_to_take(b, x, axis, index, "gather")
    return _gather_along(b, x, axis, index, "gather")


def _gather_along(b: Builder, x: Value, axis: int, index: Value, what: str) -> Value:
    """x's dim `axis` spread after the index's: picked over it."""
    rest = x.type.rank - axis
    spread_x = view(b, x, (":",) * axis + ("None",) + (":",) * rest)
    spread_i = view(b, index, (":",) * (axis + 1) + ("None",) + (":",) * (rest - 1))
    ok = _in_range(b, x, axis, index, what)
    return _match(b, x, axis, spread_x, spread_i, axis + 1, ok)


@op("take_along_dim")
def _take_along_dim(b: Builder, x: Value, indices: Value, dim: int | None = None) -> Value:
    """`torch.take_along_dim(x, indices, dim)`: gather with x and the indices broadcast
    against each other on every dim but `dim` (dim=None, over the flattened tile, is
    refused)."""
    x = _source(b, x, "take_along_dim")
    index = _index_tile(b, indices, "take_along_dim", (torch.int64,))
    if dim is None:
        raise UnsupportedOperation("take_along_dim needs dim= on tiles (no flattening)", b.loc)
    if index.type.rank != x.type.rank:
        raise ShapeMismatch("take_along_dim: the index tile needs as many dims as x", b.loc)
    axis = _axis(b, x, dim)
    common = []
    for k, (dx, di) in enumerate(zip(x.type.dims, index.type.dims, strict=True)):
        if k != axis and None not in (dx, di) and dx != di:
            raise ShapeMismatch(
                f"take_along_dim: {b.describe(x.type.dims)} and the index tile "
                f"{b.describe(index.type.dims)} do not broadcast on dim {k}",
                b.loc,
            )
        common.append(di if dx is None else dx)
    x = _broadcast(b, x, common, axis)
    index = _broadcast(b, index, common, axis)
    _nothing_to_take(b, x, axis, index, "take_along_dim")
    return _gather_along(b, x, axis, index, "take_along_dim")


def _broadcast(b: Builder, x: Value, dims: list[Dim], axis: int) -> Value:
    """`x` broadcast to `dims` on every dim but `axis`, where it keeps its own."""
    target = tuple(x.type.dims[axis] if k == axis else d for k, d in enumerate(dims))
    return x if target == x.type.dims else broadcast_to(b, x, target)


@op("index_select")
def _index_select(b: Builder, x: Value, dim: int, index: Value) -> Value:
    """`torch.index_select(x, dim, index)`: x with dim `dim` replaced by the index's."""
    x = _source(b, x, "index_select")
    index = _index_tile(b, index, "index_select")
    if index.type.rank != 1:
        raise UnsupportedOperation("index_select needs a 1-D index tile", b.loc)
    axis = _axis(b, x, dim)
    _nothing_to_take(b, x, axis, index, "index_select")
    return take(b, x, axis, index, "index_select")


def subscript(b: Builder, x: Value, axis: int, index: Value) -> Value:
    """`x[:, index]` with an integer index tile along `axis`. As for an index tile into a
    tensor, negative positions are out of range (PyTorch counts them from the end) and
    read 0, in both modes."""
    what = "indexing a tile with an index tile"
    x = _source(b, x, what)
    index = _index_tile(b, index, what)
    _nothing_to_take(b, x, axis, index, what)
    return take(b, x, axis, index, what)
