"""`reshape`/`view`, `flatten`, `unflatten`, `view_as` and `reshape_as` of tiles.

A reshape pairs runs of source and target dims in order: a tile loop's dim must stay whole
(or merge with static dims after it, counted as its block size), static dims merge and
split. Where lanes line up (no padded dim but the outermost of each run) the reshape is
Triton's; elsewhere (a [12] row as [2, 6], [3, 6] as [18]) each element moves to the lane
of its row-major position (the IR's `regroup`).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from tilecraft.codegen.common import is_rolled, next_power_of_2
from tilecraft.exc import ShapeMismatch, UnsupportedOperation
from tilecraft.frontend.builder import Builder
from tilecraft.frontend.ops import op
from tilecraft.frontend.views import (
    axis_of,
    bitcast,
    padded,
    reshape_to,
    shape_items,
    show,
    sizes,
    static_block,
    static_extent,
    tile_block,
    whole_extent,
)
from tilecraft.ir.nodes import Value
from tilecraft.ir.types import Dim

Unit = tuple[str, Any]  # ("tile", block id) | ("static", extent) | ("infer", None)
Move = tuple[int, int, list[Dim]]  # source dims i:i2 (size-1 dims left out) -> these dims


@op("reshape", "view")
def reshape(b: Builder, x: Value, *shape: Any) -> Value:
    """`x.reshape(...)`/`x.view(...)`: adds or removes size-1 dims anywhere, merges or
    splits static dims; a tile's dim must stay whole and in order."""
    if len(shape) == 1 and isinstance(shape[0], torch.dtype):
        return bitcast(b, x, shape[0])
    targets = [_target_unit(b, item) for item in shape_items(shape)]
    # a tile holding one position that `x` lacks (a flatten merged it): a size-1 dim
    targets = [
        ("static", 1)
        if t[0] == "tile" and t[1] not in x.type.dims and b.blocks[t[1]].holds_one
        else t
        for t in targets
    ]
    moves: list[Move] = []
    dims = _reshape_dims(b, x, targets, moves)
    return reshape_to(b, _regrouped(b, x, moves) if moves else x, dims)


def _target_unit(b: Builder, item: Any) -> Unit:
    block = tile_block(item)
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


def _reshape_dims(b: Builder, x: Value, targets: list[Unit], moves: list[Move]) -> tuple[Dim, ...]:
    sources = [(d, _source_unit(b, d)) for d in x.type.dims if d is not None]
    targets = _infer(b, x, sources, targets)
    wanted = [t for t in targets if t != ("static", 1)]
    resolved = iter(_match(b, x, sources, wanted, moves))
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


def _match(b: Builder, x: Value, sources: list, wanted: list[Unit], moves: list[Move]) -> list[Dim]:
    """The dim of each wanted unit, pairing groups of source and target dims in order;
    groups whose lanes do not line up are added to `moves`."""
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
        group = _reshape_group(b, x, units[i:i2], [w[1] for w in wanted[j:j2]])
        if group is None:
            group = [static_block(b, w[1]) for w in wanted[j:j2]]
            moves.append((i, i2, group))
        out += group
        i, j = i2, j2
    if i < len(sources) or j < len(wanted):
        for axis, d in enumerate(x.type.dims):  # a chunked dim: the config's doing
            if d is not None and is_rolled(b.blocks[d]):
                whole_extent(b, x, axis, "reshape")
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
    """The smallest runs of static source and target dims from i, j with equal products
    (with no elements, the whole runs: [0, 4] -> [0, 2, 2], [3, 0] -> [0])."""
    p = q = 1
    i2, j2 = i, j
    while True:
        if p == q and (i2, j2) != (i, j):
            if p == 0:
                return _static_end(sources, i2, lambda u: u[1]), _static_end(wanted, j2)
            return i2, j2
        more_i = i2 < len(sources) and sources[i2][1][0] == "static"
        more_j = j2 < len(wanted) and wanted[j2][0] == "static"
        if more_i and (p <= q or not more_j):
            p, i2 = p * sources[i2][1][1], i2 + 1
        elif more_j:
            q, j2 = q * wanted[j2][1], j2 + 1
        else:
            return i, j


def _static_end(units: list, k: int, unit: Any = lambda u: u) -> int:
    """The end of the run of static units from `k`."""
    while k < len(units) and unit(units[k])[0] == "static":
        k += 1
    return k


