"""Device loops: `tile` and `grid`, and the `Tile` objects they yield."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from tilecraft.language.state import eager_context


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

    @property
    def index(self) -> torch.Tensor:
        return torch.arange(self.begin, self.end, device=self.device)

    @property
    def id(self) -> int:
        return self.begin // self.block_size

    def __len__(self) -> int:
        return self.end - self.begin


Sizes = int | Sequence[int] | torch.Size


def _ranges(begin_or_size: Sizes, end: Sizes | None) -> list[tuple[int, int]]:
    if end is None:
        sizes = [begin_or_size] if isinstance(begin_or_size, int) else list(begin_or_size)
        return [(0, int(s)) for s in sizes]
    begins = [begin_or_size] if isinstance(begin_or_size, int) else list(begin_or_size)
    ends = [end] if isinstance(end, int) else list(end)
    return [(int(b), int(e)) for b, e in zip(begins, ends, strict=True)]


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
    multi = not (isinstance(begin_or_size, int) and (end is None or isinstance(end, int)))
    ranges = _ranges(begin_or_size, end)
    explicit = block_size if isinstance(block_size, Sequence) else [block_size] * len(ranges)
    sizes = [ctx.next_block_size(b) for b in explicit]
    axes = [
        [Tile(s, min(s + bs, e), bs, ctx.device) for s in range(b, e, bs)]
        for (b, e), bs in zip(ranges, sizes, strict=True)
    ]
    if not multi:
        return iter(axes[0])
    return (tuple(reversed(t)) for t in itertools.product(*reversed(axes)))


def grid(begin_or_size: Sizes, end: Sizes | None = None) -> Iterator[int] | Iterator[tuple]:
    """Loop over a range one index at a time; as the outer loop, one program per index.

    Example::

        for i in tc.grid(batch):
            out[i, :] = x[i, :] * 2
    """
    eager_context("grid")
    ranges = _ranges(begin_or_size, end)
    if isinstance(begin_or_size, int) and (end is None or isinstance(end, int)):
        return iter(range(*ranges[0]))
    return (tuple(reversed(t)) for t in itertools.product(*(range(*r) for r in reversed(ranges))))
