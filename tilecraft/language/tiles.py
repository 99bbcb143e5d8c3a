"""Device loops: `tile` and `grid`, and the `Tile` objects they yield."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tilecraft.exc import UnsupportedSyntax
from tilecraft.language.state import eager_context


class BlockWidth(int):
    """Eagerly, `tile.block_size` of a tile cut short by its loop's end: an int, except that
    `s + tile.block_size` is a `SliceEnd`, which as a slice's end (`w[t0, s : s + bs]`,
    Helion's spelling of a tile's columns from a computed start) stops where the tile does,
    as compiled code's lanes past the tile's end read nothing."""

    short: int  # the block's lanes past the tile's end

    def __new__(cls, size: int, short: int) -> BlockWidth:
        obj = super().__new__(cls, size)
        obj.short = short
        return obj

    def __add__(self, other: Any) -> Any:
        if type(other) is not int:
            return int(self) + other
        return SliceEnd(int(self) + other, self.short)

    __radd__ = __add__


class RegisteredSize(int):
    """Eagerly, the value of a `register_block_size` call: an int that the tiles of a loop
    over it and the tiles made with it as a dim (`tc.full([tm, bn], ...)`) remember, so
    eager mode knows which dim of an accumulator is the loop's lanes (`eager_lanes`)."""


LANES = "_tilecraft_lanes"  # on a tile made with them as dims: {dim: RegisteredSize}


class SliceEnd(int):
    """`s + tile.block_size` of a tile cut short (see `BlockWidth`)."""

    short: int

    def __new__(cls, value: int, short: int) -> SliceEnd:
        obj = super().__new__(cls, value)
        obj.short = short
        return obj


def _width(begin: int, end: int, block: int) -> int:
    """A tile's `block_size` as eager mode gives it (`BlockWidth` where cut short)."""
    short = begin + block - end
    return BlockWidth(block, short) if short > 0 else block