def _reshape_group(b: Builder, x: Value, sources: list, extents: list[int]) -> list[Dim] | None:
    """Dims for static target `extents` from source dims of the same product, or None where
    the elements must move between lanes (see `_regrouped`).

    Lanes line up when every dim but the first of each group holds no padding: then
    padding lanes of the first source dim land past the first target dim's extent."""
    if [u[1] for _, u in sources] == extents:
        return [d for d, _ in sources]
    inner_padded = any(padded(b, d) for d, _ in sources[1:])
    if not inner_padded and all(next_power_of_2(e) == e for e in extents[1:]) and 0 not in extents:
        return [static_block(b, e) for e in extents]
    if any(static_extent(b, d) is None for d, _ in sources):  # a tile's block merged in
        raise UnsupportedOperation(
            f"reshape of dims of sizes {[u[1] for _, u in sources]} to {extents} in a tile of "
            f"shape {show(b, x)}: a tile's dim merges only with static dims whose sizes are "
            "powers of two",
            b.loc,
        )
    return None


REGROUP_LANES = 1 << 14  # the most lane pairs a regroup compares (a row of 64 x 256 lanes)


def _regrouped(b: Builder, x: Value, moves: list[Move]) -> Value:
    """`x` without its size-1 dims, each group of static dims in `moves` replaced by its
    target dims: an element moves to the lane of its row-major position, which differs
    from its source lane where a dim other than the outermost is padded ([12] -> [2, 6],
    [3, 6] -> [18]). The code generator sums one-hot products over the pairs of lanes."""
    out = reshape_to(b, x, tuple(d for d in x.type.dims if d is not None))
    for i, i2, group in reversed(moves):
        dims = out.type.dims
        pairs = math.prod(_lanes(b, d) for d in (*dims[i:i2], *group))
        if pairs > REGROUP_LANES:
            raise UnsupportedOperation(
                f"reshape of dims of sizes {b.describe(dims[i:i2])} to {b.describe(tuple(group))}"
                f" in a tile of shape {show(b, x)}: its elements change lanes, and "
                f"{pairs} pairs of lanes is too many to compare (at most {REGROUP_LANES}); "
                "merged or split dims other than the outermost should be powers of two",
                b.loc,
            )
        new = dims[:i] + tuple(group) + dims[i2:]
        out = b.op("regroup", (out,), x.type.dtype, new, hint="regrouped", axis=i, count=i2 - i)
    return out


def _lanes(b: Builder, d: Dim) -> int:
    return 1 if d is None else b.blocks[d].fixed_size or 1


@op("flatten")
def flatten(b: Builder, x: Value, start_dim: int = 0, end_dim: int = -1) -> Value:
    """`x.flatten(start, end)`: dims start..end merged into one (a reshape)."""
    if x.type.rank == 0:
        return reshape(b, x, [1])
    first, last = axis_of(b, x.type.rank, start_dim), axis_of(b, x.type.rank, end_dim)
    if first > last:
        raise ShapeMismatch("flatten's start_dim must not come after its end_dim", b.loc)
    if first == last:
        return x
    span = x.type.dims[first : last + 1]
    if any(d is not None and b.blocks[d].holds_one for d in span):  # one position: size 1
        x = b.op(
            "reshape", (x,), x.type.dtype, _ones_loosened(b, x.type.dims, first, last), hint="view"
        )
    shape = list(sizes(b, x))
    merged = _merged_size(b, x, shape[first : last + 1])
    return reshape(b, x, [*shape[:first], merged, *shape[last + 1 :]])


def _ones_loosened(b: Builder, dims: tuple, first: int, last: int) -> tuple:
    """`dims` with the dims of tiles holding one position in `first..last` made plain
    size-1 dims (as eager mode's tensors have them), so that flatten may merge them."""
    return tuple(
        None if first <= i <= last and d is not None and b.blocks[d].holds_one else d
        for i, d in enumerate(dims)
    )


def _merged_size(b: Builder, x: Value, items: list[Any]) -> Any:
    """The size of dims merged by flatten: a product of constants, or the one tile's dim
    among size-1 dims (a tile's dim does not merge with others)."""
    tiles = [s for s in items if tile_block(s) is not None]
    if not tiles:
        return math.prod(items)
    if len(tiles) == 1 and all(s == 1 for s in items if tile_block(s) is None):
        return tiles[0]
    raise UnsupportedOperation(
        f"flatten of a tile of shape {show(b, x)} would merge a tile's dim with others: "
        "a tile's dim must stay whole",
        b.loc,
    )


@op("unflatten")
def unflatten(b: Builder, x: Value, dim: int, sizes_: Any) -> Value:
    """`x.unflatten(dim, sizes)`: dim split into `sizes` (a reshape; one may be -1)."""
    axis = axis_of(b, x.type.rank, dim)
    shape = list(sizes(b, x))
    return reshape(b, x, [*shape[:axis], *shape_items((sizes_,)), *shape[axis + 1 :]])


@op("view_as", "reshape_as")
def view_as(b: Builder, x: Value, other: Value) -> Value:
    """`x.view_as(other)`: `x` reshaped to `other`'s shape."""
    return reshape(b, x, list(sizes(b, other)))
