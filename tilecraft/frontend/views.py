"""Views and shape ops on tiles: permute, squeeze, expand, integer indexing and slices
(reshape in `reshapes.py`, stack/cat/split in `joins.py`).

A tile's dims are symbolic blocks (`tilecraft.ir.types`): a tile loop's block has a size
chosen by the config, a whole dimension taken with `:` (or a constant size) is a static
block whose lanes past its extent are padding up to a power of two. Ops that only move or
add size-1 dims work on any dims. Ops that merge, split or slice a dim need static dims
whose lanes line up with the logical elements (see `_reshape_group`); the rest are
refused naming the dims.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from tilecraft.codegen.common import is_rolled, next_power_of_2
from tilecraft.exc import ShapeMismatch, UnsupportedOperation
from tilecraft.frontend.builder import Builder
from tilecraft.frontend.ops import op, view
from tilecraft.frontend.refs import TileRef, TileSizeInt
from tilecraft.ir.nodes import Value
from tilecraft.ir.types import Block, Dim, broadcast_dims


# -- facts about dims --------------------------------------------------------------------
def static_extent(b: Builder, d: Dim) -> int | None:
    """The number of elements of dim `d` when it is known while compiling (else None)."""
    if d is None:
        return 1
    block = b.blocks[d]
    return block.extent if block.kind == "reduction" and not block.dynamic else None


def padded(b: Builder, d: Dim) -> bool:
    """Whether dim `d` holds lanes past its extent (its register size is rounded up)."""
    return d is not None and b.blocks[d].extent != (b.blocks[d].fixed_size or 1)


def static_block(b: Builder, extent: int) -> Dim:
    """A static dim of `extent` elements held whole (never looped over in chunks)."""
    if extent == 1:
        return None
    for block in b.blocks.values():
        if block.kind == "reduction" and block.extent == extent and not is_rolled(block):
            return block.id
    new = Block(len(b.blocks), "reduction", extent, fixed_size=next_power_of_2(extent))
    b.blocks[new.id] = new
    return new.id


def whole_extent(b: Builder, x: Value, axis: int, what: str) -> int:
    """The extent of static dim `axis` of `x`, refusing tile dims and chunked dims."""
    d = x.type.dims[axis]
    if d is not None and is_rolled(b.blocks[d]):
        raise UnsupportedOperation(
            f"{what} on dim {axis} ({b.describe((d,))}), which this config loops over in "
            "chunks: use reduction_loops=[None] for this kernel",
            b.loc,
        )
    extent = static_extent(b, d)
    if extent is None:
        raise UnsupportedOperation(
            f"{what} needs a dim whose size is known while compiling; dim {axis} of "
            f"{b.describe(x.type.dims)} is a tile",
            b.loc,
        )
    return extent


def axis_of(b: Builder, rank: int, dim: Any) -> int:
    """`dim` (negative counts from the end) as an axis of a tile of `rank` dims."""
    if not isinstance(dim, int) or not -rank <= dim < max(rank, 1):
        raise ShapeMismatch(f"dim={dim!r} is out of range for a tile of rank {rank}", b.loc)
    return dim % max(rank, 1)


def shape_items(shape: tuple[Any, ...]) -> list[Any]:
    """`f(2, 3)` and `f([2, 3])` alike."""
    if len(shape) == 1 and isinstance(shape[0], (list, tuple, torch.Size)):
        return list(shape[0])
    return list(shape)


def tile_block(item: Any) -> int | None:
    """The block of a tile (or its size) written in a shape, else None."""
    return item.block if isinstance(item, (TileRef, TileSizeInt)) else None


def shape_dims(b: Builder, shape: Sequence[Any]) -> tuple[Dim, ...]:
    """Dims of a new tile from a shape of tiles and ints (as `tc.zeros` takes)."""
    from tilecraft.frontend.blocks import BlockSizeInt

    dims: list[Dim] = []
    for item in shape:
        block = tile_block(item)
        if block is not None:
            dims.append(block)
        elif isinstance(item, BlockSizeInt) and b.table is not None:
            dims.append(b.table.registered_block(item).id)
        elif isinstance(item, int) and not isinstance(item, bool) and item >= 0:
            dims.append(None if item == 1 else _whole(b, item))
        else:
            raise UnsupportedOperation(f"tile shapes are lists of tiles and ints, not {item!r}")
    return tuple(dims)


def _whole(b: Builder, extent: int) -> int:
    if b.table is None:
        raise UnsupportedOperation("a constant tile shape outside a device loop", b.loc)
    return int(b.table.reduction(extent).id)


# -- reshape helpers ---------------------------------------------------------------
def bitcast(b: Builder, x: Value, dtype: torch.dtype) -> Value:
    """`x.view(dtype)`: the same bits as `dtype`, whose elements must have `x`'s size."""
    if dtype.itemsize != x.type.dtype.itemsize or torch.bool in (dtype, x.type.dtype):
        raise UnsupportedOperation(
            f"x.view(dtype) on tiles keeps the element size: {x.type.dtype} -> {dtype}", b.loc
        )
    if dtype == x.type.dtype:
        return x
    return b.op("bitcast", (x,), dtype, x.type.dims)


