"""Tiles joined, cut and rearranged along a dim: `torch.stack`, `torch.cat`, `split`,
`chunk`, `unbind`, `repeat`, `torch.tile`, `narrow`, `flip`, `roll`, and Helion's
`join`/`split` pairs. Cutting, joining or rearranging needs a dim whose size is known
while compiling (a whole dim or a constant); stacking works on any tiles."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from tilecraft.exc import ShapeMismatch, UnsupportedOperation
from tilecraft.frontend.builder import Builder, promote
from tilecraft.frontend.ops import op, view
from tilecraft.frontend.views import (
    axis_of,
    broadcast_to,
    index,
    reshape_to,
    shape_items,
    show,
    static_block,
    static_extent,
    whole_extent,
)
from tilecraft.ir.nodes import Value
from tilecraft.ir.types import Dim, broadcast_dims


@op("stack")
def stack(b: Builder, tiles: Sequence[Any], dim: int = 0) -> Value:
    """`torch.stack(tiles, dim)`: a new dim of size len(tiles) (a select per position)."""
    values = _tiles(b, tiles, "torch.stack")
    dims = b.broadcast(*values)
    axis = axis_of(b, len(dims) + 1, dim)
    index = tuple("None" if i == axis else ":" for i in range(len(dims) + 1))
    dtype = promote(*values)
    parts = [view(b, broadcast_to(b, _cast(b, v, dtype), dims), index) for v in values]
    return _stacked(b, parts, axis)


def _stacked(b: Builder, parts: list[Value], axis: int) -> Value:
    if len(parts) == 1:
        return parts[0]
    dims = list(parts[0].type.dims)
    dims[axis] = static_block(b, len(parts))
    dtype = parts[0].type.dtype
    return b.op("stack", tuple(parts), dtype, tuple(dims), hint="stacked", axis=axis)


@op("cat", "concat", "concatenate")
def cat(b: Builder, tiles: Sequence[Any], dim: int = 0) -> Value:
    """`torch.cat(tiles, dim)` along a dim whose size is known while compiling."""
    values = _tiles(b, tiles, "torch.cat")
    rank = values[0].type.rank
    if any(v.type.rank != rank for v in values) or rank == 0:
        raise ShapeMismatch("torch.cat needs tiles of the same rank (at least 1)", b.loc)
    axis = axis_of(b, rank, dim)
    dtype = promote(*values)
    extents = [whole_extent(b, v, axis, "torch.cat") for v in values]
    values = [_cast(b, v, dtype) for v in values]
    others = _cat_dims(b, values, axis)
    values = [broadcast_to(b, v, _with(others, axis, v.type.dims[axis])) for v in values]
    if all(e == 1 for e in extents):
        return _stacked(b, values, axis)
    offsets = [sum(extents[:i]) for i in range(len(extents))]
    out = _with(others, axis, static_block(b, sum(extents)))
    return b.op("cat", tuple(values), dtype, out, hint="joined", axis=axis, offsets=offsets)


def _cat_dims(b: Builder, values: list[Value], axis: int) -> tuple[Dim, ...]:
    """The dims all operands of a cat share (every dim but `axis`)."""
    joined: tuple[Dim, ...] | None = ()
    for v in values:
        if joined is not None:
            joined = broadcast_dims(joined, _with(v.type.dims, axis, None))
    if joined is None:
        raise ShapeMismatch("torch.cat of tiles whose other dims differ", b.loc)
    return joined


def _with(dims: tuple[Dim, ...], axis: int, d: Dim) -> tuple[Dim, ...]:
    return dims[:axis] + (d,) + dims[axis + 1 :]


@op("split")
def split(b: Builder, x: Value, split_size_or_sections: Any, dim: int = 0) -> tuple:
    """`x.split(size, dim)` or `x.split([sizes], dim)` along a dim of known size."""
    axis = axis_of(b, x.type.rank, dim)
    extent = whole_extent(b, x, axis, "split")
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        if step < 1:
            raise ShapeMismatch("split size must be positive", b.loc)
        sizes = [min(step, extent - s) for s in range(0, extent, step)] or [0]
    else:
        sizes = [int(s) for s in split_size_or_sections]
        if sum(sizes) != extent:
            raise ShapeMismatch(f"split sizes {sizes} do not add up to {extent}", b.loc)
    return tuple(_piece(b, x, axis, sum(sizes[:i]), s) for i, s in enumerate(sizes))


@op("chunk")
def chunk(b: Builder, x: Value, chunks: int, dim: int = 0) -> tuple:
    """`x.chunk(n, dim)` along a dim of known size (as torch.chunk: pieces of ceil(n/k))."""
    axis = axis_of(b, x.type.rank, dim)
    extent = whole_extent(b, x, axis, "chunk")
    if extent == 0:  # as torch.chunk: `chunks` empty pieces
        return (x,) * chunks
    return split(b, x, max(-(-extent // chunks), 1), axis)


@op("unbind")
def unbind(b: Builder, x: Value, dim: int = 0) -> tuple:
    axis = axis_of(b, x.type.rank, dim)
    extent = whole_extent(b, x, axis, "unbind")
    return tuple(index(b, x, (slice(None),) * axis + (i,)) for i in range(extent))


@op("repeat")
def repeat(b: Builder, x: Value, *repeats: Any) -> Value:
    """`x.repeat(r0, r1, ...)`: copies side by side along each dim (of a size known while
    compiling where it repeats more than once); extra leading counts add dims."""
    counts = [_count(b, r, "repeat") for r in shape_items(repeats)]
    if len(counts) < x.type.rank:
        raise ShapeMismatch("repeat needs at least one count per dim of the tile", b.loc)
    x = reshape_to(b, x, (None,) * (len(counts) - x.type.rank) + x.type.dims)
    for axis, n in enumerate(counts):
        if n != 1:
            extent = whole_extent(b, x, axis, "repeat")
            x = _piece(b, x, axis, 0, 0) if n == 0 or extent == 0 else cat(b, [x] * n, axis)
    return x


@op("tile")
def tile_copies(b: Builder, x: Value, dims: Any) -> Value:
    """`torch.tile(x, dims)`: `repeat` with counts of 1 for the leading dims left out."""
    counts = shape_items((dims,))
    return repeat(b, x, *([1] * (x.type.rank - len(counts)) + list(counts)))


def _count(b: Builder, n: Any, what: str) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise UnsupportedOperation(f"{what} takes constant counts >= 0, not {n!r}", b.loc)
    return n


@op("narrow")
def narrow(b: Builder, x: Value, dim: int, start: int, length: int) -> Value:
    """`x.narrow(dim, start, length)` of a dim of a size known while compiling."""
    axis = axis_of(b, x.type.rank, dim)
    extent = whole_extent(b, x, axis, "narrow")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, length)):
        raise UnsupportedOperation("narrow of a tile takes constant int bounds", b.loc)
    first = start + extent if start < 0 else start
    if not 0 <= first <= extent or not 0 <= length <= extent - first:
        raise ShapeMismatch(f"narrow({start}, {length}) of a dim of size {extent}", b.loc)
    return _piece(b, x, axis, first, length)


@op("join")
def join(b: Builder, x: Value, y: Value) -> Value:
    """`tc.join(a, b)`: a new last dim of size 2."""
    return stack(b, [x, y], -1)


@op("split_pair")
def split_pair(b: Builder, x: Value) -> tuple:
    """`tc.split(x)`: the two halves of a last dim of size 2."""
    if x.type.rank == 0 or static_extent(b, x.type.dims[-1]) != 2:
        raise ShapeMismatch(f"tc.split needs a last dim of size 2, not {show(b, x)}", b.loc)
    return unbind(b, x, -1)


def _piece(b: Builder, x: Value, axis: int, offset: int, size: int, step: int = 1) -> Value:
    """`size` elements of a static dim from `offset` on, `step` apart."""
    if offset == 0 and step == 1 and size == static_extent(b, x.type.dims[axis]):
        return x
    dims = _with(x.type.dims, axis, static_block(b, size))
    attrs = {"axis": axis, "offset": offset, **({"step": step} if step != 1 else {})}
    return b.op("piece", (x,), x.type.dtype, dims, hint="piece", **attrs)


def _tiles(b: Builder, tiles: Any, what: str) -> list[Value]:
    values = list(tiles) if isinstance(tiles, (list, tuple)) else [tiles]
    if not values or not all(isinstance(v, Value) for v in values):
        raise UnsupportedOperation(f"{what} needs a list of tiles", b.loc)
    return values


def _cast(b: Builder, v: Value, dtype: torch.dtype) -> Value:
    return b.cast(v, dtype)  # type: ignore[return-value]


def _dims(dims: Any) -> list[int]:
    return [dims] if isinstance(dims, int) else list(dims)


@op("flip")
def flip(b: Builder, x: Value, *dims: Any, **named: Any) -> Value:
    """`torch.flip(x, dims)`, `x.flip(1, 2)`: each of the dims (of a size known while
    compiling) reversed."""
    dims = dims or (named["dims"],)
    for dim in _dims(dims[0]) if len(dims) == 1 else list(dims):
        axis = axis_of(b, x.type.rank, dim)
        if whole_extent(b, x, axis, "flip") > 1:
            x = b.op("flip", (x,), x.type.dtype, x.type.dims, hint="flipped", axis=axis)
    return x


@op("roll")
def roll(b: Builder, x: Value, shifts: Any, dims: Any = None) -> Value:
    """`torch.roll(x, shifts, dims)` along dims of a size known while compiling: position
    i takes the element at (i - shift) mod n (a roll of the flattened tile is refused)."""
    if dims is None:
        raise UnsupportedOperation("torch.roll of a tile needs dims= (no flattened roll)", b.loc)
    shifts, axes = _dims(shifts), _dims(dims)
    if len(shifts) != len(axes):
        raise ShapeMismatch("torch.roll takes one shift per dim", b.loc)
    for shift, dim in zip(shifts, axes, strict=True):
        axis = axis_of(b, x.type.rank, dim)
        extent = whole_extent(b, x, axis, "roll")
        if not isinstance(shift, int) or isinstance(shift, bool):
            raise UnsupportedOperation("torch.roll of a tile needs constant int shifts", b.loc)
        if extent and shift % extent:
            shift %= extent
            x = b.op("roll", (x,), x.type.dtype, x.type.dims, hint="rolled", axis=axis, shift=shift)
    return x


@op("diff")
def diff(
    b: Builder, x: Value, n: int = 1, dim: int = -1, prepend: Any = None, append: Any = None
) -> Value:
    """`torch.diff(x, n, dim)` along a dim of a size known while compiling: x[1:] - x[:-1],
    n times (bools: x[1:] != x[:-1], as PyTorch), of `prepend`, x and `append` joined
    along `dim` (tiles of x's shape elsewhere)."""
    axis = axis_of(b, x.type.rank, dim)
    if prepend is not None or append is not None:
        parts = [p for p in (prepend, x, append) if p is not None]
        x = cat(b, parts, axis)
    for _ in range(n):
        extent = whole_extent(b, x, axis, "diff")
        if extent == 0:
            return x
        later, earlier = _piece(b, x, axis, 1, extent - 1), _piece(b, x, axis, 0, extent - 1)
        name = "ne" if x.type.dtype == torch.bool else "sub"
        x = b.elementwise(name, later, earlier, dtype=torch.bool if name == "ne" else None)
    return x
