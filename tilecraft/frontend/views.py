"""Views and shape ops on tiles: reshape, permute, squeeze, expand, integer indexing,
stack/cat/split.

A tile's dims are symbolic blocks (`tilecraft.ir.types`): a tile loop's block has a size
chosen by the config, a whole dimension taken with `:` (or a constant size) is a static
block whose lanes past its extent are padding up to a power of two. Ops that only move or
add size-1 dims work on any dims. Ops that merge, split or slice a dim need static dims
whose lanes line up with the logical elements (see `_reshape_group`); the rest are
refused naming the dims.
"""

from __future__ import annotations

import math
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

Unit = tuple[str, Any]  # ("tile", block id) | ("static", extent) | ("infer", None)


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


def _tile_block(item: Any) -> int | None:
    return item.block if isinstance(item, (TileRef, TileSizeInt)) else None


def shape_dims(b: Builder, shape: Sequence[Any]) -> tuple[Dim, ...]:
    """Dims of a new tile from a shape of tiles and ints (as `tc.zeros` takes)."""
    from tilecraft.frontend.blocks import BlockSizeInt

    dims: list[Dim] = []
    for item in shape:
        block = _tile_block(item)
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


# -- reshape -----------------------------------------------------------------------------
@op("reshape", "view")
def reshape(b: Builder, x: Value, *shape: Any) -> Value:
    """`x.reshape(...)`/`x.view(...)`: adds or removes size-1 dims anywhere, merges or
    splits static dims; a tile's dim must stay whole and in order."""
    if len(shape) == 1 and isinstance(shape[0], torch.dtype):
        return bitcast(b, x, shape[0])
    targets = [_target_unit(b, item) for item in shape_items(shape)]
    dims = _reshape_dims(b, x, targets)
    return reshape_to(b, x, dims)


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


def _target_unit(b: Builder, item: Any) -> Unit:
    block = _tile_block(item)
    if block is not None:
        return ("tile", block)
    if isinstance(item, int) and not isinstance(item, bool):
        if item == -1:
            return ("infer", None)
        if item >= 0:
            return ("static", int(item))
    raise UnsupportedOperation(f"reshape sizes are tiles and ints, not {item!r}", b.loc)


def _source_unit(b: Builder, d: Dim) -> Unit:
    extent = static_extent(b, d)
    if d is not None and extent is not None and is_rolled(b.blocks[d]):
        return ("tile", d)  # a dim looped over in chunks cannot be merged or split
    return ("tile", d) if extent is None else ("static", extent)


def _reshape_dims(b: Builder, x: Value, targets: list[Unit]) -> tuple[Dim, ...]:
    sources = [(d, _source_unit(b, d)) for d in x.type.dims if d is not None]
    targets = _infer(b, x, sources, targets)
    wanted = [t for t in targets if t != ("static", 1)]
    resolved = iter(_match(b, x, sources, wanted))
    return tuple(None if t == ("static", 1) else next(resolved) for t in targets)