def reshape_to(b: Builder, x: Value, dims: tuple[Dim, ...]) -> Value:
    """`x` with dims `dims` (already checked to be a valid reshape)."""
    if dims == x.type.dims:
        return x
    return b.op("reshape", (x,), x.type.dtype, dims, hint="view")


def show(b: Builder, x: Value) -> str:
    """The shape of `x` as errors print it."""
    return b.describe(x.type.dims)


# -- squeeze and unsqueeze ---------------------------------------------------------------
@op("squeeze")
def squeeze(b: Builder, x: Value, dim: Any = None) -> Value:
    """`x.squeeze(dim)`: drop size-1 dims (all of them when `dim` is None), a tile of block
    size 1 too."""
    rank = x.type.rank
    if dim is None:
        axes = set(range(rank))
    else:
        axes = {axis_of(b, rank, d) for d in (dim if isinstance(dim, (list, tuple)) else [dim])}
    dims = tuple(d for i, d in enumerate(x.type.dims) if not (i in axes and _one(b, d)))
    return reshape_to(b, x, dims)


def _one(b: Builder, d: Dim) -> bool:
    """Whether dim `d` holds one element: a static 1, or a tile whose block size the kernel
    fixes at 1 (`tc.tile(..., block_size=1)`: each program holds one position)."""
    if static_extent(b, d) == 1:
        return True
    return d is not None and b.blocks[d].holds_one


# -- permute and transpose ---------------------------------------------------------------
@op("permute")
def permute(b: Builder, x: Value, *dims: Any) -> Value:
    """`x.permute(...)`: the dims of `x` reordered."""
    rank = x.type.rank
    perm = [axis_of(b, rank, d) for d in shape_items(dims)]
    if sorted(perm) != list(range(rank)):
        raise ShapeMismatch(f"permute({perm}) is not a permutation of {rank} dims", b.loc)
    if perm == list(range(rank)):
        return x
    out = tuple(x.type.dims[p] for p in perm)
    return b.op("permute", (x,), x.type.dtype, out, hint="perm", perm=tuple(perm))


@op("transpose", "swapaxes", "swapdims")
def transpose(b: Builder, x: Value, dim0: int, dim1: int) -> Value:
    """`x.transpose(d0, d1)`: two dims of `x` swapped."""
    perm = list(range(x.type.rank))
    a, c = axis_of(b, x.type.rank, dim0), axis_of(b, x.type.rank, dim1)
    perm[a], perm[c] = perm[c], perm[a]
    return permute(b, x, perm)


@op("t")
def t(b: Builder, x: Value) -> Value:
    if x.type.rank > 2:
        raise ShapeMismatch("x.t() needs a tile of rank <= 2: use .mT or transpose", b.loc)
    return reverse_dims(b, x)


def reverse_dims(b: Builder, x: Value) -> Value:
    """`x.T`: all dims reversed."""
    return permute(b, x, list(reversed(range(x.type.rank))))


def matrix_transpose(b: Builder, x: Value) -> Value:
    """`x.mT`: the last two dims swapped."""
    if x.type.rank < 2:
        raise ShapeMismatch("x.mT needs a tile of rank >= 2", b.loc)
    return transpose(b, x, -2, -1)


@op("movedim", "moveaxis")
def movedim(b: Builder, x: Value, source: int, destination: int) -> Value:
    perm = list(range(x.type.rank))
    moved = perm.pop(axis_of(b, x.type.rank, source))
    perm.insert(axis_of(b, x.type.rank, destination), moved)
    return permute(b, x, perm)


