"""Types of tile values: a dtype and a tuple of symbolic dimensions."""

from __future__ import annotations

from dataclasses import dataclass

import torch

# A dimension is a block id (its size is that block's size) or None (size 1).
Dim = int | None


@dataclass(frozen=True)
class TileType:
    """The dtype and symbolic shape of a value on the device; `dims == ()` is a scalar."""

    dtype: torch.dtype
    dims: tuple[Dim, ...] = ()

    @property
    def rank(self) -> int:
        return len(self.dims)

    def __str__(self) -> str:
        dims = ", ".join("1" if d is None else f"b{d}" for d in self.dims)
        return f"{str(self.dtype).removeprefix('torch.')}[{dims}]"


@dataclass(frozen=True)
class Block:
    """A symbolic dimension: a tiled loop range or a full-size (reduction) dimension.

    `kind` is "tile" for `tc.tile` loops (size from `Config.block_sizes`), "grid" for
    `tc.grid` loops (size 1), "reduction" for whole dimensions taken with `:` (the whole
    range in one block, or a loop over chunks per `Config.reduction_loops`).
    """

    id: int
    kind: str
    extent: int
    begin: int = 0
    fixed_size: int | None = None
    config_index: int | None = None
    begin_value: str | None = None  # a tile loop bounded by values computed on the device
    end_value: str | None = None
    label: str = ""  # the user's name for it (a loop variable), for error messages
    # of a loop with device-computed bounds: both bounds are multiples of the block size on
    # every run (no tile stops short, so no mask), and static bounds of its positions
    aligned: bool = False
    bounds: tuple[int | None, int | None] | None = None

    @property
    def end(self) -> int:
        return self.begin + self.extent

    @property
    def holds_one(self) -> bool:
        """A tile loop whose block size the kernel fixes at 1 (`block_size=1`): each program
        holds one position, so its dim is a size-1 dim, as in eager mode."""
        fixed = self.fixed_size == 1 and self.config_index is None and not self.dynamic
        return self.kind == "tile" and fixed

    @property
    def dynamic(self) -> bool:
        return self.begin_value is not None or self.end_value is not None

    def begin_code(self) -> str:
        return self.begin_value or str(self.begin)

    def end_code(self) -> str:
        return self.end_value or str(self.end)


def broadcast_dims(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> tuple[Dim, ...] | None:
    """Dims of `a` and `b` broadcast right-aligned as PyTorch does; None if they clash."""
    n = max(len(a), len(b))
    a = (None,) * (n - len(a)) + a
    b = (None,) * (n - len(b)) + b
    out: list[Dim] = []
    for x, y in zip(a, b, strict=True):
        if x is not None and y is not None and x != y:
            return None
        out.append(x if x is not None else y)
    return tuple(out)