def _infer(b: Builder, x: Value, sources: list, targets: list[Unit]) -> list[Unit]:
    """Resolve one `-1`: a missing tile dim, or the missing static size."""
    holes = [i for i, t in enumerate(targets) if t[0] == "infer"]
    if not holes:
        return targets
    if len(holes) > 1:
        raise ShapeMismatch("only one reshape size can be -1", b.loc)
    tiles = [u[1] for _, u in sources if u[0] == "tile"]
    given = [t[1] for t in targets if t[0] == "tile"]
    missing = [t for t in tiles if t not in given]
    static_in = math.prod(u[1] for _, u in sources if u[0] == "static")
    static_out = math.prod(t[1] for t in targets if t[0] == "static")
    if len(missing) == 1:
        fill: Unit = ("tile", missing[0])
    elif not missing and static_out and static_in % static_out == 0:
        fill = ("static", static_in // static_out)
    else:
        raise ShapeMismatch(f"cannot infer the -1 of a reshape of {show(b, x)}", b.loc)
    return [fill if i == holes[0] else t for i, t in enumerate(targets)]


def _match(b: Builder, x: Value, sources: list, wanted: list[Unit]) -> list[Dim]:
    """The dim of each wanted unit, pairing groups of source and target dims in order."""
    out: list[Dim] = []
    i = j = 0
    while i < len(sources) or j < len(wanted):
        if i < len(sources) and j < len(wanted) and sources[i][1][0] == wanted[j][0] == "tile":
            if sources[i][1][1] != wanted[j][1]:
                break
            out.append(sources[i][0])
            i, j = i + 1, j + 1
            continue
        units = _tile_as_static(b, sources, i) if j < len(wanted) else sources
        i2, j2 = _group_end(units, wanted, i, j)
        if (i2, j2) == (i, j):
            break
        out += _reshape_group(b, x, units[i:i2], [w[1] for w in wanted[j:j2]])
        i, j = i2, j2
    if i < len(sources) or j < len(wanted):
        raise ShapeMismatch(
            f"cannot reshape a tile of shape {show(b, x)} to this shape: a tile's dim must "
            "stay whole and in order, and static sizes must multiply to the same total",
            b.loc,
        )
    return out


def _tile_as_static(b: Builder, sources: list, i: int) -> list:
    """`sources` with a tile loop's dim at `i` counted as its block size, so that it merges
    with the static dims after it (`x.reshape(t.block_size * 2, n)`, as Helion's int4
    unpacking writes): its lanes past the loop's end become lanes of the merged dim, holding
    what the masked loads read there (0)."""
    if i >= len(sources) or sources[i][1][0] != "tile":
        return sources
    d = sources[i][0]
    size = b.blocks[d].fixed_size if b.blocks[d].kind == "tile" else None
    return sources if size is None else [*sources[:i], (d, ("static", size)), *sources[i + 1 :]]


def _group_end(sources: list, wanted: list[Unit], i: int, j: int) -> tuple[int, int]:
    """The smallest runs of static source and target dims from i, j with equal products."""
    p = q = 1
    i2, j2 = i, j
    while True:
        if p == q and (i2, j2) != (i, j):
            return i2, j2
        if p <= q and i2 < len(sources) and sources[i2][1][0] == "static":
            p, i2 = p * sources[i2][1][1], i2 + 1
        elif j2 < len(wanted) and wanted[j2][0] == "static":
            q, j2 = q * wanted[j2][1], j2 + 1
        else:
            return i, j


def _reshape_group(b: Builder, x: Value, sources: list, extents: list[int]) -> list[Dim]:
    """Dims for static target `extents` from static source dims of the same product.

    Lanes line up when every dim but the first of each group holds no padding: then
    padding lanes of the first source dim land past the first target dim's extent."""
    if [u[1] for _, u in sources] == extents:
        return [d for d, _ in sources]
    inner_padded = any(padded(b, d) for d, _ in sources[1:])
    if inner_padded or any(next_power_of_2(e) != e for e in extents[1:]) or 0 in extents:
        raise UnsupportedOperation(
            f"reshape of dims of sizes {[u[1] for _, u in sources]} to {extents} in a tile of "
            f"shape {show(b, x)}: merged or split dims other than the outermost must be "
            "powers of two",
            b.loc,
        )
    return [static_block(b, e) for e in extents]


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
    block = b.blocks[d] if d is not None else None
    return block is not None and block.kind == "tile" and _fixed_one(block)


def _fixed_one(block: Any) -> bool:
    return block.fixed_size == 1 and block.config_index is None and not block.dynamic


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
def _broadcast_to(b: Builder, x: Value, shape: Any) -> Value:
    return expand(b, x, *shape_items((shape,)))


# -- integer indexing --------------------------------------------------------------------
def index(b: Builder, x: Value, key: Any) -> Value:
    """`x[key]` for a tile: `:`, `None`, `...` and integers (a position along a dim whose
    size is known, or within a tile's block)."""
    items = list(key) if isinstance(key, tuple) else [key]
    items = _expand_ellipsis(b, items, x.type.rank)
    if not any(_is_position(i) or _is_part(i) for i in items):
        return view(b, x, _view_index(b, items, x.type.rank))
    axis, out = 0, x
    dims: list[Dim] = []
    for item in items:
        if item is None:
            dims.append(None)
        elif _is_position(item):
            out = select(b, out, axis, item)
            axis += 1
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