# -- expand --------------------------------------------------------------------------------
@op("expand")
def expand(b: Builder, x: Value, *sizes: Any) -> Value:
    """`x.expand(...)`: size-1 dims repeated to tiles or sizes (-1 keeps a dim)."""
    items = shape_items(sizes)
    if len(items) < x.type.rank:
        raise ShapeMismatch("expand needs at least as many sizes as the tile has dims", b.loc)
    own = (None,) * (len(items) - x.type.rank) + x.type.dims
    dims: list[Dim] = []
    for item, d in zip(items, own, strict=True):
        if item == -1 and not isinstance(item, bool):
            dims.append(d)
            continue
        (new,) = shape_dims(b, [item])
        if d is not None and new != d:
            raise ShapeMismatch(f"expand of {show(b, x)}: only size-1 dims can be expanded", b.loc)
        dims.append(new)
    return broadcast_to(b, x, tuple(dims))


def broadcast_to(b: Builder, x: Value, dims: tuple[Dim, ...]) -> Value:
    if broadcast_dims(x.type.dims, dims) != dims:
        raise ShapeMismatch(
            f"a tile of shape {show(b, x)} does not broadcast to {b.describe(dims)}", b.loc
        )
    if dims == x.type.dims:
        return x
    return b.op("expand", (x,), x.type.dtype, dims, hint="expanded")


@op("expand_as")
def expand_as(b: Builder, x: Value, other: Value) -> Value:
    return broadcast_to(b, x, other.type.dims)


@op("broadcast_to")
def _broadcast_to(b: Builder, x: Value, *shape: Any) -> Value:
    """`x.broadcast_to(shape)`, or its sizes as separate arguments (`x.broadcast_to(t, 4)`)."""
    return expand(b, x, *shape_items(shape))


# -- integer indexing --------------------------------------------------------------------
def index(b: Builder, x: Value, key: Any) -> Value:
    """`x[key]` for a tile: `:`, `None`, `...` and integers (a position along a dim whose
    size is known, or within a tile's block)."""
    items = list(key) if isinstance(key, tuple) else [key]
    items = _expand_ellipsis(b, items, x.type.rank)
    if not any(_is_position(i) or _is_part(i) or _is_index_tile(i) for i in items):
        return view(b, x, _view_index(b, items, x.type.rank))
    axis, out = 0, x
    dims: list[Dim] = []
    for item in items:
        if item is None:
            dims.append(None)
        elif _is_position(item):
            out = select(b, out, axis, item)
            axis += 1
        elif _is_index_tile(item):
            _one_index_tile(b, items)
            from tilecraft.frontend.gathers import subscript  # gathers imports this module

            out = subscript(b, out, axis, item)
            dims.extend(out.type.dims[axis : axis + item.type.rank])
            axis += item.type.rank
        elif isinstance(item, slice):
            out = _sliced(b, out, axis, item) if _is_part(item) else out
            dims.append(out.type.dims[axis])
            axis += 1
        else:
            raise UnsupportedOperation(_PARTIAL_SLICE, b.loc)
    return reshape_to(b, out, tuple(dims) + out.type.dims[axis:])


_PARTIAL_SLICE = (
    "tiles can be indexed with `:`, `None`, `...`, integers and slices `a:b:c` of a dim "
    "of constant size"
)


def _is_index_tile(item: Any) -> bool:
    """An index tile (`row[:, ids]`): integer, of rank >= 1 (a rank-0 one is a position)."""
    return isinstance(item, Value) and item.type.rank > 0 and item.type.dtype != torch.bool


def _one_index_tile(b: Builder, items: list[Any]) -> None:
    """An index tile among `:` only: with ints or other index tiles PyTorch broadcasts the
    indices together and may move their dims first, which is not done here."""
    if any(not _is_index_tile(i) and i != slice(None) for i in items) or (
        sum(map(_is_index_tile, items)) > 1
    ):
        raise UnsupportedOperation(
            "a tile indexed by an index tile takes `:` for its other dims (one index tile, "
            "no ints or None beside it): index again for more",
            b.loc,
        )


def _is_part(item: Any) -> bool:
    """A slice that is not all of a dim (`x[:, 1:]`, `x[:, 2:5]`)."""
    return isinstance(item, slice) and item != slice(None)