@dataclass(frozen=True)
class Tile:
    """A block of consecutive indices along one dimension: `[begin, end)`.

    Index tensors with a tile (`x[tile_m, :]`) to load or store a block. Attributes:
    `.index` (the indices as a 1-D tensor), `.begin`, `.end`, `.block_size` and `.id`
    (the position of this tile along its dimension).
    """

    begin: int
    end: int
    block_size: int
    device: torch.device
    span: tuple[int, int] | None = None  # the whole loop range (tc.rand counts in it)
    registered: RegisteredSize | None = None  # the block size given, if registered

    @property
    def index(self) -> torch.Tensor:
        return torch.arange(self.begin, self.end, device=self.device)

    @property
    def id(self) -> int:
        return self.begin // self.block_size

    @property
    def count(self) -> int:
        """How many tiles its loop runs (Helion's `tile.count`)."""
        low, high = self.span if self.span is not None else (self.begin, self.end)
        return -(-(high - low) // self.block_size)

    def __len__(self) -> int:
        return self.end - self.begin

    # a tile in arithmetic is its indices (`x[tile + 10]`), as in compiled code
    def __add__(self, other: Any) -> torch.Tensor:
        return self.index + other

    def __radd__(self, other: Any) -> torch.Tensor:
        return other + self.index

    def __sub__(self, other: Any) -> torch.Tensor:
        return self.index - other

    def __rsub__(self, other: Any) -> torch.Tensor:
        return other - self.index

    def __mul__(self, other: Any) -> torch.Tensor:
        return self.index * other

    def __rmul__(self, other: Any) -> torch.Tensor:
        return other * self.index

    def __floordiv__(self, other: Any) -> torch.Tensor:
        return self.index // other

    def __rfloordiv__(self, other: Any) -> torch.Tensor:
        return other // self.index

    def __mod__(self, other: Any) -> torch.Tensor:
        return self.index % other

    def __rmod__(self, other: Any) -> torch.Tensor:
        return other % self.index

    def __index__(self) -> int:
        # a tile in a shape (`torch.zeros([tile_m, 4])`, `x.reshape(tile_m, -1)`) is its
        # length, as in compiled code where it is the tile's block
        return self.end - self.begin


Sizes = int | Sequence[int] | torch.Size | torch.Tensor


def _is_one(v: object) -> bool:
    """A single bound: an int, or a scalar tensor read on the device (`offsets[i]`)."""
    return isinstance(v, int) or (isinstance(v, torch.Tensor) and v.numel() == 1)


def _items(v: Sizes) -> list[Any]:
    return [v] if _is_one(v) else list(v)  # type: ignore[arg-type]


def _ranges(begin_or_size: Sizes, end: Sizes | None) -> list[tuple[int, int]]:
    if end is None:
        return [(0, int(s)) for s in _items(begin_or_size)]
    pairs = zip(_items(begin_or_size), _items(end), strict=True)
    return [(int(b), int(e)) for b, e in pairs]


def tile(
    begin_or_size: Sizes,
    end: Sizes | None = None,
    block_size: int | Sequence[int] | None = None,
) -> Iterator[Tile] | Iterator[tuple[Tile, ...]]:
    """Loop over a range in blocks; the block size is tuned unless given.

    The outermost `tile` loop of a kernel becomes the launch grid (one program per
    tile); `tile` loops nested inside it run sequentially within a program. Pass a
    list of sizes (or `x.size()`) to tile several dimensions at once.

    Example::

        for tile_m, tile_n in tc.tile([m, n]):
            out[tile_m, tile_n] = x[tile_m, tile_n] + y[tile_m, tile_n]
    """
    ctx = eager_context("tile")
    multi = not (_is_one(begin_or_size) and (end is None or _is_one(end)))
    ranges = _ranges(begin_or_size, end)
    explicit = block_size if isinstance(block_size, Sequence) else [block_size] * len(ranges)
    sizes = ctx.tile_sizes(list(explicit), sys._getframe(1))
    given = [g if isinstance(g, RegisteredSize) else None for g in explicit]
    axes = [
        [Tile(s, min(s + bs, e), _width(s, e, bs), ctx.device, (b, e), g) for s in range(b, e, bs)]
        for (b, e), bs, g in zip(ranges, sizes, given, strict=True)
    ]
    if not multi:
        return iter(axes[0])
    return (tuple(reversed(t)) for t in itertools.product(*reversed(axes)))


def grid(
    begin_or_size: Sizes, end: Sizes | None = None, step: int | Sequence[int] | None = None
) -> Iterator[int] | Iterator[tuple]:
    """Loop over a range one index at a time (every `step`-th); as the outer loop, one
    program per index.

    Example::

        for i in tc.grid(batch):
            out[i, :] = x[i, :] * 2
    """
    eager_context("grid")
    ranges = _ranges(begin_or_size, end)
    steps = step if isinstance(step, Sequence) else [step or 1] * len(ranges)
    axes = [range(b, e, s) for (b, e), s in zip(ranges, steps, strict=True)]
    if _is_one(begin_or_size) and (end is None or _is_one(end)):
        return iter(axes[0])
    return (tuple(reversed(t)) for t in itertools.product(*reversed(axes)))


def static_range(begin_or_end: int, end: int | None = None, step: int = 1) -> range:
    """`range` unrolled while compiling: the body is repeated once per value.

    The bounds must be ints known on the host. Each trip sees its loop variable as a
    Python int, so it can pick columns (`x[tile, i]`) or choose code (`if i == 0:`).
    Python `for` loops over `range(...)` of host ints, tuples and lists inside a device
    loop are unrolled the same way.

    Example::

        for tile in tc.tile(m):
            acc = x[tile, 0]
            for i in tc.static_range(1, 4):
                acc = acc + x[tile, i]
            out[tile] = acc
    """
    begin, end = (0, begin_or_end) if end is None else (begin_or_end, end)
    return range(int(begin), int(end), int(step))


def jagged_tile(parent: torch.Tensor) -> Iterator[Tile]:
    """Loop over a dimension whose length differs per lane of the enclosing tiles.

    `parent` holds the lengths, indexed by the enclosing tiles (`lengths[tile_b]`): lane
    `i` of `tile_b` takes positions `0 .. parent[i] - 1`. Positions past a lane's length
    are masked: loads read 0 (or `other`), stores skip them, and reductions and matrix
    products over the jagged dim leave them out. The loop runs up to the largest length;
    `tile_k.begin/.end/.index` are the tile's own range, the same for every lane. Index
    tensors with the parent tiles too (`x[tile_b, tile_k]`, not `x[tile_k]`). A mean
    over the jagged dim is refused (each lane has its own count): sum, then divide.

    Example::

        for tile_b in tc.tile(rows):
            starts = offsets[tile_b]
            lengths = offsets[tile_b.index + 1] - starts
            acc = tc.zeros([tile_b])
            for tile_k in tc.jagged_tile(lengths):
                acc = acc + values[starts[:, None] + tile_k.index[None, :]].sum(1)
            out[tile_b] = acc
    """
    ctx = eager_context("jagged_tile")
    if not isinstance(parent, torch.Tensor) or parent.numel() != 1:
        # interpret mode runs the enclosing tile loops one lane at a time (see
        # runtime/interpret.py), so a parent indexed by them holds one length
        raise UnsupportedSyntax(
            "every dim of tc.jagged_tile's lengths must come from an enclosing tc.tile loop"
        )
    end = int(parent.item())
    (size,) = ctx.tile_sizes([None], sys._getframe(1))
    return (
        Tile(s, min(s + size, end), _width(s, end, size), ctx.device, (0, end))
        for s in range(0, end, size)
    )


# Helion's newer name for the same loop (its jagged-attention example writes `hl.vtile`)
vtile = jagged_tile


def lanes(loop: Iterator[Any]) -> Iterator[Any]:
    """The tiles of a `tc.tile` loop split into tiles of one lane each (interpret mode's
    way of running the loops around a `tc.jagged_tile`: each lane gets exact lengths)."""
    for item in loop:
        tiles = item if isinstance(item, tuple) else (item,)
        if not all(isinstance(t, Tile) for t in tiles):
            yield item
            continue
        split = [[_lane(t, i) for i in range(t.begin, t.end)] for t in tiles]
        for combo in itertools.product(*split):
            yield combo if isinstance(item, tuple) else combo[0]


def _lane(t: Tile, i: int) -> Tile:
    return Tile(i, i + 1, 1, t.device, t.span)


# Helion's functional spellings of the tile attributes (`hl.tile_index(t)` is `t.index`).
def tile_index(tile: Tile) -> torch.Tensor:
    """The indices of `tile` as a 1-D tile (`tile.index`).

    Example::

        rows = tc.tile_index(tile_m)
    """
    return tile.index


def tile_begin(tile: Tile) -> int:
    """The first index of `tile` (`tile.begin`).

    Example::

        start = tc.tile_begin(tile_m)
    """
    return tile.begin


def tile_end(tile: Tile) -> int:
    """One past the last index of `tile` (`tile.end`), clipped to its loop's range.

    Example::

        stop = tc.tile_end(tile_m)
    """
    return tile.end


def tile_block_size(tile: Tile) -> int:
    """The block size of `tile`'s loop (`tile.block_size`).

    Example::

        width = tc.tile_block_size(tile_m)
    """
    return tile.block_size


def tile_id(tile: Tile) -> int:
    """The position of `tile` among its loop's tiles (`tile.id`).

    Example::

        partial_row = tc.tile_id(tile_m)
    """
    return tile.id


# the attribute each function reads, for the device compiler
TILE_ATTRIBUTES = {
    tile_index: "index",
    tile_begin: "begin",
    tile_end: "end",
    tile_block_size: "block_size",
    tile_id: "id",
}