def _sliced(b: Builder, x: Value, axis: int, part: slice) -> Value:
    """`x[..., start:stop:step, ...]` of a dim whose size is known, its bounds clipped as
    PyTorch clips them."""
    if axis >= x.type.rank:
        raise ShapeMismatch(f"too many indices for a tile of rank {x.type.rank}", b.loc)
    bounds = (part.start, part.stop, part.step)
    if not all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in bounds):
        raise UnsupportedOperation("slices of tiles need constant int bounds", b.loc)
    if part.step is not None and part.step < 1:
        raise UnsupportedOperation("slice steps must be positive (as in PyTorch)", b.loc)
    extent = whole_extent(b, x, axis, "a slice")
    start, stop, step = part.indices(extent)
    from tilecraft.frontend.joins import _piece  # joins imports this module

    return _piece(b, x, axis, start, len(range(start, stop, step)), step)


def sizes(b: Builder, x: Value) -> tuple[int, ...]:
    """`x.shape` of a tile: a dim's size where it is constant, a tile's block size
    (`TileSizeInt`: in a shape it is the tile's own dim) for a tile's dim."""
    out: list[int] = []
    for d in x.type.dims:
        extent = static_extent(b, d)
        if extent is None:
            block = b.blocks[d]  # type: ignore[index]
            out.append(TileSizeInt(block.fixed_size or 1, d))  # type: ignore[arg-type]
        else:
            out.append(extent)
    return tuple(out)


@op("size")
def size(b: Builder, x: Value, dim: int | None = None) -> Any:
    """`x.size()` or `x.size(d)` of a tile (see `sizes`)."""
    found = sizes(b, x)
    return found if dim is None else found[axis_of(b, x.type.rank, dim)]


@op("dim", "ndimension")
def rank(b: Builder, x: Value) -> int:
    return x.type.rank


def _is_position(item: Any) -> bool:
    if isinstance(item, Value):
        return item.type.rank == 0 and not item.type.dtype.is_floating_point
    return isinstance(item, int) and not isinstance(item, bool)


def _expand_ellipsis(b: Builder, items: list[Any], rank: int) -> list[Any]:
    if Ellipsis not in items:
        return items
    if items.count(Ellipsis) > 1:
        raise ShapeMismatch("an index can have only one `...`", b.loc)
    at = items.index(Ellipsis)
    used = sum(1 for i in items if i is not None and i is not Ellipsis)
    return items[:at] + [slice(None)] * max(rank - used, 0) + items[at + 1 :]


def _view_index(b: Builder, items: list[Any], rank: int) -> tuple[str, ...]:
    out = []
    for item in items:
        if item is None:
            out.append("None")
        elif item == slice(None):
            out.append(":")
        else:
            raise UnsupportedOperation(_PARTIAL_SLICE, b.loc)
    if out.count(":") > rank:
        raise ShapeMismatch(f"too many indices for a tile of rank {rank}", b.loc)
    return tuple(out + [":"] * (rank - out.count(":")))


def select(b: Builder, x: Value, axis: int, position: Any) -> Value:
    """The elements at `position` along `axis`, which is kept with size 1."""
    if axis >= x.type.rank:
        raise ShapeMismatch(f"too many indices for a tile of rank {x.type.rank}", b.loc)
    d = x.type.dims[axis]
    if isinstance(position, int):
        position = _check_position(b, x, axis, position)
    if d is None:
        return x
    if is_rolled(b.blocks[d]):
        whole_extent(b, x, axis, "integer indexing")
    dims = x.type.dims[:axis] + (None,) + x.type.dims[axis + 1 :]
    return b.op("select", (x, position), x.type.dtype, dims, hint="picked", axis=axis)


def _check_position(b: Builder, x: Value, axis: int, position: int) -> int:
    d = x.type.dims[axis]
    extent = static_extent(b, d)
    if extent is None:  # a tile's dim: a position within its block
        size = b.blocks[d].fixed_size or 1  # type: ignore[index]
        if not 0 <= position < size:
            raise ShapeMismatch(
                f"index {position} along a tile's dim of block size {size}: positions in a "
                "tile count from 0 and must be less than its block size",
                b.loc,
            )
        return position
    if not -extent <= position < extent:
        raise ShapeMismatch(f"index {position} is out of range for a dim of size {extent}", b.loc)
    return position % extent


TRANSPOSES = {"T": reverse_dims, "mT": matrix_transpose, "H": reverse_dims, "mH": matrix_transpose}
